//! The group as ZooKeeper shows it, read by an observer (the mirror's watchdog, its lag gauges):
//! every partition the subscription covers on the registered brokers, whether a live member
//! owns it, and what the group committed for it — whatever this member itself owns. And the
//! source brokers' ends, asked of each broker at once, so one broker that never answers holds
//! up only its own partitions.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::task::JoinSet;
use tributary_core::consumer::{BrokerPartition, Registration};
use tributary_core::group_id::GroupId;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{
    broker_id_path, broker_topic_path, consumer_ids_path, consumer_offsets_path,
    consumer_owners_path, parse_broker_registration, BROKER_TOPICS_PATH,
};

pub use super::ViewError;
use crate::client::{connect, latest_offsets, ClientError};
use crate::coordination::{CoordError, Coordination};
use crate::env::Env;

/// The most partitions one view reads (a corrupt or hostile registration cannot make it read
/// without end).
pub const VIEW_PARTITIONS_MAX: usize = 100_000;
/// The most partitions one broker may register for a topic (as the group's rebalance reads them).
const COUNT_MAX: u32 = tributary_core::config::PARTITIONS_PER_TOPIC_MAX as u32;

/// Who owns a partition, as ZooKeeper says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A thread of a member registered in the group.
    Live(String),
    /// An owner node naming a thread of no registered member (its member is gone, or was never
    /// registered on the session that holds the node).
    Stale(String),
    /// No owner node.
    Nobody,
}

/// One partition of the group's subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPartition {
    /// The topic.
    pub topic: TopicName,
    /// The partition.
    pub partition: BrokerPartition,
    /// What the group committed (`None`: nothing yet).
    pub committed: Option<i64>,
    /// Who owns it.
    pub owner: Owner,
}

/// Reads the group `group`'s view of every partition `registration` subscribes to, in
/// (topic, partition) order.
pub async fn read_group(
    coord: &impl Coordination,
    group: &GroupId,
    registration: &Registration,
) -> Result<Vec<GroupPartition>, ViewError> {
    let members: BTreeSet<String> = children(coord, &consumer_ids_path(group))
        .await?
        .into_iter()
        .collect();
    let topics = children(coord, BROKER_TOPICS_PATH).await?;
    let wanted = registration.streams_for(topics.iter().map(String::as_str));
    let mut out = Vec::new();
    for name in wanted.keys() {
        let Ok(topic) = name.parse::<TopicName>() else {
            continue;
        };
        let topic_path = broker_topic_path(&topic);
        let owners_path = consumer_owners_path(group, &topic);
        let offsets_path = consumer_offsets_path(group, &topic);
        let owners: BTreeSet<String> = children(coord, &owners_path).await?.into_iter().collect();
        for broker in children(coord, &topic_path).await? {
            let Ok(broker_id) = broker.parse::<i32>() else {
                continue;
            };
            let count = match coord.get(&format!("{topic_path}/{broker}")).await {
                Ok((data, _)) => String::from_utf8_lossy(&data).trim().parse::<u32>().ok(),
                Err(CoordError::NoNode(_)) => None,
                Err(source) => {
                    return Err(ViewError::ZooKeeper {
                        path: format!("{topic_path}/{broker}"),
                        source,
                    })
                }
            };
            // An unreadable or absurd count is skipped, as the rebalance skips it.
            let Some(count) = count.filter(|c| *c <= COUNT_MAX) else {
                continue;
            };
            for partition in 0..count {
                if out.len() >= VIEW_PARTITIONS_MAX {
                    return Err(ViewError::TooManyPartitions {
                        group: group.clone(),
                        max: VIEW_PARTITIONS_MAX,
                    });
                }
                let partition = BrokerPartition {
                    broker_id,
                    partition,
                };
                let name = partition.to_string();
                let owner = if owners.contains(&name) {
                    read_owner(coord, &format!("{owners_path}/{name}"), &members).await?
                } else {
                    Owner::Nobody
                };
                let committed = match coord.get(&format!("{offsets_path}/{name}")).await {
                    Ok((data, _)) => String::from_utf8_lossy(&data).trim().parse().ok(),
                    Err(CoordError::NoNode(_)) => None,
                    Err(source) => {
                        return Err(ViewError::ZooKeeper {
                            path: format!("{offsets_path}/{name}"),
                            source,
                        })
                    }
                };
                out.push(GroupPartition {
                    topic: topic.clone(),
                    partition,
                    committed,
                    owner,
                });
            }
        }
    }
    Ok(out)
}

