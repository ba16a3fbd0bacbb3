//! Kafka 0.7 messages and message sets.
//!
//! - [`Message`]/[`MessageRef`]: one message, magic 0 or 1, CRC-32 of the payload.
//! - [`ShallowIter`]: top-level entries, zero-copy, validated (length bounds, magic, CRC, codec).
//! - [`DeepIter`]: every message, compressed wrappers opened with bounded decompression.
//! - [`validate_set`]: the broker's whole-set check before an append.
//! - [`MessageSetBuilder`]: encodes sets as 0.7 producers do, compressed or not.
//! - [`MessageMark`]: a top-level message named by its offset, size and CRC.

mod builder;
mod codec;
mod error;
mod iter;
mod layout;
mod mark;
pub mod snappy_java;
mod validate;

pub use builder::MessageSetBuilder;
pub use codec::{compress, decompress, CompressionCodec, DecompressError, CODEC_MASK};
pub use error::MessageError;
pub use iter::{
    DeepEntry, DeepIter, SetEnd, ShallowEntry, ShallowIter, DECOMPRESSED_BYTES_MAX_DEFAULT,
    NESTING_DEPTH_MAX,
};
pub use layout::{
    Magic, Message, MessageRef, HEADER_BYTES_MAGIC0, HEADER_BYTES_MAGIC1, LENGTH_BYTES,
};
pub use mark::MessageMark;
pub use validate::{validate_set, SetSummary, ValidationLimits};
