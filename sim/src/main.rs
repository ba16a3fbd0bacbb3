//! `cargo run -p tributary-sim --profile sim -- --seeds 1000 --faults mixed` runs a batch of
//! cluster seeds and prints a summary; `--scenario mirror` runs the mirror scenario instead;
//! `--seed S` replays one seed with its trace (client, broker and mirror events). The `sim`
//! profile is optimized with debug assertions on.

use std::process::ExitCode;
use std::time::Instant;

use tributary::failure::Failure;
use tributary_sim::cluster::{run_seed, schedule, Faults, Layout, Options};

struct Args {
    scenario: Scenario,
    seeds: u64,
    first: u64,
    one: Option<u64>,
    faults: Faults,
    duration_secs: u64,
    /// `None`: each seed draws its layout.
    layout: Option<Layout>,
}

fn parse() -> Result<Args, Failure> {
    let mut args = Args {
        scenario: Scenario::Cluster,
        seeds: 100,
        first: 0,
        one: None,
        faults: Faults::Mixed,
        duration_secs: 60,
        layout: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--scenario" => {
                args.scenario = match value()?.as_str() {
                    "cluster" => Scenario::Cluster,
                    "mirror" => Scenario::Mirror,
                    "replica" => Scenario::Replica,
                    "failover" => Scenario::Failover,
                    "long-link" => Scenario::LongLink,
                    "active-active" => Scenario::ActiveActive,
                    "chain" => Scenario::Chain,
                    other => {
                        return Err(Failure::new(format!(
                            "unknown scenario {other}: cluster, mirror, replica, failover, long-link, active-active or chain"
                        )))
                    }
                }
            }
            "--seeds" => args.seeds = value()?.parse().map_err(|e| Failure::caused("--seeds takes a number", e))?,
            "--first-seed" => {
                args.first = value()?
                    .parse()
                    .map_err(|e| Failure::caused("--first-seed takes a number", e))?
            }
            "--seed" => args.one = Some(value()?.parse().map_err(|e| Failure::caused("--seed takes a number", e))?),
            "--faults" => args.faults = value()?.parse()?,
            "--layout" => args.layout = Some(value()?.parse()?),
            "--duration" => {
                args.duration_secs = value()?.parse().map_err(|e| Failure::caused("--duration takes seconds", e))?
            }
            "--help" | "-h" => {
                println!("usage: tributary-sim [--scenario cluster|mirror|replica|failover|long-link|active-active|chain] [--seeds N] [--first-seed S] [--seed S] [--faults none|network|crash|mixed] [--duration SECS] [--layout few|many] (cluster and mirror: the seed draws many partitions one time in five unless told)");
                std::process::exit(0);
            }
            other => return Err(Failure::new(format!("unknown argument {other}; see --help"))),
        }
    }
    Ok(args)
}

/// Which scenario a run drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Cluster,
    Mirror,
    Replica,
    LongLink,
    ActiveActive,
    Chain,
    Failover,
}

/// Log lines carry simulated time, not wall time.
struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(
            w,
            "{:>9.3}s",
            turmoil::sim_elapsed().unwrap_or_default().as_secs_f64()
        )
    }
}

