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

/// CPU time (ns) the whole machine has spent busy since boot: every core, every process, from
/// the first line of `/proc/stat` (user, nice, system, irq, softirq and steal; not idle and not
/// I/O wait), in clock ticks of 10 ms. The busy cores over a case, set beside the machine's
/// cores, say whether the case was bound by the CPU or waited on something else. Without
/// `/proc` there is nothing to measure: it panics.
pub fn machine_busy_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat (CPU accounting)");
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .expect("/proc/stat starts with the machine's cpu line")
        .split_whitespace()
        .map(|t| t.parse().expect("/proc/stat: a tick count"))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| ticks.get(*i))
        .sum();
    busy * 10_000_000
}

/// The cores this machine has.
pub fn machine_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Bytes free to an unprivileged writer on the file system holding `path`, from `df -Pk`;
/// `None` when `df` cannot be run or its answer is not understood (the caller says so).
pub fn free_bytes(path: &std::path::Path) -> Option<u64> {
    let out = std::process::Command::new("df")
        .arg("-Pk")
        .arg(path)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    // POSIX format: a header line, then "filesystem blocks used available capacity mount".
    let text = String::from_utf8(out.stdout).ok()?;
    let kib: u64 = text
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kib * 1024)
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

/// The number in the environment variable `name`, or `default` when it is unset. A value that
/// is not a number stops the bench and says so, rather than measuring something not asked for.
pub fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            panic!("{name}={text:?} is not a whole number (unset it for the default, {default})")
        }),
    }
}

/// Touches up to `TRIBUTARY_BENCH_TOUCH_GIB` (default 12, at most half of the memory available)
/// of this machine's memory once and frees it, and says how much. On a VM whose host backs guest
/// memory on first touch, a bench that grows the page cache into memory the guest never used
/// pays a host fault per page, which is the VM's cost and not the code's: a 1 KiB produce over
/// one connection measured 0.05 of the plain file after the cases before it had grown the page
/// cache, and 0.9 alone. Touched once, freed memory stays backed, so every case after this one
/// meets the same memory.
pub fn touch_memory() {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024);
    let wanted = env_number("TRIBUTARY_BENCH_TOUCH_GIB", 12) << 30;
    let bytes = wanted.min(available / 2);
    const CHUNK: usize = 256 << 20;
    let started = std::time::Instant::now();
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut touched = 0u64;
    while touched + CHUNK as u64 <= bytes {
        let mut chunk: Vec<u8> = Vec::with_capacity(CHUNK);
        // One write per page makes the kernel (and the host) back it.
        for page in (0..CHUNK).step_by(4096) {
            chunk.spare_capacity_mut()[page].write(1);
        }
        // The writes must happen although nothing reads them.
        held.push(std::hint::black_box(chunk));
        touched += CHUNK as u64;
    }
    drop(held);
    eprintln!(
        "touched {:.1} GiB of memory in {:.1} s (the VM's first-touch cost, paid before any case)",
        touched as f64 / (1u64 << 30) as f64,
        started.elapsed().as_secs_f64()
    );
}
