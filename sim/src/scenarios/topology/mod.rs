//! The topology scenarios: several clusters (two brokers and a ZooKeeper model each, named by
//! `cluster.name`) that all take writes, and mirrors between them, under seeded faults (both
//! ZooKeepers restarting, the link between the clusters cut, hosts cut from a ZooKeeper, broker
//! and mirror crashes and graceful restarts, a ZooKeeper's followers falling behind — and, in
//! half the seeds, every cluster's from the start). Every cluster's producer writes origin-tagged,
//! checksummed messages to `orders` with durable acknowledgements and no retries, so a message
//! is in its own cluster at most once.
//!
//! - [`Topology::ActiveActive`]: `east` and `west`, a mirror in each direction copying every
//!   topic (`.*`), as mirror makers or embedded in the target's brokers (the seed chooses). With
//!   renaming (`mirror.rename.topics=true`, most seeds) each holds the other's `orders` as
//!   `<other>.orders`, and `<other>.orders` is refused on its way back (its origin route says
//!   so). Without renaming (the other seeds) both directions would copy `orders` into `orders`:
//!   a loop, which the origin check refuses in at least one direction (two mirrors started at
//!   once cannot both miss each other's record).
//! - [`Topology::Chain`]: `east → west → north` from the start, and `north → east` started a
//!   third of the way in (or later, once `north`'s record of `orders` shows `east`'s route),
//!   closing a cycle: refused, since `north`'s `orders` came through `east`.
//!
//! Invariants, checked on every cluster read end to end after the faults heal and the mirrors
//! drain: S23 `TopologyNoLoss` (every acknowledged message is where the topology copies it,
//! under its name there), S24 `TopologyNoCopyBack` (no message in its own cluster twice, or
//! under another topic), S25 `TopologyNoAmplification` (no message in more copies in a cluster
//! than one plus the run's faults and mirror starts), S26 `TopologyPartitionCount` (a renamed
//! copy has its source topic's per-broker partition count; each cluster draws its own
//! `num.partitions`, so the brokers' own count would differ), every message read is one a
//! producer sent, intact, and on the four seeds in five that copy with
//! `mirror.preserve.partitions`, S32 `MirrorExactlyOnce` (no message in any topic of any cluster
//! twice).

mod hosts;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::failure::Failure;

use self::hosts::{add_checker, add_maker, add_producer, embedded, state, Reads, Shared};
use crate::cluster::Faults;
use crate::invariants::{Invariant, Violation};
use crate::sim_fs::sim_builder;
use crate::two_clusters::{Fault, FaultSchedule, TwoClusters};
use crate::world::{add_cluster, Cluster, ClusterSpec, Control, Links};

/// The topic every producer writes.
const TOPIC: &str = "orders";
/// How long after healing the mirrors may take to copy everything.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// Which clusters copy which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// `east` ⇄ `west`.
    ActiveActive,
    /// `east → west → north`, then `north → east` attempted.
    Chain,
}

/// What a run does.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Simulated time of workload and faults before healing.
    pub duration: Duration,
    /// Which faults.
    pub faults: Faults,
    /// Which topology.
    pub topology: Topology,
    /// Active-active: rename mirrored topics (`None`: the seed chooses, mostly yes).
    pub rename: Option<bool>,
}

/// One mirror: from a cluster into another, renaming or not, from when.
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    from: &'static str,
    to: &'static str,
    rename: bool,
    /// When it starts (the chain's closing edge starts late).
    delay: Duration,
    /// Starts only once its source's record of the topic shows a route through its target:
    /// the cycle it closes is recorded whole, so it is refused before its first message (a
    /// mirror added to a running chain). Without the wait the chain's own edges may decide
    /// after it (a mirror blind to its source for a while), and the cycle is then broken at
    /// another edge — as guaranteed, but not what the chain's expectations model.
    after_cycle: bool,
    /// `mirror.preserve.partitions`: copies with positions (each message copied once).
    preserve: bool,
}

