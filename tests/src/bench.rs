//! What every benchmark shares with `scripts/bench.sh`: the quick mode and the summary rows.

/// Whether `TRIBUTARY_BENCH_QUICK` asks for the quick run (smaller volumes, one round), for a
/// regression check in about two minutes rather than a measurement to quote.
pub fn quick() -> bool {
    std::env::var_os("TRIBUTARY_BENCH_QUICK").is_some()
}

/// Prints one row of `scripts/bench.sh`'s table: the case, its figure, the same-run ceiling it
/// is compared with (name and figure), and the ratio. Rows start with `@@` and are
/// tab-separated, so the script can pick them out of the bench's own output.
pub fn row(case: &str, figure: &str, ceiling: &str, ratio: f64) {
    println!("@@\t{case}\t{figure}\t{ceiling}\t{ratio:.2}");
}
