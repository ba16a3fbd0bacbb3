//! Mirrored appends across a crash at any file-system operation: the mirror position records
//! and the data they describe come back together.
//!
//! A broker host appends mirrored sets of one source partition (each message's payload names
//! its source offset), flushing now and then, until a crash point stops its file system; the
//! host is crashed (what was not synced is lost, torn at the disk's block size, or kept when
//! the disk happened to write it back) and restarted. Then:
//! - every set acknowledged before the crash (flushed) is held, and the records say so;
//! - every message in the log lies inside a recorded set (no data without its position) and
//!   every recorded set lies inside the log;
//! - a sender that sends every set again from the start lands each source message in the log
//!   exactly once, in source order.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::failure::Failure;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::consumer::BrokerPartition;
use tributary_core::identity::ClusterId;
use tributary_core::log::{
    Log, LogPolicy, MirroredAppend, RecoveryHints, SourceRange, TopicPartition, ValidatedSet,
};
use tributary_core::message::{CompressionCodec, DeepIter, MessageSetBuilder};
use tributary_core::mirror::position::SourceKey;

use crate::env::sim_now_ms;
use crate::sim_fs::{sim_builder, CrashPoint, SimFs};
use crate::stepping::{lock_state, step_until};

const DIR: &str = "/data/logs/mirrored-0";
/// Source messages the sender has to copy.
const MESSAGES: usize = 120;
/// Simulation steps allowed before the scenario is declared stuck.
const STEPS_MAX: u32 = 1_000_000;

/// What the writer got done before the crash.
#[derive(Debug, Default)]
struct Shared {
    /// The source offset up to which sets were flushed (acknowledged) before the crash.
    acknowledged_to: i64,
    writer_done: bool,
    result: Option<Result<(), Failure>>,
}

/// The source partition: each message's (source offset, payload), offsets as 0.7 counts them
/// (each message's offset is the previous one's plus its size on the wire).
fn source_messages(rng: &mut ChaCha8Rng) -> Vec<(i64, Vec<u8>)> {
    let mut offset = 0i64;
    (0..MESSAGES)
        .map(|_| {
            let mut payload = offset.to_be_bytes().to_vec();
            payload.extend((0..rng.random_range(0..60)).map(|_| rng.random::<u8>()));
            let message = (offset, payload.clone());
            offset += 10 + payload.len() as i64;
            message
        })
        .collect()
}

fn key() -> SourceKey {
    SourceKey {
        cluster: ClusterId::parse("source").unwrap_or_else(|_| panic!("a valid cluster id")),
        topic: "mirrored"
            .parse()
            .unwrap_or_else(|_| panic!("a valid topic")),
        partition: BrokerPartition {
            broker_id: 0,
            partition: 0,
        },
    }
}

fn policy() -> LogPolicy {
    let text = "brokerid=0\nlog.dir=/data/logs\nenable.zookeeper=false\nlog.file.size=2000\nlog.flush.interval=1000000\n";
    let config = Properties::parse("sim", text)
        .ok()
        .and_then(|p| BrokerConfig::from_properties(&p).ok())
        .unwrap_or_else(|| panic!("scenario config refused"));
    LogPolicy::for_topic(&config, &key().topic)
}

fn tp() -> TopicPartition {
    TopicPartition::new(key().topic, 0)
}

/// The set of `messages`, as the mirror sends it.
fn set_of(messages: &[(i64, Vec<u8>)], codec: CompressionCodec) -> Result<ValidatedSet, Failure> {
    let mut builder = MessageSetBuilder::new();
    for (_, payload) in messages {
        builder.push(payload.clone());
    }
    ValidatedSet::check(builder.build(codec), policy().validation)
        .map_err(|e| Failure::caused(e.to_string(), e))
}

