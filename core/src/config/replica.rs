//! Replica mode (Tributary): a broker whose `server.properties` names a source cluster copies
//! the partitions of one source broker byte for byte, at the same offsets.

use super::error::ConfigError;
use super::fields::Fields;
use super::tls_client::{self, TlsClientSettings};
use super::zk::ZkConnect;
use super::zk_security;
use crate::consumer::{FilterKind, TopicPattern};

const I32_MAX: i64 = i32::MAX as i64;

/// What a replica broker copies, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// `replica.source.zk.connect`: the source cluster's ZooKeeper (with its chroot, if any).
    pub source: ZkConnect,
    /// `replica.source.brokerid`: the source broker whose partitions are copied (default: this
    /// broker's own `brokerid`).
    pub source_broker_id: i32,
    /// `replica.topics.whitelist` / `replica.topics.blacklist` (0.7.1's regex rules; every
    /// topic when neither is set).
    pub topics: TopicPattern,
    /// `replica.fetch.size`: bytes asked per partition and fetch (1048576); a message larger
    /// than this is fetched with a larger size, up to `max.message.size` and its headers.
    pub fetch_bytes: u32,
    /// `replica.fetch.backoff.ms`: the pause after a round that brought nothing (100).
    pub fetch_backoff_ms: u32,
    /// `replica.socket.timeout.ms`: the deadline of every request to the source (30000).
    pub socket_timeout_ms: u32,
    /// `replica.offsets.sync.groups`: consumer groups (regex, whole name) whose source offsets
    /// are copied to this cluster's ZooKeeper, clamped to what the replica holds; none unset.
    pub offsets_sync_groups: Option<TopicPattern>,
    /// `replica.offsets.sync.interval.ms`: how often offsets are synced (1000).
    pub offsets_sync_interval_ms: u32,
    /// `replica.security.protocol` with `replica.ssl.*`: TLS to the source brokers; `None` is
    /// plaintext.
    pub tls: Option<TlsClientSettings>,
}

