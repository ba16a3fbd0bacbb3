//! The cluster scenario: two real brokers (the production `Broker` on [`SimEnv`]), the
//! ZooKeeper model, and a client that produces and reads back, under a fault schedule drawn
//! from the seed. Invariants, checked as the run goes and after every fault has healed:
//!
//! 1. every message any read has returned stays readable at the same offset, byte for byte,
//!    across crashes (visible ⇒ durable);
//! 2. no read returns a corrupt or torn message;
//! 3. a partition's latest offset never goes back;
//! 4. after healing, ZooKeeper lists exactly the live brokers, and every topic a broker served
//!    is registered under it;
//! 5. a broker that restarts serves again within a bounded simulated time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::broker::Broker;
use tributary::client::Connection;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::message::{CompressionCodec, DeepIter, Message, MessageSetBuilder, ShallowIter};
use tributary_core::wire::{ErrorCode, FetchRequest, OffsetsRequest, ProduceRequest, Request, Response, TopicName};

use crate::env::{sim_now_ms, SimEnv};
use crate::zk_model::{serve, ModelState, SharedModel};

/// Brokers in the cluster.
pub const BROKERS: u32 = 2;
const ZK_PORT: u16 = 2181;
const BROKER_PORT: u16 = 9092;
const TOPICS: [&str; 2] = ["orders", "clicks-2"];
const PARTITIONS: u32 = 2;
/// After healing, how long brokers get to serve again and to re-register.
const HEAL: Duration = Duration::from_secs(25);
/// How long a client call may take before the connection is dropped and redialled.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Which faults a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Faults {
    /// None.
    None,
    /// Partitions between hosts (broker↔ZooKeeper, client↔broker).
    Network,
    /// Broker crashes and restarts.
    Crash,
    /// Both.
    Mixed,
}

impl std::str::FromStr for Faults {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Faults::None),
            "network" => Ok(Faults::Network),
            "crash" => Ok(Faults::Crash),
            "mixed" => Ok(Faults::Mixed),
            other => Err(format!("unknown fault mode {other}: none, network, crash or mixed")),
        }
    }
}

/// One scheduled fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Cut the link between two hosts.
    Partition(String, String),
    /// Restore it.
    Repair(String, String),
    /// Kill a host (unsynced writes lost).
    Crash(String),
    /// Shut a broker down gracefully (flush, checkpoint, marker, leave ZooKeeper).
    Stop(String),
    /// Restart a crashed host.
    Bounce(String),
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct ClusterReport {
    /// Simulated time covered.
    pub simulated: Duration,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Messages produced (sent; not all are acknowledged in 0.7).
    pub produced: u64,
    /// Distinct visible entries read and re-checked.
    pub entries_checked: usize,
    /// ZooKeeper sessions the model expired.
    pub sessions_expired: u64,
    /// Hash of the trace (same seed ⇒ same hash).
    pub trace_hash: u64,
    /// The trace's last lines.
    pub trace_tail: Vec<String>,
}

/// Knobs planted bugs can turn (see `crate::planted`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Simulated seconds of workload before healing.
    pub duration_secs: u64,
    /// The fault mode.
    pub faults: Option<Faults>,
}

#[derive(Debug, Default)]
struct Shared {
    trace: Vec<String>,
    /// (broker, topic, partition, offset) → the entry's bytes, as first read.
    seen: BTreeMap<(u32, String, u32, i64), Bytes>,
    latest: BTreeMap<(u32, String, u32), i64>,
    served_topics: BTreeSet<(u32, String)>,
    last_success: BTreeMap<u32, i64>,
    produced: u64,
    violation: Option<String>,
    stop: bool,
    /// Brokers asked to shut down gracefully.
    stop_requested: BTreeSet<u32>,
    final_done: bool,
}

type SharedState = Arc<Mutex<Shared>>;

fn guard(s: &SharedState) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn trace(s: &SharedState, line: String) {
    trace_at(s, turmoil::sim_elapsed().unwrap_or_default(), line);
}

