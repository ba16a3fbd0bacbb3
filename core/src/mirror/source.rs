//! One source cluster's mirror, as a state machine: which messages may be forwarded, which are in
//! flight, which epoch each partition's window belongs to, when commits are due and what each
//! commit's outcome does to the window. No I/O and no clock: the driver (`bins/src/mirror/`)
//! hands in events and the time, and carries out the decisions it gets back.
//!
//! Events in: [`SourceMirror::on_message`] (a message from the source, before it is handed to
//! the producer), [`SourceMirror::on_withdrawn`] (the producer refused it before sending),
//! [`SourceMirror::on_ack`] (its delivery resolved), [`SourceMirror::on_ownership`] (what the
//! source's consumer group owns now, as the group reports each change),
//! [`SourceMirror::handle_timeout`] (the clock reached [`SourceMirror::poll_timeout`]),
//! [`SourceMirror::on_commit_outcome`] and [`SourceMirror::on_round_done`]. Decisions out:
//! [`SourceMirror::has_room`] (whether a stream may take another message),
//! [`SourceMirror::poll_commits`] (a round of commits to run now, if one is due),
//! [`SourceMirror::poll_timeout`] (when the next timed round falls due; pure).
//!
//! Call order: [`SourceMirror::new`] with the time; then, whenever the driver wakes,
//! [`SourceMirror::handle_timeout`] with the time and [`SourceMirror::poll_commits`]; a round
//! it gets back ends with one [`SourceMirror::on_commit_outcome`] per commit and then
//! [`SourceMirror::on_round_done`].
//!
//! The epoch rules, in one place: a partition's window belongs to one ownership epoch of the
//! source group (see the consumer's `ConsumedMessage::generation`). A message of another epoch
//! starts a new window (what was in flight in the old one is the next owner's to send again);
//! an offset behind the last one sent starts a new window too (the source's offsets went back);
//! an acknowledgement or a commit outcome of an epoch that is not the window's changes nothing;
//! a partition stopped in an epoch (a message too large for the mirror cluster) forwards and
//! commits nothing more in that epoch.
//!
//! The limits: at most `limit` messages in flight and `2 × limit` not yet committed (reading
//! pauses at either); once `limit` acknowledged messages wait, a commit round is due at once
//! (while the last round succeeded: a failing ZooKeeper is retried at the interval, not at every
//! acknowledgement); otherwise one is due every commit interval. One round runs at a time.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::consumer::{Commit, CommitAnswer};

use super::{MirrorWindow, SourcePartition};

/// Which ownership a partition's window belongs to, and which of the member's streams recorded
/// its last message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    epoch: u64,
    stream: usize,
}

/// One source's mirror state: the windows of its partitions and their epochs, the partitions
/// stopped, and the commit schedule.
#[derive(Debug)]
pub struct SourceMirror {
    /// Which source this is (the first field of every partition's key).
    source: usize,
    window: MirrorWindow,
    /// The epoch each partition's window belongs to, and the stream that recorded its last
    /// message.
    epochs: BTreeMap<SourcePartition, Owner>,
    /// Partitions stopped at a message the mirror cluster cannot take, with the epoch they were
    /// stopped in: nothing more of them is forwarded, acknowledged into the window or committed
    /// in that epoch (the source group starts them again in a new one).
    stopped: BTreeMap<SourcePartition, u64>,
    /// Messages streams hold across a wait before they are forwarded or dropped (their topic's
    /// decision, a rebalance under way): per partition, their resume offsets, counted. Another
    /// stream of the member may take the partition over in the same epoch: its later messages
    /// wait ([`SourceMirror::waits_behind`]) and nothing of the partition is committed
    /// meanwhile, so neither a commit nor the mirror cluster's copy gets past the held one.
    waiting: BTreeMap<SourcePartition, BTreeMap<i64, usize>>,
    /// The last sequence number given to a message.
    seq: u64,
    /// At most this many messages in flight.
    limit: usize,
    /// The commit interval, in milliseconds.
    commit_interval_ms: i64,
    /// When the next timed round falls due, in the caller's milliseconds.
    next_round: i64,
    /// The interval passed: the next [`SourceMirror::poll_commits`] starts a round.
    interval_due: bool,
    /// Whether a round is running (its outcomes not all in).
    round_running: bool,
    /// Whether every commit of the current round succeeded so far.
    round_ok: bool,
    /// Whether the last round succeeded: only then does a full window of acknowledgements make
    /// a round due early.
    commits_ok: bool,
}

