//! The group member's coordinator: registration, rebalances, commits, in one task so a commit
//! can never land for a partition a rebalance has just given away.
//!
//! The rebalance itself is core's state machine (`tributary_core::consumer::group`), driven by
//! [`rebalance`]; the owner, offset and broker nodes it names are read and written by [`nodes`],
//! its claims and recorded starts made in transactions by [`claims`]; commits by [`commit`].
//! Commits asked for before a rebalance releases the member's partitions are served before it
//! does, those asked for while its fetchers stop included.
//!
//! Triggers: members joining or leaving (`/consumers/<g>/ids`), brokers registering or losing a
//! subscribed topic (`/brokers/topics/<t>`), new topics for a wildcard (`/brokers/topics`), and
//! the session's expiry (re-register first: handled in one place, [`Member::run`]). Changes
//! arriving together are coalesced.

mod claims;
mod commit;
mod nodes;
mod offset_writes;
mod rebalance;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tributary_core::config::ConsumerConfig;
use tributary_core::consumer::group::{AttemptFailure, PartitionKey, PlanError, RETRY_BACKOFF};
use tributary_core::consumer::{BrokerPartition, Commit, Registration};
use tributary_core::group_id::GroupId;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{consumer_ids_path, consumer_offsets_path, consumer_owners_path};

use super::fetcher::FetchSettings;
use super::state::{Shared, Streams};
use super::{CommitBatch, RebalanceError};
use crate::coordination::ephemeral::{self, HoldError, RetiredSessions};
use crate::coordination::{CoordError, Coordination, SessionEvent};
use crate::env::Env;

pub use commit::write_offset;

/// Quiet time after a change before rebalancing, so changes arriving together cause one.
const COALESCE: Duration = Duration::from_millis(100);
/// The least time a registration held by another session is waited out (it may be this
/// member's own from before a restart of the process, going when that session expires).
const STALE_WAIT_MIN: Duration = Duration::from_secs(10);

/// A partition's offset node: `/consumers/<group>/offsets/<topic>/<partition>`.
fn offset_path(group: &GroupId, topic: &TopicName, partition: BrokerPartition) -> String {
    format!("{}/{partition}", consumer_offsets_path(group, topic))
}

/// A partition's owner node: `/consumers/<group>/owners/<topic>/<partition>`.
fn owner_path(group: &GroupId, topic: &TopicName, partition: BrokerPartition) -> String {
    format!("{}/{partition}", consumer_owners_path(group, topic))
}

impl From<PlanError> for RebalanceError {
    fn from(e: PlanError) -> Self {
        RebalanceError::Plan(e)
    }
}

impl AttemptFailure for RebalanceError {
    fn blocked_by(&self) -> Option<PartitionKey> {
        match self {
            RebalanceError::OwnedElsewhere {
                topic, partition, ..
            } => Some((topic.clone(), *partition)),
            _ => None,
        }
    }
}

/// A commit asked for by the application.
pub(super) struct CommitRequest {
    /// What to commit (empty when `everything`).
    pub commits: Vec<Commit>,
    pub done: oneshot::Sender<CommitBatch>,
    /// Commit every owned partition up to what was handed out (`commits` is then empty).
    pub everything: bool,
}

/// The member: who it is and what it consumes.
pub(super) struct Member<E: Env> {
    pub env: E,
    pub config: ConsumerConfig,
    pub consumer_id: String,
    pub registration: Registration,
    /// Stream index of thread `i` of `topic` (see `ConsumerConnector`).
    pub stream_of: super::StreamOf,
    pub shared: Arc<Shared>,
    /// Only with the planted bug `KeepLostPartitions`: partitions this member lost and goes on
    /// fetching and committing (empty otherwise).
    pub zombies: Arc<Shared>,
    pub streams: Streams,
    /// Sessions this member gave up: their nodes, if a restarted ZooKeeper still holds them,
    /// are this member's to take back.
    pub retired: RetiredSessions,
    /// The ZooKeeper session in which every owner node this member holds was made or checked
    /// by its last successful rebalance (0: none). A node held through the next rebalance in
    /// that same session is still there without a read: an ephemeral node goes only with its
    /// session or by a delete, and a member deletes only nodes naming its own threads.
    pub owners_session: AtomicU64,
}

