//! `replay-log-producer`: Kafka 0.7.2's ReplayLogProducer. Reads a topic from the start (as the
//! group `replay-log-producer`, whose saved state is removed first) and sends every message to
//! another topic, of the same cluster or another (`--brokerinfo`), until no message came for
//! 10 s (0.7.2's `consumer.timeout.ms`) or `--messages` per stream were sent.
//!
//! Better than 0.7.2: every message sent is waited for, and one that was not delivered is
//! counted and said (exit code 1) instead of logged as skipped; the end says how many were
//! sent and delivered. `--from-file` re-publishes the messages of a segment file instead of a
//! topic — a `.diverged` file a demotion kept (what a cluster held past the other cluster's
//! history), or any 0.7 segment — every message of it, compressed ones opened, in order.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tributary::consumer::{ConsumerConnector, ConsumerError, Subscription};
use tributary::env::TokioEnv;
use tributary::producer::{Delivery, Producer, Record};
use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
use tributary_core::wire::TopicName;

use crate::cli::{runtime, StrayWords};
use crate::console_consumer::forget_group;
use crate::error::ToolError;

/// The group the replay reads as (0.7.2's).
pub const GROUP: &str = "replay-log-producer";
/// Deliveries awaited at once, at most, per stream.
const SETTLE_EVERY: usize = 10_000;

