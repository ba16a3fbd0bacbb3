//! The broker's ZooKeeper registration (0.7 layout): `/brokers/ids/<id>` and one
//! `/brokers/topics/<topic>/<id>` per topic, all ephemeral. Re-registers everything on a new
//! session after expiry; refuses to start while another live broker holds the same id. Every
//! node is held by the current session (`coordination::ephemeral`): one left by an earlier
//! session is never taken for ours, and a watch on `/brokers/ids/<id>` re-registers the broker
//! when its node goes or is found held by another session. Before registering, the broker
//! reads its cluster's identity (`/cluster/id`), creating it when it is the first to need one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tributary_core::config::{endpoints_registration, BrokerConfig, ListenerProtocol, ZkConnect};
use tributary_core::identity::{ClusterIdentity, ClusterName};
use tributary_core::origin::ORIGINS_PATH;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{
    broker_endpoints_path, broker_id_path, broker_registration, broker_topic_partitions_path,
};

use super::sessions::SessionBook;
use crate::coordination::ephemeral::{self, HoldError, RetiredSessions};
use crate::coordination::identity::{ensure_identity, ClusterIdentityError};
use crate::coordination::{CoordError, Coordination, NodeKind, SessionEvent, Watch};
use crate::env::Env;
use crate::pending::PendingReceiver;

/// Pause between attempts to get a new session after expiry.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(500);
/// How long leaving ZooKeeper may take at shutdown before the broker stops without it.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Pause between checks of a stale registration left by an earlier run of this broker.
const STALE_RETRY: Duration = Duration::from_millis(250);

/// What is registered, and where.
#[derive(Debug, Clone)]
struct Registrar {
    connect: ZkConnect,
    broker_id: i32,
    host: String,
    /// The port in `/brokers/ids/<id>`: the plaintext listener's, else the SSL listener's.
    port: u16,
    /// `/tributary/endpoints/<id>`'s data, for a broker with an SSL listener.
    endpoints: Option<String>,
    partitions: BTreeMap<TopicName, u32>,
    session_timeout: Duration,
    connection_timeout: Duration,
    /// Sessions this broker gave up, and those earlier runs on its `log.dir` registered on
    /// (their nodes are its own to take back).
    retired: RetiredSessions,
    /// Where each new session is written down before anything is registered on it.
    sessions: SessionBook,
    /// `cluster.name`.
    cluster_name: Option<ClusterName>,
    /// Seeds the id this broker creates if its cluster has none.
    identity_seed: u64,
}

/// Why the broker could not register in ZooKeeper at startup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// The configuration names no ZooKeeper (`zk.connect`).
    #[error("zk.connect is not set")]
    NoZkConnect,
    /// The broker listens nowhere (a bug: `listeners` is never empty).
    #[error("internal error: the broker has no listener to register")]
    NoListener,
    /// Another live broker holds this broker's id: final, not retried.
    #[error(transparent)]
    IdTaken(IdTaken),
    /// The cluster's identity is damaged, or is not the `cluster.name` given: final.
    #[error("this cluster's identity: {0}")]
    Identity(ClusterIdentityError),
    /// Every attempt failed until `zk.connectiontimeout.ms` had passed.
    #[error("{last} (gave up after zk.connectiontimeout.ms = {timeout:?})")]
    GaveUp {
        /// Why the last attempt failed.
        #[source]
        last: AttemptError,
        /// `zk.connectiontimeout.ms`.
        timeout: Duration,
    },
}

/// Another live broker is registered with this broker's id (after waiting out a registration
/// an earlier run of this broker may have left).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("broker id {broker_id} is already registered by a live broker ({registration}); give this broker another brokerid")]
pub struct IdTaken {
    /// The id.
    pub broker_id: i32,
    /// What the other broker registered, as text.
    pub registration: String,
}

