//! `server.properties`: the broker's settings (0.7's `KafkaConfig`), with 0.7.2 defaults.

use std::collections::BTreeMap;

use super::error::ConfigError;
use super::fields::Fields;
use super::listeners::{self, Listeners};
use super::properties::Properties;
use super::reference::ConfigKind;
use super::replica::{self, ReplicaConfig};
use super::zk::{read_connect, require_connect, ZkConfig, ZkConnect};
use crate::identity::ClusterName;
use crate::wire::TopicName;

const I32_MAX: i64 = i32::MAX as i64;
/// The smallest `log.file.size`: one magic-0 message header.
const LOG_FILE_BYTES_MIN: i64 = 5;
/// The most partitions a topic may have on one broker (`num.partitions`,
/// `topic.partition.count.map`; 0.7 took any int). A consumer skips a registration claiming
/// more, so one absurd count cannot starve every other topic of a wildcard subscription.
pub const PARTITIONS_PER_TOPIC_MAX: i64 = 65_536;

/// The broker's configuration. Every key of 0.7's `KafkaConfig` is here with its 0.7 default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// `brokerid` (required).
    pub broker_id: i32,
    /// `hostname` to register; unset means the host's address.
    pub hostname: Option<String>,
    /// `port` (6667).
    pub port: u16,
    /// `advertised.host.name` (Tributary, named as in Kafka 0.8.1): the host registered in
    /// ZooKeeper for clients when it differs from `hostname` (NAT, a proxy); unset registers
    /// `hostname`'s value.
    pub advertised_host: Option<String>,
    /// `advertised.port` (Tributary, as in Kafka 0.8.1): the port registered for clients when
    /// they reach the broker through another port (a proxy, port forwarding); unset registers
    /// the port listened on.
    pub advertised_port: Option<u16>,
    /// `num.threads`; `None` means one per CPU (decided by the runtime).
    pub num_threads: Option<u32>,
    /// `socket.send.buffer` (102400).
    pub socket_send_buffer_bytes: u32,
    /// `socket.receive.buffer` (102400).
    pub socket_receive_buffer_bytes: u32,
    /// `max.socket.request.bytes` (104857600).
    pub max_socket_request_bytes: u32,
    /// `monitoring.period.secs` (600).
    pub monitoring_period_secs: u32,
    /// `log.dir` (required).
    pub log_dir: String,
    /// `num.partitions` (1).
    pub num_partitions: u32,
    /// `topic.partition.count.map` (`t1:8,t2:16`).
    pub topic_partition_count: BTreeMap<TopicName, u32>,
    /// `log.file.size` (1073741824).
    pub log_file_bytes: u32,
    /// `topic.log.file.size` (0.7.2).
    pub topic_log_file_bytes: BTreeMap<TopicName, u32>,
    /// `log.roll.hours` (168; 0.7.2).
    pub log_roll_hours: u32,
    /// `topic.log.roll.hours` (0.7.2).
    pub topic_log_roll_hours: BTreeMap<TopicName, u32>,
    /// `log.flush.interval`: messages between forced flushes (500).
    pub log_flush_interval_messages: u32,
    /// `log.default.flush.scheduler.interval.ms` (3000).
    pub log_flush_scheduler_interval_ms: u32,
    /// `log.default.flush.interval.ms` (defaults to the scheduler interval).
    pub log_flush_interval_ms: u32,
    /// `topic.flush.intervals.ms`.
    pub topic_flush_interval_ms: BTreeMap<TopicName, u32>,
    /// `log.retention.hours` (168).
    pub log_retention_hours: u32,
    /// `topic.log.retention.hours`.
    pub topic_log_retention_hours: BTreeMap<TopicName, u32>,
    /// `log.retention.size` in bytes; -1 (the default) turns size retention off.
    pub log_retention_bytes: i64,
    /// `topic.log.retention.size` (0.7.2).
    pub topic_log_retention_bytes: BTreeMap<TopicName, i64>,
    /// `log.cleanup.interval.mins` (10).
    pub log_cleanup_interval_mins: u32,
    /// `max.message.size` (1000000; checked by the broker from 0.7.2).
    pub max_message_bytes: u32,
    /// `max.topic.name.length` (255; names are never longer than 255 here).
    pub max_topic_name_bytes: u32,
    /// `acks.flush.delay.ms` (5; Tributary): the longest a flush for waiting acknowledgements
    /// waits for requests already being appended to join it (group commit).
    pub acks_flush_delay_ms: u32,
    /// `fetch.zero.copy` (true; Tributary): serve bytes already checked in this process with
    /// sendfile; false re-reads and re-checks every served byte on every fetch.
    pub fetch_zero_copy: bool,
    /// `metrics.port` (unset; Tributary): serve Prometheus metrics over HTTP on this port
    /// (`/metrics`); unset collects nothing. 0 picks a free port (tests).
    pub metrics_port: Option<u16>,
    /// `metrics.host` (Tributary): the address the metrics endpoint binds. Unset: loopback
    /// (127.0.0.1) when the broker has an SSL listener, unless the endpoint authenticates its
    /// scrapers (`metrics.ssl` with `ssl.client.auth=required`); else `hostname` (every
    /// interface when that is unset); see [`super::MetricsBind`].
    pub metrics_host: Option<String>,
    /// `metrics.ssl` (false; Tributary): serve the metrics endpoint over HTTPS with the SSL
    /// listener's certificate and `ssl.client.auth` (so Prometheus can be made to present a
    /// certificate). Needs an SSL listener.
    pub metrics_ssl: bool,
    /// `max.connections.per.ip` (2147483647; Kafka 0.8.2's name): connections one client
    /// address may hold open, both listeners together; one more is closed at once.
    pub max_connections_per_ip: u32,
    /// `max.connections.per.ip.overrides` (Kafka 0.8.2's name): `address:count,...`, limits of
    /// particular addresses (IP addresses only; 0 refuses an address).
    pub max_connections_per_ip_overrides: BTreeMap<std::net::IpAddr, u32>,
    /// `listeners` and `ssl.*` (Tributary): where the broker listens, what each listener
    /// speaks, and the SSL listener's TLS settings. Without `listeners`, plaintext on
    /// `hostname:port` as in 0.7.
    pub listeners: Listeners,
    /// `cluster.name` (unset; Tributary): this cluster's readable name, recorded with its
    /// identity in ZooKeeper by the first broker that has one; a broker given another name than
    /// the recorded one refuses to start.
    pub cluster_name: Option<ClusterName>,
    /// `enable.zookeeper` (true).
    pub enable_zookeeper: bool,
    /// `zk.connect`; required when `enable.zookeeper` is true.
    pub zk_connect: Option<ZkConnect>,
    /// The other `zk.*` keys.
    pub zk: ZkConfig,
    /// Replica mode (`replica.*`, Tributary): set when `replica.source.zk.connect` is.
    pub replica: Option<ReplicaConfig>,
    /// Keys Tributary does not know, kept as they were.
    pub unknown: BTreeMap<String, String>,
}

