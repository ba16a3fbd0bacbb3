//! The cluster scenario: one cluster of two real brokers (the production `Broker` on
//! [`SimEnv`](crate::env::SimEnv)) with its ZooKeeper model, and a client that produces
//! serial-numbered messages and reads them back, under a fault schedule drawn from the seed.
//! Invariants ([`Invariant`]), checked as the run goes and after every fault has healed:
//!
//! 1. every message any read has returned stays readable at the same offset, byte for byte,
//!    across crashes (visible ⇒ durable);
//! 2. no read returns a corrupt or torn message, and every partition that held data reads end
//!    to end after healing (a partition refused at startup fails this, it is not skipped);
//! 3. a partition's latest offset never goes back;
//! 4. after healing, ZooKeeper lists exactly the live brokers, and every topic a broker served
//!    is registered under it;
//! 5. a broker that restarts serves again within a bounded simulated time: every partition it
//!    had answers OFFSETS without error, at or past the end seen before;
//! 6. the produce history ([`crate::history`]): nothing lost, duplicated, reordered, read from
//!    the wrong partition or invented; and after healing, a message produced to each partition
//!    of each broker becomes readable.
//!
//! One seed in five (or every seed, with [`Options::layout`]) runs the many-partitions layout
//! ([`Layout::Many`]): hundreds of partitions on each broker instead of four, so recovery,
//! registration and the final checks handle the per-partition bookkeeping at a larger size.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::client::{connect, Connection};
use tributary::failure::Failure;
use tributary_core::message::{
    CompressionCodec, DeepIter, Message, MessageSetBuilder, ShallowIter,
};
use tributary_core::wire::{
    ErrorCode, FetchRequest, OffsetsRequest, ProduceRequest, Request, Response, TopicName,
};

use crate::env::SimEnv;
use crate::history::{self, History, Location};
use crate::invariants::{Invariant, Violation};
use crate::sim_fs::{sim_builder, DiskFaults};
use crate::world::{add_cluster, Cluster, ClusterSpec, Control, Links, BROKER_PORT};

mod final_checks;
use final_checks::final_checks;

/// Brokers in the cluster.
pub const BROKERS: u32 = 2;
const TOPICS: [&str; 2] = ["orders", "clicks-2"];
const PARTITIONS: u32 = 2;
/// The many-partitions layout: topics and partitions per topic on each broker.
const MANY_TOPICS: usize = 12;
const MANY_PARTITIONS: u32 = 16;
/// The slowest disk operation the many-partitions layout draws.
const MANY_LATENCY_MAX: Duration = Duration::from_millis(20);
/// After healing, how long brokers get to serve again and to re-register.
const HEAL: Duration = Duration::from_secs(25);
/// Simulated time allowed after the faults for the final checks: five run one after the other,
/// each bounded by [`HEAL`], plus one [`HEAL`] for healing itself (restarts, reconnections), so
/// a check that fails gets to report its own invariant before the simulation's time runs out
/// (which would only say "did not finish").
const FINAL_CHECKS_TIME: Duration = Duration::from_secs(HEAL.as_secs() * 6);
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
    type Err = Failure;
    fn from_str(s: &str) -> Result<Self, Failure> {
        match s {
            "none" => Ok(Faults::None),
            "network" => Ok(Faults::Network),
            "crash" => Ok(Faults::Crash),
            "mixed" => Ok(Faults::Mixed),
            other => Err(Failure::from(format!(
                "unknown fault mode {other}: none, network, crash or mixed"
            ))),
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
    /// Kill the ZooKeeper server and start it again on its data after this long (sessions
    /// restored; a client away longer than 7/5 of its timeout gave its session up).
    ZkRestart(Duration),
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct ClusterReport {
    /// The topics and partitions the run had.
    pub layout: Layout,
    /// Simulated time covered.
    pub simulated: Duration,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Messages produced (sent; 0.7 produce has no acknowledgement).
    pub produced: u64,
    /// Distinct visible entries read and re-checked.
    pub entries_checked: usize,
    /// Distinct messages the history checker placed.
    pub messages_checked: u64,
    /// ZooKeeper sessions the model expired.
    pub sessions_expired: u64,
    /// fsyncs that failed on purpose.
    pub sync_failures: u64,
    /// Lines traced (client and broker events).
    pub trace_lines: u64,
    /// Of those kept, events the brokers themselves logged.
    pub broker_events: usize,
    /// Hash of the trace (same seed ⇒ same hash).
    pub trace_hash: u64,
    /// The trace's last lines.
    pub trace_tail: Vec<String>,
}

/// How a run is shaped.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Simulated seconds of workload before healing.
    pub duration_secs: u64,
    /// The fault mode.
    pub faults: Option<Faults>,
    /// The topics and partitions (`None`: the seed draws, [`Layout::Many`] one time in five).
    pub layout: Option<Layout>,
}

/// How many topics and partitions the brokers hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Layout {
    /// Two topics of two partitions on each broker.
    #[default]
    Few,
    /// [`MANY_TOPICS`] topics of [`MANY_PARTITIONS`] partitions on each broker (192).
    Many,
}

