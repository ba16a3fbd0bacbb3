//! Mirrored appends and their position records across a crash at any file-system operation
//! (`tributary_sim::mirror_positions`). `TRIBUTARY_POSITIONS_FIRST_SEED` and
//! `TRIBUTARY_POSITIONS_SEEDS` run another range.

use tributary_core::planted::{plant, Bug};

fn seeds(default: u64) -> std::ops::Range<u64> {
    let read = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let first = read("TRIBUTARY_POSITIONS_FIRST_SEED").unwrap_or(0);
    first..first + read("TRIBUTARY_POSITIONS_SEEDS").unwrap_or(default)
}

#[test]
fn data_and_positions_come_back_together_and_nothing_lands_twice() {
    plant(&[]);
    let range = seeds(300);
    let mut failed = Vec::new();
    for seed in range.clone() {
        if let Err(e) = tributary_sim::mirror_positions::run_seed(seed) {
            failed.push(format!("seed {seed}: {e}"));
        }
    }
    eprintln!(
        "mirror positions: {} seeds from {}, {} failed",
        range.end - range.start,
        range.start,
        failed.len()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn records_left_unsynced_by_a_flush_are_caught() {
    plant(&[Bug::PositionsNotSynced]);
    let caught = (0..100).find(|seed| tributary_sim::mirror_positions::run_seed(*seed).is_err());
    plant(&[]);
    assert!(
        caught.is_some(),
        "no seed of 100 caught a flush that leaves positions unsynced"
    );
}

#[test]
fn a_record_kept_past_the_data_the_crash_took_is_caught() {
    plant(&[Bug::PositionOutlivesData]);
    let caught = (0..100).find(|seed| tributary_sim::mirror_positions::run_seed(*seed).is_err());
    plant(&[]);
    eprintln!("PositionOutlivesData caught by seed {caught:?}");
    assert!(
        caught.is_some(),
        "no seed of 100 caught a recovery that keeps a record whose set the log lost"
    );
}
