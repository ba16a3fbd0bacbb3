//! A mirror stream's work: each message from the source handed to the producer and recorded in
//! the window of its source partition, each durable acknowledgement marked in it, and the
//! acknowledged prefix committed.
//!
//! The hot path does per message one lock of the window shared by the source's streams (when
//! forwarding), and one more per batch of acknowledgements; deliveries wait in a queue of which
//! only the oldest is awaited, not each in a task of its own; a partition's key is built once
//! per chunk. (A task and a lock per acknowledgement, and a linear search of the window, had the
//! mirror spend most of its time on bookkeeping for 100-byte messages.)

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::watch;
use tributary_core::consumer::BrokerPartition;
use tributary_core::mirror::{MirrorWindow, SourcePartition};
use tributary_core::wire::TopicName;

use super::{
    MirrorError, MirrorEvent, MirrorObserver, MirrorStats, ProducerHandle, COMMIT_TIMEOUT,
    SHUTDOWN_ACK_WAIT,
};
use crate::consumer::{
    CommitOutcome, ConsumedMessage, ConsumerConnector, ConsumerError, MessageStream,
};
use crate::producer::{Delivered, Delivery, Record, SendError};

/// What a stream task works with.
pub(super) struct StreamContext {
    pub(super) source: usize,
    pub(super) stream: usize,
    pub(super) connector: Arc<ConsumerConnector>,
    pub(super) producer: Arc<dyn ProducerHandle>,
    pub(super) stats: Arc<MirrorStats>,
    pub(super) commit_interval: Duration,
    /// Shared by every stream of this source.
    pub(super) window: Arc<SourceWindow>,
    pub(super) observer: Option<Arc<dyn MirrorObserver>>,
}

impl StreamContext {
    fn event<'a>(&self, owned: &'a Owned, offset: i64) -> MirrorEvent<'a> {
        MirrorEvent {
            source: self.source,
            topic: &owned.topic,
            partition: owned.partition,
            offset,
            generation: owned.generation,
            stream: self.stream,
        }
    }
}

/// A source partition the mirror handles: its typed name and the ownership epoch its window
/// belongs to.
#[derive(Debug, Clone)]
struct Owned {
    topic: TopicName,
    partition: BrokerPartition,
    generation: u64,
}

/// What the streams of one source share: the window of every source partition (a partition
/// moved between two streams of this member keeps its window), the epochs, and the limits.
#[derive(Debug)]
pub(super) struct SourceWindow {
    state: std::sync::Mutex<WindowState>,
    /// Woken on every acknowledgement and commit (a stream waiting for room looks again).
    changed: tokio::sync::Notify,
    /// One commit round at a time.
    committing: tokio::sync::Mutex<()>,
    /// At most this many messages unacknowledged (`queue.size` × streams); acknowledged messages
    /// are committed as soon as this many wait; reading pauses at twice this many uncommitted.
    limit: usize,
}

#[derive(Debug, Default)]
struct WindowState {
    window: MirrorWindow,
    owned: BTreeMap<SourcePartition, Owned>,
    seq: u64,
    /// Whether the last commit round succeeded: only then do acknowledgements trigger early
    /// commits (a failing ZooKeeper is retried at the interval, not at every acknowledgement).
    commits_ok: bool,
    /// Partitions stopped at a message the mirror cluster cannot take, with the epoch they were
    /// stopped in (one entry per partition). Shared by the source's streams, since a partition
    /// may move between them keeping its epoch: in that epoch nothing more of it is forwarded,
    /// acknowledged into the window or committed; the consumer starts it again from its
    /// committed offset in a new epoch.
    stopped: BTreeMap<SourcePartition, u64>,
}

impl SourceWindow {
    pub(super) fn new(limit: usize) -> Self {
        SourceWindow {
            state: std::sync::Mutex::new(WindowState {
                commits_ok: true,
                ..WindowState::default()
            }),
            changed: tokio::sync::Notify::new(),
            committing: tokio::sync::Mutex::new(()),
            limit,
        }
    }

