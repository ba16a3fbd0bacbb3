//! The async sender: takes messages from the producer's queue into [`LANES`] lanes and sends
//! each lane's waiting messages as one batch, up to one batch per lane in flight.
//!
//! A message waits in the lane that holds its key (a mirror's source partition, or the record's
//! [`Record::order`]; every other message shares one key), so one key's batches go out one
//! after another, in queue order, retries included (`tributary_core::producer::Lanes`
//! decides). A mirror copying several source partitions thus has a second request built and
//! sent while the first waits for its durable acknowledgement; a producer whose messages
//! share one key still has one batch in flight, and builds the next meanwhile.
//!
//! A lane's batch is due when it holds `batch.size` messages or its first message has waited
//! `queue.time` (0.7's rule), and then takes whatever else is queued, up to `catch_up` more
//! messages and [`ACKED_CATCH_UP_BYTES_MAX`] bytes. While a lane's batch is in flight its
//! waiting messages grow to that size at most; a message for a full lane waits, and nothing
//! behind it is taken from the queue meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{self, error::TryRecvError};
use tokio::task::JoinSet;
use tributary_core::mirror::position::SourceKey;
use tributary_core::producer::{BatchPolicy, Lanes, LANES};

use super::dispatch::{Dispatcher, Pending};
use super::{Queued, Record};
use crate::env::Env;

/// With durable acks, how many messages a batch may also take from what queued up while the
/// lane's previous batch waited for its acknowledgement (so throughput follows the flush rate
/// rather than `batch.size`; order is unchanged).
pub(super) const ACKED_CATCH_UP_MAX: usize = 10_000;
/// ... and only while the batch holds less than this many payload bytes; no batch grows past
/// it (requests stay well under brokers' `max.socket.request.bytes`).
const ACKED_CATCH_UP_BYTES_MAX: usize = 8 * 1024 * 1024;

/// How long a due batch waits for the rest of a compressed source wrapper it holds part of.
const WRAPPER_WAIT: Duration = Duration::from_millis(100);

/// Which lane key a message has: its source partition, else its order, else the one shared
/// by every other message (see [`Record::order`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Shared,
    Order(std::num::NonZeroU64),
    Source(Arc<SourceKey>),
}

impl Key {
    fn of(record: &Record) -> Key {
        match (&record.source, record.order) {
            (Some(mark), _) => Key::Source(mark.key.clone()),
            (None, Some(order)) => Key::Order(order),
            (None, None) => Key::Shared,
        }
    }
}

/// A message's key without a clone or a comparison of source partitions (a source partition
/// by its key's address): equal for the messages of one run.
fn identity(record: &Record) -> (u8, u64) {
    match (&record.source, record.order) {
        (Some(mark), _) => (2, Arc::as_ptr(&mark.key) as usize as u64),
        (None, Some(order)) => (1, order.get()),
        (None, None) => (0, 0),
    }
}

/// The messages waiting in one lane, as the batch they will be sent in.
#[derive(Default)]
struct Waiting {
    messages: Vec<Pending>,
    /// When the first of `messages` was queued (on [`Env::monotonic`]).
    first_queued_at: Duration,
    bytes: usize,
    /// Per source partition with a message inside a compressed wrapper here, whether its last
    /// waiting message is inside one (its wrapper's rest is still to come).
    open: BTreeMap<Arc<SourceKey>, bool>,
    /// How many of `open` are.
    unfinished: usize,
    /// Since when the batch, due, waits for the rest of its wrappers.
    wrapper_wait: Option<Duration>,
}

impl Waiting {
    /// A mirror's batch does not end inside a compressed source wrapper when the rest of it is
    /// coming: a wrapper's messages before its last all resume at its start, so a set ending
    /// with them covers no source offset of theirs, and a restart there would copy them again.
    fn push(&mut self, queued: Queued) {
        if self.messages.is_empty() {
            self.first_queued_at = queued.queued_at;
        }
        self.bytes += queued.record.value.len();
        if let Some(mark) = &queued.record.source {
            let inside = mark.start == mark.next;
            // Only a message inside a wrapper opens one: an uncompressed source needs no look.
            if inside || !self.open.is_empty() {
                let was = self.open.insert(mark.key.clone(), inside).unwrap_or(false);
                self.unfinished = self.unfinished + usize::from(inside) - usize::from(was);
            }
        }
        self.messages.push(Pending {
            record: queued.record,
            done: queued.done,
        });
    }
}

/// When a lane's batch goes.
#[derive(Debug, PartialEq, Eq)]
enum Due {
    Now,
    At(Duration),
    Idle,
}

/// The lanes and what waits in them; see the module docs.
struct LaneBuffers {
    lanes: Lanes<Key>,
    waiting: Vec<Waiting>,
    policy: BatchPolicy,
    /// The most messages a batch takes.
    cap: usize,
    /// The [`identity`] of the last message taken and its lane, while [`Lanes::changes`] is
    /// the third: the next message of it goes there without a lookup.
    last: Option<((u8, u64), usize, u64)>,
    /// A message taken whose lane is full: nothing more is taken until it has room.
    stalled: Option<Queued>,
}

