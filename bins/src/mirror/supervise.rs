//! The embedded mirror's supervisor: a mirror broker keeps serving its own cluster whatever its
//! mirror does. A mirror that fails (a send refused for good, a source it cannot join) is
//! started again after a pause that doubles from [`BACKOFF_MIN`] to [`BACKOFF_MAX`] (back to
//! the minimum once a run lasted [`STEADY`]); each restart is logged as an error with its cause
//! and counted in `tributary_mirror_restarts_total`. A mirror whose settings are wrong
//! (`MirrorError::Config`, e.g. mirroring a cluster into itself) is not started again: that is
//! the operator's to fix, and the error is returned.
//!
//! What a failed run did not commit is sent again by the next (the duplicates the in-flight
//! window bounds); nothing is skipped, since offsets are committed only for what the mirror
//! cluster acknowledged.

use std::time::Duration;

use tokio::sync::watch;

use super::{Mirror, MirrorError, MirrorSettings};
use crate::env::Env;

/// The first pause before a restart.
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest pause before a restart.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A run this long resets the pause to [`BACKOFF_MIN`].
pub const STEADY: Duration = Duration::from_secs(300);

/// Resolves once `stop` holds `true` (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Runs the mirror until `stop` turns `true`, each start's environment and settings from
/// `start` (production gives the same every time; the simulator gives each start its own
/// observer), starting it again after every failure (see the module's documentation), each
/// failure told to `failed` before the pause. `Ok` once stopped; `Err` only for settings that
/// cannot work.
pub async fn supervise_each<E: Env>(
    mut start: impl FnMut() -> (E, MirrorSettings),
    mut failed: impl FnMut(&MirrorError),
    stop: watch::Receiver<bool>,
) -> Result<(), MirrorError> {
    let mut backoff = BACKOFF_MIN;
    loop {
        let (env, settings) = start();
        let restarts = settings
            .metrics
            .as_ref()
            .map(|m| m.mirror().restarts.clone());
        let started = tokio::select! {
            biased;
            () = stopped(stop.clone()) => return Ok(()),
            started = Mirror::start(env, settings) => started,
        };
        let failure = match started {
            Err(MirrorError::Config(e)) => return Err(MirrorError::Config(e)),
            Err(e) => {
                failed(&e);
                format!("the mirror could not start: {e}")
            }
            Ok(mirror) => {
                let began = tokio::time::Instant::now();
                match mirror.run_until(stopped(stop.clone())).await {
                    Ok(()) => return Ok(()),
                    Err(MirrorError::Config(e)) => return Err(MirrorError::Config(e)),
                    Err(e) => {
                        if began.elapsed() >= STEADY {
                            backoff = BACKOFF_MIN;
                        }
                        failed(&e);
                        // Says itself that mirroring stopped, and why.
                        e.to_string()
                    }
                }
            }
        };
        if let Some(restarts) = &restarts {
            restarts.inc();
        }
        tracing::error!(
            "{failure}; starting it again in {backoff:?} (the broker goes on serving; what was not committed is sent again)"
        );
        tokio::select! {
            biased;
            () = stopped(stop.clone()) => return Ok(()),
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}
