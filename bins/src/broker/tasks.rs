//! The broker's long-lived tasks besides its connections — the flush scheduler and the
//! cleaner, the ZooKeeper registration, the replica copier, the certificate watch, the metrics
//! endpoint, the acknowledgement committer — watched while the broker runs (any of them ending
//! is the broker's failure) and stopped in order when it stops.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tributary_core::config::BrokerConfig;

use super::connection::Shared;
use super::limits::SHUTDOWN_GRACE;
use super::listener::BoundListeners;
use super::registration::Registration;
use super::{scheduler, BrokerError};
use crate::env::Env;
use crate::logs::Logs;
use crate::metrics::server::MetricsServer;
use crate::metrics::MaybeMetrics;
use crate::origin_store::OriginStore;
use crate::tls::env::ClientLink;

/// The broker's long-lived tasks besides connections and timers.
pub(super) struct Tasks<E: Env> {
    /// The replica copier's TLS to the source (`replica.security.protocol=ssl`).
    pub(super) replica_link: Option<ClientLink>,
    pub(super) registration: Option<Registration>,
    pub(super) committer: tokio::task::JoinHandle<()>,
    pub(super) committer_stop: watch::Sender<bool>,
    pub(super) metrics_server: Option<MetricsServer>,
    pub(super) metrics: MaybeMetrics,
    /// TOPIC_ORIGINS's ZooKeeper session, closed at shutdown.
    pub(super) origins: Option<Arc<OriginStore<E>>>,
}

/// The long-lived tasks, running.
pub(super) struct Running<E: Env> {
    timers: JoinSet<()>,
    registration: Option<Registration>,
    replica: Option<JoinHandle<()>>,
    tls_watch: Option<JoinHandle<()>>,
    metrics_server: Option<MetricsServer>,
    committer: JoinHandle<()>,
    committer_stop: watch::Sender<bool>,
    origins: Option<Arc<OriginStore<E>>>,
}

/// Starts the timers, the replica copier (with `replica.*`) and the certificate watch (with an
/// SSL listener), beside the tasks already running; all stop on `stop`.
pub(super) fn start<E: Env>(
    env: &E,
    config: &BrokerConfig,
    tasks: Tasks<E>,
    shared: &Arc<Shared<E>>,
    logs: &Arc<Logs<E::Fs>>,
    listeners: &BoundListeners<E::Listener>,
    stop: &watch::Receiver<bool>,
) -> Running<E> {
    let Tasks {
        replica_link,
        registration,
        committer,
        committer_stop,
        metrics_server,
        metrics,
        origins,
    } = tasks;
    let meter = shared.handler.meter().clone();
    let timers = scheduler::start(
        env.clone(),
        logs.clone(),
        config,
        meter.clone(),
        stop.clone(),
    );
    let replica = config.replica.clone().map(|replica_config| {
        tokio::spawn(crate::replica::run(
            env.clone(),
            crate::replica::Copier {
                broker: config.clone(),
                replica: replica_config,
                logs: logs.clone(),
                new_topics: shared.new_topics.clone(),
                meter,
                metrics: metrics.as_ref().map(|m| m.mirror()),
                link: replica_link,
            },
            stop.clone(),
        ))
    });
    let tls_watch = listeners.tls.clone().map(|tls| {
        tokio::spawn(crate::tls::server::watch_files(
            env.clone(),
            tls,
            "SSL listener",
            stop.clone(),
        ))
    });
    Running {
        timers,
        registration,
        replica,
        tls_watch,
        metrics_server,
        committer,
        committer_stop,
        origins,
    }
}

