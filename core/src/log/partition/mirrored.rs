//! Mirrored appends: a set from a source partition goes into the log at most once, its
//! position recorded before it ([`crate::log::positions`]).

use super::{AppendInfo, Log, LogError, LogFs, ValidatedSet};
use crate::log::positions::{MirrorPositions, PositionsError};
use crate::mirror::position::{Decision, Position, PositionBook, SourceKey};

/// Which source messages a mirrored set holds: those of `key` from `start` up to (not
/// including) `next`, in source offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRange {
    /// The source partition.
    pub key: SourceKey,
    /// The source offset of the set's first message.
    pub start: i64,
    /// The source offset after its last message.
    pub next: i64,
}

/// What became of a mirrored set offered to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirroredAppend {
    /// It was appended and its position recorded.
    Appended(AppendInfo),
    /// The log already held all of it: nothing was appended.
    Held,
    /// The log held its messages below `held_to`: nothing was appended; the sender drops
    /// those and offers the rest.
    Overlap {
        /// The source offset the log's copy reaches.
        held_to: i64,
    },
}

impl<F: LogFs> Log<F> {
    /// Appends an already validated set (see [`Log::append`]), without flushing: when the
    /// message-count trigger fires, `flush_needed` says so and the caller flushes. When the
    /// log keeps mirror position records, the append's record is written first (and taken
    /// back if the append fails), so they account for every byte.
    pub fn append_validated(
        &mut self,
        set: &ValidatedSet,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        if self.positions.is_none() || set.messages == 0 {
            return self.append_unrecorded(set, now_ms);
        }
        self.check_writable()?;
        let start = self.written_end();
        let end = start.saturating_add(set.bytes.len() as u64);
        let tp = self.tp.clone();
        let positions = self.positions_for_writing()?;
        let written = positions
            .write_other(start, end)
            .map_err(|e| positions_error(&tp, e))?;
        let appended = self.append_unrecorded(set, now_ms);
        if appended.is_err() {
            self.take_back(written);
        }
        appended
    }

    /// Records a hole `from..to` the log is about to leave (synced at once: the hole is
    /// durable as soon as it is made); the record, to take back if the hole is not made.
    pub(crate) fn record_hole(
        &mut self,
        from: u64,
        to: u64,
    ) -> Result<Option<crate::log::positions::Written>, LogError> {
        if self.positions.is_none() {
            return Ok(None);
        }
        let tp = self.tp.clone();
        let positions = self.positions_for_writing()?;
        let recorded = positions
            .write_other(from, to)
            .map_err(|e| positions_error(&tp, e))?;
        if let Err(e) = positions.sync() {
            self.take_back(recorded);
            return Err(positions_error(&tp, e));
        }
        Ok(Some(recorded))
    }

    /// Takes back a hole's record when the hole could not be made.
    pub(crate) fn take_back_record(&mut self, recorded: Option<crate::log::positions::Written>) {
        if let Some(recorded) = recorded {
            self.take_back(recorded);
        }
    }

    /// Takes back a record whose append failed; when even that fails, nothing more is
    /// appended (a crash would keep a record naming bytes the log does not hold).
    fn take_back(&mut self, written: crate::log::positions::Written) {
        if let Some(positions) = self.positions.as_mut() {
            if let Err(undo) = positions.take_back(written) {
                self.poisoned.get_or_insert_with(|| {
                    format!("a mirror position could not be taken back: {undo}")
                });
            }
        }
    }

    /// Appends `set` unless the log already holds (some of) its source messages: the set's
    /// position is written before it, and taken back if the append fails, so the records never
    /// name a set the log does not hold. Flushing is the caller's, as after
    /// [`append_validated`](Log::append_validated); the flush syncs the records first.
    pub fn append_mirrored(
        &mut self,
        set: &ValidatedSet,
        source: &SourceRange,
        now_ms: i64,
    ) -> Result<MirroredAppend, LogError> {
        self.check_writable()?;
        if set.messages == 0 {
            return Ok(MirroredAppend::Held);
        }
        let positions = self.positions_for_writing()?;
        match positions
            .book()
            .decide(&source.key, source.start, source.next)
            .map_err(|e| positions_error(&self.tp, e.into()))?
        {
            _ if crate::planted::active(crate::planted::Bug::MirrorPositionsIgnored) => {
                // Appended anyway, and recorded as another write (the records stay in order).
                return self
                    .append_validated(set, now_ms)
                    .map(MirroredAppend::Appended);
            }
            Decision::Held => return Ok(MirroredAppend::Held),
            Decision::Overlap { held_to } => return Ok(MirroredAppend::Overlap { held_to }),
            Decision::Append => {}
        }
        let mirror_start = self.written_end();
        let position = Position {
            key: source.key.clone(),
            source_start: source.start,
            source_next: source.next,
            mirror_start,
            mirror_end: mirror_start + set.bytes.len() as u64,
        };
        let tp = self.tp.clone();
        let positions = self.positions_for_writing()?;
        let written = positions
            .write(position)
            .map_err(|e| positions_error(&tp, e))?;
        match self.append_unrecorded(set, now_ms) {
            Ok(info) => {
                assert_eq!(
                    info.offset, mirror_start,
                    "{tp}: a mirrored set went elsewhere than its recorded position"
                );
                Ok(MirroredAppend::Appended(info))
            }
            Err(e) => {
                self.take_back(written);
                Err(e)
            }
        }
    }

