//! Cluster identity (sans-IO): who a cluster is, whatever names, addresses or chroot spellings
//! point at it.
//!
//! A cluster's identity lives in its ZooKeeper at [`CLUSTER_ID_PATH`] (under the chroot), in
//! the format later Kafka versions use there (`{"version":"1","id":"<id>"}`) plus Tributary's
//! optional readable `name`. The first component that finds none creates it, atomically (a
//! ZooKeeper create fails for all but one); everyone else reads it. Deciding "same cluster" by
//! identity, not by address, is what makes the mirror's self-mirroring check impossible to fool
//! with an alias.

use std::fmt;

/// Where a cluster's identity is kept, relative to the chroot (Kafka 0.10+'s path).
pub const CLUSTER_ID_PATH: &str = "/cluster/id";

/// The most bytes an identity node may hold; a bigger one is refused unread.
pub const IDENTITY_BYTES_MAX: usize = 1024;

/// A cluster's id: 1 to 64 characters of `[A-Za-z0-9_-]` (the ids Tributary makes are 22: 16
/// random bytes in URL-safe base64 without padding, as Kafka makes them).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterId(String);

/// A cluster's readable name (`cluster.name`): 1 to 64 characters of `[A-Za-z0-9_-]`, so it can
/// prefix a topic name (`<name>.<topic>`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterName(String);

/// What is wrong with an id or a name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Empty, longer than 64 characters, or a character outside `[A-Za-z0-9_-]`.
    #[error("{what} {value:?} is not 1 to 64 characters of letters, digits, '_' and '-'")]
    Invalid {
        /// "cluster id" or "cluster name".
        what: &'static str,
        /// The value as given.
        value: String,
    },
    /// The node's bytes are not an identity: not UTF-8, not a flat JSON object of strings,
    /// too big, or without an `id`.
    #[error("the identity node holds {0}")]
    Malformed(&'static str),
}

