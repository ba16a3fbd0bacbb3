//! Loop prevention by origin routes ([`core::origin`](tributary_core::origin)) and topic
//! renaming, per source: before a stream forwards the first message of a topic, the topic's
//! routes are read in the source cluster, the copy is checked, the routes it adds are recorded in
//! the mirror cluster (under the topic's name there), and the source's routes are read and
//! checked again. A topic that would loop is refused — its partitions stop, nothing of it is
//! committed, the error names the route — and every other topic goes on.
//!
//! Decisions are kept and made again every [`RECHECK_EVERY`] (so a topology changed later, or a
//! cycle of three mirrors started at once, is caught then). The first decision fails closed: a
//! topic whose routes cannot be read or recorded waits (that topic alone: each has its own
//! lock). A later check that cannot reach a ZooKeeper keeps the decision it has; a damaged
//! record refuses the topic until it is fixed.

use crate::tls::env::{ClientLink, SecureEnv};
use crate::tls::TlsError;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tributary_core::config::{BrokerEndpoint, Discovery, ProducerConfig};
use tributary_core::identity::ClusterIdentity;
use tributary_core::mirror::rename::RenameRule;
use tributary_core::origin::{check_copy, routes_into, Origins};
use tributary_core::wire::TopicName;

use crate::client::{connect, topic_origins, OriginsQueryError};
use crate::coordination::Watch;
use crate::env::Env;
use crate::origin_store::{OriginStore, OriginsStoreError};
use crate::producer::targets::how;

/// How often a decision is made again.
pub const RECHECK_EVERY: Duration = Duration::from_secs(30);
/// Decisions a stream makes ahead at once (see [`DecideAhead`]).
pub const AHEAD_IN_FLIGHT: usize = 16;
/// How long a decision made ahead is waited for before it is left to the stream that needs it
/// (a topic that cannot be decided now does not hold a slot).
pub(super) const AHEAD_WAIT: Duration = Duration::from_secs(5);
/// How long the first decision waits between attempts while a ZooKeeper or broker cannot say.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// Why a record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum OriginsAccessError {
    /// In a ZooKeeper.
    #[error(transparent)]
    Store(#[from] OriginsStoreError),
    /// Through a broker of the producer's `broker.list`.
    #[error("{broker}: {source}")]
    Broker {
        /// Which broker.
        broker: String,
        /// What failed.
        #[source]
        source: OriginsQueryError,
    },
    /// No broker of `broker.list` could be reached.
    #[error("no broker of broker.list could be reached ({0})")]
    Unreachable(String),
}

impl OriginsAccessError {
    /// Whether trying again later may succeed (a ZooKeeper or broker that cannot be reached,
    /// a race lost); a damaged record is not, until someone fixes it.
    pub fn transient(&self) -> bool {
        match self {
            OriginsAccessError::Store(OriginsStoreError::Damaged { .. }) => false,
            OriginsAccessError::Store(_) => true,
            OriginsAccessError::Broker { source, .. } => matches!(
                source,
                OriginsQueryError::Call(_) | OriginsQueryError::Refused
            ),
            OriginsAccessError::Unreachable(_) => true,
        }
    }
}

type Access<'a> = Pin<Box<dyn Future<Output = Result<Origins, OriginsAccessError>> + Send + 'a>>;
type WatchedAccess<'a> =
    Pin<Box<dyn Future<Output = Result<(Origins, Option<Watch>), OriginsAccessError>> + Send + 'a>>;
type CountAccess<'a> =
    Pin<Box<dyn Future<Output = Result<Option<u32>, OriginsAccessError>> + Send + 'a>>;

/// One cluster's origin records, however they are reached.
pub trait OriginsAccess: Send + Sync {
    /// `topic`'s record.
    fn read<'a>(&'a self, topic: &'a TopicName) -> Access<'a>;
    /// `topic`'s record, and a watch that fires when it changes where the records can be
    /// watched (a ZooKeeper).
    fn read_and_watch<'a>(&'a self, topic: &'a TopicName) -> WatchedAccess<'a> {
        Box::pin(async move { Ok((self.read(topic).await?, None)) })
    }
    /// Merges `add` into `topic`'s record.
    fn merge<'a>(&'a self, topic: &'a TopicName, add: &'a Origins) -> Access<'a>;
    /// How many partitions each broker of the cluster gives `topic`, where the brokers'
    /// registrations can be read (a ZooKeeper); `None` when unknown.
    fn registered_partitions<'a>(&'a self, topic: &'a TopicName) -> CountAccess<'a> {
        let _ = topic;
        Box::pin(async { Ok(None) })
    }
    /// Whether [`OriginsAccess::registered_partitions`] can read counts here (`None` from it
    /// then means no broker registers the topic now); `false` by default.
    fn counts_partitions(&self) -> bool {
        false
    }
    /// Lets go of what it holds open (a ZooKeeper session), bounded; nothing by default.
    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

