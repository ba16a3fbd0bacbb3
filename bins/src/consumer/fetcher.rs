//! `num.consumer.fetchers` fetchers per broker that hosts an owned partition, each on its own
//! connection with its own share of that broker's partitions: a MULTIFETCH per round over its
//! partitions (`fetch.size` each), whole messages queued to each partition's stream (blocking
//! when the queue holds `queuedchunks.max` chunks), positions moved by the valid bytes.
//!
//! A partition's next offset is known only once its previous answer is in, so one partition has
//! at most one fetch in flight; several fetchers per broker keep several fetches in flight to
//! it (each connection with its own TCP window), which is what a long link needs.
//!
//! Never silent: a message larger than `fetch.size`, data that cannot be read, an error code,
//! and an offset out of range under `autooffset.reset` other than smallest/largest each reach
//! the stream as an error naming topic, partition and offset, and that partition stops being
//! fetched until the next rebalance. An offset out of range that is reset is logged with the
//! byte range skipped.

use std::sync::Arc;
use std::time::Duration;

use tributary_core::config::AutoOffsetReset;
use tributary_core::message::ShallowIter;
use tributary_core::wire::{ErrorCode, FetchRequest, OffsetsRequest, Request, Response};

use super::state::{Chunk, PartitionState, Shared, Streams};
use super::ConsumerError;
use crate::client::{connect, connect_tuned, ClientError, Connection};
use crate::env::Env;

/// Why a partition's range (its first and latest offsets, asked with OFFSETS) could not be read.
#[derive(Debug, thiserror::Error)]
enum RangeError {
    /// The broker could not be reached, or the call failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The broker answered with no offset.
    #[error("no offsets")]
    NoOffsets,
    /// The broker answered with an error code.
    #[error("OFFSETS answered {}", .0.name())]
    Refused(ErrorCode),
    /// The broker answered with another response (debug-printed).
    #[error("unexpected answer {0}")]
    Unexpected(String),
}

/// How a fetcher fetches.
#[derive(Debug, Clone)]
pub struct FetchSettings {
    /// `fetch.size`.
    pub fetch_bytes: i32,
    /// `fetcher.backoff.ms`: pause after a round that returned nothing.
    pub backoff: Duration,
    /// `socket.timeout.ms`.
    pub socket_timeout: Duration,
    /// `socket.buffersize`: SO_RCVBUF asked for on fetch connections.
    pub receive_buffer: u32,
    /// `autooffset.reset`.
    pub reset: AutoOffsetReset,
    /// An offset past a partition's end stops the partition instead of being reset (a mirror
    /// with positions: the source partition went back, and its new messages would be taken
    /// for copies already held).
    pub stop_past_end: bool,
}

/// Which of a broker's fetchers this is: fetcher `index` of `of` fetches the broker's partitions
/// at positions `index`, `index + of`, ... of this generation's partitions on that broker, in
/// the (topic, partition) order of the generation, so the shares are disjoint and cover all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// This fetcher's number, below `of`.
    pub index: u32,
    /// How many fetchers the broker has (at least 1).
    pub of: u32,
}

impl Share {
    /// The only fetcher of a broker.
    pub const WHOLE: Share = Share { index: 0, of: 1 };

    /// Every share of `of` fetchers (`of` at least 1).
    pub fn all(of: u32) -> impl Iterator<Item = Share> {
        let of = of.max(1);
        (0..of).map(move |index| Share { index, of })
    }

    /// Whether the partition at `position` among the broker's partitions is this fetcher's.
    fn holds(self, position: usize) -> bool {
        debug_assert!(self.index < self.of, "share {self:?}");
        position % self.of as usize == self.index as usize
    }
}

