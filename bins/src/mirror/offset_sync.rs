//! Consumer groups' offsets, translated from the source cluster into the mirror cluster's
//! partitions through the mirror's positions, so a group that moves to the mirror cluster
//! (after a disaster of the source, or on purpose) resumes without skipping a message.
//!
//! Each mirror partition gets the lowest translation of the source partitions copied into
//! it: for each, the end of the last copied set wholly before the group's committed offset
//! (the start of the copy when the group has no offset for that source partition). Never past
//! what the mirror holds durably (the positions describe flushed data), never skipping a
//! message the group had not read; what it reads again is at most the set its position fell
//! inside, plus, where several source partitions share a mirror partition, what the others
//! copied after the lowest one.
//!
//! The syncer ([`run_offset_sync`], `mirror.offsets.sync.groups`) writes them for every
//! matching group every `mirror.offsets.sync.interval.ms`, only while the group has no live
//! member in the mirror cluster, and never over an offset the group committed there itself:
//! beside each offset it writes, it keeps what it wrote (`/tributary/mirror-synced/...`), as
//! replica mode's syncer does; a different value means the group committed, and that
//! partition is left alone for good.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::watch;
use tributary_core::config::ZkConnect;
use tributary_core::consumer::{BrokerPartition, TopicPattern};
use tributary_core::group_id::GroupId;
use tributary_core::identity::ClusterId;
use tributary_core::mirror::position::SourceKey;
use tributary_core::replica::offset_sync::{group_commits_here, owned_during_write};
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{consumer_ids_path, consumer_offsets_path, consumer_offsets_root};

use super::held::{read_held, translate, Held, MirrorPartition, TranslateError};
use crate::consumer::{read_offset_node, OffsetNodeError};
use crate::coordination::nodes::{data_of, put, versioned_data_of};
use crate::coordination::{CoordError, Coordination, NodeKind};
use crate::env::Env;
use crate::producer::directory::{Directory, Snapshot};

/// Where the syncer keeps what it last wrote for each offset.
pub const MIRROR_SYNCED_PATH: &str = "/tributary/mirror-synced";
/// How long ZooKeeper and each broker are waited for in one round.
const ROUND_TIMEOUT: Duration = Duration::from_secs(10);
/// The most groups looked at in one round.
const GROUPS_MAX: usize = 10_000;

/// A group's committed offsets: per (topic, source partition).
pub type GroupOffsets = BTreeMap<(TopicName, BrokerPartition), i64>;

/// One mirror partition's offset for a group, and the source offsets it comes from.
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

