//! The ZooKeeper consumer group (0.7's `ZookeeperConsumerConnector`), with 0.7's layout and
//! algorithm so Tributary and 0.7 members can share a group.
//!
//! [`ConsumerConnector::start`] registers the member and returns its streams: with a static
//! subscription, `n` streams per topic (in topic order); with a wildcard, `n` streams shared by
//! every matching topic — and a topic that appears later is consumed without touching the
//! streams already running. Messages come out of [`MessageStream::next`] with their resume
//! offset; offsets are committed by autocommit (`autocommit.enable`, every
//! `autocommit.interval.ms`, before each rebalance and at shutdown), or explicitly with
//! [`ConsumerConnector::commit`] / [`ConsumerConnector::commit_offsets`], never past what was
//! handed out and never for a partition this member no longer owns.
//!
//! The decisions are `tributary_core::consumer`'s; this module runs them against ZooKeeper and
//! the brokers through [`Env`], so the simulator drives the same consumer.

mod error;
mod fetcher;
mod group;
mod offset_node;
mod starts;
mod state;
mod stream;
pub mod view;

use crate::tls::env::{ClientLink, SecureEnv};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tributary_core::config::ConsumerConfig;
use tributary_core::consumer::{
    consumer_id, BrokerPartition, FilterKind, Registration, TopicPattern,
};
use tributary_core::wire::TopicName;

pub use self::error::{
    CommitError, ConsumerError, OffsetNodeError, RebalanceError, StartError, StartOffsetError,
    ViewError,
};
pub use self::group::write_offset;
pub use self::offset_node::read_offset_node;
pub use self::stream::{ConsumedMessage, Hold, Holder, MessageStream};
use crate::env::Env;
use crate::metrics::clients::ConsumerSnapshot;
pub use tributary_core::consumer::{Commit, CommitAnswer, CommitOutcome};

/// Data deleted at the source before this member read it: bytes `from..to` of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapReport {
    /// The topic.
    pub topic: TopicName,
    /// The partition.
    pub partition: BrokerPartition,
    /// The first offset lost (where this member was).
    pub from: i64,
    /// Where the partition starts now (reading resumes there, or the partition stops).
    pub to: i64,
}

/// What a member owns, as of one rebalance generation ([`ConsumerConnector::ownership`]).
/// Epochs are generations, so a partition owned in an epoch newer than `generation` was claimed
/// after this was read.
#[derive(Debug, Clone)]
pub struct Ownership {
    /// The rebalance generation this is as of.
    pub generation: u64,
    /// Every partition owned then, with the epoch it has been owned since.
    pub partitions: Vec<(TopicName, BrokerPartition, u64)>,
}

/// What a batch of commits did: an answer per commit, in the order asked. The first write that
/// failed ends the batch (`failed` says why): it and every commit after it are answered
/// `NotWritten` (the writes are pipelined: some of those may have landed, and committing them
/// again is harmless).
#[derive(Debug, Default)]
pub struct CommitBatch {
    /// Every commit with its outcome, in the order asked.
    pub answers: Vec<CommitAnswer>,
    /// Why the batch stopped early, if it did.
    pub failed: Option<CommitError>,
}

/// Told of every gap as it is met (besides the error line in the log and the counters).
pub type GapSink = Arc<dyn Fn(&GapReport) + Send + Sync>;

/// What a member consumes.
#[derive(Debug, Clone)]
pub enum Subscription {
    /// These topics, with this many streams each.
    Topics(BTreeMap<TopicName, u32>),
    /// Every topic a whitelist allows, with this many streams shared by all.
    Whitelist(String, u32),
    /// Every topic a blacklist does not exclude, with this many streams shared by all.
    Blacklist(String, u32),
}

/// One owned partition's position against its broker's latest offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    /// The topic.
    pub topic: TopicName,
    /// The partition.
    pub partition: BrokerPartition,
    /// What was handed out.
    pub consumed: i64,
    /// What was committed.
    pub committed: i64,
    /// The broker's latest offset.
    pub latest: i64,
}

/// A group member; see the module docs. Dropping it without [`ConsumerConnector::shutdown`]
/// stops it too (without the final commit being waited for).
pub struct ConsumerConnector {
    consumer_id: String,
    /// What it subscribed to, as registered.
    registration: Registration,
    /// Messages its streams handed out.
    handed_out: Arc<AtomicU64>,
    shared: Arc<state::Shared>,
    commits: mpsc::Sender<group::CommitRequest>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    /// Its outbound TLS (`security.protocol=ssl`), for connections made outside the member.
    link: Option<ClientLink>,
}