/// Fetches this fetcher's share of this generation's partitions on `broker_id` until none are
/// left to fetch (the rebalance that ends the generation aborts it).
#[allow(clippy::too_many_arguments)]
pub async fn run<E: Env>(
    env: E,
    broker_id: i32,
    address: (String, u16),
    shared: Arc<Shared>,
    streams: Streams,
    generation: u64,
    share: Share,
    settings: FetchSettings,
) {
    let (host, port) = address;
    // The share is fixed when the fetcher starts (the generation's partitions are installed
    // before its fetchers are spawned), so no later change can make two shares overlap.
    let mine: Vec<Arc<PartitionState>> = shared
        .all()
        .into_iter()
        .filter(|p| p.partition.broker_id == broker_id && p.generation == generation)
        .enumerate()
        .filter(|(position, _)| share.holds(*position))
        .map(|(_, p)| p)
        .collect();
    let mut conn: Option<Connection<E::Stream>> = None;
    loop {
        let partitions: Vec<Arc<PartitionState>> = mine
            .iter()
            .filter(|p| p.is_owned() && !p.is_stalled())
            .cloned()
            .collect();
        if partitions.is_empty() {
            return;
        }
        if conn.is_none() {
            match connect_tuned(
                &env,
                &host,
                port,
                settings.socket_timeout,
                settings.receive_buffer,
            )
            .await
            {
                Ok(fresh) => conn = Some(fresh),
                Err(e) => {
                    tracing::warn!("fetcher for broker {broker_id}: {e}; retrying");
                    tokio::time::sleep(settings.backoff).await;
                    continue;
                }
            }
        }
        let Some(open) = conn.as_mut() else { continue };
        let fetches: Vec<FetchRequest> = partitions
            .iter()
            .map(|p| FetchRequest {
                topic: p.topic.clone(),
                partition: p.partition.partition as i32,
                offset: p.offsets().fetched(),
                max_bytes: settings.fetch_bytes,
            })
            .collect();
        let blocks = match open.call(&Request::MultiFetch(fetches.clone())).await {
            Ok(Response::MultiFetch(m)) if m.blocks.len() == fetches.len() => m.blocks,
            Ok(other) => {
                tracing::warn!(
                    "fetcher for broker {broker_id}: unexpected answer {other:?}; reconnecting"
                );
                conn = None;
                continue;
            }
            Err(e) => {
                tracing::warn!("fetcher for broker {broker_id}: {e}; reconnecting");
                conn = None;
                tokio::time::sleep(settings.backoff).await;
                continue;
            }
        };
        let mut got_data = false;
        // The blocks of one answer share one buffer, and with it one reference count, which
        // every message handed out touches twice; partitions of different streams (threads)
        // would contend for it message by message. Each gets a buffer of its own then.
        let shared_buffer = blocks
            .iter()
            .filter(|b| b.error == ErrorCode::NoError && !b.messages.is_empty())
            .count()
            > 1;
        for ((partition, request), block) in partitions.iter().zip(&fetches).zip(blocks) {
            if !partition.is_owned() {
                continue;
            }
            let queued = match block.error {
                ErrorCode::NoError => {
                    deliver(
                        &streams,
                        partition,
                        request.offset,
                        block.messages,
                        shared_buffer,
                        &settings,
                    )
                    .await
                }
                ErrorCode::OffsetOutOfRange => {
                    out_of_range(
                        &env,
                        &host,
                        port,
                        &shared,
                        &streams,
                        partition,
                        request.offset,
                        &settings,
                    )
                    .await;
                    Ok(false)
                }
                other => {
                    partition.stall();
                    let error = ConsumerError::Broker {
                        topic: partition.topic.clone(),
                        partition: partition.partition,
                        offset: request.offset,
                        code: other,
                    };
                    tracing::error!("{error}");
                    queue(&streams, partition, Chunk::Error(error))
                        .await
                        .map(|()| false)
                }
            };
            match queued {
                Ok(data) => got_data |= data,
                // The stream is gone: the consumer is shutting down.
                Err(()) => return,
            }
        }
        if !got_data {
            tokio::time::sleep(settings.backoff).await;
        }
    }
}

async fn queue(streams: &Streams, partition: &PartitionState, chunk: Chunk) -> Result<(), ()> {
    match streams.get(partition.stream) {
        Some(stream) => stream.send(chunk).await.map_err(drop),
        None => Err(()),
    }
}

/// Queues the whole messages of a fetched block (copied into a buffer of their own when
/// `shared_buffer`); `Ok(true)` when there were some.
async fn deliver(
    streams: &Streams,
    partition: &Arc<PartitionState>,
    offset: i64,
    bytes: bytes::Bytes,
    shared_buffer: bool,
    settings: &FetchSettings,
) -> Result<bool, ()> {
    let mut entries = ShallowIter::new(&bytes, offset);
    let mut first_error = None;
    for entry in entries.by_ref() {
        if let Err(e) = entry {
            first_error = Some(e);
            break;
        }
    }
    let valid = entries.end().valid_bytes;
    if valid == 0 {
        if bytes.is_empty() {
            return Ok(false);
        }
        // Not even the first message fits (or it is damaged): 0.7 raises this to the application.
        partition.stall();
        let error = match first_error {
            Some(e)
                if !matches!(
                    e,
                    tributary_core::message::MessageError::FirstMessageTooLarge { .. }
                ) =>
            {
                ConsumerError::Corrupt {
                    topic: partition.topic.clone(),
                    partition: partition.partition,
                    detail: e.to_string(),
                }
            }
            _ => ConsumerError::MessageTooLarge {
                topic: partition.topic.clone(),
                partition: partition.partition,
                offset,
                fetch_bytes: settings.fetch_bytes,
            },
        };
        tracing::error!("{error}");
        return queue(streams, partition, Chunk::Error(error))
            .await
            .map(|()| false);
    }
    partition.offsets().fetched_chunk(valid as u64);
    tracing::trace!(
        "{}/{}: {valid} bytes from offset {offset} for stream {}",
        partition.topic,
        partition.partition,
        partition.stream
    );
    if tributary_core::planted::active(tributary_core::planted::Bug::SkipChunk) && offset % 10 == 3
    {
        return Ok(true);
    }
    queue(
        streams,
        partition,
        Chunk::Messages {
            partition: partition.clone(),
            start: offset,
            bytes: if shared_buffer {
                bytes::Bytes::copy_from_slice(&bytes[..valid])
            } else {
                bytes.slice(..valid)
            },
        },
    )
    .await
    .map(|()| true)
}

