//! What the tasks of one source share: core's [`SourceMirror`] behind a lock, the two wake-ups
//! around it, and each stream's count of messages recorded and not yet with the producer. The
//! streams feed it messages and acknowledgements; the source's commit task (`commits.rs`) runs
//! the rounds it decides.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tributary_core::mirror::source::Admission;
use tributary_core::mirror::{SourceMirror, SourcePartition};
use tributary_core::wire::TopicName;

use crate::consumer::Hold;

/// One source's mirror state, shared by its streams and its commit task.
#[derive(Debug)]
pub(super) struct SourceWindow {
    state: Mutex<SourceMirror>,
    /// Bumped on every change that may make room (acknowledgements, commit rounds, dropped
    /// windows): a stream waiting for room looks again. A version, not a `Notify`, so a change
    /// made between a stream's last look and its wait is never missed.
    changed: watch::Sender<u64>,
    /// Woken when a full window of acknowledgements waits (the commit task looks at once).
    pub(super) commit_wanted: Notify,
    /// The source's streams are numbered from this one.
    first_stream: usize,
    /// Per stream of the source: messages it recorded as forwarded and has not yet handed to
    /// the producer ([`SourceWindow::admit`]).
    handing: Box<[Handing]>,
    /// One allocation per topic name for the keys of the source's partitions
    /// ([`SourceWindow::shared_topic`]); at most [`SHARED_TOPICS_MAX`] names.
    topics: Mutex<BTreeSet<TopicName>>,
    /// The most messages a stream records and hands on as one run: a sixteenth of the limit
    /// (so a crash sends again little more than one message at a time would), at most the
    /// `run_max` the window was made with, at least one.
    run_max: usize,
}

/// A run is at most this share of the window's limit: a run is acknowledged and committed
/// as a whole, so what a crash sends again grows by up to a run per partition.
const RUN_SHARE_OF_LIMIT: usize = 16;

/// The most topic names [`SourceWindow::shared_topic`] keeps; past it a name is used as it
/// comes (its lookups then compare the text).
const SHARED_TOPICS_MAX: usize = 100_000;

/// A stream's count of messages recorded and not yet handed to the producer, on a cache line of
/// its own: each stream changes its own twice per message, and the others only read it when a
/// partition moves to them.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Handing(AtomicUsize);

/// What [`SourceWindow::admit`] decided for a message.
pub(super) enum Admit<'a> {
    /// Its partition is not held by the stream as it was (moved, gone, or a rebalance under
    /// way): nothing was recorded.
    NotHeld(Hold),
    /// An earlier message of its partition is held across a wait by another stream, or not yet
    /// with the producer: ask again later.
    Behind,
    /// Recorded (or skipped, see [`Admission`]); `room` is whether the window has room for
    /// another. Until `handing` is dropped (once the message is with the producer), a stream
    /// the partition moves to waits before its own messages of it.
    Decided {
        admission: Admission,
        room: bool,
        handing: HandingGuard<'a>,
    },
}

/// Counts a message of a stream as recorded and not yet with the producer, until dropped.
pub(super) struct HandingGuard<'a> {
    count: Option<&'a Handing>,
}

impl Drop for HandingGuard<'_> {
    fn drop(&mut self) {
        if let Some(count) = self.count {
            count.0.fetch_sub(1, Ordering::Release);
        }
    }
}

impl SourceWindow {
    /// Source `source`, whose streams are numbered `streams`, at `now_ms`: at most `limit`
    /// messages unacknowledged (`queue.size` × streams); a commit round every
    /// `commit_interval`, or as soon as `limit` acknowledged messages wait; runs of at most
    /// `run_max` messages (see `SourceWindow::run_max`).
    pub(super) fn new(
        source: usize,
        streams: std::ops::Range<usize>,
        limit: usize,
        commit_interval: Duration,
        now_ms: i64,
        run_max: usize,
    ) -> Self {
        SourceWindow {
            state: Mutex::new(SourceMirror::new(source, limit, commit_interval, now_ms)),
            changed: watch::Sender::new(0),
            commit_wanted: Notify::new(),
            first_stream: streams.start,
            handing: streams.map(|_| Handing::default()).collect(),
            topics: Mutex::default(),
            run_max: (limit / RUN_SHARE_OF_LIMIT).clamp(1, run_max),
        }
    }

