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
//!    partition's end within [`drain_limit`] (three or four times the run's length, at least 60 s;
//!    for a sync producer, longer with a long backlog at the heal);
//! 6. `MirrorGaps`: every acknowledged message missing from both clusters lies in a reported gap
//!    of its partition, and every reported gap covers only data the source no longer has;
//! 7. `MirrorOrder`: one ownership of a partition forwards its messages in source order.
//!
//! One seed in five (or every seed, with [`Options::layout`]) gives the source many partitions
//! ([`Layout::Many`]: 8 topics of 16 partitions on each of its two brokers, 256 in all, instead
//! of 8), so the mirror group's rebalances, commits and forwarding handle hundreds of partitions
//! under the same faults.
//!
//! The scenario's files: `shape` (the seed's draws and the mirror's configuration), `history`
//! (what the hosts record, and the mirror's observer), `hosts` (the mirror in either mode, the
//! producers, the reader and the checker), `reads` (the clusters read from outside), `faults`
//! (the fault menu and the driver: faults, heal, drain) and `judge` (the invariants checked
//! against the history). This file holds the composition, [`run_seed`].
//!
//! [`MirrorObserver`]: tributary::mirror::MirrorObserver
//! [`Invariant`]: crate::invariants::Invariant

mod faults;
mod history;
mod hosts;
mod judge;
mod reads;
mod shape;
mod translation;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use self::faults::{drive, World};
use self::history::{state, HandOverStalls, Shared};
use self::hosts::{add_checker, add_maker, add_producer, add_reader, embedded_mirror};
use self::judge::judge;
use self::shape::Shape;
pub use self::translation::TranslationReport;
use crate::cluster::{Faults, Layout};
use crate::invariants::Violation;
use crate::metrics_check::BROKER_METRICS_PORT;
use crate::sim_fs::{sim_builder, DiskFaults};
use crate::world::{add_cluster, ClusterSpec, Control, Links};

pub(crate) use self::reads::{
    fetch_bytes, partitions_of, range_of, read_whole, registered_settled,
};
pub use self::shape::Mode;

/// The mirror's consumer group on the source.
pub const GROUP: &str = "KafkaMirror";
/// After the last fault heals, how long the lag may take to drain (invariant 5), when
/// `behind` acknowledged messages are still to be copied then: three times the run's length, at
/// least 60 s; four times for a sync producer copying with positions. The slowest mirrors a
/// seed draws copy at about half the rate the producers write — a sync producer waits one
/// durable round trip per message; with `queue.size=4` and one stream at most 8 messages are
/// uncommitted, so every few messages wait for a commit round (ZooKeeper writes, one partition
/// after another) — and a mirror kept away for most of the run must copy most of its messages
/// after healing. With positions each of those round trips syncs two files (the segment and its
/// position records: four disk operations instead of two), and the slowest draw copies at about
/// a third of the producers' rate. A sync producer's rate is its round trip's, whatever the
/// producers' was: its limit is also at least 60 s and [`SYNC_MESSAGE_WORST`] per message
/// behind, up to [`drain_limit_max`].
fn drain_limit(duration: Duration, shape: &Shape, behind: usize) -> Duration {
    let by_run = drain_limit_by_run(duration, shape);
    if !shape.sync_producer {
        return by_run;
    }
    let per_message = u32::try_from(behind).unwrap_or(u32::MAX);
    let by_backlog =
        Duration::from_secs(60).saturating_add(SYNC_MESSAGE_WORST.saturating_mul(per_message));
    by_run.max(by_backlog).min(drain_limit_max(duration, shape))
}

/// [`drain_limit`] by the run's length alone.
fn drain_limit_by_run(duration: Duration, shape: &Shape) -> Duration {
    let runs = if shape.sync_producer && shape.preserve {
        4
    } else {
        3
    };
    (duration * runs).max(Duration::from_secs(60))
}

