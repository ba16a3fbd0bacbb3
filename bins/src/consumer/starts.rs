//! Where the partitions a rebalance assigns start: the group's committed offset (from
//! ZooKeeper), else `autooffset.reset`'s offset asked of the partition's broker — every broker
//! at once, each on one connection within [`START_PROBE_MAX`] (or the socket timeout, if
//! shorter), so a broker that accepts connections but never answers holds up only its own
//! partitions, and only that long.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tributary_core::config::AutoOffsetReset;
use tributary_core::consumer::BrokerPartition;
use tributary_core::group_id::GroupId;
use tributary_core::wire::{ErrorCode, OffsetsRequest, Request, Response, TopicName};
use tributary_core::zk_layout::{consumer_offsets_path, consumer_offsets_root};

use super::{OffsetNodeError, StartOffsetError};
use crate::client::{connect, ClientError, PIPELINED_REQUESTS_MAX};
use crate::coordination::pipeline::{pipelined_all, REQUESTS_IN_FLIGHT};
use crate::coordination::{CoordError, Coordination};
use crate::env::Env;

/// The longest a rebalance waits for one broker's start offsets.
pub const START_PROBE_MAX: Duration = Duration::from_secs(5);

/// A partition of a topic.
pub type Key = (TopicName, BrokerPartition);

/// Where a partition starts: `(offset, committed)` — `committed` when the group has it on
/// record, `false` for `autooffset.reset`'s offset (to be recorded once claimed) — or why it
/// could not be read.
pub type Start = Result<(i64, bool), StartOffsetError>;

/// The starts of `partitions` (each with its broker's address) for `group`.
pub async fn read_starts<E: Env>(
    env: &E,
    coord: &impl Coordination,
    group: &GroupId,
    reset: &AutoOffsetReset,
    socket_timeout: Duration,
    partitions: impl IntoIterator<Item = (Key, (String, u16))>,
) -> BTreeMap<Key, Start> {
    let mut starts = BTreeMap::new();
    let mut ask: BTreeMap<(String, u16), Vec<Key>> = BTreeMap::new();
    // The group's committed offsets, read pipelined on the session; none for a topic the group
    // never committed.
    let partitions: Vec<(Key, (String, u16))> = partitions.into_iter().collect();
    let committed_topics = committed_topics(coord, group).await;
    let reads = partitions.iter().map(|(key, _)| {
        let never = committed_topics
            .as_ref()
            .is_some_and(|topics| !topics.contains(key.0.as_str()));
        async move {
            if never {
                return Ok(None);
            }
            committed_offset(coord, group, key).await
        }
    });
    let read = pipelined_all(REQUESTS_IN_FLIGHT, reads).await;
    for ((key, address), committed) in partitions.into_iter().zip(read) {
        match committed {
            Ok(Some(offset)) => drop(starts.insert(key, Ok((offset, true)))),
            Ok(None) => ask.entry(address).or_default().push(key),
            Err(e) => drop(starts.insert(key, Err(StartOffsetError::Committed(e)))),
        }
    }
    let time = match reset {
        AutoOffsetReset::Smallest => -2,
        AutoOffsetReset::Largest => -1,
        // No committed offset and no reset allowed: start at the beginning, as 0.7 does for a
        // group's first run; out-of-range errors are raised by the fetcher.
        AutoOffsetReset::Raise(_) => -2,
    };
    let timeout = socket_timeout.min(START_PROBE_MAX);
    let mut asks = JoinSet::new();
    for (address, keys) in ask {
        asks.spawn(ask_broker(env.clone(), address, keys, time, timeout));
    }
    while let Some(done) = asks.join_next().await {
        match done {
            Ok(found) => starts.extend(found.into_iter().map(|(k, r)| (k, r.map(|o| (o, false))))),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    starts
}

/// The topics the group has committed offsets of, in one read; `None` when it cannot be read
/// (each partition is then read, and its own failure reported). A topic missing here had no
/// offset node when this was read, which is what a read of each partition's node would have
/// found then: those reads are not taken at one instant either. A group's first join over
/// 10,000 partitions saves 10,000 reads.
async fn committed_topics(coord: &impl Coordination, group: &GroupId) -> Option<BTreeSet<String>> {
    match coord.children(&consumer_offsets_root(group)).await {
        Ok(topics) => Some(topics.into_iter().collect()),
        Err(CoordError::NoNode(_)) => Some(BTreeSet::new()),
        Err(_) => None,
    }
}

/// The group's committed offset of a partition (`None`: nothing on record).
async fn committed_offset(
    coord: &impl Coordination,
    group: &GroupId,
    (topic, partition): &Key,
) -> Result<Option<i64>, OffsetNodeError> {
    let path = format!("{}/{partition}", consumer_offsets_path(group, topic));
    super::read_offset_node(coord, path).await
}

/// Asks one broker, on one connection, for each partition's offset at `time` (OFFSETS), all
/// within `timeout`, [`PIPELINED_REQUESTS_MAX`] requests at a time (one round trip each batch,
/// not each partition: a member taking 1,000 partitions spent a second here). A failed call
/// poisons the connection: the partitions of its batch and after fail with it.
async fn ask_broker<E: Env>(
    env: E,
    (host, port): (String, u16),
    keys: Vec<Key>,
    time: i64,
    timeout: Duration,
) -> Vec<(Key, Result<i64, StartOffsetError>)> {
    let mut out: Vec<(Key, Result<i64, StartOffsetError>)> = Vec::with_capacity(keys.len());
    let asking = async {
        let mut conn = connect(&env, &host, port, timeout).await?;
        for batch in keys.chunks(PIPELINED_REQUESTS_MAX) {
            let requests: Vec<Request> = batch
                .iter()
                .map(|(topic, partition)| {
                    Request::Offsets(OffsetsRequest {
                        topic: topic.clone(),
                        partition: partition.partition as i32,
                        time,
                        max_offsets: 1,
                    })
                })
                .collect();
            let answers = conn.call_pipelined(&requests).await?;
            for (key, answer) in batch.iter().zip(answers) {
                let (topic, partition) = key;
                let answer = match answer {
                    Response::Offsets(o) if o.error == ErrorCode::NoError => o
                        .offsets
                        .first()
                        .copied()
                        .ok_or_else(|| StartOffsetError::NoOffsets {
                            topic: topic.clone(),
                            partition: *partition,
                        }),
                    other => Err(StartOffsetError::Refused {
                        topic: topic.clone(),
                        partition: *partition,
                        answer: format!("{other:?}"),
                    }),
                };
                out.push((key.clone(), answer));
            }
        }
        Ok::<(), ClientError>(())
    };
    let failure = match tokio::time::timeout(timeout, asking).await {
        Ok(Ok(())) => return out,
        Ok(Err(e)) => StartOffsetError::Broker {
            host: host.clone(),
            port,
            source: Arc::new(e),
        },
        Err(_) => StartOffsetError::Timeout {
            host: host.clone(),
            port,
            timeout,
        },
    };
    let answered = out.len();
    out.extend(
        keys.into_iter()
            .skip(answered)
            .map(|key| (key, Err(failure.clone()))),
    );
    out
}
