//! `tributary mirror-maker` (Kafka 0.7.1/0.7.2's standalone mirror): the mirror, with its own
//! metrics endpoint when asked for one. The command runs this (`tributary_tools::cli::mirror_maker`),
//! and the simulator runs it on its mirror-maker host, so the process simulated is the process
//! shipped.
//!
//! It is not restarted from inside: a mirror maker that fails exits non-zero and its
//! supervisor (systemd, Kubernetes; in the simulator, the scenario) starts it again. What it
//! did not commit is sent again by the next run; nothing is skipped.

use std::future::Future;
use std::sync::Arc;

use super::{Mirror, MirrorError, MirrorSettings};
use crate::env::Env;
use crate::metrics::server::MetricsServer;
use crate::metrics::Metrics;
use crate::tls::server::ServerTls;

/// Where the mirror maker serves its metrics (`--metrics.host`, `--metrics.port`), and with
/// which TLS (`--metrics.ssl.*`): with `tls`, HTTPS only, its files watched for rotation.
#[derive(Debug, Clone)]
pub struct MetricsAt<'a> {
    /// The address bound.
    pub host: &'a str,
    /// The port bound.
    pub port: u16,
    /// The endpoint's certificate (and the CA scrapers' certificates must chain to).
    pub tls: Option<Arc<ServerTls>>,
}

/// Why a mirror maker stopped other than by request, or could not start.
#[derive(Debug, thiserror::Error)]
pub enum MakerError {
    /// The metrics endpoint could not listen.
    #[error("cannot serve metrics on port {port} (--metrics.port): {source}")]
    Metrics {
        /// The port asked for.
        port: u16,
        /// Why.
        source: std::io::Error,
    },
    /// The metrics endpoint ended on its own: a bug. The mirror was stopped.
    #[error("internal error: the metrics endpoint {0}")]
    MetricsEnded(String),
    /// The mirror could not start, or failed.
    #[error(transparent)]
    Mirror(#[from] MirrorError),
}

/// Runs the mirror of `settings` until `stop` resolves, serving its metrics at `metrics_at`
/// when given (`settings.metrics` is then made if it is `None`); then stops it gracefully
/// (in-flight messages acknowledged, then committed).
pub async fn run<E: Env>(
    env: E,
    mut settings: MirrorSettings,
    metrics_at: Option<MetricsAt<'_>>,
    stop: impl Future<Output = ()>,
) -> Result<(), MakerError> {
    // Dropped when this returns, which ends the certificate watcher.
    let (_watching, watch_stop) = tokio::sync::watch::channel(false);
    let mut server = match metrics_at {
        Some(MetricsAt { host, port, tls }) => {
            let metrics = settings.metrics.get_or_insert_with(Metrics::new).clone();
            let server = MetricsServer::start(&env, host, port, metrics, tls.clone())
                .await
                .map_err(|source| MakerError::Metrics { port, source })?;
            if let Some(tls) = tls {
                tokio::spawn(crate::tls::server::watch_files(
                    env.clone(),
                    tls,
                    "metrics endpoint",
                    watch_stop,
                ));
            }
            Some(server)
        }
        None => None,
    };
    let mirror = match Mirror::start(env, settings).await {
        Ok(mirror) => mirror,
        Err(e) => {
            if let Some(server) = server {
                server.stop().await;
            }
            return Err(e.into());
        }
    };
    let mut endpoint_failed = None;
    let mirrored = mirror
        .run_until(async {
            tokio::select! {
                biased;
                () = stop => tracing::info!("stopping the mirror (in-flight messages are acknowledged, then committed)"),
                failed = endpoint_ended(&mut server) => {
                    tracing::error!("internal error: the metrics endpoint {failed}; stopping the mirror");
                    endpoint_failed = Some(failed);
                }
            }
        })
        .await;
    if let Some(server) = server {
        server.stop().await;
    }
    match endpoint_failed {
        Some(failed) => Err(MakerError::MetricsEnded(failed)),
        None => Ok(mirrored?),
    }
}

/// Resolves when the metrics endpoint ends on its own (only a panic, a bug), saying how;
/// pending without an endpoint. The endpoint is then forgotten (never awaited twice).
async fn endpoint_ended(server: &mut Option<MetricsServer>) -> String {
    let Some(running) = server else {
        return std::future::pending().await;
    };
    let ended = running.ended().await;
    *server = None;
    match ended {
        Err(e) if e.is_panic() => {
            let message = crate::sync::panic_message(e.into_panic().as_ref());
            format!("panicked ({message})")
        }
        _ => "stopped".to_string(),
    }
}