    /// The book of mirror positions, when the log has records.
    pub fn positions(&self) -> Option<&PositionBook> {
        self.positions.as_ref().map(MirrorPositions::book)
    }

    /// The records, created on the first mirrored append. When they cannot be begun durably
    /// (a failed write or sync), the log is poisoned as after any failed sync: the file may
    /// hold a beginning that is not durable, and opened again it would be taken for one, so
    /// sets appended after it could come back from a crash without their records.
    fn positions_for_writing(&mut self) -> Result<&mut MirrorPositions<F>, LogError> {
        let positions = match self.positions.take() {
            Some(positions) => positions,
            None => match MirrorPositions::open(self.fs.clone(), &self.dir, self.written_end()) {
                Ok(opened) => opened.positions,
                Err(e) => {
                    let error = positions_error(&self.tp, e);
                    if !crate::planted::active(crate::planted::Bug::PositionsBeginFailureIgnored) {
                        self.poisoned.get_or_insert_with(|| error.to_string());
                    }
                    return Err(error);
                }
            },
        };
        Ok(self.positions.insert(positions))
    }

    /// Reads the records back at open, if the partition has them, against the log as
    /// recovered: a tail they do not account for (never flushed: torn by a crash, or written
    /// back by the disk on its own) is cut from the log into a diverged file, so data and
    /// records come back together. Never below `promised`, the recovery checkpoint's flushed
    /// end: records that fail to account for promised data are damaged themselves (bit rot),
    /// and the data stays (its sets may be appended again: duplicates, never a loss).
    pub(crate) fn open_positions(&mut self, promised: u64, now_ms: i64) -> Result<(), LogError> {
        if !self.fs.exists(&MirrorPositions::<F>::path_in(&self.dir)) {
            return Ok(());
        }
        let opened = MirrorPositions::open(self.fs.clone(), &self.dir, self.written_end())
            .map_err(|e| positions_error(&self.tp, e))?;
        if opened.dropped > 0 || opened.cut_log_to.is_some() {
            tracing::warn!(
                "{}: {} mirror position record(s) past the recovered log dropped{}",
                self.tp,
                opened.dropped,
                opened.cut_log_to.map_or(String::new(), |cut| format!(
                    "; the log is cut back to {cut}, where a set torn by the crash began"
                ))
            );
        }
        if let crate::mirror::position::record::Tail::Damaged { at, problem } = &opened.tail {
            tracing::warn!(
                "{}: mirror position records end at a damaged record (byte {at}: {problem}); those after it are dropped",
                self.tp
            );
        }
        match opened.cut_log_to {
            Some(cut) if cut < promised => tracing::warn!(
                "{}: the mirror position records stop at {cut}, below the data the checkpoint promises ({promised}); the log is kept whole",
                self.tp
            ),
            Some(cut) => {
                self.cut_tail(cut, now_ms)?;
            }
            None => {}
        }
        self.positions = Some(opened.positions);
        Ok(())
    }
}

