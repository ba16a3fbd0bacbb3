//! Commits: the application's requests and autocommit, each written only for a partition this
//! member still owns, in the epoch the offset was handed out in, never past what was handed out.

use std::sync::Arc;

use tributary_core::consumer::{Commit, CommitAnswer, CommitOutcome};

use super::super::state::PartitionState;
use super::super::CommitBatch;
use super::offset_writes::{write_planned, Planned};
use super::Member;
use crate::coordination::{CoordError, Coordination, NodeKind};
use crate::env::Env;

impl<E: Env> Member<E> {
    /// Commits the asked partitions this member still owns (in the epoch the offsets were
    /// handed out in), never past what was handed out: an answer per commit, in order. The
    /// offsets are written in transactions pipelined on the session (see
    /// [`offset_writes`](super::offset_writes)); the first write that fails ends the batch, and
    /// it and every commit after it are answered `NotWritten`.
    pub(super) async fn commit(&self, coord: &E::Coord, commits: &[Commit]) -> CommitBatch {
        // Commits are pipelined in runs without a repeated partition: two writes of one
        // partition in flight together could land in either order (a lower offset last), where
        // one after the other the second is decided knowing what the first committed.
        let mut batch = CommitBatch::default();
        let mut start = 0;
        while start < commits.len() {
            let mut seen = std::collections::BTreeSet::new();
            let end = commits[start..]
                .iter()
                .position(|c| !seen.insert((&c.topic, c.partition)))
                .map_or(commits.len(), |repeated| start + repeated);
            let run = self.commit_run(coord, &commits[start..end], start).await;
            batch.answers.extend(run.answers);
            if run.failed.is_some() {
                batch.failed = run.failed;
                break;
            }
            start = end;
        }
        let answered = batch.answers.len();
        batch
            .answers
            .extend(commits[answered..].iter().map(|commit| CommitAnswer {
                commit: commit.clone(),
                outcome: CommitOutcome::NotWritten,
            }));
        debug_assert_eq!(batch.answers.len(), commits.len());
        batch
    }

    /// [`commit`](Self::commit) of `commits`, no partition twice, written in transactions
    /// ([`offset_writes`](super::offset_writes)); `first` is the index of the first in the whole
    /// request. Answers up to the first failure (itself answered `NotWritten`).
    async fn commit_run(&self, coord: &E::Coord, commits: &[Commit], first: usize) -> CommitBatch {
        let keep_lost =
            tributary_core::planted::active(tributary_core::planted::Bug::KeepLostPartitions);
        let capped = tributary_core::planted::active(tributary_core::planted::Bug::CommitCapped);
        let planned = commits.iter().enumerate().map(|(index, commit)| {
            if capped && first + index >= tributary_core::planted::COMMIT_CAP {
                return Planned::Answered(commit.clone(), CommitOutcome::Written);
            }
            let owned = self
                .shared
                .get(&commit.topic, commit.partition)
                .filter(|state| commit.epoch == state.epoch && state.is_owned());
            let owned = owned.or_else(|| {
                keep_lost
                    .then(|| self.zombies.get(&commit.topic, commit.partition))
                    .flatten()
            });
            match owned {
                None => Planned::Answered(commit.clone(), CommitOutcome::NotOwned),
                Some(state) if commit.offset > state.offsets().consumed() => {
                    Planned::Answered(commit.clone(), CommitOutcome::Stale)
                }
                Some(state) => {
                    let to_commit = state.offsets().to_commit(Some(commit.offset));
                    match to_commit {
                        None => Planned::Answered(commit.clone(), CommitOutcome::NothingNew),
                        Some(offset) => {
                            self.write_at(commit.clone(), commit.clone(), state, offset)
                        }
                    }
                }
            }
        });
        write_answers(coord, planned.collect()).await
    }

    /// Commits everything handed out for each of `states`, in transactions as
    /// [`commit`](Self::commit) is: an answer per partition (the offset it commits, in the
    /// partition's epoch), in order, up to the first write that failed (answered with what was
    /// handed out).
    pub(super) async fn commit_partitions(
        &self,
        coord: &E::Coord,
        states: &[Arc<PartitionState>],
    ) -> CommitBatch {
        let planned = states.iter().map(|state| {
            let commit_of = |offset| Commit {
                topic: state.topic.clone(),
                partition: state.partition,
                epoch: state.epoch,
                offset,
            };
            // Each read takes the offsets' lock and lets it go before the next.
            let (consumed, committed) = {
                let offsets = state.offsets();
                (offsets.consumed(), offsets.committed())
            };
            let to_commit = state.offsets().to_commit(None);
            let failed = commit_of(consumed);
            match to_commit {
                None => Planned::Answered(commit_of(committed), CommitOutcome::NothingNew),
                Some(offset) => self.write_at(commit_of(offset), failed, state.clone(), offset),
            }
        });
        write_answers(coord, planned.collect()).await
    }

    /// The write of `offset` to `state`'s offset node, answered with `commit` once written and
    /// with `failed` if the write fails.
    fn write_at(
        &self,
        commit: Commit,
        failed: Commit,
        state: Arc<PartitionState>,
        offset: i64,
    ) -> Planned {
        let path = super::offset_path(self.group(), &state.topic, state.partition);
        Planned::Write {
            commit,
            failed,
            state,
            path,
            offset,
        }
    }
}

/// Writes what `planned` holds and collects the answers in order up to the first that failed:
/// it is answered `NotWritten`, and its error ends the batch. The writes behind it are not
/// reported: one that completed moved its partition's committed point (the next commit answers
/// `NothingNew`); one abandoned in flight may land or not (the committed point stays, so the
/// next commit writes it again). Either way a node only ever holds an offset the caller asked
/// for.
async fn write_answers(coord: &impl Coordination, planned: Vec<Planned>) -> CommitBatch {
    let mut batch = CommitBatch::default();
    write_planned(coord, planned, |(commit, written)| match written {
        Ok(outcome) => {
            batch.answers.push(CommitAnswer { commit, outcome });
            std::ops::ControlFlow::Continue(())
        }
        Err(e) => {
            batch.answers.push(CommitAnswer {
                commit,
                outcome: CommitOutcome::NotWritten,
            });
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
