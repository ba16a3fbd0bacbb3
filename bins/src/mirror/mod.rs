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
//!   (every `mirror.commit.interval.ms`) only up to the end of the acknowledged prefix of each
//!   partition ([`MirrorWindow`]): a crash of anything resends at most what was in flight;
//! - a full producer queue makes the mirror wait (backpressure on the source fetch), whatever
//!   `queue.enqueueTimeout.ms` says; what is in flight per stream is bounded by `queue.size`;
//! - a new source topic that passes the filter is mirrored without restarting anything (the
//!   consumer's wildcard subscription);
//! - source data deleted before it was copied is reported with its byte range and counted
//!   (`mirror.gap.policy=stop` stops that partition instead); corrupt source data stops only its
//!   partition, with an error naming it;
//! - on shutdown it stops fetching, waits (bounded) for what is in flight, commits, and leaves.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tributary_core::config::{ConsumerConfig, Discovery, EnqueueTimeout, ProducerConfig, TopicFilter, ZkConnect};
use tributary_core::consumer::BrokerPartition;
use tributary_core::mirror::{MirrorWindow, SourcePartition};
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{broker_id_path, parse_broker_registration, BROKER_IDS_PATH};

use crate::consumer::{ConsumedMessage, ConsumerConnector, ConsumerError, MessageStream, Subscription};
use crate::coordination::Coordination;
use crate::env::Env;
use crate::producer::{Delivered, Producer, Record, SendError};

/// How long shutdown waits for what is in flight to be acknowledged before leaving without it
/// (it is then sent again by whoever takes the partitions next).
const SHUTDOWN_ACK_WAIT: Duration = Duration::from_secs(30);
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
    /// Producers, used round-robin by the streams.
    pub producers: u32,
    /// How often source offsets are committed.
    pub commit_interval: Duration,
    /// How often the summary line is logged.
    pub summary_interval: Duration,
}

/// Why the mirror cannot run.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The configuration makes no sense for a mirror.
    #[error("{0}")]
    Config(String),
    /// The source cluster could not be joined.
    #[error("cannot join the source cluster: {0}")]
    Source(String),
    /// The mirror cluster could not be reached.
    #[error("cannot reach the mirror cluster: {0}")]
    Target(String),
    /// The mirror cluster refused messages, or a send failed for good: the stream stopped
    /// (its source offsets stay uncommitted; nothing is lost, it is sent again on restart).
    #[error("mirroring stopped: {0}")]
    Send(String),
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
        MirrorSettings { sources: vec![consumer], producer, filter, streams, producers: 1, commit_interval, summary_interval: SUMMARY_EVERY }
    }
}

/// A regex matching exactly these names.
fn exact_names(names: &[TopicName]) -> String {
    names.iter().map(|n| regex::escape(n.as_str())).collect::<Vec<_>>().join("|")
}

/// What the mirror did.
#[derive(Debug, Default)]
pub struct MirrorStats {
    /// Messages handed to the producer.
    pub sent: AtomicU64,
    /// Bytes handed to the producer.
    pub sent_bytes: AtomicU64,
    /// Messages durably acknowledged by the mirror cluster.
    pub acked: AtomicU64,
    /// Source offsets committed.
    pub commits: AtomicU64,
    /// Source partitions stopped on unreadable data.
    pub errors: AtomicU64,
}

/// A running mirror.
pub struct Mirror {
    connectors: Vec<Arc<ConsumerConnector>>,
    producers: Vec<Arc<dyn ProducerHandle>>,
    streams: JoinSet<Result<(), MirrorError>>,
    stop: watch::Sender<bool>,
    /// Counters.
    pub stats: Arc<MirrorStats>,
    summary: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror").field("sources", &self.connectors.len()).field("streams", &self.streams.len()).finish()
    }
}

/// A producer as the mirror uses it (type-erased over the environment).
trait ProducerHandle: Send + Sync {
    fn send(&self, record: Record) -> std::pin::Pin<Box<dyn Future<Output = Result<crate::producer::Delivery, SendError>> + Send + '_>>;
    fn queued(&self) -> usize;
    fn close(self: Arc<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;
}

impl<E: Env> ProducerHandle for Producer<E> {
    fn send(&self, record: Record) -> std::pin::Pin<Box<dyn Future<Output = Result<crate::producer::Delivery, SendError>> + Send + '_>> {
        Box::pin(Producer::send(self, record))
    }

    fn queued(&self) -> usize {
        Producer::queued(self)
    }

    fn close(self: Arc<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            match Arc::try_unwrap(self) {
                Ok(producer) => producer.close().await,
                Err(_) => tracing::warn!("a mirror producer is still in use at shutdown; its queue is not drained"),
            }
        })
    }
}

