//! Which clusters a mirror copies from and into, by identity (`/cluster/id`, see
//! [`core::identity`](tributary_core::identity)), never by address: a mirror whose target is one
//! of its sources — through any alias, IP, chroot spelling or broker list — is refused at start.
//!
//! A source's identity is read in its ZooKeeper, and created there if the cluster has none yet
//! (a Kafka 0.7 cluster: its brokers ignore the node). The target's is the broker's own for the
//! embedded mirror, read in the producer's ZooKeeper with `zk.connect`, or asked of each broker
//! of a `broker.list` (CLUSTER_IDENTITY). What cannot be learnt stops the start: the check fails
//! closed, and says what to do (a `broker.list` no broker of which can be reached yet is waited
//! for, as a mirror maker started before its target).

use std::time::Duration;

use tributary_core::config::{
    BrokerEndpoint, ConsumerConfig, Discovery, ProducerConfig, ZkConnect,
};
use tributary_core::identity::ClusterIdentity;

use super::MirrorError;
use crate::client::{cluster_identity, connect, ClientError, IdentityQueryError};
use crate::coordination::identity::{ensure_identity, ClusterIdentityError};
use crate::coordination::{CoordError, Coordination};
use crate::env::Env;
use crate::failure::Failure;
use crate::producer::targets::{how, SAY_EVERY};
use crate::tls::env::{ClientLink, SecureEnv};

/// The clusters of one mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identities {
    /// Each source's, in the order of the settings.
    pub sources: Vec<ClusterIdentity>,
    /// The mirror cluster's.
    pub target: ClusterIdentity,
}

/// Learns every cluster's identity; `target` is the mirror cluster's when the caller knows it
/// (the embedded mirror's broker).
pub async fn learn<E: Env>(
    env: &E,
    sources: &[ConsumerConfig],
    producer: &ProducerConfig,
    target: Option<&ClusterIdentity>,
) -> Result<Identities, MirrorError> {
    // The plain case needs no ZooKeeper: the producer on one of the source's own ZooKeeper
    // servers, same chroot.
    if let Discovery::ZooKeeper(connect) = &producer.discovery {
        if let Some(source) = sources
            .iter()
            .find(|s| same_zookeeper(&s.zk_connect, connect))
        {
            return Err(MirrorError::Config(Failure::new(format!(
                "the consumer and the producer both point at ZooKeeper {connect} (the source's is {}): a cluster cannot be mirrored into itself; point the producer at the mirror cluster",
                source.zk_connect
            ))));
        }
    }
    let mut source_identities = Vec::with_capacity(sources.len());
    for source in sources {
        let timeout = Duration::from_millis(source.zk.connection_timeout_ms.into());
        let identity = in_zookeeper(env, &source.zk_connect, timeout)
            .await
            .map_err(|e| {
                MirrorError::Source(Failure::caused(format!(
                    "{}: cannot learn the source cluster's identity ({e}); the mirror starts once it can tell the source from the target",
                    source.zk_connect
                ), e))
            })?;
        source_identities.push(identity);
    }
    let target = match (target, &producer.discovery) {
        (Some(known), _) => known.clone(),
        (None, Discovery::ZooKeeper(connect)) => {
            let timeout = Duration::from_millis(producer.zk.connection_timeout_ms.into());
            in_zookeeper(env, connect, timeout).await.map_err(|e| {
                MirrorError::Target(Failure::caused(format!(
                    "{connect}: cannot learn the mirror cluster's identity ({e}); the mirror starts once it can tell the source from the target"
                ), e))
            })?
        }
        (None, Discovery::BrokerList(list)) => {
            // Asked over the producer's own links (TLS when its security.protocol=ssl).
            let link = ClientLink::load(producer.tls.as_ref(), None).map_err(|e| {
                MirrorError::Config(Failure::caused(format!("producer TLS settings: {e}"), e))
            })?;
            from_brokers(&SecureEnv::new(env.clone(), link), list, producer).await?
        }
    };
    Ok(Identities {
        sources: source_identities,
        target,
    })
}

