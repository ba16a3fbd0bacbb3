//! The recovery checkpoint: each partition's flushed end, written atomically after the syncs it
//! records. Bytes below a partition's checkpoint were promised durable; recovery validates only
//! what lies past it and treats a failure below it as corruption, not as a torn write.
//!
//! Format (text, so an operator can read it):
//! ```text
//! tributary-recovery-checkpoint 1
//! <topic> <partition> <flushed end>      (one line per partition, sorted)
//! crc <CRC-32 of every byte before this line, 8 hex digits>
//! ```

use std::collections::BTreeMap;
use std::fmt;

use super::names::TopicPartition;

/// The checkpoint's file name inside `log.dir`.
pub const CHECKPOINT_FILE: &str = ".tributary-recovery-checkpoint";
const HEADER: &str = "tributary-recovery-checkpoint 1\n";

/// Encodes partition → flushed end.
pub fn encode(ends: &BTreeMap<TopicPartition, u64>) -> Vec<u8> {
    let mut text = String::from(HEADER);
    for (tp, end) in ends {
        text.push_str(&format!("{} {} {}\n", tp.topic, tp.partition, end));
    }
    let crc = crc32fast::hash(text.as_bytes());
    text.push_str(&format!("crc {crc:08x}\n"));
    text.into_bytes()
}

/// What is damaged in a checkpoint file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointError {
    /// The bytes are not UTF-8 text.
    NotText,
    /// No `crc` line: the file was cut short.
    NoCrcLine,
    /// The `crc` line does not hold 8 hex digits.
    MalformedCrcLine,
    /// The CRC does not match the bytes before it.
    CrcMismatch,
    /// The first line is not this format's header and version.
    UnknownHeader,
    /// A partition line that is not `<topic> <partition> <end>`; holds the line.
    MalformedLine(String),
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointError::NotText => f.write_str("not UTF-8 text"),
            CheckpointError::NoCrcLine => f.write_str("no crc line (truncated?)"),
            CheckpointError::MalformedCrcLine => f.write_str("malformed crc line"),
            CheckpointError::CrcMismatch => f.write_str("crc mismatch"),
            CheckpointError::UnknownHeader => f.write_str("unknown header or version"),
            CheckpointError::MalformedLine(line) => write!(f, "malformed line \"{line}\""),
        }
    }
}

impl std::error::Error for CheckpointError {}

/// Decodes a checkpoint; the error says what is damaged.
pub fn decode(bytes: &[u8]) -> Result<BTreeMap<TopicPartition, u64>, CheckpointError> {
    let text = std::str::from_utf8(bytes).map_err(|_| CheckpointError::NotText)?;
    let body_end = text.rfind("crc ").ok_or(CheckpointError::NoCrcLine)?;
    let (body, crc_line) = text.split_at(body_end);
    let stored = crc_line
        .trim_end()
        .strip_prefix("crc ")
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or(CheckpointError::MalformedCrcLine)?;
    if crc32fast::hash(body.as_bytes()) != stored {
        return Err(CheckpointError::CrcMismatch);
    }
    let entries = body
        .strip_prefix(HEADER)
        .ok_or(CheckpointError::UnknownHeader)?;
    let mut ends = BTreeMap::new();
    for line in entries.lines() {
        let mut fields = line.split(' ');
        let parsed = (|| {
            let topic = fields.next()?.parse().ok()?;
            let partition = fields.next()?.parse().ok()?;
            let end = fields.next()?.parse().ok()?;
            fields
                .next()
                .is_none()
                .then_some((TopicPartition::new(topic, partition), end))
        })();
        let (tp, end) = parsed.ok_or_else(|| CheckpointError::MalformedLine(line.to_string()))?;
        ends.insert(tp, end);
    }
    Ok(ends)
}
