//! The mirror: consumes a source cluster as a consumer group and re-publishes every message to
//! the mirror cluster, committing each source offset only once the mirror cluster has the
//! messages before it durably.
//!
//! Two ways to run it, one engine:
//! - **embedded** (Kafka 0.7.0, the seed): `tributary server server.properties
//!   consumer.properties producer.properties`; the consumer file's `mirror.topics.whitelist` /
//!   `.blacklist` (exact names) and `mirror.consumer.numthreads` choose what and how many streams;
//! - **mirror maker** (0.7.1/0.7.2): one or more consumer configs (one per source cluster), a
//!   producer config, a whitelist or blacklist regex, `--num.streams`, `--num.producers`.
//!
//! Guarantees beyond 0.7 (see docs/compatibility.md):
//! - the producer always asks for durable acknowledgements, and a source offset is committed
//!   (every `mirror.commit.interval.ms`, or as soon as `queue.size` × streams acknowledged
//!   messages of a source wait)
//!   only up to the end of the acknowledged prefix of each partition ([`MirrorWindow`]);
//! - a full producer queue makes the mirror wait (backpressure on the source fetch), whatever
//!   `queue.enqueueTimeout.ms` says; the streams of one source share one window (a partition
//!   may move between them in a rebalance), with at most `queue.size` × streams messages
//!   unacknowledged and twice that uncommitted (reading pauses there, e.g. while the source's
//!   ZooKeeper is unreachable), so any fault resends at most 2 × `queue.size` per stream;
//! - a new source topic that passes the filter is mirrored without restarting anything (the
//!   consumer's wildcard subscription);
//! - source data deleted before it was copied is reported with its byte range and counted
//!   (`mirror.gap.policy=stop` stops that partition instead); corrupt source data stops only its
//!   partition, with an error naming it;
//! - on shutdown it stops fetching, waits (bounded) for what is in flight, commits, and leaves.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use origins::OriginGate;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tributary_core::config::{ConsumerConfig, ProducerConfig, TopicFilter};
use tributary_core::consumer::BrokerPartition;
use tributary_core::identity::ClusterIdentity;
use tributary_core::mirror::lag::LagSample;
use tributary_core::wire::TopicName;

use crate::consumer::{ConsumerConnector, GapReport, Subscription};
use crate::env::Env;
use crate::failure::Failure;
use crate::metrics::clients::{watch_consumer, watch_producer, ProducerMetrics};
use crate::metrics::mirror::{watch_mirror, LagGauges, MirrorMetrics};
use crate::metrics::MaybeMetrics;
use crate::origin_store::OriginStore;

pub use crate::metrics::mirror::MirrorStats;

mod commits;
pub mod held;
pub mod identity;
pub mod maker;
pub mod offset_sync;
pub mod origins;
mod place_ahead;
mod producers;
mod stream;
pub mod supervise;
mod watchdog;
mod window;
use commits::{run_commits, CommitContext};
use place_ahead::{run_place_ahead, PlaceAheadContext};
use producers::{mirror_producer, producer_index, start_producers, ProducerHandle};
use stream::{run_stream, StreamContext};
use watchdog::SourceWatch;
use window::SourceWindow;

