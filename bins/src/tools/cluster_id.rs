//! `cluster-id`: prints a cluster's identity, as recorded in its ZooKeeper (`/cluster/id`):
//! the id on the first line, then `name <name>` when the cluster has one. Read only: the
//! identity is created by the cluster's first broker (or the first mirror that reads it).

use std::process::ExitCode;
use std::time::Duration;

use tributary_core::config::ZkConnect;
use tributary_core::identity::ClusterIdentity;

use crate::cli::runtime;
use crate::coordination::identity::{read_identity, ClusterIdentityError};
use crate::coordination::{CoordError, Coordination};
use crate::env::{Env, TokioEnv};

/// How long the tool waits for ZooKeeper.
const ZOOKEEPER_TIMEOUT: Duration = Duration::from_secs(10);

/// `tributary cluster-id`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ClusterIdArgs {
    /// The cluster's ZooKeeper: host:port[,host:port...][/chroot].
    #[arg(long)]
    pub zookeeper: String,
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
}

/// Reads the identity of the cluster whose ZooKeeper is `connect` (`None`: none yet).
pub async fn cluster_id(
    env: &impl Env,
    connect: &ZkConnect,
) -> Result<Option<ClusterIdentity>, ClusterIdError> {
    let coord = env
        .coordinate(connect, ZOOKEEPER_TIMEOUT, ZOOKEEPER_TIMEOUT)
        .await
        .map_err(|source| ClusterIdError::Connect {
            connect: connect.clone(),
            source,
        })?;
    let read = read_identity(&coord).await;
    coord.close().await;
    read.map_err(|source| ClusterIdError::Read {
        connect: connect.clone(),
        source,
    })
}

/// Prints the identity; exit code 1 (and a line saying why on standard error) when the
/// cluster has none yet.
pub fn run_cli(args: ClusterIdArgs) -> Result<ExitCode, String> {
    let connect = ZkConnect::parse(&args.zookeeper).map_err(|e| format!("--zookeeper: {e}"))?;
    let identity = runtime(Some(1))?
        .block_on(cluster_id(&TokioEnv, &connect))
        .map_err(|e| e.to_string())?;
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
