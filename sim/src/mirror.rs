//! The mirror scenario: a source cluster and a mirror cluster (two brokers and a ZooKeeper model
//! each), producers writing sequence-numbered, checksummed messages to the source with durable
//! acknowledgements, the production mirror — embedded in the mirror brokers (0.7.0's way, one
//! group) or as a mirror-maker host (0.7.1's way, chosen by the seed) — and a consumer group
//! reading the mirror cluster, all as the production code on turmoil hosts, under seeded faults:
//! the link between the clusters cut (long enough to build lag), hosts cut from either
//! ZooKeeper (session expiry, rebalances of the mirror group), crashes and graceful restarts of
//! source brokers, mirror brokers and the mirror maker, slow mirror disks and failing fsyncs,
//! tiny queues. Some seeds give the source a tiny retention and cut the link across its first
//! cleanup, so data is deleted before the mirror copies it.
//!
//! A history records every produce acknowledgement and, through [`MirrorObserver`], every
//! forward, acknowledgement, commit and gap of the mirror. Invariants ([`Invariant`]):
//!
//! 1. `MirrorNoLoss`: every message the source acknowledged is in the mirror cluster after the
//!    faults heal and the lag drains — unless retention deleted it unmirrored (then 6 applies);
//! 2. `MirrorNoPhantom`: every forwarded message is what the source holds at that offset (the
//!    source never served data it then lost), and the mirror cluster holds only sent messages;
//! 3. `MirrorDuplicates`: what one ownership of a partition (a mirror incarnation and epoch)
//!    forwards again that an earlier one forwarded is at most 2 × `queue.size` × streams — the
//!    bound docs/mirroring.md states;
//! 4. `MirrorCommitSafety` (checked continuously): a committed source offset is the end of a
//!    message the mirror cluster durably acknowledged (or the start the group recorded when it
//!    first claimed the partition);
//! 5. `MirrorProgress`: after the last fault heals, every committed offset reaches its source
//!    partition's end within [`drain_limit`] (three times the run's length, at least 60 s);
//! 6. `MirrorGaps`: every acknowledged message missing from both clusters lies in a reported gap
//!    of its partition, and every reported gap covers only data the source no longer has;
//! 7. `MirrorOrder`: one ownership of a partition forwards its messages in source order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::client::connect;
use tributary::consumer::{ConsumerConnector, ConsumerError, GapReport, Subscription};
use tributary::mirror::maker::{self, MakerError};
use tributary::mirror::supervise;
use tributary::mirror::{MirrorError, MirrorEvent, MirrorObserver, MirrorSettings};
use tributary::producer::{Producer, Record};
use tributary::server::EmbeddedMirror;
use tributary_core::config::{ConsumerConfig, ProducerConfig};
use tributary_core::consumer::BrokerPartition;
use tributary_core::message::{DeepIter, ShallowIter};
use tributary_core::wire::{ErrorCode, FetchRequest, OffsetsRequest, Request, Response, TopicName};

use crate::cluster::Faults;
use crate::env::SimEnv;
use crate::metrics_check::{self, BROKER_METRICS_PORT, MIRROR_METRICS_PORT};
use crate::sim_fs::{sim_builder, DiskFaults};
use crate::world::{
    add_cluster, scenario_config, until_started, Cluster, ClusterSpec, Control, Invariant, Links,
    MirrorPlan, Violation, BROKER_PORT, ZK_PORT,
};

/// The mirror's consumer group on the source.
pub const GROUP: &str = "KafkaMirror";
/// After the last fault heals, how long the lag may take to drain (invariant 5): three times
/// the run's length, at least 60 s. The slowest mirrors a seed draws copy at about half the rate
/// the producers write — a sync producer waits one durable round trip per message; with
/// `queue.size=4` and one stream at most 8 messages are uncommitted, so every few messages wait
/// for a commit round (ZooKeeper writes, one partition after another) — and a mirror kept away
/// for most of the run must copy most of its messages after healing.
pub fn drain_limit(duration: Duration) -> Duration {
    (duration * 3).max(Duration::from_secs(60))
}
/// Source topics: the first from the start, the second created a third of the way in.
const TOPICS: [&str; 2] = ["orders", "clicks"];
/// Partitions per source broker.
const SOURCE_PARTITIONS: u32 = 2;
/// Producer hosts: `producer0` and `producer1` wait for durable acknowledgements; the last,
/// like a plain 0.7 client, does not, so the source always holds unflushed data a crash can take
/// back (what the mirror must never have copied: invariant 2).
const PRODUCERS: u32 = 3;
/// The mirror maker's host (standalone mode).
const MAKER: &str = "mirrormaker";

/// How the mirror runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// In every mirror broker (0.7.0's embedded consumer), one group.
    Embedded,
    /// A mirror-maker host (0.7.1).
    Maker,
}

/// What a run does.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Simulated time of workload and faults before healing.
    pub duration: Duration,
    /// Which faults.
    pub faults: Faults,
    /// How the mirror runs (`None`: the seed chooses).
    pub mode: Option<Mode>,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct MirrorReport {
    /// How the mirror ran.
    pub mode: Option<Mode>,
    /// Whether the source had a tiny retention (gap seeds).
    pub tiny_retention: bool,
    /// Simulated time covered.
    pub simulated: Duration,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Messages the source acknowledged.
    pub acked: usize,
    /// Distinct source messages found in the mirror cluster.
    pub mirrored: usize,
    /// Copies in the mirror cluster beyond the source's copies.
    pub duplicates: usize,
    /// The largest re-forward count of one ownership of a partition.
    pub reforwards_max: usize,
    /// The largest re-forward count of one ownership over all its partitions.
    pub reforwards_owner_max: usize,
    /// The bound it is checked against.
    pub reforward_bound: usize,
    /// Gaps reported, and acknowledged messages inside them.
    pub gaps: usize,
    /// Acknowledged messages lost to retention (inside reported gaps).
    pub gap_messages: usize,
    /// Commits checked against acknowledgements.
    pub commits_checked: u64,
    /// Mirrors that stopped with an error (a supervisor started them again), by reason.
    pub mirror_failures: BTreeMap<String, u32>,
    /// From the last heal until every committed offset reached its partition's end.
    pub drained_after: Option<Duration>,
    /// Hash of the trace (same seed, same hash).
    pub trace_hash: u64,
    /// The trace's last lines.
    pub trace_tail: Vec<String>,
    /// The run's schedule: the seed's draws, every fault and heal, the drain.
    pub schedule: Vec<String>,
}

/// A source partition: (topic, `<broker>-<partition>`).
pub(crate) type Part = (String, String);

/// One forward seen by the observer.
#[derive(Debug, Clone)]
struct Forward {
    /// The mirror incarnation (host and start count) and epoch.
    owner: (String, u64),
    end: i64,
    payload: Vec<u8>,
}

/// A source message as acknowledged to its producer.
#[derive(Debug, Clone)]
struct Acked {
    part: Part,
    start: i64,
}

