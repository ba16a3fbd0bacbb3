//! One message: its exact 0.7 byte layout, parsing with validation, and encoding.
//!
//! | field | magic 0 | magic 1 |
//! |---|---|---|
//! | int32 length (bytes after it) | 1+4+N | 1+1+4+N |
//! | int8 magic | 0 | 1 |
//! | int8 attributes (bits 0–1: codec) | absent | present |
//! | uint32 CRC-32 of the payload only | yes | yes |
//! | payload | N bytes | N bytes |
#![deny(clippy::indexing_slicing)]

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::{CompressionCodec, CODEC_MASK};
use super::error::MessageError;

/// Bytes of the int32 length before every entry.
pub const LENGTH_BYTES: usize = 4;
/// Header after the length of a magic-0 message: magic + CRC.
pub const HEADER_BYTES_MAGIC0: usize = 1 + 4;
/// Header after the length of a magic-1 message: magic + attributes + CRC.
pub const HEADER_BYTES_MAGIC1: usize = 1 + 1 + 4;

/// The message format version byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Magic {
    /// 0: no attributes byte; always uncompressed (brod, node-kafka).
    V0,
    /// 1: attributes byte carries the codec (the Scala producer).
    V1,
}

impl Magic {
    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        match self {
            Magic::V0 => 0,
            Magic::V1 => 1,
        }
    }

    /// Header bytes after the length field.
    pub fn header_bytes(self) -> usize {
        match self {
            Magic::V0 => HEADER_BYTES_MAGIC0,
            Magic::V1 => HEADER_BYTES_MAGIC1,
        }
    }
}

/// A validated message borrowed from a buffer: magic known, CRC checked, codec known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef<'a> {
    /// The format version.
    pub magic: Magic,
    /// The attributes byte (0 for magic 0).
    pub attributes: u8,
    /// The stored CRC, equal to the CRC of `payload` when parsed with the CRC checked.
    pub crc: u32,
    /// The payload (for a compressed message, the compressed inner set).
    pub payload: &'a [u8],
}

impl<'a> MessageRef<'a> {
    /// Whether the stored CRC is the payload's: always, for a message parsed with its CRC
    /// checked; the question to ask of one parsed without (dump-log lists such entries).
    pub fn crc_matches(&self) -> bool {
        crc32fast::hash(self.payload) == self.crc
    }

    /// Parses and validates the bytes after an entry's length field. `offset` names the entry in
    /// errors. Checks: length covers the header, magic is 0 or 1, codec is known, CRC matches.
    pub fn parse(body: &'a [u8], offset: i64) -> Result<Self, MessageError> {
        Self::parse_with(body, offset, true)
    }

    /// As [`MessageRef::parse`], with the CRC compared only when `check_crc` (`false` is for
    /// bytes whose CRC this process has already checked: the same immutable buffer, validated
    /// earlier). Every other check, and every bound, applies either way.
    pub fn parse_with(body: &'a [u8], offset: i64, check_crc: bool) -> Result<Self, MessageError> {
        let (magic, header) = match body.first() {
            Some(0) => (Magic::V0, HEADER_BYTES_MAGIC0),
            Some(1) => (Magic::V1, HEADER_BYTES_MAGIC1),
            Some(&magic) => return Err(MessageError::UnknownMagic { offset, magic }),
            None => return Err(too_small(offset, 0, HEADER_BYTES_MAGIC0)),
        };
        let (head, payload) = match (body.get(..header), body.get(header..)) {
            (Some(head), Some(payload)) => (head, payload),
            _ => return Err(too_small(offset, body.len(), header)),
        };
        let attributes = if magic == Magic::V1 {
            head.get(1).copied().unwrap_or(0)
        } else {
            0
        };
        let mut crc_bytes = [0u8; 4];
        crc_bytes.copy_from_slice(head.get(header - 4..).unwrap_or(&[0; 4]));
        let stored = u32::from_be_bytes(crc_bytes);
        let computed = if check_crc {
            crc32fast::hash(payload)
        } else {
            stored
        };
        if stored != computed {
            return Err(MessageError::CrcMismatch {
                offset,
                stored,
                computed,
            });
        }
        let message = MessageRef {
            magic,
            attributes,
            crc: stored,
            payload,
        };
        if CompressionCodec::from_id(attributes & CODEC_MASK).is_none() {
            return Err(MessageError::UnknownCodec {
                offset,
                codec: attributes & CODEC_MASK,
            });
        }
        Ok(message)
    }