fn positions_error(tp: &crate::log::TopicPartition, source: PositionsError) -> LogError {
    LogError::Positions {
        partition: tp.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::indexing_slicing, clippy::panic)]
    use std::path::Path;

    use bytes::Bytes;

    use super::super::testing::{policy, tp, DIR, SEGMENT};
    use super::*;
    use crate::consumer::BrokerPartition;
    use crate::identity::ClusterId;
    use crate::log::MemFs;
    use crate::message::{CompressionCodec, MessageSetBuilder};

    fn source(start: i64, next: i64) -> SourceRange {
        SourceRange {
            key: SourceKey {
                cluster: ClusterId::parse("west").expect("id"),
                topic: "t".parse().expect("topic"),
                partition: BrokerPartition {
                    broker_id: 3,
                    partition: 0,
                },
            },
            start,
            next,
        }
    }

    fn set(first: u8, count: u8) -> ValidatedSet {
        let mut b = MessageSetBuilder::new();
        for i in 0..count {
            b.push(vec![first + i; 50]);
        }
        let bytes: Bytes = b.build(CompressionCodec::None);
        ValidatedSet::check(bytes, policy().validation).expect("valid")
    }

    fn reopen(fs: &MemFs) -> Log<MemFs> {
        super::super::testing::reopen(fs, false)
    }

    #[test]
    fn a_set_sent_again_is_held_and_a_partly_held_one_is_refused_with_where_the_copy_ends() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        let first = log
            .append_mirrored(&set(0, 3), &source(0, 300), 0)
            .expect("append");
        assert!(matches!(first, MirroredAppend::Appended(info) if info.offset == 0));
        let end = log.written_end();
        let again = log
            .append_mirrored(&set(0, 3), &source(0, 300), 0)
            .expect("held");
        assert_eq!(again, MirroredAppend::Held);
        let partly = log
            .append_mirrored(&set(2, 3), &source(200, 500), 0)
            .expect("overlap");
        assert_eq!(partly, MirroredAppend::Overlap { held_to: 300 });
        assert_eq!(log.written_end(), end, "nothing appended for a held set");
        let next = log
            .append_mirrored(&set(3, 2), &source(300, 500), 0)
            .expect("append");
        assert!(matches!(next, MirroredAppend::Appended(info) if info.offset == end));
        assert_eq!(
            log.positions().and_then(|b| b.resume_at(&source(0, 1).key)),
            Some(500)
        );
    }

    #[test]
    fn positions_come_back_with_the_log_after_a_restart() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        log.append_mirrored(&set(0, 3), &source(0, 300), 0)
            .expect("append");
        log.flush(0).expect("flush");
        drop(log);
        let mut log = reopen(&fs);
        assert_eq!(
            log.positions().and_then(|b| b.resume_at(&source(0, 1).key)),
            Some(300)
        );
        let again = log
            .append_mirrored(&set(0, 3), &source(0, 300), 0)
            .expect("held");
        assert_eq!(again, MirroredAppend::Held);
    }

    #[test]
    fn a_set_torn_by_a_crash_is_cut_from_the_log_and_its_record_dropped() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        log.append_mirrored(&set(0, 3), &source(0, 300), 0)
            .expect("append");
        let kept_end = log.written_end();
        log.append_mirrored(&set(3, 3), &source(300, 600), 0)
            .expect("append");
        log.flush(0).expect("flush");
        drop(log);
        // The crash kept the second set's first message only.
        let segment = fs.read_file(Path::new(SEGMENT)).expect("segment");
        let one_message = (segment.len() as u64 - kept_end) / 3;
        fs.put(
            Path::new(SEGMENT),
            &segment[..(kept_end + one_message) as usize],
        );
        let log = reopen(&fs);
        assert_eq!(
            log.written_end(),
            kept_end,
            "the torn set is cut back whole"
        );
        assert_eq!(
            log.positions().and_then(|b| b.resume_at(&source(0, 1).key)),
            Some(300)
        );
        let diverged = fs
            .list_dir(Path::new(DIR))
            .expect("list")
            .into_iter()
            .filter(|e| e.name.ends_with(".diverged"))
            .count();
        assert_eq!(diverged, 1, "what was cut is kept beside the log");
    }

    #[test]
    fn records_damaged_below_the_checkpoint_never_cut_promised_data() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        log.append_mirrored(&set(0, 3), &source(0, 300), 0)
            .expect("append");
        log.append_mirrored(&set(3, 3), &source(300, 600), 0)
            .expect("append");
        log.flush(0).expect("flush");
        let end = log.written_end();
        drop(log);
        // Bit rot in the records: the second set's record fails its CRC.
        let path = MirrorPositions::<MemFs>::path_in(Path::new(DIR));
        let mut records = fs.read_file(&path).expect("records");
        let last = records.len() - 3;
        records[last] ^= 0x55;
        fs.put(&path, &records);
        let hints = crate::log::RecoveryHints {
            clean_shutdown: false,
            checkpoint: Some(end),
        };
        let log = Log::open(fs.clone(), Path::new(DIR), tp(), policy(), hints, 0).expect("open");
        assert_eq!(log.written_end(), end, "promised data is never cut");
    }
}
