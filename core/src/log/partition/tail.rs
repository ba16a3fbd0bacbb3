//! The end of a partition's log: the last message it holds (a replica compares it with its
//! source's message at the same offset before it appends more), and cutting the log back to an
//! earlier offset with everything after it kept in a diverged file (a demotion).
//!
//! Guarantees of [`Log::cut_tail`]:
//! - **Nothing is discarded.** The bytes past the cut are written to
//!   `<cut>.<end>.diverged` beside the segments (a valid 0.7 segment starting at `cut`: `dump-log`
//!   lists it, a producer can re-publish it) and made durable, file and directory, before any
//!   segment is cut or deleted.
//! - **Crash-safe.** Segments past the cut are deleted newest first, the directory synced after
//!   each, and the segment holding the cut is truncated last, so a crash leaves a contiguous log
//!   ending between the cut and the old end. Recovery accepts such a log below its checkpoint
//!   only where a diverged file covers the missing range, and cutting again at the same offset
//!   finds the tail already saved and does not save it twice.
//! - The cut must be a message boundary inside the log (after its newest hole): checked by
//!   walking the length fields of the segment holding it.

use std::path::PathBuf;

use super::{read_exact_at, Log, LogError, LogFile, LogFs};
use crate::log::names::{diverged_file_name, gap_file_name, parse_diverged_file_name};
use crate::message::{MessageMark, ShallowIter, HEADER_BYTES_MAGIC0, LENGTH_BYTES};

/// Bytes read per step while walking a segment's length fields or copying a tail.
const CHUNK_BYTES: usize = 1024 * 1024;

/// Where the log's last top-level message starts, as far as this process knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastEntry {
    /// Not known yet (after opening or cutting): found by walking the newest segment once.
    Unknown,
    /// It starts at this offset (kept up to date by every append).
    At(u64),
}

/// What cutting a log's tail did ([`Log::cut_tail`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailCut {
    /// Where the log ends now.
    pub cut: u64,
    /// Where it ended before.
    pub end: u64,
    /// Top-level entries moved out (a compressed wrapper counts once).
    pub entries: u64,
    /// The diverged file holding them (`None` when nothing was past the cut).
    pub file: Option<PathBuf>,
}

impl TailCut {
    /// Bytes moved out of the log.
    pub fn bytes(&self) -> u64 {
        self.end - self.cut
    }
}

/// Where a walk over a segment's length fields stopped.
#[derive(Debug, Clone, Copy)]
struct Walk {
    /// File position of the last entry that starts before the walk's limit.
    last: Option<u64>,
    /// The first entry boundary at or past the limit (or where a bad length stopped the walk).
    reached: u64,
    /// Entries walked over.
    entries: u64,
    /// A length field that cannot be (shorter than a header) stopped the walk.
    bad: bool,
}

/// Walks the entries of `file` by their length fields from position `from` (an entry boundary)
/// until `until`; CRCs are not read.
fn walk<F: LogFile>(file: &F, from: u64, until: u64) -> std::io::Result<Walk> {
    let mut out = Walk {
        last: None,
        reached: from,
        entries: 0,
        bad: false,
    };
    while out.reached < until {
        let want = usize::try_from(until - out.reached)
            .unwrap_or(usize::MAX)
            .min(CHUNK_BYTES);
        let chunk_start = out.reached;
        let chunk = read_exact_at(file, chunk_start, want)?;
        let mut progressed = false;
        loop {
            let at = usize::try_from(out.reached - chunk_start).unwrap_or(usize::MAX);
            let Some(field) = chunk.get(at..at.saturating_add(LENGTH_BYTES)) else {
                break;
            };
            let mut word = [0u8; LENGTH_BYTES];
            word.copy_from_slice(field);
            let length = i32::from_be_bytes(word);
            let Some(body) = usize::try_from(length)
                .ok()
                .filter(|l| *l >= HEADER_BYTES_MAGIC0)
            else {
                out.bad = true;
                return Ok(out);
            };
            out.last = Some(out.reached);
            out.entries += 1;
            out.reached += (LENGTH_BYTES + body) as u64;
            progressed = true;
            if out.reached >= until {
                break;
            }
        }
        if !progressed {
            // The file ends inside a length field.
            out.bad = true;
            return Ok(out);
        }
    }
    Ok(out)
}

