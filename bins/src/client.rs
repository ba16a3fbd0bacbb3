//! A plain 0.7 client connection: send requests, read their responses, with deadlines.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tributary_core::wire::{split_frame, DecodeError, EncodeError, FrameStatus, Request, Response, ResponseKind};

/// The largest response a client accepts.
pub const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Bytes read from the socket at once.
const READ_CHUNK_BYTES: usize = 1024 * 1024;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection failed.
    #[error("connection to {peer}: {source}")]
    Io {
        /// The broker.
        peer: String,
        /// The error.
        source: std::io::Error,
    },
    /// The broker did not answer in time.
    #[error("{peer} did not answer within {timeout:?}")]
    Timeout {
        /// The broker.
        peer: String,
        /// The deadline.
        timeout: Duration,
    },
    /// The broker closed the connection (0.7 does so on a request it refuses).
    #[error("{0} closed the connection (it refused the request)")]
    Closed(String),
    /// The response was not valid.
    #[error("bad response from {peer}: {source}")]
    Decode {
        /// The broker.
        peer: String,
        /// What was wrong.
        source: DecodeError,
    },
    /// The request could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// One connection to a broker.
#[derive(Debug)]
pub struct Connection<S> {
    stream: S,
    peer: String,
    buf: BytesMut,
    timeout: Duration,
}

impl Connection<tokio::net::TcpStream> {
    /// Connects to `host:port` within `timeout`.
    pub async fn connect(host: &str, port: u16, timeout: Duration) -> Result<Self, ClientError> {
        let peer = format!("{host}:{port}");
        let stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port)))
            .await
            .map_err(|_| ClientError::Timeout { peer: peer.clone(), timeout })?
            .map_err(|source| ClientError::Io { peer: peer.clone(), source })?;
        let _ = stream.set_nodelay(true);
        Ok(Connection::new(stream, peer, timeout))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Wraps an open stream to `peer`.
    pub fn new(stream: S, peer: String, timeout: Duration) -> Self {
        Connection { stream, peer, buf: BytesMut::new(), timeout }
    }

    /// Sends a request that has no response (PRODUCE, MULTIPRODUCE).
    pub async fn send(&mut self, request: &Request) -> Result<(), ClientError> {
        let bytes = request.to_bytes()?;
        let peer = self.peer.clone();
        tokio::time::timeout(self.timeout, self.stream.write_all(&bytes))
            .await
            .map_err(|_| ClientError::Timeout { peer: peer.clone(), timeout: self.timeout })?
            .map_err(|source| ClientError::Io { peer, source })
    }

    /// Sends a request and waits for its response.
    pub async fn call(&mut self, request: &Request) -> Result<Response, ClientError> {
        self.send(request).await?;
        let Some(kind) = ResponseKind::for_request(request.request_type()) else {
            return Err(ClientError::Closed(format!("{}: produce requests have no response", self.peer)));
        };
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            match split_frame(&mut self.buf, RESPONSE_BYTES_MAX) {
                Ok(FrameStatus::Frame(frame)) => {
                    return Response::decode(kind, &frame).map_err(|source| ClientError::Decode { peer: self.peer.clone(), source })
                }
                // Room for the whole response at once, so it arrives in a few large reads.
                Ok(FrameStatus::Incomplete { total_bytes }) => {
                    let want = total_bytes.unwrap_or(READ_CHUNK_BYTES).saturating_sub(self.buf.len()).max(READ_CHUNK_BYTES.min(64 * 1024));
                    self.buf.reserve(want);
                }
                Err(source) => return Err(ClientError::Decode { peer: self.peer.clone(), source }),
            }
            let read = tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await;
            match read {
                Ok(Ok(0)) => return Err(ClientError::Closed(self.peer.clone())),
                Ok(Ok(_)) => {}
                Ok(Err(source)) => return Err(ClientError::Io { peer: self.peer.clone(), source }),
                Err(_) => return Err(ClientError::Timeout { peer: self.peer.clone(), timeout: self.timeout }),
            }
        }
    }
}

/// Parses `kafka://host:port` or `host:port`.
pub fn parse_server(server: &str) -> Result<(String, u16), String> {
    let rest = server.strip_prefix("kafka://").unwrap_or(server);
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| format!("\"{server}\" is not host:port"))?;
    let port = port.parse().map_err(|_| format!("\"{server}\": port must be 1 to 65535"))?;
    Ok((host.to_string(), port))
}