/// Why one attempt to connect and register failed; it is worth retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttemptError {
    /// No ZooKeeper session could be had.
    #[error(transparent)]
    Connect(CoordError),
    /// A node could not be registered: ZooKeeper failed or the session ended, or a topic's
    /// node is still held by another session.
    #[error(transparent)]
    Register(HoldError),
    /// The cluster's identity could not be read or created (ZooKeeper failed, or other
    /// brokers kept changing it).
    #[error("this cluster's identity: {0}")]
    Identity(ClusterIdentityError),
}

/// Why a registration on a session failed.
#[derive(Debug, thiserror::Error)]
enum RegisterError {
    /// Another live broker holds this id: final.
    #[error(transparent)]
    Conflict(IdTaken),
    /// ZooKeeper was unreachable or the session ended: worth retrying.
    #[error(transparent)]
    Transient(#[from] HoldError),
}

impl From<CoordError> for RegisterError {
    fn from(e: CoordError) -> Self {
        RegisterError::Transient(HoldError::Coord(e))
    }
}

/// The partition count to register for a topic (the broker's logs decide: configured counts,
/// or a replica topic's source count).
pub type Counts = std::sync::Arc<dyn Fn(&TopicName) -> u32 + Send + Sync>;

/// The running registration; stop it to leave ZooKeeper.
#[derive(Debug)]
pub struct Registration {
    /// The cluster's identity, as read (or created) at start.
    pub identity: ClusterIdentity,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    /// Set once `ended` saw the task finish, so it is never awaited twice.
    finished: bool,
}

/// The ports the broker listens on, as bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// The plaintext listener's, if it is on.
    pub plaintext: Option<u16>,
    /// The SSL listener's, if there is one.
    pub ssl: Option<u16>,
}

impl Registration {
    /// Connects, registers the broker and `topics`, and keeps the registration alive.
    pub async fn start<E: Env>(
        env: E,
        config: &BrokerConfig,
        ports: Ports,
        topics: Vec<TopicName>,
        new_topics: PendingReceiver<TopicName, ()>,
        counts: Counts,
        sessions: SessionBook,
    ) -> Result<Self, RegistrationError> {
        let Some(connect) = config.zk_connect.clone() else {
            return Err(RegistrationError::NoZkConnect);
        };
        let host = config
            .advertised_host
            .clone()
            .or_else(|| config.hostname.clone())
            .unwrap_or_else(|| env.host_address());
        // `advertised.port` is the plaintext listener's (0.7 clients' port).
        if ports.plaintext.is_none() && config.advertised_port.is_some() {
            tracing::warn!("advertised.port applies to the plaintext listener, which listeners turns off: it is ignored (the SSL listener's port is registered)");
        }
        // Where clients reach each listener: `advertised.listeners` when it names it.
        let reached = |protocol: ListenerProtocol, port: u16| {
            config
                .listeners
                .advertised
                .iter()
                .find(|(advertised, _, _)| *advertised == protocol)
                .map_or((host.clone(), port), |(_, host, port)| {
                    (host.clone(), *port)
                })
        };
        let plaintext = ports.plaintext.map(|p| {
            reached(
                ListenerProtocol::Plaintext,
                config.advertised_port.unwrap_or(p),
            )
        });
        let ssl = ports.ssl.map(|p| reached(ListenerProtocol::Ssl, p));
        let Some((registered_host, port)) = plaintext.clone().or(ssl.clone()) else {
            return Err(RegistrationError::NoListener);
        };
        let endpoints = ssl.map(|(ssl_host, ssl_port)| {
            let mut endpoints = Vec::new();
            if let Some((plaintext_host, plaintext_port)) = plaintext {
                endpoints.push((ListenerProtocol::Plaintext, plaintext_host, plaintext_port));
            }
            endpoints.push((ListenerProtocol::Ssl, ssl_host, ssl_port));
            endpoints_registration(&endpoints)
        });
        let registrar = Registrar {
            connect,
            broker_id: config.broker_id,
            host: registered_host,
            port,
            endpoints,
            partitions: topics
                .into_iter()
                .map(|t| {
                    let n = counts(&t);
                    (t, n)
                })
                .collect(),
            session_timeout: Duration::from_millis(config.zk.session_timeout_ms.into()),
            connection_timeout: Duration::from_millis(config.zk.connection_timeout_ms.into()),
            retired: RetiredSessions::default(),
            sessions,
            cluster_name: config.cluster_name.clone(),
            identity_seed: env.rng_seed(),
        };
        // An earlier run of this log.dir is gone (this process holds its lock): what its
        // sessions still hold in ZooKeeper is this broker's to take back, not to wait out.
        for previous in registrar.sessions.previous() {
            registrar.retired.retire(*previous);
        }
        let (coord, identity) = registrar.connect_and_register(&env).await?;
        tracing::info!("broker {} is in cluster {identity}", registrar.broker_id);
        tracing::info!(
            "registered broker {} as {}:{} in ZooKeeper at {}",
            registrar.broker_id,
            registrar.host,
            registrar.port,
            registrar.connect
        );
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(keep_alive(
            env, registrar, coord, new_topics, stop_rx, counts,
        ));
        Ok(Registration {
            identity,
            stop,
            task,
            finished: false,
        })
    }

