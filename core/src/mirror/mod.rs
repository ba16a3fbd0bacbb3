//! The mirror's decisions, without I/O: what is in flight from each source partition, and up to
//! where the source offset may be committed.
//!
//! Each message the mirror takes from a source partition is recorded with its resume offset
//! when it is handed to the producer ([`MirrorWindow::sent`]), and marked when the mirror
//! cluster has acknowledged it durably ([`MirrorWindow::acked`]). A run of consecutive messages
//! of one partition handed on together is recorded as one entry that counts its messages
//! ([`MirrorWindow::sent_run`]): it is acknowledged as a whole, and its resume offset is its
//! last message's. The commit point of a partition
//! is the resume offset of the last message of the longest acknowledged prefix: committing it
//! can never skip a message that is not safely in the mirror cluster, whatever order
//! acknowledgements come in. A partition lost in a rebalance is forgotten ([`MirrorWindow::lost`]):
//! nothing is committed for it afterwards, and its in-flight messages are the new owner's to send
//! again (the duplicates the in-flight window bounds).
//!
//! Call order per partition: `sent` (in source order) … `acked` (any order) … `commit_point`
//! (after acks) → `committed`. Two counts are the caller's backpressure: [`in_flight`]
//! (unacknowledged) and [`uncommitted`] (not yet covered by a commit: unacknowledged, or
//! acknowledged after the last commit). A crash resends exactly what was uncommitted, so a bound
//! on it — reading stops while it is reached, e.g. while commits fail — is the bound on the
//! duplicates any fault can cause.
//!
//! [`SourceMirror`] drives the windows of one source cluster: the epoch rules, the limits and
//! the commit schedule, as a state machine its driver feeds with events.
//!
//! [`in_flight`]: MirrorWindow::in_flight
//! [`uncommitted`]: MirrorWindow::uncommitted

pub mod lag;
pub mod position;
pub mod rename;
pub mod source;
pub mod watchdog;

pub use source::SourceMirror;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use crate::consumer::BrokerPartition;
use crate::wire::TopicName;

/// A partition of one of the mirror's source clusters: which source (its index among the
/// mirror's consumer configurations), the topic, and the partition as the source's consumer
/// group names it. Ordered by source, then topic, then partition (0.7's string order).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourcePartition {
    /// The source cluster's index.
    pub source: usize,
    /// The topic.
    pub topic: TopicName,
    /// `<broker>-<partition>` in the source cluster.
    pub partition: BrokerPartition,
}

impl SourcePartition {
    /// Partition `partition` of `topic` in source `source`.
    pub fn new(source: usize, topic: TopicName, partition: BrokerPartition) -> Self {
        SourcePartition {
            source,
            topic,
            partition,
        }
    }
}

impl fmt::Display for SourcePartition {
    /// `<topic>/<broker>-<partition>`, as the mirror's log lines name a source partition.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// A message, or a run of consecutive messages of one partition, handed to the producer.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Its sequence number.
    seq: u64,
    /// The resume offset of its (last) message.
    offset: i64,
    /// How many messages it holds (at least one).
    messages: usize,
    /// Whether the mirror cluster has acknowledged it durably.
    acked: bool,
}

/// One partition's window.
#[derive(Debug, Default)]
struct Window {
    /// Entries handed to the producer and not yet part of the committable prefix, in source
    /// order.
    pending: VecDeque<Entry>,
    /// The resume offset of the last message of the acknowledged prefix.
    commit_point: Option<i64>,
    /// The acknowledged prefix's entries not yet covered by a commit: (resume offset,
    /// messages).
    acked_uncommitted: VecDeque<(i64, usize)>,
    /// Messages of `pending`'s entries.
    pending_messages: usize,
    /// Messages of `acked_uncommitted`'s entries.
    acked_uncommitted_messages: usize,
    /// What was last committed.
    committed: Option<i64>,
}

/// The windows of every source partition a mirror stream handles.
#[derive(Debug, Default)]
pub struct MirrorWindow {
    windows: BTreeMap<SourcePartition, Window>,
    in_flight: usize,
    /// Acknowledged, not yet committed (the sum of the windows' `acked_uncommitted`).
    acked_uncommitted: usize,
}

