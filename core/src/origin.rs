//! Where a mirrored topic's messages came from (sans-IO): the record a mirror keeps in the
//! mirror cluster's ZooKeeper, and the decisions that make a mirror loop impossible.
//!
//! A topic's **origin record** in a cluster lists the **routes** its mirrored messages took to
//! get there: each route is the clusters they passed through, origin first, ending with the
//! cluster they were copied from (like BGP's AS path). A topic with no record was only ever
//! written to locally. It lives at [`ORIGINS_PATH`]`/<topic>` under the chroot, as
//! `{"version":1,"routes":[["<hop>",…],…]}` where a hop is `<id>` or `<id>/<name>`.
//!
//! A topic copied under another name also records how many partitions each broker of its
//! source gives it: `{"version":1,"routes":[…],"partitions":<n>}`. The mirror cluster's brokers
//! create the renamed topic with that many (see [`Origins::partitions`]), so `east.orders` in
//! `west` has the partitions `orders` has in `east`.
//!
//! A mirror copying topic `T` from cluster `X` into `Y` (under the name `T'`) calls
//! [`plan_copy`]: the routes of `T'` in `Y` are `[X]` (what producers wrote into `X`) and every
//! route of `T` in `X` extended with `X`. When `Y` is already on one of `T`'s routes in `X`,
//! the copy would bring `Y`'s own messages back to it — a loop — and is refused
//! ([`LoopRefused`]), whatever the topic is called on the way (renames keep records).
//!
//! The mirror records the routes in `Y` **before** it forwards anything of `T`, then reads `T`'s
//! routes in `X` again and checks once more. Two mirrors started at once in opposite directions
//! (X→Y and Y→X) therefore cannot both miss each other: whichever reads second sees the other's
//! record, so at least one refuses (each write precedes its own re-read, and ZooKeeper orders
//! the reads and writes of each cluster).

use std::collections::BTreeSet;
use std::fmt;

use crate::identity::{ClusterId, ClusterIdentity, ClusterName, IdentityError};
use crate::wire::TopicName;

/// Where the origin records are kept, relative to the chroot: one node per topic below it.
pub const ORIGINS_PATH: &str = "/cluster/origins";

/// The most routes one record keeps (a fan-in of this many sources, or paths, per topic).
pub const ROUTES_MAX: usize = 64;
/// The most clusters one route passes through.
pub const HOPS_MAX: usize = 16;
/// The most bytes a record may hold; a bigger one is refused unread (it fits a 0.7 int16 string).
pub const ORIGINS_BYTES_MAX: usize = 16 * 1024;
/// The largest per-broker partition count a record may carry (`num.partitions`' own limit).
pub const PARTITIONS_MAX: u32 = 65_536;

/// One cluster a route passed through. Equal by id alone: a name is for people.
#[derive(Debug, Clone)]
pub struct Hop(pub ClusterIdentity);

impl PartialEq for Hop {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}
impl Eq for Hop {}
impl PartialOrd for Hop {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Hop {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.id.cmp(&other.0.id)
    }
}

impl fmt::Display for Hop {
    /// The cluster's name, or its id when it has none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.name {
            Some(name) => write!(f, "{name}"),
            None => write!(f, "{}", self.0.id),
        }
    }
}

/// A route: the clusters passed through, origin first.
pub type Route = Vec<Hop>;

/// A topic's origin record in one cluster: every route its mirrored messages took. Empty: the
/// topic was only written to locally (or by a mirror that does not record, such as Kafka's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origins {
    routes: BTreeSet<Route>,
    partitions: Option<u32>,
}