impl std::str::FromStr for Layout {
    type Err = Failure;
    fn from_str(s: &str) -> Result<Self, Failure> {
        match s {
            "few" => Ok(Layout::Few),
            "many" => Ok(Layout::Many),
            other => Err(Failure::from(format!(
                "unknown layout {other}: few or many"
            ))),
        }
    }
}

impl Layout {
    /// The seed's layout: drawn from its own generator, so the rest of a seed's draws (and the
    /// seeds the planted-bug tests rely on) are the same whichever layout it gets.
    pub fn draw(seed: u64) -> Self {
        if ChaCha8Rng::seed_from_u64(seed ^ 0x5CA1_E000).random_ratio(1, 5) {
            Layout::Many
        } else {
            Layout::Few
        }
    }

    /// Topics on each broker.
    pub fn topics(self) -> usize {
        match self {
            Layout::Few => TOPICS.len(),
            Layout::Many => MANY_TOPICS,
        }
    }

    /// Partitions of each topic on each broker.
    pub fn partitions(self) -> u32 {
        match self {
            Layout::Few => PARTITIONS,
            Layout::Many => MANY_PARTITIONS,
        }
    }

    /// Every (broker, topic, partition) of the run.
    fn every_partition(self) -> impl Iterator<Item = (u32, TopicName, u32)> {
        (0..BROKERS).flat_map(move |b| {
            (0..self.topics())
                .flat_map(move |t| (0..self.partitions()).map(move |p| (b, topic(t), p)))
        })
    }
}

/// What the client has seen, shared with the final checks.
#[derive(Debug, Default)]
struct Seen {
    layout: Layout,
    /// (broker, topic, partition, offset) → the entry's bytes, as first read.
    entries: BTreeMap<(u32, String, u32, i64), Bytes>,
    /// (broker, topic, partition) → the furthest end any read or OFFSETS showed.
    ends: BTreeMap<(u32, String, u32), i64>,
    latest: BTreeMap<(u32, String, u32), i64>,
    served_topics: BTreeSet<(u32, String)>,
    history: History,
    produced: u64,
    stop: bool,
    final_done: bool,
}

type SharedSeen = Arc<Mutex<Seen>>;

fn seen(s: &SharedSeen) -> std::sync::MutexGuard<'_, Seen> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn broker_host(broker: u32) -> String {
    format!("broker{broker}")
}

