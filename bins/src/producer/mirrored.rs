//! A mirror's messages: each source partition's go to one broker (where its copy reaches
//! furthest, else chosen from the source partition; kept while that broker answers), which
//! chooses the partition from the source partition too; they travel as MIRROR_PRODUCE sets,
//! one per source partition per request, each naming the source offsets it holds. The broker appends a set only if its
//! partition does not hold it already, so a set sent again — a retry after a lost answer, a
//! restart, a partition moved to another mirror member — is acknowledged without a second
//! copy; a set the partition holds the start of comes back as an overlap, and only its rest is
//! sent again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tributary_core::message::CompressionCodec;
use tributary_core::mirror::position::placement::{self, BROKER_SALT};
use tributary_core::mirror::position::SourceKey;
use tributary_core::producer::Candidate;
use tributary_core::wire::{
    ErrorCode, MirrorAck, MirrorSet, ProduceRequest, Request, Response, SourceStamp, TopicName,
};

use super::dispatch::{ack_outcome, retry_all, Dispatcher, Left, Payload, Pending, SetOutcome};
use super::targets::how;
use super::{Delivered, SendError};
use crate::client::ClientError;
use crate::env::Env;

/// The most source partitions whose broker is remembered; past it, a new one is placed afresh
/// each time (still the same broker while the topic's brokers stay).
pub(super) const PLACEMENTS_MAX: usize = 100_000;

/// Messages with the partition each goes to (-1: the broker's choice).
pub(super) type Placed = Vec<(Pending, i32)>;

/// Which broker each source partition's messages go to, and what is known of those brokers.
#[derive(Debug, Default)]
pub(super) struct Placements {
    /// Broker and partition (-1: the broker's choice) per source partition.
    pub(super) by_key: BTreeMap<Arc<SourceKey>, (i32, i32)>,
    /// The ownership epoch each source partition was last located for.
    pub(super) located: BTreeMap<Arc<SourceKey>, u64>,
    /// Per source partition, the ownership epoch of the last message put in a set and where it
    /// resumes: a later message of the same epoch must start there (or before: sent again).
    pub(super) sent: BTreeMap<Arc<SourceKey>, (u64, i64)>,
    /// Source partitions whose copy could not be located yet (a broker that may hold it did
    /// not answer), since when (on [`Env::monotonic`], as every clock here): their messages
    /// wait, for [`PLACEMENT_GRACE`] at most.
    pub(super) locating: BTreeMap<Arc<SourceKey>, Duration>,
    /// The last address seen for each broker placed on: a broker that lost its ZooKeeper
    /// registration but still answers keeps its source partitions.
    pub(super) addresses: BTreeMap<i32, (String, u16)>,
    /// Brokers whose sends have failed since then (every send since, not only those after
    /// the broker left the registry: see `absent`).
    pub(super) failing: BTreeMap<i32, Duration>,
    /// Brokers placed on that this member has not seen registered since then: with `failing`,
    /// they keep their source partitions for [`PLACEMENT_GRACE`] after both began.
    pub(super) absent: BTreeMap<i32, Duration>,
    /// Per mirror topic, the last complete survey of its partitions' copies and the ownership
    /// epoch it was made for: the other source partitions taken in that epoch are placed from
    /// it without asking every partition again (at most [`SURVEYS_MAX`] topics).
    pub(super) surveyed: BTreeMap<TopicName, (u64, Survey)>,
    /// Per mirror topic, the turn to locate its source partitions: the sender's locate and a
    /// locate ahead (see [`Dispatcher::locate_ahead`]) of the same topic take turns, so that
    /// the second finds what the first placed instead of asking again (at most [`SURVEYS_MAX`]
    /// topics; past it the map starts afresh, which costs at most a second look).
    pub(super) turns: BTreeMap<TopicName, Arc<tokio::sync::Mutex<()>>>,
}

impl Placements {
    /// The turn to locate `topic`'s source partitions.
    pub(super) fn turn(&mut self, topic: &TopicName) -> Arc<tokio::sync::Mutex<()>> {
        if self.turns.len() >= SURVEYS_MAX && !self.turns.contains_key(topic) {
            self.turns.clear();
        }
        self.turns.entry(topic.clone()).or_default().clone()
    }

