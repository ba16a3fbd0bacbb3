//! The five 0.7 requests, decoded from and encoded to their exact byte layout.
//!
//! Layout (all big-endian): `int32 size | int16 type | body`, where `size` counts the type and
//! the body. Bodies:
//!
//! | type | body |
//! |---|---|
//! | 0 PRODUCE | topic, int32 partition, int32 set size, message set |
//! | 1 FETCH | topic, int32 partition, int64 offset, int32 max bytes |
//! | 2 MULTIFETCH | int16 count, count × FETCH body |
//! | 3 MULTIPRODUCE | int16 count, count × PRODUCE body |
//! | 4 OFFSETS | topic, int32 partition, int64 time, int32 max offsets |
//! | 100 ACKED_PRODUCE (Tributary) | int16 count, count × PRODUCE body |
//! | 101 CLUSTER_IDENTITY (Tributary) | empty |
//! | 102 TOPIC_ORIGINS (Tributary) | topic, string record to merge (empty: only read) |
//! | 103 MIRROR_PRODUCE, 104 MIRROR_POSITIONS (Tributary) | see [`super::mirror`] |
//!
//! ACKED_PRODUCE is Tributary's extension: MULTIPRODUCE's body, answered (see
//! [`super::response`]) once every appended set is flushed, so a producer knows its data is
//! durable. A 0.7 broker closes the connection on it (unknown request type), which a producer
//! detects. CLUSTER_IDENTITY asks a broker which cluster it belongs to (its identity in its
//! ZooKeeper, see [`crate::identity`]), so a mirror told only a `broker.list` can tell whether
//! those brokers are its source's; a 0.7 broker closes the connection on it too. TOPIC_ORIGINS
//! reads a topic's origin record in the broker's cluster ([`crate::origin`]) and merges routes
//! into it, so such a mirror can record where the topics it copies came from.
//!
//! A topic is an int16 length and that many bytes. Message sets are carried as opaque bytes here;
//! the broker validates them with [`crate::message`] before appending.
#![deny(clippy::indexing_slicing)]

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::{put_string, Reader};
use super::error::DecodeError;
use super::mirror::{
    self, MirrorPositionsRequest, MirrorSet, MIRROR_POSITIONS_ID, MIRROR_PRODUCE_ID,
};
use super::topic::TopicName;

/// The request type id, the int16 after the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RequestType {
    /// 0: append a message set; no response.
    Produce,
    /// 1: read from one partition.
    Fetch,
    /// 2: read from several partitions in one request.
    MultiFetch,
    /// 3: append to several partitions in one request; no response.
    MultiProduce,
    /// 4: list offsets before a time.
    Offsets,
    /// 100 (Tributary): append to several partitions, answered once the data is durable.
    AckedProduce,
    /// 101 (Tributary): which cluster the broker belongs to.
    ClusterIdentity,
    /// 102 (Tributary): read, and merge routes into, a topic's origin record.
    TopicOrigins,
    /// 103 (Tributary): append mirrored sets at most once each, answered once durable.
    MirrorProduce,
    /// 104 (Tributary): where a mirror partition's copy of each source partition reaches.
    MirrorPositions,
}

impl RequestType {
    /// The id on the wire.
    pub fn id(self) -> i16 {
        match self {
            RequestType::Produce => 0,
            RequestType::Fetch => 1,
            RequestType::MultiFetch => 2,
            RequestType::MultiProduce => 3,
            RequestType::Offsets => 4,
            RequestType::AckedProduce => ACKED_PRODUCE_ID,
            RequestType::ClusterIdentity => CLUSTER_IDENTITY_ID,
            RequestType::TopicOrigins => TOPIC_ORIGINS_ID,
            RequestType::MirrorProduce => MIRROR_PRODUCE_ID,
            RequestType::MirrorPositions => MIRROR_POSITIONS_ID,
        }
    }

    /// The type for a wire id, or `UnknownRequestType`.
    pub fn from_id(id: i16) -> Result<Self, DecodeError> {
        match id {
            0 => Ok(RequestType::Produce),
            1 => Ok(RequestType::Fetch),
            2 => Ok(RequestType::MultiFetch),
            3 => Ok(RequestType::MultiProduce),
            4 => Ok(RequestType::Offsets),
            ACKED_PRODUCE_ID => Ok(RequestType::AckedProduce),
            CLUSTER_IDENTITY_ID => Ok(RequestType::ClusterIdentity),
            TOPIC_ORIGINS_ID => Ok(RequestType::TopicOrigins),
            MIRROR_PRODUCE_ID => Ok(RequestType::MirrorProduce),
            MIRROR_POSITIONS_ID => Ok(RequestType::MirrorPositions),
            other => Err(DecodeError::UnknownRequestType(other)),
        }
    }

