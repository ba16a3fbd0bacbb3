//! `cluster-id`: prints a cluster's identity, as recorded in its ZooKeeper (`/cluster/id`):
//! the id on the first line, then `name <name>` when the cluster has one. The identity is
//! created by the cluster's first broker (or the first mirror that reads it); `--name` names a
//! cluster that has none (a Kafka 0.7 source, before active-active renaming).
//!
//! `--origins` lists where each mirrored topic came from (`/cluster/origins`, one line a route),
//! and `--forget-origins <topic>` deletes a topic's record: what an operator does, with the
//! mirrors involved stopped, to change a topology on purpose (see docs/mirroring.md).

use std::process::ExitCode;
use std::time::Duration;

use tributary::coordination::identity::{ensure_identity, read_identity, ClusterIdentityError};
use tributary::coordination::{CoordError, Coordination};
use tributary::env::{Env, TokioEnv};
use tributary::origin_store::{origins_path, read_origins, OriginsStoreError};
use tributary_core::config::ZkConnect;
use tributary_core::identity::{ClusterIdentity, ClusterName};
use tributary_core::origin::{Origins, ORIGINS_PATH};
use tributary_core::wire::TopicName;

use crate::cli::runtime;
use crate::error::ToolError;

/// How long the tool waits for ZooKeeper.
const ZOOKEEPER_TIMEOUT: Duration = Duration::from_secs(10);

/// `tributary cluster-id`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ClusterIdArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// The cluster's ZooKeeper: host:port[,host:port...][/chroot].
    #[arg(long)]
    pub zookeeper: String,
    /// Name the cluster (refused if it already has another name); creates its identity if it
    /// has none.
    #[arg(long)]
    pub name: Option<String>,
    /// List every mirrored topic's origin routes.
    #[arg(long, conflicts_with_all = ["name", "forget_origins"])]
    pub origins: bool,
    /// Delete this topic's origin record (stop the mirrors into and out of it first).
    #[arg(long, value_name = "TOPIC", conflicts_with = "name")]
    pub forget_origins: Option<String>,
}

/// Why the identity could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClusterIdError {
    /// ZooKeeper could not be reached.
    #[error("{connect}: {source}")]
    Connect {
        /// The connect string.
        connect: ZkConnect,
        /// Why.
        source: CoordError,
    },
    /// The node could not be read, or is damaged.
    #[error("{connect}: {source}")]
    Read {
        /// The connect string.
        connect: ZkConnect,
        /// Why.
        source: ClusterIdentityError,
    },
    /// An origin record could not be read or deleted.
    #[error("{connect}: {source}")]
    Origins {
        /// The connect string.
        connect: ZkConnect,
        /// Why.
        source: OriginsStoreError,
    },
}

/// Names the cluster whose ZooKeeper is `connect` (creating its identity if it has none).
pub async fn name_cluster(
    env: &impl Env,
    connect: &ZkConnect,
    name: &ClusterName,
) -> Result<ClusterIdentity, ClusterIdError> {
    let coord = connect_to(env, connect).await?;
    let named = ensure_identity(&coord, Some(name), env.rng_seed()).await;
    coord.close().await;
    named.map_err(|source| ClusterIdError::Read {
        connect: connect.clone(),
        source,
    })
}

/// Every mirrored topic's record, by topic.
pub async fn list_origins(
    env: &impl Env,
    connect: &ZkConnect,
) -> Result<Vec<(TopicName, Origins)>, ClusterIdError> {
    let coord = connect_to(env, connect).await?;
    let listed = list_with(&coord).await;
    coord.close().await;
    listed.map_err(|source| ClusterIdError::Origins {
        connect: connect.clone(),
        source,
    })
}

