//! Loop prevention by origin routes ([`core::origin`](tributary_core::origin)) and topic
//! renaming, per source: before a stream forwards the first message of a topic, the topic's
//! routes are read in the source cluster, the copy is checked, the routes it adds are recorded in
//! the mirror cluster (under the topic's name there), and the source's routes are read and
//! checked again. A topic that would loop is refused — its partitions stop, nothing of it is
//! committed, the error names the route — and every other topic goes on.
//!
//! Decisions are kept and made again every [`RECHECK_EVERY`] (so a topology changed later, or a
//! cycle of three mirrors started at once, is caught then). The first decision fails closed: a
//! topic whose routes cannot be read or recorded waits. A later check that cannot reach a
//! ZooKeeper keeps the decision it has.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tributary_core::config::{BrokerEndpoint, Discovery, ProducerConfig};
use tributary_core::identity::ClusterIdentity;
use tributary_core::mirror::rename::RenameRule;
use tributary_core::origin::{check_copy, routes_into, Origins};
use tributary_core::wire::TopicName;

use crate::client::{connect, topic_origins, OriginsQueryError};
use crate::coordination::origins::{OriginStore, OriginsStoreError};
use crate::env::Env;
use crate::producer::targets::how;

/// How often a decision is made again.
pub const RECHECK_EVERY: Duration = Duration::from_secs(30);
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

type Access<'a> = Pin<Box<dyn Future<Output = Result<Origins, OriginsAccessError>> + Send + 'a>>;

/// One cluster's origin records, however they are reached.
pub trait OriginsAccess: Send + Sync {
    /// `topic`'s record.
    fn read<'a>(&'a self, topic: &'a TopicName) -> Access<'a>;
    /// Merges `add` into `topic`'s record.
    fn merge<'a>(&'a self, topic: &'a TopicName, add: &'a Origins) -> Access<'a>;
}

impl<E: Env> OriginsAccess for OriginStore<E> {
    fn read<'a>(&'a self, topic: &'a TopicName) -> Access<'a> {
        Box::pin(async move { Ok(OriginStore::read(self, topic).await?) })
    }

    fn merge<'a>(&'a self, topic: &'a TopicName, add: &'a Origins) -> Access<'a> {
        Box::pin(async move { Ok(OriginStore::merge(self, topic, add).await?) })
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
        for broker in &self.brokers {
            let at = format!("broker {} at {}:{}", broker.id, broker.host, broker.port);
            let mut conn = match connect(&self.env, &broker.host, broker.port, self.timeout).await
            {
                Ok(conn) => conn,
                Err(e) => {
                    unreachable.push(format!("{at}: {}", how(&e)));
                    continue;
                }
            };
            // A connection is used for one call and dropped: a failed call's is never reused.
            match topic_origins(&mut conn, topic, add).await {
                Ok(origins) => return Ok(origins),
                Err(source) => {
                    return Err(OriginsAccessError::Broker { broker: at, source });
                }
            }
        }
        Err(OriginsAccessError::Unreachable(unreachable.join("; ")))
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

/// The mirror cluster's records, reached as the producer reaches the cluster.
pub fn target_access<E: Env>(env: &E, producer: &ProducerConfig) -> Arc<dyn OriginsAccess> {
    match &producer.discovery {
        Discovery::ZooKeeper(connect) => Arc::new(OriginStore::new(
            env.clone(),
            connect.clone(),
            Duration::from_millis(producer.zk.session_timeout_ms.into()),
            Duration::from_millis(producer.zk.connection_timeout_ms.into()),
        )),
        Discovery::BrokerList(list) => Arc::new(BrokerOrigins {
            env: env.clone(),
            brokers: list.clone(),
            timeout: Duration::from_millis(producer.connect_timeout_ms.max(1000).into()),
        }),
    }
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
    at_ms: i64,
}

/// One source's decisions, shared by its streams.
pub struct OriginGate {
    source: ClusterIdentity,
    target: ClusterIdentity,
    rename: Option<RenameRule>,
    in_source: Arc<dyn OriginsAccess>,
    in_target: Arc<dyn OriginsAccess>,
    now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
    decided: Mutex<BTreeMap<TopicName, Decided>>,
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
}