    /// Whether the broker answers this request (PRODUCE and MULTIPRODUCE get no response;
    /// ACKED_PRODUCE does, once the data is durable).
    pub fn has_response(self) -> bool {
        !matches!(self, RequestType::Produce | RequestType::MultiProduce)
    }
}

/// The wire id of ACKED_PRODUCE: far from 0.7's 0–4, so no 0.7 peer mistakes it for its own.
pub const ACKED_PRODUCE_ID: i16 = 100;
/// The wire id of CLUSTER_IDENTITY (Tributary).
pub const CLUSTER_IDENTITY_ID: i16 = 101;
/// The wire id of TOPIC_ORIGINS (Tributary).
pub const TOPIC_ORIGINS_ID: i16 = 102;

/// One partition's worth of a PRODUCE or MULTIPRODUCE. `partition == -1` asks the broker to pick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRequest {
    /// The topic appended to.
    pub topic: TopicName,
    /// The partition, or -1 for "broker picks".
    pub partition: i32,
    /// The message set, as sent (not yet validated).
    pub messages: Bytes,
}

/// One partition's worth of a FETCH or MULTIFETCH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The topic read.
    pub topic: TopicName,
    /// The partition read.
    pub partition: i32,
    /// The byte offset to read from.
    pub offset: i64,
    /// The most bytes to return.
    pub max_bytes: i32,
}

/// An OFFSETS request: offsets before `time` (-1 latest, -2 earliest, else ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsRequest {
    /// The topic asked about.
    pub topic: TopicName,
    /// The partition asked about.
    pub partition: i32,
    /// -1 latest, -2 earliest, or a time in ms since the epoch.
    pub time: i64,
    /// The most offsets to return.
    pub max_offsets: i32,
}

/// A TOPIC_ORIGINS request: the topic's origin record, after merging `merge` into it (empty:
/// read only). The record is carried as the node's bytes; the broker checks them
/// ([`crate::origin::Origins::decode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicOriginsRequest {
    /// The topic, by its name in the broker's cluster.
    pub topic: TopicName,
    /// The record to merge, as a node's bytes; empty to only read.
    pub merge: Bytes,
}

/// A decoded 0.7 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// PRODUCE (0).
    Produce(ProduceRequest),
    /// FETCH (1).
    Fetch(FetchRequest),
    /// MULTIFETCH (2).
    MultiFetch(Vec<FetchRequest>),
    /// MULTIPRODUCE (3).
    MultiProduce(Vec<ProduceRequest>),
    /// OFFSETS (4).
    Offsets(OffsetsRequest),
    /// ACKED_PRODUCE (100, Tributary): MULTIPRODUCE with a response once durable.
    AckedProduce(Vec<ProduceRequest>),
    /// CLUSTER_IDENTITY (101, Tributary): which cluster the broker belongs to.
    ClusterIdentity,
    /// TOPIC_ORIGINS (102, Tributary): a topic's origin record, read or merged into.
    TopicOrigins(TopicOriginsRequest),
    /// MIRROR_PRODUCE (103, Tributary): mirrored sets, each with the source messages it holds.
    MirrorProduce(Vec<MirrorSet>),
    /// MIRROR_POSITIONS (104, Tributary): a mirror partition's positions and translations.
    MirrorPositions(MirrorPositionsRequest),
}

/// Why a request could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A MULTIFETCH or MULTIPRODUCE has more entries than an int16 count holds.
    #[error("{0} entries do not fit in a 0.7 int16 count (at most 32767)")]
    TooManyEntries(usize),
    /// The encoded frame would exceed what an int32 size can describe.
    #[error("request of {0} bytes is too large for a 0.7 frame")]
    TooLarge(usize),
}

/// The smallest FETCH/OFFSETS body: empty topic excluded, so topic length 1.
const PARTITION_REQUEST_BYTES_MIN: usize = 2 + 1 + 4 + 8 + 4;
/// The smallest PRODUCE body with an empty message set.
const PRODUCE_BYTES_MIN: usize = 2 + 1 + 4 + 4;

impl Request {
    /// The request's type id.
    pub fn request_type(&self) -> RequestType {
        match self {
            Request::Produce(_) => RequestType::Produce,
            Request::Fetch(_) => RequestType::Fetch,
            Request::MultiFetch(_) => RequestType::MultiFetch,
            Request::MultiProduce(_) => RequestType::MultiProduce,
            Request::Offsets(_) => RequestType::Offsets,
            Request::AckedProduce(_) => RequestType::AckedProduce,
            Request::ClusterIdentity => RequestType::ClusterIdentity,
            Request::TopicOrigins(_) => RequestType::TopicOrigins,
            Request::MirrorProduce(_) => RequestType::MirrorProduce,
            Request::MirrorPositions(_) => RequestType::MirrorPositions,
        }
    }

