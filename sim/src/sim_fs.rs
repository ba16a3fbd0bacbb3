//! The log's file system on turmoil's simulated disk.
//!
//! A [`CrashPoint`] counts file-system operations; once its budget is spent every further
//! operation fails, as if the process had died at that instant, and the scenario then crashes
//! the host (dropping whatever was not synced). This puts crashes between any two file-system
//! operations, not only between whole log operations.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use tributary_core::log::{DirEntry, LockError, LogFile, LogFs};
use turmoil::fs::shim::std::fs as tfs;

/// The simulated wall clock's epoch, in ms since the Unix epoch: simulated time 0 is this
/// instant, for the clock handed to the log and for file modification times alike. Every
/// simulation is built with it ([`sim_builder`]), so turmoil's file times (which already count
/// from the builder's epoch) and [`crate::env::sim_now_ms`] agree.
pub const SIM_EPOCH_MS: i64 = 1_700_000_000_000;

/// A turmoil builder seeded with `seed` and set to [`SIM_EPOCH_MS`], never the host's clock.
pub fn sim_builder(seed: u64) -> turmoil::Builder {
    let mut builder = turmoil::Builder::new();
    builder.rng_seed(seed).epoch(UNIX_EPOCH + std::time::Duration::from_millis(SIM_EPOCH_MS as u64));
    builder
}

/// A budget of file-system operations after which the process is considered dead.
#[derive(Debug, Clone, Default)]
pub struct CrashPoint {
    remaining: Arc<AtomicU64>,
    armed: Arc<AtomicBool>,
    hit: Arc<AtomicBool>,
}

impl CrashPoint {
    /// Dies after `ops` more operations.
    pub fn after(ops: u64) -> Self {
        let point = CrashPoint::default();
        point.remaining.store(ops, Ordering::SeqCst);
        point.armed.store(true, Ordering::SeqCst);
        point
    }

    /// Never dies.
    pub fn never() -> Self {
        CrashPoint::default()
    }

    /// Whether the budget ran out.
    pub fn hit(&self) -> bool {
        self.hit.load(Ordering::SeqCst)
    }

    fn spend(&self) -> io::Result<()> {
        if !self.armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        if self.hit() || self.remaining.fetch_sub(1, Ordering::SeqCst) == 0 {
            self.hit.store(true, Ordering::SeqCst);
            return Err(io::Error::other("simulated crash: the process is dead"));
        }
        Ok(())
    }
}

/// turmoil's file system, for the host it is called from.
#[derive(Debug, Clone, Default)]
pub struct SimFs {
    crash: CrashPoint,
}

impl SimFs {
    /// A simulated file system that dies at `crash`.
    pub fn new(crash: CrashPoint) -> Self {
        SimFs { crash }
    }
}

/// An open simulated file.
#[derive(Debug)]
pub struct SimFile {
    file: tfs::File,
    crash: CrashPoint,
}

impl LogFile for SimFile {
    fn size_bytes(&self) -> io::Result<u64> {
        self.crash.spend()?;
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.crash.spend()?;
        self.file.read_at(buf, offset)
    }

    fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.crash.spend()?;
        self.file.write_all_at(data, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.crash.spend()?;
        self.file.sync_all()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.crash.spend()?;
        self.file.set_len(len)
    }
}

impl LogFs for SimFs {
    type File = SimFile;
    /// A simulated host runs one process, so no one else can hold its directories.
    type DirLock = ();

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.crash.spend()?;
        tfs::create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.crash.spend()?;
        let mut entries = Vec::new();
        for entry in tfs::read_dir(path)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            entries.push(DirEntry { name, is_dir: entry.file_type()?.is_dir() });
        }
        entries.sort();
        Ok(entries)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<SimFile> {
        self.crash.spend()?;
        let file = tfs::OpenOptions::new().read(true).write(true).create(create).open(path)?;
        Ok(SimFile { file, crash: self.crash.clone() })
    }

    fn exists(&self, path: &Path) -> bool {
        tfs::exists(path)
    }

    fn modified_ms(&self, path: &Path) -> io::Result<i64> {
        self.crash.spend()?;
        // turmoil's times already count from the simulation's epoch (SIM_EPOCH_MS).
        let since = tfs::metadata(path)?.modified()?.duration_since(UNIX_EPOCH).unwrap_or_default();
        Ok(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.crash.spend()?;
        tfs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.crash.spend()?;
        tfs::rename(from, to)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.crash.spend()?;
        tfs::sync_dir(path)
    }

    fn lock_dir(&self, _path: &Path, _holder: &str) -> Result<(), LockError> {
        Ok(())
    }
}
