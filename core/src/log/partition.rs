//! One partition's log: an append-only sequence of segments addressed by byte offset.
//!
//! Guarantees:
//! - **Visible ⇒ durable.** Reads and OFFSETS see only bytes below the flushed end, and the
//!   flushed end moves only after a successful sync. After a failed sync (or a failed roll, or
//!   a failed write that cannot be cut off) the log is poisoned and refuses appends.
//! - **Whole sets or nothing.** An append validates the whole set first; a refused set writes
//!   nothing.
//! - Segments are contiguous: each starts where the previous ends — except across a **hole**
//!   ([`Log::skip_to`], used by a replica whose source deleted bytes before they were copied),
//!   which is recorded durably by an empty `<from>-<to>.gap` file before the segment after it
//!   exists; recovery accepts a discontinuity only where such a record names it. Only the last
//!   (active) segment takes appends, and rolling syncs it first, so unflushed bytes only ever
//!   live in the active segment.
//! - **Holes hold nothing.** A read inside a hole is `OffsetOutOfRange`, and OFFSETS (the
//!   earliest offset included) answer only from the segments after the newest hole — so a 0.7
//!   consumer that reaches a hole resets exactly as it would on the source, whose data there
//!   is gone too. Bytes before the newest hole stay readable at their offsets until retention
//!   deletes them.
//!
//! - **Failed is final.** A caller that saw an operation panic marks the log failed
//!   ([`Log::fail`]); from then on it refuses reads and writes alike, since its in-memory state
//!   may be half-updated.
//!
//! Call order: `append`/`read`/`offsets_before` at any time; `flush_due(now)` → `flush(now)`
//! from the flush scheduler; `retain(now)` from the cleaner. Every call takes `now` (ms since
//! the epoch) from the caller's clock.
//!
//! A caller that shares the log between tasks can keep the expensive parts outside its lock:
//! validate with [`ValidatedSet::check`] before locking and append with
//! [`Log::append_validated`]; flush in two steps with [`Log::begin_flush`] (under the lock),
//! [`FlushTicket::sync`] (without it) and [`Log::finish_flush`] (under it again), so readers of
//! already-flushed data never wait for an fsync.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::error::LogError;
use super::fs::{LogFile, LogFs};
use super::names::{gap_file_name, segment_file_name, TopicPartition};
use super::policy::LogPolicy;
use super::segment::{read_exact_at, Segment};

mod mirrored;
mod serve;
mod tail;
#[cfg(test)]
mod testing;
use crate::message::{validate_set, MessageError, ShallowIter, ValidationLimits};
pub use mirrored::{MirroredAppend, SourceRange};
pub use serve::{FileRange, Served};
pub(crate) use tail::LastEntry;
pub use tail::TailCut;

/// Where an appended set landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the set's first message.
    pub offset: u64,
    /// Offset after the set (the new written end).
    pub next_offset: u64,
    /// Messages appended, counted deep.
    pub messages: u64,
    /// Whether the append also flushed (the message-count trigger fired; [`Log::append`] only).
    pub flushed: bool,
    /// Whether the message-count trigger fired and the caller should flush now
    /// ([`Log::append_validated`] leaves the flush to its caller).
    pub flush_needed: bool,
}

/// A read's place in the log, found by [`Log::locate`].
#[derive(Debug, Clone, Copy)]
struct Located {
    /// Index of the segment read from.
    index: usize,
    /// The offset read at.
    pos: u64,
    /// Where the readable bytes of that segment end (its end or the visible end).
    readable_end: u64,
    /// Bytes to return: up to `max_bytes`, never past `readable_end`.
    want: usize,
}

/// A message set that passed the broker's whole-set validation; only [`ValidatedSet::check`]
/// makes one, so an append of it never decompresses or checks CRCs again.
#[derive(Debug, Clone)]
pub struct ValidatedSet {
    bytes: Bytes,
    messages: u64,
}

impl ValidatedSet {
    /// Validates `set` whole under `limits` (CRCs, sizes, compressed contents).
    pub fn check(set: Bytes, limits: ValidationLimits) -> Result<Self, MessageError> {
        let summary = validate_set(&set, limits)?;
        Ok(ValidatedSet {
            bytes: set,
            messages: summary.messages as u64,
        })
    }

