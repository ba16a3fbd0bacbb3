//! One segment file of a partition's log and the validating scan used by recovery.

use std::path::PathBuf;
use std::sync::Arc;

use super::checked::CheckedRanges;
use super::fs::LogFile;
use crate::message::{MessageError, ShallowIter};

/// Bytes read per step while scanning a segment.
const SCAN_CHUNK_BYTES: usize = 1024 * 1024;

/// A segment: the file holding log offsets `[start, start + size)`.
#[derive(Debug)]
pub(crate) struct Segment<F> {
    /// The offset of the segment's first byte.
    pub start: u64,
    /// The open file (shared with flush tickets, which sync it outside the log's lock).
    pub file: Arc<F>,
    /// The file's path.
    pub path: PathBuf,
    /// Bytes of the log in this file (writes past it are not part of the log).
    pub size: u64,
    /// Last append (or file modification at open), ms since the epoch.
    pub modified_ms: i64,
    /// First append into this segment, for age-based rolling; `None` while empty.
    pub first_append_ms: Option<i64>,
    /// The file positions whose messages this process has checked (CRC, lengths): validated
    /// when appended, scanned by recovery, or checked by an earlier read.
    pub checked: CheckedRanges,
}

impl<F> Segment<F> {
    /// A segment of `size` bytes in `file`, none of them checked yet in this process.
    pub fn new(start: u64, file: Arc<F>, path: PathBuf, size: u64, modified_ms: i64) -> Self {
        Segment {
            start,
            file,
            path,
            size,
            modified_ms,
            first_append_ms: None,
            checked: CheckedRanges::default(),
        }
    }

    /// The offset just past the segment's data.
    pub fn end(&self) -> u64 {
        self.start + self.size
    }

    /// The file name, for messages.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Where a scan of a segment's bytes stopped.
#[derive(Debug)]
pub(crate) struct ScanEnd {
    /// Position in the file just past the last valid message.
    pub valid_len: u64,
    /// Why the scan stopped before the end of the file, if it did.
    pub problem: Option<String>,
}

/// Validates the messages of `file` from position `from` (a message boundary) to `len`, message
/// by message: length bounds, magic, CRC. Stops at the first invalid or incomplete message.
pub(crate) fn scan<F: LogFile>(
    file: &F,
    start: u64,
    from: u64,
    len: u64,
) -> std::io::Result<ScanEnd> {
    let mut pos = from;
    let mut chunk_bytes = SCAN_CHUNK_BYTES;
    while pos < len {
        let want = usize::try_from(len - pos)
            .unwrap_or(usize::MAX)
            .min(chunk_bytes);
        let buf = read_exact_at(file, pos, want)?;
        let mut entries = ShallowIter::new(&buf, (start + pos) as i64);
        let mut problem = None;
        for entry in entries.by_ref() {
            if let Err(error) = entry {
                problem = Some(error);
                break;
            }
        }
        let end = entries.end();
        let chunk_end = pos + want as u64;
        pos += end.valid_bytes as u64;
        match problem {
            // A message bigger than the chunk: read it whole next time, if the file holds it.
            Some(MessageError::FirstMessageTooLarge { length, .. }) => {
                let needed = 4 + u64::try_from(length).unwrap_or(0);
                if pos + needed > len {
                    return Ok(incomplete(pos, len));
                }
                chunk_bytes = usize::try_from(needed).unwrap_or(usize::MAX);
            }
            Some(error) => {
                return Ok(ScanEnd {
                    valid_len: pos,
                    problem: Some(error.to_string()),
                })
            }
            None if end.trailing_bytes > 0 && chunk_end >= len => return Ok(incomplete(pos, len)),
            None => chunk_bytes = SCAN_CHUNK_BYTES,
        }
        debug_assert!(pos < len || end.trailing_bytes == 0);
    }
    Ok(ScanEnd {
        valid_len: pos,
        problem: None,
    })
}

fn incomplete(pos: u64, len: u64) -> ScanEnd {
    ScanEnd {
        valid_len: pos,
        problem: Some(format!("partial message of {} bytes at the end", len - pos)),
    }
}

/// Reads exactly `len` bytes at `pos` (fewer only at end of file).
pub(crate) fn read_exact_at<F: LogFile>(
    file: &F,
    pos: u64,
    len: usize,
) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        // In range: `done < len == buf.len()` here (a default would read nothing and end the
        // read short without a word).
        let Some(rest) = buf.get_mut(done..) else {
            break;
        };
        let n = file.read_at(rest, pos + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    Ok(buf)
}
