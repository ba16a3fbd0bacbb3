//! Where one partition of a cluster being demoted diverged from the other cluster's: found by
//! reading both brokers over the wire (FETCH and OFFSETS only; nothing is written).
//!
//! The search starts at an offset known to be common — the other cluster's promotion cut for
//! that partition when it has one, else the newest segment start of this broker's log whose
//! message the other broker holds at the same offset — and compares the two logs message by
//! message from there (`core::replica::demotion::compare_entries`) until they differ or this
//! broker's log ends. Starting at a promotion cut usually compares one message (the first one
//! written on either side after the failover); a log that has copied the other cluster's
//! history since is read as far as it holds it.

use tokio::io::{AsyncRead, AsyncWrite};
use tributary::client::{ClientError, Connection};
use tributary_core::log::TopicPartition;
use tributary_core::message::ShallowIter;
use tributary_core::replica::demotion::{compare_entries, Compared};
use tributary_core::wire::{ErrorCode, FetchRequest, OffsetsRequest, Request, Response};

/// Bytes asked per fetch while comparing or counting.
const FETCH_BYTES: u32 = 1024 * 1024;
/// The most bytes one fetch may ask for (a message larger than [`FETCH_BYTES`] is fetched
/// whole, up to this).
const FETCH_BYTES_MAX: u32 = 256 * 1024 * 1024;
/// Segment starts looked at when no promotion cut is known.
const SEGMENT_STARTS_MAX: i32 = 10_000;

/// Why a partition's cut could not be found.
#[derive(Debug, thiserror::Error)]
pub enum CutError {
    /// A broker could not be asked.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A broker answered with something else than asked for, or an error code.
    #[error("{what} answered {answer}")]
    Answer {
        /// What was asked.
        what: String,
        /// The answer.
        answer: String,
    },
}

/// Why a cut is where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutFrom {
    /// At the other cluster's promotion cut: the first message after it differs.
    Promotion,
    /// Past the other cluster's promotion cut: this log holds the other's messages after it
    /// (copied since), up to here.
    PromotionAndCompared,
    /// Found by comparing the logs (the other cluster was never promoted, or its promotion
    /// records no common point for the partition).
    Compared,
}

/// One partition's cut and what lies past it in this cluster's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Where this cluster's log is cut back to.
    pub cut: u64,
    /// Why there.
    pub from: CutFrom,
    /// Where this cluster's log ends (visible), if it was read.
    pub end: Option<u64>,
    /// Top-level messages past the cut, if they were counted.
    pub entries: Option<u64>,
}

/// A connection to a broker, for the partition being looked at.
pub type Conn<S> = Connection<S>;

/// The offsets OFFSETS answers for `time` (`-1` latest, `-2` earliest), at most `max`.
async fn offsets<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<S>,
    tp: &TopicPartition,
    time: i64,
    max: i32,
) -> Result<Vec<i64>, CutError> {
    let request = Request::Offsets(OffsetsRequest {
        topic: tp.topic.clone(),
        partition: tp.partition as i32,
        time,
        max_offsets: max,
    });
    match conn.call(&request).await? {
        Response::Offsets(o) if o.error == ErrorCode::NoError => Ok(o.offsets),
        other => Err(CutError::Answer {
            what: format!("{}: OFFSETS {time} on {}", tp, conn.peer()),
            answer: format!("{other:?}"),
        }),
    }
}

/// The partition's bytes at `offset` (`None`: the broker does not hold that offset).
async fn fetch<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<S>,
    tp: &TopicPartition,
    offset: u64,
    max_bytes: u32,
) -> Result<Option<bytes::Bytes>, CutError> {
    let request = Request::Fetch(FetchRequest {
        topic: tp.topic.clone(),
        partition: tp.partition as i32,
        offset: i64::try_from(offset).unwrap_or(i64::MAX),
        max_bytes: i32::try_from(max_bytes).unwrap_or(i32::MAX),
    });
    match conn.call(&request).await? {
        Response::Fetch(f) if f.error == ErrorCode::NoError => Ok(Some(f.messages)),
        Response::Fetch(f) if f.error == ErrorCode::OffsetOutOfRange => Ok(None),
        other => Err(CutError::Answer {
            what: format!("{tp}: FETCH at {offset} on {}", conn.peer()),
            answer: format!("{other:?}"),
        }),
    }
}

/// This log's range: (advertised start, visible end).
pub async fn range<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<S>,
    tp: &TopicPartition,
) -> Result<(u64, u64), CutError> {
    let start = offsets(conn, tp, -2, 1)
        .await?
        .first()
        .copied()
        .unwrap_or(0);
    let end = offsets(conn, tp, -1, 1)
        .await?
        .first()
        .copied()
        .unwrap_or(start);
    Ok((
        u64::try_from(start).unwrap_or(0),
        u64::try_from(end).unwrap_or(0),
    ))
}

