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
//!   ZooKeeper is never past what that replica serves;
//! - `ReplicaPromoteCut`: in half the seeds `tributary promote` (the production tool) promotes
//!   one topic in the middle of the run, and a producer on the replica cluster writes to it
//!   once the promotion is confirmed. Each promoted partition must hold the source's bytes up
//!   to the offset its broker confirmed, and after it only what was produced to the replica
//!   cluster: no source byte after the promote point. A broker that could not tell whether
//!   its log was a prefix of the source's (it restarted and had not checked it yet) confirms
//!   `?`: its partition must then be the source's bytes up to its first message produced to
//!   the replica cluster, and only such messages after. Every message acknowledged there must
//!   be in it (`ReplicaNoLoss`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::consumer::{ConsumerConnector, ConsumerError, Subscription};
use tributary::failure::Failure;
use tributary::producer::{Producer, Record};
use tributary_core::config::{ConsumerConfig, ProducerConfig, ZkConnect};
use tributary_core::message::ShallowIter;
use tributary_core::wire::TopicName;
use tributary_tools::promote::{promote, PromoteOptions};

use crate::cluster::Faults;
use crate::env::SimEnv;
use crate::invariants::{Invariant, Violation};
use crate::mirror::{fetch_bytes, partitions_of, range_of, Part};
use crate::sim_fs::{sim_builder, DiskFaults};
use crate::two_clusters::{Fault, FaultSchedule, TwoClusters};
use crate::world::{
    add_cluster, scenario_config, until_started, Cluster, ClusterSpec, Control, Links, ZK_PORT,
};

/// After the last fault heals, how long the replicas may take to catch up.
pub const DRAIN: Duration = Duration::from_secs(60);
/// The consumer group on the source whose offsets are synced.
const GROUP: &str = "app";
const TOPICS: [&str; 2] = ["events", "audit"];
/// The topic promoted (in the seeds that promote).
const PROMOTED: &str = "audit";
/// What the producer on the replica cluster writes starts with this (the source's messages
/// start with `r `).
const FAILOVER_PREFIX: &[u8] = b"w ";

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
    /// Whether the source had a tiny retention (a gap seed).
    pub tiny_retention: bool,
    /// Replica partitions with a hole (a gap seed's source deleted bytes before they were
    /// copied).
    pub holes: usize,
    /// Source bytes the checker never saw (deleted before it read them): not compared.
    pub bytes_unseen: usize,
    /// Synced offsets checked against the replicas' ends.
    pub syncs_checked: u64,
    /// From the last heal until every replica partition reached its source's end.
    pub drained_after: Option<Duration>,
    /// When the promotion was confirmed, if this seed promotes.
    pub promoted_at: Option<Duration>,
    /// Messages acknowledged by the replica cluster after the promotion.
    pub failover_acked: usize,
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
    /// Gap seeds: the source's bytes, read as the run goes (its retention deletes them).
    archives: BTreeMap<Part, Archive>,
    /// This seed gives the source a tiny retention.
    tiny_retention: bool,
    /// Per source partition: (source bytes, replica bytes) or a problem.
    final_read: Option<Result<BothRead, Failure>>,
    /// This seed promotes [`PROMOTED`].
    promote_planned: bool,
    /// When `tributary promote` returned success.
    promoted_at: Option<Duration>,
    /// Sequence numbers the replica cluster acknowledged after the promotion.
    failover_acked: std::collections::BTreeSet<u64>,
    /// The producer on the replica cluster has stopped (its last send resolved).
    failover_done: bool,
}

/// What the checker has read of a source partition as it went: its bytes by offset (what
/// retention deleted later stays here), and the ranges it never saw (deleted before it read
/// them; zeros in `bytes`).
#[derive(Debug, Clone, Default)]
struct Archive {
    bytes: Vec<u8>,
    missed: Vec<(usize, usize)>,
    /// The source's earliest offset when last read.
    earliest: usize,
}