    /// Decodes a frame's contents (type + body, without the size prefix). Message sets are shared
    /// with `frame`, not copied. Every byte of the frame must be accounted for.
    pub fn decode(frame: &Bytes) -> Result<Request, DecodeError> {
        let mut r = Reader::new(frame);
        let kind = RequestType::from_id(r.i16("request type")?)?;
        let request = match kind {
            RequestType::Produce => Request::Produce(decode_produce(frame, &mut r)?),
            RequestType::Fetch => Request::Fetch(decode_fetch(&mut r)?),
            RequestType::Offsets => Request::Offsets(decode_offsets(&mut r)?),
            RequestType::MultiFetch => {
                let count = decode_count(&mut r, "multifetch", PARTITION_REQUEST_BYTES_MIN)?;
                let mut fetches = Vec::with_capacity(count);
                for _ in 0..count {
                    fetches.push(decode_fetch(&mut r)?);
                }
                Request::MultiFetch(fetches)
            }
            RequestType::MultiProduce => {
                Request::MultiProduce(decode_produces(frame, &mut r, "multiproduce")?)
            }
            RequestType::AckedProduce => {
                Request::AckedProduce(decode_produces(frame, &mut r, "acked produce")?)
            }
            RequestType::ClusterIdentity => Request::ClusterIdentity,
            RequestType::TopicOrigins => {
                let topic = decode_topic(&mut r)?;
                let merge = frame.slice_ref(r.string("origin record")?);
                Request::TopicOrigins(TopicOriginsRequest { topic, merge })
            }
            RequestType::MirrorProduce => {
                Request::MirrorProduce(mirror::decode_mirror_sets(frame, &mut r)?)
            }
            RequestType::MirrorPositions => {
                Request::MirrorPositions(mirror::decode_positions_request(&mut r)?)
            }
        };
        r.expect_end("request")?;
        Ok(request)
    }

    /// An upper bound of the whole frame's length for the requests that carry message sets
    /// (PRODUCE, MULTIPRODUCE, ACKED_PRODUCE, MIRROR_PRODUCE), so that [`Request::to_bytes`]
    /// writes a produce request of megabytes into one buffer, never grown and copied on the way;
    /// a small fixed size for the others (which grow as needed).
    pub fn encoded_len_bound(&self) -> usize {
        /// The size prefix, the type and an entry count.
        const FRAME: usize = 4 + 2 + 2;
        /// A string's length prefix and the fixed fields of one produce body.
        const PRODUCE: usize = 2 + 4 + 4;
        /// The fixed fields of a mirror set beyond its produce body: the source key's two
        /// strings' prefixes, broker and partition, and the source offsets.
        const MIRROR: usize = 2 + 2 + 4 + 4 + 8 + 8;
        let produce = |p: &ProduceRequest| PRODUCE + p.topic.as_str().len() + p.messages.len();
        FRAME
            + match self {
                Request::Produce(p) => produce(p),
                Request::MultiProduce(parts) | Request::AckedProduce(parts) => {
                    parts.iter().map(produce).sum()
                }
                Request::MirrorProduce(sets) => sets
                    .iter()
                    .map(|set| {
                        let key = &set.source.key;
                        produce(&set.produce)
                            + MIRROR
                            + key.cluster.as_str().len()
                            + key.topic.as_str().len()
                    })
                    .sum(),
                _ => 64,
            }
    }

    /// Appends the whole frame (size prefix included) to `out`.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let start = out.len();
        out.put_i32(0); // size, patched below
        out.put_i16(self.request_type().id());
        match self {
            Request::Produce(p) => encode_produce(out, p)?,
            Request::Fetch(f) => encode_fetch(out, f),
            Request::Offsets(o) => encode_offsets(out, o),
            Request::MultiFetch(fetches) => {
                out.put_i16(count_to_i16(fetches.len())?);
                fetches.iter().for_each(|f| encode_fetch(out, f));
            }
            Request::MultiProduce(produces) | Request::AckedProduce(produces) => {
                out.put_i16(count_to_i16(produces.len())?);
                for p in produces {
                    encode_produce(out, p)?;
                }
            }
            Request::ClusterIdentity => {}
            Request::TopicOrigins(o) => {
                put_string(out, o.topic.as_str().as_bytes());
                if i16::try_from(o.merge.len()).is_err() {
                    return Err(EncodeError::TooLarge(o.merge.len()));
                }
                put_string(out, &o.merge);
            }
            Request::MirrorProduce(sets) => mirror::encode_mirror_sets(out, sets)?,
            Request::MirrorPositions(p) => mirror::encode_positions_request(out, p)?,
        }
        patch_size(out, start)
    }

    /// The encoded frame as fresh bytes.
    pub fn to_bytes(&self) -> Result<Bytes, EncodeError> {
        /// The most reserved at once: a larger request (none the producer builds) grows.
        const RESERVE_MAX: usize = 64 << 20;
        let mut out = BytesMut::with_capacity(self.encoded_len_bound().min(RESERVE_MAX));
        self.encode(&mut out)?;
        Ok(out.freeze())
    }
}

