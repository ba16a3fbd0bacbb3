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
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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
    builder
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_millis(SIM_EPOCH_MS as u64));
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

/// How a simulated disk misbehaves without crashing: every operation takes a seeded time, and
/// a seeded share of file syncs fail (EIO), as a dying disk's do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskFaults {
    /// Each file-system operation takes up to this long (uniform); zero for an instant disk.
    pub latency_max: Duration,
    /// Out of a million file syncs, how many fail.
    pub sync_failures_per_million: u32,
}

/// A disk's fault state, kept across restarts of its host (the disk is the same disk).
#[derive(Debug)]
pub struct Disk {
    faults: DiskFaults,
    rng: Mutex<ChaCha8Rng>,
    /// Latency of operations done but not yet waited for, in µs: the caller's environment waits
    /// it out right after the work, while the work's locks are still held.
    debt_us: AtomicU64,
    /// Sync failures injected so far.
    sync_failures: AtomicU64,
    /// Whether sync failures are being injected (turned off when the scenario heals).
    failing: AtomicBool,
    /// Syncs that still succeed before every later one fails (`-1`: no such limit); see
    /// [`Disk::fail_syncs_after`].
    syncs_left: std::sync::atomic::AtomicI64,
    /// Whether the disk is full: writes that would grow a file fail (ENOSPC) until it is
    /// emptied again ([`Disk::set_full`]).
    full: AtomicBool,
}

impl Disk {
    /// A disk with `faults`, its choices drawn from `seed`.
    pub fn new(faults: DiskFaults, seed: u64) -> Arc<Self> {
        Arc::new(Disk {
            faults,
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed ^ 0xD15C)),
            debt_us: AtomicU64::new(0),
            sync_failures: AtomicU64::new(0),
            failing: AtomicBool::new(faults.sync_failures_per_million > 0),
            syncs_left: std::sync::atomic::AtomicI64::new(-1),
            full: AtomicBool::new(false),
        })
    }

    /// Fills the disk (`true`): from then on every write that would grow a file fails with
    /// ENOSPC, writing nothing, as a full file system's do; a write within a file's length and
    /// a shrink still succeed. `false` frees space again.
    pub fn set_full(&self, full: bool) {
        self.full.store(full, Ordering::SeqCst);
    }

    /// Fails a write growing `file` to `end` bytes while the disk is full (the file's length
    /// is read only then).
    fn room_for(&self, file: &tfs::File, end: u64) -> io::Result<()> {
        if self.full.load(Ordering::SeqCst) && end > file.metadata()?.len() {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "simulated ENOSPC: the disk is full",
            ));
        }
        Ok(())
    }

    /// An instant, faultless disk.
    pub fn perfect() -> Arc<Self> {
        Disk::new(DiskFaults::default(), 0)
    }

    fn draw(&self, below: u64) -> u64 {
        self.rng
            .lock()
            .map(|mut r| r.random_range(0..below.max(1)))
            .unwrap_or(0)
    }

    /// Charges one operation's latency.
    fn operate(&self) {
        let max_us = self.faults.latency_max.as_micros() as u64;
        if max_us > 0 {
            self.debt_us
                .fetch_add(self.draw(max_us + 1), Ordering::SeqCst);
        }
    }

    /// Whether this sync fails.
    fn sync_fails(&self) -> bool {
        let left = self.syncs_left.load(Ordering::SeqCst);
        if left == 0 {
            self.sync_failures.fetch_add(1, Ordering::SeqCst);
            return true;
        }
        if left > 0 {
            self.syncs_left.fetch_sub(1, Ordering::SeqCst);
        }
        let rate = u64::from(self.faults.sync_failures_per_million);
        if rate == 0 || !self.failing.load(Ordering::SeqCst) || self.draw(1_000_000) >= rate {
            return false;
        }
        self.sync_failures.fetch_add(1, Ordering::SeqCst);
        true
    }

    /// Takes the latency owed so far (the environment sleeps it).
    pub fn take_debt(&self) -> Duration {
        Duration::from_micros(self.debt_us.swap(0, Ordering::SeqCst))
    }

    /// Sync failures injected so far.
    pub fn sync_failures(&self) -> u64 {
        self.sync_failures.load(Ordering::SeqCst)
    }

    /// Stops injecting sync failures (the scenario heals).
    pub fn stop_failing(&self) {
        self.failing.store(false, Ordering::SeqCst);
    }

    /// Lets the next `syncs` file syncs succeed and fails every one after them (a disk dying at
    /// a chosen point: tests sweep it over every sync of a shutdown).
    pub fn fail_syncs_after(&self, syncs: u64) {
        self.syncs_left
            .store(i64::try_from(syncs).unwrap_or(i64::MAX), Ordering::SeqCst);
    }

    /// Injects sync failures (again) at the disk's rate.
    pub fn start_failing(&self) {
        self.failing
            .store(self.faults.sync_failures_per_million > 0, Ordering::SeqCst);
    }
}

