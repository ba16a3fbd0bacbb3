//! The async producer's batching and the grouping of a batch into message sets.
//!
//! A batch is sent when it holds `batch.size` messages, or when its first message has waited
//! `queue.time` ms, whichever comes first (0.7's rule). A batch is grouped into one message set
//! per (topic, partition), messages kept in the order they were queued.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::wire::TopicName;

/// When a batch is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPolicy {
    /// `batch.size`: messages per batch (at least 1).
    pub batch_size: usize,
    /// `queue.time`: the longest the first message of a batch waits, in ms.
    pub queue_time_ms: u64,
}

impl BatchPolicy {
    /// Whether a batch of `count` messages, the first queued at `first_ms`, is due at `now_ms`.
    pub fn due(&self, count: usize, first_ms: i64, now_ms: i64) -> bool {
        count >= self.batch_size.max(1) || (count > 0 && self.remaining_ms(first_ms, now_ms) == 0)
    }

    /// How long a batch whose first message was queued at `first_ms` may still wait at `now_ms`.
    pub fn remaining_ms(&self, first_ms: i64, now_ms: i64) -> u64 {
        let waited = u64::try_from(now_ms.saturating_sub(first_ms)).unwrap_or(0);
        self.queue_time_ms.saturating_sub(waited)
    }
}

/// A batch grouped by destination: (topic, partition) → the payloads in queue order, each with
/// the caller's index of the message (to report its outcome).
pub type PartitionSets<P = Bytes> = BTreeMap<(TopicName, i32), Vec<(usize, P)>>;

/// One (topic, partition)'s consecutive messages: its key and the payloads with their indexes.
type Run<P> = ((TopicName, i32), Vec<(usize, P)>);

/// Groups `(index, topic, partition, payload)` into one ordered list per (topic, partition)
/// (a payload is whatever the caller builds its sets from: the message's bytes by default).
/// Consecutive messages of one (topic, partition) are gathered before their list is looked up,
/// so a batch of a few partitions costs a lookup per run of messages, not per message, and
/// a topic name is cloned once per run.
pub fn group_by_partition<'a, P>(
    messages: impl IntoIterator<Item = (usize, &'a TopicName, i32, P)>,
) -> PartitionSets<P> {
    let mut sets = PartitionSets::new();
    let mut run: Option<Run<P>> = None;
    for (index, topic, partition, payload) in messages {
        match &mut run {
            Some(((t, p), items)) if *p == partition && t == topic => {
                items.push((index, payload));
            }
            _ => {
                if let Some((key, items)) = run.take() {
                    gather(&mut sets, key, items);
                }
                run = Some(((topic.clone(), partition), vec![(index, payload)]));
            }
        }
    }
    if let Some((key, items)) = run {
        gather(&mut sets, key, items);
    }
    sets
}

/// Adds a run of one (topic, partition)'s messages after those already grouped for it.
fn gather<P>(sets: &mut PartitionSets<P>, key: (TopicName, i32), mut items: Vec<(usize, P)>) {
    match sets.entry(key) {
        std::collections::btree_map::Entry::Vacant(slot) => {
            slot.insert(items);
        }
        std::collections::btree_map::Entry::Occupied(slot) => slot.into_mut().append(&mut items),
    }
}
