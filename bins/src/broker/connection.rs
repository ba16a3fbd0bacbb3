//! One client connection: read a frame, serve it, write the response, repeat.
//!
//! Every wait has a deadline (idle, partial request, response write), so a stalled or dead
//! peer never holds a task forever; frames are refused from their size prefix alone when too
//! large; bytes held for requests and responses come from a broker-wide budget.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tributary_core::log::Served;
use tributary_core::wire::{
    split_frame, FrameStatus, Request, ResponseChunk, TopicName, MULTIFETCH_BLOCK_HEADER_BYTES,
};

use super::access::Access;
use super::budget::{Budget, BudgetShare};
use super::handler::{Effects, FileOf, Handler};
use super::limits::{
    IDLE_TIMEOUT, REQUEST_READ_TIMEOUT, RESPONSE_BYTES_MAX, RESPONSE_WRITE_TIMEOUT,
};
use super::reply::Reply;
use crate::env::Env;
use crate::pending::PendingSender;
use crate::tls::link::Link;

/// What every connection shares.
#[derive(Debug)]
pub struct Shared<E: Env> {
    /// Serves requests.
    pub handler: Handler<E>,
    /// `max.socket.request.bytes`.
    pub request_bytes_max: usize,
    /// `socket.receive.buffer`: the most read from the socket at once.
    pub read_chunk_bytes: usize,
    /// Budget of in-flight bytes.
    pub budget: Budget,
    /// Topics created here, for registration in ZooKeeper (`None` without ZooKeeper).
    pub new_topics: Option<PendingSender<TopicName, ()>>,
}

/// The most bytes a response to `request` can hold.
fn response_bytes_bound(request: &Request) -> usize {
    let fetch = |max: i32| usize::try_from(max).unwrap_or(0);
    match request {
        Request::Fetch(f) => fetch(f.max_bytes),
        Request::MultiFetch(fs) => fs
            .iter()
            .map(|f| fetch(f.max_bytes) + MULTIFETCH_BLOCK_HEADER_BYTES)
            .sum(),
        Request::Offsets(o) => 8 * usize::try_from(o.max_offsets).unwrap_or(0).min(1 << 20),
        // Two strings of at most 64 bytes each, and their lengths.
        Request::ClusterIdentity => 2 * (2 + 64),
        // One record, at most 16 KiB.
        Request::TopicOrigins(_) => 2 + tributary_core::origin::ORIGINS_BYTES_MAX,
        // Every source the partition holds (a key of at most 2 + 64 + 2 + 255 + 8 bytes and
        // two offsets), and the translations asked for.
        Request::MirrorPositions(p) => {
            tributary_core::mirror::position::book::SOURCES_MAX * (331 + 16)
                + 8 * p.translate.len()
                + 4
        }
        // Covered by the request's own share, which it keeps (see `serve`).
        Request::Produce(_)
        | Request::MultiProduce(_)
        | Request::AckedProduce(_)
        | Request::MirrorProduce(_) => 0,
    }
    .min(RESPONSE_BYTES_MAX)
        + 64
}

/// Serves one connection until the peer leaves, breaks the protocol, stalls, or shutdown.
pub async fn serve<E: Env>(
    mut stream: Link<E::Stream>,
    peer: SocketAddr,
    access: Access,
    shared: Arc<Shared<E>>,
    shutdown: watch::Receiver<bool>,
    seed: u64,
) {
    serve_until_closed(&mut stream, peer, access, shared, shutdown, seed).await;
    if stream.is_tls() {
        // TLS's close_notify, so the peer reads a close rather than a truncated session (its
        // client then reports "closed the connection", as over plaintext).
        let _peer_gone_already = tokio::time::timeout(TLS_CLOSE_TIMEOUT, stream.shutdown()).await;
    }
}

/// How long the TLS close of a connection may take.
const TLS_CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

