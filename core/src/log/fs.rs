//! The file system the log needs, as a small trait.
//!
//! Two implementations exist: the real file system (`bins`) and turmoil's simulated one (`sim`),
//! whose crash model drops unsynced writes, deletes never-synced files and tears writes. The log
//! never touches `std::fs` itself, so the same code runs on both.
//!
//! Durability contract the log relies on (POSIX): data written to a file is durable after
//! [`LogFile::sync`]; a directory entry (create, rename, remove) is durable after
//! [`LogFs::sync_dir`] on its parent.

use std::io;
use std::path::{Path, PathBuf};

/// An entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirEntry {
    /// The entry's file name (not the full path). Names that are not UTF-8 are reported lossily.
    pub name: String,
    /// Whether the entry is a directory.
    pub is_dir: bool,
}

/// An open file of the log: positioned reads and writes, sync, truncation.
pub trait LogFile: std::fmt::Debug {
    /// The file's current size in bytes.
    fn size_bytes(&self) -> io::Result<u64>;
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `data` at `offset`.
    fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Makes the file's data and length durable (fsync).
    fn sync(&self) -> io::Result<()>;
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
}

/// Why a directory could not be locked.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds the lock; `holder` is what it wrote into the lock file.
    Held {
        /// Who holds it, as the holder described itself.
        holder: String,
        /// Whether the holder said it is stopping ([`LogFs::note_stopping`]): the lock is
        /// about to be free.
        stopping: bool,
    },
    /// The lock file could not be created or locked.
    Io(io::Error),
}

/// The directory operations of the log.
///
/// Clone is cheap (a handle): a log hands a clone to its flush tickets.
pub trait LogFs: std::fmt::Debug + Clone {
    /// The file type.
    type File: LogFile;
    /// An exclusive lock on a directory, released when dropped (or when the process dies).
    type DirLock: std::fmt::Debug;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Lists a directory, sorted by name.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>>;
    /// Opens a file for reading and writing, creating it if `create` is set.
    fn open(&self, path: &Path, create: bool) -> io::Result<Self::File>;
    /// Whether a file or directory exists.
    fn exists(&self, path: &Path) -> bool;
    /// Last modification time in ms since the Unix epoch.
    fn modified_ms(&self, path: &Path) -> io::Result<i64>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Renames a file, replacing any file at `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the directory's entries durable (fsync of the directory).
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on the lock file at `path` (created if missing) for as long as
    /// the returned value lives, writing `holder` into it; refuses with [`LockError::Held`] when
    /// another process holds it.
    fn lock_dir(&self, path: &Path, holder: &str) -> Result<Self::DirLock, LockError>;

    /// Says in the lock file that its holder is stopping, so that a process refused the lock
    /// meanwhile ([`LockError::Held`] with `stopping`) waits for it instead of giving up. A
    /// file system whose locks nobody else can contend for does nothing.
    fn note_stopping(&self, _lock: &Self::DirLock) -> io::Result<()> {
        Ok(())
    }

    /// Reads a whole (small) file.
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let file = self.open(path, false)?;
        let len =
            usize::try_from(file.size_bytes()?).map_err(|_| io::Error::other("file too large"))?;
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            let n = file.read_at(buf.get_mut(done..).unwrap_or_default(), done as u64)?;
            if n == 0 {
                buf.truncate(done);
                break;
            }
            done += n;
        }
        Ok(buf)
    }

    /// Replaces `path` with `contents` atomically and durably: write a temporary file, sync it,
    /// rename it over `path`, sync the directory.
    fn write_file_atomic(&self, path: &Path, contents: &[u8]) -> io::Result<()> {
        let tmp = tmp_path(path);
        let file = self.open(&tmp, true)?;
        file.set_len(0)?;
        file.write_all_at(contents, 0)?;
        file.sync()?;
        drop(file);
        self.rename(&tmp, path)?;
        self.sync_dir(path.parent().unwrap_or(Path::new("/")))
    }
}

/// The temporary name used while replacing `path`.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}
