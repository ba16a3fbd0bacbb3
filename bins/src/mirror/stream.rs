//! A mirror stream's work, driving its source's `SourceMirror` (core): messages from the source
//! admitted by it, handed to the producer and recorded, each durable acknowledgement marked in
//! it; the source's commit task (`commits.rs`) commits the acknowledged prefix.
//!
//! The stream works in runs: a message from the source, and the messages of its chunk (one
//! source partition, one epoch, one hold) that follow it, taken from the source's stream under
//! the window's lock as the message is recorded (within the room the window has left, at most
//! `SourceWindow::run_max`), go through the window as one entry (one lock, one sequence
//! number, one acknowledgement) and report into one delivery, while the producer still sends
//! each message as itself. A message is never taken from the source's stream without being
//! recorded at once, or marked in the window while it waits. Deliveries wait in a queue of
//! which only the oldest is awaited; a partition's key is built once per run. (A task and a
//! lock per acknowledgement, then a window entry, a delivery and a wake-up per message, had the
//! mirror spend most of its time on bookkeeping for 100-byte messages.)

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;

use tokio::sync::{mpsc, watch};
use tributary_core::consumer::BrokerPartition;
use tributary_core::identity::ClusterId;
use tributary_core::mirror::position::SourceKey;
use tributary_core::mirror::source::{AckEffect, AckOutcome, Admission, Reset};
use tributary_core::mirror::SourcePartition;
use tributary_core::wire::TopicName;

use super::origins::{DecideAhead, OriginGate, StreamVerdicts, Verdict};
use super::window::{Admit, SourceWindow, WaitMark};
use super::{
    MirrorError, MirrorEvent, MirrorObserver, MirrorStats, ProducerHandle, SHUTDOWN_ACK_WAIT,
};
use crate::consumer::{ConsumedMessage, ConsumerConnector, ConsumerError, Hold, MessageStream};
use crate::failure::Failure;
use crate::producer::{Delivered, Delivery, Record, RunDelivery, SendError, SourceMark};

/// What a stream task works with.
pub(super) struct StreamContext {
    pub(super) source: usize,
    pub(super) stream: usize,
    pub(super) connector: Arc<ConsumerConnector>,
    pub(super) producer: Arc<dyn ProducerHandle>,
    /// Every producer of the mirror: with positions on, a source partition's messages all go
    /// through one of them (chosen from the source partition), whichever stream reads them, so
    /// that one producer sees them all in order (see `SendError::SourceGap`).
    pub(super) producers: Arc<Vec<Arc<dyn ProducerHandle>>>,
    pub(super) stats: Arc<MirrorStats>,
    /// Shared by every stream of this source and its commit task.
    pub(super) window: Arc<SourceWindow>,
    pub(super) observer: Option<Arc<dyn MirrorObserver>>,
    /// Which topics are copied, under which names (shared by the source's streams).
    pub(super) gate: Arc<OriginGate>,
    /// The source cluster's id when `mirror.preserve.partitions` is on: each message is sent
    /// with the source position it copies.
    pub(super) positions: Option<ClusterId>,
    /// Held while the stream runs: the source's commit task makes its last round once every
    /// stream of the source has let go of its sender (their last acknowledgements recorded).
    pub(super) _running: mpsc::Sender<std::convert::Infallible>,
}

impl StreamContext {
    /// The producer for `record`: the stream's own, or with positions on the one its source
    /// partition's messages all go through.
    fn producer_for(&self, record: &Record) -> &Arc<dyn ProducerHandle> {
        match &record.source {
            Some(mark) => self
                .producers
                .get(super::producer_index(&mark.key, self.producers.len()))
                .unwrap_or(&self.producer),
            None => &self.producer,
        }
    }

    /// Hands `record` to its producer as a message of `run`: queued at once when the queue
    /// has room (no future is built for it), waited for through `send_in` otherwise.
    async fn hand_over(&self, record: Record, run: &RunDelivery) -> Result<(), SendError> {
        let producer = self.producer_for(&record);
        match producer.try_send_in(record, run) {
            Ok(()) => Ok(()),
            Err(record) => producer.send_in(record, run).await,
        }
    }

    fn event<'a>(
        &self,
        topic: &'a TopicName,
        partition: BrokerPartition,
        epoch: u64,
        offset: i64,
    ) -> MirrorEvent<'a> {
        MirrorEvent {
            source: self.source,
            topic,
            partition,
            offset,
            epoch,
            stream: Some(self.stream),
        }
    }
}