#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    stop_producing: bool,
    /// Producers whose last send has resolved after `stop_producing`, and when the last did.
    producers_stopped: u32,
    producers_stopped_at: Option<Duration>,
    /// Every seq sent, and the acknowledged ones with where the source put them.
    sent: BTreeSet<u64>,
    acked: BTreeMap<u64, Acked>,
    /// Per source partition, every forward in order.
    forwards: BTreeMap<Part, Vec<Forward>>,
    /// Per source partition and ownership, the forwards not acknowledged yet (their ends).
    unacked: BTreeMap<(Part, (String, u64)), BTreeSet<i64>>,
    /// Per source partition, the end offsets some mirror had durably acknowledged.
    acked_ends: BTreeMap<Part, BTreeSet<i64>>,
    /// Gaps reported: (partition, from, to).
    gaps: Vec<(Part, i64, i64, Duration)>,
    /// Gap seeds: the source's earliest offset per partition as polled while running (every
    /// 250 ms), with when, to judge each gap report against what the source held right after it.
    earliest_seen: BTreeMap<Part, Vec<(Duration, i64)>>,
    /// Mirror starts per host (incarnations).
    starts: BTreeMap<String, u64>,
    commits_checked: u64,
    /// Mirrors that stopped with an error (and were started again), by reason.
    mirror_failures: BTreeMap<String, u32>,
    /// What the checker host read at the end.
    final_read: Option<FinalRead>,
    /// Where the metrics disagreed with the clusters at the end (empty: they agreed).
    metrics_problems: Vec<String>,
    /// Source partitions' latest offsets, polled during the drain.
    source_latest: BTreeMap<Part, (Duration, i64)>,
    /// The phase the checker host acts on.
    phase: Phase,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Phase {
    #[default]
    Run,
    /// Poll the source's latest offsets.
    Drain,
    /// Read both clusters end to end.
    Check,
}

/// Both clusters read end to end.
#[derive(Debug, Default)]
struct FinalRead {
    /// Per source partition: its earliest offset and its messages as (start, end, payload).
    source: BTreeMap<Part, SourceRead>,
    /// Every payload in the mirror cluster, with its copies.
    mirror: BTreeMap<Vec<u8>, usize>,
    /// Problems met while reading.
    problems: Vec<String>,
}

/// One source partition read end to end: its earliest offset and its messages as
/// (start, end, payload).
type SourceRead = (i64, Vec<(i64, i64, Vec<u8>)>);

type Shared = Arc<Mutex<State>>;

