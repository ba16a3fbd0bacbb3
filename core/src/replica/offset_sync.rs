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
/// there exists and no longer holds what the syncer last wrote (`last_written`, kept beside it).
/// The syncer then leaves that partition alone for good.
pub fn group_commits_here(current: Option<&[u8]>, last_written: Option<&[u8]>) -> bool {
    current.is_some() && current != last_written
}
