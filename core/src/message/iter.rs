//! Validating iteration over message sets.
//!
//! A message set is a run of entries `int32 length | message`. Offsets are byte positions: an
//! iterator is given the offset of its buffer's first byte, and an entry at offset `o` with length
//! `n` is followed by the next at `o + 4 + n`.
//!
//! Both iterators stop cleanly (no error) at a partial trailing entry, as fetch responses end, and
//! report it through [`ShallowIter::end`]. A first entry that cannot fit at all is an error (0.7's
//! InvalidMessageSize). After an error they yield nothing more.
#![deny(clippy::indexing_slicing)]

use bytes::Bytes;

use super::codec::{decompress, CompressionCodec, DecompressError};
use super::error::MessageError;
use super::layout::{Message, MessageRef, HEADER_BYTES_MAGIC0, LENGTH_BYTES};

/// Default bound on one wrapper's decompressed size: 64 MiB.
pub const DECOMPRESSED_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;
/// How deep compressed wrappers may nest (a mirror that forwards wrappers and compresses again
/// nests one level; more is refused).
pub const NESTING_DEPTH_MAX: usize = 4;

/// A top-level entry: where it starts, where the next starts, and the validated message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShallowEntry<'a> {
    /// Offset of the entry's length field.
    pub offset: i64,
    /// Offset of the next entry (`offset + 4 + length`).
    pub next_offset: i64,
    /// The message, CRC checked.
    pub message: MessageRef<'a>,
}

/// How a buffer ended, once iteration has stopped without error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetEnd {
    /// Bytes of whole, valid entries from the start of the buffer (0.7's `validBytes`).
    pub valid_bytes: usize,
    /// Bytes after them that do not form a whole entry (a partial trailing message).
    pub trailing_bytes: usize,
}

/// Iterates the top-level entries of a set without opening compressed wrappers. Zero-copy.
#[derive(Debug, Clone)]
pub struct ShallowIter<'a> {
    buf: &'a [u8],
    base_offset: i64,
    pos: usize,
    failed: bool,
    /// Whether CRCs are compared (not for bytes already checked: see [`ShallowIter::prechecked`]).
    check_crc: bool,
}

impl<'a> ShallowIter<'a> {
    /// Iterates `buf`, whose first byte is at `base_offset` in the log.
    pub fn new(buf: &'a [u8], base_offset: i64) -> Self {
        ShallowIter {
            buf,
            base_offset,
            pos: 0,
            failed: false,
            check_crc: true,
        }
    }

    /// Iterates `buf` without comparing CRCs: for bytes this process has already iterated with
    /// CRCs checked (the same immutable buffer, e.g. a consumer's chunk its fetcher validated),
    /// or for a caller that compares each entry's CRC itself ([`MessageRef::crc_matches`];
    /// dump-log lists entries past a bad one). Lengths, magic and codec are still checked and
    /// every read is still bounded.
    pub fn prechecked(buf: &'a [u8], base_offset: i64) -> Self {
        ShallowIter {
            check_crc: false,
            ..ShallowIter::new(buf, base_offset)
        }
    }

    /// Valid and trailing bytes so far; final once the iterator has returned `None`.
    pub fn end(&self) -> SetEnd {
        SetEnd {
            valid_bytes: self.pos,
            trailing_bytes: self.buf.len() - self.pos,
        }
    }

    fn offset_at(&self, pos: usize) -> i64 {
        self.base_offset
            .saturating_add(i64::try_from(pos).unwrap_or(i64::MAX))
    }

    fn next_entry(&mut self) -> Result<Option<ShallowEntry<'a>>, MessageError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let Some(length_bytes) = rest.get(..LENGTH_BYTES) else {
            return Ok(None);
        };
        let offset = self.offset_at(self.pos);
        let mut word = [0u8; LENGTH_BYTES];
        word.copy_from_slice(length_bytes);
        let length = i32::from_be_bytes(word);
        let body_len = usize::try_from(length)
            .ok()
            .filter(|len| *len >= HEADER_BYTES_MAGIC0)
            .ok_or(MessageError::LengthTooSmall {
                offset,
                length,
                minimum: HEADER_BYTES_MAGIC0,
            })?;
        let available = rest.len() - LENGTH_BYTES;
        let Some(body) = rest.get(LENGTH_BYTES..LENGTH_BYTES + body_len) else {
            if self.pos == 0 {
                return Err(MessageError::FirstMessageTooLarge {
                    offset,
                    length,
                    available,
                });
            }
            return Ok(None);
        };
        let message = MessageRef::parse_with(body, offset, self.check_crc)?;
        self.pos += LENGTH_BYTES + body_len;
        Ok(Some(ShallowEntry {
            offset,
            next_offset: self.offset_at(self.pos),
            message,
        }))
    }
}

impl<'a> Iterator for ShallowIter<'a> {
    type Item = Result<ShallowEntry<'a>, MessageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.next_entry().transpose();
        self.failed = matches!(item, Some(Err(_)));
        item
    }
}

/// A message from deep iteration: compressed wrappers opened, inner messages yielded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeepEntry {
    /// Offset of the top-level entry this message came from (the wrapper, if compressed).
    pub offset: i64,
    /// Where a consumer resumes after this message: the next top-level entry for an
    /// uncompressed message and for the last message of a wrapper; the wrapper's own offset for
    /// every other inner message (so committing mid-wrapper re-delivers, never skips; 0.7's rule).
    pub next_offset: i64,
    /// The message, CRC checked.
    pub message: Message,
}

/// One decompressed inner set being walked.
#[derive(Debug)]
struct InnerSet {
    data: Bytes,
    pos: usize,
}