fn state(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The payload of message `seq`: `m <seq> <crc32 of "m <seq>">`.
fn payload(seq: u64) -> Vec<u8> {
    let body = format!("m {seq}");
    format!("{body} {:08x}", crc32fast::hash(body.as_bytes())).into_bytes()
}

/// The seq of a payload whose checksum holds.
fn parse_payload(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (body, crc) = text.rsplit_once(' ')?;
    let seq = body.strip_prefix("m ")?.parse().ok()?;
    (u32::from_str_radix(crc, 16).ok()? == crc32fast::hash(body.as_bytes())).then_some(seq)
}

/// The draws of one seed that shape the mirror.
#[derive(Debug, Clone, Copy)]
struct Shape {
    mode: Mode,
    streams: u32,
    queue_size: u32,
    batch_size: u32,
    sync_producer: bool,
    drop_timeout: bool,
    tiny_retention: bool,
}

impl Shape {
    fn draw(rng: &mut ChaCha8Rng, options: &Options) -> Self {
        let mode = options.mode.unwrap_or(if rng.random_bool(0.5) {
            Mode::Embedded
        } else {
            Mode::Maker
        });
        Shape {
            mode,
            streams: rng.random_range(1..=2),
            queue_size: [4, 16, 64, 200][rng.random_range(0..4)],
            batch_size: rng.random_range(1..=20),
            sync_producer: rng.random_bool(0.15),
            // A file asking to drop on a full queue (the mirror must block anyway).
            drop_timeout: rng.random_bool(0.5),
            tiny_retention: rng.random_bool(0.3),
        }
    }

    /// Invariant 3's bound for one ownership of a partition: what one member can hold
    /// uncommitted, 2 × queue.size per stream.
    fn reforward_bound(&self) -> usize {
        2 * self.queue_size as usize * self.streams as usize
    }
}

fn consumer_config(shape: &Shape) -> ConsumerConfig {
    let text = format!(
        "zk.connect=src-zk:{ZK_PORT}\ngroupid={GROUP}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nautooffset.reset=smallest\n\
         fetcher.backoff.ms=100\nrebalance.backoff.ms=500\nrebalance.retries.max=10\nsocket.timeout.ms=2000\nfetch.size=4096\nqueuedchunks.max=4\n\
         mirror.commit.interval.ms=500\nmirror.consumer.numthreads={}\n",
        shape.streams
    );
    scenario_config("consumer", &text, ConsumerConfig::from_properties)
}

fn mirror_producer_config(shape: &Shape) -> ProducerConfig {
    let text = format!(
        "zk.connect=dst-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nproducer.type={}\nqueue.size={}\nbatch.size={}\nqueue.time=30\n\
         queue.enqueueTimeout.ms={}\nsocket.timeout.ms=2000\nretry.backoff.ms=200\n",
        if shape.sync_producer { "sync" } else { "async" },
        shape.queue_size,
        shape.batch_size,
        if shape.drop_timeout { 0 } else { -1 },
    );
    scenario_config("producer", &text, ProducerConfig::from_properties)
}

/// One start's settings. Their metrics are left to what runs them: a mirror broker's server
/// gives the broker's, the mirror maker makes its own for `--metrics.port`.
fn settings(shape: &Shape, observer: Arc<dyn MirrorObserver>) -> MirrorSettings {
    let mut settings =
        MirrorSettings::embedded(consumer_config(shape), mirror_producer_config(shape));
    settings.summary_interval = Duration::from_secs(10);
    settings.observer = Some(observer);
    settings
}

/// The history's ear in the mirror.
#[derive(Debug)]
struct Observer {
    owner: String,
    shared: Shared,
    control: Arc<Control>,
}

impl Observer {
    fn part(event: &MirrorEvent<'_>) -> Part {
        (event.topic.to_string(), event.partition.to_string())
    }
}

impl MirrorObserver for Observer {
    fn forwarded(&self, event: &MirrorEvent<'_>, payload: &[u8]) {
        let part = Self::part(event);
        let owner = (self.owner.clone(), event.generation);
        let out_of_order = {
            let mut s = state(&self.shared);
            let forwards = s.forwards.entry(part.clone()).or_default();
            // 7: one ownership forwards in source order. (The source here writes no compressed
            // wrappers: every message has its own end offset.)
            let previous = forwards
                .iter()
                .rev()
                .find(|f| f.owner == owner)
                .map(|f| f.end)
                .filter(|end| *end >= event.offset);
            forwards.push(Forward {
                owner: owner.clone(),
                end: event.offset,
                payload: payload.to_vec(),
            });
            s.unacked
                .entry((part.clone(), owner.clone()))
                .or_default()
                .insert(event.offset);
            previous
        };
        if let Some(previous) = out_of_order {
            self.control.violate(
                Invariant::MirrorOrder,
                format!(
                    "{}/{}: {owner:?} forwarded offset {} after {previous}",
                    part.0, part.1, event.offset
                ),
            );
        }
    }

    fn acknowledged(&self, event: &MirrorEvent<'_>) {
        let part = Self::part(event);
        let mut s = state(&self.shared);
        if let Some(unacked) = s
            .unacked
            .get_mut(&(part.clone(), (self.owner.clone(), event.generation)))
        {
            unacked.remove(&event.offset);
        }
        s.acked_ends.entry(part).or_default().insert(event.offset);
    }

    /// 4, at every commit: the committed offset ends the acknowledged prefix of what this
    /// ownership forwarded — none of its forwards ending at or below it is unacknowledged.
    fn committed(&self, event: &MirrorEvent<'_>) {
        let part = Self::part(event);
        let owner = (self.owner.clone(), event.generation);
        let hole = {
            let mut s = state(&self.shared);
            s.commits_checked += 1;
            s.unacked
                .get(&(part.clone(), owner.clone()))
                .and_then(|unacked| unacked.first().copied())
                .filter(|first| *first <= event.offset)
        };
        if let Some(first) = hole {
            self.control.violate(
                Invariant::MirrorCommitSafety,
                format!(
                    "{}/{}: {owner:?} committed {} while its forward ending at {first} was not acknowledged",
                    part.0, part.1, event.offset
                ),
            );
        }
    }

    fn gap(&self, _source: usize, report: &GapReport) {
        self.control.trace.push(&format!(
            "{}: gap {}/{} {}..{}",
            self.owner, report.topic, report.partition, report.from, report.to
        ));
        state(&self.shared).gaps.push((
            (report.topic.to_string(), report.partition.to_string()),
            report.from,
            report.to,
            turmoil::sim_elapsed().unwrap_or_default(),
        ));
    }
}

/// One start of the mirror on `host`: a new incarnation (its consumer's epochs count from 0
/// again) with its own observer, and an environment seeded from `seed` and the time.
fn incarnation(
    host: &str,
    shape: &Shape,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) -> (SimEnv, MirrorSettings) {
    let incarnation = {
        let mut s = state(shared);
        let n = s.starts.entry(host.to_string()).or_insert(0);
        *n += 1;
        *n
    };
    let observer: Arc<dyn MirrorObserver> = Arc::new(Observer {
        owner: format!("{host}#{incarnation}"),
        shared: shared.clone(),
        control: control.clone(),
    });
    control.trace.push(&format!(
        "{host}: mirror starting (incarnation {incarnation})"
    ));
    let env = SimEnv::new(seed ^ turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64);
    (env, settings(shape, observer))
}

/// A failed run of the mirror on `host`: traced, and counted in the report when it is one a
/// running mirror must not have (a start that cannot reach a cluster, a ZooKeeper restarting or
/// a link cut, is waited out).
fn mirror_failed(host: &str, shared: &Shared, control: &Control, e: &MirrorError) {
    control
        .trace
        .push(&format!("{host}: mirror failed: {e}; it is started again"));
    if matches!(e, MirrorError::Send(_)) {
        *state(shared)
            .mirror_failures
            .entry(e.to_string().chars().take(120).collect())
            .or_insert(0) += 1;
    }
}

/// The embedded mirror of every mirror broker, as the production server
/// (`tributary::server::run`) supervises it: each start an incarnation, each failure counted.
fn embedded_mirror(shape: Shape, seed: u64, shared: &Shared, control: &Arc<Control>) -> MirrorPlan {
    let (shared, control) = (shared.clone(), control.clone());
    MirrorPlan(Arc::new(move |host: &str| {
        let start = {
            let (host, shared, control) = (host.to_string(), shared.clone(), control.clone());
            move || incarnation(&host, &shape, seed, &shared, &control)
        };
        let failed = {
            let (host, shared, control) = (host.to_string(), shared.clone(), control.clone());
            move |e: &MirrorError| mirror_failed(&host, &shared, &control, e)
        };
        EmbeddedMirror::each(start, failed)
    }))
}

/// The mirror-maker host: the production mirror maker (`tributary::mirror::maker::run`, with
/// its metrics on [`MIRROR_METRICS_PORT`]) under an operator's supervisor, which starts it again
/// after it fails (pausing as the embedded mirror's supervisor does), until `stop`.
async fn run_maker(
    shape: Shape,
    seed: u64,
    shared: Shared,
    control: Arc<Control>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut backoff = supervise::BACKOFF_MIN;
    loop {
        let (env, settings) = incarnation(MAKER, &shape, seed, &shared, &control);
        let stopped = {
            let mut stop = stop.clone();
            async move {
                while !*stop.borrow_and_update() {
                    if stop.changed().await.is_err() {
                        return;
                    }
                }
            }
        };
        match maker::run(env, settings, Some(MIRROR_METRICS_PORT), stopped).await {
            Ok(()) => {
                control.trace.push(&format!("{MAKER}: mirror stopped"));
                return;
            }
            Err(MakerError::Mirror(MirrorError::Config(e))) => {
                return control.violate(
                    Invariant::BrokerHealth,
                    format!("{MAKER}: the mirror's settings cannot work: {e}"),
                );
            }
            Err(MakerError::Mirror(e)) => mirror_failed(MAKER, &shared, &control, &e),
            Err(e) => control
                .trace
                .push(&format!("{MAKER}: {e}; it is started again")),
        }
        if *stop.borrow() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(supervise::BACKOFF_MAX);
    }
}

/// Runs one seed; `Err` names the broken invariant.
#[expect(
    clippy::result_large_err,
    reason = "one result per simulated run; the report is the point"
)]
pub fn run_seed(seed: u64, options: Options) -> Result<MirrorReport, (Violation, MirrorReport)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let shape = Shape::draw(&mut rng, &options);
    let mut builder = sim_builder(seed);
    builder
        .simulation_duration(options.duration + drain_limit(options.duration) * 2)
        .tcp_capacity(rng.random_range(64..256))
        .max_message_latency(Duration::from_millis(rng.random_range(2..20)));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let _capture = control.trace.capture();
    control.trace.push(&format!("seed {seed}: {shape:?}"));
    let shared: Shared = Arc::default();

    let mut source_spec = ClusterSpec::new("src", 2, SOURCE_PARTITIONS);
    if shape.tiny_retention {
        source_spec.extra_config =
            "log.retention.size=1500\nlog.cleanup.interval.mins=1\nlog.file.size=600\n".into();
    }
    let metrics_config = format!("metrics.port={BROKER_METRICS_PORT}\n");
    source_spec.extra_config.push_str(&metrics_config);
    let source = add_cluster(&mut sim, &source_spec, &mut rng, &control);
    let mut mirror_spec = ClusterSpec::new("dst", 2, rng.random_range(1..=2));
    mirror_spec.extra_config.push_str(&metrics_config);
    if options.faults != Faults::None && options.faults != Faults::Network && rng.random_bool(0.4) {
        mirror_spec.disk = DiskFaults {
            latency_max: Duration::from_millis(rng.random_range(1..15)),
            sync_failures_per_million: if rng.random_bool(0.3) { 1_000 } else { 0 },
        };
    }
    if shape.mode == Mode::Embedded {
        let mirror_seed: u64 = rng.random();
        mirror_spec.mirror = Some(embedded_mirror(shape, mirror_seed, &shared, &control));
    }
    let mirror = add_cluster(&mut sim, &mirror_spec, &mut rng, &control);
    let mut mirror_hosts: Vec<String> = Vec::new();
    if shape.mode == Mode::Maker {
        add_maker(&mut sim, shape, rng.random(), &shared, &control);
        mirror_hosts.push(MAKER.into());
    } else {
        mirror_hosts.extend(mirror.brokers.iter().cloned());
    }
    for i in 0..PRODUCERS {
        add_producer(
            &mut sim,
            i,
            options.duration,
            rng.random(),
            &shared,
            &control,
        );
    }
    add_reader(&mut sim, rng.random(), &shared, &control);
    add_checker(
        &mut sim,
        (&source, &mirror, &mirror_hosts),
        &shared,
        &control,
        shape.tiny_retention,
    );

    let mut hosts = vec![
        source.zk_host.clone(),
        mirror.zk_host.clone(),
        "producer0".into(),
        "producer1".into(),
        "producer2".into(),
        "reader".into(),
        "checker".into(),
    ];
    hosts.extend(source.brokers.iter().cloned());
    hosts.extend(mirror.brokers.iter().cloned());
    if shape.mode == Mode::Maker {
        hosts.push(MAKER.into());
    }
    let mut links = Links::new(hosts);
    let mut report = MirrorReport {
        mode: Some(shape.mode),
        tiny_retention: shape.tiny_retention,
        reforward_bound: shape.reforward_bound(),
        ..MirrorReport::default()
    };
    let world = World {
        source: &source,
        mirror: &mirror,
        mirror_hosts: &mirror_hosts,
        shape,
        options,
        seed,
    };
    let result = drive(&mut sim, &mut links, &control, &world, &shared, &mut report);
    if result.is_ok() && control.violation().is_none() {
        judge(&shared, &control, &shape, &mut report);
    }
    report.commits_checked = state(&shared).commits_checked;
    report.mirror_failures = state(&shared).mirror_failures.clone();
    report.trace_hash = control.trace.hash();
    report.trace_tail = control.trace.report_tail(40);
    report.schedule = [
        "seed ",
        "fault ",
        "restarted after",
        "healed",
        "lag drained",
    ]
    .iter()
    .flat_map(|needle| control.trace.grep(needle))
    .collect();
    // Lines start with their simulated time (the seed's line, first, has none).
    report.schedule.sort_by(|a, b| {
        let at = |l: &str| {
            l.split_whitespace()
                .next()
                .and_then(|t| t.parse::<f64>().ok())
                .unwrap_or(-1.0)
        };
        at(a).total_cmp(&at(b))
    });
    report.schedule.dedup();
    report.simulated = sim.elapsed();
    crate::world::outcome(result, &control, report)
}