/// Traces with an explicit simulated time (the harness runs outside any host).
fn trace_at(s: &SharedState, t: Duration, line: String) {
    guard(s).trace.push(format!("{:>9.3} {line}", t.as_secs_f64()));
}

fn violate(s: &SharedState, what: String) {
    trace(s, format!("VIOLATION {what}"));
    guard(s).violation.get_or_insert(what);
}

fn broker_config(id: u32, rng: &mut ChaCha8Rng) -> BrokerConfig {
    let text = format!(
        "brokerid={id}\nhostname=broker{id}\nport={BROKER_PORT}\nlog.dir=/data/logs\nnum.partitions={PARTITIONS}\n\
         log.flush.interval={}\nlog.default.flush.interval.ms=200\nlog.default.flush.scheduler.interval.ms=100\n\
         log.file.size={}\nzk.connect=zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=600000\n",
        rng.random_range(1..40),
        rng.random_range(2000..20_000),
    );
    match BrokerConfig::from_properties(&Properties::parse("sim", &text).unwrap_or_default()) {
        Ok(c) => c,
        Err(e) => panic!("scenario broker config refused: {e}"),
    }
}

/// The fault schedule for `seed`: (time, fault) pairs, sorted, each partition or crash
/// followed by its repair or bounce.
pub fn schedule(seed: u64, mode: Faults, duration: Duration) -> Vec<(Duration, Fault)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xFA17);
    let mut out = Vec::new();
    let mut t = Duration::from_secs(rng.random_range(2..6));
    while t < duration && mode != Faults::None {
        let broker = format!("broker{}", rng.random_range(0..BROKERS));
        let length = Duration::from_millis(rng.random_range(1000..8000));
        let crash = match mode {
            Faults::Crash => true,
            Faults::Network => false,
            _ => rng.random_bool(0.4),
        };
        if crash {
            let down = if rng.random_bool(0.3) { Fault::Stop(broker.clone()) } else { Fault::Crash(broker.clone()) };
            out.push((t, down));
            out.push((t + length, Fault::Bounce(broker)));
        } else {
            let other = if rng.random_bool(0.5) { "zk".to_string() } else { "client".to_string() };
            out.push((t, Fault::Partition(broker.clone(), other.clone())));
            out.push((t + length, Fault::Repair(broker, other)));
        }
        t += length + Duration::from_millis(rng.random_range(500..6000));
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

/// Runs one seed; `Err` carries the violated invariant and the trace tail.
pub fn run_seed(seed: u64, options: Options) -> Result<ClusterReport, (String, ClusterReport)> {
    let duration = Duration::from_secs(options.duration_secs.max(1));
    let mode = options.faults.unwrap_or(Faults::Mixed);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut builder = crate::sim_fs::sim_builder(seed);
    builder
        .simulation_duration(duration + HEAL * 4)
        // Small socket queues (full queues) and varied message latency, from the seed.
        .tcp_capacity(rng.random_range(16..256))
        .min_message_latency(Duration::from_millis(rng.random_range(0..2)))
        .max_message_latency(Duration::from_millis(rng.random_range(2..40)));
    // Torn writes: a crash keeps a random prefix of the blocks of unsynced writes.
    builder.fs().block_size(512);
    let mut sim = builder.build();
    let model: SharedModel = Arc::new(Mutex::new(ModelState::default()));
    let state: SharedState = Arc::default();
    let zk_model = model.clone();
    sim.host("zk", move || {
        let m = zk_model.clone();
        async move { serve(ZK_PORT, m).await.map_err(Into::into) }
    });
    // Half the seeds get a slow disk: up to 5–200 ms per disk operation.
    let disk_latency = if rng.random_bool(0.5) { Duration::from_millis(rng.random_range(5..200)) } else { Duration::ZERO };
    for id in 0..BROKERS {
        let config = broker_config(id, &mut rng);
        let env_seed: u64 = rng.random();
        let st = state.clone();
        sim.host(format!("broker{id}"), move || {
            let (config, st) = (config.clone(), st.clone());
            async move {
                match Broker::start(SimEnv::with_disk_latency(env_seed, disk_latency), config).await {
                    Ok(broker) => {
                        trace(&st, format!("broker{id} started"));
                        while !guard(&st).stop_requested.remove(&id) {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        match broker.shutdown().await {
                            Ok(()) => trace(&st, format!("broker{id} stopped gracefully")),
                            Err(e) => violate(&st, format!("broker{id}: graceful shutdown failed: {e}")),
                        }
                    }
                    Err(e) => trace(&st, format!("broker{id} failed to start: {e}")),
                }
                Ok(())
            }
        });
    }
    let client_seed: u64 = rng.random();
    let (st, m) = (state.clone(), model.clone());
    sim.client("client", async move {
        workload(client_seed, &st).await;
        final_checks(&st, &m).await;
        guard(&st).final_done = true;
        Ok(())
    });
    let mut report = ClusterReport::default();
    let result = drive(&mut sim, &state, schedule(seed, mode, duration), duration, &mut report);
    let s = guard(&state);
    report.produced = s.produced;
    report.entries_checked = s.seen.len();
    report.sessions_expired = model.lock().map(|m| m.expired).unwrap_or(0);
    report.trace_hash = s.trace.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, line| {
        line.bytes().fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    });
    report.trace_tail = s.trace.iter().rev().take(30).rev().cloned().collect();
    report.simulated = sim.elapsed();
    match (result, s.violation.clone()) {
        (_, Some(v)) => Err((v, report)),
        (Err(e), None) => Err((e, report)),
        (Ok(()), None) => Ok(report),
    }
}

fn drive(sim: &mut turmoil::Sim<'_>, state: &SharedState, faults: Vec<(Duration, Fault)>, duration: Duration, report: &mut ClusterReport) -> Result<(), String> {
    let mut pending = faults.into_iter().peekable();
    let mut crashed = BTreeSet::new();
    while sim.elapsed() < duration {
        while let Some((_, fault)) = pending.next_if(|(t, _)| *t <= sim.elapsed()) {
            apply(sim, state, &fault, &mut crashed, report);
            trace_at(state, sim.elapsed(), format!("fault {fault:?}"));
        }
        sim.step().map_err(|e| format!("simulation error: {e}"))?;
    }
    // Heal everything, then let the client's final checks run.
    for host in ["broker0", "broker1"] {
        for other in ["zk", "client"] {
            sim.repair(host, other);
        }
    }
    for host in std::mem::take(&mut crashed) {
        forget_stop_request(state, &host);
        sim.bounce(host.as_str());
        *report.faults.entry("bounce").or_default() += 1;
    }
    guard(state).stop = true;
    while !guard(state).final_done {
        if sim.elapsed() > duration + HEAL * 4 {
            return Err("final checks did not finish".into());
        }
        sim.step().map_err(|e| format!("simulation error: {e}"))?;
    }
    Ok(())
}

/// A restarted broker must not act on a stop meant for its previous run (a stop requested just
/// before the restart may not have been seen yet).
fn forget_stop_request(state: &SharedState, host: &str) {
    if let Some(id) = host.strip_prefix("broker").and_then(|n| n.parse::<u32>().ok()) {
        guard(state).stop_requested.remove(&id);
    }
}

fn apply(sim: &mut turmoil::Sim<'_>, state: &SharedState, fault: &Fault, crashed: &mut BTreeSet<String>, report: &mut ClusterReport) {
    let kind = match fault {
        Fault::Partition(a, b) => {
            sim.partition(a.as_str(), b.as_str());
            "partition"
        }
        Fault::Repair(a, b) => {
            sim.repair(a.as_str(), b.as_str());
            "repair"
        }
        Fault::Crash(h) => {
            if !crashed.insert(h.clone()) {
                return;
            }
            sim.crash(h.as_str());
            "crash"
        }
        Fault::Stop(h) => {
            if !crashed.insert(h.clone()) {
                return;
            }
            if let Some(id) = h.strip_prefix("broker").and_then(|n| n.parse().ok()) {
                guard(state).stop_requested.insert(id);
            }
            "stop"
        }
        Fault::Bounce(h) => {
            if !crashed.remove(h) {
                return;
            }
            forget_stop_request(state, h);
            sim.bounce(h.as_str());
            "bounce"
        }
    };
    *report.faults.entry(kind).or_default() += 1;
}

struct Client {
    conns: BTreeMap<u32, Connection<turmoil::net::TcpStream>>,
}

impl Client {
    async fn call(&mut self, broker: u32, request: &Request) -> Option<Response> {
        let conn = self.conn(broker).await?;
        match conn.call(request).await {
            Ok(response) => Some(response),
            Err(_) => {
                self.conns.remove(&broker);
                None
            }
        }
    }

    async fn send(&mut self, broker: u32, request: &Request) -> bool {
        let Some(conn) = self.conn(broker).await else { return false };
        let ok = conn.send(request).await.is_ok();
        if !ok {
            self.conns.remove(&broker);
        }
        ok
    }

    async fn conn(&mut self, broker: u32) -> Option<&mut Connection<turmoil::net::TcpStream>> {
        if let std::collections::btree_map::Entry::Vacant(slot) = self.conns.entry(broker) {
            let host = format!("broker{broker}");
            let stream = tokio::time::timeout(CALL_TIMEOUT, turmoil::net::TcpStream::connect((host.as_str(), BROKER_PORT))).await.ok()?.ok()?;
            slot.insert(Connection::new(stream, host, CALL_TIMEOUT));
        }
        self.conns.get_mut(&broker)
    }
}

fn topic(i: usize) -> TopicName {
    TOPICS[i % TOPICS.len()].parse().unwrap_or_else(|_| panic!("scenario topic names are valid"))
}

async fn workload(seed: u64, st: &SharedState) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut client = Client { conns: BTreeMap::new() };
    let mut serial = 0u64;
    while !guard(st).stop {
        let broker = rng.random_range(0..BROKERS);
        let t = topic(rng.random_range(0..TOPICS.len()));
        let partition = rng.random_range(0..PARTITIONS);
        match rng.random_range(0..10) {
            0..5 => {
                let codec = [CompressionCodec::None, CompressionCodec::Gzip, CompressionCodec::Snappy][rng.random_range(0..3)];
                let mut set = MessageSetBuilder::new();
                let n = rng.random_range(1..6);
                for _ in 0..n {
                    serial += 1;
                    set.push_message(&Message::new(format!("msg {serial} to {t}-{partition}@{broker}").into_bytes()));
                }
                let request = Request::Produce(ProduceRequest { topic: t.clone(), partition: partition as i32, messages: set.build(codec) });
                let sent = client.send(broker, &request).await;
                if sent {
                    guard(st).produced += n;
                }
                trace(st, format!("produce broker{broker} {t}-{partition} n={n} sent={sent}"));
            }
            5..8 => read(&mut client, st, broker, &t, partition, &mut rng).await,
            _ => latest(&mut client, st, broker, &t, partition).await,
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..60))).await;
    }
}

