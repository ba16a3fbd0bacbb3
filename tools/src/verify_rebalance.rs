//! `verify-consumer-rebalance`: Kafka 0.7.2's VerifyConsumerRebalance. Checks that every
//! partition a consumer group subscribes to is owned, and owned by a thread of a live member
//! that subscribes to its topic; prints `Rebalance operation successful !` or
//! `Rebalance operation failed !` on standard output, as 0.7.2 does, with each problem logged
//! at `error` (0.7.2's wording). Exits 0 either way, as 0.7.2 does: scripts read the line.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::time::Duration;

use tributary::consumer::view::{read_group, Owner, ViewError};
use tributary::coordination::{CoordError, Coordination};
use tributary::env::{Env, TokioEnv};
use tributary_core::config::ZkConnect;
use tributary_core::consumer::{thread_id, Registration};
use tributary_core::group_id::GroupId;
use tributary_core::zk_layout::consumer_ids_path;

use crate::cli::{runtime, StrayWords};
use crate::error::ToolError;

/// ZooKeeper session and connection timeout (0.7.2's: 30 s).
const ZK_TIMEOUT: Duration = Duration::from_secs(30);

/// The line printed when every partition is owned rightly.
pub const SUCCESS: &str = "Rebalance operation successful !";
/// The line printed otherwise.
pub const FAILURE: &str = "Rebalance operation failed !";

/// Why the group could not be checked (neither line is printed then, as in 0.7.2).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// ZooKeeper could not be reached.
    #[error("{connect}: {source}")]
    Connect {
        /// The connect string.
        connect: ZkConnect,
        /// Why.
        source: CoordError,
    },
    /// A node could not be read.
    #[error("{path}: {source}")]
    ZooKeeper {
        /// The node.
        path: String,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// The group's partitions could not be read.
    #[error(transparent)]
    View(#[from] ViewError),
}

/// Checks `group` in the ZooKeeper at `connect`; returns each problem found (none: the
/// rebalance is complete), in (topic, partition) order.
pub async fn verify<E: Env>(
    env: &E,
    connect: &ZkConnect,
    group: &GroupId,
) -> Result<Vec<String>, VerifyError> {
    let coord = env
        .coordinate(connect, ZK_TIMEOUT, ZK_TIMEOUT)
        .await
        .map_err(|source| VerifyError::Connect {
            connect: connect.clone(),
            source,
        })?;
    let result = check(&coord, group).await;
    coord.close().await;
    result
}

async fn check(coord: &impl Coordination, group: &GroupId) -> Result<Vec<String>, VerifyError> {
    let ids_path = consumer_ids_path(group);
    let members = match coord.children(&ids_path).await {
        Ok(members) => members,
        Err(CoordError::NoNode(_)) => Vec::new(),
        Err(source) => {
            return Err(VerifyError::ZooKeeper {
                path: ids_path,
                source,
            })
        }
    };
    let mut problems = Vec::new();
    if members.is_empty() {
        problems.push(format!("group {group} has no registered member"));
        return Ok(problems);
    }
    // Each member's registration; a member gone between the listing and the read is skipped.
    let mut registrations: BTreeMap<String, Registration> = BTreeMap::new();
    for member in members {
        let path = format!("{ids_path}/{member}");
        match coord.get(&path).await {
            Ok((data, _)) => match Registration::parse(&String::from_utf8_lossy(&data)) {
                Ok(registration) => {
                    registrations.insert(member, registration);
                }
                Err(e) => problems.push(format!("{path}: {e}")),
            },
            Err(CoordError::NoNode(_)) => {}
            Err(source) => return Err(VerifyError::ZooKeeper { path, source }),
        }
    }
    // Every partition any member subscribes to, once.
    let mut partitions = BTreeMap::new();
    for registration in registrations.values() {
        for partition in read_group(coord, group, registration).await? {
            partitions.insert((partition.topic.clone(), partition.partition), partition);
        }
    }
    let topics: BTreeSet<String> = partitions.keys().map(|(t, _)| t.to_string()).collect();
    // The threads subscribed to each topic.
    let mut threads: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (member, registration) in &registrations {
        for (topic, streams) in registration.streams_for(topics.iter().map(String::as_str)) {
            if let Some(topic) = topics.get(&topic) {
                let entry = threads.entry(topic.as_str()).or_default();
                entry.extend((0..streams).map(|i| thread_id(member, i)));
            }
        }
    }
    let mut last_topic = None;
    for ((topic, partition), seen) in &partitions {
        // 0.7.2's line for a topic none of whose partitions has an owner, before its partitions.
        if last_topic != Some(topic) {
            last_topic = Some(topic);
            let unowned = partitions
                .iter()
                .filter(|((t, _), _)| t == topic)
                .all(|(_, p)| matches!(p.owner, Owner::Nobody));
            if unowned {
                problems.push(format!("No owners for any partitions for topic {topic}"));
            }
        }
        match &seen.owner {
            Owner::Nobody => problems.push(format!("No owner for topic {topic} partition {partition}")),
            Owner::Stale(owner) => problems.push(format!(
                "Owner {owner} for topic {topic} partition {partition} is not a valid member of consumer group {group}"
            )),
            Owner::Live(owner) => {
                let subscribed = threads
                    .get(topic.as_str())
                    .is_some_and(|t| t.contains(owner));
                if !subscribed {
                    problems.push(format!(
                        "Owner {owner} for topic {topic} partition {partition} is not a valid member of consumer group {group}"
                    ));
                }
            }
        }
    }
    Ok(problems)
}

/// `tributary verify-consumer-rebalance`'s arguments (0.7.2's VerifyConsumerRebalance flags).
#[derive(Debug, clap::Args)]
pub struct VerifyConsumerRebalanceArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// ZooKeeper: host:port[,host:port...][/chroot].
    #[arg(long = "zk.connect", default_value = "localhost:2181")]
    pub zk_connect: String,
    /// The consumer group.
    #[arg(long)]
    pub group: String,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: StrayWords,
}

/// Checks as `args` asks; prints 0.7.2's line; exits 0 whatever it found (as 0.7.2 does).
pub fn run_cli(args: VerifyConsumerRebalanceArgs) -> Result<ExitCode, ToolError> {
    let VerifyConsumerRebalanceArgs {
        zk_connect,
        group,
        stray,
        zk_security,
    } = args;
    stray.warn("verify-consumer-rebalance");
    let connect = zk_security.connect("--zk.connect", &zk_connect)?;
    let group: GroupId = group.parse().map_err(|e| ToolError::flag("--group", e))?;
    tracing::info!("Verifying rebalancing operation for consumer group {group}");
    let problems = runtime(Some(1))?
        .block_on(verify(&TokioEnv, &connect, &group))
        .map_err(|e| ToolError::during("Error while verifying current rebalancing operation", e))?;
    for problem in &problems {
        tracing::error!("{problem}");
    }
    println!(
        "{}",
        if problems.is_empty() {
            SUCCESS
        } else {
            FAILURE
        }
    );
    Ok(ExitCode::SUCCESS)
}
