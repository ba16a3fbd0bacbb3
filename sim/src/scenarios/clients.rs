//! The clients scenario: the production producer and consumer group on a simulated cluster
//! (two brokers, the ZooKeeper model), under faults: partitions between any client and
//! ZooKeeper or a broker, broker crashes, consumer crashes. A producer sends sequence-numbered
//! messages with durable acknowledgements; two group members consume them. Invariants:
//!
//! - `AckedIsConsumed`: after the faults heal, every acknowledged message is consumed (by some
//!   member, duplicates allowed);
//! - `CommitNotAhead`: a committed offset (read from the ZooKeeper model as the run goes) is
//!   never ahead of what some member was handed for that partition;
//! - `OwnershipDisjoint`: once the group settles after healing, every partition is owned by
//!   exactly one member, and its owner node in the ZooKeeper model names that member's thread
//!   (a member that kept a partition through a rebalance without the node it believed it held
//!   would share it with any member whose view differs);
//! - `History`: nothing consumed that was never sent, and a member never hands out one message
//!   twice within a generation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::consumer::{ConsumerConnector, ConsumerError, Subscription};
use tributary::failure::Failure;
use tributary::producer::{Producer, Record};
use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
use tributary_core::wire::TopicName;

use crate::env::SimEnv;
use crate::invariants::{Invariant, Violation};
use crate::sim_fs::sim_builder;
use crate::world::{add_cluster, until_started, ClusterSpec, Control, Links};

const TOPIC: &str = "events";
const CONSUMERS: usize = 2;
const GROUP: &str = "g";
/// After healing, how long the group gets to consume everything acknowledged.
const DRAIN: Duration = Duration::from_secs(60);

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct ClientsReport {
    /// Simulated time covered.
    pub simulated: Duration,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Messages acknowledged.
    pub acked: usize,
    /// Distinct messages consumed.
    pub consumed: usize,
    /// Messages consumed more than once (across members and restarts).
    pub duplicates: usize,
    /// Commits checked against what was handed out.
    pub commits_checked: u64,
    /// Hash of the trace.
    pub trace_hash: u64,
    /// The trace's last lines.
    pub trace_tail: Vec<String>,
}

#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    acked: BTreeSet<u64>,
    consumed: BTreeMap<u64, u32>,
    /// Per partition ("<broker>-<partition>"), the furthest resume offset ever handed out.
    handed_out: BTreeMap<String, i64>,
    /// Each member's owned partitions, as it last reported.
    owned: BTreeMap<usize, BTreeSet<String>>,
    /// Each member's consumer id, as it last joined.
    ids: BTreeMap<usize, String>,
    stop_producing: bool,
    commits_checked: u64,
}

type Shared = Arc<Mutex<State>>;

fn state(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn topic() -> TopicName {
    TOPIC
        .parse()
        .unwrap_or_else(|_| panic!("a valid topic name"))
}

fn producer_config() -> ProducerConfig {
    let text = "zk.connect=zk:2181\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=600000\nproducer.type=async\nqueue.size=50\nbatch.size=10\nqueue.time=20\n\
                queue.enqueueTimeout.ms=-1\ndurable.acks=true\nnum.retries=20\nsocket.timeout.ms=2000\n";
    match ProducerConfig::from_properties(&Properties::parse("sim", text).unwrap_or_default()) {
        Ok(c) => c,
        Err(e) => panic!("scenario producer config refused: {e}"),
    }
}

fn consumer_config() -> ConsumerConfig {
    let text = format!(
        "zk.connect=zk:2181\ngroupid={GROUP}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=600000\nautooffset.reset=smallest\n\
         autocommit.interval.ms=300\nfetcher.backoff.ms=100\nrebalance.backoff.ms=500\nrebalance.retries.max=10\nsocket.timeout.ms=2000\nconsumer.timeout.ms=500\n"
    );
    match ConsumerConfig::from_properties(&Properties::parse("sim", &text).unwrap_or_default()) {
        Ok(c) => c,
        Err(e) => panic!("scenario consumer config refused: {e}"),
    }
}

/// Runs one seed for `duration` of faults; `Err` names the broken invariant.
#[expect(
    clippy::result_large_err,
    reason = "one result per simulated run; the report is the point"
)]
pub fn run_seed(
    seed: u64,
    duration: Duration,
) -> Result<ClientsReport, (Violation, ClientsReport)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut builder = sim_builder(seed);
    builder
        .simulation_duration(duration + DRAIN * 3)
        .tcp_capacity(rng.random_range(64..256))
        .max_message_latency(Duration::from_millis(rng.random_range(2..20)));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let _capture = control.trace.capture();
    let cluster = add_cluster(&mut sim, &ClusterSpec::new("", 2, 2), &mut rng, &control);
    let shared: Shared = Arc::default();
    add_producer(&mut sim, rng.random(), &shared, &control);
    let consumers: Vec<String> = (0..CONSUMERS).map(|i| format!("consumer{i}")).collect();
    for (i, host) in consumers.iter().enumerate() {
        add_consumer(&mut sim, host, i, rng.random(), &shared, &control);
    }
    let mut hosts = vec![cluster.zk_host.clone(), "producer".to_string()];
    hosts.extend(cluster.brokers.iter().cloned());
    hosts.extend(consumers.iter().cloned());
    let mut links = Links::new(hosts);
    let mut report = ClientsReport::default();
    let result = drive(
        &mut sim,
        &mut links,
        &control,
        &cluster,
        &consumers,
        &shared,
        seed,
        duration,
        &mut report,
    );
    let s = state(&shared);
    report.acked = s.acked.len();
    report.consumed = s.consumed.len();
    report.duplicates = s.consumed.values().filter(|n| **n > 1).count();
    report.commits_checked = s.commits_checked;
    report.trace_hash = control.trace.hash();
    report.trace_tail = control.trace.report_tail(40);
    report.simulated = sim.elapsed();
    drop(s);
    crate::world::outcome(result, &control, report)
}

