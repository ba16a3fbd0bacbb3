//! The replica scenario: a source cluster (two brokers, a ZooKeeper model) and a replica
//! cluster whose two brokers each copy the source broker of their id byte for byte (replica
//! mode, configured as an operator would), producers writing to the source with durable
//! acknowledgements, and a consumer group on the source whose offsets the replicas sync — all
//! as the production code on turmoil hosts, under seeded faults: the link between the clusters
//! cut, brokers cut from either ZooKeeper, crashes of source and replica brokers, graceful
//! restarts of replica brokers, slow replica disks.
//!
//! Invariants ([`Invariant`]):
//! - `ReplicaIdentity`: after healing, every offset a replica serves holds the source's bytes at
//!   that offset (which also rules out duplicates: one extra byte would shift every offset
//!   after it);
//! - `ReplicaNoLoss`: within [`DRAIN`] of healing, every replica partition ends where its source
//!   partition ends;
//! - `ReplicaSyncAhead` (every 200 ms): a consumer offset synced into the replica cluster's
//!   ZooKeeper is never past what that replica serves.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::client::connect;
use tributary::consumer::{ConsumerConnector, ConsumerError, Subscription};
use tributary::producer::{Producer, Record};
use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
use tributary_core::message::ShallowIter;
use tributary_core::wire::{ErrorCode, FetchRequest, Request, Response, TopicName};

use crate::cluster::Faults;
use crate::env::SimEnv;
use crate::mirror::{partitions_of, range_of, Part};
use crate::sim_fs::{sim_builder, DiskFaults};
use crate::world::{
    add_cluster, Cluster, ClusterSpec, Control, Invariant, Links, Violation, BROKER_PORT, ZK_PORT,
};

/// After the last fault heals, how long the replicas may take to catch up.
pub const DRAIN: Duration = Duration::from_secs(60);
/// The consumer group on the source whose offsets are synced.
const GROUP: &str = "app";
const TOPICS: [&str; 2] = ["events", "audit"];

/// What a run does.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Simulated time of workload and faults before healing.
    pub duration: Duration,
    /// Which faults.
    pub faults: Faults,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct ReplicaReport {
    /// Simulated time covered.
    pub simulated: Duration,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Messages the source acknowledged.
    pub acked: usize,
    /// Partitions compared, and their bytes.
    pub partitions: usize,
    /// Bytes compared between source and replica.
    pub bytes_compared: usize,
    /// Synced offsets checked against the replicas' ends.
    pub syncs_checked: u64,
    /// From the last heal until every replica partition reached its source's end.
    pub drained_after: Option<Duration>,
    /// Hash of the trace (same seed, same hash).
    pub trace_hash: u64,
    /// The trace's last lines.
    pub trace_tail: Vec<String>,
}

#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    stop_producing: bool,
    acked: usize,
    syncs_checked: u64,
    /// Set by the driver: read both clusters whole.
    check: bool,
    /// Every source partition seen registered during the run.
    seen: std::collections::BTreeSet<Part>,
    /// Per source partition: (source bytes, replica bytes) or a problem.
    final_read: Option<Result<BothRead, String>>,
}

/// Per source partition: (the source's bytes, the replica's bytes).
type BothRead = BTreeMap<Part, (Vec<u8>, Vec<u8>)>;

type Shared = Arc<Mutex<State>>;

