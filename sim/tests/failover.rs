//! The failover scenario (disaster recovery as a cycle): a batch of mixed-fault seeds on the
//! clean build, determinism, and proof that each failover invariant's checker catches the bug
//! planted for it. A failure prints the seed and how to replay it.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::{assert_each_caught, assert_same_trace, half_of, Traced};
use tributary_core::planted::Bug;
use tributary_sim::cluster::Faults;
use tributary_sim::failover::{run_seed, Options};
use tributary_sim::invariants::Invariant;

const BATCH_SEEDS: u64 = 40;
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
fn the_drill_never_breaks_a_failover_invariant_first_half() {
    the_drill_never_breaks_a_failover_invariant(0);
}

#[test]
fn the_drill_never_breaks_a_failover_invariant_second_half() {
    the_drill_never_breaks_a_failover_invariant(1);
}

/// One half of the batch (`TRIBUTARY_FAILOVER_SEEDS` seeds in all, `BATCH_SEEDS` by default).
fn the_drill_never_breaks_a_failover_invariant(half: u64) {
    let all: u64 = std::env::var("TRIBUTARY_FAILOVER_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(BATCH_SEEDS);
    let range = half_of(all, half);
    let seeds = range.end - range.start;
    let started = std::time::Instant::now();
    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut acked: BTreeMap<&'static str, usize> = BTreeMap::new();
    let (mut lost, mut diverged, mut rereads) = (0, 0, (0, 0));
    for seed in range {
        match run_seed(seed, options(Faults::Mixed)) {
            Ok(r) => {
                r.faults.iter().for_each(|(k, v)| *faults.entry(k).or_insert(0) += v);
                r.acked.iter().for_each(|(k, v)| *acked.entry(k).or_insert(0) += v);
                lost += r.lost_at_disaster;
                diverged += r.diverged;
                rereads.0 += r.rereads.0;
                rereads.1 += r.rereads.1;
                assert!(r.completed, "seed {seed}: the drill did not complete");
            }
            Err((violation, r)) => panic!(
                "failover seed {seed} failed: {violation}\n{}\nreplay: cargo run -p tributary-sim --profile sim -- --scenario failover --seed {seed} --faults mixed --duration {SIM_SECONDS}",
                r.trace_tail.join("\n")
            ),
        }
    }
    eprintln!(
        "{seeds} failover seeds x {SIM_SECONDS} s in {:.0} wall s: faults {faults:?}; acknowledged {acked:?}; {lost} acknowledged by a and never copied before the disaster, all kept in diverged files ({diverged} messages there); re-read {} at the failovers, {} at the switchbacks",
        started.elapsed().as_secs_f64(),
        rereads.0,
        rereads.1
    );
    assert!(
        acked.len() == 3,
        "every phase must take acknowledged produces: {acked:?}"
    );
    if seeds >= 10 {
        assert!(
            lost > 0,
            "the batch must lose acknowledged messages at a disaster (and keep them)"
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let seed = 3;
    assert_same_trace(&format!("seed {seed}"), &[1, 2], || {
        let r = run_seed(seed, options(Faults::Mixed))
            .map_err(|(v, _)| v)
            .unwrap();
        Traced {
            hash: r.trace_hash,
            tail: r.trace_tail,
            figures: (r.lost_at_disaster, r.diverged),
        }
    });
}

#[test]
fn each_planted_failover_bug_is_caught_by_its_invariant_and_the_clean_build_passes_the_same_seed() {
    let cases = [
        // A demotion that cuts one message early moves a message both clusters hold.
        (
            Bug::DemoteCutsOneEarly,
            Faults::Mixed,
            Invariant::FailoverDivergedExact,
        ),
        // A demotion that leaves the topics writable takes a produce after it is confirmed.
        (
            Bug::DemoteLeavesWritable,
            Faults::Mixed,
            Invariant::FailoverWritableOnlyPromoted,
        ),
        // Offsets not taken over at a demotion: the group moved back re-reads what it
        // committed on the other cluster.
        (
            Bug::DemoteKeepsOldOffsets,
            Faults::Mixed,
            Invariant::FailoverOffsetsFollow,
        ),
    ];
    assert_each_caught(&cases, PLANTED_SEEDS_MAX, |seed, faults| {
        run_seed(seed, options(faults)).err().map(|(v, _)| v)
    });
}