/// Why a sync could not be done.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
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
    Offset(#[from] OffsetNodeError),
    /// A mirror partition could not translate.
    #[error(transparent)]
    Translate(#[from] TranslateError),
}

/// `group`'s committed offsets in the cluster of `coord` (`connect` names it in errors).
pub async fn committed_offsets(
    coord: &impl Coordination,
    connect: &ZkConnect,
    group: &GroupId,
) -> Result<GroupOffsets, SyncError> {
    let zk = |source| SyncError::ZooKeeper {
        connect: connect.clone(),
        source,
    };
    let mut out = BTreeMap::new();
    let topics = match coord.children(&consumer_offsets_root(group)).await {
        Err(CoordError::NoNode(_)) => Vec::new(),
        other => other.map_err(zk)?,
    };
    for name in topics {
        let Ok(topic) = name.parse::<TopicName>() else {
            continue;
        };
        let path = consumer_offsets_path(group, &topic);
        let partitions = match coord.children(&path).await {
            Err(CoordError::NoNode(_)) => Vec::new(),
            other => other.map_err(zk)?,
        };
        for child in partitions {
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

/// `offsets` (a group's, on the source cluster `cluster`) translated into every mirror
/// partition of `held` that holds copies of source partitions of the group's topics.
pub async fn translate_group<E: Env>(
    env: &E,
    snapshot: &Snapshot,
    held: &Held,
    cluster: &ClusterId,
    offsets: &GroupOffsets,
) -> Result<Vec<Translated>, SyncError> {
    let read: BTreeSet<&TopicName> = offsets.keys().map(|(t, _)| t).collect();
    let mut out = Vec::new();
    for (partition, sources) in &held.partitions {
        let asked: Vec<(SourceKey, i64)> = sources
            .iter()
            .map(|h| &h.key)
            .filter(|k| k.cluster == *cluster && read.contains(&k.topic))
            .map(|k| {
                let at = offsets.get(&(k.topic.clone(), k.partition)).copied();
                (k.clone(), at.unwrap_or(0))
            })
            .collect();
        if asked.is_empty() {
            continue;
        }
        let Some((host, port)) = snapshot.brokers.get(&partition.1.broker_id) else {
            continue;
        };
        let answers = translate(env, (host, *port), partition, &asked, ROUND_TIMEOUT).await?;
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

/// Whether `group` has a live member in the cluster of `coord` (read as of every write so far).
pub async fn group_is_live(coord: &impl Coordination, group: &GroupId) -> Result<bool, CoordError> {
    let ids = consumer_ids_path(group);
    match coord.sync(&ids).await {
        Ok(()) | Err(CoordError::NoNode(_)) => {}
        Err(e) => return Err(e),
    }
    match coord.children(&ids).await {
        Ok(members) => Ok(!members.is_empty()),
        Err(CoordError::NoNode(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes `translated` for `group` in the mirror cluster (`coord`), except where the group has
/// committed for itself since the syncer last wrote (then that partition is left alone). How
/// many offsets were written.
pub async fn write_translated(
    coord: &impl Coordination,
    group: &GroupId,
    translated: &[Translated],
) -> Result<usize, CoordError> {
    let mut written = 0;
    for t in translated {
        let (topic, at) = &t.partition;
        let to = format!("{}/{at}", consumer_offsets_path(group, topic));
        let marker = format!("{MIRROR_SYNCED_PATH}/{group}/{topic}/{at}");
        let current = versioned_data_of(coord, &to).await?;
        let last = data_of(coord, &marker).await?;
        let current_data = current.as_ref().map(|(data, _)| data.as_slice());
        if group_commits_here(current_data, last.as_deref()) {
            continue;
        }
        let value = t.offset.to_string();
        if current_data == Some(value.as_bytes()) {
            continue;
        }
        put(
            coord,
            &marker,
            &owned_during_write(current_data, value.as_bytes()),
        )
        .await?;
        // Only over what was looked at: a commit of the group's own in between fails the write.
        let done = match current {
            Some((_, version)) => coord
                .set(&to, value.as_bytes(), Some(version))
                .await
                .map(drop),
            None => {
                coord.ensure_parents(&to).await?;
                coord
                    .create(&to, value.as_bytes(), NodeKind::Persistent)
                    .await
                    .map(drop)
            }
        };
        match done {
            Ok(()) => written += 1,
            Err(CoordError::BadVersion(_) | CoordError::NodeExists(_)) => continue,
            Err(e) => return Err(e),
        }
        put(coord, &marker, value.as_bytes()).await?;
    }
    Ok(written)
}

/// What the syncer works with.
#[derive(Debug, Clone)]
pub struct OffsetSync {
    /// Which groups (`mirror.offsets.sync.groups`, whole names).
    pub groups: TopicPattern,
    /// How often (`mirror.offsets.sync.interval.ms`).
    pub interval: Duration,
    /// The source cluster's ZooKeeper, and its identity.
    pub source: (ZkConnect, ClusterId),
    /// The mirror cluster's ZooKeeper.
    pub mirror: ZkConnect,
}

/// Syncs the groups every interval until `stop`; a failed round is logged and the next one
/// tries again.
pub async fn run_offset_sync<E: Env>(env: E, sync: OffsetSync, mut stop: watch::Receiver<bool>) {
    let mut failing = false;
    loop {
        match sync_round(&env, &sync).await {
            Ok(written) => {
                if failing || written > 0 {
                    tracing::info!(
                        "mirror: offsets of {written} group partitions synced into {}",
                        sync.mirror
                    );
                }
                failing = false;
            }
            Err(e) if !failing => {
                tracing::warn!(
                    "mirror: syncing consumer offsets into {}: {e}; tried again every {:?}",
                    sync.mirror,
                    sync.interval
                );
                failing = true;
            }
            Err(e) => tracing::debug!("mirror: syncing consumer offsets: {e}"),
        }
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return,
            () = tokio::time::sleep(sync.interval) => {}
        }
    }
}

/// One round: every matching group of the source, translated and written.
async fn sync_round<E: Env>(env: &E, sync: &OffsetSync) -> Result<usize, SyncError> {
    let (source_zk, cluster) = &sync.source;
    let zk = |connect: &ZkConnect| {
        let connect = connect.clone();
        move |source| SyncError::ZooKeeper { connect, source }
    };
    let source = env
        .coordinate(source_zk, ROUND_TIMEOUT, ROUND_TIMEOUT)
        .await
        .map_err(zk(source_zk))?;
    let groups = match source.children("/consumers").await {
        Ok(groups) => groups,
        Err(CoordError::NoNode(_)) => Vec::new(),
        Err(e) => {
            source.close().await;
            return Err(zk(source_zk)(e));
        }
    };
    let mut offsets = BTreeMap::new();
    let mut read = Ok(());
    for name in groups.into_iter().take(GROUPS_MAX) {
        if !sync.groups.allows(&name) {
            continue;
        }
        let Ok(group) = name.parse::<GroupId>() else {
            continue;
        };
        match committed_offsets(&source, source_zk, &group).await {
            Ok(o) if !o.is_empty() => drop(offsets.insert(group, o)),
            Ok(_) => {}
            Err(e) => read = Err(e),
        }
    }
    source.close().await;
    read?;
    if offsets.is_empty() {
        return Ok(0);
    }
    let directory = Directory::from_zookeeper(env, &sync.mirror, ROUND_TIMEOUT, ROUND_TIMEOUT)
        .await
        .map_err(zk(&sync.mirror))?;
    let snapshot = directory.snapshot();
    let held = read_held(env, &snapshot, None, ROUND_TIMEOUT).await;
    let mirror = env
        .coordinate(&sync.mirror, ROUND_TIMEOUT, ROUND_TIMEOUT)
        .await
        .map_err(zk(&sync.mirror))?;
    let mut written = 0;
    let mut result = Ok(());
    for (group, offsets) in &offsets {
        match group_is_live(&mirror, group).await {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => {
                result = Err(zk(&sync.mirror)(e));
                break;
            }
        }
        let translated = match translate_group(env, &snapshot, &held, cluster, offsets).await {
            Ok(t) => t,
            Err(e) => {
                result = Err(e);
                continue;
            }
        };
        match write_translated(&mirror, group, &translated).await {
            Ok(n) => written += n,
            Err(e) => {
                result = Err(zk(&sync.mirror)(e));
                break;
            }
        }
    }
    mirror.close().await;
    result.map(|()| written)
}