    /// The set's bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Messages in the set, counted deep.
    pub fn messages(&self) -> u64 {
        self.messages
    }
}

/// The first step of a two-step flush: the file to sync (and the log's directory, the first
/// time) and the end it makes visible.
#[derive(Debug)]
pub struct FlushTicket<F: LogFs> {
    /// The mirror position records, synced with the segment: a flushed byte always has a
    /// durable record (bytes the disk kept without one were never flushed, and recovery
    /// cuts them).
    positions: Option<Arc<F::File>>,
    file: Arc<F::File>,
    path: PathBuf,
    /// The log's directory, when its entries are not known durable yet: synced after the file.
    dir: Option<(F, PathBuf)>,
    end: u64,
    /// The log's appended-message total when the ticket was issued.
    messages: u64,
    issued_ms: i64,
}

impl<F: LogFs> FlushTicket<F> {
    /// Syncs the mirror position records (when the log has them), the file, then the log's
    /// directory if the ticket carries it (call it without holding the log's lock). A synced
    /// file whose directory entry is not durable can vanish whole in a machine crash.
    pub fn sync(&self) -> std::io::Result<()> {
        if let Some(positions) = &self.positions {
            if !crate::planted::active(crate::planted::Bug::PositionsNotSynced) {
                positions.sync()?;
            }
        }
        self.file.sync()?;
        if let Some((fs, dir)) = &self.dir {
            fs.sync_dir(dir).map_err(|e| {
                std::io::Error::new(e.kind(), format!("sync directory {}: {e}", dir.display()))
            })?;
        }
        Ok(())
    }

    /// The end that becomes visible once the sync succeeded.
    pub fn end(&self) -> u64 {
        self.end
    }
}

/// A partition's log. See the module docs for its guarantees.
#[derive(Debug)]
pub struct Log<F: LogFs> {
    pub(crate) fs: F,
    pub(crate) tp: TopicPartition,
    pub(crate) dir: PathBuf,
    pub(crate) policy: LogPolicy,
    pub(crate) segments: Vec<Segment<F::File>>,
    /// Holes between segments (`from..to`), oldest first, each recorded by a gap file.
    pub(crate) holes: Vec<(u64, u64)>,
    pub(crate) flushed_end: u64,
    /// Messages appended since the log was opened, counted deep.
    pub(crate) appended_messages: u64,
    /// Of those, how many a finished flush covered.
    pub(crate) flushed_messages: u64,
    /// Flush tickets handed out and not finished yet.
    pub(crate) flushes_in_flight: u32,
    /// Whether every segment's directory entry is known durable (the directory was synced
    /// since the log was opened and after its newest segment was made). A log opened from disk
    /// starts `false` — a segment may be there only because the page cache kept it, as after a
    /// creation whose sync failed — and its first flush syncs the directory
    /// before any of its data counts as flushed.
    pub(crate) dir_synced: bool,
    /// When the oldest unflushed append happened; `None` when everything is flushed.
    pub(crate) first_unflushed_ms: Option<i64>,
    pub(crate) poisoned: Option<String>,
    /// Set when an operation panicked: the log refuses everything.
    pub(crate) failed: Option<String>,
    /// Where the last top-level message starts ([`Log::last_message`]).
    pub(crate) last_entry: LastEntry,
    /// The mirror position records, once a mirrored set was appended (or found at open).
    pub(crate) positions: Option<super::positions::MirrorPositions<F>>,
}

impl<F: LogFs> Log<F> {
    /// Creates a new, empty log in `dir` (which must not hold one), durably.
    pub fn create(
        fs: F,
        dir: &Path,
        tp: TopicPartition,
        policy: LogPolicy,
        now_ms: i64,
    ) -> Result<Self, LogError> {
        Self::create_at(fs, dir, tp, policy, 0, now_ms)
    }

