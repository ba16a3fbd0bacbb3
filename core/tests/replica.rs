//! Replica mode's offset sync decisions.

use tributary_core::replica::offset_sync::{
    group_commits_here, offset_to_write, owned_during_write,
};

#[test]
fn a_synced_offset_never_passes_what_the_replica_holds() {
    assert_eq!(offset_to_write(500, 1_000), 500);
    assert_eq!(offset_to_write(1_000, 1_000), 1_000);
    // The source group is ahead of what the replica flushed: a consumer failing over resumes at
    // the replica's end, not past it.
    assert_eq!(offset_to_write(1_500, 1_000), 1_000);
    assert_eq!(offset_to_write(7, 0), 0);
}

#[test]
fn a_group_that_committed_on_the_replica_is_left_alone() {
    // Nothing written yet, or still what the syncer wrote: the syncer owns the node.
    assert!(!group_commits_here(None, None));
    assert!(!group_commits_here(Some(b"40"), Some(b"40")));
    // The group failed over and committed here itself.
    assert!(group_commits_here(Some(b"55"), Some(b"40")));
    // A node the syncer never wrote (the group was here first).
    assert!(group_commits_here(Some(b"55"), None));
}

#[test]
fn a_sync_cut_short_between_the_node_and_its_mark_is_still_the_syncers() {
    // Before replacing 40 with 55 the mark owns both; whichever the node holds after a failure,
    // the next round writes again rather than taking it for the group's own commit.
    let mark = owned_during_write(Some(b"40"), b"55");
    assert_eq!(mark, b"40,55");
    assert!(!group_commits_here(Some(b"40"), Some(&mark)));
    assert!(!group_commits_here(Some(b"55"), Some(&mark)));
    assert!(group_commits_here(Some(b"60"), Some(&mark)));
    assert_eq!(owned_during_write(None, b"55"), b"55");
    assert_eq!(owned_during_write(Some(b"55"), b"55"), b"55");
}