/// Fetches from a known offset (or 0) and checks what comes back (invariants 1 and 2).
async fn read(client: &mut Client, st: &SharedState, broker: u32, t: &TopicName, partition: u32, rng: &mut ChaCha8Rng) {
    let known: Vec<i64> = guard(st).seen.range((broker, t.to_string(), partition, 0)..=(broker, t.to_string(), partition, i64::MAX)).map(|(k, _)| k.3).collect();
    let offset = if known.is_empty() || rng.random_bool(0.3) { 0 } else { known[rng.random_range(0..known.len())] };
    let request = Request::Fetch(FetchRequest { topic: t.clone(), partition: partition as i32, offset, max_bytes: 4096 });
    let Some(Response::Fetch(f)) = client.call(broker, &request).await else {
        return trace(st, format!("fetch broker{broker} {t}-{partition}@{offset}: no answer"));
    };
    trace(st, format!("fetch broker{broker} {t}-{partition}@{offset}: {:?} {} bytes", f.error, f.messages.len()));
    match f.error {
        ErrorCode::NoError => {}
        // Retention is off and offsets come from earlier reads, so a known offset must exist.
        ErrorCode::OffsetOutOfRange if offset > 0 => {
            return violate(st, format!("broker{broker} {t}-{partition}: offset {offset}, read before, is now out of range"))
        }
        other => return trace(st, format!("broker{broker} fetch {t}-{partition}@{offset}: {other:?}")),
    }
    record_entries(st, broker, t, partition, offset, &f.messages);
}