    /// Creates a new, empty log whose first offset is `start` (its first segment is named
    /// after it, as 0.7 names segments): a replica of a source whose retention already
    /// deleted everything before `start` holds the same bytes at the same offsets.
    pub fn create_at(
        fs: F,
        dir: &Path,
        tp: TopicPartition,
        policy: LogPolicy,
        start: u64,
        now_ms: i64,
    ) -> Result<Self, LogError> {
        let io = |op, path: &Path, source| LogError::Io {
            partition: tp.to_string(),
            op,
            path: path.display().to_string(),
            source,
        };
        fs.create_dir_all(dir)
            .map_err(|e| io("create directory", dir, e))?;
        if let Some(parent) = dir.parent() {
            fs.sync_dir(parent)
                .map_err(|e| io("sync directory", parent, e))?;
        }
        let mut log = Log {
            fs,
            tp,
            dir: dir.to_path_buf(),
            policy,
            segments: Vec::new(),
            holes: Vec::new(),
            flushed_end: start,
            appended_messages: 0,
            flushed_messages: 0,
            flushes_in_flight: 0,
            dir_synced: false,
            first_unflushed_ms: None,
            poisoned: None,
            failed: None,
            last_entry: LastEntry::Unknown,
            positions: None,
        };
        log.new_segment(start, now_ms)?;
        Ok(log)
    }

    /// The partition this log holds.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    /// The first offset held.
    pub fn start_offset(&self) -> u64 {
        self.segments.first().map_or(0, |s| s.start)
    }

    /// Where the offsets the log advertises start: after its newest hole (OFFSETS answer from
    /// there on), else its first offset.
    pub fn advertised_start(&self) -> u64 {
        let start = self.start_offset();
        self.holes.last().map_or(start, |(_, to)| (*to).max(start))
    }

    /// The holes (`from..to`) the log holds, oldest first.
    pub fn holes(&self) -> &[(u64, u64)] {
        &self.holes
    }

    /// Leaves a hole from the written end to `to` and goes on there: flushes, records the hole
    /// durably (`<from>-<to>.gap`, synced with its directory), then starts a segment at `to`
    /// and makes it the visible end. Nothing is written into the hole. For a replica whose
    /// source deleted `from..to` before it was copied; `to` must be past the written end.
    pub fn skip_to(&mut self, to: u64, now_ms: i64) -> Result<(), LogError> {
        self.check_writable()?;
        let from = self.written_end();
        if to <= from {
            return Err(LogError::SkipBackwards {
                partition: self.tp.to_string(),
                end: from,
                to,
            });
        }
        if to > i64::MAX as u64 {
            return Err(LogError::OffsetOverflow {
                partition: self.tp.to_string(),
            });
        }
        self.flush(now_ms)?;
        let recorded = self.record_hole(from, to)?;
        let path = self.dir.join(gap_file_name(from, to));
        let gap = self
            .fs
            .open(&path, true)
            .and_then(|gap| gap.sync())
            .map_err(|e| self.io("create", &path, e))
            .and_then(|()| {
                self.fs
                    .sync_dir(&self.dir)
                    .map_err(|e| self.io("sync directory", &self.dir.clone(), e))
            });
        if let Err(e) = gap {
            self.take_back_record(recorded);
            return Err(e);
        }
        if let Err(e) = self.new_segment(to, now_ms) {
            // The segment at `to` may exist on disk without being known here: nothing more is
            // appended at `from` (recovery sorts it out at restart, the hole being recorded).
            self.poisoned.get_or_insert_with(|| {
                format!("starting the segment after the hole {from}..{to} failed: {e}")
            });
            return Err(e);
        }
        self.holes.push((from, to));
        self.flushed_end = to;
        tracing::warn!(
            "{}: hole {from}..{to} recorded ({}); the log goes on at {to}",
            self.tp,
            path.display()
        );
        debug_assert!(self.invariants_hold());
        Ok(())
    }

    /// The end of written (not necessarily visible) data.
    pub fn written_end(&self) -> u64 {
        self.segments.last().map_or(0, Segment::end)
    }

    /// The end of flushed, visible data.
    pub fn flushed_end(&self) -> u64 {
        self.flushed_end
    }

    /// Where reads stop: the flushed end (or, with a planted bug, the written end).
    fn visible_end(&self) -> u64 {
        if crate::planted::active(crate::planted::Bug::ServeUnflushed) {
            return self.written_end();
        }
        self.flushed_end
    }

    /// Number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Start offsets of the segments, oldest first.
    pub fn segment_starts(&self) -> Vec<u64> {
        self.segments.iter().map(|s| s.start).collect()
    }

