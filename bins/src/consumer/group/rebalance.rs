//! The driver of core's rebalance state machine (`tributary_core::consumer::group`): it carries
//! out each step against ZooKeeper, the brokers and the member's fetchers, and hands the
//! answers back. Every decision — what to release, the plan, where a partition starts, when an
//! attempt failed and when the next starts — is the machine's.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tributary_core::consumer::group::{
    BrokerTopicNode, GroupRead, HeldPartition, Installed, PartitionKey, Rebalance,
    RebalanceSettings, Released, StartFound, Step,
};
use tributary_core::consumer::PartitionOffsets;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{broker_topic_path, consumer_ids_path, BROKER_TOPICS_PATH};

use super::super::fetcher::{self, Share};
use super::super::starts::{read_starts, Start};
use super::super::state::{Chunk, PartitionState};
use super::super::{ConsumerError, RebalanceError, StartOffsetError};
use super::nodes::children_or_none;
use super::{CommitRequest, Member};
use crate::coordination::pipeline::{try_pipelined, OnFailure, REQUESTS_IN_FLIGHT};
use crate::coordination::{CoordError, Coordination, Watch};
use crate::env::Env;

/// What the driver holds while the machine runs one rebalance.
struct Run {
    /// The watches the current attempt set (dropped with a failed attempt).
    watches: JoinSet<()>,
    /// Each topic's watch, read and not yet set going (see [`Member::read_addresses`]).
    topic_watches: Vec<Watch>,
    /// Why each unreadable start could not be read, for the stream's error.
    start_errors: BTreeMap<PartitionKey, StartOffsetError>,
    /// The claimed partitions' state, built at [`Step::Prepare`].
    prepared: Option<(Installed, Vec<Arc<PartitionState>>)>,
    /// A failed claim or settle, logged once the owner nodes the attempt claimed are released
    /// (the machine's next step).
    unlogged: Option<RebalanceError>,
    /// Only with the planted bug `KeepLostPartitions`: what was held before, to go on fetching.
    held: BTreeMap<PartitionKey, Arc<PartitionState>>,
    /// The session the claims that succeeded were made in, if it did not change under them.
    claimed_in: Option<u64>,
}

impl<E: Env> Member<E> {
    /// The machine's settings, from the member's configuration.
    fn rebalance_settings(&self) -> RebalanceSettings {
        RebalanceSettings {
            consumer_id: self.consumer_id.clone(),
            registration: self.registration.clone(),
            attempts: self.config.rebalance_retries_max,
            backoff: Duration::from_millis(self.config.rebalance_backoff_ms.into()),
            records_starts: self.records_starts(),
            reports_deleted_prefix: self.shared.gap_sink.is_some()
                && matches!(
                    self.config.auto_offset_reset,
                    tributary_core::config::AutoOffsetReset::Smallest
                ),
        }
    }

