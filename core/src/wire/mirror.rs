//! Tributary's two mirror requests: MIRROR_PRODUCE, an acknowledged produce whose every set
//! says which source messages it holds, and MIRROR_POSITIONS, where a mirror partition's copy
//! of each source partition has durably reached (see [`crate::mirror::position`]).
//!
//! | type | body |
//! |---|---|
//! | 103 MIRROR_PRODUCE | int16 count, count × {topic, int32 partition, source, int64 source start, int64 source next, int32 set size, message set} |
//! | 104 MIRROR_POSITIONS | topic, int32 partition, int16 count, count × {source, int64 source offset} |
//!
//! A source is `string cluster id, string topic, int32 broker id, int32 partition`: the
//! source partition as its cluster names it. Answers:
//!
//! | kind | body after the error code |
//! |---|---|
//! | MIRROR_PRODUCE | int16 count, count × {int16 error, int16 outcome, int32 partition, int64 offset, int64 held to}, in request order |
//! | MIRROR_POSITIONS | int16 count, count × {source, int64 held to, int64 mirror end}, int16 count, count × int64 mirror offset |
//!
//! A MIRROR_PRODUCE set's outcome is 0 appended (at `offset`), 1 held (the partition had all
//! of it: nothing appended) or 2 overlap (it had the messages before `held to`: nothing
//! appended; the sender drops those and sends the rest). `held to` is where the partition's
//! copy of that source partition reaches after the set. The answer comes once what it
//! describes is durable. Partition -1 asks the broker to choose from the source partition,
//! the same one every time while its partition count stays. A MIRROR_POSITIONS answer lists
//! every source partition the mirror partition holds, with the source offset its copy
//! reaches and the mirror offset after it, and one translation per source offset asked (-1:
//! the partition holds nothing of that source partition); it describes durable data only.
//! A 0.7 broker closes the connection on both, as on every type it does not know.
#![deny(clippy::indexing_slicing)]

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::{put_string, Reader};
use super::error::DecodeError;
use super::error_code::ErrorCode;
use super::request::{EncodeError, ProduceRequest};
use super::topic::TopicName;
use crate::consumer::BrokerPartition;
use crate::identity::ClusterId;
use crate::mirror::position::SourceKey;

/// The wire id of MIRROR_PRODUCE (Tributary).
pub const MIRROR_PRODUCE_ID: i16 = 103;
/// The wire id of MIRROR_POSITIONS (Tributary).
pub const MIRROR_POSITIONS_ID: i16 = 104;

/// Which source messages a set holds: those of `key` from `start` up to (not including) `next`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStamp {
    /// The source partition.
    pub key: SourceKey,
    /// The source offset of the set's first message.
    pub start: i64,
    /// The source offset after its last message.
    pub next: i64,
}

/// One set of a MIRROR_PRODUCE: a PRODUCE body and the source messages it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorSet {
    /// The mirror topic, partition (-1: the broker chooses from the source) and set.
    pub produce: ProduceRequest,
    /// What the set holds of its source partition.
    pub source: SourceStamp,
}

/// A MIRROR_POSITIONS request: one mirror partition's positions, and source offsets to
/// translate into its offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorPositionsRequest {
    /// The mirror topic.
    pub topic: TopicName,
    /// The mirror partition.
    pub partition: i32,
    /// Source offsets to translate, each of a source partition.
    pub translate: Vec<(SourceKey, i64)>,
}

/// What a broker did with one set of a MIRROR_PRODUCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorOutcome {
    /// Appended at the ack's offset.
    Appended,
    /// The partition held all of it; nothing appended.
    Held,
    /// The partition held the messages before the ack's `held_to`; nothing appended.
    Overlap,
}

impl MirrorOutcome {
    fn code(self) -> i16 {
        match self {
            MirrorOutcome::Appended => 0,
            MirrorOutcome::Held => 1,
            MirrorOutcome::Overlap => 2,
        }
    }

    fn from_code(code: i16) -> Result<Self, DecodeError> {
        match code {
            0 => Ok(MirrorOutcome::Appended),
            1 => Ok(MirrorOutcome::Held),
            2 => Ok(MirrorOutcome::Overlap),
            other => Err(DecodeError::CountInvalid {
                field: "mirror outcome",
                count: other.into(),
            }),
        }
    }
}