impl<E: Env> Member<E> {
    fn group(&self) -> &GroupId {
        &self.config.group_id
    }

    fn settings(&self) -> FetchSettings {
        FetchSettings {
            fetch_bytes: i32::try_from(self.config.fetch_bytes).unwrap_or(i32::MAX),
            backoff: Duration::from_millis(self.config.fetcher_backoff_ms.into()),
            socket_timeout: Duration::from_millis(self.config.socket_timeout_ms.max(1000).into()),
            receive_buffer: self.config.socket_buffer_bytes,
            reset: self.config.auto_offset_reset.clone(),
            stop_past_end: self.config.mirror.preserve_partitions,
        }
    }

    fn ids_path(&self) -> String {
        format!("{}/{}", consumer_ids_path(self.group()), self.consumer_id)
    }

    /// Registers this member: its ids node, ephemeral and owned by this session. A node of the
    /// same name held by another session is waited out for up to two session timeouts (a
    /// session of this member's that a restarted ZooKeeper restored is taken back at once: see
    /// [`ephemeral::hold`]).
    pub async fn register(&self, coord: &impl Coordination) -> Result<(), CoordError> {
        let path = self.ids_path();
        coord.ensure_parents(&path).await?;
        let data = self.registration.encode();
        let session = Duration::from_millis(self.config.zk.session_timeout_ms.into());
        let deadline = tokio::time::Instant::now() + (session * 2).max(STALE_WAIT_MIN);
        loop {
            match ephemeral::hold(coord, &path, data.as_bytes(), &self.retired).await {
                Ok(_) => return Ok(()),
                Err(HoldError::Coord(e)) => return Err(e),
                Err(held) if tokio::time::Instant::now() >= deadline => {
                    return Err(CoordError::Other(format!(
                        "registering consumer {}: {held}",
                        self.consumer_id
                    )))
                }
                Err(_) => tokio::time::sleep(RETRY_BACKOFF).await,
            }
        }
    }

    /// Registers this member again if its ids node is missing or not this session's (a
    /// restarted ZooKeeper expiring a session it restored deletes that session's nodes; the
    /// member notices through its watch on the group's ids).
    async fn ensure_registered(&self, coord: &impl Coordination) -> Result<(), RebalanceError> {
        if tributary_core::planted::active(tributary_core::planted::Bug::TrustStaleEphemerals) {
            return Ok(());
        }
        let path = self.ids_path();
        let held = match ephemeral::is_held(coord, &path).await {
            Ok(held) => held,
            Err(source) => return Err(RebalanceError::ZooKeeper { path, source }),
        };
        if held {
            return Ok(());
        }
        tracing::warn!(
            "consumer {}: its registration {path} is gone or held by another session; registering again",
            self.consumer_id
        );
        self.register(coord).await.map_err(RebalanceError::Register)
    }