impl<E: Env> Running<E> {
    /// Resolves when one of the tasks ends while the broker runs (none ever should): the
    /// broker's failure. Checked in a fixed order.
    pub(super) async fn failed(&mut self) -> BrokerError {
        tokio::select! {
            biased;
            joined = self.timers.join_next() => match joined {
                Some(Err(e)) => BrokerError::from_join("the flush scheduler or the cleaner", e),
                _ => BrokerError::TaskEnded("the flush scheduler or the cleaner"),
            },
            ended = registration_ended(&mut self.registration) => ended,
            ended = task_ended(&mut self.replica, "the replica copier") => ended,
            ended = task_ended(&mut self.tls_watch, "the SSL listener's certificate watch") => ended,
            ended = metrics_ended(&mut self.metrics_server) => ended,
            ended = &mut self.committer => match ended {
                Err(e) => BrokerError::from_join("the acknowledgement committer", e),
                Ok(()) => BrokerError::TaskEnded("the acknowledgement committer"),
            },
        }
    }

    /// Stops, after the connections, what could still write to the logs, in order: the replica
    /// copier (aborted if stuck past [`SHUTDOWN_GRACE`]), the certificate watch, the
    /// acknowledgement committer, the timers. A panic in any is the broker's failure, unless it
    /// has one.
    pub(super) async fn stop(&mut self, failure: &mut Option<BrokerError>) {
        if let Some(mut task) = self.replica.take() {
            // It stops at its next wait; one stuck in a call to the source is aborted.
            let joined = match tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await {
                Ok(joined) => joined,
                Err(_) => {
                    task.abort();
                    task.await
                }
            };
            if let Err(e) = joined {
                if e.is_panic() {
                    failure.get_or_insert(BrokerError::from_join("the replica copier", e));
                }
            }
        }
        if let Some(task) = self.tls_watch.take() {
            // It stops at its next wait (the stop was sent); a panic is a failure.
            if let Err(e) = task.await {
                if e.is_panic() {
                    failure.get_or_insert(BrokerError::from_join(
                        "the SSL listener's certificate watch",
                        e,
                    ));
                }
            }
        }
        if !self.committer.is_finished() {
            let _already_stopped = self.committer_stop.send(true).is_err();
            if let Err(e) = (&mut self.committer).await {
                failure.get_or_insert(BrokerError::from_join("the acknowledgement committer", e));
            }
        }
        while let Some(joined) = self.timers.join_next().await {
            if let Err(e) =
                joined.map_err(|e| BrokerError::from_join("the flush scheduler or the cleaner", e))
            {
                failure.get_or_insert(e);
            }
        }
    }

    /// Once the logs are closed: leaves ZooKeeper, closes the origin records' session and the
    /// metrics endpoint.
    pub(super) async fn leave(self) {
        if let Some(registration) = self.registration {
            registration.stop().await;
        }
        if let Some(origins) = self.origins {
            origins.close().await;
        }
        if let Some(server) = self.metrics_server {
            server.stop().await;
        }
    }
}

/// Resolves when `task` (named `name`: the replica copier, the certificate watch) ends before
/// the broker stops (it never should); pending without one.
async fn task_ended(task: &mut Option<JoinHandle<()>>, name: &'static str) -> BrokerError {
    match task {
        Some(running) => {
            let joined = running.await;
            // Finished: never awaited again at shutdown.
            *task = None;
            match joined {
                Err(e) => BrokerError::from_join(name, e),
                Ok(()) => BrokerError::TaskEnded(name),
            }
        }
        None => std::future::pending().await,
    }
}

/// Resolves when the metrics endpoint's task ends on its own (a panic); pending without one.
async fn metrics_ended(server: &mut Option<MetricsServer>) -> BrokerError {
    match server {
        Some(s) => {
            let ended = s.ended().await;
            // Finished: never awaited again at shutdown.
            *server = None;
            match ended {
                Err(e) => BrokerError::from_join("the metrics endpoint", e),
                Ok(()) => BrokerError::TaskEnded("the metrics endpoint"),
            }
        }
        None => std::future::pending().await,
    }
}

/// Resolves when the registration task ends on its own (it never should); pending without one.
async fn registration_ended(registration: &mut Option<Registration>) -> BrokerError {
    match registration {
        Some(r) => match r.ended().await {
            Err(e) => BrokerError::from_join("the ZooKeeper registration", e),
            Ok(()) => BrokerError::TaskEnded("the ZooKeeper registration"),
        },
        None => std::future::pending().await,
    }
}
