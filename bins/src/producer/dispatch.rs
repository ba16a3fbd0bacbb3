//! Sending a batch: choose each message's (broker, partition), build one message set per
//! partition, send one request per broker, and retry what failed on whatever the directory then
//! says (`num.retries` times, with a growing pause), reporting every message's outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tributary_core::config::{Discovery, ProducerConfig};
use tributary_core::message::{Message, MessageSetBuilder};
use tributary_core::producer::{choose, group_by_partition, Candidate};
use tributary_core::wire::{
    ErrorCode, OffsetsRequest, ProduceRequest, Request, Response, TopicName, READ_ONLY_REPLICA,
};

use super::directory::Directory;
use super::placement_records::PlacementRecords;
use super::pool::{Lease, Pool};
use super::targets::{how, Targets};
use super::{Delivered, ProducerStats, Record, SendError};
use crate::client::{connect, ClientError};
use crate::env::Env;

/// Pause before the first retry; doubled each time, at most [`RETRY_BACKOFF_MAX`].
const RETRY_BACKOFF: Duration = Duration::from_millis(100);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);

pub(super) use super::delivery::Done;

/// A message being sent, with where it is going this attempt.
pub(super) struct Pending {
    pub(super) record: Record,
    pub(super) done: Done,
}

/// A message's payload as a set is built from it: its value, and its CRC when a checked read
/// found it already (see [`Record::checked_crc`]).
#[derive(Clone)]
pub(super) struct Payload {
    pub(super) value: Bytes,
    checked_crc: Option<u32>,
}

impl Payload {
    pub(super) fn of(record: &Record) -> Self {
        Payload {
            value: record.value.clone(),
            checked_crc: record.checked_crc,
        }
    }

    /// The message carrying it (its CRC computed only when not known).
    fn message(&self) -> Message {
        match self.checked_crc {
            Some(crc) => Message::with_checked_crc(self.value.clone(), crc),
            None => Message::new(self.value.clone()),
        }
    }
}

/// What an attempt left: messages to retry after the pause, and messages to send again at
/// once (the rest of a mirror's set whose start the partition held already).
#[derive(Default)]
pub(super) struct Left {
    pub(super) retry: Vec<Pending>,
    pub(super) again: Vec<Pending>,
}

/// How many times in a row a batch is sent again at once for sets the partition partly held,
/// before the rest waits for an ordinary retry.
const AGAIN_ROUNDS_MAX: usize = 4;

/// What happened to one message set.
pub(super) enum SetOutcome {
    Delivered(Option<i64>),
    Retry(String),
    Fail(SendError),
}

/// Sends batches for a producer; shared by the sync path and the async sender task.
pub(super) struct Dispatcher<E: Env> {
    pub(super) env: E,
    pub(super) config: ProducerConfig,
    pub(super) directory: Directory,
    /// Connections to brokers, one per request in flight.
    pub(super) pool: Pool<E::Stream>,
    rng: Mutex<ChaCha8Rng>,
    /// Brokers that refused ACKED_PRODUCE (said once in the log, remembered).
    without_acks: Mutex<BTreeSet<i32>>,
    /// Brokers that do not know MIRROR_PRODUCE (a Tributary release before it): a mirror's
    /// messages go to them as acknowledged produces, without positions.
    pub(super) without_positions: Mutex<BTreeSet<i32>>,
    /// Where each source partition's messages go (see `mirrored::place`).
    pub(super) placed: Mutex<super::mirrored::Placements>,
    /// The mirror cluster's placement records, for a producer that sends a mirror's sets with
    /// positions and reads the cluster from ZooKeeper (a `broker.list` is the same for every
    /// member, and needs none).
    pub(super) records: Option<PlacementRecords<E>>,
    pub(super) stats: std::sync::Arc<ProducerStats>,
    /// Brokers failing now, said plainly every 30 s.
    pub(super) targets: Targets,
}

