//! A mirror partition's position records on disk ([`crate::mirror::position`]): the file
//! `mirror-positions` in the partition's directory, beside its segments, and the book read
//! from it.
//!
//! Data and records come back together: a set's record is written before the set, every
//! append to a partition with records writes one (another append's range, or a hole's), and
//! every flush syncs the records with the segment, so every flushed byte has a durable record.
//! [`MirrorPositions::open`] reads the records back against the log as recovered, drops those
//! whose appends the log lacks and says where to cut the log so that no byte past the first
//! record lacks its record (such bytes were never flushed: torn by a crash, or written back by
//! the disk on its own); the caller cuts it there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::fs::{LogFile, LogFs};
use crate::mirror::position::book::BookMark;
use crate::mirror::position::record::Record;
use crate::mirror::position::record::{self, Tail, POSITIONS_FILE};
use crate::mirror::position::{Position, PositionBook, PositionError, Recovery, SourceKey};

/// The records file is rewritten from the book once it is this large (the book keeps at most
/// `HISTORY_MAX` positions per source partition, so the rewrite is small).
pub const COMPACT_BYTES: u64 = 4 << 20;

/// Why the records could not be read, written or synced.
#[derive(Debug, thiserror::Error)]
pub enum PositionsError {
    /// The file system failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The records file.
        path: String,
        /// How it failed.
        #[source]
        source: std::io::Error,
    },
    /// The position cannot be recorded.
    #[error(transparent)]
    Refused(#[from] PositionError),
}

/// The records file of one partition and the book read from it.
#[derive(Debug)]
pub struct MirrorPositions<F: LogFs> {
    fs: F,
    path: PathBuf,
    file: Arc<F::File>,
    /// The file's length: where the next record goes.
    len: u64,
    book: PositionBook,
}

/// A record just written, as [`MirrorPositions::take_back`] undoes it.
#[derive(Debug)]
#[must_use = "a record whose set is not appended must be taken back"]
pub struct Written {
    /// The source partition of a mirrored set; `None` for another append.
    key: Option<SourceKey>,
    len_before: u64,
    mark: BookMark,
}

/// What opening the records found.
#[derive(Debug)]
pub struct Opened<F: LogFs> {
    /// The records and their book.
    pub positions: MirrorPositions<F>,
    /// Where the log must be cut: a recorded set only partly in it began there.
    pub cut_log_to: Option<u64>,
    /// Records dropped because their sets are not wholly in the log.
    pub dropped: usize,
    /// What ended the file's valid records (a damaged record is reported by the caller).
    pub tail: Tail,
}

impl<F: LogFs> MirrorPositions<F> {
    /// The records file's path in the partition directory `dir`.
    pub fn path_in(dir: &Path) -> PathBuf {
        dir.join(POSITIONS_FILE)
    }

    /// Opens (creating when missing) the records of the partition in `dir`, read back against
    /// a log recovered to `log_end`; the file is cut to the records kept, durably.
    pub fn open(fs: F, dir: &Path, log_end: u64) -> Result<Opened<F>, PositionsError> {
        let path = Self::path_in(dir);
        let io = |op, source| PositionsError::Io {
            op,
            path: path.display().to_string(),
            source,
        };
        let existed = fs.exists(&path);
        let bytes = if existed {
            fs.read_file(&path).map_err(|e| io("read", e))?
        } else {
            Vec::new()
        };
        let Recovery {
            book,
            keep_bytes,
            cut_log_to,
            dropped,
            tail,
        } = PositionBook::recover(&bytes, log_end);
        let file = fs.open(&path, true).map_err(|e| io("open", e))?;
        let len = keep_bytes as u64;
        if len != bytes.len() as u64 {
            file.set_len(len).map_err(|e| io("truncate", e))?;
            file.sync().map_err(|e| io("sync", e))?;
        }
        let mut positions = MirrorPositions {
            fs,
            path,
            file: Arc::new(file),
            len,
            book,
        };
        if !existed || bytes.is_empty() {
            // Where the records begin, durable before any append they account for.
            positions.write_begin(log_end)?;
            positions.sync()?;
            positions
                .fs
                .sync_dir(dir)
                .map_err(|e| positions.io("sync directory of", e))?;
        }
        Ok(Opened {
            positions,
            cut_log_to,
            dropped,
            tail,
        })
    }