impl Edge {
    fn maker_host(&self) -> String {
        format!("mm-{}-{}", self.from, self.to)
    }
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct TopologyReport {
    /// Which topology, renaming or not, embedded mirrors or makers.
    pub shape: String,
    /// Simulated time covered.
    pub simulated: Duration,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Messages acknowledged, by origin cluster.
    pub acked: BTreeMap<String, usize>,
    /// Messages delivered where the topology copies them, by (from, to).
    pub delivered: BTreeMap<(String, String), usize>,
    /// Copies beyond the first, in all clusters.
    pub duplicates: usize,
    /// The most copies of one message in one cluster, and the bound.
    pub copies_max: (usize, usize),
    /// Messages found copied back into their own cluster (S24: always 0 on a pass).
    pub copies_back: usize,
    /// Topics the mirrors refused (as the trace says).
    pub refusals: usize,
    /// Mirror starts.
    pub mirror_starts: u32,
    /// Mirror runs that ended in an error, by reason.
    pub mirror_failures: BTreeMap<String, u32>,
    /// From the last heal until everything was where it belongs.
    pub drained_after: Option<Duration>,
    /// Hash of the trace (same seed, same hash).
    pub trace_hash: u64,
    /// The trace's last lines.
    pub trace_tail: Vec<String>,
}

fn kind(fault: &Fault) -> &'static str {
    match fault {
        Fault::Between => "link between the clusters cut",
        Fault::Link(..) => "host cut from a ZooKeeper",
        Fault::Crash(h) if h.starts_with("mm-") => "mirror maker crash (kill -9)",
        Fault::Crash(_) => "broker crash (kill -9)",
        Fault::Restart(_) => "mirror graceful restart",
        Fault::ZooKeeper(true) => "east zookeeper restart",
        Fault::ZooKeeper(false) => "west zookeeper restart",
        Fault::ZooKeeperLag(true) => "east zookeeper followers behind",
        Fault::ZooKeeperLag(false) => "west zookeeper followers behind",
    }
}

