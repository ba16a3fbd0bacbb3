//! `consumer.properties`: the high-level consumer's settings (0.7's `ConsumerConfig`), including
//! the 0.7.0 embedded mirror's topic filter.

use std::collections::BTreeMap;

use super::error::ConfigError;
use super::fields::Fields;
use super::properties::Properties;
use super::reference::ConfigKind;
use super::tls_client::{self, TlsClientSettings};
use super::zk::{require_connect, ZkConfig, ZkConnect};
use crate::group_id::GroupId;
use crate::wire::TopicName;

const I32_MAX: i64 = i32::MAX as i64;

/// `autooffset.reset`: where to start when the stored offset is missing or out of range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AutoOffsetReset {
    /// `smallest` (default): the earliest offset.
    Smallest,
    /// `largest`: the latest offset.
    Largest,
    /// Anything else: 0.7 accepts the file and raises an error to the application when a reset
    /// is needed. The value is kept to name it in that error.
    Raise(String),
}

/// Which source topics a mirror copies (`mirror.topics.whitelist` / `.blacklist`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicFilter {
    /// Neither list set: every topic.
    All,
    /// Only these exact names.
    Whitelist(Vec<TopicName>),
    /// Every topic but these exact names.
    Blacklist(Vec<TopicName>),
}

impl TopicFilter {
    /// Whether `topic` passes the filter.
    pub fn allows(&self, topic: &TopicName) -> bool {
        match self {
            TopicFilter::All => true,
            TopicFilter::Whitelist(names) => names.contains(topic),
            TopicFilter::Blacklist(names) => !names.contains(topic),
        }
    }
}

/// The embedded mirror's options, read from the consumer configuration (0.7.0 style).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorOptions {
    /// The topic filter; setting both lists is refused (the seed: "It is invalid to specify both").
    pub topics: TopicFilter,
    /// `mirror.consumer.numthreads`: streams per mirrored topic (1).
    pub consumer_threads: u32,
    /// `mirror.commit.interval.ms` (1000; Tributary): how often the mirror commits source offsets
    /// up to what the mirror cluster has acknowledged.
    pub commit_interval_ms: u32,
    /// `mirror.gap.policy` (`skip`; Tributary): when source data was deleted before the mirror
    /// copied it, `skip` reports the range and goes on from the earliest offset; `stop` stops
    /// that partition.
    pub stop_on_gap: bool,
    /// `mirror.unowned.alarm.ms` (30000; Tributary): how long a source partition the filter
    /// covers may have no live owner in the mirror's group before the mirror logs an error (once
    /// a minute), counts it in `tributary_mirror_unowned_partitions` and rejoins the group.
    pub unowned_alarm_ms: u32,
    /// `mirror.rename.topics` (`false`; Tributary) with `mirror.rename.pattern`
    /// (`{source}.{topic}`): the rule naming mirrored topics in the mirror cluster (active-active
    /// mirroring); `None` keeps names, as 0.7.
    pub rename: Option<crate::mirror::rename::RenameRule>,
    /// `mirror.preserve.partitions` (`false`; Tributary): each source partition is copied into
    /// one mirror partition, in sets the mirror cluster appends at most once each, recording
    /// how far each source partition's copy has reached (no second copy of a set sent again);
    /// `false` spreads messages over the mirror partitions as 0.7 does, and a set sent again
    /// after a failure may be copied twice. Off by default until a source partition whose
    /// offsets start again lower (its log lost) is recognised: its new messages would be taken
    /// for ones the mirror holds.
    pub preserve_partitions: bool,
    /// `mirror.offsets.sync.groups` (unset; Tributary): consumer groups (regex, whole name)
    /// whose committed source offsets the mirror translates into the mirror cluster's
    /// partitions and writes there (needs `mirror.preserve.partitions=true`).
    pub offsets_sync_groups: Option<crate::consumer::TopicPattern>,
    /// `mirror.offsets.sync.interval.ms` (1000; Tributary): how often.
    pub offsets_sync_interval_ms: u32,
}

/// The most fetch connections a consumer keeps to one broker (`num.consumer.fetchers`).
pub const FETCHERS_PER_BROKER_MAX: u32 = 64;