/// What is wrong with a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginsError {
    /// The bytes are not a record of this format.
    #[error("the origin record is malformed: {0}")]
    Malformed(&'static str),
    /// A hop is not a valid id or name.
    #[error("the origin record has a bad hop: {0}")]
    Hop(#[from] IdentityError),
    /// More than [`ROUTES_MAX`] routes or [`ORIGINS_BYTES_MAX`] bytes, or a route of more than
    /// [`HOPS_MAX`] clusters.
    #[error("the origin record would exceed its limits ({0})")]
    TooBig(&'static str),
}

/// A copy that would bring a cluster's messages back to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("topic {topic} is not mirrored from {source_cluster} into {target}: its messages in {source_cluster} came from {target} (route {route}), so copying them back would loop forever; mirror it under another name or stop the mirror in the other direction")]
pub struct LoopRefused {
    /// The source topic.
    pub topic: TopicName,
    /// The cluster copied from (its name, else its id).
    pub source_cluster: String,
    /// The cluster copied into (its name, else its id).
    pub target: String,
    /// The route, as text (`west → east → here`).
    pub route: String,
}

impl Origins {
    /// A record with these routes (checked against the limits).
    pub fn from_routes(routes: impl IntoIterator<Item = Route>) -> Result<Self, OriginsError> {
        let mut origins = Origins::default();
        for route in routes {
            origins.add(route)?;
        }
        Ok(origins)
    }

    /// The routes, in a stable order.
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.routes.iter()
    }

    /// Whether no route is recorded (a local topic).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty() && self.partitions.is_none()
    }

    /// How many partitions each broker gives the topic, as its source has it: set by a mirror
    /// that copies the topic under another name (the mirror cluster's per-topic settings name
    /// the source's topic, not the copy). `None`: the brokers' own settings decide.
    pub fn partitions(&self) -> Option<u32> {
        self.partitions
    }

    /// This record, asking for `count` partitions per broker (1 to [`PARTITIONS_MAX`]).
    pub fn with_partitions(mut self, count: u32) -> Result<Self, OriginsError> {
        if count == 0 || count > PARTITIONS_MAX {
            return Err(OriginsError::TooBig("a partition count not in 1..=65536"));
        }
        self.partitions = Some(count);
        Ok(self)
    }

    /// Whether `cluster` is on any route.
    pub fn passed_through(&self, cluster: &ClusterId) -> bool {
        self.route_through(cluster).is_some()
    }

    fn route_through(&self, cluster: &ClusterId) -> Option<&Route> {
        self.routes
            .iter()
            .find(|route| route.iter().any(|hop| hop.0.id == *cluster))
    }

    fn add(&mut self, route: Route) -> Result<(), OriginsError> {
        if route.is_empty() {
            return Err(OriginsError::Malformed("an empty route"));
        }
        if route.len() > HOPS_MAX {
            return Err(OriginsError::TooBig("a route of more than 16 clusters"));
        }
        self.routes.insert(route);
        if self.routes.len() > ROUTES_MAX {
            return Err(OriginsError::TooBig("more than 64 routes"));
        }
        // A record this could not read back is never written.
        if self.encode().len() > ORIGINS_BYTES_MAX {
            return Err(OriginsError::TooBig("more than 16 KiB"));
        }
        Ok(())
    }

    /// This record and `other`'s routes together: what a record holds after a mirror recorded
    /// `other` in it (equal hops are equal by id; a route already here keeps its names). Of two
    /// partition counts the larger is kept: 0.7 partitions are never removed.
    pub fn merged(&self, other: &Origins) -> Result<Origins, OriginsError> {
        let mut merged = self.clone();
        merged.partitions = self.partitions.max(other.partitions);
        for route in &other.routes {
            merged.add(route.clone())?;
        }
        Ok(merged)
    }

    /// Whether every route of `other` is already here, and its partition count too (nothing to
    /// write).
    pub fn covers(&self, other: &Origins) -> bool {
        other.routes.is_subset(&self.routes) && other.partitions <= self.partitions
    }

    /// The node's data.
    pub fn encode(&self) -> Vec<u8> {
        let routes: Vec<String> = self
            .routes
            .iter()
            .map(|route| {
                let hops: Vec<String> = route
                    .iter()
                    .map(|hop| match &hop.0.name {
                        Some(name) => format!("\"{}/{}\"", hop.0.id, name),
                        None => format!("\"{}\"", hop.0.id),
                    })
                    .collect();
                format!("[{}]", hops.join(","))
            })
            .collect();
        let partitions = match self.partitions {
            Some(count) => format!(",\"partitions\":{count}"),
            None => String::new(),
        };
        format!(
            "{{\"version\":1,\"routes\":[{}]{partitions}}}",
            routes.join(",")
        )
        .into_bytes()
    }

    /// Reads a node's data (empty data: no routes). Other keys than `version`, `routes` and
    /// `partitions` (last, when present) are refused, so a record this version cannot read is
    /// never taken for an empty one.
    pub fn decode(data: &[u8]) -> Result<Self, OriginsError> {
        if data.len() > ORIGINS_BYTES_MAX {
            return Err(OriginsError::TooBig("more than 16 KiB"));
        }
        if data.iter().all(u8::is_ascii_whitespace) {
            return Ok(Origins::default());
        }
        let text =
            std::str::from_utf8(data).map_err(|_| OriginsError::Malformed("bytes not UTF-8"))?;
        // Blanks between tokens go; inside a string they stay (and make the hop invalid).
        let mut in_string = false;
        let compact: String = text
            .chars()
            .filter(|&c| {
                if c == '"' {
                    in_string = !in_string;
                }
                in_string || !c.is_whitespace()
            })
            .collect();
        const NOT_A_RECORD: OriginsError =
            OriginsError::Malformed("not {\"version\":1,\"routes\":[…]} or {…,\"partitions\":<n>}");
        let inner = compact
            .strip_prefix("{\"version\":1,\"routes\":[")
            .ok_or(NOT_A_RECORD)?;
        // Hops are ids and names, which hold no bracket: the last `],"partitions":` ends them.
        let (body, partitions) = match inner.rfind("],\"partitions\":") {
            Some(at) => {
                let count = inner[at + "],\"partitions\":".len()..]
                    .strip_suffix('}')
                    .ok_or(NOT_A_RECORD)?;
                if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(OriginsError::Malformed(
                        "a partition count that is not a number",
                    ));
                }
                let count: u32 = count
                    .parse()
                    .map_err(|_| OriginsError::TooBig("a partition count not in 1..=65536"))?;
                (&inner[..at], Some(count))
            }
            None => (inner.strip_suffix("]}").ok_or(NOT_A_RECORD)?, None),
        };
        let mut origins = Origins::default();
        if let Some(count) = partitions {
            origins = origins.with_partitions(count)?;
        }
        if body.is_empty() {
            return Ok(origins);
        }
        for route_text in split_routes(body)? {
            let mut route = Vec::new();
            for hop in route_text.split(',') {
                let hop = hop
                    .strip_prefix('"')
                    .and_then(|h| h.strip_suffix('"'))
                    .ok_or(OriginsError::Malformed("a hop that is not a string"))?;
                let (id, name) = match hop.split_once('/') {
                    Some((id, name)) => (id, Some(ClusterName::parse(name)?)),
                    None => (hop, None),
                };
                route.push(Hop(ClusterIdentity {
                    id: ClusterId::parse(id)?,
                    name,
                }));
            }
            origins.add(route)?;
        }
        Ok(origins)
    }
}

