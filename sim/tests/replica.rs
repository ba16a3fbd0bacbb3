//! The replica scenario: a batch of mixed-fault seeds on the clean build, determinism, and proof
//! that each replica invariant's checker catches the bug planted for it. A failure prints the
//! seed and how to replay it.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::{assert_each_caught, assert_same_trace, half_of, Traced};
use tributary_core::planted::Bug;
use tributary_sim::cluster::Faults;
use tributary_sim::invariants::Invariant;
use tributary_sim::replica::{run_seed, Options};

const BATCH_SEEDS: u64 = 72;
const SIM_SECONDS: u64 = 60;
/// Seeds a planted bug gets to show up in.
const PLANTED_SEEDS_MAX: u64 = 100;

fn options(faults: Faults) -> Options {
    Options {
        duration: Duration::from_secs(SIM_SECONDS),
        faults,
    }
}

#[test]
fn mixed_faults_never_break_a_replica_invariant_first_half() {
    mixed_faults_never_break_a_replica_invariant(0);
}

#[test]
fn mixed_faults_never_break_a_replica_invariant_second_half() {
    mixed_faults_never_break_a_replica_invariant(1);
}

/// One half of the batch (`TRIBUTARY_REPLICA_SEEDS` seeds in all, `BATCH_SEEDS` by default).
fn mixed_faults_never_break_a_replica_invariant(half: u64) {
    let all: u64 = std::env::var("TRIBUTARY_REPLICA_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(BATCH_SEEDS);
    let range = half_of(all, half);
    let seeds = range.end - range.start;
    let started = std::time::Instant::now();
    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let (mut acked, mut bytes, mut syncs, mut simulated) = (0, 0, 0, 0.0);
    let (mut promotions, mut failover_acked) = (0, 0);
    let (mut gap_seeds, mut holes) = (0, 0);
    let mut drains = Vec::new();
    for seed in range {
        match run_seed(seed, options(Faults::Mixed)) {
            Ok(r) => {
                r.faults.iter().for_each(|(k, v)| *faults.entry(k).or_insert(0) += v);
                acked += r.acked;
                bytes += r.bytes_compared;
                syncs += r.syncs_checked;
                promotions += u64::from(r.promoted_at.is_some());
                failover_acked += r.failover_acked;
                gap_seeds += u64::from(r.tiny_retention);
                holes += r.holes;
                simulated += r.simulated.as_secs_f64();
                drains.extend(r.drained_after);
                assert!(r.partitions > 0, "seed {seed}: nothing was compared");
            }
            Err((violation, r)) => panic!(
                "replica seed {seed} failed: {violation}\n{}\nreplay: cargo run -p tributary-sim --profile sim -- --scenario replica --seed {seed} --faults mixed --duration {SIM_SECONDS}",
                r.trace_tail.join("\n")
            ),
        }
    }
    drains.sort();
    let wall = started.elapsed().as_secs_f64();
    eprintln!(
        "{seeds} replica seeds x {SIM_SECONDS} s: {simulated:.0} simulated s in {wall:.0} wall s; faults {faults:?}; {acked} acknowledged messages, {bytes} bytes identical, {syncs} synced offsets checked, {promotions} promotions then {failover_acked} messages acknowledged by the replica cluster, {gap_seeds} gap seeds with {holes} holes; caught up in {:?} (median), {:?} (worst)",
        drains.get(drains.len() / 2).copied().unwrap_or_default(),
        drains.last().copied().unwrap_or_default()
    );
    assert!(
        acked > 0 && bytes > 0 && syncs > 0,
        "the batch must copy and sync"
    );
    if seeds >= 20 {
        assert!(
            gap_seeds > seeds / 5 && holes > 0,
            "the batch must leave holes ({gap_seeds} gap seeds, {holes} holes)"
        );
        assert!(
            promotions > seeds / 5 && failover_acked > 0,
            "the batch must promote ({promotions} promotions, {failover_acked} produced after)"
        );
    }
    for kind in [
        "link between the clusters cut",
        "broker cut from a ZooKeeper",
        "source broker crash",
        "replica broker crash",
        "replica broker graceful restart",
    ] {
        assert!(faults.contains_key(kind), "the batch never injected {kind}");
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    // Shifts of 1 and 2: with a ZooKeeper model client that leaves its pinger running, seed 2
    // differs after a shift of 2 or 5 (see `shift_task_ids`).
    for seed in [2, 5] {
        assert_same_trace(&format!("seed {seed}"), &[1, 2], || {
            let r = run_seed(seed, options(Faults::Mixed))
                .map_err(|(v, _)| v)
                .unwrap();
            Traced {
                hash: r.trace_hash,
                tail: r.trace_tail,
                figures: (r.acked, r.bytes_compared),
            }
        });
    }
}

#[test]
fn each_planted_replica_bug_is_caught_by_its_invariant_and_the_clean_build_passes_the_same_seed() {
    let cases = [
        // Resuming at the wrong offset after a restart puts the source's bytes at other offsets.
        (
            Bug::ReplicaWrongResumeOffset,
            Faults::Crash,
            Invariant::ReplicaIdentity,
        ),
        (
            Bug::ReplicaSyncUnclamped,
            Faults::Mixed,
            Invariant::ReplicaSyncAhead,
        ),
        // A hole past the source's earliest offset skips bytes the source still has.
        (
            Bug::ReplicaHoleToLatest,
            Faults::Mixed,
            Invariant::ReplicaNoLoss,
        ),
        // Copying on after the promotion puts source bytes after the promote point.
        (
            Bug::ReplicaCopyAfterPromote,
            Faults::Mixed,
            Invariant::ReplicaPromoteCut,
        ),
    ];
    assert_each_caught(&cases, PLANTED_SEEDS_MAX, |seed, faults| {
        run_seed(seed, options(faults)).err().map(|(v, _)| v)
    });
}
