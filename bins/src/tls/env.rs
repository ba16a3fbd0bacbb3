//! [`SecureEnv`]: an environment whose outbound connections are inside TLS when a component's
//! settings say `security.protocol=ssl`. A consumer, producer or replica copier runs on it, so
//! their code is the same with and without TLS (and in the simulator, where it is always
//! plaintext).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tributary_core::config::{TlsClientSettings, ZkConnect};
use tributary_core::log::LogFs;

use super::client::ClientTls;
use super::endpoints::EndpointBook;
use super::link::Link;
use super::TlsError;
use crate::coordination::CoordError;
use crate::env::{send_file_copying, Env, Listener};

/// A component's outbound TLS: its configuration, and where its brokers' SSL listeners are.
#[derive(Debug, Clone)]
pub struct ClientLink {
    tls: Arc<ClientTls>,
    book: Option<Arc<EndpointBook>>,
}

impl ClientLink {
    /// The link of `settings` (`None`: plaintext), finding SSL listeners in the cluster whose
    /// ZooKeeper is `zk` (`None`: addresses are used as given, e.g. a `broker.list` of SSL
    /// ports). Reads the certificate files now: an error names the one that cannot be used.
    pub fn load(
        settings: Option<&TlsClientSettings>,
        zk: Option<(&ZkConnect, Duration, Duration)>,
    ) -> Result<Option<ClientLink>, TlsError> {
        let Some(settings) = settings else {
            return Ok(None);
        };
        Ok(Some(ClientLink {
            tls: Arc::new(ClientTls::load(settings.clone())?),
            book: zk.map(|(connect, session, connection)| {
                Arc::new(EndpointBook::new(connect.clone(), session, connection))
            }),
        }))
    }
}

/// `E`, with outbound connections inside TLS when it has a [`ClientLink`].
#[derive(Debug, Clone)]
pub struct SecureEnv<E> {
    inner: E,
    link: Option<ClientLink>,
}

impl<E: Env> SecureEnv<E> {
    /// `inner`, its connections inside `link`'s TLS (plain without one).
    pub fn new(inner: E, link: Option<ClientLink>) -> Self {
        SecureEnv { inner, link }
    }

    /// Connects to `host:port`, through `connect`, inside TLS when configured.
    async fn connect_with<F>(
        &self,
        host: &str,
        port: u16,
        connect: impl FnOnce(String, u16) -> F,
    ) -> io::Result<Link<E::Stream>>
    where
        F: std::future::Future<Output = io::Result<E::Stream>>,
    {
        let Some(link) = &self.link else {
            return Ok(Link::Plain(connect(host.to_string(), port).await?));
        };
        let (host, port) = match &link.book {
            Some(book) => book.ssl_endpoint(&self.inner, host, port).await,
            None => (host.to_string(), port),
        };
        let stream = connect(host.clone(), port).await?;
        link.tls.connect(stream, &host, port).await
    }
}

/// A listener of [`SecureEnv`]: components that listen (the metrics endpoint) listen in
/// plaintext; the broker's SSL listener is its own.
#[derive(Debug)]
pub struct PlainListener<L>(L);

impl<L: Listener> Listener for PlainListener<L> {
    type Stream = Link<L::Stream>;

    async fn accept(&mut self) -> io::Result<(Self::Stream, SocketAddr)> {
        let (stream, peer) = self.0.accept().await?;
        Ok((Link::Plain(stream), peer))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl<E: Env> Env for SecureEnv<E> {
    type Fs = E::Fs;
    type Listener = PlainListener<E::Listener>;
    type Stream = Link<E::Stream>;
    type Coord = E::Coord;

    fn fs(&self) -> Self::Fs {
        self.inner.fs()
    }

    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }

    fn monotonic(&self) -> std::time::Duration {
        self.inner.monotonic()
    }

    fn rng_seed(&self) -> u64 {
        self.inner.rng_seed()
    }

    fn host_address(&self) -> String {
        self.inner.host_address()
    }

    async fn bind(
        &self,
        host: &str,
        port: u16,
        send_buffer: u32,
        receive_buffer: u32,
    ) -> io::Result<Self::Listener> {
        Ok(PlainListener(
            self.inner
                .bind(host, port, send_buffer, receive_buffer)
                .await?,
        ))
    }

    async fn connect(&self, host: &str, port: u16) -> io::Result<Self::Stream> {
        let inner = &self.inner;
        self.connect_with(host, port, |h, p| async move { inner.connect(&h, p).await })
            .await
    }

    async fn connect_tuned(
        &self,
        host: &str,
        port: u16,
        receive_buffer: u32,
    ) -> io::Result<Self::Stream> {
        let inner = &self.inner;
        self.connect_with(host, port, |h, p| async move {
            inner.connect_tuned(&h, p, receive_buffer).await
        })
        .await
    }

    async fn coordinate(
        &self,
        connect: &ZkConnect,
        session_timeout: Duration,
        connection_timeout: Duration,
    ) -> Result<Self::Coord, CoordError> {
        self.inner
            .coordinate(connect, session_timeout, connection_timeout)
            .await
    }

    async fn blocking<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> R {
        self.inner.blocking(work).await
    }

    async fn send_file(
        &self,
        stream: &mut Self::Stream,
        file: &<Self::Fs as LogFs>::File,
        position: u64,
        len: usize,
    ) -> io::Result<()> {
        match stream {
            Link::Plain(plain) => self.inner.send_file(plain, file, position, len).await,
            Link::Tls(tls) => send_file_copying(tls.as_mut(), file, position, len).await,
        }
    }
}
