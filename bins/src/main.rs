//! The `tributary` command: the broker and the tools that replace Kafka 0.7's.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tributary::config_file::{load_file_with_properties, load_kind, ConfigKind};
use tributary::consumer::Subscription;
use tributary::env::TokioEnv;
use tributary::mirror::MirrorSettings;
use tributary::server::{self, EmbeddedMirror};
use tributary::tools::console_consumer::{self, ConsoleConsumerOptions, Formatter};
use tributary::tools::console_producer::{produce_stdin, ConsoleProducerOptions};
use tributary::tools::mirror_status::{self, StatusOptions};
use tributary::tools::offset_checker::{self, CheckOptions};
use tributary::tools::perf;
use tributary::tools::simple_consumer::{consume, ConsumeOptions};
use tributary::tools::{check_config, dump_log, get_offsets};
use tributary_core::config::{reference, BrokerConfig, BrokerEndpoint, ZkConnect};
use tributary_core::message::CompressionCodec;
use tributary_core::wire::TopicName;

#[derive(Parser)]
#[command(
    name = "tributary",
    version,
    about = "A Kafka 0.7-compatible log broker and its tools"
)]
struct Cli {
    /// How log lines are written to standard error: `text` for people, `json` (one object per
    /// line) for log shippers. RUST_LOG sets the level either way.
    #[arg(long = "log-format", global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// The format of log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, target, message, fields).
    Json,
}

/// Which broker and partition a tool talks to.
#[derive(clap::Args)]
struct PartitionArgs {
    /// The broker: kafka://host:port or host:port.
    #[arg(long)]
    server: String,
    /// The topic.
    #[arg(long)]
    topic: TopicName,
    /// The partition.
    #[arg(long, default_value_t = 0)]
    partition: i32,
}