/// What [`SourceMirror::on_message`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Hand the message to the producer as message `seq` of its partition; for a run, its
    /// first `messages` messages, together as `seq`.
    Forward {
        /// Its sequence number: name it in [`SourceMirror::on_ack`].
        seq: u64,
        /// The partition's previous window was dropped first.
        reset: Option<Reset>,
        /// How many of the messages offered were recorded (1 for a single message): a run is
        /// cut to the room the window has left, at least one message.
        messages: usize,
    },
    /// The partition is stopped in this epoch: the message is not forwarded.
    Skip,
}

/// Why a partition's window was dropped when a message came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// The message is of a new ownership epoch; `dropped` messages of the old one were in
    /// flight.
    NewEpoch {
        /// Messages that were in flight in the old window.
        dropped: usize,
    },
    /// The offsets went back within an epoch (the source partition shrank and the consumer
    /// reset) from `from`; `dropped` messages of the old offsets were in flight.
    WentBack {
        /// The last offset sent before.
        from: i64,
        /// Messages that were in flight in the old window.
        dropped: usize,
    },
}

/// How a message's delivery resolved, as [`SourceMirror::on_ack`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// Durably stored in the mirror cluster.
    Durable,
    /// Refused as too large for the mirror cluster: that partition's failure alone.
    TooLarge,
}

/// What [`SourceMirror::on_ack`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckEffect {
    /// Recorded in the partition's window.
    Recorded,
    /// Of an epoch the window no longer belongs to, or of a stopped partition: nothing changed.
    Ignored,
    /// The partition is stopped from now on in that epoch (its window dropped): the driver
    /// tells the source group to give it up.
    Stop,
}

/// What [`SourceMirror::on_ownership`] dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnershipEffect {
    /// Windows dropped: each frees the room its messages held, acknowledged or not (the driver
    /// wakes whoever waits for room whenever this is not zero).
    pub windows: usize,
    /// Of their messages, those still in flight (the next owner sends them again).
    pub in_flight: usize,
}

/// What [`SourceMirror::on_commit_outcome`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitEffect {
    /// The window records the commit.
    Committed,
    /// The window was dropped; `resent` messages in flight are sent again by the next owner.
    Dropped {
        /// Messages that were in flight.
        resent: usize,
    },
    /// The window is of another epoch now (or gone): nothing changed.
    Ignored,
    /// Nothing changed; the round counts as failed.
    Failed,
}

/// A round of commits to run: each commit's answer goes to
/// [`SourceMirror::on_commit_outcome`], then [`SourceMirror::on_round_done`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRound {
    /// What to commit, in partition order (at most one per partition).
    pub commits: Vec<Commit>,
}

impl SourceMirror {
    /// Source `source` with nothing in flight at `now_ms` (the caller's clock, e.g.
    /// `Env::now_ms`): at most `limit` messages in flight (at least 1), a commit round every
    /// `commit_interval`, the first one interval from now.
    pub fn new(source: usize, limit: usize, commit_interval: Duration, now_ms: i64) -> Self {
        let commit_interval_ms = i64::try_from(commit_interval.as_millis()).unwrap_or(i64::MAX);
        SourceMirror {
            source,
            window: MirrorWindow::new(),
            epochs: BTreeMap::new(),
            stopped: BTreeMap::new(),
            waiting: BTreeMap::new(),
            seq: 0,
            limit: limit.max(1),
            commit_interval_ms,
            next_round: now_ms.saturating_add(commit_interval_ms),
            interval_due: false,
            round_running: false,
            round_ok: true,
            commits_ok: true,
        }
    }