impl<E: Env> Dispatcher<E> {
    pub(super) fn new(env: E, config: ProducerConfig, directory: Directory) -> Self {
        let rng = Mutex::new(ChaCha8Rng::seed_from_u64(env.rng_seed()));
        let records = match (&config.discovery, config.durable_acks) {
            (Discovery::ZooKeeper(connect), true) => Some(PlacementRecords::new(
                connect.clone(),
                Duration::from_millis(config.zk.session_timeout_ms.into()),
                Duration::from_millis(config.zk.connection_timeout_ms.into()),
            )),
            _ => None,
        };
        Dispatcher {
            env,
            config,
            directory,
            pool: Pool::default(),
            rng,
            without_acks: Mutex::default(),
            without_positions: Mutex::default(),
            placed: Mutex::default(),
            records,
            stats: std::sync::Arc::default(),
            targets: Targets::default(),
        }
    }

    pub(super) fn stats(&self) -> &ProducerStats {
        &self.stats
    }

    pub(super) fn stats_weak(&self) -> std::sync::Weak<ProducerStats> {
        std::sync::Arc::downgrade(&self.stats)
    }

    /// Sends `batch`, resolving every message's delivery.
    pub(super) async fn dispatch(&self, batch: Vec<Pending>) {
        let mut pending = batch;
        let attempts = 1 + self.config.num_retries;
        let mut last = String::new();
        let mut backoff = RETRY_BACKOFF;
        let mut attempt = 0;
        let mut warned = false;
        loop {
            // A mirror's messages waiting for the broker their source partition is placed on
            // do not use up attempts (see `mirrored::PLACEMENT_GRACE`).
            if !self.waits_for_placement(&pending) {
                attempt += 1;
            }
            let mut left = self.attempt(pending, &mut last, attempt > 1).await;
            for _ in 0..AGAIN_ROUNDS_MAX {
                if left.again.is_empty() {
                    break;
                }
                let again = self.attempt(std::mem::take(&mut left.again), &mut last, false);
                let more = again.await;
                left.retry.extend(more.retry);
                left.again = more.again;
            }
            left.retry.append(&mut left.again);
            let retry = left.retry;
            if retry.is_empty() {
                return;
            }
            pending = retry;
            if attempt >= attempts && !self.waits_for_placement(&pending) {
                break;
            }
            // The failing broker itself is said every 30 s (`Targets`); a batch's own
            // retries after its first are for the debug log.
            if !warned {
                warned = true;
                tracing::warn!(
                    "{} messages not sent ({last}); retrying (up to {} retries)",
                    pending.len(),
                    attempts - 1
                );
            } else {
                tracing::debug!(
                    "{} messages not sent ({last}); retrying ({attempt} of {} retries)",
                    pending.len(),
                    attempts - 1
                );
            }
            self.directory.reload();
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
        }
        self.give_up(pending, attempts, &last);
    }

    /// Fails `pending` after `attempts`, the last failure being `last`. A mirror's message
    /// given up on was not stored: its source partition's later messages must not be
    /// appended past it (see `note_unsent`).
    pub(super) fn give_up(&self, pending: Vec<Pending>, attempts: u32, last: &str) {
        tracing::error!(
            "{} messages not sent after {attempts} attempts: {last}",
            pending.len()
        );
        let keep_sent_point =
            tributary_core::planted::active(tributary_core::planted::Bug::GivenUpKeepsSentPoint);
        for p in pending {
            if let Some(mark) = p.record.source.as_ref().filter(|_| !keep_sent_point) {
                self.note_unsent(mark);
            }
            self.finish(
                p.done,
                Err(SendError::Failed {
                    attempts,
                    last: last.to_string(),
                }),
            );
        }
    }

