//! The `tributary` command line: what every subcommand shares. The global options ([`Cli`]),
//! the subcommands ([`Command`], each wrapping the arguments of one tool), the arguments that
//! name a partition ([`PartitionArgs`]), and the helpers every entry point uses: a runtime, the
//! stop signal, and loading client configuration files.
//!
//! Each subcommand's arguments and its entry point (`run_cli`) live beside what it runs: the
//! tools in [`crate::tools`], the broker in [`server`], the mirror maker in [`mirror_maker`].
//! `main.rs` parses, sets up logging and calls the entry point.

pub mod jopt;
pub mod mirror_maker;
pub mod server;

use std::path::Path;

use clap::{Parser, Subcommand};
use tributary_core::config::{
    read_zk_security, ConsumerConfig, ProducerConfig, ZkConnect, ZkSecurity,
};
use tributary_core::wire::TopicName;

use self::mirror_maker::MirrorMakerArgs;
use self::server::ServerArgs;
use crate::config_file::load_file_with_properties;
use crate::tools::check_config::CheckConfigArgs;
use crate::tools::cluster_id::ClusterIdArgs;
use crate::tools::console_consumer::ConsoleConsumerArgs;
use crate::tools::console_producer::ConsoleProducerArgs;
use crate::tools::demote::DemoteArgs;
use crate::tools::dump_log::DumpLogArgs;
use crate::tools::get_offsets::GetOffsetsArgs;
use crate::tools::jmx_tool::JmxToolArgs;
use crate::tools::link_proxy::LinkProxyArgs;
use crate::tools::mirror_status::MirrorStatusArgs;
use crate::tools::offset_checker::ConsumerOffsetCheckerArgs;
use crate::tools::perf::{ConsumerPerfArgs, ProducerPerfArgs};
use crate::tools::promote::PromoteArgs;
use crate::tools::replay::ReplayLogProducerArgs;
use crate::tools::shells::{ConsumerShellArgs, ProducerShellArgs};
use crate::tools::simple_consumer::{SimpleConsumerArgs, SimpleConsumerShellArgs};
use crate::tools::simple_perf::SimpleConsumerPerfArgs;
use crate::tools::update_offsets::UpdateOffsetsArgs;
use crate::tools::verify_rebalance::VerifyConsumerRebalanceArgs;
use crate::tools::zk_offsets::{ExportZkOffsetsArgs, ImportZkOffsetsArgs};

/// The whole command line: the global `--log-format` and one subcommand.
#[derive(Debug, Parser)]
#[command(
    name = "tributary",
    version,
    about = "A Kafka 0.7-compatible log broker and its tools"
)]
pub struct Cli {
    /// How log lines are written to standard error: `text` for people, `json` (one object per
    /// line) for log shippers. RUST_LOG sets the level either way.
    #[arg(long = "log-format", global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Where log lines go: `stderr` (the default) or `stdout`, where Kafka 0.7's default log4j
    /// configuration sends them (bin/kafka-run-class.sh asks for it, so scripts that read a
    /// tool's log from its standard output keep working).
    #[arg(long = "log-to", global = true, value_enum, default_value_t = LogStream::Stderr)]
    pub log_to: LogStream,
    /// The subcommand and its arguments.
    #[command(subcommand)]
    pub command: Command,
}

/// The format of log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, target, message, fields).
    Json,
}

/// Where log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogStream {
    /// Standard error.
    Stderr,
    /// Standard output.
    Stdout,
}

/// Which broker and partition a tool talks to.
#[derive(Debug, clap::Args)]
pub struct PartitionArgs {
    /// The broker: kafka://host:port or host:port.
    #[arg(long)]
    pub server: String,
    /// The topic.
    #[arg(long)]
    pub topic: TopicName,
    /// The partition.
    #[arg(long, default_value_t = 0)]
    pub partition: i32,
    /// TLS to the broker (`--security.protocol=ssl`, `--ssl.*`).
    #[command(flatten)]
    pub tls: BrokerTlsArgs,
}

/// Words that are not options, which Kafka 0.7's tools accept anywhere and ignore (jopt-simple
/// collects them and no tool reads them; 0.7.2's own producer-performance test passes one). A
/// tool that takes them says so in one warning line instead of refusing to run.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StrayWords {
    /// Ignored, as 0.7's tools ignore them.
    #[arg(hide = true, value_name = "IGNORED")]
    pub words: Vec<String>,
}

