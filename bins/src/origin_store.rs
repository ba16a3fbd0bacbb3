//! Topics' origin records in a cluster's ZooKeeper ([`core::origin`](tributary_core::origin)):
//! read one, or merge routes into it with a conditional write.
//!
//! A record that cannot be read is never overwritten, and never taken for an empty one (which
//! would let a loop through): the caller fails closed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tributary_core::config::ZkConnect;
use tributary_core::origin::{Origins, OriginsError, ORIGINS_PATH, PARTITIONS_MAX};
use tributary_core::planted::{self, Bug};
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::broker_topic_path;

use crate::coordination::{CoordError, Coordination, NodeKind, Watch};
use crate::env::Env;

/// How long closing a session may take.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How often a lost race (another mirror merged between our read and our write) is retried.
const RACES_MAX: usize = 8;

/// Why a record could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginsStoreError {
    /// ZooKeeper failed.
    #[error("{path}: {source}")]
    ZooKeeper {
        /// The record's node.
        path: String,
        /// What failed.
        #[source]
        source: CoordError,
    },
    /// The node holds something that is not a record, or merging would exceed its limits.
    #[error("{path}: {source}; fix or delete the node by hand (it is never rewritten)")]
    Damaged {
        /// The record's node.
        path: String,
        /// What is wrong.
        #[source]
        source: OriginsError,
    },
    /// Other mirrors kept changing the node.
    #[error("{0}: changed under us {RACES_MAX} times in a row")]
    Contended(String),
}

/// The node of `topic`'s record.
pub fn origins_path(topic: &TopicName) -> String {
    format!("{ORIGINS_PATH}/{topic}")
}

/// `topic`'s record (empty when it has none).
pub async fn read_origins(
    coord: &impl Coordination,
    topic: &TopicName,
) -> Result<Origins, OriginsStoreError> {
    Ok(read_versioned(coord, topic).await?.0)
}

async fn read_versioned(
    coord: &impl Coordination,
    topic: &TopicName,
) -> Result<(Origins, Option<i32>), OriginsStoreError> {
    let path = origins_path(topic);
    match coord.get(&path).await {
        Ok((data, version)) => Origins::decode(&data)
            .map(|origins| (origins, Some(version)))
            .map_err(|source| OriginsStoreError::Damaged { path, source }),
        Err(CoordError::NoNode(_)) => Ok((Origins::default(), None)),
        Err(source) => Err(OriginsStoreError::ZooKeeper { path, source }),
    }
}

/// `topic`'s record and a watch that fires when it changes: on the node when it exists, else on
/// the records' parent (which this creates if missing), so that the record's creation fires it
/// too (as does any other topic's: a spurious wake-up only makes the caller read again).
pub async fn read_and_watch(
    coord: &impl Coordination,
    topic: &TopicName,
) -> Result<(Origins, Watch), OriginsStoreError> {
    let path = origins_path(topic);
    let zk = |source| OriginsStoreError::ZooKeeper {
        path: path.clone(),
        source,
    };
    // Twice at most: the node may be created between the two looks.
    for _ in 0..2 {
        match coord.get_and_watch(&path).await {
            Ok((data, _, watch)) => {
                return Origins::decode(&data)
                    .map(|origins| (origins, watch))
                    .map_err(|source| OriginsStoreError::Damaged {
                        path: path.clone(),
                        source,
                    })
            }
            Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(zk(e)),
        }
        coord.ensure_parents(&path).await.map_err(zk)?;
        let (children, watch) = coord.children_and_watch(ORIGINS_PATH).await.map_err(zk)?;
        if !children.iter().any(|c| c == topic.as_str()) {
            return Ok((Origins::default(), watch));
        }
    }
    Err(OriginsStoreError::Contended(path))
}

/// How many partitions the brokers registered for `topic` give it: the largest count one broker
/// registered (`/brokers/topics/<topic>/<broker>`), `None` when no broker has registered it.
/// A count that is not a number, or above [`PARTITIONS_MAX`], is skipped and said (as the
/// consumer skips it).
pub async fn registered_partitions(
    coord: &impl Coordination,
    topic: &TopicName,
) -> Result<Option<u32>, OriginsStoreError> {
    let topic_path = broker_topic_path(topic);
    let zk = |path: &str, source| OriginsStoreError::ZooKeeper {
        path: path.to_string(),
        source,
    };
    let brokers = match coord.children(&topic_path).await {
        Ok(brokers) => brokers,
        Err(CoordError::NoNode(_)) => return Ok(None),
        Err(e) => return Err(zk(&topic_path, e)),
    };
    let mut most = None;
    for broker in brokers {
        let path = format!("{topic_path}/{broker}");
        match coord.get(&path).await {
            Ok((data, _)) => match String::from_utf8_lossy(&data).trim().parse::<u32>() {
                Ok(count) if (1..=PARTITIONS_MAX).contains(&count) => {
                    most = most.max(Some(count));
                }
                _ => tracing::error!(
                    "{path}: not a partition count of 1 to {PARTITIONS_MAX}; that broker's registration is skipped"
                ),
            },
            Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(zk(&path, e)),
        }
    }
    Ok(most)
}

