//! The three 0.7 responses (FETCH, MULTIFETCH, OFFSETS) and Tributary's five (ACKED_PRODUCE,
//! CLUSTER_IDENTITY, TOPIC_ORIGINS, and MIRROR_PRODUCE and MIRROR_POSITIONS, whose bodies
//! [`super::mirror`] describes).
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
//! | ACKED_PRODUCE (Tributary) | int16 count, count × {int16 error, int64 offset}, in request order |
//! | CLUSTER_IDENTITY (Tributary) | string id, string name (empty: none); error -1 and both empty for a broker without an identity (no ZooKeeper) |
//! | TOPIC_ORIGINS (Tributary) | string record (the node's bytes after the merge; empty: none); error -1 and empty when it could not be read or written (no ZooKeeper, unreachable, a bad record) |
//!
//! An ACKED_PRODUCE response is sent only once every set appended without error is flushed
//! (durable and visible). Per set: error 0 and the offset its first message got, or an error
//! code and offset -1 (2 InvalidMessage: the set was refused; 3 WrongPartition; -1 Unknown: the
//! partition could not take or flush it). Each set is appended or refused on its own.
#![deny(clippy::indexing_slicing)]

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::{put_string, Reader};
use super::error::DecodeError;
use super::error_code::ErrorCode;
use super::mirror::{self, MirrorPositionsResponse, MirrorProduceResponse};
use super::request::{EncodeError, RequestType};

/// Which request a response answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseKind {
    /// Answers FETCH.
    Fetch,
    /// Answers MULTIFETCH.
    MultiFetch,
    /// Answers OFFSETS.
    Offsets,
    /// Answers ACKED_PRODUCE.
    AckedProduce,
    /// Answers CLUSTER_IDENTITY.
    ClusterIdentity,
    /// Answers TOPIC_ORIGINS.
    TopicOrigins,
    /// Answers MIRROR_PRODUCE.
    MirrorProduce,
    /// Answers MIRROR_POSITIONS.
    MirrorPositions,
}

impl ResponseKind {
    /// The response kind for a request type, or `None` for the produce requests (no response).
    pub fn for_request(kind: RequestType) -> Option<Self> {
        match kind {
            RequestType::Fetch => Some(ResponseKind::Fetch),
            RequestType::MultiFetch => Some(ResponseKind::MultiFetch),
            RequestType::Offsets => Some(ResponseKind::Offsets),
            RequestType::AckedProduce => Some(ResponseKind::AckedProduce),
            RequestType::ClusterIdentity => Some(ResponseKind::ClusterIdentity),
            RequestType::TopicOrigins => Some(ResponseKind::TopicOrigins),
            RequestType::MirrorProduce => Some(ResponseKind::MirrorProduce),
            RequestType::MirrorPositions => Some(ResponseKind::MirrorPositions),
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

/// One set's outcome in an ACKED_PRODUCE response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceAck {
    /// `NoError`, or why the set was not stored.
    pub error: ErrorCode,
    /// The offset of the set's first message; -1 on an error.
    pub offset: i64,
}

/// An ACKED_PRODUCE response: one ack per set, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckedProduceResponse {
    /// The top-level error code (0 unless the request as a whole failed).
    pub error: ErrorCode,
    /// One per set of the request.
    pub acks: Vec<ProduceAck>,
}

/// A CLUSTER_IDENTITY response. The id and name are sent as the broker has them; the caller
/// checks them ([`crate::identity::ClusterId::parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIdentityResponse {
    /// `NoError`, or `Unknown` for a broker that has no identity.
    pub error: ErrorCode,
    /// The cluster's id (empty without one).
    pub id: String,
    /// The cluster's name (empty when it has none).
    pub name: String,
}

