//! Replica mode's offset sync decisions (sans-IO): which source commit a replica writes to its
//! own cluster for a group, so that a consumer failing over to the replica never skips a
//! message the replica does not hold, and never overwrites what the group committed itself.

use crate::planted::{self, Bug};

/// The offset to write on the replica for a group that committed `committed` on the source:
/// never past `held_durably` (the replica's flushed end for that partition), so a consumer that
/// fails over resumes at a message the replica holds, or at its end.
pub fn offset_to_write(committed: i64, held_durably: i64) -> i64 {
    if planted::active(Bug::ReplicaSyncUnclamped) {
        return committed;
    }
    committed.min(held_durably)
}

/// Whether the group commits on the replica's cluster itself (it failed over): the offset node
/// there exists and holds none of the values the syncer owns (`owned`, kept beside it: what it
/// last wrote, or, while a write is under way, the value it replaces and the one it writes,
/// separated by a comma — so a write cut short between the node and its mark never reads as
/// the group's own commit). The syncer then leaves that partition alone for good.
pub fn group_commits_here(current: Option<&[u8]>, owned: Option<&[u8]>) -> bool {
    let Some(current) = current else {
        return false;
    };
    !owned.is_some_and(|owned| owned.split(|b| *b == b',').any(|v| v == current))
}

/// The mark written before the syncer replaces `current` with `next`: both are the syncer's
/// until the write is known done (see [`group_commits_here`]).
pub fn owned_during_write(current: Option<&[u8]>, next: &[u8]) -> Vec<u8> {
    match current {
        Some(current) if current != next => [current, b",", next].concat(),
        _ => next.to_vec(),
    }
}