impl<F: LogFs> Log<F> {
    /// The last top-level message the log holds (written, not necessarily flushed), or `None`
    /// when it holds none. Known after any append; otherwise found once by walking the newest
    /// segment that holds data (its length fields only).
    pub fn last_message(&mut self) -> Result<Option<MessageMark>, LogError> {
        self.check_usable()?;
        let at = match self.last_entry {
            LastEntry::At(at) => Some(at),
            LastEntry::Unknown => {
                let found = self.find_last_entry()?;
                if let Some(at) = found {
                    self.last_entry = LastEntry::At(at);
                }
                found
            }
        };
        match at {
            Some(at) => self.mark_at(at).map(Some),
            None => Ok(None),
        }
    }

    /// Where the entry that ends at `offset` starts: `None` when no entry ends there (`offset`
    /// is where the log starts, falls in a hole, or is not a message boundary).
    pub fn entry_before(&self, offset: u64) -> Result<Option<u64>, LogError> {
        self.check_usable()?;
        let Some(segment) = self
            .segments
            .iter()
            .find(|s| s.start < offset && offset <= s.end())
        else {
            return Ok(None);
        };
        let within = offset - segment.start;
        let walked = walk(segment.file.as_ref(), 0, within)
            .map_err(|e| self.io("read", &segment.path, e))?;
        Ok((!walked.bad && walked.reached == within)
            .then_some(walked.last.map(|l| segment.start + l))
            .flatten())
    }

    /// Notes where the last entry of a set just written at `offset` starts.
    pub(crate) fn note_appended(&mut self, offset: u64, set: &[u8]) {
        let mut entries = ShallowIter::prechecked(set, 0);
        let mut last = None;
        for entry in entries.by_ref() {
            match entry {
                Ok(e) => last = Some(e.offset),
                Err(_) => break,
            }
        }
        self.last_entry = match last.and_then(|l| u64::try_from(l).ok()) {
            Some(l) => LastEntry::At(offset + l),
            None => LastEntry::Unknown,
        };
    }

    /// Where the newest entry starts, walking the newest segment that holds data.
    fn find_last_entry(&self) -> Result<Option<u64>, LogError> {
        let Some(segment) = self.segments.iter().rev().find(|s| s.size > 0) else {
            return Ok(None);
        };
        let walked = walk(segment.file.as_ref(), 0, segment.size)
            .map_err(|e| self.io("read", &segment.path, e))?;
        if walked.bad || walked.reached != segment.size {
            return Err(LogError::Corrupt {
                partition: self.tp.to_string(),
                segment: segment.name(),
                offset: segment.start + walked.reached,
                detail: "its entries' lengths do not end where the segment ends".into(),
            });
        }
        Ok(walked.last.map(|l| segment.start + l))
    }

    /// The mark of the entry starting at `at` (read whole from its segment and checked).
    fn mark_at(&self, at: u64) -> Result<MessageMark, LogError> {
        let corrupt = |segment: String, detail: String| LogError::Corrupt {
            partition: self.tp.to_string(),
            segment,
            offset: at,
            detail,
        };
        let index = self
            .segments
            .partition_point(|s| s.start <= at)
            .saturating_sub(1);
        let Some(segment) = self.segments.get(index).filter(|s| at < s.end()) else {
            return Err(corrupt(String::new(), "no segment holds it".into()));
        };
        let pos = at - segment.start;
        let file = segment.file.as_ref();
        let head = read_exact_at(file, pos, LENGTH_BYTES)
            .map_err(|e| self.io("read", &segment.path, e))?;
        let length = match <[u8; LENGTH_BYTES]>::try_from(head.as_slice()) {
            Ok(word) => u64::from(u32::from_be_bytes(word)),
            Err(_) => {
                return Err(corrupt(
                    segment.name(),
                    "its length field is cut short".into(),
                ))
            }
        };
        let whole = usize::try_from(LENGTH_BYTES as u64 + length).unwrap_or(usize::MAX);
        if pos + whole as u64 > segment.size {
            return Err(corrupt(
                segment.name(),
                "the entry runs past its segment".into(),
            ));
        }
        let bytes =
            read_exact_at(file, pos, whole).map_err(|e| self.io("read", &segment.path, e))?;
        match ShallowIter::new(&bytes, at as i64).next() {
            Some(Ok(entry)) => MessageMark::of(&entry)
                .ok_or_else(|| corrupt(segment.name(), "a negative offset".into())),
            Some(Err(e)) => Err(corrupt(segment.name(), e.to_string())),
            None => Err(corrupt(segment.name(), "no whole entry there".into())),
        }
    }