impl BrokerConfig {
    /// Reads a broker configuration, warning (through `tracing`) about unknown keys.
    pub fn from_properties(props: &Properties) -> Result<Self, ConfigError> {
        let mut f = Fields::new(props, ConfigKind::Broker);
        let scheduler_ms = f.int("log.default.flush.scheduler.interval.ms", 3000, 1..=I32_MAX)?;
        let config = BrokerConfig {
            broker_id: f.required_int("brokerid", 0..=I32_MAX)?,
            hostname: f.string("hostname"),
            port: f.int("port", 6667, 0..=65535)?,
            advertised_host: f.string("advertised.host.name"),
            advertised_port: f.optional_int("advertised.port", 1..=65535)?,
            num_threads: f.optional_int("num.threads", 1..=I32_MAX)?,
            socket_send_buffer_bytes: f.int("socket.send.buffer", 102_400, 1..=I32_MAX)?,
            socket_receive_buffer_bytes: f.int("socket.receive.buffer", 102_400, 1..=I32_MAX)?,
            max_socket_request_bytes: f.int(
                "max.socket.request.bytes",
                104_857_600,
                1..=I32_MAX,
            )?,
            monitoring_period_secs: f.int("monitoring.period.secs", 600, 1..=I32_MAX)?,
            log_dir: f.required_string("log.dir")?,
            num_partitions: f.int("num.partitions", 1, 1..=PARTITIONS_PER_TOPIC_MAX)?,
            topic_partition_count: f
                .topic_map("topic.partition.count.map", 1..=PARTITIONS_PER_TOPIC_MAX),
            log_file_bytes: f.int("log.file.size", 1_073_741_824, LOG_FILE_BYTES_MIN..=I32_MAX)?,
            topic_log_file_bytes: f.topic_map("topic.log.file.size", LOG_FILE_BYTES_MIN..=I32_MAX),
            log_roll_hours: f.int("log.roll.hours", 168, 1..=I32_MAX)?,
            topic_log_roll_hours: f.topic_map("topic.log.roll.hours", 1..=I32_MAX),
            log_flush_interval_messages: f.int("log.flush.interval", 500, 1..=I32_MAX)?,
            log_flush_scheduler_interval_ms: scheduler_ms,
            log_flush_interval_ms: f.int(
                "log.default.flush.interval.ms",
                scheduler_ms,
                1..=I32_MAX,
            )?,
            topic_flush_interval_ms: f.topic_map("topic.flush.intervals.ms", 1..=I32_MAX),
            log_retention_hours: f.int("log.retention.hours", 168, 1..=I32_MAX)?,
            topic_log_retention_hours: f.topic_map("topic.log.retention.hours", 1..=I32_MAX),
            log_retention_bytes: f.int("log.retention.size", -1, -1..=i64::MAX)?,
            topic_log_retention_bytes: f.topic_map("topic.log.retention.size", 1..=i64::MAX),
            log_cleanup_interval_mins: f.int("log.cleanup.interval.mins", 10, 1..=I32_MAX)?,
            max_message_bytes: f.int("max.message.size", 1_000_000, 0..=I32_MAX)?,
            max_topic_name_bytes: f.int(
                "max.topic.name.length",
                255,
                // 0.7.2's range; names past TOPIC_NAME_BYTES_MAX (249) are refused whatever
                // this says (docs/compatibility.md).
                1..=255,
            )?,
            acks_flush_delay_ms: f.int("acks.flush.delay.ms", 5, 0..=60_000)?,
            fetch_zero_copy: f.bool("fetch.zero.copy", true)?,
            metrics_port: f.optional_int("metrics.port", 0..=65535)?,
            metrics_host: f.string("metrics.host"),
            metrics_ssl: f.bool("metrics.ssl", false)?,
            max_connections_per_ip: f.int(
                "max.connections.per.ip",
                i32::MAX.unsigned_abs(),
                1..=I32_MAX,
            )?,
            max_connections_per_ip_overrides: read_connection_overrides(&mut f)?,
            listeners: Listeners {
                specs: Vec::new(),
                tls: None,
                advertised: Vec::new(),
            },
            cluster_name: read_cluster_name(&mut f)?,
            enable_zookeeper: f.bool("enable.zookeeper", true)?,
            zk_connect: None,
            zk: ZkConfig::read(&mut f)?,
            replica: None,
            unknown: BTreeMap::new(),
        };
        let listeners = listeners::read(&mut f, config.hostname.as_deref(), config.port)?;
        if config.metrics_ssl && listeners.tls.is_none() {
            return Err(f.error(
                "metrics.ssl",
                "true needs an SSL listener (listeners=...,SSL://host:port) whose certificate it serves",
            ));
        }
        let replica = replica::read(&mut f, config.broker_id)?;
        let zk_connect = match config.enable_zookeeper {
            true => Some(require_connect(&mut f, "when enable.zookeeper=true")?),
            false => read_connect(&mut f)?,
        };
        Ok(BrokerConfig {
            listeners,
            zk_connect,
            replica,
            unknown: f.warn_unknown(),
            ..config
        })
    }

