//! `translate-offsets`: a consumer group's committed offsets on the source cluster, translated
//! into offsets of the mirror cluster's partitions that hold the copies (their positions,
//! MIRROR_POSITIONS), so the group can move to the mirror cluster without skipping a message.
//!
//! Each mirror partition gets the lowest translation of the source partitions copied into it:
//! for each, the end of the last copied set wholly before the group's committed offset (the
//! start of the copy when the group has not read that source partition). Never past what the
//! mirror holds, never skipping a message the group had not read; what it re-reads is at
//! most the set it was in the middle of. `--write` records them in the mirror cluster's
//! ZooKeeper, refused while the group has a live member there.

use std::collections::BTreeMap;
use std::process::ExitCode;

use tributary::consumer::{read_offset_node, write_offset};
use tributary::coordination::identity::read_identity;
use tributary::coordination::{CoordError, Coordination};
use tributary::env::{Env, TokioEnv};
use tributary::mirror::held::{read_held, translate, MirrorPartition, TranslateError};
use tributary::producer::directory::Directory;
use tributary_core::config::ZkConnect;
use tributary_core::consumer::BrokerPartition;
use tributary_core::group_id::GroupId;
use tributary_core::mirror::position::SourceKey;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::consumer_offsets_path;

use crate::cli::runtime;
use crate::error::ToolError;
use crate::mirror_positions::TIMEOUT;

/// `tributary translate-offsets`'s arguments.
#[derive(Debug, clap::Args)]
pub struct TranslateOffsetsArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// The consumer group.
    #[arg(long)]
    pub group: String,
    /// The SOURCE cluster's ZooKeeper, where the group has committed.
    #[arg(long = "source-zookeeper")]
    pub source_zookeeper: String,
    /// The MIRROR cluster's ZooKeeper.
    #[arg(long)]
    pub zookeeper: String,
    /// Write the offsets into the mirror cluster's ZooKeeper (refused while the group has a
    /// live member there).
    #[arg(long)]
    pub write: bool,
}