    /// Cuts the log back to `cut` (see the module's guarantees): everything from `cut` to the
    /// written end is first flushed, then kept in a diverged file beside the segments, then
    /// removed from the log, which ends at `cut` and takes appends there. `cut` must be a
    /// message boundary at or after the log's advertised start; cutting at the end moves
    /// nothing.
    pub fn cut_tail(&mut self, cut: u64, now_ms: i64) -> Result<TailCut, LogError> {
        self.check_writable()?;
        let end = self.written_end();
        let refuse = |detail: String| LogError::CannotCut {
            partition: self.tp.to_string(),
            cut,
            detail,
        };
        if cut > end {
            return Err(refuse(format!("the log ends at {end}")));
        }
        if cut < self.advertised_start() {
            return Err(refuse(format!(
                "the log's served offsets start at {}",
                self.advertised_start()
            )));
        }
        let index = self
            .segments
            .partition_point(|s| s.start <= cut)
            .saturating_sub(1);
        let Some(segment) = self.segments.get(index) else {
            return Err(refuse("no segment holds it".into()));
        };
        let within = cut - segment.start;
        if within > segment.size {
            return Err(refuse("it falls in a hole".into()));
        }
        let walked = walk(segment.file.as_ref(), 0, within)
            .map_err(|e| self.io("read", &segment.path, e))?;
        if walked.bad || walked.reached != within {
            return Err(refuse(format!(
                "no message starts there (one ends at {})",
                segment.start + walked.last.map_or(0, |_| walked.reached)
            )));
        }
        if cut == end {
            // Cut there already (a demotion carried out again after a crash): what it saved is
            // reported again.
            return self.saved_at(cut);
        }
        self.flush(now_ms)?;
        let entries = self.count_entries(index, within)?;
        let file = self.save_tail(index, within, cut, end)?;
        self.drop_tail(index, within)?;
        debug_assert_eq!(self.written_end(), cut);
        debug_assert!(self.invariants_hold());
        tracing::warn!(
            "{}: log cut back to {cut}: {entries} entries ({} bytes, {cut}..{end}) moved to {}",
            self.tp,
            end - cut,
            file.display()
        );
        Ok(TailCut {
            cut,
            end,
            entries,
            file: Some(file),
        })
    }

    /// The tail an earlier cut at `cut` saved, if its diverged file is here (its entries
    /// counted from the file); nothing moved otherwise.
    fn saved_at(&self, cut: u64) -> Result<TailCut, LogError> {
        let nothing = TailCut {
            cut,
            end: cut,
            entries: 0,
            file: None,
        };
        let listed = self
            .fs
            .list_dir(&self.dir)
            .map_err(|e| self.io("list", &self.dir.clone(), e))?;
        let Some((end, name)) = listed.iter().find_map(|entry| {
            parse_diverged_file_name(&entry.name)
                .filter(|(c, _)| *c == cut)
                .map(|(_, e)| (e, entry.name.clone()))
        }) else {
            return Ok(nothing);
        };
        let path = self.dir.join(name);
        let file = self
            .fs
            .open(&path, false)
            .map_err(|e| self.io("open", &path, e))?;
        let walked = walk(&file, 0, end - cut).map_err(|e| self.io("read", &path, e))?;
        Ok(TailCut {
            cut,
            end,
            entries: walked.entries,
            file: Some(path),
        })
    }