impl LaneBuffers {
    fn new(policy: BatchPolicy, catch_up: usize) -> Self {
        LaneBuffers {
            lanes: Lanes::new(LANES),
            waiting: (0..LANES).map(|_| Waiting::default()).collect(),
            policy,
            cap: policy.batch_size.max(1) + catch_up,
            last: None,
            stalled: None,
        }
    }

    /// Puts `queued` in its lane, or keeps it as stalled when that lane is full.
    fn take(&mut self, queued: Queued) {
        let identity = identity(&queued.record);
        let cached = self
            .last
            .filter(|(last, _, changes)| *last == identity && *changes == self.lanes.changes())
            .map(|(_, lane, _)| lane);
        let (lane, key) = match cached {
            Some(lane) => (lane, None),
            None => {
                let key = Key::of(&queued.record);
                (self.lanes.lane_for(&key), Some(key))
            }
        };
        let full = self
            .waiting
            .get(lane)
            .is_none_or(|w| w.messages.len() >= self.cap || w.bytes >= ACKED_CATCH_UP_BYTES_MAX);
        if full {
            self.stalled = Some(queued);
            return;
        }
        match key {
            Some(key) => {
                self.lanes.add(lane, &key);
                self.last = Some((identity, lane, self.lanes.changes()));
            }
            None => self.lanes.one_more(lane),
        }
        if let Some(w) = self.waiting.get_mut(lane) {
            w.push(queued);
        }
    }

    /// Takes the stalled message again, if any (its lane may have room now).
    fn retake_stalled(&mut self) {
        if let Some(queued) = self.stalled.take() {
            self.take(queued);
        }
    }

    /// When `lane`'s batch is due, at `now` (on [`Env::monotonic`], as every time here);
    /// `closed` when the queue is closed and empty.
    fn due(&mut self, lane: usize, now: Duration, closed: bool) -> Due {
        let sending = self.lanes.is_sending(lane);
        let Some(w) = self.waiting.get_mut(lane) else {
            return Due::Idle;
        };
        if w.messages.is_empty() {
            return Due::Idle;
        }
        if sending {
            return Due::Idle;
        }
        let full = w.messages.len() >= self.cap || w.bytes >= ACKED_CATCH_UP_BYTES_MAX;
        if full || closed {
            return Due::Now;
        }
        let deadline = w.first_queued_at + Duration::from_millis(self.policy.queue_time_ms);
        if w.messages.len() < self.policy.batch_size.max(1) && now < deadline {
            return Due::At(deadline);
        }
        if w.unfinished > 0 {
            let until = *w.wrapper_wait.get_or_insert(now) + WRAPPER_WAIT;
            if now < until {
                return Due::At(until);
            }
        }
        Due::Now
    }

    /// `lane`'s waiting messages, as its batch now in flight. The lane's next batch starts
    /// with room for as many messages as this one held (within the batch's cap), so it does
    /// not grow by copying.
    fn send(&mut self, lane: usize) -> Vec<Pending> {
        self.lanes.send(lane);
        debug_assert_eq!(self.lanes.check(), Ok(()));
        let Some(w) = self.waiting.get_mut(lane) else {
            return Vec::new();
        };
        let room = w.messages.len().min(self.cap);
        let waiting = std::mem::take(w);
        w.messages = Vec::with_capacity(room);
        waiting.messages
    }

    /// Whether nothing waits.
    fn is_empty(&self) -> bool {
        self.stalled.is_none() && self.waiting.iter().all(|w| w.messages.is_empty())
    }
}

