//! The `tributary` command line as parsed: the global options ([`Cli`]) and the subcommands
//! ([`Command`], each wrapping the arguments of one tool). This is the top of the crate: it
//! names every tool, and nothing below it names it back. `main.rs` parses, sets up logging and
//! calls the chosen subcommand's entry point.

use clap::{Parser, Subcommand};

use crate::check_config::CheckConfigArgs;
use crate::cli::mirror_maker::MirrorMakerArgs;
use crate::cli::server::ServerArgs;
use crate::cluster_id::ClusterIdArgs;
use crate::console_consumer::ConsoleConsumerArgs;
use crate::console_producer::ConsoleProducerArgs;
use crate::demote::DemoteArgs;
use crate::dump_log::DumpLogArgs;
use crate::get_offsets::GetOffsetsArgs;
use crate::jmx_tool::JmxToolArgs;
use crate::link_proxy::LinkProxyArgs;
use crate::mirror_positions::MirrorPositionsArgs;
use crate::mirror_status::MirrorStatusArgs;
use crate::offset_checker::ConsumerOffsetCheckerArgs;
use crate::perf::{ConsumerPerfArgs, ProducerPerfArgs};
use crate::promote::PromoteArgs;
use crate::replay::ReplayLogProducerArgs;
use crate::shells::{ConsumerShellArgs, ProducerShellArgs};
use crate::simple_consumer::{SimpleConsumerArgs, SimpleConsumerShellArgs};
use crate::simple_perf::SimpleConsumerPerfArgs;
use crate::translate_offsets::TranslateOffsetsArgs;
use crate::update_offsets::UpdateOffsetsArgs;
use crate::verify_rebalance::VerifyConsumerRebalanceArgs;
use crate::zk_offsets::{ExportZkOffsetsArgs, ImportZkOffsetsArgs};

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
    /// Print how far the mirror cluster's durable copy of each source partition reaches (the
    /// loss window), and with the source's ZooKeeper what the mirror lacks.
    #[command(
        name = "mirror-positions",
        after_help = "Examples:\n  tributary mirror-positions --zookeeper mirror-zk:2181\n  \
        tributary mirror-positions --zookeeper mirror-zk:2181 --source-zookeeper source-zk:2181   # what the mirror lacks\n\n\
        Copies made with mirror.preserve.partitions=true have positions."
    )]
    MirrorPositions(MirrorPositionsArgs),
    /// Translate a consumer group's source offsets into the mirror cluster's partitions (to
    /// move the group there without skipping a message).
    #[command(
        name = "translate-offsets",
        after_help = "Examples:\n  tributary translate-offsets --group orders --source-zookeeper source-zk:2181 --zookeeper mirror-zk:2181\n  \
        tributary translate-offsets --group orders --source-zookeeper source-zk:2181 --zookeeper mirror-zk:2181 --write"
    )]
    TranslateOffsets(TranslateOffsetsArgs),
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