impl MirrorWindow {
    /// An empty window.
    pub fn new() -> Self {
        MirrorWindow::default()
    }

    /// Message `seq` of `partition`, with resume offset `offset`, was handed to the producer.
    /// Entries are kept in offset order whatever order they are recorded in (several streams
    /// may record messages of one partition that moved between them); offsets of one window
    /// never go back (a reset starts a new window: [`MirrorWindow::lost`] first).
    pub fn sent(&mut self, partition: &SourcePartition, seq: u64, offset: i64) {
        self.sent_run(partition, seq, offset, 1);
    }

    /// As [`MirrorWindow::sent`], for a run of `messages` consecutive messages of `partition`
    /// handed on together as `seq`, the last with resume offset `offset`: in flight until
    /// acknowledged as a whole, then committable up to `offset`.
    pub fn sent_run(
        &mut self,
        partition: &SourcePartition,
        seq: u64,
        offset: i64,
        messages: usize,
    ) {
        assert!(messages > 0, "an empty run recorded");
        // Looked up before inserting: the key is cloned only for a partition's first entry.
        let window = match self.windows.get_mut(partition) {
            Some(window) => window,
            None => self.windows.entry(partition.clone()).or_default(),
        };
        // On in release: a message recorded behind the committable prefix would let a commit
        // cover it before it is acknowledged.
        assert!(
            window.commit_point.is_none_or(|c| offset >= c),
            "a message behind the acknowledged prefix of its window"
        );
        let at = window
            .pending
            .iter()
            .rposition(|e| e.offset <= offset)
            .map_or(0, |i| i + 1);
        window.pending.insert(
            at,
            Entry {
                seq,
                offset,
                messages,
                acked: false,
            },
        );
        window.pending_messages += messages;
        self.in_flight += messages;
        debug_assert!(self.invariants_hold());
    }

    /// The highest resume offset recorded for `partition` and not yet dropped.
    pub fn last_sent(&self, partition: &SourcePartition) -> Option<i64> {
        let window = self.windows.get(partition)?;
        window
            .pending
            .back()
            .map(|e| e.offset)
            .or(window.commit_point)
    }

    /// Message (or run) `seq` of `partition` is durably in the mirror cluster; returns the new
    /// commit point when it moved.
    pub fn acked(&mut self, partition: &SourcePartition, seq: u64) -> Option<i64> {
        let window = self.windows.get_mut(partition)?;
        if let Some(entry) = window.pending.iter_mut().find(|e| e.seq == seq) {
            entry.acked = true;
        }
        Self::advance(window, &mut self.in_flight, &mut self.acked_uncommitted)
    }

    /// As [`MirrorWindow::acked`], for message `seq` sent with resume offset `offset`: found by
    /// binary search (the window is in offset order), so an acknowledgement costs O(log n)
    /// whatever order acknowledgements come in, where `acked` scans.
    pub fn acked_at(&mut self, partition: &SourcePartition, seq: u64, offset: i64) -> Option<i64> {
        let window = self.windows.get_mut(partition)?;
        // The oldest entry is the common case (acknowledgements mostly come in order).
        let first = match window.pending.front() {
            Some(front) if front.offset == offset => 0,
            _ => window.pending.partition_point(|e| e.offset < offset),
        };
        if let Some(entry) = window
            .pending
            .range_mut(first..)
            .take_while(|e| e.offset == offset)
            .find(|e| e.seq == seq)
        {
            entry.acked = true;
        }
        let moved = Self::advance(window, &mut self.in_flight, &mut self.acked_uncommitted);
        debug_assert!(self.invariants_hold());
        moved
    }

    /// Moves `window`'s acknowledged prefix into the committable part, keeping the counts;
    /// the new commit point when it moved.
    fn advance(
        window: &mut Window,
        in_flight: &mut usize,
        acked_uncommitted: &mut usize,
    ) -> Option<i64> {
        let mut moved = None;
        let planted = crate::planted::active(crate::planted::Bug::MirrorCommitQueued);
        while let Some(&entry) = window.pending.front() {
            if !entry.acked && !planted {
                break;
            }
            window.pending.pop_front();
            window.pending_messages = take(window.pending_messages, entry.messages, "pending");
            *in_flight = take(*in_flight, entry.messages, "in flight");
            // A message inside a compressed wrapper resumes at the wrapper's start, which may be
            // committed already: nothing is left to commit for it.
            if window.committed.is_none_or(|c| entry.offset > c) {
                window
                    .acked_uncommitted
                    .push_back((entry.offset, entry.messages));
                window.acked_uncommitted_messages += entry.messages;
                *acked_uncommitted += entry.messages;
            }
            window.commit_point = Some(entry.offset);
            moved = Some(entry.offset);
        }
        moved
    }

