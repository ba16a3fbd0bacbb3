//! One partition's commit, the same value from the application (or the mirror's state machine)
//! through the group's ZooKeeper writes and back with its outcome: nothing is matched back by
//! position.

use crate::wire::TopicName;

use super::BrokerPartition;

/// Commit `offset` for `partition` of `topic` if the member still owns it in ownership epoch
/// `epoch` (the rebalance since which it has owned it without interruption) and has handed it
/// out that far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The topic.
    pub topic: TopicName,
    /// The partition.
    pub partition: BrokerPartition,
    /// The ownership epoch the offset was handed out in.
    pub epoch: u64,
    /// The resume offset to commit.
    pub offset: i64,
}

/// What became of one [`Commit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The offset was written.
    Written,
    /// Nothing past what was committed already.
    NothingNew,
    /// The member does not own the partition in that epoch (any more): nothing was written, and
    /// what it handed out uncommitted is the next owner's to deliver again.
    NotOwned,
    /// The offset is past what was handed out: the partition's offsets went back since (a
    /// reset after its log shrank). Nothing was written.
    Stale,
    /// Not written: its write failed, or came after one that failed (the batch says why).
    /// Committing it again later is safe.
    NotWritten,
}

impl CommitOutcome {
    /// Whether the partition's committed offset now covers the commit.
    pub fn is_done(self) -> bool {
        matches!(self, CommitOutcome::Written | CommitOutcome::NothingNew)
    }

    /// Whether the member has given the partition up in that epoch (its commits are refused).
    pub fn is_not_ours(self) -> bool {
        matches!(self, CommitOutcome::NotOwned | CommitOutcome::Stale)
    }
}

/// A commit with its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitAnswer {
    /// What was asked.
    pub commit: Commit,
    /// What became of it.
    pub outcome: CommitOutcome,
}