#[derive(Subcommand)]
enum Command {
    /// Start a broker (Kafka's kafka-server-start.sh).
    #[command(
        after_help = "Examples:\n  tributary server config/server.properties\n  \
        tributary server config/mirror-server.properties config/mirror-consumer.properties config/mirror-producer.properties   # a mirror broker (Kafka 0.7.0's embedded mirror)\n  \
        tributary server --metrics.port 9405 config/mirror-server.properties config/mirror-consumer.properties config/mirror-producer.properties   # with Prometheus metrics\n  \
        RUST_LOG=debug tributary --log-format json server config/server.properties"
    )]
    Server {
        /// The broker's server.properties.
        server: PathBuf,
        /// For a mirror broker (Kafka 0.7.0): the embedded consumer's properties (the source
        /// cluster's zk.connect, groupid, mirror.topics.whitelist/blacklist,
        /// mirror.consumer.numthreads), then the embedded producer's (the mirror cluster).
        #[arg(num_args = 0..=2)]
        mirror: Vec<PathBuf>,
        /// Serve Prometheus metrics on this port (overrides metrics.port in the file, which
        /// stays as it is: e.g. the seed's mirror files, unchanged).
        #[arg(long = "metrics.port")]
        metrics_port: Option<u16>,
    },
    /// Mirror one or more source clusters into a target cluster (Kafka 0.7.1's MirrorMaker),
    /// committing source offsets only for what the target has durably.
    #[command(
        name = "mirror-maker",
        after_help = "Examples:\n  tributary mirror-maker --consumer.config source.properties --producer.config target.properties --whitelist '.*'\n  \
        tributary mirror-maker --consumer.config dc1.properties --consumer.config dc2.properties --producer.config aggregate.properties --blacklist 'tmp.*' --num.streams 4"
    )]
    MirrorMaker {
        /// A source cluster's consumer properties (repeat for several sources).
        #[arg(long = "consumer.config", required = true)]
        consumer_config: Vec<PathBuf>,
        /// The target cluster's producer properties.
        #[arg(long = "producer.config")]
        producer_config: PathBuf,
        /// Mirror the topics this regex matches (commas mean "or").
        #[arg(
            long,
            conflicts_with = "blacklist",
            required_unless_present = "blacklist"
        )]
        whitelist: Option<String>,
        /// Mirror every topic but those this regex matches.
        #[arg(long)]
        blacklist: Option<String>,
        /// Streams per source cluster.
        #[arg(long = "num.streams", default_value_t = 1)]
        num_streams: u32,
        /// Producers, shared round-robin by the streams.
        #[arg(long = "num.producers", default_value_t = 1)]
        num_producers: u32,
        /// Serve Prometheus metrics at http://0.0.0.0:PORT/metrics (off when not given).
        #[arg(long = "metrics.port")]
        metrics_port: Option<u16>,
    },
    /// How far a mirror is behind its source: per topic (per partition with -v) the source's
    /// end, the mirror's committed position, the lag, the rate and the time to catch up.
    #[command(
        name = "mirror-status",
        after_help = "Examples:\n  tributary mirror-status --zkconnect source-zk:2181 --group KafkaMirror\n  \
        tributary mirror-status --zkconnect source-zk:2181 --group KafkaMirror -v --watch   # redraw every second until ^C"
    )]
    MirrorStatus {
        /// The SOURCE cluster's ZooKeeper: HOST:PORT[/CHROOT].
        #[arg(long, default_value = "localhost:2181")]
        zkconnect: String,
        /// The mirror's consumer group (the embedded mirror's groupid; KafkaMirror in the seed).
        #[arg(long)]
        group: String,
        /// One line per partition too.
        #[arg(short, long)]
        verbose: bool,
        /// Redraw in place every interval until interrupted.
        #[arg(long)]
        watch: bool,
        /// Seconds between the two samples (between redraws with --watch).
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// With --watch, stop after this many redraws.
        #[arg(long)]
        rounds: Option<u64>,
        /// With --watch, stop once every partition is caught up (for scripts: waits for a
        /// mirror to drain).
        #[arg(long = "until-caught-up", requires = "watch")]
        until_caught_up: bool,
    },
    /// Send lines of standard input to a topic (Kafka's ConsoleProducer).
    #[command(
        after_help = "Examples:\n  echo hello | tributary console-producer --zookeeper localhost:2181 --topic test\n  \
        tributary console-producer --broker-list 0:localhost:9092 --topic test --compress 1 < lines.txt\n  \
        seq 1000 | tributary console-producer --zookeeper localhost:2181 --topic test --acks   # wait until durable"
    )]
    ConsoleProducer {
        /// The topic.
        #[arg(long)]
        topic: TopicName,
        /// ZooKeeper of the cluster: HOST:PORT[/CHROOT].
        #[arg(
            long,
            conflicts_with = "broker_list",
            required_unless_present = "broker_list"
        )]
        zookeeper: Option<String>,
        /// Brokers: id:host:port[,id:host:port...]; the broker picks the partition.
        #[arg(long = "broker-list")]
        broker_list: Option<String>,
        /// Send each line in its own request, waiting for it (default: async batches).
        #[arg(long)]
        sync: bool,
        /// Compression codec: 0 none, 1 gzip, 2 snappy.
        #[arg(long, default_value_t = 0)]
        compress: u8,
        /// Messages per request (async).
        #[arg(long = "batch-size", default_value_t = 200)]
        batch_size: usize,
        /// How long a line may wait for its batch to fill, in ms (async; 0.7's --timeout).
        #[arg(long, default_value_t = 1000)]
        timeout: u64,
        /// Wait until the brokers have the lines durably (Tributary's acknowledged produce).
        #[arg(long)]
        acks: bool,
        /// Another producer setting, key=value (repeatable), e.g. num.retries=5.
        #[arg(long = "property")]
        properties: Vec<String>,
    },
    /// Consume a topic (or a whitelist/blacklist) as a member of a consumer group and print it
    /// (Kafka's ConsoleConsumer).
    #[command(
        after_help = "Examples:\n  tributary console-consumer --zookeeper localhost:2181 --topic test --from-beginning\n  \
        tributary console-consumer --zookeeper localhost:2181 --whitelist 'orders.*,clicks' --consumer-timeout-ms 5000\n  \
        tributary console-consumer --zookeeper localhost:2181 --topic test --formatter kafka.consumer.ChecksumMessageFormatter --property topic=test"
    )]
    ConsoleConsumer {
        /// ZooKeeper of the cluster: HOST:PORT[/CHROOT].
        #[arg(long)]
        zookeeper: String,
        /// The topic.
        #[arg(long, conflicts_with_all = ["whitelist", "blacklist"], required_unless_present_any = ["whitelist", "blacklist"])]
        topic: Option<TopicName>,
        /// Consume every topic this regex matches (commas mean "or"; quotes are stripped).
        #[arg(long, conflicts_with = "blacklist")]
        whitelist: Option<String>,
        /// Consume every topic this regex does not match.
        #[arg(long)]
        blacklist: Option<String>,
        /// The consumer group (default: a new console-consumer-<n>).
        #[arg(long)]
        group: Option<String>,
        /// Start from the earliest message (the group's saved state is removed first).
        #[arg(long = "from-beginning")]
        from_beginning: bool,
        /// Stop after this many messages.
        #[arg(long = "max-messages")]
        max_messages: Option<u64>,
        /// Bytes per partition per fetch.
        #[arg(long = "fetch-size", default_value_t = 1024 * 1024)]
        fetch_size: u32,
        /// Socket receive buffer of fetch connections.
        #[arg(long = "socket-buffer-size", default_value_t = 2 * 1024 * 1024)]
        socket_buffer_size: u32,
        /// How often offsets are committed, in ms.
        #[arg(long = "autocommit.interval.ms", default_value_t = 10_000)]
        autocommit_interval_ms: u32,
        /// Exit (cleanly) after this long without a message, in ms.
        #[arg(long = "consumer-timeout-ms", allow_hyphen_values = true)]
        consumer_timeout_ms: Option<i64>,
        /// Print an error and go on when a message cannot be read (default: stop).
        #[arg(long = "skip-message-on-error")]
        skip_message_on_error: bool,
        /// kafka.consumer.DefaultMessageFormatter (the payload per line) or
        /// kafka.consumer.ChecksumMessageFormatter (checksum:<crc> per line).
        #[arg(long, default_value = "kafka.consumer.DefaultMessageFormatter")]
        formatter: String,
        /// A formatter property, key=value (repeatable), e.g. topic=<name> for the checksum one.
        #[arg(long = "property")]
        properties: Vec<String>,
    },
    /// Show a consumer group's committed offsets, owners and lag per partition (Kafka's
    /// ConsumerOffsetChecker; for a mirror, point it at the source cluster's ZooKeeper).
    #[command(
        after_help = "Examples:\n  tributary consumer-offset-checker --group KafkaMirror --zkconnect localhost:2181\n  \
        tributary consumer-offset-checker --group g --zkconnect localhost:2181 --topic t1,t2"
    )]
    ConsumerOffsetChecker {
        /// The consumer group.
        #[arg(long)]
        group: String,
        /// ZooKeeper: HOST:PORT[/CHROOT].
        #[arg(long, default_value = "localhost:2181")]
        zkconnect: String,
        /// Topics, comma-separated (default: every topic of the group).
        #[arg(long)]
        topic: Option<String>,
    },
    /// Replica mode's failover step: stop copying topics on every replica broker of a mirror
    /// cluster and make them writable; prints where each broker stopped.
    #[command(
        after_help = "Examples:\n  tributary promote --zookeeper mirror-zk:2181 --topic orders\n  \
        tributary promote --zookeeper mirror-zk:2181            (every topic of the cluster)"
    )]
    Promote {
        /// The mirror cluster's ZooKeeper: HOST:PORT[/CHROOT].
        #[arg(long)]
        zookeeper: String,
        /// A topic to promote (repeatable; default: every topic the cluster has now).
        #[arg(long)]
        topic: Vec<String>,
        /// Seconds to wait for every broker's confirmation.
        #[arg(long, default_value_t = 30)]
        wait: u64,
    },
    /// Send generated messages and report throughput (Kafka 0.7.1's ProducerPerformance).
    #[command(
        after_help = "Examples:\n  tributary producer-perf --brokerinfo zk.connect=localhost:2181 --topic perf --messages 100000 --async\n  \
        tributary producer-perf --brokerinfo broker.list=0:localhost:9092 --topic perf --messages 100000 --message-size 1024 --threads 4 --acks"
    )]
    ProducerPerf {
        /// zk.connect=HOST:PORT[/CHROOT] or broker.list=id:host:port,...
        #[arg(long)]
        brokerinfo: String,
        /// The topic.
        #[arg(long)]
        topic: TopicName,
        /// Messages to send in all.
        #[arg(long)]
        messages: u64,
        /// Bytes per message.
        #[arg(long = "message-size", default_value_t = 100)]
        message_size: usize,
        /// Vary message sizes between 1 and --message-size.
        #[arg(long = "vary-message-size")]
        vary_message_size: bool,
        /// Use the async producer.
        #[arg(long = "async")]
        async_mode: bool,
        /// Messages per request.
        #[arg(long = "batch-size", default_value_t = 200)]
        batch_size: u32,
        /// Sending tasks, each with its own producer.
        #[arg(long, default_value_t = 10)]
        threads: u32,
        /// 0 none, 1 gzip, 2 snappy.
        #[arg(long = "compression-codec", default_value_t = 0)]
        compression_codec: u8,
        /// Wait for durable acknowledgements (Tributary).
        #[arg(long)]
        acks: bool,
        /// Messages between detailed lines.
        #[arg(long = "reporting-interval", default_value_t = 5000)]
        reporting_interval: u64,
        /// A line per reporting interval and thread.
        #[arg(long = "show-detailed-stats")]
        show_detailed_stats: bool,
        /// Do not print the header line.
        #[arg(long = "hide-header")]
        hide_header: bool,
    },
    /// Consume a topic as fast as possible and report throughput (Kafka 0.7.1's
    /// ConsumerPerformance).
    #[command(
        after_help = "Example:\n  tributary consumer-perf --zookeeper localhost:2181 --topic perf --messages 100000"
    )]
    ConsumerPerf {
        /// ZooKeeper: HOST:PORT[/CHROOT].
        #[arg(long)]
        zookeeper: String,
        /// The topic.
        #[arg(long)]
        topic: TopicName,
        /// The group (default: a new perf-consumer-<n>).
        #[arg(long)]
        group: Option<String>,
        /// Bytes per partition per fetch.
        #[arg(long = "fetch-size", default_value_t = 1024 * 1024)]
        fetch_size: u32,
        /// Start at the latest offset instead of the earliest.
        #[arg(long = "from-latest")]
        from_latest: bool,
        /// Socket receive buffer of fetch connections.
        #[arg(long = "socket-buffer-size", default_value_t = 2 * 1024 * 1024)]
        socket_buffer_size: u32,
        /// Streams.
        #[arg(long, default_value_t = 10)]
        threads: u32,
        /// Stop after this many messages (default: after 5 s without one).
        #[arg(long)]
        messages: Option<u64>,
        /// Do not print the header line.
        #[arg(long = "hide-header")]
        hide_header: bool,
    },
    /// Read one partition as fast as one connection allows and print the rate (Kafka's
    /// SimpleConsumerPerformance).
    #[command(
        after_help = "Examples:\n  tributary simple-consumer-perf --server kafka://localhost:9092 --topic perf\n  \
        tributary simple-consumer-perf --server localhost:9092 --topic perf --partition 1 --fetch-size 1048576 --show-detailed-stats"
    )]
    SimpleConsumerPerf {
        #[command(flatten)]
        at: PartitionArgs,
        /// Bytes per fetch.
        #[arg(long = "fetch-size", default_value_t = 1024 * 1024)]
        fetch_size: i32,
        /// Start at the latest offset instead of the earliest.
        #[arg(long = "from-latest")]
        from_latest: bool,
        /// Stop once more than this many messages were read (default: at the end).
        #[arg(long)]
        messages: Option<u64>,
        /// Print a line every --reporting-interval messages instead of one summary.
        #[arg(long = "show-detailed-stats")]
        show_detailed_stats: bool,
        /// Messages between progress lines.
        #[arg(long = "reporting-interval", default_value_t = 5000)]
        reporting_interval: u64,
        /// Do not print the header line.
        #[arg(long = "hide-header")]
        hide_header: bool,
    },
    /// Print messages of a partition from an offset (Kafka's SimpleConsumerShell).
    #[command(
        after_help = "Example:\n  tributary simple-consumer --server kafka://localhost:9092 --topic test --offset 0 --stop-at-end"
    )]
    SimpleConsumer {
        #[command(flatten)]
        at: PartitionArgs,
        /// The offset to start from.
        #[arg(long, default_value_t = 0)]
        offset: i64,
        /// Bytes per fetch.
        #[arg(long, default_value_t = 1_000_000)]
        fetchsize: i32,
        /// Print each message's next offset before it.
        #[arg(long = "print-offsets")]
        print_offsets: bool,
        /// Stop after this many messages.
        #[arg(long = "max-messages")]
        max_messages: Option<u64>,
        /// Stop at the end of the log instead of waiting for more.
        #[arg(long = "stop-at-end")]
        stop_at_end: bool,
    },
    /// Print offsets of a partition before a time (Kafka's GetOffsetShell).
    #[command(
        after_help = "Examples:\n  tributary get-offsets --server kafka://localhost:9092 --topic test --time -1\n  \
        tributary get-offsets --server localhost:9092 --topic test --time -2 --offsets 1"
    )]
    GetOffsets {
        #[command(flatten)]
        at: PartitionArgs,
        /// -1 latest, -2 earliest, or ms since the epoch.
        #[arg(long, allow_hyphen_values = true)]
        time: i64,
        /// How many offsets.
        #[arg(long, default_value_t = 1)]
        offsets: i32,
    },
    /// Carry TCP connections to one server over a simulated long link: a round-trip delay and a
    /// rate cap each way, for rehearsing a mirror's settings before deploying across a WAN.
    #[command(
        after_help = "Example (a source broker on 9092 made to look 100 ms and 1 Gb/s away):\n  \
        tributary link-proxy --listen 19092 --upstream localhost:9092 --rtt-ms 100 --rate-mbit 1000\n\n\
        Point the mirror at port 19092: set advertised.port=19092 on the source broker, or use a\n\
        broker.list. Every 10 s the proxy logs what it carried."
    )]
    LinkProxy {
        /// Where to listen: a port, or host:port.
        #[arg(long)]
        listen: String,
        /// The server every connection is carried to: host:port.
        #[arg(long)]
        upstream: String,
        /// The round trip the link adds, in ms (half each way).
        #[arg(long = "rtt-ms", default_value_t = 100)]
        rtt_ms: u32,
        /// The most each direction carries, in megabits a second (shared by all connections);
        /// 0 for no cap.
        #[arg(long = "rate-mbit", default_value_t = 1000.0)]
        rate_mbit: f64,
    },
    /// Check configuration files and print the settings they produce.
    #[command(
        after_help = "Examples:\n  tributary check-config config/*.properties\n  \
        tributary check-config --kind server my-broker.conf"
    )]
    CheckConfig {
        /// What the files are; by default guessed from names ending in server, producer,
        /// consumer or zookeeper .properties.
        #[arg(long, value_enum)]
        kind: Option<ConfigKind>,
        /// Exit 0 even when a file has keys Tributary does not know (they are always ignored).
        #[arg(long = "allow-unknown")]
        allow_unknown: bool,
        /// The files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the entries of log segment files (Kafka's DumpLogSegments).
    #[command(
        after_help = "Example:\n  tributary dump-log /tmp/tributary-logs/test-0/00000000000000000000.kafka"
    )]
    DumpLog {
        /// Do not print message payloads.
        #[arg(long = "noprint", alias = "no-print")]
        no_print: bool,
        /// Segment files (named <20-digit start offset>.kafka).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The broker logs what it does; the tools only what went wrong (RUST_LOG overrides both).
    // check-config prints its own warnings.
    let default_level = match cli.command {
        Command::Server { .. } | Command::MirrorMaker { .. } | Command::LinkProxy { .. } => "info",
        Command::CheckConfig { .. } => "error",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_level.into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => {
            logs.json().with_ansi(false).init();
            // A panic's report goes to the log shipper as JSON too.
            std::panic::set_hook(Box::new(|info| tracing::error!("panic: {info}")));
        }
    }
    let json = cli.log_format == LogFormat::Json;
    match run(cli.command) {
        Ok(code) => code,
        Err(message) => {
            match json {
                true => tracing::error!("{message}"),
                false => eprintln!("error: {message}"),
            }
            ExitCode::from(2)
        }
    }
}

