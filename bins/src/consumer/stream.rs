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
    /// The CRC32 of `payload`, as stored with it and checked against it when it was read.
    pub crc: u32,
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
    /// An error met by [`MessageStream::next_now`], which the next [`MessageStream::next`]
    /// returns.
    stashed: Option<ConsumerError>,
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
            stashed: None,
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
            if let Some(error) = self.stashed.take() {
                return Err(error);
            }
            if self.current.is_some() {
                match self.take_from_chunk() {
                    Some(next) => return next,
                    None => continue,
                }
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

    /// The next message of the chunk being handed out, if it has one now: never waits for a
    /// chunk. A caller takes a run of one partition's messages this way after
    /// [`MessageStream::next`] (all of one chunk: one partition, one epoch, one hold). An error
    /// met here ends the run, and the next call to `next` returns it.
    pub fn next_now(&mut self) -> Option<ConsumedMessage> {
        if self.stashed.is_some() || self.current.is_none() {
            return None;
        }
        match self.take_from_chunk()? {
            Ok(message) => Some(message),
            Err(error) => {
                self.stashed = Some(error);
                None
            }
        }
    }

    /// The next message of the current chunk; `None` once the chunk is done or dropped (its
    /// partition taken away by a rebalance, or stopped at unreadable data).
    fn take_from_chunk(&mut self) -> Option<Result<ConsumedMessage, ConsumerError>> {
        let (partition, entries) = self.current.as_mut()?;
        if !partition.is_owned() || partition.is_unreadable() {
            // Taken away by a rebalance (the new owner reads it from the committed offset), or
            // stopped at unreadable data.
            self.current = None;
            return None;
        }
        match entries.next() {
            Some(Ok(entry)) => {
                partition.offsets().handed_out(entry.next_offset);
                self.uncounted += 1;
                Some(Ok(ConsumedMessage {
                    topic: partition.topic.clone(),
                    partition: partition.partition,
                    offset: entry.next_offset,
                    start: entry.offset,
                    epoch: partition.epoch,
                    crc: entry.message.crc,
                    payload: entry.message.payload,
                    holder: Holder {
                        state: partition.clone(),
                        shared: self.shared.clone(),
                    },
                }))
            }
            Some(Err(e)) => {
                // Nothing after a corrupt message is handed out (the rest of this chunk and
                // whatever was fetched past it), until the next rebalance reads the partition
                // again from its committed offset; the error says where.
                partition.mark_unreadable();
                let error = ConsumerError::Corrupt {
                    topic: partition.topic.clone(),
                    partition: partition.partition,
                    detail: e.to_string(),
                };
                self.current = None;
                Some(Err(error))
            }
            None => {
                self.current = None;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tributary_core::consumer::PartitionOffsets;
    use tributary_core::message::{CompressionCodec, MessageSetBuilder};

    fn partition() -> Arc<PartitionState> {
        Arc::new(PartitionState::new(
            "t".parse().unwrap(),
            BrokerPartition {
                broker_id: 0,
                partition: 0,
            },
            1,
            1,
            "g_a-0".into(),
            0,
            ("b".into(), 9092),
            PartitionOffsets::starting_at(0),
        ))
    }

    fn chunk(partition: &Arc<PartitionState>, start: i64, payloads: &[&str]) -> Chunk {
        let mut set = MessageSetBuilder::new();
        for payload in payloads {
            set.push(payload.as_bytes().to_vec());
        }
        Chunk::Messages {
            partition: partition.clone(),
            start,
            bytes: set.build(CompressionCodec::None),
        }
    }

    fn payload(message: &ConsumedMessage) -> &[u8] {
        &message.payload
    }

    /// `next_now` hands out the rest of the chunk `next` started, never a queued chunk after
    /// it, and nothing once the partition was taken away.
    #[tokio::test]
    async fn next_now_takes_only_what_the_current_chunk_still_holds() {
        let (tx, rx) = mpsc::channel(4);
        let mut stream = MessageStream::new(rx, None, Arc::default(), Weak::new());
        let p = partition();
        assert!(stream.next_now().is_none(), "no chunk yet");
        tx.send(chunk(&p, 0, &["a", "b", "c"])).await.unwrap();
        let end_of_first = MessageSetBuilder::entry_bytes(1) as i64 * 3;
        tx.send(chunk(&p, end_of_first, &["d", "e"])).await.unwrap();
        let first = stream.next().await.unwrap();
        assert_eq!(payload(&first), b"a");
        let (b, c) = (stream.next_now().unwrap(), stream.next_now().unwrap());
        assert_eq!((payload(&b), payload(&c)), (&b"b"[..], &b"c"[..]));
        assert!(b.holder == first.holder && c.offset == end_of_first);
        assert!(
            stream.next_now().is_none(),
            "the next chunk is not this run's"
        );
        assert!(stream.next_now().is_none());
        let d = stream.next().await.unwrap();
        assert_eq!((payload(&d), d.start), (&b"d"[..], end_of_first));
        // Taken away by a rebalance: the rest of the chunk is dropped.
        p.release();
        assert!(stream.next_now().is_none());
    }
}
