//! `tributary server`: a broker, and for a mirror broker (Kafka 0.7.0's embedded mirror) the
//! mirror beside it. The command runs this (`tributary_tools::cli::server`), and the simulator runs it
//! on every broker host, so the composition simulated is the composition shipped.
//!
//! Order (0.7.0's): the broker starts first, then the mirror, under its supervisor
//! ([`crate::mirror::supervise`]): a mirror that fails is started again with backoff while the
//! broker goes on serving. When `stop` resolves the mirror stops first (its last commit needs
//! the brokers), then the broker. A mirror whose settings cannot work stops the broker too,
//! loudly; a broker that fails stops the mirror. The embedded mirror's metrics are the
//! broker's (one endpoint, `metrics.port`).

use std::future::Future;

use tokio::sync::watch;
use tributary_core::config::BrokerConfig;

use crate::broker::{Broker, BrokerError, StartError};
use crate::env::Env;
use crate::mirror::supervise::supervise_each;
use crate::mirror::{MirrorError, MirrorSettings};

/// How each start of an embedded mirror gets its environment and settings, and who hears of
/// each failure (production: the same every time, failures only logged; the simulator gives
/// each start its own observer and counts the failures).
pub struct EmbeddedMirror<E: Env> {
    start: Box<dyn FnMut() -> (E, MirrorSettings) + Send>,
    failed: Box<dyn FnMut(&MirrorError) + Send>,
}

impl<E: Env> EmbeddedMirror<E> {
    /// Every start with `env` and `settings`.
    pub fn new(env: E, settings: MirrorSettings) -> Self {
        EmbeddedMirror {
            start: Box::new(move || (env.clone(), settings.clone())),
            failed: Box::new(|_| {}),
        }
    }

    /// Each start from `start`; each failure told to `failed` before the supervisor's pause.
    pub fn each(
        start: impl FnMut() -> (E, MirrorSettings) + Send + 'static,
        failed: impl FnMut(&MirrorError) + Send + 'static,
    ) -> Self {
        EmbeddedMirror {
            start: Box::new(start),
            failed: Box::new(failed),
        }
    }
}

impl<E: Env> std::fmt::Debug for EmbeddedMirror<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmbeddedMirror")
    }
}

/// Why a server stopped other than by request, or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The broker could not start (nothing else was started).
    #[error(transparent)]
    Start(#[from] StartError),
    /// The broker failed, or its shutdown was not clean.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// The embedded mirror's settings cannot work (the broker was stopped for it; the message
    /// is the mirror's own, unprefixed).
    #[error(transparent)]
    Mirror(MirrorError),
    /// The embedded mirror's supervisor panicked: a bug. The broker was stopped.
    #[error(
        "internal error: the embedded mirror's supervisor panicked ({0}); the broker was stopped"
    )]
    MirrorPanicked(String),
}

/// Runs a broker with `config` (and `mirror` beside it, for a mirror broker) until `stop`
/// resolves, then stops them in order (see the module's documentation). `Ok` only when both
/// stopped cleanly on request.
pub async fn run<E: Env>(
    env: E,
    config: BrokerConfig,
    mirror: Option<EmbeddedMirror<E>>,
    stop: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let target_zookeeper = config
        .zk_connect
        .clone()
        .filter(|_| config.enable_zookeeper);
    let broker = Broker::start(env, config).await?;
    if !broker.report.refused.is_empty() {
        tracing::error!(
            "{} partitions refused at startup; see the errors above",
            broker.report.refused.len()
        );
    }
    let Some(EmbeddedMirror {
        mut start,
        mut failed,
    }) = mirror
    else {
        return Ok(broker.run_until(stop).await?);
    };
    let metrics = broker.metrics();
    // The mirror cluster is this broker's own: its identity decides "not the source".
    let identity = broker.identity.clone();
    let starts = move || {
        let (env, mut settings) = start();
        settings.metrics = metrics.clone();
        settings.target_identity = identity.clone();
        settings.target_zookeeper = target_zookeeper.clone();
        (env, settings)
    };
    let (mirror_stop, mirror_stop_rx) = watch::channel(false);
    let mut mirror_task = tokio::spawn(supervise_each(
        starts,
        move |e: &MirrorError| failed(e),
        mirror_stop_rx,
    ));
    let mut mirror_result = None;
    let stopping = broker.stopping_note();
    let broker_result = broker
        .run_until(async {
            tokio::select! {
                biased;
                () = stop => {
                    // Said now: the mirror's stop may take a while, and a broker restarted on
                    // this log.dir meanwhile must wait for it rather than exit.
                    stopping.say();
                    tracing::info!("stopping the mirror (last acknowledgements and commit), then the broker");
                    let _supervisor_gone = mirror_stop.send(true).is_err();
                    mirror_result = Some((&mut mirror_task).await);
                }
                // The supervisor ends on its own only for settings that cannot work (or a
                // panic): the broker stops too, loudly.
                ended = &mut mirror_task => mirror_result = Some(ended),
            }
        })
        .await;
    let mirror_result = match mirror_result {
        Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(e))) => Err(ServerError::Mirror(e)),
        Some(Err(e)) => Err(ServerError::MirrorPanicked(if e.is_panic() {
            crate::sync::panic_message(e.into_panic().as_ref())
        } else {
            "cancelled".into()
        })),
        // The broker stopped first (a failure): stop the mirror too.
        None => {
            mirror_task.abort();
            Ok(())
        }
    };
    broker_result?;
    mirror_result
}
