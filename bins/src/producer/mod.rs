//! The 0.7 producer, with Tributary's durable acknowledgements.
//!
//! [`Producer::send`] hands over one message and returns a [`Delivery`]: a future that says
//! what became of it. Nothing is ever dropped silently: a message that cannot be queued is an
//! error to the caller at once; a message that cannot be sent (after `num.retries` retries) or
//! is refused resolves its delivery with the reason, is counted, and is logged.
//!
//! - `producer.type=sync`: `send` sends at once (one request per call) and returns a resolved
//!   delivery.
//! - `producer.type=async`: `send` queues (`queue.size` messages; when full,
//!   `queue.enqueueTimeout.ms` says: 0 fail at once, -1 wait, >0 wait that long then fail) and one
//!   sender task sends batches of `batch.size`, or what is there after `queue.time`. Batches go
//!   out one after another, so a partition's messages keep their order, retries included.
//! - `durable.acks=true`: every request is ACKED_PRODUCE and a delivery resolves only once the
//!   broker has flushed it, with its offset. Without acks, a delivery resolves when the bytes
//!   are written to the socket (all 0.7 can know).
//!
//! Brokers come from `broker.list` or ZooKeeper (see [`directory`]); connections go through
//! [`Env`], so the simulator drives the same producer.

mod delivery;
pub mod directory;
mod dispatch;
mod locate;
mod mirrored;
mod placement_records;
pub(crate) mod targets;

use crate::tls::env::{ClientLink, SecureEnv};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tributary_core::config::{Discovery, EnqueueTimeout, ProducerConfig, ProducerType};
use tributary_core::mirror::position::SourceKey;
use tributary_core::producer::BatchPolicy;
use tributary_core::wire::TopicName;

pub(crate) use self::delivery::Done;
pub use self::delivery::{Delivery, RunDelivery};
use self::directory::Directory;
use self::dispatch::Dispatcher;
use crate::coordination::CoordError;
use crate::env::Env;

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The topic.
    pub topic: TopicName,
    /// A key: messages with equal keys go to the same partition (while the partitions stay).
    pub key: Option<Bytes>,
    /// The payload.
    pub value: Bytes,
    /// For a mirror's message: which source message it is. Such messages go to one partition
    /// per source partition, in MIRROR_PRODUCE sets the broker appends at most once each.
    pub source: Option<SourceMark>,
}

impl Record {
    /// A message without a key.
    pub fn new(topic: TopicName, value: impl Into<Bytes>) -> Self {
        Record {
            topic,
            key: None,
            value: value.into(),
            source: None,
        }
    }

    /// A mirror's copy of the source message `mark` names.
    pub fn mirrored(topic: TopicName, value: impl Into<Bytes>, mark: SourceMark) -> Self {
        Record {
            source: Some(mark),
            ..Record::new(topic, value)
        }
    }
}

/// Which source message a mirror's record copies: the message of `key` that resumes at `next`
/// and whose top-level entry starts at `start` (the same offset as `next` for every message of a
/// compressed wrapper but its last: 0.7's resume rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceMark {
    /// The source partition (shared by its messages).
    pub key: Arc<SourceKey>,
    /// Where the message's top-level source entry starts.
    pub start: i64,
    /// Where the source resumes after it.
    pub next: i64,
    /// The mirror's ownership epoch of the source partition when the message was read: a new
    /// one (the partition taken over) has the producer ask the mirror cluster again where the
    /// source partition's copy is.
    pub epoch: u64,
}

/// Where a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    /// The broker it was sent to.
    pub broker_id: i32,
    /// The partition (-1 when the broker picked it, with `broker.list`).
    pub partition: i32,
    /// With durable acks: the offset of the message set it was appended in, now durable (-1
    /// for a mirror's message the partition already held).
    pub offset: Option<i64>,
    /// A mirror's message the partition already held, durably: not appended again.
    pub held: bool,
}