/// The fault schedule for `seed`: (time, fault) pairs, sorted, each partition or crash
/// followed by its repair or bounce.
pub fn schedule(seed: u64, mode: Faults, duration: Duration) -> Vec<(Duration, Fault)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xFA17);
    let mut out = Vec::new();
    let mut t = Duration::from_secs(rng.random_range(2..6));
    while t < duration && mode != Faults::None {
        let broker = broker_host(rng.random_range(0..BROKERS));
        let length = Duration::from_millis(rng.random_range(1000..8000));
        let crash = match mode {
            Faults::Crash => true,
            Faults::Network => false,
            _ => rng.random_bool(0.4),
        };
        if crash && rng.random_bool(0.15) {
            out.push((t, Fault::ZkRestart(length)));
        } else if crash {
            let down = if rng.random_bool(0.3) {
                Fault::Stop(broker.clone())
            } else {
                Fault::Crash(broker.clone())
            };
            out.push((t, down));
            out.push((t + length, Fault::Bounce(broker)));
        } else {
            let other = if rng.random_bool(0.5) {
                "zk".to_string()
            } else {
                "client".to_string()
            };
            out.push((t, Fault::Partition(broker.clone(), other.clone())));
            out.push((t + length, Fault::Repair(broker, other)));
        }
        t += length + Duration::from_millis(rng.random_range(500..6000));
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

/// The disks of a seed: half the seeds slow (each operation up to 5–200 ms), a quarter with
/// failing fsyncs (0.2 % of syncs).
fn disk_faults(rng: &mut ChaCha8Rng) -> DiskFaults {
    let latency_max = if rng.random_bool(0.5) {
        Duration::from_millis(rng.random_range(5..200))
    } else {
        Duration::ZERO
    };
    let sync_failures_per_million = if rng.random_bool(0.25) { 2000 } else { 0 };
    DiskFaults {
        latency_max,
        sync_failures_per_million,
    }
}

/// Runs one seed; `Err` carries the violated invariant and the report.
#[expect(
    clippy::result_large_err,
    reason = "one result per simulated run; the report is the point"
)]
pub fn run_seed(seed: u64, options: Options) -> Result<ClusterReport, (Violation, ClusterReport)> {
    let duration = Duration::from_secs(options.duration_secs.max(1));
    let mode = options.faults.unwrap_or(Faults::Mixed);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut builder = sim_builder(seed);
    builder
        .simulation_duration(duration + FINAL_CHECKS_TIME)
        // Small socket queues (full queues) and varied message latency, from the seed.
        .tcp_capacity(rng.random_range(16..256))
        .min_message_latency(Duration::from_millis(rng.random_range(0..2)))
        .max_message_latency(Duration::from_millis(rng.random_range(2..40)));
    // Torn writes: a crash keeps a random prefix of the blocks of unsynced writes.
    builder.fs().block_size(512);
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let _capture = control.trace.capture();
    let layout = options.layout.unwrap_or_else(|| Layout::draw(seed));
    let mut disk = disk_faults(&mut rng);
    if layout == Layout::Many {
        // Hundreds of partitions are each created with a few synced operations: at up to
        // 200 ms an operation the final checks alone would take minutes.
        disk.latency_max = disk.latency_max.min(MANY_LATENCY_MAX);
    }
    let spec = ClusterSpec {
        disk,
        ..ClusterSpec::new("", BROKERS, layout.partitions())
    };
    let cluster = add_cluster(&mut sim, &spec, &mut rng, &control);
    let state: SharedSeen = Arc::default();
    seen(&state).layout = layout;
    control
        .trace
        .push(&format!("seed {seed}: layout {layout:?}"));
    let client_seed: u64 = rng.random();
    let (st, c, m) = (state.clone(), control.clone(), cluster.model.clone());
    sim.client("client", async move {
        workload(client_seed, &st, &c).await;
        final_checks(&st, &c, &m).await;
        seen(&st).final_done = true;
        Ok(())
    });
    let mut report = ClusterReport {
        layout,
        ..ClusterReport::default()
    };
    let result = drive(
        &mut sim,
        &control,
        &cluster,
        &state,
        schedule(seed, mode, duration),
        duration,
        &mut report,
    );
    let s = seen(&state);
    report.produced = s.produced;
    report.entries_checked = s.entries.len();
    report.messages_checked = s.history.messages_read;
    report.sessions_expired = cluster.model.lock().map(|m| m.expired).unwrap_or(0);
    report.sync_failures = cluster.disks.values().map(|d| d.sync_failures()).sum();
    report.trace_lines = control.trace.len();
    report.broker_events = control.trace.grep("tributary::broker").len();
    report.trace_hash = control.trace.hash();
    report.trace_tail = control.trace.report_tail(40);
    report.simulated = sim.elapsed();
    crate::world::outcome(result, &control, report)
}

