//! One rebalance attempt's plan: from what ZooKeeper says about the group (its members'
//! registrations, the topics and each topic's partitions per broker), the partitions this
//! member is assigned, by 0.7's range assignment. Every member computes the same plan from the
//! same view, so their claims never conflict.

use std::collections::BTreeMap;

use crate::config::PARTITIONS_PER_TOPIC_MAX;
use crate::wire::TopicName;

use super::super::{assign, thread_id, BrokerPartition, Registration, RegistrationError};
use super::PartitionKey;

/// The most partitions one broker may register for a topic (a larger count is skipped, loudly,
/// by every member alike) and the most streams one member may register for a topic (a larger
/// number fails the attempt): a corrupt or hostile number in ZooKeeper never exhausts memory.
pub const COUNT_MAX: u32 = PARTITIONS_PER_TOPIC_MAX as u32;

// The bound is the broker's own limit on `num.partitions`, carried over exactly (no truncation
// in the cast): a count a broker could legally register is never skipped.
const _: () = assert!(COUNT_MAX > 0 && COUNT_MAX as i64 == PARTITIONS_PER_TOPIC_MAX);

/// Why the group's view cannot be planned from (the attempt fails, and is tried again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A member's registration cannot be read: members would disagree on the assignment.
    #[error("member {member}: unreadable registration: {source}")]
    UnreadableRegistration {
        /// The member's id (its node under the group's `ids`).
        member: String,
        /// What is wrong with it.
        source: RegistrationError,
    },
    /// A member registers more streams for a topic than [`COUNT_MAX`].
    #[error("member {member} registers {streams} streams for {topic} (at most {max})")]
    TooManyStreams {
        /// The member's id.
        member: String,
        /// The topic.
        topic: String,
        /// The streams it registers.
        streams: u32,
        /// The bound.
        max: u32,
    },
}

/// What a broker registered for a topic, as read (`/brokers/topics/<topic>/<broker id>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerTopicNode {
    /// The broker.
    pub broker_id: i32,
    /// The node's data: the broker's partition count for the topic, in decimal.
    pub data: Vec<u8>,
}

/// A partition the plan assigns to this member, before it is claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The topic and partition.
    pub key: PartitionKey,
    /// The owning thread id, as written in the owner node.
    pub thread: String,
    /// Which of this member's threads of the topic it is (the driver maps it to a stream).
    pub thread_index: u32,
}

/// The topics this member consumes among `registered` (every registered topic, for a
/// wildcard), with its streams of each, in name order; names that are not valid topics are
/// left out.
pub fn wanted_topics(mine: &Registration, registered: &[String]) -> Vec<(TopicName, u32)> {
    mine.streams_for(registered.iter().map(String::as_str))
        .into_iter()
        .filter_map(|(name, streams)| Some((name.parse().ok()?, streams)))
        .collect()
}

/// Parses every member's registration (`None`: the member left since it was listed, and is
/// not counted). A registration that cannot be parsed fails the plan.
pub fn parse_members(
    members: Vec<(String, Option<Vec<u8>>)>,
) -> Result<BTreeMap<String, Registration>, PlanError> {
    let mut parsed = BTreeMap::new();
    for (member, data) in members {
        let Some(data) = data else { continue };
        match Registration::parse(&String::from_utf8_lossy(&data)) {
            Ok(registration) => drop(parsed.insert(member, registration)),
            Err(source) => return Err(PlanError::UnreadableRegistration { member, source }),
        }
    }
    Ok(parsed)
}

/// A topic's partitions from what its brokers registered: a count that cannot be read, or one
/// past [`COUNT_MAX`], skips that broker (logged as an error naming the node: every member skips
/// it alike, so assignments still agree).
pub fn partitions_of(topic: &TopicName, nodes: &[BrokerTopicNode]) -> Vec<BrokerPartition> {
    let mut partitions = Vec::new();
    for node in nodes {
        match String::from_utf8_lossy(&node.data).trim().parse::<u32>() {
            Ok(count) if count <= COUNT_MAX => {
                partitions.extend((0..count).map(|partition| BrokerPartition {
                    broker_id: node.broker_id,
                    partition,
                }));
            }
            Ok(count) => tracing::error!(
                "/brokers/topics/{topic}/{}: registers {count} partitions (at most {COUNT_MAX}); skipped: fix that broker's num.partitions",
                node.broker_id
            ),
            Err(_) => tracing::error!(
                "/brokers/topics/{topic}/{}: unreadable partition count; skipped",
                node.broker_id
            ),
        }
    }
    partitions
}

/// This member's plan: for each wanted topic (with this member's streams of it) and its
/// partitions, the partitions 0.7's range assignment gives this member's threads, in topic
/// order, then thread order, then partition order.
pub fn plan(
    consumer_id: &str,
    members: &BTreeMap<String, Registration>,
    registered: &[String],
    topics: &[(TopicName, u32, Vec<BrokerPartition>)],
) -> Result<Vec<Planned>, PlanError> {
    // Every member's streams per topic, worked out once (with a wildcard, once per topic was
    // topics × topics pattern checks a member).
    let streams_of_members: Vec<(&String, BTreeMap<String, u32>)> = members
        .iter()
        .map(|(member, r)| (member, r.streams_for(registered.iter().map(String::as_str))))
        .collect();
    let mut planned = Vec::new();
    for (topic, streams, partitions) in topics {
        let mut threads: Vec<String> = Vec::new();
        for (member, counts) in &streams_of_members {
            let n = counts.get(topic.as_str()).copied().unwrap_or(0);
            if n > COUNT_MAX {
                return Err(PlanError::TooManyStreams {
                    member: (*member).clone(),
                    topic: topic.to_string(),
                    streams: n,
                    max: COUNT_MAX,
                });
            }
            threads.extend((0..n).map(|i| thread_id(member, i)));
        }
        let assignment = assign(partitions, &threads);
        for thread_index in 0..*streams {
            let thread = thread_id(consumer_id, thread_index);
            for partition in assignment.get(&thread).into_iter().flatten() {
                planned.push(Planned {
                    key: (topic.clone(), *partition),
                    thread: thread.clone(),
                    thread_index,
                });
            }
        }
    }
    Ok(planned)
}

/// For each of `topics` in order, the brokers its planned partitions name that no earlier
/// topic's did, in plan order: every broker of the plan once, grouped by the topic that first
/// needs it.
pub fn brokers_by_topic(topics: &[TopicName], planned: &[Planned]) -> Vec<Vec<i32>> {
    let mut seen = std::collections::BTreeSet::new();
    topics
        .iter()
        .map(|topic| {
            planned
                .iter()
                .filter(|p| &p.key.0 == topic)
                .map(|p| p.key.1.broker_id)
                .filter(|broker| seen.insert(*broker))
                .collect()
        })
        .collect()
}