fn state(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn parse<T>(
    what: &str,
    text: &str,
    f: impl Fn(&Properties) -> Result<T, tributary_core::config::ConfigError>,
) -> T {
    match f(&Properties::parse("sim", text).unwrap_or_default()) {
        Ok(c) => c,
        Err(e) => panic!("scenario {what} config refused: {e}"),
    }
}

/// Runs one seed; `Err` names the broken invariant.
#[expect(
    clippy::result_large_err,
    reason = "one result per simulated run; the report is the point"
)]
pub fn run_seed(seed: u64, options: Options) -> Result<ReplicaReport, (Violation, ReplicaReport)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut builder = sim_builder(seed);
    builder
        .simulation_duration(options.duration + DRAIN * 3)
        .tcp_capacity(rng.random_range(64..256))
        .max_message_latency(Duration::from_millis(rng.random_range(2..20)));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let _capture = control.trace.capture();
    control.trace.push(&format!("seed {seed}"));
    let shared: Shared = Arc::default();
    let source = add_cluster(&mut sim, &ClusterSpec::new("src", 2, 2), &mut rng, &control);
    let mut spec = ClusterSpec::new("dst", 2, 1);
    spec.extra_config = format!(
        "replica.source.zk.connect=src-zk:{ZK_PORT}\nreplica.offsets.sync.groups={GROUP}\nreplica.offsets.sync.interval.ms={}\n\
         replica.fetch.size={}\nreplica.fetch.backoff.ms=50\nreplica.socket.timeout.ms=2000\n",
        rng.random_range(100..1000),
        rng.random_range(1024..65_536),
    );
    if options.faults != Faults::None && options.faults != Faults::Network && rng.random_bool(0.4) {
        spec.disk = DiskFaults {
            latency_max: Duration::from_millis(rng.random_range(1..15)),
            sync_failures_per_million: 0,
        };
    }
    let replica = add_cluster(&mut sim, &spec, &mut rng, &control);
    for i in 0..2 {
        add_producer(&mut sim, i, rng.random(), &shared, &control);
    }
    add_consumer(&mut sim, rng.random(), &control);
    add_checker(&mut sim, &source, &replica, &shared, &control);
    let mut hosts = vec![
        source.zk_host.clone(),
        replica.zk_host.clone(),
        "producer0".into(),
        "producer1".into(),
        "consumer".into(),
        "checker".into(),
    ];
    hosts.extend(source.brokers.iter().cloned());
    hosts.extend(replica.brokers.iter().cloned());
    let mut links = Links::new(hosts);
    let mut report = ReplicaReport::default();
    let result = drive(
        &mut sim,
        &mut links,
        &control,
        (&source, &replica),
        &shared,
        seed,
        options,
        &mut report,
    );
    if result.is_ok() && control.violation().is_none() {
        judge(&shared, &control, &mut report);
    }
    {
        let s = state(&shared);
        report.acked = s.acked;
        report.syncs_checked = s.syncs_checked;
    }
    report.trace_hash = control.trace.hash();
    report.trace_tail = control.trace.tail(40);
    report.simulated = sim.elapsed();
    match (result, control.violation()) {
        (_, Some(v)) => Err((v, report)),
        (Err(e), None) => Err((
            Violation {
                invariant: Invariant::BrokerHealth,
                detail: e,
            },
            report,
        )),
        (Ok(()), None) => Ok(report),
    }
}

