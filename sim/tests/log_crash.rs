//! The log crash scenario over many seeds (see `tributary_sim::log_crash`).
//! `TRIBUTARY_LOG_CRASH_SEEDS=N` runs more; a failure prints the seed and how to replay it.

use tributary_sim::log_crash::run_seed;

const SEEDS_DEFAULT: u64 = 1000;

#[test]
fn logs_recover_everything_visible_after_a_crash_at_any_point() {
    let seeds = std::env::var("TRIBUTARY_LOG_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS_DEFAULT);
    let first = std::env::var("TRIBUTARY_LOG_CRASH_FIRST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0u64);
    let (mut mid_op, mut checked, mut appended, mut holes) = (0, 0, 0, 0);
    for seed in first..first + seeds {
        match run_seed(seed) {
            Ok(report) => {
                mid_op += usize::from(report.crashed_mid_operation);
                checked += report.sets_checked;
                appended += report.sets_appended;
                holes += report.holes_checked;
            }
            Err(failure) => panic!(
                "log crash seed {seed} failed: {failure}\nreplay: TRIBUTARY_LOG_CRASH_FIRST_SEED={seed} TRIBUTARY_LOG_CRASH_SEEDS=1 cargo test -p tributary-sim --test log_crash"
            ),
        }
    }
    eprintln!("{seeds} seeds: {appended} sets appended, {checked} visible sets and {holes} holes checked after recovery, {mid_op} crashes mid-operation");
    assert!(
        checked > 0 && mid_op > 0 && holes > 0,
        "the scenario must exercise recovery"
    );
}