impl StrayWords {
    /// Logs one warning naming the ignored words, if any, for `tool`.
    pub fn warn(&self, tool: &str) {
        if !self.words.is_empty() {
            tracing::warn!(
                "{tool}: ignoring {} (not options; Kafka 0.7's tools ignore such words too)",
                self.words.join(" ")
            );
        }
    }
}

/// A tool's ZooKeeper security: `--zk-tls-config-file` (Kafka 2.5's flag) names a `.properties`
/// file with `zk.ssl.client.enable`, `zk.ssl.ca.location`, `zk.ssl.certificate.location`,
/// `zk.ssl.key.location`, `zk.auth.digest.location` and `zk.set.acl`, as in a consumer's file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ZkSecurityFile {
    /// ZooKeeper's TLS and identity for this tool: a .properties file with the zk.ssl.* keys,
    /// zk.auth.digest.location and zk.set.acl (docs/security.md).
    #[arg(long = "zk-tls-config-file", value_name = "FILE")]
    pub zk_tls_config_file: Option<std::path::PathBuf>,
}

impl ZkSecurityFile {
    /// The file's settings, when the flag was given.
    pub fn security(&self) -> Result<Option<Box<ZkSecurity>>, String> {
        let Some(path) = &self.zk_tls_config_file else {
            return Ok(None);
        };
        crate::config_file::load_file(path, read_zk_security)
            .map(|security| Some(Box::new(security)))
            .map_err(|e| format!("--zk-tls-config-file: {e}"))
    }

    /// Parses the connect string given with `flag`, secured as the file says.
    pub fn connect(&self, flag: &str, raw: &str) -> Result<ZkConnect, String> {
        let mut connect = ZkConnect::parse(raw).map_err(|e| format!("{flag}: {e}"))?;
        self.apply(&mut connect)?;
        Ok(connect)
    }

    /// Secures `connect` (one a tool's configuration read from a `zk.connect=` it built) as the
    /// file says; without the flag, `connect` keeps what it has.
    pub fn apply(&self, connect: &mut ZkConnect) -> Result<(), String> {
        if let Some(security) = self.security()? {
            connect.security = security;
        }
        Ok(())
    }
}

/// A tool's TLS to brokers: the consumer's and producer's keys as flags (librdkafka's names).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BrokerTlsArgs {
    /// plaintext (the default) or ssl: connect to the brokers' SSL listeners (found in
    /// /tributary/endpoints when brokers come from ZooKeeper; given ports are used as given).
    #[arg(long = "security.protocol", value_name = "plaintext|ssl")]
    pub security_protocol: Option<String>,
    /// The CA certificates (PEM) the brokers' certificates must chain to.
    #[arg(long = "ssl.ca.location", value_name = "FILE")]
    pub ssl_ca_location: Option<String>,
    /// This tool's certificate (PEM), for brokers that require one.
    #[arg(long = "ssl.certificate.location", value_name = "FILE")]
    pub ssl_certificate_location: Option<String>,
    /// The private key of --ssl.certificate.location (PEM).
    #[arg(long = "ssl.key.location", value_name = "FILE")]
    pub ssl_key_location: Option<String>,
    /// https (the default): a broker's certificate must name the host connected to; none.
    #[arg(
        long = "ssl.endpoint.identification.algorithm",
        value_name = "https|none"
    )]
    pub ssl_endpoint_identification_algorithm: Option<String>,
}

impl BrokerTlsArgs {
    /// The flags given, as `.properties` lines (appended to a tool's consumer or producer
    /// configuration, whose reading checks them and names a wrong one).
    pub fn properties(&self) -> String {
        self.pairs()
            .into_iter()
            .map(|(key, value)| format!("{key}={value}\n"))
            .collect()
    }

    /// The flags given, as `(key, value)` settings.
    pub fn pairs(&self) -> Vec<(String, String)> {
        [
            ("security.protocol", &self.security_protocol),
            ("ssl.ca.location", &self.ssl_ca_location),
            ("ssl.certificate.location", &self.ssl_certificate_location),
            ("ssl.key.location", &self.ssl_key_location),
            (
                "ssl.endpoint.identification.algorithm",
                &self.ssl_endpoint_identification_algorithm,
            ),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.as_ref().map(|v| (key.to_string(), v.clone())))
        .collect()
    }