    /// The book: what the partition holds of each source partition.
    pub fn book(&self) -> &PositionBook {
        &self.book
    }

    /// Writes `position`'s record (not synced) and records it in the book; refused, with
    /// nothing written, when the book refuses it. Call it before appending the set; the
    /// [`Written`] it returns takes the record back if the set cannot be appended.
    pub fn write(&mut self, position: Position) -> Result<Written, PositionsError> {
        self.book.check(&position)?;
        self.compact_if_large()?;
        let bytes = record::encode(&position);
        self.file
            .write_all_at(&bytes, self.len)
            .map_err(|e| self.io("write", e))?;
        let written = Written {
            key: Some(position.key.clone()),
            len_before: self.len,
            mark: self.book.mark(),
        };
        self.len += bytes.len() as u64;
        self.book.record(position)?;
        Ok(written)
    }

    /// Writes where the records begin (the first record of a new file).
    fn write_begin(&mut self, at: u64) -> Result<(), PositionsError> {
        let bytes = record::encode_record(&Record::Begin { at });
        self.file
            .write_all_at(&bytes, self.len)
            .map_err(|e| self.io("write", e))?;
        self.len += bytes.len() as u64;
        self.book.begin_at(at)?;
        Ok(())
    }

    /// Writes the record of an append that is not a mirrored set (or of a hole), `start..end`
    /// of the log, before it is made; taken back as [`write`](Self::write)'s is.
    pub fn write_other(&mut self, start: u64, end: u64) -> Result<Written, PositionsError> {
        let mark = self.book.mark();
        self.book.check_other(start, end)?;
        self.compact_if_large()?;
        let bytes = record::encode_record(&Record::Other { start, end });
        self.file
            .write_all_at(&bytes, self.len)
            .map_err(|e| self.io("write", e))?;
        let written = Written {
            key: None,
            len_before: self.len,
            mark,
        };
        self.len += bytes.len() as u64;
        self.book.note_other(start, end)?;
        Ok(written)
    }

    /// Takes back the record `written`, the last written, when its set could not be appended
    /// after all: the file is cut back, so no record names a set the log does not hold.
    pub fn take_back(&mut self, written: Written) -> Result<(), PositionsError> {
        self.file
            .set_len(written.len_before)
            .map_err(|e| self.io("truncate", e))?;
        match &written.key {
            Some(key) => self.book.unrecord_last(key, written.mark),
            None => self.book.unnote_other(written.mark),
        }
        self.len = written.len_before;
        Ok(())
    }

    /// The file handle a flush syncs (with the segment's).
    pub fn file(&self) -> Arc<F::File> {
        self.file.clone()
    }

    /// Makes every record written so far durable.
    pub fn sync(&self) -> Result<(), PositionsError> {
        self.file.sync().map_err(|e| self.io("sync", e))
    }

    /// Rewrites the file from the book when it has grown past [`COMPACT_BYTES`]: a temporary
    /// file is written and synced whole, then renamed over the records; the handle written to
    /// from then on is the new file's, taken before the rename, so no record can go to a file
    /// that is no longer there. Called before each record is written.
    pub fn compact_if_large(&mut self) -> Result<bool, PositionsError> {
        if self.len < COMPACT_BYTES {
            return Ok(false);
        }
        let records = self.book.records();
        let tmp = super::fs::tmp_path(&self.path);
        let file = self
            .fs
            .open(&tmp, true)
            .map_err(|e| self.io("create the rewrite of", e))?;
        file.set_len(0)
            .and_then(|()| file.write_all_at(&records, 0))
            .and_then(|()| file.sync())
            .map_err(|e| self.io("write the rewrite of", e))?;
        self.fs
            .rename(&tmp, &self.path)
            .map_err(|e| self.io("rename the rewrite over", e))?;
        self.file = Arc::new(file);
        self.len = records.len() as u64;
        if let Some(dir) = self.path.parent() {
            self.fs
                .sync_dir(dir)
                .map_err(|e| self.io("sync the directory of", e))?;
        }
        Ok(true)
    }

