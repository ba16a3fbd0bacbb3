//! Which brokers a producer cannot send to, and how, said plainly: a broker that fails is
//! logged at once as a warning naming it, its address and what happened (refused: nothing
//! listens there; closed; no answer; an answer that is not Kafka 0.7's, e.g. a ZooKeeper port),
//! then again every [`SAY_EVERY`] while it keeps failing, with how often and for how long; its
//! recovery is logged too. Every failure is counted (`ProducerStats::target_failures`). The
//! producer keeps retrying as 0.7's does (waiting out an outage); this only makes it visible.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::ProducerStats;
use crate::client::ClientError;

/// How often a broker that keeps failing is spoken of.
pub const SAY_EVERY: Duration = Duration::from_secs(30);
/// The most brokers remembered as failing (a broker id is a small number; more is a bug).
const FAILING_MAX: usize = 4096;

/// A broker that is failing.
#[derive(Debug)]
struct Failing {
    since: Instant,
    failures: u64,
    said_at: Instant,
}

/// The producer's failing brokers.
#[derive(Debug, Default)]
pub(super) struct Targets {
    failing: Mutex<BTreeMap<i32, Failing>>,
}

/// What went wrong, for people.
pub(crate) fn how(error: &ClientError) -> String {
    match error {
        ClientError::Io { source, .. } if source.kind() == ErrorKind::ConnectionRefused => {
            "connection refused: nothing listens on that port".to_string()
        }
        ClientError::Io { source, .. } => format!("connection failed: {source}"),
        ClientError::Timeout { timeout, .. } => {
            format!("no answer within {timeout:?} (a stalled broker, or not a Kafka broker)")
        }
        ClientError::Closed(_) => {
            "it closed the connection (not a Kafka broker, or it refused the request)".to_string()
        }
        ClientError::Decode { source, .. } if source.looks_like_tls() => format!(
            "its answer is a TLS record, not a Kafka 0.7 response: that port is an SSL listener; set security.protocol=ssl ({source})"
        ),
        ClientError::Decode { source, .. } => format!(
            "its answer is not a Kafka 0.7 response ({source}): is that a ZooKeeper or another service's port?"
        ),
        other => other.to_string(),
    }
}

impl Targets {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, Failing>> {
        crate::sync::lock(&self.failing, "the producer's failing brokers")
    }

    /// `broker` at `address` failed with `error`: counted, and said when due.
    pub fn failed(&self, stats: &ProducerStats, broker: i32, address: &str, error: &ClientError) {
        stats.target_failures.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut failing = self.lock();
        if !failing.contains_key(&broker) && failing.len() >= FAILING_MAX {
            return;
        }
        let entry = failing.entry(broker).or_insert(Failing {
            since: now,
            failures: 0,
            said_at: now,
        });
        entry.failures += 1;
        if entry.failures == 1 {
            tracing::warn!(
                "producer: broker {broker} at {address}: {}; retrying",
                how(error)
            );
        } else if now.duration_since(entry.said_at) >= SAY_EVERY {
            entry.said_at = now;
            tracing::warn!(
                "producer: broker {broker} at {address} has failed {} times over {:?}: {}; still retrying",
                entry.failures,
                now.duration_since(entry.since),
                how(error)
            );
        }
    }

    /// `broker` answered: if it was failing, that is said.
    pub fn answered(&self, broker: i32, address: &str) {
        if let Some(was) = self.lock().remove(&broker) {
            tracing::info!(
                "producer: broker {broker} at {address} answers again after {} failures over {:?}",
                was.failures,
                Instant::now().duration_since(was.since)
            );
        }
    }
}