/// `["a","b"],["c"]` → `"a","b"` and `"c"`.
fn split_routes(body: &str) -> Result<Vec<&str>, OriginsError> {
    const NOT_ARRAYS: OriginsError = OriginsError::Malformed("routes that are not arrays");
    let mut routes = Vec::new();
    let mut rest = body;
    loop {
        let inner = rest.strip_prefix('[').ok_or(NOT_ARRAYS)?;
        let end = inner.find(']').ok_or(NOT_ARRAYS)?;
        let (route, after) = inner.split_at(end);
        if route.contains('[') {
            return Err(NOT_ARRAYS);
        }
        routes.push(route);
        rest = after.strip_prefix(']').unwrap_or(after);
        if rest.is_empty() {
            return Ok(routes);
        }
        rest = rest.strip_prefix(',').ok_or(NOT_ARRAYS)?;
    }
}

/// The routes a copy of a topic from `source` adds to the target's record, given the topic's
/// record in `source`: `[source]` (its local writes) and each of its routes extended with
/// `source`.
pub fn routes_into(source: &ClusterIdentity, in_source: &Origins) -> Result<Origins, OriginsError> {
    let hop = Hop(source.clone());
    let mut routes = vec![vec![hop.clone()]];
    for route in in_source.routes() {
        let mut extended = route.clone();
        extended.push(hop.clone());
        routes.push(extended);
    }
    Origins::from_routes(routes)
}

/// Whether topic `topic` (recorded `in_source` in `source`) may be copied into `target`: refused
/// when `target` is on one of its routes in `source`. (`source == target` is the self-mirror,
/// refused before any topic is looked at.)
pub fn check_copy(
    topic: &TopicName,
    source: &ClusterIdentity,
    target: &ClusterIdentity,
    in_source: &Origins,
) -> Result<(), LoopRefused> {
    if crate::planted::active(crate::planted::Bug::LoopCheckDisabled) {
        return Ok(());
    }
    match in_source.route_through(&target.id) {
        None => Ok(()),
        Some(route) => {
            let mut text: Vec<String> = route.iter().map(Hop::to_string).collect();
            text.push(Hop(source.clone()).to_string());
            Err(LoopRefused {
                topic: topic.clone(),
                source_cluster: Hop(source.clone()).to_string(),
                target: Hop(target.clone()).to_string(),
                route: text.join(" → "),
            })
        }
    }
}