    /// Rebalances until an attempt succeeds (or the machine gives up, to try again on the next
    /// change); returns the watches that trigger the next one, or `None` when asked to stop
    /// meanwhile.
    pub(super) async fn rebalance(
        &self,
        coord: &E::Coord,
        fetchers: &mut JoinSet<()>,
        commits: &mut mpsc::Receiver<CommitRequest>,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<JoinSet<()>> {
        let mut machine: Rebalance<RebalanceError> = Rebalance::new(self.rebalance_settings());
        let mut run = Run {
            watches: JoinSet::new(),
            topic_watches: Vec::new(),
            start_errors: BTreeMap::new(),
            prepared: None,
            unlogged: None,
            held: BTreeMap::new(),
            claimed_in: None,
        };
        loop {
            // The machine always has a step after an answer: none would be a bug in it.
            let Some(step) = machine.poll() else {
                unreachable_step()
            };
            match step {
                Step::Release => {
                    if *stop.borrow() {
                        return None;
                    }
                    let released = self
                        .release_for_rebalance(coord, fetchers, commits, &mut run)
                        .await;
                    machine.handle_released(released);
                }
                Step::ReleaseOwners(owners) => {
                    let left = self.release_owners(coord, &owners).await;
                    machine.handle_owners_released(left);
                }
                Step::ReleaseStrays(strays) => {
                    let left = self.release_claimed(coord, strays).await;
                    if let Some(e) = run.unlogged.take() {
                        // The failed attempt's watches go with it.
                        run.watches = JoinSet::new();
                        self.log_failure(&machine, &e);
                    }
                    machine.handle_strays_left(left, self.clock());
                }
                Step::TakeRestarts => {
                    machine.handle_restarts(std::mem::take(&mut *crate::sync::lock(
                        &self.shared.restart_from_commit,
                        "the consumer's partitions to restart from their commit",
                    )))
                }
                Step::CheckRegistration => match self.ensure_registered(coord).await {
                    Ok(()) => machine.handle_registered(),
                    Err(e) => self.failed(&mut machine, e, &mut run),
                },
                Step::ReadGroup => {
                    run.watches = JoinSet::new();
                    match self.read_group(coord, &mut run.watches).await {
                        Ok(group) => machine.handle_group(group, self.clock()),
                        Err(e) => self.failed(&mut machine, e, &mut run),
                    }
                }
                Step::ReadTopics(topics) => {
                    match self
                        .read_topics(coord, &topics, &mut run.topic_watches)
                        .await
                    {
                        Ok(nodes) => machine.handle_topics(nodes, self.clock()),
                        Err(e) => self.failed(&mut machine, e, &mut run),
                    }
                }
                Step::ReadAddresses(brokers) => {
                    match self.read_addresses(coord, &brokers, &mut run).await {
                        Ok(addresses) => machine.handle_addresses(addresses),
                        Err(e) => self.failed(&mut machine, e, &mut run),
                    }
                }
                Step::ReadStarts(partitions) => {
                    let starts = self.read_starts(coord, partitions, &mut run).await;
                    machine.handle_starts(starts);
                }
                Step::Claim(claims) => {
                    let session = coord.session_id();
                    match self.claim_all(coord, &claims).await {
                        Ok(()) => {
                            run.claimed_in = (coord.session_id() == session).then_some(session);
                            machine.handle_claimed()
                        }
                        Err((started, e)) => {
                            run.unlogged = Some(e.clone());
                            machine.handle_claims_failed(started, e);
                        }
                    }
                }
                Step::Settle(requests) => match self.settle(coord, &requests).await {
                    Ok(answers) => machine.handle_settled(answers),
                    Err(e) => {
                        run.unlogged = Some(e.clone());
                        machine.handle_failed(e, self.clock());
                    }
                },
                Step::Prepare(installed) => {
                    self.prepare(installed, &mut run);
                    machine.handle_prepared();
                }
                Step::Wait { watch_owner } => {
                    // The machine sets the deadline at the attempt's first failure.
                    let left = machine
                        .wait_left(self.clock())
                        .unwrap_or_else(|| unreachable_step());
                    let backoff_ends = tokio::time::sleep(left);
                    let gone: Watch = match watch_owner {
                        Some(key) => self.owner_gone(coord, &key).await,
                        None => Box::pin(std::future::pending()),
                    };
                    tokio::select! {
                        biased;
                        _ = stop.changed() => return None,
                        () = backoff_ends => machine.handle_timeout(),
                        () = gone => machine.handle_owner_gone(),
                    }
                }
                Step::Install { strays_left } => {
                    return Some(self.install(fetchers, run, strays_left));
                }
                Step::GiveUp {
                    attempts,
                    last,
                    strays_left,
                    retry_in,
                } => return Some(self.give_up(attempts, last, strays_left, retry_in)),
            }
        }
    }

    /// The machine's clock: the environment's, simulated in the simulator.
    fn clock(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.env.now_ms()).unwrap_or(0))
    }

    /// Drops the failed attempt's watches, logs the failure and hands it to the machine.
    fn failed(&self, machine: &mut Rebalance<RebalanceError>, e: RebalanceError, run: &mut Run) {
        run.watches = JoinSet::new();
        self.log_failure(machine, &e);
        machine.handle_failed(e, self.clock());
    }

    fn log_failure(&self, machine: &Rebalance<RebalanceError>, e: &RebalanceError) {
        let (attempt, attempts) = machine.attempts();
        tracing::warn!(
            "consumer {}: rebalance attempt {attempt} of {attempts} failed: {e}",
            self.consumer_id
        );
    }

    /// Stops every fetcher, serves the commits waiting, takes every owned partition back (a
    /// new generation) and, with autocommit, commits them.
    async fn release_for_rebalance(
        &self,
        coord: &E::Coord,
        fetchers: &mut JoinSet<()>,
        commits: &mut mpsc::Receiver<CommitRequest>,
        run: &mut Run,
    ) -> Released {
        fetchers.abort_all();
        while fetchers.join_next().await.is_some() {}
        // Nothing awaits between the last commit served and the release: a commit asked for
        // while the member owned the partitions is written first.
        self.serve_waiting_commits(coord, commits).await;
        let released = self.shared.release_all();
        // Partitions stopped since the last rebalance: their owner nodes go too, and they are
        // not kept, so they start again from the group's commit.
        let stopped = self.shared.take_stopped();
        if self.config.autocommit_enable {
            if let Some(e) = self.commit_partitions(coord, &released).await.failed {
                tracing::warn!("commit before rebalance: {e}");
            }
        }
        if tributary_core::planted::active(tributary_core::planted::Bug::KeepLostPartitions) {
            run.held
                .extend(released.iter().map(|p| (key_of(p), p.clone())));
        }
        Released {
            owned: released
                .iter()
                .map(|p| HeldPartition {
                    key: key_of(p),
                    owner: p.owner.clone(),
                    offsets: *p.offsets(),
                    epoch: p.epoch,
                })
                .collect(),
            stopped: stopped
                .iter()
                .map(|p| (key_of(p), p.owner.clone()))
                .collect(),
            generation: self.shared.generation(),
        }
    }

    /// The group's members with their registrations, and the registered topics (watching the
    /// members, and the topics for a wildcard).
    async fn read_group(
        &self,
        coord: &E::Coord,
        watches: &mut JoinSet<()>,
    ) -> Result<GroupRead, RebalanceError> {
        let ids_path = consumer_ids_path(self.group());
        let (members, watch) = coord
            .children_and_watch(&ids_path)
            .await
            .map_err(|source| zk_error(&ids_path, source))?;
        watches.spawn(watch);
        let (topics, watch) = children_or_none(coord, BROKER_TOPICS_PATH).await?;
        if matches!(
            self.registration,
            tributary_core::consumer::Registration::Wildcard { .. }
        ) {
            watches.spawn(watch);
        }
        let mut read = Vec::with_capacity(members.len());
        for member in members {
            let path = format!("{ids_path}/{member}");
            match coord.get(&path).await {
                Ok((data, _)) => read.push((member, Some(data))),
                Err(CoordError::NoNode(_)) => read.push((member, None)),
                Err(source) => return Err(zk_error(&path, source)),
            }
        }
        Ok(GroupRead {
            members: read,
            topics,
        })
    }

    /// Each topic's broker registrations (watching each topic), read pipelined: one round trip
    /// or two per topic, one after another, was most of a join over 1,000 topics.
    async fn read_topics(
        &self,
        coord: &E::Coord,
        topics: &[TopicName],
        topic_watches: &mut Vec<Watch>,
    ) -> Result<Vec<Vec<BrokerTopicNode>>, RebalanceError> {
        let reads = topics.iter().map(|topic| async move {
            let topic_path = broker_topic_path(topic);
            let (registered, watch) = children_or_none(coord, &topic_path).await?;
            let nodes = broker_topic_nodes(coord, &topic_path, registered).await?;
            Ok::<_, RebalanceError>((watch, nodes))
        });
        let read = try_pipelined(REQUESTS_IN_FLIGHT, OnFailure::Abandon, reads).await?;
        let (watches, nodes) = read.into_iter().unzip();
        *topic_watches = watches;
        Ok(nodes)
    }

    /// The brokers' addresses, one after another (each read once per attempt, not once per
    /// partition), topic by topic: each topic's watch is set going just before its brokers are
    /// read, so the member's tasks start in the order they always have (the simulator's runs
    /// stay comparable seed for seed).
    async fn read_addresses(
        &self,
        coord: &E::Coord,
        brokers: &[Vec<i32>],
        run: &mut Run,
    ) -> Result<BTreeMap<i32, (String, u16)>, RebalanceError> {
        let mut addresses = BTreeMap::new();
        let watches = std::mem::take(&mut run.topic_watches);
        for (watch, topic_brokers) in watches.into_iter().zip(brokers) {
            run.watches.spawn(watch);
            for broker_id in topic_brokers {
                addresses.insert(*broker_id, self.broker_address(coord, *broker_id).await?);
            }
        }
        Ok(addresses)
    }

    /// Where each new partition starts: every broker asked at once, each within a deadline.
    async fn read_starts(
        &self,
        coord: &E::Coord,
        partitions: Vec<(PartitionKey, (String, u16))>,
        run: &mut Run,
    ) -> BTreeMap<PartitionKey, StartFound> {
        let socket_timeout = Duration::from_millis(self.config.socket_timeout_ms.max(1000).into());
        let starts = read_starts(
            &self.env,
            coord,
            self.group(),
            &self.config.auto_offset_reset,
            socket_timeout,
            partitions,
        )
        .await;
        starts
            .into_iter()
            .map(|(key, start): (PartitionKey, Start)| {
                let found = match start {
                    Ok((offset, true)) => StartFound::Committed(offset),
                    Ok((offset, false)) => StartFound::Reset(offset),
                    Err(e) => {
                        run.start_errors.insert(key.clone(), e);
                        StartFound::Unreadable
                    }
                };
                (key, found)
            })
            .collect()
    }

    /// Builds the claimed partitions' state; one whose start could not be read is owned but
    /// stalled, started from its commit at the next rebalance, and its stream is told.
    fn prepare(&self, installed: Installed, run: &mut Run) {
        let mut states = Vec::with_capacity(installed.partitions.len());
        for claimed in &installed.partitions {
            let (topic, partition) = &claimed.key;
            let state = Arc::new(PartitionState::new(
                topic.clone(),
                *partition,
                installed.generation,
                claimed.epoch,
                claimed.thread.clone(),
                (self.stream_of)(topic.as_str(), claimed.thread_index),
                claimed.address.clone(),
                claimed.offsets,
            ));
            if claimed.start_unreadable {
                state.stall();
                crate::sync::lock(
                    &self.shared.restart_from_commit,
                    "the consumer's partitions to restart from their commit",
                )
                .insert(claimed.key.clone());
                let detail = run
                    .start_errors
                    .remove(&claimed.key)
                    .unwrap_or(StartOffsetError::NotAsked);
                let error = ConsumerError::Unreadable {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: -1,
                    detail: format!("its start offset cannot be read: {detail}"),
                };
                tracing::error!("{error}");
                if let Some(queue) = self.streams.get(state.stream) {
                    // Full queue or gone stream: the error is in the log either way.
                    let _reported_in_the_log = queue.try_send(Chunk::Error(error)).is_err();
                }
            }
            states.push(state);
        }
        if let Some(after) = installed.read_starts_again_in {
            run.watches.spawn(tokio::time::sleep(after));
        }
        run.prepared = Some((installed, states));
    }

    /// Installs what was prepared and starts a fetcher per broker and share; the watches that
    /// trigger the next rebalance.
    fn install(&self, fetchers: &mut JoinSet<()>, mut run: Run, strays_left: usize) -> JoinSet<()> {
        let Some((installed, states)) = run.prepared.take() else {
            unreachable_step()
        };
        self.owners_session
            .store(run.claimed_in.unwrap_or(0), Ordering::Relaxed);
        if strays_left > 0 {
            tracing::warn!(
                "consumer {}: {strays_left} owner nodes of a failed attempt could not be released; they go with this session",
                self.consumer_id
            );
        }
        if installed.unchanged {
            tracing::debug!(
                "consumer {} still owns {} partitions",
                self.consumer_id,
                states.len()
            );
        } else {
            let owned: Vec<String> = states
                .iter()
                .map(|p| format!("{}/{}", p.topic, p.partition))
                .collect();
            tracing::info!(
                "consumer {} owns {} partitions: {}",
                self.consumer_id,
                owned.len(),
                owned.join(" ")
            );
        }
        if tributary_core::planted::active(tributary_core::planted::Bug::KeepLostPartitions) {
            let lost: Vec<Arc<PartitionState>> = run
                .held
                .iter()
                .filter(|(key, _)| !states.iter().any(|s| key_of(s) == **key))
                .map(|(_, p)| p.clone())
                .collect();
            self.keep_fetching(lost);
        }
        self.shared.install(states);
        for (broker_id, address) in installed.brokers {
            for share in Share::all(self.config.fetchers_per_broker) {
                fetchers.spawn(fetcher::run(
                    self.env.clone(),
                    broker_id,
                    address.clone(),
                    self.shared.clone(),
                    self.streams.clone(),
                    installed.generation,
                    share,
                    self.settings(),
                ));
            }
        }
        run.watches
    }

    /// Every attempt failed: the streams are told (a console consumer exits non-zero on it; a
    /// full queue or a gone stream has the error in the log anyway), and the member owns nothing
    /// until the next change or `retry_in`.
    fn give_up(
        &self,
        attempts: u32,
        last: RebalanceError,
        strays_left: usize,
        retry_in: Duration,
    ) -> JoinSet<()> {
        tracing::error!("consumer {}: rebalance failed {attempts} times ({last}); owning nothing until the next change", self.consumer_id);
        if strays_left > 0 {
            tracing::warn!(
                "consumer {}: {strays_left} owner nodes of failed attempts could not be released; they go with this session",
                self.consumer_id
            );
        }
        for queue in self.streams.iter() {
            let error = ConsumerError::Rebalance {
                attempts,
                last: last.clone(),
            };
            let _reported_in_the_log = queue.try_send(Chunk::Error(error)).is_err();
        }
        let mut retry = JoinSet::new();
        retry.spawn(tokio::time::sleep(retry_in));
        retry
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
            let offsets: PartitionOffsets = *p.offsets();
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
}

