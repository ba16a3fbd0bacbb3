//! Time-based retention and OFFSETS-by-time across a restart.
//!
//! A broker host writes one segment every `gap` simulated minutes, then crashes and restarts.
//! After the restart, segments must keep the times they were written at (file modification
//! times count from the simulation's fixed epoch, as the log's clock does): OFFSETS by time
//! finds each segment by its write time, and retention deletes exactly the segments older
//! than `log.retention.hours`, no more and no fewer.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tributary::failure::Failure;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::log::{Log, LogManager, TopicPartition};
use tributary_core::message::{CompressionCodec, MessageSetBuilder};

use crate::env::sim_now_ms;
use crate::sim_fs::{sim_builder, CrashPoint, SimFs};
use crate::stepping::{lock_state, step_until};

type Manager = LogManager<SimFs, Mutex<Log<SimFs>>>;

const MINUTE_MS: i64 = 60_000;
/// Segments written before the crash.
const SEGMENTS: usize = 3;
/// Simulation steps allowed before the scenario is declared stuck.
const STEPS_MAX: u32 = 1_000_000;

#[derive(Debug, Default)]
struct Shared {
    /// (segment start offset, write time in ms) of each segment, oldest first.
    written: Vec<(i64, i64)>,
    writer_done: bool,
    result: Option<Result<(), Failure>>,
}

fn config() -> BrokerConfig {
    // Every set rolls a new segment (log.file.size below two sets); retention: one hour.
    let text = "brokerid=0\nlog.dir=/data/logs\nenable.zookeeper=false\nlog.file.size=20\nlog.flush.interval=1\nlog.retention.hours=1\n";
    match BrokerConfig::from_properties(&Properties::parse("sim", text).unwrap_or_default()) {
        Ok(config) => config,
        Err(e) => panic!("scenario config refused: {e}"),
    }
}

fn tp() -> TopicPartition {
    TopicPartition::new(
        "timed"
            .parse()
            .unwrap_or_else(|_| panic!("a valid topic name")),
        0,
    )
}

fn lock(log: &Mutex<Log<SimFs>>) -> std::sync::MutexGuard<'_, Log<SimFs>> {
    log.lock()
        .unwrap_or_else(|_| panic!("the partition lock was poisoned by an earlier panic"))
}

/// Runs the scenario for `seed` (which varies the gap between segments and the crash time).
pub fn run_seed(seed: u64) -> Result<(), Failure> {
    let gap_minutes = 15 + (seed % 10) as i64;
    let mut sim = sim_builder(seed)
        .simulation_duration(Duration::from_secs(6 * 3600))
        .tick_duration(Duration::from_secs(1))
        .build();
    let shared = Arc::new(Mutex::new(Shared::default()));
    let phase = Arc::new(AtomicU8::new(0));
    {
        let (shared, phase) = (shared.clone(), phase.clone());
        crate::host::add(&mut sim, "broker", move || {
            let (shared, phase) = (shared.clone(), phase.clone());
            async move {
                let outcome = if phase.load(Ordering::SeqCst) == 0 {
                    write(gap_minutes, &shared).await
                } else {
                    verify(gap_minutes, &shared).await
                };
                if let Err(e) = outcome {
                    lock_state(&shared).result = Some(Err(e));
                }
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    step_until(&mut sim, &shared, STEPS_MAX, |s| {
        s.writer_done || s.result.is_some()
    })?;
    sim.crash("broker");
    phase.store(1, Ordering::SeqCst);
    sim.bounce("broker");
    step_until(&mut sim, &shared, STEPS_MAX, |s| s.result.is_some())?;
    let result = lock_state(&shared).result.take();
    result.unwrap_or_else(|| Err("the scenario ended without a verdict".into()))
}

async fn write(gap_minutes: i64, shared: &Mutex<Shared>) -> Result<(), Failure> {
    let (manager, _) = Manager::open(SimFs::new(CrashPoint::never()), config(), sim_now_ms())
        .map_err(|e| Failure::caused(e.to_string(), e))?;
    let (log, _) = manager
        .get_or_create(&tp(), sim_now_ms())
        .map_err(|e| Failure::caused(e.to_string(), e))?;
    for i in 0..SEGMENTS {
        let mut set = MessageSetBuilder::new();
        set.push(format!("segment {i}").into_bytes());
        let now = sim_now_ms();
        let info = lock(&log)
            .append(&set.build(CompressionCodec::None), now)
            .map_err(|e| Failure::caused(e.to_string(), e))?;
        lock_state(shared).written.push((info.offset as i64, now));
        tokio::time::sleep(Duration::from_millis((gap_minutes * MINUTE_MS) as u64)).await;
    }
    lock_state(shared).writer_done = true;
    Ok(())
}

async fn verify(gap_minutes: i64, shared: &Mutex<Shared>) -> Result<(), Failure> {
    let written = lock_state(shared).written.clone();
    let (manager, report) = Manager::open(SimFs::new(CrashPoint::never()), config(), sim_now_ms())
        .map_err(|e| Failure::caused(e.to_string(), e))?;
    if !report.refused.is_empty() {
        return Err(Failure::from(format!(
            "recovery refused {:?}",
            report.refused
        )));
    }
    let log = manager
        .get(&tp())
        .ok_or("the partition is gone after the restart")?;
    // OFFSETS by time: a time between two segments' writes finds the older one (and those
    // before it), newest first.
    for (i, (start, at)) in written.iter().enumerate() {
        let between = at + gap_minutes * MINUTE_MS / 2;
        let found = lock(&log)
            .offsets_before(between, 10, sim_now_ms())
            .map_err(|e| Failure::caused(e.to_string(), e))?;
        let expected: Vec<i64> = written[..=i].iter().rev().map(|(s, _)| *s).collect();
        if found != expected {
            return Err(Failure::from(format!("after the restart, OFFSETS before {between} (segment {i} at {start} was written at {at}) gave {found:?}, expected {expected:?}")));
        }
    }
    // Retention: wait until the first two segments are more than an hour old, the last not.
    let (_, last_written) = written[SEGMENTS - 1];
    let check_at = written[1].1 + 60 * MINUTE_MS + MINUTE_MS;
    if check_at - last_written >= 60 * MINUTE_MS {
        return Err("scenario parameters leave no young segment".into());
    }
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(check_at - sim_now_ms()).unwrap_or(0),
    ))
    .await;
    let deleted = lock(&log)
        .retain(sim_now_ms())
        .map_err(|e| Failure::caused(e.to_string(), e))?;
    let start = lock(&log).start_offset() as i64;
    if deleted != 2 || start != written[2].0 {
        return Err(Failure::from(format!("retention after the restart deleted {deleted} segments and kept from {start}; expected 2, keeping from {}", written[2].0)));
    }
    lock_state(shared).result = Some(Ok(()));
    Ok(())
}