/// The most [`drain_limit`] gives for a run of `duration`: twice the limit by the run's length
/// for a sync producer, that limit otherwise.
fn drain_limit_max(duration: Duration, shape: &Shape) -> Duration {
    let by_run = drain_limit_by_run(duration, shape);
    match shape.sync_producer {
        true => by_run * 2,
        false => by_run,
    }
}

/// A sync producer's slowest round trip per message the seeds draw, with positions: up to 20 ms
/// of network latency each way and four disk operations of up to 15 ms each (about 50 ms on
/// average), with the commit rounds between.
const SYNC_MESSAGE_WORST: Duration = Duration::from_millis(50);

/// Source topics: the first from the start, the second created a third of the way in.
const TOPICS: [&str; 2] = ["orders", "clicks"];
/// Partitions per source broker.
const SOURCE_PARTITIONS: u32 = 2;
/// The many-partitions layout: source topics, and partitions of each on each source broker.
const MANY_TOPICS: usize = 8;
const MANY_SOURCE_PARTITIONS: u32 = 16;

/// The `i`th source topic: [`TOPICS`], then `t2`, `t3`, ...
pub(crate) fn topic_name(i: usize) -> String {
    TOPICS
        .get(i)
        .map_or_else(|| format!("t{i}"), |name| name.to_string())
}
/// Producer hosts: `producer0` and `producer1` wait for durable acknowledgements; the last,
/// like a plain 0.7 client, does not, so the source always holds unflushed data a crash can take
/// back (what the mirror must never have copied: invariant 2).
const PRODUCERS: u32 = 3;
/// The mirror maker's host (standalone mode).
const MAKER: &str = "mirrormaker";

/// What a run does.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Simulated time of workload and faults before healing.
    pub duration: Duration,
    /// Which faults.
    pub faults: Faults,
    /// How the mirror runs (`None`: the seed chooses).
    pub mode: Option<Mode>,
    /// The source's topics and partitions (`None`: the seed draws, [`Layout::Many`] one time
    /// in five).
    pub layout: Option<Layout>,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct MirrorReport {
    /// The source's topics and partitions.
    pub layout: Layout,
    /// How the mirror ran.
    pub mode: Option<Mode>,
    /// Whether the source had a tiny retention (gap seeds).
    pub tiny_retention: bool,
    /// Whether `mirror.preserve.partitions` was on.
    pub preserve: bool,
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
    /// The translations of source offsets judged (S33), with `mirror.preserve.partitions` on.
    pub translations: TranslationReport,
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

/// Runs one seed; `Err` names the broken invariant.
#[expect(
    clippy::result_large_err,
    reason = "one result per simulated run; the report is the point"
)]
pub fn run_seed(seed: u64, options: Options) -> Result<MirrorReport, (Violation, MirrorReport)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut shape = Shape::draw(&mut rng, &options);
    shape.preserve = Shape::preserve(seed);
    let layout = options.layout.unwrap_or_else(|| Layout::draw(seed));
    let mut builder = sim_builder(seed);
    builder
        .simulation_duration(options.duration + drain_limit_max(options.duration, &shape) * 2)
        .tcp_capacity(rng.random_range(64..256))
        .max_message_latency(Duration::from_millis(rng.random_range(2..20)));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let _capture = control.trace.capture();
    control
        .trace
        .push(&format!("seed {seed}: {shape:?}, layout {layout:?}"));
    let shared: Shared = Arc::default();
    if options.faults != Faults::None {
        state(&shared).stalls = HandOverStalls::draw(seed);
    }

    let (topics, source_partitions) = match layout {
        Layout::Few => (TOPICS.len(), SOURCE_PARTITIONS),
        Layout::Many => (MANY_TOPICS, MANY_SOURCE_PARTITIONS),
    };
    let mut source_spec = ClusterSpec::new("src", 2, source_partitions);
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
            topics,
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
        (shape.tiny_retention, shape.preserve),
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
        layout,
        mode: Some(shape.mode),
        tiny_retention: shape.tiny_retention,
        preserve: shape.preserve,
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