/// `tributary replay-log-producer`'s arguments (0.7.2's ReplayLogProducer flags).
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayLogProducerArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`), for both `--zookeeper` and a
    /// `--brokerinfo zk.connect=`.
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// TLS to the brokers (`--security.protocol=ssl`, `--ssl.*`).
    #[command(flatten)]
    pub tls: crate::cli::BrokerTlsArgs,
    /// ZooKeeper of the cluster read: host:port[,host:port...][/chroot].
    #[arg(long, default_value = "127.0.0.1:2181")]
    pub zookeeper: String,
    /// Where to send: zk.connect=host:port[/chroot] or broker.list=id:host:port,...
    #[arg(long)]
    pub brokerinfo: String,
    /// The topic read.
    #[arg(
        long,
        required_unless_present = "from_file",
        conflicts_with = "from_file"
    )]
    pub inputtopic: Option<TopicName>,
    /// Re-publish the messages of this segment file (a `.diverged` file a demotion kept, or
    /// any 0.7 segment) instead of reading a topic.
    #[arg(long = "from-file", value_name = "FILE")]
    pub from_file: Option<std::path::PathBuf>,
    /// The topic written.
    #[arg(long)]
    pub outputtopic: TopicName,
    /// Messages sent per stream at most (-1: all).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub messages: i64,
    /// Send with the async producer.
    #[arg(long = "async")]
    pub async_mode: bool,
    /// Pause after each --batch-size messages, in ms.
    #[arg(long = "delay-btw-batch-ms", default_value_t = 0)]
    pub delay_btw_batch_ms: u64,
    /// The producer's batch.size, and the messages between pauses.
    #[arg(long = "batch-size", default_value_t = 200)]
    pub batch_size: u32,
    /// Streams, each with its own producer.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// Read and not used (as in 0.7.2).
    #[arg(long = "reporting-interval", default_value_t = 5000)]
    pub reporting_interval: u64,
    /// 0 none, 1 gzip, 2 snappy.
    #[arg(long = "compression-codec", default_value_t = 0)]
    pub compression_codec: u8,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: StrayWords,
}

impl ReplayLogProducerArgs {
    fn consumer_config(&self) -> Result<ConsumerConfig, ToolError> {
        let text = format!(
            "zk.connect={}\ngroupid={GROUP}\nconsumer.timeout.ms=10000\nautooffset.reset=smallest\nfetch.size=1048576\nsocket.buffersize=2097152\n{}",
            self.zookeeper,
            self.tls.properties()
        );
        let props =
            Properties::parse("replay-log-producer options", &text).map_err(ToolError::failed)?;
        let mut config = ConsumerConfig::from_properties(&props)
            .map_err(|e| ToolError::flag("--zookeeper", e))?;
        self.zk_security.apply(&mut config.zk_connect)?;
        Ok(config)
    }

    fn producer_config(&self) -> Result<ProducerConfig, ToolError> {
        let discovery = match self.brokerinfo.split_once('=') {
            Some(("zk.connect", value)) => format!("zk.connect={value}"),
            Some((_, value)) => format!("broker.list={value}"),
            None => {
                return Err(ToolError::Usage(format!(
                "--brokerinfo {}: expected zk.connect=HOST:PORT or broker.list=id:host:port,...",
                self.brokerinfo
            )))
            }
        };
        let text = format!(
            "{discovery}\nproducer.type={}\nbatch.size={}\ncompression.codec={}\nqueue.enqueueTimeout.ms=-1\nnum.retries=3\n{}",
            if self.async_mode { "async" } else { "sync" },
            self.batch_size.max(1),
            self.compression_codec,
            self.tls.properties()
        );
        let props =
            Properties::parse("replay-log-producer options", &text).map_err(ToolError::failed)?;
        let mut config = ProducerConfig::from_properties(&props)
            .map_err(|e| ToolError::flag("--brokerinfo", e))?;
        if let tributary_core::config::Discovery::ZooKeeper(zk) = &mut config.discovery {
            self.zk_security.apply(zk)?;
        }
        Ok(config)
    }
}

/// Counts of one replay.
#[derive(Debug, Default)]
struct Counts {
    sent: AtomicU64,
    delivered: AtomicU64,
    failed: AtomicU64,
    /// Streams that ended on an error reading the input topic.
    unread: AtomicU64,
}

/// Replays as `args` asks; says on standard error how many were sent and delivered. Exit code
/// 1 when any was not delivered.
pub fn run_cli(args: ReplayLogProducerArgs) -> Result<ExitCode, ToolError> {
    args.stray.warn("replay-log-producer");
    let producer_config = args.producer_config()?;
    if let Some(path) = args.from_file.clone() {
        return replay_file(&args, &path, producer_config);
    }
    let Some(inputtopic) = args.inputtopic.clone() else {
        return Err(ToolError::Usage("give --inputtopic or --from-file".into()));
    };
    let consumer_config = args.consumer_config()?;
    let counts = Arc::new(Counts::default());
    runtime(None)?.block_on(async {
        tracing::info!("Cleaning up temporary zookeeper data under /consumers/{GROUP}.");
        forget_group(&consumer_config)
            .await
            .map_err(ToolError::failed)?;
        let streams = args.threads.max(1);
        let subscription =
            Subscription::Topics([(inputtopic.clone(), streams)].into_iter().collect());
        let (connector, streams) =
            ConsumerConnector::start(TokioEnv, consumer_config, subscription)
                .await
                .map_err(ToolError::failed)?;
        let mut threads = tokio::task::JoinSet::new();
        for mut stream in streams {
            let (args, config, counts) = (args.clone(), producer_config.clone(), counts.clone());
            let inputtopic = inputtopic.clone();
            threads.spawn(async move {
                let producer = Producer::start(TokioEnv, config)
                    .await
                    .map_err(ToolError::failed)?;
                let mut pending: Vec<Delivery> = Vec::new();
                let mut sent = 0i64;
                while args.messages < 0 || sent < args.messages {
                    let message = match stream.next().await {
                        Ok(message) => message,
                        Err(ConsumerError::Timeout(_) | ConsumerError::Closed) => break,
                        Err(e) => {
                            // Counted: the replay is incomplete (0.7.2 ended the thread
                            // without a word in the exit code).
                            tracing::error!("replay-log-producer: reading {inputtopic}: {e}");
                            counts.unread.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    };
                    match producer
                        .send(Record::new(args.outputtopic.clone(), message.payload))
                        .await
                    {
                        Ok(delivery) => pending.push(delivery),
                        Err(e) => {
                            tracing::error!("replay-log-producer: not sent: {e}");
                            counts.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    sent += 1;
                    counts.sent.fetch_add(1, Ordering::Relaxed);
                    if pending.len() >= SETTLE_EVERY {
                        settle(std::mem::take(&mut pending), &counts).await;
                    }
                    if args.delay_btw_batch_ms > 0 && sent % i64::from(args.batch_size.max(1)) == 0
                    {
                        tokio::time::sleep(Duration::from_millis(args.delay_btw_batch_ms)).await;
                    }
                }
                producer.close().await;
                settle(pending, &counts).await;
                tracing::info!("Sent {sent} messages");
                Ok::<(), ToolError>(())
            });
        }
        let mut result = Ok(());
        while let Some(ended) = threads.join_next().await {
            match ended {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(e) => result = Err(ToolError::failed(e)),
            }
        }
        connector.shutdown().await;
        result
    })?;
    let (sent, delivered, failed, unread) = (
        counts.sent.load(Ordering::Relaxed),
        counts.delivered.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
        counts.unread.load(Ordering::Relaxed),
    );
    eprintln!(
        "replayed {sent} messages of {inputtopic} into {}: {delivered} delivered, {failed} not",
        args.outputtopic
    );
    if unread > 0 {
        eprintln!(
            "{unread} stream(s) stopped on an error reading {inputtopic}: the replay is incomplete"
        );
    }
    Ok(if failed == 0 && unread == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Re-publishes every message of the segment file `path` to `--outputtopic`, in order, each
/// delivery waited for. A message that cannot be read (a damaged file) ends the replay there,
/// saying at which offset; exit code 1 when anything was not delivered or not read.
fn replay_file(
    args: &ReplayLogProducerArgs,
    path: &std::path::Path,
    config: ProducerConfig,
) -> Result<ExitCode, ToolError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ToolError::io(format!("--from-file {}", path.display()), e))?;
    let base = crate::dump_log::start_offset_from_name(path).unwrap_or(0);
    let counts = Counts::default();
    let unreadable = runtime(None)?.block_on(async {
        let producer = Producer::start(TokioEnv, config)
            .await
            .map_err(ToolError::failed)?;
        let mut pending = Vec::new();
        let mut unreadable = None;
        for entry in tributary_core::message::DeepIter::new(
            bytes.into(),
            base,
            tributary_core::message::DECOMPRESSED_BYTES_MAX_DEFAULT,
        ) {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    unreadable = Some(e.to_string());
                    break;
                }
            };
            match producer
                .send(Record::new(args.outputtopic.clone(), entry.message.payload))
                .await
            {
                Ok(delivery) => pending.push(delivery),
                Err(e) => {
                    tracing::error!("replay-log-producer: not sent: {e}");
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            counts.sent.fetch_add(1, Ordering::Relaxed);
            if pending.len() >= SETTLE_EVERY {
                settle(std::mem::take(&mut pending), &counts).await;
            }
        }
        producer.close().await;
        settle(pending, &counts).await;
        Ok::<_, ToolError>(unreadable)
    })?;
    let (sent, delivered, failed) = (
        counts.sent.load(Ordering::Relaxed),
        counts.delivered.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
    );
    eprintln!(
        "replayed {sent} messages of {} into {}: {delivered} delivered, {failed} not",
        path.display(),
        args.outputtopic
    );
    if let Some(e) = &unreadable {
        eprintln!(
            "{}: {e}; the messages after it were not replayed",
            path.display()
        );
    }
    Ok(if failed == 0 && unreadable.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn settle(deliveries: Vec<Delivery>, counts: &Counts) {
    for delivery in deliveries {
        match delivery.await {
            Ok(_) => counts.delivered.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                tracing::error!("replay-log-producer: not delivered: {e}");
                counts.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}
