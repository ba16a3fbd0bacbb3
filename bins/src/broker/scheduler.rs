//! The flush scheduler and the cleaner, on the environment's clock.
//!
//! Both run until shutdown. A panic inside either (or inside one of the flushes they start)
//! ends the task with that panic, which the broker's run loop sees and stops on.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tributary_core::config::BrokerConfig;

use super::limits::CLEANUP_FIRST_DELAY;
use crate::env::Env;
use crate::logs::{self, Logs};
use crate::metrics::broker::BrokerMeter;

/// Starts both timers. They stop at shutdown; dropping the set aborts them.
pub fn start<E: Env>(
    env: E,
    logs: Arc<Logs<E::Fs>>,
    config: &BrokerConfig,
    meter: BrokerMeter,
    shutdown: watch::Receiver<bool>,
) -> JoinSet<()> {
    let mut set = JoinSet::new();
    let flush_every = Duration::from_millis(config.log_flush_scheduler_interval_ms.into());
    let cleanup_every = Duration::from_secs(u64::from(config.log_cleanup_interval_mins) * 60);
    set.spawn(flush_loop(
        env.clone(),
        logs.clone(),
        flush_every,
        meter,
        shutdown.clone(),
    ));
    set.spawn(cleanup_loop(env, logs, cleanup_every, shutdown));
    set
}

/// Every interval: flush each due partition on its own task (one slow disk does not hold up
/// the others), then write the recovery checkpoint.
async fn flush_loop<E: Env>(
    env: E,
    logs: Arc<Logs<E::Fs>>,
    every: Duration,
    meter: BrokerMeter,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(every) => {}
        }
        let now = env.now_ms();
        let mut flushes = JoinSet::new();
        for log in logs::due_for_flush(&logs, now) {
            let (env, meter) = (env.clone(), meter.clone());
            flushes.spawn(async move { logs::flush(&env, &log, &meter).await });
        }
        while let Some(joined) = flushes.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                // A failed sync poisons only that partition; the others go on.
                Ok(Err(e)) => tracing::error!("{e}"),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => tracing::error!("a flush task was cancelled: {e}"),
            }
        }
        if let Err(e) = logs::checkpoint_moved(&env, &logs).await {
            tracing::error!("{e}");
        }
    }
}

async fn cleanup_loop<E: Env>(
    env: E,
    logs: Arc<Logs<E::Fs>>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut wait = CLEANUP_FIRST_DELAY;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(wait) => {}
        }
        wait = every;
        match logs::cleanup(&env, &logs, env.now_ms()).await {
            0 => {}
            deleted => tracing::info!("retention deleted {deleted} segments"),
        }
    }
}
