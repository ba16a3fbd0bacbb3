//! The partition logs of a broker process and the async operations on them, shared by the
//! broker's request handlers and the replica copier.
//!
//! Each partition's [`Log`] sits behind an async mutex. An operation takes the lock, then runs
//! its disk work through [`Env::blocking`] while still holding it, and gets the guard back only
//! when the environment says the work is done. So the lock covers exactly the work (in the
//! simulator, the disk's latency too) and a task waiting for a busy partition never blocks a
//! runtime thread.
//!
//! Flushes happen in two steps ([`flush`]): the fsync runs with no lock held, so fetches of
//! already-flushed data and appends never wait for it.
//!
//! An operation that panics marks its partition failed before the panic goes on: the log's
//! state may be half-updated, so it serves nothing more, and the panic stops the broker.
//!
//! Every operation ends by publishing the partition's state, and publishing marks the
//! partition for the broker's timers ([`Activity`]) when an append left unflushed bytes or its
//! flushed end moved: the flush timer and the checkpoint visit only what is marked. The log's
//! lock is handed out only for reading ([`Partition::lock`]), so no change escapes this.

mod activity;

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{watch, OwnedMutexGuard};
use tributary_core::log::{Log, LogCell, LogError, LogFs, LogManager, TopicPartition};
use tributary_core::mirror::position::SourceKey;

use self::activity::Flags;
pub use self::activity::{Activity, Mark};
use crate::env::Env;
use crate::metrics::broker::BrokerMeter;
use crate::sync::lock;

/// What has been made durable in a partition, published after every operation on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Durable {
    /// The flushed end: every byte below it is durable and visible.
    pub flushed_end: u64,
    /// The partition takes no more writes (a failed fsync, or a failed operation): what is not
    /// durable yet never will be.
    pub stopped: bool,
}

/// One partition: its log behind an async lock, and what is durable in it (for producers
/// waiting for their data to be flushed).
#[derive(Debug)]
pub struct Partition<F: LogFs> {
    tp: TopicPartition,
    log: Arc<tokio::sync::Mutex<Log<F>>>,
    durable: watch::Sender<Durable>,
    /// The written end, published after every operation (for metrics, read without the lock).
    written_end: AtomicU64,
    /// Per source partition copied here with positions: the source offset its durable copy
    /// reaches, published when the flushed end moves (for metrics, read without the log's lock).
    held: std::sync::Mutex<Vec<(SourceKey, i64)>>,
    /// The broker's book of partitions its timers must look at, and this one's marks in it.
    activity: Arc<Activity<F>>,
    flags: Flags,
}

/// Per source partition recorded in `log`'s positions: how far its copy reaches within the
/// flushed end.
fn durably_held<F: LogFs>(log: &Log<F>, flushed_end: u64) -> Vec<(SourceKey, i64)> {
    log.positions().map_or_else(Vec::new, |book| {
        book.held_within(flushed_end)
            .map(|p| (p.key.clone(), p.source_next))
            .collect()
    })
}

impl<F: LogFs> LogCell<F> for Partition<F> {
    type Shared = Activity<F>;

    /// A log just opened (recovered) or created has nothing unflushed, so it needs no mark
    /// until an operation on it.
    fn hold(log: Log<F>, activity: &Arc<Activity<F>>) -> Self {
        debug_assert_eq!(
            log.flushed_end(),
            log.written_end(),
            "{}: a log handed to the broker with unflushed bytes would not be flushed by its timer until written to",
            log.topic_partition()
        );
        let durable = Durable {
            flushed_end: log.flushed_end(),
            stopped: log.is_poisoned() || log.is_failed(),
        };
        Partition {
            tp: log.topic_partition().clone(),
            activity: activity.clone(),
            flags: Flags::default(),
            held: std::sync::Mutex::new(durably_held(&log, durable.flushed_end)),
            written_end: AtomicU64::new(log.written_end()),
            log: Arc::new(tokio::sync::Mutex::new(log)),
            durable: watch::channel(durable).0,
        }
    }
}

/// A partition's log, locked for reading its state.
#[derive(Debug)]
pub struct Reading<'a, F: LogFs>(tokio::sync::MutexGuard<'a, Log<F>>);

impl<F: LogFs> std::ops::Deref for Reading<'_, F> {
    type Target = Log<F>;

    fn deref(&self) -> &Log<F> {
        &self.0
    }
}

