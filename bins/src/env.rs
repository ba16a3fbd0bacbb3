//! The environment the runtime code runs in: network, file system, clock, randomness, blocking
//! work and ZooKeeper sessions. The broker, producer, consumer, mirror, replica copier and tools
//! are written once against [`Env`]; [`TokioEnv`] runs them in production, the simulator plugs
//! in turmoil and its ZooKeeper model.
//!
//! Timers and deadlines use `tokio::time` directly: turmoil drives tokio's clock, so they are
//! simulated there. Wall-clock time (for mtimes and registration stamps) and randomness always
//! come from [`Env::now_ms`] and [`Env::rng_seed`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use std::time::Duration;

use crate::coordination::zk::ZkCoordination;
use crate::coordination::{CoordError, Coordination};
use crate::real_fs::RealFs;
use tributary_core::config::ZkConnect;
use tributary_core::log::{LogFile, LogFs};

/// A listening socket.
pub trait Listener: Send + 'static {
    /// The connection type it yields.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Waits for the next connection.
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Stream, SocketAddr)>> + Send;
    /// The address it listens on.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// Everything the runtime takes from its surroundings.
pub trait Env: Clone + Send + Sync + 'static {
    /// The log's file system.
    type Fs: LogFs<File: Send + Sync + 'static, DirLock: Send + Sync + 'static>
        + Clone
        + Send
        + Sync
        + 'static;
    /// Listening sockets.
    type Listener: Listener<Stream = Self::Stream>;
    /// Connections.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Coordination sessions (ZooKeeper).
    type Coord: Coordination;

    /// The file system for logs.
    fn fs(&self) -> Self::Fs;
    /// Wall-clock time in ms since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Time since a fixed start (the process's in production, the simulation's in the
    /// simulator) that never goes back: for graces and timeouts, which the wall clock of
    /// [`Env::now_ms`] could stretch or cut when it is set.
    fn monotonic(&self) -> Duration;
    /// A seed for this process's random choices.
    fn rng_seed(&self) -> u64;
    /// This host's address as other hosts reach it, for a broker without `hostname` (0.7
    /// registers the host's IP address).
    fn host_address(&self) -> String;
    /// Listens on `host:port` (`0.0.0.0` for every interface) with the given socket buffer sizes.
    fn bind(
        &self,
        host: &str,
        port: u16,
        send_buffer: u32,
        receive_buffer: u32,
    ) -> impl Future<Output = io::Result<Self::Listener>> + Send;
    /// Connects to `host:port`.
    fn connect(
        &self,
        host: &str,
        port: u16,
    ) -> impl Future<Output = io::Result<Self::Stream>> + Send;
    /// Connects to `host:port` asking for a `receive_buffer`-byte SO_RCVBUF (a hint; what the
    /// system granted is logged at debug level; 0 asks for nothing, leaving the kernel's
    /// autotuning on). By default the same as [`Env::connect`].
    fn connect_tuned(
        &self,
        host: &str,
        port: u16,
        receive_buffer: u32,
    ) -> impl Future<Output = io::Result<Self::Stream>> + Send {
        let _hint_not_simulated = receive_buffer;
        self.connect(host, port)
    }
    /// Opens a coordination session with `connect` (chroot included).
    fn coordinate(
        &self,
        connect: &ZkConnect,
        session_timeout: Duration,
        connection_timeout: Duration,
    ) -> impl Future<Output = Result<Self::Coord, CoordError>> + Send;
    /// Runs blocking work (disk I/O) without stalling other connections.
    fn blocking<R: Send + 'static>(
        &self,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> impl Future<Output = R> + Send;
    /// Writes bytes `[position, position + len)` of `file` to `stream`; an error if the file
    /// ends first. By default (the simulator) they are read through [`LogFile::read_at`] and
    /// written; production sends them from the page cache without copying them through user
    /// space (`sendfile`).
    fn send_file(
        &self,
        stream: &mut Self::Stream,
        file: &<Self::Fs as LogFs>::File,
        position: u64,
        len: usize,
    ) -> impl Future<Output = io::Result<()>> + Send {
        send_file_copying(stream, file, position, len)
    }
}

/// Bytes copied per step by [`send_file_copying`].
const SEND_COPY_CHUNK_BYTES: usize = 64 * 1024;

/// [`Env::send_file`] through memory: read a chunk, write it, repeat.
pub async fn send_file_copying<S, F>(
    stream: &mut S,
    file: &F,
    position: u64,
    len: usize,
) -> io::Result<()>
where
    S: AsyncWrite + Unpin + Send,
    F: LogFile + Sync,
{
    send_file_copying_paced(stream, file, position, len, || Duration::ZERO).await
}

/// [`send_file_copying`], waiting after each chunk read for as long as `read_took` says that
/// read took (a simulated disk's latency, charged where the read happens).
pub async fn send_file_copying_paced<S, F>(
    stream: &mut S,
    file: &F,
    position: u64,
    len: usize,
    mut read_took: impl FnMut() -> Duration + Send,
) -> io::Result<()>
where
    S: AsyncWrite + Unpin + Send,
    F: LogFile + Sync,
{
    let mut buf = vec![0u8; len.min(SEND_COPY_CHUNK_BYTES)];
    let mut done = 0;
    while done < len {
        let want = (len - done).min(buf.len());
        let chunk = buf.get_mut(..want).unwrap_or_default();
        let n = file.read_at(chunk, position + done as u64)?;
        let took = read_took();
        if !took.is_zero() {
            tokio::time::sleep(took).await;
        }
        if n == 0 {
            return Err(file_ended(position, len, done));
        }
        stream.write_all(chunk.get(..n).unwrap_or_default()).await?;
        done += n;
    }
    Ok(())
}