/// Why a message was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The async queue was full and `queue.enqueueTimeout.ms` did not allow waiting (longer).
    #[error("producer queue full ({size} messages): message not queued")]
    QueueFull {
        /// `queue.size`.
        size: u32,
    },
    /// The producer was closed.
    #[error("the producer is closed")]
    Closed,
    /// No live broker to send the topic to.
    #[error("no live broker to send {0} to")]
    NoBroker(TopicName),
    /// The payload is over `max.message.size`.
    #[error("a message of {size} bytes is over max.message.size ({max})")]
    TooLarge {
        /// The message's (or its compressed set's) size.
        size: usize,
        /// The limit.
        max: u32,
    },
    /// A broker refused the message set; resending would not help.
    #[error("broker {broker_id} refused the message set ({reason})")]
    Refused {
        /// The broker.
        broker_id: i32,
        /// Why.
        reason: String,
    },
    /// The broker does not know ACKED_PRODUCE and `durable.acks.fallback=false`.
    #[error("broker {0} does not support acknowledged produce (a Kafka 0.7 broker?); set durable.acks.fallback=true to send to it without acknowledgements")]
    AcksUnsupported(i32),
    /// A mirror's message that follows a gap in its source partition's messages of the same
    /// ownership (a message before it was withdrawn, or refused as too large): sent, it would
    /// have the mirror cluster take the missing one for held. Not sent; the mirror starts the
    /// source partition again from its commit.
    #[error("{key}: source offset {found} follows a gap after {expected} in this ownership; not sent (the partition starts again from its commit)")]
    SourceGap {
        /// The source partition.
        key: String,
        /// Where the previous message sent resumed.
        expected: i64,
        /// Where this one starts.
        found: i64,
    },
    /// Every attempt failed.
    #[error("not sent after {attempts} attempts: {last}")]
    Failed {
        /// Attempts made (1 + `num.retries`).
        attempts: u32,
        /// The last failure.
        last: String,
    },
}

/// Counters of a producer's life.
#[derive(Debug, Default)]
pub struct ProducerStats {
    /// Messages accepted: queued (async mode) or handed to a send (sync mode).
    pub accepted: AtomicU64,
    /// Messages delivered (written, or acknowledged with durable acks).
    pub delivered: AtomicU64,
    /// Messages whose delivery failed (reported to the caller).
    pub failed: AtomicU64,
    /// Messages refused at the queue (reported to the caller).
    pub queue_full: AtomicU64,
    /// Requests sent.
    pub requests: AtomicU64,
    /// Failed attempts to send to a broker (refused, closed, no answer, not a Kafka answer).
    pub target_failures: AtomicU64,
    /// A mirror's messages the mirror cluster already held (acknowledged, not appended again).
    pub held: AtomicU64,
}

/// Why a producer could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// ZooKeeper could not be read.
    #[error(transparent)]
    ZooKeeper(#[from] CoordError),
    /// The TLS settings (`security.protocol=ssl`, `ssl.*`) cannot be used.
    #[error("producer TLS settings: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// One queued message and where to report its fate.
struct Queued {
    record: Record,
    done: Done,
    queued_at: tokio::time::Instant,
}

impl Queued {
    /// `record` queued now (the runtime's clock, which the sender's `queue.time` deadline is
    /// measured on), reporting its fate to `done`.
    fn new(record: Record, done: Done) -> Queued {
        Queued {
            record,
            done,
            queued_at: tokio::time::Instant::now(),
        }
    }
}

/// A producer; see the module docs.
pub struct Producer<E: Env> {
    /// Sends over `E`'s connections, inside TLS when `security.protocol=ssl`.
    dispatcher: Arc<Dispatcher<SecureEnv<E>>>,
    queue: Option<mpsc::Sender<Queued>>,
    sender: Option<JoinHandle<()>>,
    config: ProducerConfig,
    /// Sync mode: a mirror's messages are dispatched one call at a time, as the async sender
    /// does, so that a source partition's sets never overtake one another (two streams of a
    /// mirror may hand on one partition's messages, one after the other, while the first's
    /// send is still being retried).
    mirrored: tokio::sync::Mutex<()>,
}

impl<E: Env> std::fmt::Debug for Producer<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("type", &self.config.producer_type)
            .field("durable_acks", &self.config.durable_acks)
            .finish()
    }
}

impl<E: Env> Producer<E> {
    /// Starts a producer: reads the brokers (ZooKeeper or the list) and, in async mode, starts
    /// the sender task.
    pub async fn start(env: E, config: ProducerConfig) -> Result<Self, StartError> {
        let session = Duration::from_millis(config.zk.session_timeout_ms.into());
        let connection = Duration::from_millis(config.zk.connection_timeout_ms.into());
        let (directory, link) = match &config.discovery {
            // The list's addresses are used as given (SSL ports, with security.protocol=ssl).
            Discovery::BrokerList(list) => (
                Directory::fixed(list),
                ClientLink::load(config.tls.as_ref(), None)?,
            ),
            Discovery::ZooKeeper(connect) => (
                Directory::from_zookeeper(&env, connect, session, connection).await?,
                ClientLink::load(config.tls.as_ref(), Some((connect, session, connection)))?,
            ),
        };
        let env = SecureEnv::new(env, link);
        let dispatcher = Arc::new(Dispatcher::new(env, config.clone(), directory));
        let (queue, sender) = match config.producer_type {
            ProducerType::Sync => (None, None),
            ProducerType::Async => {
                let (tx, rx) = mpsc::channel(config.queue_size.max(1) as usize);
                let policy = BatchPolicy {
                    batch_size: config.batch_size.max(1) as usize,
                    queue_time_ms: config.queue_time_ms.into(),
                };
                let catch_up = if config.durable_acks {
                    ACKED_CATCH_UP_MAX
                } else {
                    0
                };
                (
                    Some(tx),
                    Some(tokio::spawn(send_batches(
                        dispatcher.clone(),
                        rx,
                        policy,
                        catch_up,
                    ))),
                )
            }
        };
        Ok(Producer {
            dispatcher,
            queue,
            sender,
            config,
            mirrored: tokio::sync::Mutex::new(()),
        })
    }

