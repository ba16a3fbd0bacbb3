//! [`PositionBook`]: one mirror partition's positions, kept in memory beside its log.

use std::collections::{BTreeMap, VecDeque};

use super::record::{self, Tail};
use super::{Position, PositionError, SourceKey};

/// The most source partitions one mirror partition keeps positions for (fan-in of many
/// clusters' partitions into one is refused past it, never silently forgotten).
pub const SOURCES_MAX: usize = 1024;

/// The most positions kept per source partition for translation. When full, every second one
/// of the older half goes: recent positions stay dense, old ones sparse, and a translation
/// through a thinned stretch lands earlier (more re-read), never later.
pub const HISTORY_MAX: usize = 256;

/// What the mirror partition holds of a set a sender offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// None of it: append it, and record its position.
    Append,
    /// All of it: acknowledge it without appending.
    Held,
    /// The part before `held_to`: the sender drops those messages and offers the rest.
    Overlap {
        /// The source offset the held copy reaches.
        held_to: i64,
    },
}

/// A book read back from a records file after a crash, against the recovered log.
#[derive(Debug)]
pub struct Recovery {
    /// The positions of every set wholly in the log.
    pub book: PositionBook,
    /// The records file keeps this many bytes from its start; the rest goes.
    pub keep_bytes: usize,
    /// A recorded set only partly in the log (its tail torn by the crash, so never
    /// acknowledged): the log is cut to where the set began, so that no message is in the log
    /// without its position.
    pub cut_log_to: Option<u64>,
    /// Records dropped because their sets are not (wholly) in the log.
    pub dropped: usize,
    /// What ended the file's valid records.
    pub tail: Tail,
}

/// The positions of one mirror partition: per source partition, its recorded sets, oldest
/// first (thinned past [`HISTORY_MAX`]), the last being where its copy has reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PositionBook {
    sources: BTreeMap<SourceKey, VecDeque<Position>>,
    /// The mirror log's end after the last recorded set.
    end: u64,
}

impl PositionBook {
    /// A book with no positions (a partition no mirror has written to).
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the records `file` back against a log recovered to `log_end`: keeps every record
    /// whose set is wholly below `log_end`, drops the others, and asks for the log to be cut
    /// where a set only partly in it began. Records that do not follow one another in the log
    /// end the valid ones, as damage does.
    pub fn recover(file: &[u8], log_end: u64) -> Recovery {
        let decoded = record::decode(file);
        let mut book = PositionBook::new();
        let mut keep_bytes = decoded.valid_bytes;
        let mut cut_log_to = None;
        let mut dropped = 0;
        let mut tail = decoded.tail;
        for (at, position) in decoded.positions {
            if cut_log_to.is_some() || position.mirror_end > log_end {
                if position.mirror_start < log_end && cut_log_to.is_none() {
                    cut_log_to = Some(position.mirror_start);
                }
                keep_bytes = keep_bytes.min(at);
                dropped += 1;
                continue;
            }
            if book.record(position).is_err() {
                keep_bytes = at;
                tail = Tail::Damaged {
                    at,
                    problem: record::RecordProblem::OutOfOrder,
                };
                break;
            }
        }
        Recovery {
            book,
            keep_bytes,
            cut_log_to,
            dropped,
            tail,
        }
    }

    /// What this partition holds of the set covering source offsets `start..next` of `key`.
    pub fn decide(
        &self,
        key: &SourceKey,
        start: i64,
        next: i64,
    ) -> Result<Decision, PositionError> {
        if start < 0 || start >= next {
            return Err(PositionError::BadSourceRange {
                key: key.clone(),
                start,
                next,
            });
        }
        let Some(held_to) = self.resume_at(key) else {
            return Ok(Decision::Append);
        };
        Ok(if next <= held_to {
            Decision::Held
        } else if start >= held_to {
            Decision::Append
        } else {
            Decision::Overlap { held_to }
        })
    }

