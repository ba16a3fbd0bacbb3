//! `promote`: the failover step for producers in replica mode. Without `--topic` it promotes
//! the whole cluster (`/tributary/promoted` holds `cluster`): every replica broker stops
//! copying, and every topic, including topics created afterwards, takes produces. With
//! `--topic` it promotes those topics only (`/tributary/promoted/<topic>`), refusing a topic no
//! broker holds before writing anything. Every replica broker confirms each topic it holds
//! with where it stopped copying (the cut point a later `demote` of the other cluster cuts
//! at); the tool waits for the confirmations of every broker that holds each topic and, for
//! the whole cluster, of every live replica broker (until it confirms, a broker still refuses
//! to create a topic), and prints them. Idempotent: promoting again changes nothing and
//! prints the same offsets.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use tributary::coordination::{CoordError, Coordination, NodeKind};
use tributary::env::{Env, TokioEnv};
use tributary_core::config::ZkConnect;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{
    broker_topic_path, cluster_promoted_ack_path, promoted_ack_path, promoted_topic_path,
    BROKER_IDS_PATH, BROKER_TOPICS_PATH, CLUSTER_PROMOTED, PROMOTED_PATH, REPLICAS_PATH,
};

use crate::cli::runtime;
use crate::error::ToolError;

/// ZooKeeper session and connection timeout of the tool.
const ZK_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a promotion failed, or was not confirmed.
#[derive(Debug, thiserror::Error)]
pub enum PromoteError {
    /// The mirror cluster's ZooKeeper could not be reached, read or written.
    #[error("ZooKeeper at {connect}: {source}")]
    ZooKeeper {
        /// The mirror cluster's ZooKeeper.
        connect: ZkConnect,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// A topic named is held by no broker of the cluster (nothing was written).
    #[error("{0}: no broker of this cluster holds it, so nothing was promoted; to make topics created from now on writable, promote the whole cluster (without --topic)")]
    NotHeld(TopicName),
    /// A confirmation could not be written out.
    #[error(transparent)]
    Output(#[from] std::io::Error),
    /// The promotion is requested (the nodes are written) but some brokers did not confirm in
    /// time.
    #[error("promotion requested, but not confirmed within {wait:?} ({}); a broker that is down promotes the topic when it starts", joined(.missing))]
    NotConfirmed {
        /// How long the tool waited.
        wait: Duration,
        /// What was not confirmed.
        missing: Vec<Unconfirmed>,
    },
}

/// A topic whose promotion a broker did not confirm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unconfirmed {
    /// No broker of the cluster holds the topic.
    #[error("{0}: no broker of this cluster holds it")]
    NoBroker(TopicName),
    /// A live replica broker did not confirm the whole cluster's promotion within the wait.
    #[error("broker {broker} did not confirm the whole cluster's promotion")]
    Cluster {
        /// The broker's id.
        broker: i32,
    },
    /// A broker holding the topic did not confirm within the wait.
    #[error("{topic}: broker {broker} did not confirm")]
    Broker {
        /// The topic.
        topic: TopicName,
        /// The broker's id.
        broker: i32,
    },
}

/// The brokers registered in `/brokers/ids` that run in replica mode (they keep a record in
/// `/tributary/replicas`): those that must carry a whole-cluster promotion out. A broker that
/// is down carries it out when it starts, before it copies or takes a produce.
async fn live_replica_brokers(coord: &impl Coordination) -> Result<Vec<i32>, CoordError> {
    let ids = |names: Vec<String>| -> BTreeSet<i32> {
        names.iter().filter_map(|n| n.parse().ok()).collect()
    };
    let children = |path: &'static str| async move {
        match coord.children(path).await {
            Ok(names) => Ok(names),
            Err(CoordError::NoNode(_)) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    };
    let live = ids(children(BROKER_IDS_PATH).await?);
    let replicas = ids(children(REPLICAS_PATH).await?);
    Ok(live.intersection(&replicas).copied().collect())
}

/// `missing`, separated by `; `.
fn joined(missing: &[Unconfirmed]) -> String {
    missing
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What to promote.
#[derive(Debug, Clone)]
pub struct PromoteOptions {
    /// The mirror cluster's ZooKeeper.
    pub zk_connect: ZkConnect,
    /// The topics (empty: the whole cluster, including topics created later).
    pub topics: Vec<TopicName>,
    /// How long to wait for the brokers' confirmations.
    pub wait: Duration,
}

/// Promotes, waits for every broker holding each topic to confirm, and prints
/// `<topic> broker <id>: stopped at <partition>:<offset>,...` per confirmation. An error names
/// the brokers that did not confirm in time.
pub async fn promote<E: Env>(
    env: &E,
    options: &PromoteOptions,
    out: &mut impl Write,
) -> Result<(), PromoteError> {
    let zk = |source: CoordError| PromoteError::ZooKeeper {
        connect: options.zk_connect.clone(),
        source,
    };
    let coord = env
        .coordinate(&options.zk_connect, ZK_TIMEOUT, ZK_TIMEOUT)
        .await
        .map_err(zk)?;
    let whole = options.topics.is_empty();
    let topics: Vec<TopicName> = if whole {
        match coord.children(BROKER_TOPICS_PATH).await {
            Ok(names) => names.iter().filter_map(|n| n.parse().ok()).collect(),
            Err(CoordError::NoNode(_)) => Vec::new(),
            Err(e) => return Err(zk(e)),
        }
    } else {
        // A topic no broker holds is refused before anything is written: its promotion could
        // never be confirmed, and a topic created later is writable only in a promoted cluster.
        for topic in &options.topics {
            let held = match coord.children(&broker_topic_path(topic)).await {
                Ok(ids) => !ids.is_empty(),
                Err(CoordError::NoNode(_)) => false,
                Err(e) => return Err(zk(e)),
            };
            if !held {
                return Err(PromoteError::NotHeld(topic.clone()));
            }
        }
        options.topics.clone()
    };
    if whole {
        // The whole cluster: every replica broker promotes every topic it holds and takes
        // produces for topics created from now on.
        coord.ensure_parents(PROMOTED_PATH).await.map_err(zk)?;
        match coord
            .create(PROMOTED_PATH, CLUSTER_PROMOTED, NodeKind::Persistent)
            .await
        {
            Ok(_) => {}
            Err(CoordError::NodeExists(_)) => {
                coord
                    .set(PROMOTED_PATH, CLUSTER_PROMOTED, None)
                    .await
                    .map_err(zk)?;
            }
            Err(e) => return Err(zk(e)),
        }
        writeln!(out, "the whole cluster is promoted: every topic, including topics created from now on, takes produces")?;
    }
    for topic in &topics {
        let path = promoted_topic_path(topic);
        coord.ensure_parents(&path).await.map_err(zk)?;
        match coord.create(&path, b"", NodeKind::Persistent).await {
            Ok(_) | Err(CoordError::NodeExists(_)) => {}
            Err(e) => return Err(zk(e)),
        }
    }
    // The environment's clock (the simulator's, in a simulation).
    let wait_ms = i64::try_from(options.wait.as_millis()).unwrap_or(i64::MAX);
    let deadline = env.now_ms().saturating_add(wait_ms);
    let mut missing = Vec::new();
    for topic in &topics {
        let brokers: Vec<i32> = match coord.children(&broker_topic_path(topic)).await {
            Ok(ids) => ids.iter().filter_map(|i| i.parse().ok()).collect(),
            Err(CoordError::NoNode(_)) => Vec::new(),
            Err(e) => return Err(zk(e)),
        };
        if brokers.is_empty() {
            missing.push(Unconfirmed::NoBroker(topic.clone()));
        }
        for broker in brokers {
            let ack = promoted_ack_path(topic, broker);
            loop {
                match coord.get(&ack).await {
                    Ok((data, _)) => {
                        let at = String::from_utf8_lossy(&data).into_owned();
                        writeln!(out, "{topic} broker {broker}: copying stopped at (partition:offset) {at}; the topic takes produces")?;
                        break;
                    }
                    Err(CoordError::NoNode(_)) if env.now_ms() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(CoordError::NoNode(_)) => {
                        missing.push(Unconfirmed::Broker {
                            topic: topic.clone(),
                            broker,
                        });
                        break;
                    }
                    Err(e) => return Err(zk(e)),
                }
            }
        }
    }
    if whole {
        // Every live replica broker carries the whole cluster's promotion out, topics or not:
        // until it has, it refuses produces of a topic it is asked to create.
        for broker in live_replica_brokers(&coord).await.map_err(zk)? {
            let ack = cluster_promoted_ack_path(broker);
            loop {
                match coord.get(&ack).await {
                    Ok(_) => {
                        writeln!(
                            out,
                            "broker {broker}: the whole cluster's promotion carried out"
                        )?;
                        break;
                    }
                    Err(CoordError::NoNode(_)) if env.now_ms() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(CoordError::NoNode(_)) => {
                        missing.push(Unconfirmed::Cluster { broker });
                        break;
                    }
                    Err(e) => return Err(zk(e)),
                }
            }
        }
    }
    coord.close().await;
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PromoteError::NotConfirmed {
            wait: options.wait,
            missing,
        })
    }
}

