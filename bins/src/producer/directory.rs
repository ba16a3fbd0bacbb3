//! Where a producer can send: the live brokers and each topic's registered partitions.
//!
//! - `broker.list`: a fixed list; every broker is one candidate with partition -1 (the broker
//!   picks), as in 0.7.
//! - `zk.connect`: read from ZooKeeper (`/brokers/ids/*`, `/brokers/topics/<t>/<broker>`) and
//!   kept current by watches on `/brokers/ids`, `/brokers/topics` and every topic's node, so
//!   brokers and topics that appear or vanish are seen without a restart. A topic no broker has
//!   registered goes to partition 0 of every live broker (the first write creates it). A lost
//!   session is replaced and everything re-read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tributary_core::config::{BrokerEndpoint, ZkConnect};
use tributary_core::producer::Candidate;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{
    broker_id_path, broker_topic_path, parse_broker_registration, BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
};

use crate::coordination::{CoordError, Coordination, SessionEvent};
use crate::env::Env;

/// Pause before trying ZooKeeper again after a failure.
const RETRY_BACKOFF: Duration = Duration::from_millis(500);
/// Re-read ZooKeeper at least this often, watches or not (a missed watch heals by itself).
const RELOAD_EVERY: Duration = Duration::from_secs(30);

/// What the directory knows at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Live brokers: id → (host, port).
    pub brokers: BTreeMap<i32, (String, u16)>,
    /// Registered topics: topic → broker id → partition count there.
    pub topics: BTreeMap<TopicName, BTreeMap<i32, u32>>,
    /// Whether partitions are chosen by the producer (ZooKeeper) or by the broker (static list).
    pub broker_picks: bool,
}

impl Snapshot {
    /// Where a message to `topic` can go, sorted (see `tributary_core::producer`).
    pub fn candidates(&self, topic: &TopicName) -> Vec<Candidate> {
        if self.broker_picks {
            return self
                .brokers
                .keys()
                .map(|&broker_id| Candidate {
                    broker_id,
                    partition: -1,
                })
                .collect();
        }
        let registered: Vec<Candidate> = self
            .topics
            .get(topic)
            .into_iter()
            .flatten()
            .filter(|(broker, _)| self.brokers.contains_key(broker))
            .flat_map(|(&broker_id, &count)| {
                (0..count as i32).map(move |partition| Candidate {
                    broker_id,
                    partition,
                })
            })
            .collect();
        if registered.is_empty() {
            return self
                .brokers
                .keys()
                .map(|&broker_id| Candidate {
                    broker_id,
                    partition: 0,
                })
                .collect();
        }
        registered
    }

    /// Where a message without a key can go when sending it failed. A topic registered on two
    /// or more brokers keeps its candidates (a retry picks again among them, so one broker that
    /// keeps refusing cannot hold the message back, and the topic's layout — what keyed
    /// messages hash over — does not change). A topic on one broker only also gets partition 0
    /// of every other live broker (the first write creates the topic there, as 0.7 producers
    /// bootstrap a topic), so a broker whose partitions refuse writes (a failed disk) cannot
    /// stall it.
    pub fn candidates_on_retry(&self, topic: &TopicName) -> Vec<Candidate> {
        let mut candidates = self.candidates(topic);
        let brokers: std::collections::BTreeSet<i32> =
            candidates.iter().map(|c| c.broker_id).collect();
        if self.broker_picks || brokers.len() >= 2 {
            return candidates;
        }
        for &broker_id in self.brokers.keys() {
            if !brokers.contains(&broker_id) {
                candidates.push(Candidate {
                    broker_id,
                    partition: 0,
                });
            }
        }
        candidates.sort_by_key(|c| (c.broker_id, c.partition));
        candidates
    }
}

/// The producer's view of the cluster; see the module docs.
#[derive(Debug, Clone)]
pub struct Directory {
    view: watch::Receiver<Snapshot>,
    reload: Arc<Notify>,
    /// Set for the ZooKeeper directory; stops its task when the last handle goes.
    _task: Option<Arc<TaskGuard>>,
}

