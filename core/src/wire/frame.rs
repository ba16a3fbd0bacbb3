//! Incremental frame decoding over a growing byte buffer.
//!
//! Call order, for a connection's read loop:
//! 1. read whatever the socket has into a `BytesMut`;
//! 2. call [`RequestDecoder::decode`] until it returns `Ok(None)` ("need more bytes");
//! 3. on `Err`, close the connection: the peer broke the protocol and the stream cannot be
//!    resynchronised (0.7 has no frame marker).
//!
//! The size prefix is checked against the limit as soon as its 4 bytes arrive, so a peer that
//! declares a 2 GiB frame is refused before anything is reserved for it.
#![deny(clippy::indexing_slicing)]

use bytes::{Buf, Bytes, BytesMut};

use super::error::DecodeError;
use super::request::Request;
use super::response::{Response, ResponseKind};

/// Bytes of the int32 size prefix.
pub const SIZE_PREFIX_BYTES: usize = 4;
/// Bytes of the int16 after the size (request type or error code).
const HEADER_BYTES: usize = 2;

/// What [`split_frame`] found at the front of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameStatus {
    /// A complete frame (without its size prefix), removed from the buffer.
    Frame(Bytes),
    /// Not enough bytes yet; `total_bytes` is what the whole frame needs once the size is known.
    Incomplete {
        /// Bytes the complete frame (prefix included) will occupy, when the prefix has arrived.
        total_bytes: Option<usize>,
    },
}

/// Splits one size-prefixed frame off the front of `buf`, or says how much more is needed.
///
/// Refuses sizes below the 2-byte header and above `frame_bytes_max` without consuming anything.
pub fn split_frame(buf: &mut BytesMut, frame_bytes_max: usize) -> Result<FrameStatus, DecodeError> {
    let Some(prefix) = buf.get(..SIZE_PREFIX_BYTES) else {
        return Ok(FrameStatus::Incomplete { total_bytes: None });
    };
    let mut size_bytes = [0u8; SIZE_PREFIX_BYTES];
    size_bytes.copy_from_slice(prefix);
    let declared = i32::from_be_bytes(size_bytes);
    let size = usize::try_from(declared)
        .ok()
        .filter(|size| *size >= HEADER_BYTES)
        .ok_or(DecodeError::FrameSizeInvalid {
            declared,
            minimum: HEADER_BYTES,
        })?;
    if size > frame_bytes_max {
        return Err(DecodeError::FrameTooLarge {
            declared,
            max: frame_bytes_max,
        });
    }
    let total = SIZE_PREFIX_BYTES + size;
    if buf.len() < total {
        return Ok(FrameStatus::Incomplete {
            total_bytes: Some(total),
        });
    }
    buf.advance(SIZE_PREFIX_BYTES);
    Ok(FrameStatus::Frame(buf.split_to(size).freeze()))
}

/// Decodes requests from a connection's byte stream (the broker side).
#[derive(Debug, Clone)]
pub struct RequestDecoder {
    frame_bytes_max: usize,
}

impl RequestDecoder {
    /// A decoder refusing frames larger than `frame_bytes_max` (`max.socket.request.bytes`;
    /// a limit below the 2-byte header refuses every frame, as it must).
    pub fn new(frame_bytes_max: usize) -> Self {
        RequestDecoder { frame_bytes_max }
    }

    /// The next complete request, `Ok(None)` if more bytes are needed, or the reason the stream
    /// is broken. A decoded frame is removed from `buf`; nothing is removed on `Ok(None)`.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Request>, DecodeError> {
        match split_frame(buf, self.frame_bytes_max)? {
            FrameStatus::Frame(frame) => Request::decode(&frame).map(Some),
            FrameStatus::Incomplete { .. } => Ok(None),
        }
    }

    /// The largest frame this decoder accepts.
    pub fn frame_bytes_max(&self) -> usize {
        self.frame_bytes_max
    }
}

/// Decodes responses from a connection's byte stream (the client side).
#[derive(Debug, Clone)]
pub struct ResponseDecoder {
    frame_bytes_max: usize,
}

impl ResponseDecoder {
    /// A decoder refusing response frames larger than `frame_bytes_max`.
    pub fn new(frame_bytes_max: usize) -> Self {
        ResponseDecoder { frame_bytes_max }
    }

    /// The next complete response, read as `kind`, or `Ok(None)` if more bytes are needed.
    pub fn decode(
        &self,
        kind: ResponseKind,
        buf: &mut BytesMut,
    ) -> Result<Option<Response>, DecodeError> {
        match split_frame(buf, self.frame_bytes_max)? {
            FrameStatus::Frame(frame) => Response::decode(kind, &frame).map(Some),
            FrameStatus::Incomplete { .. } => Ok(None),
        }
    }
}