    /// A message of `partition` with resume offset `offset`, handed out in epoch `epoch` by
    /// stream `stream` of the member, is about to go to the producer: whether to forward it,
    /// and under which sequence number. A forwarded message counts as in flight until its
    /// acknowledgement.
    pub fn on_message(
        &mut self,
        partition: &SourcePartition,
        epoch: u64,
        offset: i64,
        stream: usize,
    ) -> Admission {
        self.on_run(partition, epoch, &[offset], stream)
    }

    /// [`SourceMirror::on_message`] for a run of consecutive messages of `partition` that a
    /// stream hands to the producer together, `offsets` their resume offsets in source order
    /// (never empty): as if each were offered in turn with nothing between them, except that
    /// the forwarded ones share one sequence number and are acknowledged as a whole. At most
    /// the room the window has left is recorded (at least one message, as a single message
    /// is when there is none); [`Admission::Forward`] says how many.
    pub fn on_run(
        &mut self,
        partition: &SourcePartition,
        epoch: u64,
        offsets: &[i64],
        stream: usize,
    ) -> Admission {
        let known = self.epochs.get(partition).copied();
        self.record(partition, epoch, offsets, stream, known)
    }

    /// [`SourceMirror::on_message`] for a mirror whose messages of one partition must reach
    /// the producer in source order (the mirror's positions: a later message arriving first
    /// would have the mirror partition take the earlier one for held). When a rebalance moved
    /// the partition to `stream` from another stream within `epoch`, and `handing` says that
    /// stream still has messages it recorded on their way to the producer, nothing is recorded
    /// and `None` comes back: ask again once they are with the producer.
    pub fn on_message_in_order(
        &mut self,
        partition: &SourcePartition,
        epoch: u64,
        offset: i64,
        stream: usize,
        handing: impl FnOnce(usize) -> bool,
    ) -> Option<Admission> {
        if self.waits_for_hand_over(partition, epoch, stream, handing) {
            return None;
        }
        Some(self.on_message(partition, epoch, offset, stream))
    }

    /// Whether [`SourceMirror::on_message_in_order`] would record nothing now: `partition` moved
    /// to `stream` from another stream within `epoch`, and `handing` says that stream still
    /// has messages it recorded on their way to the producer.
    pub fn waits_for_hand_over(
        &self,
        partition: &SourcePartition,
        epoch: u64,
        stream: usize,
        handing: impl FnOnce(usize) -> bool,
    ) -> bool {
        let moved_from = self
            .epochs
            .get(partition)
            .filter(|o| o.epoch == epoch && o.stream != stream);
        moved_from.is_some_and(|o| handing(o.stream))
            && self.stopped.get(partition) != Some(&epoch)
            && !crate::planted::active(crate::planted::Bug::HandOverNotAwaited)
    }

    /// Records the run [`SourceMirror::on_run`] describes (as much of it as there is room
    /// for); `known` is its partition's owner before it.
    #[allow(clippy::panic)]
    fn record(
        &mut self,
        partition: &SourcePartition,
        epoch: u64,
        offsets: &[i64],
        stream: usize,
        known: Option<Owner>,
    ) -> Admission {
        // The caller's bug, not input: on in release, as a message behind its window is.
        let Some(&offset) = offsets.first() else {
            panic!("an empty run offered to the mirror window");
        };
        assert!(
            offsets.windows(2).all(|pair| pair[0] <= pair[1]),
            "a run's offsets go back"
        );
        if self.stopped.get(partition) == Some(&epoch) {
            return Admission::Skip;
        }
        let messages = offsets.len().min(self.room_left()).max(1);
        let last = offsets[messages - 1];
        let mut reset = None;
        if known.is_some_and(|o| o.epoch != epoch) {
            let dropped = self.window.lost(partition);
            reset = Some(Reset::NewEpoch { dropped });
        }
        if let Some(from) = self
            .window
            .last_sent(partition)
            .filter(|sent| offset < *sent)
        {
            let dropped = self.window.lost(partition);
            reset = Some(Reset::WentBack { from, dropped });
        }
        self.seq += 1;
        self.window.sent_run(partition, self.seq, last, messages);
        let owner = Owner { epoch, stream };
        if known != Some(owner) {
            self.epochs.insert(partition.clone(), owner);
        }
        Admission::Forward {
            seq: self.seq,
            reset,
            messages,
        }
    }

