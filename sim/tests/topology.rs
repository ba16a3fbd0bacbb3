//! The topology scenarios: active-active (with and without renaming) and a chain whose cycle is
//! closed late. A batch of mixed-fault seeds on the clean build, determinism, and proof that the
//! copy-back invariant catches a mirror whose loop check is disabled, and the partition-count
//! invariant a broker that gives a renamed copy its own count.

#[path = "directed/origin_race.rs"]
mod origin_race;
use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::{assert_each_caught, assert_same_trace, Traced};
use tributary_core::planted::Bug;
use tributary_sim::cluster::Faults;
use tributary_sim::invariants::Invariant;
use tributary_sim::topology::{run_seed, Options, Topology};

/// Seeds per topology in the suite (`TRIBUTARY_TOPOLOGY_SEEDS` overrides).
const BATCH_SEEDS: u64 = 6;
const SIM_SECONDS: u64 = 60;
/// Seeds a planted bug gets to show up in (at most 100).
const PLANTED_SEEDS_MAX: u64 = 100;

fn options(topology: Topology, faults: Faults, rename: Option<bool>) -> Options {
    Options {
        duration: Duration::from_secs(SIM_SECONDS),
        faults,
        topology,
        rename,
    }
}

fn batch(topology: Topology) {
    let seeds: u64 = std::env::var("TRIBUTARY_TOPOLOGY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(BATCH_SEEDS);
    let first: u64 = std::env::var("TRIBUTARY_TOPOLOGY_FIRST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut delivered: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let (mut duplicates, mut refusals, mut copies_back) = (0, 0, 0);
    for seed in first..first + seeds {
        match run_seed(seed, options(topology, Faults::Mixed, None)) {
            Ok(report) => {
                for (k, n) in report.delivered {
                    *delivered.entry(k).or_default() += n;
                }
                for (k, n) in report.faults {
                    *faults.entry(k).or_default() += n;
                }
                duplicates += report.duplicates;
                refusals += report.refusals;
                copies_back += report.copies_back;
            }
            Err((violation, report)) => panic!(
                "{topology:?} seed {seed} ({}): {violation}\nreplay: cargo run -p tributary-sim --profile sim -- --scenario {} --seed {seed}\n{}",
                report.shape,
                if topology == Topology::Chain { "chain" } else { "active-active" },
                report.trace_tail.join("\n")
            ),
        }
    }
    assert_eq!(copies_back, 0);
    // The cycle (the chain's closing edge; the active-active seeds without renaming) is
    // refused somewhere in the batch, and said.
    assert!(refusals > 0, "no refusal logged in {seeds} seeds");
    println!("{topology:?}: {seeds} seeds; delivered (origin, cluster) {delivered:?}; {duplicates} duplicate copies; {refusals} refusals; faults {faults:?}");
}

#[test]
fn active_active_mirrors_never_lose_copy_back_or_amplify() {
    batch(Topology::ActiveActive);
}

#[test]
fn a_chain_whose_cycle_is_closed_late_refuses_the_closing_edge() {
    batch(Topology::Chain);
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for topology in [Topology::ActiveActive, Topology::Chain] {
        assert_same_trace(&format!("{topology:?}"), &[2], || {
            let r = run_seed(3, options(topology, Faults::Mixed, None))
                .map_err(|(v, _)| v)
                .unwrap();
            Traced {
                hash: r.trace_hash,
                tail: r.trace_tail,
                figures: (),
            }
        });
    }
}

#[test]
fn a_mirror_without_its_loop_check_is_caught_copying_back() {
    // Active-active with renaming: west's `east.orders` goes back into east (as
    // `west.east.orders`). Without renaming: `orders` goes round and round. The chain: north's
    // `orders`, holding east's messages, goes back into east.
    let cases = [
        (
            Bug::LoopCheckDisabled,
            (Topology::ActiveActive, Some(true)),
            Invariant::TopologyNoCopyBack,
        ),
        (
            Bug::LoopCheckDisabled,
            (Topology::ActiveActive, Some(false)),
            Invariant::TopologyNoCopyBack,
        ),
        (
            Bug::LoopCheckDisabled,
            (Topology::Chain, None),
            Invariant::TopologyNoCopyBack,
        ),
    ];
    assert_each_caught(&cases, PLANTED_SEEDS_MAX, |seed, (topology, rename)| {
        run_seed(seed, options(topology, Faults::Mixed, rename))
            .err()
            .map(|(v, _)| v)
    });
}

#[test]
fn a_broker_that_gives_a_renamed_copy_its_own_count_is_caught() {
    // Each cluster draws its own num.partitions: west's brokers would create `east.orders` with
    // west's count instead of the count `orders` has in east.
    let cases = [(
        Bug::RenamedCountIgnored,
        (Topology::ActiveActive, Some(true)),
        Invariant::TopologyPartitionCount,
    )];
    assert_each_caught(&cases, PLANTED_SEEDS_MAX, |seed, (topology, rename)| {
        run_seed(seed, options(topology, Faults::Mixed, rename))
            .err()
            .map(|(v, _)| v)
    });
}