/// Writes the int32 size at `start` once the frame after it is complete.
pub(crate) fn patch_size(out: &mut BytesMut, start: usize) -> Result<(), EncodeError> {
    let body = out.len() - start - 4;
    let size = i32::try_from(body).map_err(|_| EncodeError::TooLarge(body))?;
    if let Some(slot) = out.get_mut(start..start + 4) {
        slot.copy_from_slice(&size.to_be_bytes());
    }
    Ok(())
}

pub(super) fn count_to_i16(len: usize) -> Result<i16, EncodeError> {
    i16::try_from(len).map_err(|_| EncodeError::TooManyEntries(len))
}

/// Reads an int16 entry count and checks it against what the rest of the frame could hold, so a
/// lying count never makes us reserve memory the frame cannot fill.
pub(super) fn decode_count(
    r: &mut Reader<'_>,
    field: &'static str,
    entry_bytes_min: usize,
) -> Result<usize, DecodeError> {
    let count = r.i16(field)?;
    let count = usize::try_from(count).map_err(|_| DecodeError::CountInvalid {
        field,
        count: count.into(),
    })?;
    if count.saturating_mul(entry_bytes_min) > r.remaining() {
        return Err(DecodeError::Truncated {
            field,
            needed: count.saturating_mul(entry_bytes_min),
            available: r.remaining(),
        });
    }
    Ok(count)
}

/// An int16 count and that many PRODUCE bodies (MULTIPRODUCE, ACKED_PRODUCE).
fn decode_produces(
    frame: &Bytes,
    r: &mut Reader<'_>,
    field: &'static str,
) -> Result<Vec<ProduceRequest>, DecodeError> {
    let count = decode_count(r, field, PRODUCE_BYTES_MIN)?;
    let mut produces = Vec::with_capacity(count);
    for _ in 0..count {
        produces.push(decode_produce(frame, r)?);
    }
    Ok(produces)
}

fn decode_topic(r: &mut Reader<'_>) -> Result<TopicName, DecodeError> {
    Ok(TopicName::from_bytes(r.string("topic")?)?)
}

fn decode_produce(frame: &Bytes, r: &mut Reader<'_>) -> Result<ProduceRequest, DecodeError> {
    let topic = decode_topic(r)?;
    let partition = r.i32("partition")?;
    let size = r.len_i32("message set size")?;
    let set = r.take(size, "message set")?;
    Ok(ProduceRequest {
        topic,
        partition,
        messages: frame.slice_ref(set),
    })
}

fn decode_fetch(r: &mut Reader<'_>) -> Result<FetchRequest, DecodeError> {
    Ok(FetchRequest {
        topic: decode_topic(r)?,
        partition: r.i32("partition")?,
        offset: r.i64("offset")?,
        max_bytes: r.i32("max bytes")?,
    })
}

fn decode_offsets(r: &mut Reader<'_>) -> Result<OffsetsRequest, DecodeError> {
    Ok(OffsetsRequest {
        topic: decode_topic(r)?,
        partition: r.i32("partition")?,
        time: r.i64("time")?,
        max_offsets: r.i32("max offsets")?,
    })
}

fn encode_produce(out: &mut BytesMut, p: &ProduceRequest) -> Result<(), EncodeError> {
    put_string(out, p.topic.as_str().as_bytes());
    out.put_i32(p.partition);
    let len = p.messages.len();
    out.put_i32(i32::try_from(len).map_err(|_| EncodeError::TooLarge(len))?);
    out.put_slice(&p.messages);
    Ok(())
}

fn encode_fetch(out: &mut BytesMut, f: &FetchRequest) {
    put_string(out, f.topic.as_str().as_bytes());
    out.put_i32(f.partition);
    out.put_i64(f.offset);
    out.put_i32(f.max_bytes);
}

fn encode_offsets(out: &mut BytesMut, o: &OffsetsRequest) {
    put_string(out, o.topic.as_str().as_bytes());
    out.put_i32(o.partition);
    out.put_i64(o.time);
    out.put_i32(o.max_offsets);
}