/// Why the offsets could not be translated.
#[derive(Debug, thiserror::Error)]
pub enum TranslateOffsetsError {
    /// A ZooKeeper could not be reached, read or written.
    #[error("{connect}: {source}")]
    ZooKeeper {
        /// The connect string.
        connect: ZkConnect,
        /// Why.
        source: CoordError,
    },
    /// A committed offset node holds something else than an offset.
    #[error(transparent)]
    Offset(#[from] tributary::consumer::OffsetNodeError),
    /// The source cluster has no identity: its copies cannot be told apart.
    #[error("{0}: the source cluster has no identity (no Tributary broker has run against it), so no mirror position names it")]
    NoIdentity(ZkConnect),
    /// A mirror partition could not translate.
    #[error(transparent)]
    Translate(#[from] TranslateError),
    /// The group has live members in the mirror cluster: they commit for themselves.
    #[error("group {0} has live members in the mirror cluster; its offsets there are theirs (stop them first)")]
    GroupLive(GroupId),
}

/// One mirror partition's offset for the group, and the source offsets it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    /// The mirror partition.
    pub partition: MirrorPartition,
    /// Where the group starts there.
    pub offset: i64,
    /// Each source partition copied there: the group's committed offset (`None`: none) and
    /// its translation.
    pub from: Vec<(SourceKey, Option<i64>, i64)>,
}

/// The group's committed offsets on the source: per (topic, partition).
async fn committed(
    coord: &impl Coordination,
    connect: &ZkConnect,
    group: &GroupId,
) -> Result<BTreeMap<(TopicName, BrokerPartition), i64>, TranslateOffsetsError> {
    let zk = |source| TranslateOffsetsError::ZooKeeper {
        connect: connect.clone(),
        source,
    };
    let mut out = BTreeMap::new();
    let root = format!("/consumers/{group}/offsets");
    let topics = match coord.children(&root).await {
        Err(CoordError::NoNode(_)) => Vec::new(),
        other => other.map_err(zk)?,
    };
    for name in topics {
        let Ok(topic) = name.parse::<TopicName>() else {
            continue;
        };
        let path = consumer_offsets_path(group, &topic);
        for child in coord.children(&path).await.map_err(zk)? {
            let Some(partition) = BrokerPartition::parse(&child) else {
                continue;
            };
            if let Some(offset) = read_offset_node(coord, format!("{path}/{child}")).await? {
                out.insert((topic.clone(), partition), offset);
            }
        }
    }
    Ok(out)
}

/// The group's offsets translated into every mirror partition holding copies of the source's
/// partitions of the group's topics.
pub async fn translate_group<E: Env>(
    env: &E,
    group: &GroupId,
    source: &ZkConnect,
    mirror: &ZkConnect,
) -> Result<Vec<Translated>, TranslateOffsetsError> {
    let failed = |connect: &ZkConnect| {
        let connect = connect.clone();
        move |source| TranslateOffsetsError::ZooKeeper { connect, source }
    };
    let coord = env
        .coordinate(source, TIMEOUT, TIMEOUT)
        .await
        .map_err(failed(source))?;
    let identity = read_identity(&coord).await.ok().flatten();
    let offsets = committed(&coord, source, group).await;
    coord.close().await;
    let offsets = offsets?;
    let cluster = identity
        .map(|i| i.id)
        .ok_or_else(|| TranslateOffsetsError::NoIdentity(source.clone()))?;
    let directory = Directory::from_zookeeper(env, mirror, TIMEOUT, TIMEOUT)
        .await
        .map_err(failed(mirror))?;
    let snapshot = directory.snapshot();
    let held = read_held(env, &snapshot, None, TIMEOUT).await;
    let read: std::collections::BTreeSet<&TopicName> = offsets.keys().map(|(t, _)| t).collect();
    let mut out = Vec::new();
    for (partition, sources) in &held.partitions {
        let keys: Vec<&SourceKey> = sources
            .iter()
            .map(|h| &h.key)
            .filter(|k| k.cluster == cluster && read.contains(&k.topic))
            .collect();
        if keys.is_empty() {
            continue;
        }
        let asked: Vec<(SourceKey, i64)> = keys
            .iter()
            .map(|k| {
                let at = offsets.get(&(k.topic.clone(), k.partition)).copied();
                ((*k).clone(), at.unwrap_or(0))
            })
            .collect();
        let Some((host, port)) = snapshot.brokers.get(&partition.1.broker_id) else {
            continue;
        };
        let answers = translate(env, (host, *port), partition, &asked, TIMEOUT).await?;
        let from: Vec<(SourceKey, Option<i64>, i64)> = asked
            .into_iter()
            .zip(answers)
            .filter_map(|((key, _), mirror)| {
                let committed = offsets.get(&(key.topic.clone(), key.partition)).copied();
                Some((key, committed, mirror?))
            })
            .collect();
        if let Some(offset) = from.iter().map(|(_, _, m)| *m).min() {
            out.push(Translated {
                partition: partition.clone(),
                offset,
                from,
            });
        }
    }
    Ok(out)
}

/// Writes the translated offsets for `group` into the mirror cluster's ZooKeeper.
pub async fn write_group<E: Env>(
    env: &E,
    group: &GroupId,
    mirror: &ZkConnect,
    translated: &[Translated],
) -> Result<(), TranslateOffsetsError> {
    let zk = |source| TranslateOffsetsError::ZooKeeper {
        connect: mirror.clone(),
        source,
    };
    let coord = env.coordinate(mirror, TIMEOUT, TIMEOUT).await.map_err(zk)?;
    let written = async {
        match coord.children(&format!("/consumers/{group}/ids")).await {
            Ok(members) if !members.is_empty() => {
                return Err(TranslateOffsetsError::GroupLive(group.clone()))
            }
            Ok(_) | Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(zk(e)),
        }
        for t in translated {
            let path = format!(
                "{}/{}",
                consumer_offsets_path(group, &t.partition.0),
                t.partition.1
            );
            write_offset(&coord, &path, t.offset).await.map_err(zk)?;
        }
        Ok(())
    }
    .await;
    coord.close().await;
    written
}

/// Prints the table (and writes it with `--write`).
pub fn run_cli(args: TranslateOffsetsArgs) -> Result<ExitCode, ToolError> {
    let group: GroupId = args
        .group
        .parse()
        .map_err(|e| ToolError::flag("--group", e))?;
    let source = args
        .zk_security
        .connect("--source-zookeeper", &args.source_zookeeper)?;
    let mirror = args.zk_security.connect("--zookeeper", &args.zookeeper)?;
    let rt = runtime(Some(1))?;
    let translated = rt
        .block_on(translate_group(&TokioEnv, &group, &source, &mirror))
        .map_err(ToolError::failed)?;
    if translated.is_empty() {
        println!(
            "no mirror partition of {mirror} holds copies of what group {group} reads on {source}"
        );
        return Ok(ExitCode::SUCCESS);
    }
    for t in &translated {
        let from: Vec<String> = t
            .from
            .iter()
            .map(|(key, committed, mirror)| match committed {
                Some(c) => format!("{}/{} at {c} -> {mirror}", key.topic, key.partition),
                None => format!("{}/{} unread -> {mirror}", key.topic, key.partition),
            })
            .collect();
        println!(
            "{}/{} {}  ({})",
            t.partition.0,
            t.partition.1,
            t.offset,
            from.join(", ")
        );
    }
    if args.write {
        rt.block_on(write_group(&TokioEnv, &group, &mirror, &translated))
            .map_err(ToolError::failed)?;
        println!(
            "written for group {group} in {mirror} ({} partitions)",
            translated.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