/// The owner named by an owner node: live when its thread id (`<consumer id>-<n>`) belongs to a
/// registered member.
async fn read_owner(
    coord: &impl Coordination,
    path: &str,
    members: &BTreeSet<String>,
) -> Result<Owner, ViewError> {
    let thread = match coord.get(path).await {
        Ok((data, _)) => String::from_utf8_lossy(&data).into_owned(),
        Err(CoordError::NoNode(_)) => return Ok(Owner::Nobody),
        Err(source) => {
            return Err(ViewError::ZooKeeper {
                path: path.to_string(),
                source,
            })
        }
    };
    let member = thread.rsplit_once('-').map_or(thread.as_str(), |(m, _)| m);
    Ok(if members.contains(member) {
        Owner::Live(thread)
    } else {
        Owner::Stale(thread)
    })
}

/// Children of `path` (none when it does not exist).
async fn children(coord: &impl Coordination, path: &str) -> Result<Vec<String>, ViewError> {
    match coord.children(path).await {
        Ok(children) => Ok(children),
        Err(CoordError::NoNode(_)) => Ok(Vec::new()),
        Err(source) => Err(ViewError::ZooKeeper {
            path: path.to_string(),
            source,
        }),
    }
}

/// The latest offset of each of `partitions`, asking every source broker at once over one
/// connection each, each within `timeout`: a broker that is not registered, cannot be reached
/// or does not answer leaves out only its own partitions (each such broker is logged once
/// per call, at `warn`).
pub async fn latest_ends<E: Env>(
    env: &E,
    coord: &impl Coordination,
    partitions: impl IntoIterator<Item = (TopicName, BrokerPartition)>,
    timeout: Duration,
) -> BTreeMap<(TopicName, BrokerPartition), i64> {
    let mut by_broker: BTreeMap<i32, Vec<(TopicName, BrokerPartition)>> = BTreeMap::new();
    for (topic, partition) in partitions {
        by_broker
            .entry(partition.broker_id)
            .or_default()
            .push((topic, partition));
    }
    let mut asks = JoinSet::new();
    for (broker, partitions) in by_broker {
        let address = match coord.get(&broker_id_path(broker)).await {
            Ok((data, _)) => parse_broker_registration(&String::from_utf8_lossy(&data)),
            Err(_) => None,
        };
        let Some((host, port)) = address else {
            tracing::warn!(
                "source broker {broker} is not registered; its partitions' ends are unknown"
            );
            continue;
        };
        let env = env.clone();
        asks.spawn(async move {
            let ask = async {
                let mut conn = connect(&env, &host, port, timeout).await?;
                let asked: Vec<(TopicName, i32)> = partitions
                    .iter()
                    .map(|(t, p)| (t.clone(), p.partition as i32))
                    .collect();
                let (latest, failed) = latest_offsets(&mut conn, &asked).await;
                if let Some(e) = failed {
                    tracing::warn!("source broker {broker} at {host}:{port}: {e}");
                }
                Ok::<_, ClientError>(latest)
            };
            match tokio::time::timeout(timeout, ask).await {
                Ok(Ok(latest)) => partitions
                    .into_iter()
                    .zip(latest)
                    .filter_map(|(key, end)| Some((key, end?)))
                    .collect(),
                Ok(Err(e)) => {
                    tracing::warn!("source broker {broker} at {host}:{port}: {e}");
                    Vec::new()
                }
                Err(_) => {
                    tracing::warn!("source broker {broker} at {host}:{port}: no answer within {timeout:?}; its partitions' ends are unknown");
                    Vec::new()
                }
            }
        });
    }
    let mut ends = BTreeMap::new();
    while let Some(done) = asks.join_next().await {
        match done {
            Ok(found) => ends.extend(found),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    ends
}