/// One set's answer in a MIRROR_PRODUCE response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorAck {
    /// `NoError`, or why the set was not stored (then the rest says nothing).
    pub error: ErrorCode,
    /// What was done with it.
    pub outcome: MirrorOutcome,
    /// The mirror partition it was judged in (-1 on an error).
    pub partition: i32,
    /// Appended: the offset of the set's first message; otherwise -1.
    pub offset: i64,
    /// Where the partition's copy of the source partition reaches after the set.
    pub held_to: i64,
}

impl MirrorAck {
    /// The answer for a set not stored.
    pub fn failed(error: ErrorCode) -> Self {
        MirrorAck {
            error,
            outcome: MirrorOutcome::Held,
            partition: -1,
            offset: -1,
            held_to: -1,
        }
    }
}

/// A MIRROR_PRODUCE response: one ack per set, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorProduceResponse {
    /// The top-level error code (0 unless the request as a whole failed).
    pub error: ErrorCode,
    /// One per set of the request.
    pub acks: Vec<MirrorAck>,
}

/// Where a mirror partition's durable copy of one source partition reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceHeld {
    /// The source partition.
    pub key: SourceKey,
    /// The source offset after the last message held.
    pub held_to: i64,
    /// The mirror offset after the set holding it.
    pub mirror_end: i64,
}

/// A MIRROR_POSITIONS response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorPositionsResponse {
    /// `NoError`; `WrongPartition` for a partition the broker does not have; `Unknown` when
    /// the positions could not be made durable.
    pub error: ErrorCode,
    /// Every source partition the mirror partition holds, in key order.
    pub sources: Vec<SourceHeld>,
    /// One mirror offset per source offset asked, in request order; -1 when the partition
    /// holds nothing of that source partition.
    pub translated: Vec<i64>,
}

/// The smallest source on the wire: an empty cluster id and topic excluded (each at least one
/// byte), so 2 + 1 + 2 + 1 + 4 + 4.
const SOURCE_BYTES_MIN: usize = 14;
/// The smallest MIRROR_PRODUCE set: topic, partition, source, two offsets, an empty set.
const MIRROR_SET_BYTES_MIN: usize = 2 + 1 + 4 + SOURCE_BYTES_MIN + 8 + 8 + 4;
/// The smallest MIRROR_POSITIONS translation: a source and an offset.
const TRANSLATION_BYTES_MIN: usize = SOURCE_BYTES_MIN + 8;
/// Bytes of one MIRROR_PRODUCE ack.
const MIRROR_ACK_BYTES: usize = 2 + 2 + 4 + 8 + 8;

fn count(r: &mut Reader<'_>, field: &'static str, entry_min: usize) -> Result<usize, DecodeError> {
    super::request::decode_count(r, field, entry_min)
}

fn put_count(out: &mut BytesMut, len: usize) -> Result<(), EncodeError> {
    out.put_i16(super::request::count_to_i16(len)?);
    Ok(())
}

fn decode_key(r: &mut Reader<'_>) -> Result<SourceKey, DecodeError> {
    let cluster = std::str::from_utf8(r.string("source cluster id")?)
        .map_err(|_| DecodeError::NotUtf8("source cluster id"))?;
    let cluster = ClusterId::parse(cluster).map_err(|_| DecodeError::InvalidSource {
        field: "source cluster id",
        value: cluster.to_string(),
    })?;
    let topic = TopicName::from_bytes(r.string("source topic")?)?;
    let broker_id = r.i32("source broker id")?;
    let partition = r.i32("source partition")?;
    let partition = u32::try_from(partition).map_err(|_| DecodeError::InvalidSource {
        field: "source partition",
        value: partition.to_string(),
    })?;
    Ok(SourceKey {
        cluster,
        topic,
        partition: BrokerPartition {
            broker_id,
            partition,
        },
    })
}

fn put_key(out: &mut BytesMut, key: &SourceKey) {
    put_string(out, key.cluster.as_str().as_bytes());
    put_string(out, key.topic.as_str().as_bytes());
    out.put_i32(key.partition.broker_id);
    // A partition number past i32 cannot come from a 0.7 cluster; it is sent as -1 and refused.
    out.put_i32(i32::try_from(key.partition.partition).unwrap_or(-1));
}