impl<F: LogFs> Partition<F> {
    /// The partition this is.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    /// Locks the log for a quick read of its state. Changes go through [`with_log`], which
    /// publishes them.
    pub async fn lock(&self) -> Reading<'_, F> {
        Reading(self.log.lock().await)
    }

    /// Locks the log for reading if no one holds it.
    pub fn try_lock(&self) -> Result<Reading<'_, F>, tokio::sync::TryLockError> {
        self.log.try_lock().map(Reading)
    }

    /// Follows what is durable.
    pub fn durable(&self) -> watch::Receiver<Durable> {
        self.durable.subscribe()
    }

    /// The written end and the flushed end, as last published (no lock taken).
    pub fn ends(&self) -> (u64, u64) {
        (
            self.written_end.load(Ordering::Relaxed),
            self.durable.borrow().flushed_end,
        )
    }

    /// Publishes `log`'s state, then marks the partition for the timers: when its written end
    /// moved and it holds unflushed bytes (the flush timer keeps it marked until they are
    /// flushed), and when its flushed end moved.
    fn publish(this: &Arc<Self>, log: &Log<F>) {
        let written_before = this.written_end.swap(log.written_end(), Ordering::Relaxed);
        let now = Durable {
            flushed_end: log.flushed_end(),
            stopped: log.is_poisoned() || log.is_failed(),
        };
        let moved = this.durable.send_if_modified(|was| {
            let changed = *was != now;
            *was = now;
            changed
        });
        if moved {
            *lock(&this.held, "a partition's durably held positions") =
                durably_held(log, now.flushed_end);
            this.activity.mark(this, Mark::Flushed);
        }
        if log.written_end() != written_before && log.written_end() > log.flushed_end() {
            this.activity.mark(this, Mark::Unflushed);
        }
    }

    /// Per source partition copied here with positions: the source offset its durable copy
    /// reaches (empty for a partition without positions).
    pub fn held(&self) -> Vec<(SourceKey, i64)> {
        lock(&self.held, "a partition's durably held positions").clone()
    }
}

/// A partition, shared between connections and timers.
pub type SharedLog<F> = Arc<Partition<F>>;
/// Every partition of the broker.
pub type Logs<F> = LogManager<F, Partition<F>>;

/// Runs `op` on the log under its lock, as blocking work of `env`. If `op` panics, the log is
/// marked failed and the panic continues in the caller.
///
/// (Boxed so the compiler checks that the future is `Send` here, once, rather than in every
/// caller, where its inference of the guard's lifetimes fails.)
pub fn with_log<'a, E: Env, R: Send + 'static>(
    env: &'a E,
    log: &'a SharedLog<E::Fs>,
    op: impl FnOnce(&mut Log<E::Fs>) -> R + Send + 'static,
) -> Pin<Box<dyn Future<Output = R> + Send + 'a>> {
    Box::pin(async move {
        let guard = log.log.clone().lock_owned().await;
        let (mut guard, outcome) = env.blocking(move || run_caught(guard, op)).await;
        if let Err(panic) = &outcome {
            guard.fail(format!(
                "an operation panicked: {}",
                crate::sync::panic_message(panic.as_ref())
            ));
        }
        Partition::publish(log, &guard);
        drop(guard);
        outcome.unwrap_or_else(|panic| resume_unwind(panic))
    })
}

/// Runs `op` on the guarded log, catching a panic so the caller can mark the log failed.
fn run_caught<F: LogFs, R>(
    mut guard: OwnedMutexGuard<Log<F>>,
    op: impl FnOnce(&mut Log<F>) -> R,
) -> (OwnedMutexGuard<Log<F>>, std::thread::Result<R>) {
    let outcome = catch_unwind(AssertUnwindSafe(|| op(&mut guard)));
    (guard, outcome)
}

/// Makes everything written to `log` so far durable and visible, in two steps: note what to
/// sync (under the lock), sync (without it), publish the new flushed end (under it again).
/// The sync's duration goes to `meter` (the environment's clock: simulated in the simulator).
pub async fn flush<E: Env>(
    env: &E,
    log: &SharedLog<E::Fs>,
    meter: &BrokerMeter,
) -> Result<(), LogError> {
    let now = env.now_ms();
    let Some(ticket) = with_log(env, log, move |l| l.begin_flush(now)).await? else {
        return Ok(());
    };
    let started = tokio::time::Instant::now();
    let (ticket, synced) = env
        .blocking(move || {
            let synced = ticket.sync();
            (ticket, synced)
        })
        .await;
    meter.flushed(started.elapsed());
    with_log(env, log, move |l| l.finish_flush(ticket, synced)).await
}