    /// What this member sees registered now (`registered`, broker id → address): their
    /// addresses are kept, and every broker known is marked absent from the first look that
    /// does not find it until one that does. `now` is [`Env::monotonic`].
    pub(super) fn note_registry(
        &mut self,
        registered: &BTreeMap<i32, (String, u16)>,
        now: Duration,
    ) {
        for (broker, address) in registered {
            self.addresses.insert(*broker, address.clone());
        }
        for broker in self.addresses.keys() {
            match registered.contains_key(broker) {
                true => drop(self.absent.remove(broker)),
                false => {
                    self.absent.entry(*broker).or_insert(now);
                }
            }
        }
    }

    /// `key`'s copy is being located from now on, unless it was already (its messages wait for
    /// [`PLACEMENT_GRACE`] from the first time). `now` is [`Env::monotonic`].
    pub(super) fn start_locating(&mut self, key: Arc<SourceKey>, now: Duration) {
        self.locating.entry(key).or_insert(now);
    }

    /// How long `key`'s copy has been being located at `now`, if it is.
    pub(super) fn locating_for(&self, key: &Arc<SourceKey>, now: Duration) -> Option<Duration> {
        self.locating
            .get(key)
            .map(|since| now.saturating_sub(*since))
    }

    /// Whether `key`'s copy has been being located for less than [`PLACEMENT_GRACE`] at `now`.
    pub(super) fn locating_within_grace(&self, key: &Arc<SourceKey>, now: Duration) -> bool {
        self.locating_for(key, now)
            .is_some_and(|waited| waited < PLACEMENT_GRACE)
    }
}

/// Whether a source partition placed on `broker` stays there: while the broker has the topic
/// (`brokers`, this member's view), or until it has both been `failing` and been `absent` from
/// the registry for [`PLACEMENT_GRACE`] (a restarted broker unregistered for a moment, or not
/// yet seen registered again, keeps them; so does one whose sends failed for long while it was
/// registered — one of its partitions refusing sets — and that has just crashed). `now` and
/// the clocks are [`Env::monotonic`].
pub(super) fn usable(
    failing: &BTreeMap<i32, Duration>,
    absent: &BTreeMap<i32, Duration>,
    broker: i32,
    brokers: &[i32],
    now: Duration,
) -> bool {
    let gone_for = |since: Option<&Duration>| {
        since.is_some_and(|since| now.saturating_sub(*since) >= PLACEMENT_GRACE)
    };
    brokers.contains(&broker) || !(gone_for(failing.get(&broker)) && gone_for(absent.get(&broker)))
}

/// A source partition and where its messages put in sets reach (ownership epoch, resume
/// offset; `None` when none was yet), as a run of its messages leaves it.
type SentRun = (Arc<SourceKey>, Option<(u64, i64)>);

/// Records where a source partition's messages put in sets reach (`done`: the key and its
/// entry; nothing when it has none), within [`PLACEMENTS_MAX`] source partitions.
fn remember_sent(sent: &mut BTreeMap<Arc<SourceKey>, (u64, i64)>, (key, entry): SentRun) {
    let Some(entry) = entry else {
        return;
    };
    if sent.len() < PLACEMENTS_MAX || sent.contains_key(&key) {
        sent.insert(key, entry);
    }
}

/// Where each source partition's copy reaches furthest in a mirror topic: (held to, broker,
/// partition).
pub(super) type Survey = BTreeMap<SourceKey, (i64, i32, i32)>;

/// The most topics whose survey is kept.
pub(super) const SURVEYS_MAX: usize = 1024;

/// How long a source partition waits for the mirror broker it is placed on when that broker
/// fails and leaves the cluster's registry (a crash, a restart), before it moves to another
/// broker. Moving costs a second copy of what the mirror sent but had not committed (the
/// other broker's positions do not know it); waiting costs that much lag.
pub const PLACEMENT_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// One set: the messages (indexes into the request's slots) of one source partition, in order.
struct Run {
    topic: TopicName,
    /// The partition asked for (-1: the broker's choice).
    partition: i32,
    key: Arc<SourceKey>,
    indexes: Vec<usize>,
}