    /// Sends (sync) or queues (async) one message; see the module docs.
    pub async fn send(&self, record: Record) -> Result<Delivery, SendError> {
        let (delivery, done) = Delivery::pending();
        self.send_to(record, done).await?;
        Ok(delivery)
    }

    /// [`Producer::send`] for one message of a run handed on together: its fate goes into
    /// `run` (see [`RunDelivery`]). A message that could not be queued fails the run.
    pub async fn send_in(&self, record: Record, run: &RunDelivery) -> Result<(), SendError> {
        self.send_to(record, run.share()).await
    }

    /// Sends or queues `record` as [`Producer::send`] says, reporting its fate to `done`.
    async fn send_to(&self, record: Record, done: Done) -> Result<(), SendError> {
        let Some(queue) = &self.queue else {
            self.count_accepted(1);
            let _one_at_a_time = match record.source.is_some() {
                true => Some(self.mirrored.lock().await),
                false => None,
            };
            self.dispatcher.dispatch(vec![(record, done)]).await;
            return Ok(());
        };
        let queued = Queued::new(record, done);
        let full = |_| {
            self.dispatcher
                .stats()
                .queue_full
                .fetch_add(1, Ordering::Relaxed);
            SendError::QueueFull {
                size: self.config.queue_size,
            }
        };
        match self.config.enqueue_timeout {
            EnqueueTimeout::Immediate => queue.try_send(queued).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => full(()),
                mpsc::error::TrySendError::Closed(_) => SendError::Closed,
            })?,
            EnqueueTimeout::Block => queue.send(queued).await.map_err(|_| SendError::Closed)?,
            EnqueueTimeout::Wait(ms) => {
                match tokio::time::timeout(Duration::from_millis(ms.into()), queue.send(queued))
                    .await
                {
                    Ok(sent) => sent.map_err(|_| SendError::Closed)?,
                    Err(_) => return Err(full(())),
                }
            }
        }
        self.count_accepted(1);
        Ok(())
    }

    /// Queues one message without waiting when the async queue has room now, as
    /// [`Producer::send`] would, without building `send`'s future (the mirror hands on every
    /// message this way first). The record comes back untouched otherwise (sync mode, a full
    /// queue, a closed producer): [`Producer::send`] then waits or fails as configured.
    pub fn try_send(&self, record: Record) -> Result<Delivery, Record> {
        let Some(queue) = &self.queue else {
            return Err(record);
        };
        let (delivery, done) = Delivery::pending();
        match queue.try_send(Queued::new(record, done)) {
            Ok(()) => {
                self.count_accepted(1);
                Ok(delivery)
            }
            Err(
                mpsc::error::TrySendError::Full(back) | mpsc::error::TrySendError::Closed(back),
            ) => {
                // Its delivery goes unread: dropped with it.
                Err(back.record)
            }
        }
    }

    /// [`Producer::try_send`] for one message of a run handed on together: queued into `run`
    /// (see [`RunDelivery`]) when the queue has room now; otherwise the record comes back and
    /// the run is as it was ([`Producer::send_in`] then waits or fails).
    pub fn try_send_in(&self, record: Record, run: &RunDelivery) -> Result<(), Record> {
        let Some(queue) = &self.queue else {
            return Err(record);
        };
        // Room first: the run counts a share only for a message that is queued.
        let Ok(permit) = queue.try_reserve() else {
            return Err(record);
        };
        permit.send(Queued::new(record, run.share()));
        self.count_accepted(1);
        Ok(())
    }

    fn count_accepted(&self, messages: u64) {
        self.dispatcher
            .stats()
            .accepted
            .fetch_add(messages, Ordering::Relaxed);
    }

    /// Sends several messages in one request (sync mode) or queues them (async mode).
    pub async fn send_all(&self, records: Vec<Record>) -> Result<Vec<Delivery>, SendError> {
        if self.queue.is_some() {
            let mut deliveries = Vec::with_capacity(records.len());
            for record in records {
                deliveries.push(self.send(record).await?);
            }
            return Ok(deliveries);
        }
        let (deliveries, batch): (Vec<Delivery>, Vec<_>) = records
            .into_iter()
            .map(|record| {
                let (delivery, done) = Delivery::pending();
                (delivery, (record, done))
            })
            .unzip();
        self.count_accepted(batch.len() as u64);
        let _one_at_a_time = match batch.iter().any(|(r, _)| r.source.is_some()) {
            true => Some(self.mirrored.lock().await),
            false => None,
        };
        self.dispatcher.dispatch(batch).await;
        Ok(deliveries)
    }

    /// Locates, ahead of their first messages, the source partitions a mirror member has just
    /// come to own (per mirror topic, each with the ownership epoch its messages will carry):
    /// where their copies are in the mirror cluster and, with placement records, their
    /// records, many at once. What is located then is not asked again at the first message of
    /// that epoch. A source partition that cannot be located now is located at its first
    /// message, as without this call. Only with durable acks (a mirror with positions).
    pub async fn locate_ahead(&self, sources: BTreeMap<TopicName, BTreeMap<Arc<SourceKey>, u64>>) {
        self.dispatcher.locate_ahead(sources).await;
    }

    /// Messages waiting in the async queue.
    pub fn queued(&self) -> usize {
        self.queue
            .as_ref()
            .map_or(0, |q| q.max_capacity() - q.capacity())
    }

    /// The producer's counters.
    pub fn stats(&self) -> &ProducerStats {
        self.dispatcher.stats()
    }

    /// The producer's counters, without keeping them alive (for metrics).
    pub fn stats_weak(&self) -> std::sync::Weak<ProducerStats> {
        self.dispatcher.stats_weak()
    }

    /// Sends what is queued, then stops. Every queued message's delivery resolves.
    pub async fn close(mut self) {
        drop(self.queue.take());
        if let Some(sender) = self.sender.take() {
            if let Err(e) = sender.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
    }
}

