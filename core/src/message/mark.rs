//! A top-level message named by where it starts and what it holds: enough to tell whether two
//! logs hold the same message at the same offset without keeping its bytes.

use super::iter::ShallowEntry;
use super::layout::{Magic, LENGTH_BYTES};

/// One top-level entry of a log: its offset, its whole size (length field included) and the
/// header fields that identify its contents (magic, attributes and the payload's CRC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageMark {
    /// Offset of the entry's length field.
    pub offset: u64,
    /// Bytes of the entry, its length field included.
    pub size: u64,
    /// The format version.
    pub magic: u8,
    /// The attributes byte (0 for magic 0).
    pub attributes: u8,
    /// The payload's CRC as stored.
    pub crc: u32,
}

impl MessageMark {
    /// The mark of a parsed entry (`None` for a negative offset, which no log holds).
    pub fn of(entry: &ShallowEntry<'_>) -> Option<Self> {
        let offset = u64::try_from(entry.offset).ok()?;
        let next = u64::try_from(entry.next_offset).ok()?;
        debug_assert!(next > offset + LENGTH_BYTES as u64, "an entry has a body");
        Some(MessageMark {
            offset,
            size: next - offset,
            magic: match entry.message.magic {
                Magic::V0 => 0,
                Magic::V1 => 1,
            },
            attributes: entry.message.attributes,
            crc: entry.message.crc,
        })
    }

    /// Where the entry after it starts.
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::message::{CompressionCodec, MessageSetBuilder, ShallowIter};

    #[test]
    fn a_mark_names_its_entry_and_tells_equal_sizes_apart_by_contents() {
        let mut b = MessageSetBuilder::new();
        b.push(b"aaaa".to_vec());
        b.push(b"bbbb".to_vec());
        let set = b.build(CompressionCodec::None);
        let marks: Vec<MessageMark> = ShallowIter::new(&set, 100)
            .map(|e| MessageMark::of(&e.unwrap()).unwrap())
            .collect();
        assert_eq!(marks[0].offset, 100);
        assert_eq!(marks[0].end(), marks[1].offset);
        assert_eq!(marks[1].end(), 100 + set.len() as u64);
        assert_eq!(marks[0].size, marks[1].size);
        assert_ne!(marks[0].crc, marks[1].crc);
    }
}