fn main() -> ExitCode {
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        use tracing_subscriber::Layer;
        // The trace layer sees every event; RUST_LOG adds readable output in simulated time.
        let output = std::env::var_os("RUST_LOG").is_some().then(|| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_timer(SimTime)
                .with_ansi(false)
                .with_filter(tracing_subscriber::EnvFilter::from_default_env())
        });
        tracing_subscriber::registry()
            .with(tributary_sim::trace::layer())
            .with(output)
            .init();
    }
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.scenario == Scenario::Mirror {
        return run_mirror(&args);
    }
    if args.scenario == Scenario::Replica {
        return run_replica(&args);
    }
    if args.scenario == Scenario::Failover {
        return run_failover(&args);
    }
    if args.scenario == Scenario::LongLink {
        return run_long_link(&args);
    }
    if matches!(args.scenario, Scenario::ActiveActive | Scenario::Chain) {
        return run_topology(&args);
    }
    let options = Options {
        duration_secs: args.duration_secs,
        faults: Some(args.faults),
        layout: args.layout,
    };
    if let Some(seed) = args.one {
        for (t, fault) in schedule(
            seed,
            args.faults,
            std::time::Duration::from_secs(args.duration_secs),
        ) {
            println!("schedule {:>8.3}s {fault:?}", t.as_secs_f64());
        }
        return match run_seed(seed, options) {
            Ok(r) => {
                r.trace_tail.iter().for_each(|l| println!("{l}"));
                println!("seed {seed} passed: {r:?}");
                ExitCode::SUCCESS
            }
            Err((violation, r)) => {
                r.trace_tail.iter().for_each(|l| println!("{l}"));
                println!("seed {seed} FAILED: {violation}");
                ExitCode::from(1)
            }
        };
    }
    let start = Instant::now();
    let (mut simulated, mut failures, mut produced, mut checked, mut expired) =
        (0.0, 0u64, 0u64, 0usize, 0u64);
    let (mut messages, mut sync_failures) = (0u64, 0u64);
    let mut faults = std::collections::BTreeMap::new();
    let mut many = 0u64;
    for seed in args.first..args.first + args.seeds {
        match run_seed(seed, options) {
            Ok(r) => {
                many += u64::from(r.layout == Layout::Many);
                simulated += r.simulated.as_secs_f64();
                produced += r.produced;
                checked += r.entries_checked;
                expired += r.sessions_expired;
                messages += r.messages_checked;
                sync_failures += r.sync_failures;
                r.faults
                    .iter()
                    .for_each(|(k, v)| *faults.entry(*k).or_insert(0) += v);
            }
            Err((violation, r)) => {
                failures += 1;
                println!("seed {seed} FAILED: {violation}");
                r.trace_tail
                    .iter()
                    .rev()
                    .take(10)
                    .rev()
                    .for_each(|l| println!("  {l}"));
                println!("  replay: cargo run -p tributary-sim --profile sim -- --seed {seed} --faults {} --duration {}", format!("{:?}", args.faults).to_lowercase(), args.duration_secs);
            }
        }
    }
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{} seeds ({:?} faults, {} s each): {failures} failed ({many} passed with many partitions); {simulated:.0} simulated s in {wall:.1} wall s ({:.1} sim s per wall s, {:.0} seeds/min); faults {faults:?}, {sync_failures} failed fsyncs; {produced} messages produced, {messages} placed by the history checker, {checked} entries re-checked, {expired} ZooKeeper sessions expired",
        args.seeds, args.faults, args.duration_secs, simulated / wall, args.seeds as f64 * 60.0 / wall
    );
    if failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The long-link scenario: 0.7's settings and tuned ones on the same link, for each seed.
