//! Why the copier could not go on: a failure of the connection to the source broker (the round
//! is tried again on a new connection), or why one partition stopped copying (said once, then
//! skipped; the others go on).

use tributary_core::log::LogError;
use tributary_core::message::MessageError;

use crate::client::ClientError;

/// The source broker could not be asked: the connection is dropped and the round tried again.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The request failed on the connection (it is not reused).
    #[error(transparent)]
    Call(#[from] ClientError),
    /// The source answered with something else than what was asked for.
    #[error("unexpected answer to {request}: {answer}")]
    UnexpectedAnswer {
        /// The request (`MULTIFETCH`, `OFFSETS`).
        request: &'static str,
        /// The answer, as debug output.
        answer: String,
    },
}

/// Why appending copied bytes (or recording a hole) to a replica partition failed; the
/// partition stops copying.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The partition's log is no longer there.
    #[error("the replica's log is gone")]
    LogGone,
    /// The copied bytes are not a valid message set for this log.
    #[error("copied data refused by the log: {0}")]
    Refused(MessageError),
    /// The log does not end where the copy expected it to (something else wrote to it).
    #[error("the log ends at {end}, not at the {what} {expected}")]
    EndMoved {
        /// Where the log ends.
        end: u64,
        /// What was expected there: "fetch offset" or "gap's start".
        what: &'static str,
        /// Where the fetch (or the gap) starts.
        expected: i64,
    },
    /// The log refused the append, the hole or the flush (a poisoned log, a full disk).
    #[error(transparent)]
    Log(#[from] LogError),
}

/// Why a replica partition stopped copying: said once, naming the partition and the offsets,
/// then the partition is skipped until the broker restarts (the others go on).
#[derive(Debug, thiserror::Error)]
pub enum StopReason {
    /// Appending what was copied failed.
    #[error(transparent)]
    Append(AppendError),
    /// The source deleted bytes before they were copied, and the hole cannot be recorded.
    #[error("the source deleted bytes {from}..{to} before they were copied, and the hole cannot be recorded: {error}")]
    HoleNotRecorded {
        /// The gap's start (this replica's end).
        from: u64,
        /// The gap's end (the source's earliest offset).
        to: u64,
        /// Why it could not be recorded.
        error: AppendError,
    },
    /// The partition's log cannot be created here (refused at startup, a disk error).
    #[error("cannot create its log: {0}")]
    CannotCreate(LogError),
    /// The source's earliest offset is negative.
    #[error("the source's earliest offset {0} is negative")]
    NegativeEarliest(i64),
    /// The source's earliest offset, or this replica's end, is negative.
    #[error("the source's earliest offset {earliest} or this replica's end {end} is negative")]
    NegativeRange {
        /// The source's earliest offset.
        earliest: i64,
        /// This replica's end.
        end: i64,
    },
    /// The replica's end does not fit a 0.7 offset.
    #[error("its end {0} is past the largest offset")]
    EndPastMax(u64),
    /// The replica's last message is not the source's message at that offset: the two logs
    /// diverged (the source was promoted while this log held messages it never copied, or this
    /// log took writes of its own).
    #[error("its log diverged from the source's: its message at offset {at} (ending at {end}) is not the source's message there{}; nothing more is copied into it. `tributary demote --zookeeper <this cluster> --dry-run` lists what it holds past the source's history; `tributary demote` keeps that in a .diverged file and copies on", match theirs { Some(size) => format!(" (the source holds a {size}-byte message there)"), None => " (no message of the source starts there)".to_string() })]
    Diverged {
        /// Where this replica's last message starts.
        at: u64,
        /// Where it ends (this replica's end).
        end: u64,
        /// The size of the source's message there, when one starts there.
        theirs: Option<u64>,
    },
    /// The replica's last message could not be read (to compare it with the source's).
    #[error("its last message cannot be read: {0}")]
    LastMessage(LogError),
    /// The replica holds more than the source: the source lost data this replica holds.
    #[error("the replica ends at {end}, past the source's end {source_end} (the source does not hold data this replica holds); nothing more is copied into it. `tributary demote --zookeeper <this cluster> --dry-run` lists what it holds past the source's history; `tributary demote` keeps that in a .diverged file and copies on")]
    AheadOfSource {
        /// This replica's end.
        end: i64,
        /// The source's end.
        source_end: i64,
    },
    /// The source refuses the offset though its range seems to hold it.
    #[error("the source refuses offset {offset} (its range is {earliest:?}..{latest:?})")]
    Refused {
        /// The offset asked for.
        offset: i64,
        /// The source's earliest offset, if it said.
        earliest: Option<i64>,
        /// The source's latest offset, if it said.
        latest: Option<i64>,
    },
    /// A source message is larger than `max.message.size` lets this broker take.
    #[error("the message at offset {offset} needs {needed} bytes, more than max.message.size allows ({limit} with its headers)")]
    TooLarge {
        /// The message's offset.
        offset: i64,
        /// Its size.
        needed: usize,
        /// The most a fetch may ask for.
        limit: u32,
    },
    /// The source's data is corrupt there (nothing at or after it was copied).
    #[error("corrupt source data at offset {offset}: {error} (nothing at or after it was copied)")]
    Corrupt {
        /// The first corrupt message's offset.
        offset: i64,
        /// What is wrong with it.
        error: MessageError,
    },
}