/// Runs one seed; `Err` names the broken invariant.
#[expect(
    clippy::result_large_err,
    reason = "one result per simulated run; the report is the point"
)]
pub fn run_seed(
    seed: u64,
    options: Options,
) -> Result<TopologyReport, (Violation, TopologyReport)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let rename = options.rename.unwrap_or_else(|| rng.random_bool(0.8));
    let embedded_mode = options.topology == Topology::ActiveActive && rng.random_bool(0.5);
    let queue_size: u32 = [4, 16, 64][rng.random_range(0..3)];
    let preserve = draws_positions(seed);
    let (names, edges) = layout(options.topology, rename, options.duration, preserve);
    let mut builder = sim_builder(seed);
    builder
        .simulation_duration(options.duration + DRAIN_LIMIT * 3)
        .tcp_capacity(rng.random_range(64..256))
        .max_message_latency(Duration::from_millis(rng.random_range(2..20)));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let _capture = control.trace.capture();
    let shape = shape_of(
        options.topology,
        rename,
        (embedded_mode, preserve),
        queue_size,
    );
    control.trace.push(&format!("seed {seed}: {shape}"));
    let shared: Shared = Arc::default();
    let mut clusters: Vec<Cluster> = Vec::new();
    // Each cluster its own num.partitions (1 to 4, no two alike), so that a renamed copy given
    // its cluster's count instead of its source's is seen (S26).
    let mut counts: Vec<u32> = (1..=4).collect();
    for name in &names {
        let count = counts.remove(rng.random_range(0..counts.len()));
        let mut spec = ClusterSpec::new(name, 2, count);
        spec.extra_config = format!("cluster.name={name}\n");
        if embedded_mode {
            if let Some(edge) = edges.iter().find(|e| e.to == *name) {
                spec.mirror = Some(embedded(
                    edge.clone(),
                    queue_size,
                    rng.random(),
                    &shared,
                    &control,
                ));
            }
        }
        clusters.push(add_cluster(&mut sim, &spec, &mut rng, &control));
    }
    let mut copiers: Vec<String> = Vec::new();
    for edge in &edges {
        if embedded_mode {
            if let Some(target) = clusters.iter().find(|c| c.name == edge.to) {
                copiers.extend(target.brokers.iter().cloned());
            }
        } else {
            let model = |name: &str| {
                let index = names.iter().position(|n| *n == name);
                index.map(|i| clusters[i].model.clone())
            };
            let cycle = match (edge.after_cycle, model(edge.from), model(edge.to)) {
                (true, Some(from), Some(to)) => Some((from, to)),
                _ => None,
            };
            add_maker(
                &mut sim,
                edge.clone(),
                queue_size,
                cycle,
                rng.random(),
                &shared,
                &control,
            );
            copiers.push(edge.maker_host());
        }
    }
    for name in &names {
        add_producer(&mut sim, name, rng.random(), &shared, &control);
    }
    add_checker(
        &mut sim,
        names
            .iter()
            .zip(&clusters)
            .map(|(n, c)| (*n, c.model.clone()))
            .collect(),
        &shared,
        &control,
    );
    let mut hosts: Vec<String> = vec!["checker".into()];
    for (name, cluster) in names.iter().zip(&clusters) {
        hosts.push(cluster.zk_host.clone());
        hosts.extend(cluster.brokers.iter().cloned());
        hosts.push(format!("prod-{name}"));
    }
    if !embedded_mode {
        hosts.extend(copiers.iter().cloned());
    }
    let mut links = Links::new(hosts);
    let mut report = TopologyReport {
        shape,
        ..TopologyReport::default()
    };
    let two = TwoClusters {
        source: &clusters[0],
        destination: &clusters[1],
        copiers: &copiers,
    };
    let expect = expected(options.topology, rename);
    lag_followers_at_start(
        &sim,
        seed,
        &options,
        (&names, &clusters),
        &control,
        &mut report,
    );
    let result = drive(
        &mut sim,
        &mut links,
        &control,
        two,
        &options,
        seed,
        &shared,
        &expect,
        &mut report,
    );
    if result.is_ok() && control.violation().is_none() {
        let reads = state(&shared).read.clone();
        if let Some(reads) = reads {
            judge(&reads, &shared, &expect, &control, &mut report);
            judge_exactly_once(preserve, &reads, &control);
        }
    }
    if result.is_ok() && control.violation().is_none() {
        judge_counts(&clusters, &expect, &shared, &control);
    }
    report.refusals = control.trace.grep("would loop forever").len();
    {
        let s = state(&shared);
        report.mirror_starts = s.starts.values().sum();
        report.mirror_failures = s.failures.clone();
        for (origin, _) in &s.acked {
            *report.acked.entry(origin.clone()).or_default() += 1;
        }
    }
    report.trace_hash = control.trace.hash();
    report.trace_tail = control.trace.report_tail(40);
    report.simulated = sim.elapsed();
    crate::world::outcome(result, &control, report)
}

/// Whether the seed copies with positions (four seeds in five), drawn from a generator of its
/// own so that the seed's other draws are those it had before.
fn draws_positions(seed: u64) -> bool {
    ChaCha8Rng::seed_from_u64(seed ^ 0x9e5e_77e0).random_bool(0.8)
}

/// The clusters and the mirrors between them: east ⇄ west (renaming or not), or the chain
/// east → west → north → east, its last edge added a third of the way in; every edge copies with
/// positions when `preserve`.
fn layout(
    topology: Topology,
    rename: bool,
    duration: Duration,
    preserve: bool,
) -> (Vec<&'static str>, Vec<Edge>) {
    match topology {
        Topology::ActiveActive => (
            vec!["east", "west"],
            vec![
                Edge {
                    from: "east",
                    to: "west",
                    rename,
                    delay: Duration::ZERO,
                    after_cycle: false,
                    preserve,
                },
                Edge {
                    from: "west",
                    to: "east",
                    rename,
                    delay: Duration::ZERO,
                    after_cycle: false,
                    preserve,
                },
            ],
        ),
        Topology::Chain => (
            vec!["east", "west", "north"],
            vec![
                Edge {
                    from: "east",
                    to: "west",
                    rename: false,
                    delay: Duration::ZERO,
                    after_cycle: false,
                    preserve,
                },
                Edge {
                    from: "west",
                    to: "north",
                    rename: false,
                    delay: Duration::ZERO,
                    after_cycle: false,
                    preserve,
                },
                Edge {
                    from: "north",
                    to: "east",
                    rename: false,
                    delay: duration / 3,
                    after_cycle: true,
                    preserve,
                },
            ],
        ),
    }
}

