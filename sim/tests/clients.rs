//! The producer and the consumer group on the simulated cluster, under faults.

use std::time::Duration;

use tributary_sim::clients::run_seed;

const SEEDS: u64 = 20;
const FAULT_SECONDS: u64 = 40;

#[test]
fn acknowledged_messages_are_all_consumed_and_commits_never_run_ahead() {
    let seeds: u64 = std::env::var("TRIBUTARY_CLIENTS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS);
    // Batches past the suite's range: TRIBUTARY_CLIENTS_FIRST_SEED=20 TRIBUTARY_CLIENTS_SEEDS=1000.
    let first: u64 = std::env::var("TRIBUTARY_CLIENTS_FIRST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (mut acked, mut duplicates, mut commits) = (0, 0, 0);
    let mut faults = std::collections::BTreeMap::new();
    for seed in first..first + seeds {
        if (seed - first).is_multiple_of(50) && seed > first {
            eprintln!("  {} of {seeds} seeds passed", seed - first);
        }
        match run_seed(seed, Duration::from_secs(FAULT_SECONDS)) {
            Ok(r) => {
                acked += r.acked;
                duplicates += r.duplicates;
                commits += r.commits_checked;
                r.faults
                    .iter()
                    .for_each(|(k, v)| *faults.entry(*k).or_insert(0) += v);
            }
            Err((violation, r)) => panic!(
                "clients seed {seed} failed: {violation}\n{}",
                r.trace_tail.join("\n")
            ),
        }
    }
    eprintln!("{seeds} seeds: {acked} acknowledged messages all consumed, {duplicates} consumed twice, {commits} commits checked; faults {faults:?}");
    assert!(acked > 0 && commits > 0 && faults.len() >= 3);
}

#[test]
fn planted_consumer_bugs_are_caught_by_their_invariant() {
    use tributary_core::planted::{plant, Bug};
    use tributary_sim::invariants::Invariant;
    for (bug, expected) in [
        (Bug::CommitFetched, Invariant::CommitNotAhead),
        (Bug::SkipChunk, Invariant::AckedIsConsumed),
        // Owner nodes a keeping member gives away but never releases: the member they go to
        // cannot claim them, and nobody owns them.
        (Bug::GivenAwayNotReleased, Invariant::OwnershipDisjoint),
        // Kept nodes deleted after success: the member owns partitions no node names.
        (Bug::KeptNodeReleased, Invariant::OwnershipDisjoint),
        // Offsets written together, each to the next partition's node: one runs ahead of
        // what was handed out.
        (Bug::TransactionOffsetsShifted, Invariant::CommitNotAhead),
        // Owner nodes made together, refused for one held elsewhere, taken as made: the member
        // owns partitions whose nodes name another member's thread.
        (Bug::ClaimRefusedTakenAsMade, Invariant::OwnershipDisjoint),
    ] {
        plant(&[bug]);
        let caught = (0..30).find_map(|seed| {
            run_seed(seed, Duration::from_secs(FAULT_SECONDS))
                .err()
                .map(|(v, _)| (seed, v))
        });
        plant(&[]);
        let (seed, violation) =
            caught.unwrap_or_else(|| panic!("{bug:?} was not caught within 30 seeds"));
        eprintln!("{bug:?} caught by seed {seed}: {violation}");
        assert_eq!(
            violation.invariant, expected,
            "{bug:?} caught by the wrong invariant: {violation}"
        );
        assert!(
            run_seed(seed, Duration::from_secs(FAULT_SECONDS)).is_ok(),
            "the clean build fails seed {seed} too"
        );
    }
}