/// OffsetOutOfRange: look at what the partition holds. Inside its range the data there cannot be
/// read (corrupt, or a bad offset): an error. Past its end with `stop_past_end`: an error (the
/// source went back). Otherwise `autooffset.reset` decides.
#[allow(clippy::too_many_arguments)]
async fn out_of_range<E: Env>(
    env: &E,
    host: &str,
    port: u16,
    shared: &Shared,
    streams: &Streams,
    partition: &Arc<PartitionState>,
    offset: i64,
    settings: &FetchSettings,
) {
    let range = async {
        let mut conn = connect(env, host, port, settings.socket_timeout).await?;
        let earliest = first_offset(&mut conn, partition, -2).await?;
        let latest = first_offset(&mut conn, partition, -1).await?;
        Ok::<_, RangeError>((earliest, latest))
    };
    let error = match range.await {
        Ok((earliest, latest)) if offset >= earliest && offset < latest => ConsumerError::Unreadable {
            topic: partition.topic.clone(),
            partition: partition.partition,
            offset,
            detail: format!("the partition holds {earliest}..{latest}, but no valid message starts at {offset} (corrupt data, or an offset that is not a message boundary)"),
        },
        Ok((_, latest)) if offset > latest && settings.stop_past_end => ConsumerError::SourceWentBack {
            topic: partition.topic.clone(),
            partition: partition.partition,
            offset,
            latest,
        },
        Ok((earliest, latest)) => match &settings.reset {
            AutoOffsetReset::Smallest | AutoOffsetReset::Largest => {
                let to = if matches!(settings.reset, AutoOffsetReset::Smallest) { earliest } else { latest };
                if offset < earliest && !tributary_core::planted::active(tributary_core::planted::Bug::SkipGapSilently) {
                    tracing::error!("{}/{}: offset {offset} is gone (the partition now starts at {earliest}): bytes {offset}..{earliest} were deleted before they were consumed; resuming at {to}", partition.topic, partition.partition);
                    shared.report_gap(&super::GapReport { topic: partition.topic.clone(), partition: partition.partition, from: offset, to: earliest });
                } else if offset >= earliest {
                    tracing::warn!("{}/{}: offset {offset} is past the end {latest}; resuming at {to} (autooffset.reset)", partition.topic, partition.partition);
                }
                partition.offsets().reset_to(to);
                return;
            }
            AutoOffsetReset::Raise(policy) => {
                if offset < earliest {
                    shared.report_gap(&super::GapReport { topic: partition.topic.clone(), partition: partition.partition, from: offset, to: earliest });
                }
                ConsumerError::OffsetOutOfRange { topic: partition.topic.clone(), partition: partition.partition, offset, earliest, latest, policy: policy.clone() }
            }
        },
        Err(e) => {
            tracing::warn!("{}/{}: offset {offset} out of range, and the range could not be read ({e}); retrying", partition.topic, partition.partition);
            return;
        }
    };
    partition.stall();
    tracing::error!("{error}");
    let _stream_gone = queue(streams, partition, Chunk::Error(error))
        .await
        .is_err();
}

async fn first_offset<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    partition: &PartitionState,
    time: i64,
) -> Result<i64, RangeError> {
    let request = Request::Offsets(OffsetsRequest {
        topic: partition.topic.clone(),
        partition: partition.partition.partition as i32,
        time,
        max_offsets: 1,
    });
    match conn.call(&request).await? {
        Response::Offsets(o) if o.error == ErrorCode::NoError => {
            o.offsets.first().copied().ok_or(RangeError::NoOffsets)
        }
        Response::Offsets(o) => Err(RangeError::Refused(o.error)),
        other => Err(RangeError::Unexpected(format!("{other:?}"))),
    }
}
