//! Replica mode's decisions (sans-IO): what of a fetched block a replica appends, how its fetch
//! size grows for a message larger than asked, and which offsets it syncs ([`offset_sync`]).
//!
//! A replica copies a source partition byte for byte: it fetches at its own log end and appends
//! the whole, CRC-valid top-level messages of the answer exactly as they came (compressed
//! wrappers unopened), so every offset it serves holds the source's bytes. It never appends a
//! partial trailing message (the next fetch starts with it) and never anything after a corrupt
//! one.

pub mod demotion;
pub mod offset_sync;
pub mod prefix;

use crate::message::{MessageError, MessageMark, ShallowIter};

/// What to do with one fetched block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// Nothing new at that offset.
    Nothing,
    /// The first `bytes` bytes are whole, valid messages: append them as they are.
    Append {
        /// Length of the prefix to append.
        bytes: usize,
        /// Top-level messages in it.
        messages: u64,
        /// Its last message (what the next prefix check compares).
        last: MessageMark,
    },
    /// The first message does not fit in the size asked: fetch again with at least `needed`
    /// bytes (its whole entry).
    TooSmall {
        /// Bytes the first entry needs.
        needed: usize,
    },
    /// The data at `offset` cannot be copied (corrupt, or an invalid length): the partition
    /// stops; nothing at or after `offset` is appended.
    Corrupt {
        /// Where the bad entry starts.
        offset: i64,
        /// What is wrong.
        error: MessageError,
    },
}

/// Decides what of `block` (fetched at `offset`) a replica appends. Whole valid messages before
/// a corrupt one are still appended: the corruption is reported on the next fetch, which starts
/// at it.
pub fn decide(offset: i64, block: &[u8]) -> Fetched {
    let mut entries = ShallowIter::new(block, offset);
    let mut messages = 0u64;
    let mut error = None;
    let mut last = None;
    for entry in entries.by_ref() {
        match entry {
            Ok(e) => {
                messages += 1;
                last = MessageMark::of(&e);
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let valid = entries.end().valid_bytes;
    if let (true, Some(last)) = (valid > 0, last) {
        return Fetched::Append {
            bytes: valid,
            messages,
            last,
        };
    }
    match error {
        None => Fetched::Nothing,
        Some(MessageError::FirstMessageTooLarge { length, .. }) => Fetched::TooSmall {
            needed: usize::try_from(length)
                .unwrap_or(usize::MAX)
                .saturating_add(crate::message::LENGTH_BYTES),
        },
        Some(error) => Fetched::Corrupt {
            offset: error.offset(),
            error,
        },
    }
}

/// The fetch size for the next request of a partition: `base`, or a first message's whole
/// size when it needs more, never above `limit` (`None`: it cannot be fetched within it).
pub fn fetch_size(base: u32, needed: Option<usize>, limit: u32) -> Option<u32> {
    match needed {
        None => Some(base),
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| *n <= limit)
            .map(|n| n.max(base)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::message::{CompressionCodec, MessageSetBuilder};

    fn set(payloads: &[&[u8]]) -> Vec<u8> {
        let mut b = MessageSetBuilder::new();
        for p in payloads {
            b.push(p.to_vec());
        }
        b.build(CompressionCodec::None).to_vec()
    }

    #[test]
    fn whole_messages_are_appended_and_a_partial_tail_waits() {
        let whole = set(&[b"one", b"two"]);
        let mut block = whole.clone();
        block.extend_from_slice(&set(&[b"three"])[..7]);
        assert!(matches!(
            decide(100, &block),
            Fetched::Append { bytes, messages: 2, last }
                if bytes == whole.len() && last.end() == 100 + whole.len() as u64
        ));
        assert_eq!(decide(100, &[]), Fetched::Nothing);
    }

    #[test]
    fn a_first_message_larger_than_the_fetch_asks_for_its_size() {
        let one = set(&[&[7u8; 500]]);
        assert_eq!(
            decide(0, &one[..100]),
            Fetched::TooSmall { needed: one.len() }
        );
        assert_eq!(fetch_size(1024, Some(one.len()), 1 << 20), Some(1024));
        assert_eq!(
            fetch_size(100, Some(one.len()), 1 << 20),
            Some(one.len() as u32)
        );
        assert_eq!(fetch_size(100, Some(one.len()), 200), None);
    }

    #[test]
    fn nothing_at_or_after_a_corrupt_message_is_appended() {
        let good = set(&[b"good"]);
        let mut bad = set(&[b"bad!"]);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let mut block = good.clone();
        block.extend_from_slice(&bad);
        block.extend_from_slice(&set(&[b"after"]));
        assert!(matches!(
            decide(0, &block),
            Fetched::Append { bytes, messages: 1, .. } if bytes == good.len()
        ));
        let at = good.len() as i64;
        assert!(matches!(
            decide(at, &block[good.len()..]),
            Fetched::Corrupt { offset, .. } if offset == at
        ));
    }
}