fn add_producer(sim: &mut turmoil::Sim<'_>, seed: u64, shared: &Shared, control: &Arc<Control>) {
    let (shared, control) = (shared.clone(), control.clone());
    crate::host::add(sim, "producer", move || {
        let (shared, control) = (shared.clone(), control.clone());
        async move {
            let producer = Arc::new(
                until_started("producer", &control, || {
                    Producer::start(SimEnv::new(seed), producer_config())
                })
                .await,
            );
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
                let delivery = match producer
                    .send(Record::new(topic(), format!("m {seq}").into_bytes()))
                    .await
                {
                    Ok(d) => d,
                    Err(e) => {
                        control
                            .trace
                            .push(&format!("producer: m {seq} not queued: {e}"));
                        continue;
                    }
                };
                let (shared, control) = (shared.clone(), control.clone());
                tokio::spawn(async move {
                    match delivery.await {
                        Ok(d) => {
                            state(&shared).acked.insert(seq);
                            control.trace.push(&format!(
                                "acked m {seq} at {}/{} offset {:?}",
                                d.broker_id, d.partition, d.offset
                            ));
                        }
                        Err(e) => control.trace.push(&format!("m {seq} not delivered: {e}")),
                    }
                });
                tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
            }
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

fn add_consumer(
    sim: &mut turmoil::Sim<'_>,
    host: &str,
    index: usize,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control, name) = (shared.clone(), control.clone(), host.to_string());
    crate::host::add(sim, host, move || {
        let (shared, control, name) = (shared.clone(), control.clone(), name.clone());
        async move {
            let subscription = Subscription::Topics([(topic(), 1)].into_iter().collect());
            let (connector, mut streams) = loop {
                match ConsumerConnector::start(
                    SimEnv::new(
                        seed ^ turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64,
                    ),
                    consumer_config(),
                    subscription.clone(),
                )
                .await
                {
                    Ok(started) => break started,
                    Err(e) => control
                        .trace
                        .push(&format!("{name}: cannot join: {e}; retrying")),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            control
                .trace
                .push(&format!("{name} joined as {}", connector.consumer_id()));
            state(&shared)
                .ids
                .insert(index, connector.consumer_id().to_string());
            let mut stream = streams.remove(0);
            // Some members are slow applications: fetched chunks wait in their queue.
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let processing_max_ms = if rng.random_bool(0.5) {
                rng.random_range(1..20)
            } else {
                0
            };
            loop {
                let owned: BTreeSet<String> = connector
                    .owned()
                    .iter()
                    .map(|(_, p, _)| p.to_string())
                    .collect();
                state(&shared).owned.insert(index, owned);
                match stream.next().await {
                    Ok(message) => {
                        let Some(seq) = std::str::from_utf8(&message.payload)
                            .ok()
                            .and_then(|t| t.strip_prefix("m "))
                            .and_then(|n| n.parse::<u64>().ok())
                        else {
                            control.violate(
                                Invariant::History,
                                format!(
                                    "{name} consumed a message no producer sent: {:?}",
                                    message.payload
                                ),
                            );
                            continue;
                        };
                        {
                            let mut s = state(&shared);
                            *s.consumed.entry(seq).or_default() += 1;
                            let furthest = s
                                .handed_out
                                .entry(message.partition.to_string())
                                .or_insert(0);
                            *furthest = (*furthest).max(message.offset);
                        }
                        if processing_max_ms > 0 {
                            tokio::time::sleep(Duration::from_millis(
                                rng.random_range(0..=processing_max_ms),
                            ))
                            .await;
                        }
                    }
                    Err(ConsumerError::Timeout(_)) => {}
                    Err(ConsumerError::Closed) => break,
                    Err(e) => control.trace.push(&format!("{name}: {e}")),
                }
            }
            Ok(())
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn drive(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    cluster: &crate::world::Cluster,
    consumers: &[String],
    shared: &Shared,
    seed: u64,
    duration: Duration,
    report: &mut ClientsReport,
) -> Result<(), Failure> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC11E);
    let mut next_fault = Duration::from_secs(rng.random_range(3..6));
    let mut heal_at: Vec<(Duration, Heal)> = Vec::new();
    let mut last_commit_check = Duration::ZERO;
    while sim.elapsed() < duration {
        if sim.elapsed() >= next_fault {
            let fault = pick_fault(&mut rng, cluster, consumers);
            let length = Duration::from_millis(rng.random_range(1000..8000));
            control
                .trace
                .push_at(sim.elapsed(), &format!("fault {fault:?} for {length:?}"));
            *report.faults.entry(fault.kind()).or_default() += 1;
            match &fault {
                Heal::Link(a, b) => links.partition(sim, a, b),
                Heal::Host(h) => links.crash(sim, h),
                Heal::ZooKeeper => crate::zk_model::crash_and_restart(&cluster.model, length),
            }
            heal_at.push((sim.elapsed() + length, fault));
            next_fault =
                sim.elapsed() + length + Duration::from_millis(rng.random_range(1000..5000));
        }
        heal_due(sim, links, &mut heal_at, false);
        if sim.elapsed() - last_commit_check >= Duration::from_millis(20) {
            last_commit_check = sim.elapsed();
            check_commits(cluster, shared, control);
        }
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
    }
    heal_due(sim, links, &mut heal_at, true);
    state(shared).stop_producing = true;
    control
        .trace
        .push_at(sim.elapsed(), "healed; producing stopped");
    // Let acknowledgements settle, then give the group time to consume everything.
    let deadline = sim.elapsed() + DRAIN;
    loop {
        check_commits(cluster, shared, control);
        if control.violation().is_some() {
            return Ok(());
        }
        let (missing, owned_problem) = {
            let s = state(shared);
            let missing: Vec<u64> = s
                .acked
                .iter()
                .filter(|seq| !s.consumed.contains_key(seq))
                .copied()
                .collect();
            (
                missing,
                ownership_problem(&s, &registered_partitions(cluster))
                    .or_else(|| owner_node_problem(&s, cluster)),
            )
        };
        if missing.is_empty()
            && owned_problem.is_none()
            && sim.elapsed() > deadline - DRAIN + Duration::from_secs(5)
        {
            control.trace.push_at(
                sim.elapsed(),
                "every acknowledged message consumed; ownership settled",
            );
            return Ok(());
        }
        if sim.elapsed() > deadline {
            if let Some(problem) = owned_problem {
                control.violate(Invariant::OwnershipDisjoint, problem);
            } else {
                control.violate(
                    Invariant::AckedIsConsumed,
                    format!(
                        "{} acknowledged messages never consumed, e.g. {:?}",
                        missing.len(),
                        missing.iter().take(5).collect::<Vec<_>>()
                    ),
                );
            }
            return Ok(());
        }
        for _ in 0..100 {
            sim.step()
                .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
        }
    }
}

/// A fault and how it ends.
#[derive(Debug, Clone)]
enum Heal {
    Link(String, String),
    Host(String),
    /// The ZooKeeper server killed and restarted on its data (back on its own after the
    /// fault's length).
    ZooKeeper,
}

impl Heal {
    fn kind(&self) -> &'static str {
        match self {
            Heal::Link(..) => "partition",
            Heal::Host(h) if h.starts_with("broker") => "broker crash",
            Heal::Host(_) => "consumer crash",
            Heal::ZooKeeper => "zookeeper restart",
        }
    }
}

fn pick_fault(rng: &mut ChaCha8Rng, cluster: &crate::world::Cluster, consumers: &[String]) -> Heal {
    let pick =
        |rng: &mut ChaCha8Rng, from: &[String]| from[rng.random_range(0..from.len())].clone();
    let mut clients: Vec<String> = consumers.to_vec();
    clients.push("producer".into());
    match rng.random_range(0..12) {
        10.. => Heal::ZooKeeper,
        0..4 => {
            let client = pick(rng, &clients);
            let other = if rng.random_bool(0.5) {
                cluster.zk_host.clone()
            } else {
                pick(rng, &cluster.brokers)
            };
            Heal::Link(client, other)
        }
        4..7 => Heal::Host(pick(rng, &cluster.brokers)),
        _ => Heal::Host(pick(rng, consumers)),
    }
}

fn heal_due(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    heal_at: &mut Vec<(Duration, Heal)>,
    all: bool,
) {
    let now = sim.elapsed();
    let (due, later): (Vec<_>, Vec<_>) = std::mem::take(heal_at)
        .into_iter()
        .partition(|(t, _)| all || *t <= now);
    *heal_at = later;
    for (_, fault) in due {
        match fault {
            Heal::Link(a, b) => links.repair(sim, &a, &b),
            Heal::Host(h) => links.bounce(sim, &h),
            Heal::ZooKeeper => {}
        }
    }
}

/// `CommitNotAhead`: every committed offset in the model is at most what was handed out.
fn check_commits(cluster: &crate::world::Cluster, shared: &Shared, control: &Control) {
    let path = format!("/consumers/{GROUP}/offsets/{TOPIC}");
    let committed: Vec<(String, Option<i64>)> = {
        let m = cluster.model.lock().unwrap_or_else(|p| p.into_inner());
        m.children(&path)
            .into_iter()
            .map(|p| {
                let value = m
                    .data(&format!("{path}/{p}"))
                    .and_then(|d| String::from_utf8_lossy(&d).trim().parse().ok());
                (p, value)
            })
            .collect()
    };
    let mut s = state(shared);
    for (partition, offset) in committed {
        s.commits_checked += 1;
        let handed = s.handed_out.get(&partition).copied().unwrap_or(0);
        match offset {
            Some(offset) if offset <= handed => {}
            other => {
                drop(s);
                return control.violate(Invariant::CommitNotAhead, format!("{TOPIC}/{partition}: committed {other:?}, but only up to {handed} was ever handed out"));
            }
        }
    }
}

/// `OwnershipDisjoint`: every partition of the topic owned by exactly one member.
/// The topic's partitions as its brokers registered them (`<broker>-<partition>`): a broker
/// the producer never wrote the topic to has none (the topic is created where it is first
/// written, as in 0.7).
fn registered_partitions(cluster: &crate::world::Cluster) -> Vec<String> {
    let m = cluster.model.lock().unwrap_or_else(|p| p.into_inner());
    let path = format!("/brokers/topics/{TOPIC}");
    let mut out = Vec::new();
    for broker in m.children(&path) {
        let count: u32 = m
            .data(&format!("{path}/{broker}"))
            .and_then(|d| String::from_utf8_lossy(&d).trim().parse().ok())
            .unwrap_or(0);
        out.extend((0..count).map(|p| format!("{broker}-{p}")));
    }
    out
}

/// `OwnershipDisjoint`'s second half: each partition a member owns has its owner node, naming
/// one of that member's threads (`<consumer id>-<n>`).
fn owner_node_problem(s: &State, cluster: &crate::world::Cluster) -> Option<String> {
    let m = cluster.model.lock().unwrap_or_else(|p| p.into_inner());
    for (member, owned) in &s.owned {
        let Some(id) = s.ids.get(member) else {
            continue;
        };
        for p in owned {
            let path = format!("/consumers/{GROUP}/owners/{TOPIC}/{p}");
            let named = m
                .data(&path)
                .map(|d| String::from_utf8_lossy(&d).into_owned());
            let ours = named
                .as_deref()
                .and_then(|thread| thread.strip_prefix(id.as_str()))
                .is_some_and(|rest| rest.starts_with('-'));
            if !ours {
                return Some(format!(
                    "member {member} ({id}) owns {TOPIC}/{p}, whose owner node names {named:?}"
                ));
            }
        }
    }
    None
}

fn ownership_problem(s: &State, expected: &[String]) -> Option<String> {
    let mut owners: BTreeMap<&String, Vec<usize>> = BTreeMap::new();
    for (member, owned) in &s.owned {
        for p in owned {
            owners.entry(p).or_default().push(*member);
        }
    }
    if let Some((p, members)) = owners.iter().find(|(_, m)| m.len() > 1) {
        return Some(format!(
            "{TOPIC}/{p} is owned by members {members:?} at once"
        ));
    }
    let missing: Vec<&str> = expected
        .iter()
        .filter(|p| !owners.keys().any(|o| o == p))
        .map(String::as_str)
        .collect();
    // Every partition owned must exist, and the topic exists on at least one broker.
    if expected.is_empty() {
        return Some(format!("{TOPIC} is registered on no broker"));
    }
    (!missing.is_empty()).then(|| format!("{TOPIC}: partitions {missing:?} owned by no member"))
}
