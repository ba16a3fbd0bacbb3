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

/// Decodes a checkpoint; the error says what is damaged.
pub fn decode(bytes: &[u8]) -> Result<BTreeMap<TopicPartition, u64>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    let body_end = text.rfind("crc ").ok_or("no crc line (truncated?)")?;
    let (body, crc_line) = text.split_at(body_end);
    let stored = crc_line
        .trim_end()
        .strip_prefix("crc ")
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or("malformed crc line")?;
    if crc32fast::hash(body.as_bytes()) != stored {
        return Err("crc mismatch".into());
    }
    let entries = body
        .strip_prefix(HEADER)
        .ok_or("unknown header or version")?;
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
        let (tp, end) = parsed.ok_or_else(|| format!("malformed line \"{line}\""))?;
        ends.insert(tp, end);
    }
    Ok(ends)
}
