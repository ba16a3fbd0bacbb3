//! Test support: production's environment over a file system whose syncs can be held at a
//! gate and are counted.

#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tributary::coordination::CoordError;
use tributary::env::{Env, TokioEnv};
use tributary::real_fs::{RealFile, RealFs};
use tributary_core::config::ZkConnect;
use tributary_core::log::{DirEntry, LockError, LogFile, LogFs};

pub const T0: i64 = 1_700_000_000_000;

/// A file system whose syncs wait at a gate while it is closed.
#[derive(Debug, Clone, Default)]
pub struct GateFs {
    pub gate: Arc<Gate>,
}

#[derive(Debug, Default)]
pub struct Gate {
    closed: Mutex<bool>,
    opened: Condvar,
    pub waiting: AtomicBool,
    /// File syncs done (after the gate).
    pub syncs: AtomicU64,
}

impl Gate {
    pub fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }

    fn pass(&self) {
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            self.waiting.store(true, Ordering::SeqCst);
            closed = self.opened.wait(closed).unwrap();
        }
    }
}

#[derive(Debug)]
pub struct GateFile(RealFile, Arc<Gate>);

impl LogFile for GateFile {
    fn size_bytes(&self) -> std::io::Result<u64> {
        self.0.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_all_at(data, offset)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.1.pass();
        self.1.syncs.fetch_add(1, Ordering::SeqCst);
        self.0.sync()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
}

impl LogFs for GateFs {
    type File = GateFile;
    type DirLock = ();
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        RealFs.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<DirEntry>> {
        RealFs.list_dir(path)
    }
    fn open(&self, path: &Path, create: bool) -> std::io::Result<GateFile> {
        Ok(GateFile(RealFs.open(path, create)?, self.gate.clone()))
    }
    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }
    fn modified_ms(&self, path: &Path) -> std::io::Result<i64> {
        RealFs.modified_ms(path)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        RealFs.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        RealFs.rename(from, to)
    }
    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        RealFs.sync_dir(path)
    }
    fn lock_dir(&self, _path: &Path, _holder: &str) -> Result<(), LockError> {
        Ok(())
    }
}

/// Production's environment with the gated file system.
#[derive(Debug, Clone, Default)]
pub struct GateEnv {
    pub fs: GateFs,
}

impl Env for GateEnv {
    type Fs = GateFs;
    type Listener = <TokioEnv as Env>::Listener;
    type Stream = <TokioEnv as Env>::Stream;
    type Coord = <TokioEnv as Env>::Coord;

    fn fs(&self) -> GateFs {
        self.fs.clone()
    }
    fn now_ms(&self) -> i64 {
        T0
    }
    fn monotonic(&self) -> std::time::Duration {
        tributary::env::process_monotonic()
    }
    fn rng_seed(&self) -> u64 {
        7
    }
    fn host_address(&self) -> String {
        "127.0.0.1".into()
    }
    async fn bind(
        &self,
        host: &str,
        port: u16,
        send: u32,
        receive: u32,
    ) -> std::io::Result<Self::Listener> {
        TokioEnv.bind(host, port, send, receive).await
    }
    async fn connect(&self, host: &str, port: u16) -> std::io::Result<Self::Stream> {
        TokioEnv.connect(host, port).await
    }
    async fn coordinate(
        &self,
        connect: &ZkConnect,
        session: Duration,
        connection: Duration,
    ) -> Result<Self::Coord, CoordError> {
        TokioEnv.coordinate(connect, session, connection).await
    }
    async fn blocking<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> R {
        TokioEnv.blocking(work).await
    }
}

/// A standalone broker (no ZooKeeper) in this process on a free port, with `extra` lines of
/// configuration, serving until the returned task is aborted; its port.
pub async fn standalone_broker(
    dir: &Path,
    extra: &str,
) -> (
    u16,
    tokio::task::JoinHandle<Result<(), tributary::broker::BrokerError>>,
) {
    let text = format!(
        "brokerid=0\nport=0\nhostname=127.0.0.1\nlog.dir={}\nenable.zookeeper=false\n{extra}",
        dir.display()
    );
    let properties = tributary_core::config::Properties::parse("test", &text).unwrap();
    let config = tributary_core::config::BrokerConfig::from_properties(&properties).unwrap();
    let broker = tributary::broker::Broker::start(TokioEnv, config)
        .await
        .unwrap();
    let port = broker.addr.port();
    (port, tokio::spawn(broker.run_until(std::future::pending())))
}