    /// Entries from position `within` of segment `index` to the log's end.
    fn count_entries(&self, index: usize, within: u64) -> Result<u64, LogError> {
        let mut entries = 0;
        for (i, segment) in self.segments.iter().enumerate().skip(index) {
            let from = if i == index { within } else { 0 };
            let walked = walk(segment.file.as_ref(), from, segment.size)
                .map_err(|e| self.io("read", &segment.path, e))?;
            entries += walked.entries;
        }
        Ok(entries)
    }

    /// Writes the bytes from position `within` of segment `index` to the end into the diverged
    /// file `cut..end`, durably (unless an earlier cut at `cut` already saved at least them).
    fn save_tail(
        &self,
        index: usize,
        within: u64,
        cut: u64,
        end: u64,
    ) -> Result<PathBuf, LogError> {
        let listed = self
            .fs
            .list_dir(&self.dir)
            .map_err(|e| self.io("list", &self.dir.clone(), e))?;
        if let Some(name) = listed.iter().find_map(|entry| {
            parse_diverged_file_name(&entry.name)
                .filter(|(c, e)| *c == cut && *e >= end)
                .map(|_| entry.name.clone())
        }) {
            // A cut at `cut` stopped by a crash after saving the tail (this log still holds
            // part of it): it is saved already.
            return Ok(self.dir.join(name));
        }
        let path = self.dir.join(diverged_file_name(cut, end));
        let tmp = crate::log::tmp_path(&path);
        let out = self
            .fs
            .open(&tmp, true)
            .map_err(|e| self.io("create", &tmp, e))?;
        out.set_len(0).map_err(|e| self.io("truncate", &tmp, e))?;
        let mut written = 0u64;
        for (i, segment) in self.segments.iter().enumerate().skip(index) {
            let mut pos = if i == index { within } else { 0 };
            while pos < segment.size {
                let want = usize::try_from(segment.size - pos)
                    .unwrap_or(usize::MAX)
                    .min(CHUNK_BYTES);
                let chunk = read_exact_at(segment.file.as_ref(), pos, want)
                    .map_err(|e| self.io("read", &segment.path, e))?;
                if chunk.len() != want {
                    return Err(self.io(
                        "read",
                        &segment.path,
                        std::io::Error::other("the segment is shorter than the log says"),
                    ));
                }
                out.write_all_at(&chunk, written)
                    .map_err(|e| self.io("write", &tmp, e))?;
                written += want as u64;
                pos += want as u64;
            }
        }
        debug_assert_eq!(written, end - cut);
        out.sync().map_err(|e| self.io("sync", &tmp, e))?;
        drop(out);
        self.fs
            .rename(&tmp, &path)
            .map_err(|e| self.io("rename", &path, e))?;
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| self.io("sync directory", &self.dir.clone(), e))?;
        Ok(path)
    }

    /// Removes everything from position `within` of segment `index` on: later segments newest
    /// first (the directory synced after each), then the cut in segment `index`; then the hole
    /// records past it.
    fn drop_tail(&mut self, index: usize, within: u64) -> Result<(), LogError> {
        while self.segments.len() > index + 1 {
            let Some(doomed) = self.segments.pop() else {
                break;
            };
            if let Err(e) = self.fs.remove_file(&doomed.path) {
                self.poisoned.get_or_insert_with(|| {
                    format!(
                        "cutting its tail failed deleting {}: {e}",
                        doomed.path.display()
                    )
                });
                return Err(self.io("delete", &doomed.path, e));
            }
            if let Err(e) = self.fs.sync_dir(&self.dir) {
                self.poisoned
                    .get_or_insert_with(|| format!("cutting its tail failed: {e}"));
                return Err(self.io("sync directory", &self.dir.clone(), e));
            }
        }
        let Some(segment) = self.segments.last_mut() else {
            return Ok(());
        };
        let cut_result = segment
            .file
            .set_len(within)
            .and_then(|()| segment.file.sync());
        let path = segment.path.clone();
        segment.size = within;
        segment.checked.truncate(within);
        if within == 0 {
            segment.first_append_ms = None;
        }
        if let Err(e) = cut_result {
            self.poisoned.get_or_insert_with(|| {
                format!("cutting its tail failed truncating {}: {e}", path.display())
            });
            return Err(self.io("truncate", &path, e));
        }
        let cut = self.written_end();
        let (gone, kept): (Vec<_>, Vec<_>) = self.holes.iter().partition(|(from, _)| *from >= cut);
        self.holes = kept;
        for (from, to) in gone {
            let record = self.dir.join(gap_file_name(from, to));
            if let Err(e) = self.fs.remove_file(&record) {
                tracing::warn!("{}: cannot delete {}: {e}", self.tp, record.display());
            }
        }
        self.flushed_end = cut;
        self.flushed_messages = self.appended_messages;
        self.first_unflushed_ms = None;
        self.last_entry = LastEntry::Unknown;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::indexing_slicing, clippy::panic)]
    use std::path::Path;

    use super::*;
    use crate::config::{BrokerConfig, Properties};
    use crate::log::{LogPolicy, MemFs, RecoveryHints, TopicPartition};
    use crate::message::{CompressionCodec, MessageSetBuilder};

    const DIR: &str = "/logs/t-0";

    /// Segments of at most 700 bytes, so a few sets span several.
    fn policy() -> LogPolicy {
        let props = Properties::parse(
            "test",
            "brokerid=0\nlog.dir=/logs\nenable.zookeeper=false\nlog.file.size=700\n",
        )
        .expect("properties");
        let config = BrokerConfig::from_properties(&props).expect("config");
        LogPolicy::for_topic(&config, &"t".parse().expect("topic"))
    }

    fn tp() -> TopicPartition {
        TopicPartition::new("t".parse().expect("topic"), 0)
    }

    /// Appends `sets` sets of three 100-byte messages tagged `tag`; every message's offset.
    fn append_sets(log: &mut Log<MemFs>, tag: u8, sets: u8) -> Vec<u64> {
        let mut starts = Vec::new();
        for k in 0..sets {
            let mut b = MessageSetBuilder::new();
            for i in 0..3u8 {
                b.push(vec![tag.wrapping_add(k * 3 + i); 100]);
            }
            let set = b.build(CompressionCodec::None);
            let at = log.append(&set, 0).expect("append").offset;
            starts
                .extend(ShallowIter::new(&set, at as i64).map(|e| e.expect("valid").offset as u64));
        }
        log.flush(0).expect("flush");
        starts
    }

    fn open(fs: &MemFs, checkpoint: Option<u64>) -> Result<Log<MemFs>, LogError> {
        let hints = RecoveryHints {
            clean_shutdown: false,
            checkpoint,
        };
        Log::open(fs.clone(), Path::new(DIR), tp(), policy(), hints, 0)
    }

    fn all_bytes(log: &Log<MemFs>) -> Vec<u8> {
        let mut out = Vec::new();
        while (out.len() as u64) < log.flushed_end() {
            let read = log.read(out.len() as i64, 1 << 20).expect("read");
            assert!(!read.is_empty());
            out.extend_from_slice(&read);
        }
        out
    }

    #[test]
    fn the_last_message_is_known_after_appends_and_found_again_after_reopening() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        assert_eq!(log.last_message().expect("empty"), None);
        let starts = append_sets(&mut log, 1, 4);
        assert!(log.segment_count() > 1, "the sets span several segments");
        let last = log.last_message().expect("mark").expect("a message");
        assert_eq!(last.offset, *starts.last().expect("starts"));
        assert_eq!(last.end(), log.written_end());
        drop(log);
        let mut reopened = open(&fs, None).expect("reopen");
        assert_eq!(reopened.last_message().expect("mark"), Some(last));
    }

    #[test]
    fn a_cut_keeps_the_tail_in_a_diverged_file_and_the_log_goes_on_at_the_cut() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        let starts = append_sets(&mut log, 1, 4);
        let before = all_bytes(&log);
        let cut = starts[4];
        let end = log.written_end();
        let done = log.cut_tail(cut, 0).expect("cut");
        assert_eq!(
            (done.cut, done.end, done.entries),
            (cut, end, starts.len() as u64 - 4)
        );
        let file = done.file.expect("a diverged file");
        assert_eq!(
            file,
            Path::new(DIR).join(crate::log::diverged_file_name(cut, end))
        );
        let saved = fs.read_file(&file).expect("diverged file");
        assert_eq!(saved, before[cut as usize..], "the tail, byte for byte");
        assert_eq!((log.written_end(), log.flushed_end()), (cut, cut));
        assert_eq!(all_bytes(&log), before[..cut as usize]);
        assert_eq!(
            log.last_message().expect("mark").map(|m| m.offset),
            Some(starts[3])
        );
        // Appends go on at the cut, and the log reopens whole.
        let after = append_sets(&mut log, 50, 1);
        assert_eq!(after[0], cut);
        let expected = all_bytes(&log);
        drop(log);
        let reopened = open(&fs, Some(cut)).expect("reopen");
        assert_eq!(all_bytes(&reopened), expected);
    }

    #[test]
    fn the_entry_before_a_boundary_is_found_across_segments() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        let starts = append_sets(&mut log, 1, 4);
        for pair in starts.windows(2) {
            assert_eq!(log.entry_before(pair[1]).expect("walk"), Some(pair[0]));
        }
        assert_eq!(log.entry_before(0).expect("walk"), None);
        assert_eq!(log.entry_before(starts[1] + 1).expect("walk"), None);
    }

    #[test]
    fn a_cut_must_be_a_message_boundary_inside_the_log() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        let starts = append_sets(&mut log, 1, 2);
        let end = log.written_end();
        for bad in [starts[1] + 1, end + 1] {
            assert!(
                matches!(log.cut_tail(bad, 0), Err(LogError::CannotCut { .. })),
                "cut at {bad}"
            );
        }
        assert_eq!(log.written_end(), end, "a refused cut changes nothing");
        let nothing = log.cut_tail(end, 0).expect("cut at the end");
        assert_eq!((nothing.entries, nothing.file), (0, None));
    }

    #[test]
    fn recovery_takes_a_log_cut_below_its_checkpoint_only_with_its_diverged_file() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        let starts = append_sets(&mut log, 1, 4);
        let end = log.written_end();
        let done = log.cut_tail(starts[2], 0).expect("cut");
        drop(log);
        // The checkpoint written before the cut still promises the old end.
        assert_eq!(
            open(&fs, Some(end)).expect("cut on purpose").written_end(),
            starts[2]
        );
        fs.remove_file(&done.file.expect("file")).expect("remove");
        assert!(
            matches!(open(&fs, Some(end)), Err(LogError::Corrupt { .. })),
            "without its diverged file, missing bytes below the checkpoint are corruption"
        );
    }

    #[test]
    fn cutting_again_where_the_log_ends_reports_what_the_first_cut_saved() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        let starts = append_sets(&mut log, 1, 2);
        let first = log.cut_tail(starts[2], 0).expect("cut");
        let again = log.cut_tail(starts[2], 0).expect("cut again");
        assert_eq!(
            again, first,
            "a demotion carried out twice reports the same tail"
        );
    }

    #[test]
    fn cutting_again_at_the_same_offset_does_not_save_the_tail_twice() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        let starts = append_sets(&mut log, 1, 3);
        let end = log.written_end();
        let first = log.cut_tail(starts[5], 0).expect("cut");
        // As after a crash that left part of the tail: it is written again, shorter.
        let again = append_sets(&mut log, 1, 1);
        assert_eq!(again[0], starts[5]);
        let second = log.cut_tail(starts[5], 0).expect("cut again");
        assert_eq!(second.file, first.file, "the tail saved first covers it");
        let names: Vec<String> = fs
            .list_dir(Path::new(DIR))
            .expect("list")
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n.ends_with(crate::log::DIVERGED_SUFFIX))
            .collect();
        assert_eq!(names, vec![crate::log::diverged_file_name(starts[5], end)]);
    }
}