/// A TOPIC_ORIGINS response: the topic's origin record as the broker's ZooKeeper holds it after
/// the merge. The caller checks it ([`crate::origin::Origins::decode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicOriginsResponse {
    /// `NoError`, or `Unknown` when the record could not be read or written.
    pub error: ErrorCode,
    /// The record's bytes (empty: the topic has none).
    pub record: Bytes,
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
    /// Answers ACKED_PRODUCE.
    AckedProduce(AckedProduceResponse),
    /// Answers CLUSTER_IDENTITY.
    ClusterIdentity(ClusterIdentityResponse),
    /// Answers TOPIC_ORIGINS.
    TopicOrigins(TopicOriginsResponse),
    /// Answers MIRROR_PRODUCE.
    MirrorProduce(MirrorProduceResponse),
    /// Answers MIRROR_POSITIONS.
    MirrorPositions(MirrorPositionsResponse),
}

/// The error code of a response or block.
const ERROR_BYTES: usize = 2;
/// The size prefix and error code that start every response.
const HEADER_BYTES: usize = 4 + ERROR_BYTES;
/// The fixed part of one MULTIFETCH block: int32 size and int16 error.
const BLOCK_HEADER_BYTES: usize = 4 + ERROR_BYTES;
/// Bytes of one offset in an OFFSETS response.
const OFFSET_BYTES: usize = 8;
/// Bytes of one ack in an ACKED_PRODUCE response: int16 error, int64 offset.
const ACK_BYTES: usize = 2 + 8;

impl Response {
    /// Which request this answers.
    pub fn kind(&self) -> ResponseKind {
        match self {
            Response::Fetch(_) => ResponseKind::Fetch,
            Response::MultiFetch(_) => ResponseKind::MultiFetch,
            Response::Offsets(_) => ResponseKind::Offsets,
            Response::AckedProduce(_) => ResponseKind::AckedProduce,
            Response::ClusterIdentity(_) => ResponseKind::ClusterIdentity,
            Response::TopicOrigins(_) => ResponseKind::TopicOrigins,
            Response::MirrorProduce(_) => ResponseKind::MirrorProduce,
            Response::MirrorPositions(_) => ResponseKind::MirrorPositions,
        }
    }

    /// Decodes a response frame's contents (error + body, without the size prefix) as `kind`.
    /// Message sets are shared with `frame`. Every byte must be accounted for.
    pub fn decode(kind: ResponseKind, frame: &Bytes) -> Result<Response, DecodeError> {
        let mut r = Reader::new(frame);
        let error = ErrorCode::from_code(r.i16("error code")?);
        let response = match kind {
            ResponseKind::Fetch => Response::Fetch(FetchResponse {
                error,
                messages: frame.slice_ref(r.rest()),
            }),
            ResponseKind::MultiFetch => {
                let mut blocks = Vec::new();
                while r.remaining() > 0 {
                    let size = r.len_i32("multifetch block size")?;
                    let mut block = r.sub(size, "multifetch block")?;
                    let error = ErrorCode::from_code(block.i16("multifetch block error code")?);
                    blocks.push(FetchResponse {
                        error,
                        messages: frame.slice_ref(block.rest()),
                    });
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
            ResponseKind::AckedProduce => {
                let count = usize::try_from(r.i16("ack count")?).map_err(|_| {
                    DecodeError::CountInvalid {
                        field: "ack count",
                        count: -1,
                    }
                })?;
                if count.saturating_mul(ACK_BYTES) != r.remaining() {
                    return Err(DecodeError::CountInvalid {
                        field: "ack count",
                        count: count as i64,
                    });
                }
                let mut acks = Vec::with_capacity(count);
                for _ in 0..count {
                    let error = ErrorCode::from_code(r.i16("ack error code")?);
                    acks.push(ProduceAck {
                        error,
                        offset: r.i64("ack offset")?,
                    });
                }
                Response::AckedProduce(AckedProduceResponse { error, acks })
            }
            ResponseKind::ClusterIdentity => {
                let text = |bytes: &[u8], field: &'static str| {
                    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::NotUtf8(field))
                };
                let id = text(r.string("cluster id")?, "cluster id")?;
                let name = text(r.string("cluster name")?, "cluster name")?;
                Response::ClusterIdentity(ClusterIdentityResponse { error, id, name })
            }
            ResponseKind::TopicOrigins => {
                let record = frame.slice_ref(r.string("origin record")?);
                Response::TopicOrigins(TopicOriginsResponse { error, record })
            }
            ResponseKind::MirrorProduce => Response::MirrorProduce(MirrorProduceResponse {
                error,
                acks: mirror::decode_mirror_acks(&mut r)?,
            }),
            ResponseKind::MirrorPositions => {
                let (sources, translated) = mirror::decode_positions_response(&mut r)?;
                Response::MirrorPositions(MirrorPositionsResponse {
                    error,
                    sources,
                    translated,
                })
            }
        };
        r.expect_end("response")?;
        Ok(response)
    }