/// The async sender; see the module docs. Returns once the queue is closed and every message
/// taken from it is decided.
pub(super) async fn send_batches<E: Env>(
    dispatcher: Arc<Dispatcher<E>>,
    mut rx: mpsc::Receiver<Queued>,
    policy: BatchPolicy,
    catch_up: usize,
) {
    let mut buffers = LaneBuffers::new(policy, catch_up);
    let mut flights: JoinSet<usize> = JoinSet::new();
    let mut closed = false;
    loop {
        while !closed && buffers.stalled.is_none() {
            match rx.try_recv() {
                Ok(queued) => buffers.take(queued),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => closed = true,
            }
        }
        let now = dispatcher.env.monotonic();
        let mut wake: Option<Duration> = None;
        for lane in 0..LANES {
            match buffers.due(lane, now, closed) {
                Due::Now => {
                    let batch = buffers.send(lane);
                    tracing::trace!(
                        "lane {lane}: sending a batch of {} messages; {} left in the queue",
                        batch.len(),
                        rx.len()
                    );
                    let dispatcher = dispatcher.clone();
                    flights.spawn(async move {
                        dispatcher.dispatch(batch).await;
                        lane
                    });
                }
                Due::At(at) => wake = Some(wake.map_or(at, |w| w.min(at))),
                Due::Idle => {}
            }
        }
        buffers.retake_stalled();
        if closed && buffers.is_empty() && flights.is_empty() {
            return;
        }
        tokio::select! {
            biased;
            answered = flights.join_next(), if !flights.is_empty() => match answered {
                Some(Ok(lane)) => buffers.lanes.answered(lane),
                Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // Cancelled: the runtime is stopping.
                Some(Err(_)) | None => return,
            },
            next = rx.recv(), if !closed && buffers.stalled.is_none() => match next {
                Some(queued) => buffers.take(queued),
                None => closed = true,
            },
            () = tokio::time::sleep(wake.unwrap_or(now).saturating_sub(now)), if wake.is_some() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]
    use super::*;
    use crate::producer::{Delivery, SourceMark};
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
            queued_at: Duration::ZERO,
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

    fn policy(batch_size: usize) -> BatchPolicy {
        BatchPolicy {
            batch_size,
            queue_time_ms: 5_000,
        }
    }

    fn starts(batch: &[Pending]) -> Vec<i64> {
        batch
            .iter()
            .map(|p| p.record.source.as_ref().unwrap().start)
            .collect()
    }

    #[tokio::test]
    async fn two_source_partitions_go_in_two_lanes_and_one_waits_behind_its_batch() {
        let (a, b) = (key(0), key(1));
        let mut buffers = LaneBuffers::new(policy(2), 10);
        for q in [queued(&a, 0, 10), queued(&a, 10, 20), queued(&b, 0, 10)] {
            buffers.take(q);
        }
        let now = Duration::ZERO;
        assert_eq!(
            buffers.due(0, now, false),
            Due::Now,
            "a's lane holds batch.size"
        );
        assert_eq!(starts(&buffers.send(0)), [0, 10]);
        // b waits for batch.size or queue.time in its own lane, not behind a's request.
        assert!(
            matches!(buffers.due(1, now, false), Due::At(at) if at > now + Duration::from_secs(4)),
            "queue.time from b's first message"
        );
        buffers.take(queued(&b, 10, 20));
        buffers.take(queued(&a, 20, 30));
        assert_eq!(buffers.due(1, now, false), Due::Now);
        assert_eq!(
            starts(&buffers.send(1)),
            [0, 10],
            "b's batch while a's is in flight"
        );
        assert_eq!(
            buffers.due(0, now, true),
            Due::Idle,
            "a's next batch waits for its batch in flight"
        );
        buffers.lanes.answered(0);
        assert_eq!(buffers.due(0, now, true), Due::Now);
        assert_eq!(starts(&buffers.send(0)), [20]);
    }

    #[tokio::test]
    async fn a_full_lane_stalls_the_queue_until_it_is_sent() {
        let a = key(0);
        let mut buffers = LaneBuffers::new(policy(2), 0);
        buffers.take(queued(&a, 0, 10));
        buffers.take(queued(&a, 10, 20));
        buffers.take(queued(&a, 20, 30));
        assert!(buffers.stalled.is_some(), "the lane holds a whole batch");
        buffers.send(0);
        assert!(
            buffers.waiting[0].messages.capacity() >= 2,
            "the next batch has room for as many as the last held"
        );
        buffers.retake_stalled();
        assert!(buffers.stalled.is_none(), "the lane has room again");
        assert_eq!(buffers.waiting[0].messages.len(), 1);
        assert_eq!(
            buffers.due(0, Duration::ZERO, true),
            Due::Idle,
            "behind its batch in flight"
        );
    }

    #[tokio::test]
    async fn a_batch_ending_inside_a_source_wrapper_waits_for_the_rest_of_it() {
        let (a, b) = (key(0), key(1));
        let mut buffers = LaneBuffers::new(policy(2), 10);
        // Source partition a's wrapper at 100..160 holds three messages: two resume at 100.
        for q in [queued(&a, 40, 100), queued(&a, 100, 100), queued(&b, 0, 10)] {
            buffers.take(q);
        }
        let now = Duration::ZERO;
        assert_eq!(
            buffers.due(0, now, false),
            Due::At(now + WRAPPER_WAIT),
            "due, but inside a's wrapper"
        );
        buffers.take(queued(&a, 100, 100));
        buffers.take(queued(&a, 100, 160));
        assert_eq!(
            buffers.due(0, now, false),
            Due::Now,
            "the wrapper is complete"
        );
        assert_eq!(starts(&buffers.send(0)), [40, 100, 100, 100]);
        // A wrapper whose rest does not come is waited for only so long.
        buffers.lanes.answered(0);
        buffers.take(queued(&a, 200, 200));
        buffers.take(queued(&a, 200, 200));
        assert_eq!(buffers.due(0, now, false), Due::At(now + WRAPPER_WAIT));
        assert_eq!(buffers.due(0, now + WRAPPER_WAIT, false), Due::Now);
    }
}
