//! Names on disk: partition directories `<topic>-<partition>` and segment files
//! `<20-digit start offset>.kafka`, exactly as Kafka 0.7 lays them out; and Tributary's hole
//! records `<20-digit from>-<20-digit to>.gap` and diverged tails
//! `<20-digit cut>.<20-digit end>.diverged` (0.7 reads only `.kafka` files, so it ignores
//! them).

use std::fmt;

use crate::wire::TopicName;

/// The extension of segment files.
pub const SEGMENT_SUFFIX: &str = ".kafka";
/// The extension of hole records.
pub const GAP_SUFFIX: &str = ".gap";
/// The extension of diverged tails (see [`diverged_file_name`]).
pub const DIVERGED_SUFFIX: &str = ".diverged";
/// Digits in a segment file name.
const SEGMENT_DIGITS: usize = 20;

/// A topic and one of its partitions on this broker.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The topic.
    pub topic: TopicName,
    /// The partition number.
    pub partition: u32,
}

impl TopicPartition {
    /// A topic-partition.
    pub fn new(topic: TopicName, partition: u32) -> Self {
        TopicPartition { topic, partition }
    }

    /// The directory name: `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Parses a directory name, splitting at the **last** `-` (topics may contain `-`).
    pub fn from_dir_name(name: &str) -> Option<Self> {
        let (topic, partition) = name.rsplit_once('-')?;
        if partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let number: u32 = partition.parse().ok()?;
        // Only the canonical spelling: "t-01" is not the directory of partition 1.
        if number.to_string() != partition {
            return None;
        }
        Some(TopicPartition {
            topic: topic.parse().ok()?,
            partition: number,
        })
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// The segment file name for a segment starting at `start`.
pub fn segment_file_name(start: u64) -> String {
    format!("{start:0width$}{SEGMENT_SUFFIX}", width = SEGMENT_DIGITS)
}

/// The start offset encoded in a segment file name, if it is one.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != SEGMENT_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The name of the record of a hole `from..to` in a log (an empty file: the name is the record).
pub fn gap_file_name(from: u64, to: u64) -> String {
    format!(
        "{from:0width$}-{to:0width$}{GAP_SUFFIX}",
        width = SEGMENT_DIGITS
    )
}

/// The hole `from..to` a hole record's file name names, if it is one (and `from < to`).
pub fn parse_gap_file_name(name: &str) -> Option<(u64, u64)> {
    let (from, to) = name.strip_suffix(GAP_SUFFIX)?.split_once('-')?;
    let number = |digits: &str| {
        (digits.len() == SEGMENT_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse::<u64>().ok())
            .flatten()
    };
    let (from, to) = (number(from)?, number(to)?);
    (from < to).then_some((from, to))
}

/// The name of the file holding a log's diverged tail, the bytes `cut..end` moved out of the log
/// when it was cut at `cut` (a demotion): a 0.7 segment whose first entry is at `cut`, so that
/// `dump-log` (which reads the number before the first `.`) lists it at its offsets.
pub fn diverged_file_name(cut: u64, end: u64) -> String {
    format!(
        "{cut:0width$}.{end:0width$}{DIVERGED_SUFFIX}",
        width = SEGMENT_DIGITS
    )
}

/// The range `cut..end` a diverged tail's file name names, if it is one (and `cut < end`).
pub fn parse_diverged_file_name(name: &str) -> Option<(u64, u64)> {
    let (cut, end) = name.strip_suffix(DIVERGED_SUFFIX)?.split_once('.')?;
    let number = |digits: &str| {
        (digits.len() == SEGMENT_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse::<u64>().ok())
            .flatten()
    };
    let (cut, end) = (number(cut)?, number(end)?);
    (cut < end).then_some((cut, end))
}