async fn serve_until_closed<E: Env>(
    stream: &mut Link<E::Stream>,
    peer: SocketAddr,
    access: Access,
    shared: Arc<Shared<E>>,
    mut shutdown: watch::Receiver<bool>,
    seed: u64,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        let Some((request, mut frame_permit)) =
            next_request(stream, &mut buf, &shared, &mut shutdown, peer).await
        else {
            return;
        };
        // A produce keeps its request's share (its sets are held until appended); an acked
        // produce's response (10 bytes per set) is smaller than its request (at least 11 per
        // set), so that share covers it too. Anything else gives its small request's share back
        // before waiting for its response's (never holding one share while waiting for another).
        let keeps_request_share = matches!(
            request,
            Request::Produce(_) | Request::MultiProduce(_) | Request::AckedProduce(_)
        );
        let response_permit = if !keeps_request_share {
            drop(frame_permit.take());
            match tokio::time::timeout(RESPONSE_WRITE_TIMEOUT, shared.budget.acquire(response_bytes_bound(&request))).await {
                Ok(permit) => Some(permit),
                _ => return tracing::warn!("{peer}: closing: no memory budget for the response within {RESPONSE_WRITE_TIMEOUT:?}"),
            }
        } else {
            None
        };
        let mut effects = Effects::default();
        let handled = shared
            .handler
            .handle_as(request, &mut rng, &mut effects, &access)
            .await;
        // Partitions created before a later part of the request failed exist: register them.
        if let Some(registration) = &shared.new_topics {
            for topic in effects.new_topics {
                if registration.add(topic, ()).is_err() {
                    // The registration task is gone; the broker is stopping because of it.
                    return tracing::warn!("{peer}: closing: ZooKeeper registration has stopped");
                }
            }
        }
        let response = match handled {
            Ok(response) => response,
            Err(reason) => return tracing::warn!("{peer}: closing: {reason}"),
        };
        if let Some(response) = response {
            if !write_reply(shared.handler.env(), stream, response, peer).await {
                return;
            }
        }
        drop((response_permit, frame_permit));
    }
}

/// Reads until `buf` holds a whole request and decodes it; `None` when the connection must end
/// (peer gone, deadline passed, malformed frame, shutdown while idle). The permit returned
/// covers the request's bytes in the broker-wide budget.
async fn next_request<'a, E: Env>(
    stream: &mut Link<E::Stream>,
    buf: &mut BytesMut,
    shared: &'a Shared<E>,
    shutdown: &mut watch::Receiver<bool>,
    peer: SocketAddr,
) -> Option<(Request, Option<BudgetShare<'a>>)> {
    let mut frame_permit = None;
    // When the request being read must be whole: set at its first byte (so a peer cannot hold
    // the connection and its budget by trickling bytes), and moved later by however long the
    // broker waited for room in its budget (that wait is the broker's, not the peer's).
    let mut deadline: Option<Instant> = None;
    let frame = loop {
        let total_bytes = match split_frame(buf, shared.request_bytes_max) {
            Ok(FrameStatus::Frame(frame)) => break frame,
            Ok(FrameStatus::Incomplete { total_bytes }) => total_bytes,
            Err(e) => return close(peer, format!("closing: {e}")),
        };
        if let (Some(total), None) = (total_bytes, &frame_permit) {
            // Wait (holding no other permit, so waits cannot deadlock) for room in the
            // broker-wide budget before buffering the rest of the request.
            let waiting_since = Instant::now();
            match tokio::time::timeout(REQUEST_READ_TIMEOUT, shared.budget.acquire(total)).await {
                Ok(permit) => {
                    frame_permit = Some(permit);
                    deadline = deadline.map(|d| d + waiting_since.elapsed());
                }
                _ => return close(peer, format!("closing: no memory budget for a {total}-byte request within {REQUEST_READ_TIMEOUT:?}")),
            }
            buf.reserve(total.saturating_sub(buf.len()).min(shared.read_chunk_bytes));
        }
        let idle = buf.is_empty();
        let until = if idle {
            Instant::now() + IDLE_TIMEOUT
        } else {
            *deadline.get_or_insert_with(|| Instant::now() + REQUEST_READ_TIMEOUT)
        };
        if buf.capacity() == buf.len() {
            buf.reserve(shared.read_chunk_bytes.min(4096));
        }
        tokio::select! {
            biased;
            _ = shutdown.changed(), if idle => return None,
            read = tokio::time::timeout_at(until, stream.read_buf(buf)) => match read {
                Ok(Ok(0)) => return None,
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::debug!("{peer}: read failed: {e}");
                    return None;
                }
                Err(_) if idle => {
                    tracing::debug!("{peer}: closing idle connection");
                    return None;
                }
                Err(_) => return close(peer, format!("closing: request not completed within {REQUEST_READ_TIMEOUT:?} of its first byte")),
            },
        }
    };
    match Request::decode(&frame) {
        Ok(request) => Some((request, frame_permit)),
        Err(e) => close(peer, format!("closing: malformed request: {e}")),
    }
}

