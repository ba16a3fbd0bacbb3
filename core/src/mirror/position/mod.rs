//! Where a mirror partition's copy of each source partition has reached, recorded by the mirror
//! cluster's broker with the data it appends, so that a set already held is never appended
//! twice and a source offset can be translated into the mirror partition's.
//!
//! With every mirrored set a broker appends, it records a [`Position`]: which source partition
//! ([`SourceKey`]: the source cluster's id, the topic as the source names it, the partition),
//! the source offsets the set covers (`source_start..source_next`) and where it landed in the
//! mirror partition's log (`mirror_start..mirror_end`). The records of one mirror partition are
//! an append-only file ([`record`]); the broker writes a set's record before its data and syncs
//! the records before the data in every flush, so durable data always has a durable record.
//! After a crash, [`PositionBook::recover`] reads the records back against the recovered log:
//! a record whose set is wholly in the log is kept, one whose set is not in it at all is
//! dropped, and a set only partly in the log (a torn tail never acknowledged) is cut from the
//! log, so data and records come back together, never one without the other.
//!
//! The book then answers three questions without I/O:
//! - [`PositionBook::decide`]: is a set already held ([`Decision::Held`], acknowledged without
//!   appending), new ([`Decision::Append`]), or partly held ([`Decision::Overlap`]: the sender
//!   drops what the mirror holds and sends the rest)?
//! - [`PositionBook::resume_at`]: the source offset to copy from after a restart or a move of
//!   the source partition to another mirror member.
//! - [`PositionBook::translate`]: the mirror offset from which a consumer group that has read a
//!   source partition up to a source offset misses nothing it had not read.

pub mod book;
pub mod placement;
pub mod record;

pub use book::{BookMark, Decision, PositionBook, Recovery};

use std::fmt;

use crate::consumer::BrokerPartition;
use crate::identity::ClusterId;
use crate::wire::TopicName;

/// One source partition, as a mirror partition's records name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceKey {
    /// The source cluster's id (`/tributary/cluster-id` in its ZooKeeper).
    pub cluster: ClusterId,
    /// The topic, as the source cluster names it.
    pub topic: TopicName,
    /// The partition, as the source's consumer group names it.
    pub partition: BrokerPartition,
}

impl fmt::Display for SourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.cluster, self.topic, self.partition)
    }
}

/// What one appended set reached: the mirror partition holds the source partition's messages
/// from `source_start` up to (not including) `source_next`, at `mirror_start..mirror_end` of
/// its log. Offsets are 0.7's byte offsets in each cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The source partition.
    pub key: SourceKey,
    /// The source offset of the set's first message.
    pub source_start: i64,
    /// The source offset after the set's last message: where copying goes on.
    pub source_next: i64,
    /// The mirror log's end before the set.
    pub mirror_start: u64,
    /// The mirror log's end after the set.
    pub mirror_end: u64,
}

impl Position {
    /// Whether the offsets make sense: non-negative, and each range non-empty.
    pub fn is_well_formed(&self) -> bool {
        0 <= self.source_start
            && self.source_start < self.source_next
            && self.mirror_start < self.mirror_end
    }
}

/// Why a position cannot be recorded or a set's range cannot be judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PositionError {
    /// A set's source range is empty, reversed or negative.
    #[error("{key}: source offsets {start}..{next} are not a range a set can cover")]
    BadSourceRange {
        /// The source partition.
        key: SourceKey,
        /// The first offset given.
        start: i64,
        /// The offset after the set, as given.
        next: i64,
    },
    /// A record's mirror range is empty, or starts before the end of an earlier record's set:
    /// the records would not follow the log.
    #[error("{key}: mirror offsets {start}..{end} do not follow the log (its records end at {known_end})")]
    OutOfLogOrder {
        /// The source partition.
        key: SourceKey,
        /// The set's first mirror offset.
        start: u64,
        /// The mirror offset after the set.
        end: u64,
        /// Where the records seen so far end.
        known_end: u64,
    },
    /// Another append's record starts before the end of the records, or is empty.
    #[error(
        "an append at {start}..{end} does not follow the log (its records end at {known_end})"
    )]
    OtherOutOfLogOrder {
        /// Where it began.
        start: u64,
        /// Where it ended.
        end: u64,
        /// Where the records seen so far end.
        known_end: u64,
    },
    /// A record would move a source partition's position backwards, or append what is held.
    #[error(
        "{key}: a set from source offset {start} would go back over what is held (up to {held_to})"
    )]
    Backwards {
        /// The source partition.
        key: SourceKey,
        /// The set's first source offset.
        start: i64,
        /// Where the held copy ends.
        held_to: i64,
    },
    /// More source partitions write into this mirror partition than a book keeps.
    #[error("more than {max} source partitions write into one mirror partition; {key} is refused")]
    TooManySources {
        /// The limit.
        max: usize,
        /// The source partition refused.
        key: SourceKey,
    },
}