fn valid_part(value: &str) -> bool {
    (1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ClusterId {
    /// Checks an id.
    pub fn parse(value: &str) -> Result<Self, IdentityError> {
        if valid_part(value) {
            Ok(ClusterId(value.to_string()))
        } else {
            Err(IdentityError::Invalid {
                what: "cluster id",
                value: value.to_string(),
            })
        }
    }

    /// A new id from 16 random bytes (the caller's seeded randomness).
    pub fn from_random(bytes: [u8; 16]) -> Self {
        ClusterId(base64_url(&bytes))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl ClusterName {
    /// Checks a name.
    pub fn parse(value: &str) -> Result<Self, IdentityError> {
        if valid_part(value) {
            Ok(ClusterName(value.to_string()))
        } else {
            Err(IdentityError::Invalid {
                what: "cluster name",
                value: value.to_string(),
            })
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A cluster's identity: its id, and its name if one was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIdentity {
    /// The id, never changed once created.
    pub id: ClusterId,
    /// The readable name, if any broker was given `cluster.name`.
    pub name: Option<ClusterName>,
}

impl fmt::Display for ClusterIdentity {
    /// `east (id 3Jx…)`, or the id alone.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{name} (id {})", self.id),
            None => write!(f, "{}", self.id),
        }
    }
}

impl ClusterIdentity {
    /// The node's data: `{"version":"1","id":"…"}`, with `"name":"…"` when named. Ids and names
    /// need no escaping (their characters are checked).
    pub fn encode(&self) -> Vec<u8> {
        match &self.name {
            Some(name) => format!(
                "{{\"version\":\"1\",\"id\":\"{}\",\"name\":\"{}\"}}",
                self.id, name
            ),
            None => format!("{{\"version\":\"1\",\"id\":\"{}\"}}", self.id),
        }
        .into_bytes()
    }

    /// Reads a node's data: a flat JSON object whose values are strings (other keys are
    /// ignored, so a later version may add some); `id` is required.
    pub fn decode(data: &[u8]) -> Result<Self, IdentityError> {
        if data.len() > IDENTITY_BYTES_MAX {
            return Err(IdentityError::Malformed("more than 1 KiB"));
        }
        let text =
            std::str::from_utf8(data).map_err(|_| IdentityError::Malformed("bytes not UTF-8"))?;
        let fields = flat_json_strings(text)?;
        let value = |key: &str| fields.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        let id = value("id").ok_or(IdentityError::Malformed("no \"id\""))?;
        Ok(ClusterIdentity {
            id: ClusterId::parse(id)?,
            name: value("name").map(|n| ClusterName::parse(n)).transpose()?,
        })
    }
}

/// What a component that needs its cluster's identity does, given what the node holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconcile {
    /// No identity yet: create the node with this one (if the create loses a race, read the
    /// winner's and reconcile again).
    Create(ClusterIdentity),
    /// The cluster's identity; nothing to write.
    Use(ClusterIdentity),
    /// The identity has no name and this component was given one: record it (a conditional
    /// set on the version read).
    Name(ClusterIdentity),
}

/// A component configured with another cluster's name than the one recorded: it points at the
/// wrong ZooKeeper (or the name was changed by hand), and must not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cluster.name is {configured} but this ZooKeeper's cluster is {recorded}: check zk.connect (a cluster's name cannot change once recorded)")]
pub struct NameMismatch {
    /// What the component was given.
    pub configured: ClusterName,
    /// What the cluster is.
    pub recorded: ClusterIdentity,
}

/// Decides what to do with the identity node's content `stored` (`None`: there is none), for a
/// component configured with `name` (if any); `fresh` is the id to create with.
pub fn reconcile(
    stored: Option<ClusterIdentity>,
    name: Option<&ClusterName>,
    fresh: ClusterId,
) -> Result<Reconcile, NameMismatch> {
    match (stored, name) {
        (None, name) => Ok(Reconcile::Create(ClusterIdentity {
            id: fresh,
            name: name.cloned(),
        })),
        (Some(stored), None) => Ok(Reconcile::Use(stored)),
        (Some(stored), Some(name)) => match &stored.name {
            Some(recorded) if recorded == name => Ok(Reconcile::Use(stored)),
            Some(_) => Err(NameMismatch {
                configured: name.clone(),
                recorded: stored,
            }),
            None => Ok(Reconcile::Name(ClusterIdentity {
                id: stored.id,
                name: Some(name.clone()),
            })),
        },
    }
}

/// The `"key":"value"` pairs of a flat JSON object whose values are all strings (the escapes
/// `\"` and `\\` are understood; at most 16 pairs).
fn flat_json_strings(text: &str) -> Result<Vec<(String, String)>, IdentityError> {
    const NOT_OBJECT: IdentityError = IdentityError::Malformed("no flat JSON object of strings");
    let inner = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or(NOT_OBJECT)?;
    let mut chars = inner.chars().peekable();
    let mut pairs = Vec::new();
    let skip_blank = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
    };
    let string = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        if chars.next() != Some('"') {
            return Err(NOT_OBJECT);
        }
        let mut out = String::new();
        loop {
            match chars.next() {
                Some('"') => return Ok(out),
                Some('\\') => match chars.next() {
                    Some(c @ ('"' | '\\' | '/')) => out.push(c),
                    _ => return Err(NOT_OBJECT),
                },
                Some(c) => out.push(c),
                None => return Err(NOT_OBJECT),
            }
        }
    };
    skip_blank(&mut chars);
    while chars.peek().is_some() {
        if pairs.len() == 16 {
            return Err(IdentityError::Malformed("more than 16 fields"));
        }
        let key = string(&mut chars)?;
        skip_blank(&mut chars);
        if chars.next() != Some(':') {
            return Err(NOT_OBJECT);
        }
        skip_blank(&mut chars);
        let value = string(&mut chars)?;
        pairs.push((key, value));
        skip_blank(&mut chars);
        match chars.next() {
            Some(',') => skip_blank(&mut chars),
            None => break,
            Some(_) => return Err(NOT_OBJECT),
        }
    }
    Ok(pairs)
}

/// URL-safe base64 without padding (RFC 4648 §5).
fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let symbols = chunk.len() + 1;
        for i in 0..symbols {
            let index = (n >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(ALPHABET[index as usize]));
        }
    }
    out
}