/// `tributary promote`'s arguments: the mirror cluster, the topics, and how long to wait.
#[derive(Debug, clap::Args)]
pub struct PromoteArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// The mirror cluster's ZooKeeper: HOST:PORT[/CHROOT].
    #[arg(long)]
    pub zookeeper: String,
    /// A topic to promote (repeatable; default: the whole cluster, topics created later included).
    #[arg(long)]
    pub topic: Vec<String>,
    /// Seconds to wait for every broker's confirmation.
    #[arg(long, default_value_t = 30)]
    pub wait: u64,
}

/// Promotes as `args` asks and prints every broker's confirmation to standard output. `Err` for
/// a wrong flag, or when a broker did not confirm in time (naming it).
pub fn run_cli(args: PromoteArgs) -> Result<ExitCode, ToolError> {
    let PromoteArgs {
        zookeeper,
        topic,
        wait,
        zk_security,
    } = args;
    let options = PromoteOptions {
        zk_connect: zk_security.connect("--zookeeper", &zookeeper)?,
        topics: topic
            .iter()
            .map(|t| {
                t.trim()
                    .parse()
                    .map_err(|e| ToolError::flag(format!("--topic {t}"), e))
            })
            .collect::<Result<Vec<_>, ToolError>>()?,
        wait: Duration::from_secs(wait),
    };
    runtime(Some(1))?
        .block_on(promote(&TokioEnv, &options, &mut std::io::stdout()))
        .map_err(ToolError::failed)?;
    Ok(ExitCode::SUCCESS)
}