fn record_entries(st: &SharedState, broker: u32, t: &TopicName, partition: u32, offset: i64, bytes: &Bytes) {
    let mut entries = ShallowIter::new(bytes, offset);
    let mut s = guard(st);
    s.last_success.insert(broker, sim_now_ms());
    for entry in entries.by_ref() {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                drop(s);
                return violate(st, format!("broker{broker} {t}-{partition}: corrupt message served: {e}"));
            }
        };
        let start = (entry.offset - offset) as usize;
        let raw = bytes.slice(start..(entry.next_offset - offset) as usize);
        for inner in DeepIter::new(raw.clone(), entry.offset, 1 << 20) {
            if let Err(e) = inner {
                drop(s);
                return violate(st, format!("broker{broker} {t}-{partition}: corrupt inner message served: {e}"));
            }
        }
        s.served_topics.insert((broker, t.to_string()));
        let key = (broker, t.to_string(), partition, entry.offset);
        match s.seen.get(&key) {
            Some(before) if *before != raw => {
                drop(s);
                return violate(st, format!("broker{broker} {t}-{partition}: entry at {} changed after it was read", entry.offset));
            }
            Some(_) => {}
            None => {
                s.seen.insert(key, raw);
            }
        }
    }
}

/// OFFSETS -1 must never go back (invariant 3).
async fn latest(client: &mut Client, st: &SharedState, broker: u32, t: &TopicName, partition: u32) {
    let request = Request::Offsets(OffsetsRequest { topic: t.clone(), partition: partition as i32, time: -1, max_offsets: 1 });
    let Some(Response::Offsets(o)) = client.call(broker, &request).await else {
        return trace(st, format!("offsets broker{broker} {t}-{partition}: no answer"));
    };
    trace(st, format!("offsets broker{broker} {t}-{partition}: {:?}", o.offsets));
    let Some(&now) = o.offsets.first() else { return };
    let key = (broker, t.to_string(), partition);
    let mut s = guard(st);
    s.last_success.insert(broker, sim_now_ms());
    let before = s.latest.get(&key).copied().unwrap_or(0);
    if now < before {
        drop(s);
        return violate(st, format!("broker{broker} {t}-{partition}: latest offset went back from {before} to {now}"));
    }
    s.latest.insert(key, now);
}