fn add_producer(
    sim: &mut turmoil::Sim<'_>,
    index: u32,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control, name) = (shared.clone(), control.clone(), format!("producer{index}"));
    sim.host(name.clone().as_str(), move || {
        let (shared, control, name) = (shared.clone(), control.clone(), name.clone());
        async move {
            let text = format!("zk.connect=src-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nproducer.type=sync\ndurable.acks=true\nnum.retries=3\nsocket.timeout.ms=2000\ncompression.codec={}\n", index);
            let producer = loop {
                match Producer::start(SimEnv::new(seed), parse("producer", &text, ProducerConfig::from_properties)).await {
                    Ok(p) => break p,
                    Err(e) => control.trace.push(&format!("{name}: {e}; retrying")),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            loop {
                let seq = {
                    let mut s = state(&shared);
                    if s.stop_producing {
                        break;
                    }
                    s.next_seq += 1;
                    s.next_seq
                };
                let topic = TOPICS[rng.random_range(0..TOPICS.len())];
                let Ok(t) = topic.parse::<TopicName>() else { continue };
                let records: Vec<Record> = (0..rng.random_range(1..4))
                    .map(|i| Record::new(t.clone(), format!("r {seq}.{i}").into_bytes()))
                    .collect();
                match producer.send_all(records).await {
                    Ok(deliveries) => {
                        for d in deliveries {
                            if d.await.is_ok() {
                                state(&shared).acked += 1;
                            }
                        }
                    }
                    Err(e) => control.trace.push(&format!("{name}: not sent: {e}")),
                }
                tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
            }
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

/// A consumer group on the source, committing as it goes (its offsets are what the replicas
/// sync).
fn add_consumer(sim: &mut turmoil::Sim<'_>, seed: u64, control: &Arc<Control>) {
    let control = control.clone();
    sim.host("consumer", move || {
        let control = control.clone();
        async move {
            let text = format!("zk.connect=src-zk:{ZK_PORT}\ngroupid={GROUP}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nautooffset.reset=smallest\nfetcher.backoff.ms=100\nautocommit.interval.ms=200\nconsumer.timeout.ms=1000\nsocket.timeout.ms=2000\n");
            let config = parse("consumer", &text, ConsumerConfig::from_properties);
            let (connector, mut streams) = loop {
                match ConsumerConnector::start(SimEnv::new(seed), config.clone(), Subscription::Whitelist(".*".into(), 1)).await {
                    Ok(started) => break started,
                    Err(e) => control.trace.push(&format!("consumer: {e}; retrying")),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            let mut stream = streams.remove(0);
            loop {
                match stream.next().await {
                    Ok(_) | Err(ConsumerError::Timeout(_)) => {}
                    Err(ConsumerError::Closed) => break,
                    Err(e) => control.trace.push(&format!("consumer: {e}")),
                }
            }
            drop(connector);
            Ok(())
        }
    });
}

/// Checks synced offsets against the replicas' ends while running; reads both clusters whole
/// when the driver asks.
fn add_checker(
    sim: &mut turmoil::Sim<'_>,
    source: &Cluster,
    replica: &Cluster,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control) = (shared.clone(), control.clone());
    let (source_model, replica_model) = (source.model.clone(), replica.model.clone());
    sim.host("checker", move || {
        let (shared, control, source_model, replica_model) = (shared.clone(), control.clone(), source_model.clone(), replica_model.clone());
        async move {
            loop {
                if state(&shared).check {
                    let seen = state(&shared).seen.clone();
                    let read = read_both(&source_model, &seen).await;
                    state(&shared).final_read = Some(read);
                    return Ok(());
                }
                let registered = partitions_of(&source_model);
                state(&shared).seen.extend(registered);
                // Offsets first, ends after: an end only grows, so an offset past a later end
                // was past it when synced.
                for (part, offset) in synced_offsets(&replica_model) {
                    if let Ok((_, end)) = range_of(&part, "dst").await {
                        state(&shared).syncs_checked += 1;
                        if offset > end {
                            control.violate(Invariant::ReplicaSyncAhead, format!("{}/{}: offset {offset} synced for {GROUP}, but the replica serves only up to {end}", part.0, part.1));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
}

/// The group's offsets in a cluster's ZooKeeper model.
fn synced_offsets(model: &crate::zk_model::SharedModel) -> Vec<(Part, i64)> {
    let m = model.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::new();
    for topic in m.children(&format!("/consumers/{GROUP}/offsets")) {
        for partition in m.children(&format!("/consumers/{GROUP}/offsets/{topic}")) {
            let offset = m
                .data(&format!("/consumers/{GROUP}/offsets/{topic}/{partition}"))
                .and_then(|d| String::from_utf8_lossy(&d).trim().parse().ok());
            if let Some(offset) = offset {
                out.push(((topic.clone(), partition), offset));
            }
        }
    }
    out
}

/// Every source partition's bytes and its replica's.
async fn read_both(
    source_model: &crate::zk_model::SharedModel,
    seen: &std::collections::BTreeSet<Part>,
) -> Result<BTreeMap<Part, (Vec<u8>, Vec<u8>)>, String> {
    let mut out = BTreeMap::new();
    let parts: std::collections::BTreeSet<Part> = partitions_of(source_model).into_iter().collect();
    // A source broker not registered again yet must not leave its partitions unchecked: every
    // partition ever seen registered must be there.
    if let Some(missing) = seen.iter().find(|p| !parts.contains(*p)) {
        return Err(format!(
            "source partition {}/{} is not registered (yet)",
            missing.0, missing.1
        ));
    }
    for part in parts {
        let a = raw_bytes(&part, "src").await?;
        let b = raw_bytes(&part, "dst").await?;
        out.insert(part, (a, b));
    }
    Ok(out)
}

/// A partition's bytes from its earliest offset to its end, read with FETCH.
async fn raw_bytes(part: &Part, cluster: &str) -> Result<Vec<u8>, String> {
    let (earliest, _) = range_of(part, cluster).await?;
    if earliest != 0 {
        return Err(format!(
            "{cluster} {}/{} starts at {earliest}, not 0 (no retention here)",
            part.0, part.1
        ));
    }
    let (broker, partition) = part.1.split_once('-').ok_or("bad partition name")?;
    let partition: i32 = partition.parse().map_err(|_| "bad partition")?;
    let topic: TopicName = part.0.parse().map_err(|_| "bad topic")?;
    let mut conn = connect(
        &SimEnv::new(0),
        &format!("{cluster}-broker{broker}"),
        BROKER_PORT,
        Duration::from_secs(2),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    loop {
        let fetch = Request::Fetch(FetchRequest {
            topic: topic.clone(),
            partition,
            offset: out.len() as i64,
            max_bytes: 1 << 16,
        });
        let Response::Fetch(f) = conn.call(&fetch).await.map_err(|e| e.to_string())? else {
            return Err("not a fetch answer".into());
        };
        if f.error != ErrorCode::NoError {
            return Err(format!(
                "{cluster} {}/{} at {}: {:?}",
                part.0,
                part.1,
                out.len(),
                f.error
            ));
        }
        let mut entries = ShallowIter::new(&f.messages, out.len() as i64);
        entries.by_ref().for_each(drop);
        let valid = entries.end().valid_bytes;
        if valid == 0 {
            return Ok(out);
        }
        out.extend_from_slice(f.messages.get(..valid).unwrap_or_default());
    }
}

/// A fault and how it ends.
#[derive(Debug, Clone)]
enum Fault {
    /// Every replica broker cut from every source host.
    Between,
    /// One link cut.
    Link(String, String),
    /// A host crashed (restarted at the end).
    Crash(String),
    /// A replica broker stopped gracefully (started again at the end).
    Restart(String),
}

impl Fault {
    fn kind(&self) -> &'static str {
        match self {
            Fault::Between => "link between the clusters cut",
            Fault::Link(..) => "broker cut from a ZooKeeper",
            Fault::Crash(h) if h.starts_with("src") => "source broker crash",
            Fault::Crash(_) => "replica broker crash",
            Fault::Restart(_) => "replica broker graceful restart",
        }
    }
}

fn cut_between(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    (source, replica): (&Cluster, &Cluster),
    cut: bool,
) {
    let mut far = source.brokers.clone();
    far.push(source.zk_host.clone());
    for a in &replica.brokers {
        for b in &far {
            if cut {
                links.partition(sim, a, b);
            } else {
                links.repair(sim, a, b);
            }
        }
    }
}

fn end_fault(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    clusters: (&Cluster, &Cluster),
    fault: &Fault,
) {
    match fault {
        Fault::Between => cut_between(sim, links, clusters, false),
        Fault::Link(a, b) => links.repair(sim, a, b),
        Fault::Crash(h) => links.bounce(sim, h),
        Fault::Restart(h) => {
            control.forget_stop(h);
            links.crash(sim, h);
            links.bounce(sim, h);
        }
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "the driver's whole world, passed once"
)]
fn drive(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    clusters: (&Cluster, &Cluster),
    shared: &Shared,
    seed: u64,
    options: Options,
    report: &mut ReplicaReport,
) -> Result<(), String> {
    let (source, replica) = clusters;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5EB1_1CA5);
    let mut next_fault = Duration::from_secs(rng.random_range(3..6));
    let mut active: Vec<(Duration, Fault)> = Vec::new();
    let network = matches!(options.faults, Faults::Network | Faults::Mixed);
    let crash = matches!(options.faults, Faults::Crash | Faults::Mixed);
    while sim.elapsed() < options.duration {
        let now = sim.elapsed();
        if now >= next_fault && options.faults != Faults::None {
            let pick = |rng: &mut ChaCha8Rng, from: &[String]| {
                from[rng.random_range(0..from.len())].clone()
            };
            let fault = match rng.random_range(0..10) {
                0..3 if network => Some(Fault::Between),
                3..5 if network => {
                    let mut brokers = source.brokers.clone();
                    brokers.extend(replica.brokers.iter().cloned());
                    let host = pick(&mut rng, &brokers);
                    let zk = if host.starts_with("src") || rng.random_bool(0.5) {
                        source.zk_host.clone()
                    } else {
                        replica.zk_host.clone()
                    };
                    Some(Fault::Link(host, zk))
                }
                5..7 if crash => Some(Fault::Crash(pick(&mut rng, &source.brokers))),
                7..9 if crash => Some(Fault::Crash(pick(&mut rng, &replica.brokers))),
                9 if crash => Some(Fault::Restart(pick(&mut rng, &replica.brokers))),
                _ => None,
            };
            let length = Duration::from_millis(rng.random_range(1000..10_000));
            next_fault = now + length + Duration::from_millis(rng.random_range(1000..5000));
            if let Some(fault) = fault {
                control
                    .trace
                    .push_at(now, &format!("fault {fault:?} for {length:?}"));
                *report.faults.entry(fault.kind()).or_default() += 1;
                match &fault {
                    Fault::Between => cut_between(sim, links, clusters, true),
                    Fault::Link(a, b) => links.partition(sim, a, b),
                    Fault::Crash(h) => links.crash(sim, h),
                    Fault::Restart(h) => control.request_stop(h),
                }
                active.push((now + length, fault));
            }
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut active)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        active = later;
        for (_, fault) in due {
            end_fault(sim, links, control, clusters, &fault);
        }
        if control.violation().is_some() {
            return Ok(());
        }
        sim.step().map_err(|e| format!("simulation error: {e}"))?;
    }
    for (_, fault) in std::mem::take(&mut active) {
        end_fault(sim, links, control, clusters, &fault);
    }
    state(shared).stop_producing = true;
    let healed = sim.elapsed();
    control.trace.push_at(healed, "healed; producing stopped");
    // Settle: the producers' last sends resolve, then every replica partition must reach its
    // source's end.
    while sim.elapsed() < healed + Duration::from_secs(3) {
        sim.step().map_err(|e| format!("simulation error: {e}"))?;
    }
    state(shared).check = true;
    loop {
        if control.violation().is_some() {
            return Ok(());
        }
        let read = state(shared).final_read.take();
        match read {
            Some(Ok(parts)) if parts.values().all(|(a, b)| a.len() == b.len()) => {
                report.drained_after = Some(sim.elapsed() - healed);
                control.trace.push_at(sim.elapsed(), "replicas caught up");
                state(shared).final_read = Some(Ok(parts));
                return Ok(());
            }
            Some(other) => {
                if sim.elapsed() > healed + DRAIN {
                    // Wrong bytes are the first thing to name, if there are any.
                    if let Ok(parts) = &other {
                        if let Some(detail) = first_difference(parts) {
                            control.violate(Invariant::ReplicaIdentity, detail);
                            return Ok(());
                        }
                    }
                    let detail = match other {
                        Ok(parts) => format!(
                            "{DRAIN:?} after healing, replicas still behind: {:?}",
                            parts
                                .iter()
                                .filter(|(_, (a, b))| a.len() != b.len())
                                .map(|(p, (a, b))| (p.clone(), a.len(), b.len()))
                                .take(4)
                                .collect::<Vec<_>>()
                        ),
                        Err(e) => {
                            format!("{DRAIN:?} after healing, the clusters cannot be read: {e}")
                        }
                    };
                    control.violate(Invariant::ReplicaNoLoss, detail);
                    return Ok(());
                }
                // Read again (the checker host is restarted for it).
                links.crash(sim, "checker");
                links.bounce(sim, "checker");
            }
            None => {}
        }
        for _ in 0..50 {
            sim.step().map_err(|e| format!("simulation error: {e}"))?;
        }
    }
}

/// The first offset where a replica serves other bytes than its source holds there.
fn first_difference(parts: &BothRead) -> Option<String> {
    parts.iter().find_map(|(part, (a, b))| {
        let differs = a.iter().zip(b.iter()).position(|(x, y)| x != y).map(|at| {
            format!(
                "{}/{}: the replica's byte at offset {at} differs from the source's",
                part.0, part.1
            )
        });
        // A replica never holds more than its source (bytes past the source's end came from
        // nowhere, or twice).
        differs.or_else(|| {
            (b.len() > a.len()).then(|| {
                format!(
                    "{}/{}: the replica serves {} bytes, past the source's end {}",
                    part.0,
                    part.1,
                    b.len(),
                    a.len()
                )
            })
        })
    })
}

/// Identity: every byte the replica serves is the source's byte at that offset.
fn judge(shared: &Shared, control: &Control, report: &mut ReplicaReport) {
    let s = state(shared);
    let Some(Ok(parts)) = &s.final_read else {
        return;
    };
    if let Some(detail) = first_difference(parts) {
        return control.violate(Invariant::ReplicaIdentity, detail);
    }
    for (a, b) in parts.values() {
        report.partitions += 1;
        report.bytes_compared += a.len().min(b.len());
    }
}
