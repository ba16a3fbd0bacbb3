//! The copier's failures to reach something (the source's ZooKeeper or broker, its own
//! cluster's ZooKeeper), said without filling the log while the failure lasts: the first at
//! once, then at most one line a minute counting the attempts in between, and one line when it
//! answers again. A source that is gone for good (a failed-over cluster) is retried quietly.

use std::fmt::Display;

/// The least time between two lines about the same failure, in ms.
pub(super) const SAY_EVERY_MS: i64 = 60_000;

/// One thing the copier keeps trying to reach.
#[derive(Debug)]
pub(super) struct Trouble {
    /// What is reached, for the log line ("the source's ZooKeeper at …").
    what: String,
    /// Since when it fails, and when it was last said; `None` while it answers.
    failing: Option<Failing>,
}

#[derive(Debug, Clone, Copy)]
struct Failing {
    since_ms: i64,
    said_ms: i64,
    /// Failed attempts since the last line.
    unsaid: u64,
    /// Failed attempts since it started failing.
    attempts: u64,
}

impl Trouble {
    /// Follows `what`.
    pub(super) fn new(what: impl Into<String>) -> Self {
        Trouble {
            what: what.into(),
            failing: None,
        }
    }

    /// An attempt failed at `now_ms` for `why`: said, or counted for the next line.
    pub(super) fn failed(&mut self, now_ms: i64, why: impl Display, then: &str) {
        match &mut self.failing {
            None => {
                tracing::warn!("replica: {}: {why}; {then}", self.what);
                self.failing = Some(Failing {
                    since_ms: now_ms,
                    said_ms: now_ms,
                    unsaid: 0,
                    attempts: 1,
                });
            }
            Some(f) => {
                f.attempts += 1;
                if now_ms - f.said_ms < SAY_EVERY_MS {
                    f.unsaid += 1;
                    return;
                }
                tracing::warn!(
                    "replica: {}: {why}; {then} (failing for {} s, {} attempts since the last line)",
                    self.what,
                    (now_ms - f.since_ms) / 1000,
                    f.unsaid + 1
                );
                f.said_ms = now_ms;
                f.unsaid = 0;
            }
        }
    }

    /// An attempt succeeded at `now_ms`: says so when it had been failing.
    pub(super) fn answered(&mut self, now_ms: i64) {
        if let Some(f) = self.failing.take() {
            tracing::info!(
                "replica: {} answers again (it failed for {} s, {} attempts)",
                self.what,
                (now_ms - f.since_ms) / 1000,
                f.attempts
            );
        }
    }

    /// Whether a line was held back since the last one (for tests).
    #[cfg(test)]
    fn unsaid(&self) -> u64 {
        self.failing.map_or(0, |f| f.unsaid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_failure_is_said_once_then_once_a_minute() {
        let mut t = Trouble::new("x");
        t.failed(0, "down", "retrying");
        for second in 1..60 {
            t.failed(second * 1000, "down", "retrying");
        }
        assert_eq!(t.unsaid(), 59, "held back within the minute");
        t.failed(60_000, "down", "retrying");
        assert_eq!(t.unsaid(), 0, "said again after a minute");
        t.answered(61_000);
        t.failed(62_000, "down", "retrying");
        assert_eq!(t.unsaid(), 0, "a new failure is said at once");
    }
}