    /// Runs the member until `stop`; then commits (autocommit), releases and closes.
    pub async fn run(
        self,
        mut coord: E::Coord,
        mut commits: mpsc::Receiver<CommitRequest>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut fetchers = JoinSet::new();
        let mut watches = JoinSet::new();
        let mut pending_rebalance = true;
        let autocommit_every = Duration::from_millis(self.config.autocommit_interval_ms.into());
        let mut autocommit = tokio::time::interval(autocommit_every);
        autocommit.tick().await;
        loop {
            if pending_rebalance {
                match self
                    .rebalance(&coord, &mut fetchers, &mut commits, &mut stop)
                    .await
                {
                    Some(fresh) => watches = fresh,
                    None => break,
                }
                pending_rebalance = false;
            }
            tokio::select! {
                biased;
                _ = stop.changed() => break,
                Some(joined) = fetchers.join_next(), if !fetchers.is_empty() => {
                    if let Err(e) = joined {
                        if e.is_panic() {
                            std::panic::resume_unwind(e.into_panic());
                        }
                    }
                }
                event = coord.next_event() => match event {
                    SessionEvent::Expired | SessionEvent::Closed => {
                        // The session's owner nodes are gone, and others may own those partitions
                        // already: stop fetching them, and commit or release nothing for them.
                        tracing::warn!("consumer {}: ZooKeeper session ended; dropping its partitions and registering again", self.consumer_id);
                        self.retired.retire(coord.session_id());
                        fetchers.abort_all();
                        while fetchers.join_next().await.is_some() {}
                        self.shared.release_all();
                        match self.new_session(&mut stop).await {
                            Some(fresh) => coord = fresh,
                            None => return self.streams_end(),
                        }
                        pending_rebalance = true;
                    }
                    SessionEvent::Disconnected | SessionEvent::Connected => {}
                },
                Some(_) = watches.join_next(), if !watches.is_empty() => {
                    tokio::time::sleep(COALESCE).await;
                    pending_rebalance = true;
                }
                () = self.shared.rejoin.notified() => {
                    tracing::warn!("consumer {}: partitions of group {} have no live owner; rebalancing", self.consumer_id, self.group());
                    pending_rebalance = true;
                }
                Some(request) = commits.recv() => self.serve_commit(&coord, request).await,
                _ = autocommit.tick(), if self.config.autocommit_enable => {
                    if let Some(e) = self.commit_partitions(&coord, &self.shared.all()).await.failed {
                        tracing::warn!("autocommit: {e}");
                    }
                }
            }
        }
        fetchers.abort_all();
        while fetchers.join_next().await.is_some() {}
        let released = self.shared.release_all();
        if self.config.autocommit_enable {
            if let Some(e) = self.commit_partitions(&coord, &released).await.failed {
                tracing::warn!("commit at shutdown: {e}");
            }
        }
        let owners: Vec<(PartitionKey, String)> = released
            .iter()
            .map(|p| ((p.topic.clone(), p.partition), p.owner.clone()))
            .collect();
        self.release_owners(&coord, &owners).await;
        coord.close().await;
        self.streams_end();
    }

    /// The member is done: its streams end once the fetchers (aborted) let go of their queues.
    fn streams_end(&self) {
        tracing::info!("consumer {} left group {}", self.consumer_id, self.group());
    }

    /// A new session after expiry, registered again (retried until it works, or `None` when
    /// asked to stop meanwhile).
    async fn new_session(&self, stop: &mut watch::Receiver<bool>) -> Option<E::Coord> {
        let session = Duration::from_millis(self.config.zk.session_timeout_ms.into());
        let connection = Duration::from_millis(self.config.zk.connection_timeout_ms.into());
        loop {
            let attempt = async {
                match self
                    .env
                    .coordinate(&self.config.zk_connect, session, connection)
                    .await
                {
                    Ok(coord) => match self.register(&coord).await {
                        Ok(()) => Some(coord),
                        Err(e) => {
                            tracing::warn!(
                                "registering consumer {}: {e}; retrying",
                                self.consumer_id
                            );
                            None
                        }
                    },
                    Err(e) => {
                        tracing::warn!("{e}; retrying");
                        None
                    }
                }
            };
            tokio::select! {
                biased;
                _ = stop.changed() => return None,
                registered = attempt => if let Some(coord) = registered {
                    return Some(coord);
                },
            }
            tokio::select! {
                biased;
                _ = stop.changed() => return None,
                () = tokio::time::sleep(RETRY_BACKOFF) => {}
            }
        }
    }

    /// Serves every commit waiting, and those asked for meanwhile, until none waits: done just
    /// before a rebalance releases the member's partitions, so that a commit asked for while
    /// the member still owned them is written, not refused as not owned behind the rebalance.
    async fn serve_waiting_commits(
        &self,
        coord: &E::Coord,
        commits: &mut mpsc::Receiver<CommitRequest>,
    ) {
        while let Ok(request) = commits.try_recv() {
            self.serve_commit(coord, request).await;
        }
    }

    /// Serves one commit request and answers it (an asker that gave up is not waited for).
    async fn serve_commit(&self, coord: &E::Coord, request: CommitRequest) {
        let batch = if request.everything {
            self.commit_partitions(coord, &self.shared.all()).await
        } else {
            self.commit(coord, &request.commits).await
        };
        let _asker_gone = request.done.send(batch).is_err();
    }
}
