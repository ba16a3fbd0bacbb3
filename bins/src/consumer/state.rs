//! What the consumer's tasks share: the partitions owned right now (each with its offsets and
//! the rebalance generation that gave it), and the queues feeding the streams.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::mpsc;
use tributary_core::consumer::{BrokerPartition, PartitionOffsets};
use tributary_core::wire::TopicName;

use super::ConsumerError;

/// One owned partition.
#[derive(Debug)]
pub struct PartitionState {
    /// The topic.
    pub topic: TopicName,
    /// The partition.
    pub partition: BrokerPartition,
    /// The rebalance that gave it to this member (fetchers of older rebalances leave it alone).
    pub generation: u64,
    /// The rebalance since which this member has owned it without interruption (a partition
    /// kept through rebalances keeps its epoch): commits name it.
    pub epoch: u64,
    /// The owning thread id, as written in the owner node.
    pub owner: String,
    /// Which stream its messages go to.
    pub stream: usize,
    /// Its broker's address.
    pub address: (String, u16),
    offsets: Mutex<PartitionOffsets>,
    /// Cleared when the partition is released: nothing is handed out or committed for it after.
    owned: AtomicBool,
    /// Set when fetching it cannot go on (an error was delivered to its stream) until the next
    /// rebalance.
    stalled: AtomicBool,
    /// Set when a stream met a message of it that cannot be read: nothing after it is handed out
    /// until the next rebalance (chunks fetched past it are dropped).
    unreadable: AtomicBool,
}

impl PartitionState {
    /// A partition owned from generation `generation` on, starting at `offsets`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        topic: TopicName,
        partition: BrokerPartition,
        generation: u64,
        epoch: u64,
        owner: String,
        stream: usize,
        address: (String, u16),
        offsets: PartitionOffsets,
    ) -> Self {
        PartitionState {
            // Cloned into every message its stream hands out: a count of its own.
            topic: topic.unshared(),
            partition,
            generation,
            epoch,
            owner,
            stream,
            address,
            offsets: Mutex::new(offsets),
            owned: AtomicBool::new(true),
            stalled: AtomicBool::new(false),
            unreadable: AtomicBool::new(false),
        }
    }

    /// Its offsets. (Only memory work happens under this lock; a poisoned one is a bug here.)
    #[allow(clippy::panic)]
    pub fn offsets(&self) -> MutexGuard<'_, PartitionOffsets> {
        self.offsets.lock().unwrap_or_else(|_| {
            panic!(
                "the offsets lock of {}/{} was poisoned",
                self.topic, self.partition
            )
        })
    }

    /// Whether this member still owns it (this generation).
    pub fn is_owned(&self) -> bool {
        self.owned.load(Ordering::SeqCst)
    }

    /// Gives it up (a rebalance is taking it away).
    pub fn release(&self) {
        self.owned.store(false, Ordering::SeqCst);
    }

    /// Whether fetching it has stopped on an error.
    pub fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::SeqCst)
    }

    /// Stops fetching it until the next rebalance.
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }

    /// A message of it could not be read: stops fetching it and handing out anything after,
    /// until the next rebalance.
    pub fn mark_unreadable(&self) {
        self.stall();
        self.unreadable.store(true, Ordering::SeqCst);
    }

    /// Whether a stream met an unreadable message of it.
    pub fn is_unreadable(&self) -> bool {
        self.unreadable.load(Ordering::SeqCst)
    }
}

/// What a fetcher puts on a stream's queue.
#[derive(Debug)]
pub enum Chunk {
    /// Whole messages of one partition, starting at `start`.
    Messages {
        /// The partition they came from.
        partition: Arc<PartitionState>,
        /// The offset of the first byte.
        start: i64,
        /// The messages: whole top-level entries only, every one CRC-checked by the fetcher
        /// that made the chunk (streams do not check them again).
        bytes: Bytes,
    },
    /// Fetching a partition failed in a way the application must hear about.
    Error(ConsumerError),
}

/// The streams' queues, in stream order: held by the member's task and its fetchers only, so
/// the streams end (`Closed`) once the member stops, however it stops.
pub type Streams = Arc<Vec<mpsc::Sender<Chunk>>>;

