//! Compression codecs 0 (none), 1 (gzip) and 2 (snappy), bounded on the way in.
//!
//! Decompression takes a byte limit and stops as soon as the output would pass it, so a small
//! hostile payload cannot make us allocate gigabytes.

use std::fmt;
use std::io::Read;

use flate2::read::{GzEncoder, MultiGzDecoder};
use flate2::Compression;

use super::snappy_java;

/// The codec in bits 0–1 of a magic-1 message's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CompressionCodec {
    /// 0: not compressed.
    None,
    /// 1: a gzip stream (RFC 1952).
    Gzip,
    /// 2: snappy, in the snappy-java stream framing that 0.7.1+ writes.
    Snappy,
}

/// The mask of the codec bits in the attributes byte.
pub const CODEC_MASK: u8 = 0x03;

impl CompressionCodec {
    /// The codec numbered `id` (as in attributes and `compression.codec`), if 0.7 has one.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            0 => Some(CompressionCodec::None),
            1 => Some(CompressionCodec::Gzip),
            2 => Some(CompressionCodec::Snappy),
            _ => None,
        }
    }

    /// The codec's number.
    pub fn id(self) -> u8 {
        match self {
            CompressionCodec::None => 0,
            CompressionCodec::Gzip => 1,
            CompressionCodec::Snappy => 2,
        }
    }

    /// 0.7's name for it, as DumpLogSegments prints it.
    pub fn name(self) -> &'static str {
        match self {
            CompressionCodec::None => "NoCompressionCodec",
            CompressionCodec::Gzip => "GZIPCompressionCodec",
            CompressionCodec::Snappy => "SnappyCompressionCodec",
        }
    }
}

impl fmt::Display for CompressionCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CompressionCodec::None => "uncompressed",
            CompressionCodec::Gzip => "gzip",
            CompressionCodec::Snappy => "snappy",
        })
    }
}

/// Why a payload did not decompress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecompressError {
    /// The bytes are not a valid stream of the codec.
    Corrupt(String),
    /// The output would exceed the limit.
    TooLarge,
}

/// Compresses `data` with `codec` as a 0.7 producer would (gzip stream; snappy-java framing).
pub fn compress(codec: CompressionCodec, data: &[u8]) -> Vec<u8> {
    match codec {
        CompressionCodec::None => data.to_vec(),
        CompressionCodec::Gzip => {
            let mut out = Vec::with_capacity(data.len() / 2 + 32);
            // Reading from a slice-backed encoder cannot fail.
            let read = GzEncoder::new(data, Compression::default()).read_to_end(&mut out);
            debug_assert!(read.is_ok());
            out
        }
        CompressionCodec::Snappy => snappy_java::compress(data),
    }
}

/// Decompresses `data`, refusing output larger than `limit_bytes`.
///
/// Snappy input may be either the snappy-java stream framing (what 0.7.1+ writes) or one raw
/// snappy block (what some third-party clients write); both are accepted.
pub fn decompress(
    codec: CompressionCodec,
    data: &[u8],
    limit_bytes: usize,
) -> Result<Vec<u8>, DecompressError> {
    match codec {
        CompressionCodec::None if data.len() > limit_bytes => Err(DecompressError::TooLarge),
        CompressionCodec::None => Ok(data.to_vec()),
        CompressionCodec::Gzip => gunzip(data, limit_bytes),
        CompressionCodec::Snappy => snappy_java::decompress(data, limit_bytes),
    }
}

fn gunzip(data: &[u8], limit_bytes: usize) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    let limit = u64::try_from(limit_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    MultiGzDecoder::new(data)
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| DecompressError::Corrupt(e.to_string()))?;
    if out.len() > limit_bytes {
        return Err(DecompressError::TooLarge);
    }
    Ok(out)
}