fn drive(
    sim: &mut turmoil::Sim<'_>,
    control: &Control,
    cluster: &Cluster,
    state: &SharedSeen,
    faults: Vec<(Duration, Fault)>,
    duration: Duration,
    report: &mut ClusterReport,
) -> Result<(), Failure> {
    let mut pending = faults.into_iter().peekable();
    let mut down = BTreeSet::new();
    let mut hosts = vec![cluster.zk_host.clone(), "client".to_string()];
    hosts.extend(cluster.brokers.iter().cloned());
    let mut links = Links::new(hosts);
    while sim.elapsed() < duration {
        while let Some((_, fault)) = pending.next_if(|(t, _)| *t <= sim.elapsed()) {
            apply(sim, &mut links, control, cluster, &fault, &mut down, report);
            control
                .trace
                .push_at(sim.elapsed(), &format!("fault {fault:?}"));
        }
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
    }
    heal(sim, &mut links, control, cluster, &mut down, report);
    seen(state).stop = true;
    while !seen(state).final_done {
        if sim.elapsed() > duration + FINAL_CHECKS_TIME {
            return Err("final checks did not finish".into());
        }
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
    }
    Ok(())
}

/// Ends every fault: links repaired, downed brokers restarted, and brokers whose disk failed
/// an fsync restarted by the "operator" (a poisoned partition takes writes only after one).
fn heal(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    cluster: &Cluster,
    down: &mut BTreeSet<String>,
    report: &mut ClusterReport,
) {
    links.repair_all(sim);
    for (host, disk) in &cluster.disks {
        disk.stop_failing();
        if disk.sync_failures() > 0 && !down.contains(host) {
            control.trace.push_at(
                sim.elapsed(),
                &format!(
                    "operator restarts {host} after {} failed fsyncs",
                    disk.sync_failures()
                ),
            );
            links.crash(sim, host);
            down.insert(host.clone());
        }
    }
    for host in std::mem::take(down) {
        control.forget_stop(&host);
        links.bounce(sim, &host);
        *report.faults.entry("bounce").or_default() += 1;
    }
}

fn apply(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    cluster: &Cluster,
    fault: &Fault,
    down: &mut BTreeSet<String>,
    report: &mut ClusterReport,
) {
    let kind = match fault {
        Fault::Partition(a, b) => {
            links.partition(sim, a, b);
            "partition"
        }
        Fault::Repair(a, b) => {
            links.repair(sim, a, b);
            "repair"
        }
        Fault::Crash(h) => {
            if !down.insert(h.clone()) {
                return;
            }
            links.crash(sim, h);
            "crash"
        }
        Fault::Stop(h) => {
            if !down.insert(h.clone()) {
                return;
            }
            control.request_stop(h);
            "stop"
        }
        Fault::Bounce(h) => {
            if !down.remove(h) {
                return;
            }
            control.forget_stop(h);
            links.bounce(sim, h);
            "bounce"
        }
        Fault::ZkRestart(down) => {
            crate::zk_model::crash_and_restart(&cluster.model, *down);
            "zookeeper restart"
        }
    };
    *report.faults.entry(kind).or_default() += 1;
}