fn run_long_link(args: &Args) -> ExitCode {
    use tributary_sim::long_link::{run, Options};
    // 8 partitions of 32 MB: 256 MB across the link, about 2 s at its rate.
    let (partitions, bytes) = (8, 32_000_000);
    let seeds = args
        .one
        .map_or(args.first..args.first + args.seeds.min(3), |s| s..s + 1);
    let mut failed = false;
    for seed in seeds {
        for (name, options) in [
            (
                "0.7 settings (fetch.size 1 MiB, 1 fetcher)",
                Options::seven(partitions, bytes),
            ),
            (
                "tuned (fetch.size 2 MiB, a fetcher per partition)",
                Options::tuned(partitions, bytes),
            ),
        ] {
            let wall = Instant::now();
            match run(seed, &options) {
                Ok(r) => println!(
                    "seed {seed}, {name}: {:.1} MB/s steady = {:.2} of the {:.0} MB/s link ({} ms round trip); {} of {} bytes copied in {:.2} simulated s ({:.1} wall s)",
                    r.steady_rate / 1e6, r.ratio, options.link_rate as f64 / 1e6, options.round_trip.as_millis(),
                    r.copied_bytes, r.source_bytes, r.elapsed.as_secs_f64(), wall.elapsed().as_secs_f64()
                ),
                Err(e) => {
                    failed = true;
                    println!("seed {seed}, {name}: FAILED: {e}");
                }
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The topology scenarios: one seed replayed with its trace's tail, or a batch with a summary.
fn run_topology(args: &Args) -> ExitCode {
    use tributary_sim::topology::{run_seed, Options, Topology};
    let options = Options {
        duration: std::time::Duration::from_secs(args.duration_secs),
        faults: args.faults,
        topology: if args.scenario == Scenario::Chain {
            Topology::Chain
        } else {
            Topology::ActiveActive
        },
        rename: None,
    };
    let seeds = args
        .one
        .map_or(args.first..args.first + args.seeds, |s| s..s + 1);
    let wall = Instant::now();
    let (mut failed, mut runs) = (Vec::new(), 0u64);
    let mut faults: std::collections::BTreeMap<&'static str, u32> = Default::default();
    let mut acked: std::collections::BTreeMap<String, usize> = Default::default();
    let mut delivered: std::collections::BTreeMap<(String, String), usize> = Default::default();
    let (mut duplicates, mut copies_back, mut refusals, mut starts) = (0, 0, 0, 0u32);
    let mut copies_max = (0, 0);
    let mut shapes: std::collections::BTreeMap<String, u32> = Default::default();
    for seed in seeds {
        runs += 1;
        let report = match run_seed(seed, options) {
            Ok(r) => r,
            Err((violation, r)) => {
                println!("seed {seed} FAILED ({}): {violation}", r.shape);
                if args.one.is_some() {
                    r.trace_tail.iter().for_each(|l| println!("{l}"));
                }
                failed.push(seed);
                continue;
            }
        };
        if args.one.is_some() {
            report.trace_tail.iter().for_each(|l| println!("{l}"));
            println!("{report:?}");
        }
        *shapes
            .entry(
                report
                    .shape
                    .split(", queue")
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            )
            .or_default() += 1;
        for (k, n) in report.faults {
            *faults.entry(k).or_default() += n;
        }
        for (k, n) in report.acked {
            *acked.entry(k).or_default() += n;
        }
        for (k, n) in report.delivered {
            *delivered.entry(k).or_default() += n;
        }
        duplicates += report.duplicates;
        copies_back += report.copies_back;
        refusals += report.refusals;
        starts += report.mirror_starts;
        if report.copies_max.0 * copies_max.1.max(1) >= copies_max.0 * report.copies_max.1.max(1) {
            copies_max = report.copies_max;
        }
    }
    println!(
        "{runs} {:?} seeds ({:?} faults, {} s each): {} failed {failed:?}; {:.0} wall s; shapes {shapes:?}; faults {faults:?}; acknowledged {acked:?}; delivered (origin, cluster) {delivered:?}; {duplicates} duplicate copies; most copies of one message in one cluster {} (bound {}); copies back {copies_back}; {refusals} refusals logged; {starts} mirror starts",
        options.topology,
        args.faults,
        args.duration_secs,
        failed.len(),
        wall.elapsed().as_secs_f64(),
        copies_max.0,
        copies_max.1,
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// One mirror seed's schedule, the trace's last lines and its figures.
fn print_mirror_replay(r: &tributary_sim::mirror::MirrorReport) {
    println!("schedule:");
    r.schedule.iter().for_each(|l| println!("{l}"));
    println!("last trace lines:");
    r.trace_tail.iter().for_each(|l| println!("{l}"));
    println!(
        "{:?}, tiny retention {}, preserve partitions {}: {} acknowledged, {} in the mirror, {} duplicate copies (most re-forwarded by one ownership {} of {}), {} gaps ({} messages), {} commits checked, {} translations judged (at most {} re-read), drained after {:?}",
        r.mode, r.tiny_retention, r.preserve, r.acked, r.mirrored, r.duplicates, r.reforwards_max, r.reforward_bound, r.gaps, r.gap_messages, r.commits_checked, r.translations.judged, r.translations.rereads_max, r.drained_after
    );
    r.mirror_failures
        .iter()
        .for_each(|(reason, n)| println!("mirror stopped with an error {n} x: {reason}"));
}

/// The mirror scenario: one seed replayed with its trace, or a batch with a summary.
fn run_mirror(args: &Args) -> ExitCode {
    use tributary_sim::mirror::{run_seed, Options};
    let options = Options {
        duration: std::time::Duration::from_secs(args.duration_secs),
        faults: args.faults,
        mode: None,
        layout: args.layout,
    };
    let replay = |seed| {
        format!("cargo run -p tributary-sim --profile sim -- --scenario mirror --seed {seed} --faults {} --duration {}", format!("{:?}", args.faults).to_lowercase(), args.duration_secs)
    };
    if let Some(seed) = args.one {
        return match run_seed(seed, options) {
            Ok(r) => {
                print_mirror_replay(&r);
                println!("seed {seed} passed");
                ExitCode::SUCCESS
            }
            Err((violation, r)) => {
                print_mirror_replay(&r);
                println!("seed {seed} FAILED: {violation}");
                ExitCode::from(1)
            }
        };
    }
    let start = Instant::now();
    let (mut simulated, mut failures, mut acked, mut duplicates, mut gaps, mut commits) =
        (0.0, 0u64, 0usize, 0usize, 0usize, 0u64);
    let mut faults = std::collections::BTreeMap::new();
    let mut drains = Vec::new();
    // The most one ownership of a partition forwarded again, as a share of the stated bound.
    let mut worst_reforward = (0.0f64, 0usize, 0usize, 0u64);
    // The same, summed over all partitions of one ownership, and the seeds past the bound.
    let mut worst_owner = (0.0f64, 0usize, 0usize, 0u64);
    let mut owner_past_bound = Vec::new();
    let mut mirror_failures: std::collections::BTreeMap<String, u32> = Default::default();
    // (seeds, acknowledged, duplicate copies) with mirror.preserve.partitions on and off.
    let mut by_preserve = [(0u64, 0usize, 0usize); 2];
    // Translations judged (S33), and the most messages one of them re-reads.
    let (mut translations, mut rereads_max) = (0usize, 0usize);
    for seed in args.first..args.first + args.seeds {
        match run_seed(seed, options) {
            Ok(r) => {
                simulated += r.simulated.as_secs_f64();
                acked += r.acked;
                duplicates += r.duplicates;
                let split = &mut by_preserve[usize::from(r.preserve)];
                *split = (split.0 + 1, split.1 + r.acked, split.2 + r.duplicates);
                translations += r.translations.judged;
                rereads_max = rereads_max.max(r.translations.rereads_max);
                gaps += r.gaps;
                commits += r.commits_checked;
                for (reason, n) in &r.mirror_failures {
                    *mirror_failures.entry(reason.clone()).or_insert(0) += n;
                }
                let share = r.reforwards_max as f64 / r.reforward_bound.max(1) as f64;
                if share > worst_reforward.0 {
                    worst_reforward = (share, r.reforwards_max, r.reforward_bound, seed);
                }
                let owner_share = r.reforwards_owner_max as f64 / r.reforward_bound.max(1) as f64;
                if owner_share > worst_owner.0 {
                    worst_owner = (owner_share, r.reforwards_owner_max, r.reforward_bound, seed);
                }
                if r.reforwards_owner_max > r.reforward_bound {
                    owner_past_bound.push(seed);
                }
                if let Some(drained) = r.drained_after {
                    if drained > std::time::Duration::from_secs(30) {
                        println!("seed {seed}: the lag took {drained:?} to drain after healing");
                    }
                    drains.push(drained);
                }
                r.faults
                    .iter()
                    .for_each(|(k, v)| *faults.entry(*k).or_insert(0) += v);
            }
            Err((violation, r)) => {
                failures += 1;
                println!("seed {seed} FAILED: {violation}");
                r.trace_tail
                    .iter()
                    .rev()
                    .take(10)
                    .rev()
                    .for_each(|l| println!("  {l}"));
                println!("  replay: {}", replay(seed));
            }
        }
        if (seed + 1 - args.first).is_multiple_of(25) {
            eprintln!(
                "  {} of {} seeds, {failures} failed",
                seed + 1 - args.first,
                args.seeds
            );
        }
    }
    drains.sort();
    let wall = start.elapsed().as_secs_f64();
    for (preserve, (seeds, acked, duplicates)) in [(true, by_preserve[1]), (false, by_preserve[0])]
    {
        println!(
            "mirror.preserve.partitions={preserve}: {seeds} seeds, {acked} acknowledged, {duplicates} duplicate copies ({:.2} %)",
            100.0 * duplicates as f64 / acked.max(1) as f64
        );
    }
    println!(
        "{translations} source offsets translated and judged; one translation re-reads at most {rereads_max} messages"
    );
    println!(
        "{} mirror seeds ({:?} faults, {} s each): {failures} failed; {simulated:.0} simulated s in {wall:.1} wall s ({:.1} sim s per wall s); faults {faults:?}; {acked} acknowledged messages checked, {duplicates} duplicate copies (one ownership re-forwarded at most {} messages against a bound of {}, {:.0} % of it, seed {}), {gaps} gaps reported, {commits} commits checked; lag drained in {:?} (median), {:?} (worst)",
        args.seeds,
        args.faults,
        args.duration_secs,
        simulated / wall,
        worst_reforward.1,
        worst_reforward.2,
        worst_reforward.0 * 100.0,
        worst_reforward.3,
        drains.get(drains.len() / 2).copied().unwrap_or_default(),
        drains.last().copied().unwrap_or_default()
    );
    println!(
        "summed over one ownership's partitions: at most {} re-forwarded against a bound of {} ({:.0} %, seed {}); past the bound on seeds {owner_past_bound:?}",
        worst_owner.1,
        worst_owner.2,
        worst_owner.0 * 100.0,
        worst_owner.3
    );
    let stopped: u32 = mirror_failures.values().sum();
    println!(
        "mirrors that stopped with an error (started again, as a supervisor would): {stopped}"
    );
    let mut reasons: Vec<_> = mirror_failures.into_iter().collect();
    reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
    reasons
        .iter()
        .take(8)
        .for_each(|(reason, n)| println!("  {n} x {reason}"));
    if failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The replica scenario: one seed replayed with its trace, or a batch with a summary.
fn run_replica(args: &Args) -> ExitCode {
    use tributary_sim::replica::{run_seed, Options};
    let options = Options {
        duration: std::time::Duration::from_secs(args.duration_secs),
        faults: args.faults,
    };
    if let Some(seed) = args.one {
        let (outcome, r) = match run_seed(seed, options) {
            Ok(r) => (format!("seed {seed} passed"), r),
            Err((violation, r)) => (format!("seed {seed} FAILED: {violation}"), r),
        };
        r.trace_tail.iter().for_each(|l| println!("{l}"));
        println!(
            "faults {:?}; {} acknowledged, {} partitions ({} bytes) identical, {} synced offsets checked, caught up after {:?}; promoted at {:?}, then {} acknowledged by the replica cluster; gap seed {}: {} holes, {} source bytes never seen by the checker",
            r.faults, r.acked, r.partitions, r.bytes_compared, r.syncs_checked, r.drained_after, r.promoted_at, r.failover_acked, r.tiny_retention, r.holes, r.bytes_unseen
        );
        println!("{outcome}");
        return if outcome.contains("FAILED") {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        };
    }
    let start = Instant::now();
    let (mut simulated, mut failures, mut acked, mut bytes, mut syncs) =
        (0.0, 0u64, 0usize, 0usize, 0u64);
    let (mut promotions, mut failover_acked) = (0u64, 0usize);
    let (mut gap_seeds, mut holes, mut unseen) = (0u64, 0usize, 0usize);
    let mut faults = std::collections::BTreeMap::new();
    let mut drains = Vec::new();
    for seed in args.first..args.first + args.seeds {
        match run_seed(seed, options) {
            Ok(r) => {
                simulated += r.simulated.as_secs_f64();
                promotions += u64::from(r.promoted_at.is_some());
                failover_acked += r.failover_acked;
                gap_seeds += u64::from(r.tiny_retention);
                holes += r.holes;
                unseen += r.bytes_unseen;
                acked += r.acked;
                bytes += r.bytes_compared;
                syncs += r.syncs_checked;
                drains.extend(r.drained_after);
                r.faults
                    .iter()
                    .for_each(|(k, v)| *faults.entry(*k).or_insert(0) += v);
            }
            Err((violation, r)) => {
                failures += 1;
                println!("seed {seed} FAILED: {violation}");
                r.trace_tail
                    .iter()
                    .rev()
                    .take(10)
                    .rev()
                    .for_each(|l| println!("  {l}"));
                println!(
                    "  replay: cargo run -p tributary-sim --profile sim -- --scenario replica --seed {seed} --faults {} --duration {}",
                    format!("{:?}", args.faults).to_lowercase(),
                    args.duration_secs
                );
            }
        }
    }
    drains.sort();
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{} replica seeds ({:?} faults, {} s each): {failures} failed; {simulated:.0} simulated s in {wall:.1} wall s ({:.1} sim s per wall s); faults {faults:?}; {acked} acknowledged messages, {bytes} bytes compared identical, {syncs} synced offsets checked; {promotions} promotions, then {failover_acked} messages acknowledged by the replica cluster; {gap_seeds} gap seeds: {holes} holes, {unseen} source bytes deleted before the checker saw them; caught up in {:?} (median), {:?} (worst)",
        args.seeds,
        args.faults,
        args.duration_secs,
        simulated / wall,
        drains.get(drains.len() / 2).copied().unwrap_or_default(),
        drains.last().copied().unwrap_or_default()
    );
    if failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn run_failover(args: &Args) -> ExitCode {
    use tributary_sim::failover::{run_seed, Options};
    let options = Options {
        duration: std::time::Duration::from_secs(args.duration_secs),
        faults: args.faults,
    };
    let describe = |r: &tributary_sim::failover::FailoverReport| {
        format!(
            "faults {:?}; acknowledged {:?}; first produce on b {:?} after the disaster; {} acknowledged by a and never copied (kept in diverged files, {} messages there); re-read {} at the failover, {} at the switchback; drill completed: {}",
            r.faults, r.acked, r.first_produce_after, r.lost_at_disaster, r.diverged, r.rereads.0, r.rereads.1, r.completed
        )
    };
    if let Some(seed) = args.one {
        let (outcome, r) = match run_seed(seed, options) {
            Ok(r) => (format!("seed {seed} passed"), r),
            Err((violation, r)) => (format!("seed {seed} FAILED: {violation}"), r),
        };
        r.trace_tail.iter().for_each(|l| println!("{l}"));
        println!("{}", describe(&r));
        println!("{outcome}");
        return if outcome.contains("FAILED") {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        };
    }
    let start = Instant::now();
    let (mut simulated, mut failures, mut lost, mut diverged) = (0.0, 0u64, 0usize, 0usize);
    let (mut rereads, mut first_produce) = ((0usize, 0usize), Vec::new());
    let mut acked: std::collections::BTreeMap<&'static str, usize> =
        std::collections::BTreeMap::new();
    let mut faults = std::collections::BTreeMap::new();
    for seed in args.first..args.first + args.seeds {
        match run_seed(seed, options) {
            Ok(r) => {
                simulated += r.simulated.as_secs_f64();
                lost += r.lost_at_disaster;
                diverged += r.diverged;
                rereads.0 += r.rereads.0;
                rereads.1 += r.rereads.1;
                first_produce.extend(r.first_produce_after);
                r.acked
                    .iter()
                    .for_each(|(k, v)| *acked.entry(k).or_insert(0) += v);
                r.faults
                    .iter()
                    .for_each(|(k, v)| *faults.entry(*k).or_insert(0) += v);
            }
            Err((violation, r)) => {
                failures += 1;
                println!("seed {seed} FAILED: {violation}");
                r.trace_tail
                    .iter()
                    .rev()
                    .take(10)
                    .rev()
                    .for_each(|l| println!("  {l}"));
                println!(
                    "  replay: cargo run -p tributary-sim --profile sim -- --scenario failover --seed {seed} --faults {} --duration {}",
                    format!("{:?}", args.faults).to_lowercase(),
                    args.duration_secs
                );
            }
        }
    }
    first_produce.sort();
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{} failover seeds ({:?} faults, {} s each): {failures} failed; {simulated:.0} simulated s in {wall:.1} wall s; faults {faults:?}; acknowledged {acked:?}; {lost} acknowledged by a and never copied before the disaster, all in diverged files ({diverged} messages there); re-read {} at the failovers, {} at the switchbacks; first produce on b after the disaster {:?} (median), {:?} (worst)",
        args.seeds,
        args.faults,
        args.duration_secs,
        rereads.0,
        rereads.1,
        first_produce.get(first_produce.len() / 2).copied().unwrap_or_default(),
        first_produce.last().copied().unwrap_or_default()
    );
    if failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