/// A MIRROR_PRODUCE body after the type.
pub(super) fn decode_mirror_sets(
    frame: &Bytes,
    r: &mut Reader<'_>,
) -> Result<Vec<MirrorSet>, DecodeError> {
    let n = count(r, "mirror produce", MIRROR_SET_BYTES_MIN)?;
    let mut sets = Vec::with_capacity(n);
    for _ in 0..n {
        let topic = TopicName::from_bytes(r.string("topic")?)?;
        let partition = r.i32("partition")?;
        let key = decode_key(r)?;
        let start = r.i64("source start")?;
        let next = r.i64("source next")?;
        let size = r.len_i32("message set size")?;
        let set = r.take(size, "message set")?;
        sets.push(MirrorSet {
            produce: ProduceRequest {
                topic,
                partition,
                messages: frame.slice_ref(set),
            },
            source: SourceStamp { key, start, next },
        });
    }
    Ok(sets)
}

/// Writes a MIRROR_PRODUCE body.
pub(super) fn encode_mirror_sets(
    out: &mut BytesMut,
    sets: &[MirrorSet],
) -> Result<(), EncodeError> {
    put_count(out, sets.len())?;
    for set in sets {
        put_string(out, set.produce.topic.as_str().as_bytes());
        out.put_i32(set.produce.partition);
        put_key(out, &set.source.key);
        out.put_i64(set.source.start);
        out.put_i64(set.source.next);
        let len = set.produce.messages.len();
        out.put_i32(i32::try_from(len).map_err(|_| EncodeError::TooLarge(len))?);
        out.put_slice(&set.produce.messages);
    }
    Ok(())
}

/// A MIRROR_POSITIONS body after the type.
pub(super) fn decode_positions_request(
    r: &mut Reader<'_>,
) -> Result<MirrorPositionsRequest, DecodeError> {
    let topic = TopicName::from_bytes(r.string("topic")?)?;
    let partition = r.i32("partition")?;
    let n = count(r, "translations", TRANSLATION_BYTES_MIN)?;
    let mut translate = Vec::with_capacity(n);
    for _ in 0..n {
        let key = decode_key(r)?;
        translate.push((key, r.i64("source offset")?));
    }
    Ok(MirrorPositionsRequest {
        topic,
        partition,
        translate,
    })
}

/// Writes a MIRROR_POSITIONS body.
pub(super) fn encode_positions_request(
    out: &mut BytesMut,
    request: &MirrorPositionsRequest,
) -> Result<(), EncodeError> {
    put_string(out, request.topic.as_str().as_bytes());
    out.put_i32(request.partition);
    put_count(out, request.translate.len())?;
    for (key, offset) in &request.translate {
        put_key(out, key);
        out.put_i64(*offset);
    }
    Ok(())
}

/// A MIRROR_PRODUCE response body after the error code.
pub(super) fn decode_mirror_acks(r: &mut Reader<'_>) -> Result<Vec<MirrorAck>, DecodeError> {
    let n = count(r, "mirror ack count", MIRROR_ACK_BYTES)?;
    if n * MIRROR_ACK_BYTES != r.remaining() {
        return Err(DecodeError::CountInvalid {
            field: "mirror ack count",
            count: n as i64,
        });
    }
    let mut acks = Vec::with_capacity(n);
    for _ in 0..n {
        let error = ErrorCode::from_code(r.i16("mirror ack error code")?);
        let outcome = MirrorOutcome::from_code(r.i16("mirror outcome")?)?;
        acks.push(MirrorAck {
            error,
            outcome,
            partition: r.i32("mirror ack partition")?,
            offset: r.i64("mirror ack offset")?,
            held_to: r.i64("mirror ack held to")?,
        });
    }
    Ok(acks)
}

/// Writes a MIRROR_PRODUCE response body.
pub(super) fn encode_mirror_acks(
    out: &mut BytesMut,
    acks: &[MirrorAck],
) -> Result<(), EncodeError> {
    put_count(out, acks.len())?;
    for ack in acks {
        out.put_i16(ack.error.code());
        out.put_i16(ack.outcome.code());
        out.put_i32(ack.partition);
        out.put_i64(ack.offset);
        out.put_i64(ack.held_to);
    }
    Ok(())
}

/// A MIRROR_POSITIONS response body after the error code: (sources, translations).
pub(super) fn decode_positions_response(
    r: &mut Reader<'_>,
) -> Result<(Vec<SourceHeld>, Vec<i64>), DecodeError> {
    let n = count(r, "source count", SOURCE_BYTES_MIN + 16)?;
    let mut sources = Vec::with_capacity(n);
    for _ in 0..n {
        let key = decode_key(r)?;
        sources.push(SourceHeld {
            key,
            held_to: r.i64("held to")?,
            mirror_end: r.i64("mirror end")?,
        });
    }
    let n = count(r, "translation count", 8)?;
    let mut translated = Vec::with_capacity(n);
    for _ in 0..n {
        translated.push(r.i64("mirror offset")?);
    }
    Ok((sources, translated))
}