/// Finds `tp`'s cut: `ours` is this cluster's broker, `theirs` the other cluster's broker it
/// copies from, `recorded` the other cluster's promotion cut for the partition, when it has one
/// that is common history.
pub async fn find<S: AsyncRead + AsyncWrite + Unpin>(
    ours: &mut Conn<S>,
    theirs: &mut Conn<S>,
    tp: &TopicPartition,
    recorded: Option<u64>,
) -> Result<Found, CutError> {
    let (start, end) = range(ours, tp).await?;
    let (known, from) = match recorded {
        Some(cut) => (cut.clamp(start, end), CutFrom::Promotion),
        None => (
            common_segment_start(ours, theirs, tp, start, end).await?,
            CutFrom::Compared,
        ),
    };
    let cut = first_difference(ours, theirs, tp, known, end).await?;
    let from = match from {
        CutFrom::Promotion if cut > known => CutFrom::PromotionAndCompared,
        other => other,
    };
    let entries = count(ours, tp, cut, end).await?;
    Ok(Found {
        cut,
        from,
        end: Some(end),
        entries: Some(entries),
    })
}

/// The newest segment start of this log (below its end) where the other log holds the same
/// message; this log's start when there is none.
async fn common_segment_start<S: AsyncRead + AsyncWrite + Unpin>(
    ours: &mut Conn<S>,
    theirs: &mut Conn<S>,
    tp: &TopicPartition,
    start: u64,
    end: u64,
) -> Result<u64, CutError> {
    let starts = offsets(ours, tp, -1, SEGMENT_STARTS_MAX).await?;
    for s in starts.into_iter().filter_map(|s| u64::try_from(s).ok()) {
        if s >= end || s < start {
            continue;
        }
        let mine = first_entry(ours, tp, s).await?;
        let other = first_entry(theirs, tp, s).await?;
        if let (Some(mine), Some(other)) = (mine, other) {
            if matches!(compare_entries(s, &mine, &other), Compared::SameThrough { next } if next > s)
            {
                return Ok(s);
            }
        }
    }
    Ok(start)
}

/// The first whole entry at `offset` (`None`: none there).
async fn first_entry<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<S>,
    tp: &TopicPartition,
    offset: u64,
) -> Result<Option<bytes::Bytes>, CutError> {
    let mut size = FETCH_BYTES.min(64 * 1024);
    loop {
        let Some(bytes) = fetch(conn, tp, offset, size).await? else {
            return Ok(None);
        };
        match ShallowIter::new(&bytes, 0).next() {
            Some(Ok(e)) => {
                let len = usize::try_from(e.next_offset).unwrap_or(bytes.len());
                return Ok(Some(bytes.slice(..len.min(bytes.len()))));
            }
            Some(Err(tributary_core::message::MessageError::FirstMessageTooLarge {
                length,
                ..
            })) if size < FETCH_BYTES_MAX => {
                size = u32::try_from(length)
                    .unwrap_or(FETCH_BYTES_MAX)
                    .saturating_add(4)
                    .min(FETCH_BYTES_MAX);
            }
            _ => return Ok(None),
        }
    }
}

/// The first offset at or after `from` (common to both) where the logs differ, or `end` (this
/// log's end) when this log holds only the other's messages up to it.
async fn first_difference<S: AsyncRead + AsyncWrite + Unpin>(
    ours: &mut Conn<S>,
    theirs: &mut Conn<S>,
    tp: &TopicPartition,
    from: u64,
    end: u64,
) -> Result<u64, CutError> {
    let mut at = from;
    let mut size = FETCH_BYTES;
    while at < end {
        let Some(mine) = fetch(ours, tp, at, size).await? else {
            return Ok(at);
        };
        // What the other log does not hold (deleted, or past its end) is not common.
        let Some(other) = fetch(theirs, tp, at, size).await? else {
            return Ok(at);
        };
        if other.is_empty() {
            return Ok(at);
        }
        match compare_entries(at, &mine, &other) {
            Compared::DiffersAt { at: differs } => return Ok(differs),
            Compared::SameThrough { next } if next > at => {
                at = next;
                size = FETCH_BYTES;
            }
            // A message larger than the fetch: ask for more.
            Compared::SameThrough { .. } if size < FETCH_BYTES_MAX => {
                size = size.saturating_mul(4).min(FETCH_BYTES_MAX);
            }
            Compared::SameThrough { .. } => return Ok(at),
        }
    }
    Ok(end.min(at))
}

/// Top-level messages of this log from `from` to `end`.
async fn count<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<S>,
    tp: &TopicPartition,
    from: u64,
    end: u64,
) -> Result<u64, CutError> {
    let mut at = from;
    let mut entries = 0;
    let mut size = FETCH_BYTES;
    while at < end {
        let Some(bytes) = fetch(conn, tp, at, size).await? else {
            break;
        };
        let mut iter = ShallowIter::new(&bytes, i64::try_from(at).unwrap_or(i64::MAX));
        let mut last = at;
        for entry in iter.by_ref() {
            match entry {
                Ok(e) => {
                    entries += 1;
                    last = u64::try_from(e.next_offset).unwrap_or(end);
                }
                Err(_) => break,
            }
        }
        if last == at {
            if size >= FETCH_BYTES_MAX {
                break;
            }
            size = size.saturating_mul(4).min(FETCH_BYTES_MAX);
            continue;
        }
        at = last;
        size = FETCH_BYTES;
    }
    Ok(entries)
}