    /// Partitions of `topic` on this broker: the map's override, else `num.partitions`.
    pub fn partitions_for(&self, topic: &TopicName) -> u32 {
        self.topic_partition_count
            .get(topic)
            .copied()
            .unwrap_or(self.num_partitions)
    }

    /// Flush interval of `topic` in ms: the per-topic override, else the default.
    pub fn flush_interval_ms_for(&self, topic: &TopicName) -> u32 {
        self.topic_flush_interval_ms
            .get(topic)
            .copied()
            .unwrap_or(self.log_flush_interval_ms)
    }

    /// Retention of `topic` in hours: the per-topic override, else the default.
    pub fn retention_hours_for(&self, topic: &TopicName) -> u32 {
        self.topic_log_retention_hours
            .get(topic)
            .copied()
            .unwrap_or(self.log_retention_hours)
    }

    /// Size retention of `topic` in bytes, `None` when off.
    pub fn retention_bytes_for(&self, topic: &TopicName) -> Option<u64> {
        let limit = self
            .topic_log_retention_bytes
            .get(topic)
            .copied()
            .unwrap_or(self.log_retention_bytes);
        u64::try_from(limit).ok()
    }

    /// Segment size of `topic` in bytes: the per-topic override, else `log.file.size`.
    pub fn file_bytes_for(&self, topic: &TopicName) -> u32 {
        self.topic_log_file_bytes
            .get(topic)
            .copied()
            .unwrap_or(self.log_file_bytes)
    }