/// The client's connections, one per broker, each with an id for the history.
struct Client {
    conns: BTreeMap<u32, (u64, Connection<turmoil::net::TcpStream>)>,
    next_id: u64,
}

impl Client {
    fn new() -> Self {
        Client {
            conns: BTreeMap::new(),
            next_id: 0,
        }
    }

    async fn call(&mut self, broker: u32, request: &Request) -> Option<Response> {
        let (_, conn) = self.conn(broker).await?;
        match conn.call(request).await {
            Ok(response) => Some(response),
            Err(_) => {
                self.conns.remove(&broker);
                None
            }
        }
    }

    async fn send(&mut self, broker: u32, request: &Request) -> bool {
        let Some((_, conn)) = self.conn(broker).await else {
            return false;
        };
        let ok = conn.send(request).await.is_ok();
        if !ok {
            self.conns.remove(&broker);
        }
        ok
    }

    /// The connection to `broker` (dialled if needed) and its id.
    async fn conn(
        &mut self,
        broker: u32,
    ) -> Option<&mut (u64, Connection<turmoil::net::TcpStream>)> {
        if let std::collections::btree_map::Entry::Vacant(slot) = self.conns.entry(broker) {
            let conn = connect(
                &SimEnv::new(0),
                &broker_host(broker),
                BROKER_PORT,
                CALL_TIMEOUT,
            )
            .await
            .ok()?;
            self.next_id += 1;
            slot.insert((self.next_id, conn));
        }
        self.conns.get_mut(&broker)
    }
}

/// The `i`th topic: [`TOPICS`], then `t2`, `t3`, ...
fn topic(i: usize) -> TopicName {
    let name = match TOPICS.get(i) {
        Some(name) => name.to_string(),
        None => format!("t{i}"),
    };
    name.parse()
        .unwrap_or_else(|_| panic!("scenario topic names are valid"))
}

async fn workload(seed: u64, st: &SharedSeen, control: &Control) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut client = Client::new();
    let mut serial = 0u64;
    let layout = seen(st).layout;
    while !seen(st).stop {
        let broker = rng.random_range(0..BROKERS);
        let t = topic(rng.random_range(0..layout.topics()));
        let partition = rng.random_range(0..layout.partitions());
        match rng.random_range(0..10) {
            0..5 => {
                produce(
                    &mut client,
                    st,
                    control,
                    broker,
                    &t,
                    partition,
                    &mut serial,
                    &mut rng,
                )
                .await
            }
            5..8 => read(&mut client, st, control, broker, &t, partition, &mut rng).await,
            _ => latest(&mut client, st, control, broker, &t, partition).await,
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..60))).await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn produce(
    client: &mut Client,
    st: &SharedSeen,
    control: &Control,
    broker: u32,
    t: &TopicName,
    partition: u32,
    serial: &mut u64,
    rng: &mut ChaCha8Rng,
) {
    let Some((connection, _)) = client.conn(broker).await.map(|(id, _)| (*id, ())) else {
        return control.trace.push(&format!(
            "produce broker{broker} {t}-{partition}: cannot connect"
        ));
    };
    let codec = [
        CompressionCodec::None,
        CompressionCodec::Gzip,
        CompressionCodec::Snappy,
    ][rng.random_range(0..3)];
    let location: Location = (broker_host(broker), t.to_string(), partition);
    let mut set = MessageSetBuilder::new();
    let n = rng.random_range(1..6);
    for _ in 0..n {
        *serial += 1;
        set.push_message(&Message::new(history::payload(
            *serial, &location, connection,
        )));
        seen(st).history.sent(*serial, location.clone(), connection);
    }
    let request = Request::Produce(ProduceRequest {
        topic: t.clone(),
        partition: partition as i32,
        messages: set.build(codec),
    });
    let sent = client.send(broker, &request).await;
    seen(st).produced += n;
    control.trace.push(&format!(
        "produce broker{broker} {t}-{partition} n={n} up to {serial} on c{connection} sent={sent}"
    ));
}