    /// The TLS link the flags ask for (`None`: plaintext); the certificate files are read
    /// now. With `zk`, brokers found there are reached at their SSL listeners
    /// (`/tributary/endpoints`); without, at the addresses given.
    pub fn link(
        &self,
        zk: Option<(&ZkConnect, std::time::Duration, std::time::Duration)>,
    ) -> Result<Option<crate::tls::env::ClientLink>, String> {
        let pairs = self.pairs();
        let props = tributary_core::config::Properties::from_pairs(
            "--ssl flags",
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        let settings = tributary_core::config::read_client_tls(&props)
            .map_err(|e| format!("--{}: {}", e.key, e.problem))?;
        crate::tls::env::ClientLink::load(settings.as_ref(), zk).map_err(|e| e.to_string())
    }
}

/// The subcommands, each with the arguments of its tool.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a broker (Kafka's kafka-server-start.sh).
    #[command(
        after_help = "Examples:\n  tributary server config/server.properties\n  \
        tributary server config/mirror-server.properties config/mirror-consumer.properties config/mirror-producer.properties   # a mirror broker (Kafka 0.7.0's embedded mirror)\n  \
        tributary server --metrics.port 9405 config/mirror-server.properties config/mirror-consumer.properties config/mirror-producer.properties   # with Prometheus metrics\n  \
        RUST_LOG=debug tributary --log-format json server config/server.properties"
    )]
    Server(ServerArgs),
    /// Mirror one or more source clusters into a target cluster (Kafka 0.7.1's MirrorMaker),
    /// committing source offsets only for what the target has durably.
    #[command(
        name = "mirror-maker",
        after_help = "Examples:\n  tributary mirror-maker --consumer.config source.properties --producer.config target.properties --whitelist '.*'\n  \
        tributary mirror-maker --consumer.config dc1.properties --consumer.config dc2.properties --producer.config aggregate.properties --blacklist 'tmp.*' --num.streams 4"
    )]
    MirrorMaker(MirrorMakerArgs),
    /// How far a mirror is behind its source: per topic (per partition with -v) the source's
    /// end, the mirror's committed position, the lag, the rate and the time to catch up.
    #[command(
        name = "mirror-status",
        after_help = "Examples:\n  tributary mirror-status --zkconnect source-zk:2181 --group KafkaMirror\n  \
        tributary mirror-status --zkconnect source-zk:2181 --group KafkaMirror -v --watch   # redraw every second until ^C"
    )]
    MirrorStatus(MirrorStatusArgs),
    /// Send lines of standard input to a topic (Kafka's ConsoleProducer).
    #[command(
        after_help = "Examples:\n  echo hello | tributary console-producer --zookeeper localhost:2181 --topic test\n  \
        tributary console-producer --broker-list 0:localhost:9092 --topic test --compress 1 < lines.txt\n  \
        seq 1000 | tributary console-producer --zookeeper localhost:2181 --topic test --acks   # wait until durable"
    )]
    ConsoleProducer(ConsoleProducerArgs),
    /// Consume a topic (or a whitelist/blacklist) as a member of a consumer group and print it
    /// (Kafka's ConsoleConsumer).
    #[command(
        after_help = "Examples:\n  tributary console-consumer --zookeeper localhost:2181 --topic test --from-beginning\n  \
        tributary console-consumer --zookeeper localhost:2181 --whitelist 'orders.*,clicks' --consumer-timeout-ms 5000\n  \
        tributary console-consumer --zookeeper localhost:2181 --topic test --formatter 'kafka.consumer.ConsoleConsumer$ChecksumMessageFormatter' --property topic=test"
    )]
    ConsoleConsumer(ConsoleConsumerArgs),
    /// Show a consumer group's committed offsets, owners and lag per partition (Kafka's
    /// ConsumerOffsetChecker; for a mirror, point it at the source cluster's ZooKeeper).
    #[command(
        after_help = "Examples:\n  tributary consumer-offset-checker --group KafkaMirror --zkconnect localhost:2181\n  \
        tributary consumer-offset-checker --group g --zkconnect localhost:2181 --topic t1,t2"
    )]
    ConsumerOffsetChecker(ConsumerOffsetCheckerArgs),
    /// Replica mode's failover step: stop copying on every replica broker of a mirror cluster
    /// and make it writable (the whole cluster, or the topics named); prints where each broker
    /// stopped.
    #[command(
        after_help = "Examples:\n  tributary promote --zookeeper mirror-zk:2181            (the whole cluster, topics created later included)\n  \
        tributary promote --zookeeper mirror-zk:2181 --topic orders"
    )]
    Promote(PromoteArgs),
    /// Replica mode's failback step: a cluster becomes a replica of the other cluster again,
    /// keeping its data: each partition is cut back to where the two clusters diverged (what
    /// lies past it kept in a .diverged file) and copies the other's history from there.
    #[command(
        after_help = "Examples:\n  tributary demote --zookeeper dc-a-zk:2181 --dry-run   (print every partition's cut and what lies past it; change nothing)\n  \
        tributary demote --zookeeper dc-a-zk:2181"
    )]
    Demote(DemoteArgs),
    /// Send generated messages and report throughput (Kafka 0.7.1's ProducerPerformance).
    #[command(
        after_help = "Examples:\n  tributary producer-perf --brokerinfo zk.connect=localhost:2181 --topic perf --messages 100000 --async\n  \
        tributary producer-perf --brokerinfo broker.list=0:localhost:9092 --topic perf --messages 100000 --message-size 1024 --threads 4 --acks"
    )]
    ProducerPerf(ProducerPerfArgs),
    /// Consume a topic as fast as possible and report throughput (Kafka 0.7.1's
    /// ConsumerPerformance).
    #[command(
        after_help = "Example:\n  tributary consumer-perf --zookeeper localhost:2181 --topic perf --messages 100000"
    )]
    ConsumerPerf(ConsumerPerfArgs),
    /// Read one partition as fast as one connection allows and print the rate (Kafka's
    /// SimpleConsumerPerformance).
    #[command(
        after_help = "Examples:\n  tributary simple-consumer-perf --server kafka://localhost:9092 --topic perf\n  \
        tributary simple-consumer-perf --server localhost:9092 --topic perf --partition 1 --fetch-size 1048576 --show-detailed-stats"
    )]
    SimpleConsumerPerf(SimpleConsumerPerfArgs),
    /// Print messages of a partition from an offset (Kafka's SimpleConsumerShell).
    #[command(
        after_help = "Example:\n  tributary simple-consumer --server kafka://localhost:9092 --topic test --offset 0 --stop-at-end"
    )]
    SimpleConsumer(SimpleConsumerArgs),
    /// Print offsets of a partition before a time (Kafka's GetOffsetShell).
    #[command(
        after_help = "Examples:\n  tributary get-offsets --server kafka://localhost:9092 --topic test --time -1\n  \
        tributary get-offsets --server localhost:9092 --topic test --time -2 --offsets 1"
    )]
    GetOffsets(GetOffsetsArgs),
    /// Carry TCP connections to one server over a simulated long link: a round-trip delay and a
    /// rate cap each way, for rehearsing a mirror's settings before deploying across a WAN.
    #[command(
        after_help = "Example (a source broker on 9092 made to look 100 ms and 1 Gb/s away):\n  \
        tributary link-proxy --listen 19092 --upstream localhost:9092 --rtt-ms 100 --rate-mbit 1000\n\n\
        Point the mirror at port 19092: set advertised.port=19092 on the source broker, or use a\n\
        broker.list. Every 10 s the proxy logs what it carried."
    )]
    LinkProxy(LinkProxyArgs),
    /// Check configuration files and print the settings they produce.
    #[command(
        after_help = "Examples:\n  tributary check-config config/*.properties\n  \
        tributary check-config --kind server my-broker.conf"
    )]
    CheckConfig(CheckConfigArgs),
    /// Print a cluster's identity (its id, then its name), as recorded in its ZooKeeper.
    #[command(
        after_help = "Example:\n  tributary cluster-id --zookeeper localhost:2181\n\n\
        The identity is created by the cluster's first broker; a mirror refuses a target\n\
        with the same identity as its source, whatever addresses point there."
    )]
    ClusterId(ClusterIdArgs),
    /// Print the entries of log segment files (Kafka's DumpLogSegments).
    #[command(
        after_help = "Example:\n  tributary dump-log /tmp/tributary-logs/test-0/00000000000000000000.kafka"
    )]
    DumpLog(DumpLogArgs),
    /// Write consumer groups' committed offsets to a file (Kafka 0.7.2's ExportZkOffsets).
    #[command(
        name = "export-zk-offsets",
        after_help = "Examples:\n  tributary export-zk-offsets --zkconnect source-zk:2181 --group orders --output-file orders.offsets\n  \
        tributary export-zk-offsets --zkconnect localhost:2181 --output-file all-groups.offsets   # every group"
    )]
    ExportZkOffsets(ExportZkOffsetsArgs),
    /// Write the offsets of a file from export-zk-offsets into a ZooKeeper (Kafka 0.7.2's
    /// ImportZkOffsets); stop the group first.
    #[command(
        name = "import-zk-offsets",
        after_help = "Examples:\n  tributary import-zk-offsets --zkconnect replica-zk:2181 --input-file orders.offsets"
    )]
    ImportZkOffsets(ImportZkOffsetsArgs),
    /// Set a group's offsets of a topic to each partition's earliest or latest offset (Kafka
    /// 0.7.2's kafka.utils.UpdateOffsetsInZK).
    #[command(
        name = "update-offsets-in-zk",
        after_help = "Examples:\n  tributary update-offsets-in-zk latest config/consumer.properties orders   # skip the backlog\n  \
        tributary update-offsets-in-zk earliest config/consumer.properties orders   # read everything still held"
    )]
    UpdateOffsetsInZk(UpdateOffsetsArgs),
    /// Check that every partition of a group is owned by a live member subscribed to its topic
    /// (Kafka 0.7.2's VerifyConsumerRebalance).
    #[command(
        name = "verify-consumer-rebalance",
        after_help = "Examples:\n  tributary verify-consumer-rebalance --zk.connect localhost:2181 --group orders"
    )]
    VerifyConsumerRebalance(VerifyConsumerRebalanceArgs),
    /// Fetch a partition without end, logging each message (`consumed: <payload>`) and offset
    /// (`next offset = <n>`) as Kafka 0.7.2's SimpleConsumerShell does.
    #[command(
        name = "simple-consumer-shell",
        after_help = "Examples:\n  tributary simple-consumer-shell --server kafka://localhost:9092 --topic test --partition 0 --print-messages --print-offsets"
    )]
    SimpleConsumerShell(SimpleConsumerShellArgs),
    /// Send each line of standard input to a topic with a producer properties file, printing
    /// `Sent: <line> (<n> bytes)` once delivered (Kafka 0.7.2's ProducerShell).
    #[command(
        name = "producer-shell",
        after_help = "Examples:\n  tributary producer-shell --props config/producer.properties --topic test"
    )]
    ProducerShell(ProducerShellArgs),
    /// Consume a topic with a consumer properties file, printing `consumed: <payload>` per
    /// message (Kafka 0.7.2's ConsumerShell).
    #[command(
        name = "consumer-shell",
        after_help = "Examples:\n  tributary consumer-shell --props config/consumer.properties --topic test --partitions 2"
    )]
    ConsumerShell(ConsumerShellArgs),
    /// Copy a topic's messages, from its start, into another topic of this cluster or another
    /// (Kafka 0.7.2's ReplayLogProducer).
    #[command(
        name = "replay-log-producer",
        after_help = "Examples:\n  tributary replay-log-producer --zookeeper localhost:2181 --inputtopic orders --outputtopic orders-replay --brokerinfo zk.connect=localhost:2181\n  \
        tributary replay-log-producer --from-file /data/logs/orders-0/00000000000000031850.00000000000000036650.diverged --outputtopic orders --brokerinfo zk.connect=dc-b-zk:2181   (re-publish what a demotion kept)"
    )]
    ReplayLogProducer(ReplayLogProducerArgs),
    /// What replaces Kafka 0.7.2's JmxTool (the metrics endpoint); exits 1.
    #[command(name = "jmx-tool")]
    JmxTool(JmxToolArgs),
}