    /// The compression codec (always `None` for magic 0).
    pub fn codec(&self) -> CompressionCodec {
        codec_of(self.magic, self.attributes)
    }

    /// Bytes of the whole entry, length field included.
    pub fn entry_bytes(&self) -> usize {
        LENGTH_BYTES + self.magic.header_bytes() + self.payload.len()
    }

    /// An owned copy sharing `owner`'s allocation when `payload` lies inside it.
    pub fn to_owned_in(&self, owner: &Bytes) -> Message {
        let payload = if owner.as_ptr_range().contains(&self.payload.as_ptr()) {
            owner.slice_ref(self.payload)
        } else {
            Bytes::copy_from_slice(self.payload)
        };
        Message {
            magic: self.magic,
            attributes: self.attributes,
            crc: self.crc,
            payload,
        }
    }
}

/// The codec a message's magic and attributes name. Magic 0 is always uncompressed; unknown
/// codec bits (refused by [`MessageRef::parse`]) read as uncompressed.
fn codec_of(magic: Magic, attributes: u8) -> CompressionCodec {
    match magic {
        Magic::V0 => CompressionCodec::None,
        Magic::V1 => {
            CompressionCodec::from_id(attributes & CODEC_MASK).unwrap_or(CompressionCodec::None)
        }
    }
}

fn too_small(offset: i64, body_len: usize, minimum: usize) -> MessageError {
    MessageError::LengthTooSmall {
        offset,
        length: i32::try_from(body_len).unwrap_or(i32::MAX),
        minimum,
    }
}

/// An owned message, as yielded by deep iteration and built by producers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The format version.
    pub magic: Magic,
    /// The attributes byte (0 for magic 0).
    pub attributes: u8,
    /// The CRC of `payload`.
    pub crc: u32,
    /// The payload.
    pub payload: Bytes,
}

impl Message {
    /// A magic-1, uncompressed message, as the Scala producer writes.
    pub fn new(payload: impl Into<Bytes>) -> Self {
        Self::with_codec(Magic::V1, CompressionCodec::None, payload)
    }

    /// A magic-1, uncompressed message whose payload's CRC the caller already has, from a read
    /// that checked it against these very bytes (a mirror copying a source message): it is not
    /// computed again. Debug builds check it.
    pub fn with_checked_crc(payload: Bytes, crc: u32) -> Self {
        debug_assert_eq!(
            crc32fast::hash(&payload),
            crc,
            "the CRC given is not the payload's"
        );
        Message {
            magic: Magic::V1,
            attributes: CompressionCodec::None.id(),
            crc,
            payload,
        }
    }

    /// A message of the given magic and codec. Magic 0 cannot carry a codec: asking for one is a
    /// bug in the caller, so it is asserted.
    pub fn with_codec(magic: Magic, codec: CompressionCodec, payload: impl Into<Bytes>) -> Self {
        assert!(
            magic == Magic::V1 || codec == CompressionCodec::None,
            "magic 0 messages cannot be compressed"
        );
        let payload = payload.into();
        let attributes = if magic == Magic::V1 { codec.id() } else { 0 };
        Message {
            magic,
            attributes,
            crc: crc32fast::hash(&payload),
            payload,
        }
    }

    /// The compression codec.
    pub fn codec(&self) -> CompressionCodec {
        codec_of(self.magic, self.attributes)
    }

    /// Bytes of the whole entry, length field included.
    pub fn entry_bytes(&self) -> usize {
        LENGTH_BYTES + self.magic.header_bytes() + self.payload.len()
    }

    /// Appends the entry (length field included) to `out`, exactly as 0.7 lays it out.
    pub fn encode(&self, out: &mut BytesMut) {
        let length = self.magic.header_bytes() + self.payload.len();
        let length = i32::try_from(length);
        debug_assert!(length.is_ok(), "message too large for an int32 length");
        out.reserve(self.entry_bytes());
        out.put_i32(length.unwrap_or(i32::MAX));
        out.put_u8(self.magic.byte());
        if self.magic == Magic::V1 {
            out.put_u8(self.attributes);
        }
        out.put_u32(self.crc);
        out.put_slice(&self.payload);
    }
}