/// Fetches from a known offset (or 0) and checks what comes back (invariants 1, 2 and 6).
async fn read(
    client: &mut Client,
    st: &SharedSeen,
    control: &Control,
    broker: u32,
    t: &TopicName,
    partition: u32,
    rng: &mut ChaCha8Rng,
) {
    let known: Vec<i64> = seen(st)
        .entries
        .range((broker, t.to_string(), partition, 0)..=(broker, t.to_string(), partition, i64::MAX))
        .map(|(k, _)| k.3)
        .collect();
    let offset = if known.is_empty() || rng.random_bool(0.3) {
        0
    } else {
        known[rng.random_range(0..known.len())]
    };
    let request = Request::Fetch(FetchRequest {
        topic: t.clone(),
        partition: partition as i32,
        offset,
        max_bytes: 4096,
    });
    let Some(Response::Fetch(f)) = client.call(broker, &request).await else {
        return control.trace.push(&format!(
            "fetch broker{broker} {t}-{partition}@{offset}: no answer"
        ));
    };
    control.trace.push(&format!(
        "fetch broker{broker} {t}-{partition}@{offset}: {:?} {} bytes",
        f.error,
        f.messages.len()
    ));
    match f.error {
        ErrorCode::NoError => {}
        // Retention is off and offsets come from earlier reads, so a known offset must exist.
        ErrorCode::OffsetOutOfRange if offset > 0 => {
            return control.violate(
                Invariant::VisibleIsDurable,
                format!(
                "broker{broker} {t}-{partition}: offset {offset}, read before, is now out of range"
            ),
            )
        }
        _ => return,
    }
    if let Err(v) = record_entries(st, broker, t, partition, offset, &f.messages) {
        control.violate(v.invariant, v.detail);
    }
}

/// Records every whole entry of a fetch: corrupt ones break invariant 2, changed ones
/// invariant 1, and every message goes through the history checker (6).
fn record_entries(
    st: &SharedSeen,
    broker: u32,
    t: &TopicName,
    partition: u32,
    offset: i64,
    bytes: &Bytes,
) -> Result<(), Violation> {
    let violation = |invariant, detail| Violation { invariant, detail };
    let location: Location = (broker_host(broker), t.to_string(), partition);
    let mut entries = ShallowIter::new(bytes, offset);
    let mut s = seen(st);
    for entry in entries.by_ref() {
        let entry = entry.map_err(|e| {
            violation(
                Invariant::NoCorruptRead,
                format!("broker{broker} {t}-{partition}: corrupt message served: {e}"),
            )
        })?;
        let start = (entry.offset - offset) as usize;
        let raw = bytes.slice(start..(entry.next_offset - offset) as usize);
        for (index, inner) in DeepIter::new(raw.clone(), entry.offset, 1 << 20).enumerate() {
            let inner = inner.map_err(|e| {
                violation(
                    Invariant::NoCorruptRead,
                    format!("broker{broker} {t}-{partition}: corrupt inner message served: {e}"),
                )
            })?;
            s.history
                .read(
                    &location,
                    (entry.offset, index as u32),
                    &inner.message.payload,
                )
                .map_err(|e| violation(Invariant::History, e.to_string()))?;
        }
        s.served_topics.insert((broker, t.to_string()));
        let end = s
            .ends
            .entry((broker, t.to_string(), partition))
            .or_insert(0);
        *end = (*end).max(entry.next_offset);
        let key = (broker, t.to_string(), partition, entry.offset);
        match s.entries.get(&key) {
            Some(before) if *before != raw => {
                return Err(violation(
                    Invariant::VisibleIsDurable,
                    format!(
                        "broker{broker} {t}-{partition}: entry at {} changed after it was read",
                        entry.offset
                    ),
                ))
            }
            Some(_) => {}
            None => {
                s.entries.insert(key, raw);
            }
        }
    }
    Ok(())
}

