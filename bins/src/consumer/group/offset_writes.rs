//! Committed offsets written in transactions. A commit of many partitions becomes one
//! ZooKeeper transaction ([`Coordination::set_all`]) per hundred offsets ([`transaction_runs`]),
//! pipelined on the session: ZooKeeper does about a twentieth of the work it does for one
//! request per offset, which is what bounds a mirror of thousands of partitions when ZooKeeper
//! shares its machines.
//!
//! A transaction ZooKeeper refuses as a whole (an offset node not created yet, an ACL, a server
//! without transactions) wrote nothing, so its offsets are written again one node at a time,
//! which creates what is missing and names exactly the write that failed. A transaction lost
//! with the connection may have been applied whole or not at all: none of its offsets counts as
//! committed, and the next commit writes them again.

use std::ops::ControlFlow;
use std::sync::Arc;

use tributary_core::consumer::{Commit, CommitOutcome};

use super::super::state::PartitionState;
use super::super::CommitError;
use super::commit::write_offset;
use crate::coordination::pipeline::pipelined;
use crate::coordination::{outcome_unknown, transaction_runs, CoordError, Coordination};

/// A commit decided before anything is written: answered without a write, or an offset to
/// write for a partition.
pub(super) enum Planned {
    /// Nothing to write: the answer is decided.
    Answered(Commit, CommitOutcome),
    /// `offset` to write at `path`, the offset node of `state`'s partition; answered with
    /// `commit` once written (its partition's committed point then moves to `offset`).
    /// `failed` is the commit answered when the write fails.
    Write {
        commit: Commit,
        failed: Commit,
        state: Arc<PartitionState>,
        path: String,
        offset: i64,
    },
}

/// One commit's outcome, in the order asked.
pub(super) type Outcome = (Commit, Result<CommitOutcome, CommitError>);

/// Writes the offsets of `planned` (no partition twice), in transactions cut by
/// [`transaction_runs`], pipelined, and hands `each` every commit's outcome in order up to the first that failed (included); after that, no
/// further write is started.
pub(super) async fn write_planned(
    coord: &impl Coordination,
    planned: Vec<Planned>,
    mut each: impl FnMut(Outcome) -> ControlFlow<()>,
) {
    pipelined(
        transaction_runs(planned, write_bytes)
            .into_iter()
            .map(|chunk| write_chunk(coord, chunk)),
        |outcomes| {
            for outcome in outcomes {
                if each(outcome).is_break() {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        },
    )
    .await
}

/// A planned write's size in a transaction (its path, and an offset of at most 20 digits).
fn write_bytes(item: &Planned) -> Option<usize> {
    match item {
        Planned::Write { path, .. } => Some(path.len() + 20),
        Planned::Answered(..) => None,
    }
}

/// Writes one chunk's offsets (one transaction when it has several) and answers each of its
/// commits in order, up to the first failure (included).
async fn write_chunk(coord: &impl Coordination, chunk: Vec<Planned>) -> Vec<Outcome> {
    let writes: Vec<(String, Vec<u8>)> = chunk
        .iter()
        .filter_map(|item| match item {
            Planned::Write { path, offset, .. } => {
                Some((path.clone(), offset.to_string().into_bytes()))
            }
            Planned::Answered(..) => None,
        })
        .collect();
    let together = match writes.len() {
        0 => Ok(()),
        1 => Err(None),
        _ => coord
            .set_all(&shifted_if_planted(writes))
            .await
            .map_err(Some),
    };
    match together {
        Ok(()) => chunk.into_iter().map(written).collect(),
        Err(Some(lost)) if outcome_unknown(&lost) => lost_with_connection(chunk, lost),
        // Refused whole (or a single write): one node at a time.
        Err(_) => write_one_by_one(coord, chunk).await,
    }
}

/// The answer of a commit whose offset was written (or needed no write).
fn written(item: Planned) -> Outcome {
    match item {
        Planned::Answered(commit, outcome) => (commit, Ok(outcome)),
        Planned::Write {
            commit,
            state,
            offset,
            ..
        } => {
            state.offsets().committed_at(offset);
            (commit, Ok(CommitOutcome::Written))
        }
    }
}

/// The answer of a commit whose offset write failed with `source`.
fn failed(item: Planned, source: CoordError) -> Outcome {
    match item {
        Planned::Answered(commit, outcome) => (commit, Ok(outcome)),
        Planned::Write { failed, path, .. } => {
            (failed, Err(CommitError::ZooKeeper { path, source }))
        }
    }
}

/// The answers of a chunk whose transaction was lost with the connection: those before its
/// first write, then that write's failure (its partition's node named).
fn lost_with_connection(chunk: Vec<Planned>, lost: CoordError) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for item in chunk {
        let is_write = matches!(item, Planned::Write { .. });
        outcomes.push(failed(item, lost.clone()));
        if is_write {
            break;
        }
    }
    outcomes
}

/// Writes a chunk's offsets one node at a time, pipelined: answers up to the first failure.
async fn write_one_by_one(coord: &impl Coordination, chunk: Vec<Planned>) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    pipelined(
        chunk.into_iter().map(|item| async move {
            if let Planned::Write { path, offset, .. } = &item {
                if let Err(source) = write_offset(coord, path, *offset).await {
                    return failed(item, source);
                }
            }
            written(item)
        }),
        |outcome| {
            let stop = outcome.1.is_err();
            outcomes.push(outcome);
            if stop {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    )
    .await;
    outcomes
}

/// The writes, or with [`Bug::TransactionOffsetsShifted`](tributary_core::planted::Bug)
/// planted each node given the next one's offset (the last the first's).
fn shifted_if_planted(mut writes: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    if tributary_core::planted::active(tributary_core::planted::Bug::TransactionOffsetsShifted) {
        let mut data: Vec<Vec<u8>> = writes.iter().map(|(_, d)| d.clone()).collect();
        data.rotate_left(1);
        for ((_, slot), shifted) in writes.iter_mut().zip(data) {
            *slot = shifted;
        }
    }
    writes
}