#[derive(Debug)]
struct TaskGuard(tokio::task::AbortHandle);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Directory {
    /// A fixed `broker.list`.
    pub fn fixed(brokers: &[BrokerEndpoint]) -> Self {
        let snapshot = Snapshot {
            brokers: brokers
                .iter()
                .map(|b| (b.id, (b.host.clone(), b.port)))
                .collect(),
            topics: BTreeMap::new(),
            broker_picks: true,
        };
        Directory {
            view: watch::channel(snapshot).1,
            reload: Arc::new(Notify::new()),
            _task: None,
        }
    }

    /// Reads the cluster from ZooKeeper at `connect` and keeps following it. Fails when the
    /// first read cannot be done within the connection timeout.
    pub async fn from_zookeeper<E: Env>(
        env: &E,
        connect: &ZkConnect,
        session_timeout: Duration,
        connection_timeout: Duration,
    ) -> Result<Self, CoordError> {
        let coord = env
            .coordinate(connect, session_timeout, connection_timeout)
            .await?;
        let first = load(&coord).await?;
        let (tx, view) = watch::channel(first.0);
        let reload = Arc::new(Notify::new());
        let follower = follow(
            env.clone(),
            connect.clone(),
            session_timeout,
            connection_timeout,
            coord,
            first.1,
            tx,
            reload.clone(),
        );
        let task = tokio::spawn(follower);
        Ok(Directory {
            view,
            reload,
            _task: Some(Arc::new(TaskGuard(task.abort_handle()))),
        })
    }

    /// The current view.
    pub fn snapshot(&self) -> Snapshot {
        self.view.borrow().clone()
    }

    /// Asks for a fresh read (after a send failed); the next snapshot may be newer.
    pub fn reload(&self) {
        self.reload.notify_one();
    }
}

type Watches = JoinSet<()>;