    /// `topic` in the allocation every key of this source uses for that name: the window
    /// looks partitions up message by message, and two keys of one topic then compare their
    /// topics by pointer rather than by text. (A consumer hands out each partition's name in
    /// an allocation of its own.) Called once per chunk, not per message.
    pub(super) fn shared_topic(&self, topic: &TopicName) -> TopicName {
        let mut topics = crate::sync::lock(&self.topics, "the mirror window's topic names");
        if let Some(shared) = topics.get(topic) {
            return shared.clone();
        }
        let shared = topic.unshared();
        if topics.len() < SHARED_TOPICS_MAX {
            topics.insert(shared.clone());
        }
        shared
    }

    /// Looks at where the message of `key` (resume offset `first`, epoch `epoch`) that stream
    /// `stream` handed out is held now, and records it as forwarded if it may go on, all under
    /// one lock: a rebalance that moves its partition to another stream of this member is
    /// either seen here, or that stream's first message of it is recorded after this one.
    /// Recorded with it, as one run, are the messages `extend` hands out after it, asked for
    /// under the same lock (at most the run's size less one, within the room the window has
    /// left; `extend` gives their resume offsets, in order): taken from the source's stream
    /// only here, each is handed out and recorded at once, as a single message is.
    ///
    /// With `ordered` (the mirror's positions: a message reaching the mirror cluster after a
    /// later one of its partition is taken for held), a message of a partition another stream
    /// forwarded last in this epoch also waits until that stream has handed every message it
    /// recorded to the producer: otherwise, that stream held back between the record and the
    /// hand-over (a full queue, a thread preempted), this one could reach the producer first.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn admit(
        &self,
        hold: impl FnOnce() -> Hold,
        key: &SourcePartition,
        epoch: u64,
        first: i64,
        stream: usize,
        ordered: bool,
        extend: impl FnOnce(usize) -> Vec<i64>,
    ) -> Admit<'_> {
        let mut state = self.lock();
        let hold = hold();
        if hold != Hold::Held {
            return Admit::NotHeld(hold);
        }
        if state.waits_behind(key, first) {
            return Admit::Behind;
        }
        let handing = |from| {
            self.handing(from)
                .is_some_and(|h| h.0.load(Ordering::Acquire) > 0)
        };
        if ordered && state.waits_for_hand_over(key, epoch, stream, handing) {
            return Admit::Behind;
        }
        let mut offsets = vec![first];
        if !state.is_stopped(key, epoch) {
            let more = self.run_max.min(state.room_left()).saturating_sub(1);
            offsets.extend(extend(more));
        }
        let admission = state.on_run(key, epoch, &offsets, stream);
        debug_assert!(
            !matches!(admission, Admission::Forward { messages, .. } if messages != offsets.len()),
            "a run cut after its messages were handed out"
        );
        let count = self.handing(stream);
        debug_assert!(
            count.is_some(),
            "stream {stream} is not one of its source's"
        );
        if let Some(count) = count {
            // Under the lock: a stream that reads it under the lock after this sees it.
            count.0.fetch_add(1, Ordering::AcqRel);
        }
        Admit::Decided {
            admission,
            room: state.has_room(),
            handing: HandingGuard { count },
        }
    }

    fn handing(&self, stream: usize) -> Option<&Handing> {
        self.handing.get(stream.checked_sub(self.first_stream)?)
    }

    /// The state. Only memory work happens under this lock; a poisoned one is a bug here, and
    /// stops the task that meets it.
    #[allow(clippy::panic)]
    pub(super) fn lock(&self) -> MutexGuard<'_, SourceMirror> {
        self.state
            .lock()
            .unwrap_or_else(|_| panic!("the mirror window's lock was poisoned"))
    }

    /// Tells the streams waiting for room to look again.
    pub(super) fn changed(&self) {
        self.changed
            .send_modify(|version| *version = version.wrapping_add(1));
    }

    /// What a stream waits on for room: it resolves after every [`SourceWindow::changed`] since
    /// the receiver last looked.
    pub(super) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Whether a stream may take another message from the source.
    pub(super) fn has_room(&self) -> bool {
        self.lock().has_room()
    }
}