    #[allow(clippy::panic)]
    fn lock(&self) -> std::sync::MutexGuard<'_, WindowState> {
        // Only memory work happens under this lock; a poisoned one is a bug here.
        self.state
            .lock()
            .unwrap_or_else(|_| panic!("the mirror window's lock was poisoned"))
    }

    /// Whether a stream may take another message from the source.
    fn has_room(&self) -> bool {
        self.room_in(&self.lock())
    }

    /// Whether `state` leaves room for another message (its lock held by the caller).
    fn room_in(&self, state: &WindowState) -> bool {
        state.window.in_flight() < self.limit
            && state.window.uncommitted() < self.limit.saturating_mul(2)
    }

    /// Whether enough acknowledged messages wait in `state` for an early commit.
    fn commit_due_in(&self, state: &WindowState) -> bool {
        state.commits_ok && state.window.acked_uncommitted() >= self.limit
    }
}

/// The most acknowledgements handled under one lock of the window.
const ACK_BATCH_MAX: usize = 4096;

/// What an acknowledgement is matched with: the partition (its key allocated once per
/// partition, see [`Keys`]), the window's sequence number, the ownership epoch, the resume
/// offset and the payload's bytes.
#[derive(Debug, Clone)]
struct AckMeta {
    key: Arc<SourcePartition>,
    seq: u64,
    generation: u64,
    offset: i64,
    bytes: u64,
}

impl AckMeta {
    /// Which source message a failure is about, and the failure: the source topic, partition
    /// and offset, the message's size, and the producer's reason (for a message too large, the
    /// limit that refused it).
    fn describe(&self, error: &SendError) -> String {
        format!(
            "source {}, the message ending at offset {} ({} bytes), was not stored by the mirror cluster: {error}",
            self.key, self.offset, self.bytes
        )
    }
}

/// One message's delivery, waiting in the stream's queue of deliveries.
struct PendingAck {
    meta: AckMeta,
    delivery: Delivery,
}

/// The stream's deliveries in the order it sent them. Only the oldest is awaited (one waker
/// registered, however many are in flight); once it resolves, every delivery after it that has
/// resolved too is taken without waiting. The producer resolves a batch's deliveries together
/// and in order, so a ready batch is handled at once. A delivery resolved behind an older one
/// still on its way waits for it, even of another source partition (whose commit then waits
/// too, and whose messages count as in flight meanwhile): the cost of one waker instead of one
/// per message; the window bounds what waits. At shutdown, [`Deliveries::take_resolved`]
/// takes every resolved one wherever it is, so the last commit covers it.
#[derive(Default)]
struct Deliveries {
    queue: VecDeque<PendingAck>,
}