impl<E: Env> OriginsAccess for OriginStore<E> {
    fn read<'a>(&'a self, topic: &'a TopicName) -> Access<'a> {
        Box::pin(async move { Ok(OriginStore::read(self, topic).await?) })
    }

    fn read_and_watch<'a>(&'a self, topic: &'a TopicName) -> WatchedAccess<'a> {
        Box::pin(async move {
            let (origins, watch) = OriginStore::read_and_watch(self, topic).await?;
            Ok((origins, Some(watch)))
        })
    }

    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(OriginStore::close(self))
    }

    fn merge<'a>(&'a self, topic: &'a TopicName, add: &'a Origins) -> Access<'a> {
        Box::pin(async move { Ok(OriginStore::merge(self, topic, add).await?) })
    }

    fn registered_partitions<'a>(&'a self, topic: &'a TopicName) -> CountAccess<'a> {
        Box::pin(async move { Ok(OriginStore::registered_partitions(self, topic).await?) })
    }

    fn counts_partitions(&self) -> bool {
        true
    }
}

/// The mirror cluster's records through its brokers (TOPIC_ORIGINS), for a producer given a
/// `broker.list`: each broker is tried in turn until one answers.
pub struct BrokerOrigins<E: Env> {
    env: E,
    brokers: Vec<BrokerEndpoint>,
    timeout: Duration,
}

impl<E: Env> BrokerOrigins<E> {
    async fn call(
        &self,
        topic: &TopicName,
        add: Option<&Origins>,
    ) -> Result<Origins, OriginsAccessError> {
        let mut unreachable = Vec::new();
        let mut refused = None;
        for broker in &self.brokers {
            let at = format!("broker {} at {}:{}", broker.id, broker.host, broker.port);
            let mut conn = match connect(&self.env, &broker.host, broker.port, self.timeout).await {
                Ok(conn) => conn,
                Err(e) => {
                    unreachable.push(format!("{at}: {}", how(&e)));
                    continue;
                }
            };
            // A connection is used for one call and dropped: a failed call's is never reused.
            // Another broker of the list may answer (one without ZooKeeper never does).
            match topic_origins(&mut conn, topic, add).await {
                Ok(origins) => return Ok(origins),
                Err(source) => {
                    refused.get_or_insert(OriginsAccessError::Broker { broker: at, source });
                }
            }
        }
        Err(refused.unwrap_or_else(|| OriginsAccessError::Unreachable(unreachable.join("; "))))
    }
}

impl<E: Env> OriginsAccess for BrokerOrigins<E> {
    fn read<'a>(&'a self, topic: &'a TopicName) -> Access<'a> {
        Box::pin(self.call(topic, None))
    }

    fn merge<'a>(&'a self, topic: &'a TopicName, add: &'a Origins) -> Access<'a> {
        Box::pin(self.call(topic, Some(add)))
    }
}

/// The mirror cluster's records, reached as the producer reaches the cluster (over its TLS
/// link when it uses TLS); an error when the producer's TLS settings cannot be used.
pub fn target_access<E: Env>(
    env: &E,
    producer: &ProducerConfig,
) -> Result<Arc<dyn OriginsAccess>, TlsError> {
    Ok(match &producer.discovery {
        Discovery::ZooKeeper(connect) => Arc::new(OriginStore::new(
            env.clone(),
            connect.clone(),
            Duration::from_millis(producer.zk.session_timeout_ms.into()),
            Duration::from_millis(producer.zk.connection_timeout_ms.into()),
        )),
        Discovery::BrokerList(list) => Arc::new(BrokerOrigins {
            env: SecureEnv::new(env.clone(), ClientLink::load(producer.tls.as_ref(), None)?),
            brokers: list.clone(),
            timeout: Duration::from_millis(producer.connect_timeout_ms.max(1000).into()),
        }),
    })
}

/// What a source topic's messages become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Copied, under this name in the mirror cluster.
    Copy(TopicName),
    /// Not copied: why (a loop, or a name the rename rule cannot make).
    Refused(String),
}

