//! A stream of messages for the application: takes chunks from its queue, opens compressed
//! wrappers, and hands messages out one by one, moving each partition's consumed offset (0.7's
//! rule for resume offsets inside wrappers). Chunks of a partition this member no longer owns
//! (a rebalance happened) are dropped: their messages will be fetched again by the new owner
//! from the committed offset.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tributary_core::consumer::BrokerPartition;
use tributary_core::message::{DeepIter, DECOMPRESSED_BYTES_MAX_DEFAULT};
use tributary_core::wire::TopicName;

use super::state::{Chunk, PartitionState};
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
    /// The rebalance generation that owned the partition when it was handed out (for commits).
    pub generation: u64,
    /// The payload.
    pub payload: Bytes,
}

/// A message of the current chunk (resume offset and payload), or why it could not be read.
type Pending = (Arc<PartitionState>, Result<(i64, Bytes), ConsumerError>);

/// One of the streams a consumer was created with.
#[derive(Debug)]
pub struct MessageStream {
    rx: mpsc::Receiver<Chunk>,
    /// Messages of the chunk being handed out.
    current: VecDeque<Pending>,
    timeout: Option<Duration>,
}

impl MessageStream {
    pub(super) fn new(rx: mpsc::Receiver<Chunk>, timeout: Option<Duration>) -> Self {
        MessageStream { rx, current: VecDeque::new(), timeout }
    }

    /// The next message. `Err(Timeout)` after `consumer.timeout.ms` without one (the stream
    /// stays usable); `Err(Closed)` once the consumer shut down; other errors name the topic,
    /// partition and offset that could not be read (the stream goes on with other data after).
    pub async fn next(&mut self) -> Result<ConsumedMessage, ConsumerError> {
        loop {
            if let Some((partition, item)) = self.current.pop_front() {
                if !partition.is_owned() {
                    // Taken away by a rebalance: the new owner reads it from the committed offset.
                    self.current.clear();
                    continue;
                }
                let (offset, payload) = item?;
                partition.offsets().handed_out(offset);
                return Ok(ConsumedMessage { topic: partition.topic.clone(), partition: partition.partition, offset, generation: partition.generation, payload });
            }
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
                Some(Chunk::Messages { partition, start, bytes }) => self.open(partition, start, bytes),
            }
        }
    }

    /// Deep-iterates a chunk into the queue of messages to hand out.
    fn open(&mut self, partition: Arc<PartitionState>, start: i64, bytes: Bytes) {
        for entry in DeepIter::new(bytes, start, DECOMPRESSED_BYTES_MAX_DEFAULT) {
            let item = entry.map(|e| (e.next_offset, e.message.payload)).map_err(|e| ConsumerError::Corrupt {
                topic: partition.topic.clone(),
                partition: partition.partition,
                detail: e.to_string(),
            });
            let stop = item.is_err();
            self.current.push_back((partition.clone(), item));
            if stop {
                // Nothing after a corrupt message of this chunk is trusted; the error says where.
                break;
            }
        }
    }
}
