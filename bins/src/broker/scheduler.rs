//! The flush scheduler and the cleaner, on the environment's clock.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tributary_core::config::BrokerConfig;
use tributary_core::log::{lock, LogManager};

use super::limits::CLEANUP_FIRST_DELAY;
use crate::env::Env;

/// Starts both timers; dropping the set stops them.
pub fn start<E: Env>(env: E, logs: Arc<LogManager<E::Fs>>, config: &BrokerConfig, shutdown: watch::Receiver<bool>) -> JoinSet<()> {
    let mut set = JoinSet::new();
    let flush_every = Duration::from_millis(config.log_flush_scheduler_interval_ms.into());
    let cleanup_every = Duration::from_secs(u64::from(config.log_cleanup_interval_mins) * 60);
    set.spawn(flush_loop(env.clone(), logs.clone(), flush_every, shutdown.clone()));
    set.spawn(cleanup_loop(env, logs, cleanup_every, shutdown));
    set
}

/// Every interval: flush each due partition on its own blocking task (one slow disk does not
/// hold up the others), then write the recovery checkpoint.
async fn flush_loop<E: Env>(env: E, logs: Arc<LogManager<E::Fs>>, every: Duration, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(every) => {}
        }
        let now = env.now_ms();
        let mut flushes = JoinSet::new();
        for log in logs.due_for_flush(now) {
            let env = env.clone();
            flushes.spawn(async move {
                if let Err(e) = env.blocking(move || lock(&log).flush(now)).await {
                    tracing::error!("{e}");
                }
            });
        }
        while flushes.join_next().await.is_some() {}
        let checkpoint_logs = logs.clone();
        if let Err(e) = env.blocking(move || checkpoint_logs.write_checkpoint()).await {
            tracing::error!("{e}");
        }
    }
}

async fn cleanup_loop<E: Env>(env: E, logs: Arc<LogManager<E::Fs>>, every: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut wait = CLEANUP_FIRST_DELAY;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(wait) => {}
        }
        wait = every;
        let (logs, now) = (logs.clone(), env.now_ms());
        match env.blocking(move || logs.cleanup(now)).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!("retention deleted {deleted} segments"),
            Err(e) => tracing::error!("{e}"),
        }
    }
}