/// With durable acks, how many messages a batch may also take from what queued up while the
/// previous batch waited for its acknowledgement (so throughput follows the flush rate rather
/// than `batch.size`; order is unchanged).
const ACKED_CATCH_UP_MAX: usize = 10_000;
/// ... and only while the batch holds less than this many payload bytes; no batch grows past
/// it (requests stay well under brokers' `max.socket.request.bytes`).
const ACKED_CATCH_UP_BYTES_MAX: usize = 8 * 1024 * 1024;

/// How long a batch waits for the rest of a compressed source wrapper it holds part of.
const WRAPPER_WAIT: Duration = Duration::from_millis(100);

/// A mirror's batch does not end inside a compressed source wrapper when the rest of it is
/// coming: a wrapper's messages before its last all resume at its start, so a set ending with
/// them covers no source offset of theirs, and a restart there would copy them again. Takes
/// more from the queue (waiting at most [`WRAPPER_WAIT`], within the batch's byte limit)
/// until every source partition's last message in the batch ends its wrapper. `Some(true)`
/// when the queue closed meanwhile; `None` when nothing was needed.
async fn complete_wrappers(
    rx: &mut mpsc::Receiver<Queued>,
    batch: &mut Vec<Queued>,
    mut bytes: usize,
) -> Option<bool> {
    let inside = |q: &Queued| {
        q.record
            .source
            .as_ref()
            .map(|m| (m.key.clone(), m.start == m.next))
    };
    // Only a message inside a compressed wrapper leaves it open: a batch with none (every
    // batch of an uncompressed source) needs no look per source partition.
    let inside_a_wrapper = |q: &Queued| q.record.source.as_ref().is_some_and(|m| m.start == m.next);
    if !batch.iter().any(inside_a_wrapper) {
        return None;
    }
    let mut open: BTreeMap<Arc<SourceKey>, bool> = BTreeMap::new();
    for (key, now_open) in batch.iter().filter_map(inside) {
        open.insert(key, now_open);
    }
    let mut unfinished = open.values().filter(|o| **o).count();
    if unfinished == 0 {
        return None;
    }
    let deadline = tokio::time::Instant::now() + WRAPPER_WAIT;
    while unfinished > 0 && bytes < ACKED_CATCH_UP_BYTES_MAX {
        let next = tokio::select! {
            biased;
            next = rx.recv() => next,
            () = tokio::time::sleep_until(deadline) => break,
        };
        let Some(next) = next else {
            return Some(true);
        };
        if let Some((key, now_open)) = inside(&next) {
            let was_open = open.insert(key, now_open).unwrap_or(false);
            unfinished = unfinished + usize::from(now_open) - usize::from(was_open);
        }
        bytes += next.record.value.len();
        batch.push(next);
    }
    Some(false)
}