impl Deliveries {
    fn push(&mut self, ack: PendingAck) {
        self.queue.push_back(ack);
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Every delivery that has resolved, wherever it is in the queue (the unresolved stay).
    fn take_resolved(&mut self) -> Vec<(AckMeta, Result<Delivered, SendError>)> {
        let mut resolved = Vec::new();
        self.queue
            .retain_mut(|pending| match pending.delivery.try_take() {
                Some(outcome) => {
                    resolved.push((pending.meta.clone(), outcome));
                    false
                }
                None => true,
            });
        resolved
    }

    /// Waits for the oldest delivery, then takes it and every resolved one after it (at most
    /// `ACK_BATCH_MAX`). Pending forever while empty.
    async fn ready(&mut self) -> Vec<(AckMeta, Result<Delivered, SendError>)> {
        let first = std::future::poll_fn(|cx| match self.queue.front_mut() {
            Some(front) => Pin::new(&mut front.delivery).poll(cx),
            None => Poll::Pending,
        })
        .await;
        let mut ready = Vec::new();
        if let Some(front) = self.queue.pop_front() {
            ready.push((front.meta, first));
        }
        while ready.len() < ACK_BATCH_MAX {
            let Some(front) = self.queue.front_mut() else {
                break;
            };
            let Some(outcome) = front.delivery.try_take() else {
                break;
            };
            if let Some(front) = self.queue.pop_front() {
                ready.push((front.meta, outcome));
            }
        }
        ready
    }
}

/// The key of the partition a stream handled last: messages come a chunk of one partition at a
/// time, so one entry spares allocating the key for nearly every message.
#[derive(Debug, Default)]
struct Keys {
    last: Option<Arc<SourcePartition>>,
}

impl Keys {
    fn key(
        &mut self,
        source: usize,
        topic: &TopicName,
        partition: BrokerPartition,
    ) -> Arc<SourcePartition> {
        match &self.last {
            Some(key) if key.topic == *topic && key.partition == partition => key.clone(),
            _ => {
                let key = Arc::new(SourcePartition::new(source, topic.clone(), partition));
                self.last = Some(key.clone());
                key
            }
        }
    }
}

/// One stream: messages from the source to the producer, acknowledgements into the window,
/// commits of the acknowledged prefix.
pub(super) async fn run_stream(
    context: StreamContext,
    mut stream: MessageStream,
    mut stop: watch::Receiver<bool>,
) -> Result<(), MirrorError> {
    let mut acks = Deliveries::default();
    let mut keys = Keys::default();
    let mut commit_timer = tokio::time::interval(context.commit_interval);
    commit_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Whether this stream may take another message: known after every step that changes the
    // window (each computes it under the lock it holds anyway), looked up after a wake-up.
    let mut room = context.window.has_room();
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            ready = acks.ready(), if !acks.is_empty() => {
                // Every acknowledgement ready now (a batch's come together), under one lock.
                let (commit_due, has_room) = on_acks(&context, ready)?;
                room = has_room;
                if commit_due {
                    commit(&context, Wait::No).await;
                    room = context.window.has_room();
                }
            }
            _ = commit_timer.tick() => {
                commit(&context, Wait::No).await;
                room = context.window.has_room();
            }
            () = context.window.changed.notified(), if !room => room = context.window.has_room(),
            next = stream.next(), if room => match next {
                Ok(message) => {
                    // Waiting for room in a full producer queue ends on stop: the message is
                    // then not sent and its offset stays uncommitted.
                    tokio::select! {
                        biased;
                        _ = stop.wait_for(|stopped| *stopped) => break,
                        forwarded = forward(&context, &mut acks, &mut keys, message) => room = forwarded?,
                    }
                }
                Err(ConsumerError::Timeout(_)) => {}
                Err(ConsumerError::Closed) => break,
                // Said by the consumer already; the watchdog alarms if it lasts.
                Err(e @ ConsumerError::Rebalance { .. }) => tracing::error!("mirror: {e}"),
                Err(e) => {
                    // The consumer stopped that partition (until the next rebalance, which
                    // reads it again from its committed offset); the others go on.
                    context.stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("mirror: {e}; that partition is not mirrored past this point until the data is readable (it is tried again at each rebalance)");
                }
            },
        }
    }
    // Shutdown: what is in flight gets a bounded time to be acknowledged, then the last commit.
    let drained = tokio::time::timeout(SHUTDOWN_ACK_WAIT, async {
        while !acks.is_empty() {
            on_acks(&context, acks.ready().await)?;
        }
        Ok::<_, MirrorError>(())
    })
    .await;
    match drained {
        Ok(result) => result?,
        Err(_) => {
            // What resolved behind a delivery still on its way is recorded, so that the last
            // commit covers it.
            on_acks(&context, acks.take_resolved())?;
            tracing::warn!("mirror: {} messages still unacknowledged after {SHUTDOWN_ACK_WAIT:?}; they are sent again on restart", acks.len());
        }
    }
    commit(&context, Wait::Yes).await;
    Ok(())
}

