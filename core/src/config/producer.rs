//! `producer.properties`: the producer's settings (0.7's `ProducerConfig`).

use std::collections::BTreeMap;
use std::fmt;

use super::error::ConfigError;
use super::fields::Fields;
use super::properties::Properties;
use super::reference::ConfigKind;
use super::tls_client::{self, TlsClientSettings};
use super::zk::{read_connect, ZkConfig, ZkConnect};
use crate::message::CompressionCodec;
use crate::wire::TopicName;

const I32_MAX: i64 = i32::MAX as i64;

/// One entry of `broker.list`: `id:host:port`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BrokerEndpoint {
    /// The broker id.
    pub id: i32,
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// What is wrong with one `broker.list` entry; every variant keeps the entry as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerEndpointError {
    /// Fewer than three `:`-separated fields.
    NotIdHostPort(String),
    /// The id is not a non-negative integer.
    BadId(String),
    /// The port is not 1 to 65535.
    BadPort(String),
    /// The host is empty.
    NoHost(String),
}

impl fmt::Display for BrokerEndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BrokerEndpointError::NotIdHostPort(entry) => {
                write!(f, "\"{entry}\" is not id:host:port")
            }
            BrokerEndpointError::BadId(entry) => {
                write!(f, "\"{entry}\": broker id must be a non-negative integer")
            }
            BrokerEndpointError::BadPort(entry) => {
                write!(f, "\"{entry}\": port must be 1 to 65535")
            }
            BrokerEndpointError::NoHost(entry) => write!(f, "\"{entry}\" has no host"),
        }
    }
}

impl std::error::Error for BrokerEndpointError {}

impl BrokerEndpoint {
    /// Parses `id:host:port`; the error says what is wrong.
    pub fn parse(entry: &str) -> Result<Self, BrokerEndpointError> {
        let mut parts = entry.trim().splitn(3, ':');
        let (Some(id), Some(host), Some(port)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(BrokerEndpointError::NotIdHostPort(entry.to_string()));
        };
        let id = id.parse::<i32>().ok().filter(|id| *id >= 0);
        let id = id.ok_or_else(|| BrokerEndpointError::BadId(entry.to_string()))?;
        let port = port.parse::<u16>().ok().filter(|p| *p > 0);
        let port = port.ok_or_else(|| BrokerEndpointError::BadPort(entry.to_string()))?;
        if host.is_empty() {
            return Err(BrokerEndpointError::NoHost(entry.to_string()));
        }
        Ok(BrokerEndpoint {
            id,
            host: host.to_string(),
            port,
        })
    }
}

/// How the producer finds brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovery {
    /// `broker.list`: a fixed list; the broker picks the partition (-1).
    BrokerList(Vec<BrokerEndpoint>),
    /// `zk.connect`: live brokers and topic partitions from ZooKeeper.
    ZooKeeper(ZkConnect),
}

/// `producer.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerType {
    /// Each send goes out before it returns.
    Sync,
    /// Sends are queued per broker and dispatched in batches.
    Async,
}

/// What an async send does when the queue is full (`queue.enqueueTimeout.ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueTimeout {
    /// 0 (0.7's default): fail at once. 0.7 drops the message; Tributary returns it to the
    /// caller instead (see docs/compatibility.md).
    Immediate,
    /// Negative: wait for space, however long (what the seed's mirror config asks for).
    Block,
    /// Positive: wait up to this many ms, then fail as `Immediate` does.
    Wait(u32),
}