    /// A stream holds the message of `partition` with resume offset `offset` across a wait,
    /// before [`SourceMirror::on_message`] (or a withdrawal, or dropping it): until
    /// [`SourceMirror::on_wait_over`], later messages of the partition wait and nothing of it
    /// is committed.
    pub fn on_wait(&mut self, partition: &SourcePartition, offset: i64) {
        let marks = self.waiting.entry(partition.clone()).or_default();
        *marks.entry(offset).or_insert(0) += 1;
    }

    /// The wait [`SourceMirror::on_wait`] marked is over (the message recorded, withdrawn or
    /// dropped).
    pub fn on_wait_over(&mut self, partition: &SourcePartition, offset: i64) {
        let Some(marks) = self.waiting.get_mut(partition) else {
            return;
        };
        if let Some(count) = marks.get_mut(&offset) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                marks.remove(&offset);
            }
        }
        if marks.is_empty() {
            self.waiting.remove(partition);
        }
    }

    /// Whether the message of `partition` with resume offset `offset` must wait before
    /// [`SourceMirror::on_message`]: a stream holds an earlier message of the partition across
    /// a wait. Forwarded now, it would reach the mirror cluster before that one, whose copy
    /// the mirror partition's positions would then take as held.
    pub fn waits_behind(&self, partition: &SourcePartition, offset: i64) -> bool {
        if crate::planted::active(crate::planted::Bug::CommitPastWaitingMessage) {
            return false;
        }
        self.waiting
            .get(partition)
            .and_then(|marks| marks.keys().next())
            .is_some_and(|first| *first < offset)
    }

    /// The last message forwarded for `partition` (epoch `epoch`) was refused by the producer
    /// before it was sent (too large for the mirror cluster): the partition stops in that epoch,
    /// and its window of that epoch goes with it — nothing of it is committed past its last
    /// commit (the source group gives it up, so its commits would be refused anyway), and what
    /// it had in flight is sent again when it starts from there. Returns the messages dropped,
    /// this one included.
    pub fn on_withdrawn(&mut self, partition: &SourcePartition, epoch: u64) -> usize {
        self.stop(partition, epoch)
    }

    /// Stops `partition` in `epoch`, dropping its window if it is of that epoch (one a newer
    /// epoch started meanwhile is not this stop's); the messages dropped.
    fn stop(&mut self, partition: &SourcePartition, epoch: u64) -> usize {
        // A late stop of an older epoch never un-stops a newer one.
        let stopped = self.stopped.entry(partition.clone()).or_insert(epoch);
        *stopped = (*stopped).max(epoch);
        if self.epoch(partition) == Some(epoch) {
            self.window.lost(partition)
        } else {
            0
        }
    }

    /// Message `seq` of `partition`, forwarded in epoch `epoch` with resume offset `offset`, was
    /// acknowledged (`Durable`) or refused as too large.
    pub fn on_ack(
        &mut self,
        partition: &SourcePartition,
        epoch: u64,
        seq: u64,
        offset: i64,
        outcome: AckOutcome,
    ) -> AckEffect {
        let stopped = self.stopped.get(partition) == Some(&epoch);
        match outcome {
            AckOutcome::Durable => {
                if stopped || self.epoch(partition) != Some(epoch) {
                    return AckEffect::Ignored;
                }
                self.window.acked_at(partition, seq, offset);
                AckEffect::Recorded
            }
            AckOutcome::TooLarge => {
                if stopped {
                    return AckEffect::Ignored;
                }
                self.stop(partition, epoch);
                AckEffect::Stop
            }
        }
    }

    /// What the source group owns now: `owned` lists every partition it owns with its epoch, as
    /// of rebalance `generation` (epochs are rebalance generations, so they only grow). The
    /// window of a partition not listed, or listed in another epoch, is dropped when it belongs
    /// to `generation` or an older one (its commits would be refused; its room is freed now);
    /// a window of a newer epoch than the snapshot is left alone.
    pub fn on_ownership(
        &mut self,
        generation: u64,
        owned: &[(SourcePartition, u64)],
    ) -> OwnershipEffect {
        let owned: BTreeMap<&SourcePartition, u64> = owned.iter().map(|(p, e)| (p, *e)).collect();
        let gone: Vec<SourcePartition> = self
            .epochs
            .iter()
            .filter(|(p, o)| o.epoch <= generation && owned.get(p) != Some(&o.epoch))
            .map(|(p, _)| p.clone())
            .collect();
        let mut effect = OwnershipEffect::default();
        for partition in gone {
            self.epochs.remove(&partition);
            effect.windows += 1;
            effect.in_flight += self.window.lost(&partition);
        }
        // A stopped partition is no longer owned, but its streams may still hold messages of
        // the epoch it stopped in: the entry stays until it is owned again in a newer epoch.
        self.stopped
            .retain(|p, epoch| owned.get(p).is_none_or(|now| *now <= *epoch));
        debug_assert!(self.invariants_hold());
        effect
    }

    /// Whether a stream may take another message: fewer than `limit` in flight and fewer than
    /// `2 × limit` uncommitted.
    pub fn has_room(&self) -> bool {
        self.room_left() > 0
    }

    /// How many more messages a stream may take: up to `limit` in flight and `2 × limit`
    /// uncommitted.
    pub fn room_left(&self) -> usize {
        let in_flight = self.limit.saturating_sub(self.window.in_flight());
        let uncommitted = self
            .limit
            .saturating_mul(2)
            .saturating_sub(self.window.uncommitted());
        in_flight.min(uncommitted)
    }

    /// Whether a full window of acknowledged messages waits and the last round succeeded: a
    /// round is due now (see [`SourceMirror::poll_commits`]).
    pub fn early_commit_due(&self) -> bool {
        self.commits_ok && self.window.acked_uncommitted() >= self.limit
    }

    /// The clock reads `now_ms`: when it has reached the next timed round (and no round runs),
    /// that round is due at the next [`SourceMirror::poll_commits`], and the one after falls due
    /// one interval on from `now_ms`. A clock that went back never postpones the next round by
    /// more than one interval. While a round runs nothing changes: its end decides.
    pub fn handle_timeout(&mut self, now_ms: i64) {
        if self.round_running {
            return;
        }
        let later = now_ms.saturating_add(self.commit_interval_ms);
        self.next_round = self.next_round.min(later);
        if now_ms >= self.next_round {
            self.next_round = later;
            self.interval_due = true;
        }
    }

    /// A round of commits to run now, if one is due (the interval passed, as
    /// [`SourceMirror::handle_timeout`] found, or a full window of acknowledgements waits) and
    /// none is running: every partition whose acknowledged prefix passed its last commit. A due
    /// interval is used up even when nothing is to commit.
    pub fn poll_commits(&mut self) -> Option<CommitRound> {
        if self.round_running {
            return None;
        }
        if !std::mem::take(&mut self.interval_due) && !self.early_commit_due() {
            return None;
        }
        self.start_round()
    }

    /// A round of everything committable now, whatever the schedule (at shutdown); `None` when
    /// a round is running or nothing is to commit.
    pub fn force_commits(&mut self) -> Option<CommitRound> {
        if self.round_running {
            return None;
        }
        self.start_round()
    }

    fn start_round(&mut self) -> Option<CommitRound> {
        let commits: Vec<Commit> = self
            .window
            .commits_due()
            .into_iter()
            .filter(|(partition, _)| {
                !self.waiting.contains_key(partition)
                    || crate::planted::active(crate::planted::Bug::CommitPastWaitingMessage)
            })
            .filter_map(|(partition, offset)| {
                let epoch = self.epoch(&partition)?;
                Some(Commit {
                    topic: partition.topic,
                    partition: partition.partition,
                    epoch,
                    offset,
                })
            })
            .collect();
        if commits.is_empty() {
            return None;
        }
        self.round_running = true;
        self.round_ok = true;
        Some(CommitRound { commits })
    }

    /// When the next timed round falls due, in the caller's milliseconds; `None` while a round
    /// runs (its end decides). Changes nothing.
    pub fn poll_timeout(&self) -> Option<i64> {
        (!self.round_running).then_some(self.next_round)
    }

    /// How one commit of the running round went (a commit the driver gave up waiting for is
    /// [`CommitOutcome::NotWritten`](crate::consumer::CommitOutcome::NotWritten)).
    pub fn on_commit_outcome(&mut self, answer: &CommitAnswer) -> CommitEffect {
        // On in release: an outcome outside a round means the driver lost track of its rounds.
        assert!(self.round_running, "a commit outcome outside a round");
        let commit = &answer.commit;
        let partition = SourcePartition::new(self.source, commit.topic.clone(), commit.partition);
        let current = self.epoch(&partition) == Some(commit.epoch);
        if answer.outcome.is_done() {
            if !current {
                return CommitEffect::Ignored;
            }
            self.window.committed(&partition, commit.offset);
            CommitEffect::Committed
        } else if answer.outcome.is_not_ours() {
            if !current {
                return CommitEffect::Ignored;
            }
            self.epochs.remove(&partition);
            CommitEffect::Dropped {
                resent: self.window.lost(&partition),
            }
        } else {
            self.round_ok = false;
            CommitEffect::Failed
        }
    }

    /// The running round is over: every commit's outcome was given.
    pub fn on_round_done(&mut self) {
        assert!(self.round_running, "a round ended that was not running");
        self.round_running = false;
        self.commits_ok = self.round_ok;
        // O(partitions), as the round itself: on in the simulator's and the tests' builds.
        debug_assert!(self.invariants_hold());
    }

    /// Messages forwarded and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.window.in_flight()
    }

    /// Messages not yet covered by a commit (what a crash now would send again).
    pub fn uncommitted(&self) -> usize {
        self.window.uncommitted()
    }

    /// Whether the last round succeeded (for tests).
    #[cfg(feature = "test-support")]
    pub fn commits_ok(&self) -> bool {
        self.commits_ok
    }

    /// The epoch `partition`'s window belongs to (for tests).
    #[cfg(feature = "test-support")]
    pub fn epoch_of(&self, partition: &SourcePartition) -> Option<u64> {
        self.epoch(partition)
    }

    /// Whether `partition` is stopped in `epoch`: nothing more of it is forwarded in it.
    pub fn is_stopped(&self, partition: &SourcePartition, epoch: u64) -> bool {
        self.stopped.get(partition) == Some(&epoch)
    }

    /// The epoch `partition`'s window belongs to.
    fn epoch(&self, partition: &SourcePartition) -> Option<u64> {
        self.epochs.get(partition).map(|o| o.epoch)
    }

    /// The window's own invariants hold, and every window has an epoch. O(partitions).
    pub fn invariants_hold(&self) -> bool {
        self.window.invariants_hold()
            && self
                .window
                .partitions()
                .iter()
                .all(|p| self.epochs.contains_key(p))
    }
}
