//! One owned partition's offsets, and the rule that keeps commits safe.
//!
//! Three positions, all byte offsets of the partition, only ever moving forward while the
//! partition is owned:
//! - `fetched`: where the next fetch starts (advanced by the valid bytes of each chunk);
//! - `consumed`: the resume offset of the last message handed to the application (0.7's
//!   rule: inside a compressed wrapper, the wrapper's start; after its last message, its end);
//! - `committed`: what was last written to ZooKeeper.
//!
//! Invariant: `committed <= consumed <= fetched`. A commit never runs ahead of what the
//! application was handed; an application (the mirror) may commit less than it was handed, up to
//! what it has made safe downstream.

/// The offsets of one owned partition; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    fetched: i64,
    consumed: i64,
    committed: i64,
}

impl PartitionOffsets {
    /// Starts at `offset` (the committed offset, or where `autooffset.reset` put it).
    pub fn starting_at(offset: i64) -> Self {
        PartitionOffsets {
            fetched: offset,
            consumed: offset,
            committed: offset,
        }
    }

    /// Resumes a partition this member keeps across a rebalance: fetching starts again after
    /// what was handed out (chunks queued and not handed out were dropped), with what was
    /// committed still known. A `consumed` behind `committed` is taken as `committed`.
    pub fn resume(committed: i64, consumed: i64) -> Self {
        let consumed = consumed.max(committed);
        PartitionOffsets {
            fetched: consumed,
            consumed,
            committed,
        }
    }

    /// Where the next fetch starts.
    pub fn fetched(&self) -> i64 {
        self.fetched
    }

    /// The resume offset of the last message handed out.
    pub fn consumed(&self) -> i64 {
        self.consumed
    }

    /// What was last committed.
    pub fn committed(&self) -> i64 {
        self.committed
    }

    /// A chunk of `valid_bytes` whole messages was fetched.
    pub fn fetched_chunk(&mut self, valid_bytes: u64) {
        self.fetched = self
            .fetched
            .saturating_add(i64::try_from(valid_bytes).unwrap_or(i64::MAX));
        debug_assert!(self.invariants_hold());
    }

    /// A message with resume offset `offset` was handed to the application. Offsets from a
    /// stale chunk (behind what was already handed out) change nothing.
    pub fn handed_out(&mut self, offset: i64) {
        if offset > self.consumed && offset <= self.fetched {
            self.consumed = offset;
        }
        debug_assert!(self.invariants_hold());
    }

    /// The offset to commit for a request to commit `wanted` (`None`: everything handed out):
    /// never past what was handed out, never behind what is committed. `None` when there is
    /// nothing new to commit.
    pub fn to_commit(&self, wanted: Option<i64>) -> Option<i64> {
        if crate::planted::active(crate::planted::Bug::CommitFetched) {
            return (self.fetched > self.committed).then_some(self.fetched);
        }
        let target = wanted.unwrap_or(self.consumed).min(self.consumed);
        (target > self.committed).then_some(target)
    }

    /// `offset` was written to ZooKeeper.
    pub fn committed_at(&mut self, offset: i64) {
        if offset > self.committed
            && (offset <= self.consumed
                || crate::planted::active(crate::planted::Bug::CommitFetched))
        {
            self.committed = offset.min(self.consumed);
        }
        debug_assert!(self.invariants_hold());
    }

    /// Fetched chunks not yet handed out were dropped (a rebalance cleared the queues): the next
    /// fetch starts again after what was handed out.
    pub fn rewind_to_consumed(&mut self) {
        self.fetched = self.consumed;
    }

    /// The fetch position was reset (`autooffset.reset` after OffsetOutOfRange, or a gap
    /// skipped): fetching and handing out start again at `offset`; the new position is
    /// committed at the next commit when it is ahead of the committed one.
    pub fn reset_to(&mut self, offset: i64) {
        self.fetched = offset;
        self.consumed = offset;
        self.committed = self.committed.min(offset);
        debug_assert!(self.invariants_hold());
    }

    /// `committed <= consumed <= fetched`.
    pub fn invariants_hold(&self) -> bool {
        self.committed <= self.consumed && self.consumed <= self.fetched
    }
}
