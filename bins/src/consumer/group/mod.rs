//! The group member's coordinator: registration, rebalances, commits, in one task so a commit
//! can never land for a partition a rebalance has just given away.
//!
//! Rebalance (0.7.1's, with its layout): stop the fetchers; commit (with autocommit); release
//! the owner nodes held; read the members and the partitions; compute the range assignment;
//! take each new partition's offset (committed, or `autooffset.reset`); claim the owner nodes
//! (a node held by someone else fails the attempt: ours are deleted, and after
//! `rebalance.backoff.ms` it is tried again, `rebalance.retries.max` times, then logged as an
//! error and retried on the next change). Unlike 0.7, a blocked attempt is tried again as soon
//! as the blocking node goes, without counting as an attempt (at most 16 such early tries a
//! rebalance; every counted attempt still waits out its backoff). A claimed partition's
//! committed offset is read again, so a commit its previous owner made meanwhile is not
//! delivered again. A partition kept through a rebalance resumes after what was handed out, not
//! from ZooKeeper. Commits asked for before a rebalance are served before it releases anything.
//!
//! Triggers: members joining or leaving (`/consumers/<g>/ids`), brokers registering or losing a
//! subscribed topic (`/brokers/topics/<t>`), new topics for a wildcard (`/brokers/topics`), and
//! the session's expiry (re-register first). Changes arriving together are coalesced.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tributary_core::config::{AutoOffsetReset, ConsumerConfig};
use tributary_core::consumer::{
    assign, thread_id, BrokerPartition, PartitionOffsets, Registration,
};
use tributary_core::group_id::GroupId;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{
    broker_id_path, broker_topic_path, consumer_ids_path, consumer_offsets_path,
    consumer_owners_path, parse_broker_registration, BROKER_TOPICS_PATH,
};

use super::fetcher::{self, FetchSettings, Share};
use super::offset_node::read_offset_node;
use super::starts::{read_starts, Start};
use super::state::{PartitionState, Shared, Streams};
use super::{
    CommitBatch, CommitError, CommitOutcome, ConsumerError, OffsetNodeError, RebalanceError,
    StartOffsetError,
};
use crate::coordination::ephemeral::{self, HoldError, RetiredSessions};
use crate::coordination::pipeline::{pipelined, pipelined_draining};
use crate::coordination::{CoordError, Coordination, NodeKind, SessionEvent, Watch};
use crate::env::Env;

/// Quiet time after a change before rebalancing, so changes arriving together cause one.
const COALESCE: Duration = Duration::from_millis(100);
/// Pause before retrying ZooKeeper after a failure.
const RETRY_BACKOFF: Duration = Duration::from_millis(500);
/// The least time a registration held by another session is waited out (it may be this
/// member's own from before a restart of the process, going when that session expires).
const STALE_WAIT_MIN: Duration = Duration::from_secs(10);
/// How soon a member whose partitions' starts could not be read rebalances to read them again.
const START_RETRY: Duration = Duration::from_secs(10);
/// The most partitions one broker may register for a topic (a larger count is skipped with an
/// error naming the node), and the most streams one member may register for it (a larger
/// number fails the rebalance): a corrupt or hostile number in ZooKeeper never exhausts memory.
const COUNT_MAX: u32 = tributary_core::config::PARTITIONS_PER_TOPIC_MAX as u32;

/// What a partition kept through a rebalance carries over: its offsets and its epoch (also when
/// it moves to another stream of this member: whoever reads the streams must track what it
/// handed on per partition across streams, as the mirror does with one window per source).
type Kept = BTreeMap<(TopicName, BrokerPartition), (PartitionOffsets, u64)>;

/// A partition a rebalance assigns to this member, before it is claimed.
struct Planned {
    topic: TopicName,
    partition: BrokerPartition,
    thread: String,
    stream: usize,
    address: (String, u16),
}

/// What claiming an attempt's plan came to.
#[derive(Default)]
struct ClaimedPlan {
    /// Every partition claimed, with its state.
    states: Vec<Arc<PartitionState>>,
    /// The brokers of those partitions.
    brokers: BTreeMap<i32, (String, u16)>,
    /// Partitions whose start could not be read: each stream's error.
    unreadable: Vec<(usize, ConsumerError)>,
    /// Whether any partition is claimed without a start (its start is read again soon).
    unstarted: bool,
}