/// After healing: every broker serves again in time (5), every entry ever read reads back the
/// same (1), and ZooKeeper lists exactly the live brokers and their topics (4).
async fn final_checks(st: &SharedState, model: &SharedModel) {
    let mut client = Client { conns: BTreeMap::new() };
    let healed_at = sim_now_ms();
    for broker in 0..BROKERS {
        let request = Request::Offsets(OffsetsRequest { topic: topic(0), partition: 0, time: -2, max_offsets: 1 });
        loop {
            if client.call(broker, &request).await.is_some() {
                break;
            }
            if sim_now_ms() - healed_at > HEAL.as_millis() as i64 {
                return violate(st, format!("broker{broker} did not serve within {HEAL:?} of healing"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let seen: Vec<((u32, String, u32, i64), Bytes)> = guard(st).seen.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    for ((broker, t, partition, offset), bytes) in seen {
        let request = Request::Fetch(FetchRequest { topic: t.parse().unwrap_or_else(|_| topic(0)), partition: partition as i32, offset, max_bytes: bytes.len() as i32 });
        let mut answer = None;
        for _ in 0..5 {
            answer = client.call(broker, &request).await;
            if answer.is_some() {
                break;
            }
        }
        match answer {
            Some(Response::Fetch(f)) if f.error == ErrorCode::NoError && f.messages == bytes => {}
            Some(Response::Fetch(f)) => return violate(st, format!("broker{broker} {t}-{partition}: entry at {offset} lost or changed after healing ({:?}, {} bytes)", f.error, f.messages.len())),
            _ => return violate(st, format!("broker{broker}: no answer re-reading {t}-{partition}@{offset}")),
        }
    }
    for broker in 0..BROKERS {
        for (t, partition) in (0..TOPICS.len()).flat_map(|t| (0..PARTITIONS).map(move |p| (topic(t), p))) {
            if let Err(problem) = read_end_to_end(&mut client, broker, &t, partition).await {
                return violate(st, problem);
            }
        }
    }
    // Registrations settle within a session timeout or two after healing.
    let deadline = sim_now_ms() + HEAL.as_millis() as i64;
    loop {
        match registry_problem(st, model) {
            None => break,
            Some(problem) if sim_now_ms() > deadline => return violate(st, problem),
            Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    trace(st, "final checks passed".into());
}

/// Walks a partition from its earliest to its latest offset: every fetch must return whole,
/// valid messages and make progress (invariant 2, and no hole in what is visible).
async fn read_end_to_end(client: &mut Client, broker: u32, t: &TopicName, partition: u32) -> Result<(), String> {
    let offsets = |time| Request::Offsets(OffsetsRequest { topic: t.clone(), partition: partition as i32, time, max_offsets: 1 });
    let first = |r: Option<Response>| match r {
        Some(Response::Offsets(o)) => o.offsets.first().copied(),
        _ => None,
    };
    let no_answer = || format!("broker{broker}: no answer for offsets of {t}-{partition}");
    let mut offset = first(client.call(broker, &offsets(-2)).await).ok_or_else(no_answer)?;
    let end = first(client.call(broker, &offsets(-1)).await).ok_or_else(no_answer)?;
    while offset < end {
        let request = Request::Fetch(FetchRequest { topic: t.clone(), partition: partition as i32, offset, max_bytes: 8192 });
        let Some(Response::Fetch(f)) = client.call(broker, &request).await else {
            return Err(format!("broker{broker}: no answer reading {t}-{partition} at {offset}"));
        };
        let mut entries = ShallowIter::new(&f.messages, offset);
        for entry in entries.by_ref() {
            entry.map_err(|e| format!("broker{broker} {t}-{partition}: corrupt message at {offset}: {e}"))?;
        }
        let valid = entries.end().valid_bytes as i64;
        if f.error != ErrorCode::NoError || valid == 0 {
            return Err(format!("broker{broker} {t}-{partition}: stuck at offset {offset} of {end} ({:?}): the log is not readable end to end", f.error));
        }
        offset += valid;
    }
    Ok(())
}

fn registry_problem(st: &SharedState, model: &SharedModel) -> Option<String> {
    let m = model.lock().unwrap_or_else(|p| p.into_inner());
    let ids = m.children("/brokers/ids");
    let expected: Vec<String> = (0..BROKERS).map(|b| b.to_string()).collect();
    if ids != expected {
        return Some(format!("ZooKeeper lists brokers {ids:?}, expected {expected:?}"));
    }
    for (broker, t) in guard(st).served_topics.iter() {
        if !m.children(&format!("/brokers/topics/{t}")).contains(&broker.to_string()) {
            return Some(format!("topic {t} is not registered under broker {broker}"));
        }
    }
    None
}
