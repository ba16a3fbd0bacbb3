//! The mirror scenario: a batch of mixed-fault seeds on the clean build, determinism, and proof
//! that each mirror invariant's checker catches the bug planted for it. A failure prints the
//! seed and how to replay it.

use crate::support;

/// Topics decided ahead of their first messages, many at once.
#[path = "directed/decide_ahead.rs"]
mod decide_ahead;
/// A mirror's messages given up on while the mirror cluster's disk is full: the next ones are
/// refused, not appended past them.
#[path = "directed/disk_full.rs"]
mod disk_full;
/// A held message whose partition moves in the same epoch, built step by step (no seed reaches
/// it reliably).
#[path = "directed/held_message.rs"]
mod held_message;
/// Source partitions located ahead of their first messages, their records all at once.
#[path = "directed/place_ahead.rs"]
mod place_ahead;
/// Two members placing one new source partition while they see the brokers differently, built
/// step by step (drawn seeds reach it about twice in a thousand).
#[path = "directed/placement_race.rs"]
mod placement_race;
/// A mirror producer's two lanes: two source partitions in flight together, one never twice.
#[path = "directed/two_lanes.rs"]
mod two_lanes;

use std::collections::BTreeMap;
use std::time::Duration;

use support::{
    assert_caught_only_with_many_partitions, assert_each_caught, assert_same_trace, half_of, Traced,
};
use tributary_core::planted::Bug;
use tributary_sim::cluster::Faults;
use tributary_sim::invariants::Invariant;
use tributary_sim::mirror::{run_seed, Options};

const BATCH_SEEDS: u64 = 72;
const SIM_SECONDS: u64 = 60;
/// Seeds a planted bug gets to show up in (at most 100).
const PLANTED_SEEDS_MAX: u64 = 100;

fn options(faults: Faults) -> Options {
    Options {
        duration: Duration::from_secs(SIM_SECONDS),
        faults,
        mode: None,
        layout: None,
    }
}

#[test]
fn mixed_faults_never_break_a_mirror_invariant_first_half() {
    mixed_faults_never_break_a_mirror_invariant(0);
}

#[test]
fn mixed_faults_never_break_a_mirror_invariant_second_half() {
    mixed_faults_never_break_a_mirror_invariant(1);
}