    pub(super) fn finish(&self, done: Done, outcome: Result<Delivered, SendError>) {
        let counter = if outcome.is_ok() {
            &self.stats.delivered
        } else {
            &self.stats.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        // The caller may have dropped its delivery: then nobody is waiting for the answer.
        done.resolve(outcome);
    }

    /// One attempt: every message placed and sent; returns those to retry. A retry places a
    /// message without a key on any live broker (see `Snapshot::candidates_on_retry`).
    async fn attempt(
        &self,
        pending: Vec<Pending>,
        last: &mut String,
        retry_anywhere: bool,
    ) -> Left {
        let snapshot = self.directory.snapshot();
        self.locate(&snapshot, &pending).await;
        let mut by_broker: BTreeMap<i32, Vec<(Pending, i32)>> = BTreeMap::new();
        let mut retry = Vec::new();
        // A mirror's source partition is decided once per attempt, at its first message: its
        // messages share one key (found by the key's address; the records that hold the keys
        // outlive this map), and streams interleave partitions in a batch.
        let mut decided: BTreeMap<usize, Option<Option<Candidate>>> = BTreeMap::new();
        let mut candidates: Option<(TopicName, bool, Vec<Candidate>)> = None;
        for p in pending {
            let choice = match &p.record.source {
                Some(mark) => {
                    let address = std::sync::Arc::as_ptr(&mark.key) as usize;
                    let choice = match decided.get(&address) {
                        Some(choice) => *choice,
                        None => {
                            let choice = match self.is_locating(&p) {
                                true => None,
                                false => Some(self.place(
                                    &snapshot.candidates(&p.record.topic),
                                    &snapshot.brokers,
                                    &mark.key,
                                )),
                            };
                            decided.insert(address, choice);
                            choice
                        }
                    };
                    let Some(choice) = choice else {
                        *last = format!(
                            "{}: where its copy is in the mirror cluster is not known yet (a broker, or the cluster's ZooKeeper, did not answer)",
                            p.record.topic
                        );
                        retry.push(p);
                        continue;
                    };
                    choice
                }
                None => {
                    let anywhere = retry_anywhere && p.record.key.is_none();
                    // A batch's messages mostly share a topic: its candidates are listed once
                    // per run of them (the snapshot does not change within an attempt).
                    let listed = candidates.as_ref().is_some_and(|(topic, on_retry, _)| {
                        *on_retry == anywhere && *topic == p.record.topic
                    });
                    if !listed {
                        let list = match anywhere {
                            true => snapshot.candidates_on_retry(&p.record.topic),
                            false => snapshot.candidates(&p.record.topic),
                        };
                        candidates = Some((p.record.topic.clone(), anywhere, list));
                    }
                    let list = candidates.as_ref().map_or(&[][..], |(_, _, list)| list);
                    let mut rng = crate::sync::lock(&self.rng, "the producer's partition chooser");
                    choose(list, p.record.key.as_deref(), &mut *rng)
                }
            };
            match choice {
                Some(Candidate {
                    broker_id,
                    partition,
                }) => by_broker.entry(broker_id).or_default().push((p, partition)),
                None => {
                    *last = format!("no live broker for {}", p.record.topic);
                    retry.push(p);
                }
            }
        }
        let mut again = Vec::new();
        for (broker_id, messages) in by_broker {
            let address = snapshot.brokers.get(&broker_id).cloned();
            let (marked, plain) = self.split_marked(broker_id, messages);
            if !marked.is_empty() {
                let left = self
                    .send_marked(broker_id, address.clone(), marked, last)
                    .await;
                retry.extend(left.retry);
                again.extend(left.again);
            }
            if !plain.is_empty() {
                retry.extend(self.send_to(broker_id, address, plain, last).await);
            }
        }
        Left { retry, again }
    }

    /// Sends `messages` to one broker as one request; returns those to retry.
    async fn send_to(
        &self,
        broker_id: i32,
        address: Option<(String, u16)>,
        messages: Vec<(Pending, i32)>,
        last: &mut String,
    ) -> Vec<Pending> {
        let mut slots: Vec<Option<Pending>> = Vec::with_capacity(messages.len());
        let mut partitions = Vec::with_capacity(messages.len());
        for (p, partition) in messages {
            let (size, max) = (p.record.value.len(), self.config.max_message_bytes);
            if size > max as usize
                && self.config.codec_for(&p.record.topic)
                    == tributary_core::message::CompressionCodec::None
            {
                // Too large on its own: only this message fails.
                self.finish(p.done, Err(SendError::TooLarge { size, max }));
                slots.push(None);
                partitions.push(partition);
                continue;
            }
            slots.push(Some(p));
            partitions.push(partition);
        }
        let placed =
            slots
                .iter()
                .zip(&partitions)
                .enumerate()
                .filter_map(|(i, (slot, partition))| {
                    slot.as_ref()
                        .map(|p| (i, &p.record.topic, *partition, Payload::of(&p.record)))
                });
        let grouped = group_by_partition(placed);
        let mut sets: Vec<(ProduceRequest, Vec<usize>)> = Vec::new();
        for ((topic, partition), payloads) in grouped {
            let (mut indexes, mut values): (Vec<usize>, Vec<Payload>) =
                payloads.into_iter().unzip();
            let mut built = self.build_set(&topic, &values);
            if built.is_err() {
                // Some message is too large on its own (batching never makes one too large):
                // it alone fails; its batch-mates (a mirror's, from other source partitions)
                // go on.
                let mut fits = (Vec::new(), Vec::new());
                for (i, value) in indexes.into_iter().zip(values) {
                    match self.build_set(&topic, std::slice::from_ref(&value)) {
                        Ok(_) => {
                            fits.0.push(i);
                            fits.1.push(value);
                        }
                        Err(e) => {
                            if let Some(p) = slots.get_mut(i).and_then(Option::take) {
                                self.finish(p.done, Err(e));
                            }
                        }
                    }
                }
                (indexes, values) = fits;
                if indexes.is_empty() {
                    continue;
                }
                built = self.build_set(&topic, &values);
            }
            match built {
                Ok(set) => sets.push((
                    ProduceRequest {
                        topic,
                        partition,
                        messages: set,
                    },
                    indexes,
                )),
                Err(e) => {
                    for i in indexes {
                        if let Some(p) = slots.get_mut(i).and_then(Option::take) {
                            self.finish(p.done, Err(e.clone()));
                        }
                    }
                }
            }
        }
        let outcomes = match address {
            Some((host, port)) if !sets.is_empty() => {
                self.send_sets(broker_id, &host, port, &sets).await
            }
            Some(_) => Vec::new(),
            None => sets
                .iter()
                .map(|_| SetOutcome::Retry(format!("broker {broker_id} is not registered")))
                .collect(),
        };
        let mut retry = Vec::new();
        for ((request, indexes), outcome) in sets.iter().zip(outcomes) {
            for &i in indexes {
                let Some(p) = slots.get_mut(i).and_then(Option::take) else {
                    continue;
                };
                match &outcome {
                    SetOutcome::Delivered(offset) => self.finish(
                        p.done,
                        Ok(Delivered {
                            broker_id,
                            partition: request.partition,
                            offset: *offset,
                            held: false,
                        }),
                    ),
                    SetOutcome::Fail(e) => self.finish(p.done, Err(e.clone())),
                    SetOutcome::Retry(why) => {
                        last.clone_from(why);
                        retry.push(p);
                    }
                }
            }
        }
        retry
    }

    /// One message set for `topic`, compressed as configured, every top-level message within
    /// `max.message.size`: a compressed set is split into as many wrappers as needed (each
    /// holding at most that many uncompressed bytes), so batching never makes a message too
    /// large. Only a message too large on its own fails.
    pub(super) fn build_set(
        &self,
        topic: &TopicName,
        values: &[Payload],
    ) -> Result<Bytes, SendError> {
        let max = self.config.max_message_bytes as usize;
        let codec = self.config.codec_for(topic);
        if codec == tributary_core::message::CompressionCodec::None {
            // Encoded once, into a buffer of the set's size.
            let bytes = values
                .iter()
                .map(|v| MessageSetBuilder::entry_bytes(v.value.len()))
                .sum();
            let mut set = MessageSetBuilder::with_capacity(bytes);
            for value in values {
                if value.value.len() > max {
                    return Err(SendError::TooLarge {
                        size: value.value.len(),
                        max: self.config.max_message_bytes,
                    });
                }
                set.push_message(&value.message());
            }
            return Ok(set.finish(codec));
        }
        let mut out = bytes::BytesMut::new();
        let mut chunk = MessageSetBuilder::new();
        let mut chunk_bytes = 0usize;
        for value in values {
            if codec != tributary_core::message::CompressionCodec::None
                && chunk_bytes + value.value.len() > max
                && !chunk.is_empty()
            {
                out.extend_from_slice(&chunk.build(codec));
                chunk = MessageSetBuilder::new();
                chunk_bytes = 0;
            }
            chunk.push_message(&value.message());
            chunk_bytes += value.value.len();
        }
        if !chunk.is_empty() {
            out.extend_from_slice(&chunk.build(codec));
        }
        let set = out.freeze();
        for entry in tributary_core::message::ShallowIter::new(&set, 0) {
            let size = entry.map_or(usize::MAX, |e| e.message.payload.len());
            if size > max {
                return Err(SendError::TooLarge {
                    size,
                    max: self.config.max_message_bytes,
                });
            }
        }
        Ok(set)
    }

    /// Sends the sets to a broker; one outcome per set, in order.
    async fn send_sets(
        &self,
        broker_id: i32,
        host: &str,
        port: u16,
        sets: &[(ProduceRequest, Vec<usize>)],
    ) -> Vec<SetOutcome> {
        let parts: Vec<ProduceRequest> = sets.iter().map(|(p, _)| p.clone()).collect();
        let known_without_acks = self.lock_without_acks().contains(&broker_id);
        if self.config.durable_acks && known_without_acks && !self.config.durable_acks_fallback {
            // Never send without the acknowledgement that was asked for.
            return (0..sets.len())
                .map(|_| SetOutcome::Fail(SendError::AcksUnsupported(broker_id)))
                .collect();
        }
        let acks = self.config.durable_acks && !known_without_acks;
        let mut lease = match self.checkout(broker_id, host, port).await {
            Ok(lease) => lease,
            Err(why) => return retry_all(sets.len(), why),
        };
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        if !acks {
            let request = match <[ProduceRequest; 1]>::try_from(parts) {
                Ok([one]) => Request::Produce(one),
                Err(parts) => Request::MultiProduce(parts),
            };
            return match lease.conn.send(&request).await {
                Ok(()) => {
                    lease.give_back(self.env.monotonic());
                    self.targets.answered(broker_id, &format!("{host}:{port}"));
                    sets.iter().map(|_| SetOutcome::Delivered(None)).collect()
                }
                Err(e) => {
                    self.pool.discard(broker_id);
                    self.targets
                        .failed(&self.stats, broker_id, &format!("{host}:{port}"), &e);
                    retry_all(sets.len(), format!("broker {broker_id}: {}", how(&e)))
                }
            };
        }
        match lease.conn.call(&Request::AckedProduce(parts.clone())).await {
            Ok(Response::AckedProduce(r)) if r.acks.len() == sets.len() => {
                lease.give_back(self.env.monotonic());
                self.targets.answered(broker_id, &format!("{host}:{port}"));
                r.acks
                    .iter()
                    .map(|ack| ack_outcome(broker_id, ack.error, ack.offset))
                    .collect()
            }
            Ok(other) => {
                self.pool.discard(broker_id);
                retry_all(
                    sets.len(),
                    format!("broker {broker_id} answered an acknowledged produce with {other:?}"),
                )
            }
            // Closed on a connection dialled for this request: the broker may not know the
            // request type. (A reused connection may just have been closed while idle: retry.)
            Err(ClientError::Closed(_)) if lease.fresh => {
                drop(lease);
                self.pool.discard(broker_id);
                self.after_acks_refused(broker_id, host, port, parts).await
            }
            Err(e) => {
                self.pool.discard(broker_id);
                self.targets
                    .failed(&self.stats, broker_id, &format!("{host}:{port}"), &e);
                retry_all(sets.len(), format!("broker {broker_id}: {}", how(&e)))
            }
        }
    }

    /// After a fresh connection was closed on a request of Tributary's: an OFFSETS request on
    /// a new connection tells a broker that does not know the request (it answers) from one
    /// that died (`Err`: why, for the retry; the broker's failure is counted and said).
    pub(super) async fn probe(
        &self,
        broker_id: i32,
        host: &str,
        port: u16,
        topic: &TopicName,
    ) -> Result<(), String> {
        let timeout = Duration::from_millis(self.config.socket_timeout_ms.into());
        let probe = Request::Offsets(OffsetsRequest {
            topic: topic.clone(),
            partition: 0,
            time: -1,
            max_offsets: 1,
        });
        let probed = match connect(&self.env, host, port, timeout).await {
            Ok(mut conn) => conn.call(&probe).await.map(drop),
            Err(e) => Err(e),
        };
        probed.map_err(|e| {
            self.targets
                .failed(&self.stats, broker_id, &format!("{host}:{port}"), &e);
            format!("broker {broker_id}: {}", how(&e))
        })
    }

    fn lock_without_acks(&self) -> std::sync::MutexGuard<'_, BTreeSet<i32>> {
        crate::sync::lock(&self.without_acks, "the producer's brokers without acks")
    }