/// The owned partitions, the current generation, and counters.
pub struct Shared {
    owned: Mutex<BTreeMap<(TopicName, BrokerPartition), Arc<PartitionState>>>,
    generation: AtomicU64,
    /// Whether what `owned` holds is a rebalance's whole outcome: cleared when a rebalance
    /// releases everything, set when it installs what it claimed (both under `owned`'s lock).
    settled: AtomicBool,
    /// Gaps met: offsets the source deleted before they were consumed.
    pub gaps: AtomicU64,
    /// Bytes of those gaps.
    pub gap_bytes: AtomicU64,
    /// Told of each gap as it is met.
    pub gap_sink: Option<super::GapSink>,
    /// Asks the member to rebalance now (an observer saw partitions nobody owns).
    pub rejoin: tokio::sync::Notify,
    /// Partitions whose offsets here mean nothing (their start could not be read) or must not
    /// be resumed past (the mirror stopped them at a message it could not store): the next
    /// rebalance starts them from the group's committed offset instead of keeping them.
    pub restart_from_commit: Mutex<std::collections::BTreeSet<(TopicName, BrokerPartition)>>,
    /// Partitions given up by [`Shared::stop`]: their owner nodes are released at the next
    /// rebalance.
    stopped: Mutex<Vec<Arc<PartitionState>>>,
    /// Every change of what is owned, as it happens: the whole ownership once a rebalance
    /// installs it or a partition is stopped, `None` while a rebalance is under way.
    ownership: tokio::sync::watch::Sender<Option<super::Ownership>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("generation", &self.generation)
            .field("gaps", &self.gaps)
            .field("gap_sink", &self.gap_sink.is_some())
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// No partitions yet.
    pub fn new(gap_sink: Option<super::GapSink>) -> Self {
        Shared {
            owned: Mutex::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
            settled: AtomicBool::new(false),
            gaps: AtomicU64::new(0),
            gap_bytes: AtomicU64::new(0),
            gap_sink,
            rejoin: tokio::sync::Notify::new(),
            restart_from_commit: Mutex::new(std::collections::BTreeSet::new()),
            stopped: Mutex::new(Vec::new()),
            ownership: tokio::sync::watch::Sender::new(None),
        }
    }

    /// Every change of what this member owns, as it happens (see [`Shared::install`],
    /// [`Shared::release_all`], [`Shared::stop`]); the receiver sees the latest.
    pub fn ownership_changes(&self) -> tokio::sync::watch::Receiver<Option<super::Ownership>> {
        self.ownership.subscribe()
    }

    /// Tells the watchers what `owned` holds now (called with `owned` locked, so changes are
    /// told in the order they were made).
    fn tell_ownership(
        &self,
        owned: &BTreeMap<(TopicName, BrokerPartition), Arc<PartitionState>>,
        settled: bool,
    ) {
        let ownership = settled.then(|| super::Ownership {
            generation: self.generation(),
            partitions: owned
                .values()
                .map(|p| (p.topic.clone(), p.partition, p.epoch))
                .collect(),
        });
        self.ownership.send_replace(ownership);
    }

    /// Counts a gap, tells the sink.
    pub fn report_gap(&self, report: &super::GapReport) {
        self.gaps.fetch_add(1, Ordering::Relaxed);
        self.gap_bytes.fetch_add(
            u64::try_from(report.to - report.from).unwrap_or(0),
            Ordering::Relaxed,
        );
        if let Some(sink) = &self.gap_sink {
            sink(report);
        }
    }