/// Writes a MIRROR_POSITIONS response body.
pub(super) fn encode_positions_response(
    out: &mut BytesMut,
    response: &MirrorPositionsResponse,
) -> Result<(), EncodeError> {
    put_count(out, response.sources.len())?;
    for held in &response.sources {
        put_key(out, &held.key);
        out.put_i64(held.held_to);
        out.put_i64(held.mirror_end);
    }
    put_count(out, response.translated.len())?;
    response.translated.iter().for_each(|o| out.put_i64(*o));
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::indexing_slicing)]
    use super::*;
    use crate::wire::{Request, Response, ResponseKind};

    fn key() -> SourceKey {
        SourceKey {
            cluster: ClusterId::parse("east").expect("id"),
            topic: "orders".parse().expect("topic"),
            partition: BrokerPartition {
                broker_id: 2,
                partition: 5,
            },
        }
    }

    fn produce_request() -> Request {
        Request::MirrorProduce(vec![MirrorSet {
            produce: ProduceRequest {
                topic: "east.orders".parse().expect("topic"),
                partition: -1,
                messages: Bytes::from_static(b"set"),
            },
            source: SourceStamp {
                key: key(),
                start: 100,
                next: 250,
            },
        }])
    }

    #[test]
    fn a_mirror_produce_is_laid_out_as_documented() {
        let bytes = produce_request().to_bytes().expect("encode");
        let mut expected = BytesMut::new();
        expected.put_i16(MIRROR_PRODUCE_ID);
        expected.put_i16(1);
        put_string(&mut expected, b"east.orders");
        expected.put_i32(-1);
        put_string(&mut expected, b"east");
        put_string(&mut expected, b"orders");
        expected.put_i32(2);
        expected.put_i32(5);
        expected.put_i64(100);
        expected.put_i64(250);
        expected.put_i32(3);
        expected.put_slice(b"set");
        assert_eq!(&bytes[4..], &expected[..]);
        let decoded = Request::decode(&bytes.slice(4..)).expect("decode");
        assert_eq!(decoded, produce_request());
    }

    #[test]
    fn a_source_with_a_bad_cluster_id_or_partition_is_refused_by_name() {
        let mut frame = BytesMut::new();
        frame.put_i16(MIRROR_POSITIONS_ID);
        put_string(&mut frame, b"t");
        frame.put_i32(0);
        frame.put_i16(1);
        put_string(&mut frame, b"not an id");
        put_string(&mut frame, b"t");
        frame.put_i32(0);
        frame.put_i32(0);
        frame.put_i64(0);
        let refused = Request::decode(&frame.freeze());
        assert!(matches!(
            refused,
            Err(DecodeError::InvalidSource {
                field: "source cluster id",
                ..
            })
        ));
        let mut frame = BytesMut::new();
        frame.put_i16(MIRROR_POSITIONS_ID);
        put_string(&mut frame, b"t");
        frame.put_i32(0);
        frame.put_i16(1);
        put_string(&mut frame, b"east");
        put_string(&mut frame, b"t");
        frame.put_i32(0);
        frame.put_i32(-3);
        frame.put_i64(0);
        assert!(matches!(
            Request::decode(&frame.freeze()),
            Err(DecodeError::InvalidSource {
                field: "source partition",
                ..
            })
        ));
    }

    #[test]
    fn an_unknown_outcome_is_refused() {
        let response = Response::MirrorProduce(MirrorProduceResponse {
            error: ErrorCode::NoError,
            acks: vec![MirrorAck {
                error: ErrorCode::NoError,
                outcome: MirrorOutcome::Overlap,
                partition: 0,
                offset: -1,
                held_to: 40,
            }],
        });
        let bytes = response.to_bytes().expect("encode");
        let body = bytes.slice(4..);
        assert_eq!(
            Response::decode(ResponseKind::MirrorProduce, &body).expect("decode"),
            response
        );
        let mut bad = body.to_vec();
        // error, count, ack error, then the outcome.
        bad[6..8].copy_from_slice(&7i16.to_be_bytes());
        assert!(matches!(
            Response::decode(ResponseKind::MirrorProduce, &Bytes::from(bad)),
            Err(DecodeError::CountInvalid {
                field: "mirror outcome",
                count: 7
            })
        ));
    }
}