    /// Where `partition` may be committed now, if past what was committed.
    pub fn commit_point(&self, partition: &SourcePartition) -> Option<i64> {
        let window = self.windows.get(partition)?;
        window
            .commit_point
            .filter(|p| window.committed.is_none_or(|c| *p > c))
    }

    /// Every partition with something new to commit, and where.
    pub fn commits_due(&self) -> Vec<(SourcePartition, i64)> {
        self.windows
            .keys()
            .filter_map(|p| self.commit_point(p).map(|o| (p.clone(), o)))
            .collect()
    }

    /// `offset` was committed for `partition`.
    pub fn committed(&mut self, partition: &SourcePartition, offset: i64) {
        if let Some(window) = self.windows.get_mut(partition) {
            window.committed = Some(window.committed.map_or(offset, |c| c.max(offset)));
            while let Some(&(_, messages)) = window
                .acked_uncommitted
                .front()
                .filter(|(o, _)| *o <= offset)
            {
                window.acked_uncommitted.pop_front();
                window.acked_uncommitted_messages =
                    take(window.acked_uncommitted_messages, messages, "acknowledged");
                self.acked_uncommitted = take(self.acked_uncommitted, messages, "acknowledged");
            }
        }
        debug_assert!(self.invariants_hold());
    }

    /// `partition` was lost in a rebalance: its window is dropped; nothing more is committed
    /// for it. Returns how many messages were in flight (the new owner sends them again).
    pub fn lost(&mut self, partition: &SourcePartition) -> usize {
        let Some(window) = self.windows.remove(partition) else {
            return 0;
        };
        let in_flight = window.pending_messages;
        self.in_flight = take(self.in_flight, in_flight, "in flight");
        self.acked_uncommitted = take(
            self.acked_uncommitted,
            window.acked_uncommitted_messages,
            "acknowledged",
        );
        debug_assert!(self.invariants_hold());
        in_flight
    }

    /// Messages handed to the producer and not yet in a committable prefix.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Messages not yet covered by a commit: in flight, or acknowledged since the last commit.
    /// A crash of this mirror resends exactly these.
    pub fn uncommitted(&self) -> usize {
        self.in_flight + self.acked_uncommitted
    }

    /// Acknowledged messages waiting for a commit.
    pub fn acked_uncommitted(&self) -> usize {
        self.acked_uncommitted
    }

    /// The partitions with a window.
    pub fn partitions(&self) -> Vec<SourcePartition> {
        self.windows.keys().cloned().collect()
    }

    /// In flight equals the sum of the windows' pending messages, and acknowledged-uncommitted
    /// the sum of theirs; a window holds messages exactly when it holds entries.
    /// O(partitions): checked after every change in debug and simulator builds; release
    /// builds keep the O(1) checks (a counter never goes below zero, a message is never
    /// recorded behind the committable prefix, a run is never empty).
    pub fn invariants_hold(&self) -> bool {
        let windows = || self.windows.values();
        self.in_flight == windows().map(|w| w.pending_messages).sum::<usize>()
            && self.acked_uncommitted
                == windows()
                    .map(|w| w.acked_uncommitted_messages)
                    .sum::<usize>()
            && windows().all(|w| {
                (w.pending_messages == 0) == w.pending.is_empty()
                    && (w.acked_uncommitted_messages == 0) == w.acked_uncommitted.is_empty()
            })
    }
}

/// `count - n` for one of the window's counters. On in release: a counter going below zero
/// means the bookkeeping lost track, and wrapping around would leave the mirror with "no
/// room" forever, stalled without a word.
fn take(count: usize, n: usize, what: &str) -> usize {
    assert!(
        count >= n,
        "mirror window: {what} count {count} less than {n} taken"
    );
    count - n
}