    /// The encoded frame as byte chunks to write in order (size prefix included). Message sets
    /// are shared, not copied: the broker writes a FETCH response straight from the bytes read
    /// from the log. This is the only response encoder; [`Response::encode`] and
    /// [`Response::to_bytes`] join its chunks.
    ///
    /// Refuses (nothing encoded) a response whose size, or a block's, does not fit an int32, and
    /// an OFFSETS count that does not fit one.
    pub fn encode_chunks(&self) -> Result<Vec<Bytes>, EncodeError> {
        let size_of = |body: usize| i32::try_from(body).map_err(|_| EncodeError::TooLarge(body));
        match self {
            Response::Fetch(f) => Ok(join_bodies(encode_fetch(f.error, f.messages.clone())?)),
            Response::MultiFetch(m) => {
                let blocks = m.blocks.iter().map(|b| (b.error, b.messages.clone()));
                Ok(join_bodies(encode_multifetch(m.error, blocks.collect())?))
            }
            Response::Offsets(o) => {
                let count = o.offsets.len();
                let count_i32 = i32::try_from(count).map_err(|_| EncodeError::TooLarge(count))?;
                let body = count
                    .checked_mul(OFFSET_BYTES)
                    .and_then(|b| b.checked_add(ERROR_BYTES + 4))
                    .ok_or(EncodeError::TooLarge(count))?;
                let mut out = BytesMut::with_capacity(4 + body);
                out.put_i32(size_of(body)?);
                out.put_i16(o.error.code());
                out.put_i32(count_i32);
                o.offsets.iter().for_each(|offset| out.put_i64(*offset));
                Ok(vec![out.freeze()])
            }
            Response::AckedProduce(a) => {
                let count = a.acks.len();
                let count_i16 =
                    i16::try_from(count).map_err(|_| EncodeError::TooManyEntries(count))?;
                let body = ERROR_BYTES + 2 + count * ACK_BYTES;
                let mut out = BytesMut::with_capacity(4 + body);
                out.put_i32(size_of(body)?);
                out.put_i16(a.error.code());
                out.put_i16(count_i16);
                for ack in &a.acks {
                    out.put_i16(ack.error.code());
                    out.put_i64(ack.offset);
                }
                Ok(vec![out.freeze()])
            }
            Response::ClusterIdentity(c) => {
                let string_len = |s: &str| {
                    i16::try_from(s.len())
                        .map_err(|_| EncodeError::TooLarge(s.len()))
                        .map(|_| s.len())
                };
                let body = ERROR_BYTES + 2 + string_len(&c.id)? + 2 + string_len(&c.name)?;
                let mut out = BytesMut::with_capacity(4 + body);
                out.put_i32(size_of(body)?);
                out.put_i16(c.error.code());
                put_string(&mut out, c.id.as_bytes());
                put_string(&mut out, c.name.as_bytes());
                Ok(vec![out.freeze()])
            }
            Response::TopicOrigins(o) => {
                if i16::try_from(o.record.len()).is_err() {
                    return Err(EncodeError::TooLarge(o.record.len()));
                }
                let body = ERROR_BYTES + 2 + o.record.len();
                let mut out = BytesMut::with_capacity(4 + body);
                out.put_i32(size_of(body)?);
                out.put_i16(o.error.code());
                put_string(&mut out, &o.record);
                Ok(vec![out.freeze()])
            }
            Response::MirrorProduce(m) => {
                encode_with_size(m.error, |out| mirror::encode_mirror_acks(out, &m.acks))
            }
            Response::MirrorPositions(p) => {
                encode_with_size(p.error, |out| mirror::encode_positions_response(out, p))
            }
        }
    }

