//! The position records' file: one record per mirrored set, appended in log order.
//!
//! ```text
//! record := length u32 | crc u32 | body           (big-endian; crc is CRC-32 of body)
//! body   := version u8 (1)
//!           | cluster id (u16 length, bytes) | topic (u16 length, bytes)
//!           | broker id i32 | partition u32
//!           | source start i64 | source next i64 | mirror start u64 | mirror end u64
//! ```
//!
//! Reading stops at the first record that is cut short or fails its CRC: a crash can tear only
//! the last record written, and what follows a damaged record cannot be trusted either. The
//! bytes before it are what [`decode`] reports as valid.

use bytes::{Buf, BufMut};

use super::{Position, SourceKey};
use crate::consumer::BrokerPartition;
use crate::identity::ClusterId;
use crate::wire::TopicName;

/// The file's name inside a partition's log directory.
pub const POSITIONS_FILE: &str = "mirror-positions";

/// The record format's version.
const VERSION: u8 = 1;

/// A record's header: length and CRC.
const HEADER_BYTES: usize = 8;

/// The longest body a record may have: a cluster id and a topic name at their limits and the
/// fixed fields, with room to spare. A longer length is damage, never a record.
pub const BODY_BYTES_MAX: usize = 1024;

/// Why the valid records end where they do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// Every byte belongs to a whole, valid record.
    Clean,
    /// The last record is cut short (a write torn by a crash).
    Torn,
    /// The record at byte `at` is wrong.
    Damaged {
        /// Its first byte in the file.
        at: usize,
        /// What is wrong with it.
        problem: RecordProblem,
    },
}

/// What is wrong with a damaged record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordProblem {
    /// Its length is beyond [`BODY_BYTES_MAX`].
    #[error("it claims {0} bytes (at most {BODY_BYTES_MAX})")]
    TooLong(usize),
    /// Its CRC does not match its body.
    #[error("it fails its CRC")]
    Crc,
    /// Its version is not one this broker reads.
    #[error("version {0} (this broker reads {VERSION})")]
    Version(u8),
    /// A field runs past the body's end.
    #[error("a field is cut short")]
    CutShort,
    /// The cluster id is not one.
    #[error("the cluster id is not one")]
    ClusterId,
    /// The topic is not a topic name.
    #[error(transparent)]
    Topic(#[from] crate::wire::TopicError),
    /// The offsets take the wrong number of bytes.
    #[error("{0} bytes of offsets (expected 40)")]
    OffsetBytes(usize),
    /// The offsets are not a set's (a negative broker id, an empty or reversed range).
    #[error("its offsets are not a set's")]
    NotASet,
    /// Its set does not follow the sets recorded before it in the log, or goes back over its
    /// source partition's copy.
    #[error("its set does not follow the ones recorded before it")]
    OutOfOrder,
}

/// The records of a file, in order, and how many of its bytes they take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The valid records, in the order written, each with the byte where it starts.
    pub positions: Vec<(usize, Position)>,
    /// The bytes they take from the file's start.
    pub valid_bytes: usize,
    /// What ends them.
    pub tail: Tail,
}

/// One record's bytes.
pub fn encode(position: &Position) -> Vec<u8> {
    let cluster = position.key.cluster.as_str().as_bytes();
    let topic = position.key.topic.as_str().as_bytes();
    let mut body = Vec::with_capacity(1 + 2 + cluster.len() + 2 + topic.len() + 40);
    body.put_u8(VERSION);
    put_text(&mut body, cluster);
    put_text(&mut body, topic);
    body.put_i32(position.key.partition.broker_id);
    body.put_u32(position.key.partition.partition);
    body.put_i64(position.source_start);
    body.put_i64(position.source_next);
    body.put_u64(position.mirror_start);
    body.put_u64(position.mirror_end);
    assert!(
        body.len() <= BODY_BYTES_MAX,
        "a record's body fits its limit"
    );
    let mut record = Vec::with_capacity(HEADER_BYTES + body.len());
    record.put_u32(u32::try_from(body.len()).unwrap_or(u32::MAX));
    record.put_u32(crc32fast::hash(&body));
    record.extend_from_slice(&body);
    record
}

/// A length-prefixed text field (cluster ids and topic names are far below `u16::MAX`).
fn put_text(body: &mut Vec<u8>, text: &[u8]) {
    body.put_u16(u16::try_from(text.len()).unwrap_or(u16::MAX));
    body.extend_from_slice(text);
}

/// Every valid record of `bytes`, up to the first that is torn or damaged.
pub fn decode(bytes: &[u8]) -> Decoded {
    let mut positions = Vec::new();
    let mut at = 0usize;
    loop {
        let rest = bytes.get(at..).unwrap_or_default();
        if rest.is_empty() {
            return decoded(positions, at, Tail::Clean);
        }
        let Some(mut header) = rest.get(..HEADER_BYTES) else {
            return decoded(positions, at, Tail::Torn);
        };
        let length = header.get_u32() as usize;
        let crc = header.get_u32();
        if length > BODY_BYTES_MAX {
            let problem = RecordProblem::TooLong(length);
            return decoded(positions, at, Tail::Damaged { at, problem });
        }
        let Some(body) = rest.get(HEADER_BYTES..HEADER_BYTES + length) else {
            return decoded(positions, at, Tail::Torn);
        };
        if crc32fast::hash(body) != crc {
            let problem = RecordProblem::Crc;
            return decoded(positions, at, Tail::Damaged { at, problem });
        }
        match decode_body(body) {
            Ok(position) => positions.push((at, position)),
            Err(problem) => return decoded(positions, at, Tail::Damaged { at, problem }),
        }
        at += HEADER_BYTES + length;
    }
}

fn decoded(positions: Vec<(usize, Position)>, valid_bytes: usize, tail: Tail) -> Decoded {
    Decoded {
        positions,
        valid_bytes,
        tail,
    }
}

/// One record's body; the error says what is wrong with it.
fn decode_body(mut body: &[u8]) -> Result<Position, RecordProblem> {
    let version = take_u8(&mut body)?;
    if version != VERSION {
        return Err(RecordProblem::Version(version));
    }
    let cluster = take_text(&mut body)?;
    let cluster = std::str::from_utf8(cluster)
        .ok()
        .and_then(|c| ClusterId::parse(c).ok())
        .ok_or(RecordProblem::ClusterId)?;
    let topic = TopicName::from_bytes(take_text(&mut body)?)?;
    if body.len() != 4 + 4 + 8 * 4 {
        return Err(RecordProblem::OffsetBytes(body.len()));
    }
    let broker_id = body.get_i32();
    let partition = body.get_u32();
    let position = Position {
        key: SourceKey {
            cluster,
            topic,
            partition: BrokerPartition {
                broker_id,
                partition,
            },
        },
        source_start: body.get_i64(),
        source_next: body.get_i64(),
        mirror_start: body.get_u64(),
        mirror_end: body.get_u64(),
    };
    if broker_id < 0 || !position.is_well_formed() {
        return Err(RecordProblem::NotASet);
    }
    Ok(position)
}

fn take_u8(body: &mut &[u8]) -> Result<u8, RecordProblem> {
    if body.is_empty() {
        return Err(RecordProblem::CutShort);
    }
    Ok(body.get_u8())
}

fn take_text<'a>(body: &mut &'a [u8]) -> Result<&'a [u8], RecordProblem> {
    if body.len() < 2 {
        return Err(RecordProblem::CutShort);
    }
    let length = body.get_u16() as usize;
    let (text, rest) = body
        .split_at_checked(length)
        .ok_or(RecordProblem::CutShort)?;
    *body = rest;
    Ok(text)
}
