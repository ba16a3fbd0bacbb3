//! What can go wrong in the log, each case naming the partition and, where there is one, the
//! segment and offset.

use std::io;

use crate::message::MessageError;

/// A log operation's failure.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The message set is not valid; nothing was written.
    #[error("{partition}: message set refused, nothing appended: {source}")]
    InvalidMessageSet {
        /// The partition appended to.
        partition: String,
        /// What is wrong with the set.
        source: MessageError,
    },
    /// The offset is below the first segment, above the flushed end, or not a message boundary.
    #[error("{partition}: offset {offset} is out of range (log holds {start}..{end})")]
    OffsetOutOfRange {
        /// The partition read.
        partition: String,
        /// The offset asked for.
        offset: i64,
        /// The first offset held.
        start: u64,
        /// The flushed end.
        end: u64,
    },
    /// A previous sync, roll or write failed in a way that leaves the files unknown; the log
    /// refuses writes rather than pretend they are durable or write behind garbage.
    #[error("{partition}: log is poisoned ({cause}); restart the broker to recover")]
    Poisoned {
        /// The partition.
        partition: String,
        /// The failure that poisoned it.
        cause: String,
    },
    /// An operation on the partition panicked; its state cannot be trusted, so it serves nothing
    /// until the broker restarts (and recovery validates it).
    #[error("{partition}: partition stopped after an internal error ({cause}); restart the broker to recover it")]
    Failed {
        /// The partition.
        partition: String,
        /// What went wrong.
        cause: String,
    },
    /// Data that was promised durable is missing or fails validation; the partition is not
    /// served until an operator looks at it.
    #[error("{partition}: corrupt at segment {segment} offset {offset}: {detail}; the partition is not served")]
    Corrupt {
        /// The partition.
        partition: String,
        /// The segment file.
        segment: String,
        /// The offset of the corruption.
        offset: u64,
        /// What was found.
        detail: String,
    },
    /// The partition is not below the topic's partition count on this broker.
    #[error("{partition}: no such partition (the topic has {count} partitions here)")]
    UnknownPartition {
        /// The partition asked for.
        partition: String,
        /// The topic's partition count.
        count: u32,
    },
    /// A hole was asked to end at or below the log's end (a hole only ever moves the end
    /// forward).
    #[error("{partition}: cannot skip to offset {to}: the log already ends at {end}")]
    SkipBackwards {
        /// The partition.
        partition: String,
        /// The log's written end.
        end: u64,
        /// Where the hole was to end.
        to: u64,
    },
    /// The appended set would exceed the offsets a log can hold.
    #[error("{partition}: log would pass the largest offset")]
    OffsetOverflow {
        /// The partition.
        partition: String,
    },
    /// The log cannot be cut back there ([`crate::log::Log::cut_tail`]).
    #[error("{partition}: cannot cut the log back to {cut}: {detail}")]
    CannotCut {
        /// The partition.
        partition: String,
        /// Where the cut was asked for.
        cut: u64,
        /// Why it cannot be.
        detail: String,
    },
    /// Another process (another broker) holds `log.dir`.
    #[error(
        "log.dir {dir} is in use by another process ({holder}{}); every broker needs its own log.dir",
        if *.stopping { ", which is stopping" } else { "" }
    )]
    DirInUse {
        /// The directory.
        dir: String,
        /// Who holds it, as the holder described itself.
        holder: String,
        /// Whether the holder said it is stopping (the lock is about to be free).
        stopping: bool,
    },
    /// The partition's mirror position records could not be read, written or synced, or
    /// refused a position.
    #[error("{partition}: mirror positions: {source}")]
    Positions {
        /// The partition.
        partition: String,
        /// What failed.
        #[source]
        source: super::positions::PositionsError,
    },
    /// The file system failed.
    #[error("{partition}: {op} {path}: {source}")]
    Io {
        /// The partition (or log directory).
        partition: String,
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: String,
        /// The error.
        source: io::Error,
    },
}