impl<E: Env> Dispatcher<E> {
    /// Where a message of the source partition `key` goes among `candidates`: the broker it
    /// went to before while that broker still has the topic or still answers (a source
    /// partition that moves goes to a partition whose positions do not know what was sent
    /// before, so moving is a last resort), else (without placement records) one chosen from
    /// `key`, partition -1 (the broker chooses it from `key`); `None` while its placement is
    /// looked up again. `registered` are the live brokers' addresses.
    pub(super) fn place(
        &self,
        candidates: &[Candidate],
        registered: &BTreeMap<i32, (String, u16)>,
        key: &Arc<SourceKey>,
    ) -> Option<Candidate> {
        let mut brokers: Vec<i32> = candidates.iter().map(|c| c.broker_id).collect();
        brokers.dedup();
        let now = self.env.monotonic();
        let mut placed = crate::sync::lock(&self.placed, "the mirror's placements");
        for broker in &brokers {
            if let Some(address) = registered.get(broker) {
                placed.addresses.insert(*broker, address.clone());
            }
        }
        let (broker_id, partition) = match placed.by_key.get(key) {
            Some((broker, partition))
                if usable(&placed.failing, &placed.absent, *broker, &brokers, now) =>
            {
                (*broker, *partition)
            }
            // With placement records, a source partition moves only through its record:
            // `locate` reads it again (moving it off a broker that is gone) before the next
            // attempt; its messages wait meanwhile.
            _ if self.records().is_some() => {
                placed.located.remove(key);
                placed.start_locating(key.clone(), now);
                return None;
            }
            _ => {
                let chosen = brokers
                    .get(placement::index(key, BROKER_SALT, brokers.len().max(1)))
                    .copied()?;
                tracing::debug!("{key}: placed on broker {chosen} of {brokers:?}");
                if placed.by_key.len() < PLACEMENTS_MAX || placed.by_key.contains_key(key) {
                    placed.by_key.insert(key.clone(), (chosen, -1));
                }
                (chosen, -1)
            }
        };
        Some(Candidate {
            broker_id,
            partition,
        })
    }

    /// The address of a broker placed on that is no longer registered (still tried while it
    /// answers).
    pub(super) fn placed_address(&self, broker_id: i32) -> Option<(String, u16)> {
        crate::sync::lock(&self.placed, "the mirror's placements")
            .addresses
            .get(&broker_id)
            .cloned()
    }

    /// Whether the last send to `broker_id` failed (its source partitions then move once it
    /// is unregistered and has failed for [`PLACEMENT_GRACE`]).
    fn note_send(&self, broker_id: i32, failed: bool) {
        let now = self.env.monotonic();
        let mut placed = crate::sync::lock(&self.placed, "the mirror's placements");
        match failed {
            true => {
                placed.failing.entry(broker_id).or_insert(now);
            }
            false => drop(placed.failing.remove(&broker_id)),
        }
    }

    /// Whether some of `pending` waits for the broker its source partition is placed on
    /// (failing for less than [`PLACEMENT_GRACE`]), or for its copy to be located: its retries
    /// are not counted meanwhile.
    pub(super) fn waits_for_placement(&self, pending: &[Pending]) -> bool {
        let now = self.env.monotonic();
        let placed = crate::sync::lock(&self.placed, "the mirror's placements");
        if placed.locating.is_empty() && placed.failing.is_empty() {
            return false;
        }
        let mut previous: Option<&Arc<SourceKey>> = None;
        pending
            .iter()
            .filter_map(|p| p.record.source.as_ref())
            .any(|mark| {
                if previous.is_some_and(|key| Arc::ptr_eq(key, &mark.key)) {
                    return false;
                }
                previous = Some(&mark.key);
                let locating = placed.locating_within_grace(&mark.key, now);
                let waiting = placed
                    .by_key
                    .get(&mark.key)
                    .and_then(|(broker, _)| placed.failing.get(broker))
                    .is_some_and(|since| now.saturating_sub(*since) < PLACEMENT_GRACE);
                locating || waiting
            })
    }