impl std::fmt::Debug for ConsumerConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerConnector")
            .field("consumer_id", &self.consumer_id)
            .finish()
    }
}

impl ConsumerConnector {
    /// Joins the group of `config` with `subscription`; returns the member and its streams.
    pub async fn start<E: Env>(
        env: E,
        config: ConsumerConfig,
        subscription: Subscription,
    ) -> Result<(Self, Vec<MessageStream>), StartError> {
        Self::start_with_gap_sink(env, config, subscription, None).await
    }

    /// [`ConsumerConnector::start`], telling `gap_sink` of every gap met.
    pub async fn start_with_gap_sink<E: Env>(
        env: E,
        config: ConsumerConfig,
        subscription: Subscription,
        gap_sink: Option<GapSink>,
    ) -> Result<(Self, Vec<MessageStream>), StartError> {
        let (registration, stream_count, stream_of) = layout(&subscription)?;
        if stream_count == 0 {
            return Err(StartError::NoStreams);
        }
        if config.shallow_iterator_enable {
            tracing::warn!("shallowiterator.enable=true is not supported: streams yield each message decompressed (the same messages; a mirror re-compresses per its producer's compression.codec)");
        }
        let mut rng = ChaCha8Rng::seed_from_u64(env.rng_seed());
        let id = consumer_id(
            config.group_id.as_str(),
            config.consumer_id.as_deref(),
            &env.host_address(),
            env.now_ms(),
            rng.random(),
        );
        let timeout = config
            .consumer_timeout_ms
            .map(|ms| Duration::from_millis(ms.into()));
        let handed_out = Arc::new(AtomicU64::new(0));
        let shared = Arc::new(state::Shared::new(gap_sink));
        let (senders, streams): (Vec<_>, Vec<_>) = (0..stream_count)
            .map(|_| {
                let (tx, rx) = mpsc::channel(config.queued_chunks_max.max(1) as usize);
                let stream =
                    MessageStream::new(rx, timeout, handed_out.clone(), Arc::downgrade(&shared));
                (tx, stream)
            })
            .unzip();
        let session = Duration::from_millis(config.zk.session_timeout_ms.into());
        let connection = Duration::from_millis(config.zk.connection_timeout_ms.into());
        let link = ClientLink::load(
            config.tls.as_ref(),
            Some((&config.zk_connect, session, connection)),
        )?;
        let coord = env
            .coordinate(&config.zk_connect, session, connection)
            .await?;
        let zombies = Arc::new(state::Shared::new(None));
        let member = group::Member {
            // Fetches go inside TLS when security.protocol=ssl.
            env: SecureEnv::new(env, link.clone()),
            config,
            consumer_id: id.clone(),
            registration,
            stream_of,
            shared: shared.clone(),
            zombies,
            streams: Arc::new(senders),
            retired: Default::default(),
            owners_session: Default::default(),
        };
        member.register(&coord).await?;
        let member_registration = member.registration.clone();
        tracing::info!("consumer {id} joined group {}", member.config.group_id);
        let (commits, commits_rx) = mpsc::channel(64);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(member.run(coord, commits_rx, stop_rx));
        Ok((
            ConsumerConnector {
                consumer_id: id,
                registration: member_registration,
                handed_out,
                shared,
                commits,
                stop,
                task: Some(task),
                link,
            },
            streams,
        ))
    }

    /// Its outbound TLS (`security.protocol=ssl`; `None` is plaintext): for connections to the
    /// same brokers made beside the member (the mirror's lag watch).
    pub fn link(&self) -> Option<ClientLink> {
        self.link.clone()
    }

    /// This member's id in the group.
    pub fn consumer_id(&self) -> &str {
        &self.consumer_id
    }

    /// What this member subscribed to, as registered in its group.
    pub fn registration(&self) -> &Registration {
        &self.registration
    }

    /// Asks the member to rebalance now: an observer saw partitions of its group that no live
    /// member owns (see `consumer::view`). The member also registers again if its registration
    /// is gone.
    pub fn rejoin(&self) {
        self.shared.rejoin.notify_one();
    }

