//! The broker: a Kafka 0.7 server over the log manager.
//!
//! Start order (0.7's): open and recover the logs, listen, register in ZooKeeper, start the
//! flush scheduler and the cleaner. Shutdown: stop accepting, let in-flight requests finish
//! (bounded), flush every log, write the checkpoint and the clean-shutdown marker, leave
//! ZooKeeper.

pub mod connection;
pub mod handler;
pub mod limits;
pub mod registration;
mod scheduler;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tributary_core::config::BrokerConfig;
use tributary_core::log::{LogError, LogManager, OpenReport};

use self::connection::Shared;
use self::handler::Handler;
use self::limits::{CONNECTIONS_MAX, IN_FLIGHT_BYTES_MAX, SHUTDOWN_GRACE};
use self::registration::Registration;
use crate::env::{Env, Listener};

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
    Registration(String),
}

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// What log recovery found at startup.
    pub report: OpenReport,
    shutdown: watch::Sender<bool>,
    done: tokio::task::JoinHandle<Result<(), LogError>>,
}

impl Broker {
    /// Opens the logs, listens, registers, and starts serving.
    pub async fn start<E: Env>(env: E, config: BrokerConfig) -> Result<Broker, StartError> {
        let (fs, log_config, now) = (env.fs(), config.clone(), env.now_ms());
        let (logs, report) = env.blocking(move || LogManager::open(fs, log_config, now)).await?;
        let logs = Arc::new(logs);
        let host = config.hostname.clone().unwrap_or_else(|| "0.0.0.0".into());
        let bind_addr = format!("{host}:{}", config.port);
        let listener = env
            .bind(&host, config.port, config.socket_send_buffer_bytes, config.socket_receive_buffer_bytes)
            .await
            .map_err(|source| StartError::Listen { addr: bind_addr.clone(), source })?;
        let addr = listener.local_addr().map_err(|source| StartError::Listen { addr: bind_addr, source })?;
        let (topics_tx, topics_rx) = mpsc::unbounded_channel();
        let registration = if config.enable_zookeeper {
            Some(Registration::start(env.clone(), &config, addr.port(), logs.topics(), topics_rx).await.map_err(StartError::Registration)?)
        } else {
            None
        };
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            handler: Handler::new(env.clone(), logs.clone()),
            request_bytes_max: config.max_socket_request_bytes as usize,
            read_chunk_bytes: config.socket_receive_buffer_bytes as usize,
            budget: Semaphore::new(IN_FLIGHT_BYTES_MAX / 1024),
            new_topics: topics_tx,
        });
        let timers = scheduler::start(env.clone(), logs.clone(), &config, shutdown_rx.clone());
        let done = tokio::spawn(run(env, listener, shared, logs, shutdown_rx, timers, registration));
        tracing::info!("broker {} serving on {addr}", config.broker_id);
        Ok(Broker { addr, report, shutdown, done })
    }

    /// Stops the broker gracefully and waits until every log is flushed and closed.
    pub async fn shutdown(self) -> Result<(), LogError> {
        let _ = self.shutdown.send(true);
        match self.done.await {
            Ok(result) => result,
            Err(e) => Err(LogError::Io { partition: "broker".into(), op: "shut down", path: String::new(), source: std::io::Error::other(e.to_string()) }),
        }
    }
}

async fn run<E: Env>(
    env: E,
    mut listener: E::Listener,
    shared: Arc<Shared<E>>,
    logs: Arc<LogManager<E::Fs>>,
    mut shutdown: watch::Receiver<bool>,
    timers: JoinSet<()>,
    registration: Option<Registration>,
) -> Result<(), LogError> {
    let mut connections = JoinSet::new();
    let mut seeds = env.rng_seed();
    loop {
        while connections.try_join_next().is_some() {}
        tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) if connections.len() < CONNECTIONS_MAX => {
                    seeds = seeds.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    connections.spawn(connection::serve(stream, peer, shared.clone(), shutdown.clone(), seeds));
                }
                Ok((_, peer)) => tracing::warn!("{peer}: refused: {CONNECTIONS_MAX} connections already open"),
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
        }
    }
    drop(listener);
    tracing::info!("shutting down: waiting for {} connections", connections.len());
    if tokio::time::timeout(SHUTDOWN_GRACE, async { while connections.join_next().await.is_some() {} }).await.is_err() {
        connections.abort_all();
    }
    drop(timers);
    let now = env.now_ms();
    let result = env.blocking(move || logs.close(now)).await;
    if let Some(registration) = registration {
        registration.stop().await;
    }
    tracing::info!("shut down");
    result
}
