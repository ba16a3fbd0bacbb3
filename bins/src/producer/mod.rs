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
//!   sender task sends batches of `batch.size`, or what is there after `queue.time`. A mirror's
//!   source partitions are spread over two lanes with a batch in flight each (see [`sender`]);
//!   one source partition's batches, and all other messages' batches, go out one after
//!   another, so a partition's messages keep their order, retries included.
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
mod pool;
mod sender;
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
use self::dispatch::{Dispatcher, Pending};
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
    /// Which messages this one keeps its order with: messages of one order (and of one
    /// source partition, with `source`) never travel in two requests at once, so they reach
    /// the brokers in the order queued, retries included. Every message with neither shares
    /// one order (0.7's: everything in order). Messages of different orders may be in flight
    /// together (the async producer has two lanes).
    pub order: Option<std::num::NonZeroU64>,
    /// The CRC32 of `value` when the caller read it already, checked, from these very bytes (a
    /// mirror's copy of a source message): the message set uses it rather than computing it
    /// again. Only this crate sets it ([`Record::with_checked_crc`]): a wrong one would have
    /// the broker refuse the set as corrupt.
    pub(crate) checked_crc: Option<u32>,
}

impl Record {
    /// A message without a key.
    pub fn new(topic: TopicName, value: impl Into<Bytes>) -> Self {
        Record {
            topic,
            key: None,
            value: value.into(),
            source: None,
            order: None,
            checked_crc: None,
        }
    }

    /// The record, kept in order with the other records of `order` only (see [`Record::order`]).
    pub fn in_order(self, order: std::num::NonZeroU64) -> Self {
        Record {
            order: Some(order),
            ..self
        }
    }

    /// The record, with `crc`, the CRC32 of its value as a checked read found it (see
    /// [`Record::checked_crc`]).
    pub(crate) fn with_checked_crc(self, crc: u32) -> Self {
        Record {
            checked_crc: Some(crc),
            ..self
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
    /// When it was queued, on [`Env::monotonic`] (the sender's `queue.time` deadline is
    /// measured on the same clock).
    queued_at: Duration,
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
                    sender::ACKED_CATCH_UP_MAX
                } else {
                    0
                };
                (
                    Some(tx),
                    Some(tokio::spawn(sender::send_batches(
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
            self.dispatcher
                .dispatch(vec![Pending { record, done }])
                .await;
            return Ok(());
        };
        let queued = self.queued_now(record, done);
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
    #[expect(
        clippy::result_large_err,
        reason = "the record comes back as it was, for the caller to send another way; boxing it would allocate at every full queue"
    )]
    pub fn try_send(&self, record: Record) -> Result<Delivery, Record> {
        let Some(queue) = &self.queue else {
            return Err(record);
        };
        let (delivery, done) = Delivery::pending();
        match queue.try_send(self.queued_now(record, done)) {
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
    #[expect(
        clippy::result_large_err,
        reason = "the record comes back as it was, for the caller to send another way; boxing it would allocate at every full queue"
    )]
    pub fn try_send_in(&self, record: Record, run: &RunDelivery) -> Result<(), Record> {
        let Some(queue) = &self.queue else {
            return Err(record);
        };
        // Room first: the run counts a share only for a message that is queued.
        let Ok(permit) = queue.try_reserve() else {
            return Err(record);
        };
        permit.send(self.queued_now(record, run.share()));
        self.count_accepted(1);
        Ok(())
    }

    /// `record` queued now, reporting its fate to `done`.
    fn queued_now(&self, record: Record, done: Done) -> Queued {
        Queued {
            record,
            done,
            queued_at: self.dispatcher.env.monotonic(),
        }
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
                (delivery, Pending { record, done })
            })
            .unzip();
        self.count_accepted(batch.len() as u64);
        let _one_at_a_time = match batch.iter().any(|p| p.record.source.is_some()) {
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
