//! The log's file system on the real disk (`std::fs`), for production.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

use tributary_core::log::{DirEntry, LockError, LogFile, LogFs};

/// The real file system. Stateless; clone freely.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

/// An open file on the real disk.
#[derive(Debug)]
pub struct RealFile(File);

impl std::os::fd::AsFd for RealFile {
    /// The descriptor, for sending file ranges without copying (`sendfile`).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl LogFile for RealFile {
    fn size_bytes(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

/// The line a stopping holder adds to its lock file (after the line saying who it is).
const STOPPING_LINE: &str = "stopping";

/// An OS lock (`flock`) on a directory's lock file; the kernel releases it when the process
/// exits, however it exits, so a killed broker never leaves its directory locked.
#[derive(Debug)]
pub struct RealDirLock(File);

impl LogFs for RealFs {
    type File = RealFile;
    type DirLock = RealDirLock;

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            entries.push(DirEntry {
                name,
                is_dir: entry.file_type()?.is_dir(),
            });
        }
        entries.sort();
        Ok(entries)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<RealFile> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .map(RealFile)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn modified_ms(&self, path: &Path) -> io::Result<i64> {
        let modified = std::fs::metadata(path)?.modified()?;
        let since_epoch = modified.duration_since(UNIX_EPOCH).unwrap_or_default();
        Ok(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn lock_dir(&self, path: &Path, holder: &str) -> Result<RealDirLock, LockError> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(LockError::Io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                let mut lines = text.lines().map(str::trim);
                let holder = match lines.next() {
                    Some(first) if !first.is_empty() => first.to_string(),
                    _ => "a process that did not say who it is".to_string(),
                };
                let stopping = lines.any(|line| line == STOPPING_LINE);
                return Err(LockError::Held { holder, stopping });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
        }
        // Say who holds it, for the error the next process will print.
        file.set_len(0).map_err(LockError::Io)?;
        file.write_all(format!("{holder}, pid {}\n", std::process::id()).as_bytes())
            .map_err(LockError::Io)?;
        Ok(RealDirLock(file))
    }

    fn note_stopping(&self, lock: &RealDirLock) -> io::Result<()> {
        // Appended after the holder's line (the file is only ever written by its holder).
        let mut file = &lock.0;
        file.seek(io::SeekFrom::End(0))?;
        file.write_all(format!("{STOPPING_LINE}\n").as_bytes())?;
        file.sync_data()
    }
}
