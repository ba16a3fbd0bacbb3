//! The owner, offset and broker nodes a rebalance reads and writes, one helper per kind of
//! request (the rebalance machine decides which, and when).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tributary_core::consumer::group::PartitionKey;
use tributary_core::consumer::BrokerPartition;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{broker_id_path, parse_broker_registration};

use super::super::offset_node::read_offset_node;
use super::super::{OffsetNodeError, RebalanceError};
use super::Member;
use crate::coordination::ephemeral::{self, HoldError};
use crate::coordination::pipeline::{pipelined_all, REQUESTS_IN_FLIGHT};
use crate::coordination::{
    transaction_runs, CoordError, Coordination, NodeKind, Watch, TRANSACTIONS_IN_FLIGHT,
};
use crate::env::Env;

impl<E: Env> Member<E> {
    /// Deletes each owner node that still names the thread given (never one another member has
    /// claimed since), pipelined on the session (see [`pipelined_all`]), every one tried; returns
    /// those whose release could not be settled (ZooKeeper unreachable).
    pub(super) async fn release_owners(
        &self,
        coord: &E::Coord,
        owners: &[(PartitionKey, String)],
    ) -> Vec<PartitionKey> {
        let releases = owners
            .iter()
            .map(|((topic, partition), owner)| self.release_owner(coord, topic, *partition, owner));
        let settled = pipelined_all(REQUESTS_IN_FLIGHT, releases).await;
        owners
            .iter()
            .zip(settled)
            .filter(|(_, done)| !done)
            .map(|((key, _), _)| key.clone())
            .collect()
    }

    /// Deletes a partition's owner node if it still names `owner`; `false` when that could not
    /// be settled.
    async fn release_owner(
        &self,
        coord: &E::Coord,
        topic: &TopicName,
        partition: BrokerPartition,
        owner: &str,
    ) -> bool {
        let path = super::owner_path(self.group(), topic, partition);
        match coord.get(&path).await {
            Ok((data, version)) if data == owner.as_bytes() => {
                match coord.delete(&path, Some(version)).await {
                    Ok(()) | Err(CoordError::NoNode(_)) | Err(CoordError::BadVersion(_)) => true,
                    Err(e) => {
                        tracing::warn!("releasing {path}: {e}");
                        false
                    }
                }
            }
            Ok(_) | Err(CoordError::NoNode(_)) => true,
            Err(e) => {
                tracing::warn!("releasing {path}: {e}");
                false
            }
        }
    }

    pub(super) async fn broker_address(
        &self,
        coord: &E::Coord,
        broker_id: i32,
    ) -> Result<(String, u16), RebalanceError> {
        let path = broker_id_path(broker_id);
        let data = match coord.get(&path).await {
            Ok((data, _)) => data,
            Err(source) => return Err(RebalanceError::ZooKeeper { path, source }),
        };
        parse_broker_registration(&String::from_utf8_lossy(&data))
            .ok_or(RebalanceError::BrokerRegistration { path })
    }

    /// Records where the group starts a partition it never committed (only if still nothing is
    /// committed): the starting point is on record, so data deleted before it was read shows up
    /// later as a gap (OffsetOutOfRange below the partition's start), never as a silent fresh
    /// start at whatever the partition holds then.
    /// `Ok(None)` once recorded; `Ok(Some(offset))` when the group committed `offset` since
    /// the start was read (that offset is where to start).
    pub(super) async fn record_start(
        &self,
        coord: &E::Coord,
        topic: &TopicName,
        partition: BrokerPartition,
        start: i64,
    ) -> Result<Option<i64>, OffsetNodeError> {
        let path = super::offset_path(self.group(), topic, partition);
        let data = start.to_string();
        let mut created = coord
            .create(&path, data.as_bytes(), NodeKind::Persistent)
            .await;
        // The ancestors are made only when missing (one round trip per level otherwise).
        if matches!(created, Err(CoordError::NoNode(_))) {
            if let Err(source) = coord.ensure_parents(&path).await {
                return Err(OffsetNodeError::ZooKeeper { path, source });
            }
            created = coord
                .create(&path, data.as_bytes(), NodeKind::Persistent)
                .await;
        }
        match created {
            Ok(_) => Ok(None),
            Err(CoordError::NodeExists(_)) => match read_offset_node(coord, path.clone()).await? {
                Some(offset) => Ok(Some(offset)),
                // Gone again since the create found it: no commit to resume from.
                None => Err(OffsetNodeError::ZooKeeper {
                    source: CoordError::NoNode(path.clone()),
                    path,
                }),
            },
            Err(source) => Err(OffsetNodeError::ZooKeeper { path, source }),
        }
    }

