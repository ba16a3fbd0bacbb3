//! The broker's storage: a durable, append-only, segmented log per topic-partition, with Kafka
//! 0.7's on-disk layout (`<log.dir>/<topic>-<partition>/<20-digit offset>.kafka`).
//!
//! The decisions (where to append, when to roll, flush and delete, what recovery truncates)
//! live here; file access goes through [`LogFs`], implemented on the real file system by `bins`
//! and on turmoil's simulated one by `sim`. Time is always an argument (`now_ms`).

// Offsets and lengths read from disk index buffers here: every access is checked (`get`), never
// a panic on a short or corrupt file.
#![deny(clippy::indexing_slicing)]

mod checked;
mod checkpoint;
mod error;
mod fs;
mod manager;
#[cfg(any(test, feature = "fuzzing"))]
mod mem_fs;
mod names;
mod partition;
mod policy;
pub mod positions;
mod recovery;
mod segment;

pub use checkpoint::{decode as decode_checkpoint, encode as encode_checkpoint, CHECKPOINT_FILE};
pub use error::LogError;
pub use fs::{tmp_path, DirEntry, LockError, LogFile, LogFs};
pub use manager::{LogCell, LogManager, OpenReport, CLEAN_SHUTDOWN_FILE, DIR_LOCK_FILE};
#[cfg(any(test, feature = "fuzzing"))]
pub use mem_fs::{MemFile, MemFs};
pub use names::{
    diverged_file_name, gap_file_name, parse_diverged_file_name, parse_gap_file_name,
    parse_segment_file_name, segment_file_name, TopicPartition, DIVERGED_SUFFIX, GAP_SUFFIX,
    SEGMENT_SUFFIX,
};
pub use partition::{
    AppendInfo, FileRange, FlushTicket, Log, MirroredAppend, Served, SourceRange, TailCut,
    ValidatedSet,
};
pub use policy::LogPolicy;
pub use recovery::RecoveryHints;