    /// The broker closed the connection on ACKED_PRODUCE: either it died, or it does not know
    /// the request (a 0.7 broker closes on unknown types, having appended nothing). An OFFSETS
    /// request on a new connection tells which.
    async fn after_acks_refused(
        &self,
        broker_id: i32,
        host: &str,
        port: u16,
        parts: Vec<ProduceRequest>,
    ) -> Vec<SetOutcome> {
        let count = parts.len();
        let Some(first) = parts.first() else {
            return Vec::new();
        };
        if let Err(why) = self.probe(broker_id, host, port, &first.topic).await {
            return retry_all(count, why);
        }
        if self.lock_without_acks().insert(broker_id) {
            tracing::warn!(
                "broker {broker_id} ({host}:{port}) does not support acknowledged produce (a Kafka 0.7 broker?); {}",
                if self.config.durable_acks_fallback { "sending to it without acknowledgements (durable.acks.fallback=true)" } else { "its messages fail (durable.acks.fallback=false)" }
            );
        }
        if !self.config.durable_acks_fallback {
            return (0..count)
                .map(|_| SetOutcome::Fail(SendError::AcksUnsupported(broker_id)))
                .collect();
        }
        let sent = match self.checkout(broker_id, host, port).await {
            Ok(mut lease) => match lease.conn.send(&Request::MultiProduce(parts)).await {
                Ok(()) => {
                    lease.give_back(self.env.monotonic());
                    Ok(())
                }
                Err(e) => Err(format!("broker {broker_id}: {e}")),
            },
            Err(why) => Err(why),
        };
        match sent {
            Ok(()) => (0..count).map(|_| SetOutcome::Delivered(None)).collect(),
            Err(why) => {
                self.pool.discard(broker_id);
                retry_all(count, why)
            }
        }
    }