impl Mirror {
    /// Checks the settings, joins every source cluster, starts the producers and one task per
    /// stream.
    pub async fn start<E: Env>(env: E, settings: MirrorSettings) -> Result<Self, MirrorError> {
        let producer_config = mirror_producer(settings.producer.clone());
        refuse_self_mirroring(&env, &settings.sources, &producer_config).await?;
        let mut producers: Vec<Arc<dyn ProducerHandle>> = Vec::new();
        for _ in 0..settings.producers.max(1) {
            let producer = Producer::start(env.clone(), producer_config.clone()).await.map_err(|e| MirrorError::Target(e.to_string()))?;
            producers.push(Arc::new(producer));
        }
        let stats = Arc::new(MirrorStats::default());
        let (stop, stop_rx) = watch::channel(false);
        let mut connectors = Vec::new();
        let mut streams = JoinSet::new();
        let in_flight_max = producer_config.queue_size.max(1) as usize;
        for (index, source) in settings.sources.iter().enumerate() {
            let config = mirror_consumer(source.clone());
            let subscription = match &settings.filter {
                Subscription::Whitelist(f, _) => Subscription::Whitelist(f.clone(), settings.streams.max(1)),
                Subscription::Blacklist(f, _) => Subscription::Blacklist(f.clone(), settings.streams.max(1)),
                Subscription::Topics(t) => Subscription::Topics(t.clone()),
            };
            let (connector, source_streams) = ConsumerConnector::start(env.clone(), config.clone(), subscription).await.map_err(|e| MirrorError::Source(format!("{}: {e}", config.zk_connect)))?;
            let connector = Arc::new(connector);
            for (i, stream) in source_streams.into_iter().enumerate() {
                let producer = producers[(index + i) % producers.len()].clone();
                let context = StreamContext { source: index, connector: connector.clone(), producer, stats: stats.clone(), commit_interval: settings.commit_interval, in_flight_max };
                streams.spawn(run_stream(context, stream, stop_rx.clone()));
            }
            tracing::info!("mirroring from {} (group {}) with {} streams", config.zk_connect, config.group_id, settings.streams.max(1));
            connectors.push(connector);
        }
        let summary = tokio::spawn(summarize(env, connectors.clone(), producers.clone(), producer_config.queue_size, stats.clone(), settings.summary_interval, stop_rx));
        Ok(Mirror { connectors, producers, streams, stop, stats, summary })
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
                    Some(Err(e)) => break Some(MirrorError::Send(format!("a mirror stream was cancelled: {e}"))),
                    None => break None,
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
        while let Some(ended) = self.streams.join_next().await {
            match ended {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!("{e}"),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => {}
            }
        }
        let _ = (&mut self.summary).await;
        for connector in self.connectors.drain(..) {
            match Arc::try_unwrap(connector) {
                Ok(connector) => connector.shutdown().await,
                Err(_) => tracing::warn!("a source connector is still in use at shutdown"),
            }
        }
        for producer in self.producers.drain(..) {
            let queued = producer.queued();
            if tokio::time::timeout(SHUTDOWN_ACK_WAIT, producer.close()).await.is_err() {
                tracing::warn!("mirror: the mirror cluster did not take the last {queued} queued messages within {SHUTDOWN_ACK_WAIT:?}; they were not committed at the source and are sent again on restart");
            }
        }
        tracing::info!(
            "mirror stopped: {} messages sent, {} acknowledged, {} commits",
            self.stats.sent.load(Ordering::Relaxed),
            self.stats.acked.load(Ordering::Relaxed),
            self.stats.commits.load(Ordering::Relaxed)
        );
    }
}

/// The mirror's producer: durable acknowledgements always, never dropping on a full queue, and
/// retrying sends until they succeed (a send that fails for good stops the stream instead).
fn mirror_producer(mut config: ProducerConfig) -> ProducerConfig {
    if !config.durable_acks {
        tracing::info!("the mirror asks the mirror cluster for durable acknowledgements (durable.acks=true): source offsets are committed only for what it has stored");
        config.durable_acks = true;
    }
    if config.enqueue_timeout != EnqueueTimeout::Block {
        tracing::warn!("queue.enqueueTimeout.ms would drop messages on a full queue; the mirror waits instead (as queue.enqueueTimeout.ms=-1)");
        config.enqueue_timeout = EnqueueTimeout::Block;
    }
    config.num_retries = config.num_retries.max(1_000_000);
    config
}

/// The mirror's consumer: it commits itself, only what the mirror cluster has.
fn mirror_consumer(mut config: ConsumerConfig) -> ConsumerConfig {
    config.autocommit_enable = false;
    if config.mirror.stop_on_gap {
        config.auto_offset_reset = tributary_core::config::AutoOffsetReset::Raise("stop (mirror.gap.policy=stop)".into());
    }
    config
}

