//! The three 0.7 responses (FETCH, MULTIFETCH, OFFSETS).
//!
//! Layout: `int32 size | int16 error | body`, `size` counting the error and the body. A response
//! carries no request id; the client knows which request it answers by order on the connection,
//! so decoding needs the [`ResponseKind`].
//!
//! | kind | body after the error code |
//! |---|---|
//! | FETCH | message-set bytes (may end in a partial message) |
//! | MULTIFETCH | per fetch, in request order: int32 block size (2 + n), int16 error, n bytes |
//! | OFFSETS | int32 count, count × int64 offset |
#![deny(clippy::indexing_slicing)]

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::Reader;
use super::error::DecodeError;
use super::error_code::ErrorCode;
use super::request::{patch_size, EncodeError, RequestType};

/// Which request a response answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseKind {
    /// Answers FETCH.
    Fetch,
    /// Answers MULTIFETCH.
    MultiFetch,
    /// Answers OFFSETS.
    Offsets,
}

impl ResponseKind {
    /// The response kind for a request type, or `None` for the produce requests (no response).
    pub fn for_request(kind: RequestType) -> Option<Self> {
        match kind {
            RequestType::Fetch => Some(ResponseKind::Fetch),
            RequestType::MultiFetch => Some(ResponseKind::MultiFetch),
            RequestType::Offsets => Some(ResponseKind::Offsets),
            RequestType::Produce | RequestType::MultiProduce => None,
        }
    }
}

/// A FETCH response, or one block of a MULTIFETCH response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    /// The error code; on an error the message set is empty.
    pub error: ErrorCode,
    /// Message-set bytes, possibly ending in a partial message.
    pub messages: Bytes,
}

/// A MULTIFETCH response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiFetchResponse {
    /// The top-level error code (0.7 always sends 0).
    pub error: ErrorCode,
    /// One block per fetch, in request order.
    pub blocks: Vec<FetchResponse>,
}

/// An OFFSETS response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsResponse {
    /// The error code (0.7 always sends 0).
    pub error: ErrorCode,
    /// Offsets, newest first.
    pub offsets: Vec<i64>,
}

/// A decoded 0.7 response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// Answers FETCH.
    Fetch(FetchResponse),
    /// Answers MULTIFETCH.
    MultiFetch(MultiFetchResponse),
    /// Answers OFFSETS.
    Offsets(OffsetsResponse),
}

/// The fixed part of one MULTIFETCH block: int32 size and int16 error.
const BLOCK_HEADER_BYTES: usize = 4 + 2;
/// Bytes of one offset in an OFFSETS response.
const OFFSET_BYTES: usize = 8;

impl Response {
    /// Which request this answers.
    pub fn kind(&self) -> ResponseKind {
        match self {
            Response::Fetch(_) => ResponseKind::Fetch,
            Response::MultiFetch(_) => ResponseKind::MultiFetch,
            Response::Offsets(_) => ResponseKind::Offsets,
        }
    }

    /// Decodes a response frame's contents (error + body, without the size prefix) as `kind`.
    /// Message sets are shared with `frame`. Every byte must be accounted for.
    pub fn decode(kind: ResponseKind, frame: &Bytes) -> Result<Response, DecodeError> {
        let mut r = Reader::new(frame);
        let error = ErrorCode::from_code(r.i16("error code")?);
        let response = match kind {
            ResponseKind::Fetch => {
                Response::Fetch(FetchResponse { error, messages: frame.slice_ref(r.rest()) })
            }
            ResponseKind::MultiFetch => {
                let mut blocks = Vec::new();
                while r.remaining() > 0 {
                    let size = r.len_i32("multifetch block size")?;
                    let mut block = r.sub(size, "multifetch block")?;
                    let error = ErrorCode::from_code(block.i16("multifetch block error code")?);
                    blocks.push(FetchResponse { error, messages: frame.slice_ref(block.rest()) });
                }
                Response::MultiFetch(MultiFetchResponse { error, blocks })
            }
            ResponseKind::Offsets => {
                let count = r.len_i32("offset count")?;
                if count.saturating_mul(OFFSET_BYTES) != r.remaining() {
                    return Err(DecodeError::CountInvalid {
                        field: "offset count",
                        count: count as i64,
                    });
                }
                let mut offsets = Vec::with_capacity(count);
                for _ in 0..count {
                    offsets.push(r.i64("offset")?);
                }
                Response::Offsets(OffsetsResponse { error, offsets })
            }
        };
        r.expect_end("response")?;
        Ok(response)
    }

    /// Appends the whole frame (size prefix included) to `out`.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let start = out.len();
        out.put_i32(0); // size, patched below
        match self {
            Response::Fetch(f) => {
                out.put_i16(f.error.code());
                out.put_slice(&f.messages);
            }
            Response::MultiFetch(m) => {
                out.put_i16(m.error.code());
                for block in &m.blocks {
                    let size = 2 + block.messages.len();
                    out.put_i32(i32::try_from(size).map_err(|_| EncodeError::TooLarge(size))?);
                    out.put_i16(block.error.code());
                    out.put_slice(&block.messages);
                }
            }
            Response::Offsets(o) => {
                out.put_i16(o.error.code());
                let count = o.offsets.len();
                out.put_i32(i32::try_from(count).map_err(|_| EncodeError::TooLarge(count))?);
                o.offsets.iter().for_each(|offset| out.put_i64(*offset));
            }
        }
        patch_size(out, start)
    }

    /// The encoded frame as fresh bytes.
    pub fn to_bytes(&self) -> Result<Bytes, EncodeError> {
        let mut out = BytesMut::new();
        self.encode(&mut out)?;
        Ok(out.freeze())
    }
}

/// The header bytes a MULTIFETCH response adds per block, for callers sizing a response.
pub const MULTIFETCH_BLOCK_HEADER_BYTES: usize = BLOCK_HEADER_BYTES;
