//! One source cluster's mirror, as a state machine: which messages may be forwarded, which are in
//! flight, which epoch each partition's window belongs to, when commits are due and what each
//! commit's outcome does to the window. No I/O and no clock: the driver (`bins/src/mirror/`)
//! hands in events and the time, and carries out the decisions it gets back.
//!
//! Events in: [`SourceMirror::on_message`] (a message from the source, before it is handed to
//! the producer), [`SourceMirror::on_withdrawn`] (the producer refused it before sending),
//! [`SourceMirror::on_ack`] (its delivery resolved), [`SourceMirror::on_ownership`] (what the
//! source's consumer group owns now), [`SourceMirror::on_commit_outcome`] and
//! [`SourceMirror::on_round_done`]. Decisions out: [`SourceMirror::has_room`] (whether a stream
//! may take another message), [`SourceMirror::poll_commits`] (a round of commits to run now, if
//! one is due), [`SourceMirror::poll_timeout`] (when the next one falls due).
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

use super::{MirrorWindow, SourcePartition};

/// One source's mirror state: the windows of its partitions and their epochs, the partitions
/// stopped, and the commit schedule.
#[derive(Debug)]
pub struct SourceMirror {
    window: MirrorWindow,
    /// The epoch each partition's window belongs to.
    epochs: BTreeMap<SourcePartition, u64>,
    /// Partitions stopped at a message the mirror cluster cannot take, with the epoch they were
    /// stopped in: nothing more of them is forwarded, acknowledged into the window or committed
    /// in that epoch (the source group starts them again in a new one).
    stopped: BTreeMap<SourcePartition, u64>,
    /// The last sequence number given to a message.
    seq: u64,
    /// At most this many messages in flight.
    limit: usize,
    /// The commit interval, in milliseconds.
    commit_interval_ms: i64,
    /// When the next timed round falls due, in the caller's milliseconds (`None` until the
    /// first poll, which sets it one interval ahead).
    next_round: Option<i64>,
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
    /// Hand the message to the producer as message `seq` of its partition.
    Forward {
        /// Its sequence number: name it in [`SourceMirror::on_ack`].
        seq: u64,
        /// The partition's previous window was dropped first.
        reset: Option<Reset>,
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

/// One commit of a round: `offset` for `partition`, in ownership epoch `epoch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The source partition.
    pub partition: SourcePartition,
    /// The ownership epoch the offset was read in.
    pub epoch: u64,
    /// The resume offset to commit: every message before it is durably in the mirror cluster.
    pub offset: i64,
}

/// How one commit went, as [`SourceMirror::on_commit_outcome`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitResult {
    /// Written, or nothing past what was committed already.
    Done,
    /// The source group says the partition is not this member's in that epoch any more, or the
    /// offset is past what it handed out (its offsets went back).
    NotOurs,
    /// It failed or timed out: retried at the next round.
    Failed,
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

/// Why a round of commits runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundReason {
    /// The commit interval passed.
    Interval,
    /// A full window of acknowledged messages waits.
    Early,
    /// The driver asked for one (at shutdown).
    Forced,
}

/// A round of commits to run: each commit's outcome goes to
/// [`SourceMirror::on_commit_outcome`], then [`SourceMirror::on_round_done`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRound {
    /// Why it runs.
    pub reason: RoundReason,
    /// What to commit, in partition order (at most one per partition).
    pub commits: Vec<Commit>,
}

impl SourceMirror {
    /// A source with nothing in flight: at most `limit` messages in flight (at least 1), a
    /// commit round every `commit_interval`.
    pub fn new(limit: usize, commit_interval: Duration) -> Self {
        SourceMirror {
            window: MirrorWindow::new(),
            epochs: BTreeMap::new(),
            stopped: BTreeMap::new(),
            seq: 0,
            limit: limit.max(1),
            commit_interval_ms: i64::try_from(commit_interval.as_millis()).unwrap_or(i64::MAX),
            next_round: None,
            round_running: false,
            round_ok: true,
            commits_ok: true,
        }
    }

