//! Time-based retention and OFFSETS-by-time keep working across a crash and restart.

#[test]
fn segments_keep_their_write_times_across_a_restart() {
    for seed in 0..6 {
        if let Err(e) = tributary_sim::retention_restart::run_seed(seed) {
            panic!("seed {seed}: {e}");
        }
    }
}
