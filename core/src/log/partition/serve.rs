//! Serving fetches without copying: a read whose bytes were all checked earlier in this process
//! comes back as a range of the segment file, which the runtime sends straight from the page
//! cache (`sendfile`); anything not yet checked is read into memory and checked, as
//! [`Log::read`] does, which also extends the checked range for the next read.
//!
//! Guarantee: every message handed out, as bytes or as a file range, has passed its CRC and
//! length checks in this process — when it was appended, scanned by recovery, or read. What a
//! file range does not cover is the disk changing bytes after they were checked (a later read
//! of the same bytes is not checked again); `fetch.zero.copy=false` re-checks on every fetch.
//! A client reading inside a message, where a valid message happens to start (one carried in
//! another's payload), can be sent the bytes after it as stored; its own CRC check refuses
//! them (docs/compatibility.md).

use std::sync::Arc;

use bytes::Bytes;

use super::{read_exact_at, Log, LogError, LogFile, LogFs};
use crate::message::{MessageError, ShallowIter};
use crate::wire::MessageBody;

/// Bytes read first to confirm that a valid message starts at a fetch offset; a bigger first
/// message is then read whole (if it fits in what was asked for).
const BOUNDARY_PROBE_BYTES: usize = 64 * 1024;

/// What a fetch serves.
#[derive(Debug)]
pub enum Served<F> {
    /// Bytes read into memory and checked on the way.
    Bytes(Bytes),
    /// A range of a segment file whose messages were already checked.
    File(FileRange<F>),
}

impl<F> Served<F> {
    /// How many bytes are served.
    pub fn len(&self) -> usize {
        match self {
            Served::Bytes(b) => b.len(),
            Served::File(r) => r.len,
        }
    }

    /// Whether nothing is served.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<F: LogFile> Served<F> {
    /// The bytes served, a file range read into memory (as a client would receive them); an
    /// error if the file ends before the range does.
    pub fn into_bytes(self) -> std::io::Result<Bytes> {
        match self {
            Served::Bytes(b) => Ok(b),
            Served::File(range) => {
                let bytes = read_exact_at(range.file.as_ref(), range.position, range.len)?;
                if bytes.len() < range.len {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "the segment file ends {} bytes into a {}-byte range at {}",
                            bytes.len(),
                            range.len,
                            range.position
                        ),
                    ));
                }
                Ok(Bytes::from(bytes))
            }
        }
    }
}

/// Bytes `[position, position + len)` of an open segment file. The file is kept open by this
/// value, so retention deleting the segment meanwhile does not disturb the send; the range is
/// below the flushed end, so its bytes never change while the log lives.
#[derive(Debug)]
pub struct FileRange<F> {
    /// The segment file.
    pub file: Arc<F>,
    /// Where the range starts in the file.
    pub position: u64,
    /// How many bytes.
    pub len: usize,
}

impl<F> MessageBody for Served<F> {
    fn body_len(&self) -> usize {
        self.len()
    }
}

impl<F: LogFs> Log<F> {
    /// Like [`Log::read`], but bytes already checked in this process come back as a file range
    /// to send without copying (see the module's guarantee). For a client reading at message
    /// boundaries, the same offsets are refused and the same bytes served as by [`Log::read`].
    pub fn serve(&self, offset: i64, max_bytes: usize) -> Result<Served<F::File>, LogError> {
        let Some(at) = self.locate(offset, max_bytes)? else {
            return Ok(Served::Bytes(Bytes::new()));
        };
        let Some(segment) = self.segments.get(at.index) else {
            return self.read_located(&at).map(Served::Bytes);
        };
        let position = at.pos - segment.start;
        let checked = segment.checked.covers(position, position + at.want as u64);
        if !checked || !self.starts_message(segment, at.pos, at.want) {
            return self.read_located(&at).map(Served::Bytes);
        }
        Ok(Served::File(FileRange {
            file: segment.file.clone(),
            position,
            len: at.want,
        }))
    }