/// The async sender: batches of `batch.size`, or what is there when the first message of the
/// batch has waited `queue.time`, plus up to `catch_up` more already queued; one batch at a time.
async fn send_batches<E: Env>(
    dispatcher: Arc<Dispatcher<E>>,
    mut rx: mpsc::Receiver<Queued>,
    policy: BatchPolicy,
    catch_up: usize,
) {
    while let Some(first) = rx.recv().await {
        let deadline = first.queued_at + Duration::from_millis(policy.queue_time_ms);
        let mut bytes = first.record.value.len();
        let mut batch = vec![first];
        let mut closed = false;
        // A batch also ends at ACKED_CATCH_UP_BYTES_MAX bytes: a request stays far below any
        // broker's max.socket.request.bytes, whatever batch.size says.
        while batch.len() < policy.batch_size && bytes < ACKED_CATCH_UP_BYTES_MAX {
            tokio::select! {
                biased;
                next = rx.recv() => match next {
                    Some(next) => {
                        bytes += next.record.value.len();
                        batch.push(next);
                    }
                    None => {
                        closed = true;
                        break;
                    }
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        while batch.len() < policy.batch_size + catch_up && bytes < ACKED_CATCH_UP_BYTES_MAX {
            match rx.try_recv() {
                Ok(next) => {
                    bytes += next.record.value.len();
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        if let Some(more) = complete_wrappers(&mut rx, &mut batch, bytes).await {
            closed |= more;
        }
        tracing::trace!(
            "sending a batch of {} messages; {} left in the queue",
            batch.len(),
            rx.len()
        );
        dispatcher
            .dispatch(batch.into_iter().map(|q| (q.record, q.done)).collect())
            .await;
        if closed {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]
    use super::*;
    use tributary_core::consumer::BrokerPartition;
    use tributary_core::identity::ClusterId;

    fn queued(key: &Arc<SourceKey>, start: i64, next: i64) -> Queued {
        let mark = SourceMark {
            key: key.clone(),
            start,
            next,
            epoch: 1,
        };
        Queued {
            record: Record::mirrored("t".parse().unwrap(), &b"m"[..], mark),
            done: Delivery::pending().1,
            queued_at: tokio::time::Instant::now(),
        }
    }

    fn key(partition: u32) -> Arc<SourceKey> {
        Arc::new(SourceKey {
            cluster: ClusterId::parse("east").unwrap(),
            topic: "t".parse().unwrap(),
            partition: BrokerPartition {
                broker_id: 0,
                partition,
            },
        })
    }

    #[tokio::test]
    async fn a_batch_ending_inside_a_source_wrapper_takes_the_rest_of_it() {
        let (a, b) = (key(0), key(1));
        let (tx, mut rx) = mpsc::channel(16);
        // Source partition a's wrapper at 100..160 holds three messages: two resume at 100.
        let mut batch = vec![queued(&a, 40, 100), queued(&a, 100, 100), queued(&b, 0, 10)];
        for q in [
            queued(&a, 100, 100),
            queued(&b, 10, 20),
            queued(&a, 100, 160),
            queued(&a, 160, 200),
        ] {
            tx.send(q).await.unwrap();
        }
        let closed = complete_wrappers(&mut rx, &mut batch, 0).await;
        assert_eq!(closed, Some(false));
        assert_eq!(
            batch.len(),
            6,
            "up to the wrapper's last message, no further"
        );
        assert_eq!(rx.len(), 1);
        // A batch that ends no wrapper inside is left as it is.
        let mut whole = vec![queued(&a, 160, 200)];
        assert_eq!(complete_wrappers(&mut rx, &mut whole, 0).await, None);
        assert_eq!(whole.len(), 1);
    }

    #[tokio::test]
    async fn the_rest_of_a_wrapper_is_waited_for_only_so_long() {
        let a = key(0);
        let (_tx, mut rx) = mpsc::channel(4);
        let mut batch = vec![queued(&a, 100, 100)];
        let waited =
            tokio::time::timeout(WRAPPER_WAIT * 20, complete_wrappers(&mut rx, &mut batch, 0))
                .await;
        assert_eq!(waited, Ok(Some(false)), "given up after WRAPPER_WAIT");
        assert_eq!(batch.len(), 1);
    }
}