impl OriginGate {
    /// The gate for copies from `source` into `target`.
    pub fn new(
        source: ClusterIdentity,
        target: ClusterIdentity,
        rename: Option<RenameRule>,
        in_source: Arc<dyn OriginsAccess>,
        in_target: Arc<dyn OriginsAccess>,
        now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> Self {
        OriginGate {
            source,
            target,
            rename,
            in_source,
            in_target,
            now_ms,
            decided: Mutex::new(BTreeMap::new()),
        }
    }

    /// What `topic`'s messages become: the decision kept, or a new one (waiting, and saying
    /// why every 30 s, while none can be made). Cancel-safe: cancelling leaves nothing half
    /// decided.
    pub async fn verdict(&self, topic: &TopicName) -> Verdict {
        let mut decided = self.decided.lock().await;
        let now = (self.now_ms)();
        let recheck_ms = i64::try_from(RECHECK_EVERY.as_millis()).unwrap_or(i64::MAX);
        let kept = decided.get(topic);
        if let Some(kept) = kept {
            if now.saturating_sub(kept.at_ms) < recheck_ms && now >= kept.at_ms {
                return kept.verdict.clone();
            }
        }
        let mut said_at: Option<i64> = None;
        loop {
            match self.decide(topic).await {
                Ok(verdict) => {
                    let changed = decided.get(topic).map(|k| &k.verdict) != Some(&verdict);
                    if changed {
                        match &verdict {
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
                    decided.insert(
                        topic.clone(),
                        Decided {
                            verdict: verdict.clone(),
                            at_ms: (self.now_ms)(),
                        },
                    );
                    return verdict;
                }
                Err(e) => {
                    if let Some(kept) = decided.get_mut(topic) {
                        // A later check: keep going as decided, try again later.
                        tracing::warn!("mirror: topic {topic}: {e}; it goes on as decided and is checked again in {RECHECK_EVERY:?}");
                        kept.at_ms = (self.now_ms)();
                        return kept.verdict.clone();
                    }
                    let now = (self.now_ms)();
                    if said_at.is_none_or(|at| now.saturating_sub(at) >= 30_000) {
                        tracing::warn!("mirror: topic {topic}: {e}; it is not copied until its routes are known (retrying)");
                        said_at = Some(now);
                    }
                    tokio::time::sleep(RETRY_EVERY).await;
                }
            }
        }
    }

    /// One decision: the rename, the check against the source's routes, the record in the
    /// target, and the check once more (see the module's doc).
    async fn decide(&self, topic: &TopicName) -> Result<Verdict, Undecided> {
        let target_topic = match &self.rename {
            None => topic.clone(),
            Some(rule) => match rule.apply(&self.source, topic) {
                Ok(renamed) => renamed,
                Err(e) => return Ok(Verdict::Refused(format!("topic {topic}: {e}"))),
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
            return Ok(Verdict::Refused(refused.to_string()));
        }
        let add = match routes_into(&self.source, &in_source) {
            Ok(add) => add,
            Err(e) => {
                return Ok(Verdict::Refused(format!(
                    "topic {topic}: its routes cannot be recorded in {}: {e}",
                    self.target
                )))
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
        // before we wrote has written before this read.
        let in_source = read_source().await?;
        if let Err(refused) = check_copy(topic, &self.source, &self.target, &in_source) {
            return Ok(Verdict::Refused(refused.to_string()));
        }
        Ok(Verdict::Copy(target_topic))
    }
}

/// A stream's last decision, so that a run of messages of one topic does not ask the gate for
/// each.
#[derive(Default)]
pub struct StreamVerdicts {
    last: Option<(TopicName, Verdict, i64)>,
}

impl StreamVerdicts {
    /// `topic`'s verdict: the one kept when it is `topic`'s and recent, else the gate's.
    pub async fn verdict(&mut self, gate: &OriginGate, topic: &TopicName) -> Verdict {
        let now = (gate.now_ms)();
        let recheck_ms = i64::try_from(RECHECK_EVERY.as_millis()).unwrap_or(i64::MAX);
        if let Some((kept, verdict, at)) = &self.last {
            if kept == topic && now >= *at && now - at < recheck_ms {
                return verdict.clone();
            }
        }
        let verdict = gate.verdict(topic).await;
        self.last = Some((topic.clone(), verdict.clone(), now));
        verdict
    }
}
