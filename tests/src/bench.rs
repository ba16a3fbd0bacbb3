//! What every benchmark shares with `scripts/bench.sh`: the quick mode, the summary rows, and
//! CPU accounting by thread. Plain `std`, so that the `bins` benches include this very file
//! (`#[path]`) instead of keeping copies.

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

/// A row of the table with no ceiling: a figure stated on its own (ceiling and ratio `-`).
pub fn point(case: &str, figure: &str) {
    println!("@@\t{case}\t{figure}\t-\t-");
}

/// CPU time (ns) spent so far by this process's threads whose name `counts` accepts, from
/// `/proc/self/task/*/schedstat` (a thread's name is its first 15 bytes).
/// Threads that exit meanwhile drop out (their time with them); a thread that exits between
/// the listing and the read is skipped. Without `/proc` there is nothing to measure: it panics.
pub fn thread_cpu_ns(counts: impl Fn(&str) -> bool) -> u64 {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task (CPU accounting)");
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|name| counts(name.trim_end()))
        })
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// This process's resident set and its peak so far, in bytes (`/proc/self/status`).
pub fn rss() -> (u64, u64) {
    let status =
        std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (memory figures)");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} is not in /proc/self/status"))
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The thread name the benches give brokers' runtimes, so that their CPU time can be told
/// apart from the component measured.
pub const BROKER_THREAD_NAME: &str = "bench-broker";
