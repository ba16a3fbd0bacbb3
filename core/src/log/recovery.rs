//! Opening a partition's log from its files, recovering from an unclean shutdown.
//!
//! Better than 0.7, which validated only the last segment and truncated silently at the first
//! bad byte:
//! - the whole active segment and every byte past the partition's recovery checkpoint are
//!   validated message by message (length bounds, magic, CRC); the log is truncated at the first
//!   invalid byte past the checkpoint — but only inside the last segment, the only place
//!   unflushed (torn) bytes can be;
//! - bytes the checkpoint promised durable that are missing or invalid are **corruption**: the
//!   partition is refused with an error naming segment and offset, and nothing is deleted;
//! - files that are not segments are left alone, with a warning;
//! - segments must be contiguous, except across a hole a gap file records (`<from>-<to>.gap`,
//!   see [`Log::skip_to`]); a gap file that separates nothing is deleted;
//! - a log that ends below its checkpoint is accepted only where a diverged tail
//!   (`<cut>.<end>.diverged`, see [`Log::cut_tail`]) holds the missing bytes: the log was cut
//!   back there on purpose.

use std::path::Path;

use super::error::LogError;
use super::fs::{LogFile, LogFs};
use super::names::{
    gap_file_name, parse_diverged_file_name, parse_gap_file_name, parse_segment_file_name,
    segment_file_name, TopicPartition,
};
use super::partition::Log;
use super::policy::LogPolicy;
use super::segment::{scan, Segment};

/// How the previous run ended, as far as recovery is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryHints {
    /// The clean-shutdown marker was present: every file was synced at close.
    pub clean_shutdown: bool,
    /// This partition's checkpointed flushed end, if the checkpoint had one.
    pub checkpoint: Option<u64>,
}

impl<F: LogFs> Log<F> {
    /// Opens the log in `dir`, recovering per `hints`. A directory without segments gets a
    /// fresh empty one (unless the checkpoint says data should be there).
    pub fn open(
        fs: F,
        dir: &Path,
        tp: TopicPartition,
        policy: LogPolicy,
        hints: RecoveryHints,
        now_ms: i64,
    ) -> Result<Self, LogError> {
        let (segments, recorded_holes, diverged) = open_segments(&fs, dir, &tp)?;
        if segments.is_empty() {
            if let Some(end) = hints.checkpoint.filter(|end| *end > 0) {
                return Err(corrupt(
                    &tp,
                    &segment_file_name(0),
                    0,
                    format!("no segment files, but the checkpoint promised data up to {end}"),
                ));
            }
            return Log::create(fs, dir, tp, policy, now_ms);
        }
        let holes = check_contiguous(&tp, &segments, &recorded_holes)?;
        remove_stale_records(&fs, dir, &tp, &recorded_holes, &holes);
        let mut log = Log {
            fs,
            tp,
            dir: dir.to_path_buf(),
            policy,
            segments,
            holes,
            flushed_end: 0,
            appended_messages: 0,
            flushed_messages: 0,
            flushes_in_flight: 0,
            dir_synced: false,
            first_unflushed_ms: None,
            poisoned: None,
            failed: None,
            last_entry: super::partition::LastEntry::Unknown,
            positions: None,
        };
        log.recover(hints, &diverged)?;
        log.open_positions(hints.checkpoint.unwrap_or(0), now_ms)?;
        if !hints.clean_shutdown {
            log.dir_synced = log.sync_recovered(hints.checkpoint.unwrap_or(0))?;
        }
        log.flushed_end = log.written_end();
        debug_assert!(log.invariants_hold());
        Ok(log)
    }

