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

use std::process::ExitCode;

use tributary::coordination::identity::read_identity;
use tributary::coordination::{CoordError, Coordination};
use tributary::env::{Env, TokioEnv};
use tributary::mirror::held::read_held;
use tributary::mirror::offset_sync::{
    committed_offsets, group_is_live, translate_group, write_translated, SyncError, Translated,
};
use tributary::producer::directory::Directory;
use tributary_core::config::ZkConnect;
use tributary_core::group_id::GroupId;

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
    /// A ZooKeeper could not be reached, read or written; or a partition could not translate.
    #[error(transparent)]
    Sync(#[from] SyncError),
    /// A ZooKeeper could not be reached, read or written.
    #[error("{connect}: {source}")]
    ZooKeeper {
        /// The connect string.
        connect: ZkConnect,
        /// Why.
        source: CoordError,
    },
    /// The source cluster has no identity: its copies cannot be told apart.
    #[error("{0}: the source cluster has no identity (no Tributary broker has run against it), so no mirror position names it")]
    NoIdentity(ZkConnect),
    /// The source cluster's identity could not be read.
    #[error("{0}: the source cluster's identity could not be read: {1}")]
    Identity(
        ZkConnect,
        tributary::coordination::identity::ClusterIdentityError,
    ),
    /// The group has live members in the mirror cluster: they commit for themselves.
    #[error("group {0} has live members in the mirror cluster; its offsets there are theirs (stop them first)")]
    GroupLive(GroupId),
}

/// The group's offsets translated into every mirror partition holding copies of the source's
/// partitions of the group's topics.
pub async fn translate_offsets<E: Env>(
    env: &E,
    group: &GroupId,
    source: &ZkConnect,
    mirror: &ZkConnect,
) -> Result<Vec<Translated>, TranslateOffsetsError> {
    let zk = |connect: &ZkConnect| {
        let connect = connect.clone();
        move |source| TranslateOffsetsError::ZooKeeper { connect, source }
    };
    let coord = env
        .coordinate(source, TIMEOUT, TIMEOUT)
        .await
        .map_err(zk(source))?;
    let identity = read_identity(&coord).await;
    let offsets = committed_offsets(&coord, source, group).await;
    coord.close().await;
    let offsets = offsets?;
    let cluster = match identity {
        Ok(Some(identity)) => identity.id,
        Ok(None) => return Err(TranslateOffsetsError::NoIdentity(source.clone())),
        Err(e) => return Err(TranslateOffsetsError::Identity(source.clone(), e)),
    };
    let directory = Directory::from_zookeeper(env, mirror, TIMEOUT, TIMEOUT)
        .await
        .map_err(zk(mirror))?;
    let snapshot = directory.snapshot();
    let held = read_held(env, &snapshot, None, TIMEOUT).await;
    Ok(translate_group(env, &snapshot, &held, &cluster, &offsets).await?)
}

/// Writes the translated offsets for `group` into the mirror cluster's ZooKeeper, refused
/// while the group has a live member there.
pub async fn write_offsets<E: Env>(
    env: &E,
    group: &GroupId,
    mirror: &ZkConnect,
    translated: &[Translated],
) -> Result<usize, TranslateOffsetsError> {
    let zk = |source| TranslateOffsetsError::ZooKeeper {
        connect: mirror.clone(),
        source,
    };
    let coord = env.coordinate(mirror, TIMEOUT, TIMEOUT).await.map_err(zk)?;
    let written = async {
        if group_is_live(&coord, group).await.map_err(zk)? {
            return Err(TranslateOffsetsError::GroupLive(group.clone()));
        }
        write_translated(&coord, group, translated)
            .await
            .map_err(zk)
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
        .block_on(translate_offsets(&TokioEnv, &group, &source, &mirror))
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
        let written = rt
            .block_on(write_offsets(&TokioEnv, &group, &mirror, &translated))
            .map_err(ToolError::failed)?;
        println!(
            "written for group {group} in {mirror}: {written} of {} partitions (the others already held these offsets, or the group committed there itself)",
            translated.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