/// The producer's configuration, with every 0.7 key and its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerConfig {
    /// `broker.list` or `zk.connect` (0.7.0: both set → warning, ZooKeeper wins).
    pub discovery: Discovery,
    /// The `zk.*` session keys.
    pub zk: ZkConfig,
    /// `partitioner.class`, if set (only meaningful with ZooKeeper discovery).
    pub partitioner_class: Option<String>,
    /// `producer.type` (sync).
    pub producer_type: ProducerType,
    /// `compression.codec` (0).
    pub compression_codec: CompressionCodec,
    /// `compressed.topics`: empty means every topic, when a codec is set.
    pub compressed_topics: Vec<TopicName>,
    /// `zk.read.num.retries` (3).
    pub zk_read_num_retries: u32,
    /// `num.retries` (0).
    pub num_retries: u32,
    /// `serializer.class` (kafka.serializer.DefaultEncoder).
    pub serializer_class: String,
    /// `buffer.size` (102400).
    pub buffer_bytes: u32,
    /// `connect.timeout.ms` (5000).
    pub connect_timeout_ms: u32,
    /// `socket.timeout.ms` (30000).
    pub socket_timeout_ms: u32,
    /// `reconnect.interval`: requests per connection (30000).
    pub reconnect_interval_requests: u32,
    /// `reconnect.time.interval.ms` (10000000); `None` when negative (disabled).
    pub reconnect_time_interval_ms: Option<u64>,
    /// `max.message.size` (1000000).
    pub max_message_bytes: u32,
    /// `queue.time` in ms (5000).
    pub queue_time_ms: u32,
    /// `queue.size`: events per broker queue (10000).
    pub queue_size: u32,
    /// `queue.enqueueTimeout.ms` (0).
    pub enqueue_timeout: EnqueueTimeout,
    /// `batch.size` (200).
    pub batch_size: u32,
    /// `callback.handler`, if set.
    pub callback_handler: Option<String>,
    /// `callback.handler.props`, if set.
    pub callback_handler_props: Option<String>,
    /// `event.handler`, if set.
    pub event_handler: Option<String>,
    /// `event.handler.props`, if set.
    pub event_handler_props: Option<String>,
    /// `durable.acks` (false; Tributary): ask brokers to acknowledge each request once its data
    /// is flushed (ACKED_PRODUCE), and report each message's offset.
    pub durable_acks: bool,
    /// `durable.acks.fallback` (false; Tributary): when a broker does not know ACKED_PRODUCE (a
    /// Kafka 0.7 broker), send to it without acknowledgements instead of failing.
    pub durable_acks_fallback: bool,
    /// `security.protocol` with `ssl.*` (Tributary): TLS to the brokers; `None` is plaintext.
    pub tls: Option<TlsClientSettings>,
    /// Keys Tributary does not know, kept as they were.
    pub unknown: BTreeMap<String, String>,
}