    /// Gives up `partition` of `topic` until the next rebalance, which starts it again from the
    /// group's committed offset — never past what was committed (see `state::Shared::stop`):
    /// nothing more of it is fetched or committed here. For a partition whose next message the
    /// caller cannot handle (the mirror: too large for the mirror cluster); its streams may
    /// still hold messages of it, which the caller skips. Whether this member owned it.
    pub fn stop_partition(&self, topic: &TopicName, partition: BrokerPartition) -> bool {
        self.shared.stop(topic, partition)
    }

    /// The partitions this member owns right now, with their ownership epochs.
    pub fn owned(&self) -> Vec<(TopicName, BrokerPartition, u64)> {
        self.shared
            .all()
            .iter()
            .map(|p| (p.topic.clone(), p.partition, p.epoch))
            .collect()
    }

    /// The rebalance generation whose ownership is installed, or `None` while a rebalance is
    /// under way: when it changes, what [`ConsumerConnector::owned`] says may have changed.
    /// Cheap (no allocation): for callers that follow ownership message by message.
    pub fn settled_generation(&self) -> Option<u64> {
        self.shared.settled_generation()
    }

    /// Every change of what this member owns, as the group makes it: the receiver holds the
    /// latest ownership (`None` while a rebalance is under way) and wakes on each change.
    pub fn ownership_changes(&self) -> tokio::sync::watch::Receiver<Option<Ownership>> {
        self.shared.ownership_changes()
    }

    /// The partitions this member owns with their ownership epochs, as of a rebalance
    /// generation; `None` while a rebalance is under way.
    pub fn ownership(&self) -> Option<Ownership> {
        let (generation, owned) = self.shared.settled()?;
        Some(Ownership {
            generation,
            partitions: owned
                .iter()
                .map(|p| (p.topic.clone(), p.partition, p.epoch))
                .collect(),
        })
    }