/// The source range of `messages` (non-empty).
fn range_of(messages: &[(i64, Vec<u8>)], all: &[(i64, Vec<u8>)]) -> SourceRange {
    let start = messages.first().map_or(0, |m| m.0);
    let last = messages.last().map_or(0, |m| m.0);
    let next = all.iter().find(|m| m.0 > last).map_or(
        last + 10 + messages.last().map_or(0, |m| m.1.len() as i64),
        |m| m.0,
    );
    SourceRange {
        key: key(),
        start,
        next,
    }
}

/// Runs one seed with `bugs` planted.
pub fn run_seed(seed: u64) -> Result<(), Failure> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut builder = sim_builder(seed);
    builder.simulation_duration(Duration::from_secs(3600));
    builder
        .fs()
        .block_size(if rng.random_bool(0.5) { 512 } else { 4096 });
    if rng.random_bool(0.3) {
        builder.fs().sync_probability(0.05);
    }
    let mut sim = builder.build();
    let messages = Arc::new(source_messages(&mut rng));
    let crash = CrashPoint::after(rng.random_range(3..400));
    let writer_seed = rng.random::<u64>();
    let shared = Arc::new(Mutex::new(Shared::default()));
    let phase = Arc::new(AtomicU8::new(0));
    {
        let (shared, phase, messages, crash) = (
            shared.clone(),
            phase.clone(),
            messages.clone(),
            crash.clone(),
        );
        crate::host::add(&mut sim, "broker", move || {
            let (shared, phase, messages, crash) = (
                shared.clone(),
                phase.clone(),
                messages.clone(),
                crash.clone(),
            );
            async move {
                if phase.load(Ordering::SeqCst) == 0 {
                    write(writer_seed, &messages, crash, &shared);
                    lock_state(&shared).writer_done = true;
                } else {
                    let verdict = verify(&messages, &shared);
                    lock_state(&shared).result = Some(verdict);
                }
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    step_until(&mut sim, &shared, STEPS_MAX, |s| s.writer_done)?;
    sim.crash("broker");
    phase.store(1, Ordering::SeqCst);
    sim.bounce("broker");
    step_until(&mut sim, &shared, STEPS_MAX, |s| s.result.is_some())?;
    let result = lock_state(&shared).result.take();
    result.unwrap_or_else(|| Err("the scenario ended without a verdict".into()))
}

/// Appends the source in random sets, sometimes compressed, sometimes sending a set again,
/// flushing now and then, until the crash point stops the file system (any error ends it).
fn write(seed: u64, messages: &[(i64, Vec<u8>)], crash: CrashPoint, shared: &Mutex<Shared>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let Ok(mut log) = Log::create(
        SimFs::new(crash),
        DIR.as_ref(),
        tp(),
        policy(),
        sim_now_ms(),
    ) else {
        return;
    };
    let mut at = 0usize;
    let mut appended_to = 0i64;
    while at < messages.len() {
        let take = rng.random_range(1..=(messages.len() - at).min(6));
        let from = if at > 0 && rng.random_bool(0.1) {
            rng.random_range(0..at)
        } else {
            at
        };
        let chunk = &messages[from..at + take];
        let codec = [CompressionCodec::None, CompressionCodec::Gzip][rng.random_range(0..2)];
        let Ok(set) = set_of(chunk, codec) else {
            return;
        };
        let range = range_of(chunk, messages);
        match log.append_mirrored(&set, &range, sim_now_ms()) {
            Ok(MirroredAppend::Appended(_)) => appended_to = range.next,
            Ok(MirroredAppend::Held) => {}
            Ok(MirroredAppend::Overlap { held_to }) => {
                // The sender drops what the log holds and sends the rest as its next set.
                at = messages
                    .iter()
                    .position(|m| m.0 >= held_to)
                    .unwrap_or(messages.len());
                continue;
            }
            Err(_) => return,
        }
        at += take;
        if rng.random_bool(0.4) {
            if log.flush(sim_now_ms()).is_err() {
                return;
            }
            lock_state(shared).acknowledged_to = appended_to;
        }
    }
}

/// The checks after the restart (see the module's doc).
fn verify(messages: &[(i64, Vec<u8>)], shared: &Mutex<Shared>) -> Result<(), Failure> {
    let acknowledged_to = lock_state(shared).acknowledged_to;
    let hints = RecoveryHints {
        clean_shutdown: false,
        checkpoint: None,
    };
    let fs = SimFs::new(CrashPoint::never());
    let mut log = Log::open(fs, DIR.as_ref(), tp(), policy(), hints, sim_now_ms())
        .map_err(|e| Failure::caused(e.to_string(), e))?;
    let resume = log
        .positions()
        .and_then(|b| b.resume_at(&key()))
        .unwrap_or(0);
    if resume < acknowledged_to {
        return Err(Failure::new(format!(
            "sets were flushed up to source offset {acknowledged_to}, but the records reach only {resume}"
        )));
    }
    let recorded: Vec<(u64, u64)> = log
        .positions()
        .map(|b| b.records())
        .map(|bytes| {
            tributary_core::mirror::position::record::decode(&bytes)
                .records
                .into_iter()
                .map(|(_, r)| (r.start(), r.end()))
                .collect()
        })
        .unwrap_or_default();
    let held = read_all(&log)?;
    for (offset, _) in &held {
        let at = *offset as u64;
        if !recorded
            .iter()
            .any(|(start, end)| *start <= at && at < *end)
        {
            return Err(Failure::new(format!(
                "the log holds a message at {at} that no position record covers (records: {recorded:?})"
            )));
        }
    }
    if let Some((_, end)) = recorded.iter().find(|(_, end)| *end > log.written_end()) {
        return Err(Failure::new(format!(
            "a record names a set ending at {end}, past the log's end {}",
            log.written_end()
        )));
    }
    // Everything again from the start, in sets of three: each message lands once.
    let mut at = 0usize;
    while at < messages.len() {
        let chunk = &messages[at..(at + 3).min(messages.len())];
        let set = set_of(chunk, CompressionCodec::None)?;
        match log
            .append_mirrored(&set, &range_of(chunk, messages), sim_now_ms())
            .map_err(|e| Failure::caused(e.to_string(), e))?
        {
            MirroredAppend::Overlap { held_to } => {
                at = messages
                    .iter()
                    .position(|m| m.0 >= held_to)
                    .unwrap_or(messages.len());
                continue;
            }
            MirroredAppend::Appended(_) | MirroredAppend::Held => at += chunk.len(),
        }
    }
    log.flush(sim_now_ms())
        .map_err(|e| Failure::caused(e.to_string(), e))?;
    let landed: Vec<i64> = read_all(&log)?
        .iter()
        .map(|(_, payload)| {
            payload
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map_or(-1, i64::from_be_bytes)
        })
        .collect();
    let sent: Vec<i64> = messages.iter().map(|m| m.0).collect();
    if landed != sent {
        return Err(Failure::new(format!(
            "after sending everything again the log holds source offsets {landed:?}, not {sent:?} once each"
        )));
    }
    Ok(())
}

/// Every message of the log, deep (a compressed set's messages at its wrapper's offset), read
/// segment by segment.
fn read_all(log: &Log<SimFs>) -> Result<Vec<(i64, Bytes)>, Failure> {
    let mut messages = Vec::new();
    let mut at = 0u64;
    while at < log.written_end() {
        let bytes = log
            .read(at as i64, 1 << 20)
            .map_err(|e| Failure::caused(e.to_string(), e))?;
        if bytes.is_empty() {
            return Err(Failure::new(format!(
                "the log reads nothing at {at}, before its end {}",
                log.written_end()
            )));
        }
        let limit = tributary_core::message::DECOMPRESSED_BYTES_MAX_DEFAULT;
        for entry in DeepIter::new(bytes, at as i64, limit) {
            let entry = entry.map_err(|e| Failure::caused(e.to_string(), e))?;
            at = at.max(entry.next_offset as u64);
            messages.push((entry.offset, entry.message.payload));
        }
    }
    Ok(messages)
}
