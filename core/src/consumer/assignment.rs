//! 0.7's range assignment.
//!
//! For each topic: its partitions are the strings `"<broker id>-<partition>"` over every broker
//! registered for it, **sorted as strings** (so `"10-0"` sorts before `"2-0"`); its consumers are
//! the thread ids of every member subscribed to it, sorted as strings. With P partitions and C
//! threads, thread i owns `P/C` partitions (one more for the first `P%C` threads), in order:
//! P=5, C=2 gives thread 0 partitions [0, 3) and thread 1 [3, 5). Every member computes the same
//! assignment from the same ZooKeeper view, which is what lets 0.7 members and Tributary
//! members share a group.

use std::collections::BTreeMap;
use std::fmt;

/// A partition as the consumer group names it: `<broker id>-<partition>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BrokerPartition {
    /// The broker.
    pub broker_id: i32,
    /// The partition on that broker.
    pub partition: u32,
}

impl BrokerPartition {
    /// Parses `"<broker id>-<partition>"`.
    pub fn parse(name: &str) -> Option<Self> {
        let (broker, partition) = name.split_once('-')?;
        Some(BrokerPartition {
            broker_id: broker.parse().ok().filter(|b: &i32| *b >= 0)?,
            partition: partition.parse().ok()?,
        })
    }
}

impl fmt::Display for BrokerPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.broker_id, self.partition)
    }
}

/// Sorted as 0.7 sorts them: by their string form (`"10-0"` before `"2-0"`), compared without
/// allocating (the form is written into a buffer on the stack).
impl Ord for BrokerPartition {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name().as_bytes().cmp(other.name().as_bytes())
    }
}

impl BrokerPartition {
    /// The string form on the stack.
    fn name(&self) -> NameBuf {
        let mut name = NameBuf::default();
        // Always fits: at most 11 + 1 + 10 bytes ("-2147483648-4294967295").
        let written = fmt::write(&mut name, format_args!("{self}"));
        debug_assert!(written.is_ok(), "a partition name longer than its buffer");
        name
    }
}

/// A partition's string form, written without allocating.
#[derive(Default)]
struct NameBuf {
    bytes: [u8; 24],
    len: usize,
}

impl NameBuf {
    fn as_bytes(&self) -> &[u8] {
        // In range: `write_str` never moves `len` past the buffer.
        &self.bytes[..self.len]
    }
}

impl fmt::Write for NameBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let slot = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl PartialOrd for BrokerPartition {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One topic's assignment: every thread id → the partitions it owns (threads that get none are
/// absent). `partitions` and `threads` may come in any order; both are sorted as strings here.
pub fn assign(
    partitions: &[BrokerPartition],
    threads: &[String],
) -> BTreeMap<String, Vec<BrokerPartition>> {
    let mut partitions = partitions.to_vec();
    partitions.sort();
    partitions.dedup();
    let mut threads = threads.to_vec();
    threads.sort();
    threads.dedup();
    let mut out = BTreeMap::new();
    if threads.is_empty() {
        return out;
    }
    let (per, extra) = (
        partitions.len() / threads.len(),
        partitions.len() % threads.len(),
    );
    for (i, thread) in threads.into_iter().enumerate() {
        let start = per * i + i.min(extra);
        let count = per + usize::from(i < extra);
        if let Some(owned) = partitions
            .get(start..start + count)
            .filter(|p| !p.is_empty())
        {
            out.insert(thread, owned.to_vec());
        }
    }
    debug_assert!(
        out.values().map(Vec::len).sum::<usize>() == partitions.len(),
        "every partition is owned exactly once"
    );
    out
}
