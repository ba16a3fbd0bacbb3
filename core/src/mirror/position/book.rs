//! [`PositionBook`]: one mirror partition's positions, kept in memory beside its log.

use std::collections::{BTreeMap, VecDeque};

use super::record::{self, Record, Tail};
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
    /// Where the log is cut so that no byte of it past the first record lacks its record:
    /// where a recorded append only partly in the log began, or where the records end when
    /// the log goes on past them. Such bytes were never flushed (a flush syncs the records
    /// first), so never acknowledged nor served: a crash tore them, or the disk wrote them
    /// back on its own.
    pub cut_log_to: Option<u64>,
    /// Records dropped because their sets are not (wholly) in the log.
    pub dropped: usize,
    /// What ended the file's valid records.
    pub tail: Tail,
}

/// Where a book stood before a record ([`PositionBook::mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BookMark {
    end: u64,
    begin: Option<u64>,
}

/// The positions of one mirror partition: per source partition, its recorded sets, oldest
/// first (thinned past [`HISTORY_MAX`]), the last being where its copy has reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PositionBook {
    sources: BTreeMap<SourceKey, VecDeque<Position>>,
    /// The mirror log's end after the last record (a mirrored set or another append).
    end: u64,
    /// Where the first record began: the records account for every byte from there.
    begin: Option<u64>,
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
        let first_start = decoded.records.first().map(|(_, r)| r.start());
        for (at, record) in decoded.records {
            let past_log = record.end() > log_end
                && !crate::planted::active(crate::planted::Bug::PositionOutlivesData);
            if cut_log_to.is_some() || past_log {
                if record.start() < log_end && cut_log_to.is_none() {
                    cut_log_to = Some(record.start());
                }
                keep_bytes = keep_bytes.min(at);
                dropped += 1;
                continue;
            }
            let kept = match record {
                Record::Mirrored(position) => book.record(position).is_ok(),
                Record::Begin { at } => book.begin_at(at).is_ok(),
                Record::Other { start, end } => book.note_other(start, end).is_ok(),
            };
            if !kept {
                keep_bytes = at;
                tail = Tail::Damaged {
                    at,
                    problem: record::RecordProblem::OutOfOrder,
                };
                break;
            }
        }
        let covered_to = book.begin.map(|_| book.end).or(first_start);
        if let Some(covered_to) = covered_to.filter(|c| *c < log_end) {
            let cut = cut_log_to.map_or(covered_to, |c: u64| c.min(covered_to));
            cut_log_to = Some(cut);
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
        if crate::planted::active(crate::planted::Bug::MirrorOverlapTakenAsHeld) && start < held_to
        {
            return Ok(Decision::Held);
        }
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

    /// Notes where the records begin (the log's end when they were made): from there on they
    /// account for every byte.
    pub fn begin_at(&mut self, at: u64) -> Result<(), PositionError> {
        if self.begin.is_some() || at < self.end {
            return Err(PositionError::OtherOutOfLogOrder {
                start: at,
                end: at,
                known_end: self.end,
            });
        }
        self.begin = Some(at);
        self.end = at;
        Ok(())
    }

    /// Whether another append at `start..end` may be noted next: non-empty, after every record.
    pub fn check_other(&self, start: u64, end: u64) -> Result<(), PositionError> {
        if start >= end || start < self.end {
            return Err(PositionError::OtherOutOfLogOrder {
                start,
                end,
                known_end: self.end,
            });
        }
        Ok(())
    }

    /// Notes an append that is not a mirrored set (or a hole), `start..end` of the log: the
    /// records account for it, so a crash that keeps its bytes without the record can tell.
    pub fn note_other(&mut self, start: u64, end: u64) -> Result<(), PositionError> {
        self.check_other(start, end)?;
        self.begin.get_or_insert(start);
        self.end = end;
        Ok(())
    }

    /// Takes back the last [`note_other`](Self::note_other) (its append did not happen).
    pub fn unnote_other(&mut self, mark: BookMark) {
        self.end = mark.end;
        self.begin = mark.begin;
    }

    /// Records an appended set's position (after [`check`](Self::check) accepts it; the same
    /// error otherwise, and nothing changes).
    pub fn record(&mut self, position: Position) -> Result<(), PositionError> {
        self.check(&position)?;
        self.begin.get_or_insert(position.mirror_start);
        self.end = position.mirror_end;
        let history = self.sources.entry(position.key.clone()).or_default();
        history.push_back(position);
        if history.len() > HISTORY_MAX {
            thin(history);
        }
        debug_assert!(self.invariants_hold());
        Ok(())
    }

    /// Where the book stands, for [`unrecord_last`](Self::unrecord_last).
    pub fn mark(&self) -> BookMark {
        BookMark {
            end: self.end,
            begin: self.begin,
        }
    }

    /// Undoes the last [`record`](Self::record) of `key`, whose set could not be appended after
    /// all; `mark` is the book's [`mark`](Self::mark) from before it. (Positions that recording
    /// thinned out stay out: translation through them lands earlier, never later.)
    pub fn unrecord_last(&mut self, key: &SourceKey, mark: BookMark) {
        if let Some(history) = self.sources.get_mut(key) {
            history.pop_back();
            if history.is_empty() {
                self.sources.remove(key);
            }
        }
        self.end = mark.end;
        self.begin = mark.begin;
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

    /// Every source partition with a recorded set, in key order, with its last position
    /// (where its copy has reached).
    pub fn sources(&self) -> impl Iterator<Item = &Position> {
        self.sources.values().filter_map(VecDeque::back)
    }

    /// Every source partition with a recorded set wholly below the mirror offset `end`, in key
    /// order, with the last such position: how far its copy reaches within `end` (with the
    /// log's flushed end, what the partition holds durably).
    pub fn held_within(&self, end: u64) -> impl Iterator<Item = &Position> {
        self.sources.values().filter_map(move |history| {
            let within = history.partition_point(|p| p.mirror_end <= end);
            within.checked_sub(1).and_then(|i| history.get(i))
        })
    }

    /// The mirror offset from which a reader that has read `key` up to source offset
    /// `source_offset` misses none of `key`'s messages it had not read: the end of the last
    /// recorded set wholly before it, or the start of the first set when none is (never past
    /// the last recorded set's end). `None` when nothing of `key` is recorded.
    pub fn translate(&self, key: &SourceKey, source_offset: i64) -> Option<u64> {
        let history = self.sources.get(key)?;
        let first = history.front()?;
        let mut before = history.partition_point(|p| p.source_next <= source_offset);
        if crate::planted::active(crate::planted::Bug::TranslationOneSetTooFar)
            && before < history.len()
        {
            before += 1;
        }
        Some(match before.checked_sub(1).and_then(|i| history.get(i)) {
            Some(last_before) => last_before.mirror_end,
            None => first.mirror_start,
        })
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
        let mirrored_end = kept.last().map(|p| p.mirror_end);
        let mut bytes: Vec<u8> = self
            .begin
            .map(|at| record::encode_record(&Record::Begin { at }))
            .unwrap_or_default();
        bytes.extend(kept.into_iter().flat_map(record::encode));
        // What came after the last kept set (other appends), so the rewrite accounts for the
        // same bytes.
        if let Some(begin) = self.begin {
            let start = mirrored_end.unwrap_or(begin).max(begin);
            if start < self.end {
                bytes.extend(record::encode_record(&Record::Other {
                    start,
                    end: self.end,
                }));
            }
        }
        bytes
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