    /// Syncs every segment holding bytes past `promised` (what the checkpoint says is durable)
    /// before recovery takes them as flushed: after an unclean stop they may be only in the page
    /// cache (the previous process stopped without syncing them, or its fsync failed), and a
    /// machine crash now would take back what this run serves and checkpoints, and the
    /// partition would then be refused for good.
    ///
    /// Whether it synced the directory (when it synced any segment).
    fn sync_recovered(&self, promised: u64) -> Result<bool, LogError> {
        let mut synced = false;
        for segment in self.segments.iter().filter(|s| s.end() > promised) {
            segment
                .file
                .sync()
                .map_err(|e| self.io("sync", &segment.path, e))?;
            synced = true;
        }
        if synced {
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| self.io("sync directory", &self.dir, e))?;
        }
        Ok(synced)
    }

    fn recover(&mut self, hints: RecoveryHints, diverged: &[(u64, u64)]) -> Result<(), LogError> {
        let end = self.written_end();
        let mut hints = hints;
        if let Some(promised) = hints.checkpoint.filter(|p| *p > end) {
            // A log cut back by a demotion ([`Log::cut_tail`]) after its last checkpoint: the
            // missing bytes are in its diverged file, not lost.
            if let Some((cut, tail_end)) = diverged
                .iter()
                .find(|(cut, tail_end)| *cut <= end && promised <= *tail_end)
            {
                tracing::warn!(
                    "{}: the log ends at {end}, below its checkpoint ({promised}): it was cut back to {cut} and {}",
                    self.tp,
                    format_args!("its tail is in {}", super::names::diverged_file_name(*cut, *tail_end))
                );
                hints.checkpoint = Some(end);
            }
        }
        if let Some(promised) = hints.checkpoint.filter(|p| *p > end) {
            let last = self.segments.last().map(Segment::name).unwrap_or_default();
            return Err(corrupt(
                &self.tp,
                &last,
                end,
                format!("log ends at {end} but the checkpoint promised data up to {promised}"),
            ));
        }
        if hints.clean_shutdown
            || crate::planted::active(crate::planted::Bug::SkipRecoveryValidation)
        {
            return Ok(());
        }
        // Validate the whole active segment (as 0.7 does) and everything past the checkpoint.
        let promised = hints.checkpoint.unwrap_or(0);
        let last_start = self.segments.last().map_or(0, |s| s.start);
        let from = hints
            .checkpoint
            .unwrap_or(0)
            .min(last_start)
            .max(self.start_offset());
        let last_index = self.segments.len() - 1;
        // The active segment's torn tail, cut once the scan is over.
        let mut torn = None;
        for (index, segment) in self.segments.iter().enumerate() {
            if segment.end() <= from && index < last_index {
                continue;
            }
            let scan_from = from.saturating_sub(segment.start).min(segment.size);
            let result = scan(
                segment.file.as_ref(),
                segment.start,
                scan_from,
                segment.size,
            )
            .map_err(|e| self.io_error("read", &segment.path, e))?;
            // The scan checked [scan_from, valid_len) from a message start (the segment's, or
            // the checkpointed flushed end): what it covered needs no check when served.
            segment.checked.record(scan_from, result.valid_len);
            let Some(problem) = result.problem else {
                continue;
            };
            let bad_offset = segment.start + result.valid_len;
            if bad_offset < promised {
                return Err(corrupt(
                    &self.tp,
                    &segment.name(),
                    bad_offset,
                    format!("{problem}, below the checkpointed flushed end {promised}"),
                ));
            }
            if index < last_index {
                return Err(corrupt(
                    &self.tp,
                    &segment.name(),
                    bad_offset,
                    format!(
                        "{problem} in a segment that was complete when the next one was started"
                    ),
                ));
            }
            torn = Some((result.valid_len, problem));
        }
        if let Some((valid_len, problem)) = torn {
            self.truncate_active(valid_len, &problem)?;
        }
        Ok(())
    }

    /// Cuts the active segment at `valid_len` (a torn or unflushed tail) and syncs the cut.
    fn truncate_active(&mut self, valid_len: u64, problem: &str) -> Result<(), LogError> {
        let tp = self.tp.to_string();
        let Some(active) = self.segments.last_mut() else {
            return Ok(());
        };
        // On in release: a scan never reports more valid bytes than the segment holds.
        assert!(
            valid_len <= active.size,
            "{tp}: a cut at {valid_len} past the segment's {} bytes",
            active.size
        );
        let dropped = active.size - valid_len;
        tracing::warn!(
            "{tp}: recovery truncated segment {} at offset {}: dropped {dropped} bytes ({problem})",
            active.name(),
            active.start + valid_len
        );
        let path = active.path.clone();
        let result = active
            .file
            .set_len(valid_len)
            .and_then(|()| active.file.sync());
        active.size = valid_len;
        active.checked.truncate(valid_len);
        result.map_err(|e| LogError::Io {
            partition: tp,
            op: "truncate",
            path: path.display().to_string(),
            source: e,
        })
    }

    fn io_error(&self, op: &'static str, path: &Path, source: std::io::Error) -> LogError {
        LogError::Io {
            partition: self.tp.to_string(),
            op,
            path: path.display().to_string(),
            source,
        }
    }
}