/// One partition at the end: the source's archive, and the runs of bytes the replica serves
/// (from its first offset up to a hole, if it has one, and from where its OFFSETS start to its
/// end).
#[derive(Debug, Clone)]
struct PartRead {
    source: Archive,
    replica: Vec<(usize, Vec<u8>)>,
}

impl PartRead {
    /// Where the replica's bytes end.
    fn replica_end(&self) -> usize {
        self.replica.last().map_or(0, |(start, b)| start + b.len())
    }

    /// Whether the replica has a hole (its runs do not meet).
    fn has_hole(&self) -> bool {
        self.replica.len() > 1
    }

    /// The replica's bytes from offset 0 when it serves them as one run.
    fn replica_from_zero(&self) -> Option<&[u8]> {
        match self.replica.as_slice() {
            [(0, bytes)] => Some(bytes),
            [] => Some(&[]),
            _ => None,
        }
    }
}

/// Per source partition, as read at the end.
type BothRead = BTreeMap<Part, PartRead>;

type Shared = Arc<Mutex<State>>;

fn state(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn report_shape(control: &Control, seed: u64, tiny_retention: bool) {
    if tiny_retention {
        control
            .trace
            .push(&format!("seed {seed}: gap seed (tiny source retention)"));
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
    // Gap seeds: the source keeps almost nothing, and the link between the clusters is cut
    // across its first cleanup, so it deletes bytes before they are copied.
    let tiny_retention = rng.random_bool(0.3);
    let mut source_spec = ClusterSpec::new("src", 2, 2);
    if tiny_retention {
        source_spec.extra_config =
            "log.retention.size=1500\nlog.cleanup.interval.mins=1\nlog.file.size=600\n".into();
    }
    state(&shared).tiny_retention = tiny_retention;
    report_shape(&control, seed, tiny_retention);
    let source = add_cluster(&mut sim, &source_spec, &mut rng, &control);
    let mut spec = ClusterSpec::new("dst", 2, 1);
    spec.extra_config = format!(
        "replica.source.zk.connect=src-zk:{ZK_PORT}\nreplica.offsets.sync.groups={GROUP}\nreplica.offsets.sync.interval.ms={}\n\
         replica.fetch.size={}\nreplica.fetch.backoff.ms=50\nreplica.socket.timeout.ms=2000\n\
         metrics.port={}\n",
        rng.random_range(100..1000),
        rng.random_range(1024..65_536),
        // With metrics on, the copier also asks the source for its ends (the lag gauges): the
        // replica invariants hold with that traffic too.
        crate::metrics_check::BROKER_METRICS_PORT,
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
    // (Gap seeds do not promote: a promoted partition is compared from offset 0.)
    let promote_at = (rng.random_bool(0.5) && !tiny_retention).then(|| {
        let third = options.duration.as_millis() as u64 / 3;
        Duration::from_millis(rng.random_range(third..2 * third))
    });
    if let Some(at) = promote_at {
        state(&shared).promote_planned = true;
        add_promoter(&mut sim, at, rng.random(), &shared, &control);
    }
    add_checker(&mut sim, &source, &replica, &shared, &control);
    let mut hosts = vec![
        source.zk_host.clone(),
        replica.zk_host.clone(),
        "producer0".into(),
        "producer1".into(),
        "consumer".into(),
        "checker".into(),
    ];
    if promote_at.is_some() {
        hosts.push("promoter".into());
    }
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
        judge(&shared, &control, &replica.model, &mut report);
    }
    {
        let s = state(&shared);
        report.acked = s.acked;
        report.syncs_checked = s.syncs_checked;
        report.promoted_at = s.promoted_at;
        report.tiny_retention = s.tiny_retention;
        report.failover_acked = s.failover_acked.len();
    }
    report.trace_hash = control.trace.hash();
    report.trace_tail = control.trace.report_tail(40);
    report.simulated = sim.elapsed();
    crate::world::outcome(result, &control, report)
}

fn add_producer(
    sim: &mut turmoil::Sim<'_>,
    index: u32,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control, name) = (shared.clone(), control.clone(), format!("producer{index}"));
    crate::host::add(sim, name.clone().as_str(), move || {
        let (shared, control, name) = (shared.clone(), control.clone(), name.clone());
        async move {
            let text = format!("zk.connect=src-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nproducer.type=sync\ndurable.acks=true\nnum.retries=3\nsocket.timeout.ms=2000\ncompression.codec={}\n", index);
            let config = scenario_config("producer", &text, ProducerConfig::from_properties);
            let producer = until_started(&name, &control, || {
                Producer::start(SimEnv::new(seed), config.clone())
            })
            .await;
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
                let Ok(t) = topic.parse::<TopicName>() else {
                    continue;
                };
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

/// At `at`, promotes [`PROMOTED`] with the production tool (again until it confirms), then
/// produces to it on the replica cluster with durable acknowledgements until producing stops.
fn add_promoter(
    sim: &mut turmoil::Sim<'_>,
    at: Duration,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control) = (shared.clone(), control.clone());
    crate::host::add(sim, "promoter", move || {
        let (shared, control) = (shared.clone(), control.clone());
        async move {
            let env = SimEnv::new(seed);
            tokio::time::sleep(at).await;
            let Ok(topic) = PROMOTED.parse::<TopicName>() else {
                return Err("bad topic".into());
            };
            let options = PromoteOptions {
                zk_connect: ZkConnect::parse(&format!("dst-zk:{ZK_PORT}"))?,
                topics: vec![topic.clone()],
                wait: Duration::from_secs(10),
            };
            if state(&shared).promoted_at.is_none() {
                loop {
                    let mut out = Vec::new();
                    let result = promote(&env, &options, &mut out).await;
                    let outcome = match &result {
                        Ok(()) => "Ok(())".to_string(),
                        Err(e) => format!("Err({e})"),
                    };
                    control.trace.push(&format!(
                        "promoter: {outcome}: {}",
                        String::from_utf8_lossy(&out).trim()
                    ));
                    if result.is_ok() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                state(&shared).promoted_at = turmoil::sim_elapsed();
            }
            let text = format!("zk.connect=dst-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nproducer.type=sync\ndurable.acks=true\nnum.retries=3\nsocket.timeout.ms=2000\n");
            let config = scenario_config("producer", &text, ProducerConfig::from_properties);
            let producer = until_started("promoter", &control, || {
                Producer::start(env.clone(), config.clone())
            })
            .await;
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut seq = 0u64;
            while !state(&shared).stop_producing {
                seq += 1;
                let mut payload = FAILOVER_PREFIX.to_vec();
                payload.extend_from_slice(seq.to_string().as_bytes());
                match producer
                    .send_all(vec![Record::new(topic.clone(), payload)])
                    .await
                {
                    Ok(deliveries) => {
                        for d in deliveries {
                            if d.await.is_ok() {
                                state(&shared).failover_acked.insert(seq);
                            }
                        }
                    }
                    Err(e) => control.trace.push(&format!("promoter: not sent: {e}")),
                }
                tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
            }
            state(&shared).failover_done = true;
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

/// A consumer group on the source, committing as it goes (its offsets are what the replicas
/// sync).
fn add_consumer(sim: &mut turmoil::Sim<'_>, seed: u64, control: &Arc<Control>) {
    let control = control.clone();
    crate::host::add(sim, "consumer", move || {
        let control = control.clone();
        async move {
            let text = format!("zk.connect=src-zk:{ZK_PORT}\ngroupid={GROUP}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nautooffset.reset=smallest\nfetcher.backoff.ms=100\nautocommit.interval.ms=200\nconsumer.timeout.ms=1000\nsocket.timeout.ms=2000\n");
            let config = scenario_config("consumer", &text, ConsumerConfig::from_properties);
            let (connector, mut streams) = until_started("consumer", &control, || {
                ConsumerConnector::start(
                    SimEnv::new(seed),
                    config.clone(),
                    Subscription::Whitelist(".*".into(), 1),
                )
            })
            .await;
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
    crate::host::add(sim, "checker", move || {
        let (shared, control, source_model, replica_model) = (
            shared.clone(),
            control.clone(),
            source_model.clone(),
            replica_model.clone(),
        );
        async move {
            loop {
                if state(&shared).check {
                    let seen = state(&shared).seen.clone();
                    let read = read_both((&source_model, &replica_model), &seen, &shared).await;
                    state(&shared).final_read = Some(read);
                    return Ok(());
                }
                let registered = partitions_of(&source_model);
                state(&shared).seen.extend(registered.iter().cloned());
                if state(&shared).tiny_retention {
                    for part in &registered {
                        // A source broker that does not answer is read next time.
                        let _later = archive(&shared, part).await;
                    }
                }
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

/// Reads what the source holds of `part` beyond what the archive has (noting what retention
/// deleted before it was read).
async fn archive(shared: &Shared, part: &Part) -> Result<(), Failure> {
    let (earliest, _) = range_of(part, "src").await?;
    let earliest = usize::try_from(earliest).map_err(|_| "negative earliest offset")?;
    let mut a = state(shared)
        .archives
        .get(part)
        .cloned()
        .unwrap_or_default();
    a.earliest = earliest;
    if earliest > a.bytes.len() {
        a.missed.push((a.bytes.len(), earliest));
        a.bytes.resize(earliest, 0);
    }
    let (bytes, _refused) = fetch_bytes(part, "src", a.bytes.len() as i64).await?;
    a.bytes.extend_from_slice(&bytes);
    state(shared).archives.insert(part.clone(), a);
    Ok(())
}

/// Every source partition's bytes (its archive, brought up to date) and what its replica
/// serves.
async fn read_both(
    (source_model, replica_model): (&crate::zk_model::SharedModel, &crate::zk_model::SharedModel),
    seen: &std::collections::BTreeSet<Part>,
    shared: &Shared,
) -> Result<BothRead, Failure> {
    let mut out = BTreeMap::new();
    let parts: std::collections::BTreeSet<Part> = partitions_of(source_model).into_iter().collect();
    // A promoted topic may have partitions the source never had here (created by produces to
    // the replica cluster): what was acknowledged there is looked for there too.
    if state(shared).promote_planned {
        for part in partitions_of(replica_model) {
            if part.0 == PROMOTED && !parts.contains(&part) {
                let replica = replica_runs(&part).await?;
                let source = Archive::default();
                out.insert(part, PartRead { source, replica });
            }
        }
    }
    // A source broker not registered again yet must not leave its partitions unchecked: every
    // partition ever seen registered must be there.
    if let Some(missing) = seen.iter().find(|p| !parts.contains(*p)) {
        return Err(Failure::from(format!(
            "source partition {}/{} is not registered (yet)",
            missing.0, missing.1
        )));
    }
    for part in parts {
        archive(shared, &part).await?;
        let (_, source_end) = range_of(&part, "src").await?;
        let source = state(shared)
            .archives
            .get(&part)
            .cloned()
            .unwrap_or_default();
        if source.bytes.len() as i64 != source_end {
            return Err(Failure::from(format!(
                "source {}/{} still growing",
                part.0, part.1
            )));
        }
        let replica = replica_runs(&part).await?;
        out.insert(part, PartRead { source, replica });
    }
    Ok(out)
}

/// The runs of bytes a replica partition serves: from offset 0 (or its first offset) up to
/// the end or a hole, and after a hole from where its OFFSETS start.
async fn replica_runs(part: &Part) -> Result<Vec<(usize, Vec<u8>)>, Failure> {
    let (advertised, end) = range_of(part, "dst").await?;
    let advertised = usize::try_from(advertised).map_err(|_| "negative earliest offset")?;
    let mut runs = Vec::new();
    let (head, refused) = fetch_bytes(part, "dst", 0).await?;
    let head_end = head.len();
    if refused.is_some() && head_end >= advertised && (head_end as i64) < end {
        return Err(Failure::from(format!(
            "replica {}/{} refuses offset {head_end}, inside the range its OFFSETS give ({advertised}..{end})",
            part.0, part.1
        )));
    }
    if !head.is_empty() {
        runs.push((0, head));
    }
    if head_end < advertised {
        let (tail, refused) = fetch_bytes(part, "dst", advertised as i64).await?;
        if let Some(error) = refused {
            return Err(Failure::from(format!(
                "replica {}/{} at {}: {error:?}",
                part.0,
                part.1,
                advertised + tail.len()
            )));
        }
        runs.push((advertised, tail));
    }
    Ok(runs)
}

/// What the report calls `fault` (the tests and docs quote these).
fn kind(fault: &Fault) -> &'static str {
    match fault {
        Fault::Between => "link between the clusters cut",
        Fault::Link(..) => "broker cut from a ZooKeeper",
        Fault::Crash(h) if h.starts_with("src") => "source broker crash",
        Fault::Crash(_) => "replica broker crash",
        Fault::Restart(_) => "replica broker graceful restart",
        Fault::ZooKeeper(true) => "source zookeeper restart",
        Fault::ZooKeeper(false) => "replica zookeeper restart",
        Fault::ZooKeeperLag(true) => "source zookeeper followers behind",
        Fault::ZooKeeperLag(false) => "replica zookeeper followers behind",
    }
}

/// Runs the seed: faults until the run's length (the gap seeds' cut included), the heal, then
/// the wait until every replica partition reaches its source's end (or [`DRAIN`] runs out).
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
) -> Result<(), Failure> {
    let (source, replica) = clusters;
    // What the shared faults act on: the copying hosts are the replica brokers.
    let both = TwoClusters {
        source,
        destination: replica,
        copiers: &replica.brokers,
    };
    let mut schedule = FaultSchedule::new(
        ChaCha8Rng::seed_from_u64(seed ^ 0x5EB1_1CA5),
        options.faults,
        options.duration,
        state(shared).tiny_retention,
    );
    while sim.elapsed() < schedule.end_at() {
        schedule.step(sim, links, control, both, kind, &mut report.faults);
        if control.violation().is_some() {
            return Ok(());
        }
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
    }
    schedule.end_all(sim, links, control, both);
    state(shared).stop_producing = true;
    let healed = sim.elapsed();
    control.trace.push_at(healed, "healed; producing stopped");
    // Settle: the producers' last sends resolve (the one on the replica cluster says when; its
    // retries may take several socket timeouts), then every replica partition must reach its
    // source's end.
    let settled = |s: &State| !s.promote_planned || s.failover_done;
    while sim.elapsed() < healed + Duration::from_secs(3)
        || (!settled(&state(shared)) && sim.elapsed() < healed + DRAIN)
    {
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
    }
    state(shared).check = true;
    loop {
        if control.violation().is_some() {
            return Ok(());
        }
        let read = state(shared).final_read.take();
        match read {
            Some(Ok(parts)) if caught_up(&parts, &state(shared)) => {
                report.drained_after = Some(sim.elapsed() - healed);
                control.trace.push_at(sim.elapsed(), "replicas caught up");
                state(shared).final_read = Some(Ok(parts));
                return Ok(());
            }
            Some(other) => {
                if sim.elapsed() > healed + DRAIN {
                    // Wrong bytes are the first thing to name, if there are any.
                    if let Ok(parts) = &other {
                        if let Some(detail) = first_difference(parts, &state(shared)) {
                            control.violate(Invariant::ReplicaIdentity, detail);
                            return Ok(());
                        }
                    }
                    let detail = match other {
                        Ok(parts) => format!(
                            "{DRAIN:?} after healing, replicas still behind: {:?}",
                            parts
                                .iter()
                                .filter(|(p, r)| r.replica_end() != r.source.bytes.len()
                                    && !promoted(p, &state(shared)))
                                .map(|(p, r)| (p.clone(), r.source.bytes.len(), r.replica_end()))
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
            sim.step()
                .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
        }
    }
}

/// Whether `part` is of the promoted topic in a seed that promotes (its replica need not reach
/// the source's end; [`cut_violation`] checks it).
fn promoted(part: &Part, s: &State) -> bool {
    s.promote_planned && part.0 == PROMOTED
}

/// Every partition not promoted is as long as its source, and a planned promotion confirmed.
fn caught_up(parts: &BothRead, s: &State) -> bool {
    (!s.promote_planned || s.promoted_at.is_some())
        && parts
            .iter()
            .all(|(p, r)| r.replica_end() == r.source.bytes.len() || promoted(p, s))
}

/// The first offset where a replica serves other bytes than its source had there (of the
/// partitions not promoted; bytes the checker never saw on the source are not compared).
fn first_difference(parts: &BothRead, s: &State) -> Option<String> {
    parts
        .iter()
        .filter(|(p, _)| !promoted(p, s))
        .find_map(|(part, read)| {
            let source = &read.source;
            read.replica.iter().find_map(|(start, bytes)| {
                // A replica never holds more than its source (bytes past the source's end came
                // from nowhere, or twice).
                if start + bytes.len() > source.bytes.len() {
                    return Some(format!(
                        "{}/{}: the replica serves bytes up to {}, past the source's end {}",
                        part.0,
                        part.1,
                        start + bytes.len(),
                        source.bytes.len()
                    ));
                }
                let seen = |at: usize| !source.missed.iter().any(|(a, b)| (*a..*b).contains(&at));
                let theirs = &source.bytes[*start..start + bytes.len()];
                (0..bytes.len())
                    .find(|i| bytes[*i] != theirs[*i] && seen(start + i))
                    .map(|i| {
                        format!(
                            "{}/{}: the replica's byte at offset {} differs from the source's",
                            part.0,
                            part.1,
                            start + i
                        )
                    })
            })
        })
}

/// After a hole the replica must hold everything its source still holds: a hole covers only
/// what the source deleted before it was copied.
fn hole_past_source(parts: &BothRead) -> Option<String> {
    parts.iter().find_map(|(part, read)| {
        let tail_start = read.replica.last().map_or(0, |(start, _)| *start);
        (read.has_hole() && tail_start > read.source.earliest).then(|| {
            format!(
                "{}/{}: the replica's hole ends at {tail_start}, but the source still holds bytes from {}",
                part.0, part.1, read.source.earliest
            )
        })
    })
}

/// Identity: every byte the replica serves is the source's byte at that offset; a hole covers
/// only deleted bytes; a promoted partition is cut cleanly; nothing the replica cluster
/// acknowledged is missing.
fn judge(
    shared: &Shared,
    control: &Control,
    replica_model: &crate::zk_model::SharedModel,
    report: &mut ReplicaReport,
) {
    let s = state(shared);
    let Some(Ok(parts)) = &s.final_read else {
        return;
    };
    if let Some(detail) = first_difference(parts, &s) {
        return control.violate(Invariant::ReplicaIdentity, detail);
    }
    if let Some(detail) = hole_past_source(parts) {
        return control.violate(Invariant::ReplicaNoLoss, detail);
    }
    if s.promote_planned {
        let cuts = promote_points(replica_model);
        if let Some((invariant, detail)) = cut_violation(parts, &cuts, &s.failover_acked) {
            return control.violate(invariant, detail);
        }
    }
    for read in parts.values() {
        report.partitions += 1;
        report.holes += usize::from(read.has_hole());
        report.bytes_compared += read.replica.iter().map(|(_, b)| b.len()).sum::<usize>();
    }
    report.bytes_unseen += s
        .archives
        .values()
        .flat_map(|a| a.missed.iter().map(|(from, to)| to - from))
        .sum::<usize>();
}

/// Per partition of [`PROMOTED`]: the offset its replica broker confirmed it stopped copying
/// at (from the confirmations in the replica cluster's ZooKeeper: `<partition>:<offset>,...`
/// under each broker's id). A partition a broker did not hold when it promoted is absent.
/// Each promoted partition's confirmed promote point (`None`: confirmed as `?`, not known).
fn promote_points(model: &crate::zk_model::SharedModel) -> BTreeMap<Part, Option<usize>> {
    let m = model.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = BTreeMap::new();
    let topic_path = format!("/tributary/promoted/{PROMOTED}");
    for broker in m.children(&topic_path) {
        let Some(data) = m.data(&format!("{topic_path}/{broker}")) else {
            continue;
        };
        for entry in String::from_utf8_lossy(&data).split(',') {
            if let Some((partition, offset)) = entry.split_once(':') {
                let part = (
                    PROMOTED.to_string(),
                    format!("{broker}-{}", partition.trim()),
                );
                match offset.trim() {
                    "?" => {
                        out.insert(part, None);
                    }
                    offset => {
                        if let Ok(offset) = offset.parse() {
                            out.insert(part, Some(offset));
                        }
                    }
                }
            }
        }
    }
    out
}

/// Where the first message produced to the replica cluster starts in `replica` (its end when
/// there is none): the promote point of a partition confirmed as `?`.
fn first_own_message(replica: &[u8]) -> usize {
    ShallowIter::new(replica, 0)
        .map_while(Result::ok)
        .find(|entry| entry.message.payload.starts_with(FAILOVER_PREFIX))
        .map_or(replica.len(), |entry| {
            usize::try_from(entry.offset).unwrap_or(replica.len())
        })
}

/// A promoted partition holds the source's bytes up to its promote point and after it only
/// messages produced to the replica cluster; every such message acknowledged is in one of them.
fn cut_violation(
    parts: &BothRead,
    cuts: &BTreeMap<Part, Option<usize>>,
    acked: &std::collections::BTreeSet<u64>,
) -> Option<(Invariant, String)> {
    let mut found = std::collections::BTreeSet::new();
    for (part, read) in parts.iter().filter(|(p, _)| p.0 == PROMOTED) {
        let name = format!("{}/{}", part.0, part.1);
        let source = &read.source.bytes;
        let Some(replica) = read.replica_from_zero() else {
            return Some((Invariant::ReplicaIdentity, format!("{name}: the promoted partition does not serve its bytes from 0 on (runs at {:?})", read.replica.iter().map(|(s, b)| (*s, b.len())).collect::<Vec<_>>())));
        };
        let cut = match cuts.get(part) {
            Some(Some(cut)) => *cut,
            Some(None) => first_own_message(replica),
            None => 0,
        };
        if cut > source.len() || cut > replica.len() {
            return Some((
                Invariant::ReplicaPromoteCut,
                format!(
                    "{name}: promoted at {cut}, but the source holds {} bytes and the replica {}",
                    source.len(),
                    replica.len()
                ),
            ));
        }
        if let Some(at) = source[..cut]
            .iter()
            .zip(&replica[..cut])
            .position(|(x, y)| x != y)
        {
            return Some((Invariant::ReplicaIdentity, format!("{name}: the replica's byte at offset {at} (before its promote point {cut}) differs from the source's")));
        }
        let after = replica.get(cut..).unwrap_or_default();
        let mut entries = ShallowIter::new(after, cut as i64);
        for entry in entries.by_ref() {
            let Ok(entry) = entry else { break };
            let payload = entry.message.payload;
            let Some(seq) = payload
                .strip_prefix(FAILOVER_PREFIX)
                .and_then(|rest| std::str::from_utf8(rest).ok()?.parse::<u64>().ok())
            else {
                return Some((Invariant::ReplicaPromoteCut, format!("{name}: the message at offset {} after the promote point {cut} was not produced to the replica cluster ({:?})", entry.offset, String::from_utf8_lossy(payload.get(..payload.len().min(24)).unwrap_or_default()))));
            };
            found.insert(seq);
        }
        if entries.end().valid_bytes != after.len() {
            return Some((
                Invariant::ReplicaPromoteCut,
                format!("{name}: the bytes after the promote point {cut} are not whole messages"),
            ));
        }
    }
    acked.iter().find(|seq| !found.contains(*seq)).map(|seq| {
        (Invariant::ReplicaNoLoss, format!("message {seq}, acknowledged by the replica cluster after the promotion, is in no partition of {PROMOTED}"))
    })
}