struct Decided {
    verdict: Verdict,
    /// Set when the decision must be made again: the source's record changed (its watch
    /// fired), or [`RECHECK_EVERY`] passed (sooner after a failed check). See [`arm`].
    stale: Arc<AtomicBool>,
    /// The task that sets `stale`, stopped with this decision: a decision replaced or a gate
    /// dropped (the mirror stopped) leaves no timer running.
    _timer: Timer,
}

/// A task aborted when this is dropped.
struct Timer(tokio::task::AbortHandle);

impl Drop for Timer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A fresh staleness flag, set once `watch` fires or `after` passes, whichever comes first,
/// and the task that sets it.
fn arm(watch: Option<Watch>, after: Duration) -> (Arc<AtomicBool>, Timer) {
    let stale = Arc::new(AtomicBool::new(false));
    let flag = stale.clone();
    let task = tokio::spawn(async move {
        match watch {
            Some(watch) => tokio::select! {
                biased;
                () = watch => {}
                () = tokio::time::sleep(after) => {}
            },
            None => tokio::time::sleep(after).await,
        }
        flag.store(true, Ordering::Release);
    });
    (stale, Timer(task.abort_handle()))
}

/// One source's decisions, shared by its streams.
pub struct OriginGate {
    source: ClusterIdentity,
    target: ClusterIdentity,
    rename: Option<RenameRule>,
    in_source: Arc<dyn OriginsAccess>,
    in_target: Arc<dyn OriginsAccess>,
    /// Per topic, its decision behind a lock of its own (held while it is made).
    decided: std::sync::Mutex<BTreeMap<TopicName, Arc<Mutex<Option<Decided>>>>>,
}

impl std::fmt::Debug for OriginGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginGate")
            .field("source", &self.source.to_string())
            .field("target", &self.target.to_string())
            .finish()
    }
}

/// Why a decision could not be made now.
#[derive(Debug, thiserror::Error)]
enum Undecided {
    #[error("cannot read its routes in the source cluster {cluster}: {source}")]
    Source {
        cluster: String,
        #[source]
        source: OriginsAccessError,
    },
    #[error("cannot record its routes in the mirror cluster {cluster}: {source}")]
    Target {
        cluster: String,
        #[source]
        source: OriginsAccessError,
    },
    /// Renamed: the copy takes the source's partition count, and no broker of the source has
    /// registered the topic right now (a broker's session expiring).
    #[error("no broker of the source cluster {cluster} registers it now, so its partition count for the renamed copy is unknown")]
    Unregistered { cluster: String },
}

impl Undecided {
    fn transient(&self) -> bool {
        match self {
            Undecided::Source { source, .. } | Undecided::Target { source, .. } => {
                source.transient()
            }
            Undecided::Unregistered { .. } => true,
        }
    }
}