fn corrupt(tp: &TopicPartition, segment: &str, offset: u64, detail: String) -> LogError {
    LogError::Corrupt {
        partition: tp.to_string(),
        segment: segment.to_string(),
        offset,
        detail,
    }
}

/// Segments, the holes gap files record, and the diverged tails kept beside them.
type Opened<File> = (Vec<Segment<File>>, Vec<(u64, u64)>, Vec<(u64, u64)>);

/// Opens every segment file in `dir`, sorted by start offset, and reads the hole records. Other
/// files are left alone.
fn open_segments<F: LogFs>(
    fs: &F,
    dir: &Path,
    tp: &TopicPartition,
) -> Result<Opened<F::File>, LogError> {
    let io = |op, path: &Path, source| LogError::Io {
        partition: tp.to_string(),
        op,
        path: path.display().to_string(),
        source,
    };
    let mut segments = Vec::new();
    let mut holes = Vec::new();
    let mut diverged = Vec::new();
    for entry in fs.list_dir(dir).map_err(|e| io("list", dir, e))? {
        if entry.is_dir {
            tracing::warn!(
                "{tp}: ignoring directory {} in {}",
                entry.name,
                dir.display()
            );
            continue;
        }
        if let Some(hole) = parse_gap_file_name(&entry.name) {
            holes.push(hole);
            continue;
        }
        if let Some(tail) = parse_diverged_file_name(&entry.name) {
            diverged.push(tail);
            continue;
        }
        let Some(start) = parse_segment_file_name(&entry.name) else {
            // The mirror position records (read back by `Log::open`), and files being written.
            let known = entry.name == crate::mirror::position::record::POSITIONS_FILE;
            if !known && !entry.name.ends_with(".tmp") {
                tracing::warn!(
                    "{tp}: ignoring {} in {}: not a segment file",
                    entry.name,
                    dir.display()
                );
            }
            continue;
        };
        let path = dir.join(&entry.name);
        let file = fs.open(&path, false).map_err(|e| io("open", &path, e))?;
        let size = file.size_bytes().map_err(|e| io("stat", &path, e))?;
        let modified_ms = fs.modified_ms(&path).map_err(|e| io("stat", &path, e))?;
        segments.push(Segment::new(
            start,
            std::sync::Arc::new(file),
            path,
            size,
            modified_ms,
        ));
    }
    segments.sort_by_key(|s| s.start);
    Ok((segments, holes, diverged))
}

/// Every segment but the last must end exactly where the next begins, or where a recorded hole
/// begins that ends where the next begins. Returns the holes that separate segments, oldest
/// first.
fn check_contiguous<F>(
    tp: &TopicPartition,
    segments: &[Segment<F>],
    recorded: &[(u64, u64)],
) -> Result<Vec<(u64, u64)>, LogError> {
    let mut holes = Vec::new();
    for (a, b) in segments.iter().zip(segments.iter().skip(1)) {
        if a.end() == b.start {
            continue;
        }
        if recorded.contains(&(a.end(), b.start)) {
            holes.push((a.end(), b.start));
            continue;
        }
        return Err(corrupt(
            tp,
            &a.name(),
            a.end(),
            format!(
                "segment holds {} bytes but the next segment starts at {} (and no gap file records a hole there)",
                a.size, b.start
            ),
        ));
    }
    Ok(holes)
}

/// Deletes the hole records that separate no segments (left by retention, or by a crash
/// between recording a hole and starting the segment after it): such a record must never
/// vouch for a discontinuity that appears later.
fn remove_stale_records<F: LogFs>(
    fs: &F,
    dir: &Path,
    tp: &TopicPartition,
    recorded: &[(u64, u64)],
    holes: &[(u64, u64)],
) {
    let mut removed = false;
    for (from, to) in recorded.iter().filter(|h| !holes.contains(h)) {
        let path = dir.join(gap_file_name(*from, *to));
        match fs.remove_file(&path) {
            Ok(()) => {
                removed = true;
                tracing::info!("{tp}: removed {}: it separates no segments", path.display());
            }
            Err(e) => tracing::warn!(
                "{tp}: {} separates no segments and cannot be removed: {e}",
                path.display()
            ),
        }
    }
    if removed {
        if let Err(e) = fs.sync_dir(dir) {
            tracing::warn!(
                "{tp}: syncing {} after removing gap files: {e}",
                dir.display()
            );
        }
    }
}