/// OFFSETS -1 must never go back (invariant 3).
async fn latest(
    client: &mut Client,
    st: &SharedSeen,
    control: &Control,
    broker: u32,
    t: &TopicName,
    partition: u32,
) {
    let request = Request::Offsets(OffsetsRequest {
        topic: t.clone(),
        partition: partition as i32,
        time: -1,
        max_offsets: 1,
    });
    let Some(Response::Offsets(o)) = client.call(broker, &request).await else {
        return control.trace.push(&format!(
            "offsets broker{broker} {t}-{partition}: no answer"
        ));
    };
    control.trace.push(&format!(
        "offsets broker{broker} {t}-{partition}: {:?} {:?}",
        o.error, o.offsets
    ));
    let Some(&now) = o.offsets.first().filter(|_| o.error == ErrorCode::NoError) else {
        return;
    };
    let key = (broker, t.to_string(), partition);
    let mut s = seen(st);
    let before = s.latest.get(&key).copied().unwrap_or(0);
    if now < before {
        drop(s);
        return control.violate(
            Invariant::LatestNeverGoesBack,
            format!(
                "broker{broker} {t}-{partition}: latest offset went back from {before} to {now}"
            ),
        );
    }
    s.latest.insert(key.clone(), now);
    let end = s.ends.entry(key).or_insert(0);
    *end = (*end).max(now);
}

/// A broker asked to stop while ZooKeeper is unreachable (its session expired, and the
/// re-registration cannot get through) still stops gracefully within a bounded time. Returns
/// how long the stop took, in simulated time.
pub fn stop_while_zookeeper_is_unreachable(seed: u64) -> Result<Duration, Failure> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut sim = sim_builder(seed)
        .simulation_duration(Duration::from_secs(300))
        .build();
    let control = Arc::new(Control::default());
    let _capture = control.trace.capture();
    let cluster = add_cluster(&mut sim, &ClusterSpec::new("", 1, 1), &mut rng, &control);
    let (broker, zk) = (cluster.brokers[0].clone(), cluster.zk_host.clone());
    let until = |sim: &mut turmoil::Sim<'_>, what: &str, limit: Duration| -> Result<(), Failure> {
        let deadline = sim.elapsed() + limit;
        while control.trace.grep(what).is_empty() {
            if sim.elapsed() > deadline {
                return Err(Failure::from(format!(
                    "no \"{what}\" within {limit:?}:\n{}",
                    control.trace.tail(20).join("\n")
                )));
            }
            sim.step().map_err(|e| Failure::from(e.to_string()))?;
        }
        Ok(())
    };
    // The broker's own log line once it serves (the cluster has one broker).
    until(&mut sim, "serving on", Duration::from_secs(10))?;
    // Long enough apart for the session to expire; then a moment of contact, in which the
    // broker learns of the expiry, and ZooKeeper is gone again for its re-registration.
    sim.partition(broker.as_str(), zk.as_str());
    let cut_until = sim.elapsed() + Duration::from_secs(8);
    while sim.elapsed() < cut_until {
        sim.step().map_err(|e| Failure::from(e.to_string()))?;
    }
    sim.repair(broker.as_str(), zk.as_str());
    until(
        &mut sim,
        "ZooKeeper session expired",
        Duration::from_secs(10),
    )?;
    sim.partition(broker.as_str(), zk.as_str());
    let retry_until = sim.elapsed() + Duration::from_secs(3);
    while sim.elapsed() < retry_until {
        sim.step().map_err(|e| Failure::from(e.to_string()))?;
    }
    let asked = sim.elapsed();
    control.request_stop(&broker);
    until(
        &mut sim,
        &format!("{broker} stopped gracefully"),
        Duration::from_secs(30),
    )?;
    match control.violation() {
        Some(v) => Err(Failure::from(v.to_string())),
        None => Ok(sim.elapsed() - asked),
    }
}