/// Hands one message to the producer (waiting while its queue is full) and records it; whether
/// the window has room for another.
async fn forward(
    context: &StreamContext,
    acks: &mut Deliveries,
    keys: &mut Keys,
    message: ConsumedMessage,
) -> Result<bool, MirrorError> {
    let key = keys.key(context.source, &message.topic, message.partition);
    let (seq, room) = {
        let mut state = context.window.lock();
        if state.stopped.get(&*key) == Some(&message.generation) {
            // Stopped in this epoch: what the stream still holds of it is not forwarded.
            return Ok(context.window.room_in(&state));
        }
        let WindowState {
            window, owned, seq, ..
        } = &mut *state;
        let known = owned.get(&*key).map(|o| o.generation);
        // A new epoch (the partition was rebalanced away and back): what was in flight in the
        // old one is no longer this member's to commit.
        if known.is_some_and(|g| g != message.generation) {
            window.lost(&key);
        }
        // Offsets went back within an epoch (the source partition shrank and the consumer
        // reset): the old window cannot be committed in the new offsets.
        if let Some(last) = window.last_sent(&key).filter(|last| message.offset < *last) {
            let dropped = window.lost(&key);
            tracing::warn!("mirror: {}/{} went back from {last} to {}; {dropped} unacknowledged messages of the old offsets are not committed", message.topic, message.partition, message.offset);
        }
        *seq += 1;
        window.sent(&key, *seq, message.offset);
        if known != Some(message.generation) {
            owned.insert(
                (*key).clone(),
                Owned {
                    topic: message.topic.clone(),
                    partition: message.partition,
                    generation: message.generation,
                },
            );
        }
        let seq = *seq;
        (seq, context.window.room_in(&state))
    };
    if let Some(observer) = &context.observer {
        let entry = Owned {
            topic: message.topic.clone(),
            partition: message.partition,
            generation: message.generation,
        };
        observer.forwarded(&context.event(&entry, message.offset), &message.payload);
    }
    let meta = AckMeta {
        key,
        seq,
        generation: message.generation,
        offset: message.offset,
        bytes: message.payload.len() as u64,
    };
    let record = Record::new(message.topic, message.payload);
    let delivery = match context.producer.send(record).await {
        Ok(delivery) => delivery,
        // Kafka 0.7's loss, planted for the simulator: the message is dropped and the mirror
        // goes on as if it had been delivered.
        Err(SendError::QueueFull { .. })
            if tributary_core::planted::active(tributary_core::planted::Bug::MirrorDropOnFull) =>
        {
            let mut state = context.window.lock();
            state.window.acked_at(&meta.key, seq, meta.offset);
            return Ok(context.window.room_in(&state));
        }
        // Too large for the mirror cluster: this partition's failure alone. It stops here (the
        // message is withdrawn from the window, so nothing past it is committed) and the
        // others go on; a restart or the next rebalance tries it again from the commit.
        Err(e @ SendError::TooLarge { .. }) => {
            {
                let mut state = context.window.lock();
                state.window.withdraw(&meta.key, seq);
                stop_in(&mut state, &meta);
            }
            stop_partition(context, &meta, &e);
            return Ok(context.window.has_room());
        }
        Err(e) => return Err(MirrorError::Send(meta.describe(&e))),
    };
    context.stats.sent.fetch_add(1, Ordering::Relaxed);
    context
        .stats
        .sent_bytes
        .fetch_add(meta.bytes, Ordering::Relaxed);
    acks.push(PendingAck { meta, delivery });
    Ok(room)
}

/// Records under the window's lock that the partition of `meta` is stopped in its epoch.
fn stop_in(state: &mut WindowState, meta: &AckMeta) {
    state.stopped.insert((*meta.key).clone(), meta.generation);
}

/// Stops the source partition of `meta` at that message (too large for the mirror cluster): the
/// consumer gives it up until the next rebalance, which starts it again from its committed
/// offset; the source's streams skip what they still hold of it in this epoch. Said as an error
/// naming the message, and counted.
fn stop_partition(context: &StreamContext, meta: &AckMeta, error: &SendError) {
    context.stats.errors.fetch_add(1, Ordering::Relaxed);
    tracing::error!(
        "mirror: {}; that source partition stops there (nothing past it is committed; the others go on): raise max.message.size of the mirror's producer and of the mirror cluster's brokers, then restart the mirror",
        meta.describe(error)
    );
    context
        .connector
        .stop_partition(&meta.key.topic, meta.key.partition);
}