/// turmoil's file system, for the host it is called from.
#[derive(Debug, Clone)]
pub struct SimFs {
    crash: CrashPoint,
    disk: Arc<Disk>,
}

impl SimFs {
    /// A simulated file system that dies at `crash`, on an instant, faultless disk.
    pub fn new(crash: CrashPoint) -> Self {
        SimFs {
            crash,
            disk: Disk::perfect(),
        }
    }

    /// A simulated file system on `disk`, which never dies on its own.
    pub fn on_disk(disk: Arc<Disk>) -> Self {
        SimFs {
            crash: CrashPoint::never(),
            disk,
        }
    }

    /// The disk under this file system.
    pub fn disk(&self) -> &Arc<Disk> {
        &self.disk
    }

    fn operate(&self) -> io::Result<()> {
        self.crash.spend()?;
        self.disk.operate();
        Ok(())
    }
}

/// An open simulated file.
#[derive(Debug)]
pub struct SimFile {
    file: tfs::File,
    crash: CrashPoint,
    disk: Arc<Disk>,
}

impl SimFile {
    fn operate(&self) -> io::Result<()> {
        self.crash.spend()?;
        self.disk.operate();
        Ok(())
    }
}

impl LogFile for SimFile {
    fn size_bytes(&self) -> io::Result<u64> {
        self.operate()?;
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.operate()?;
        self.file.read_at(buf, offset)
    }

    fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.operate()?;
        let end = offset.saturating_add(data.len() as u64);
        self.disk.room_for(&self.file, end)?;
        self.file.write_all_at(data, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.operate()?;
        if self.disk.sync_fails() {
            // A failed fsync: whether the data reached the disk is unknown, so it did not.
            return Err(io::Error::other("simulated EIO from fsync"));
        }
        self.file.sync_all()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.operate()?;
        self.disk.room_for(&self.file, len)?;
        self.file.set_len(len)
    }
}

impl LogFs for SimFs {
    type File = SimFile;
    /// A simulated host runs one process, so no one else can hold its directories.
    type DirLock = ();

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.operate()?;
        tfs::create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.operate()?;
        let mut entries = Vec::new();
        for entry in tfs::read_dir(path)? {
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

    fn open(&self, path: &Path, create: bool) -> io::Result<SimFile> {
        self.operate()?;
        let file = tfs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .open(path)?;
        Ok(SimFile {
            file,
            crash: self.crash.clone(),
            disk: self.disk.clone(),
        })
    }

    fn exists(&self, path: &Path) -> bool {
        tfs::exists(path)
    }

    fn modified_ms(&self, path: &Path) -> io::Result<i64> {
        self.operate()?;
        // turmoil's times already count from the simulation's epoch (SIM_EPOCH_MS).
        let since = tfs::metadata(path)?
            .modified()?
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Ok(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.operate()?;
        tfs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.operate()?;
        tfs::rename(from, to)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.operate()?;
        tfs::sync_dir(path)
    }

    fn lock_dir(&self, _path: &Path, _holder: &str) -> Result<(), LockError> {
        Ok(())
    }
}