/// The logs whose unflushed data is older than their flush interval, from those marked
/// [`Mark::Unflushed`]. A marked partition not due yet, or busy right now (a long read, a
/// roll), stays marked and is looked at again on the next tick rather than waited for, so one
/// slow partition never delays the others' flushes; one with nothing left to flush, or
/// poisoned (it never flushes again), is let go until an operation marks it again.
pub fn due_for_flush<F: LogFs + Clone>(logs: &Logs<F>, now_ms: i64) -> Vec<SharedLog<F>> {
    let activity = logs.shared();
    let mut due = Vec::new();
    for partition in activity.take(Mark::Unflushed) {
        let (is_due, pending) = match partition.try_lock() {
            Ok(l) => (
                l.flush_due(now_ms),
                !l.is_poisoned() && l.written_end() > l.flushed_end(),
            ),
            Err(_) => (false, true),
        };
        let forget = !is_due
            && tributary_core::planted::active(
                tributary_core::planted::Bug::FlushTimerForgetsWaiting,
            );
        if is_due {
            due.push(partition);
        } else if pending && !forget {
            activity.mark(&partition, Mark::Unflushed);
        }
    }
    due
}

/// Writes the recovery checkpoint, recording the flushed end of every partition marked
/// [`Mark::Flushed`] (the others' are recorded already); writes nothing when no end moved.
pub async fn checkpoint_moved<E: Env>(env: &E, logs: &Arc<Logs<E::Fs>>) -> Result<(), LogError> {
    let ends: Vec<(TopicPartition, u64)> = logs
        .shared()
        .take(Mark::Flushed)
        .into_iter()
        .map(|p| (p.tp.clone(), p.durable.borrow().flushed_end))
        .collect();
    let logs = logs.clone();
    env.blocking(move || logs.write_checkpoint(ends)).await
}

/// Each served partition's flushed end, as published (no lock taken).
fn flushed_ends<F: LogFs + Clone>(logs: &Logs<F>) -> BTreeMap<TopicPartition, u64> {
    logs.all()
        .into_iter()
        .map(|(tp, log)| (tp, log.durable().borrow().flushed_end))
        .collect()
}

/// Writes the recovery checkpoint from every partition's flushed end (at shutdown and after a
/// demotion, where visiting every partition once is the point).
pub async fn checkpoint<E: Env>(env: &E, logs: &Arc<Logs<E::Fs>>) -> Result<(), LogError> {
    let ends = flushed_ends(logs);
    let logs = logs.clone();
    env.blocking(move || logs.write_checkpoint(ends)).await
}

/// Applies retention to every partition; returns how many segments went. A partition that
/// fails is logged and skipped, so one bad disk path does not stop retention elsewhere.
pub async fn cleanup<E: Env>(env: &E, logs: &Logs<E::Fs>, now_ms: i64) -> usize {
    let mut deleted = 0;
    for (_, log) in logs.all() {
        match with_log(env, &log, move |l| l.retain(now_ms)).await {
            Ok(n) => deleted += n,
            Err(e) => tracing::error!("{e}"),
        }
    }
    deleted
}

/// Shutdown: flushes every partition, writes the checkpoint, and writes the clean-shutdown
/// marker only if every partition closed without error, the checkpoint was written, and `vouch`
/// (the broker did not stop on a failure); otherwise the next start recovers. A checkpoint or
/// marker the disk refuses is logged as an error, not returned: the stop itself succeeded.
pub async fn close<E: Env>(
    env: &E,
    logs: &Arc<Logs<E::Fs>>,
    now_ms: i64,
    vouch: bool,
) -> Result<(), LogError> {
    let mut clean = vouch;
    for (_, log) in logs.all() {
        let closed = with_log(env, &log, move |l| {
            if l.is_poisoned() {
                Ok(0)
            } else {
                l.close(now_ms)
            }
        })
        .await;
        let poisoned = log.lock().await.is_poisoned();
        if let Err(e) = &closed {
            tracing::error!("{e}");
        }
        clean &= closed.is_ok() && !poisoned;
    }
    // As in the flush scheduler, a checkpoint that cannot be written (a failing disk) is an
    // error for the log, not a failed stop: the next start recovers from the last checkpoint
    // that was written (whose ends the partitions still hold), scanning what lies past it.
    if let Err(e) = checkpoint(env, logs).await {
        tracing::error!("{e}; the next start recovers from the last checkpoint written");
        clean = false;
    }
    if !clean {
        tracing::warn!("not every partition closed cleanly: the next start will recover");
        return Ok(());
    }
    // A marker that cannot be written is logged, not a failed stop, as the checkpoint above:
    // without it the next start recovers (and an atomic write leaves no partial marker; one
    // renamed into place whose directory sync failed still tells the truth: every log closed).
    let logs = logs.clone();
    if let Err(e) = env.blocking(move || logs.write_clean_marker()).await {
        tracing::error!("{e}; the next start will recover");
    }
    Ok(())
}