/// The target of the log lines the entry points write themselves: the binary's, as if they
/// were written in `main.rs`. (The lines of `server::run` and `mirror::maker::run`, which the
/// simulator runs too, carry their own modules' targets.)
pub const LOG_TARGET: &str = "tributary";

/// A multi-threaded tokio runtime with timers and I/O, with `threads` workers (tokio's default,
/// one per core, when `None`). The error says the runtime could not start, and why.
pub fn runtime(threads: Option<u32>) -> Result<tokio::runtime::Runtime, String> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n as usize);
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// Waits for SIGTERM or SIGINT (^C). If they cannot be listened for, says so and waits for ^C
/// alone; if even that fails, says so and never returns (the process is then stopped with
/// SIGKILL).
pub async fn wait_for_signal() {
    match StopSignals::listen() {
        Ok(mut signals) => {
            signals.next().await;
        }
        Err(why) => {
            tracing::warn!(target: LOG_TARGET, "cannot listen for SIGTERM ({why}); only ^C stops this gracefully");
            if let Err(e) = tokio::signal::ctrl_c().await {
                // Returning would stop at once: wait for a kill instead, and say so.
                tracing::error!(target: LOG_TARGET, "cannot listen for signals ({e}); stop this process with SIGKILL");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// A signal asking the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGINT (^C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

impl StopSignal {
    /// The exit code a JVM gives after running its shutdown hooks for this signal (128 + the
    /// signal's number), which is what scripts that stopped Kafka 0.7's tools saw.
    pub fn exit_code(self) -> u8 {
        match self {
            StopSignal::Interrupt => 130,
            StopSignal::Terminate => 143,
        }
    }
}

impl std::fmt::Display for StopSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
        })
    }
}