fn runtime(threads: Option<u32>) -> Result<tokio::runtime::Runtime, String> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n as usize);
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

fn run(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Server {
            server,
            mirror,
            metrics_port,
        } => run_server(&server, &mirror, metrics_port),
        Command::MirrorMaker {
            consumer_config,
            producer_config,
            whitelist,
            blacklist,
            num_streams,
            num_producers,
            metrics_port,
        } => {
            let sources = consumer_config
                .iter()
                .map(|p| load_consumer(p))
                .collect::<Result<Vec<_>, _>>()?;
            let producer = load_producer(&producer_config)?;
            let filter = match (whitelist, blacklist) {
                (Some(w), _) => Subscription::Whitelist(w, 0),
                (None, Some(b)) => Subscription::Blacklist(b, 0),
                (None, None) => return Err("give --whitelist or --blacklist".into()),
            };
            let commit_interval = std::time::Duration::from_millis(
                sources
                    .first()
                    .map_or(1000, |s| s.mirror.commit_interval_ms)
                    .into(),
            );
            let settings = MirrorSettings {
                sources,
                producer,
                filter,
                streams: num_streams,
                producers: num_producers,
                commit_interval,
                summary_interval: tributary::mirror::SUMMARY_EVERY,
                observer: None,
                metrics: None,
            };
            let stop = async {
                wait_for_signal().await;
                tracing::info!("signal received: shutting down");
            };
            runtime(None)?
                .block_on(tributary::mirror::maker::run(
                    TokioEnv,
                    settings,
                    metrics_port,
                    stop,
                ))
                .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::ConsoleProducer {
            topic,
            zookeeper,
            broker_list,
            sync,
            compress,
            batch_size,
            timeout,
            acks,
            properties,
        } => {
            CompressionCodec::from_id(compress)
                .ok_or_else(|| format!("--compress {compress}: expected 0, 1 or 2"))?;
            let discovery = match (zookeeper, broker_list) {
                (Some(zk), _) => format!(
                    "zk.connect={}",
                    ZkConnect::parse(&zk).map_err(|e| format!("--zookeeper: {e}"))?
                ),
                (None, Some(list)) => {
                    list.split(',')
                        .map(BrokerEndpoint::parse)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| format!("--broker-list: {e}"))?;
                    format!("broker.list={list}")
                }
                (None, None) => return Err("give --zookeeper or --broker-list".into()),
            };
            let options = ConsoleProducerOptions {
                discovery,
                topic: topic.clone(),
                sync,
                codec: compress,
                batch_size,
                queue_time_ms: timeout,
                acks,
                properties,
            };
            let sent = runtime(Some(2))?.block_on(produce_stdin(&options))?;
            let durably = if acks { " (durable)" } else { "" };
            eprintln!(
                "delivered {} messages to {topic}{durably}; {} not delivered",
                sent.delivered, sent.failed
            );
            Ok(if sent.failed > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::ConsoleConsumer {
            zookeeper,
            topic,
            whitelist,
            blacklist,
            group,
            from_beginning,
            max_messages,
            fetch_size,
            socket_buffer_size,
            autocommit_interval_ms,
            consumer_timeout_ms,
            skip_message_on_error,
            formatter,
            properties,
        } => {
            let zookeeper =
                ZkConnect::parse(&zookeeper).map_err(|e| format!("--zookeeper: {e}"))?;
            let subscription = match (topic, whitelist, blacklist) {
                (Some(t), _, _) => Subscription::Topics([(t, 1)].into_iter().collect()),
                (None, Some(w), _) => Subscription::Whitelist(w, 1),
                (None, None, Some(b)) => Subscription::Blacklist(b, 1),
                (None, None, None) => return Err("give --topic, --whitelist or --blacklist".into()),
            };
            let properties: BTreeMap<String, String> = properties
                .iter()
                .map(|p| {
                    p.split_once('=')
                        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                        .ok_or_else(|| format!("--property {p}: expected key=value"))
                })
                .collect::<Result<_, _>>()?;
            let group = group
                .unwrap_or_else(|| format!("console-consumer-{}", rand::random::<u32>() % 100_000));
            let mut settings = vec![
                ("fetch.size".to_string(), fetch_size.to_string()),
                (
                    "socket.buffersize".to_string(),
                    socket_buffer_size.to_string(),
                ),
                (
                    "autocommit.interval.ms".to_string(),
                    autocommit_interval_ms.to_string(),
                ),
            ];
            if let Some(ms) = consumer_timeout_ms {
                settings.push(("consumer.timeout.ms".to_string(), ms.to_string()));
            }
            let options = ConsoleConsumerOptions {
                zookeeper,
                subscription,
                group,
                from_beginning,
                max_messages,
                settings,
                skip_message_on_error,
                formatter: Formatter::named(&formatter, &properties)?,
            };
            let consumed = runtime(Some(2))?.block_on(console_consumer::consume(
                &options,
                &mut std::io::stdout().lock(),
            ))?;
            eprintln!("Consumed {consumed} messages");
            Ok(ExitCode::SUCCESS)
        }
        Command::MirrorStatus {
            zkconnect,
            group,
            verbose,
            watch,
            interval,
            rounds,
            until_caught_up,
        } => {
            if !(interval.is_finite() && (0.1..=3600.0).contains(&interval)) {
                return Err(format!(
                    "--interval {interval}: give seconds between 0.1 and 3600"
                ));
            }
            let options = StatusOptions {
                group: group.parse().map_err(|e| format!("--group: {e}"))?,
                zk_connect: ZkConnect::parse(&zkconnect)
                    .map_err(|e| format!("--zkconnect: {e}"))?,
                verbose,
                watch,
                interval: std::time::Duration::from_secs_f64(interval),
                rounds,
                until_caught_up,
                in_place: std::io::IsTerminal::is_terminal(&std::io::stdout()),
            };
            let mut stdout = std::io::stdout().lock();
            runtime(Some(1))?.block_on(async {
                tokio::select! {
                    shown = mirror_status::run(&TokioEnv, &options, &mut stdout) => shown,
                    () = wait_for_signal() => Ok(()),
                }
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::ConsumerOffsetChecker {
            group,
            zkconnect,
            topic,
        } => {
            let options = CheckOptions {
                group: group.parse().map_err(|e| format!("--group: {e}"))?,
                zk_connect: ZkConnect::parse(&zkconnect)
                    .map_err(|e| format!("--zkconnect: {e}"))?,
                topics: topic
                    .map(|t| {
                        t.split(',')
                            .map(|t| t.trim().parse().map_err(|e| format!("--topic {t}: {e}")))
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .transpose()?
                    .unwrap_or_default(),
            };
            runtime(Some(1))?.block_on(offset_checker::check(
                &options,
                &mut std::io::stdout().lock(),
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Promote {
            zookeeper,
            topic,
            wait,
        } => {
            let options = tributary::tools::promote::PromoteOptions {
                zk_connect: ZkConnect::parse(&zookeeper)
                    .map_err(|e| format!("--zookeeper: {e}"))?,
                topics: topic
                    .iter()
                    .map(|t| t.trim().parse().map_err(|e| format!("--topic {t}: {e}")))
                    .collect::<Result<Vec<_>, String>>()?,
                wait: std::time::Duration::from_secs(wait),
            };
            runtime(Some(1))?.block_on(tributary::tools::promote::promote(
                &TokioEnv,
                &options,
                &mut std::io::stdout().lock(),
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::ProducerPerf {
            brokerinfo,
            topic,
            messages,
            message_size,
            vary_message_size,
            async_mode,
            batch_size,
            threads,
            compression_codec,
            acks,
            reporting_interval,
            show_detailed_stats,
            hide_header,
        } => {
            if !(brokerinfo.starts_with("zk.connect=") || brokerinfo.starts_with("broker.list=")) {
                return Err(format!("--brokerinfo {brokerinfo}: expected zk.connect=HOST:PORT or broker.list=id:host:port,..."));
            }
            let options = perf::ProducerPerfOptions {
                brokerinfo,
                topic,
                messages,
                message_size,
                vary_message_size,
                async_mode,
                batch_size,
                threads,
                compression_codec,
                acks,
                show_detailed_stats,
                reporting_interval,
                hide_header,
            };
            let (_, failed) = runtime(None)?
                .block_on(perf::producer_perf(&options, &mut std::io::stdout().lock()))?;
            if failed > 0 {
                eprintln!("{failed} messages not delivered");
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::ConsumerPerf {
            zookeeper,
            topic,
            group,
            fetch_size,
            from_latest,
            socket_buffer_size,
            threads,
            messages,
            hide_header,
        } => {
            let group = group
                .unwrap_or_else(|| format!("perf-consumer-{}", rand::random::<u32>() % 100_000));
            let options = perf::ConsumerPerfOptions {
                zookeeper,
                topic,
                group,
                fetch_size,
                from_latest,
                socket_buffer_size,
                threads,
                messages,
                hide_header,
            };
            runtime(None)?
                .block_on(perf::consumer_perf(&options, &mut std::io::stdout().lock()))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::SimpleConsumer {
            at,
            offset,
            fetchsize,
            print_offsets,
            max_messages,
            stop_at_end,
        } => {
            let PartitionArgs {
                server,
                topic,
                partition,
            } = at;
            let options = ConsumeOptions {
                server,
                topic,
                partition,
                offset,
                fetch_bytes: fetchsize,
                print_offsets,
                max_messages,
                stop_at_end,
            };
            runtime(Some(1))?.block_on(consume(&options, &mut std::io::stdout().lock()))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::SimpleConsumerPerf {
            at,
            fetch_size,
            from_latest,
            messages,
            show_detailed_stats,
            reporting_interval,
            hide_header,
        } => {
            let options = tributary::tools::simple_perf::SimplePerfOptions {
                server: at.server,
                topic: at.topic,
                partition: at.partition,
                fetch_size,
                from_latest,
                messages,
                report_every: show_detailed_stats.then_some(reporting_interval.max(1)),
                hide_header,
            };
            runtime(Some(1))?.block_on(tributary::tools::simple_perf::simple_consumer_perf(
                &TokioEnv,
                &options,
                &mut std::io::stdout().lock(),
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::LinkProxy {
            listen,
            upstream,
            rtt_ms,
            rate_mbit,
        } => run_link_proxy(&listen, &upstream, rtt_ms, rate_mbit),
        Command::GetOffsets { at, time, offsets } => {
            let found = runtime(Some(1))?.block_on(get_offsets::get_offsets(
                &at.server,
                &at.topic,
                at.partition,
                time,
                offsets,
            ))?;
            println!("get {} results", found.len());
            found.iter().for_each(|o| println!("{o}"));
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig {
            kind,
            allow_unknown,
            files,
        } => check_configs(kind, allow_unknown, &files),
        Command::DumpLog { no_print, files } => dump_logs(!no_print, &files),
    }
}

/// A consumer configuration file (its errors name the file).
fn load_consumer(path: &std::path::Path) -> Result<tributary_core::config::ConsumerConfig, String> {
    load_file_with_properties(
        path,
        tributary_core::config::ConsumerConfig::from_properties,
    )
    .map(|(c, _)| c)
    .map_err(|e| e.to_string())
}

/// A producer configuration file (its errors name the file).
fn load_producer(path: &std::path::Path) -> Result<tributary_core::config::ProducerConfig, String> {
    load_file_with_properties(
        path,
        tributary_core::config::ProducerConfig::from_properties,
    )
    .map(|(c, _)| c)
    .map_err(|e| e.to_string())
}

fn run_server(
    server: &std::path::Path,
    mirror: &[PathBuf],
    metrics_port: Option<u16>,
) -> Result<ExitCode, String> {
    let embedded = match mirror {
        [] => None,
        [consumer, producer] => Some(MirrorSettings::embedded(load_consumer(consumer)?, load_producer(producer)?)),
        [only] => {
            return Err(format!(
                "a mirror broker takes three files: server.properties consumer.properties producer.properties; only {} was given after {}",
                only.display(),
                server.display()
            ))
        }
        _ => return Err("tributary server takes one file, or three for a mirror broker".into()),
    };
    let (mut config, props) = load_file_with_properties(server, BrokerConfig::from_properties)
        .map_err(|e| e.to_string())?;
    if let Some(port) = metrics_port {
        if let Some(file) = config.metrics_port.filter(|p| *p != port) {
            tracing::info!(
                "--metrics.port {port} overrides metrics.port={file} of {}",
                server.display()
            );
        }
        config.metrics_port = Some(port);
    }
    tracing::info!(
        "configuration from {} (every key; \"(changed)\" where the file differs from the default):\n{}",
        server.display(),
        reference::render_settings(tributary_core::config::ConfigKind::Broker, &props, "  ").trim_end()
    );
    let mirror = embedded.map(|settings| EmbeddedMirror::new(TokioEnv, settings));
    let stop = async {
        wait_for_signal().await;
        tracing::info!("signal received: shutting down");
    };
    runtime(config.num_threads)?
        .block_on(server::run(TokioEnv, config, mirror, stop))
        .map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

/// `link-proxy`: runs until SIGINT/SIGTERM, logging what it carried every 10 s.
fn run_link_proxy(
    listen: &str,
    upstream: &str,
    rtt_ms: u32,
    rate_mbit: f64,
) -> Result<ExitCode, String> {
    use std::sync::atomic::Ordering;
    use tributary::tools::link_proxy::{LinkProxy, LinkSpec};
    let (host, port) = match listen.parse::<u16>() {
        Ok(port) => ("0.0.0.0".to_string(), port),
        Err(_) => tributary::client::parse_server(listen).map_err(|e| format!("--listen: {e}"))?,
    };
    let upstream =
        tributary::client::parse_server(upstream).map_err(|e| format!("--upstream: {e}"))?;
    if !(rate_mbit.is_finite() && (0.0..=1_000_000.0).contains(&rate_mbit)) {
        return Err(format!(
            "--rate-mbit {rate_mbit}: give megabits a second between 0 (no cap) and 1000000"
        ));
    }
    let rate = (rate_mbit > 0.0).then(|| (rate_mbit * 1e6 / 8.0).max(1.0) as u64);
    let spec = LinkSpec::new(std::time::Duration::from_millis(rtt_ms.into()), rate);
    runtime(None)?.block_on(async {
        let proxy = LinkProxy::start(TokioEnv, &host, port, upstream.clone(), spec)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(
            "link proxy on {} to {}:{}: {rtt_ms} ms round trip, {}; up to {} KiB queued per direction of a connection",
            proxy.local_addr(),
            upstream.0,
            upstream.1,
            rate.map_or("no rate cap".to_string(), |_| format!("{rate_mbit} Mb/s each way")),
            spec.queue_bytes / 1024
        );
        let mut every = tokio::time::interval(std::time::Duration::from_secs(10));
        every.tick().await;
        let stats = &proxy.stats();
        let mut last = (0, 0);
        let progress = async {
            loop {
                every.tick().await;
                let now = (
                    stats.upstream_bytes.load(Ordering::Relaxed),
                    stats.downstream_bytes.load(Ordering::Relaxed),
                );
                if now != last {
                    tracing::info!(
                        "carried {:.1} MB/s toward the server, {:.1} MB/s back ({} connections so far)",
                        (now.0 - last.0) as f64 / 10e6,
                        (now.1 - last.1) as f64 / 10e6,
                        stats.connections.load(Ordering::Relaxed)
                    );
                }
                last = now;
            }
        };
        tokio::select! {
            _ = progress => {}
            () = wait_for_signal() => {}
        }
        proxy.stop().await.map_err(|e| e.to_string())
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn check_configs(
    kind: Option<ConfigKind>,
    allow_unknown: bool,
    files: &[PathBuf],
) -> Result<ExitCode, String> {
    let (mut failed, mut unknown) = (false, 0);
    let mut out = std::io::stdout().lock();
    for path in files {
        let kind = kind
            .or_else(|| ConfigKind::from_file_name(path))
            .ok_or_else(|| {
                format!(
                    "{}: cannot tell what kind of configuration this is; pass --kind",
                    path.display()
                )
            })?;
        match load_kind(path, kind) {
            Ok((config, props)) => {
                unknown += check_config::print_config(
                    &mut out,
                    &path.display().to_string(),
                    kind,
                    &props,
                    &config,
                )
                .map_err(|e| e.to_string())?
            }
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
            }
        }
    }
    if unknown > 0 && !allow_unknown {
        eprintln!("error: {unknown} unknown keys (see the warnings above); fix them, or pass --allow-unknown if they are meant for another tool");
        failed = true;
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn dump_logs(print_payloads: bool, files: &[PathBuf]) -> Result<ExitCode, String> {
    let mut corrupt = false;
    let mut out = std::io::stdout().lock();
    for path in files {
        let start = dump_log::start_offset_from_name(path).ok_or_else(|| {
            format!(
                "{}: not a segment file name (expected <20-digit offset>.kafka)",
                path.display()
            )
        })?;
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let found = dump_log::dump_segment(
            &mut out,
            &path.display().to_string(),
            start,
            &bytes,
            print_payloads,
        )
        .map_err(|e| e.to_string())?;
        corrupt |= found.is_some();
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(if corrupt {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
