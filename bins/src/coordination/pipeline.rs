//! Many independent requests on one ZooKeeper session, pipelined: a bounded number in flight,
//! outcomes taken in order. ZooKeeper applies one session's requests in the order they were
//! sent, so a request made after the pipeline is applied after every request it started.

use futures_util::StreamExt;

/// Requests kept in flight at once on one ZooKeeper session when many partitions are
/// committed, claimed, released or looked up. One after another, 10,000 partitions take 10,000
/// round trips (10 s at 1 ms each, longer than a commit interval); pipelined, about 10,000 /
/// this many. Bounded so that many partitions hold a bounded number of requests at once.
pub const REQUESTS_IN_FLIGHT: usize = 128;

/// Runs `requests`, at most [`REQUESTS_IN_FLIGHT`] at once on the session (ZooKeeper applies
/// a session's requests in the order sent), and hands each outcome to `each` in order. Once
/// `each` breaks, no further request is started; those in flight are abandoned (each may land
/// or not: callers only pipeline requests that are safe either way, and a later request of the
/// session is applied after them).
pub async fn pipelined<F: std::future::Future>(
    requests: impl Iterator<Item = F>,
    each: impl FnMut(F::Output) -> std::ops::ControlFlow<()>,
) {
    run(requests, each, false, REQUESTS_IN_FLIGHT).await
}

/// What a fallible pipeline ([`try_pipelined`]) does with the requests in flight when one
/// fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    /// They are abandoned: each may land or not, unseen. For requests safe either way.
    Abandon,
    /// They are still awaited; only the ones not yet started are dropped. For requests whose
    /// completion has a side effect that must not be lost when they land unseen (a start
    /// recorded in ZooKeeper whose gap report is made on its answer).
    Drain,
}

/// Runs fallible `requests`, at most `limit` (at least one, at most [`REQUESTS_IN_FLIGHT`])
/// in flight on the session, and returns their values in order; or the first error, in which
/// case no further request is started and those in flight are handled as `on_failure` says.
pub async fn try_pipelined<T, Er, F: std::future::Future<Output = Result<T, Er>>>(
    limit: usize,
    on_failure: OnFailure,
    requests: impl Iterator<Item = F>,
) -> Result<Vec<T>, Er> {
    let mut values = Vec::with_capacity(requests.size_hint().0);
    let mut failed = None;
    let each = |outcome| match outcome {
        Ok(value) if failed.is_none() => {
            values.push(value);
            std::ops::ControlFlow::Continue(())
        }
        // Drained after the first failure: awaited, and no longer part of the answer.
        Ok(_) => std::ops::ControlFlow::Break(()),
        Err(e) => {
            failed.get_or_insert(e);
            std::ops::ControlFlow::Break(())
        }
    };
    run(requests, each, on_failure == OnFailure::Drain, limit).await;
    match failed {
        Some(e) => Err(e),
        None => Ok(values),
    }
}

/// Runs every one of `requests`, at most `limit` (at least one, at most
/// [`REQUESTS_IN_FLIGHT`]) in flight on the session, and returns every outcome in order.
pub async fn pipelined_all<F: std::future::Future>(
    limit: usize,
    requests: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut outcomes = Vec::with_capacity(requests.size_hint().0);
    let each = |outcome| {
        outcomes.push(outcome);
        std::ops::ControlFlow::Continue(())
    };
    run(requests, each, false, limit).await;
    outcomes
}

