//! The metrics endpoint: HTTP/1.1 (hyper) over a listener of the [`Env`], so the same server
//! answers on tokio and in the simulator. `GET /metrics` answers the text format; `/` says where
//! the metrics are; anything else is 404 (405 for other methods than GET and HEAD). Inside TLS
//! (the SSL listener's certificate and client authentication) when the broker says
//! `metrics.ssl=true`.
//!
//! Limits: at most [`CONNECTIONS_MAX`] connections at once (more are closed at accept), request
//! headers within [`HEADER_READ_TIMEOUT`], a connection closed after [`CONNECTION_LIFETIME`]
//! (a scraper that stops reading holds a slot no longer), request bodies ignored. No `Date`
//! header (the server reads no wall clock: it runs in the simulator too). A panic while
//! answering (a bug) ends the server's task with that panic, which stops its owner loudly.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::{Metrics, CONTENT_TYPE};
use crate::env::{Env, Listener};
use crate::tls::refusals::RefusalLog;
use crate::tls::server::{handshake, ServerTls};

/// Scrapers served at once.
pub const CONNECTIONS_MAX: usize = 16;
/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection is served at most (Prometheus reconnects for the next scrape).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// The most bytes [`scrape`] reads of an answer.
pub const SCRAPE_BYTES_MAX: usize = 64 << 20;

/// A running metrics endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// Listens on `host:port` (`0.0.0.0` for every interface; port 0 picks one) and serves
    /// `metrics` until [`MetricsServer::stop`].
    /// With `tls`, every connection completes a TLS handshake first (within
    /// [`HEADER_READ_TIMEOUT`]) and the endpoint is `https://`.
    pub async fn start<E: Env>(
        env: &E,
        host: &str,
        port: u16,
        metrics: Arc<Metrics>,
        tls: Option<Arc<ServerTls>>,
    ) -> io::Result<Self> {
        let listener = env.bind(host, port, 64 * 1024, 64 * 1024).await?;
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let task = tokio::spawn(accept_loop(listener, metrics, tls, stop_rx));
        tracing::info!("metrics on {scheme}://{addr}/metrics");
        Ok(MetricsServer { addr, stop, task })
    }

    /// Resolves when the server's task ends without being stopped: only by a panic (a bug).
    /// Not to be awaited again once resolved.
    pub async fn ended(&mut self) -> Result<(), tokio::task::JoinError> {
        (&mut self.task).await
    }

    /// Stops listening and closes every connection.
    pub async fn stop(self) {
        let _stopped_already = self.stop.send(true).is_err();
        if let Err(e) = self.task.await {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
}

async fn accept_loop<L: Listener>(
    mut listener: L,
    metrics: Arc<Metrics>,
    tls: Option<Arc<ServerTls>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    let refusals = Arc::new(RefusalLog::new("metrics endpoint"));
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            Some(joined) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = joined {
                    if e.is_panic() {
                        std::panic::resume_unwind(e.into_panic());
                    }
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) if connections.len() < CONNECTIONS_MAX => {
                    let (metrics, acceptor, refusals) = (metrics.clone(), tls.as_ref().map(|t| t.acceptor()), refusals.clone());
                    connections.spawn(async move {
                        let Some(acceptor) = acceptor else {
                            return serve_connection(stream, metrics).await;
                        };
                        if let Some((link, _principal)) = handshake(acceptor, stream, peer, HEADER_READ_TIMEOUT, &refusals).await {
                            serve_connection(link, metrics).await;
                        }
                    });
                }
                Ok((_, peer)) => tracing::warn!("metrics: {peer}: refused: {CONNECTIONS_MAX} scrapers already connected"),
                Err(e) => {
                    tracing::warn!("metrics: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
    connections.abort_all();
    while let Some(joined) = connections.join_next().await {
        if let Err(e) = joined {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
}

async fn serve_connection<S>(stream: S, metrics: Arc<Metrics>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let metrics = metrics.clone();
        async move { Ok::<_, Infallible>(answer(&metrics, &request)) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .auto_date_header(false)
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(CONNECTION_LIFETIME, connection).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!("metrics: connection ended: {e}"),
        Err(_) => tracing::debug!("metrics: connection closed after {CONNECTION_LIFETIME:?}"),
    }
}

/// The answer to one request.
fn answer(metrics: &Metrics, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: Bytes| {
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
            response
                .headers_mut()
                .insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    };
    let text = "text/plain; charset=utf-8";
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            text,
            Bytes::from_static(b"only GET and HEAD\n"),
        );
    }
    match request.uri().path() {
        "/metrics" => match metrics.render() {
            Ok(body) => reply(StatusCode::OK, CONTENT_TYPE, Bytes::from(body)),
            Err(e) => {
                tracing::error!("metrics: rendering failed: {e}");
                reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    text,
                    Bytes::from(format!("rendering the metrics failed: {e}\n")),
                )
            }
        },
        "/" => reply(
            StatusCode::OK,
            text,
            Bytes::from_static(b"Tributary: metrics at /metrics (Prometheus text format)\n"),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            text,
            Bytes::from_static(b"not found: metrics are at /metrics\n"),
        ),
    }
}

/// Why a scrape failed.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The endpoint could not be reached.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// `host:port`.
        addr: String,
        /// The error.
        source: io::Error,
    },
    /// The HTTP exchange failed.
    #[error("{addr}: {source}")]
    Http {
        /// `host:port`.
        addr: String,
        /// The error.
        source: hyper::Error,
    },
    /// The endpoint answered something other than 200.
    #[error("{addr}: answered {status}")]
    Status {
        /// `host:port`.
        addr: String,
        /// The status.
        status: StatusCode,
    },
    /// The request could not be built (the address is not a valid `Host` header).
    #[error("{addr}: not a valid address for an HTTP request")]
    Request {
        /// `host:port`.
        addr: String,
    },
    /// The answer was larger than [`SCRAPE_BYTES_MAX`] or not UTF-8.
    #[error("{addr}: the answer is not a metrics text of at most {SCRAPE_BYTES_MAX} bytes")]
    Body {
        /// `host:port`.
        addr: String,
    },
}

/// Reads `http://host:port/metrics` through the environment (the simulator's checks, tests).
pub async fn scrape<E: Env>(env: &E, host: &str, port: u16) -> Result<String, ScrapeError> {
    let addr = format!("{host}:{port}");
    let stream = env
        .connect(host, port)
        .await
        .map_err(|source| ScrapeError::Connect {
            addr: addr.clone(),
            source,
        })?;
    let http = |source| ScrapeError::Http {
        addr: addr.clone(),
        source,
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http)?;
    let driver = tokio::spawn(connection);
    let request = Request::get("/metrics")
        .header(hyper::header::HOST, addr.as_str())
        .body(http_body_util::Empty::<Bytes>::new());
    let request = match request {
        Ok(request) => request,
        Err(_) => return Err(ScrapeError::Request { addr }),
    };
    let response = sender.send_request(request).await.map_err(http)?;
    if response.status() != StatusCode::OK {
        driver.abort();
        return Err(ScrapeError::Status {
            addr,
            status: response.status(),
        });
    }
    let body = http_body_util::Limited::new(response.into_body(), SCRAPE_BYTES_MAX)
        .collect()
        .await;
    driver.abort();
    let bytes = body
        .map_err(|_| ScrapeError::Body { addr: addr.clone() })?
        .to_bytes();
    String::from_utf8(bytes.to_vec()).map_err(|_| ScrapeError::Body { addr })
}