/// Refuses to mirror a cluster into itself (the producer's ZooKeeper, or its brokers, are the
/// source's).
async fn refuse_self_mirroring<E: Env>(env: &E, sources: &[ConsumerConfig], producer: &ProducerConfig) -> Result<(), MirrorError> {
    for source in sources {
        match &producer.discovery {
            Discovery::ZooKeeper(target) if same_zookeeper(&source.zk_connect, target) => {
                return Err(MirrorError::Config(format!(
                    "the consumer and the producer both point at ZooKeeper {target}: a cluster cannot be mirrored into itself; point the producer at the mirror cluster"
                )));
            }
            Discovery::ZooKeeper(_) => {}
            Discovery::BrokerList(list) => {
                let timeout = Duration::from_millis(source.zk.connection_timeout_ms.into());
                let coord = env.coordinate(&source.zk_connect, timeout, timeout).await.map_err(|e| MirrorError::Source(format!("{}: {e}", source.zk_connect)))?;
                let ids = coord.children(BROKER_IDS_PATH).await.unwrap_or_default();
                let mut source_brokers = Vec::new();
                for id in ids.iter().filter_map(|i| i.parse::<i32>().ok()) {
                    if let Ok((data, _)) = coord.get(&broker_id_path(id)).await {
                        source_brokers.extend(parse_broker_registration(&String::from_utf8_lossy(&data)));
                    }
                }
                coord.close().await;
                if let Some(b) = list.iter().find(|b| source_brokers.iter().any(|(h, p)| *p == b.port && same_host(h, &b.host))) {
                    return Err(MirrorError::Config(format!(
                        "the producer's broker {}:{} is a broker of the source cluster ({}): a cluster cannot be mirrored into itself",
                        b.host, b.port, source.zk_connect
                    )));
                }
            }
        }
    }
    Ok(())
}

fn same_host(a: &str, b: &str) -> bool {
    let norm = |h: &str| if h == "localhost" { "127.0.0.1".to_string() } else { h.to_string() };
    norm(a) == norm(b)
}

fn same_zookeeper(a: &ZkConnect, b: &ZkConnect) -> bool {
    a.chroot == b.chroot && a.servers.iter().any(|s| b.servers.iter().any(|t| s.port == t.port && same_host(&s.host, &t.host)))
}

/// What a stream task works with.
struct StreamContext {
    source: usize,
    connector: Arc<ConsumerConnector>,
    producer: Arc<dyn ProducerHandle>,
    stats: Arc<MirrorStats>,
    commit_interval: Duration,
    in_flight_max: usize,
}

/// An acknowledgement (or failure) of one mirrored message.
type Ack = (SourcePartition, u64, u64, Result<Delivered, SendError>);

/// One stream: messages from the source to the producer, acknowledgements into the window,
/// commits of the acknowledged prefix.
async fn run_stream(context: StreamContext, mut stream: MessageStream, mut stop: watch::Receiver<bool>) -> Result<(), MirrorError> {
    let mut window = MirrorWindow::new();
    let mut generations: BTreeMap<SourcePartition, u64> = BTreeMap::new();
    let mut acks: JoinSet<Ack> = JoinSet::new();
    let mut commit_timer = tokio::time::interval(context.commit_interval);
    let mut seq = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            Some(joined) = acks.join_next(), if !acks.is_empty() => on_ack(&context, &mut window, &generations, joined)?,
            _ = commit_timer.tick() => commit(&context, &mut window, &mut generations).await,
            next = stream.next(), if window.in_flight() < context.in_flight_max => match next {
                Ok(message) => {
                    seq += 1;
                    // Waiting for room in a full producer queue ends on stop: the message is
                    // then not sent and its offset stays uncommitted.
                    tokio::select! {
                        biased;
                        _ = stop.wait_for(|stopped| *stopped) => break,
                        forwarded = forward(&context, &mut window, &mut generations, &mut acks, message, seq) => forwarded?,
                    }
                }
                Err(ConsumerError::Timeout(_)) => {}
                Err(ConsumerError::Closed) => break,
                Err(e) => {
                    // The consumer stopped that partition; the others go on.
                    context.stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("mirror: {e}; that partition is not mirrored until the data is fixed and the mirror restarted");
                }
            },
        }
    }
    // Shutdown: what is in flight gets a bounded time to be acknowledged, then the last commit.
    let drained = tokio::time::timeout(SHUTDOWN_ACK_WAIT, async {
        while let Some(joined) = acks.join_next().await {
            on_ack(&context, &mut window, &generations, joined)?;
        }
        Ok::<_, MirrorError>(())
    })
    .await;
    match drained {
        Ok(result) => result?,
        Err(_) => tracing::warn!("mirror: {} messages still unacknowledged after {SHUTDOWN_ACK_WAIT:?}; they are sent again on restart", window.in_flight()),
    }
    commit(&context, &mut window, &mut generations).await;
    Ok(())
}