    /// Resolves when the registration task ends on its own, which it only does by panicking
    /// (or if its session was closed under it); it runs until [`Registration::stop`] otherwise.
    pub async fn ended(&mut self) -> Result<(), tokio::task::JoinError> {
        if self.finished {
            return std::future::pending().await;
        }
        let result = (&mut self.task).await;
        self.finished = true;
        result
    }

    /// Closes the session (the ephemeral nodes go at once) and waits for it, at most
    /// [`STOP_GRACE`]: a ZooKeeper that does not answer never holds up shutdown.
    pub async fn stop(mut self) {
        if self.finished {
            return;
        }
        // The task may be gone already (it panicked); then there is no one to tell.
        let _gone = self.stop.send(()).is_err();
        match tokio::time::timeout(STOP_GRACE, &mut self.task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.is_panic() => tracing::error!(
                "the ZooKeeper registration panicked: {}",
                crate::sync::panic_message(e.into_panic().as_ref())
            ),
            Ok(Err(_)) => {}
            Err(_) => {
                tracing::warn!("ZooKeeper did not answer within {STOP_GRACE:?}: stopping without closing the session (its nodes go when it expires)");
                self.task.abort();
            }
        }
    }
}

impl Registrar {
    /// A new session, written down in `log.dir` before anything is registered on it.
    async fn connect<E: Env>(&self, env: &E) -> Result<E::Coord, CoordError> {
        let coord = env
            .coordinate(&self.connect, self.session_timeout, self.connection_timeout)
            .await?;
        if let Err(e) = self.sessions.record(env.clone(), coord.session_id()).await {
            tracing::warn!("cannot write ZooKeeper session {:#x} down in log.dir ({e}): if this broker is killed, its next start waits for the session to expire", coord.session_id());
        }
        Ok(coord)
    }

    /// Connects and registers, retrying lost connections and expired sessions (as 0.7's
    /// ZooKeeper client retries until connected) until `zk.connectiontimeout.ms` has passed.
    /// A live broker holding this id is final.
    async fn connect_and_register<E: Env>(
        &self,
        env: &E,
    ) -> Result<(E::Coord, ClusterIdentity), RegistrationError> {
        let deadline = tokio::time::Instant::now() + self.connection_timeout;
        loop {
            let attempt = match self.connect(env).await {
                Ok(coord) => {
                    match ensure_identity(&coord, self.cluster_name.as_ref(), self.identity_seed)
                        .await
                    {
                        Ok(identity) => match self.register_all(&coord, env.now_ms()).await {
                            Ok(()) => return Ok((coord, identity)),
                            Err(RegisterError::Conflict(e)) => {
                                return Err(RegistrationError::IdTaken(e))
                            }
                            Err(RegisterError::Transient(e)) => AttemptError::Register(e),
                        },
                        Err(
                            e @ (ClusterIdentityError::ZooKeeper(_)
                            | ClusterIdentityError::Contended),
                        ) => AttemptError::Identity(e),
                        Err(e) => return Err(RegistrationError::Identity(e)),
                    }
                }
                Err(e) => AttemptError::Connect(e),
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(RegistrationError::GaveUp {
                    last: attempt,
                    timeout: self.connection_timeout,
                });
            }
            tracing::warn!("{attempt}; retrying");
            tokio::time::sleep(RECONNECT_BACKOFF).await;
        }
    }