    fn io(&self, op: &'static str, source: std::io::Error) -> PositionsError {
        PositionsError::Io {
            op,
            path: self.path.display().to_string(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::consumer::BrokerPartition;
    use crate::identity::ClusterId;
    use crate::log::MemFs;

    fn position(source: (i64, i64), mirror: (u64, u64)) -> Position {
        Position {
            key: SourceKey {
                cluster: ClusterId::parse("west").unwrap(),
                topic: "orders".parse().unwrap(),
                partition: BrokerPartition {
                    broker_id: 0,
                    partition: 0,
                },
            },
            source_start: source.0,
            source_next: source.1,
            mirror_start: mirror.0,
            mirror_end: mirror.1,
        }
    }

    #[test]
    fn records_written_read_back_and_one_past_the_log_is_dropped_from_the_file() {
        let fs = MemFs::new(0);
        let dir = Path::new("/logs/orders-0");
        fs.create_dir_all(dir).unwrap();
        let mut opened = MirrorPositions::open(fs.clone(), dir, 0).unwrap();
        let _ = opened.positions.write(position((0, 10), (0, 30))).unwrap();
        let _ = opened
            .positions
            .write(position((10, 20), (30, 60)))
            .unwrap();
        opened.positions.sync().unwrap();
        // The second set's data never made it: the log ends at 30.
        let again = MirrorPositions::open(fs.clone(), dir, 30).unwrap();
        assert_eq!((again.dropped, again.cut_log_to), (1, None));
        assert_eq!(
            again
                .positions
                .book()
                .resume_at(&position((0, 1), (0, 1)).key),
            Some(10)
        );
        let kept = fs
            .read_file(&MirrorPositions::<MemFs>::path_in(dir))
            .unwrap();
        let mut expected = record::encode_record(&Record::Begin { at: 0 });
        expected.extend(record::encode(&position((0, 10), (0, 30))));
        assert_eq!(kept, expected);
    }

    #[test]
    fn a_record_taken_back_leaves_the_file_and_book_as_before() {
        let fs = MemFs::new(0);
        let dir = Path::new("/logs/orders-0");
        fs.create_dir_all(dir).unwrap();
        let mut positions = MirrorPositions::open(fs.clone(), dir, 0).unwrap().positions;
        let _ = positions.write(position((0, 10), (0, 30))).unwrap();
        let before = positions.book().clone();
        let length = fs
            .read_file(&MirrorPositions::<MemFs>::path_in(dir))
            .unwrap()
            .len();
        let written = positions.write(position((10, 20), (30, 60))).unwrap();
        positions.take_back(written).unwrap();
        assert_eq!(positions.book(), &before);
        let after = fs
            .read_file(&MirrorPositions::<MemFs>::path_in(dir))
            .unwrap()
            .len();
        assert_eq!(after, length, "the record is cut from the file");
        let _ = positions.write(position((10, 25), (30, 70))).unwrap();
        let again = MirrorPositions::open(fs, dir, 70).unwrap();
        assert_eq!(again.dropped, 0);
        assert_eq!(again.positions.book(), positions.book());
    }

    #[test]
    fn a_large_file_is_rewritten_from_the_book_and_reads_back_the_same() {
        let fs = MemFs::new(0);
        let dir = Path::new("/logs/orders-0");
        fs.create_dir_all(dir).unwrap();
        let mut positions = MirrorPositions::open(fs.clone(), dir, 0).unwrap().positions;
        let mut written = 0u64;
        let mut i = 0i64;
        while written < COMPACT_BYTES {
            let at = i as u64 * 10;
            let _ = positions
                .write(position((i * 5, i * 5 + 5), (at, at + 10)))
                .unwrap();
            written = positions.len;
            i += 1;
        }
        // The next record rewrites the file first, and lands in the rewrite.
        let at = i as u64 * 10;
        let _ = positions
            .write(position((i * 5, i * 5 + 5), (at, at + 10)))
            .unwrap();
        assert!(positions.len < COMPACT_BYTES / 100);
        let again = MirrorPositions::open(fs, dir, at + 10).unwrap();
        assert_eq!(again.positions.book(), positions.book());
        assert_eq!(again.dropped, 0);
    }
}