/// Every topic with a record (the children of [`ORIGINS_PATH`]; none when it does not exist).
pub async fn recorded_topics(coord: &impl Coordination) -> Result<Vec<String>, OriginsStoreError> {
    match coord.children(ORIGINS_PATH).await {
        Ok(topics) => Ok(topics),
        Err(CoordError::NoNode(_)) => Ok(Vec::new()),
        Err(source) => Err(OriginsStoreError::ZooKeeper {
            path: ORIGINS_PATH.to_string(),
            source,
        }),
    }
}

/// Merges `add` into `topic`'s record; returns the record as written (or as found, when it
/// already covered `add`).
pub async fn merge_origins(
    coord: &impl Coordination,
    topic: &TopicName,
    add: &Origins,
) -> Result<Origins, OriginsStoreError> {
    let path = origins_path(topic);
    let zk = |source| OriginsStoreError::ZooKeeper {
        path: path.clone(),
        source,
    };
    for _ in 0..RACES_MAX {
        let (stored, version) = read_versioned(coord, topic).await?;
        if stored.covers(add) {
            return Ok(stored);
        }
        let merged = stored
            .merged(add)
            .map_err(|source| OriginsStoreError::Damaged {
                path: path.clone(),
                source,
            })?;
        let written = match version {
            None => {
                coord.ensure_parents(&path).await.map_err(zk)?;
                coord
                    .create(&path, &merged.encode(), NodeKind::Persistent)
                    .await
                    .map(|_| ())
            }
            Some(version) => coord
                .set(&path, &merged.encode(), Some(version))
                .await
                .map(|_| ()),
        };
        match written {
            Ok(()) => return Ok(merged),
            // Another mirror wrote first: read again.
            Err(CoordError::NodeExists(_) | CoordError::BadVersion(_) | CoordError::NoNode(_)) => {}
            Err(e) => return Err(zk(e)),
        }
    }
    Err(OriginsStoreError::Contended(path))
}

/// One cluster's origin records, over a ZooKeeper session opened when first needed and opened
/// again after a failure (a session that failed mid-operation is never reused). Operations may
/// run at once on the one session (a mirror decides many topics together): ZooKeeper applies
/// them in the order sent, and each operation's own steps are sent one after another.
pub struct OriginStore<E: Env> {
    env: E,
    connect: ZkConnect,
    session_timeout: Duration,
    connection_timeout: Duration,
    /// Held only to hand out (or open) the session, not across operations.
    session: Mutex<Option<Arc<E::Coord>>>,
}

impl<E: Env> std::fmt::Debug for OriginStore<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginStore")
            .field("connect", &self.connect.to_string())
            .finish()
    }
}

impl<E: Env> OriginStore<E> {
    /// The records of the cluster whose ZooKeeper is `connect`.
    pub fn new(
        env: E,
        connect: ZkConnect,
        session_timeout: Duration,
        connection_timeout: Duration,
    ) -> Self {
        OriginStore {
            env,
            connect,
            session_timeout,
            connection_timeout,
            session: Mutex::new(None),
        }
    }

    /// The ZooKeeper it uses.
    pub fn connect(&self) -> &ZkConnect {
        &self.connect
    }

    /// `topic`'s record, as of the end of the last write to it (see [`OriginStore::latest`]).
    pub async fn read(&self, topic: &TopicName) -> Result<Origins, OriginsStoreError> {
        let coord = self.latest(&origins_path(topic)).await?;
        let read = read_origins(&*coord, topic).await;
        if zookeeper_failed(&read) {
            self.forget(&coord).await;
        }
        read
    }