/// A commit asked for by the application.
pub(super) struct CommitRequest {
    /// (topic, partition, offset or everything handed out, generation it was handed out in).
    pub items: Vec<(TopicName, BrokerPartition, Option<i64>, Option<u64>)>,
    pub done: oneshot::Sender<CommitBatch>,
    /// Commit every owned partition up to what was handed out (`items` is then empty).
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
                // Commits asked for before the rebalance go first, while this member still owns
                // their partitions: behind it they would find the partitions released.
                while let Ok(request) = commits.try_recv() {
                    self.serve_commit(&coord, request).await;
                }
                match self.rebalance(&coord, &mut fetchers, &mut stop).await {
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
        self.release_owners(&coord, &released).await;
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

    /// Serves one commit request and answers it (an asker that gave up is not waited for).
    async fn serve_commit(&self, coord: &E::Coord, request: CommitRequest) {
        let batch = if request.everything {
            self.commit_partitions(coord, &self.shared.all()).await
        } else {
            self.commit(coord, &request.items).await
        };
        let _asker_gone = request.done.send(batch).is_err();
    }

    /// Commits the asked partitions this member still owns (in the generation the offsets were
    /// handed out in), never past what was handed out: an outcome per item, in order, up to the
    /// first write that failed. The writes are pipelined on the session (see
    /// [`REQUESTS_IN_FLIGHT`](crate::coordination::pipeline::REQUESTS_IN_FLIGHT)); those after
    /// a failed one are abandoned, not reported.
    async fn commit(
        &self,
        coord: &E::Coord,
        items: &[(TopicName, BrokerPartition, Option<i64>, Option<u64>)],
    ) -> CommitBatch {
        // Items are pipelined in runs without a repeated partition: two writes of one
        // partition in flight together could land in either order (a lower offset last), where
        // one after the other the second is decided knowing what the first committed.
        let mut batch = CommitBatch::default();
        let mut start = 0;
        while start < items.len() {
            let mut seen = std::collections::BTreeSet::new();
            let end = items[start..]
                .iter()
                .position(|(topic, partition, _, _)| !seen.insert((topic, *partition)))
                .map_or(items.len(), |repeated| start + repeated);
            let run = self.commit_run(coord, &items[start..end], start).await;
            batch.outcomes.extend(run.outcomes);
            if run.failed.is_some() {
                batch.failed = run.failed;
                return batch;
            }
            start = end;
        }
        batch
    }

    /// [`commit`](Self::commit) of `items`, no partition twice, pipelined; `first` is the
    /// index of the first in the whole request.
    async fn commit_run(
        &self,
        coord: &E::Coord,
        items: &[(TopicName, BrokerPartition, Option<i64>, Option<u64>)],
        first: usize,
    ) -> CommitBatch {
        let keep_lost =
            tributary_core::planted::active(tributary_core::planted::Bug::KeepLostPartitions);
        let capped = tributary_core::planted::active(tributary_core::planted::Bug::CommitCapped);
        let decided = items
            .iter()
            .enumerate()
            .map(|(index, (topic, partition, offset, epoch))| {
                if capped && first + index >= tributary_core::planted::COMMIT_CAP {
                    return Err(CommitOutcome::Written);
                }
                let owned = self
                    .shared
                    .get(topic, *partition)
                    .filter(|state| !epoch.is_some_and(|e| e != state.epoch) && state.is_owned());
                let owned = owned.or_else(|| {
                    keep_lost
                        .then(|| self.zombies.get(topic, *partition))
                        .flatten()
                });
                match owned {
                    None => Err(CommitOutcome::NotOwned),
                    Some(state) if offset.is_some_and(|o| o > state.offsets().consumed()) => {
                        Err(CommitOutcome::Stale)
                    }
                    Some(state) => Ok((state, *offset)),
                }
            });
        commit_pipelined(decided.map(|decided| self.write_decided(coord, decided))).await
    }

    /// Writes a commit `commit` decided to write; passes on an outcome it decided without one.
    async fn write_decided(
        &self,
        coord: &E::Coord,
        decided: Result<(Arc<PartitionState>, Option<i64>), CommitOutcome>,
    ) -> Result<CommitOutcome, CommitError> {
        match decided {
            Err(outcome) => Ok(outcome),
            Ok((state, offset)) => self.write_commit(coord, &state, offset).await,
        }
    }

    /// Commits everything handed out for each of `states`, pipelined as [`commit`](Self::commit)
    /// is: an outcome per partition, in order, up to the first write that failed.
    async fn commit_partitions(
        &self,
        coord: &E::Coord,
        states: &[Arc<PartitionState>],
    ) -> CommitBatch {
        commit_pipelined(
            states
                .iter()
                .map(|state| self.write_commit(coord, state, None)),
        )
        .await
    }

    /// Writes a partition's offset: `wanted`, or everything handed out; `NothingNew` when that
    /// is not past what is committed.
    async fn write_commit(
        &self,
        coord: &E::Coord,
        state: &PartitionState,
        wanted: Option<i64>,
    ) -> Result<CommitOutcome, CommitError> {
        let Some(offset) = state.offsets().to_commit(wanted) else {
            return Ok(CommitOutcome::NothingNew);
        };
        let path = format!(
            "{}/{}",
            consumer_offsets_path(self.group(), &state.topic),
            state.partition
        );
        if let Err(source) = write_offset(coord, &path, offset).await {
            return Err(CommitError::ZooKeeper { path, source });
        }
        state.offsets().committed_at(offset);
        Ok(CommitOutcome::Written)
    }

    /// Deletes the owner nodes of `released` that still name this member's thread (never one
    /// another member has claimed since).
    /// The nodes are released pipelined on the session (see [`pipelined`]), every one tried.
    async fn release_owners(&self, coord: &E::Coord, released: &[Arc<PartitionState>]) {
        let releases = released
            .iter()
            .map(|state| self.release_owner(coord, state));
        pipelined(releases, |()| std::ops::ControlFlow::Continue(())).await;
    }

    /// Deletes `state`'s owner node if it still names this member's thread.
    async fn release_owner(&self, coord: &E::Coord, state: &PartitionState) {
        let path = format!(
            "{}/{}",
            consumer_owners_path(self.group(), &state.topic),
            state.partition
        );
        match coord.get(&path).await {
            Ok((owner, version)) if owner == state.owner.as_bytes() => {
                match coord.delete(&path, Some(version)).await {
                    Ok(()) | Err(CoordError::NoNode(_)) | Err(CoordError::BadVersion(_)) => {}
                    Err(e) => tracing::warn!("releasing {path}: {e}"),
                }
            }
            Ok(_) | Err(CoordError::NoNode(_)) => {}
            Err(e) => tracing::warn!("releasing {path}: {e}"),
        }
    }

    /// Rebalances until an attempt succeeds (or gives up after `rebalance.retries.max`, to try
    /// again on the next change); returns the watches that trigger the next one, or `None` when
    /// asked to stop meanwhile.
    async fn rebalance(
        &self,
        coord: &E::Coord,
        fetchers: &mut JoinSet<()>,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<JoinSet<()>> {
        let attempts = self.config.rebalance_retries_max.max(1);
        let backoff = Duration::from_millis(self.config.rebalance_backoff_ms.into());
        // What this member held before the rebalance, kept across failed attempts.
        let mut kept: Kept = BTreeMap::new();
        // Only for the planted bug `KeepLostPartitions`: what was held before, to go on fetching.
        let mut held: BTreeMap<(TopicName, BrokerPartition), Arc<PartitionState>> = BTreeMap::new();
        // Every partition this member owned before the rebalance (or stopped): its owner node
        // is released before every attempt, not only the first — a release that failed (a
        // ZooKeeper outage mid-rebalance) is tried again, so a node of ours never outlives the
        // rebalance that gave its partition away (clients seed 601: it blocked the partition's
        // new owner for good).
        let mut owned_before: BTreeMap<(TopicName, BrokerPartition), Arc<PartitionState>> =
            BTreeMap::new();
        // Owner nodes a failed attempt may have left (its release failed, or a claim failed
        // after ZooKeeper made the node): released, if this session holds them, before every
        // attempt and once more after success.
        let mut strays: Vec<(TopicName, BrokerPartition)> = Vec::new();
        let mut attempt = 0;
        // The current attempt's backoff (started at its first failure; no clock is read), and
        // how many retries came early.
        let mut window: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        let mut early_retries = 0;
        let last = loop {
            attempt += 1;
            if *stop.borrow() {
                return None;
            }
            fetchers.abort_all();
            while fetchers.join_next().await.is_some() {}
            let released = self.shared.release_all();
            // Partitions stopped since the last rebalance: their owner nodes go too, and they
            // are not kept (below), so they start again from the group's commit.
            let stopped = self.shared.take_stopped();
            if self.config.autocommit_enable {
                if let Some(e) = self.commit_partitions(coord, &released).await.failed {
                    tracing::warn!("commit before rebalance: {e}");
                }
            }
            owned_before.extend(
                released
                    .iter()
                    .chain(&stopped)
                    .map(|p| ((p.topic.clone(), p.partition), p.clone())),
            );
            let to_release: Vec<Arc<PartitionState>> = owned_before.values().cloned().collect();
            self.release_owners(coord, &to_release).await;
            strays = self
                .release_claimed(coord, std::mem::take(&mut strays))
                .await;
            let unstarted = std::mem::take(&mut *crate::sync::lock(
                &self.shared.restart_from_commit,
                "the consumer's partitions to restart from their commit",
            ));
            kept.extend(
                released
                    .iter()
                    .filter(|p| !unstarted.contains(&(p.topic.clone(), p.partition)))
                    .map(|p| ((p.topic.clone(), p.partition), (*p.offsets(), p.epoch))),
            );
            if tributary_core::planted::active(tributary_core::planted::Bug::KeepLostPartitions) {
                held.extend(
                    released
                        .iter()
                        .map(|p| ((p.topic.clone(), p.partition), p.clone())),
                );
            }
            let attempted = match self.ensure_registered(coord).await {
                Ok(()) => self.attempt(coord, &kept, &mut strays).await,
                Err(e) => Err(e),
            };
            match attempted {
                Ok((claimed, watches, brokers)) => {
                    // What this attempt claimed, to look up (a scan of the claimed per partition
                    // owned before was 10^8 comparisons at 10,000 partitions).
                    let claimed_keys: std::collections::BTreeSet<(TopicName, BrokerPartition)> =
                        claimed
                            .iter()
                            .map(|c| (c.topic.clone(), c.partition))
                            .collect();
                    // What was owned before and is not claimed now: its node must be gone (a
                    // release that failed before this attempt is tried once more).
                    let given_away: Vec<Arc<PartitionState>> = owned_before
                        .iter()
                        .filter(|(key, _)| !claimed_keys.contains(key))
                        .map(|(_, p)| p.clone())
                        .collect();
                    self.release_owners(coord, &given_away).await;
                    let stray: Vec<(TopicName, BrokerPartition)> = std::mem::take(&mut strays)
                        .into_iter()
                        .filter(|key| !claimed_keys.contains(key))
                        .collect();
                    let left = self.release_claimed(coord, stray).await;
                    if !left.is_empty() {
                        tracing::warn!(
                            "consumer {}: {} owner nodes of a failed attempt could not be released; they go with this session",
                            self.consumer_id,
                            left.len()
                        );
                    }
                    let generation = self.shared.generation();
                    let owned: Vec<String> = claimed
                        .iter()
                        .map(|p| format!("{}/{}", p.topic, p.partition))
                        .collect();
                    let before: Vec<String> =
                        kept.keys().map(|(t, p)| format!("{t}/{p}")).collect();
                    if owned == before {
                        tracing::debug!(
                            "consumer {} still owns {} partitions",
                            self.consumer_id,
                            owned.len()
                        );
                    } else {
                        tracing::info!(
                            "consumer {} owns {} partitions: {}",
                            self.consumer_id,
                            owned.len(),
                            owned.join(" ")
                        );
                    }
                    if tributary_core::planted::active(
                        tributary_core::planted::Bug::KeepLostPartitions,
                    ) {
                        let lost: Vec<Arc<PartitionState>> = held
                            .values()
                            .filter(|p| !claimed_keys.contains(&(p.topic.clone(), p.partition)))
                            .cloned()
                            .collect();
                        self.keep_fetching(lost);
                    }
                    self.shared.install(claimed);
                    for (broker_id, address) in brokers {
                        for share in Share::all(self.config.fetchers_per_broker) {
                            fetchers.spawn(fetcher::run(
                                self.env.clone(),
                                broker_id,
                                address.clone(),
                                self.shared.clone(),
                                self.streams.clone(),
                                generation,
                                share,
                                self.settings(),
                            ));
                        }
                    }
                    return Some(watches);
                }
                Err(e) => {
                    tracing::warn!(
                        "consumer {}: rebalance attempt {attempt} of {attempts} failed: {e}",
                        self.consumer_id
                    );
                    // A partition still owned by another member (which gives it up in its own
                    // rebalance) is tried again as soon as its owner node goes, not a whole
                    // backoff later; such an early retry does not count as an attempt, so a
                    // member blocked by several others in turn still has every attempt, and
                    // every counted attempt still waits out its `rebalance.backoff.ms`.
                    let backoff_ends =
                        window.get_or_insert_with(|| Box::pin(tokio::time::sleep(backoff)));
                    // Once the early tries are used up, only the backoff ends the wait.
                    let gone: Watch = if early_retries < EARLY_RETRIES_MAX {
                        self.owner_gone(coord, &e).await
                    } else {
                        Box::pin(std::future::pending())
                    };
                    let woke_early = tokio::select! {
                        biased;
                        _ = stop.changed() => return None,
                        () = backoff_ends.as_mut() => false,
                        () = gone => true,
                    };
                    if woke_early {
                        early_retries += 1;
                        attempt -= 1;
                        continue;
                    }
                    window = None;
                    if attempt >= attempts {
                        break e;
                    }
                }
            }
        };
        tracing::error!("consumer {}: rebalance failed {attempts} times ({last}); owning nothing until the next change", self.consumer_id);
        // Owning nothing: no owner node of this session may stay behind to block the others.
        let left = self.release_claimed(coord, strays).await;
        if !left.is_empty() {
            tracing::warn!(
                "consumer {}: {} owner nodes of failed attempts could not be released; they go with this session",
                self.consumer_id,
                left.len()
            );
        }
        // Every stream is told (a console consumer exits non-zero on it); a full queue or a
        // gone stream has the error in the log anyway.
        for queue in self.streams.iter() {
            let error = ConsumerError::Rebalance {
                attempts,
                last: last.clone(),
            };
            let _reported_in_the_log = queue.try_send(super::state::Chunk::Error(error)).is_err();
        }
        let mut retry = JoinSet::new();
        retry.spawn(tokio::time::sleep(backoff.max(RETRY_BACKOFF)));
        Some(retry)
    }

    /// The planted bug `KeepLostPartitions`: partitions this member lost go on being fetched
    /// (into the same streams, in their old epoch) by fetchers no rebalance stops, and can be
    /// committed, whoever owns them now.
    fn keep_fetching(&self, lost: Vec<Arc<PartitionState>>) {
        let mut by_fetcher: BTreeMap<(i32, u64), Vec<Arc<PartitionState>>> = BTreeMap::new();
        for p in lost {
            if self.zombies.get(&p.topic, p.partition).is_some() {
                continue;
            }
            let offsets = *p.offsets();
            let zombie = Arc::new(PartitionState::new(
                p.topic.clone(),
                p.partition,
                p.generation,
                p.epoch,
                p.owner.clone(),
                p.stream,
                p.address.clone(),
                offsets,
            ));
            by_fetcher
                .entry((p.partition.broker_id, p.generation))
                .or_default()
                .push(zombie);
        }
        for ((broker_id, generation), zombies) in by_fetcher {
            let address = zombies[0].address.clone();
            self.zombies.install(zombies);
            drop(tokio::spawn(fetcher::run(
                self.env.clone(),
                broker_id,
                address,
                self.zombies.clone(),
                self.streams.clone(),
                generation,
                Share::WHOLE,
                self.settings(),
            )));
        }
    }

    /// One rebalance attempt: claimed partitions, the watches set while reading, and the
    /// brokers to fetch from.
    #[allow(clippy::type_complexity)]
    async fn attempt(
        &self,
        coord: &E::Coord,
        kept: &Kept,
        strays: &mut Vec<(TopicName, BrokerPartition)>,
    ) -> Result<
        (
            Vec<Arc<PartitionState>>,
            JoinSet<()>,
            BTreeMap<i32, (String, u16)>,
        ),
        RebalanceError,
    > {
        let mut watches = JoinSet::new();
        let ids_path = consumer_ids_path(self.group());
        let (members, watch) = match coord.children_and_watch(&ids_path).await {
            Ok(found) => found,
            Err(source) => {
                return Err(RebalanceError::ZooKeeper {
                    path: ids_path,
                    source,
                })
            }
        };
        watches.spawn(watch);
        let (topics, watch) = children_or_none(coord, BROKER_TOPICS_PATH).await?;
        if matches!(self.registration, Registration::Wildcard { .. }) {
            watches.spawn(watch);
        }
        let mut registrations = BTreeMap::new();
        for member in members {
            match coord.get(&format!("{ids_path}/{member}")).await {
                // Every member must see the same members, or assignments differ and claims
                // conflict: a registration this member cannot read fails the attempt (loudly).
                Ok((data, _)) => match Registration::parse(&String::from_utf8_lossy(&data)) {
                    Ok(r) => {
                        registrations.insert(member, r);
                    }
                    Err(source) => {
                        return Err(RebalanceError::UnreadableRegistration {
                            path: format!("{ids_path}/{member}"),
                            source,
                        })
                    }
                },
                Err(CoordError::NoNode(_)) => {}
                Err(source) => {
                    return Err(RebalanceError::ZooKeeper {
                        path: format!("{ids_path}/{member}"),
                        source,
                    })
                }
            }
        }
        let mine = self
            .registration
            .streams_for(topics.iter().map(String::as_str));
        // Every member's streams per topic, worked out once (not once per topic: with a
        // wildcard that was topics x topics pattern checks a member).
        let mut streams_of_members: Vec<(&String, BTreeMap<String, u32>)> =
            Vec::with_capacity(registrations.len());
        for (member, r) in &registrations {
            streams_of_members.push((member, r.streams_for(topics.iter().map(String::as_str))));
        }
        let generation = self.shared.generation();
        // Each topic's partitions, read pipelined (one round trip or two per topic, one after
        // another, is most of a join over 1,000 topics).
        let wanted: Vec<(String, TopicName, u32)> = mine
            .into_iter()
            .filter_map(|(name, streams)| Some((name.clone(), name.parse().ok()?, streams)))
            .collect();
        let reads = wanted.iter().map(|(_, topic, _)| async move {
            let topic_path = broker_topic_path(topic);
            let (registered, watch) = children_or_none(coord, &topic_path).await?;
            let partitions = self.partitions_of(coord, &topic_path, registered).await?;
            Ok::<_, RebalanceError>((watch, partitions))
        });
        let mut read: Vec<(Watch, Vec<BrokerPartition>)> = Vec::with_capacity(wanted.len());
        let mut failed = None;
        pipelined(reads, |outcome| match outcome {
            Ok(found) => {
                read.push(found);
                std::ops::ControlFlow::Continue(())
            }
            Err(e) => {
                failed = Some(e);
                std::ops::ControlFlow::Break(())
            }
        })
        .await;
        if let Some(e) = failed {
            return Err(e);
        }
        // What this member is assigned (ZooKeeper only).
        let mut plan: Vec<Planned> = Vec::new();
        // Each broker's address read once per attempt, not once per partition (one round trip
        // each: most of a member's join over 512 partitions).
        let mut addresses: BTreeMap<i32, (String, u16)> = BTreeMap::new();
        for ((topic_name, topic, streams), (watch, partitions)) in wanted.into_iter().zip(read) {
            watches.spawn(watch);
            let mut threads: Vec<String> = Vec::new();
            for (member, counts) in &streams_of_members {
                let n = counts.get(&topic_name).copied().unwrap_or(0);
                if n > COUNT_MAX {
                    return Err(RebalanceError::TooManyStreams {
                        path: format!("{ids_path}/{member}"),
                        topic: topic_name.clone(),
                        streams: n,
                        max: COUNT_MAX,
                    });
                }
                threads.extend((0..n).map(|i| thread_id(member, i)));
            }
            let assignment = assign(&partitions, &threads);
            for i in 0..streams {
                let thread = thread_id(&self.consumer_id, i);
                for partition in assignment.get(&thread).cloned().unwrap_or_default() {
                    let address = match addresses.get(&partition.broker_id) {
                        Some(address) => address.clone(),
                        None => {
                            let address = self.broker_address(coord, partition.broker_id).await?;
                            addresses.insert(partition.broker_id, address.clone());
                            address
                        }
                    };
                    plan.push(Planned {
                        topic: topic.clone(),
                        partition,
                        thread: thread.clone(),
                        stream: (self.stream_of)(&topic_name, i),
                        address,
                    });
                }
            }
        }
        // Where each new partition starts: every broker asked at once, each within a deadline.
        let socket_timeout = Duration::from_millis(self.config.socket_timeout_ms.max(1000).into());
        let new_partitions: Vec<((TopicName, BrokerPartition), (String, u16))> = plan
            .iter()
            .filter(|p| !kept.contains_key(&(p.topic.clone(), p.partition)))
            .map(|p| ((p.topic.clone(), p.partition), p.address.clone()))
            .collect();
        let starts = read_starts(
            &self.env,
            coord,
            self.group(),
            &self.config.auto_offset_reset,
            socket_timeout,
            new_partitions,
        )
        .await;
        // Every owner node claimed so far, released in one place if the attempt fails.
        let mut held: Vec<(TopicName, BrokerPartition)> = Vec::new();
        let claimed = match self
            .claim_planned(coord, kept, plan, starts, generation, &mut held)
            .await
        {
            Ok(claimed) => claimed,
            Err(e) => {
                strays.extend(self.release_claimed(coord, held).await);
                return Err(e);
            }
        };
        if claimed.unstarted {
            // Read their starts again soon.
            watches.spawn(tokio::time::sleep(START_RETRY));
        }
        for (stream, error) in claimed.unreadable {
            if let Some(queue) = self.streams.get(stream) {
                // Full queue or gone stream: the error is in the log either way.
                let _reported_in_the_log =
                    queue.try_send(super::state::Chunk::Error(error)).is_err();
            }
        }
        Ok((claimed.states, watches, claimed.brokers))
    }

    /// Claims every planned partition (its owner node), each resuming where this member kept it
    /// or starting at `starts`; every node claimed is added to `held` as soon as it is, so the
    /// caller can release them all if a later one fails.
    async fn claim_planned(
        &self,
        coord: &E::Coord,
        kept: &Kept,
        plan: Vec<Planned>,
        mut starts: BTreeMap<(TopicName, BrokerPartition), Start>,
        generation: u64,
        held: &mut Vec<(TopicName, BrokerPartition)>,
    ) -> Result<ClaimedPlan, RebalanceError> {
        let mut claimed = ClaimedPlan::default();
        // Every owner node first, pipelined on the session (one round trip each, one after
        // another, was most of a rebalance of many partitions). Each is held from the moment its
        // claim is made: ZooKeeper may make the node even when the claim fails (a connection lost
        // after the create was applied, or a claim abandoned in flight when another failed);
        // claims never started are not held.
        let mut failed = None;
        let claims = plan.iter().map(|p| {
            // Held from the moment its claim is made, before its request is sent.
            held.push((p.topic.clone(), p.partition));
            self.claim(coord, &p.topic, p.partition, &p.thread)
        });
        pipelined(claims, |claim| match claim {
            Ok(()) => std::ops::ControlFlow::Continue(()),
            Err(e) => {
                failed = Some(e);
                std::ops::ControlFlow::Break(())
            }
        })
        .await;
        if let Some(e) = failed {
            return Err(e);
        }
        // Each partition's start settled: a recorded start read again, an unrecorded one
        // recorded. Pipelined (one round trip or two each, one after another, was most of a
        // join of 1,000 partitions over loopback: 0.4 ms each).
        let mut settled: Vec<(Planned, PartitionOffsets, u64, Option<StartOffsetError>)> =
            Vec::with_capacity(plan.len());
        let settles = plan.into_iter().map(|planned| {
            let key = (planned.topic.clone(), planned.partition);
            // A partition whose start cannot be read (its broker refused it, or never answered)
            // is still claimed, so the assignment stays whole, but it is stalled with an error
            // for its stream, and the member rebalances again soon to read it: the other
            // partitions go on.
            let mut unreadable = None;
            let mut unrecorded = None;
            let mut committed_start = None;
            let (offsets, epoch) = match kept.get(&key) {
                Some((o, epoch)) => (
                    PartitionOffsets::resume(o.committed(), o.consumed()),
                    *epoch,
                ),
                None => match starts.remove(&key) {
                    Some(Ok((start, recorded))) => {
                        tracing::debug!(
                            "consumer {}: {}/{} starts at {start}",
                            self.consumer_id,
                            key.0,
                            key.1
                        );
                        if recorded {
                            committed_start = Some(start);
                        } else {
                            unrecorded = Some(start);
                        }
                        (PartitionOffsets::starting_at(start), generation)
                    }
                    Some(Err(e)) => {
                        unreadable = Some(e);
                        (PartitionOffsets::starting_at(0), generation)
                    }
                    None => {
                        unreadable = Some(StartOffsetError::NotAsked);
                        (PartitionOffsets::starting_at(0), generation)
                    }
                },
            };
            async move {
                let (topic, partition) = (&planned.topic, planned.partition);
                let mut offsets = offsets;
                if let Some(start) = committed_start {
                    // The previous owner may have committed between our read of the start and
                    // its release of the node (it serves the commits asked for before its own
                    // rebalance): resume after that commit, not before it (mirror seed 5700
                    // re-forwarded 11 messages against a bound of 8 without this).
                    let path = format!(
                        "{}/{}",
                        consumer_offsets_path(self.group(), topic),
                        partition
                    );
                    match read_offset_node(coord, path).await {
                        Ok(Some(committed)) if committed > start => {
                            offsets = PartitionOffsets::starting_at(committed);
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!("consumer {}: reading {topic}/{partition}'s offset again after claiming it: {e}; starting at {start}, read before (what was committed since is delivered again)", self.consumer_id),
                    }
                }
                if let Some(start) = unrecorded.filter(|_| self.records_starts()) {
                    match self.record_start(coord, topic, partition, start).await {
                        Ok(None) => self.report_deleted_prefix(topic, partition, start),
                        // Another member committed since the start was read: resume there.
                        Ok(Some(committed)) => {
                            offsets = PartitionOffsets::starting_at(committed);
                        }
                        Err(e) => {
                            return Err(RebalanceError::RecordStart {
                                topic: topic.clone(),
                                partition,
                                source: e,
                            });
                        }
                    }
                }
                Ok((planned, offsets, epoch, unreadable))
            }
        });
        // Drained on a failure: a start recorded by a request in flight is seen, and its gap
        // reported; abandoned, it could land unseen and the next attempt would take it as
        // recorded by someone else, never reporting the gap.
        pipelined_draining(settles, |outcome| match outcome {
            Ok(one) => {
                settled.push(one);
                std::ops::ControlFlow::Continue(())
            }
            Err(e) => {
                failed.get_or_insert(e);
                std::ops::ControlFlow::Break(())
            }
        })
        .await;
        if let Some(e) = failed {
            return Err(e);
        }
        for (
            Planned {
                topic,
                partition,
                thread,
                stream,
                address,
            },
            offsets,
            epoch,
            unreadable,
        ) in settled
        {
            claimed.brokers.insert(partition.broker_id, address.clone());
            let state = Arc::new(PartitionState::new(
                topic.clone(),
                partition,
                generation,
                epoch,
                thread.clone(),
                stream,
                address,
                offsets,
            ));
            if let Some(detail) = unreadable {
                state.stall();
                crate::sync::lock(
                    &self.shared.restart_from_commit,
                    "the consumer's partitions to restart from their commit",
                )
                .insert((topic.clone(), partition));
                claimed.unstarted = true;
                let error = ConsumerError::Unreadable {
                    topic: topic.clone(),
                    partition,
                    offset: -1,
                    detail: format!("its start offset cannot be read: {detail}"),
                };
                tracing::error!("{error}");
                claimed.unreadable.push((state.stream, error));
            }
            claimed.states.push(state);
        }
        Ok(claimed)
    }

    async fn partitions_of(
        &self,
        coord: &E::Coord,
        topic_path: &str,
        registered: Vec<String>,
    ) -> Result<Vec<BrokerPartition>, RebalanceError> {
        let mut partitions = Vec::new();
        for broker in registered {
            let Ok(broker_id) = broker.parse::<i32>() else {
                continue;
            };
            match coord.get(&format!("{topic_path}/{broker}")).await {
                Ok((data, _)) => match String::from_utf8_lossy(&data).trim().parse::<u32>() {
                    Ok(count) if count <= COUNT_MAX => {
                        partitions.extend((0..count).map(|partition| BrokerPartition {
                            broker_id,
                            partition,
                        }))
                    }
                    // Every member reads the same node and skips it alike, so assignments agree;
                    // every other topic (and this topic on other brokers) is still owned.
                    Ok(count) => tracing::error!(
                        "{topic_path}/{broker}: registers {count} partitions (at most {COUNT_MAX}); skipped: fix that broker's num.partitions"
                    ),
                    Err(_) => {
                        tracing::error!("{topic_path}/{broker}: unreadable partition count; skipped")
                    }
                },
                Err(CoordError::NoNode(_)) => {}
                Err(source) => {
                    return Err(RebalanceError::ZooKeeper {
                        path: format!("{topic_path}/{broker}"),
                        source,
                    })
                }
            }
        }
        Ok(partitions)
    }

    async fn broker_address(
        &self,
        coord: &E::Coord,
        broker_id: i32,
    ) -> Result<(String, u16), RebalanceError> {
        let path = broker_id_path(broker_id);
        let data = match coord.get(&path).await {
            Ok((data, _)) => data,
            Err(source) => return Err(RebalanceError::ZooKeeper { path, source }),
        };
        parse_broker_registration(&String::from_utf8_lossy(&data))
            .ok_or(RebalanceError::BrokerRegistration { path })
    }

    /// Records where the group starts a partition it never committed (only if still nothing is
    /// committed): the starting point is on record, so data deleted before it was read shows up
    /// later as a gap (OffsetOutOfRange below the partition's start), never as a silent fresh
    /// start at whatever the partition holds then.
    /// `Ok(None)` once recorded; `Ok(Some(offset))` when the group committed `offset` since
    /// the start was read (that offset is where to start).
    async fn record_start(
        &self,
        coord: &E::Coord,
        topic: &TopicName,
        partition: BrokerPartition,
        start: i64,
    ) -> Result<Option<i64>, OffsetNodeError> {
        let path = format!(
            "{}/{}",
            consumer_offsets_path(self.group(), topic),
            partition
        );
        let data = start.to_string();
        let mut created = coord
            .create(&path, data.as_bytes(), NodeKind::Persistent)
            .await;
        // The ancestors are made only when missing (one round trip per level otherwise).
        if matches!(created, Err(CoordError::NoNode(_))) {
            if let Err(source) = coord.ensure_parents(&path).await {
                return Err(OffsetNodeError::ZooKeeper { path, source });
            }
            created = coord
                .create(&path, data.as_bytes(), NodeKind::Persistent)
                .await;
        }
        match created {
            Ok(_) => Ok(None),
            Err(CoordError::NodeExists(_)) => match read_offset_node(coord, path.clone()).await? {
                Some(offset) => Ok(Some(offset)),
                // Gone again since the create found it: no commit to resume from.
                None => Err(OffsetNodeError::ZooKeeper {
                    source: CoordError::NoNode(path.clone()),
                    path,
                }),
            },
            Err(source) => Err(OffsetNodeError::ZooKeeper { path, source }),
        }
    }

    /// A mirror (told of gaps) starting from the beginning (`autooffset.reset=smallest`) a
    /// partition its group has no record of, whose source already deleted its first `start`
    /// bytes, reports them as a gap: they were gone before the group first read the partition
    /// (a topic created while the mirror could not see the source, then cut back by retention;
    /// or a new mirror against a source with history deleted). Reported once: only the member
    /// whose record of the start was created.
    fn report_deleted_prefix(&self, topic: &TopicName, partition: BrokerPartition, start: i64) {
        if start <= 0
            || self.shared.gap_sink.is_none()
            || !matches!(self.config.auto_offset_reset, AutoOffsetReset::Smallest)
            || tributary_core::planted::active(tributary_core::planted::Bug::SkipGapSilently)
        {
            return;
        }
        tracing::error!(
            "{topic}/{partition}: first claimed by group {} when it starts at {start}: bytes 0..{start} were deleted at the source before the group ever read them",
            self.group()
        );
        self.shared.report_gap(&super::GapReport {
            topic: topic.clone(),
            partition,
            from: 0,
            to: start,
        });
    }

    /// Whether this member records where it starts partitions its group never committed: when
    /// it commits on its own (autocommit) or is told of gaps (the mirror), so that data deleted
    /// before it was read shows up as a gap. A group that never commits keeps 0.7's fresh start.
    fn records_starts(&self) -> bool {
        self.config.autocommit_enable || self.shared.gap_sink.is_some()
    }

    /// Deletes the owner nodes of `claimed` that this session holds (a failed attempt's, or
    /// ones a claim may have made before it failed), leaving anyone else's; returns those that
    /// could not be read or deleted (ZooKeeper unreachable), to try again.
    async fn release_claimed(
        &self,
        coord: &E::Coord,
        claimed: Vec<(TopicName, BrokerPartition)>,
    ) -> Vec<(TopicName, BrokerPartition)> {
        let releases = claimed
            .iter()
            .map(|(topic, partition)| self.release_stray(coord, topic, *partition));
        let mut released = Vec::with_capacity(claimed.len());
        pipelined(releases, |outcome| {
            released.push(outcome);
            std::ops::ControlFlow::Continue(())
        })
        .await;
        let mut left = Vec::new();
        for (stray, kept) in claimed.into_iter().zip(released) {
            if !kept {
                left.push(stray);
            }
        }
        left
    }

    /// Deletes a stray owner node if this session holds it; `false` when that could not be
    /// settled (to try again).
    async fn release_stray(
        &self,
        coord: &E::Coord,
        topic: &TopicName,
        partition: BrokerPartition,
    ) -> bool {
        let path = format!("{}/{partition}", consumer_owners_path(self.group(), topic));
        let outcome = match coord.get_with_owner(&path).await {
            Ok(node) if node.owner == Some(coord.session_id()) => {
                coord.delete(&path, Some(node.version)).await
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) | Err(CoordError::NoNode(_)) | Err(CoordError::BadVersion(_)) => true,
            Err(e) => {
                tracing::warn!("releasing {path} after a failed attempt: {e}; tried again");
                false
            }
        }
    }

    /// A watch that fires when the owner node that failed an attempt (`OwnedElsewhere`) goes
    /// or changes: at once when it is already gone, never for any other failure.
    async fn owner_gone(&self, coord: &E::Coord, failure: &RebalanceError) -> Watch {
        let RebalanceError::OwnedElsewhere {
            topic, partition, ..
        } = failure
        else {
            return Box::pin(std::future::pending());
        };
        let path = format!(
            "{}/{}",
            consumer_owners_path(self.group(), topic),
            partition
        );
        match coord.get_and_watch(&path).await {
            Ok((_, _, watch)) => watch,
            Err(CoordError::NoNode(_)) => Box::pin(std::future::ready(())),
            // ZooKeeper trouble: the backoff decides.
            Err(_) => Box::pin(std::future::pending()),
        }
    }

    /// Creates the owner node (ephemeral, our thread id); one this session holds already counts
    /// as success, one another session holds (even with our thread id: a session of ours that a
    /// restarted ZooKeeper restored, which will expire) fails the attempt.
    async fn claim(
        &self,
        coord: &E::Coord,
        topic: &TopicName,
        partition: BrokerPartition,
        thread: &str,
    ) -> Result<(), RebalanceError> {
        let path = format!(
            "{}/{}",
            consumer_owners_path(self.group(), topic),
            partition
        );
        match ephemeral::hold_creating_parents(coord, &path, thread.as_bytes(), &self.retired).await
        {
            Ok(_) => Ok(()),
            Err(HoldError::HeldElsewhere { data, .. }) => Err(RebalanceError::OwnedElsewhere {
                topic: topic.clone(),
                partition,
                owner: String::from_utf8_lossy(&data).into_owned(),
            }),
            Err(HoldError::Coord(source)) => Err(RebalanceError::ZooKeeper { path, source }),
        }
    }
}

/// Retries of one rebalance made early, as soon as a partition's previous owner let it go (see
/// [`Member::owner_gone`]): a bound on the attempts a rebalance makes within its backoffs.
const EARLY_RETRIES_MAX: u32 = 16;

/// Children of `path` and a watch on them; a missing node has none, and is looked for again
/// soon (a watch that fires after a pause).
async fn children_or_none(
    coord: &impl Coordination,
    path: &str,
) -> Result<(Vec<String>, Watch), RebalanceError> {
    match coord.children_and_watch(path).await {
        Ok(found) => Ok(found),
        Err(CoordError::NoNode(_)) => Ok((
            Vec::new(),
            Box::pin(tokio::time::sleep(Duration::from_secs(1))),
        )),
        Err(source) => Err(RebalanceError::ZooKeeper {
            path: path.to_string(),
            source,
        }),
    }
}

/// Pipelines commit writes (see [`pipelined`]) and collects their outcomes in order up to the
/// first that failed: its error ends the batch. The writes behind it are not reported: one that
/// completed moved its partition's committed point (the next commit answers `NothingNew`); one
/// abandoned in flight may land or not (the committed point stays, so the next commit writes it
/// again). Either way a node only ever holds an offset the caller asked for.
async fn commit_pipelined<F>(writes: impl Iterator<Item = F>) -> CommitBatch
where
    F: std::future::Future<Output = Result<CommitOutcome, CommitError>>,
{
    let mut batch = CommitBatch::default();
    pipelined(writes, |written| match written {
        Ok(outcome) => {
            batch.outcomes.push(outcome);
            std::ops::ControlFlow::Continue(())
        }
        Err(e) => {
            batch.failed = Some(e);
            std::ops::ControlFlow::Break(())
        }
    })
    .await;
    batch
}

/// Writes a committed offset (persistent, decimal), creating the node and its parents.
pub async fn write_offset(
    coord: &impl Coordination,
    path: &str,
    offset: i64,
) -> Result<(), CoordError> {
    let data = offset.to_string();
    match coord.set(path, data.as_bytes(), None).await {
        Ok(_) => Ok(()),
        Err(CoordError::NoNode(_)) => {
            coord.ensure_parents(path).await?;
            match coord
                .create(path, data.as_bytes(), NodeKind::Persistent)
                .await
            {
                Ok(_) => Ok(()),
                Err(CoordError::NodeExists(_)) => {
                    coord.set(path, data.as_bytes(), None).await.map(drop)
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}
