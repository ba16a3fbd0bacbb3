//! One source's commit task: it runs the rounds of commits core's `SourceMirror` decides — every
//! commit interval, or at once when a stream says a full window of acknowledgements waits, each
//! round one request to the source group's coordinator — so that a slow ZooKeeper write holds up
//! no stream (forwarding goes on until the window's uncommitted bound), and it makes the last
//! round at shutdown, once every stream of the source has recorded its last acknowledgements.
//!
//! It also hands the state machine every change of what the source group owns, as the group
//! reports it, so the windows of partitions lost in a rebalance are dropped (and their room
//! freed) without waiting for a commit to be refused.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tributary_core::consumer::{Commit, CommitOutcome};
use tributary_core::mirror::source::{CommitEffect, CommitRound};
use tributary_core::mirror::SourcePartition;

use super::window::SourceWindow;
use super::{MirrorError, MirrorEvent, MirrorObserver, MirrorStats, COMMIT_TIMEOUT};
use crate::consumer::{CommitAnswer, ConsumerConnector, Ownership};

/// What a commit task works with.
pub(super) struct CommitContext {
    pub(super) source: usize,
    pub(super) connector: Arc<ConsumerConnector>,
    pub(super) window: Arc<SourceWindow>,
    pub(super) stats: Arc<MirrorStats>,
    pub(super) observer: Option<Arc<dyn MirrorObserver>>,
    /// The environment's clock in milliseconds (`Env::now_ms`: simulated under turmoil).
    pub(super) now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
}

/// Runs rounds as they fall due until `stop`; then waits for the source's streams to finish
/// (`running` closes when the last one lets go of its sender) and makes the last round.
pub(super) async fn run_commits(
    context: CommitContext,
    mut stop: watch::Receiver<bool>,
    mut running: mpsc::Receiver<std::convert::Infallible>,
) -> Result<(), MirrorError> {
    let mut ownership = context.connector.ownership_changes();
    apply_ownership(&context, ownership.borrow_and_update().as_ref());
    // The group is gone (the connector stopped): no more changes to wait for.
    let mut group_gone = false;
    loop {
        let (round, deadline) = {
            let mut state = context.window.lock();
            state.handle_timeout((context.now_ms)());
            (state.poll_commits(), state.poll_timeout())
        };
        if let Some(round) = round {
            run_round(&context, round).await;
            continue;
        }
        // The state machine bounds the deadline to one interval ahead, whatever the clock did.
        let wait = deadline.map(|at| {
            let ms = at.saturating_sub((context.now_ms)()).max(0);
            Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        });
        let sleep = async {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => break,
            changed = ownership.changed(), if !group_gone => match changed {
                Ok(()) => apply_ownership(&context, ownership.borrow_and_update().as_ref()),
                Err(_) => group_gone = true,
            },
            () = context.window.commit_wanted.notified() => {}
            () = sleep => {}
        }
    }
    while running.recv().await.is_some() {}
    let last = context.window.lock().force_commits();
    if let Some(round) = last {
        run_round(&context, round).await;
    }
    Ok(())
}

/// Tells the state machine what the source group owns now (nothing to do while it rebalances).
fn apply_ownership(context: &CommitContext, ownership: Option<&Ownership>) {
    let Some(ownership) = ownership else {
        return;
    };
    let owned: Vec<(SourcePartition, u64)> = ownership
        .partitions
        .iter()
        .map(|(topic, partition, epoch)| {
            (
                SourcePartition::new(context.source, topic.clone(), *partition),
                *epoch,
            )
        })
        .collect();
    let dropped = context
        .window
        .lock()
        .on_ownership(ownership.generation, &owned);
    if dropped.windows > 0 {
        tracing::info!("mirror: dropped the windows of {} partitions this member no longer owns; their {} unacknowledged messages are sent again by their new owners", dropped.windows, dropped.in_flight);
        // Their room is free, acknowledged messages included: a stream waiting for room must
        // look again, or it could wait for good.
        context.window.changed();
    }
}

/// Commits each partition of `round` up to its acknowledged prefix, in one request to the
/// source group's coordinator (served before any rebalance that starts behind it), within
/// [`COMMIT_TIMEOUT`]; a partition whose commit failed, or was not reached in time, is retried at
/// the next round.
async fn run_round(context: &CommitContext, round: CommitRound) {
    let asked = round.commits.len();
    let batch = tokio::time::timeout(
        COMMIT_TIMEOUT,
        context.connector.commit_each(round.commits.clone()),
    )
    .await;
    let (answers, failed) = match batch {
        Ok(batch) => (batch.answers, batch.failed.map(|e| e.to_string())),
        Err(_) => (
            round
                .commits
                .into_iter()
                .map(|commit| CommitAnswer {
                    commit,
                    outcome: CommitOutcome::NotWritten,
                })
                .collect(),
            Some(format!("no answer within {COMMIT_TIMEOUT:?}")),
        ),
    };
    let mut left = 0;
    for answer in &answers {
        let effect = context.window.lock().on_commit_outcome(answer);
        report(context, &answer.commit, answer.outcome, effect);
        left += usize::from(answer.outcome == CommitOutcome::NotWritten);
    }
    if let Some(why) = failed {
        tracing::warn!(
            "mirror: committing source {}: {why}; {left} of {asked} partitions retried at the next commit",
            context.source,
        );
    }
    context.window.lock().on_round_done();
    context.window.changed();
}

/// Counts and reports one commit's outcome.
fn report(context: &CommitContext, commit: &Commit, outcome: CommitOutcome, effect: CommitEffect) {
    if outcome.is_done() {
        context.stats.commits.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            "mirror: committed {}/{} at {}",
            commit.topic,
            commit.partition,
            commit.offset
        );
        if let Some(observer) = &context.observer {
            observer.committed(&MirrorEvent {
                source: context.source,
                topic: &commit.topic,
                partition: commit.partition,
                offset: commit.offset,
                epoch: commit.epoch,
                stream: None,
            });
        }
    } else if outcome.is_not_ours() {
        let resent = match effect {
            CommitEffect::Dropped { resent } => resent,
            _ => 0,
        };
        tracing::info!("mirror: {}/{} is no longer this member's in epoch {} ({outcome:?}); its {resent} unacknowledged messages are sent again by whoever reads it next", commit.topic, commit.partition, commit.epoch);
    }
}
