//! The log crash scenario.
//!
//! One seed: a broker host runs random appends (any codec), flushes, reads and retention runs
//! against a [`LogManager`] on turmoil's file system, with torn writes on. The file system dies
//! at a random operation; the host is crashed (unsynced data dropped or torn) and restarted; the
//! restarted host recovers and checks:
//! 1. every message that was visible (flushed) before the crash is still there, at the same
//!    offset, byte for byte (unless retention had deleted it);
//! 2. nothing corrupt is returned by any read, before or after the crash;
//! 3. appends continue at the recovered end and read back correctly;
//! 4. a hole the writer made ([`Log::skip_to`], as a replica does across a gap) is still a hole
//!    after recovery (unless retention deleted it): nothing is served inside it, and the log
//!    is readable on both sides;
//!
//! and that no partition was refused (an honest crash must never look like corruption).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::failure::Failure;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::log::{Log, LogManager, TopicPartition};
use tributary_core::message::{
    CompressionCodec, DeepIter, Message, MessageSetBuilder, ShallowIter,
};

use crate::sim_fs::{CrashPoint, SimFs, SIM_EPOCH_MS};

/// Log operations the writer attempts before stopping on its own.
const OPS_MAX: u32 = 250;
/// Simulation steps allowed per phase before the scenario is declared stuck.
const STEPS_MAX: u32 = 200_000;
const LOG_DIR: &str = "/data/logs";

/// The log manager as this scenario uses it: each partition behind a plain mutex (one task).
type Manager = LogManager<SimFs, Mutex<Log<SimFs>>>;

/// Locks a partition; a poisoned lock means an earlier operation panicked, which already
/// failed the run, so it is reported rather than recovered.
fn lock(log: &Mutex<Log<SimFs>>) -> std::sync::MutexGuard<'_, Log<SimFs>> {
    log.lock()
        .unwrap_or_else(|_| panic!("a partition lock was poisoned by an earlier panic"))
}

/// Flushes every partition whose unflushed data is due, then checkpoints (the broker's timer).
fn flush_due(manager: &Manager, now: i64) -> Result<(), Failure> {
    let mut ends = BTreeMap::new();
    for (tp, log) in manager.all() {
        let mut log = lock(&log);
        if log.flush_due(now) {
            log.flush(now)
                .map_err(|e| Failure::caused(e.to_string(), e))?;
        }
        ends.insert(tp, log.flushed_end());
    }
    manager
        .write_checkpoint(ends)
        .map_err(|e| Failure::caused(e.to_string(), e))
}

/// Applies retention to every partition (the broker's cleaner): a partition that fails is
/// logged and skipped, as the broker does, and its segments already dropped from the log stay
/// dropped (the model then learns the new start from the log).
fn cleanup(manager: &Manager, now: i64) {
    for (_, log) in manager.all() {
        if let Err(e) = lock(&log).retain(now) {
            tracing::debug!("retention: {e}");
        }
    }
}

/// What one seed did.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    /// Log operations completed before the crash.
    pub ops: u32,
    /// Message sets appended before the crash.
    pub sets_appended: usize,
    /// Visible sets checked after recovery.
    pub sets_checked: usize,
    /// Holes checked after recovery.
    pub holes_checked: usize,
    /// Whether the crash came from the file-system budget (mid-operation) rather than after
    /// the writer finished.
    pub crashed_mid_operation: bool,
}

