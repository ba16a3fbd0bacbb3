//! The broker: a Kafka 0.7 server over the log manager.
//!
//! Start order (0.7's): lock `log.dir`, open and recover the logs, listen, register in
//! ZooKeeper, start the flush scheduler and the cleaner. Shutdown: stop accepting, let
//! in-flight requests finish (bounded), flush every log, write the checkpoint and the
//! clean-shutdown marker, leave ZooKeeper (bounded, whether or not it answers).
//!
//! Failures are loud: a panic in any of the broker's tasks (a connection, a flush, the cleaner,
//! the registration) stops the whole broker, which shuts down as gracefully as it still can
//! and reports the panic; a partition whose operation panicked is marked failed first, so it
//! serves nothing in the meantime and is recovered at the next start.

pub mod access;
pub mod acks;
pub mod budget;
pub mod connection;
pub mod handler;
pub mod limits;
mod listener;
mod mirrored;
pub mod registration;
pub mod renamed;
pub mod reply;
mod scheduler;
pub mod sessions;
mod tasks;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinError;
use tributary_core::config::{BrokerConfig, MetricsBind};
use tributary_core::identity::ClusterIdentity;
use tributary_core::log::{LogError, OpenReport};

use self::budget::Budget;
use self::connection::Shared;
use self::handler::Handler;
use self::limits::{IN_FLIGHT_BYTES_MAX, STOPPING_HOLDER_POLL, STOPPING_HOLDER_WAIT};
use self::listener::{accept_on, bind_listeners, Acceptor, BoundListeners, Kind};
use self::registration::Registration;
use self::tasks::Tasks;
use crate::env::Env;
use crate::logs::Logs;
use crate::metrics::broker::BrokerMeter;
use crate::metrics::server::MetricsServer;
use crate::metrics::{LabelledGauges, MaybeMetrics, Metrics};
use crate::origin_store::OriginStore;
use crate::sync::panic_message;
use crate::tls::env::ClientLink;
use crate::tls::server::ServerTls;

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The logs could not be opened.
    #[error("cannot open the logs: {0}")]
    Logs(#[from] LogError),
    /// The port could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
    /// ZooKeeper registration failed.
    #[error("cannot register in ZooKeeper: {0}")]
    Registration(#[from] registration::RegistrationError),
    /// The origin records (renamed mirror copies' partition counts) could not be read.
    #[error("cannot read the origin records in ZooKeeper: {0}")]
    Origins(#[from] crate::origin_store::OriginsStoreError),
    /// The TLS settings (the SSL listener's, or the replica copier's) cannot be used.
    #[error("cannot use the TLS settings: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// `log.dir` is still held by a process that said it was stopping, after waiting for it.
    #[error("log.dir {dir} is still held by {holder}, which said it was stopping {waited:?} ago; stop that process (or wait for it) and start this broker again")]
    HolderStillStopping {
        /// The directory.
        dir: String,
        /// Who holds it.
        holder: String,
        /// How long this broker waited.
        waited: std::time::Duration,
    },
    /// The metrics port could not be bound.
    #[error("cannot serve metrics on {addr} (metrics.port): {source}")]
    Metrics {
        /// The address.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Why a running broker stopped other than by request, or why its shutdown was not clean.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Closing the logs failed.
    #[error(transparent)]
    Logs(#[from] LogError),
    /// One of the broker's tasks panicked: a bug. The broker stopped.
    #[error("internal error: {task} panicked ({message}); the broker stopped")]
    Panicked {
        /// Which task.
        task: &'static str,
        /// The panic's message.
        message: String,
    },
    /// A task that runs for the broker's whole life ended early.
    #[error("internal error: {0} ended unexpectedly; the broker stopped")]
    TaskEnded(&'static str),
}

impl BrokerError {
    fn from_join(task: &'static str, error: JoinError) -> Self {
        if error.is_panic() {
            BrokerError::Panicked {
                task,
                message: panic_message(error.into_panic().as_ref()),
            }
        } else {
            BrokerError::TaskEnded(task)
        }
    }
}

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    /// The address it listens on: the plaintext listener's, or the SSL listener's when the
    /// plaintext one is off.
    pub addr: SocketAddr,
    /// The SSL listener's address, when there is one (`listeners`).
    pub tls_addr: Option<SocketAddr>,
    /// What log recovery found at startup.
    pub report: OpenReport,
    /// Where the metrics endpoint listens (`metrics.port`), if it does.
    pub metrics_addr: Option<SocketAddr>,
    /// Its cluster's identity, read (or created) in ZooKeeper at start; `None` without
    /// ZooKeeper.
    pub identity: Option<ClusterIdentity>,
    metrics: MaybeMetrics,
    stopping: StoppingNote,
    shutdown: watch::Sender<bool>,
    done: tokio::task::JoinHandle<Result<(), BrokerError>>,
}

/// Says in `log.dir`'s lock file that the broker is stopping, so that a broker started on the
/// same directory before this one has finished waits for it rather than exiting. Cheap to
/// clone; saying it twice is harmless.
#[derive(Clone)]
pub struct StoppingNote(Arc<dyn Fn() + Send + Sync>);

impl StoppingNote {
    /// Writes the note (a failure is logged: it only costs a restarting broker its wait).
    pub fn say(&self) {
        (self.0)();
    }
}

impl std::fmt::Debug for StoppingNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoppingNote")
    }
}

impl Broker {
    /// Locks and opens the logs, listens, registers, and starts serving.
    pub async fn start<E: Env>(env: E, config: BrokerConfig) -> Result<Broker, StartError> {
        let (logs, report) = open_logs(env.clone(), config.clone()).await?;
        let logs = Arc::new(logs);
        let host = config.hostname.clone().unwrap_or_else(|| "0.0.0.0".into());
        let tls = match config.listeners.tls.clone() {
            Some(settings) => Some(Arc::new(
                env.blocking(move || ServerTls::load(settings)).await?,
            )),
            None => None,
        };
        let metrics = config.metrics_port.map(|_| Metrics::new());
        let meter = BrokerMeter::new(metrics.as_deref());
        let metrics_server = start_metrics(
            &env,
            &config,
            (&host, tls.as_ref()),
            (&metrics, &meter),
            &logs,
        )
        .await?;
        let metrics_addr = metrics_server.as_ref().map(|s| s.addr);
        let replica_link = match &config.replica {
            Some(replica) => ClientLink::load(
                replica.tls.as_ref(),
                Some((
                    &replica.source,
                    std::time::Duration::from_millis(config.zk.session_timeout_ms.into()),
                    std::time::Duration::from_millis(config.zk.connection_timeout_ms.into()),
                )),
            )?,
            None => None,
        };
        let listeners = bind_listeners(&env, &config, tls).await?;
        let addr = listeners.addr();
        let tls_addr = listeners.ssl.as_ref().map(|l| l.addr);
        hold_replica_topics(&config, &logs);
        let origins = open_origins(&env, &config, &logs).await?;
        let (registration, new_topics) = register(&env, &config, &listeners, &logs).await?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        // The committer stops after the connections (which may be waiting on it) are done.
        let (committer_stop, committer_stop_rx) = watch::channel(false);
        let (flush_requests, committer) = acks::start(
            env.clone(),
            std::time::Duration::from_millis(config.acks_flush_delay_ms.into()),
            meter.clone(),
            committer_stop_rx,
        );
        let committer = tokio::spawn(committer);
        let identity = registration.as_ref().map(|r| r.identity.clone());
        if let Some(identity) = &identity {
            meter.cluster(identity);
            tracing::info!("broker {} is in cluster {identity}", config.broker_id);
        }
        let shared = Arc::new(Shared {
            handler: Handler::with_acks(env.clone(), logs.clone(), flush_requests)
                .with_zero_copy(config.fetch_zero_copy)
                .with_identity(identity.clone())
                .with_origins(origins.clone())
                .with_meter(meter),
            request_bytes_max: request_bytes_max(&config),
            read_chunk_bytes: config.socket_receive_buffer_bytes as usize,
            budget: Budget::new(IN_FLIGHT_BYTES_MAX),
            new_topics,
        });
        let tasks = Tasks {
            replica_link,
            registration,
            committer,
            committer_stop,
            metrics_server,
            metrics: metrics.clone(),
            origins,
        };
        let noted = logs.clone();
        let stopping = StoppingNote(Arc::new(move || {
            if let Err(e) = noted.note_stopping() {
                tracing::warn!("cannot note in log.dir's lock file that this broker is stopping: {e}; a broker started on it meanwhile will not wait");
            }
        }));
        let done = tokio::spawn(run(
            env,
            config.clone(),
            listeners,
            shared,
            logs,
            shutdown_rx,
            tasks,
        ));
        log_serving(config.broker_id, addr, tls_addr);
        Ok(Broker {
            addr,
            tls_addr,
            report,
            metrics_addr,
            identity,
            metrics,
            stopping,
            shutdown,
            done,
        })
    }

    /// What notes, in `log.dir`'s lock file, that this broker is stopping (a supervisor that
    /// stops other work first, such as an embedded mirror, says it as soon as it begins).
    pub fn stopping_note(&self) -> StoppingNote {
        self.stopping.clone()
    }

    /// The broker's metrics (`metrics.port` set): an embedded mirror registers its own here.
    pub fn metrics(&self) -> MaybeMetrics {
        self.metrics.clone()
    }

    /// Serves until `stop` resolves (then shuts down gracefully) or until the broker fails on
    /// its own (then returns why, after shutting down as far as it could).
    pub async fn run_until(mut self, stop: impl Future<Output = ()>) -> Result<(), BrokerError> {
        tokio::select! {
            biased;
            finished = &mut self.done => return flatten(finished),
            () = stop => {}
        }
        self.shutdown().await
    }

    /// Stops the broker gracefully and waits until every log is flushed and closed.
    pub async fn shutdown(self) -> Result<(), BrokerError> {
        self.stopping.say();
        // The run task may have stopped on its own already; its result says why.
        let _stopped_already = self.shutdown.send(true).is_err();
        flatten(self.done.await)
    }
}

/// The metrics endpoint (with `metrics.port`), where `metrics.host` or the default puts it:
/// loopback once TLS is on, unless the endpoint authenticates its scrapers (`metrics.ssl`
/// with `ssl.client.auth=required`): then it binds where the broker does
/// (docs/security.md).
async fn start_metrics<E: Env>(
    env: &E,
    config: &BrokerConfig,
    (host, tls): (&String, Option<&Arc<ServerTls>>),
    (metrics, meter): (&MaybeMetrics, &BrokerMeter),
    logs: &Arc<Logs<E::Fs>>,
) -> Result<Option<MetricsServer>, StartError> {
    let https = config
        .metrics_ssl
        .then(|| config.listeners.tls.as_ref().map(|t| t.client_auth))
        .flatten();
    let metrics_host = match (
        &config.metrics_host,
        MetricsBind::default_for(tls.is_some(), https),
    ) {
        (Some(chosen), _) => chosen.clone(),
        (None, MetricsBind::Loopback) => "127.0.0.1".to_string(),
        (None, MetricsBind::Host) => host.clone(),
    };
    let metrics_tls = tls.cloned().filter(|_| config.metrics_ssl);
    let (Some(port), Some(metrics)) = (config.metrics_port, metrics) else {
        return Ok(None);
    };
    watch_partitions(metrics, logs, meter.clone());
    let server = MetricsServer::start(env, &metrics_host, port, metrics.clone(), metrics_tls)
        .await
        .map_err(|source| StartError::Metrics {
            addr: format!("{metrics_host}:{port}"),
            source,
        })?;
    Ok(Some(server))
}

/// A replica broker: every topic the filter allows is read-only from the start; those already
/// copied keep the source's partition counts (the copier confirms them from the source).
fn hold_replica_topics<F: tributary_core::log::LogFs + Clone + Send + Sync + 'static>(
    config: &BrokerConfig,
    logs: &Logs<F>,
) where
    F::File: Send + Sync,
    F::DirLock: Send + Sync,
{
    let Some(replica) = &config.replica else {
        return;
    };
    logs.set_replica_filter(replica.topics.clone());
    for (topic, count) in logs.local_counts() {
        if replica.topics.allows(topic.as_str()) {
            logs.set_replica(&topic, count);
        }
    }
}

/// The origin records: renamed mirror copies' partition counts (read here for the topics
/// held, and before creating a new one), and TOPIC_ORIGINS. Their own session, opened when
/// first needed; `None` without ZooKeeper.
async fn open_origins<E: Env>(
    env: &E,
    config: &BrokerConfig,
    logs: &Arc<Logs<E::Fs>>,
) -> Result<Option<Arc<OriginStore<E>>>, StartError> {
    let session = std::time::Duration::from_millis(config.zk.session_timeout_ms.into());
    let connection = std::time::Duration::from_millis(config.zk.connection_timeout_ms.into());
    let origins = config
        .zk_connect
        .clone()
        .filter(|_| config.enable_zookeeper)
        .map(|connect| Arc::new(OriginStore::new(env.clone(), connect, session, connection)));
    match &origins {
        Some(store) => renamed::learn_at_startup(store, logs, connection).await?,
        None => renamed::keep_on_disk(logs),
    }
    Ok(origins)
}

/// Registers the broker in ZooKeeper (with `enable.zookeeper`): its registration, and where
/// new topics are announced to it.
#[allow(clippy::type_complexity)]
async fn register<E: Env>(
    env: &E,
    config: &BrokerConfig,
    listeners: &BoundListeners<E::Listener>,
    logs: &Arc<Logs<E::Fs>>,
) -> Result<
    (
        Option<Registration>,
        Option<crate::pending::PendingSender<tributary_core::wire::TopicName, ()>>,
    ),
    StartError,
> {
    if !config.enable_zookeeper {
        return Ok((None, None));
    }
    let (topics_tx, topics_rx) = crate::pending::pending();
    let counted = logs.clone();
    let counts: registration::Counts = Arc::new(move |t| counted.partition_count(t));
    let registration = Registration::start(
        env.clone(),
        config,
        registration::Ports {
            plaintext: listeners.plaintext.as_ref().map(|l| l.addr.port()),
            ssl: listeners.ssl.as_ref().map(|l| l.addr.port()),
        },
        logs.topics(),
        topics_rx,
        counts,
        sessions::SessionBook::open(env.fs(), std::path::Path::new(&config.log_dir)),
    )
    .await
    .map_err(StartError::Registration)?;
    Ok((Some(registration), Some(topics_tx)))
}

/// Says where the broker serves.
fn log_serving(broker_id: i32, addr: SocketAddr, tls_addr: Option<SocketAddr>) {
    match tls_addr {
        Some(tls_addr) if tls_addr != addr => {
            tracing::info!("broker {broker_id} serving on {addr} (plaintext) and {tls_addr} (TLS)")
        }
        Some(_) => {
            tracing::info!("broker {broker_id} serving on {addr} (TLS only: no plaintext listener)")
        }
        None => tracing::info!("broker {broker_id} serving on {addr}"),
    }
}

/// Locks and opens `log.dir`. While the lock is held by a process that said it is stopping (a
/// restart issued before the previous run finished its shutdown), waits for it, at most
/// [`STOPPING_HOLDER_WAIT`], saying once for whom; any other holder is refused at once.
async fn open_logs<E: Env>(
    env: E,
    config: BrokerConfig,
) -> Result<(Logs<E::Fs>, OpenReport), StartError> {
    let started = env.now_ms();
    let wait_ms = i64::try_from(STOPPING_HOLDER_WAIT.as_millis()).unwrap_or(i64::MAX);
    let mut said = false;
    loop {
        let (fs, log_config, now) = (env.fs(), config.clone(), env.now_ms());
        match env.blocking(move || Logs::open(fs, log_config, now)).await {
            Err(LogError::DirInUse {
                dir,
                holder,
                stopping: true,
            }) if env.now_ms() - started < wait_ms => {
                if !said {
                    tracing::warn!("log.dir {dir} is held by {holder}, which is stopping: waiting for it to finish (at most {STOPPING_HOLDER_WAIT:?})");
                    said = true;
                }
                tokio::time::sleep(STOPPING_HOLDER_POLL).await;
            }
            Err(LogError::DirInUse {
                dir,
                holder,
                stopping: true,
            }) => {
                return Err(StartError::HolderStillStopping {
                    dir,
                    holder,
                    waited: STOPPING_HOLDER_WAIT,
                })
            }
            Err(e) => return Err(e.into()),
            Ok(opened) => {
                if said {
                    let waited = env.now_ms() - started;
                    tracing::info!(
                        "log.dir is free: its previous holder stopped after {waited} ms"
                    );
                }
                return Ok(opened);
            }
        }
    }
}

/// `max.socket.request.bytes`, at most the broker's whole memory budget (a request is buffered
/// under its share of the budget, which cannot exceed the budget).
fn request_bytes_max(config: &BrokerConfig) -> usize {
    let configured = config.max_socket_request_bytes as usize;
    if configured > IN_FLIGHT_BYTES_MAX {
        tracing::warn!("max.socket.request.bytes={configured} is above the broker's memory budget; requests are limited to {IN_FLIGHT_BYTES_MAX} bytes");
    }
    configured.min(IN_FLIGHT_BYTES_MAX)
}

fn flatten(finished: Result<Result<(), BrokerError>, JoinError>) -> Result<(), BrokerError> {
    finished.map_err(|e| BrokerError::from_join("the broker's main task", e))?
}

/// Sets each partition's end and flushed end, and how far its durable copies of source
/// partitions reach, before every scrape, while the logs live.
fn watch_partitions<F: tributary_core::log::LogFs + Clone + Send + Sync + 'static>(
    metrics: &Metrics,
    logs: &Arc<Logs<F>>,
    meter: BrokerMeter,
) where
    F::File: Send + Sync,
    F::DirLock: Send + Sync,
{
    let logs = Arc::downgrade(logs);
    let (mut ends, mut flushed) = (LabelledGauges::default(), LabelledGauges::default());
    let mut held = LabelledGauges::default();
    metrics.on_scrape(Box::new(move || {
        let Some(logs) = logs.upgrade() else {
            return false;
        };
        let all = logs.all();
        let partitions = all.iter().map(|(tp, log)| {
            let (end, flushed_end) = log.ends();
            (tp.topic.to_string(), tp.partition, end, flushed_end)
        });
        meter.partitions(&mut ends, &mut flushed, partitions);
        let copies: Vec<_> = all.iter().map(|(tp, log)| (tp, log.held())).collect();
        let copied = copies.iter().flat_map(|(tp, sources)| {
            sources
                .iter()
                .map(|(key, held_to)| (tp.topic.to_string(), tp.partition, key, *held_to))
        });
        meter.mirror_held(&mut held, copied);
        true
    }));
}

