//! The cluster scenario: a batch of mixed-fault seeds on the clean build, determinism, and
//! proof that each invariant's checker catches the bug planted for it. A failure prints the
//! seed and how to replay it.

use crate::support;

use support::{
    assert_caught_only_with_many_partitions, assert_each_caught, assert_same_trace, half_of, Traced,
};
use tributary_core::planted::Bug;
use tributary_sim::cluster::{
    run_seed, stop_while_zookeeper_is_unreachable, Faults, Layout, Options,
};
use tributary_sim::invariants::Invariant;

const BATCH_SEEDS: u64 = 96;
const SIM_SECONDS: u64 = 60;
/// Seeds a planted bug gets to show up in.
const PLANTED_SEEDS_MAX: u64 = 40;

fn options(faults: Faults) -> Options {
    Options {
        duration_secs: SIM_SECONDS,
        faults: Some(faults),
        layout: None,
    }
}

#[test]
fn mixed_faults_never_break_an_invariant_first_half() {
    mixed_faults_never_break_an_invariant(0);
}

#[test]
fn mixed_faults_never_break_an_invariant_second_half() {
    mixed_faults_never_break_an_invariant(1);
}

/// One half of the batch (`TRIBUTARY_SIM_SEEDS` seeds in all, `BATCH_SEEDS` by default).
fn mixed_faults_never_break_an_invariant(half: u64) {
    let all: u64 = std::env::var("TRIBUTARY_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(BATCH_SEEDS);
    let range = half_of(all, half);
    let seeds = range.end - range.start;
    let (mut crashes, mut partitions, mut expired, mut sync_failures, mut messages) =
        (0, 0, 0, 0, 0);
    let mut many = 0;
    for seed in range {
        match run_seed(seed, options(Faults::Mixed)) {
            Ok(r) => {
                many += u32::from(r.layout == Layout::Many);
                crashes += r.faults.get("crash").copied().unwrap_or(0);
                partitions += r.faults.get("partition").copied().unwrap_or(0);
                expired += r.sessions_expired;
                sync_failures += r.sync_failures;
                messages += r.messages_checked;
            }
            Err((violation, r)) => panic!(
                "cluster seed {seed} failed: {violation}\n{}\nreplay: cargo run -p tributary-sim --profile sim -- --seed {seed} --faults mixed --duration {SIM_SECONDS}",
                r.trace_tail.join("\n")
            ),
        }
    }
    eprintln!("{seeds} seeds x {SIM_SECONDS} s ({many} with many partitions): {crashes} crashes, {partitions} partitions, {expired} sessions expired, {sync_failures} failed fsyncs, {messages} messages placed by the history checker");
    assert!(
        crashes > 0
            && partitions > 0
            && expired > 0
            && sync_failures > 0
            && messages > 0
            && many > 0,
        "the batch must inject every kind of fault, check messages and run many partitions"
    );
}

#[test]
fn the_same_seed_gives_the_same_trace_broker_events_included() {
    for seed in [3, 17, 99] {
        assert_same_trace(&format!("seed {seed}"), &[2], || {
            let r = run_seed(seed, options(Faults::Mixed))
                .map_err(|(v, _)| v)
                .unwrap();
            assert!(
                r.broker_events > 0,
                "seed {seed}: the trace must carry the brokers' own events"
            );
            Traced {
                hash: r.trace_hash,
                tail: r.trace_tail,
                figures: (r.produced, r.entries_checked, r.trace_lines),
            }
        });
    }
}

#[test]
fn each_planted_bug_is_caught_by_its_invariant_and_the_clean_build_passes_the_same_seed() {
    let cases = [
        (
            Bug::ServeUnflushed,
            Faults::Crash,
            Invariant::VisibleIsDurable,
        ),
        (
            Bug::SkipRecoveryValidation,
            Faults::Crash,
            Invariant::NoCorruptRead,
        ),
        (
            Bug::NoReregistration,
            Faults::Network,
            Invariant::RegistryMatches,
        ),
        (Bug::ProduceWrongPartition, Faults::None, Invariant::History),
        (Bug::DropSomeProduces, Faults::None, Invariant::History),
        // A flush timer that lets go of partitions not due yet: the messages produced last
        // never become readable.
        (
            Bug::FlushTimerForgetsWaiting,
            Faults::None,
            Invariant::History,
        ),
    ];
    // A bug can do more than one kind of damage (serving unflushed data also makes a latest
    // offset go back after a crash): the search goes on to the seed its own invariant catches,
    // other invariants first at most 3 times.
    assert_each_caught(&cases, PLANTED_SEEDS_MAX, |seed, faults| {
        run_seed(seed, options(faults)).err().map(|(v, _)| v)
    });
}

/// A bug only many partitions show: the many-partitions layout catches it, the clean build
/// passes the seed that does, and so does that seed with the bug planted when it runs the
/// usual four partitions a broker.
#[test]
fn a_planted_scale_bug_is_caught_by_the_many_partitions_layout() {
    let run = |seed, layout| {
        let options = Options {
            layout: Some(layout),
            ..options(Faults::Mixed)
        };
        run_seed(seed, options).err().map(|(v, _)| v)
    };
    assert_caught_only_with_many_partitions(
        Bug::RegistrationCapped,
        Invariant::RegistryMatches,
        PLANTED_SEEDS_MAX,
        run,
    );
}

#[test]
fn a_broker_stops_gracefully_while_zookeeper_is_unreachable() {
    for seed in 0..3 {
        match stop_while_zookeeper_is_unreachable(seed) {
            Ok(took) => assert!(took.as_secs() <= 20, "seed {seed}: the stop took {took:?}"),
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
}
