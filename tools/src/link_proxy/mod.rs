//! `tributary link-proxy`: a TCP proxy that behaves like a long link between two datacenters —
//! every byte is held for half the round trip in each direction, and each direction carries at
//! most a given rate, shared by all connections (one bottleneck, as a real link has). It is for
//! rehearsing a mirror's settings (`fetch.size`, `num.consumer.fetchers`, `socket.buffersize`)
//! before deploying across a WAN, and it is what the benchmark and the simulator put between the
//! clusters (this kernel has no netem). Through [`Env`], so the same proxy runs on tokio and on
//! turmoil.
//!
//! Bounded: each direction of each connection holds at most `queue_bytes` (plus one read of 64
//! KiB) waiting or in flight; past that it stops reading, and TCP pushes back on the sender.
//! Ordered: bytes leave in the order they came, and a closed side is passed on after the bytes
//! before it. An error on either side closes both sides of that connection.

mod cli;
pub mod link;

pub use self::cli::{run_cli, LinkProxyArgs};

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
// tokio's clock, as for every timer and deadline (bins/src/env.rs): turmoil drives it, so the
// link's delays are simulated time in the simulator, and the same seed gives the same arrivals.
use tokio::time::Instant;

use link::Link;
use tributary::env::{Env, Listener};

/// Bytes read from a side at once.
const READ_BYTES: usize = 64 * 1024;
/// The most connections carried at once; more wait to be accepted.
pub const CONNECTIONS_MAX: usize = 1024;
/// Socket buffers of the proxy's own sockets (hints).
const SOCKET_BUFFER_BYTES: u32 = 4 * 1024 * 1024;

/// What the link looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSpec {
    /// The round trip the link adds (half each way).
    pub round_trip: Duration,
    /// Bytes a second in each direction; `None` for no cap.
    pub rate: Option<u64>,
    /// The most bytes one direction of one connection holds (waiting and in flight).
    pub queue_bytes: u32,
}

impl LinkSpec {
    /// A link with room for twice its bandwidth-delay product in each direction of each
    /// connection (at least 1 MiB, at most 1 GiB).
    pub fn new(round_trip: Duration, rate: Option<u64>) -> Self {
        let product = Link::new(rate, round_trip).bytes_in_flight_when_full();
        let queue_bytes = product
            .map_or(64 << 20, |p| p.saturating_mul(2))
            .clamp(1 << 20, 1 << 30);
        LinkSpec {
            round_trip,
            rate,
            queue_bytes: u32::try_from(queue_bytes).unwrap_or(u32::MAX),
        }
    }

    fn direction(&self) -> Link {
        Link::new(self.rate, self.round_trip / 2)
    }
}

/// What the proxy has carried so far.
#[derive(Debug, Default)]
pub struct LinkStats {
    /// Bytes from clients to the upstream server (delivered to it).
    pub upstream_bytes: AtomicU64,
    /// Bytes from the upstream server to clients (delivered to them).
    pub downstream_bytes: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
}

/// Why the proxy stopped.
#[derive(Debug, thiserror::Error)]
pub enum LinkProxyError {
    /// It could not listen.
    #[error("link proxy cannot listen on port {port}: {source}")]
    Bind {
        /// The port asked for.
        port: u16,
        /// Why.
        source: io::Error,
    },
}

/// A running proxy.
#[derive(Debug)]
pub struct LinkProxy {
    addr: SocketAddr,
    stats: Arc<LinkStats>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), LinkProxyError>>,
}

