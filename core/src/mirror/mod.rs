//! The mirror's decisions, without I/O: what is in flight from each source partition, and up to
//! where the source offset may be committed.
//!
//! Each message the mirror takes from a source partition is recorded with its resume offset
//! when it is handed to the producer ([`MirrorWindow::sent`]), and marked when the mirror
//! cluster has acknowledged it durably ([`MirrorWindow::acked`]). The commit point of a partition
//! is the resume offset of the last message of the longest acknowledged prefix: committing it
//! can never skip a message that is not safely in the mirror cluster, whatever order
//! acknowledgements come in. A partition lost in a rebalance is forgotten ([`MirrorWindow::lost`]):
//! nothing is committed for it afterwards, and its in-flight messages are the new owner's to send
//! again (the duplicates the in-flight window bounds).
//!
//! Call order per partition: `sent` (in source order) … `acked` (any order) … `commit_point`
//! (after acks) → `committed`. A bound on what is in flight (`in_flight` against the caller's
//! limit) is the backpressure that keeps the window — and so the duplicates a crash can cause —
//! bounded.

use std::collections::{BTreeMap, VecDeque};

/// A source partition: (consumer connector index, topic, `<broker>-<partition>`).
pub type SourcePartition = (usize, String, String);

/// One partition's window.
#[derive(Debug, Default)]
struct Window {
    /// Messages handed to the producer and not yet part of the committable prefix, in source
    /// order: (sequence number, resume offset, acknowledged).
    pending: VecDeque<(u64, i64, bool)>,
    /// The resume offset of the last message of the acknowledged prefix.
    commit_point: Option<i64>,
    /// What was last committed.
    committed: Option<i64>,
}

/// The windows of every source partition a mirror stream handles.
#[derive(Debug, Default)]
pub struct MirrorWindow {
    windows: BTreeMap<SourcePartition, Window>,
    in_flight: usize,
}

impl MirrorWindow {
    /// An empty window.
    pub fn new() -> Self {
        MirrorWindow::default()
    }

    /// Message `seq` of `partition`, with resume offset `offset`, was handed to the producer.
    /// Messages of one partition must come in source order.
    pub fn sent(&mut self, partition: &SourcePartition, seq: u64, offset: i64) {
        let window = self.windows.entry(partition.clone()).or_default();
        debug_assert!(window.pending.back().is_none_or(|(s, o, _)| *s < seq && *o <= offset), "messages of a partition are sent in source order");
        window.pending.push_back((seq, offset, false));
        self.in_flight += 1;
    }

    /// Message `seq` of `partition` is durably in the mirror cluster; returns the new commit
    /// point when it moved.
    pub fn acked(&mut self, partition: &SourcePartition, seq: u64) -> Option<i64> {
        let window = self.windows.get_mut(partition)?;
        if let Some(entry) = window.pending.iter_mut().find(|(s, _, _)| *s == seq) {
            entry.2 = true;
        }
        let mut moved = None;
        while let Some(&(_, offset, true)) = window.pending.front() {
            window.pending.pop_front();
            self.in_flight -= 1;
            window.commit_point = Some(offset);
            moved = Some(offset);
        }
        moved
    }

    /// Where `partition` may be committed now, if past what was committed.
    pub fn commit_point(&self, partition: &SourcePartition) -> Option<i64> {
        let window = self.windows.get(partition)?;
        window.commit_point.filter(|p| window.committed.is_none_or(|c| *p > c))
    }

    /// Every partition with something new to commit, and where.
    pub fn commits_due(&self) -> Vec<(SourcePartition, i64)> {
        self.windows.keys().filter_map(|p| self.commit_point(p).map(|o| (p.clone(), o))).collect()
    }

    /// `offset` was committed for `partition`.
    pub fn committed(&mut self, partition: &SourcePartition, offset: i64) {
        if let Some(window) = self.windows.get_mut(partition) {
            window.committed = Some(window.committed.map_or(offset, |c| c.max(offset)));
        }
    }

    /// `partition` was lost in a rebalance: its window is dropped; nothing more is committed
    /// for it. Returns how many messages were in flight (the new owner sends them again).
    pub fn lost(&mut self, partition: &SourcePartition) -> usize {
        let dropped = self.windows.remove(partition).map_or(0, |w| w.pending.len());
        self.in_flight -= dropped;
        dropped
    }

    /// Messages handed to the producer and not yet in a committable prefix.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The partitions with a window.
    pub fn partitions(&self) -> Vec<SourcePartition> {
        self.windows.keys().cloned().collect()
    }

    /// In flight equals the sum of the windows' pending messages.
    pub fn invariants_hold(&self) -> bool {
        self.in_flight == self.windows.values().map(|w| w.pending.len()).sum::<usize>()
    }
}