/// The error for a file range that ends before its length.
fn file_ended(position: u64, len: usize, done: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the file ended {done} bytes into a {len}-byte range at {position}"),
    )
}

/// Production: tokio sockets, the real disk, the system clock, blocking work on tokio's pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioEnv;

/// A tokio listener.
#[derive(Debug)]
pub struct TokioListener(tokio::net::TcpListener);

impl Listener for TokioListener {
    type Stream = tokio::net::TcpStream;

    async fn accept(&mut self) -> io::Result<(Self::Stream, SocketAddr)> {
        let (stream, peer) = self.0.accept().await?;
        // 0.7 sets TCP_NODELAY on every connection: responses go out as soon as written.
        stream.set_nodelay(true)?;
        Ok((stream, peer))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl Env for TokioEnv {
    type Fs = RealFs;
    type Listener = TokioListener;
    type Stream = tokio::net::TcpStream;
    type Coord = ZkCoordination;

    fn fs(&self) -> RealFs {
        RealFs
    }

    fn now_ms(&self) -> i64 {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }

    fn monotonic(&self) -> Duration {
        process_monotonic()
    }

    fn rng_seed(&self) -> u64 {
        rand::random()
    }

    fn host_address(&self) -> String {
        // As 0.7's InetAddress.getLocalHost: the host name's first non-loopback IPv4 address.
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&(name.trim(), 0))
            .map(Iterator::collect)
            .unwrap_or_default();
        addrs
            .iter()
            .find(|a| a.is_ipv4() && !a.ip().is_loopback())
            .or(addrs.first())
            .map_or_else(|| "127.0.0.1".to_string(), |a| a.ip().to_string())
    }

    async fn bind(
        &self,
        host: &str,
        port: u16,
        send_buffer: u32,
        receive_buffer: u32,
    ) -> io::Result<TokioListener> {
        let addr = tokio::net::lookup_host((host, port))
            .await?
            .next()
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"))
            })?;
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        // Buffer sizes are hints to the kernel (as in 0.7.1+); accepted sockets inherit them.
        // What the system granted is logged, as the mirroring docs tell operators to check.
        if let Err(e) = socket
            .set_send_buffer_size(send_buffer)
            .and_then(|()| socket.set_recv_buffer_size(receive_buffer))
        {
            tracing::debug!("socket buffer sizes refused: {e}");
        }
        tracing::debug!(
            "listening socket: send buffer asked {send_buffer} bytes, granted {}; receive buffer asked {receive_buffer}, granted {}",
            socket.send_buffer_size().unwrap_or(0),
            socket.recv_buffer_size().unwrap_or(0)
        );
        socket.bind(addr)?;
        Ok(TokioListener(socket.listen(1024)?))
    }

    async fn connect(&self, host: &str, port: u16) -> io::Result<tokio::net::TcpStream> {
        let stream = tokio::net::TcpStream::connect((host, port)).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    async fn connect_tuned(
        &self,
        host: &str,
        port: u16,
        receive_buffer: u32,
    ) -> io::Result<tokio::net::TcpStream> {
        let addr = tokio::net::lookup_host((host, port))
            .await?
            .next()
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"))
            })?;
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // 0: leave the buffer to the kernel's autotuning (setting SO_RCVBUF turns it off).
        if receive_buffer > 0 {
            if let Err(e) = socket.set_recv_buffer_size(receive_buffer) {
                tracing::debug!(
                    "{host}:{port}: receive buffer of {receive_buffer} bytes refused: {e}"
                );
            }
        }
        let granted = socket.recv_buffer_size().unwrap_or(0);
        tracing::debug!("connection to {host}:{port}: receive buffer asked {receive_buffer} bytes, granted {granted}");
        let stream = socket.connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    async fn coordinate(
        &self,
        connect: &ZkConnect,
        session_timeout: Duration,
        connection_timeout: Duration,
    ) -> Result<ZkCoordination, CoordError> {
        ZkCoordination::connect(connect, session_timeout, connection_timeout).await
    }

    async fn send_file(
        &self,
        stream: &mut tokio::net::TcpStream,
        file: &crate::real_fs::RealFile,
        position: u64,
        len: usize,
    ) -> io::Result<()> {
        use std::os::fd::AsFd;
        let mut offset = position;
        let end = position + len as u64;
        while offset < end {
            let want = usize::try_from(end - offset).unwrap_or(usize::MAX);
            // Readiness first, then as much as the socket takes; a full socket buffer comes
            // back as WouldBlock and clears the readiness, so the next wait is a real one.
            stream.writable().await?;
            // sendfile reads the file: bytes no longer in the page cache wait for the disk. As
            // with `blocking`, the worker's other tasks move elsewhere meanwhile.
            let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
                let mut send = || {
                    rustix::fs::sendfile(stream.as_fd(), file.as_fd(), Some(&mut offset), want)
                        .map_err(io::Error::from)
                };
                match tokio::runtime::Handle::current().runtime_flavor() {
                    tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(send),
                    _ => send(),
                }
            });
            match sent {
                Ok(0) => return Err(file_ended(position, len, (offset - position) as usize)),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn blocking<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> R {
        // On the multi-thread runtime, run in place and let tokio move the other tasks off this
        // worker: no thread hop per request. Elsewhere, fall back to the blocking pool.
        match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(work),
            _ => match tokio::task::spawn_blocking(work).await {
                Ok(result) => result,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            },
        }
    }
}

/// Time since this process first asked, on the host's monotonic clock (tokio's, so that tests
/// with paused time see it paused too).
pub fn process_monotonic() -> Duration {
    static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(tokio::time::Instant::now).elapsed()
}