/// Every pipeline: after a break, `drain` awaits what is in flight, otherwise it is abandoned;
/// at most `limit` (at least one, at most [`REQUESTS_IN_FLIGHT`]) in flight.
async fn run<F: std::future::Future>(
    mut requests: impl Iterator<Item = F>,
    mut each: impl FnMut(F::Output) -> std::ops::ControlFlow<()>,
    drain: bool,
    limit: usize,
) {
    let limit = limit.clamp(1, REQUESTS_IN_FLIGHT);
    let mut in_flight = futures_util::stream::FuturesOrdered::new();
    let mut broken = false;
    loop {
        while !broken && in_flight.len() < limit {
            match requests.next() {
                Some(request) => in_flight.push_back(request),
                None => break,
            }
        }
        match in_flight.next().await {
            None => return,
            Some(outcome) => {
                if each(outcome).is_break() {
                    if !drain {
                        return;
                    }
                    broken = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::ops::ControlFlow;

    use super::*;

    /// A request that takes `yields` turns of the scheduler, counting how many are in flight.
    async fn request(
        index: usize,
        yields: usize,
        in_flight: &Cell<usize>,
        most: &Cell<usize>,
    ) -> usize {
        in_flight.set(in_flight.get() + 1);
        most.set(most.get().max(in_flight.get()));
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
        in_flight.set(in_flight.get() - 1);
        index
    }

    #[tokio::test]
    async fn outcomes_come_in_order_with_at_most_the_bound_in_flight() {
        let (in_flight, most) = (Cell::new(0), Cell::new(0));
        let count = REQUESTS_IN_FLIGHT * 3;
        // Later requests finish sooner: the order handed out is still the order asked.
        let requests = (0..count).map(|i| request(i, count - i, &in_flight, &most));
        let mut seen = Vec::new();
        pipelined(requests, |index| {
            seen.push(index);
            ControlFlow::Continue(())
        })
        .await;
        assert_eq!(seen, (0..count).collect::<Vec<_>>());
        assert_eq!(
            most.get(),
            REQUESTS_IN_FLIGHT,
            "never more than the bound, and the bound used"
        );
    }

    #[tokio::test]
    async fn a_pipeline_at_most_a_limit_keeps_that_many_in_flight_in_order() {
        let (in_flight, most) = (Cell::new(0), Cell::new(0));
        let requests = (0..20).map(|i| request(i, 20 - i, &in_flight, &most));
        let seen = pipelined_all(3, requests).await;
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        assert_eq!(
            most.get(),
            3,
            "never more than the limit, and the limit used"
        );
    }

    #[tokio::test]
    async fn a_fallible_pipeline_returns_every_value_in_order_or_the_first_error() {
        let (in_flight, most) = (Cell::new(0), Cell::new(0));
        let (in_flight, most) = (&in_flight, &most);
        let requests = (0..40).map(|i| async move {
            let i = request(i, 40 - i, in_flight, most).await;
            Ok::<_, usize>(i)
        });
        let values = try_pipelined(4, OnFailure::Abandon, requests).await;
        assert_eq!(values, Ok((0..40).collect::<Vec<_>>()));
        assert_eq!(most.get(), 4, "never more than the limit");

        let started = Cell::new(0);
        let requests = (0..40).map(|i| {
            started.set(started.get() + 1);
            async move {
                // Later requests fail first: the error returned is still the first in order.
                let i = request(i, 40 - i, in_flight, most).await;
                if i % 10 == 5 {
                    Err(i)
                } else {
                    Ok(i)
                }
            }
        });
        let values = try_pipelined(8, OnFailure::Abandon, requests).await;
        assert_eq!(values, Err(5));
        // Each of the five values before the failure made room for one more request.
        assert_eq!(
            started.get(),
            5 + 8,
            "nothing started after the failure was seen"
        );
    }

    #[tokio::test]
    async fn nothing_more_is_started_once_an_outcome_breaks() {
        let (in_flight, most) = (Cell::new(0), Cell::new(0));
        let started = Cell::new(0);
        let requests = (0..REQUESTS_IN_FLIGHT * 4).map(|i| {
            started.set(started.get() + 1);
            request(i, 1, &in_flight, &most)
        });
        let mut seen = Vec::new();
        pipelined(requests, |index| {
            seen.push(index);
            if index == 0 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .await;
        assert_eq!(seen, [0]);
        assert_eq!(
            started.get(),
            REQUESTS_IN_FLIGHT,
            "only the first window was started"
        );
    }

    #[tokio::test]
    async fn a_draining_pipeline_awaits_what_is_in_flight_and_starts_nothing_more() {
        let (in_flight, most) = (Cell::new(0), Cell::new(0));
        let (started, finished) = (Cell::new(0), Cell::new(0));
        let requests = (0..REQUESTS_IN_FLIGHT * 4).map(|i| {
            started.set(started.get() + 1);
            let (in_flight, most, finished) = (&in_flight, &most, &finished);
            async move {
                // The first fails first, with every later one still in flight.
                let i = request(i, i + 1, in_flight, most).await;
                finished.set(finished.get() + 1);
                if i == 0 {
                    Err(i)
                } else {
                    Ok(i)
                }
            }
        });
        let values = try_pipelined(REQUESTS_IN_FLIGHT, OnFailure::Drain, requests).await;
        assert_eq!(values, Err(0));
        assert_eq!(
            started.get(),
            REQUESTS_IN_FLIGHT,
            "only the first window was started"
        );
        assert_eq!(
            finished.get(),
            REQUESTS_IN_FLIGHT,
            "every request in flight when the first failed was awaited"
        );
        assert_eq!(in_flight.get(), 0, "none abandoned half-way");
    }
}