/// Reads the replica keys; `None` when `replica.source.zk.connect` is not set (the other
/// `replica.*` keys are then read, so they are known, and said to have no effect).
pub(crate) fn read(
    f: &mut Fields<'_>,
    broker_id: i32,
) -> Result<Option<ReplicaConfig>, ConfigError> {
    let source_security = zk_security::read(f, zk_security::REPLICA_SOURCE_KEYS)?;
    let source_secured = !source_security.is_plain();
    let source = match f.string("replica.source.zk.connect") {
        Some(raw) => Some(ZkConnect {
            security: Box::new(source_security),
            ..ZkConnect::parse(&raw).map_err(|p| f.error("replica.source.zk.connect", p))?
        }),
        None => None,
    };
    let whitelist = f.string("replica.topics.whitelist");
    let blacklist = f.string("replica.topics.blacklist");
    let source_broker_id = f.optional_int("replica.source.brokerid", 0..=I32_MAX)?;
    let fetch_bytes = f.optional_int("replica.fetch.size", 1024..=I32_MAX)?;
    let fetch_backoff_ms = f.optional_int("replica.fetch.backoff.ms", 1..=I32_MAX)?;
    let socket_timeout_ms = f.optional_int("replica.socket.timeout.ms", 1..=I32_MAX)?;
    let sync_groups = f.string("replica.offsets.sync.groups");
    let sync_interval_ms = f.optional_int("replica.offsets.sync.interval.ms", 1..=I32_MAX)?;
    let tls = tls_client::read(f, tls_client::REPLICA_KEYS)?;
    let Some(source) = source else {
        let set = [
            whitelist.is_some(),
            blacklist.is_some(),
            source_broker_id.is_some(),
            fetch_bytes.is_some(),
            fetch_backoff_ms.is_some(),
            socket_timeout_ms.is_some(),
            sync_groups.is_some(),
            sync_interval_ms.is_some(),
            tls.is_some(),
            source_secured,
        ];
        if set.contains(&true) {
            tracing::warn!("replica.* keys are set but replica.source.zk.connect is not: this broker is not a replica and ignores them");
        }
        return Ok(None);
    };
    let topics = match (whitelist, blacklist) {
        (Some(_), Some(_)) => {
            return Err(f.error(
                "replica.topics.blacklist",
                "replica.topics.whitelist is also set; a replica takes a whitelist or a blacklist, not both",
            ))
        }
        (Some(w), None) => TopicPattern::new(FilterKind::Whitelist, &w)
            .map_err(|e| f.error("replica.topics.whitelist", e.to_string()))?,
        (None, Some(b)) => TopicPattern::new(FilterKind::Blacklist, &b)
            .map_err(|e| f.error("replica.topics.blacklist", e.to_string()))?,
        (None, None) => TopicPattern::new(FilterKind::Whitelist, ".*")
            .map_err(|e| f.error("replica.topics.whitelist", e.to_string()))?,
    };
    Ok(Some(ReplicaConfig {
        source,
        source_broker_id: source_broker_id.unwrap_or(broker_id),
        topics,
        fetch_bytes: fetch_bytes.unwrap_or(1_048_576),
        fetch_backoff_ms: fetch_backoff_ms.unwrap_or(100),
        socket_timeout_ms: socket_timeout_ms.unwrap_or(30_000),
        offsets_sync_groups: match sync_groups {
            Some(g) => Some(
                TopicPattern::new(FilterKind::Whitelist, &g)
                    .map_err(|e| f.error("replica.offsets.sync.groups", e.to_string()))?,
            ),
            None => None,
        },
        offsets_sync_interval_ms: sync_interval_ms.unwrap_or(1000),
        tls,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::{BrokerConfig, Properties};

    fn broker(extra: &str) -> Result<BrokerConfig, String> {
        let text = format!("brokerid=3\nlog.dir=/tmp/x\nzk.connect=localhost:2181\n{extra}");
        BrokerConfig::from_properties(&Properties::parse("t", &text).unwrap())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_broker_is_a_replica_only_with_a_source_and_copies_its_own_id_by_default() {
        assert_eq!(broker("replica.fetch.size=4096\n").unwrap().replica, None);
        let replica = broker("replica.source.zk.connect=src:2181/kafka\n")
            .unwrap()
            .replica
            .unwrap();
        assert_eq!(replica.source_broker_id, 3);
        assert_eq!(replica.source.to_string(), "src:2181/kafka");
        assert_eq!(replica.fetch_bytes, 1_048_576);
        assert!(replica.topics.allows("anything"));
    }

    #[test]
    fn the_topic_filter_follows_0_7_1_rules_and_takes_one_list() {
        let white = broker(
            "replica.source.zk.connect=src:2181\nreplica.topics.whitelist=orders, clicks.*\n",
        )
        .unwrap()
        .replica
        .unwrap();
        assert!(white.topics.allows("orders") && white.topics.allows("clicks-eu"));
        assert!(!white.topics.allows("orders2"));
        let black = broker("replica.source.zk.connect=src:2181\nreplica.topics.blacklist=tmp.*\nreplica.source.brokerid=9\n")
            .unwrap()
            .replica
            .unwrap();
        assert!(!black.topics.allows("tmp1") && black.topics.allows("orders"));
        assert_eq!(black.source_broker_id, 9);
        let both = broker("replica.source.zk.connect=src:2181\nreplica.topics.whitelist=a\nreplica.topics.blacklist=b\n")
            .unwrap_err();
        assert!(
            both.contains("replica.topics.blacklist") && both.contains("not both"),
            "{both}"
        );
        let bad =
            broker("replica.source.zk.connect=src:2181\nreplica.topics.whitelist=(\n").unwrap_err();
        assert!(bad.contains("replica.topics.whitelist"), "{bad}");
    }
}