async fn list_with(
    coord: &impl Coordination,
) -> Result<Vec<(TopicName, Origins)>, OriginsStoreError> {
    let names = match coord.children(ORIGINS_PATH).await {
        Ok(names) => names,
        Err(CoordError::NoNode(_)) => Vec::new(),
        Err(source) => {
            return Err(OriginsStoreError::ZooKeeper {
                path: ORIGINS_PATH.to_string(),
                source,
            })
        }
    };
    let mut out = Vec::new();
    for name in names {
        // A node that is not a topic name is not a record of ours: skipped.
        let Ok(topic) = name.parse::<TopicName>() else {
            continue;
        };
        let origins = read_origins(coord, &topic).await?;
        out.push((topic, origins));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Deletes `topic`'s record; whether there was one.
pub async fn forget_origins(
    env: &impl Env,
    connect: &ZkConnect,
    topic: &TopicName,
) -> Result<bool, ClusterIdError> {
    let coord = connect_to(env, connect).await?;
    let deleted = coord.delete(&origins_path(topic), None).await;
    coord.close().await;
    match deleted {
        Ok(()) => Ok(true),
        Err(CoordError::NoNode(_)) => Ok(false),
        Err(source) => Err(ClusterIdError::Origins {
            connect: connect.clone(),
            source: OriginsStoreError::ZooKeeper {
                path: origins_path(topic),
                source,
            },
        }),
    }
}

async fn connect_to<E: Env>(env: &E, connect: &ZkConnect) -> Result<E::Coord, ClusterIdError> {
    env.coordinate(connect, ZOOKEEPER_TIMEOUT, ZOOKEEPER_TIMEOUT)
        .await
        .map_err(|source| ClusterIdError::Connect {
            connect: connect.clone(),
            source,
        })
}

/// Reads the identity of the cluster whose ZooKeeper is `connect` (`None`: none yet).
pub async fn cluster_id(
    env: &impl Env,
    connect: &ZkConnect,
) -> Result<Option<ClusterIdentity>, ClusterIdError> {
    let coord = connect_to(env, connect).await?;
    let read = read_identity(&coord).await;
    coord.close().await;
    read.map_err(|source| ClusterIdError::Read {
        connect: connect.clone(),
        source,
    })
}

/// Prints the identity; exit code 1 (and a line saying why on standard error) when the
/// cluster has none yet.
pub fn run_cli(args: ClusterIdArgs) -> Result<ExitCode, ToolError> {
    let connect = args.zk_security.connect("--zookeeper", &args.zookeeper)?;
    if args.origins {
        let listed = runtime(Some(1))?
            .block_on(list_origins(&TokioEnv, &connect))
            .map_err(ToolError::failed)?;
        for (topic, origins) in listed {
            for route in origins.routes() {
                let hops: Vec<String> = route.iter().map(|hop| hop.0.to_string()).collect();
                println!("{topic} {}", hops.join(" -> "));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(topic) = &args.forget_origins {
        let topic: TopicName = topic
            .parse()
            .map_err(|e| ToolError::flag("--forget-origins", e))?;
        let deleted = runtime(Some(1))?
            .block_on(forget_origins(&TokioEnv, &connect, &topic))
            .map_err(ToolError::failed)?;
        if deleted {
            println!("deleted the origin record of {topic}");
        } else {
            println!("{topic} has no origin record");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(name) = &args.name {
        let name = ClusterName::parse(name).map_err(|e| ToolError::flag("--name", e))?;
        let identity = runtime(Some(1))?
            .block_on(name_cluster(&TokioEnv, &connect, &name))
            .map_err(ToolError::failed)?;
        println!("{}", identity.id);
        if let Some(name) = &identity.name {
            println!("name {name}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let identity = runtime(Some(1))?
        .block_on(cluster_id(&TokioEnv, &connect))
        .map_err(ToolError::failed)?;
    match identity {
        Some(identity) => {
            println!("{}", identity.id);
            if let Some(name) = &identity.name {
                println!("name {name}");
            }
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("{connect}: this cluster has no identity yet; its first broker creates it when it starts");
            Ok(ExitCode::FAILURE)
        }
    }
}
