//! Whether a replica's log is still a prefix of its source's (sans-IO).
//!
//! Before a replica appends anything to a partition — at the copier's start, after every new
//! connection to the source — it compares the last message it holds with the source's message
//! at the same offset: fetched at that offset, the source's first entry must be the same entry
//! (same size, magic, attributes and payload CRC). Anything else means the two logs diverged
//! (the source was promoted while this log held messages it never copied, or this log took
//! writes of its own), and appending the source's bytes after its own would mix two histories
//! at offsets that no longer mean the same messages: the partition stops instead, naming the
//! offset, until a demotion cuts it back.

use crate::message::{MessageError, MessageMark, ShallowIter};

/// What the source holds at the offset of the replica's last message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prefix {
    /// The same entry: the replica's log is a prefix of the source's; what the block holds
    /// after it starts at byte `rest` (at the replica's end).
    Holds {
        /// Where the bytes after the compared entry start in the block.
        rest: usize,
    },
    /// Another entry, or no entry boundary there: the logs diverged at or before the
    /// replica's last message.
    Differs {
        /// The source's entry at that offset, when one starts there.
        theirs: Option<MessageMark>,
    },
    /// Nothing there: the source ends at the offset of the replica's last message, which it
    /// does not hold.
    SourceEnds,
    /// The block is too short to hold the entry whole (fetch it with at least `needed` bytes).
    Short {
        /// Bytes the source's entry needs.
        needed: usize,
    },
}

/// Compares `ours` (the replica's last message) with `block`, fetched from the source at
/// `ours.offset`.
pub fn check_prefix(ours: &MessageMark, block: &[u8]) -> Prefix {
    let Ok(offset) = i64::try_from(ours.offset) else {
        return Prefix::Differs { theirs: None };
    };
    match ShallowIter::new(block, offset).next() {
        None if block.is_empty() => Prefix::SourceEnds,
        None => Prefix::Short {
            needed: usize::try_from(ours.size).unwrap_or(usize::MAX),
        },
        Some(Ok(entry)) => match MessageMark::of(&entry) {
            Some(theirs) if theirs == *ours => Prefix::Holds {
                rest: usize::try_from(ours.size).unwrap_or(usize::MAX),
            },
            theirs => Prefix::Differs { theirs },
        },
        Some(Err(MessageError::FirstMessageTooLarge { length, .. }))
            if u64::try_from(length).is_ok_and(|l| l + 4 == ours.size) =>
        {
            Prefix::Short {
                needed: usize::try_from(ours.size).unwrap_or(usize::MAX),
            }
        }
        Some(Err(_)) => Prefix::Differs { theirs: None },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::indexing_slicing)]
    use super::*;
    use crate::message::{CompressionCodec, MessageSetBuilder};

    fn set(payloads: &[&[u8]]) -> Vec<u8> {
        let mut b = MessageSetBuilder::new();
        for p in payloads {
            b.push(p.to_vec());
        }
        b.build(CompressionCodec::None).to_vec()
    }

    fn mark(bytes: &[u8], offset: i64) -> MessageMark {
        let entry = ShallowIter::new(bytes, offset)
            .next()
            .expect("an entry")
            .expect("valid");
        MessageMark::of(&entry).expect("mark")
    }

    #[test]
    fn the_same_entry_holds_and_the_bytes_after_it_follow() {
        let source = set(&[b"mine", b"next"]);
        let ours = mark(&source, 40);
        assert_eq!(
            check_prefix(&ours, &source),
            Prefix::Holds {
                rest: ours.size as usize
            }
        );
    }

    #[test]
    fn an_entry_of_the_same_size_with_other_contents_differs() {
        let ours = mark(&set(&[b"mine"]), 40);
        let theirs_bytes = set(&[b"your"]);
        let theirs = mark(&theirs_bytes, 40);
        assert_eq!(ours.size, theirs.size);
        assert_eq!(
            check_prefix(&ours, &theirs_bytes),
            Prefix::Differs {
                theirs: Some(theirs)
            }
        );
    }

    #[test]
    fn no_boundary_an_empty_answer_and_a_short_block_are_told_apart() {
        let source = set(&[b"a longer message than ours"]);
        let ours = mark(&set(&[b"mine"]), 0);
        assert!(matches!(
            check_prefix(&ours, &source[3..]),
            Prefix::Differs { theirs: None }
        ));
        assert_eq!(check_prefix(&ours, &[]), Prefix::SourceEnds);
        let same = set(&[b"mine"]);
        assert_eq!(
            check_prefix(&ours, &same[..same.len() - 1]),
            Prefix::Short { needed: same.len() }
        );
    }
}
