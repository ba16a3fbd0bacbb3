//! A producer's connections to brokers: at most [`LANES`] requests in flight at once, each on a
//! connection of its own. A connection goes back to the pool only after a whole exchange on it
//! succeeded: one that failed mid-request is dropped, never reused (0.7 has no correlation ids,
//! so a late answer would be read as the next request's).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tributary_core::producer::LANES;

use crate::client::{connect, ClientError, Connection};
use crate::env::Env;

/// A connection is not reused after sitting idle this long: brokers close idle connections
/// (after 10 minutes), and a produce written into a connection the broker already closed would
/// be lost while looking sent.
pub(super) const IDLE_REUSE_MAX: Duration = Duration::from_secs(120);

/// An idle connection and when it was last used (on [`Env::monotonic`]).
struct Idle<S> {
    conn: Connection<S>,
    used: Duration,
}

/// The pool; see the module docs.
pub(super) struct Pool<S> {
    /// Idle connections per broker, at most [`LANES`] each.
    idle: Mutex<BTreeMap<i32, Vec<Idle<S>>>>,
    /// One permit per request in flight.
    requests: Semaphore,
}

/// A connection lent for one exchange; see [`Lease::give_back`].
pub(super) struct Lease<'a, S> {
    /// The connection.
    pub(super) conn: Connection<S>,
    /// Whether it was dialled for this exchange (not reused).
    pub(super) fresh: bool,
    broker_id: i32,
    pool: &'a Pool<S>,
    _permit: Option<SemaphorePermit<'a>>,
}

impl<S> Default for Pool<S> {
    fn default() -> Self {
        Pool {
            idle: Mutex::default(),
            requests: Semaphore::new(LANES),
        }
    }
}

impl<S> Pool<S> {
    /// A connection to `broker_id` at `host:port` for one exchange, once fewer than [`LANES`]
    /// are lent: an idle one used within [`IDLE_REUSE_MAX`], else one dialled within `timeout`.
    pub(super) async fn checkout<E: Env<Stream = S>>(
        &self,
        env: &E,
        broker_id: i32,
        (host, port): (&str, u16),
        timeout: Duration,
    ) -> Result<Lease<'_, S>, ClientError> {
        // The semaphore is never closed; without a permit the exchange would still be correct.
        let permit = self.requests.acquire().await.ok();
        let reused = {
            let mut idle = crate::sync::lock(&self.idle, "the producer's connections");
            let open = idle.entry(broker_id).or_default();
            let now = env.monotonic();
            open.retain(|i| now.saturating_sub(i.used) < IDLE_REUSE_MAX);
            open.pop()
        };
        let (conn, fresh) = match reused {
            Some(i) => (i.conn, false),
            None => (connect(env, host, port, timeout).await?, true),
        };
        Ok(Lease {
            conn,
            fresh,
            broker_id,
            pool: self,
            _permit: permit,
        })
    }

    /// Drops the idle connections to `broker_id`: one to it just failed, and they were most
    /// likely opened to the same broker process.
    pub(super) fn discard(&self, broker_id: i32) {
        crate::sync::lock(&self.idle, "the producer's connections").remove(&broker_id);
    }
}

impl<S> Lease<'_, S> {
    /// The exchange succeeded: the connection is idle again from `now` (on [`Env::monotonic`]),
    /// for the next one.
    pub(super) fn give_back(self, now: Duration) {
        let Lease {
            conn,
            broker_id,
            pool,
            ..
        } = self;
        let mut idle = crate::sync::lock(&pool.idle, "the producer's connections");
        let open = idle.entry(broker_id).or_default();
        if open.len() < LANES {
            open.push(Idle { conn, used: now });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Two exchanges at once get two connections; a third waits for one of them.
    #[tokio::test]
    async fn at_most_lanes_connections_are_lent_and_only_a_good_one_comes_back() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                kept.push(stream);
            }
        });
        let env = crate::env::TokioEnv;
        let pool = Pool::default();
        let timeout = Duration::from_secs(5);
        let a = pool
            .checkout(&env, 1, ("127.0.0.1", port), timeout)
            .await
            .unwrap();
        let b = pool
            .checkout(&env, 1, ("127.0.0.1", port), timeout)
            .await
            .unwrap();
        assert!(a.fresh && b.fresh);
        let third = pool.checkout(&env, 1, ("127.0.0.1", port), timeout);
        let waited = tokio::time::timeout(Duration::from_millis(100), third).await;
        assert!(
            waited.is_err(),
            "a third exchange waits while {LANES} are lent"
        );
        a.give_back(env.monotonic());
        drop(b);
        let c = pool
            .checkout(&env, 1, ("127.0.0.1", port), timeout)
            .await
            .unwrap();
        assert!(!c.fresh, "the connection given back is reused");
        let d = pool
            .checkout(&env, 1, ("127.0.0.1", port), timeout)
            .await
            .unwrap();
        assert!(d.fresh, "the one dropped (a failed exchange) is not");
        c.give_back(env.monotonic());
        pool.discard(1);
        let e = pool
            .checkout(&env, 1, ("127.0.0.1", port), timeout)
            .await
            .unwrap();
        assert!(e.fresh, "discarded with its broker's failure");
        accepted.abort();
    }
}
