//! Durable acknowledgements (ACKED_PRODUCE) and their group commit.
//!
//! A producer that asked for an acknowledgement waits until its data is flushed. Rather than
//! one fsync per request, partitions with waiting producers are queued to the committer, which
//! flushes each queued partition once: every producer that appended to it before the flush is
//! acknowledged by that one fsync.
//!
//! Before a flush the committer waits for the requests already being appended (each holds an
//! [`Arriving`] while it appends), at most `acks.flush.delay.ms`: those would otherwise wait a
//! whole flush more. It does not wait for requests still being read or not yet sent: with one
//! producer, or producers that all wait on this flush, a fixed delay would only idle the disk.
//! Requests that arrive during a flush are the next flush's group, taken as soon as it ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tributary_core::log::{LogFs, TopicPartition};

use crate::env::Env;
use crate::logs::{self, SharedLog};
use crate::metrics::broker::BrokerMeter;
use crate::pending::{pending, PendingSender};

/// Asks the committer to flush a partition soon. A partition asked for again before its flush
/// is pending once: what waits is bounded by the number of partitions, not of requests.
#[derive(Debug, Clone)]
pub struct FlushRequests<F: LogFs> {
    tx: PendingSender<TopicPartition, SharedLog<F>>,
    arriving: Arc<watch::Sender<usize>>,
}

/// A request that will ask for flushes is being appended; the committer's next flush waits
/// for it (within the delay). Dropping it says its flushes have been asked for.
#[derive(Debug)]
#[must_use = "the committer waits for the request only while this is held"]
pub struct Arriving {
    count: Arc<watch::Sender<usize>>,
}

impl Drop for Arriving {
    fn drop(&mut self) {
        self.count.send_modify(|n| {
            // Every Arriving added one: the count cannot be zero while one is alive.
            assert!(*n > 0, "an arriving request was counted out twice");
            *n -= 1;
        });
    }
}

/// Why an acknowledgement cannot be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckFailure {
    /// The partition stopped taking writes (failed fsync, failed operation) before the data
    /// was durable.
    Stopped,
    /// The data was not durable within the deadline.
    TimedOut,
    /// The committer is gone (the broker is stopping).
    ShuttingDown,
}

impl<F: LogFs + Send + Sync + 'static> FlushRequests<F> {
    /// Says a request that will ask for flushes is being appended: hold the result until its
    /// flushes are asked for ([`FlushRequests::request`]).
    pub fn arriving(&self) -> Arriving {
        self.arriving.send_modify(|n| *n += 1);
        Arriving {
            count: self.arriving.clone(),
        }
    }

    /// Asks the committer to flush `log` soon (if it is not durable up to `end` already).
    pub fn request(
        &self,
        tp: &TopicPartition,
        log: &SharedLog<F>,
        end: u64,
    ) -> Result<(), AckFailure> {
        if log.durable().borrow().flushed_end >= end {
            return Ok(());
        }
        self.tx
            .add(tp.clone(), log.clone())
            .map_err(|_| AckFailure::ShuttingDown)
    }

    /// Waits until `log` is durable up to `end` (after [`FlushRequests::request`]), at most
    /// until `deadline`.
    pub async fn wait_durable(
        &self,
        log: &SharedLog<F>,
        end: u64,
        deadline: tokio::time::Instant,
    ) -> Result<(), AckFailure> {
        if tributary_core::planted::active(tributary_core::planted::Bug::AckBeforeFlush) {
            return Ok(());
        }
        let mut durable = log.durable();
        let reached = async {
            durable
                .wait_for(|d| d.flushed_end >= end || d.stopped)
                .await
                .map(|d| *d)
        };
        match tokio::time::timeout_at(deadline, reached).await {
            Ok(Ok(d)) if d.flushed_end >= end => Ok(()),
            Ok(Ok(_)) => Err(AckFailure::Stopped),
            Ok(Err(_)) => Err(AckFailure::ShuttingDown),
            Err(_) => Err(AckFailure::TimedOut),
        }
    }
}

/// Starts the committer; it runs until `stop` changes. A panic inside a flush ends it with
/// that panic (the broker stops on it).
pub fn start<E: Env>(
    env: E,
    delay: Duration,
    meter: BrokerMeter,
    mut stop: watch::Receiver<bool>,
) -> (
    FlushRequests<E::Fs>,
    impl std::future::Future<Output = ()> + Send,
) {
    let (tx, mut rx) = pending::<TopicPartition, SharedLog<E::Fs>>();
    let (arriving, mut arrived) = watch::channel(0usize);
    let task = async move {
        loop {
            let mut due = tokio::select! {
                biased;
                _ = stop.changed() => return,
                due = rx.next() => due,
            };
            // Let the requests being appended now join this flush. Whether they all did, the
            // delay passed, or the broker is stopping (every sender gone), the flush goes ahead.
            let joined = async { arrived.wait_for(|n| *n == 0).await.is_ok() };
            drop(tokio::time::timeout(delay, joined).await);
            // One flush per partition, in partition order (deterministic).
            due.extend(rx.take_now());
            let mut flushes = JoinSet::new();
            for log in due.into_values() {
                let (env, meter) = (env.clone(), meter.clone());
                flushes.spawn(async move { logs::flush(&env, &log, &meter).await });
            }
            while let Some(joined) = flushes.join_next().await {
                match joined {
                    Ok(Ok(())) => {}
                    // The partition is poisoned; its waiters see `stopped` and answer an error.
                    Ok(Err(e)) => tracing::error!("{e}"),
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => tracing::error!("a flush for acknowledgements was cancelled: {e}"),
                }
            }
        }
    };
    (
        FlushRequests {
            tx,
            arriving: Arc::new(arriving),
        },
        task,
    )
}