    /// What this member's metrics show, read from its shared state while it lives (the reader
    /// holds no strong reference: it returns `None` once the member is gone).
    pub fn metrics_view(&self) -> impl Fn() -> Option<ConsumerSnapshot> + Send + 'static {
        let shared = Arc::downgrade(&self.shared);
        let handed_out = Arc::downgrade(&self.handed_out);
        move || {
            let (shared, handed_out) = (shared.upgrade()?, handed_out.upgrade()?);
            Some(ConsumerSnapshot {
                messages: handed_out.load(std::sync::atomic::Ordering::Relaxed),
                rebalances: shared.generation(),
                gaps: shared.gaps.load(std::sync::atomic::Ordering::Relaxed),
                gap_bytes: shared.gap_bytes.load(std::sync::atomic::Ordering::Relaxed),
                committed: shared
                    .all()
                    .iter()
                    .map(|p| {
                        let committed = p.offsets().committed();
                        (p.topic.to_string(), p.partition.to_string(), committed)
                    })
                    .collect(),
            })
        }
    }

    /// Gaps met so far (source data deleted before it was consumed) and their bytes.
    pub fn gaps(&self) -> (u64, u64) {
        (
            self.shared.gaps.load(std::sync::atomic::Ordering::Relaxed),
            self.shared
                .gap_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Every owned partition's position against its broker's latest offset, asking each broker
    /// over one connection (partitions whose broker does not answer are left out; a connection
    /// that failed is not used again).
    pub async fn lag<E: Env>(&self, env: &E) -> Vec<PartitionLag> {
        let env = &SecureEnv::new(env.clone(), self.link.clone());
        let mut by_broker: BTreeMap<(String, u16), Vec<Arc<state::PartitionState>>> =
            BTreeMap::new();
        for p in self.shared.all() {
            by_broker.entry(p.address.clone()).or_default().push(p);
        }
        let mut out = Vec::new();
        for ((host, port), partitions) in by_broker {
            let Ok(mut conn) =
                crate::client::connect(env, &host, port, Duration::from_secs(5)).await
            else {
                continue;
            };
            let asked: Vec<(TopicName, i32)> = partitions
                .iter()
                .map(|p| (p.topic.clone(), p.partition.partition as i32))
                .collect();
            let (latest, _failed) = crate::client::latest_offsets(&mut conn, &asked).await;
            for (p, latest) in partitions.iter().zip(latest) {
                if let Some(latest) = latest {
                    let offsets = p.offsets();
                    out.push(PartitionLag {
                        topic: p.topic.clone(),
                        partition: p.partition,
                        consumed: offsets.consumed(),
                        committed: offsets.committed(),
                        latest,
                    });
                }
            }
        }
        out
    }

    /// Commits everything handed out so far, for every partition this member owns; returns how
    /// many offsets were written.
    pub async fn commit_offsets(&self) -> Result<usize, CommitError> {
        let batch = self.request_commit(Vec::new(), true).await;
        match batch.failed {
            Some(e) => Err(e),
            None => Ok(batch
                .answers
                .iter()
                .filter(|a| a.outcome == CommitOutcome::Written)
                .count()),
        }
    }

    /// Commits up to `message` (its resume offset) for its partition, if this member has owned
    /// it without interruption since the message was handed out; returns whether it was written.
    pub async fn commit(&self, message: &ConsumedMessage) -> Result<bool, CommitError> {
        self.commit_at(
            &message.topic,
            message.partition,
            message.offset,
            message.epoch,
        )
        .await
        .map(|outcome| outcome == CommitOutcome::Written)
    }

    /// Commits `offset` for a partition if this member still owns it in ownership epoch
    /// `epoch` (see [`ConsumedMessage::epoch`]) and `offset` is not past what was handed out;
    /// says which of these held.
    pub async fn commit_at(
        &self,
        topic: &TopicName,
        partition: BrokerPartition,
        offset: i64,
        epoch: u64,
    ) -> Result<CommitOutcome, CommitError> {
        let commit = Commit {
            topic: topic.clone(),
            partition,
            epoch,
            offset,
        };
        let mut batch = self.commit_each(vec![commit]).await;
        match batch.failed.take() {
            Some(e) => Err(e),
            None => Ok(batch
                .answers
                .first()
                .map_or(CommitOutcome::NothingNew, |a| a.outcome)),
        }
    }

    /// Commits each of `commits` as [`commit_at`](Self::commit_at) would, in one request to the
    /// group's coordinator (so a rebalance about to start serves them all first, while this
    /// member still owns their partitions): an answer per commit, in order.
    pub async fn commit_each(&self, commits: Vec<Commit>) -> CommitBatch {
        self.request_commit(commits, false).await
    }

    async fn request_commit(&self, commits: Vec<Commit>, everything: bool) -> CommitBatch {
        let not_written = |commits: Vec<Commit>| CommitBatch {
            answers: commits
                .into_iter()
                .map(|commit| CommitAnswer {
                    commit,
                    outcome: CommitOutcome::NotWritten,
                })
                .collect(),
            failed: Some(CommitError::Closed),
        };
        let (done, answer) = oneshot::channel();
        let commits = if everything { vec![] } else { commits };
        let request = group::CommitRequest {
            commits: commits.clone(),
            done,
            everything,
        };
        if self.commits.send(request).await.is_err() {
            return not_written(commits);
        }
        answer.await.unwrap_or_else(|_| not_written(commits))
    }

    /// Leaves the group: stops fetching, commits (autocommit), releases its partitions, closes
    /// its session; the streams then end with `Closed`.
    pub async fn shutdown(mut self) {
        let _stopped_already = self.stop.send(true).is_err();
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
    }
}

impl Drop for ConsumerConnector {
    fn drop(&mut self) {
        let _stopped_already = self.stop.send(true).is_err();
    }
}

/// Which stream thread `i` of a topic feeds.
type StreamOf = Arc<dyn Fn(&str, u32) -> usize + Send + Sync>;

/// The registration, the number of streams, and which stream thread `i` of a topic feeds.
fn layout(subscription: &Subscription) -> Result<(Registration, usize, StreamOf), StartError> {
    Ok(match subscription {
        Subscription::Topics(topics) => {
            let counts: BTreeMap<String, u32> =
                topics.iter().map(|(t, n)| (t.to_string(), *n)).collect();
            let mut base = BTreeMap::new();
            let mut total = 0usize;
            for (topic, n) in &counts {
                base.insert(topic.clone(), total);
                total += *n as usize;
            }
            let stream_of: StreamOf =
                Arc::new(move |topic, i| base.get(topic).copied().unwrap_or(0) + i as usize);
            (Registration::Static(counts), total, stream_of)
        }
        Subscription::Whitelist(filter, n) | Subscription::Blacklist(filter, n) => {
            let kind = if matches!(subscription, Subscription::Whitelist(..)) {
                FilterKind::Whitelist
            } else {
                FilterKind::Blacklist
            };
            let pattern = TopicPattern::new(kind, filter)?;
            let stream_of: StreamOf = Arc::new(|_, i| i as usize);
            (
                Registration::Wildcard {
                    streams: *n,
                    pattern,
                },
                *n as usize,
                stream_of,
            )
        }
    })
}