/// The consumer's configuration, with every 0.7 key and its 0.7.2 default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// `groupid` (required).
    pub group_id: GroupId,
    /// `consumerid`, if set (replaces the generated part of the consumer id).
    pub consumer_id: Option<String>,
    /// `zk.connect` (required): the source cluster's ZooKeeper, for a mirror.
    pub zk_connect: ZkConnect,
    /// The other `zk.*` keys.
    pub zk: ZkConfig,
    /// `socket.timeout.ms` (30000).
    pub socket_timeout_ms: u32,
    /// `socket.buffersize` (65536); 0 (Tributary) leaves the receive buffer to the kernel's
    /// autotuning.
    pub socket_buffer_bytes: u32,
    /// `fetch.size` per partition per fetch (1048576).
    pub fetch_bytes: u32,
    /// `num.consumer.fetchers` (1; Tributary, named as in Kafka 0.8): fetch connections per
    /// broker, each fetching its own share of the partitions, so that this many fetches are in
    /// flight to one broker at once.
    pub fetchers_per_broker: u32,
    /// `fetcher.backoff.ms`, or 0.7.0's `backoff.increment.ms` (1000).
    pub fetcher_backoff_ms: u32,
    /// `autocommit.enable` (true).
    pub autocommit_enable: bool,
    /// `autocommit.interval.ms` (10000).
    pub autocommit_interval_ms: u32,
    /// `queuedchunks.max` per stream (10).
    pub queued_chunks_max: u32,
    /// `autooffset.reset` (smallest).
    pub auto_offset_reset: AutoOffsetReset,
    /// `consumer.timeout.ms`; `None` (the default -1) waits forever.
    pub consumer_timeout_ms: Option<u32>,
    /// `rebalance.retries.max` (4).
    pub rebalance_retries_max: u32,
    /// `rebalance.backoff.ms` (defaults to `zk.synctime.ms`).
    pub rebalance_backoff_ms: u32,
    /// `shallowiterator.enable` (false).
    pub shallow_iterator_enable: bool,
    /// The embedded mirror's options.
    pub mirror: MirrorOptions,
    /// `security.protocol` with `ssl.*` (Tributary): TLS to the brokers; `None` is plaintext.
    pub tls: Option<TlsClientSettings>,
    /// Keys Tributary does not know, kept as they were.
    pub unknown: BTreeMap<String, String>,
}

impl ConsumerConfig {
    /// Reads a consumer configuration, warning (through `tracing`) about unknown keys.
    pub fn from_properties(props: &Properties) -> Result<Self, ConfigError> {
        let mut f = Fields::new(props, ConfigKind::Consumer);
        let zk = ZkConfig::read(&mut f)?;
        let zk_connect =
            require_connect(&mut f, "for a consumer (the source cluster's ZooKeeper)")?;
        let timeout: i64 = f.int("consumer.timeout.ms", -1, i64::MIN..=I32_MAX)?;
        let config = ConsumerConfig {
            group_id: read_group_id(&mut f)?,
            consumer_id: f.string("consumerid"),
            zk_connect,
            socket_timeout_ms: f.int("socket.timeout.ms", 30_000, 0..=I32_MAX)?,
            socket_buffer_bytes: f.int("socket.buffersize", 65_536, 0..=I32_MAX)?,
            fetch_bytes: f.int("fetch.size", 1_048_576, 1..=I32_MAX)?,
            fetchers_per_broker: f.int(
                "num.consumer.fetchers",
                1,
                1..=i64::from(FETCHERS_PER_BROKER_MAX),
            )?,
            fetcher_backoff_ms: read_backoff(&mut f)?,
            autocommit_enable: f.bool("autocommit.enable", true)?,
            autocommit_interval_ms: f.int("autocommit.interval.ms", 10_000, 1..=I32_MAX)?,
            queued_chunks_max: f.int("queuedchunks.max", 10, 1..=I32_MAX)?,
            auto_offset_reset: match f.string("autooffset.reset").as_deref() {
                None | Some("smallest") => AutoOffsetReset::Smallest,
                Some("largest") => AutoOffsetReset::Largest,
                Some(other) => AutoOffsetReset::Raise(other.to_string()),
            },
            consumer_timeout_ms: u32::try_from(timeout).ok(),
            rebalance_retries_max: f.int("rebalance.retries.max", 4, 1..=I32_MAX)?,
            rebalance_backoff_ms: f.int("rebalance.backoff.ms", zk.sync_time_ms, 0..=I32_MAX)?,
            shallow_iterator_enable: f.bool("shallowiterator.enable", false)?,
            mirror: read_mirror(&mut f)?,
            tls: tls_client::read(&mut f, tls_client::CLIENT_KEYS)?,
            zk,
            unknown: BTreeMap::new(),
        };
        Ok(ConsumerConfig {
            unknown: f.warn_unknown(),
            ..config
        })
    }
}