    /// Whether a valid message starts at `pos` and ends within the `want` bytes served (inside
    /// a checked range that means `pos` is where a client aligned with the log reads, so the
    /// messages after it are the checked ones). Anything else — an offset inside a message, a
    /// first message bigger than `want` — is left to the copying path, which decides it.
    fn starts_message(&self, segment: &super::Segment<F::File>, pos: u64, want: usize) -> bool {
        let position = pos - segment.start;
        let probe = want.min(BOUNDARY_PROBE_BYTES);
        let Ok(bytes) = read_exact_at(segment.file.as_ref(), position, probe) else {
            return false;
        };
        match ShallowIter::new(&bytes, pos as i64).next() {
            Some(Ok(_)) => true,
            // Bigger than the probe but within what is served: read exactly that message.
            Some(Err(MessageError::FirstMessageTooLarge { length, .. })) => {
                let whole = usize::try_from(length).map_or(usize::MAX, |l| l.saturating_add(4));
                if whole > want {
                    return false;
                }
                let Ok(message) = read_exact_at(segment.file.as_ref(), position, whole) else {
                    return false;
                };
                matches!(ShallowIter::new(&message, pos as i64).next(), Some(Ok(_)))
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::indexing_slicing, clippy::panic)]
    use std::path::Path;

    use super::super::testing::{policy, tp, DIR, SEGMENT};
    use super::*;
    use crate::log::MemFs;
    use crate::message::{CompressionCodec, MessageSetBuilder};

    /// Three sets of three 100-byte messages, flushed; the offsets where each message starts.
    fn written(fs: &MemFs) -> (Log<MemFs>, Vec<u64>) {
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        let mut starts = Vec::new();
        for k in 0..3u8 {
            let mut b = MessageSetBuilder::new();
            for i in 0..3u8 {
                b.push(vec![k * 3 + i; 100]);
            }
            let set = b.build(CompressionCodec::None);
            let at = log.append(&set, 0).expect("append").offset;
            let mut entries = ShallowIter::new(&set, at as i64);
            starts.extend(entries.by_ref().map(|e| e.expect("valid").offset as u64));
        }
        log.flush(0).expect("flush");
        (log, starts)
    }

    /// Appends one uncompressed set of `payloads` and flushes it.
    fn append_flushed(log: &mut Log<MemFs>, payloads: &[Vec<u8>]) {
        let mut b = MessageSetBuilder::new();
        payloads.iter().for_each(|p| {
            b.push(p.clone());
        });
        log.append(&b.build(CompressionCodec::None), 0)
            .expect("append");
        log.flush(0).expect("flush");
    }

    fn reopen(fs: &MemFs) -> Log<MemFs> {
        super::super::testing::reopen(fs, true)
    }

    fn bytes_of(served: Served<crate::log::MemFile>) -> Bytes {
        served.into_bytes().expect("served bytes")
    }

    #[test]
    fn appended_bytes_are_served_as_a_file_range_with_the_bytes_a_read_returns() {
        let fs = MemFs::new(0);
        let (log, starts) = written(&fs);
        for (at, max) in [(0, 1 << 20), (starts[4], 250), (starts[7], 150)] {
            let served = log.serve(at as i64, max).expect("serve");
            assert!(matches!(served, Served::File(_)), "at {at}: {served:?}");
            assert_eq!(bytes_of(served), log.read(at as i64, max).expect("read"));
        }
    }

    #[test]
    fn a_served_range_past_the_end_of_its_file_is_an_error_not_short_bytes() {
        let fs = MemFs::new(0);
        let (log, _) = written(&fs);
        let Served::File(range) = log.serve(0, 1 << 20).expect("serve") else {
            panic!("appended bytes are served as a file range")
        };
        let past_end = FileRange {
            len: range.len + 1,
            ..range
        };
        let read = Served::File(past_end).into_bytes();
        assert!(read.is_err(), "{read:?}");
    }

    #[test]
    fn messages_bigger_than_the_probe_are_served_as_a_file_range_too() {
        let fs = MemFs::new(0);
        let mut log = Log::create(fs.clone(), Path::new(DIR), tp(), policy(), 0).expect("log");
        append_flushed(
            &mut log,
            &[vec![7u8; 3 * BOUNDARY_PROBE_BYTES], vec![8u8; 10]],
        );
        let served = log.serve(0, 1 << 20).expect("serve");
        assert!(matches!(served, Served::File(_)), "{:?}", served.len());
        assert_eq!(bytes_of(served), log.read(0, 1 << 20).expect("read"));
        let partial = log.serve(0, BOUNDARY_PROBE_BYTES).expect("serve");
        assert!(
            matches!(partial, Served::Bytes(_)),
            "a first message bigger than asked for"
        );
    }

    #[test]
    fn appends_after_a_restart_are_served_as_a_file_range_at_once() {
        let fs = MemFs::new(0);
        let (mut log, _) = written(&fs);
        let end = log.close(0).expect("close");
        let mut log = reopen(&fs);
        append_flushed(&mut log, &[vec![9u8; 100]]);
        let tail = log.serve(end as i64, 1 << 20).expect("serve");
        assert!(
            matches!(tail, Served::File(_)),
            "the append was checked: {tail:?}"
        );
        let old = log.serve(0, 1 << 20).expect("serve");
        assert!(
            matches!(old, Served::Bytes(_)),
            "nothing before it was: {old:?}"
        );
    }

    #[test]
    fn after_a_restart_bytes_are_checked_once_then_served_as_a_file_range() {
        let fs = MemFs::new(0);
        let (mut log, _) = written(&fs);
        log.close(0).expect("close");
        let log = reopen(&fs);
        let first = log.serve(0, 1 << 20).expect("serve");
        assert!(
            matches!(first, Served::Bytes(_)),
            "not checked yet: {first:?}"
        );
        let second = log.serve(0, 1 << 20).expect("serve");
        assert!(
            matches!(second, Served::File(_)),
            "checked by the first: {second:?}"
        );
        assert_eq!(bytes_of(first), bytes_of(second));
    }

    #[test]
    fn bytes_damaged_on_disk_never_go_out_unchecked() {
        let fs = MemFs::new(0);
        let (mut log, starts) = written(&fs);
        log.close(0).expect("close");
        // Damage the fifth message's payload; a clean shutdown means recovery does not scan.
        let file = fs.open(Path::new(SEGMENT), false).expect("segment");
        let at = starts[4] + 20;
        let mut byte = [0u8];
        file.read_at(&mut byte, at).expect("read");
        file.write_all_at(&[byte[0] ^ 0xff], at).expect("damage");
        let log = reopen(&fs);
        for _ in 0..2 {
            let served = bytes_of(log.serve(0, 1 << 20).expect("serve"));
            assert_eq!(served.len() as u64, starts[4], "served past the damage");
            let refused = log.serve(starts[4] as i64, 1 << 20);
            assert!(
                matches!(refused, Err(LogError::OffsetOutOfRange { .. })),
                "{refused:?}"
            );
            let after = log.serve(starts[5] as i64, 1 << 20).expect("serve after");
            assert!(!bytes_of(after).is_empty());
        }
    }

    #[test]
    fn serve_refuses_and_returns_exactly_what_read_does_at_every_offset() {
        let fs = MemFs::new(0);
        let (log, _) = written(&fs);
        let end = log.flushed_end();
        for max in [1, 4, 57, 113, 400, 1 << 20] {
            for at in 0..=end + 1 {
                let read = log.read(at as i64, max);
                let served = log.serve(at as i64, max).map(bytes_of);
                match (read, served) {
                    (Ok(r), Ok(s)) => assert_eq!(r, s, "at {at}, max {max}"),
                    (Err(r), Err(s)) => assert_eq!(r.to_string(), s.to_string()),
                    (r, s) => panic!("at {at}, max {max}: read {r:?}, serve {s:?}"),
                }
            }
        }
    }
}
