//! `cargo run -p tributary-sim --profile sim -- --seeds 1000 --faults mixed` runs a batch of
//! cluster seeds and prints a summary; `--seed S` replays one seed with its trace (client and
//! broker events). The `sim` profile is optimized with debug assertions on.

use std::process::ExitCode;
use std::time::Instant;

use tributary_sim::cluster::{run_seed, schedule, Faults, Options};

struct Args {
    seeds: u64,
    first: u64,
    one: Option<u64>,
    faults: Faults,
    duration_secs: u64,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        seeds: 100,
        first: 0,
        one: None,
        faults: Faults::Mixed,
        duration_secs: 60,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--seeds" => args.seeds = value()?.parse().map_err(|_| "--seeds takes a number")?,
            "--first-seed" => {
                args.first = value()?
                    .parse()
                    .map_err(|_| "--first-seed takes a number")?
            }
            "--seed" => args.one = Some(value()?.parse().map_err(|_| "--seed takes a number")?),
            "--faults" => args.faults = value()?.parse()?,
            "--duration" => {
                args.duration_secs = value()?.parse().map_err(|_| "--duration takes seconds")?
            }
            "--help" | "-h" => {
                println!("usage: tributary-sim [--seeds N] [--first-seed S] [--seed S] [--faults none|network|crash|mixed] [--duration SECS]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}; see --help")),
        }
    }
    Ok(args)
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
    let options = Options {
        duration_secs: args.duration_secs,
        faults: Some(args.faults),
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
    for seed in args.first..args.first + args.seeds {
        match run_seed(seed, options) {
            Ok(r) => {
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
        "{} seeds ({:?} faults, {} s each): {failures} failed; {simulated:.0} simulated s in {wall:.1} wall s ({:.1} sim s per wall s, {:.0} seeds/min); faults {faults:?}, {sync_failures} failed fsyncs; {produced} messages produced, {messages} placed by the history checker, {checked} entries re-checked, {expired} ZooKeeper sessions expired",
        args.seeds, args.faults, args.duration_secs, simulated / wall, args.seeds as f64 * 60.0 / wall
    );
    if failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