/// The run's shape, as its trace and report name it.
fn shape_of(
    topology: Topology,
    rename: bool,
    (embedded_mode, preserve): (bool, bool),
    queue_size: u32,
) -> String {
    format!(
        "{:?}{}{}{}, queue.size {queue_size}",
        topology,
        if topology == Topology::ActiveActive {
            if rename {
                ", renaming"
            } else {
                ", no renaming"
            }
        } else {
            ""
        },
        if embedded_mode {
            ", embedded mirrors"
        } else {
            ", mirror makers"
        },
        if preserve { ", positions" } else { "" },
    )
}

/// In half the seeds (with network faults) every cluster's ZooKeeper followers are behind
/// from the start for 5–15 s, while the mirrors start and make their first decisions.
fn lag_followers_at_start(
    sim: &turmoil::Sim<'_>,
    seed: u64,
    options: &Options,
    (names, clusters): (&[&'static str], &[Cluster]),
    control: &Control,
    report: &mut TopologyReport,
) {
    let mut lag_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x1a9_f011);
    if matches!(options.faults, Faults::Network | Faults::Mixed) && lag_rng.random_bool(0.5) {
        for (name, cluster) in names.iter().zip(clusters) {
            let length = Duration::from_millis(lag_rng.random_range(5000..15_000));
            control.trace.push_at(
                sim.elapsed(),
                &format!("fault {name} zookeeper followers behind from the start for {length:?}"),
            );
            *report
                .faults
                .entry("zookeeper followers behind from the start")
                .or_default() += 1;
            let _asked = crate::zk_model::lag_followers(&cluster.model, length);
        }
    }
}

/// Faults until the run's length, the heal, then reads of every cluster (one a second) until
/// everything acknowledged is where it belongs or [`DRAIN_LIMIT`] has passed.
#[allow(clippy::too_many_arguments)]
fn drive(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    clusters: TwoClusters<'_>,
    options: &Options,
    seed: u64,
    shared: &Shared,
    expect: &Expect,
    report: &mut TopologyReport,
) -> Result<(), Failure> {
    let mut schedule = FaultSchedule::new(
        ChaCha8Rng::seed_from_u64(seed ^ 0x7090_1097),
        options.faults,
        options.duration,
        false,
    )
    .with_follower_lag();
    while sim.elapsed() < schedule.end_at() {
        schedule.step(sim, links, control, clusters, kind, &mut report.faults);
        if control.violation().is_some() {
            return Ok(());
        }
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
    }
    schedule.end_all(sim, links, control, clusters);
    state(shared).stop_producing = true;
    let healed = sim.elapsed();
    control.trace.push_at(healed, "healed; producing stopped");
    // Let the producers' last sends resolve before the first look.
    let settle = healed + Duration::from_secs(3);
    while sim.elapsed() < settle {
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
    }
    state(shared).check = true;
    loop {
        let read = state(shared).read.take();
        if let Some(reads) = read {
            let missing = missing(&reads, shared, expect);
            let late = sim.elapsed() > healed + DRAIN_LIMIT;
            if (missing.is_empty() && reads.problems.is_empty()) || late {
                if missing.is_empty() {
                    report.drained_after = Some(sim.elapsed() - healed);
                    control.trace.push_at(sim.elapsed(), "everything delivered");
                }
                let mut s = state(shared);
                s.check = false;
                s.read = Some(reads);
                return Ok(());
            }
        }
        if control.violation().is_some() {
            return Ok(());
        }
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
    }
}

/// Where messages must be: (origin, cluster, topic there).
type Expect = Vec<(&'static str, &'static str, String)>;

/// Where each cluster's acknowledged messages must be: (origin, cluster, topic there).
/// Active-active with renaming: in the other cluster, renamed. Without renaming nothing is
/// owed (at least one direction refuses, and which is the race's). The chain: east's in west
/// and north, west's in north; the closing edge copies nothing (north's `orders` came through
/// east, so the topic is refused whole, north's own messages included).
fn expected(topology: Topology, rename: bool) -> Expect {
    match (topology, rename) {
        (Topology::ActiveActive, true) => vec![
            ("east", "west", format!("east.{TOPIC}")),
            ("west", "east", format!("west.{TOPIC}")),
        ],
        (Topology::ActiveActive, false) => Vec::new(),
        (Topology::Chain, _) => vec![
            ("east", "west", TOPIC.to_string()),
            ("east", "north", TOPIC.to_string()),
            ("west", "north", TOPIC.to_string()),
        ],
    }
}

/// The acknowledged messages not yet where they belong: (origin, seq, cluster, topic).
fn missing(reads: &Reads, shared: &Shared, expect: &Expect) -> Vec<(String, u64, String, String)> {
    let acked = state(shared).acked.clone();
    let mut out = Vec::new();
    for (origin, seq) in &acked {
        for (o, cluster, topic) in expect {
            if o != origin {
                continue;
            }
            let found = reads
                .copies
                .get(*cluster)
                .and_then(|c| c.get(&(topic.clone(), origin.clone(), *seq)))
                .copied()
                .unwrap_or(0);
            if found == 0 {
                out.push((origin.clone(), *seq, cluster.to_string(), topic.clone()));
            }
        }
    }
    out
}

/// The invariants against the last read.
fn judge(
    reads: &Reads,
    shared: &Shared,
    expect: &Expect,
    control: &Control,
    report: &mut TopologyReport,
) {
    if let Some(problem) = reads.problems.first() {
        return control.violate(
            Invariant::BrokerHealth,
            format!("the clusters could not be read at the end: {problem}"),
        );
    }
    if let Some((cluster, topic, payload)) = reads.strangers.first() {
        return control.violate(
            Invariant::MirrorNoPhantom,
            format!("{cluster} {topic} holds a message no producer sent: {payload:?}"),
        );
    }
    let sent: std::collections::BTreeSet<(String, u64)> =
        state(shared).sent.iter().cloned().collect();
    let faults: u32 = report.faults.values().sum();
    let starts: u32 = state(shared).starts.values().sum();
    let bound = 1 + faults as usize + starts as usize;
    report.copies_max.1 = bound;
    for (cluster, copies) in &reads.copies {
        // Per message, its copies in this cluster over every topic.
        let mut per_message: BTreeMap<(&str, u64), usize> = BTreeMap::new();
        for ((topic, origin, seq), n) in copies {
            if !sent.contains(&(origin.clone(), *seq)) {
                return control.violate(
                    Invariant::MirrorNoPhantom,
                    format!("{cluster} {topic} holds {origin} {seq}, which was never sent"),
                );
            }
            report.duplicates += n - 1;
            *per_message.entry((origin.as_str(), *seq)).or_default() += n;
            if origin == cluster && (topic != TOPIC || *n > 1) {
                report.copies_back += 1;
            }
        }
        if report.copies_back > 0 {
            let example = copies
                .iter()
                .find(|((topic, origin, _), n)| origin == cluster && (topic != TOPIC || **n > 1));
            return control.violate(
                Invariant::TopologyNoCopyBack,
                format!("{} messages of {cluster} were copied back into it, e.g. {example:?} ((topic, origin, seq), copies)", report.copies_back),
            );
        }
        if let Some(((origin, seq), n)) = per_message.iter().max_by_key(|(_, n)| **n) {
            report.copies_max.0 = report.copies_max.0.max(*n);
            if *n > bound {
                return control.violate(
                    Invariant::TopologyNoAmplification,
                    format!("{cluster} holds {n} copies of {origin} {seq}; the run's {faults} faults and {starts} mirror starts explain at most {bound}"),
                );
            }
        }
    }
    let missing = missing(reads, shared, expect);
    if let Some((origin, seq, cluster, topic)) = missing.first() {
        return control.violate(
            Invariant::TopologyNoLoss,
            format!("{} acknowledged messages are not where the topology copies them, e.g. {origin} {seq} is not in {cluster} {topic} ({DRAIN_LIMIT:?} after healing)", missing.len()),
        );
    }
    for (origin, cluster, _) in expect {
        let acked = state(shared)
            .acked
            .iter()
            .filter(|(o, _)| o == origin)
            .count();
        *report
            .delivered
            .entry((origin.to_string(), cluster.to_string()))
            .or_default() += acked;
    }
}

/// S32: with positions, no message is in any topic of any cluster more than once.
fn judge_exactly_once(preserve: bool, reads: &Reads, control: &Control) {
    if !preserve || control.violation().is_some() {
        return;
    }
    for (cluster, copies) in &reads.copies {
        let doubled: Vec<_> = copies.iter().filter(|(_, n)| **n > 1).collect();
        if let Some(((topic, origin, seq), n)) = doubled.first() {
            let places = reads
                .places
                .get(&(cluster.clone(), topic.clone(), origin.clone(), *seq))
                .map(|p| p.join(", "))
                .unwrap_or_default();
            // Where the message is in every cluster: which source partition the copies came from.
            let everywhere: Vec<String> = reads
                .places
                .iter()
                .filter(|((_, _, o, s), _)| o == origin && s == seq)
                .map(|((c, t, _, _), p)| format!("{c} {t}: {}", p.join(", ")))
                .collect();
            return control.violate(
                Invariant::MirrorExactlyOnce,
                format!("{} messages are in {cluster} more than once with mirror.preserve.partitions on, e.g. {origin} {seq} in {topic} ({n} copies: {places}; everywhere: {})", doubled.len(), everywhere.join("; ")),
            );
        }
    }
}

/// A topic's per-broker partition counts as its brokers registered them in `cluster`'s
/// ZooKeeper: broker id → count.
fn registered_counts(cluster: &Cluster, topic: &str) -> BTreeMap<String, Option<u32>> {
    let model = match cluster.model.lock() {
        Ok(model) => model,
        Err(poisoned) => poisoned.into_inner(),
    };
    let path = format!("/brokers/topics/{topic}");
    model
        .children(&path)
        .into_iter()
        .map(|broker| {
            let count = model
                .data(&format!("{path}/{broker}"))
                .and_then(|d| String::from_utf8_lossy(&d).trim().parse().ok());
            (broker, count)
        })
        .collect()
}

/// S26: every renamed copy, on every broker that registered it, has the per-broker count its
/// topic has in the cluster it came from — except on a broker that said it created the copy
/// without reading its record (a ZooKeeper it could not reach then; the source's count applies
/// from its next restart). A copy of acknowledged messages is registered somewhere.
fn judge_counts(clusters: &[Cluster], expect: &Expect, shared: &Shared, control: &Control) {
    for (origin, cluster, topic) in expect {
        if topic == TOPIC {
            continue;
        }
        let (Some(source), Some(target)) = (
            clusters.iter().find(|c| c.name == *origin),
            clusters.iter().find(|c| c.name == *cluster),
        ) else {
            continue;
        };
        let Some(want) = registered_counts(source, TOPIC)
            .values()
            .flatten()
            .max()
            .copied()
        else {
            continue;
        };
        let registered = registered_counts(target, topic);
        let owed = state(shared).acked.iter().any(|(o, _)| o == origin);
        if registered.is_empty() && owed {
            return control.violate(
                Invariant::TopologyPartitionCount,
                format!("no broker of {cluster} registers {topic}, the copy of {origin}'s acknowledged {TOPIC}"),
            );
        }
        for (broker, count) in registered {
            let unread = !control
                .trace
                .grep(&format!(
                    "broker {broker}: {topic}: its origin record was not read"
                ))
                .is_empty();
            if count != Some(want) && !unread {
                return control.violate(
                    Invariant::TopologyPartitionCount,
                    format!("{cluster} broker {broker} registers {topic} with {count:?} partitions; {TOPIC} has {want} per broker in {origin}"),
                );
            }
        }
    }
}
