//! The snappy-java 1.0.4.1 stream framing that Kafka 0.7.1+ uses for codec 2.
//!
//! Layout: an 8-byte magic `82 'S' 'N' 'A' 'P' 'P' 'Y' 00`, int32 version (1), int32 minimum
//! compatible version (1), then blocks of `int32 compressed length | raw snappy block`. We write
//! blocks of at most [`BLOCK_INPUT_BYTES`] of input (snappy-java's default); we read any block
//! size. Input without the magic is taken as one raw snappy block (see docs/compatibility.md).
#![deny(clippy::indexing_slicing)]

use super::codec::DecompressError;

/// The stream header magic.
pub const MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Header: magic, int32 version, int32 compatible version.
const HEADER_BYTES: usize = MAGIC.len() + 4 + 4;
/// Uncompressed bytes per block written.
pub const BLOCK_INPUT_BYTES: usize = 32 * 1024;
const VERSION: i32 = 1;
const COMPATIBLE_VERSION: i32 = 1;

/// Compresses `data` into the snappy-java stream framing.
pub fn compress(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + data.len() / 2 + 16);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&COMPATIBLE_VERSION.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for chunk in data.chunks(BLOCK_INPUT_BYTES) {
        let mut block = vec![0u8; snap::raw::max_compress_len(chunk.len())];
        // A chunk of at most 32 KiB always fits the buffer sized by max_compress_len.
        let written = encoder.compress(chunk, &mut block).unwrap_or(0);
        debug_assert!(written > 0);
        block.truncate(written);
        let len = i32::try_from(block.len()).unwrap_or(i32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&block);
    }
    out
}

/// Decompresses framed or raw snappy, refusing output beyond `limit_bytes`.
pub fn decompress(data: &[u8], limit_bytes: usize) -> Result<Vec<u8>, DecompressError> {
    match data.strip_prefix(&MAGIC[..]) {
        Some(after_magic) => decompress_framed(after_magic, limit_bytes),
        None => {
            let mut out = Vec::new();
            decompress_block(data, limit_bytes, &mut out)?;
            Ok(out)
        }
    }
}

fn decompress_framed(after_magic: &[u8], limit_bytes: usize) -> Result<Vec<u8>, DecompressError> {
    let (versions, mut rest) = split(after_magic, 8, "stream header")?;
    let compatible = i32_at(versions.get(4..).unwrap_or_default());
    if compatible > VERSION {
        return Err(DecompressError::Corrupt(format!(
            "snappy-java stream needs reader version {compatible}; this reader is version {VERSION}"
        )));
    }
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (len_bytes, after_len) = split(rest, 4, "block length")?;
        let len = usize::try_from(i32_at(len_bytes))
            .map_err(|_| DecompressError::Corrupt("negative snappy block length".into()))?;
        let (block, after_block) = split(after_len, len, "block")?;
        decompress_block(block, limit_bytes, &mut out)?;
        rest = after_block;
    }
    Ok(out)
}

/// Appends one raw snappy block's output to `out`, keeping `out` within `limit_bytes`.
fn decompress_block(
    block: &[u8],
    limit_bytes: usize,
    out: &mut Vec<u8>,
) -> Result<(), DecompressError> {
    let len = snap::raw::decompress_len(block)
        .map_err(|e| DecompressError::Corrupt(format!("snappy: {e}")))?;
    if out.len().saturating_add(len) > limit_bytes {
        return Err(DecompressError::TooLarge);
    }
    let start = out.len();
    out.resize(start + len, 0);
    let target = out.get_mut(start..).unwrap_or_default();
    snap::raw::Decoder::new()
        .decompress(block, target)
        .map_err(|e| DecompressError::Corrupt(format!("snappy: {e}")))?;
    Ok(())
}

fn split<'a>(
    data: &'a [u8],
    len: usize,
    what: &str,
) -> Result<(&'a [u8], &'a [u8]), DecompressError> {
    if data.len() < len {
        return Err(DecompressError::Corrupt(format!(
            "snappy-java {what} truncated: needs {len} bytes, {} left",
            data.len()
        )));
    }
    Ok(data.split_at(len))
}

fn i32_at(bytes: &[u8]) -> i32 {
    let mut word = [0u8; 4];
    if let Some(src) = bytes.get(..4) {
        word.copy_from_slice(src);
    }
    i32::from_be_bytes(word)
}