/// One half of the batch (`TRIBUTARY_MIRROR_SEEDS` seeds in all, `BATCH_SEEDS` by default).
fn mixed_faults_never_break_a_mirror_invariant(half: u64) {
    let all: u64 = std::env::var("TRIBUTARY_MIRROR_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(BATCH_SEEDS);
    let range = half_of(all, half);
    let seeds = range.end - range.start;
    let started = std::time::Instant::now();
    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let (
        mut acked,
        mut mirrored,
        mut duplicates,
        mut gaps,
        mut gap_messages,
        mut commits,
        mut simulated,
    ) = (0, 0, 0, 0, 0, 0, 0.0);
    let (mut worst_ratio, mut drains, mut modes) = (0.0f64, Vec::new(), BTreeMap::new());
    for seed in range {
        match run_seed(seed, options(Faults::Mixed)) {
            Ok(r) => {
                r.faults.iter().for_each(|(k, v)| *faults.entry(k).or_insert(0) += v);
                acked += r.acked;
                mirrored += r.mirrored;
                duplicates += r.duplicates;
                gaps += r.gaps;
                gap_messages += r.gap_messages;
                commits += r.commits_checked;
                simulated += r.simulated.as_secs_f64();
                worst_ratio = worst_ratio.max(r.reforwards_max as f64 / r.reforward_bound.max(1) as f64);
                drains.extend(r.drained_after);
                assert!(
                    r.mirror_failures.is_empty(),
                    "mirror seed {seed}: a mirror stopped with an error under faults it must ride out: {:?}",
                    r.mirror_failures
                );
                *modes.entry(format!("{:?}", r.mode)).or_insert(0) += 1;
                *modes.entry(format!("{:?}", r.layout)).or_insert(0) += 1;
            }
            Err((violation, r)) => panic!(
                "mirror seed {seed} failed: {violation}\n{}\nreplay: cargo run -p tributary-sim --profile sim -- --scenario mirror --seed {seed} --faults mixed --duration {SIM_SECONDS}",
                r.trace_tail.join("\n")
            ),
        }
    }
    drains.sort();
    let median = drains.get(drains.len() / 2).copied().unwrap_or_default();
    let worst = drains.last().copied().unwrap_or_default();
    let wall = started.elapsed().as_secs_f64();
    eprintln!(
        "{seeds} mirror seeds x {SIM_SECONDS} s ({modes:?}): {simulated:.0} simulated s in {wall:.0} wall s ({:.0} sim s per wall s); faults {faults:?}; \
         {acked} acknowledged source messages, {mirrored} found in the mirror, {gap_messages} lost to retention inside {gaps} reported gaps; \
         {duplicates} duplicate copies; worst re-forward at {:.0}% of the bound; {commits} commits checked; lag drained after healing in {median:?} (median), {worst:?} (worst)",
        simulated / wall,
        worst_ratio * 100.0
    );
    assert!(
        acked > 0 && commits > 0 && gaps > 0,
        "the batch must mirror, commit and meet gaps"
    );
    assert!(
        modes.contains_key("Many"),
        "the batch never ran many partitions: {modes:?}"
    );
    for kind in [
        "link between the clusters cut",
        "host cut from a ZooKeeper",
        "source broker crash",
        "mirror broker crash",
        "mirror maker crash",
        "mirror broker graceful restart",
        "mirror maker graceful restart",
    ] {
        assert!(faults.contains_key(kind), "the batch never injected {kind}");
    }
}

/// Seed 98,093 (two streams, a window of 32 messages, runs of two, no positions): with the
/// mirror cluster's second broker down and the producer's queue full, a rebalance keeps a
/// source partition with this member but moves it to its other stream, in the same epoch. A
/// stream that had recorded a run told each message as forwarded only as it reached the
/// producer, so the rest of its run came after the other stream's later messages. A run is now
/// forwarded whole as it is recorded, before any of it waits for the producer.
#[test]
fn a_run_is_never_forwarded_after_later_messages_of_its_partition() {
    replay(98_093);
}

/// Seed 99,305: the mirror member's ZooKeeper session ended while a stream was stalled
/// handing over a run of its ownership (epoch 4); the rest of that run reached the producer's
/// queue among the next ownership's messages (epoch 6), and one set joined epoch 4's last
/// messages (27,621..27,771) to epoch 6's message 28,346..28,371, claiming 27,621..28,371.
/// The mirror partition took 27,771..28,346 for held, and lost it. A set now holds only
/// messages that each start where the one before resumes.
#[test]
fn a_set_never_claims_source_offsets_it_does_not_hold() {
    replay(99_305);
}

/// Runs mirror `seed` with mixed faults; a violation fails the test with the trace's tail.
fn replay(seed: u64) {
    if let Err((violation, r)) = run_seed(seed, options(Faults::Mixed)) {
        panic!(
            "mirror seed {seed} failed: {violation}\n{}",
            r.trace_tail.join("\n")
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    // One seed, for CI time: the replica and cluster suites check determinism on their own
    // seeds, and every scenario runs on the same simulated host.
    let seed = 2;
    assert_same_trace(&format!("seed {seed}"), &[2], || {
        let r = run_seed(seed, options(Faults::Mixed))
            .map_err(|(v, _)| v)
            .unwrap();
        Traced {
            hash: r.trace_hash,
            tail: r.trace_tail,
            figures: (r.acked, r.duplicates, r.commits_checked),
        }
    });
}

#[test]
fn each_planted_mirror_bug_is_caught_by_its_invariant_and_the_clean_build_passes_the_same_seed() {
    let cases = [
        (
            Bug::MirrorCommitQueued,
            Faults::Mixed,
            Invariant::MirrorCommitSafety,
        ),
        // The first sign of a dropped message is the commit past it: nothing acknowledged it.
        (
            Bug::MirrorDropOnFull,
            Faults::Mixed,
            Invariant::MirrorCommitSafety,
        ),
        // An acknowledgement a broker crash takes back: the message is gone.
        (Bug::AckBeforeFlush, Faults::Crash, Invariant::MirrorNoLoss),
        (Bug::SkipGapSilently, Faults::Mixed, Invariant::MirrorGaps),
        (
            Bug::ServeUnflushed,
            Faults::Crash,
            Invariant::MirrorNoPhantom,
        ),
        // A member that lost a partition commits for it what it forwarded there: offsets
        // nothing acknowledged (it also duplicates past the bound, and its commits lose).
        (
            Bug::KeepLostPartitions,
            Faults::Mixed,
            Invariant::MirrorCommitSafety,
        ),
        // Lag gauges that stop following the mirror: the dashboard shows a lag (or no
        // partition at all) the clusters do not have.
        (Bug::MirrorLagFrozen, Faults::None, Invariant::MirrorMetrics),
        // A member that takes its restored old session's registration for its own after a
        // ZooKeeper restart is unregistered when that session expires, and owns nothing: the
        // mirror stops copying.
        (
            Bug::TrustStaleEphemerals,
            Faults::Crash,
            Invariant::MirrorProgress,
        ),
        // A broker that appends every mirrored set, held or not: what is sent again after a
        // fault is copied twice.
        (
            Bug::MirrorPositionsIgnored,
            Faults::Mixed,
            Invariant::MirrorExactlyOnce,
        ),
        // A set whose start the partition holds taken as wholly held: its new messages are
        // acknowledged and committed, never appended.
        (
            Bug::MirrorOverlapTakenAsHeld,
            Faults::Mixed,
            Invariant::MirrorNoLoss,
        ),
        // A translation one recorded set too far: a reader moved there skips the rest of
        // the set holding its offset.
        (
            Bug::TranslationOneSetTooFar,
            Faults::None,
            Invariant::MirrorTranslation,
        ),
    ];
    assert_each_caught(&cases, PLANTED_SEEDS_MAX, |seed, faults| {
        run_seed(seed, options(faults)).err().map(|(v, _)| v)
    });
}

/// A bug only many partitions show: the many-partitions layout catches it, the clean build
/// passes the seed that does, and so does that seed with the bug planted when the source has
/// the usual eight partitions.
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
        Bug::CommitCapped,
        Invariant::MirrorProgress,
        PLANTED_SEEDS_MAX,
        run,
    );
}
