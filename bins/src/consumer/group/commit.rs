//! Commits: the application's requests and autocommit, each written only for a partition this
//! member still owns, in the epoch the offset was handed out in, never past what was handed out.

use std::sync::Arc;

use tributary_core::consumer::BrokerPartition;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::consumer_offsets_path;

use super::super::state::PartitionState;
use super::super::{CommitBatch, CommitError, CommitOutcome};
use super::Member;
use crate::coordination::pipeline::pipelined;
use crate::coordination::{CoordError, Coordination, NodeKind};
use crate::env::Env;

impl<E: Env> Member<E> {
    /// Commits the asked partitions this member still owns (in the generation the offsets were
    /// handed out in), never past what was handed out: an outcome per item, in order, up to the
    /// first write that failed. The writes are pipelined on the session (see
    /// [`REQUESTS_IN_FLIGHT`](crate::coordination::pipeline::REQUESTS_IN_FLIGHT)); those after
    /// a failed one are abandoned, not reported.
    pub(super) async fn commit(
        &self,
        coord: &E::Coord,
        items: &[(TopicName, BrokerPartition, Option<i64>, Option<u64>)],
    ) -> CommitBatch {
        // Items are pipelined in runs without a repeated partition: two writes of one
        // partition in flight together could land in either order (a lower offset last), where
        // one after the other the second is decided knowing what the first committed.
        let mut batch = CommitBatch::default();
        let mut start = 0;
        while start < items.len() {
            let mut seen = std::collections::BTreeSet::new();
            let end = items[start..]
                .iter()
                .position(|(topic, partition, _, _)| !seen.insert((topic, *partition)))
                .map_or(items.len(), |repeated| start + repeated);
            let run = self.commit_run(coord, &items[start..end], start).await;
            batch.outcomes.extend(run.outcomes);
            if run.failed.is_some() {
                batch.failed = run.failed;
                return batch;
            }
            start = end;
        }
        batch
    }

    /// [`commit`](Self::commit) of `items`, no partition twice, pipelined; `first` is the
    /// index of the first in the whole request.
    async fn commit_run(
        &self,
        coord: &E::Coord,
        items: &[(TopicName, BrokerPartition, Option<i64>, Option<u64>)],
        first: usize,
    ) -> CommitBatch {
        let keep_lost =
            tributary_core::planted::active(tributary_core::planted::Bug::KeepLostPartitions);
        let capped = tributary_core::planted::active(tributary_core::planted::Bug::CommitCapped);
        let decided = items
            .iter()
            .enumerate()
            .map(|(index, (topic, partition, offset, epoch))| {
                if capped && first + index >= tributary_core::planted::COMMIT_CAP {
                    return Err(CommitOutcome::Written);
                }
                let owned = self
                    .shared
                    .get(topic, *partition)
                    .filter(|state| !epoch.is_some_and(|e| e != state.epoch) && state.is_owned());
                let owned = owned.or_else(|| {
                    keep_lost
                        .then(|| self.zombies.get(topic, *partition))
                        .flatten()
                });
                match owned {
                    None => Err(CommitOutcome::NotOwned),
                    Some(state) if offset.is_some_and(|o| o > state.offsets().consumed()) => {
                        Err(CommitOutcome::Stale)
                    }
                    Some(state) => Ok((state, *offset)),
                }
            });
        commit_pipelined(decided.map(|decided| self.write_decided(coord, decided))).await
    }

    /// Writes a commit `commit` decided to write; passes on an outcome it decided without one.
    async fn write_decided(
        &self,
        coord: &E::Coord,
        decided: Result<(Arc<PartitionState>, Option<i64>), CommitOutcome>,
    ) -> Result<CommitOutcome, CommitError> {
        match decided {
            Err(outcome) => Ok(outcome),
            Ok((state, offset)) => self.write_commit(coord, &state, offset).await,
        }
    }

    /// Commits everything handed out for each of `states`, pipelined as [`commit`](Self::commit)
    /// is: an outcome per partition, in order, up to the first write that failed.
    pub(super) async fn commit_partitions(
        &self,
        coord: &E::Coord,
        states: &[Arc<PartitionState>],
    ) -> CommitBatch {
        commit_pipelined(
            states
                .iter()
                .map(|state| self.write_commit(coord, state, None)),
        )
        .await
    }

    /// Writes a partition's offset: `wanted`, or everything handed out; `NothingNew` when that
    /// is not past what is committed.
    async fn write_commit(
        &self,
        coord: &E::Coord,
        state: &PartitionState,
        wanted: Option<i64>,
    ) -> Result<CommitOutcome, CommitError> {
        let Some(offset) = state.offsets().to_commit(wanted) else {
            return Ok(CommitOutcome::NothingNew);
        };
        let path = format!(
            "{}/{}",
            consumer_offsets_path(self.group(), &state.topic),
            state.partition
        );
        if let Err(source) = write_offset(coord, &path, offset).await {
            return Err(CommitError::ZooKeeper { path, source });
        }
        state.offsets().committed_at(offset);
        Ok(CommitOutcome::Written)
    }

}

/// Pipelines commit writes (see [`pipelined`]) and collects their outcomes in order up to the
/// first that failed: its error ends the batch. The writes behind it are not reported: one that
/// completed moved its partition's committed point (the next commit answers `NothingNew`); one
/// abandoned in flight may land or not (the committed point stays, so the next commit writes it
/// again). Either way a node only ever holds an offset the caller asked for.
async fn commit_pipelined<F>(writes: impl Iterator<Item = F>) -> CommitBatch
where
    F: std::future::Future<Output = Result<CommitOutcome, CommitError>>,
{
    let mut batch = CommitBatch::default();
    pipelined(writes, |written| match written {
        Ok(outcome) => {
            batch.outcomes.push(outcome);
            std::ops::ControlFlow::Continue(())
        }
        Err(e) => {
            batch.failed = Some(e);
            std::ops::ControlFlow::Break(())
        }
    })
    .await;
    batch
}

/// Writes a committed offset (persistent, decimal), creating the node and its parents.
pub async fn write_offset(
    coord: &impl Coordination,
    path: &str,
    offset: i64,
) -> Result<(), CoordError> {
    let data = offset.to_string();
    match coord.set(path, data.as_bytes(), None).await {
        Ok(_) => Ok(()),
        Err(CoordError::NoNode(_)) => {
            coord.ensure_parents(path).await?;
            match coord
                .create(path, data.as_bytes(), NodeKind::Persistent)
                .await
            {
                Ok(_) => Ok(()),
                Err(CoordError::NodeExists(_)) => {
                    coord.set(path, data.as_bytes(), None).await.map(drop)
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}