/// How long shutdown waits for what is in flight to be acknowledged before leaving without it
/// (it is then sent again by whoever takes the partitions next).
const SHUTDOWN_ACK_WAIT: Duration = Duration::from_secs(30);
/// How long one commit may take before it counts as failed (the consumer's coordinator may be
/// busy re-establishing a ZooKeeper session).
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the streams (their acknowledgements, [`SHUTDOWN_ACK_WAIT`], and
/// last commits, [`COMMIT_TIMEOUT`]).
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(45);
/// How long shutdown then waits for each source connector to leave its group, and for the
/// producers to hand over what is still queued (it was not acknowledged within
/// [`SHUTDOWN_ACK_WAIT`], so it is not committed either way: sent again on restart). With the
/// streams' deadline, a stop takes at most 45 s + 10 s per source + 10 s, whatever is
/// unreachable; when the streams finish (their acknowledgements arrived, or their wait ran
/// out) it is 30 s + 10 s at most for an unreachable mirror cluster.
const LEAVE_DEADLINE: Duration = Duration::from_secs(10);
/// How often the mirror logs its one-line summary.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// What the mirror copies and how.
#[derive(Debug, Clone)]
pub struct MirrorSettings {
    /// One consumer configuration per source cluster.
    pub sources: Vec<ConsumerConfig>,
    /// The mirror cluster's producer.
    pub producer: ProducerConfig,
    /// Which topics (a regex filter; the 0.7.0 name lists become one).
    pub filter: Subscription,
    /// Streams per source.
    pub streams: u32,
    /// Producers: each source partition's messages go to one of them, chosen by a hash of the
    /// source partition (so its order into the mirror cluster is one producer's).
    pub producers: u32,
    /// How often source offsets are committed.
    pub commit_interval: Duration,
    /// How often the summary line is logged.
    pub summary_interval: Duration,
    /// Told of every forward, acknowledgement, commit and gap (the simulator's checkers).
    pub observer: Option<Arc<dyn MirrorObserver>>,
    /// Where its metrics go (the broker's registry for an embedded mirror); `None`: none kept.
    pub metrics: MaybeMetrics,
    /// The mirror cluster's identity when the caller knows it (an embedded mirror's broker);
    /// otherwise it is read in the producer's ZooKeeper or asked of its brokers.
    pub target_identity: Option<ClusterIdentity>,
    /// The mirror cluster's ZooKeeper when the caller knows it (an embedded mirror's broker);
    /// otherwise the producer's `zk.connect`, if it has one. Consumer offsets are synced there
    /// (`mirror.offsets.sync.groups`).
    pub target_zookeeper: Option<tributary_core::config::ZkConnect>,
}

/// One source message as the mirror handled it.
#[derive(Debug, Clone)]
pub struct MirrorEvent<'a> {
    /// Which source (index into `MirrorSettings::sources`).
    pub source: usize,
    /// The source topic.
    pub topic: &'a TopicName,
    /// The source partition.
    pub partition: BrokerPartition,
    /// The message's resume offset in the source partition.
    pub offset: i64,
    /// The ownership epoch it was read in.
    pub epoch: u64,
    /// The stream (across sources) that handled it; `None` for a commit (the source's commit
    /// task makes those).
    pub stream: Option<usize>,
}

/// Watches what the mirror does, as it happens. Every method has a default that does nothing;
/// calls come from the mirror's tasks and must not block.
pub trait MirrorObserver: Send + Sync + std::fmt::Debug {
    /// A message was handed to the producer (`payload` as read from the source).
    fn forwarded(&self, event: &MirrorEvent<'_>, payload: &[u8]) {
        let _ = (event, payload);
    }
    /// The mirror cluster durably acknowledged a forwarded message.
    fn acknowledged(&self, event: &MirrorEvent<'_>) {
        let _ = event;
    }
    /// A source offset was committed (`event.offset`), for the epoch named.
    fn committed(&self, event: &MirrorEvent<'_>) {
        let _ = event;
    }
    /// The source deleted `from..to` of a partition before the mirror read it.
    fn gap(&self, source: usize, report: &GapReport) {
        let _ = (source, report);
    }
    /// How long the stream holds the message just [`forwarded`](MirrorObserver::forwarded)
    /// before handing it to the producer: none by default. The simulator's way to hold a
    /// stream between its record of a message and the hand-over, as a thread preempted there
    /// or a full producer queue would.
    fn hand_over_delay(&self, event: &MirrorEvent<'_>) -> Option<std::time::Duration> {
        let _ = event;
        None
    }
}