/// Reads brokers and topics, setting a watch on every node read.
async fn load(coord: &impl Coordination) -> Result<(Snapshot, Watches), CoordError> {
    let mut watches = JoinSet::new();
    let mut snapshot = Snapshot::default();
    let (ids, watch) = children_or_empty(coord, BROKER_IDS_PATH).await?;
    watches.spawn(watch);
    for id in ids {
        let Ok(broker) = id.parse::<i32>() else {
            tracing::warn!("{BROKER_IDS_PATH}/{id}: not a broker id; skipped");
            continue;
        };
        match coord.get(&broker_id_path(broker)).await {
            Ok((data, _)) => match parse_broker_registration(&String::from_utf8_lossy(&data)) {
                Some(address) => {
                    snapshot.brokers.insert(broker, address);
                }
                None => tracing::warn!(
                    "{}: unreadable broker registration {:?}; skipped",
                    broker_id_path(broker),
                    String::from_utf8_lossy(&data)
                ),
            },
            Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let (topics, watch) = children_or_empty(coord, BROKER_TOPICS_PATH).await?;
    watches.spawn(watch);
    for name in topics {
        let Ok(topic) = name.parse::<TopicName>() else {
            tracing::warn!("{BROKER_TOPICS_PATH}/{name}: not a valid topic name; skipped");
            continue;
        };
        let path = broker_topic_path(&topic);
        let (brokers, watch) = children_or_empty(coord, &path).await?;
        watches.spawn(watch);
        let mut counts = BTreeMap::new();
        for id in brokers {
            let Ok(broker) = id.parse::<i32>() else {
                continue;
            };
            match coord.get(&format!("{path}/{id}")).await {
                Ok((data, _)) => match String::from_utf8_lossy(&data).trim().parse::<u32>() {
                    Ok(count) if count > 0 => {
                        counts.insert(broker, count);
                    }
                    _ => tracing::warn!(
                        "{path}/{id}: unreadable partition count {:?}; skipped",
                        String::from_utf8_lossy(&data)
                    ),
                },
                Err(CoordError::NoNode(_)) => {}
                Err(e) => return Err(e),
            }
        }
        snapshot.topics.insert(topic, counts);
    }
    Ok((snapshot, watches))
}

/// A node's children and a watch on them; a missing node has none (and its watch fires at once,
/// so it is looked for again soon).
async fn children_or_empty(
    coord: &impl Coordination,
    path: &str,
) -> Result<(Vec<String>, crate::coordination::Watch), CoordError> {
    match coord.children_and_watch(path).await {
        Ok(found) => Ok(found),
        Err(CoordError::NoNode(_)) => Ok((Vec::new(), Box::pin(tokio::time::sleep(RETRY_BACKOFF)))),
        Err(e) => Err(e),
    }
}

/// Keeps the view current: re-reads when a watch fires, when asked, and now and then; replaces
/// an expired session.
#[allow(clippy::too_many_arguments)]
async fn follow<E: Env>(
    env: E,
    connect: ZkConnect,
    session_timeout: Duration,
    connection_timeout: Duration,
    mut coord: E::Coord,
    mut watches: Watches,
    view: watch::Sender<Snapshot>,
    reload: Arc<Notify>,
) {
    loop {
        let expired = tokio::select! {
            biased;
            event = coord.next_event() => matches!(event, SessionEvent::Expired | SessionEvent::Closed),
            _ = watches.join_next() => false,
            () = reload.notified() => false,
            () = tokio::time::sleep(RELOAD_EVERY) => false,
        };
        if expired {
            tracing::warn!("producer's ZooKeeper session ended; opening a new one");
            coord = loop {
                match env
                    .coordinate(&connect, session_timeout, connection_timeout)
                    .await
                {
                    Ok(fresh) => break fresh,
                    Err(e) => tracing::warn!("{e}; retrying"),
                }
                tokio::time::sleep(RETRY_BACKOFF).await;
            };
        }
        match load(&coord).await {
            Ok((snapshot, fresh)) => {
                watches = fresh;
                view.send_if_modified(|v| {
                    let changed = *v != snapshot;
                    *v = snapshot;
                    changed
                });
            }
            Err(e) => {
                tracing::warn!("reading brokers from ZooKeeper at {connect}: {e}; retrying");
                watches = JoinSet::new();
                watches.spawn(tokio::time::sleep(RETRY_BACKOFF));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(broker_picks: bool) -> Snapshot {
        let t: TopicName = "t".parse().unwrap();
        Snapshot {
            brokers: [
                (0, ("a".into(), 1)),
                (1, ("b".into(), 1)),
                (2, ("c".into(), 1)),
            ]
            .into_iter()
            .collect(),
            // Only broker 1 has the topic, with two partitions.
            topics: [(t, [(1, 2)].into_iter().collect())].into_iter().collect(),
            broker_picks,
        }
    }

    fn pairs(candidates: Vec<Candidate>) -> Vec<(i32, i32)> {
        candidates
            .into_iter()
            .map(|c| (c.broker_id, c.partition))
            .collect()
    }

    #[test]
    fn a_retry_of_a_topic_on_one_broker_may_go_to_any_live_broker() {
        let s = snapshot(false);
        let t: TopicName = "t".parse().unwrap();
        assert_eq!(pairs(s.candidates(&t)), vec![(1, 0), (1, 1)]);
        assert_eq!(
            pairs(s.candidates_on_retry(&t)),
            vec![(0, 0), (1, 0), (1, 1), (2, 0)]
        );
    }

    #[test]
    fn a_topic_on_two_brokers_keeps_its_layout_on_a_retry() {
        let mut s = snapshot(false);
        let t: TopicName = "t".parse().unwrap();
        s.topics.get_mut(&t).unwrap().insert(2, 1);
        assert_eq!(pairs(s.candidates_on_retry(&t)), pairs(s.candidates(&t)));
        assert_eq!(pairs(s.candidates(&t)), vec![(1, 0), (1, 1), (2, 0)]);
    }

    #[test]
    fn with_a_static_broker_list_a_retry_has_the_same_candidates() {
        let s = snapshot(true);
        let t: TopicName = "t".parse().unwrap();
        assert_eq!(pairs(s.candidates_on_retry(&t)), pairs(s.candidates(&t)));
    }
}
