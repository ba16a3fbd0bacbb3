//! A plain 0.7 client connection: send requests, read their responses, with deadlines.
//!
//! 0.7 has no correlation ids: a response is matched to its request only by its place on the
//! connection. So a connection on which anything went wrong mid-call (a timeout, an I/O error, a
//! response that did not decode) is **poisoned**: a late answer may still be on its way, and it
//! would be read as the answer to the next request. A poisoned connection refuses every further
//! call; the caller drops it and connects again.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tributary_core::wire::{
    split_frame, DecodeError, EncodeError, FrameStatus, Request, Response, ResponseKind,
};

use crate::env::Env;

/// The largest response a client accepts.
pub const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Why a connection is unusable when a call on it was abandoned part-way.
const CANCELLED: &str = "a call on it was abandoned before it finished";
/// Bytes read from the socket at once.
const READ_CHUNK_BYTES: usize = 1024 * 1024;
/// Most requests [`Connection::call_pipelined`] sends at once: 128 OFFSETS answers of one
/// offset are about 3 KiB, far inside any socket buffer.
pub const PIPELINED_REQUESTS_MAX: usize = 128;

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
    #[error("bad response from {peer}: {source}{}", if source.looks_like_tls() { " (that port speaks TLS: an SSL listener; set security.protocol=ssl)" } else { "" })]
    Decode {
        /// The broker.
        peer: String,
        /// What was wrong.
        source: DecodeError,
    },
    /// The request could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// `call` was given a request that has no response in 0.7 (PRODUCE, MULTIPRODUCE); nothing
    /// was sent. Use `send` for those.
    #[error("a {0:?} request has no response: send it with `send`, not `call` (nothing was sent)")]
    NoResponse(tributary_core::wire::RequestType),
    /// `call_pipelined` was given more requests than it sends at once; nothing was sent.
    #[error("{requests} requests cannot be pipelined at once (at most {max}); nothing was sent")]
    TooManyPipelined {
        /// How many were given.
        requests: usize,
        /// The most sent at once.
        max: usize,
    },
    /// An earlier call failed mid-way on this connection; a late answer could be mistaken for
    /// the next one, so the connection is never used again.
    #[error("connection to {peer} is unusable after an earlier failure ({cause}); reconnect")]
    Poisoned {
        /// The broker.
        peer: String,
        /// The failure that poisoned it.
        cause: String,
    },
}

impl ClientError {
    /// Whether the error came from the connection (and the caller should reconnect), rather than
    /// from a request that could never be sent.
    pub fn is_connection_failure(&self) -> bool {
        !matches!(
            self,
            ClientError::Encode(_)
                | ClientError::NoResponse(_)
                | ClientError::TooManyPipelined { .. }
        )
    }
}

/// One connection to a broker. See the module docs for when it becomes unusable.
#[derive(Debug)]
pub struct Connection<S> {
    stream: S,
    peer: String,
    buf: BytesMut,
    timeout: Duration,
    /// Why the connection is unusable, once it is.
    poisoned: Option<String>,
}