    /// A connection to `broker_id` for one exchange (see [`Pool`]); or, when it cannot be
    /// dialled, the failure (counted and said every 30 s) as the reason to retry.
    pub(super) async fn checkout(
        &self,
        broker_id: i32,
        host: &str,
        port: u16,
    ) -> Result<Lease<'_, E::Stream>, String> {
        let timeout = Duration::from_millis(
            self.config
                .socket_timeout_ms
                .max(self.config.connect_timeout_ms)
                .into(),
        );
        match self
            .pool
            .checkout(&self.env, broker_id, (host, port), timeout)
            .await
        {
            Ok(lease) => Ok(lease),
            Err(e) => {
                self.targets
                    .failed(&self.stats, broker_id, &format!("{host}:{port}"), &e);
                Err(format!("broker {broker_id} at {host}:{port}: {}", how(&e)))
            }
        }
    }
}

pub(super) fn retry_all(count: usize, why: String) -> Vec<SetOutcome> {
    (0..count).map(|_| SetOutcome::Retry(why.clone())).collect()
}

/// One set's outcome from its ack.
pub(super) fn ack_outcome(broker_id: i32, error: ErrorCode, offset: i64) -> SetOutcome {
    match error {
        ErrorCode::NoError => SetOutcome::Delivered(Some(offset)),
        ErrorCode::InvalidMessage => SetOutcome::Fail(SendError::Refused {
            broker_id,
            reason: "invalid message set".into(),
        }),
        // A replica topic until its cluster is promoted (during a failover, soon): said as such.
        READ_ONLY_REPLICA => SetOutcome::Retry(format!(
            "broker {broker_id} refused the set: the topic is a read-only replica on that cluster (code 100); promote that cluster (`tributary promote --zookeeper <its ZooKeeper>`) before producing to it"
        )),
        // The partition went away or cannot take writes now: another one may.
        other => SetOutcome::Retry(format!(
            "broker {broker_id} did not store the set ({})",
            other.name()
        )),
    }
}