    /// Whether the log is poisoned (a failed sync, roll or uncut write): it refuses appends.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    pub(crate) fn io(&self, op: &'static str, path: &Path, source: std::io::Error) -> LogError {
        LogError::Io {
            partition: self.tp.to_string(),
            op,
            path: path.display().to_string(),
            source,
        }
    }

    /// Marks the log failed (an operation on it panicked, so its state cannot be trusted):
    /// every later read, write, flush and offset lookup is refused.
    pub fn fail(&mut self, cause: String) {
        tracing::error!("{}: partition stopped: {cause}", self.tp);
        self.failed.get_or_insert(cause);
    }

    /// Whether the log was marked failed.
    pub fn is_failed(&self) -> bool {
        self.failed.is_some()
    }

    fn check_usable(&self) -> Result<(), LogError> {
        match &self.failed {
            Some(cause) => Err(LogError::Failed {
                partition: self.tp.to_string(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn check_writable(&self) -> Result<(), LogError> {
        self.check_usable()?;
        match &self.poisoned {
            Some(cause) => Err(LogError::Poisoned {
                partition: self.tp.to_string(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The validation limits of this log's policy.
    pub fn validation_limits(&self) -> ValidationLimits {
        self.policy.validation
    }

    /// Validates `set` whole and appends it to the active segment, rolling first if the segment
    /// would pass `segment_bytes_max` or is older than `segment_age_ms_max`. Flushes when the
    /// unflushed message count reaches the policy's limit. An empty set appends nothing.
    pub fn append(&mut self, set: &Bytes, now_ms: i64) -> Result<AppendInfo, LogError> {
        self.check_writable()?;
        let set = ValidatedSet::check(set.clone(), self.policy.validation).map_err(|source| {
            LogError::InvalidMessageSet {
                partition: self.tp.to_string(),
                source,
            }
        })?;
        let mut info = self.append_validated(&set, now_ms)?;
        if info.flush_needed {
            self.flush(now_ms)?;
            info.flushed = true;
        }
        Ok(info)
    }

    /// [`Log::append_validated`] without writing a mirror position record first.
    pub(crate) fn append_unrecorded(
        &mut self,
        set: &ValidatedSet,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.check_writable()?;
        let len = set.bytes.len() as u64;
        let offset = self.written_end();
        if set.messages == 0 {
            return Ok(AppendInfo {
                offset,
                next_offset: offset,
                messages: 0,
                flushed: false,
                flush_needed: false,
            });
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return Err(LogError::OffsetOverflow {
                partition: self.tp.to_string(),
            });
        }
        if self.should_roll(len, now_ms) {
            self.roll(now_ms)?;
        }
        self.write_active(&set.bytes, now_ms)?;
        self.appended_messages += set.messages;
        self.first_unflushed_ms.get_or_insert(now_ms);
        // A flush already running will be followed by the next append's; never pile fsyncs up.
        let flush_needed = self.unflushed_messages() >= self.policy.flush_interval_messages
            && self.flushes_in_flight == 0;
        // On in release (O(1)): the set went exactly at the end, and nothing past it counts
        // as flushed.
        assert_eq!(
            self.written_end(),
            offset + len,
            "{}: an append moved the log's end by other than its set's length",
            self.tp
        );
        assert!(self.flushed_end <= self.written_end());
        debug_assert!(self.invariants_hold());
        Ok(AppendInfo {
            offset,
            next_offset: offset + len,
            messages: set.messages,
            flushed: false,
            flush_needed,
        })
    }

    fn should_roll(&self, incoming: u64, now_ms: i64) -> bool {
        let Some(active) = self.segments.last() else {
            return true;
        };
        if active.size == 0 {
            return false;
        }
        let too_big = active.size + incoming > self.policy.segment_bytes_max;
        let too_old = active
            .first_append_ms
            .is_some_and(|t| now_ms - t >= self.policy.segment_age_ms_max);
        too_big || too_old
    }

    fn write_active(&mut self, set: &[u8], now_ms: i64) -> Result<(), LogError> {
        let Some(active) = self.segments.last_mut() else {
            return Err(self.io(
                "append",
                &self.dir.clone(),
                std::io::Error::other("no active segment"),
            ));
        };
        if let Err(e) = active.file.write_all_at(set, active.size) {
            // Drop whatever part of the set reached the file: it is not part of the log. If
            // that fails too, the file holds bytes past the log's end that the next append would
            // sit behind: nothing more is appended. At restart recovery drops a torn tail; whole
            // messages that reached the file may stay (the producer was told the append failed:
            // at least once, never lost).
            let path = active.path.clone();
            if let Err(truncate) = active.file.set_len(active.size) {
                let at = active.start + active.size;
                let cause = format!(
                    "a failed write left bytes past offset {at} in {} that could not be cut ({truncate})",
                    path.display()
                );
                tracing::error!(
                    "{}: {cause}; the partition takes no more writes until a restart",
                    self.tp
                );
                self.poisoned.get_or_insert(cause);
            }
            return Err(self.io("write", &path, e));
        }
        let written_at = active.size;
        active.size += set.len() as u64;
        // Only validated sets reach the file (see `append_validated`), at the end of the
        // previous one: a message starts at `written_at`.
        active.checked.record(written_at, active.size);
        active.modified_ms = now_ms;
        active.first_append_ms.get_or_insert(now_ms);
        let set_offset = active.start + written_at;
        self.note_appended(set_offset, set);
        Ok(())
    }

    /// Messages appended but not yet covered by a finished flush.
    pub fn unflushed_messages(&self) -> u64 {
        self.appended_messages - self.flushed_messages
    }

    /// Whether unflushed data is older than the policy's flush interval.
    pub fn flush_due(&self, now_ms: i64) -> bool {
        // A poisoned log never flushes again (its poisoning was reported when it happened).
        !self.is_poisoned()
            && self
                .first_unflushed_ms
                .is_some_and(|t| now_ms - t >= self.policy.flush_interval_ms)
    }

    /// Syncs the active segment and makes everything written visible. On failure the log is
    /// poisoned: nothing more is appended and the flushed end stays where it was.
    pub fn flush(&mut self, now_ms: i64) -> Result<(), LogError> {
        let Some(ticket) = self.begin_flush(now_ms)? else {
            return Ok(());
        };
        let synced = ticket.sync();
        self.finish_flush(ticket, synced)
    }

    /// First step of a two-step flush: what to sync to make everything written so far visible,
    /// or `None` when everything is already visible.
    pub fn begin_flush(&mut self, now_ms: i64) -> Result<Option<FlushTicket<F>>, LogError> {
        self.check_writable()?;
        let end = self.written_end();
        if self.flushed_end == end {
            return Ok(None);
        }
        let Some(active) = self.segments.last() else {
            return Ok(None);
        };
        self.flushes_in_flight += 1;
        let dir = (!self.dir_synced).then(|| (self.fs.clone(), self.dir.clone()));
        Ok(Some(FlushTicket {
            positions: self.positions.as_ref().map(|p| p.file()),
            file: active.file.clone(),
            path: active.path.clone(),
            dir,
            end,
            messages: self.appended_messages,
            issued_ms: now_ms,
        }))
    }

    /// Last step of a two-step flush: publishes the ticket's end when its sync succeeded (never
    /// moving the flushed end back: a later flush or a roll may have gone further meanwhile);
    /// poisons the log when it failed.
    ///
    /// Once any sync of the log failed, no later one counts: a failed fsync may have dropped
    /// dirty pages, so a later successful one proves nothing about the bytes before it.
    pub fn finish_flush(
        &mut self,
        ticket: FlushTicket<F>,
        synced: std::io::Result<()>,
    ) -> Result<(), LogError> {
        self.flushes_in_flight = self.flushes_in_flight.saturating_sub(1);
        self.check_usable()?;
        if let Err(e) = synced {
            self.poisoned
                .get_or_insert_with(|| format!("sync of {} failed: {e}", ticket.path.display()));
            return Err(self.io("sync", &ticket.path, e));
        }
        self.check_writable()?;
        // On in release: a flush never vouches for bytes the log does not hold.
        assert!(
            ticket.end <= self.written_end(),
            "{}: a flush ticket ends past the written end",
            self.tp
        );
        if ticket.dir.is_some() {
            self.dir_synced = true;
        }
        if ticket.end > self.flushed_end {
            self.flushed_end = ticket.end;
            self.flushed_messages = self.flushed_messages.max(ticket.messages);
        }
        if self.flushed_end == self.written_end() {
            self.flushed_messages = self.appended_messages;
            self.first_unflushed_ms = None;
        } else {
            // What is still unflushed was appended after the ticket was issued.
            self.first_unflushed_ms = Some(
                self.first_unflushed_ms
                    .map_or(ticket.issued_ms, |t| t.max(ticket.issued_ms)),
            );
        }
        assert!(
            self.flushed_end <= self.written_end()
                && self.flushed_messages <= self.appended_messages,
            "{}: more counted as flushed than was written",
            self.tp
        );
        debug_assert!(self.invariants_hold());
        Ok(())
    }

    /// Flushes the active segment and starts a new one at the written end. A new segment that
    /// cannot be made (its sync failed, say) may still exist on disk, empty, where the log ends:
    /// the log is poisoned, so nothing more is appended to the old segment past the new one's
    /// start (recovery would rightly refuse a segment reaching into the next one).
    fn roll(&mut self, now_ms: i64) -> Result<(), LogError> {
        self.flush(now_ms)?;
        let start = self.written_end();
        if let Err(e) = self.new_segment(start, now_ms) {
            self.poisoned
                .get_or_insert_with(|| format!("starting the segment at {start} failed: {e}"));
            return Err(e);
        }
        Ok(())
    }

    /// Creates, syncs and registers an empty segment starting at `start`.
    fn new_segment(&mut self, start: u64, now_ms: i64) -> Result<(), LogError> {
        let path = self.dir.join(segment_file_name(start));
        if self.fs.exists(&path) {
            let len = self
                .fs
                .open(&path, false)
                .and_then(|f| f.size_bytes())
                .map_err(|e| self.io("open", &path, e))?;
            if len > 0 {
                return Err(LogError::Corrupt {
                    partition: self.tp.to_string(),
                    segment: segment_file_name(start),
                    offset: start,
                    detail: format!("a {len}-byte file already exists where a new segment belongs"),
                });
            }
        }
        let file = self
            .fs
            .open(&path, true)
            .map_err(|e| self.io("create", &path, e))?;
        file.sync().map_err(|e| self.io("sync", &path, e))?;
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| self.io("sync directory", &self.dir.clone(), e))?;
        self.dir_synced = true;
        self.segments
            .push(Segment::new(start, Arc::new(file), path, 0, now_ms));
        Ok(())
    }

    /// Reads up to `max_bytes` of whole messages starting at `offset` (a trailing partial
    /// message is allowed, as 0.7 does), from one segment, never past the flushed end.
    ///
    /// `offset == flushed end` gives an empty result. An offset outside the log, or one where no
    /// valid message starts (not a message boundary), is `OffsetOutOfRange`.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<Bytes, LogError> {
        match self.locate(offset, max_bytes)? {
            Some(at) => self.read_located(&at),
            None => Ok(Bytes::new()),
        }
    }

    /// Where a read of up to `max_bytes` at `offset` falls: `None` when it returns nothing (at
    /// the visible end, or `max_bytes` is 0); `OffsetOutOfRange` outside the log or in a hole.
    fn locate(&self, offset: i64, max_bytes: usize) -> Result<Option<Located>, LogError> {
        self.check_usable()?;
        let out_of_range = || LogError::OffsetOutOfRange {
            partition: self.tp.to_string(),
            offset,
            start: self.start_offset(),
            end: self.flushed_end,
        };
        let visible_end = self.visible_end();
        let pos = u64::try_from(offset).map_err(|_| out_of_range())?;
        if pos < self.start_offset() || pos > visible_end {
            return Err(out_of_range());
        }
        if pos == visible_end || max_bytes == 0 {
            return Ok(None);
        }
        let index = self
            .segments
            .partition_point(|s| s.start <= pos)
            .saturating_sub(1);
        let Some(segment) = self.segments.get(index) else {
            return Err(out_of_range());
        };
        if pos >= segment.end() {
            // Past this segment's end and below the visible end: inside a hole.
            return Err(out_of_range());
        }
        let readable_end = segment.end().min(visible_end);
        let want = usize::try_from(readable_end - pos)
            .unwrap_or(usize::MAX)
            .min(max_bytes);
        Ok(Some(Located {
            index,
            pos,
            readable_end,
            want,
        }))
    }

    /// Reads a located range into memory and checks every message in it.
    fn read_located(&self, at: &Located) -> Result<Bytes, LogError> {
        let out_of_range = || LogError::OffsetOutOfRange {
            partition: self.tp.to_string(),
            offset: at.pos as i64,
            start: self.start_offset(),
            end: self.flushed_end,
        };
        let segment = self.segments.get(at.index).ok_or_else(out_of_range)?;
        let buf = read_exact_at(segment.file.as_ref(), at.pos - segment.start, at.want)
            .map_err(|e| self.io("read", &segment.path, e))?;
        self.checked_read(segment, at.pos, at.readable_end, Bytes::from(buf))
            .ok_or_else(out_of_range)
    }

    /// Validates what a read returns: the first message must be a valid message starting at
    /// `pos` (else `pos` is not a boundary); later corruption cuts the result short.
    fn checked_read(
        &self,
        segment: &Segment<F::File>,
        pos: u64,
        readable_end: u64,
        buf: Bytes,
    ) -> Option<Bytes> {
        let mut entries = ShallowIter::new(&buf, pos as i64);
        let mut valid = 0;
        for entry in entries.by_ref() {
            match entry {
                Ok(e) => valid = (e.next_offset - pos as i64) as usize,
                Err(MessageError::FirstMessageTooLarge { length, .. }) => {
                    // The first message does not fit in max_bytes: check it against the file.
                    return self
                        .first_message_valid(segment, pos, readable_end, length)
                        .then_some(buf);
                }
                Err(error) if valid == 0 => {
                    tracing::debug!("{}: fetch at {pos} refused: {error}", self.tp);
                    return None;
                }
                Err(error) => {
                    tracing::error!(
                        "{}: {error}; serving only the {valid} valid bytes before it",
                        self.tp
                    );
                    segment
                        .checked
                        .extend(pos - segment.start, pos - segment.start + valid as u64);
                    return Some(buf.slice(..valid));
                }
            }
        }
        // Every whole message returned was checked: later reads of them need no second pass.
        segment
            .checked
            .extend(pos - segment.start, pos - segment.start + valid as u64);
        if valid == 0 && entries.end().trailing_bytes > 0 {
            // Fewer than 4 bytes were asked for: the length field itself must still make sense.
            return self
                .first_message_valid(segment, pos, readable_end, -1)
                .then_some(buf);
        }
        Some(buf)
    }

    /// Whether a whole valid message of `length` (or of the length stored there, when -1)
    /// starts at `pos`, reading it from the segment.
    fn first_message_valid(
        &self,
        segment: &Segment<F::File>,
        pos: u64,
        readable_end: u64,
        length: i32,
    ) -> bool {
        let length = if length >= 0 {
            length as u64
        } else {
            match read_exact_at(segment.file.as_ref(), pos - segment.start, 4) {
                Ok(b) => match <[u8; 4]>::try_from(b.as_slice()) {
                    Ok(word) => u64::from(u32::from_be_bytes(word)),
                    Err(_) => return false,
                },
                Err(_) => return false,
            }
        };
        let whole = 4 + length;
        if pos + whole > readable_end {
            return false;
        }
        match read_exact_at(segment.file.as_ref(), pos - segment.start, whole as usize) {
            Ok(bytes) => matches!(ShallowIter::new(&bytes, pos as i64).next(), Some(Ok(_))),
            Err(_) => false,
        }
    }

    /// 0.7's `getOffsetsBefore`: up to `max_offsets` segment start offsets (plus the flushed
    /// end, when the active segment holds flushed data), newest first, starting from the latest
    /// (`time == -1`), the earliest (`-2`), or the newest whose segment was last modified at or
    /// before `time`.
    pub fn offsets_before(
        &self,
        time: i64,
        max_offsets: i32,
        now_ms: i64,
    ) -> Result<Vec<i64>, LogError> {
        self.check_usable()?;
        let advertised = self.advertised_start();
        let mut candidates: Vec<(u64, i64)> = self
            .segments
            .iter()
            .filter(|s| s.start >= advertised)
            .map(|s| (s.start, s.modified_ms))
            .collect();
        let visible_end = self.visible_end();
        if self.segments.last().is_some_and(|s| visible_end > s.start) {
            candidates.push((visible_end, now_ms));
        }
        let start_index = match time {
            -1 => candidates.len().checked_sub(1),
            -2 => (!candidates.is_empty()).then_some(0),
            t => candidates.iter().rposition(|(_, ts)| *ts <= t),
        };
        let Some(start_index) = start_index else {
            return Ok(Vec::new());
        };
        let count = usize::try_from(max_offsets)
            .unwrap_or(0)
            .min(start_index + 1);
        Ok(candidates
            .iter()
            .take(start_index + 1)
            .rev()
            .take(count)
            .map(|(o, _)| *o as i64)
            .collect())
    }

    /// Applies retention: deletes, oldest first, segments last modified more than the
    /// retention time ago, then segments while the log exceeds the size limit (0.7's rules:
    /// whole segments only; if every segment goes, a fresh empty one is rolled at the end first
    /// so offsets keep growing; an empty last segment is kept and its time refreshed).
    /// Returns how many segments were deleted.
    pub fn retain(&mut self, now_ms: i64) -> Result<usize, LogError> {
        self.check_usable()?;
        let mut count = self
            .segments
            .iter()
            .take_while(|s| now_ms - s.modified_ms > self.policy.retention_ms)
            .count();
        if let Some(limit) = self.policy.retention_bytes {
            let total: u64 = self.segments.iter().map(|s| s.size).sum();
            let mut excess = total.saturating_sub(limit);
            for segment in self.segments.iter().skip(count) {
                if segment.size > excess {
                    break;
                }
                excess -= segment.size;
                count += 1;
            }
        }
        if count == 0 {
            return Ok(0);
        }
        if count == self.segments.len() {
            match self.segments.last_mut() {
                Some(last) if last.size == 0 => {
                    last.modified_ms = now_ms;
                    count -= 1;
                }
                _ => {
                    self.check_writable()?;
                    self.roll(now_ms)?;
                }
            }
        }
        self.delete_oldest(count)
    }

    fn delete_oldest(&mut self, count: usize) -> Result<usize, LogError> {
        let doomed: Vec<_> = self.segments.drain(..count).collect();
        assert!(!self.segments.is_empty(), "retention must keep a segment");
        let mut all_deleted = true;
        for segment in &doomed {
            tracing::info!(
                "{}: deleting segment {} (retention)",
                self.tp,
                segment.name()
            );
            if let Err(e) = self.fs.remove_file(&segment.path) {
                all_deleted = false;
                tracing::warn!(
                    "{}: cannot delete {}: {e}; it will reappear at restart",
                    self.tp,
                    segment.path.display()
                );
            }
        }
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| self.io("sync directory", &self.dir.clone(), e))?;
        if matches!(self.last_entry, LastEntry::At(at) if at < self.start_offset()) {
            self.last_entry = LastEntry::Unknown;
        }
        // Holes below the first segment separate nothing any more. Their records go only once
        // the segments before them are durably gone: a segment that comes back at restart
        // still needs the record of the hole after it.
        let start = self.start_offset();
        let (gone, kept): (Vec<_>, Vec<_>) = self.holes.iter().partition(|(_, to)| *to <= start);
        self.holes = kept;
        if all_deleted && !gone.is_empty() {
            for (from, to) in gone {
                let path = self.dir.join(gap_file_name(from, to));
                if let Err(e) = self.fs.remove_file(&path) {
                    tracing::warn!("{}: cannot delete {}: {e}", self.tp, path.display());
                }
            }
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| self.io("sync directory", &self.dir.clone(), e))?;
        }
        debug_assert!(self.invariants_hold());
        Ok(doomed.len())
    }

    /// Syncs everything written (used at shutdown), then reports the flushed end.
    pub fn close(&mut self, now_ms: i64) -> Result<u64, LogError> {
        self.check_usable()?;
        if self.poisoned.is_none() {
            self.flush(now_ms)?;
        }
        Ok(self.flushed_end)
    }

    /// Segments contiguous but for recorded holes and non-empty list, flushed end within the
    /// active segment.
    pub(crate) fn invariants_hold(&self) -> bool {
        let contiguous = self
            .segments
            .iter()
            .zip(self.segments.iter().skip(1))
            .all(|(a, b)| a.end() == b.start || self.holes.contains(&(a.end(), b.start)));
        let active_start = self.segments.last().map_or(0, |s| s.start);
        !self.segments.is_empty()
            && contiguous
            && self.flushed_end <= self.written_end()
            && self.flushed_end >= active_start
            && (self.flushed_end == self.written_end()) == self.first_unflushed_ms.is_none()
    }
}
