//! A stream of messages for the application: takes chunks from its queue, opens compressed
//! wrappers, and hands messages out one by one, moving each partition's consumed offset (0.7's
//! rule for resume offsets inside wrappers). Chunks of a partition this member no longer owns
//! (a rebalance happened) are dropped: their messages will be fetched again by the new owner
//! from the committed offset.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tributary_core::consumer::BrokerPartition;
use tributary_core::message::{DeepIter, DECOMPRESSED_BYTES_MAX_DEFAULT};
use tributary_core::wire::TopicName;

use super::state::{Chunk, PartitionState, Shared};
use super::ConsumerError;

/// A message handed to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedMessage {
    /// The topic.
    pub topic: TopicName,
    /// The partition.
    pub partition: BrokerPartition,
    /// The offset to resume after this message (0.7's rule: inside a compressed wrapper, the
    /// wrapper's start, after its last message its end). Committing it never skips a message.
    pub offset: i64,
    /// Where the message's top-level entry starts (for a message inside a compressed wrapper,
    /// the wrapper's start): the source offsets `start..offset` are what handing this message
    /// on covers (none for a wrapper's messages before its last).
    pub start: i64,
    /// The ownership epoch of the partition when it was handed out: the rebalance since which
    /// this member has owned it without interruption. Commits name it; it changes only when the
    /// partition was lost (then its uncommitted messages are the next owner's to deliver).
    pub epoch: u64,
    /// The payload.
    pub payload: Bytes,
    /// The handing stream's hold on the partition (see [`Holder::now`]).
    pub holder: Holder,
}

/// The hold a stream has on the partition of a message it handed out. A caller that held a
/// message across a wait (the mirror, deciding a topic) asks [`Holder::now`] before handing it
/// on: a rebalance meanwhile may have moved the partition to another stream of this member in
/// the same epoch (which then goes on after this message, so this one would come after what
/// that stream handed on), or ended the ownership (the next owner reads the message again
/// from the committed offset).
#[derive(Debug, Clone)]
pub struct Holder {
    state: Arc<PartitionState>,
    shared: Weak<Shared>,
}

/// Where a held message's partition is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Still with the stream that handed the message out, in its epoch: hand it on.
    Held,
    /// With another stream of this member, in the same epoch: that stream goes on after the
    /// message.
    Moved,
    /// Not owned in that epoch by this member any more: its next ownership starts from the
    /// committed offset, which is not past this message.
    Gone,
    /// A rebalance is under way: ask again once it is done.
    Unsettled,
}

impl Holder {
    /// Where the partition is now (one atomic load while nothing changed).
    pub fn now(&self) -> Hold {
        if self.state.is_owned() {
            return Hold::Held;
        }
        let Some(shared) = self.shared.upgrade() else {
            return Hold::Gone;
        };
        match shared.holder_of(&self.state.topic, self.state.partition) {
            None => Hold::Unsettled,
            Some(Some(now)) if now.epoch == self.state.epoch => {
                if now.stream == self.state.stream {
                    Hold::Held
                } else {
                    Hold::Moved
                }
            }
            Some(_) => Hold::Gone,
        }
    }
}

/// Two holds are equal when they are the same hold (one stream's, of one ownership).
impl PartialEq for Holder {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

impl Eq for Holder {}

/// One of the streams a consumer was created with.
#[derive(Debug)]
pub struct MessageStream {
    rx: mpsc::Receiver<Chunk>,
    /// The chunk being handed out, opened one message at a time (a compressed wrapper is only
    /// decompressed when reached).
    current: Option<(Arc<PartitionState>, DeepIter)>,
    timeout: Option<Duration>,
    /// Messages handed out by every stream of the consumer (its metrics), added to once per
    /// chunk: streams on different threads would contend for it message by message.
    handed_out: Arc<AtomicU64>,
    /// Messages handed out from the current chunk, not yet added to `handed_out`.
    uncounted: u64,
    /// The consumer's shared state, for the holds of the messages handed out.
    shared: Weak<Shared>,
}

impl Drop for MessageStream {
    fn drop(&mut self) {
        self.count_handed_out();
    }
}

impl MessageStream {
    pub(super) fn new(
        rx: mpsc::Receiver<Chunk>,
        timeout: Option<Duration>,
        handed_out: Arc<AtomicU64>,
        shared: Weak<Shared>,
    ) -> Self {
        MessageStream {
            rx,
            current: None,
            timeout,
            handed_out,
            uncounted: 0,
            shared,
        }
    }

    /// Adds what this stream handed out since the last call to the consumer's count.
    fn count_handed_out(&mut self) {
        if self.uncounted > 0 {
            self.handed_out.fetch_add(self.uncounted, Ordering::Relaxed);
            self.uncounted = 0;
        }
    }

    /// The next message. `Err(Timeout)` after `consumer.timeout.ms` without one (the stream
    /// stays usable); `Err(Closed)` once the consumer shut down; other errors name the topic,
    /// partition and offset that could not be read (the stream goes on with other data after).
    pub async fn next(&mut self) -> Result<ConsumedMessage, ConsumerError> {
        loop {
            if let Some((partition, entries)) = &mut self.current {
                if !partition.is_owned() || partition.is_unreadable() {
                    // Taken away by a rebalance (the new owner reads it from the committed
                    // offset), or stopped at unreadable data.
                    self.current = None;
                    continue;
                }
                match entries.next() {
                    Some(Ok(entry)) => {
                        partition.offsets().handed_out(entry.next_offset);
                        self.uncounted += 1;
                        return Ok(ConsumedMessage {
                            topic: partition.topic.clone(),
                            partition: partition.partition,
                            offset: entry.next_offset,
                            start: entry.offset,
                            epoch: partition.epoch,
                            payload: entry.message.payload,
                            holder: Holder {
                                state: partition.clone(),
                                shared: self.shared.clone(),
                            },
                        });
                    }
                    Some(Err(e)) => {
                        // Nothing after a corrupt message is handed out (the rest of this chunk
                        // and whatever was fetched past it), until the next rebalance reads the
                        // partition again from its committed offset; the error says where.
                        partition.mark_unreadable();
                        let error = ConsumerError::Corrupt {
                            topic: partition.topic.clone(),
                            partition: partition.partition,
                            detail: e.to_string(),
                        };
                        self.current = None;
                        return Err(error);
                    }
                    None => self.current = None,
                }
                continue;
            }
            // The chunk is done (or there was none): count it before waiting for the next.
            self.count_handed_out();
            let chunk = match self.timeout {
                Some(limit) => match tokio::time::timeout(limit, self.rx.recv()).await {
                    Ok(chunk) => chunk,
                    Err(_) => return Err(ConsumerError::Timeout(limit)),
                },
                None => self.rx.recv().await,
            };
            match chunk {
                None => return Err(ConsumerError::Closed),
                Some(Chunk::Error(e)) => return Err(e),
                Some(Chunk::Messages { partition, .. }) if partition.is_unreadable() => {}
                Some(Chunk::Messages {
                    partition,
                    start,
                    bytes,
                }) => {
                    // The fetcher checked every top-level CRC of these very bytes (a chunk
                    // holds only what it validated); inner messages are checked here.
                    self.current = Some((
                        partition,
                        DeepIter::prechecked(bytes, start, DECOMPRESSED_BYTES_MAX_DEFAULT),
                    ));
                }
            }
        }
    }
}
