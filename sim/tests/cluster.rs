//! The cluster scenario: a batch of mixed-fault seeds on the clean build, determinism, and
//! proof that the checkers catch each planted bug. A failure prints the seed and how to replay.

use tributary_core::planted::{plant, Bug};
use tributary_sim::cluster::{run_seed, Faults, Options};

const BATCH_SEEDS: u64 = 200;
const SIM_SECONDS: u64 = 60;
/// Seeds a planted bug gets to show up in.
const PLANTED_SEEDS_MAX: u64 = 40;

fn options(faults: Faults) -> Options {
    Options { duration_secs: SIM_SECONDS, faults: Some(faults) }
}

#[test]
fn mixed_faults_never_break_an_invariant() {
    let seeds: u64 = std::env::var("TRIBUTARY_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(BATCH_SEEDS);
    let (mut crashes, mut partitions, mut expired) = (0, 0, 0);
    for seed in 0..seeds {
        match run_seed(seed, options(Faults::Mixed)) {
            Ok(r) => {
                crashes += r.faults.get("crash").copied().unwrap_or(0);
                partitions += r.faults.get("partition").copied().unwrap_or(0);
                expired += r.sessions_expired;
            }
            Err((violation, r)) => panic!(
                "cluster seed {seed} failed: {violation}\n{}\nreplay: cargo run -p tributary-sim --release -- --seed {seed} --faults mixed --duration {SIM_SECONDS}",
                r.trace_tail.join("\n")
            ),
        }
    }
    eprintln!("{seeds} seeds x {SIM_SECONDS} s: {crashes} crashes, {partitions} partitions, {expired} sessions expired");
    assert!(crashes > 0 && partitions > 0 && expired > 0, "the batch must inject faults");
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [3, 17, 99] {
        let first = run_seed(seed, options(Faults::Mixed)).map_err(|(v, _)| v).unwrap();
        let second = run_seed(seed, options(Faults::Mixed)).map_err(|(v, _)| v).unwrap();
        assert_eq!(first.trace_hash, second.trace_hash, "seed {seed}: traces differ\n{:?}\n{:?}", first.trace_tail, second.trace_tail);
        assert_eq!((first.produced, first.entries_checked), (second.produced, second.entries_checked));
    }
}

/// Runs seeds with `bug` planted until one fails; returns that seed.
fn first_failing_seed(bug: Bug, faults: Faults) -> Option<u64> {
    plant(&[bug]);
    let found = (0..PLANTED_SEEDS_MAX).find(|seed| run_seed(*seed, options(faults)).is_err());
    plant(&[]);
    found
}

#[test]
fn each_planted_bug_is_caught_and_the_clean_build_passes_the_same_seeds() {
    for (bug, faults) in [(Bug::ServeUnflushed, Faults::Crash), (Bug::SkipRecoveryValidation, Faults::Crash), (Bug::NoReregistration, Faults::Network)] {
        let seed = first_failing_seed(bug, faults).unwrap_or_else(|| panic!("{bug:?} was not caught within {PLANTED_SEEDS_MAX} seeds"));
        eprintln!("{bug:?} caught by seed {seed}");
        if let Err((violation, _)) = run_seed(seed, options(faults)) {
            panic!("clean build fails seed {seed} too: {violation}");
        }
    }
}