/// Bytes read from a file per step of [`send_file_reading`].
const TLS_SEND_CHUNK_BYTES: usize = 256 * 1024;

/// Writes bytes `[position, position + len)` of `file` to `stream` (a TLS session), each chunk
/// read as the environment's blocking work: a read that misses the page cache must not stall
/// the runtime's threads (the plaintext path's `sendfile` is treated the same way).
async fn send_file_reading<E: Env, S: tokio::io::AsyncWrite + Unpin>(
    env: &E,
    stream: &mut S,
    file: &Arc<FileOf<E>>,
    position: u64,
    len: usize,
) -> std::io::Result<()> {
    use tributary_core::log::LogFile;
    let mut done = 0;
    while done < len {
        let want = (len - done).min(TLS_SEND_CHUNK_BYTES);
        let (file, at) = (file.clone(), position + done as u64);
        let (buf, read) = env
            .blocking(move || {
                let mut buf = vec![0u8; want];
                let read = file.read_at(&mut buf, at);
                (buf, read)
            })
            .await;
        let n = read?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the file ended {done} bytes into a {len}-byte range at {position}"),
            ));
        }
        stream.write_all(buf.get(..n).unwrap_or_default()).await?;
        done += n;
    }
    Ok(())
}

/// Logs why a connection is closed; always `None`.
fn close<T>(peer: SocketAddr, why: String) -> Option<T> {
    tracing::warn!("{peer}: {why}");
    None
}

/// Writes `reply` within the deadline; `false` when the connection must end (then nothing more
/// may be written on it: the peer would read a later answer as this one).
async fn write_reply<E: Env>(
    env: &E,
    stream: &mut Link<E::Stream>,
    reply: Reply<FileOf<E>>,
    peer: SocketAddr,
) -> bool {
    let chunks = match reply.into_chunks() {
        Ok(chunks) => chunks,
        Err(e) => {
            tracing::error!("{peer}: closing: cannot encode response: {e}");
            return false;
        }
    };
    let write = async {
        for chunk in &chunks {
            match chunk {
                ResponseChunk::Header(bytes) | ResponseChunk::Body(Served::Bytes(bytes)) => {
                    stream.write_all(bytes).await?
                }
                ResponseChunk::Body(Served::File(range)) => match stream {
                    Link::Plain(plain) => {
                        env.send_file(plain, &range.file, range.position, range.len)
                            .await?
                    }
                    // Bytes must pass through TLS: read (as blocking work, off the runtime's
                    // threads) and written, not sent by the kernel.
                    Link::Tls(tls) => {
                        send_file_reading(env, tls.as_mut(), &range.file, range.position, range.len)
                            .await?
                    }
                },
            }
        }
        stream.flush().await
    };
    match tokio::time::timeout(RESPONSE_WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::debug!("{peer}: write failed: {e}");
            false
        }
        Err(_) => {
            tracing::warn!("{peer}: closing: response not taken within {RESPONSE_WRITE_TIMEOUT:?}");
            false
        }
    }
}