/// Why the mirror cannot run.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The configuration makes no sense for a mirror.
    #[error("{0}")]
    Config(#[source] Failure),
    /// The source cluster could not be joined.
    #[error("cannot join the source cluster: {0}")]
    Source(#[source] Failure),
    /// The mirror cluster could not be reached.
    #[error("cannot reach the mirror cluster: {0}")]
    Target(#[source] Failure),
    /// The mirror cluster refused messages, or a send failed for good: the stream stopped
    /// (its source offsets stay uncommitted; nothing is lost, it is sent again on restart).
    #[error("mirroring stopped: {0}")]
    Send(#[source] Failure),
}

impl MirrorSettings {
    /// The embedded mirror of Kafka 0.7.0: the consumer file's `mirror.*` options.
    pub fn embedded(consumer: ConsumerConfig, producer: ProducerConfig) -> Self {
        let filter = match &consumer.mirror.topics {
            TopicFilter::All => Subscription::Blacklist(String::new(), 0),
            TopicFilter::Whitelist(names) => Subscription::Whitelist(exact_names(names), 0),
            TopicFilter::Blacklist(names) => Subscription::Blacklist(exact_names(names), 0),
        };
        let streams = consumer.mirror.consumer_threads;
        let commit_interval = Duration::from_millis(consumer.mirror.commit_interval_ms.into());
        MirrorSettings {
            sources: vec![consumer],
            producer,
            filter,
            streams,
            producers: 1,
            commit_interval,
            summary_interval: SUMMARY_EVERY,
            observer: None,
            metrics: None,
            target_identity: None,
            target_zookeeper: None,
        }
    }
}

/// A regex matching exactly these names.
fn exact_names(names: &[TopicName]) -> String {
    names
        .iter()
        .map(|n| regex::escape(n.as_str()))
        .collect::<Vec<_>>()
        .join("|")
}

/// A running mirror.
pub struct Mirror {
    connectors: Vec<Arc<ConsumerConnector>>,
    producers: Vec<Arc<dyn ProducerHandle>>,
    streams: JoinSet<Result<(), MirrorError>>,
    stop: watch::Sender<bool>,
    /// Counters.
    pub stats: Arc<MirrorStats>,
    /// The summary and lag task (`None` once it ended and was looked at).
    summary: Option<tokio::task::JoinHandle<()>>,
    /// The identities' recheck (`None` once it ended and was looked at).
    recheck: Option<tokio::task::JoinHandle<Result<(), MirrorError>>>,
    /// The origin-record stores (target's, then each source's): their sessions close at
    /// shutdown.
    records: Vec<Arc<dyn origins::OriginsAccess>>,
    /// The offset syncers (`mirror.offsets.sync.groups`); they end at the stop.
    syncers: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("sources", &self.connectors.len())
            .field("streams", &self.streams.len())
            .finish()
    }
}

/// Every source a renaming rule names after its cluster has a name; says what is copied where.
fn check_names(
    settings: &MirrorSettings,
    identities: &identity::Identities,
) -> Result<(), MirrorError> {
    for (source, identity) in settings.sources.iter().zip(&identities.sources) {
        if let Some(rule) = &source.mirror.rename {
            if rule.needs_source_name() && identity.name.is_none() {
                // Not a settings error: the source's brokers may name it when they start.
                return Err(MirrorError::Source(Failure::new(format!(
                    "mirror.rename.pattern={rule} names topics after the source cluster, and the cluster at {} ({identity}) has no name: set cluster.name on its brokers, or name it with `tributary cluster-id --zookeeper {} --name <name>`",
                    source.zk_connect, source.zk_connect
                ))));
            }
        }
    }
    for (source, identity) in settings.sources.iter().zip(&identities.sources) {
        tracing::info!(
            "mirror: copying cluster {identity} (at {}) into cluster {}",
            source.zk_connect,
            identities.target
        );
    }
    Ok(())
}

/// What each source's group consumes: the filter, with the mirror's streams per topic.
fn subscription_of(settings: &MirrorSettings) -> Subscription {
    match &settings.filter {
        Subscription::Whitelist(f, _) => {
            Subscription::Whitelist(f.clone(), settings.streams.max(1))
        }
        Subscription::Blacklist(f, _) => {
            Subscription::Blacklist(f.clone(), settings.streams.max(1))
        }
        Subscription::Topics(t) => Subscription::Topics(t.clone()),
    }
}

/// Source `index`'s gap sink: always one, since a consumer told of gaps also records where it
/// starts a partition its group never committed, so a later deletion is a reported gap.
fn gap_sink(observer: Option<Arc<dyn MirrorObserver>>, index: usize) -> crate::consumer::GapSink {
    Arc::new(move |report: &GapReport| {
        if let Some(observer) = &observer {
            observer.gap(index, report);
        }
    })
}

impl Mirror {
    /// Checks the settings, joins every source cluster, starts the producers and one task per
    /// stream.
    pub async fn start<E: Env>(env: E, settings: MirrorSettings) -> Result<Self, MirrorError> {
        let producer_config = mirror_producer(settings.producer.clone());
        let identities = identity::learn(
            &env,
            &settings.sources,
            &producer_config,
            settings.target_identity.as_ref(),
        )
        .await?;
        identity::refuse_loops(&identities, &settings.sources)?;
        check_names(&settings, &identities)?;
        let producers = start_producers(&env, &producer_config, settings.producers).await?;
        let all_producers = Arc::new(producers.clone());
        let stats = Arc::new(MirrorStats::default());
        let (stop, stop_rx) = watch::channel(false);
        let mut connectors = Vec::new();
        let mut watches = Vec::new();
        let mut streams = JoinSet::new();
        let queue_size = producer_config.queue_size.max(1) as usize;
        let mut stream_index = 0;
        let in_target = origins::target_access(&env, &producer_config).map_err(|e| {
            MirrorError::Config(Failure::caused(format!("producer TLS settings: {e}"), e))
        })?;
        // Every origin-record store, closed at shutdown.
        let mut records: Vec<Arc<dyn origins::OriginsAccess>> = vec![in_target.clone()];
        for (index, (source, identity)) in
            settings.sources.iter().zip(&identities.sources).enumerate()
        {
            let config = mirror_consumer(source.clone());
            let in_source: Arc<dyn origins::OriginsAccess> = Arc::new(OriginStore::new(
                env.clone(),
                source.zk_connect.clone(),
                Duration::from_millis(source.zk.session_timeout_ms.into()),
                Duration::from_millis(source.zk.connection_timeout_ms.into()),
            ));
            records.push(in_source.clone());
            let gate = Arc::new(OriginGate::new(
                identity.clone(),
                identities.target.clone(),
                source.mirror.rename.clone(),
                in_source,
                in_target.clone(),
            ));
            let (connector, source_streams) = ConsumerConnector::start_with_gap_sink(
                env.clone(),
                config.clone(),
                subscription_of(&settings),
                Some(gap_sink(settings.observer.clone(), index)),
            )
            .await
            .map_err(|e| {
                MirrorError::Source(Failure::caused(format!("{}: {e}", config.zk_connect), e))
            })?;
            let connector = Arc::new(connector);
            // One window for all streams of a source: a partition may move between them.
            let limit = queue_size.saturating_mul(source_streams.len().max(1));
            let window = Arc::new(SourceWindow::new(
                index,
                stream_index..stream_index + source_streams.len(),
                limit,
                settings.commit_interval,
                env.now_ms(),
                stream::RUN_MAX,
            ));
            let (running, streams_done) = tokio::sync::mpsc::channel(1);
            streams.spawn(run_commits(
                CommitContext {
                    source: index,
                    connector: connector.clone(),
                    window: window.clone(),
                    stats: stats.clone(),
                    observer: settings.observer.clone(),
                    now_ms: {
                        let env = env.clone();
                        Arc::new(move || env.now_ms())
                    },
                },
                stop_rx.clone(),
                streams_done,
            ));
            let preserve = source.mirror.preserve_partitions;
            let positions = preserve.then(|| identity.id.clone());
            if let Some(cluster) = positions.clone() {
                let context = PlaceAheadContext::new(&connector, &gate, &all_producers, cluster);
                streams.spawn(run_place_ahead(context, stop_rx.clone()));
            }
            for stream in source_streams {
                let producer = producers[stream_index % producers.len()].clone();
                let context = StreamContext {
                    source: index,
                    stream: stream_index,
                    connector: connector.clone(),
                    producer,
                    producers: all_producers.clone(),
                    stats: stats.clone(),
                    window: window.clone(),
                    observer: settings.observer.clone(),
                    gate: gate.clone(),
                    positions: positions.clone(),
                    _running: running.clone(),
                };
                streams.spawn(run_stream(context, stream, stop_rx.clone()));
                stream_index += 1;
            }
            tracing::info!(
                "mirroring from {} (group {}) with {} streams",
                config.zk_connect,
                config.group_id,
                settings.streams.max(1)
            );
            watches.push(SourceWatch::new(config.clone(), connector.clone()));
            connectors.push(connector);
        }
        let gauges = settings
            .metrics
            .as_ref()
            .map(|metrics| MirrorGauges::watching(metrics, &producers, &connectors, &stats));
        let recheck = tokio::spawn(identity::recheck(
            env.clone(),
            settings.sources.clone(),
            producer_config.clone(),
            settings.target_identity.clone(),
            identities.clone(),
            stop_rx.clone(),
        ));
        let syncers = start_offset_syncs(&env, &settings, &producer_config, &identities, &stop_rx);
        let summary = tokio::spawn(summarize(
            env,
            connectors.clone(),
            watches,
            identities.sources.iter().map(source_label).collect(),
            producers.clone(),
            producer_config.queue_size,
            stats.clone(),
            settings.summary_interval,
            gauges,
            stop_rx,
        ));
        Ok(Mirror {
            connectors,
            producers,
            streams,
            stop,
            stats,
            summary: Some(summary),
            recheck: Some(recheck),
            syncers,
            records,
        })
    }

    /// Mirrors until `stop` resolves (then shuts down cleanly) or a stream fails.
    pub async fn run_until(mut self, stop: impl Future<Output = ()>) -> Result<(), MirrorError> {
        tokio::pin!(stop);
        let failure = loop {
            tokio::select! {
                biased;
                () = &mut stop => break None,
                ended = self.streams.join_next() => match ended {
                    Some(Ok(Ok(()))) => {}
                    Some(Ok(Err(e))) => break Some(e),
                    Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Some(Err(e)) => break Some(MirrorError::Send(Failure::caused(format!("a mirror stream was cancelled: {e}"), e))),
                    None => break None,
                },
                // It runs until stopped: ending before is a panic (a bug), which stops the mirror.
                ended = task_ended(&mut self.summary) => {
                    if let Err(e) = ended {
                        if e.is_panic() {
                            std::panic::resume_unwind(e.into_panic());
                        }
                    }
                }
                // Ends before the stop only when a cluster's identity changed.
                ended = task_ended(&mut self.recheck) => match ended {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => break Some(e),
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(_) => {}
                },
            }
        };
        if let Some(e) = &failure {
            tracing::error!("{e}");
        }
        self.shutdown().await;
        failure.map_or(Ok(()), Err)
    }

    /// Stops fetching, waits (bounded) for what is in flight, commits, leaves the source
    /// groups, drains the producers.
    pub async fn shutdown(mut self) {
        let _stopped_already = self.stop.send(true).is_err();
        if let Some(recheck) = self.recheck.take() {
            recheck.abort();
            if let Err(e) = recheck.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
        // The syncers end at the stop (a round under way is cut short: it is idempotent).
        for syncer in self.syncers.drain(..) {
            syncer.abort();
            if let Err(e) = syncer.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
        // The summary task holds the connectors: it must be gone before they are unwrapped.
        if let Some(summary) = self.summary.take() {
            summary.abort();
            if let Err(e) = summary.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
        let joined = tokio::time::timeout(SHUTDOWN_DEADLINE, async {
            while let Some(ended) = self.streams.join_next().await {
                match ended {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::error!("{e}"),
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(_) => {}
                }
            }
        })
        .await;
        if joined.is_err() {
            tracing::warn!("mirror: {} streams did not finish within {SHUTDOWN_DEADLINE:?}; what they did not commit is sent again on restart", self.streams.len());
            self.streams.abort_all();
        }
        for connector in self.connectors.drain(..) {
            match Arc::try_unwrap(connector) {
                Ok(connector) => {
                    if tokio::time::timeout(LEAVE_DEADLINE, connector.shutdown())
                        .await
                        .is_err()
                    {
                        tracing::warn!("mirror: a source connector did not leave its group within {LEAVE_DEADLINE:?}");
                    }
                }
                Err(_) => tracing::warn!("a source connector is still in use at shutdown"),
            }
        }
        // Every producer drains at once, within one deadline.
        let queued: usize = self.producers.iter().map(|p| p.queued()).sum();
        let mut closing = JoinSet::new();
        for producer in self.producers.drain(..) {
            closing.spawn(producer.close());
        }
        let drained = tokio::time::timeout(LEAVE_DEADLINE, async {
            while let Some(closed) = closing.join_next().await {
                if let Err(e) = closed {
                    if e.is_panic() {
                        std::panic::resume_unwind(e.into_panic());
                    }
                }
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!("mirror: the mirror cluster did not take the last of {queued} queued messages within {LEAVE_DEADLINE:?}; they were not committed at the source and are sent again on restart");
        }
        for records in self.records.drain(..) {
            records.close().await;
        }
        tracing::info!(
            "mirror stopped: {} messages sent, {} acknowledged, {} commits",
            self.stats.sent.load(Ordering::Relaxed),
            self.stats.acked.load(Ordering::Relaxed),
            self.stats.commits.load(Ordering::Relaxed)
        );
    }
}

/// Resolves when `task` ends (then forgets it, so it is never awaited twice); pending once it
/// has.
async fn task_ended<R>(
    task: &mut Option<tokio::task::JoinHandle<R>>,
) -> Result<R, tokio::task::JoinError> {
    match task {
        Some(running) => {
            let ended = running.await;
            *task = None;
            ended
        }
        None => std::future::pending().await,
    }
}

/// One offset syncer per source that asks for one (`mirror.offsets.sync.groups`), writing into
/// the mirror cluster's ZooKeeper; a source that asks without positions, or a mirror cluster
/// whose ZooKeeper is not known (a `broker.list` producer of a mirror maker), is said once.
fn start_offset_syncs<E: Env>(
    env: &E,
    settings: &MirrorSettings,
    producer: &ProducerConfig,
    identities: &identity::Identities,
    stop: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let target = settings
        .target_zookeeper
        .clone()
        .or(match &producer.discovery {
            tributary_core::config::Discovery::ZooKeeper(connect) => Some(connect.clone()),
            tributary_core::config::Discovery::BrokerList(_) => None,
        });
    let mut syncers = Vec::new();
    for (source, identity) in settings.sources.iter().zip(&identities.sources) {
        let Some(groups) = source.mirror.offsets_sync_groups.clone() else {
            continue;
        };
        if !source.mirror.preserve_partitions {
            tracing::warn!("mirror: {}: mirror.offsets.sync.groups needs mirror.preserve.partitions=true (offsets are translated through the copies' positions); no offsets are synced", source.zk_connect);
            continue;
        }
        let Some(target) = target.clone() else {
            tracing::warn!("mirror: {}: mirror.offsets.sync.groups is set, but the mirror cluster's ZooKeeper is not known (the producer has a broker.list): give the producer its zk.connect; no offsets are synced", source.zk_connect);
            continue;
        };
        let sync = offset_sync::OffsetSync {
            groups,
            interval: Duration::from_millis(source.mirror.offsets_sync_interval_ms.into()),
            source: (source.zk_connect.clone(), identity.id.clone()),
            mirror: target,
        };
        syncers.push(tokio::spawn(offset_sync::run_offset_sync(
            env.clone(),
            sync,
            stop.clone(),
        )));
    }
    syncers
}

/// The mirror's consumer: it commits itself, only what the mirror cluster has.
fn mirror_consumer(mut config: ConsumerConfig) -> ConsumerConfig {
    config.autocommit_enable = false;
    if config.mirror.stop_on_gap {
        config.auto_offset_reset =
            tributary_core::config::AutoOffsetReset::Raise("stop (mirror.gap.policy=stop)".into());
    }
    config
}

/// The `source` label of a source cluster's series: its name, else its id.
fn source_label(identity: &ClusterIdentity) -> String {
    match &identity.name {
        Some(name) => name.to_string(),
        None => identity.id.to_string(),
    }
}

/// How often, with metrics on, the source's latest offsets are asked for (the lag gauges).
const LAG_EVERY: Duration = Duration::from_secs(5);

/// The gauges the summary task keeps (metrics on).
struct MirrorGauges {
    mirror: Arc<MirrorMetrics>,
    producer: Arc<ProducerMetrics>,
    lag: LagGauges,
    /// The lag gauges were set at least once.
    updated: bool,
    /// Each partition's last sample: kept for an owned partition whose broker did not answer
    /// this round (an unreachable source must not make its lag disappear).
    last: BTreeMap<(String, String, String), LagSample>,
}

impl MirrorGauges {
    /// Gauges for the mirror, and every producer, consumer and the mirror's counters watched
    /// at each scrape.
    fn watching(
        metrics: &crate::metrics::Metrics,
        producers: &[Arc<dyn ProducerHandle>],
        connectors: &[Arc<ConsumerConnector>],
        stats: &Arc<MirrorStats>,
    ) -> Self {
        let mirror = metrics.mirror();
        for producer in producers {
            watch_producer(metrics, producer.stats_weak());
        }
        for connector in connectors {
            watch_consumer(metrics, connector.metrics_view(), Some(mirror.clone()));
        }
        watch_mirror(metrics, Arc::downgrade(stats));
        MirrorGauges {
            mirror,
            producer: metrics.producer(),
            lag: LagGauges::default(),
            updated: false,
            last: BTreeMap::new(),
        }
    }

    /// Sets the lag gauges from one round of samples (position: what the group committed, i.e.
    /// what the mirror cluster durably has) — every covered partition, owned here or not — and
    /// the partitions `owned` now, the producers' queue and the unowned count.
    fn update(
        &mut self,
        now_ms: i64,
        round: &[LagSample],
        owned: &[(String, String, String)],
        queued: usize,
        unowned: usize,
    ) {
        if self.updated
            && tributary_core::planted::active(tributary_core::planted::Bug::MirrorLagFrozen)
        {
            return;
        }
        self.updated = true;
        // One series per source cluster, topic and partition (the same source given twice is
        // refused at start; a round that saw a partition twice keeps the larger lag).
        let mut samples: BTreeMap<(String, String, String), LagSample> = BTreeMap::new();
        for sample in round {
            let key = (
                sample.source.clone(),
                sample.topic.clone(),
                sample.partition.clone(),
            );
            let behind = |s: &LagSample| s.source_end.saturating_sub(s.position);
            if samples
                .get(&key)
                .is_none_or(|had| behind(had) < behind(sample))
            {
                samples.insert(key, sample.clone());
            }
        }
        for key in owned {
            if let (false, Some(last)) = (samples.contains_key(key), self.last.get(key)) {
                samples.insert(key.clone(), last.clone());
            }
        }
        let round: Vec<LagSample> = samples.values().cloned().collect();
        self.lag.update(&self.mirror, now_ms, &round);
        self.last = samples;
        self.producer
            .queued
            .set(i64::try_from(queued).unwrap_or(i64::MAX));
        self.mirror
            .unowned
            .set(i64::try_from(unowned).unwrap_or(i64::MAX));
    }
}

impl Drop for MirrorGauges {
    /// The mirror stopped: its partitions' lag series go (another mirror of the process, or of
    /// the group, reports them now), and nothing is in flight.
    fn drop(&mut self) {
        self.lag.update(&self.mirror, 0, &[]);
        self.mirror.in_flight_bytes.set(0);
        self.mirror.unowned.set(0);
        self.producer.queued.set(0);
    }
}

/// Logs a one-line summary every `every` (partitions owned, rates, lag, what is in flight) and,
/// with metrics on, refreshes the lag gauges every [`LAG_EVERY`]. Each round reads the whole
/// source group ([`SourceWatch`]): the lag of every covered partition against the group's
/// committed offsets, and the ownership watchdog; when a source's group cannot be read, the
/// lag of the partitions this member owns (against its own commits) stands in.
#[allow(clippy::too_many_arguments)]
async fn summarize<E: Env>(
    env: E,
    connectors: Vec<Arc<ConsumerConnector>>,
    mut watches: Vec<SourceWatch<E>>,
    source_labels: Vec<String>,
    producers: Vec<Arc<dyn ProducerHandle>>,
    queue_size: u32,
    stats: Arc<MirrorStats>,
    every: Duration,
    mut gauges: Option<MirrorGauges>,
    mut stop: watch::Receiver<bool>,
) {
    let tick = match gauges {
        Some(_) => every.min(LAG_EVERY),
        None => every,
    };
    let mut last = (
        stats.sent.load(Ordering::Relaxed),
        stats.sent_bytes.load(Ordering::Relaxed),
    );
    // The time that really passed (asking for the lag takes time too): the runtime's clock,
    // simulated in the simulator.
    let mut logged_at = tokio::time::Instant::now();
    // When each source's group was last found unreadable (its warnings once a minute).
    let mut warned_at: Vec<Option<tokio::time::Instant>> = vec![None; watches.len()];
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            () = tokio::time::sleep(tick) => {}
        }
        let mut samples = Vec::new();
        let mut unowned = 0;
        for (index, (watch, connector)) in watches.iter_mut().zip(&connectors).enumerate() {
            let label = source_labels.get(index).cloned().unwrap_or_default();
            let labelled = |mut sample: LagSample| {
                sample.source = label.clone();
                sample
            };
            match watch.round(&env, env.now_ms()).await {
                Ok(round) => {
                    samples.extend(round.samples.into_iter().map(labelled));
                    unowned += round.unowned;
                    warned_at[index] = None;
                }
                Err(e) => {
                    if warned_at[index].is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                        tracing::warn!("mirror: {e}; the lag shown is this member's own partitions' until it can be read");
                        warned_at[index] = Some(tokio::time::Instant::now());
                    }
                    samples.extend(connector.lag(&env).await.into_iter().map(|l| {
                        labelled(LagSample {
                            source: String::new(),
                            topic: l.topic.to_string(),
                            partition: l.partition.to_string(),
                            source_end: l.latest,
                            position: l.committed,
                        })
                    }));
                }
            }
        }
        let queued: usize = producers.iter().map(|p| p.queued()).sum();
        if let Some(gauges) = &mut gauges {
            let owned: Vec<(String, String, String)> = connectors
                .iter()
                .zip(&source_labels)
                .flat_map(|(c, label)| {
                    c.owned().into_iter().map(move |(topic, partition, _)| {
                        (label.clone(), topic.to_string(), partition.to_string())
                    })
                })
                .collect();
            gauges.update(env.now_ms(), &samples, &owned, queued, unowned);
        }
        if logged_at.elapsed() < every {
            continue;
        }
        let secs = logged_at.elapsed().as_secs_f64().max(1e-3);
        logged_at = tokio::time::Instant::now();
        let (sent, bytes) = (
            stats.sent.load(Ordering::Relaxed),
            stats.sent_bytes.load(Ordering::Relaxed),
        );
        let owned: usize = connectors.iter().map(|c| c.owned().len()).sum();
        // Against what the mirror cluster durably has (the group's committed offsets), not what
        // was read: messages read but failing to reach the mirror cluster are lag, and so is
        // every covered partition nobody owns.
        let lag = samples
            .iter()
            .map(|l| l.source_end.saturating_sub(l.position).max(0))
            .fold(0i64, i64::saturating_add);
        let (mut gaps, mut gap_bytes) = (0, 0);
        for connector in &connectors {
            let (g, b) = connector.gaps();
            gaps += g;
            gap_bytes += b;
        }
        tracing::info!(
            "mirror: {owned} partitions, {:.0} msg/s, {:.2} MB/s, lag {lag} bytes, {unowned} partitions without an owner, producer queue {queued}/{}, {} commits, {gaps} gaps ({gap_bytes} bytes lost at the source), {} read errors, {} messages of refused topics not copied",
            (sent - last.0) as f64 / secs,
            (bytes - last.1) as f64 / secs / 1e6,
            queue_size as usize * producers.len(),
            stats.commits.load(Ordering::Relaxed),
            stats.errors.load(Ordering::Relaxed),
            stats.refused.load(Ordering::Relaxed)
        );
        last = (sent, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(source: &str, source_end: i64, position: i64) -> LagSample {
        LagSample {
            source: source.into(),
            topic: "orders".into(),
            partition: "0-0".into(),
            source_end,
            position,
        }
    }

    /// Fan-in: two source clusters that both have `orders` partition `0-0` are two lag series,
    /// each with its own lag, and an owned partition missing from a round keeps its last sample
    /// under its own source.
    #[test]
    fn two_sources_with_one_topic_partition_are_two_lag_series() {
        let metrics = crate::metrics::Metrics::new();
        let mut gauges = MirrorGauges {
            mirror: metrics.mirror(),
            producer: metrics.producer(),
            lag: LagGauges::default(),
            updated: false,
            last: BTreeMap::new(),
        };
        let owned = |source: &str| (source.to_string(), "orders".to_string(), "0-0".to_string());
        gauges.update(
            0,
            &[sample("east", 100, 40), sample("west", 100, 90)],
            &[owned("east"), owned("west")],
            0,
            0,
        );
        let text = metrics.render().unwrap();
        for (source, lag) in [("east", 60), ("west", 10)] {
            let series = format!(
                "tributary_mirror_lag_bytes{{partition=\"0-0\",source=\"{source}\",topic=\"orders\"}} {lag}"
            );
            assert!(text.contains(&series), "{series} missing:\n{text}");
        }
        // West's broker did not answer this round: its owned partition keeps its last lag.
        gauges.update(
            1_000,
            &[sample("east", 100, 100)],
            &[owned("east"), owned("west")],
            0,
            0,
        );
        let text = metrics.render().unwrap();
        assert!(text.contains(
            "tributary_mirror_lag_bytes{partition=\"0-0\",source=\"west\",topic=\"orders\"} 10"
        ));
        assert!(text.contains(
            "tributary_mirror_lag_bytes{partition=\"0-0\",source=\"east\",topic=\"orders\"} 0"
        ));
    }
}