    /// A message of `partition` with resume offset `offset`, handed out in epoch `epoch`, is
    /// about to go to the producer: whether to forward it, and under which sequence number. A
    /// forwarded message counts as in flight until its acknowledgement.
    pub fn on_message(
        &mut self,
        partition: &SourcePartition,
        epoch: u64,
        offset: i64,
    ) -> Admission {
        if self.stopped.get(partition) == Some(&epoch) {
            return Admission::Skip;
        }
        let known = self.epochs.get(partition).copied();
        let mut reset = None;
        if known.is_some_and(|e| e != epoch) {
            let dropped = self.window.lost(partition);
            reset = Some(Reset::NewEpoch { dropped });
        }
        if let Some(from) = self
            .window
            .last_sent(partition)
            .filter(|last| offset < *last)
        {
            let dropped = self.window.lost(partition);
            reset = Some(Reset::WentBack { from, dropped });
        }
        self.seq += 1;
        self.window.sent(partition, self.seq, offset);
        if known != Some(epoch) {
            self.epochs.insert(partition.clone(), epoch);
        }
        Admission::Forward {
            seq: self.seq,
            reset,
        }
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
        if self.epochs.get(partition) == Some(&epoch) {
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
                if stopped || self.epochs.get(partition) != Some(&epoch) {
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
            .filter(|(p, epoch)| **epoch <= generation && owned.get(p) != Some(*epoch))
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
        effect
    }

    /// Whether a stream may take another message: fewer than `limit` in flight and fewer than
    /// `2 × limit` uncommitted.
    pub fn has_room(&self) -> bool {
        self.window.in_flight() < self.limit
            && self.window.uncommitted() < self.limit.saturating_mul(2)
    }

    /// Whether a full window of acknowledged messages waits and the last round succeeded: a
    /// round is due now (see [`SourceMirror::poll_commits`]).
    pub fn early_commit_due(&self) -> bool {
        self.commits_ok && self.window.acked_uncommitted() >= self.limit
    }

    /// A round of commits to run now, if one is due at `now_ms` (the caller's clock, e.g.
    /// `Env::now_ms`) and none is running: every partition whose acknowledged prefix passed its
    /// last commit. A timed round moves the next deadline one interval on from `now_ms`. A
    /// clock that went back never postpones the next round by more than one interval.
    pub fn poll_commits(&mut self, now_ms: i64) -> Option<CommitRound> {
        if self.round_running {
            return None;
        }
        let interval = self.commit_interval_ms;
        let later = now_ms.saturating_add(interval);
        let deadline = match self.next_round {
            Some(at) if at <= later => at,
            _ => later,
        };
        self.next_round = Some(deadline);
        let reason = if now_ms >= deadline {
            self.next_round = Some(later);
            RoundReason::Interval
        } else if self.early_commit_due() {
            RoundReason::Early
        } else {
            return None;
        };
        self.start_round(reason)
    }

    /// A round of everything committable now, whatever the schedule (at shutdown); `None` when
    /// a round is running or nothing is to commit.
    pub fn force_commits(&mut self) -> Option<CommitRound> {
        if self.round_running {
            return None;
        }
        self.start_round(RoundReason::Forced)
    }

    fn start_round(&mut self, reason: RoundReason) -> Option<CommitRound> {
        let commits: Vec<Commit> = self
            .window
            .commits_due()
            .into_iter()
            .filter_map(|(partition, offset)| {
                let epoch = *self.epochs.get(&partition)?;
                Some(Commit {
                    partition,
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
        Some(CommitRound { reason, commits })
    }

    /// When the next timed round falls due, in the caller's milliseconds; `None` while a round
    /// runs (its end decides) or before the first poll.
    pub fn poll_timeout(&self) -> Option<i64> {
        if self.round_running {
            return None;
        }
        self.next_round
    }

    /// How one commit of the running round went.
    pub fn on_commit_outcome(&mut self, commit: &Commit, result: CommitResult) -> CommitEffect {
        // On in release: an outcome outside a round means the driver lost track of its rounds.
        assert!(self.round_running, "a commit outcome outside a round");
        let current = self.epochs.get(&commit.partition) == Some(&commit.epoch);
        match result {
            CommitResult::Failed => {
                self.round_ok = false;
                CommitEffect::Failed
            }
            CommitResult::Done if current => {
                self.window.committed(&commit.partition, commit.offset);
                CommitEffect::Committed
            }
            CommitResult::NotOurs if current => {
                self.epochs.remove(&commit.partition);
                CommitEffect::Dropped {
                    resent: self.window.lost(&commit.partition),
                }
            }
            CommitResult::Done | CommitResult::NotOurs => CommitEffect::Ignored,
        }
    }

    /// The running round is over (every outcome given, or the driver gave up on the rest:
    /// those count as failed when `complete` is false).
    pub fn on_round_done(&mut self, complete: bool) {
        assert!(self.round_running, "a round ended that was not running");
        self.round_running = false;
        self.commits_ok = self.round_ok && complete;
    }

    /// Messages forwarded and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.window.in_flight()
    }

    /// Messages not yet covered by a commit (what a crash now would send again).
    pub fn uncommitted(&self) -> usize {
        self.window.uncommitted()
    }

    /// Whether the last round succeeded.
    pub fn commits_ok(&self) -> bool {
        self.commits_ok
    }

    /// The epoch `partition`'s window belongs to.
    pub fn epoch_of(&self, partition: &SourcePartition) -> Option<u64> {
        self.epochs.get(partition).copied()
    }

    /// Whether `partition` is stopped in `epoch`.
    pub fn is_stopped(&self, partition: &SourcePartition, epoch: u64) -> bool {
        self.stopped.get(partition) == Some(&epoch)
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