/// Iterates every message of a set, opening compressed wrappers (recursively, bounded).
#[derive(Debug)]
pub struct DeepIter {
    buf: Bytes,
    shallow_pos: usize,
    base_offset: i64,
    decompressed_bytes_max: usize,
    /// The top-level wrapper being opened: (offset, next offset).
    wrapper: Option<(i64, i64)>,
    stack: Vec<InnerSet>,
    failed: bool,
    done: Option<SetEnd>,
    /// Whether top-level CRCs are compared (inner messages' always are).
    check_top_crc: bool,
    /// The messages of the open top-level wrapper, every one already checked: a wrapper is
    /// read whole before any of its messages is yielded, so one with a corrupt message inside
    /// yields none (as a replica, which copies wrappers whole, copies none of it).
    opened: std::collections::VecDeque<DeepEntry>,
}

impl DeepIter {
    /// Iterates `buf`, whose first byte is at `base_offset`, bounding each wrapper's
    /// decompressed size by `decompressed_bytes_max`.
    pub fn new(buf: Bytes, base_offset: i64, decompressed_bytes_max: usize) -> Self {
        DeepIter {
            buf,
            shallow_pos: 0,
            base_offset,
            decompressed_bytes_max,
            wrapper: None,
            stack: Vec::new(),
            failed: false,
            done: None,
            check_top_crc: true,
            opened: std::collections::VecDeque::new(),
        }
    }

    /// As [`DeepIter::new`], without comparing the top-level messages' CRCs again: for a buffer
    /// whose top-level messages this process has already checked (see
    /// [`ShallowIter::prechecked`]). The messages inside compressed wrappers are checked as
    /// always: nothing checked them before.
    pub fn prechecked(buf: Bytes, base_offset: i64, decompressed_bytes_max: usize) -> Self {
        DeepIter {
            check_top_crc: false,
            ..DeepIter::new(buf, base_offset, decompressed_bytes_max)
        }
    }

    /// How the top level ended; `None` until iteration has finished without error.
    pub fn end(&self) -> Option<SetEnd> {
        self.done
    }

    fn next_entry(&mut self) -> Result<Option<DeepEntry>, MessageError> {
        loop {
            if let Some(entry) = self.opened.pop_front() {
                return Ok(Some(entry));
            }
            let mut shallow = ShallowIter::new(&self.buf, self.base_offset);
            shallow.check_crc = self.check_top_crc;
            shallow.pos = self.shallow_pos;
            let Some(top) = shallow.next().transpose()? else {
                self.done = Some(shallow.end());
                return Ok(None);
            };
            self.shallow_pos = shallow.pos;
            let codec = top.message.codec();
            if codec == CompressionCodec::None {
                let message = top.message.to_owned_in(&self.buf);
                return Ok(Some(DeepEntry {
                    offset: top.offset,
                    next_offset: top.next_offset,
                    message,
                }));
            }
            let data = self.open(codec, top.message.payload, top.offset)?;
            self.wrapper = Some((top.offset, top.next_offset));
            self.stack.push(InnerSet { data, pos: 0 });
            // The whole wrapper is read and checked before any of it is yielded.
            while let Some(entry) = self.next_inner()? {
                self.opened.push_back(entry);
            }
        }
    }

    fn open(
        &self,
        codec: CompressionCodec,
        payload: &[u8],
        offset: i64,
    ) -> Result<Bytes, MessageError> {
        decompress(codec, payload, self.decompressed_bytes_max)
            .map(Bytes::from)
            .map_err(|e| match e {
                DecompressError::Corrupt(reason) => MessageError::Decompress {
                    offset,
                    codec,
                    reason,
                },
                DecompressError::TooLarge => MessageError::DecompressedTooLarge {
                    offset,
                    codec,
                    limit_bytes: self.decompressed_bytes_max,
                },
            })
    }

    /// The next message from the open wrapper, if any, descending into nested wrappers.
    fn next_inner(&mut self) -> Result<Option<DeepEntry>, MessageError> {
        let Some((wrapper_offset, wrapper_next)) = self.wrapper else {
            return Ok(None);
        };
        while let Some(top) = self.stack.last_mut() {
            let rest = top.data.get(top.pos..).unwrap_or_default();
            if rest.is_empty() {
                self.stack.pop();
                continue;
            }
            let mut inner = ShallowIter::new(rest, wrapper_offset);
            // Each inner entry is read at position 0 of `rest`, so errors carry the wrapper's
            // offset: positions inside a decompressed set are not log offsets.
            let truncated = MessageError::InnerSetTruncated {
                offset: wrapper_offset,
                trailing: rest.len(),
            };
            let entry = match inner.next() {
                Some(Err(MessageError::FirstMessageTooLarge { .. })) | None => {
                    return Err(truncated)
                }
                Some(result) => result?,
            };
            let message = entry.message.to_owned_in(&top.data);
            top.pos += inner.pos;
            let codec = message.codec();
            if codec != CompressionCodec::None {
                if self.stack.len() >= NESTING_DEPTH_MAX {
                    return Err(MessageError::NestingTooDeep {
                        offset: wrapper_offset,
                        limit: NESTING_DEPTH_MAX,
                    });
                }
                let data = self.open(codec, &message.payload, wrapper_offset)?;
                self.stack.push(InnerSet { data, pos: 0 });
                continue;
            }
            let last = self.stack.iter().all(|set| set.pos >= set.data.len());
            let next_offset = if last { wrapper_next } else { wrapper_offset };
            return Ok(Some(DeepEntry {
                offset: wrapper_offset,
                next_offset,
                message,
            }));
        }
        self.wrapper = None;
        Ok(None)
    }
}

impl Iterator for DeepIter {
    type Item = Result<DeepEntry, MessageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.next_entry().transpose();
        self.failed = matches!(item, Some(Err(_)));
        item
    }
}