/// How often a message held across a rebalance asks again where its partition is.
const HOLD_RECHECK: std::time::Duration = std::time::Duration::from_millis(20);

/// The most acknowledgements handled under one lock of the window.
const ACK_BATCH_MAX: usize = 4096;

/// The most messages handed on as one run: what one window entry and one delivery cover. A
/// run's delivery resolves once its last message is acknowledged, so a longer run holds its
/// first messages' commit a little longer. (A small window takes shorter runs: see
/// `SourceWindow::run_max`.)
pub(super) const RUN_MAX: usize = 512;

/// What an acknowledgement is matched with: the partition (its key allocated once per
/// partition, see [`Keys`]), the window's sequence number, the ownership epoch, the resume
/// offsets of the run's first and last message, its messages and their payloads' bytes.
#[derive(Debug, Clone)]
struct AckMeta {
    key: Arc<SourcePartition>,
    seq: u64,
    epoch: u64,
    first: i64,
    offset: i64,
    messages: u64,
    bytes: u64,
    /// Every message's resume offset, kept only for an observer (which hears of each).
    observed: Vec<i64>,
}

impl AckMeta {
    /// Which source messages a failure is about, and the failure: the source topic, partition
    /// and offsets, the size, and the producer's reason (for a message too large, the limit
    /// that refused it).
    fn describe(&self, error: &SendError) -> String {
        match self.messages {
            1 => format!(
                "source {}, the message ending at offset {} ({} bytes), was not stored by the mirror cluster: {error}",
                self.key, self.offset, self.bytes
            ),
            n => format!(
                "source {}, {n} messages ending at offsets {} to {} ({} bytes), were not all stored by the mirror cluster: {error}",
                self.key, self.first, self.offset, self.bytes
            ),
        }
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

/// The keys of the partition a stream handled last: messages come a chunk of one partition at
/// a time, so one entry spares allocating the keys for nearly every message.
#[derive(Debug, Default)]
struct Keys {
    /// The topic as the consumer handed it out (its partition's own allocation: compared by
    /// pointer message by message), and the keys made for it.
    last: Option<(TopicName, Arc<SourcePartition>, Option<Arc<SourceKey>>)>,
}

impl Keys {
    /// The window's key of the partition, and its key in mirror positions (with `cluster`);
    /// their topic is the one allocation `window` shares between the source's keys.
    fn key(
        &mut self,
        source: usize,
        window: &SourceWindow,
        cluster: Option<&ClusterId>,
        topic: &TopicName,
        partition: BrokerPartition,
    ) -> (Arc<SourcePartition>, Option<Arc<SourceKey>>) {
        match &self.last {
            Some((given, key, position)) if given == topic && key.partition == partition => {
                (key.clone(), position.clone())
            }
            _ => {
                let shared = window.shared_topic(topic);
                let key = Arc::new(SourcePartition::new(source, shared.clone(), partition));
                let position = cluster.map(|cluster| {
                    Arc::new(SourceKey {
                        cluster: cluster.clone(),
                        topic: shared,
                        partition,
                    })
                });
                self.last = Some((topic.clone(), key.clone(), position.clone()));
                (key, position)
            }
        }
    }
}

/// One stream: messages from the source to the producer, acknowledgements into the window
/// (the source's commit task commits the acknowledged prefix).
pub(super) async fn run_stream(
    context: StreamContext,
    mut stream: MessageStream,
    mut stop: watch::Receiver<bool>,
) -> Result<(), MirrorError> {
    let mut acks = Deliveries::default();
    let mut keys = Keys::default();
    let mut verdicts = StreamVerdicts::default();
    let mut ahead = DecideAhead::default();
    let mut changes = context.window.changes();
    // Whether this stream may take another message: known after every step that changes the
    // window (each computes it under the lock it holds anyway), looked up after a wake-up.
    let mut room = context.window.has_room();
    // One wait for the stop, registered once for the whole run (stop is only ever set, and a
    // dropped sender ends the wait too), rather than one registered and dropped per message.
    let mut stopped = std::pin::pin!(async move {
        let _set_or_gone = stop.wait_for(|stopped| *stopped).await;
    });
    loop {
        tokio::select! {
            biased;
            () = stopped.as_mut() => break,
            ready = acks.ready(), if !acks.is_empty() => {
                // Every acknowledgement ready now (a batch's come together), under one lock.
                room = on_acks(&context, ready)?;
            }
            // The window is held by this task too: its sender cannot be gone.
            Ok(()) = changes.changed(), if !room => room = context.window.has_room(),
            next = stream.next(), if room => match next {
                Ok(message) => {
                    ahead.follow(&context.gate, context.connector.settled_generation(), || {
                        context.connector.owned().into_iter().map(|(topic, _, _)| topic).collect()
                    });
                    // Waiting for room in a full producer queue ends on stop: the messages not
                    // yet handed on are then not sent, and nothing of the run is committed.
                    let mut stages = Stages { acks: &mut acks, keys: &mut keys, verdicts: &mut verdicts };
                    let taken = tokio::select! {
                        biased;
                        () = stopped.as_mut() => break,
                        forwarded = forward(&context, &mut stages, message, &mut stream) => forwarded?,
                    };
                    room = taken.room;
                    // A message handed on without waiting (the common case) spends none of the
                    // task's budget: without this the stream would keep its thread for a whole
                    // chunk, and the producer's sender, due on it, would wait that long. One
                    // unit per message taken, as the queue's permit spent before.
                    for _ in 0..taken.messages {
                        tokio::task::coop::consume_budget().await;
                    }
                }
                Err(ConsumerError::Timeout(waited)) => {
                    tracing::trace!("mirror stream {}: no message in {waited:?}", context.stream);
                }
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
    // Shutdown: what is in flight gets a bounded time to be acknowledged; the commit task makes
    // the last round once every stream of the source is done.
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
    Ok(())
}

/// A message held across its topic's decision whose partition moved meanwhile to another
/// stream of this member in the same epoch: that stream goes on after it and may have
/// forwarded later messages already, so forwarding it now would put it after them. Withdrawn
/// instead, as a refused message is (nothing of the partition is forwarded or committed after
/// it in this epoch); the partition starts again from its commit, in a new epoch, at a
/// rebalance asked for now. Whether the window has room.
fn withdraw_moved(
    context: &StreamContext,
    key: &SourcePartition,
    message: &ConsumedMessage,
) -> bool {
    let room = {
        let mut state = context.window.lock();
        state.on_withdrawn(key, message.epoch);
        state.has_room()
    };
    if context
        .connector
        .stop_partition(&message.topic, message.partition)
    {
        tracing::info!(
            "mirror: {}/{}: moved to another stream of this mirror while its topic was being decided; it starts again from its commit",
            message.topic,
            message.partition
        );
        context.connector.rejoin();
    }
    context.window.changed();
    room
}

/// What a stream keeps from one message to the next: its deliveries, its partition keys and
/// its topics' verdicts.
struct Stages<'a> {
    acks: &'a mut Deliveries,
    keys: &'a mut Keys,
    verdicts: &'a mut StreamVerdicts,
}

/// What forwarding a message took: how many messages of the source's stream (the run's), and
/// whether the window has room for more.
struct Taken {
    messages: usize,
    room: bool,
}

/// Records `message` with the messages of its chunk that follow it (as many as the window has
/// room for, taken from `stream` as the run is recorded) and hands the run to the producer,
/// waiting while its queue is full.
async fn forward(
    context: &StreamContext,
    stages: &mut Stages<'_>,
    message: ConsumedMessage,
    stream: &mut MessageStream,
) -> Result<Taken, MirrorError> {
    let one = |room| Taken { messages: 1, room };
    let (key, position_key) = stages.keys.key(
        context.source,
        &context.window,
        context.positions.as_ref(),
        &message.topic,
        message.partition,
    );
    // Marked while it waits: later messages of its partition, which a rebalance may hand to
    // another stream of this member in the same epoch, wait behind it (copied first, they
    // would have the mirror partition's positions take this one as held, and a commit past
    // them would skip it).
    let mut mark = (!stages.verdicts.is_kept(&message.topic))
        .then(|| WaitMark::new(&context.window, &key, message.offset));
    let target_topic = match stages.verdicts.verdict(&context.gate, &message.topic).await {
        Verdict::Copy(name) => name,
        Verdict::Refused(_) => {
            // Said by the gate. The partition stops in this epoch — in the window too, so that
            // nothing after this message is forwarded or committed even if a later decision
            // allows the topic — and starts again from its commit at the next rebalance.
            context.stats.refused.fetch_add(1, Ordering::Relaxed);
            let room = {
                let mut state = context.window.lock();
                state.on_withdrawn(&key, message.epoch);
                state.has_room()
            };
            context
                .connector
                .stop_partition(&message.topic, message.partition);
            context.window.changed();
            return Ok(one(room));
        }
    };
    // A message held across the decision's wait: a rebalance may have moved its partition
    // meanwhile. Its hold is looked at and the run recorded under one lock of the window, so
    // what is decided holds; the rest of the run is taken from the stream only then.
    let mut rest: Vec<ConsumedMessage> = Vec::new();
    let (seq, room, handing) = loop {
        let hold = || match tributary_core::planted::active(
            tributary_core::planted::Bug::HeldMessageForwarded,
        ) {
            true => Hold::Held,
            false => message.holder.now(),
        };
        let extend = |more: usize| follow_on(stream, &message, more, &mut rest);
        let admitted = context.window.admit(
            hold,
            &key,
            message.epoch,
            message.offset,
            context.stream,
            context.positions.is_some(),
            extend,
        );
        match admitted {
            Admit::NotHeld(Hold::Gone) => {
                // The ownership it was handed out in is over; the next one starts from the
                // commit, which is not past it.
                tracing::debug!(
                    "mirror: {}/{}: its ownership ended while its topic was being decided; its next owner reads it again",
                    message.topic,
                    message.partition
                );
                return Ok(one(context.window.lock().has_room()));
            }
            Admit::NotHeld(Hold::Moved) => return Ok(one(withdraw_moved(context, &key, &message))),
            Admit::NotHeld(_) | Admit::Behind => {
                mark.get_or_insert_with(|| WaitMark::new(&context.window, &key, message.offset));
                tokio::time::sleep(HOLD_RECHECK).await;
            }
            // Stopped in this epoch: what the stream still holds of it is not forwarded.
            Admit::Decided {
                admission: Admission::Skip,
                room,
                ..
            } => return Ok(one(room)),
            Admit::Decided {
                admission: Admission::Forward { seq, reset, .. },
                room,
                handing,
            } => {
                if let Some(Reset::WentBack { from, dropped }) = reset {
                    tracing::warn!("mirror: {}/{} went back from {from} to {}; {dropped} unacknowledged messages of the old offsets are not committed", message.topic, message.partition, message.offset);
                }
                break (seq, room, handing);
            }
        }
    };
    drop(mark);
    let mut run = Vec::with_capacity(1 + rest.len());
    run.push(message);
    run.append(&mut rest);
    let messages = run.len();
    let forwarded = Forwarded {
        key,
        seq,
        target_topic,
        position_key,
    };
    let outcome = hand_over_run(context, stages.acks, forwarded, run).await;
    // With the producer (or refused by it): a stream its partition moves to may go on.
    drop(handing);
    let room = outcome?.unwrap_or(room);
    Ok(Taken { messages, room })
}

/// Takes up to `more` messages of `first`'s chunk that follow it from `stream` into `rest`
/// (only what the chunk holds now: never waits), and gives their resume offsets.
fn follow_on(
    stream: &mut MessageStream,
    first: &ConsumedMessage,
    more: usize,
    rest: &mut Vec<ConsumedMessage>,
) -> Vec<i64> {
    let mut offsets = Vec::with_capacity(more);
    while offsets.len() < more {
        let Some(next) = stream.next_now() else {
            break;
        };
        // The chunk `first` came from is the one being handed out: nothing else was taken
        // from the stream since.
        debug_assert!(next.holder == first.holder, "a run across two chunks");
        offsets.push(next.offset);
        rest.push(next);
    }
    offsets
}

/// A run the window recorded: its partition's keys, its sequence number and where it goes.
struct Forwarded {
    key: Arc<SourcePartition>,
    seq: u64,
    target_topic: TopicName,
    position_key: Option<Arc<SourceKey>>,
}

/// Hands every message of a recorded run to the producer, into one delivery queued in `acks`.
/// `Some(room)` when the run ended early (refused by the producer: the partition stops), with
/// whether the window has room.
async fn hand_over_run(
    context: &StreamContext,
    acks: &mut Deliveries,
    forwarded: Forwarded,
    run: Vec<ConsumedMessage>,
) -> Result<Option<bool>, MirrorError> {
    let Forwarded {
        key,
        seq,
        target_topic,
        position_key,
    } = forwarded;
    let (Some(first), Some(last)) = (run.first(), run.last()) else {
        return Ok(None);
    };
    let mut meta = AckMeta {
        key,
        seq,
        epoch: first.epoch,
        first: first.offset,
        offset: last.offset,
        messages: run.len() as u64,
        bytes: 0,
        observed: Vec::new(),
    };
    // The whole run is forwarded as it is recorded, before any of it waits for the producer:
    // an observer hears of every message of it then, in order.
    if let Some(observer) = &context.observer {
        for message in &run {
            let event = context.event(
                &message.topic,
                message.partition,
                message.epoch,
                message.offset,
            );
            observer.forwarded(&event, &message.payload);
            meta.observed.push(message.offset);
        }
    }
    let delivery = RunDelivery::new();
    // Without positions a source partition's messages still keep their order in the producer.
    let order = position_key.is_none().then(|| order_of(&meta.key));
    for message in run {
        let size = message.payload.len() as u64;
        if let Some(observer) = &context.observer {
            let event = context.event(
                &message.topic,
                message.partition,
                message.epoch,
                message.offset,
            );
            if let Some(delay) = observer.hand_over_delay(&event) {
                tokio::time::sleep(delay).await;
            }
        }
        let offset = message.offset;
        let record = record_of(target_topic.clone(), message, position_key.clone(), order);
        match context.hand_over(record, &delivery).await {
            Ok(()) => meta.bytes += size,
            Err(e) => {
                let this = AckMeta {
                    first: offset,
                    offset,
                    messages: 1,
                    bytes: size,
                    observed: Vec::new(),
                    ..meta.clone()
                };
                return refused(context, &meta, &this, e).map(Some);
            }
        }
    }
    context
        .stats
        .sent
        .fetch_add(meta.messages, Ordering::Relaxed);
    context
        .stats
        .sent_bytes
        .fetch_add(meta.bytes, Ordering::Relaxed);
    acks.push(PendingAck {
        meta,
        delivery: delivery.seal(),
    });
    Ok(None)
}

/// The producer refused message `this` of the run `run` before sending it; whether the window
/// has room after.
fn refused(
    context: &StreamContext,
    run: &AckMeta,
    this: &AckMeta,
    error: SendError,
) -> Result<bool, MirrorError> {
    match error {
        // Kafka 0.7's loss, planted for the simulator: the run is dropped and the mirror goes
        // on as if it had been delivered.
        SendError::QueueFull { .. }
            if tributary_core::planted::active(tributary_core::planted::Bug::MirrorDropOnFull) =>
        {
            let mut state = context.window.lock();
            state.on_ack(
                &run.key,
                run.epoch,
                run.seq,
                run.offset,
                AckOutcome::Durable,
            );
            Ok(state.has_room())
        }
        // Too large for the mirror cluster: this partition's failure alone. It stops here (its
        // window goes: nothing of it is committed past its last commit) and the others go on;
        // a restart or the next rebalance tries it again from the commit.
        e @ SendError::TooLarge { .. } => {
            let room = {
                let mut state = context.window.lock();
                state.on_withdrawn(&run.key, run.epoch);
                state.has_room()
            };
            stop_partition(context, this, &e);
            context.window.changed();
            Ok(room)
        }
        e => Err(MirrorError::Send(Failure::caused(this.describe(&e), e))),
    }
}

/// The producer's order (see [`Record::order`]) of a source partition's messages: equal for
/// equal partitions within this process (two partitions sharing one only wait for each other).
fn order_of(partition: &SourcePartition) -> std::num::NonZeroU64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    partition.hash(&mut hasher);
    std::num::NonZeroU64::new(hasher.finish()).unwrap_or(std::num::NonZeroU64::MIN)
}

/// The mirror's copy of `message` in `topic`: with its source position when positions are on,
/// else in `order`.
fn record_of(
    topic: TopicName,
    message: ConsumedMessage,
    key: Option<Arc<SourceKey>>,
    order: Option<std::num::NonZeroU64>,
) -> Record {
    let crc = message.crc;
    let record = match key {
        Some(key) => Record::mirrored(
            topic,
            message.payload,
            SourceMark {
                key,
                start: message.start,
                next: message.offset,
                epoch: message.epoch,
            },
        ),
        None => Record::new(topic, message.payload),
    };
    // The consumer checked the payload against its CRC: the copy is not hashed again.
    let record = record.with_checked_crc(crc);
    match order {
        Some(order) => record.in_order(order),
        None => record,
    }
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

/// Records acknowledgements (all under one lock of the window), and wakes the commit task when
/// an early round is due; a send that failed for good stops the stream. Returns whether there
/// is room.
fn on_acks(
    context: &StreamContext,
    ready: Vec<(AckMeta, Result<Delivered, SendError>)>,
) -> Result<bool, MirrorError> {
    let (mut acked, mut acked_bytes) = (0u64, 0u64);
    let mut failure = None;
    let mut too_large = Vec::new();
    let mut restart: Vec<AckMeta> = Vec::new();
    let mut recorded: Vec<AckMeta> = Vec::new();
    let (commit_due, room) = {
        let mut state = context.window.lock();
        for (meta, outcome) in ready {
            match outcome {
                // Durable: the mirror producer never sends unacknowledged
                // (durable.acks.fallback=false).
                Ok(delivered) if delivered.offset.is_some() => {
                    acked += meta.messages;
                    acked_bytes += meta.bytes;
                    let effect = state.on_ack(
                        &meta.key,
                        meta.epoch,
                        meta.seq,
                        meta.offset,
                        AckOutcome::Durable,
                    );
                    if effect == AckEffect::Recorded && context.observer.is_some() {
                        recorded.push(meta);
                    }
                }
                Ok(_) => {
                    failure = Some(MirrorError::Send(Failure::new(format!(
                        "{}: delivered without a durable acknowledgement",
                        meta.key
                    ))));
                    break;
                }
                // Too large for the mirror cluster: that partition's failure alone. Its window
                // is dropped (nothing of it is committed past its last commit; what was sent
                // after is sent again when it restarts from there) and it stops.
                // Not sent after a gap in this ownership (positions on): the partition's window
                // is dropped in the same way, and it starts again from its commit.
                Err(e @ (SendError::TooLarge { .. } | SendError::SourceGap { .. })) => {
                    let effect = state.on_ack(
                        &meta.key,
                        meta.epoch,
                        meta.seq,
                        meta.offset,
                        AckOutcome::TooLarge,
                    );
                    match (effect, &e) {
                        (AckEffect::Stop, SendError::SourceGap { .. }) => restart.push(meta),
                        (AckEffect::Stop, _) => too_large.push((meta, e)),
                        _ => {}
                    }
                }
                Err(e) => {
                    failure = Some(MirrorError::Send(Failure::caused(meta.describe(&e), e)));
                    break;
                }
            }
        }
        (state.early_commit_due(), state.has_room())
    };
    for (meta, e) in too_large {
        stop_partition(context, &meta, &e);
    }
    for meta in restart {
        tracing::info!(
            "mirror: {}: a message before the one ending at {} was not sent in this ownership; the partition starts again from its commit",
            meta.key,
            meta.first
        );
        if context
            .connector
            .stop_partition(&meta.key.topic, meta.key.partition)
        {
            context.connector.rejoin();
        }
    }
    context.stats.acked.fetch_add(acked, Ordering::Relaxed);
    context
        .stats
        .acked_bytes
        .fetch_add(acked_bytes, Ordering::Relaxed);
    context.window.changed();
    if commit_due {
        context.window.commit_wanted.notify_one();
    }
    if let Some(observer) = &context.observer {
        for meta in &recorded {
            for offset in &meta.observed {
                let event = context.event(&meta.key.topic, meta.key.partition, meta.epoch, *offset);
                observer.acknowledged(&event);
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(room),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn pending(queue: &mut Deliveries, seq: u64) -> crate::producer::Done {
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
                epoch: 1,
                first: seq as i64 * 10,
                offset: seq as i64 * 10,
                messages: 1,
                bytes: 1,
                observed: Vec::new(),
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
            held: false,
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
        second.resolve(delivered());
        fourth.resolve(delivered());
        let waited = tokio::time::timeout(Duration::from_millis(20), queue.ready()).await;
        assert!(waited.is_err(), "ready before the oldest delivery resolved");
        assert_eq!(queue.len(), 4, "a cancelled wait took something");
        // 1 resolves: 1 and 2 come together; 3 (on its way) holds 4 back.
        first.resolve(delivered());
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