/// The identity of the cluster of the producer's `broker.list`, asked of each broker. Waits
/// (retrying, and saying why every 30 s) while no broker can be reached: a mirror maker may
/// start before its target. Refuses at once a broker that cannot answer (a Kafka 0.7 broker,
/// or one without ZooKeeper), and brokers of different clusters.
async fn from_brokers<E: Env>(
    env: &E,
    list: &[BrokerEndpoint],
    producer: &ProducerConfig,
) -> Result<ClusterIdentity, MirrorError> {
    let timeout = Duration::from_millis(producer.connect_timeout_ms.max(1000).into());
    let mut backoff = Duration::from_millis(500);
    // When the wait was last said, on the environment's clock (simulated under turmoil).
    let mut said_at_ms: Option<i64> = None;
    let say_every_ms = i64::try_from(SAY_EVERY.as_millis()).unwrap_or(i64::MAX);
    loop {
        let mut answers: Vec<(String, ClusterIdentity)> = Vec::new();
        let mut unreachable = Vec::new();
        for broker in list {
            let at = format!("broker {} at {}:{}", broker.id, broker.host, broker.port);
            let mut conn = match connect(env, &broker.host, broker.port, timeout).await {
                Ok(conn) => conn,
                Err(e) => {
                    unreachable.push(format!("{at}: {}", how(&e)));
                    continue;
                }
            };
            match cluster_identity(&mut conn).await {
                Ok(Some(identity)) => answers.push((at, identity)),
                Ok(None) => {
                    return Err(MirrorError::Config(Failure::new(format!(
                        "{at} runs without ZooKeeper: it has no cluster identity, so the mirror cannot tell it from the source; give the mirror cluster a ZooKeeper"
                    ))))
                }
                Err(IdentityQueryError::Call(e @ (ClientError::Io { .. } | ClientError::Timeout { .. }))) => {
                    unreachable.push(format!("{at}: {}", how(&e)));
                }
                Err(e) => {
                    return Err(MirrorError::Config(Failure::caused(format!(
                        "{at} cannot tell which cluster it belongs to ({e}); the mirror cannot tell the target from the source: point the producer at the mirror cluster's ZooKeeper (zk.connect) instead of broker.list"
                    ), e)))
                }
            }
        }
        if let Some((first_at, first)) = answers.first().cloned() {
            if let Some((at, other)) = answers.iter().find(|(_, i)| *i != first) {
                return Err(MirrorError::Config(Failure::new(format!(
                    "the producer's broker.list mixes clusters: {first_at} is in {first}, {at} in {other}; list the brokers of one mirror cluster"
                ))));
            }
            for failure in &unreachable {
                tracing::warn!("mirror: {failure}; the other brokers of broker.list say the mirror cluster is {first}");
            }
            return Ok(first);
        }
        let now_ms = env.now_ms();
        if said_at_ms.is_none_or(|at| now_ms.saturating_sub(at) >= say_every_ms || now_ms < at) {
            tracing::warn!(
                "mirror: cannot learn the mirror cluster's identity yet ({}); retrying: the mirror starts once a broker of broker.list answers",
                unreachable.join("; ")
            );
            said_at_ms = Some(now_ms);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Why a cluster's identity could not be learnt from its ZooKeeper.
#[derive(Debug, thiserror::Error)]
enum LookupError {
    /// No session with the ZooKeeper.
    #[error(transparent)]
    Connect(CoordError),
    /// The session could not read or create the identity.
    #[error(transparent)]
    Identity(ClusterIdentityError),
}

/// The identity of the cluster whose ZooKeeper is `connect`, created if it has none.
async fn in_zookeeper<E: Env>(
    env: &E,
    connect: &ZkConnect,
    timeout: Duration,
) -> Result<ClusterIdentity, LookupError> {
    let coord = env
        .coordinate(connect, timeout, timeout)
        .await
        .map_err(LookupError::Connect)?;
    // Two clusters created by this one mirror get two ids: the seed differs per connect string
    // (a simulated environment's seed is the same at every call).
    let seed = env.rng_seed() ^ fnv1a(connect.to_string().as_bytes());
    let identity = ensure_identity(&coord, None, seed).await;
    coord.close().await;
    identity.map_err(LookupError::Identity)
}

/// FNV-1a: a stable hash, to tell seeds apart.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether two connect strings name one server of the same ZooKeeper with the same chroot
/// (`localhost` and `127.0.0.1` taken as one). Other aliases are left to the identities.
fn same_zookeeper(a: &ZkConnect, b: &ZkConnect) -> bool {
    let host = |h: &str| {
        if h == "localhost" {
            "127.0.0.1".to_string()
        } else {
            h.to_string()
        }
    };
    a.chroot == b.chroot
        && a.servers.iter().any(|s| {
            b.servers
                .iter()
                .any(|t| s.port == t.port && host(&s.host) == host(&t.host))
        })
}

/// How often a running mirror learns its clusters' identities again: an address (a DNS name, a
/// load balancer, a `broker.list`) that comes to lead to another cluster is caught then.
pub const RECHECK_EVERY: Duration = Duration::from_secs(30);
/// How long one recheck may take; a cluster that cannot say leaves the mirror as it is.
const RECHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// What a recheck decides, given the identities learnt at start and now: a mirror whose target
/// is now one of its sources is refused for good (`Config`); a cluster that is now another one
/// (compared by id: a name recorded since changes nothing) stops this run, so that the next
/// starts over against the cluster the address leads to now, from that cluster's own offsets.
pub fn compare(
    at_start: &Identities,
    now: &Identities,
    sources: &[ConsumerConfig],
) -> Result<(), MirrorError> {
    refuse_loops(now, sources)?;
    for (index, (then, found)) in at_start.sources.iter().zip(&now.sources).enumerate() {
        if then.id != found.id {
            let zk = sources
                .get(index)
                .map(|s| s.zk_connect.to_string())
                .unwrap_or_default();
            return Err(MirrorError::Source(Failure::new(format!(
                "the source at {zk} is now cluster {found}, not {then} as when the mirror started: its address leads to another cluster; this run stops and the next starts against it"
            ))));
        }
    }
    if at_start.target.id != now.target.id {
        return Err(MirrorError::Target(Failure::new(format!(
            "the mirror cluster is now {}, not {} as when the mirror started: the producer's addresses lead to another cluster; this run stops and the next starts against it",
            now.target, at_start.target
        ))));
    }
    Ok(())
}

/// Learns the identities again every [`RECHECK_EVERY`] until `stop`, and ends with
/// [`compare`]'s error when they changed. A cluster that cannot say (unreachable, or slower
/// than 10 s) is warned about and the mirror goes on.
pub async fn recheck<E: Env>(
    env: E,
    sources: Vec<ConsumerConfig>,
    producer: ProducerConfig,
    known_target: Option<ClusterIdentity>,
    at_start: Identities,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), MirrorError> {
    loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
            () = tokio::time::sleep(RECHECK_EVERY) => {}
        }
        let learnt = tokio::time::timeout(
            RECHECK_TIMEOUT,
            learn(&env, &sources, &producer, known_target.as_ref()),
        )
        .await;
        match learnt {
            Ok(Ok(now)) => compare(&at_start, &now, &sources)?,
            Ok(Err(e)) => tracing::warn!(
                "mirror: cannot check the clusters' identities again ({e}); going on as started"
            ),
            Err(_) => tracing::warn!(
                "mirror: the clusters' identities could not be read again within {RECHECK_TIMEOUT:?}; going on as started"
            ),
        }
    }
}

/// Refuses a mirror into one of its own sources, and two sources that are one cluster (every
/// message would be copied twice).
pub fn refuse_loops(
    identities: &Identities,
    sources: &[ConsumerConfig],
) -> Result<(), MirrorError> {
    for (index, source) in identities.sources.iter().enumerate() {
        let zk = sources
            .get(index)
            .map(|s| s.zk_connect.to_string())
            .unwrap_or_default();
        if tributary_core::planted::active(tributary_core::planted::Bug::IdentityIgnored) {
            continue;
        }
        // By id: a name recorded since one of them was read changes nothing.
        if source.id == identities.target.id {
            return Err(MirrorError::Config(Failure::new(format!(
                "the source at {zk} and the mirror cluster are the same cluster, {source}: a cluster cannot be mirrored into itself; point the producer at the mirror cluster"
            ))));
        }
        if let Some(earlier) = identities
            .sources
            .get(..index)
            .and_then(|s| s.iter().position(|e| e.id == source.id))
        {
            let other = sources
                .get(earlier)
                .map(|s| s.zk_connect.to_string())
                .unwrap_or_default();
            return Err(MirrorError::Config(Failure::new(format!(
                "sources {other} and {zk} are the same cluster, {source}: every message would be mirrored twice; give each source cluster once"
            ))));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tributary_core::config::Properties;
    use tributary_core::identity::{ClusterId, ClusterName};

    fn source(zk: &str) -> ConsumerConfig {
        let text = format!("zk.connect={zk}\ngroupid=mirror\n");
        ConsumerConfig::from_properties(&Properties::parse("test", &text).expect("properties"))
            .expect("config")
    }

    fn cluster(id: &str, name: Option<&str>) -> ClusterIdentity {
        ClusterIdentity {
            id: ClusterId::parse(id).expect("id"),
            name: name.map(|n| ClusterName::parse(n).expect("name")),
        }
    }

    #[test]
    fn a_mirror_into_its_own_source_is_refused_whatever_the_addresses() {
        // Two spellings of one ZooKeeper: only the identity says they are one cluster.
        let sources = [source("127.0.0.1:2181")];
        let identities = Identities {
            sources: vec![cluster("abc", Some("east"))],
            target: cluster("abc", Some("east")),
        };
        let refused = refuse_loops(&identities, &sources).expect_err("refused");
        assert!(
            refused
                .to_string()
                .contains("the same cluster, east (id abc)"),
            "{refused}"
        );
        let elsewhere = Identities {
            sources: vec![cluster("abc", Some("east"))],
            target: cluster("xyz", Some("west")),
        };
        assert!(refuse_loops(&elsewhere, &sources).is_ok());
        // A name recorded after one side was read: the same cluster.
        let named_since = Identities {
            sources: vec![cluster("abc", Some("east"))],
            target: cluster("abc", None),
        };
        assert!(refuse_loops(&named_since, &sources).is_err());
        // Same name, other id: names do not decide.
        let renamed = Identities {
            sources: vec![cluster("abc", Some("east"))],
            target: cluster("xyz", Some("east")),
        };
        assert!(refuse_loops(&renamed, &sources).is_ok());
    }

    #[test]
    fn a_recheck_stops_a_run_whose_clusters_changed_and_refuses_a_target_that_became_a_source() {
        let sources = [source("a:2181")];
        let at_start = Identities {
            sources: vec![cluster("abc", None)],
            target: cluster("xyz", None),
        };
        // A name recorded since is the same cluster.
        let named = Identities {
            sources: vec![cluster("abc", Some("east"))],
            target: cluster("xyz", Some("west")),
        };
        assert!(compare(&at_start, &named, &sources).is_ok());
        // The source's address now leads to another cluster: this run stops.
        let moved = Identities {
            sources: vec![cluster("other", None)],
            target: cluster("xyz", None),
        };
        let stopped = compare(&at_start, &moved, &sources).expect_err("stopped");
        assert!(matches!(stopped, MirrorError::Source(_)), "{stopped}");
        assert!(
            stopped.to_string().contains("is now cluster other"),
            "{stopped}"
        );
        // The target's leads to another: the same.
        let retargeted = Identities {
            sources: vec![cluster("abc", None)],
            target: cluster("new", None),
        };
        assert!(matches!(
            compare(&at_start, &retargeted, &sources),
            Err(MirrorError::Target(_))
        ));
        // The target's now leads to the source: refused for good.
        let looped = Identities {
            sources: vec![cluster("abc", None)],
            target: cluster("abc", None),
        };
        assert!(matches!(
            compare(&at_start, &looped, &sources),
            Err(MirrorError::Config(_))
        ));
    }

    #[test]
    fn one_cluster_given_twice_as_a_source_is_refused() {
        let sources = [source("a:2181"), source("b:2181")];
        let identities = Identities {
            sources: vec![cluster("abc", None), cluster("abc", None)],
            target: cluster("xyz", None),
        };
        let refused = refuse_loops(&identities, &sources).expect_err("refused");
        assert!(refused.to_string().contains("mirrored twice"), "{refused}");
    }
}
