//! Committed offsets written in transactions. A commit of many partitions becomes one
//! ZooKeeper transaction ([`Coordination::set_all`]) per [`SET_ALL_WRITES_MAX`] offsets,
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
use crate::coordination::{CoordError, Coordination, SET_ALL_BYTES_MAX, SET_ALL_WRITES_MAX};

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

/// Writes the offsets of `planned` (no partition twice), in transactions of at most
/// [`SET_ALL_WRITES_MAX`] offsets and [`SET_ALL_BYTES_MAX`] bytes, pipelined, and hands `each`
/// every commit's outcome in order up to the first that failed (included); after that, no
/// further write is started.
pub(super) async fn write_planned(
    coord: &impl Coordination,
    planned: Vec<Planned>,
    mut each: impl FnMut(Outcome) -> ControlFlow<()>,
) {
    pipelined(
        chunks(planned, write_bytes)
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

/// `items` cut, in order, into runs of at most [`SET_ALL_WRITES_MAX`] writes and
/// [`SET_ALL_BYTES_MAX`] bytes; `write_bytes` says which items are writes, and their size.
fn chunks<T>(items: Vec<T>, write_bytes: impl Fn(&T) -> Option<usize>) -> Vec<Vec<T>> {
    let mut chunks: Vec<Vec<T>> = Vec::new();
    let mut current = Vec::new();
    let (mut writes, mut bytes) = (0usize, 0usize);
    for item in items {
        if let Some(size) = write_bytes(&item) {
            if writes == SET_ALL_WRITES_MAX || (writes > 0 && bytes + size > SET_ALL_BYTES_MAX) {
                chunks.push(std::mem::take(&mut current));
                (writes, bytes) = (0, 0);
            }
            writes += 1;
            bytes += size;
        }
        current.push(item);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
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
        Err(Some(
            lost @ (CoordError::ConnectionLoss(_)
            | CoordError::SessionExpired
            | CoordError::Unreachable(_)),
        )) => lost_with_connection(chunk, lost),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Items as the chunks see them: `Some(path length)` for a write, `None` for an answer.
    fn shape(chunks: &[Vec<Option<usize>>]) -> Vec<(usize, usize)> {
        chunks
            .iter()
            .map(|c| (c.len(), c.iter().filter(|i| i.is_some()).count()))
            .collect()
    }

    #[test]
    fn chunks_hold_at_most_the_transaction_limit_of_writes_in_order() {
        let mut items: Vec<Option<usize>> = (0..250).map(Some).collect();
        items.insert(100, None);
        let chunks = chunks(items, |i| i.map(|_| 10));
        assert_eq!(shape(&chunks), vec![(101, 100), (100, 100), (50, 50)]);
        assert_eq!(chunks[1][0], Some(100), "the order is kept");
    }

    #[test]
    fn chunks_hold_at_most_the_transaction_limit_of_bytes() {
        let third = SET_ALL_BYTES_MAX / 3;
        let items: Vec<Option<usize>> = vec![Some(third); 4];
        assert_eq!(shape(&chunks(items, |i| *i)), vec![(3, 3), (1, 1)]);
        let items: Vec<Option<usize>> = vec![Some(third + 1); 4];
        assert_eq!(shape(&chunks(items, |i| *i)), vec![(2, 2), (2, 2)]);
    }
}