/// Connects to `host:port` through `env` within `timeout`.
pub async fn connect<E: Env>(
    env: &E,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<Connection<E::Stream>, ClientError> {
    let peer = format!("{host}:{port}");
    let stream = tokio::time::timeout(timeout, env.connect(host, port))
        .await
        .map_err(|_| ClientError::Timeout {
            peer: peer.clone(),
            timeout,
        })?
        .map_err(|source| ClientError::Io {
            peer: peer.clone(),
            source,
        })?;
    Ok(Connection::new(stream, peer, timeout))
}

/// Like [`connect`], asking for a `receive_buffer`-byte socket receive buffer (fetching).
pub async fn connect_tuned<E: Env>(
    env: &E,
    host: &str,
    port: u16,
    timeout: Duration,
    receive_buffer: u32,
) -> Result<Connection<E::Stream>, ClientError> {
    let peer = format!("{host}:{port}");
    let stream = tokio::time::timeout(timeout, env.connect_tuned(host, port, receive_buffer))
        .await
        .map_err(|_| ClientError::Timeout {
            peer: peer.clone(),
            timeout,
        })?
        .map_err(|source| ClientError::Io {
            peer: peer.clone(),
            source,
        })?;
    Ok(Connection::new(stream, peer, timeout))
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Wraps an open stream to `peer`.
    pub fn new(stream: S, peer: String, timeout: Duration) -> Self {
        Connection {
            stream,
            peer,
            buf: BytesMut::new(),
            timeout,
            poisoned: None,
        }
    }

    /// The broker this connection talks to.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Whether an earlier failure made the connection unusable.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    fn check_usable(&self) -> Result<(), ClientError> {
        match &self.poisoned {
            Some(cause) => Err(ClientError::Poisoned {
                peer: self.peer.clone(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Records a connection failure: from now on every call is refused.
    fn poison<T>(&mut self, result: Result<T, ClientError>) -> Result<T, ClientError> {
        if let Err(e) = &result {
            if e.is_connection_failure() && self.poisoned.is_none() {
                self.poisoned = Some(e.to_string());
            }
        }
        result
    }

    /// Sends a request that has no response (PRODUCE, MULTIPRODUCE). Success means the bytes
    /// were written to the socket, nothing more (0.7 produce has no acknowledgement).
    pub async fn send(&mut self, request: &Request) -> Result<(), ClientError> {
        self.check_usable()?;
        let bytes = request.to_bytes()?;
        // Poisoned until the write completes: a send cancelled mid-way (its future dropped)
        // leaves a partial frame behind.
        self.poisoned = Some(CANCELLED.to_string());
        let result = self.write(&bytes).await;
        self.poisoned = None;
        self.poison(result)
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let peer = &self.peer;
        tokio::time::timeout(self.timeout, self.stream.write_all(bytes))
            .await
            .map_err(|_| ClientError::Timeout {
                peer: peer.clone(),
                timeout: self.timeout,
            })?
            .map_err(|source| ClientError::Io {
                peer: peer.clone(),
                source,
            })
    }

    /// Sends a request and waits for its response. A produce request is refused before anything
    /// is sent. Any failure after sending poisons the connection.
    pub async fn call(&mut self, request: &Request) -> Result<Response, ClientError> {
        self.check_usable()?;
        let kind = ResponseKind::for_request(request.request_type())
            .ok_or(ClientError::NoResponse(request.request_type()))?;
        let bytes = request.to_bytes()?;
        // Poisoned until the response is read: a call cancelled mid-way (its future dropped)
        // leaves its response to be read as the next call's.
        self.poisoned = Some(CANCELLED.to_string());
        let result = match self.write(&bytes).await {
            Ok(()) => self.read_response(kind).await,
            Err(e) => Err(e),
        };
        self.poisoned = None;
        self.poison(result)
    }

    /// Sends `requests` together and reads their responses, in order (0.7 brokers answer a
    /// connection's requests in the order they came). For requests with small answers
    /// (OFFSETS): every request is written before any answer is read, so the caller keeps the
    /// answers of one batch within the socket buffers — at most [`PIPELINED_REQUESTS_MAX`]
    /// requests (refused beyond it, before anything is sent). Produce requests are refused.
    /// Any failure after sending poisons the connection; the answers before it are lost with it.
    pub async fn call_pipelined(
        &mut self,
        requests: &[Request],
    ) -> Result<Vec<Response>, ClientError> {
        self.check_usable()?;
        if requests.len() > PIPELINED_REQUESTS_MAX {
            return Err(ClientError::TooManyPipelined {
                requests: requests.len(),
                max: PIPELINED_REQUESTS_MAX,
            });
        }
        let mut kinds = Vec::with_capacity(requests.len());
        let mut bytes = Vec::new();
        for request in requests {
            kinds.push(
                ResponseKind::for_request(request.request_type())
                    .ok_or(ClientError::NoResponse(request.request_type()))?,
            );
            bytes.extend_from_slice(&request.to_bytes()?);
        }
        // Poisoned until every response is read (see `call`).
        self.poisoned = Some(CANCELLED.to_string());
        let result = async {
            self.write(&bytes).await?;
            let mut responses = Vec::with_capacity(kinds.len());
            for kind in kinds {
                responses.push(self.read_response(kind).await?);
            }
            Ok(responses)
        }
        .await;
        self.poisoned = None;
        self.poison(result)
    }

    async fn read_response(&mut self, kind: ResponseKind) -> Result<Response, ClientError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            match split_frame(&mut self.buf, RESPONSE_BYTES_MAX) {
                Ok(FrameStatus::Frame(frame)) => {
                    return Response::decode(kind, &frame).map_err(|source| ClientError::Decode {
                        peer: self.peer.clone(),
                        source,
                    })
                }
                // Room for the whole response at once, so it arrives in a few large reads.
                Ok(FrameStatus::Incomplete { total_bytes }) => {
                    let want = total_bytes
                        .unwrap_or(READ_CHUNK_BYTES)
                        .saturating_sub(self.buf.len())
                        .max(READ_CHUNK_BYTES.min(64 * 1024));
                    self.buf.reserve(want);
                }
                Err(source) => {
                    return Err(ClientError::Decode {
                        peer: self.peer.clone(),
                        source,
                    })
                }
            }
            let read = tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await;
            match read {
                Ok(Ok(0)) => return Err(ClientError::Closed(self.peer.clone())),
                Ok(Ok(_)) => {}
                Ok(Err(source)) => {
                    return Err(ClientError::Io {
                        peer: self.peer.clone(),
                        source,
                    })
                }
                Err(_) => {
                    return Err(ClientError::Timeout {
                        peer: self.peer.clone(),
                        timeout: self.timeout,
                    })
                }
            }
        }
    }
}

/// Why a broker address given as `kafka://host:port` or `host:port` is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerAddressError {
    /// There is no `:` separating a host from a port.
    #[error("\"{0}\" is not host:port")]
    NotHostPort(String),
    /// What follows the last `:` is not a port number.
    #[error("\"{0}\": port must be 1 to 65535")]
    BadPort(String),
}

/// Parses `kafka://host:port` or `host:port`.
pub fn parse_server(server: &str) -> Result<(String, u16), ServerAddressError> {
    let rest = server.strip_prefix("kafka://").unwrap_or(server);
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| ServerAddressError::NotHostPort(server.to_string()))?;
    let port = port
        .parse()
        .map_err(|_| ServerAddressError::BadPort(server.to_string()))?;
    Ok((host.to_string(), port))
}

/// The latest offset (OFFSETS, time -1) of each of `partitions` on one broker, over one
/// connection: `None` for a partition the broker answered with an error. A failure of the
/// connection ends the round (the connection is not used again); its error is returned with
/// what was learnt before it.
pub async fn latest_offsets<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    partitions: &[(tributary_core::wire::TopicName, i32)],
) -> (Vec<Option<i64>>, Option<ClientError>) {
    use tributary_core::wire::{ErrorCode, OffsetsRequest};
    let mut out = Vec::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        let request = Request::Offsets(OffsetsRequest {
            topic: topic.clone(),
            partition: *partition,
            time: -1,
            max_offsets: 1,
        });
        match conn.call(&request).await {
            Ok(Response::Offsets(o)) if o.error == ErrorCode::NoError => {
                out.push(o.offsets.first().copied());
            }
            Ok(_) => out.push(None),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

/// Why a broker's cluster identity could not be learnt.
#[derive(Debug, thiserror::Error)]
pub enum IdentityQueryError {
    /// The call failed: a Kafka 0.7 broker closes the connection on CLUSTER_IDENTITY.
    #[error("{0} (a Kafka 0.7 broker does not answer Tributary's CLUSTER_IDENTITY request)")]
    Call(#[source] ClientError),
    /// The broker answered with something that is not an identity.
    #[error("the broker answered with an invalid identity: {0}")]
    Invalid(#[source] tributary_core::identity::IdentityError),
    /// The broker answered CLUSTER_IDENTITY with another response.
    #[error("the broker answered CLUSTER_IDENTITY with another response")]
    Unexpected,
}

/// The identity of the cluster `conn`'s broker belongs to (CLUSTER_IDENTITY); `Ok(None)` when the
/// broker has none (it runs without ZooKeeper).
pub async fn cluster_identity<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
) -> Result<Option<tributary_core::identity::ClusterIdentity>, IdentityQueryError> {
    use tributary_core::identity::{ClusterId, ClusterIdentity, ClusterName};
    use tributary_core::wire::{ErrorCode, Request, Response};
    match conn
        .call(&Request::ClusterIdentity)
        .await
        .map_err(IdentityQueryError::Call)?
    {
        Response::ClusterIdentity(r) if r.error != ErrorCode::NoError => Ok(None),
        Response::ClusterIdentity(r) => Ok(Some(ClusterIdentity {
            id: ClusterId::parse(&r.id).map_err(IdentityQueryError::Invalid)?,
            name: match r.name.as_str() {
                "" => None,
                name => Some(ClusterName::parse(name).map_err(IdentityQueryError::Invalid)?),
            },
        })),
        _ => Err(IdentityQueryError::Unexpected),
    }
}

/// Why a topic's origin record could not be read or written through a broker.
#[derive(Debug, thiserror::Error)]
pub enum OriginsQueryError {
    /// The call failed: a Kafka 0.7 broker closes the connection on TOPIC_ORIGINS.
    #[error("{0} (a Kafka 0.7 broker does not answer Tributary's TOPIC_ORIGINS request)")]
    Call(#[source] ClientError),
    /// The broker could not read or write the record (its log says why).
    #[error("the broker could not read or write the record in its ZooKeeper (its log says why)")]
    Refused,
    /// The broker answered with something that is not a record.
    #[error("the broker answered with an invalid record: {0}")]
    Invalid(#[source] tributary_core::origin::OriginsError),
    /// The broker answered TOPIC_ORIGINS with another response.
    #[error("the broker answered TOPIC_ORIGINS with another response")]
    Unexpected,
}

/// `topic`'s origin record in the cluster of `conn`'s broker, after merging `merge` into it
/// (`None`: only read).
pub async fn topic_origins<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    topic: &tributary_core::wire::TopicName,
    merge: Option<&tributary_core::origin::Origins>,
) -> Result<tributary_core::origin::Origins, OriginsQueryError> {
    use tributary_core::origin::Origins;
    use tributary_core::wire::{ErrorCode, Request, Response, TopicOriginsRequest};
    let request = Request::TopicOrigins(TopicOriginsRequest {
        topic: topic.clone(),
        merge: merge
            .map(|m| bytes::Bytes::from(m.encode()))
            .unwrap_or_default(),
    });
    match conn.call(&request).await.map_err(OriginsQueryError::Call)? {
        Response::TopicOrigins(r) if r.error != ErrorCode::NoError => {
            Err(OriginsQueryError::Refused)
        }
        Response::TopicOrigins(r) => Origins::decode(&r.record).map_err(OriginsQueryError::Invalid),
        _ => Err(OriginsQueryError::Unexpected),
    }
}