/// SIGINT and SIGTERM, listened for from creation on: once listened for, they no longer stop
/// the process at once, so a tool creates this before it starts work it must finish (0.7.2's
/// shutdown hooks), and every signal that arrives afterwards is seen by [`StopSignals::next`].
#[derive(Debug)]
pub struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Starts listening (within a tokio runtime). The error says why the signals cannot be
    /// listened for; they then keep their default action (the process stops at once).
    pub fn listen() -> Result<Self, std::io::Error> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// The next signal.
    pub async fn next(&mut self) -> StopSignal {
        tokio::select! {
            _ = self.terminate.recv() => StopSignal::Terminate,
            _ = self.interrupt.recv() => StopSignal::Interrupt,
        }
    }
}

/// Listens for stop signals if it can; if not, says so once (the tool then stops at once on a
/// signal, without finishing what it was doing) and returns `None`.
pub fn listen_for_stop(tool: &str) -> Option<StopSignals> {
    match StopSignals::listen() {
        Ok(signals) => Some(signals),
        Err(e) => {
            tracing::warn!(target: LOG_TARGET, "{tool}: cannot listen for SIGINT/SIGTERM ({e}); a signal stops it without finishing");
            None
        }
    }
}

/// Runs `work` to its end, as a shutdown hook runs: a stop signal meanwhile is recorded in
/// `stopped_by` if none was yet (the work goes on), and a second one cuts the work short
/// (`None`; the caller says what was left undone).
pub async fn finish_unless_stopped_twice<T>(
    work: impl std::future::Future<Output = T>,
    signals: &mut Option<StopSignals>,
    stopped_by: &mut Option<StopSignal>,
) -> Option<T> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            // The work first: what is done when a signal comes counts as done.
            biased;
            done = &mut work => return Some(done),
            signal = next_stop(signals) => {
                if stopped_by.is_none() {
                    *stopped_by = Some(signal);
                    continue;
                }
                return None;
            }
        }
    }
}

/// The next stop signal of `signals`; never, when there are none.
pub async fn next_stop(signals: &mut Option<StopSignals>) -> StopSignal {
    match signals {
        Some(signals) => signals.next().await,
        None => std::future::pending().await,
    }
}

/// A consumer configuration file (its errors name the file).
pub fn load_consumer(path: &Path) -> Result<ConsumerConfig, String> {
    load_file_with_properties(path, ConsumerConfig::from_properties)
        .map(|(c, _)| c)
        .map_err(|e| e.to_string())
}

/// A producer configuration file (its errors name the file).
pub fn load_producer(path: &Path) -> Result<ProducerConfig, String> {
    load_file_with_properties(path, ProducerConfig::from_properties)
        .map(|(c, _)| c)
        .map_err(|e| e.to_string())
}