/// Hands one message to the producer (waiting while its queue is full) and records it.
async fn forward(context: &StreamContext, window: &mut MirrorWindow, generations: &mut BTreeMap<SourcePartition, u64>, acks: &mut JoinSet<Ack>, message: ConsumedMessage, seq: u64) -> Result<(), MirrorError> {
    let partition: SourcePartition = (context.source, message.topic.to_string(), message.partition.to_string());
    // A new generation of a partition (it was rebalanced away and back): what was in flight
    // for the old one is no longer ours to commit.
    if generations.get(&partition).is_some_and(|g| *g != message.generation) {
        window.lost(&partition);
    }
    generations.insert(partition.clone(), message.generation);
    window.sent(&partition, seq, message.offset);
    let bytes = message.payload.len() as u64;
    let record = Record::new(message.topic.clone(), message.payload);
    let delivery = context.producer.send(record).await.map_err(|e| MirrorError::Send(format!("{}: {e}", partition.1)))?;
    context.stats.sent.fetch_add(1, Ordering::Relaxed);
    context.stats.sent_bytes.fetch_add(bytes, Ordering::Relaxed);
    let generation = message.generation;
    acks.spawn(async move { (partition, seq, generation, delivery.await) });
    Ok(())
}

/// Records an acknowledgement; a send that failed for good stops the stream.
fn on_ack(context: &StreamContext, window: &mut MirrorWindow, generations: &BTreeMap<SourcePartition, u64>, joined: Result<Ack, tokio::task::JoinError>) -> Result<(), MirrorError> {
    let (partition, seq, generation, outcome) = joined.map_err(|e| MirrorError::Send(format!("an acknowledgement task failed: {e}")))?;
    match outcome {
        Ok(_) => {
            context.stats.acked.fetch_add(1, Ordering::Relaxed);
            if generations.get(&partition) == Some(&generation) {
                window.acked(&partition, seq);
            }
            Ok(())
        }
        Err(e) => Err(MirrorError::Send(format!("{}/{}: {e}", partition.1, partition.2))),
    }
}

/// Commits each partition up to its acknowledged prefix; a partition no longer owned in its
/// generation is dropped from the window.
async fn commit(context: &StreamContext, window: &mut MirrorWindow, generations: &mut BTreeMap<SourcePartition, u64>) {
    for (partition, offset) in window.commits_due() {
        let (Some(&generation), Ok(topic), Some(bp)) = (generations.get(&partition), partition.1.parse::<TopicName>(), BrokerPartition::parse(&partition.2)) else { continue };
        match context.connector.commit_at(&topic, bp, offset, generation).await {
            Ok(true) => {
                window.committed(&partition, offset);
                context.stats.commits.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {
                let resent = window.lost(&partition);
                generations.remove(&partition);
                tracing::info!("mirror: {}/{} moved to another member; its {resent} unacknowledged messages are its new owner's to send", partition.1, partition.2);
            }
            Err(e) => tracing::warn!("mirror: committing {}/{} at {offset}: {e}; retried at the next commit", partition.1, partition.2),
        }
    }
}

/// Logs a one-line summary every `every`: partitions owned, rates, lag, what is in flight.
async fn summarize<E: Env>(env: E, connectors: Vec<Arc<ConsumerConnector>>, producers: Vec<Arc<dyn ProducerHandle>>, queue_size: u32, stats: Arc<MirrorStats>, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut last = (stats.sent.load(Ordering::Relaxed), stats.sent_bytes.load(Ordering::Relaxed));
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            () = tokio::time::sleep(every) => {}
        }
        let (sent, bytes) = (stats.sent.load(Ordering::Relaxed), stats.sent_bytes.load(Ordering::Relaxed));
        let secs = every.as_secs_f64().max(1e-3);
        let mut owned = 0;
        let mut lag = 0i64;
        let (mut gaps, mut gap_bytes) = (0, 0);
        for connector in &connectors {
            let partitions = connector.lag(&env).await;
            owned += connector.owned().len();
            lag += partitions.iter().map(|(_, _, consumed, latest)| (latest - consumed).max(0)).sum::<i64>();
            let (g, b) = connector.gaps();
            gaps += g;
            gap_bytes += b;
        }
        let queued: usize = producers.iter().map(|p| p.queued()).sum();
        tracing::info!(
            "mirror: {owned} partitions, {:.0} msg/s, {:.2} MB/s, lag {lag} bytes, producer queue {queued}/{}, {} commits, {gaps} gaps ({gap_bytes} bytes lost at the source), {} partitions stopped on errors",
            (sent - last.0) as f64 / secs,
            (bytes - last.1) as f64 / secs / 1e6,
            queue_size as usize * producers.len(),
            stats.commits.load(Ordering::Relaxed),
            stats.errors.load(Ordering::Relaxed)
        );
        last = (sent, bytes);
    }
}