    /// Whether `position` may be recorded next: a well-formed set, after every set recorded in
    /// the log, not going back over its source partition's copy, and within [`SOURCES_MAX`].
    pub fn check(&self, position: &Position) -> Result<(), PositionError> {
        let key = &position.key;
        if position.source_start < 0 || position.source_start >= position.source_next {
            return Err(PositionError::BadSourceRange {
                key: key.clone(),
                start: position.source_start,
                next: position.source_next,
            });
        }
        if position.mirror_start >= position.mirror_end || position.mirror_start < self.end {
            return Err(PositionError::OutOfLogOrder {
                key: key.clone(),
                start: position.mirror_start,
                end: position.mirror_end,
                known_end: self.end,
            });
        }
        match self.resume_at(key) {
            Some(held_to) if position.source_start < held_to => Err(PositionError::Backwards {
                key: key.clone(),
                start: position.source_start,
                held_to,
            }),
            None if self.sources.len() >= SOURCES_MAX => Err(PositionError::TooManySources {
                max: SOURCES_MAX,
                key: key.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Records an appended set's position (after [`check`](Self::check) accepts it; the same
    /// error otherwise, and nothing changes).
    pub fn record(&mut self, position: Position) -> Result<(), PositionError> {
        self.check(&position)?;
        self.end = position.mirror_end;
        let history = self.sources.entry(position.key.clone()).or_default();
        history.push_back(position);
        if history.len() > HISTORY_MAX {
            thin(history);
        }
        debug_assert!(self.invariants_hold());
        Ok(())
    }

    /// Undoes the last [`record`](Self::record) of `key`, whose set could not be appended after
    /// all; `end_before` is [`end`](Self::end) as it was before it. (Positions that recording
    /// thinned out stay out: translation through them lands earlier, never later.)
    pub fn unrecord_last(&mut self, key: &SourceKey, end_before: u64) {
        if let Some(history) = self.sources.get_mut(key) {
            history.pop_back();
            if history.is_empty() {
                self.sources.remove(key);
            }
        }
        self.end = end_before;
        debug_assert!(self.invariants_hold());
    }

    /// The source offset `key`'s copy has reached (where copying goes on), if any set of it is
    /// recorded.
    pub fn resume_at(&self, key: &SourceKey) -> Option<i64> {
        self.sources
            .get(key)
            .and_then(VecDeque::back)
            .map(|p| p.source_next)
    }

    /// The mirror offset from which a reader that has read `key` up to source offset
    /// `source_offset` misses none of `key`'s messages it had not read: the end of the last
    /// recorded set wholly before it, or the start of the first set when none is (never past
    /// the last recorded set's end). `None` when nothing of `key` is recorded.
    pub fn translate(&self, key: &SourceKey, source_offset: i64) -> Option<u64> {
        let history = self.sources.get(key)?;
        let first = history.front()?;
        let before = history.partition_point(|p| p.source_next <= source_offset);
        Some(match before.checked_sub(1).and_then(|i| history.get(i)) {
            Some(last_before) => last_before.mirror_end,
            None => first.mirror_start,
        })
    }

    /// The last recorded position of every source partition, in key order.
    pub fn latest(&self) -> impl Iterator<Item = &Position> {
        self.sources.values().filter_map(VecDeque::back)
    }

    /// The mirror log's end after the last recorded set (0 when none is).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The records file for this book as it is (every kept position, in log order): what the
    /// file is rewritten to when it has grown past what the book keeps.
    pub fn records(&self) -> Vec<u8> {
        let mut kept: Vec<&Position> = self.sources.values().flatten().collect();
        kept.sort_by_key(|p| p.mirror_start);
        kept.into_iter().flat_map(record::encode).collect()
    }

    /// The book's invariants: every source partition has between one and [`HISTORY_MAX`]
    /// positions, their source and mirror ranges ascend without overlapping, and none ends
    /// past the book's end.
    pub fn invariants_hold(&self) -> bool {
        self.sources.len() <= SOURCES_MAX
            && self.sources.iter().all(|(key, history)| {
                !history.is_empty()
                    && history.len() <= HISTORY_MAX
                    && history
                        .iter()
                        .all(|p| &p.key == key && p.is_well_formed() && p.mirror_end <= self.end)
                    && history.iter().zip(history.iter().skip(1)).all(|(a, b)| {
                        a.source_next <= b.source_start && a.mirror_end <= b.mirror_start
                    })
            })
    }
}

/// Drops every second position of the older half of a full history (the newest is kept).
fn thin(history: &mut VecDeque<Position>) {
    let older = history.len() / 2;
    let mut index = 0usize;
    history.retain(|_| {
        let keep = index >= older || index.is_multiple_of(2);
        index += 1;
        keep
    });
}