/// The key of an owned partition.
fn key_of(state: &PartitionState) -> PartitionKey {
    (state.topic.clone(), state.partition)
}

fn zk_error(path: &str, source: CoordError) -> RebalanceError {
    RebalanceError::ZooKeeper {
        path: path.to_string(),
        source,
    }
}

/// What each broker registered for a topic: the nodes named by a broker id, in the order
/// listed; a node gone since the listing is left out.
async fn broker_topic_nodes(
    coord: &impl Coordination,
    topic_path: &str,
    registered: Vec<String>,
) -> Result<Vec<BrokerTopicNode>, RebalanceError> {
    let mut nodes = Vec::with_capacity(registered.len());
    for broker in registered {
        let Ok(broker_id) = broker.parse::<i32>() else {
            continue;
        };
        let path = format!("{topic_path}/{broker}");
        match coord.get(&path).await {
            Ok((data, _)) => nodes.push(BrokerTopicNode { broker_id, data }),
            Err(CoordError::NoNode(_)) => {}
            Err(source) => return Err(zk_error(&path, source)),
        }
    }
    Ok(nodes)
}

/// The machine and its driver lost step: a bug to stop on.
#[track_caller]
fn unreachable_step() -> ! {
    #[allow(clippy::panic)]
    {
        panic!("the rebalance machine has no step to carry out")
    }
}
