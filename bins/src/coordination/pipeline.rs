//! Many independent requests on one ZooKeeper session, pipelined: a bounded number in flight,
//! outcomes taken in order. ZooKeeper applies one session's requests in the order they were
//! sent, so a request made after the pipeline is applied after every request it started.

use futures_util::StreamExt;

/// Requests kept in flight at once on one ZooKeeper session when many partitions are
/// committed, claimed, released or looked up. One after another, 10,000 partitions take 10,000 round
/// trips (10 s at 1 ms each, longer than a commit interval); pipelined, about 10,000 / this
/// many. Bounded so that many partitions hold a bounded number of requests at once.
pub const REQUESTS_IN_FLIGHT: usize = 128;

/// Runs `requests`, at most [`REQUESTS_IN_FLIGHT`] at once on the session (ZooKeeper applies
/// a session's requests in the order sent), and hands each outcome to `each` in order. Once
/// `each` breaks, no further request is started; those in flight are abandoned (each may land
/// or not: callers only pipeline requests that are safe either way, and a later request of the
/// session is applied after them).
pub async fn pipelined<F: std::future::Future>(
    mut requests: impl Iterator<Item = F>,
    mut each: impl FnMut(F::Output) -> std::ops::ControlFlow<()>,
) {
    let mut in_flight = futures_util::stream::FuturesOrdered::new();
    loop {
        while in_flight.len() < REQUESTS_IN_FLIGHT {
            match requests.next() {
                Some(request) => in_flight.push_back(request),
                None => break,
            }
        }
        match in_flight.next().await {
            None => return,
            Some(outcome) => {
                if each(outcome).is_break() {
                    return;
                }
            }
        }
    }
}