    /// Registers the broker and every topic, each node held by this session. A registration of
    /// this id held by another session is waited out for up to two session timeouts (it may be
    /// this broker's previous, killed run whose session has not expired yet); after that,
    /// another broker holds the id. One held by a session this broker gave up is taken back.
    async fn register_all(
        &self,
        coord: &impl Coordination,
        now_ms: i64,
    ) -> Result<(), RegisterError> {
        let path = broker_id_path(self.broker_id);
        let data = broker_registration(&self.host, now_ms, self.port);
        let deadline = tokio::time::Instant::now() + self.session_timeout * 2;
        if self.connect.security.set_acl {
            // Made by the cluster's own identity, before any other can: `/cluster` stays the
            // cluster's (so nobody else can create `/cluster/id`), while `/cluster/origins`
            // takes other identities' children (a mirror reading this cluster).
            coord
                .ensure_parents(ORIGINS_PATH)
                .await
                .map_err(RegisterError::from)?;
            match coord.create(ORIGINS_PATH, b"", NodeKind::Persistent).await {
                Ok(_) | Err(CoordError::NodeExists(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        coord
            .ensure_parents(&path)
            .await
            .map_err(RegisterError::from)?;
        let endpoints_path = broker_endpoints_path(self.broker_id);
        loop {
            // With an SSL listener, its endpoints go first (a TLS client that sees the broker
            // in `/brokers/ids` finds them), but only while the id is free or this broker's:
            // a broker waiting out another's registration of its id advertises nothing.
            if let Some(endpoints) = &self.endpoints {
                if let Some(existing) = self.held_by_another(coord, &path).await? {
                    self.wait_out(existing, deadline).await?;
                    continue;
                }
                self.hold_own(coord, &endpoints_path, endpoints.as_bytes(), deadline)
                    .await?;
            }
            match ephemeral::hold(coord, &path, data.as_bytes(), &self.retired).await {
                Ok(_) => break,
                Err(HoldError::HeldElsewhere { data: existing, .. }) => {
                    if self.endpoints.is_some() {
                        // Taken in between: the endpoints just written are not the id's.
                        match coord.delete(&endpoints_path, None).await {
                            Ok(()) | Err(CoordError::NoNode(_)) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    self.wait_out(existing, deadline).await?;
                }
                Err(HoldError::Coord(e)) => return Err(e.into()),
            }
        }
        let capped =
            tributary_core::planted::active(tributary_core::planted::Bug::RegistrationCapped);
        for (index, (topic, count)) in self.partitions.iter().enumerate() {
            if capped && index >= tributary_core::planted::REGISTRATION_CAP {
                break;
            }
            register_topic(coord, topic, self.broker_id, *count, &self.retired).await?;
        }
        Ok(())
    }

    /// What another session registered at `path` (the broker's id), unless the node is absent,
    /// this session's, or a session this broker gave up (which [`ephemeral::hold`] takes back).
    async fn held_by_another(
        &self,
        coord: &impl Coordination,
        path: &str,
    ) -> Result<Option<Vec<u8>>, RegisterError> {
        match coord.get_with_owner(path).await {
            Ok(node) => match node.owner {
                Some(owner) if owner == coord.session_id() || self.retired.contains(owner) => {
                    Ok(None)
                }
                _ => Ok(Some(node.data)),
            },
            Err(CoordError::NoNode(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Pauses before looking again at a registration of this broker's id held by another
    /// session (`existing`, its data); past `deadline`, another live broker has the id.
    async fn wait_out(
        &self,
        existing: Vec<u8>,
        deadline: tokio::time::Instant,
    ) -> Result<(), RegisterError> {
        if tokio::time::Instant::now() >= deadline {
            return Err(RegisterError::Conflict(IdTaken {
                broker_id: self.broker_id,
                registration: String::from_utf8_lossy(&existing).into_owned(),
            }));
        }
        tokio::time::sleep(STALE_RETRY).await;
        Ok(())
    }

    /// Holds `path` (its missing parents created) for this session, waiting out until
    /// `deadline` a node an earlier run of this broker may have left; still held by another
    /// session then, another live broker has this broker's id.
    async fn hold_own(
        &self,
        coord: &impl Coordination,
        path: &str,
        data: &[u8],
        deadline: tokio::time::Instant,
    ) -> Result<(), RegisterError> {
        loop {
            match ephemeral::hold_creating_parents(coord, path, data, &self.retired).await {
                Ok(_) => return Ok(()),
                Err(HoldError::HeldElsewhere { data: existing, .. }) => {
                    self.wait_out(existing, deadline).await?
                }
                Err(HoldError::Coord(e)) => return Err(e.into()),
            }
        }
    }
}

/// Registers `topic` under this broker, the node held by this session (one held by another
/// session is an error to retry: it goes when that session expires).
async fn register_topic(
    coord: &impl Coordination,
    topic: &TopicName,
    broker_id: i32,
    count: u32,
    retired: &RetiredSessions,
) -> Result<(), HoldError> {
    let path = broker_topic_partitions_path(topic, broker_id);
    ephemeral::hold_creating_parents(coord, &path, count.to_string().as_bytes(), retired)
        .await
        .map(drop)
}

/// Registers the topics in `pending`, keeping those that still fail; one log line per round.
async fn register_pending(
    coord: &impl Coordination,
    broker_id: i32,
    pending: &mut BTreeSet<(TopicName, u32)>,
    retired: &RetiredSessions,
) {
    let mut still = BTreeSet::new();
    let mut first_error = None;
    for (topic, count) in std::mem::take(pending) {
        if let Err(e) = register_topic(coord, &topic, broker_id, count, retired).await {
            first_error.get_or_insert(format!("{topic}: {e}"));
            still.insert((topic, count));
        }
    }
    if let Some(error) = first_error {
        tracing::warn!(
            "{} topics not registered in ZooKeeper yet (first: {error}); retrying",
            still.len()
        );
    }
    *pending = still;
}

/// Gets a new session and registers everything again, retrying until it works.
async fn reregister<E: Env>(env: &E, registrar: &Registrar) -> E::Coord {
    loop {
        match registrar.connect(env).await {
            Ok(fresh) => match registrar.register_all(&fresh, env.now_ms()).await {
                Ok(()) => return fresh,
                Err(e) => tracing::warn!("re-registration failed: {e}; retrying"),
            },
            Err(e) => tracing::warn!("{e}; retrying"),
        }
        tokio::time::sleep(RECONNECT_BACKOFF).await;
    }
}

/// Closes the session, giving up after [`STOP_GRACE`].
async fn close_bounded(coord: impl Coordination) {
    if tokio::time::timeout(STOP_GRACE, coord.close())
        .await
        .is_err()
    {
        tracing::warn!("closing the ZooKeeper session took longer than {STOP_GRACE:?}; its nodes go when it expires");
    }
}

/// Resolves when `watch` fires (never without one).
async fn fired(watch: &mut Option<Watch>) {
    match watch {
        Some(watch) => {
            (&mut *watch).await;
            *watch = Box::pin(std::future::pending());
        }
        None => std::future::pending().await,
    }
}

/// Checks that `/brokers/ids/<id>` is this session's and watches it; registers everything again
/// on this session when it is not (a restarted ZooKeeper expiring a session it restored deletes
/// that session's nodes). `None` when ZooKeeper could not be asked: the caller tries again on
/// its retry tick.
async fn watch_registration<E: Env>(
    coord: &impl Coordination,
    registrar: &Registrar,
    unregistered: &mut BTreeSet<(TopicName, u32)>,
    env: &E,
) -> Option<Watch> {
    let path = broker_id_path(registrar.broker_id);
    if tributary_core::planted::active(tributary_core::planted::Bug::NoReregistration) {
        return Some(Box::pin(std::future::pending()));
    }
    match ephemeral::is_held(coord, &path).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(
                "{path} is gone or held by another session: registering broker {} again",
                registrar.broker_id
            );
            match registrar.register_all(coord, env.now_ms()).await {
                Ok(()) => {
                    unregistered.clear();
                    tracing::info!("re-registered broker {} in ZooKeeper", registrar.broker_id);
                }
                Err(e) => {
                    tracing::warn!(
                        "re-registering broker {}: {e}; retrying",
                        registrar.broker_id
                    );
                    return None;
                }
            }
        }
        Err(e) => {
            tracing::warn!("checking {path}: {e}; retrying");
            return None;
        }
    }
    match coord.get_and_watch(&path).await {
        Ok((_, _, watch)) => Some(watch),
        Err(e) => {
            tracing::warn!("watching {path}: {e}; retrying");
            None
        }
    }
}

async fn keep_alive<E: Env>(
    env: E,
    mut registrar: Registrar,
    mut coord: E::Coord,
    mut new_topics: PendingReceiver<TopicName, ()>,
    mut stop: oneshot::Receiver<()>,
    counts: Counts,
) {
    // Topics whose registration failed (ZooKeeper unreachable): retried until they succeed.
    let mut unregistered: BTreeSet<(TopicName, u32)> = BTreeSet::new();
    let mut retry = tokio::time::interval(registrar.session_timeout / 2);
    // Ticks missed while a ZooKeeper call hung are not made up in a burst of retries.
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut id_watch = watch_registration(&coord, &registrar, &mut unregistered, &env).await;
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return close_bounded(coord).await,
            topics = new_topics.next() => {
                let mut fresh = false;
                for topic in topics.into_keys() {
                    let count = counts(&topic);
                    if registrar.partitions.insert(topic.clone(), count) != Some(count) {
                        unregistered.insert((topic, count));
                        fresh = true;
                    }
                }
                if fresh {
                    register_pending(&coord, registrar.broker_id, &mut unregistered, &registrar.retired).await;
                }
            }
            _ = retry.tick(), if !unregistered.is_empty() || id_watch.is_none() => {
                register_pending(&coord, registrar.broker_id, &mut unregistered, &registrar.retired).await;
                if id_watch.is_none() {
                    id_watch = watch_registration(&coord, &registrar, &mut unregistered, &env).await;
                }
            }
            () = fired(&mut id_watch) => {
                id_watch = watch_registration(&coord, &registrar, &mut unregistered, &env).await;
            }
            event = coord.next_event() => match event {
                SessionEvent::Expired if tributary_core::planted::active(tributary_core::planted::Bug::NoReregistration) => {
                    tracing::warn!("ZooKeeper session expired (planted bug: not re-registering)");
                }
                SessionEvent::Expired => {
                    tracing::warn!("ZooKeeper session expired: re-registering broker {}", registrar.broker_id);
                    registrar.retired.retire(coord.session_id());
                    let renewed = tokio::select! {
                        biased;
                        _ = &mut stop => None,
                        fresh = reregister(&env, &registrar) => Some(fresh),
                    };
                    // Stopped while ZooKeeper was unreachable: nothing is registered to leave.
                    let Some(fresh) = renewed else { return };
                    coord = fresh;
                    // register_all covered every topic, pending ones included.
                    unregistered.clear();
                    id_watch = watch_registration(&coord, &registrar, &mut unregistered, &env).await;
                    tracing::info!("re-registered broker {} in ZooKeeper", registrar.broker_id);
                }
                SessionEvent::Disconnected => tracing::warn!("disconnected from ZooKeeper; the session lives until it times out"),
                SessionEvent::Connected => tracing::info!("connected to ZooKeeper"),
                SessionEvent::Closed => return,
            },
        }
    }
}