impl OriginGate {
    /// The gate for copies from `source` into `target`.
    pub fn new(
        source: ClusterIdentity,
        target: ClusterIdentity,
        rename: Option<RenameRule>,
        in_source: Arc<dyn OriginsAccess>,
        in_target: Arc<dyn OriginsAccess>,
    ) -> Self {
        OriginGate {
            source,
            target,
            rename,
            in_source,
            in_target,
            decided: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether `topic` has a decision that is not stale, or one is being made now (its lock is
    /// held): then deciding it ahead would only wait.
    fn decided_or_deciding(&self, topic: &TopicName) -> bool {
        let Some(slot) = crate::sync::lock(&self.decided, "origin gate")
            .get(topic)
            .cloned()
        else {
            return false;
        };
        let decided = match slot.try_lock() {
            Ok(decided) => decided,
            Err(_) => return true,
        };
        decided
            .as_ref()
            .is_some_and(|kept| !kept.stale.load(Ordering::Acquire))
    }

    /// What `topic`'s messages become — the decision kept, or a new one (waiting, and saying
    /// why every 30 s, while none can be made) — and the flag that says when it must be made
    /// again (the source's record changed). Cancel-safe: cancelling leaves nothing half decided.
    pub async fn verdict(&self, topic: &TopicName) -> (Verdict, Arc<AtomicBool>) {
        // One lock per topic: a topic that cannot be decided holds up only its own streams.
        let slot = crate::sync::lock(&self.decided, "origin gate")
            .entry(topic.clone())
            .or_default()
            .clone();
        let mut decided = slot.lock().await;
        if let Some(kept) = decided.as_ref() {
            if !kept.stale.load(Ordering::Acquire) {
                return (kept.verdict.clone(), kept.stale.clone());
            }
        }
        let mut attempts: u64 = 0;
        loop {
            let decision = match self.decide(topic).await {
                Ok(decision) => decision,
                // A record that cannot be read or written as it is: refused (and said) until it
                // is fixed, looked at again every 30 s.
                Err(e) if !e.transient() => (
                    Verdict::Refused(format!(
                        "topic {topic}: {e}; it is not copied until the record is fixed"
                    )),
                    None,
                ),
                Err(e) => {
                    if let Some(kept) = decided.as_mut() {
                        // A later check: keep going as decided; try again in a second (not at
                        // every message: the ZooKeeper that failed is not asked at that rate).
                        tracing::warn!("mirror: topic {topic}: {e}; it goes on as decided and is checked again shortly");
                        (kept.stale, kept._timer) = arm(None, RETRY_EVERY);
                        return (kept.verdict.clone(), kept.stale.clone());
                    }
                    // Said at once, then every 30 tries (about 30 s).
                    if attempts.is_multiple_of(30) {
                        tracing::warn!("mirror: topic {topic}: {e}; it is not copied until its routes are known (retrying)");
                    }
                    attempts += 1;
                    tokio::time::sleep(RETRY_EVERY).await;
                    continue;
                }
            };
            let (verdict, watch) = decision;
            let changed = decided.as_ref().map(|k| &k.verdict) != Some(&verdict);
            if changed {
                self.say(topic, &verdict);
            }
            let (stale, timer) = arm(watch, RECHECK_EVERY);
            *decided = Some(Decided {
                verdict: verdict.clone(),
                stale: stale.clone(),
                _timer: timer,
            });
            return (verdict, stale);
        }
    }

    fn say(&self, topic: &TopicName, verdict: &Verdict) {
        match verdict {
            Verdict::Copy(to) if to == topic => tracing::info!(
                "mirror: topic {topic} is copied from {} into {}",
                self.source,
                self.target
            ),
            Verdict::Copy(to) => tracing::info!(
                "mirror: topic {topic} is copied from {} into {} as {to}",
                self.source,
                self.target
            ),
            Verdict::Refused(why) => tracing::error!("mirror: {why}"),
        }
    }

    /// One decision: the rename, the check against the source's routes, the record in the
    /// target, and the check once more (see the module's doc).
    async fn decide(&self, topic: &TopicName) -> Result<(Verdict, Option<Watch>), Undecided> {
        let target_topic = match &self.rename {
            None => topic.clone(),
            Some(rule) => match rule.apply(&self.source, topic) {
                Ok(renamed) => renamed,
                Err(e) => return Ok((Verdict::Refused(format!("topic {topic}: {e}")), None)),
            },
        };
        let read_source = || async {
            self.in_source
                .read(topic)
                .await
                .map_err(|source| Undecided::Source {
                    cluster: self.source.to_string(),
                    source,
                })
        };
        let in_source = read_source().await?;
        if let Err(refused) = check_copy(topic, &self.source, &self.target, &in_source) {
            return Ok((Verdict::Refused(refused.to_string()), None));
        }
        // A renamed copy takes the source's partition count with it: the mirror cluster's
        // per-topic settings name `topic`, not the copy (see `core::origin`).
        let partitions = if target_topic == *topic {
            None
        } else {
            let count = self
                .in_source
                .registered_partitions(topic)
                .await
                .map_err(|source| Undecided::Source {
                    cluster: self.source.to_string(),
                    source,
                })?;
            // Where the count can be read (a ZooKeeper), the topic being consumed is registered
            // by some broker: none now is a broker's session expiring; wait for it.
            match count {
                Some(count) => Some(count),
                None if self.in_source.counts_partitions() => {
                    return Err(Undecided::Unregistered {
                        cluster: self.source.to_string(),
                    })
                }
                None => None,
            }
        };
        let routes = |in_source: &Origins| {
            let add = routes_into(&self.source, in_source)?;
            match partitions {
                Some(count) => add.with_partitions(count),
                None => Ok(add),
            }
        };
        let add = match routes(&in_source) {
            Ok(add) => add,
            Err(e) => {
                let why = format!(
                    "topic {topic}: its routes cannot be recorded in {}: {e}",
                    self.target
                );
                return Ok((Verdict::Refused(why), None));
            }
        };
        self.in_target
            .merge(&target_topic, &add)
            .await
            .map_err(|source| Undecided::Target {
                cluster: self.target.to_string(),
                source,
            })?;
        // Again, now that our record is in place: a mirror in the other direction that read
        // before we wrote has written before this read. Watched from here: a change (a route
        // recorded upstream later) makes the next message decide again.
        let (in_source, watch) = self
            .in_source
            .read_and_watch(topic)
            .await
            .map_err(|source| Undecided::Source {
                cluster: self.source.to_string(),
                source,
            })?;
        if let Err(refused) = check_copy(topic, &self.source, &self.target, &in_source) {
            return Ok((Verdict::Refused(refused.to_string()), watch));
        }
        // Routes recorded upstream since the first read go downstream now.
        let again = match routes(&in_source) {
            Ok(again) => again,
            Err(e) => {
                let why = format!(
                    "topic {topic}: its routes cannot be recorded in {}: {e}",
                    self.target
                );
                return Ok((Verdict::Refused(why), watch));
            }
        };
        if again != add {
            self.in_target
                .merge(&target_topic, &again)
                .await
                .map_err(|source| Undecided::Target {
                    cluster: self.target.to_string(),
                    source,
                })?;
        }
        Ok((Verdict::Copy(target_topic), watch))
    }
}

/// A stream's last decision, so that a run of messages of one topic does not ask the gate for
/// each: a topic comparison and one atomic load a message (whether the decision went stale).
#[derive(Default)]
pub struct StreamVerdicts {
    last: Option<(TopicName, Verdict, Arc<AtomicBool>)>,
}

impl StreamVerdicts {
    /// Whether `topic`'s verdict is kept (and not stale): [`StreamVerdicts::verdict`] then
    /// answers without waiting.
    pub fn is_kept(&self, topic: &TopicName) -> bool {
        self.last
            .as_ref()
            .is_some_and(|(kept, _, stale)| kept == topic && !stale.load(Ordering::Acquire))
    }

    /// `topic`'s verdict: the one kept when it is `topic`'s and not stale, else the gate's.
    pub async fn verdict(&mut self, gate: &OriginGate, topic: &TopicName) -> Verdict {
        if let Some((kept, verdict, stale)) = &self.last {
            if kept == topic && !stale.load(Ordering::Acquire) {
                return verdict.clone();
            }
        }
        let (verdict, stale) = gate.verdict(topic).await;
        self.last = Some((topic.clone(), verdict.clone(), stale));
        verdict
    }
}

/// Decisions made before a stream needs them. Without it a stream waits for each topic's
/// decision (three ZooKeeper round trips, one a write) at that topic's first message, one topic
/// after another: a mirror of 100 new topics spends about half a second on it.
/// A stream follows its member's ownership: at each settled generation it decides every owned
/// topic without a decision, [`AHEAD_IN_FLIGHT`] at a time, in a task of its own that ends
/// with the generation or the stream (decisions are cancel-safe). The streams of a source share
/// the work: a topic whose decision is being made is skipped.
#[derive(Default)]
pub struct DecideAhead {
    generation: Option<u64>,
    task: Option<Timer>,
}

impl DecideAhead {
    /// Starts deciding the topics `owned` gives once `generation` (the member's settled
    /// generation; `None` while it rebalances) is one not followed yet.
    pub fn follow(
        &mut self,
        gate: &Arc<OriginGate>,
        generation: Option<u64>,
        owned: impl FnOnce() -> Vec<TopicName>,
    ) {
        let Some(generation) = generation else {
            return;
        };
        if self.generation == Some(generation) {
            return;
        }
        self.generation = Some(generation);
        let topics: std::collections::BTreeSet<TopicName> = owned().into_iter().collect();
        let gate = gate.clone();
        let task = tokio::spawn(async move {
            use futures_util::StreamExt;
            futures_util::stream::iter(topics)
                .for_each_concurrent(AHEAD_IN_FLIGHT, |topic| {
                    let gate = gate.clone();
                    async move {
                        if !gate.decided_or_deciding(&topic) {
                            // Not decided in time: the stream that needs it waits for the decision.
                            let _ = tokio::time::timeout(AHEAD_WAIT, gate.verdict(&topic)).await;
                        }
                    }
                })
                .await;
        });
        // Replacing the task aborts the previous generation's.
        self.task = Some(Timer(task.abort_handle()));
    }
}