async fn run<E: Env>(
    env: E,
    config: BrokerConfig,
    listeners: BoundListeners<E::Listener>,
    shared: Arc<Shared<E>>,
    logs: Arc<Logs<E::Fs>>,
    mut shutdown: watch::Receiver<bool>,
    tasks: Tasks<E>,
) -> Result<(), BrokerError> {
    // Connections and timers stop on this, whether the stop came from outside or a failure.
    let (stop, stop_rx) = watch::channel(false);
    let mut running = tasks::start(&env, &config, tasks, &shared, &logs, &listeners, &stop_rx);
    let BoundListeners {
        mut plaintext,
        mut ssl,
        tls,
    } = listeners;
    let mut acceptor = Acceptor::new(&env, &config, shared, tls, stop_rx);
    let failure = loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => break None,
            Some(joined) = acceptor.connections.join_next(), if !acceptor.connections.is_empty() => {
                if let Err(failure) = acceptor.closed(joined) {
                    break Some(failure);
                }
            }
            failure = running.failed() => break Some(failure),
            accepted = accept_on(&mut plaintext) => acceptor.accepted(Kind::Plaintext, accepted).await,
            accepted = accept_on(&mut ssl) => acceptor.accepted(Kind::Ssl, accepted).await,
        }
    };
    if let Some(failure) = &failure {
        tracing::error!("{failure}");
    }
    drop((plaintext, ssl));
    let _ = stop.send(true);
    let mut failure = failure;
    acceptor.drain(&mut failure).await;
    running.stop(&mut failure).await;
    // After a failure, nothing vouches for the logs' state: the next start must recover.
    let closed = crate::logs::close(&env, &logs, env.now_ms(), failure.is_none()).await;
    running.leave().await;
    tracing::info!("shut down");
    match failure {
        Some(failure) => Err(failure),
        None => closed.map_err(BrokerError::from),
    }
}
