//! Whole-set validation, as the broker does before an append.
//!
//! Stricter than 0.7 on purpose (see docs/compatibility.md): a set that ends in a partial
//! message is refused whole instead of appended raw (0.7.0) or cut to its valid prefix (0.7.1+),
//! and an oversized message refuses the set instead of being silently dropped (0.7.2).

use bytes::Bytes;

use super::error::MessageError;
use super::iter::{DeepIter, ShallowIter, DECOMPRESSED_BYTES_MAX_DEFAULT};

/// Limits applied while validating a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidationLimits {
    /// Largest top-level payload (`max.message.size`); for a wrapper, its compressed size.
    pub message_bytes_max: usize,
    /// Largest decompressed size of one wrapper.
    pub decompressed_bytes_max: usize,
}

impl Default for ValidationLimits {
    /// 0.7's `max.message.size` (1,000,000) and [`DECOMPRESSED_BYTES_MAX_DEFAULT`].
    fn default() -> Self {
        ValidationLimits {
            message_bytes_max: 1_000_000,
            decompressed_bytes_max: DECOMPRESSED_BYTES_MAX_DEFAULT,
        }
    }
}

/// What a valid set holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetSummary {
    /// Bytes of the set (all of it: validation refuses partial tails).
    pub bytes: usize,
    /// Top-level entries (wrappers count once).
    pub entries: usize,
    /// Messages counted deep (inner messages of wrappers each count), 0.7's flush counter unit.
    pub messages: usize,
}

/// Validates a complete message set: every entry whole, every CRC (inner ones too) correct,
/// every codec known and decompressible within limits, no top-level payload over the limit.
///
/// `set` is validated as if it started at offset 0; errors name positions within it.
pub fn validate_set(set: &Bytes, limits: ValidationLimits) -> Result<SetSummary, MessageError> {
    let mut shallow = ShallowIter::new(set, 0);
    let mut entries = 0;
    for entry in shallow.by_ref() {
        let entry = entry?;
        if entry.message.payload.len() > limits.message_bytes_max {
            return Err(MessageError::MessageTooLarge {
                offset: entry.offset,
                size: entry.message.payload.len(),
                limit: limits.message_bytes_max,
            });
        }
        entries += 1;
    }
    let end = shallow.end();
    if end.trailing_bytes > 0 {
        return Err(MessageError::PartialTail {
            offset: i64::try_from(end.valid_bytes).unwrap_or(i64::MAX),
            trailing: end.trailing_bytes,
        });
    }
    let mut messages = 0;
    for entry in DeepIter::new(set.clone(), 0, limits.decompressed_bytes_max) {
        entry?;
        messages += 1;
    }
    Ok(SetSummary { bytes: set.len(), entries, messages })
}