    /// The messages for `broker_id` that go as mirrored sets, and the others.
    pub(super) fn split_marked(
        &self,
        broker_id: i32,
        messages: Vec<(Pending, i32)>,
    ) -> (Placed, Placed) {
        let positions = self.config.durable_acks
            && !crate::sync::lock(&self.without_positions, "the brokers without positions")
                .contains(&broker_id);
        // Most batches are all of one kind (a mirror's, or none of them): handed on whole, not
        // message by message.
        let marked_count = if positions {
            messages
                .iter()
                .filter(|(p, _)| p.record.source.is_some())
                .count()
        } else {
            0
        };
        if marked_count == 0 {
            return (Vec::new(), messages);
        }
        if marked_count == messages.len() {
            return (messages, Vec::new());
        }
        let mut marked = Vec::new();
        let mut plain = Vec::new();
        for (p, partition) in messages {
            match p.record.source.is_some() {
                true => marked.push((p, partition)),
                false => plain.push((p, partition)),
            }
        }
        (marked, plain)
    }

    /// Sends a mirror's messages to one broker as one MIRROR_PRODUCE; what is left to retry or
    /// to send again at once.
    pub(super) async fn send_marked(
        &self,
        broker_id: i32,
        address: Option<(String, u16)>,
        messages: Vec<(Pending, i32)>,
        last: &mut String,
    ) -> Left {
        let partitions: Vec<i32> = messages.iter().map(|(_, partition)| *partition).collect();
        let mut slots: Vec<Option<Pending>> = messages.into_iter().map(|(p, _)| Some(p)).collect();
        self.refuse_gaps(&mut slots);
        let (sets, later) = self.first_sets(&mut slots, &partitions);
        if sets.is_empty() {
            let again = later.into_iter().flat_map(|run| run.indexes);
            let again = again.filter_map(|i| slots.get_mut(i).and_then(Option::take));
            return Left {
                retry: Vec::new(),
                again: again.collect(),
            };
        }
        let address = address.or_else(|| self.placed_address(broker_id));
        let outcomes = match address {
            Some((host, port)) => self.send_mirror_sets(broker_id, &host, port, &sets).await,
            None => retry_all(sets.len(), format!("broker {broker_id} is not registered"))
                .into_iter()
                .map(Answer::Plain)
                .collect(),
        };
        let failed = outcomes
            .iter()
            .all(|o| matches!(o, Answer::Plain(SetOutcome::Retry(_))));
        self.note_send(broker_id, failed);
        self.pin_chosen(broker_id, &sets, &outcomes);
        self.settle(broker_id, &mut slots, &sets, outcomes, later, last)
    }

    /// The sets of one request, one per source partition, and the runs that wait for the next
    /// round, in order. A later set of a source partition would be judged against what the
    /// first leaves, and if the first comes back as an overlap (its rest to send again) or
    /// fails, a later set appended past that gap would have the partition take the missing
    /// messages for held.
    fn first_sets(
        &self,
        slots: &mut [Option<Pending>],
        partitions: &[i32],
    ) -> (Vec<(MirrorSet, Run)>, Vec<Run>) {
        let mut sets: Vec<(MirrorSet, Run)> = Vec::new();
        let mut later: Vec<Run> = Vec::new();
        let mut first_runs: BTreeSet<Arc<SourceKey>> = BTreeSet::new();
        for run in self.runs(slots, partitions) {
            match first_runs.insert(run.key.clone()) {
                true => sets.extend(self.build_runs(slots, run)),
                false => later.push(run),
            }
        }
        (sets, later)
    }

    /// Where the broker chose the partition (-1 asked) and judged the set, the source
    /// partition stays there: later sets name it, so a change of the topic's partition count on
    /// that broker does not split the copy over two partitions.
    fn pin_chosen(&self, broker_id: i32, sets: &[(MirrorSet, Run)], outcomes: &[Answer]) {
        let mut placed = crate::sync::lock(&self.placed, "the mirror's placements");
        for ((_, run), outcome) in sets.iter().zip(outcomes) {
            let Answer::Judged(ack) = outcome else {
                continue;
            };
            let chosen_here = placed.by_key.get(&run.key) == Some(&(broker_id, -1));
            if run.partition < 0 && ack.partition >= 0 && chosen_here {
                placed
                    .by_key
                    .insert(run.key.clone(), (broker_id, ack.partition));
            }
        }
    }