/// What the writer knows was appended and made visible.
#[derive(Debug, Default)]
struct Model {
    sets: BTreeMap<TopicPartition, BTreeMap<u64, Bytes>>,
    visible_end: BTreeMap<TopicPartition, u64>,
    start: BTreeMap<TopicPartition, u64>,
    /// Holes made (each once `skip_to` returned).
    holes: BTreeMap<TopicPartition, Vec<(u64, u64)>>,
    report: CrashReport,
    writer_done: bool,
    verified: bool,
    failure: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Params {
    workload_seed: u64,
    segment_bytes: u32,
    flush_messages: u32,
    flush_ms: u32,
    retention_bytes: u32,
}

fn now_ms() -> i64 {
    let elapsed = turmoil::sim_elapsed().unwrap_or_default();
    SIM_EPOCH_MS + i64::try_from(elapsed.as_millis()).unwrap_or(0)
}

fn broker_config(p: Params) -> BrokerConfig {
    let text = format!(
        "brokerid=0\nlog.dir={LOG_DIR}\nenable.zookeeper=false\nnum.partitions=2\n\
         log.file.size={}\nlog.flush.interval={}\nlog.default.flush.interval.ms={}\nlog.retention.size={}\n",
        p.segment_bytes, p.flush_messages, p.flush_ms, p.retention_bytes
    );
    match BrokerConfig::from_properties(&Properties::parse("sim", &text).unwrap_or_default()) {
        Ok(config) => config,
        Err(e) => unreachable_config(e),
    }
}

fn unreachable_config(e: impl std::fmt::Display) -> ! {
    // The scenario builds this text itself; a refusal is a bug in the scenario.
    panic!("scenario config refused: {e}")
}

fn partitions() -> Vec<TopicPartition> {
    ["alpha", "beta-2"]
        .iter()
        .flat_map(|t| {
            (0..2).map(move |p| {
                TopicPartition::new(t.parse().unwrap_or_else(|_| unreachable_config(t)), p)
            })
        })
        .collect()
}

fn random_set(rng: &mut ChaCha8Rng, serial: u64) -> Bytes {
    let codec = [
        CompressionCodec::None,
        CompressionCodec::Gzip,
        CompressionCodec::Snappy,
    ][rng.random_range(0..3)];
    let mut builder = MessageSetBuilder::new();
    for i in 0..rng.random_range(1..6u64) {
        let len = rng.random_range(0..200);
        let mut payload = format!("set {serial} message {i} ").into_bytes();
        payload.extend((0..len).map(|_| rng.random::<u8>()));
        builder.push_message(&Message::new(payload));
    }
    builder.build(codec)
}

/// Runs one seed; `Err` names what broke.
pub fn run_seed(seed: u64) -> Result<CrashReport, Failure> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut builder = crate::sim_fs::sim_builder(seed);
    builder.simulation_duration(Duration::from_secs(24 * 3600));
    builder
        .fs()
        .block_size(if rng.random_bool(0.5) { 512 } else { 4096 });
    if rng.random_bool(0.3) {
        builder.fs().sync_probability(0.05);
    }
    let mut sim = builder.build();
    let params = Params {
        workload_seed: rng.random(),
        segment_bytes: rng.random_range(300..4000),
        flush_messages: rng.random_range(1..30),
        flush_ms: rng.random_range(10..500),
        retention_bytes: rng.random_range(2000..20_000),
    };
    let crash = if rng.random_bool(0.9) {
        CrashPoint::after(rng.random_range(3..1000))
    } else {
        CrashPoint::never()
    };
    let model = Arc::new(Mutex::new(Model::default()));
    let phase = Arc::new(AtomicU8::new(0));
    {
        let (model, phase, crash) = (model.clone(), phase.clone(), crash.clone());
        crate::host::add(&mut sim, "broker", move || {
            let (model, phase, crash) = (model.clone(), phase.clone(), crash.clone());
            async move {
                if phase.load(Ordering::SeqCst) == 0 {
                    write_phase(params, crash, &model).await;
                } else {
                    verify_phase(params, &model);
                }
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    step_until(&mut sim, &model, |m| m.writer_done)?;
    sim.crash("broker");
    phase.store(1, Ordering::SeqCst);
    sim.bounce("broker");
    step_until(&mut sim, &model, |m| m.verified)?;
    let model = model.lock().map_err(|e| Failure::from(e.to_string()))?;
    match &model.failure {
        Some(failure) => Err(Failure::from(failure.clone())),
        None => Ok(CrashReport {
            crashed_mid_operation: crash.hit(),
            ..model.report.clone()
        }),
    }
}

fn step_until(
    sim: &mut turmoil::Sim<'_>,
    model: &Arc<Mutex<Model>>,
    done: impl Fn(&Model) -> bool,
) -> Result<(), Failure> {
    for _ in 0..STEPS_MAX {
        if model
            .lock()
            .map(|m| done(&m) || m.failure.is_some())
            .unwrap_or(true)
        {
            return Ok(());
        }
        sim.step()
            .map_err(|e| Failure::from(format!("simulation failed: {e}")))?;
    }
    Err("scenario stuck: the host did not finish within the step limit".into())
}

fn fail(model: &Mutex<Model>, message: String) {
    if let Ok(mut m) = model.lock() {
        m.failure.get_or_insert(message);
    }
}

async fn write_phase(params: Params, crash: CrashPoint, model: &Mutex<Model>) {
    let mut rng = ChaCha8Rng::seed_from_u64(params.workload_seed);
    let fs = SimFs::new(crash.clone());
    let manager = match Manager::open(fs, broker_config(params), now_ms()) {
        Ok((manager, _)) => manager,
        Err(_) if crash.hit() => return finish_writer(model, 0),
        Err(e) => return fail(model, format!("first open failed without a crash: {e}")),
    };
    let tps = partitions();
    let mut ops = 0;
    while ops < OPS_MAX {
        let tp = &tps[rng.random_range(0..tps.len())];
        if let Err(e) = one_op(&manager, tp, &mut rng, ops, model) {
            if !crash.hit() {
                return fail(
                    model,
                    format!("op {ops} on {tp} failed without a crash: {e}"),
                );
            }
            break;
        }
        record_visible(&manager, model);
        ops += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..40))).await;
    }
    finish_writer(model, ops);
}

fn finish_writer(model: &Mutex<Model>, ops: u32) {
    if let Ok(mut m) = model.lock() {
        m.report.ops = ops;
        m.writer_done = true;
    }
}

fn one_op(
    manager: &Manager,
    tp: &TopicPartition,
    rng: &mut ChaCha8Rng,
    serial: u32,
    model: &Mutex<Model>,
) -> Result<(), Failure> {
    let now = now_ms();
    match rng.random_range(0..100) {
        0..60 => {
            let set = random_set(rng, u64::from(serial));
            let (log, _) = manager
                .get_or_create(tp, now)
                .map_err(|e| Failure::caused(e.to_string(), e))?;
            let info = lock(&log)
                .append(&set, now)
                .map_err(|e| Failure::caused(e.to_string(), e))?;
            let mut m = model.lock().map_err(|e| Failure::from(e.to_string()))?;
            m.sets
                .entry(tp.clone())
                .or_default()
                .insert(info.offset, set);
            m.report.sets_appended += 1;
        }
        60..72 => flush_due(manager, now)?,
        72..82 => {
            if let Some(log) = manager.get(tp) {
                lock(&log)
                    .flush(now)
                    .map_err(|e| Failure::caused(e.to_string(), e))?;
            }
        }
        82..94 => read_back(manager, tp, rng, model)?,
        94..97 => {
            if let Some(log) = manager.get(tp) {
                let mut log = lock(&log);
                let from = log.written_end();
                let to = from + rng.random_range(1..3000);
                log.skip_to(to, now)
                    .map_err(|e| Failure::caused(e.to_string(), e))?;
                let mut m = model.lock().map_err(|e| Failure::from(e.to_string()))?;
                m.holes.entry(tp.clone()).or_default().push((from, to));
            }
        }
        _ => {
            cleanup(manager, now);
        }
    }
    Ok(())
}

/// Reads a visible set back: it must come back exactly (invariant 2 before the crash).
fn read_back(
    manager: &Manager,
    tp: &TopicPartition,
    rng: &mut ChaCha8Rng,
    model: &Mutex<Model>,
) -> Result<(), Failure> {
    let Some(log) = manager.get(tp) else {
        return Ok(());
    };
    let log = lock(&log);
    let candidates: Vec<(u64, Bytes)> = {
        let m = model.lock().map_err(|e| Failure::from(e.to_string()))?;
        let sets = m.sets.get(tp).cloned().unwrap_or_default();
        sets.range(log.start_offset()..)
            .filter(|(o, s)| *o + s.len() as u64 <= log.flushed_end())
            .map(|(o, s)| (*o, s.clone()))
            .collect()
    };
    if candidates.is_empty() {
        return Ok(());
    }
    let (offset, set) = &candidates[rng.random_range(0..candidates.len())];
    let got = log
        .read(*offset as i64, set.len())
        .map_err(|e| Failure::caused(e.to_string(), e))?;
    if got != *set {
        fail(
            model,
            format!(
                "{tp}: read at {offset} before the crash returned other bytes than were appended"
            ),
        );
    }
    Ok(())
}

fn record_visible(manager: &Manager, model: &Mutex<Model>) {
    let Ok(mut m) = model.lock() else { return };
    for tp in manager.partitions() {
        if let Some(log) = manager.get(&tp) {
            let log = lock(&log);
            m.visible_end.insert(tp.clone(), log.flushed_end());
            m.start.insert(tp, log.start_offset());
        }
    }
}

fn verify_phase(params: Params, model: &Mutex<Model>) {
    let result = verify(params, model);
    if let Ok(mut m) = model.lock() {
        if let Err(e) = result {
            m.failure.get_or_insert(e.to_string());
        }
        m.verified = true;
    }
}

fn verify(params: Params, model: &Mutex<Model>) -> Result<(), Failure> {
    let now = now_ms();
    let (manager, report) =
        Manager::open(SimFs::new(CrashPoint::never()), broker_config(params), now)
            .map_err(|e| Failure::caused(format!("recovery failed: {e}"), e))?;
    if let Some((tp, why)) = report.refused.first() {
        return Err(Failure::from(format!(
            "recovery refused {tp} after an honest crash: {why}"
        )));
    }
    let mut m = model.lock().map_err(|e| Failure::from(e.to_string()))?;
    let visible: Vec<(TopicPartition, u64)> =
        m.visible_end.iter().map(|(k, v)| (k.clone(), *v)).collect();
    for (tp, visible_end) in visible {
        let start = m.start.get(&tp).copied().unwrap_or(0);
        let sets = m.sets.get(&tp).cloned().unwrap_or_default();
        let Some(log) = manager.get(&tp) else {
            if visible_end > start {
                return Err(Failure::from(format!(
                    "{tp}: had visible data up to {visible_end}, gone after recovery"
                )));
            }
            continue;
        };
        let log = lock(&log);
        if log.flushed_end() < visible_end {
            return Err(Failure::from(format!(
                "{tp}: flushed end {} after recovery, {visible_end} was visible before",
                log.flushed_end()
            )));
        }
        for (offset, set) in sets.range(start..) {
            if offset + set.len() as u64 > visible_end {
                break;
            }
            let got = log
                .read(*offset as i64, set.len())
                .map_err(|e| Failure::caused(format!("{tp}: visible set at {offset}: {e}"), e))?;
            if got != *set {
                return Err(Failure::from(format!(
                    "{tp}: visible set at {offset} changed across the crash"
                )));
            }
            m.report.sets_checked += 1;
        }
        let holes = m.holes.get(&tp).cloned().unwrap_or_default();
        for (from, to) in holes.into_iter().filter(|(_, to)| *to > log.start_offset()) {
            for at in [from, to - 1] {
                if log.read(at as i64, 1 << 16).is_ok() {
                    return Err(Failure::from(format!(
                        "{tp}: hole {from}..{to} made before the crash serves data at {at} after it"
                    )));
                }
            }
            if log.advertised_start() < to {
                return Err(Failure::from(format!(
                    "{tp}: hole {from}..{to} made before the crash, but OFFSETS start at {}",
                    log.advertised_start()
                )));
            }
            m.report.holes_checked += 1;
        }
        drop(log);
        check_whole_log(&manager, &tp)?;
        check_appends_continue(&manager, &tp, now)?;
    }
    Ok(())
}

/// Reads the whole log through the public read path: every message must validate (deep).
fn check_whole_log(manager: &Manager, tp: &TopicPartition) -> Result<(), Failure> {
    let Some(log) = manager.get(tp) else {
        return Ok(());
    };
    let log = lock(&log);
    let mut pos = log.start_offset();
    while pos < log.flushed_end() {
        if let Some((_, to)) = log.holes().iter().find(|(from, _)| *from == pos) {
            pos = *to;
            continue;
        }
        // The zero-copy path first (a file range where the bytes were checked before, else a
        // checked read), then the copying read: the very same bytes.
        let served = log
            .serve(pos as i64, 4096)
            .map_err(|e| Failure::caused(format!("{tp}: serve at {pos}: {e}"), e))
            .and_then(|s| {
                s.into_bytes().map_err(|e| {
                    Failure::caused(format!("{tp}: reading a served range at {pos}: {e}"), e)
                })
            })?;
        let chunk = log
            .read(pos as i64, 4096)
            .map_err(|e| Failure::caused(format!("{tp}: read at {pos}: {e}"), e))?;
        if served != chunk {
            return Err(Failure::from(format!(
                "{tp}: served bytes differ from read bytes at {pos}"
            )));
        }
        let mut entries = ShallowIter::new(&chunk, pos as i64);
        for entry in entries.by_ref() {
            entry.map_err(|e| Failure::caused(format!("{tp}: corrupt message served: {e}"), e))?;
        }
        let valid = entries.end().valid_bytes;
        for entry in DeepIter::new(chunk.slice(..valid), pos as i64, 1 << 24) {
            entry.map_err(|e| {
                Failure::caused(format!("{tp}: corrupt inner message served: {e}"), e)
            })?;
        }
        if valid == 0 {
            return Err(Failure::from(format!(
                "{tp}: no whole message at {pos} within 4096 bytes"
            )));
        }
        pos += valid as u64;
    }
    Ok(())
}

fn check_appends_continue(manager: &Manager, tp: &TopicPartition, now: i64) -> Result<(), Failure> {
    let (log, _) = manager
        .get_or_create(tp, now)
        .map_err(|e| Failure::caused(e.to_string(), e))?;
    let mut log = lock(&log);
    let end = log.written_end();
    let set = random_set(&mut ChaCha8Rng::seed_from_u64(end), 0);
    let info = log
        .append(&set, now)
        .map_err(|e| Failure::caused(format!("{tp}: append after recovery: {e}"), e))?;
    if info.offset != end {
        return Err(Failure::from(format!(
            "{tp}: append after recovery landed at {}, not at the end {end}",
            info.offset
        )));
    }
    log.flush(now)
        .map_err(|e| Failure::caused(e.to_string(), e))?;
    let got = log
        .read(info.offset as i64, set.len())
        .map_err(|e| Failure::caused(e.to_string(), e))?;
    if got != set {
        return Err(Failure::from(format!(
            "{tp}: set appended after recovery reads back differently"
        )));
    }
    Ok(())
}