impl LinkProxy {
    /// Listens on `host:port` (0: any free port) and carries every connection to
    /// `upstream` over a link like `spec`.
    pub async fn start<E: Env>(
        env: E,
        host: &str,
        port: u16,
        upstream: (String, u16),
        spec: LinkSpec,
    ) -> Result<Self, LinkProxyError> {
        let listener = env
            .bind(host, port, SOCKET_BUFFER_BYTES, SOCKET_BUFFER_BYTES)
            .await
            .map_err(|source| LinkProxyError::Bind { port, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| LinkProxyError::Bind { port, source })?;
        let stats = Arc::new(LinkStats::default());
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(serve(env, listener, upstream, spec, stats.clone(), stopped));
        Ok(LinkProxy {
            addr,
            stats,
            stop,
            task,
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it has carried.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Runs until `until` completes or the proxy fails; then closes every connection.
    pub async fn run_until(
        mut self,
        until: impl std::future::Future<Output = ()>,
    ) -> Result<(), LinkProxyError> {
        tokio::select! {
            biased;
            () = until => self.stop().await,
            ended = &mut self.task => flatten(ended),
        }
    }

    /// Closes the listener and every connection, and waits for that.
    pub async fn stop(self) -> Result<(), LinkProxyError> {
        let _already_stopped = self.stop.send(true).is_err();
        flatten(self.task.await)
    }
}

/// A panic in the proxy's task is the proxy's panic: it goes on unwinding.
fn flatten(
    ended: Result<Result<(), LinkProxyError>, tokio::task::JoinError>,
) -> Result<(), LinkProxyError> {
    match ended {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_cancelled) => Ok(()),
    }
}

async fn serve<E: Env>(
    env: E,
    mut listener: E::Listener,
    upstream: (String, u16),
    spec: LinkSpec,
    stats: Arc<LinkStats>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), LinkProxyError> {
    let start = Instant::now();
    let up = Arc::new(Mutex::new(spec.direction()));
    let down = Arc::new(Mutex::new(spec.direction()));
    let mut connections = JoinSet::new();
    let outcome = loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break Ok(()),
            Some(ended) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = ended {
                    if e.is_panic() {
                        std::panic::resume_unwind(e.into_panic());
                    }
                }
            }
            accepted = listener.accept(), if connections.len() < CONNECTIONS_MAX => {
                let (client, peer) = match accepted {
                    Ok(accepted) => accepted,
                    // One failed accept (a peer gone before it completed, descriptors run out
                    // for a moment) must not take every carried connection down.
                    Err(e) => {
                        tracing::warn!("link proxy: accepting a connection failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                };
                stats.connections.fetch_add(1, Ordering::Relaxed);
                let way = Way { start, spec, stats: stats.clone() };
                let (env, upstream, up, down) = (env.clone(), upstream.clone(), up.clone(), down.clone());
                connections.spawn(async move {
                    let server = match env.connect(&upstream.0, upstream.1).await {
                        Ok(server) => server,
                        Err(e) => {
                            tracing::warn!("link proxy: {peer}: cannot reach {}:{}: {e}; closing", upstream.0, upstream.1);
                            return;
                        }
                    };
                    if let Err(e) = carry(client, server, up, down, way).await {
                        tracing::debug!("link proxy: {peer}: {e}");
                    }
                });
            }
        }
    };
    connections.abort_all();
    while let Some(ended) = connections.join_next().await {
        if let Err(e) = ended {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
    outcome
}

/// What each direction of a connection shares.
#[derive(Debug, Clone)]
struct Way {
    start: Instant,
    spec: LinkSpec,
    stats: Arc<LinkStats>,
}

/// Carries one connection both ways until both sides have closed, or either fails.
async fn carry<S>(
    client: S,
    server: S,
    up: Arc<Mutex<Link>>,
    down: Arc<Mutex<Link>>,
    way: Way,
) -> io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (client_read, client_write) = tokio::io::split(client);
    let (server_read, server_write) = tokio::io::split(server);
    let mut ways = JoinSet::new();
    ways.spawn(direction(
        client_read,
        server_write,
        up,
        way.clone(),
        Toward::Upstream,
    ));
    ways.spawn(direction(
        server_read,
        client_write,
        down,
        way,
        Toward::Downstream,
    ));
    while let Some(ended) = ways.join_next().await {
        match ended {
            Ok(Ok(())) => {}
            // Either side failed: dropping the set closes both.
            Ok(Err(e)) => return Err(e),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_cancelled) => return Ok(()),
        }
    }
    Ok(())
}

/// Which way bytes go, for counting them.
#[derive(Debug, Clone, Copy)]
enum Toward {
    Upstream,
    Downstream,
}

impl Toward {
    fn count(self, stats: &LinkStats, bytes: usize) {
        let counter = match self {
            Toward::Upstream => &stats.upstream_bytes,
            Toward::Downstream => &stats.downstream_bytes,
        };
        counter.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// A piece of the stream on the link: its bytes (empty for the end of the stream), when it
/// arrives, and its share of the direction's queue.
struct InFlight {
    bytes: bytes::Bytes,
    arrives: Instant,
    _room: OwnedSemaphorePermit,
}

/// One direction: a reader that puts what it reads on the link, and a writer that hands each
/// piece on when it arrives.
async fn direction<R, W>(
    mut from: R,
    mut to: W,
    link: Arc<Mutex<Link>>,
    way: Way,
    toward: Toward,
) -> io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let room = Arc::new(Semaphore::new(way.spec.queue_bytes.max(1) as usize));
    // Unbounded in pieces, bounded in bytes by `room`.
    let (pieces, mut arriving) = mpsc::unbounded_channel::<InFlight>();
    let stats = way.stats.clone();
    let writer = async move {
        while let Some(piece) = arriving.recv().await {
            tokio::time::sleep_until(piece.arrives).await;
            if piece.bytes.is_empty() {
                return to.shutdown().await;
            }
            to.write_all(&piece.bytes).await?;
            toward.count(&stats, piece.bytes.len());
        }
        Ok(())
    };
    let reader = async move {
        // One buffer, split after each read: a piece holds only the bytes read (many small
        // reads share one allocation) so the queue's bound in bytes is a bound in memory.
        let mut buf = bytes::BytesMut::new();
        loop {
            buf.reserve(READ_BYTES);
            let n = from.read_buf(&mut buf).await?;
            let bytes = buf.split().freeze();
            // Never more than the queue holds, or the wait could not end.
            let permits = n.clamp(1, way.spec.queue_bytes.max(1) as usize);
            let permits = u32::try_from(permits).unwrap_or(u32::MAX);
            let Ok(room) = room.clone().acquire_many_owned(permits).await else {
                return Ok(());
            };
            let now = Instant::now();
            let arrives = {
                let mut link = link
                    .lock()
                    .unwrap_or_else(|_| panic!("the link proxy's link lock was poisoned"));
                way.start + link.send(now - way.start, n)
            };
            let piece = InFlight {
                bytes,
                arrives,
                _room: room,
            };
            if pieces.send(piece).is_err() || n == 0 {
                return Ok::<(), io::Error>(());
            }
        }
    };
    // The writer ends after the end of the stream (or when the reader is gone); a failure of
    // either side ends the direction at once.
    tokio::pin!(reader, writer);
    let mut reading = true;
    loop {
        tokio::select! {
            biased;
            read = &mut reader, if reading => {
                read?;
                reading = false;
            }
            written = &mut writer => return written,
        }
    }
}