/// Records acknowledgements (all under one lock of the window); a send that failed for good
/// stops the stream. Returns whether an early commit is due and whether there is room.
fn on_acks(
    context: &StreamContext,
    ready: Vec<(AckMeta, Result<Delivered, SendError>)>,
) -> Result<(bool, bool), MirrorError> {
    let (mut acked, mut acked_bytes) = (0u64, 0u64);
    let mut failure = None;
    let mut too_large = Vec::new();
    let mut events: Vec<(Owned, i64)> = Vec::new();
    let (commit_due, room) = {
        let mut state = context.window.lock();
        for (meta, outcome) in ready {
            match outcome {
                // Durable: the mirror producer never sends unacknowledged
                // (durable.acks.fallback=false).
                Ok(delivered) if delivered.offset.is_some() => {
                    acked += 1;
                    acked_bytes += meta.bytes;
                    let stopped = state.stopped.get(&*meta.key) == Some(&meta.generation);
                    let current = state
                        .owned
                        .get(&*meta.key)
                        .filter(|o| o.generation == meta.generation && !stopped);
                    if let Some(o) = current {
                        if context.observer.is_some() {
                            events.push((o.clone(), meta.offset));
                        }
                        state.window.acked_at(&meta.key, meta.seq, meta.offset);
                    }
                }
                Ok(_) => {
                    failure = Some(MirrorError::Send(format!(
                        "{}: delivered without a durable acknowledgement",
                        meta.key
                    )));
                    break;
                }
                // Too large for the mirror cluster: that partition's failure alone. Its window
                // is dropped (nothing of it is committed past its last commit; what was sent
                // after is sent again when it restarts from there) and it stops.
                Err(e @ SendError::TooLarge { .. }) => {
                    if state.stopped.get(&*meta.key) != Some(&meta.generation) {
                        state.window.lost(&meta.key);
                        stop_in(&mut state, &meta);
                        too_large.push((meta, e));
                    }
                }
                Err(e) => {
                    failure = Some(MirrorError::Send(meta.describe(&e)));
                    break;
                }
            }
        }
        (
            context.window.commit_due_in(&state),
            context.window.room_in(&state),
        )
    };
    for (meta, e) in too_large {
        stop_partition(context, &meta, &e);
    }
    context.stats.acked.fetch_add(acked, Ordering::Relaxed);
    context
        .stats
        .acked_bytes
        .fetch_add(acked_bytes, Ordering::Relaxed);
    context.window.changed.notify_waiters();
    if let Some(observer) = &context.observer {
        for (o, offset) in &events {
            observer.acknowledged(&context.event(o, *offset));
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok((commit_due, room)),
    }
}

/// Whether a commit waits for a round another stream is running (at shutdown: every stream's
/// last acknowledgements must be committed) or leaves it to that round.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wait {
    Yes,
    No,
}