    /// Roll age of `topic` in hours: the per-topic override, else `log.roll.hours`.
    pub fn roll_hours_for(&self, topic: &TopicName) -> u32 {
        self.topic_log_roll_hours
            .get(topic)
            .copied()
            .unwrap_or(self.log_roll_hours)
    }
}

/// Reads `cluster.name`, if set.
fn read_cluster_name(f: &mut Fields<'_>) -> Result<Option<ClusterName>, ConfigError> {
    match f.string("cluster.name") {
        Some(raw) => ClusterName::parse(&raw)
            .map(Some)
            .map_err(|e| f.error("cluster.name", e)),
        None => Ok(None),
    }
}

/// Reads `max.connections.per.ip.overrides`: `address:count` entries separated by commas, an
/// IPv6 address in brackets (`[fd00::7]:5`: bare, `fd00::1:7` could be either).
fn read_connection_overrides(
    f: &mut Fields<'_>,
) -> Result<BTreeMap<std::net::IpAddr, u32>, ConfigError> {
    const KEY: &str = "max.connections.per.ip.overrides";
    let mut overrides = BTreeMap::new();
    let Some(raw) = f.string(KEY) else {
        return Ok(overrides);
    };
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let parsed = entry.rsplit_once(':').and_then(|(address, count)| {
            let address = match address.strip_prefix('[').and_then(|a| a.strip_suffix(']')) {
                Some(bracketed) => bracketed,
                None if address.contains(':') => return None,
                None => address,
            };
            let count = super::fields::parse_java_int(count.trim())
                .filter(|c| (0..=I32_MAX).contains(c))
                .and_then(|c| u32::try_from(c).ok())?;
            Some((address.trim().parse::<std::net::IpAddr>().ok()?, count))
        });
        match parsed {
            Some((address, count)) => {
                if overrides.insert(address, count).is_some() {
                    return Err(f.error(KEY, format!("{address} is given twice")));
                }
            }
            _ => {
                return Err(f.error(
                    KEY,
                    format!("entry \"{entry}\": expected <IP address>:<count of 0 or more>, e.g. 10.0.0.7:50 or [fd00::7]:50 (host names are not resolved)"),
                ))
            }
        }
    }
    Ok(overrides)
}
