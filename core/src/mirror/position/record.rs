//! The position records' file: one record per append to the partition once it has the file,
//! in log order: a mirrored set's position, or the range of any other append (a producer
//! writing to the mirror topic too, a hole), so that the records account for every byte of the
//! log from the first record on.
//!
//! ```text
//! record := length u32 | crc u32 | body           (big-endian; crc is CRC-32 of body)
//! body   := version u8 (1) | kind u8
//!   kind 1 (a mirrored set):
//!           cluster id (u16 length, bytes) | topic (u16 length, bytes)
//!           | broker id i32 | partition u32
//!           | source start i64 | source next i64 | mirror start u64 | mirror end u64
//!   kind 2 (another append): mirror start u64 | mirror end u64
//!   kind 3 (where the records begin): mirror offset u64
//! ```
//!
//! The file starts with a kind-3 record, written and synced when the file is made, before any
//! append it accounts for: the records account for every byte of the log from there on.
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

/// One record: what one append put into the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A mirrored set and its source position.
    Mirrored(Position),
    /// Where the records begin: they account for every byte of the log from `at` on.
    Begin {
        /// The log's end when the records were made.
        at: u64,
    },
    /// Another append (or a hole): the log's bytes `start..end`, from no recorded source.
    Other {
        /// The log's end before it.
        start: u64,
        /// The log's end after it.
        end: u64,
    },
}

impl Record {
    /// Where the append began in the log.
    pub fn start(&self) -> u64 {
        match self {
            Record::Mirrored(p) => p.mirror_start,
            Record::Begin { at } => *at,
            Record::Other { start, .. } => *start,
        }
    }

    /// Where the log ended after it.
    pub fn end(&self) -> u64 {
        match self {
            Record::Mirrored(p) => p.mirror_end,
            Record::Begin { at } => *at,
            Record::Other { end, .. } => *end,
        }
    }
}

const KIND_MIRRORED: u8 = 1;
const KIND_OTHER: u8 = 2;
const KIND_BEGIN: u8 = 3;

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
    /// Its kind is not one this broker reads.
    #[error("kind {0} (this broker reads 1 to 3)")]
    Kind(u8),
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
    #[error(
        "{0} bytes of offsets (40 for a mirrored set, 16 for another append, 8 for a beginning)"
    )]
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
    pub records: Vec<(usize, Record)>,
    /// The bytes they take from the file's start.
    pub valid_bytes: usize,
    /// What ends them.
    pub tail: Tail,
}

/// A mirrored set's record.
pub fn encode(position: &Position) -> Vec<u8> {
    encode_record(&Record::Mirrored(position.clone()))
}

/// One record's bytes.
pub fn encode_record(record: &Record) -> Vec<u8> {
    let mut body = Vec::with_capacity(128);
    body.put_u8(VERSION);
    match record {
        Record::Mirrored(position) => {
            body.put_u8(KIND_MIRRORED);
            put_text(&mut body, position.key.cluster.as_str().as_bytes());
            put_text(&mut body, position.key.topic.as_str().as_bytes());
            body.put_i32(position.key.partition.broker_id);
            body.put_u32(position.key.partition.partition);
            body.put_i64(position.source_start);
            body.put_i64(position.source_next);
            body.put_u64(position.mirror_start);
            body.put_u64(position.mirror_end);
        }
        Record::Begin { at } => {
            body.put_u8(KIND_BEGIN);
            body.put_u64(*at);
        }
        Record::Other { start, end } => {
            body.put_u8(KIND_OTHER);
            body.put_u64(*start);
            body.put_u64(*end);
        }
    }
    assert!(
        body.len() <= BODY_BYTES_MAX,
        "a record's body fits its limit"
    );
    let mut bytes = Vec::with_capacity(HEADER_BYTES + body.len());
    bytes.put_u32(u32::try_from(body.len()).unwrap_or(u32::MAX));
    bytes.put_u32(crc32fast::hash(&body));
    bytes.extend_from_slice(&body);
    bytes
}

/// A length-prefixed text field (cluster ids and topic names are far below `u16::MAX`).
fn put_text(body: &mut Vec<u8>, text: &[u8]) {
    body.put_u16(u16::try_from(text.len()).unwrap_or(u16::MAX));
    body.extend_from_slice(text);
}

/// Every valid record of `bytes`, up to the first that is torn or damaged.
pub fn decode(bytes: &[u8]) -> Decoded {
    let mut records = Vec::new();
    let mut at = 0usize;
    loop {
        let rest = bytes.get(at..).unwrap_or_default();
        if rest.is_empty() {
            return decoded(records, at, Tail::Clean);
        }
        let Some(mut header) = rest.get(..HEADER_BYTES) else {
            return decoded(records, at, Tail::Torn);
        };
        let length = header.get_u32() as usize;
        let crc = header.get_u32();
        if length > BODY_BYTES_MAX {
            let problem = RecordProblem::TooLong(length);
            return decoded(records, at, Tail::Damaged { at, problem });
        }
        let Some(body) = rest.get(HEADER_BYTES..HEADER_BYTES + length) else {
            return decoded(records, at, Tail::Torn);
        };
        if crc32fast::hash(body) != crc {
            let problem = RecordProblem::Crc;
            return decoded(records, at, Tail::Damaged { at, problem });
        }
        match decode_body(body) {
            Ok(record) => records.push((at, record)),
            Err(problem) => return decoded(records, at, Tail::Damaged { at, problem }),
        }
        at += HEADER_BYTES + length;
    }
}

fn decoded(records: Vec<(usize, Record)>, valid_bytes: usize, tail: Tail) -> Decoded {
    Decoded {
        records,
        valid_bytes,
        tail,
    }
}

/// One record's body; the error says what is wrong with it.
fn decode_body(mut body: &[u8]) -> Result<Record, RecordProblem> {
    let version = take_u8(&mut body)?;
    if version != VERSION {
        return Err(RecordProblem::Version(version));
    }
    match take_u8(&mut body)? {
        KIND_MIRRORED => decode_position(body).map(Record::Mirrored),
        KIND_OTHER => {
            if body.len() != 16 {
                return Err(RecordProblem::OffsetBytes(body.len()));
            }
            let (start, end) = (body.get_u64(), body.get_u64());
            if start >= end {
                return Err(RecordProblem::NotASet);
            }
            Ok(Record::Other { start, end })
        }
        KIND_BEGIN => {
            if body.len() != 8 {
                return Err(RecordProblem::OffsetBytes(body.len()));
            }
            Ok(Record::Begin { at: body.get_u64() })
        }
        kind => Err(RecordProblem::Kind(kind)),
    }
}

/// A mirrored set's record, after its kind.
fn decode_position(mut body: &[u8]) -> Result<Position, RecordProblem> {
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