    /// Fails every message that follows a gap in its source partition's messages of one
    /// ownership epoch (a message between was withdrawn by the mirror, or refused): appended
    /// after the gap, it would record a position past a message the mirror cluster does not
    /// hold, and that message, sent again from the commit, would then be taken for held and
    /// lost. What is put in sets is remembered across batches.
    fn refuse_gaps(&self, slots: &mut [Option<Pending>]) {
        let mut placed = crate::sync::lock(&self.placed, "the mirror's placements");
        // The source partition of the run of messages being looked at, and its entry as this
        // batch has left it so far (written back when the run ends): one lookup per run.
        let mut cursor: Option<SentRun> = None;
        for slot in slots.iter_mut() {
            let Some(mark) = slot.as_ref().and_then(|p| p.record.source.as_ref()) else {
                continue;
            };
            let (epoch, start, next) = (mark.epoch, mark.start, mark.next);
            if !cursor
                .as_ref()
                .is_some_and(|(key, _)| Arc::ptr_eq(key, &mark.key))
            {
                // The run before is written back first: it may be the same source partition
                // under another pointer (a key built again for a later chunk).
                if let Some(done) = cursor.take() {
                    remember_sent(&mut placed.sent, done);
                }
                let entry = placed.sent.get(&mark.key).copied();
                cursor = Some((mark.key.clone(), entry));
            }
            let Some((key, entry)) = cursor.as_mut() else {
                continue;
            };
            match *entry {
                Some((sent_epoch, expected)) if sent_epoch == epoch && start > expected => {
                    if let Some(p) = slot.take() {
                        let error = SendError::SourceGap {
                            key: key.to_string(),
                            expected,
                            found: start,
                        };
                        self.finish(p.done, Err(error));
                    }
                }
                Some((sent_epoch, reached)) if sent_epoch == epoch => {
                    *entry = Some((epoch, reached.max(next)));
                }
                _ => *entry = Some((epoch, next)),
            }
        }
        if let Some(done) = cursor {
            remember_sent(&mut placed.sent, done);
        }
    }

    fn finish_held(&self, p: Pending, ack: &MirrorAck, broker_id: i32) {
        self.stats.held.fetch_add(1, Ordering::Relaxed);
        self.finish(
            p.done,
            Ok(Delivered {
                broker_id,
                partition: ack.partition,
                offset: Some(-1),
                held: true,
            }),
        );
    }