/// A message a stream holds across a wait (its topic's decision, a rebalance under way, an
/// earlier message of its partition held by another stream), marked in the window until
/// dropped: meanwhile later messages of its partition wait behind it and nothing of the
/// partition is committed (`SourceMirror::on_wait`).
pub(super) struct WaitMark<'a> {
    window: &'a SourceWindow,
    key: SourcePartition,
    offset: i64,
}

impl<'a> WaitMark<'a> {
    /// Marks the message of `key` with resume offset `offset`.
    pub(super) fn new(window: &'a SourceWindow, key: &SourcePartition, offset: i64) -> Self {
        window.lock().on_wait(key, offset);
        WaitMark {
            window,
            key: key.clone(),
            offset,
        }
    }
}

impl Drop for WaitMark<'_> {
    fn drop(&mut self) {
        // A poisoned lock stopped the mirror where it was met; nothing is left to unmark.
        if let Ok(mut state) = self.window.state.lock() {
            state.on_wait_over(&self.key, self.offset);
        }
        self.window.changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition() -> SourcePartition {
        let partition = tributary_core::consumer::BrokerPartition {
            broker_id: 0,
            partition: 0,
        };
        SourcePartition::new(0, "t".parse().unwrap(), partition)
    }

    /// One message of `p`, held by `stream`, offered alone.
    fn single<'a>(
        window: &'a SourceWindow,
        p: &SourcePartition,
        epoch: u64,
        offset: i64,
        stream: usize,
        ordered: bool,
    ) -> Admit<'a> {
        window.admit(
            || Hold::Held,
            p,
            epoch,
            offset,
            stream,
            ordered,
            |_| Vec::new(),
        )
    }

    fn forwarded(admit: Admit<'_>) -> HandingGuard<'_> {
        match admit {
            Admit::Decided {
                admission: Admission::Forward { .. },
                handing,
                ..
            } => handing,
            _ => panic!("not forwarded"),
        }
    }

    /// Every key of one topic gets the same allocation of its name, whatever allocation the
    /// consumer handed out; a new name gets one of its own; past the bound names still come
    /// back, equal, in allocations not kept.
    #[test]
    fn one_allocation_per_topic_name_for_the_window_keys() {
        let window = SourceWindow::new(0, 0..1, 10, Duration::from_secs(1), 0, 1);
        let given: TopicName = "t".parse().unwrap();
        let first = window.shared_topic(&given.unshared());
        let second = window.shared_topic(&given.unshared());
        assert_eq!(first, given);
        assert!(
            first.same_allocation(&second),
            "two partitions of t, two allocations"
        );
        let other = window.shared_topic(&"u".parse().unwrap());
        assert_eq!(other.as_str(), "u");
        assert!(!other.same_allocation(&first));
        for i in 0..SHARED_TOPICS_MAX {
            window.shared_topic(&format!("n{i}").parse().unwrap());
        }
        let late: TopicName = "late".parse().unwrap();
        let (a, b) = (window.shared_topic(&late), window.shared_topic(&late));
        assert_eq!((a.as_str(), b.as_str()), ("late", "late"));
        assert!(!a.same_allocation(&b), "a name past the bound was kept");
        assert!(
            window.shared_topic(&given).same_allocation(&first),
            "t kept"
        );
    }

    #[test]
    fn a_partition_moved_between_streams_waits_until_the_first_stream_has_handed_its_messages_on() {
        let window = SourceWindow::new(0, 3..5, 10, Duration::from_secs(1), 0, 1);
        let p = partition();
        // Stream 3 records p's message to 100 and has not handed it to the producer yet.
        let handing = forwarded(single(&window, &p, 1, 100, 3, true));
        // The partition moved to stream 4 in the same epoch: its later message waits.
        assert!(matches!(
            single(&window, &p, 1, 200, 4, true),
            Admit::Behind
        ));
        // Stream 3 goes on with its own next message meanwhile.
        drop(forwarded(single(&window, &p, 1, 150, 3, true)));
        assert!(matches!(
            single(&window, &p, 1, 200, 4, true),
            Admit::Behind
        ));
        drop(handing);
        drop(forwarded(single(&window, &p, 1, 200, 4, true)));
        assert_eq!(window.lock().in_flight(), 3);
    }

    #[test]
    fn without_positions_or_in_a_new_epoch_a_moved_partition_does_not_wait() {
        let window = SourceWindow::new(0, 0..2, 10, Duration::from_secs(1), 0, 1);
        let p = partition();
        let _handing = forwarded(single(&window, &p, 1, 100, 0, true));
        // Positions off: the mirror cluster does not judge order.
        drop(forwarded(single(&window, &p, 1, 200, 1, false)));
        // A new epoch starts from the commit: nothing of the old one is waited for.
        drop(forwarded(single(&window, &p, 2, 50, 0, true)));
    }

    /// A run takes its messages only once it is recorded: as many as the window has room for
    /// and the run's size allows, none while an earlier message another stream holds across
    /// a wait is in front of it.
    #[test]
    fn a_run_takes_its_messages_only_as_it_is_recorded_within_the_room_left() {
        // 64 in flight at most: runs of up to 4.
        let window = SourceWindow::new(0, 0..2, 64, Duration::from_secs(1), 0, 512);
        let p = partition();
        let asked = std::cell::Cell::new(None);
        // The messages after `first`, ten offsets apart.
        let after = |first: i64| {
            let asked = &asked;
            move |more: usize| {
                asked.set(Some(more));
                (1..=more as i64).map(|i| first + i * 10).collect()
            }
        };
        let mark = WaitMark::new(&window, &p, 50);
        assert!(matches!(
            window.admit(|| Hold::Held, &p, 1, 60, 0, true, after(60)),
            Admit::Behind
        ));
        assert_eq!(asked.get(), None, "messages taken for a run that waits");
        drop(mark);
        let messages = |admit: Admit<'_>| match admit {
            Admit::Decided {
                admission: Admission::Forward { messages, .. },
                ..
            } => messages,
            _ => panic!("not forwarded"),
        };
        assert_eq!(
            messages(window.admit(|| Hold::Held, &p, 1, 60, 0, true, after(60))),
            4
        );
        assert_eq!(asked.take(), Some(3), "three more after the first");
        // Two messages of room left: one more.
        for offset in (100..).step_by(10).take(58) {
            assert_eq!(messages(single(&window, &p, 1, offset, 0, true)), 1);
        }
        assert_eq!(
            messages(window.admit(|| Hold::Held, &p, 1, 1000, 0, true, after(1000))),
            2
        );
        assert_eq!(asked.take(), Some(1));
        // None left: the message alone, as a single message is.
        assert_eq!(
            messages(window.admit(|| Hold::Held, &p, 1, 2000, 0, true, after(2000))),
            1
        );
        assert_eq!(asked.take(), Some(0));
        assert_eq!(window.lock().in_flight(), 65);
    }

    #[test]
    fn runs_are_a_sixteenth_of_the_limit_within_their_bounds() {
        let run_max =
            |limit| SourceWindow::new(0, 0..1, limit, Duration::from_secs(1), 0, 512).run_max;
        assert_eq!((run_max(4), run_max(64), run_max(3200)), (1, 4, 200));
        assert_eq!(run_max(40_000), 512, "at most the bound given");
    }

    #[test]
    fn a_message_whose_partition_is_not_held_is_not_recorded() {
        let window = SourceWindow::new(0, 0..2, 10, Duration::from_secs(1), 0, 1);
        let p = partition();
        for hold in [Hold::Moved, Hold::Gone, Hold::Unsettled] {
            assert!(matches!(
                window.admit(|| hold, &p, 1, 100, 0, true, |_| Vec::new()),
                Admit::NotHeld(h) if h == hold
            ));
        }
        assert_eq!(window.lock().in_flight(), 0);
    }
}
