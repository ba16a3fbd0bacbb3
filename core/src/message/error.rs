//! Why a message or message set was refused. Every error names the offset of the entry at fault.

use super::codec::CompressionCodec;

/// A corrupt or unacceptable message, located by the byte offset of its entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// The length field is negative or smaller than the header it must cover.
    #[error("message at offset {offset}: length {length} is below the {minimum}-byte minimum for its header")]
    LengthTooSmall {
        /// Offset of the entry.
        offset: i64,
        /// The length field as stored.
        length: i32,
        /// The smallest valid length.
        minimum: usize,
    },
    /// The first message of a buffer does not fit in it (0.7's InvalidMessageSize: the message is
    /// larger than the fetch size, or the length is corrupt).
    #[error("message at offset {offset}: length {length} exceeds the {available} bytes available (fetch size too small, or corrupt length)")]
    FirstMessageTooLarge {
        /// Offset of the entry.
        offset: i64,
        /// The length field as stored.
        length: i32,
        /// Bytes after the length field.
        available: usize,
    },
    /// The magic byte is neither 0 nor 1.
    #[error("message at offset {offset}: unknown magic byte {magic}")]
    UnknownMagic {
        /// Offset of the entry.
        offset: i64,
        /// The magic byte as stored.
        magic: u8,
    },
    /// The stored CRC does not match the payload.
    #[error("message at offset {offset}: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    CrcMismatch {
        /// Offset of the entry.
        offset: i64,
        /// The CRC as stored.
        stored: u32,
        /// The CRC of the payload.
        computed: u32,
    },
    /// The attributes name a compression codec 0.7 does not have.
    #[error("message at offset {offset}: unknown compression codec {codec}")]
    UnknownCodec {
        /// Offset of the entry.
        offset: i64,
        /// Codec bits as stored.
        codec: u8,
    },
    /// A compressed payload could not be decompressed.
    #[error("message at offset {offset}: {codec} payload does not decompress: {reason}")]
    Decompress {
        /// Offset of the wrapper.
        offset: i64,
        /// The wrapper's codec.
        codec: CompressionCodec,
        /// What the decompressor said.
        reason: String,
    },
    /// A compressed payload expands beyond the configured limit.
    #[error(
        "message at offset {offset}: {codec} payload expands beyond the {limit_bytes}-byte limit"
    )]
    DecompressedTooLarge {
        /// Offset of the wrapper.
        offset: i64,
        /// The wrapper's codec.
        codec: CompressionCodec,
        /// The limit.
        limit_bytes: usize,
    },
    /// The set inside a compressed wrapper is not a whole number of valid messages.
    #[error("message at offset {offset}: compressed message set ends in {trailing} stray bytes")]
    InnerSetTruncated {
        /// Offset of the wrapper.
        offset: i64,
        /// Bytes left that do not form a message.
        trailing: usize,
    },
    /// Compressed wrappers are nested deeper than the limit.
    #[error("message at offset {offset}: compressed messages nested more than {limit} deep")]
    NestingTooDeep {
        /// Offset of the outermost wrapper.
        offset: i64,
        /// The nesting limit.
        limit: usize,
    },
    /// A top-level payload is larger than `max.message.size`.
    #[error(
        "message at offset {offset}: payload of {size} bytes exceeds max.message.size {limit}"
    )]
    MessageTooLarge {
        /// Offset of the entry.
        offset: i64,
        /// Payload bytes.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The set ends in a partial message where a whole set was required (a produce request).
    #[error("message set ends in a partial message of {trailing} bytes at offset {offset}")]
    PartialTail {
        /// Offset where the partial entry starts.
        offset: i64,
        /// Bytes of the partial entry.
        trailing: usize,
    },
}

impl MessageError {
    /// The offset of the entry at fault.
    pub fn offset(&self) -> i64 {
        match self {
            MessageError::LengthTooSmall { offset, .. }
            | MessageError::FirstMessageTooLarge { offset, .. }
            | MessageError::UnknownMagic { offset, .. }
            | MessageError::CrcMismatch { offset, .. }
            | MessageError::UnknownCodec { offset, .. }
            | MessageError::Decompress { offset, .. }
            | MessageError::DecompressedTooLarge { offset, .. }
            | MessageError::InnerSetTruncated { offset, .. }
            | MessageError::NestingTooDeep { offset, .. }
            | MessageError::MessageTooLarge { offset, .. }
            | MessageError::PartialTail { offset, .. } => *offset,
        }
    }
}