    #[allow(clippy::panic)]
    fn owned(&self) -> MutexGuard<'_, BTreeMap<(TopicName, BrokerPartition), Arc<PartitionState>>> {
        self.owned
            .lock()
            .unwrap_or_else(|_| panic!("the consumer's ownership lock was poisoned"))
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Starts a new generation: every owned partition is released and returned (for a last
    /// commit); nothing is owned until [`Shared::install`].
    pub fn release_all(&self) -> Vec<Arc<PartitionState>> {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let released: Vec<Arc<PartitionState>> = {
            let mut owned = self.owned();
            self.settled.store(false, Ordering::SeqCst);
            let released = std::mem::take(&mut *owned).into_values().collect();
            self.tell_ownership(&owned, false);
            released
        };
        released.iter().for_each(|p| p.release());
        released
    }

    /// Gives up a partition until the next rebalance, which starts it from the group's
    /// committed offset (never keeping what was handed out here): it is no longer owned, so
    /// nothing is fetched or committed for it, and its owner node is released then. When this
    /// member does not own it right now (a rebalance is under way), the next rebalance still
    /// excludes it, and one is asked for. Whether it was owned.
    pub fn stop(&self, topic: &TopicName, partition: BrokerPartition) -> bool {
        let key = (topic.clone(), partition);
        crate::sync::lock(
            &self.restart_from_commit,
            "the consumer's partitions to restart from their commit",
        )
        .insert(key.clone());
        let state = {
            let mut owned = self.owned();
            let removed = owned.remove(&key);
            if removed.is_some() {
                self.tell_ownership(&owned, self.settled.load(Ordering::SeqCst));
            }
            removed
        };
        let Some(state) = state else {
            self.rejoin.notify_one();
            return false;
        };
        state.stall();
        state.release();
        crate::sync::lock(&self.stopped, "the consumer's stopped partitions").push(state);
        true
    }

    /// The partitions given up by [`Shared::stop`] since the last call.
    pub fn take_stopped(&self) -> Vec<Arc<PartitionState>> {
        std::mem::take(&mut *crate::sync::lock(
            &self.stopped,
            "the consumer's stopped partitions",
        ))
    }

    /// The generation whose ownership is installed, or `None` while a rebalance is under way
    /// (two atomic loads: cheap enough to ask at every message).
    pub fn settled_generation(&self) -> Option<u64> {
        self.settled
            .load(Ordering::SeqCst)
            .then(|| self.generation())
    }

    /// Installs what a successful rebalance claimed.
    pub fn install(&self, partitions: Vec<Arc<PartitionState>>) {
        let mut owned = self.owned();
        for p in partitions {
            owned.insert((p.topic.clone(), p.partition), p);
        }
        self.settled.store(true, Ordering::SeqCst);
        self.tell_ownership(&owned, true);
    }

    /// Who holds `partition` of `topic` now: `None` while a rebalance is under way, else the
    /// state of this member's ownership of it (`Some(None)`: this member does not own it).
    pub fn holder_of(
        &self,
        topic: &TopicName,
        partition: BrokerPartition,
    ) -> Option<Option<Arc<PartitionState>>> {
        let owned = self.owned();
        if !self.settled.load(Ordering::SeqCst) {
            return None;
        }
        Some(owned.get(&(topic.clone(), partition)).cloned())
    }

    /// Every owned partition and the generation this is as of, or `None` while a rebalance is
    /// under way (what is owned then is not the whole truth: partitions kept through it are
    /// missing until it installs them).
    pub fn settled(&self) -> Option<(u64, Vec<Arc<PartitionState>>)> {
        let owned = self.owned();
        if !self.settled.load(Ordering::SeqCst) {
            return None;
        }
        Some((self.generation(), owned.values().cloned().collect()))
    }

    /// Every owned partition.
    pub fn all(&self) -> Vec<Arc<PartitionState>> {
        self.owned().values().cloned().collect()
    }

    /// An owned partition.
    pub fn get(
        &self,
        topic: &TopicName,
        partition: BrokerPartition,
    ) -> Option<Arc<PartitionState>> {
        self.owned().get(&(topic.clone(), partition)).cloned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn partition(p: u32, epoch: u64) -> Arc<PartitionState> {
        Arc::new(PartitionState::new(
            "t".parse().unwrap(),
            BrokerPartition {
                broker_id: 0,
                partition: p,
            },
            epoch,
            epoch,
            "g_a-0".into(),
            0,
            ("b".into(), 9092),
            PartitionOffsets::starting_at(0),
        ))
    }

    /// Every change of ownership reaches a watcher as it is made: none while a rebalance runs,
    /// the whole ownership once installed, a stopped partition gone at once.
    #[test]
    fn every_ownership_change_is_told_as_it_is_made() {
        let shared = Shared::new(None);
        let mut changes = shared.ownership_changes();
        assert!(changes.borrow_and_update().is_none());
        shared.release_all();
        shared.install(vec![partition(0, 1), partition(1, 1)]);
        assert!(changes.has_changed().unwrap());
        let told = changes.borrow_and_update().clone().unwrap();
        assert_eq!((told.generation, told.partitions.len()), (1, 2));
        assert!(shared.stop(
            &"t".parse().unwrap(),
            BrokerPartition {
                broker_id: 0,
                partition: 0
            }
        ));
        assert!(changes.has_changed().unwrap(), "a stop is a change");
        let told = changes.borrow_and_update().clone().unwrap();
        assert_eq!(told.partitions.len(), 1);
        shared.release_all();
        assert!(
            changes.borrow_and_update().is_none(),
            "nothing settled while rebalancing"
        );
    }
}