/// What the driver steers.
struct World<'a> {
    source: &'a Cluster,
    mirror: &'a Cluster,
    mirror_hosts: &'a [String],
    shape: Shape,
    options: Options,
    seed: u64,
}

fn add_maker(
    sim: &mut turmoil::Sim<'_>,
    shape: Shape,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control) = (shared.clone(), control.clone());
    sim.host(MAKER, move || {
        let (shared, control) = (shared.clone(), control.clone());
        async move {
            // A graceful stop of the maker is asked through the control, as for brokers.
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let watcher = {
                let control = control.clone();
                async move {
                    while !control.take_stop(MAKER) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    let _ = stop.send(true);
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                biased;
                () = run_maker(shape, seed, shared, control.clone(), stopped) => {}
                () = watcher => {}
            }
            control.trace.push("mirrormaker: stopped gracefully");
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

fn add_producer(
    sim: &mut turmoil::Sim<'_>,
    index: u32,
    duration: Duration,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control, name) = (shared.clone(), control.clone(), format!("producer{index}"));
    sim.host(name.clone().as_str(), move || {
        let (shared, control, name) = (shared.clone(), control.clone(), name.clone());
        async move {
            let durable = index + 1 < PRODUCERS;
            let text = format!("zk.connect=src-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nproducer.type=sync\ndurable.acks={durable}\nnum.retries=3\nsocket.timeout.ms=2000\n");
            let config = scenario_config("producer", &text, ProducerConfig::from_properties);
            let producer = until_started(&name, &control, || Producer::start(SimEnv::new(seed), config.clone())).await;
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            loop {
                let seq = {
                    let mut s = state(&shared);
                    if s.stop_producing {
                        s.producers_stopped += 1;
                        s.producers_stopped_at = turmoil::sim_elapsed();
                        break;
                    }
                    s.next_seq += 1;
                    let seq = s.next_seq;
                    s.sent.insert(seq);
                    seq
                };
                // The second topic appears a third of the way in.
                let late = turmoil::sim_elapsed().unwrap_or_default() > duration / 3;
                let topic = if late && rng.random_bool(0.5) { TOPICS[1] } else { TOPICS[0] };
                let Ok(t) = topic.parse::<TopicName>() else { continue };
                let bytes = payload(seq);
                let len = bytes.len() as i64;
                match producer.send(Record::new(t, bytes)).await {
                    Ok(delivery) => match delivery.await {
                        Ok(d) => match d.offset {
                            Some(start) => {
                                let part = (topic.to_string(), format!("{}-{}", d.broker_id, d.partition));
                                control.trace.push(&format!("acked m {seq} at {}/{} {start}..{}", part.0, part.1, start + 10 + len));
                                state(&shared).acked.insert(seq, Acked { part, start });
                            }
                            None if durable => control.trace.push(&format!("m {seq} delivered without an offset")),
                            None => {}
                        },
                        Err(e) => control.trace.push(&format!("m {seq} not delivered: {e}")),
                    },
                    Err(e) => control.trace.push(&format!("m {seq} not sent: {e}")),
                }
                // The plain producer writes less: enough that the source always holds unflushed
                // data, not so much that it dominates what the mirror must copy.
                let pause = if durable { 5..30 } else { 30..90 };
                tokio::time::sleep(Duration::from_millis(rng.random_range(pause))).await;
            }
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

/// A consumer group on the mirror cluster: every message it reads must be one a producer sent,
/// intact (2).
fn add_reader(sim: &mut turmoil::Sim<'_>, seed: u64, shared: &Shared, control: &Arc<Control>) {
    let (shared, control) = (shared.clone(), control.clone());
    sim.host("reader", move || {
        let (shared, control) = (shared.clone(), control.clone());
        async move {
            let text = format!("zk.connect=dst-zk:{ZK_PORT}\ngroupid=readers\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nautooffset.reset=smallest\nfetcher.backoff.ms=200\nconsumer.timeout.ms=1000\nsocket.timeout.ms=2000\n");
            let config = scenario_config("consumer", &text, ConsumerConfig::from_properties);
            let (connector, mut streams) = until_started("reader", &control, || ConsumerConnector::start(SimEnv::new(seed), config.clone(), Subscription::Whitelist(".*".into(), 1))).await;
            let mut stream = streams.remove(0);
            loop {
                match stream.next().await {
                    Ok(m) => {
                        let known = parse_payload(&m.payload).is_some_and(|seq| state(&shared).sent.contains(&seq));
                        if !known {
                            control.violate(Invariant::MirrorNoPhantom, format!("the mirror cluster served {}/{} a message no producer sent: {:?}", m.topic, m.partition, String::from_utf8_lossy(&m.payload)));
                        }
                    }
                    Err(ConsumerError::Timeout(_)) => {}
                    Err(ConsumerError::Closed) => break,
                    Err(e) => control.trace.push(&format!("reader: {e}")),
                }
            }
            drop(connector);
            Ok(())
        }
    });
}

/// Reads the clusters when the driver asks: the source's latest offsets while the lag drains,
/// then both clusters end to end.
fn add_checker(
    sim: &mut turmoil::Sim<'_>,
    (source, mirror, mirror_hosts): (&Cluster, &Cluster, &[String]),
    shared: &Shared,
    control: &Arc<Control>,
    poll_earliest: bool,
) {
    let (shared, control) = (shared.clone(), control.clone());
    let (source_model, mirror_model) = (source.model.clone(), mirror.model.clone());
    let mirror_hosts = mirror_hosts.to_vec();
    sim.host("checker", move || {
        let (shared, control, source_model, mirror_model) = (shared.clone(), control.clone(), source_model.clone(), mirror_model.clone());
        let mirror_hosts = mirror_hosts.clone();
        async move {
            loop {
                let phase = state(&shared).phase;
                match phase {
                    Phase::Run if poll_earliest => {
                        for part in partitions_of(&source_model) {
                            // Stamped before asking: the answer holds for that moment or later.
                            let at = turmoil::sim_elapsed().unwrap_or_default();
                            if let Ok((earliest, _)) = range_of(&part, "src").await {
                                state(&shared).earliest_seen.entry(part).or_default().push((at, earliest));
                            }
                        }
                    }
                    Phase::Run => {}
                    Phase::Drain => {
                        for part in partitions_of(&source_model) {
                            // Stamped before asking: the end holds for that moment or later.
                            let at = turmoil::sim_elapsed().unwrap_or_default();
                            if let Ok((_, end)) = range_of(&part, "src").await {
                                state(&shared).source_latest.insert(part, (at, end));
                            }
                        }
                    }
                    Phase::Check => {
                        // A broker restarted at healing may still be registering: read again
                        // (for up to 30 s) before calling what cannot be read a problem.
                        let known: BTreeSet<Part> = state(&shared).acked.values().map(|a| a.part.clone()).collect();
                        let read_all = || async {
                            let mut read = read_everything(&source_model, &mirror_model).await;
                            for part in known.iter().filter(|p| !read.source.contains_key(*p)) {
                                read.problems.push(format!("source {}/{}: not registered", part.0, part.1));
                            }
                            read
                        };
                        let mut read = read_all().await;
                        for _ in 0..30 {
                            if read.problems.is_empty() {
                                break;
                            }
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            read = read_all().await;
                        }
                        control.trace.push(&format!("checker: read {} source partitions, {} distinct mirror messages, {} problems", read.source.len(), read.mirror.len(), read.problems.len()));
                        // The metrics against the clusters, before the read is handed over (the
                        // driver ends the run then).
                        let mut latest = BTreeMap::new();
                        for part in partitions_of(&source_model) {
                            if let Ok((_, end)) = range_of(&part, "src").await {
                                latest.insert(part, end);
                            }
                        }
                        // The mirror maker serves its own endpoint; an embedded mirror's
                        // metrics are its broker's.
                        let endpoints: Vec<(String, u16)> = mirror_hosts
                            .iter()
                            .map(|h| {
                                let port = if h == MAKER { MIRROR_METRICS_PORT } else { BROKER_METRICS_PORT };
                                (h.clone(), port)
                            })
                            .collect();
                        let problems = metrics_check::check(&latest, "src", &endpoints).await;
                        control.trace.push(&format!("checker: metrics of {} source partitions read, {} disagreements", latest.len(), problems.len()));
                        let mut s = state(&shared);
                        s.metrics_problems = problems;
                        s.final_read = Some(read);
                        return Ok(());
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });
}

/// Every (topic, broker-partition) registered in a cluster's ZooKeeper model.
pub(crate) fn partitions_of(model: &crate::zk_model::SharedModel) -> Vec<Part> {
    let m = model.lock().unwrap_or_else(|p| p.into_inner());
    let mut parts = Vec::new();
    for topic in m.children("/brokers/topics") {
        for broker in m.children(&format!("/brokers/topics/{topic}")) {
            let count: u32 = m
                .data(&format!("/brokers/topics/{topic}/{broker}"))
                .and_then(|d| String::from_utf8_lossy(&d).trim().parse().ok())
                .unwrap_or(0);
            parts.extend((0..count.min(64)).map(|p| (topic.clone(), format!("{broker}-{p}"))));
        }
    }
    parts
}

fn broker_and_partition(part: &Part) -> Option<(String, i32)> {
    let parsed = BrokerPartition::parse(&part.1)?;
    Some((
        parsed.broker_id.to_string(),
        i32::try_from(parsed.partition).ok()?,
    ))
}

/// A partition's (earliest, latest) offsets, asked of its broker in cluster `cluster`.
pub(crate) async fn range_of(part: &Part, cluster: &str) -> Result<(i64, i64), String> {
    let (broker, partition) = broker_and_partition(part).ok_or("bad partition name")?;
    let topic: TopicName = part.0.parse().map_err(|_| "bad topic")?;
    let mut conn = connect(
        &SimEnv::new(0),
        &format!("{cluster}-broker{broker}"),
        BROKER_PORT,
        Duration::from_secs(2),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut ends = [0i64; 2];
    for (i, time) in [-2i64, -1].into_iter().enumerate() {
        match conn
            .call(&Request::Offsets(OffsetsRequest {
                topic: topic.clone(),
                partition,
                time,
                max_offsets: 1,
            }))
            .await
            .map_err(|e| e.to_string())?
        {
            Response::Offsets(o) if o.error == ErrorCode::NoError => {
                ends[i] = o.offsets.first().copied().unwrap_or(0)
            }
            other => return Err(format!("{other:?}")),
        }
    }
    Ok((ends[0], ends[1]))
}

/// A partition's raw bytes from `from` up to its end (or up to the first offset its broker
/// refuses: then with that answer), read with FETCH from its broker in cluster `cluster`.
pub(crate) async fn fetch_bytes(
    part: &Part,
    cluster: &str,
    from: i64,
) -> Result<(Vec<u8>, Option<ErrorCode>), String> {
    let (broker, partition) = broker_and_partition(part).ok_or("bad partition name")?;
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
        let offset = from + out.len() as i64;
        let fetch = Request::Fetch(FetchRequest {
            topic: topic.clone(),
            partition,
            offset,
            max_bytes: 1 << 16,
        });
        let Response::Fetch(f) = conn.call(&fetch).await.map_err(|e| e.to_string())? else {
            return Err("not a fetch answer".into());
        };
        if f.error != ErrorCode::NoError {
            return Ok((out, Some(f.error)));
        }
        if f.messages.is_empty() {
            return Ok((out, None));
        }
        let mut entries = ShallowIter::new(&f.messages, offset);
        entries.by_ref().for_each(drop);
        let valid = entries.end().valid_bytes;
        if valid == 0 {
            return Err(format!(
                "{cluster} {}/{}: no whole message at {offset}",
                part.0, part.1
            ));
        }
        out.extend_from_slice(f.messages.get(..valid).unwrap_or_default());
    }
}

/// A partition's messages from `from` to its end: (start, end, payload), every inner message
/// of a wrapper with the wrapper's offsets.
async fn read_partition(
    part: &Part,
    cluster: &str,
    from: i64,
) -> Result<Vec<(i64, i64, Vec<u8>)>, String> {
    let (raw, refused) = fetch_bytes(part, cluster, from).await?;
    if let Some(error) = refused {
        let at = from + raw.len() as i64;
        return Err(format!("{}/{} at {at}: {error:?}", part.0, part.1));
    }
    let raw = Bytes::from(raw);
    let mut out = Vec::new();
    let mut entries = ShallowIter::new(&raw, from);
    for entry in entries.by_ref() {
        let entry = entry.map_err(|e| format!("{}/{}: corrupt: {e}", part.0, part.1))?;
        let whole = raw.slice((entry.offset - from) as usize..(entry.next_offset - from) as usize);
        for inner in DeepIter::new(whole, entry.offset, 1 << 24) {
            let inner =
                inner.map_err(|e| format!("{}/{}: corrupt inner message: {e}", part.0, part.1))?;
            out.push((
                entry.offset,
                entry.next_offset,
                inner.message.payload.to_vec(),
            ));
        }
    }
    Ok(out)
}

async fn read_everything(
    source_model: &crate::zk_model::SharedModel,
    mirror_model: &crate::zk_model::SharedModel,
) -> FinalRead {
    let mut read = FinalRead::default();
    for part in partitions_of(source_model) {
        match range_of(&part, "src").await {
            Ok((earliest, _)) => match read_partition(&part, "src", earliest).await {
                Ok(messages) => {
                    read.source.insert(part, (earliest, messages));
                }
                Err(e) => read.problems.push(format!("source {e}")),
            },
            Err(e) => read
                .problems
                .push(format!("source {}/{}: {e}", part.0, part.1)),
        }
    }
    for part in partitions_of(mirror_model) {
        match range_of(&part, "dst").await {
            Ok((earliest, _)) => match read_partition(&part, "dst", earliest).await {
                Ok(messages) => {
                    for (_, _, payload) in messages {
                        *read.mirror.entry(payload).or_insert(0) += 1;
                    }
                }
                Err(e) => read.problems.push(format!("mirror {e}")),
            },
            Err(e) => read
                .problems
                .push(format!("mirror {}/{}: {e}", part.0, part.1)),
        }
    }
    read
}

/// A fault and how it ends.
#[derive(Debug, Clone)]
enum Fault {
    /// Cut every link between the mirror's hosts and the source cluster.
    Between,
    /// Cut one link.
    Link(String, String),
    /// Crash a host (restarted at heal).
    Crash(String),
    /// Stop a host gracefully and start it again (at heal).
    Restart(String),
    /// Kill a cluster's ZooKeeper server (`true`: the source's) and start it again on its data
    /// when the fault ends.
    ZooKeeper(bool),
}

impl Fault {
    fn kind(&self) -> &'static str {
        match self {
            Fault::Between => "link between the clusters cut",
            Fault::Link(_, b) if b.ends_with("zk") => "host cut from a ZooKeeper",
            Fault::Link(..) => "link cut",
            Fault::Crash(h) if h.starts_with("src") => "source broker crash",
            Fault::Crash(h) if h == MAKER => "mirror maker crash",
            Fault::Crash(_) => "mirror broker crash",
            Fault::Restart(h) if h == MAKER => "mirror maker graceful restart",
            Fault::Restart(_) => "mirror broker graceful restart",
            Fault::ZooKeeper(true) => "source zookeeper restart",
            Fault::ZooKeeper(false) => "mirror zookeeper restart",
        }
    }
}

fn pick_fault(rng: &mut ChaCha8Rng, world: &World<'_>) -> Option<Fault> {
    let pick =
        |rng: &mut ChaCha8Rng, from: &[String]| from[rng.random_range(0..from.len())].clone();
    let network = matches!(world.options.faults, Faults::Network | Faults::Mixed);
    let crash = matches!(world.options.faults, Faults::Crash | Faults::Mixed);
    for _ in 0..10 {
        let fault = match rng.random_range(0..12) {
            10.. if crash => Fault::ZooKeeper(rng.random_bool(0.5)),
            0..3 if network => Fault::Between,
            3..5 if network => {
                // A mirror host from either ZooKeeper, or a source broker from its own (a
                // source broker never talks to the mirror cluster's).
                let mut hosts: Vec<String> = world.mirror_hosts.to_vec();
                hosts.extend(world.source.brokers.iter().cloned());
                let host = pick(rng, &hosts);
                let zk = if world.source.brokers.contains(&host) || rng.random_bool(0.5) {
                    world.source.zk_host.clone()
                } else {
                    world.mirror.zk_host.clone()
                };
                Fault::Link(host, zk)
            }
            // Gap seeds keep their source brokers up: a restart would reset the cleaner's timer.
            5..7 if crash && !world.shape.tiny_retention => {
                Fault::Crash(pick(rng, &world.source.brokers))
            }
            7..9 if crash => Fault::Crash(pick(rng, world.mirror_hosts)),
            9 if crash => Fault::Restart(pick(rng, world.mirror_hosts)),
            _ => continue,
        };
        return Some(fault);
    }
    None
}

fn cut_between(sim: &mut turmoil::Sim<'_>, links: &mut Links, world: &World<'_>, cut: bool) {
    let mut source_hosts = world.source.brokers.clone();
    source_hosts.push(world.source.zk_host.clone());
    for a in world.mirror_hosts {
        for b in &source_hosts {
            if cut {
                links.partition(sim, a, b);
            } else {
                links.repair(sim, a, b);
            }
        }
    }
}

fn begin(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    world: &World<'_>,
    fault: &Fault,
    length: Duration,
) {
    match fault {
        Fault::ZooKeeper(source) => {
            let cluster = if *source { world.source } else { world.mirror };
            crate::zk_model::crash_and_restart(&cluster.model, length);
        }
        Fault::Between => cut_between(sim, links, world, true),
        Fault::Link(a, b) => links.partition(sim, a, b),
        Fault::Crash(h) => links.crash(sim, h),
        Fault::Restart(h) => control.request_stop(h),
    }
}

fn end(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    world: &World<'_>,
    fault: &Fault,
) {
    match fault {
        Fault::Between => cut_between(sim, links, world, false),
        Fault::Link(a, b) => links.repair(sim, a, b),
        Fault::Crash(h) => links.bounce(sim, h),
        // Back on its own when its outage ends.
        Fault::ZooKeeper(_) => {}
        Fault::Restart(h) => {
            control.forget_stop(h);
            // A graceful stop ended the host's work: start it again (isolated first, as every
            // crash here, so the dying runtime's socket drops cannot reorder the trace).
            links.crash(sim, h);
            links.bounce(sim, h);
        }
    }
}

fn drive(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    world: &World<'_>,
    shared: &Shared,
    report: &mut MirrorReport,
) -> Result<(), String> {
    let mut rng = ChaCha8Rng::seed_from_u64(world.seed ^ 0x3177_0FF5);
    let duration = world.options.duration;
    let mut next_fault = Duration::from_secs(rng.random_range(3..6));
    let mut active: Vec<(Duration, Fault)> = Vec::new();
    let mut last_check = Duration::ZERO;
    // Gap seeds: the link between the clusters is cut across the source's first cleanup (60 s
    // after its brokers start), so retention deletes what the mirror has not copied.
    let mut gap_cut = world
        .shape
        .tiny_retention
        .then_some((Duration::from_secs(35), Duration::from_secs(70)));
    let fault_end = if world.shape.tiny_retention {
        duration.max(Duration::from_secs(72))
    } else {
        duration
    };
    while sim.elapsed() < fault_end {
        let now = sim.elapsed();
        if let Some((from, _)) = gap_cut.filter(|(from, _)| now >= *from) {
            let until = gap_cut.map_or(from, |(_, until)| until);
            // A fault still running would repair links of this cut when it ends: end it now.
            for (_, fault) in std::mem::take(&mut active) {
                end(sim, links, control, world, &fault);
            }
            control
                .trace
                .push_at(now, &format!("fault Between (gap seed) until {until:?}"));
            *report
                .faults
                .entry("link between the clusters cut")
                .or_default() += 1;
            begin(sim, links, control, world, &Fault::Between, until - now);
            active.push((until, Fault::Between));
            gap_cut = None;
            next_fault = next_fault.max(until + Duration::from_secs(1));
        }
        if now >= next_fault && now < duration && world.options.faults != Faults::None {
            if let Some(fault) = pick_fault(&mut rng, world) {
                let length = Duration::from_millis(rng.random_range(1000..10_000));
                control
                    .trace
                    .push_at(now, &format!("fault {fault:?} for {length:?}"));
                *report.faults.entry(fault.kind()).or_default() += 1;
                begin(sim, links, control, world, &fault, length);
                active.push((now + length, fault));
                next_fault = now + length + Duration::from_millis(rng.random_range(1000..5000));
            }
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut active)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        active = later;
        for (_, fault) in due {
            end(sim, links, control, world, &fault);
        }
        if now - last_check >= Duration::from_millis(5) {
            last_check = now;
            check_commits(world.source, shared, control);
        }
        if control.violation().is_some() {
            return Ok(());
        }
        sim.step().map_err(|e| format!("simulation error: {e}"))?;
    }
    for (_, fault) in std::mem::take(&mut active) {
        end(sim, links, control, world, &fault);
    }
    // An operator restarts a mirror broker whose disk failed a sync (its poisoned partitions
    // take nothing until then).
    for (host, disk) in &world.mirror.disks {
        disk.stop_failing();
        if disk.sync_failures() > 0 {
            control.trace.push_at(
                sim.elapsed(),
                &format!(
                    "{host}: restarted after {} failed syncs",
                    disk.sync_failures()
                ),
            );
            *report
                .faults
                .entry("failed fsyncs (mirror broker restarted at heal)")
                .or_default() += 1;
            links.crash(sim, host);
            links.bounce(sim, host);
        }
    }
    {
        let mut s = state(shared);
        s.stop_producing = true;
        s.phase = Phase::Drain;
    }
    let healed = sim.elapsed();
    control.trace.push_at(healed, "healed; producing stopped");
    // 5: the committed offsets reach every source partition's end.
    loop {
        check_commits(world.source, shared, control);
        if control.violation().is_some() {
            return Ok(());
        }
        let behind = lag(world.source, shared);
        // The producers' last sends have resolved, and the source's ends were read since.
        let quiet = {
            let s = state(shared);
            s.producers_stopped == PRODUCERS
                && s.producers_stopped_at
                    .is_some_and(|at| sim.elapsed() > at + Duration::from_secs(1))
        };
        if behind.is_empty() && quiet && sim.elapsed() > healed + Duration::from_secs(3) {
            report.drained_after = Some(sim.elapsed() - healed);
            control.trace.push_at(sim.elapsed(), "lag drained");
            break;
        }
        let limit = drain_limit(duration);
        if sim.elapsed() > healed + limit {
            control.violate(
                Invariant::MirrorProgress,
                format!(
                    "{limit:?} after healing, committed offsets still behind the source: {:?}",
                    behind.iter().take(4).collect::<Vec<_>>()
                ),
            );
            return Ok(());
        }
        for _ in 0..50 {
            sim.step().map_err(|e| format!("simulation error: {e}"))?;
        }
    }
    state(shared).phase = Phase::Check;
    // The end-to-end reads (up to 30 s of retries) and the metrics check (up to 20 s).
    let deadline = sim.elapsed() + Duration::from_secs(90);
    while state(shared).final_read.is_none() {
        if sim.elapsed() > deadline {
            return Err("the checker did not finish reading the clusters".into());
        }
        sim.step().map_err(|e| format!("simulation error: {e}"))?;
    }
    Ok(())
}

/// Source partitions whose committed offset is not yet their latest: (partition, committed,
/// latest).
fn lag(source: &Cluster, shared: &Shared) -> Vec<(Part, i64, i64)> {
    let committed = committed_offsets(source);
    let s = state(shared);
    let Some(since) = s.producers_stopped_at else {
        return vec![(("?".into(), "?".into()), 0, -1)];
    };
    // Every partition known: registered now, or written or forwarded (a bounced broker may not
    // be registered again yet). One whose end was not read since the producers stopped counts
    // as behind (latest -1): its end is not known.
    let mut parts: BTreeSet<Part> = partitions_of(&source.model).into_iter().collect();
    parts.extend(s.acked.values().map(|a| a.part.clone()));
    parts.extend(s.forwards.keys().cloned());
    parts
        .into_iter()
        .filter_map(|part| {
            let at = committed.get(&part).copied().unwrap_or(0);
            match s.source_latest.get(&part) {
                Some((polled, latest)) if *polled >= since => {
                    (*latest > 0 && at < *latest).then_some((part, at, *latest))
                }
                _ => Some((part, at, -1)),
            }
        })
        .collect()
}

/// The mirror group's committed offsets in the source's ZooKeeper model.
fn committed_offsets(source: &Cluster) -> BTreeMap<Part, i64> {
    let m = source.model.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = BTreeMap::new();
    let base = format!("/consumers/{GROUP}/offsets");
    for topic in m.children(&base) {
        for partition in m.children(&format!("{base}/{topic}")) {
            if let Some(offset) = m
                .data(&format!("{base}/{topic}/{partition}"))
                .and_then(|d| String::from_utf8_lossy(&d).trim().parse().ok())
            {
                out.insert((topic.clone(), partition), offset);
            }
        }
    }
    out
}

/// 4: every committed offset is the end of a message some mirror durably acknowledged — or the
/// starting point the group recorded when it first claimed the partition (before it forwarded
/// anything ending there).
fn check_commits(source: &Cluster, shared: &Shared, control: &Control) {
    let committed = committed_offsets(source);
    let mut s = state(shared);
    for (part, offset) in committed {
        s.commits_checked += 1;
        let acked = s
            .acked_ends
            .get(&part)
            .is_some_and(|ends| ends.contains(&offset));
        let start = !s
            .forwards
            .get(&part)
            .is_some_and(|forwards| forwards.iter().any(|f| f.end <= offset));
        if !acked && !start {
            drop(s);
            return control.violate(Invariant::MirrorCommitSafety, format!("{}/{} committed at {offset}, which ends no message the mirror cluster acknowledged", part.0, part.1));
        }
    }
}

/// The end-of-run invariants: 1, 2, 3, 6 (5 and 4 are the driver's, 7 the observer's).
fn judge(shared: &Shared, control: &Control, shape: &Shape, report: &mut MirrorReport) {
    let s = state(shared);
    let Some(read) = &s.final_read else { return };
    if let Some(problem) = read.problems.first() {
        return control.violate(
            Invariant::BrokerHealth,
            format!("the clusters cannot be read end to end after healing: {problem}"),
        );
    }
    // Where each source message is now: (partition, end offset) → payload.
    let mut at: BTreeMap<(&Part, i64), &[u8]> = BTreeMap::new();
    let mut source_copies: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (part, (_, messages)) in &read.source {
        for (_, end, payload) in messages {
            at.insert((part, *end), payload);
            *source_copies.entry(payload).or_insert(0) += 1;
        }
    }
    // 2: every forward is what the source holds at that offset (or was deleted by retention).
    for (part, forwards) in &s.forwards {
        let earliest = read.source.get(part).map_or(0, |(e, _)| *e);
        for f in forwards {
            if f.end <= earliest {
                continue;
            }
            if at.get(&(part, f.end)) != Some(&f.payload.as_slice()) {
                return control.violate(
                    Invariant::MirrorNoPhantom,
                    format!(
                        "{}/{}: {:?} forwarded {:?} ending at {}, but the source holds {:?} there",
                        part.0,
                        part.1,
                        f.owner,
                        String::from_utf8_lossy(&f.payload),
                        f.end,
                        at.get(&(part, f.end)).map(|p| String::from_utf8_lossy(p))
                    ),
                );
            }
        }
    }
    for payload in read.mirror.keys() {
        if !parse_payload(payload).is_some_and(|seq| s.sent.contains(&seq)) {
            return control.violate(
                Invariant::MirrorNoPhantom,
                format!(
                    "the mirror cluster holds a message no producer sent: {:?}",
                    String::from_utf8_lossy(payload)
                ),
            );
        }
    }
    // 1 and 6: every acknowledged message is mirrored, or was deleted inside a reported gap.
    let mut gap_messages = 0;
    for (seq, acked) in &s.acked {
        let bytes = payload(*seq);
        if read.mirror.contains_key(&bytes) {
            continue;
        }
        let in_source = source_copies.contains_key(bytes.as_slice());
        let deleted = acked.start
            < read
                .source
                .get(&acked.part)
                .map_or(0, |(earliest, _)| *earliest);
        let in_gap = s.gaps.iter().any(|(part, from, to, _)| {
            *part == acked.part && acked.start >= *from && acked.start < *to
        });
        let (part, start) = (&acked.part, acked.start);
        match (in_source, deleted, in_gap) {
            (true, _, _) => return control.violate(Invariant::MirrorNoLoss, format!("m {seq} acknowledged at {}/{} {start} is in the source but not in the mirror cluster", part.0, part.1)),
            (false, true, true) => gap_messages += 1,
            (false, true, false) => {
                return control.violate(Invariant::MirrorGaps, format!("m {seq} acknowledged at {}/{} {start} was deleted by the source's retention unmirrored, and no gap was reported over it", part.0, part.1))
            }
            (false, false, _) => {
                return control.violate(Invariant::MirrorNoLoss, format!("m {seq} acknowledged at {}/{} {start} is in neither cluster, though the source still holds that offset range: the acknowledgement was taken back", part.0, part.1))
            }
        }
    }
    // 6: a reported gap covers only what the source no longer has.
    for (part, from, to, at) in &s.gaps {
        // What the source held right after the report: its data below `to` must be gone.
        // (Earliest offsets only grow: the first poll after the report must be at or past `to`.)
        let polled_after = s
            .earliest_seen
            .get(part)
            .and_then(|seen| seen.iter().find(|(t, _)| *t >= *at).map(|(_, e)| *e));
        if let Some(earliest) = polled_after.filter(|e| to > e) {
            return control.violate(
                Invariant::MirrorGaps,
                format!(
                    "{}/{}: gap {from}..{to} reported at {at:?}, but the source still started at {earliest} then",
                    part.0, part.1
                ),
            );
        }
        let earliest = read.source.get(part).map_or(0, |(e, _)| *e);
        if *to > earliest || from >= to {
            return control.violate(
                Invariant::MirrorGaps,
                format!(
                    "{}/{}: gap {from}..{to} reported, but the source still starts at {earliest}",
                    part.0, part.1
                ),
            );
        }
    }
    // 3: what one ownership of a partition (a mirror incarnation's epoch) forwards again is
    // within the bound: its re-forwards end where its furthest predecessor got, and each had at
    // most that many uncommitted. (Summed over an ownership's partitions the bound holds per
    // fault only: stacked faults leave one window each — `reforwards_owner_max` reports it.)
    let bound = shape.reforward_bound();
    let mut worst = 0;
    let mut per_owner: BTreeMap<&(String, u64), usize> = BTreeMap::new();
    for (part, forwards) in &s.forwards {
        let mut seen: BTreeSet<i64> = BTreeSet::new();
        let mut again: BTreeMap<&(String, u64), usize> = BTreeMap::new();
        for f in forwards {
            if !seen.insert(f.end) {
                *again.entry(&f.owner).or_insert(0) += 1;
                *per_owner.entry(&f.owner).or_insert(0) += 1;
            }
        }
        if let Some((owner, n)) = again.iter().max_by_key(|(_, n)| **n) {
            worst = worst.max(*n);
            if *n > bound {
                return control.violate(Invariant::MirrorDuplicates, format!("{}/{}: {owner:?} forwarded {n} messages again that were forwarded before (bound 2 × queue.size × streams = {bound})", part.0, part.1));
            }
        }
    }
    report.reforwards_owner_max = per_owner.values().copied().max().unwrap_or(0);
    report.reforwards_max = worst;
    report.acked = s.acked.len();
    report.mirrored = read
        .mirror
        .keys()
        .filter(|p| source_copies.contains_key(p.as_slice()))
        .count();
    report.duplicates = read
        .mirror
        .iter()
        .map(|(p, n)| {
            n.saturating_sub(source_copies.get(p.as_slice()).copied().unwrap_or(1).max(1))
        })
        .sum();
    report.gaps = s.gaps.len();
    report.gap_messages = gap_messages;
    // 8: the metrics agree with the clusters.
    if let Some(problem) = s.metrics_problems.first() {
        control.violate(
            Invariant::MirrorMetrics,
            format!(
                "after the drain, the metrics disagree with the clusters ({} disagreements): {problem}",
                s.metrics_problems.len()
            ),
        );
    }
}
