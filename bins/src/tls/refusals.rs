//! Refused TLS handshakes, said without letting a flood of them (a scanner, a client with a
//! wrong certificate retrying in a loop) fill the log: at most one line per [`SAY_EVERY`] per
//! listener, the next one counting those not said in between.

use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::sync::lock;

/// The least time between two lines about refused handshakes on one listener.
pub const SAY_EVERY: Duration = Duration::from_secs(1);

/// One listener's refused handshakes.
#[derive(Debug)]
pub struct RefusalLog {
    /// The listener, for the log line (`SSL listener`, `metrics endpoint`).
    listener: &'static str,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last_said: Option<Instant>,
    unsaid: u64,
}

impl RefusalLog {
    /// The log of `listener`.
    pub fn new(listener: &'static str) -> Self {
        RefusalLog {
            listener,
            state: Mutex::new(State::default()),
        }
    }

    /// A handshake from `peer` failed for `why`: said, or counted for the next line.
    pub fn refused(&self, peer: SocketAddr, why: impl Display) {
        self.refused_at(Instant::now(), peer, why);
    }

    fn refused_at(&self, now: Instant, peer: SocketAddr, why: impl Display) {
        let unsaid = {
            let mut state = lock(&self.state, "refused TLS handshakes");
            if state
                .last_said
                .is_some_and(|at| now.duration_since(at) < SAY_EVERY)
            {
                state.unsaid += 1;
                return;
            }
            state.last_said = Some(now);
            std::mem::take(&mut state.unsaid)
        };
        match unsaid {
            0 => tracing::warn!("{}: {peer}: {why}", self.listener),
            more => tracing::warn!(
                "{}: {peer}: {why} ({more} more refused since the last line)",
                self.listener
            ),
        }
    }

    /// Refusals not said yet (counted since the last line).
    pub fn unsaid(&self) -> u64 {
        lock(&self.state, "refused TLS handshakes").unsaid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_said_once_a_second_with_its_count() {
        let log = RefusalLog::new("SSL listener");
        let peer: SocketAddr = ([127, 0, 0, 1], 9).into();
        let start = Instant::now();
        log.refused_at(start, peer, "TLS handshake refused");
        for _ in 0..1000 {
            log.refused_at(start, peer, "TLS handshake refused");
        }
        assert_eq!(log.unsaid(), 1000, "said once, the rest counted");
        log.refused_at(start + SAY_EVERY, peer, "TLS handshake refused");
        assert_eq!(log.unsaid(), 0, "the next line carries the count");
    }
}
