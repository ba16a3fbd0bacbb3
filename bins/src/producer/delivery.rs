//! Where a message's fate is reported. Each message sent on its own gets a [`Delivery`] of its
//! own; a caller handing on a run of messages together (the mirror: consecutive messages of one
//! source partition) can have them all report into one [`RunDelivery`] instead, which resolves
//! once every message of the run is decided: one allocation and one wake-up per run rather
//! than per message.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::sync::oneshot;

use super::{Delivered, SendError};

/// One message's (or one run's) outcome.
pub(crate) type Outcome = Result<Delivered, SendError>;

/// What became of one message, or of a run of messages handed on together; resolves once it
/// is known. A run resolves as its worst message: the first failure reported, else a message
/// delivered without a durable acknowledgement, else the last message delivered.
#[derive(Debug)]
pub struct Delivery(Awaited);

#[derive(Debug)]
enum Awaited {
    One(oneshot::Receiver<Outcome>),
    Run(Arc<Mutex<RunState>>),
}

impl Delivery {
    /// A delivery of one message, and where its outcome is reported.
    pub(crate) fn pending() -> (Self, Done) {
        let (tx, rx) = oneshot::channel();
        (Delivery(Awaited::One(rx)), Done(Report::One(tx)))
    }

    /// The outcome if it is known already, without waiting (and without registering a waker):
    /// `None` while the message is still on its way. Once it returned the outcome, the
    /// delivery is spent (a later call or poll reports `SendError::Closed`).
    pub fn try_take(&mut self) -> Option<Outcome> {
        match &mut self.0 {
            Awaited::One(rx) => match rx.try_recv() {
                Ok(outcome) => Some(outcome),
                Err(oneshot::error::TryRecvError::Empty) => None,
                // A dropped sender means the producer went away before deciding: not
                // delivered.
                Err(oneshot::error::TryRecvError::Closed) => Some(Err(SendError::Closed)),
            },
            Awaited::Run(run) => lock(run).take(),
        }
    }
}

impl Future for Delivery {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match &mut self.get_mut().0 {
            // A dropped sender means the producer went away before deciding: not delivered.
            Awaited::One(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(SendError::Closed))),
            Awaited::Run(run) => {
                let mut state = lock(run);
                match state.take() {
                    Some(outcome) => Poll::Ready(outcome),
                    None => {
                        state.waker = Some(cx.waker().clone());
                        Poll::Pending
                    }
                }
            }
        }
    }
}

/// Where one message's outcome goes: its own delivery, or its run's. Dropped without a word
/// (the producer went away before deciding), it reports `SendError::Closed`.
#[derive(Debug)]
pub(crate) struct Done(Report);

#[derive(Debug)]
enum Report {
    One(oneshot::Sender<Outcome>),
    Run(Arc<Mutex<RunState>>),
    /// Reported already (a run's share, once resolved).
    Spent,
}

impl Done {
    /// Reports `outcome`. Nobody may be waiting any more (the caller dropped its delivery):
    /// then it goes nowhere.
    pub(crate) fn resolve(mut self, outcome: Outcome) {
        match std::mem::replace(&mut self.0, Report::Spent) {
            Report::One(tx) => {
                let _nobody_waiting = tx.send(outcome);
            }
            Report::Run(run) => lock(&run).decided(outcome),
            Report::Spent => {}
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        // A run waits for every share: one dropped undecided fails the run rather than leave
        // it waiting forever. (A single delivery sees its sender dropped.)
        if let Report::Run(run) = std::mem::replace(&mut self.0, Report::Spent) {
            lock(&run).decided(Err(SendError::Closed));
        }
    }
}

/// A run of messages being handed on together: each gets a share ([`RunDelivery::share`]),
/// and once the last is handed on, [`RunDelivery::seal`] gives the run's [`Delivery`]. A run
/// dropped unsealed is never awaited (its shares still resolve, into nothing).
#[derive(Debug)]
pub struct RunDelivery(Arc<Mutex<RunState>>);

impl RunDelivery {
    /// An empty run.
    pub fn new() -> Self {
        RunDelivery(Arc::new(Mutex::new(RunState::default())))
    }

    /// Where the next message of the run reports its outcome.
    pub(crate) fn share(&self) -> Done {
        lock(&self.0).undecided += 1;
        Done(Report::Run(self.0.clone()))
    }