    /// The messages grouped by topic, source partition and the partition asked for, each
    /// group in the order sent. A set claims every source offset from its first message's start
    /// to its last one's resume offset, so a group holds only messages that each start where
    /// the one before resumes: it is cut where the source offsets go back (the source partition
    /// read again from an earlier offset: taken over again, or a rebalance of this member), so
    /// that no set claims messages twice, and where they skip ahead (the rest of an earlier
    /// ownership's messages queued among a later one's), so that no set claims messages it
    /// does not hold. The set after a cut is judged on its own (then held, an overlap, or
    /// appended).
    fn runs(&self, slots: &mut [Option<Pending>], partitions: &[i32]) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        // Where each run's last message resumes, by run.
        let mut resumes: Vec<i64> = Vec::new();
        // The open run of each source partition and partition asked for (a source partition's
        // messages all go to one mirror topic).
        let mut open: BTreeMap<(Arc<SourceKey>, i32), usize> = BTreeMap::new();
        // The run the last message joined: the next one of the same source partition (by
        // pointer: messages come in runs of one) joins it without a lookup.
        let mut last: Option<(&Arc<SourceKey>, i32, usize)> = None;
        for (i, slot) in slots.iter().enumerate() {
            let Some(p) = slot else { continue };
            let Some(mark) = &p.record.source else {
                continue;
            };
            let partition = partitions.get(i).copied().unwrap_or(-1);
            let joined = match last {
                Some((key, asked, run)) if Arc::ptr_eq(key, &mark.key) && asked == partition => {
                    Some(run)
                }
                _ => open.get(&(mark.key.clone(), partition)).copied(),
            };
            let follows = joined.and_then(|run| {
                let resume = resumes.get_mut(run)?;
                (mark.start == *resume).then(|| {
                    *resume = mark.next;
                    run
                })
            });
            let run = match follows.and_then(|run| runs.get_mut(run).map(|r| (run, r))) {
                Some((run, joined)) => {
                    joined.indexes.push(i);
                    run
                }
                None => {
                    let run = runs.len();
                    open.insert((mark.key.clone(), partition), run);
                    runs.push(Run {
                        topic: p.record.topic.clone(),
                        partition,
                        key: mark.key.clone(),
                        indexes: vec![i],
                    });
                    resumes.push(mark.next);
                    run
                }
            };
            last = Some((&mark.key, partition, run));
        }
        runs
    }

    /// The sets of one run: one, unless a message is too large on its own — it alone fails,
    /// and the messages before and after it go as sets of their own (a set's source offsets
    /// never cover a message it does not hold).
    fn build_runs(&self, slots: &mut [Option<Pending>], run: Run) -> Vec<(MirrorSet, Run)> {
        let values = |indexes: &[usize], slots: &[Option<Pending>]| -> Vec<Payload> {
            indexes
                .iter()
                .filter_map(|i| slots.get(*i).and_then(Option::as_ref))
                .map(|p| Payload::of(&p.record))
                .collect()
        };
        if let Ok(set) = self.build_set(&run.topic, &values(&run.indexes, slots)) {
            return self.stamped(slots, run, set).into_iter().collect();
        }
        let mut out = Vec::new();
        let mut current = Vec::new();
        for i in run.indexes.iter().copied() {
            let value = values(&[i], slots);
            let too_large = match self.config.codec_for(&run.topic) {
                CompressionCodec::None => value
                    .first()
                    .is_some_and(|v| v.value.len() > self.config.max_message_bytes as usize),
                _ => self.build_set(&run.topic, &value).is_err(),
            };
            if !too_large {
                current.push(i);
                continue;
            }
            out.extend(self.close_run(slots, &run, std::mem::take(&mut current)));
            if let Some(p) = slots.get_mut(i).and_then(Option::take) {
                let size = p.record.value.len();
                let max = self.config.max_message_bytes;
                let failed_at = p.record.source.as_ref().map(|m| (m.epoch, m.start));
                self.finish(p.done, Err(SendError::TooLarge { size, max }));
                // What follows it in this ownership would leave a gap: not sent either.
                if let Some(at) = failed_at {
                    self.gap_after(slots, &run, i, at);
                }
            }
            return out;
        }
        out.extend(self.close_run(slots, &run, current));
        out
    }

    /// Fails the messages of `run` after index `failed` (whose message, starting at `at.1`
    /// in epoch `at.0`, was not stored) as following a gap, and has later batches do the same.
    fn gap_after(&self, slots: &mut [Option<Pending>], run: &Run, failed: usize, at: (u64, i64)) {
        crate::sync::lock(&self.placed, "the mirror's placements")
            .sent
            .insert(run.key.clone(), at);
        for i in run.indexes.iter().copied().filter(|i| *i > failed) {
            if let Some(p) = slots.get_mut(i).and_then(Option::take) {
                let found = p.record.source.as_ref().map_or(at.1, |m| m.start);
                let error = SendError::SourceGap {
                    key: run.key.to_string(),
                    expected: at.1,
                    found,
                };
                self.finish(p.done, Err(error));
            }
        }
    }

    fn close_run(
        &self,
        slots: &mut [Option<Pending>],
        run: &Run,
        indexes: Vec<usize>,
    ) -> Option<(MirrorSet, Run)> {
        if indexes.is_empty() {
            return None;
        }
        let values: Vec<Payload> = indexes
            .iter()
            .filter_map(|i| slots.get(*i).and_then(Option::as_ref))
            .map(|p| Payload::of(&p.record))
            .collect();
        let part = Run {
            topic: run.topic.clone(),
            partition: run.partition,
            key: run.key.clone(),
            indexes,
        };
        match self.build_set(&run.topic, &values) {
            Ok(set) => self.stamped(slots, part, set),
            Err(e) => {
                for i in part.indexes {
                    if let Some(p) = slots.get_mut(i).and_then(Option::take) {
                        self.finish(p.done, Err(e.clone()));
                    }
                }
                None
            }
        }
    }

    /// The set with the source offsets its messages cover: from the first one's start to the
    /// last one's resume offset.
    fn stamped(
        &self,
        slots: &[Option<Pending>],
        run: Run,
        set: bytes::Bytes,
    ) -> Option<(MirrorSet, Run)> {
        let mark = |i: &usize| {
            slots
                .get(*i)
                .and_then(Option::as_ref)
                .and_then(|p| p.record.source.as_ref())
        };
        let start = run.indexes.first().and_then(mark)?.start;
        let next = run.indexes.last().and_then(mark)?.next;
        Some((
            MirrorSet {
                produce: ProduceRequest {
                    topic: run.topic.clone(),
                    partition: run.partition,
                    messages: set,
                },
                source: SourceStamp {
                    key: (*run.key).clone(),
                    start,
                    next: next.max(start),
                },
            },
            run,
        ))
    }

    /// Sends the sets in one MIRROR_PRODUCE; one answer per set, in order.
    async fn send_mirror_sets(
        &self,
        broker_id: i32,
        host: &str,
        port: u16,
        sets: &[(MirrorSet, Run)],
    ) -> Vec<Answer> {
        let plain = |outcomes: Vec<SetOutcome>| outcomes.into_iter().map(Answer::Plain).collect();
        let request = Request::MirrorProduce(sets.iter().map(|(s, _)| s.clone()).collect());
        let mut lease = match self.checkout(broker_id, host, port).await {
            Ok(lease) => lease,
            Err(why) => return plain(retry_all(sets.len(), why)),
        };
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        match lease.conn.call(&request).await {
            Ok(Response::MirrorProduce(r)) if r.acks.len() == sets.len() => {
                lease.give_back(self.env.monotonic());
                self.targets.answered(broker_id, &format!("{host}:{port}"));
                r.acks
                    .iter()
                    .map(|ack| match ack.error {
                        ErrorCode::NoError => Answer::Judged(*ack),
                        error => Answer::Plain(ack_outcome(broker_id, error, -1)),
                    })
                    .collect()
            }
            Ok(other) => {
                self.pool.discard(broker_id);
                plain(retry_all(
                    sets.len(),
                    format!("broker {broker_id} answered a mirrored produce with {other:?}"),
                ))
            }
            // Closed on a connection dialled for it: the broker may not know the request.
            Err(ClientError::Closed(_)) if lease.fresh => {
                drop(lease);
                self.pool.discard(broker_id);
                self.after_positions_refused(broker_id, host, port, sets)
                    .await
            }
            Err(e) => {
                self.pool.discard(broker_id);
                self.targets
                    .failed(&self.stats, broker_id, &format!("{host}:{port}"), &e);
                plain(retry_all(
                    sets.len(),
                    format!("broker {broker_id}: {}", how(&e)),
                ))
            }
        }
    }

    /// The broker closed the connection on MIRROR_PRODUCE: it died, or does not know the
    /// request (then it appended nothing). An OFFSETS request on a new connection tells which;
    /// a broker that answers it gets the mirror's messages as acknowledged produces from now
    /// on (without positions: sets sent again may be copied twice), and the log says so once.
    async fn after_positions_refused(
        &self,
        broker_id: i32,
        host: &str,
        port: u16,
        sets: &[(MirrorSet, Run)],
    ) -> Vec<Answer> {
        let retry = |why: String| {
            retry_all(sets.len(), why)
                .into_iter()
                .map(Answer::Plain)
                .collect()
        };
        let Some((first, _)) = sets.first() else {
            return Vec::new();
        };
        if let Err(why) = self
            .probe(broker_id, host, port, &first.produce.topic)
            .await
        {
            return retry(why);
        }
        if crate::sync::lock(&self.without_positions, "the brokers without positions")
            .insert(broker_id)
        {
            tracing::warn!(
                "broker {broker_id} ({host}:{port}) does not know mirrored produce (a Tributary release before it, or Kafka 0.7): the mirror's messages go to it as acknowledged produces, without source positions, so a set sent again after a failure may be copied twice; upgrade that broker for exactly-once copies"
            );
        }
        retry(format!(
            "broker {broker_id} does not know mirrored produce; sending again without positions"
        ))
    }
}

/// One set's answer: judged by the broker, or the ordinary outcome of a failed send.
enum Answer {
    Judged(MirrorAck),
    Plain(SetOutcome),
}

mod settle;
#[cfg(test)]
mod tests;
