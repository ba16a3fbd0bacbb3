//! Whole-set validation, as the broker does before an append.
//!
//! Stricter than 0.7 on purpose (see docs/compatibility.md): a set that ends in a partial
//! message is refused whole instead of appended raw (0.7.0) or cut to its valid prefix (0.7.1+),
//! and an oversized message refuses the set instead of being silently dropped (0.7.2).

use bytes::Bytes;

use super::codec::CompressionCodec;
use super::error::MessageError;
use super::iter::{DeepIter, ShallowEntry, ShallowIter, DECOMPRESSED_BYTES_MAX_DEFAULT};

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
    let mut summary = SetSummary {
        bytes: set.len(),
        ..SetSummary::default()
    };
    for entry in shallow.by_ref() {
        let entry = entry?;
        if entry.message.payload.len() > limits.message_bytes_max {
            return Err(MessageError::MessageTooLarge {
                offset: entry.offset,
                size: entry.message.payload.len(),
                limit: limits.message_bytes_max,
            });
        }
        summary.entries += 1;
        summary.messages += match entry.message.codec() {
            CompressionCodec::None => 1,
            // Open only the wrapper, once: its own CRC was checked by the shallow pass.
            _ => count_inner(set, &entry, limits.decompressed_bytes_max)?,
        };
    }
    let end = shallow.end();
    if end.trailing_bytes > 0 {
        return Err(MessageError::PartialTail {
            offset: i64::try_from(end.valid_bytes).unwrap_or(i64::MAX),
            trailing: end.trailing_bytes,
        });
    }
    Ok(summary)
}

/// Deep-validates one compressed wrapper and counts the messages inside it.
fn count_inner(
    set: &Bytes,
    entry: &ShallowEntry<'_>,
    decompressed_bytes_max: usize,
) -> Result<usize, MessageError> {
    let start = usize::try_from(entry.offset).unwrap_or(0);
    let end = usize::try_from(entry.next_offset).unwrap_or(0);
    debug_assert!(
        start < end && end <= set.len(),
        "shallow entry outside its set"
    );
    let wrapper = set.slice(start..end.min(set.len()).max(start));
    let mut count = 0;
    for inner in DeepIter::new(wrapper, entry.offset, decompressed_bytes_max) {
        inner?;
        count += 1;
    }
    Ok(count)
}