    /// No more messages join the run: its delivery, which resolves once every share is
    /// decided (at once when all are already). A run without a share resolves as
    /// `SendError::Closed`: nothing of it was handed on.
    pub fn seal(self) -> Delivery {
        let mut state = lock(&self.0);
        if state.undecided == 0 && state.outcome.is_none() {
            state.outcome = Some(Err(SendError::Closed));
        }
        drop(state);
        Delivery(Awaited::Run(self.0))
    }
}

impl Default for RunDelivery {
    fn default() -> Self {
        Self::new()
    }
}

/// A run's shares decided so far, and who waits for the run.
#[derive(Debug, Default)]
struct RunState {
    /// Shares given out and not yet decided. (Nobody looks before the run is sealed: its
    /// delivery only exists from then on.)
    undecided: usize,
    /// The run's outcome so far (see [`Delivery`]); taken once.
    outcome: Option<Outcome>,
    /// Taken already: a later look reports `SendError::Closed`.
    taken: bool,
    /// The task waiting for the run.
    waker: Option<Waker>,
}

impl RunState {
    /// One share decided: the run's outcome becomes the worse of the two; the waiting task is
    /// woken once the last share is in (a task waits only on a sealed run).
    fn decided(&mut self, outcome: Outcome) {
        self.undecided = self.undecided.saturating_sub(1);
        let worse = match (&self.outcome, &outcome) {
            (None, _) => true,
            (Some(Err(_)), _) => false,
            (Some(Ok(_)), Err(_)) => true,
            (Some(Ok(kept)), Ok(new)) => kept.offset.is_some() || new.offset.is_none(),
        };
        if worse {
            self.outcome = Some(outcome);
        }
        if self.is_decided() {
            if let Some(waker) = self.waker.take() {
                waker.wake();
            }
        }
    }

    fn is_decided(&self) -> bool {
        self.undecided == 0
    }

    /// The run's outcome once every share is decided.
    fn take(&mut self) -> Option<Outcome> {
        if !self.is_decided() {
            return None;
        }
        if std::mem::replace(&mut self.taken, true) {
            return Some(Err(SendError::Closed));
        }
        Some(self.outcome.take().unwrap_or(Err(SendError::Closed)))
    }
}

/// A run's state. Only memory work happens under this lock; a poisoned one is a bug here, and
/// stops the task that meets it.
#[allow(clippy::panic)]
fn lock(run: &Mutex<RunState>) -> MutexGuard<'_, RunState> {
    run.lock()
        .unwrap_or_else(|_| panic!("a run delivery's lock was poisoned"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivered(offset: Option<i64>) -> Outcome {
        Ok(Delivered {
            broker_id: 0,
            partition: 0,
            offset,
            held: false,
        })
    }

    #[tokio::test]
    async fn a_run_resolves_once_sealed_and_every_share_is_decided() {
        let run = RunDelivery::new();
        let (first, second) = (run.share(), run.share());
        first.resolve(delivered(Some(1)));
        let mut delivery = run.seal();
        assert!(delivery.try_take().is_none(), "one share still undecided");
        second.resolve(delivered(Some(2)));
        let outcome = (&mut delivery).await.unwrap();
        assert_eq!(outcome.offset, Some(2), "the last message delivered");
        assert!(
            matches!(delivery.try_take(), Some(Err(SendError::Closed))),
            "spent"
        );
    }

    #[tokio::test]
    async fn a_run_is_as_bad_as_its_worst_message() {
        let run = RunDelivery::new();
        let shares: Vec<Done> = (0..4).map(|_| run.share()).collect();
        let delivery = run.seal();
        let mut shares = shares.into_iter();
        shares.next().unwrap().resolve(delivered(Some(1)));
        shares.next().unwrap().resolve(delivered(None));
        shares.next().unwrap().resolve(Err(SendError::Closed));
        shares.next().unwrap().resolve(delivered(Some(4)));
        assert!(
            matches!(delivery.await, Err(SendError::Closed)),
            "the failure wins"
        );
        // Without a failure, a message without a durable acknowledgement wins.
        let run = RunDelivery::new();
        let (a, b) = (run.share(), run.share());
        let delivery = run.seal();
        a.resolve(delivered(None));
        b.resolve(delivered(Some(2)));
        assert_eq!(delivery.await.unwrap().offset, None);
    }

    #[tokio::test]
    async fn a_share_dropped_undecided_fails_its_run_and_an_empty_run_is_not_delivered() {
        let run = RunDelivery::new();
        let (kept, dropped) = (run.share(), run.share());
        let delivery = run.seal();
        drop(dropped);
        kept.resolve(delivered(Some(1)));
        assert!(matches!(delivery.await, Err(SendError::Closed)));
        assert!(matches!(
            RunDelivery::new().seal().await,
            Err(SendError::Closed)
        ));
    }
}