/// Commits each partition up to its acknowledged prefix (one round at a time per source); a
/// partition no longer owned in its epoch (or whose offsets went back) is dropped from the
/// window. A failed or slow commit is retried at the next round.
pub(super) async fn commit(context: &StreamContext, wait: Wait) {
    let _round = match wait {
        Wait::Yes => context.window.committing.lock().await,
        Wait::No => match context.window.committing.try_lock() {
            Ok(round) => round,
            Err(_) => return,
        },
    };
    let due: Vec<(SourcePartition, i64, Owned)> = {
        let state = context.window.lock();
        state
            .window
            .commits_due()
            .into_iter()
            .filter_map(|(key, offset)| state.owned.get(&key).cloned().map(|o| (key, offset, o)))
            .collect()
    };
    let mut all_ok = true;
    for (key, offset, o) in due {
        let outcome = tokio::time::timeout(
            COMMIT_TIMEOUT,
            context
                .connector
                .commit_at(&o.topic, o.partition, offset, o.generation),
        )
        .await;
        match outcome {
            Ok(Ok(CommitOutcome::Written | CommitOutcome::NothingNew)) => {
                {
                    let mut state = context.window.lock();
                    // Only if the window is still of that epoch (a stream may have started a new one).
                    if state
                        .owned
                        .get(&key)
                        .is_some_and(|now| now.generation == o.generation)
                    {
                        state.window.committed(&key, offset);
                    }
                }
                context.stats.commits.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("mirror: committed {}/{} at {offset}", o.topic, o.partition);
                if let Some(observer) = &context.observer {
                    observer.committed(&context.event(&o, offset));
                }
            }
            Ok(Ok(outcome @ (CommitOutcome::NotOwned | CommitOutcome::Stale))) => {
                let resent = {
                    let mut state = context.window.lock();
                    if state
                        .owned
                        .get(&key)
                        .is_some_and(|now| now.generation == o.generation)
                    {
                        state.owned.remove(&key);
                        state.window.lost(&key)
                    } else {
                        0
                    }
                };
                tracing::info!("mirror: {}/{} is no longer this member's in epoch {} ({outcome:?}); its {resent} unacknowledged messages are sent again by whoever reads it next", o.topic, o.partition, o.generation);
            }
            Ok(Err(e)) => {
                all_ok = false;
                tracing::warn!(
                    "mirror: committing {}/{} at {offset}: {e}; retried at the next commit",
                    o.topic,
                    o.partition
                );
            }
            Err(_) => {
                all_ok = false;
                tracing::warn!("mirror: committing {}/{} at {offset} took over {COMMIT_TIMEOUT:?}; retried at the next commit", o.topic, o.partition);
            }
        }
    }
    context.window.lock().commits_ok = all_ok;
    context.window.changed.notify_waiters();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(
        queue: &mut Deliveries,
        seq: u64,
    ) -> tokio::sync::oneshot::Sender<Result<Delivered, SendError>> {
        let (delivery, resolve) = Delivery::pending();
        queue.push(PendingAck {
            meta: AckMeta {
                key: Arc::new(SourcePartition::new(
                    0,
                    "t".parse().expect("topic"),
                    BrokerPartition {
                        broker_id: 0,
                        partition: seq as u32,
                    },
                )),
                seq,
                generation: 1,
                offset: seq as i64 * 10,
                bytes: 1,
            },
            delivery,
        });
        resolve
    }

    fn delivered() -> Result<Delivered, SendError> {
        Ok(Delivered {
            broker_id: 0,
            partition: 0,
            offset: Some(0),
        })
    }

    fn seqs(ready: &[(AckMeta, Result<Delivered, SendError>)]) -> Vec<u64> {
        ready.iter().map(|(meta, _)| meta.seq).collect()
    }

    #[tokio::test]
    async fn the_oldest_delivery_is_awaited_and_the_resolved_ones_after_it_come_with_it() {
        let mut queue = Deliveries::default();
        let resolvers: Vec<_> = (1..=4).map(|seq| pending(&mut queue, seq)).collect();
        let mut resolvers = resolvers.into_iter();
        let (first, second, third, fourth) = (
            resolvers.next().unwrap(),
            resolvers.next().unwrap(),
            resolvers.next().unwrap(),
            resolvers.next().unwrap(),
        );
        // 2 and 4 resolve first: nothing is ready while 1 is on its way.
        second.send(delivered()).unwrap();
        fourth.send(delivered()).unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(20), queue.ready()).await;
        assert!(waited.is_err(), "ready before the oldest delivery resolved");
        assert_eq!(queue.len(), 4, "a cancelled wait took something");
        // 1 resolves: 1 and 2 come together; 3 (on its way) holds 4 back.
        first.send(delivered()).unwrap();
        assert_eq!(seqs(&queue.ready().await), vec![1, 2]);
        assert_eq!(queue.len(), 2);
        // At shutdown every resolved one is taken, wherever it is: 4, not 3.
        assert_eq!(seqs(&queue.take_resolved()), vec![4]);
        assert_eq!(queue.len(), 1);
        // A producer gone without deciding is a failed delivery, not a hang.
        drop(third);
        let last = queue.ready().await;
        assert_eq!(seqs(&last), vec![3]);
        assert!(matches!(last[0].1, Err(SendError::Closed)));
        assert!(queue.is_empty());
    }
}
