//! Test support shared by the scenario suites: the search for the seed that catches a planted
//! bug (planting needs the test-only `planted-bugs` feature, so it lives here, not in the
//! library the runner is built from).

#![allow(dead_code)]

use tributary_core::planted::{plant, Bug};
use tributary_sim::cluster::Layout;
use tributary_sim::invariants::{Invariant, Violation};

/// The first seed that caught a planted bug: the seed, what the invariant said, and the seeds
/// before it that broke another invariant.
#[derive(Debug, Clone)]
pub struct Caught {
    /// The seed.
    pub seed: u64,
    /// The violation's detail.
    pub detail: String,
    /// Earlier seeds that broke another invariant, and which.
    pub others: Vec<(u64, Invariant)>,
}

/// Runs `run` (a seed's violation, if any) on seeds `0..seeds` with `bug` planted (on this
/// thread) until one breaks `expected` — a bug can do more than one kind of damage, so others
/// are noted and the search goes on. The bug is cleared before returning.
pub fn first_seed_caught_by(
    bug: Bug,
    expected: Invariant,
    seeds: u64,
    run: impl Fn(u64) -> Option<Violation>,
) -> Option<Caught> {
    plant(&[bug]);
    let mut others = Vec::new();
    let found = (0..seeds).find_map(|seed| match run(seed) {
        Some(v) if v.invariant == expected => Some((seed, v.detail)),
        Some(v) => {
            others.push((seed, v.invariant));
            None
        }
        None => None,
    });
    plant(&[]);
    found.map(|(seed, detail)| Caught {
        seed,
        detail,
        others,
    })
}

/// For each `(bug, faults, expected)`: the first of `seeds` seeds that catches `bug` must break
/// `expected` (other invariants first at most 3 times), and the clean build must pass that same
/// seed. `run` runs one seed with one fault mode and returns its violation, if any.
pub fn assert_each_caught<F: Copy + std::fmt::Debug>(
    cases: &[(Bug, F, Invariant)],
    seeds: u64,
    run: impl Fn(u64, F) -> Option<Violation>,
) {
    for &(bug, faults, expected) in cases {
        let Caught {
            seed,
            detail,
            others,
        } = first_seed_caught_by(bug, expected, seeds, |seed| run(seed, faults)).unwrap_or_else(
            || panic!("{bug:?} was not caught by {expected:?} within {seeds} seeds ({faults:?})"),
        );
        eprintln!("{bug:?} caught by seed {seed}: {expected:?}: {detail} (earlier seeds broke: {others:?})");
        assert!(
            others.len() <= 3,
            "{bug:?}: other invariants caught it first too often: {others:?}"
        );
        if let Some(violation) = run(seed, faults) {
            panic!("clean build fails seed {seed} too: {violation}");
        }
    }
}

/// For a bug only many partitions show: the first of `seeds` seeds run with
/// `Layout::Many` that catches `bug` must break `expected` (other invariants first at most 3
/// times); the clean build must pass that seed, and so must that seed run with `Layout::Few`
/// and the bug planted — the layout, not the seed, is what catches it. `run` runs one seed in
/// one layout and returns its violation, if any.
pub fn assert_caught_only_with_many_partitions(
    bug: Bug,
    expected: Invariant,
    seeds: u64,
    run: impl Fn(u64, Layout) -> Option<Violation>,
) {
    let Caught {
        seed,
        detail,
        others,
    } = first_seed_caught_by(bug, expected, seeds, |seed| run(seed, Layout::Many))
        .unwrap_or_else(|| panic!("{bug:?} was not caught by {expected:?} within {seeds} seeds"));
    eprintln!("{bug:?} caught by seed {seed} (many partitions): {detail} (earlier: {others:?})");
    assert!(others.len() <= 3, "other invariants first: {others:?}");
    let clean = run(seed, Layout::Many);
    assert!(clean.is_none(), "clean build fails seed {seed}: {clean:?}");
    plant(&[bug]);
    let few = run(seed, Layout::Few);
    plant(&[]);
    assert!(
        few.is_none(),
        "seed {seed} with few partitions and {bug:?} planted: {few:?}"
    );
}

/// The seeds of half `half` (0 or 1) of a batch of `seeds`. The suites run each batch as two
/// tests, so that the two test threads share it instead of one waiting out the other.
pub fn half_of(seeds: u64, half: u64) -> std::ops::Range<u64> {
    let middle = seeds / 2;
    if half == 0 {
        0..middle
    } else {
        middle..seeds
    }
}

/// What a determinism test compares of one run: its trace's hash, the trace's last lines (for
/// the report) and the figures the run must reproduce.
pub struct Traced<F> {
    /// The hash of the whole trace.
    pub hash: u64,
    /// The trace's last lines.
    pub tail: Vec<String>,
    /// Figures that must come out the same.
    pub figures: F,
}

/// Runs `run`, then again after each task-id shift in `shifts`
/// (`tributary_sim::host::shift_task_ids`), and requires every run to give the first's trace
/// and figures; `what` names the run in a failure.
pub fn assert_same_trace<F: PartialEq + std::fmt::Debug>(
    what: &str,
    shifts: &[usize],
    run: impl Fn() -> Traced<F>,
) {
    let first = run();
    for &shift in shifts {
        tributary_sim::host::shift_task_ids(shift);
        let again = run();
        assert_eq!(
            first.hash,
            again.hash,
            "{what}: traces differ after a task-id shift of {shift}; {}",
            tributary_sim::trace::first_difference(&first.tail, &again.tail)
        );
        assert_eq!(first.figures, again.figures, "{what}: figures differ");
    }
}

/// A simulation of `seconds` with the ZooKeeper model serving on `zk:2181`, and the model's
/// state (to inspect it, or to crash and restart the server).
pub fn zk_model_world(
    seconds: u64,
) -> (
    turmoil::Sim<'static>,
    std::sync::Arc<std::sync::Mutex<tributary_sim::zk_model::ModelState>>,
) {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(std::time::Duration::from_secs(seconds))
        .build();
    let model = std::sync::Arc::new(std::sync::Mutex::new(
        tributary_sim::zk_model::ModelState::default(),
    ));
    let served = model.clone();
    sim.host("zk", move || {
        let served = served.clone();
        async move {
            tributary_sim::zk_model::serve(2181, served)
                .await
                .map_err(Into::into)
        }
    });
    (sim, model)
}
