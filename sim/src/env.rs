//! [`Env`] on turmoil: simulated TCP, the simulated disk, simulated time, a seed, inline
//! blocking work, and sessions with the ZooKeeper model. The broker code is the production
//! code; only this environment differs.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tributary::coordination::CoordError;
use tributary::env::{Env, Listener};
use tributary_core::config::ZkConnect;

use crate::sim_fs::{Disk, SimFs, SIM_EPOCH_MS};
use crate::zk_model::ModelCoordination;

/// The environment of one simulated host.
#[derive(Debug, Clone)]
pub struct SimEnv {
    fs: SimFs,
    seed: u64,
}

impl SimEnv {
    /// An environment drawing its random choices from `seed`, with an instant, faultless disk.
    pub fn new(seed: u64) -> Self {
        Self::on_disk(seed, Disk::perfect())
    }

    /// Like [`SimEnv::new`], on `disk` (its latency and failures; see [`Disk`]).
    pub fn on_disk(seed: u64, disk: Arc<Disk>) -> Self {
        SimEnv {
            fs: SimFs::on_disk(disk),
            seed,
        }
    }
}

/// Simulated time as wall-clock ms.
pub fn sim_now_ms() -> i64 {
    SIM_EPOCH_MS
        + i64::try_from(turmoil::sim_elapsed().unwrap_or_default().as_millis()).unwrap_or(0)
}

/// A simulated listening socket.
pub struct SimListener(turmoil::net::TcpListener);

impl std::fmt::Debug for SimListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SimListener")
            .field(&self.0.local_addr().ok())
            .finish()
    }
}

impl Listener for SimListener {
    type Stream = turmoil::net::TcpStream;

    async fn accept(&mut self) -> io::Result<(Self::Stream, SocketAddr)> {
        self.0.accept().await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl Env for SimEnv {
    type Fs = SimFs;
    type Listener = SimListener;
    type Stream = turmoil::net::TcpStream;
    type Coord = ModelCoordination;

    fn fs(&self) -> SimFs {
        self.fs.clone()
    }

    fn now_ms(&self) -> i64 {
        sim_now_ms()
    }

    fn monotonic(&self) -> std::time::Duration {
        turmoil::sim_elapsed().unwrap_or_default()
    }

    fn rng_seed(&self) -> u64 {
        self.seed
    }

    fn host_address(&self) -> String {
        // Simulated brokers always set `hostname`; this is only a fallback.
        "127.0.0.1".to_string()
    }

    async fn bind(
        &self,
        _host: &str,
        port: u16,
        _send_buffer: u32,
        _receive_buffer: u32,
    ) -> io::Result<SimListener> {
        turmoil::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .map(SimListener)
    }

    async fn connect(&self, host: &str, port: u16) -> io::Result<turmoil::net::TcpStream> {
        turmoil::net::TcpStream::connect((host, port)).await
    }

    async fn coordinate(
        &self,
        connect: &ZkConnect,
        session_timeout: Duration,
        connection_timeout: Duration,
    ) -> Result<ModelCoordination, CoordError> {
        if !connect.security.is_plain() {
            // TLS and ACLs are below what the ZooKeeper model models (docs/security.md).
            return Err(CoordError::Other(
                "ZooKeeper TLS and ACLs (zk.ssl.*, zk.auth.*, zk.set.acl) are not simulated".into(),
            ));
        }
        let server = connect
            .servers
            .first()
            .ok_or_else(|| CoordError::Other("zk.connect names no server".into()))?;
        ModelCoordination::connect(
            &server.host,
            server.port,
            session_timeout,
            connection_timeout,
        )
        .await
    }

    async fn send_file(
        &self,
        stream: &mut turmoil::net::TcpStream,
        file: &<SimFs as tributary_core::log::LogFs>::File,
        position: u64,
        len: usize,
    ) -> io::Result<()> {
        // Read and written through memory, each chunk's disk latency waited out right after its
        // read (as `blocking` does for the broker's other disk work), not left to whatever disk
        // operation comes next.
        let disk = self.fs.disk();
        tributary::env::send_file_copying_paced(stream, file, position, len, || disk.take_debt())
            .await
    }

    async fn blocking<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> R {
        // One thread, deterministic. The work runs at once; then the calling task waits out the
        // latency its disk operations took, still holding whatever the work's result holds (a
        // partition's lock guard, for the broker), so a slow disk stalls exactly what a real
        // one would, while other tasks go on.
        let result = work();
        let latency = self.fs.disk().take_debt();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        result
    }
}