impl ProducerConfig {
    /// Reads a producer configuration, warning (through `tracing`) about unknown keys.
    pub fn from_properties(props: &Properties) -> Result<Self, ConfigError> {
        let mut f = Fields::new(props, ConfigKind::Producer);
        let zk = ZkConfig::read(&mut f)?;
        let partitioner_class = f.string("partitioner.class");
        let discovery = read_discovery(&mut f, partitioner_class.is_some())?;
        let codec_id: u8 = f.int("compression.codec", 0, 0..=255)?;
        let compression_codec = CompressionCodec::from_id(codec_id).ok_or_else(|| {
            f.error(
                "compression.codec",
                format!("unknown codec {codec_id}; expected 0 (none), 1 (gzip) or 2 (snappy)"),
            )
        })?;
        let enqueue_ms: i64 = f.int("queue.enqueueTimeout.ms", 0, i64::MIN..=I32_MAX)?;
        let reconnect_ms: i64 = f.int(
            "reconnect.time.interval.ms",
            10_000_000,
            i64::MIN..=i64::MAX,
        )?;
        let config = ProducerConfig {
            discovery,
            zk,
            partitioner_class,
            producer_type: read_producer_type(&mut f)?,
            compression_codec,
            compressed_topics: f.topic_list("compressed.topics")?,
            zk_read_num_retries: f.int("zk.read.num.retries", 3, 0..=I32_MAX)?,
            num_retries: f.int("num.retries", 0, 0..=I32_MAX)?,
            serializer_class: f
                .string("serializer.class")
                .unwrap_or_else(|| "kafka.serializer.DefaultEncoder".into()),
            buffer_bytes: f.int("buffer.size", 102_400, 1..=I32_MAX)?,
            connect_timeout_ms: f.int("connect.timeout.ms", 5000, 0..=I32_MAX)?,
            socket_timeout_ms: f.int("socket.timeout.ms", 30_000, 0..=I32_MAX)?,
            reconnect_interval_requests: f.int("reconnect.interval", 30_000, 1..=I32_MAX)?,
            reconnect_time_interval_ms: u64::try_from(reconnect_ms).ok(),
            max_message_bytes: f.int("max.message.size", 1_000_000, 0..=I32_MAX)?,
            queue_time_ms: f.int("queue.time", 5000, 0..=I32_MAX)?,
            queue_size: f.int("queue.size", 10_000, 1..=I32_MAX)?,
            enqueue_timeout: match enqueue_ms {
                0 => EnqueueTimeout::Immediate,
                ms if ms < 0 => EnqueueTimeout::Block,
                ms => EnqueueTimeout::Wait(u32::try_from(ms).unwrap_or(u32::MAX)),
            },
            batch_size: f.int("batch.size", 200, 1..=I32_MAX)?,
            callback_handler: f.string("callback.handler"),
            callback_handler_props: f.string("callback.handler.props"),
            event_handler: f.string("event.handler"),
            event_handler_props: f.string("event.handler.props"),
            durable_acks: f.bool("durable.acks", false)?,
            durable_acks_fallback: f.bool("durable.acks.fallback", false)?,
            tls: tls_client::read(&mut f, tls_client::CLIENT_KEYS)?,
            unknown: BTreeMap::new(),
        };
        Ok(ProducerConfig {
            unknown: f.warn_unknown(),
            ..config
        })
    }

    /// Whether messages to `topic` are compressed (`compression.codec` and `compressed.topics`).
    pub fn codec_for(&self, topic: &TopicName) -> CompressionCodec {
        let listed = self.compressed_topics.is_empty() || self.compressed_topics.contains(topic);
        if listed {
            self.compression_codec
        } else {
            CompressionCodec::None
        }
    }
}

fn read_producer_type(f: &mut Fields<'_>) -> Result<ProducerType, ConfigError> {
    match f.string("producer.type").as_deref() {
        None | Some("sync") => Ok(ProducerType::Sync),
        Some("async") => Ok(ProducerType::Async),
        Some(other) => Err(f.error(
            "producer.type",
            format!("expected sync or async, found \"{other}\""),
        )),
    }
}

fn read_discovery(f: &mut Fields<'_>, partitioner_set: bool) -> Result<Discovery, ConfigError> {
    let zk_connect = read_connect(f)?;
    let broker_list = match f.string("broker.list") {
        Some(raw) => Some(
            raw.split(',')
                .filter(|e| !e.trim().is_empty())
                .map(BrokerEndpoint::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|p| f.error("broker.list", p))?,
        ),
        None => None,
    };
    match (broker_list, zk_connect) {
        (Some(_), Some(connect)) => {
            // 0.7.0 accepts both and uses ZooKeeper; 0.7.1 refuses. We accept, as 0.7.0 did.
            tracing::warn!(
                "{}: both broker.list and zk.connect are set; using zk.connect, as Kafka 0.7.0 does",
                f.error("broker.list", "conflict")
            );
            Ok(Discovery::ZooKeeper(connect))
        }
        (Some(_), None) if partitioner_set => Err(f.error(
            "partitioner.class",
            "cannot be used with broker.list (the broker picks the partition); remove one of them",
        )),
        (Some(list), None) if list.is_empty() => {
            Err(f.error("broker.list", "is empty; expected id:host:port,..."))
        }
        (Some(list), None) => Ok(Discovery::BrokerList(list)),
        (None, Some(connect)) => Ok(Discovery::ZooKeeper(connect)),
        (None, None) => Err(f.error(
            "zk.connect",
            "neither zk.connect nor broker.list is set; set one of them",
        )),
    }
}