    /// `topic`'s record, as of the end of the last write to it, and a watch on it (see
    /// [`read_and_watch`] and [`OriginStore::latest`]).
    pub async fn read_and_watch(
        &self,
        topic: &TopicName,
    ) -> Result<(Origins, Watch), OriginsStoreError> {
        let coord = self.latest(&origins_path(topic)).await?;
        let read = read_and_watch(&*coord, topic).await;
        if zookeeper_failed(&read) {
            self.forget(&coord).await;
        }
        read
    }

    /// How many partitions each broker gives `topic` in this cluster (see
    /// [`registered_partitions`]), as of the end of the last registration.
    pub async fn registered_partitions(
        &self,
        topic: &TopicName,
    ) -> Result<Option<u32>, OriginsStoreError> {
        let coord = self.latest(&broker_topic_path(topic)).await?;
        let read = registered_partitions(&*coord, topic).await;
        if zookeeper_failed(&read) {
            self.forget(&coord).await;
        }
        read
    }

    /// Every topic with a record in this cluster (see [`recorded_topics`]), as of the end of
    /// the last record's creation.
    pub async fn recorded_topics(&self) -> Result<Vec<String>, OriginsStoreError> {
        let coord = self.latest(ORIGINS_PATH).await?;
        let read = recorded_topics(&*coord).await;
        if zookeeper_failed(&read) {
            self.forget(&coord).await;
        }
        read
    }

    /// Merges `add` into `topic`'s record; the record as it stands after.
    pub async fn merge(
        &self,
        topic: &TopicName,
        add: &Origins,
    ) -> Result<Origins, OriginsStoreError> {
        let coord = self.session(&origins_path(topic)).await?;
        let merged = merge_origins(&*coord, topic, add).await;
        if zookeeper_failed(&merged) {
            self.forget(&coord).await;
        }
        merged
    }

    /// The session, synced (ZooKeeper's `sync` on `path`) so that what it reads next reflects
    /// every write any session completed before: a read served by a follower that is behind
    /// could otherwise miss a record another mirror has just written, and two mirrors started
    /// at once in opposite directions could each miss the other's (see
    /// [`Coordination::sync`]). A sync that fails drops the session, as a failed read does.
    async fn latest(&self, path: &str) -> Result<Arc<E::Coord>, OriginsStoreError> {
        let coord = self.session(path).await?;
        if planted::active(Bug::OriginReadNotSynced) {
            return Ok(coord);
        }
        if let Err(source) = coord.sync(path).await {
            self.forget(&coord).await;
            return Err(OriginsStoreError::ZooKeeper {
                path: path.to_string(),
                source,
            });
        }
        Ok(coord)
    }

    /// The open session, or a new one (opened under the lock: concurrent callers share it).
    async fn session(&self, path: &str) -> Result<Arc<E::Coord>, OriginsStoreError> {
        let mut session = self.session.lock().await;
        if let Some(coord) = session.as_ref() {
            return Ok(coord.clone());
        }
        let coord = self
            .env
            .coordinate(&self.connect, self.session_timeout, self.connection_timeout)
            .await
            .map_err(|source| OriginsStoreError::ZooKeeper {
                path: path.to_string(),
                source,
            })?;
        Ok(session.insert(Arc::new(coord)).clone())
    }

    /// Drops `coord` as the session (if it still is: another caller may have replaced it).
    async fn forget(&self, coord: &Arc<E::Coord>) {
        let mut session = self.session.lock().await;
        if session
            .as_ref()
            .is_some_and(|open| Arc::ptr_eq(open, coord))
        {
            session.take();
        }
    }

    /// Closes the session, if one is open, within [`CLOSE_GRACE`]; a ZooKeeper that does not
    /// answer, or a session still in use by an operation, is left to expire (it holds no
    /// ephemeral node), said in the log.
    pub async fn close(&self) {
        let Some(coord) = self.session.lock().await.take() else {
            return;
        };
        let Ok(coord) = Arc::try_unwrap(coord) else {
            tracing::warn!(
                "{}: the origin records' session is still in use at close; it is left to expire",
                self.connect
            );
            return;
        };
        if tokio::time::timeout(CLOSE_GRACE, coord.close())
            .await
            .is_err()
        {
            tracing::warn!(
                "{}: ZooKeeper did not answer within {CLOSE_GRACE:?}; the origin records' session is left to expire",
                self.connect
            );
        }
    }
}

/// Whether an operation failed in ZooKeeper (its session is then dropped: the next operation
/// opens another).
fn zookeeper_failed<T>(outcome: &Result<T, OriginsStoreError>) -> bool {
    matches!(outcome, Err(OriginsStoreError::ZooKeeper { .. }))
}