/// `groupid`, refused when it could not be one ZooKeeper path component.
fn read_group_id(f: &mut Fields<'_>) -> Result<GroupId, ConfigError> {
    let raw = f.required_string("groupid")?;
    raw.parse()
        .map_err(|e: crate::group_id::GroupIdError| f.error("groupid", e.to_string()))
}

/// 0.7.1 renamed `backoff.increment.ms` to `fetcher.backoff.ms`; both are accepted, the new one
/// winning when both are set.
fn read_backoff(f: &mut Fields<'_>) -> Result<u32, ConfigError> {
    let old: u32 = f.int("backoff.increment.ms", 1000, 0..=I32_MAX)?;
    f.int("fetcher.backoff.ms", old, 0..=I32_MAX)
}

fn read_mirror(f: &mut Fields<'_>) -> Result<MirrorOptions, ConfigError> {
    let whitelist = f.topic_list("mirror.topics.whitelist")?;
    let blacklist = f.topic_list("mirror.topics.blacklist")?;
    let topics = match (whitelist.is_empty(), blacklist.is_empty()) {
        (true, true) => TopicFilter::All,
        (false, true) => TopicFilter::Whitelist(whitelist),
        (true, false) => TopicFilter::Blacklist(blacklist),
        (false, false) => {
            return Err(f.error(
                "mirror.topics.blacklist",
                "mirror.topics.whitelist is also set; a mirror takes a whitelist or a blacklist, not both",
            ))
        }
    };
    let stop_on_gap = match f.string("mirror.gap.policy").as_deref() {
        None | Some("skip") => false,
        Some("stop") => true,
        Some(other) => {
            return Err(f.error(
                "mirror.gap.policy",
                format!("expected skip or stop, found \"{other}\""),
            ))
        }
    };
    Ok(MirrorOptions {
        topics,
        consumer_threads: f.int("mirror.consumer.numthreads", 1, 1..=I32_MAX)?,
        commit_interval_ms: f.int("mirror.commit.interval.ms", 1000, 1..=I32_MAX)?,
        stop_on_gap,
        unowned_alarm_ms: f.int("mirror.unowned.alarm.ms", 30_000, 1000..=I32_MAX)?,
        rename: read_rename(f)?,
        preserve_partitions: f.bool("mirror.preserve.partitions", false)?,
        offsets_sync_groups: match f.string("mirror.offsets.sync.groups") {
            Some(g) => Some(
                crate::consumer::TopicPattern::new(crate::consumer::FilterKind::Whitelist, &g)
                    .map_err(|e| f.error("mirror.offsets.sync.groups", e.to_string()))?,
            ),
            None => None,
        },
        offsets_sync_interval_ms: f.int("mirror.offsets.sync.interval.ms", 1000, 1..=I32_MAX)?,
    })
}

fn read_rename(
    f: &mut Fields<'_>,
) -> Result<Option<crate::mirror::rename::RenameRule>, ConfigError> {
    use crate::mirror::rename::{RenameRule, DEFAULT_PATTERN};
    let enabled = f.bool("mirror.rename.topics", false)?;
    let pattern = f.string("mirror.rename.pattern");
    let rule = RenameRule::parse(pattern.as_deref().unwrap_or(DEFAULT_PATTERN))
        .map_err(|e| f.error("mirror.rename.pattern", e))?;
    Ok(enabled.then_some(rule))
}