    /// Appends the whole frame (size prefix included) to `out`.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        for chunk in self.encode_chunks()? {
            out.extend_from_slice(&chunk);
        }
        Ok(())
    }

    /// The encoded frame as fresh bytes.
    pub fn to_bytes(&self) -> Result<Bytes, EncodeError> {
        let mut out = BytesMut::new();
        self.encode(&mut out)?;
        Ok(out.freeze())
    }
}

/// One frame: the size (patched once the body is written), the error code, then `body`.
fn encode_with_size(
    error: ErrorCode,
    body: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
) -> Result<Vec<Bytes>, EncodeError> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    out.put_i16(error.code());
    body(&mut out)?;
    super::request::patch_size(&mut out, 0)?;
    Ok(vec![out.freeze()])
}

/// A message set placed in a FETCH or MULTIFETCH response without being looked into: the
/// encoder needs only its length. Bytes in memory are one; the broker's file ranges, sent
/// without copying, are another.
pub trait MessageBody {
    /// The body's length in bytes.
    fn body_len(&self) -> usize;
}

impl MessageBody for Bytes {
    fn body_len(&self) -> usize {
        self.len()
    }
}

/// One piece of an encoded FETCH or MULTIFETCH response, written in order.
#[derive(Debug)]
pub enum ResponseChunk<D> {
    /// Size prefixes and error codes.
    Header(Bytes),
    /// A message set, written as it is.
    Body(D),
}

/// The header of a response or block: `int32 size (2 + body) | int16 error`.
fn size_and_error(body: usize, error: ErrorCode) -> Result<Bytes, EncodeError> {
    let size = ERROR_BYTES
        .checked_add(body)
        .and_then(|size| i32::try_from(size).ok())
        .ok_or(EncodeError::TooLarge(body))?;
    let mut header = BytesMut::with_capacity(HEADER_BYTES);
    header.put_i32(size);
    header.put_i16(error.code());
    Ok(header.freeze())
}

/// Encodes a FETCH response around `body`. Refuses a body whose size does not fit an int32.
pub fn encode_fetch<D: MessageBody>(
    error: ErrorCode,
    body: D,
) -> Result<Vec<ResponseChunk<D>>, EncodeError> {
    let header = size_and_error(body.body_len(), error)?;
    Ok(vec![
        ResponseChunk::Header(header),
        ResponseChunk::Body(body),
    ])
}

/// Encodes a MULTIFETCH response: one block per `(error, body)`, in order. Refuses (nothing
/// encoded) a response or block whose size does not fit an int32.
pub fn encode_multifetch<D: MessageBody>(
    error: ErrorCode,
    blocks: Vec<(ErrorCode, D)>,
) -> Result<Vec<ResponseChunk<D>>, EncodeError> {
    let body = blocks.iter().try_fold(0usize, |sum, (_, b)| {
        sum.checked_add(BLOCK_HEADER_BYTES)?
            .checked_add(b.body_len())
    });
    let body = body.ok_or(EncodeError::TooLarge(usize::MAX))?;
    let mut chunks = Vec::with_capacity(1 + 2 * blocks.len());
    chunks.push(ResponseChunk::Header(size_and_error(body, error)?));
    for (block_error, block) in blocks {
        chunks.push(ResponseChunk::Header(size_and_error(
            block.body_len(),
            block_error,
        )?));
        chunks.push(ResponseChunk::Body(block));
    }
    Ok(chunks)
}

/// The chunks of a response whose bodies are bytes, as bytes.
fn join_bodies(chunks: Vec<ResponseChunk<Bytes>>) -> Vec<Bytes> {
    chunks
        .into_iter()
        .map(|c| match c {
            ResponseChunk::Header(b) | ResponseChunk::Body(b) => b,
        })
        .collect()
}

/// The header bytes a MULTIFETCH response adds per block, for callers sizing a response.
pub const MULTIFETCH_BLOCK_HEADER_BYTES: usize = BLOCK_HEADER_BYTES;