    /// A mirror (told of gaps) starting from the beginning (`autooffset.reset=smallest`) a
    /// partition its group has no record of, whose source already deleted its first `start`
    /// bytes, reports them as a gap: they were gone before the group first read the partition
    /// (a topic created while the mirror could not see the source, then cut back by retention;
    /// or a new mirror against a source with history deleted). Reported once: only the member
    /// whose record of the start was created.
    pub(super) fn report_deleted_prefix(
        &self,
        topic: &TopicName,
        partition: BrokerPartition,
        start: i64,
    ) {
        tracing::error!(
            "{topic}/{partition}: first claimed by group {} when it starts at {start}: bytes 0..{start} were deleted at the source before the group ever read them",
            self.group()
        );
        self.shared.report_gap(&super::super::GapReport {
            topic: topic.clone(),
            partition,
            from: 0,
            to: start,
        });
    }

    /// Whether this member records where it starts partitions its group never committed: when
    /// it commits on its own (autocommit) or is told of gaps (the mirror), so that data deleted
    /// before it was read shows up as a gap. A group that never commits keeps 0.7's fresh start.
    pub(super) fn records_starts(&self) -> bool {
        self.config.autocommit_enable || self.shared.gap_sink.is_some()
    }

    /// Deletes the owner nodes of `claimed` that this session holds (a failed attempt's, or
    /// ones a claim may have made before it failed), leaving anyone else's; returns those that
    /// could not be read or deleted (ZooKeeper unreachable), to try again.
    pub(super) async fn release_claimed(
        &self,
        coord: &E::Coord,
        claimed: Vec<(TopicName, BrokerPartition)>,
    ) -> Vec<(TopicName, BrokerPartition)> {
        let releases = claimed
            .iter()
            .map(|(topic, partition)| self.release_stray(coord, topic, *partition));
        let released = pipelined_all(REQUESTS_IN_FLIGHT, releases).await;
        let mut left = Vec::new();
        for (stray, kept) in claimed.into_iter().zip(released) {
            if !kept {
                left.push(stray);
            }
        }
        left
    }

    /// Deletes a stray owner node if this session holds it; `false` when that could not be
    /// settled (to try again).
    async fn release_stray(
        &self,
        coord: &E::Coord,
        topic: &TopicName,
        partition: BrokerPartition,
    ) -> bool {
        let path = super::owner_path(self.group(), topic, partition);
        let outcome = match coord.get_with_owner(&path).await {
            Ok(node) if node.owner == Some(coord.session_id()) => {
                coord.delete(&path, Some(node.version)).await
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) | Err(CoordError::NoNode(_)) | Err(CoordError::BadVersion(_)) => true,
            Err(e) => {
                tracing::warn!("releasing {path} after a failed attempt: {e}; tried again");
                false
            }
        }
    }

    /// A watch that fires when the owner node that failed an attempt (`OwnedElsewhere`) goes
    /// or changes: at once when it is already gone, never for any other failure.
    pub(super) async fn owner_gone(&self, coord: &E::Coord, key: &PartitionKey) -> Watch {
        let (topic, partition) = key;
        let path = super::owner_path(self.group(), topic, *partition);
        match coord.get_and_watch(&path).await {
            Ok((_, _, watch)) => watch,
            Err(CoordError::NoNode(_)) => Box::pin(std::future::ready(())),
            // ZooKeeper trouble: the backoff decides.
            Err(_) => Box::pin(std::future::pending()),
        }
    }

    /// Whether this session still holds the owner node it held through the rebalance, naming
    /// `thread`: no request when the member's last successful rebalance made or checked its
    /// nodes in the session it still has (see [`Member::owners_session`]), one read otherwise,
    /// where a claim would be a write. `Ok(false)` when it must be claimed (gone with an
    /// expired session, or changed).
    pub(super) async fn still_held(
        &self,
        coord: &E::Coord,
        topic: &TopicName,
        partition: BrokerPartition,
        thread: &str,
    ) -> Result<bool, RebalanceError> {
        let session = coord.session_id();
        if session != 0 && session == self.owners_session.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let path = super::owner_path(self.group(), topic, partition);
        match coord.get_with_owner(&path).await {
            Ok(node) => {
                Ok(node.owner == Some(coord.session_id()) && node.data == thread.as_bytes())
            }
            Err(CoordError::NoNode(_)) => Ok(false),
            Err(source) => Err(RebalanceError::ZooKeeper { path, source }),
        }
    }

    /// Makes the directories under `root` (the group's `owners` or `offsets`) that `topics`
    /// lack: one `children` read of `root`, then the missing topics' nodes made in
    /// transactions of a hundred (one at a time when one is refused), pipelined. A shortcut,
    /// not a guarantee: the creates that follow still make missing ancestors
    /// themselves, so a failure here is only logged. Without it every partition of a new topic
    /// found its parent missing, and its create, its ancestors' and its retry were each a write
    /// ZooKeeper logged: six a partition, not one, for a group's first 10,000 partitions.
    pub(super) async fn ensure_topic_dirs<'a>(
        &self,
        coord: &E::Coord,
        root: &str,
        topics: impl Iterator<Item = &'a TopicName>,
    ) {
        let wanted: BTreeSet<&TopicName> = topics.collect();
        if wanted.is_empty() {
            return;
        }
        let present: BTreeSet<String> = match coord.children(root).await {
            Ok(children) => children.into_iter().collect(),
            Err(CoordError::NoNode(_)) => {
                if let Err(e) = coord.ensure_parents(&format!("{root}/-")).await {
                    tracing::debug!("making {root}: {e}; each create makes it instead");
                    return;
                }
                BTreeSet::new()
            }
            Err(e) => {
                tracing::debug!("listing {root}: {e}; each create makes its parent instead");
                return;
            }
        };
        let missing: Vec<(String, Vec<u8>)> = wanted
            .into_iter()
            .filter(|topic| !present.contains(topic.as_str()))
            .map(|topic| (format!("{root}/{topic}"), Vec::new()))
            .collect();
        let runs = transaction_runs(missing, |(path, _)| Some(path.len()));
        let creates = runs.into_iter().map(|run| async move {
            match run.as_slice() {
                [_, _, ..] => match coord.create_all(&run, NodeKind::Persistent).await {
                    Ok(()) => {}
                    Err(e) => {
                        tracing::debug!("making {} topic directories under {root} together: {e}; one at a time", run.len());
                        make_one_at_a_time(coord, &run).await;
                    }
                },
                _ => make_one_at_a_time(coord, &run).await,
            }
        });
        pipelined_all(TRANSACTIONS_IN_FLIGHT, creates).await;
    }

    /// Creates the owner node (ephemeral, our thread id); one this session holds already counts
    /// as success, one another session holds (even with our thread id: a session of ours that a
    /// restarted ZooKeeper restored, which will expire) fails the attempt.
    pub(super) async fn claim(
        &self,
        coord: &E::Coord,
        topic: &TopicName,
        partition: BrokerPartition,
        thread: &str,
    ) -> Result<(), RebalanceError> {
        let path = super::owner_path(self.group(), topic, partition);
        match ephemeral::hold_creating_parents(coord, &path, thread.as_bytes(), &self.retired).await
        {
            Ok(_) => Ok(()),
            Err(HoldError::HeldElsewhere { data, .. }) => Err(RebalanceError::OwnedElsewhere {
                topic: topic.clone(),
                partition,
                owner: String::from_utf8_lossy(&data).into_owned(),
            }),
            Err(HoldError::Coord(source)) => Err(RebalanceError::ZooKeeper { path, source }),
        }
    }
}

/// Makes each node of `nodes` (persistent, empty), pipelined: a shortcut, so a failure is only
/// logged (see [`Member::ensure_topic_dirs`]).
async fn make_one_at_a_time(coord: &impl Coordination, nodes: &[(String, Vec<u8>)]) {
    let creates = nodes.iter().map(|(path, data)| async move {
        (path, coord.create(path, data, NodeKind::Persistent).await)
    });
    for (path, made) in pipelined_all(REQUESTS_IN_FLIGHT, creates).await {
        match made {
            Ok(_) | Err(CoordError::NodeExists(_)) => {}
            Err(e) => tracing::debug!("making {path}: {e}; each create makes it instead"),
        }
    }
}

/// Children of `path` and a watch on them; a missing node has none, and is looked for again
/// soon (a watch that fires after a pause).
pub(super) async fn children_or_none(
    coord: &impl Coordination,
    path: &str,
) -> Result<(Vec<String>, Watch), RebalanceError> {
    match coord.children_and_watch(path).await {
        Ok(found) => Ok(found),
        Err(CoordError::NoNode(_)) => Ok((
            Vec::new(),
            Box::pin(tokio::time::sleep(Duration::from_secs(1))),
        )),
        Err(source) => Err(RebalanceError::ZooKeeper {
            path: path.to_string(),
            source,
        }),
    }
}
