//! With positions on, one source's placements made ahead: at every ownership its group settles,
//! the source partitions this member owns are located in the mirror cluster (where their
//! copies are and, with placement records, their records) before their first messages, many
//! at once, through the producer each partition's messages go through. Without it each source
//! partition is located at its first message, one after another: a member taking over
//! hundreds of source partitions waits a ZooKeeper round trip or more for each, holding its
//! producer meanwhile (a sync producer sends nothing else while it waits).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;
use tributary_core::identity::ClusterId;
use tributary_core::mirror::position::SourceKey;
use tributary_core::wire::TopicName;

use super::origins::{OriginGate, Verdict, AHEAD_IN_FLIGHT, AHEAD_WAIT};
use super::{producer_index, MirrorError, ProducerHandle};
use crate::consumer::{ConsumerConnector, Ownership};

/// What a source's placing ahead works with.
pub(super) struct PlaceAheadContext {
    pub(super) connector: Arc<ConsumerConnector>,
    /// Which topics are copied, under which names (shared with the source's streams).
    pub(super) gate: Arc<OriginGate>,
    /// Every producer of the mirror (a source partition goes through the one
    /// [`producer_index`] names).
    pub(super) producers: Arc<Vec<Arc<dyn ProducerHandle>>>,
    /// The source cluster's id: the first part of each source partition's key.
    pub(super) cluster: ClusterId,
}

impl PlaceAheadContext {
    /// The context for one source's member `connector`, its `gate`, the mirror's `producers`
    /// and the source cluster's id.
    pub(super) fn new(
        connector: &Arc<ConsumerConnector>,
        gate: &Arc<OriginGate>,
        producers: &Arc<Vec<Arc<dyn ProducerHandle>>>,
        cluster: ClusterId,
    ) -> Self {
        PlaceAheadContext {
            connector: connector.clone(),
            gate: gate.clone(),
            producers: producers.clone(),
            cluster,
        }
    }
}

/// Places ahead at every settled ownership until `stop`. An ownership replaced before its
/// placing is done is left for the new one: what was placed stays placed (a locate is
/// cancel-safe), the rest is placed for the new ownership or at its first message.
pub(super) async fn run_place_ahead(
    context: PlaceAheadContext,
    mut stop: watch::Receiver<bool>,
) -> Result<(), MirrorError> {
    let mut ownership = context.connector.ownership_changes();
    loop {
        let current = ownership.borrow_and_update().clone();
        tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
            changed = ownership.changed() => match changed {
                Ok(()) => continue,
                // The group is gone (the connector stopped): nothing more to follow.
                Err(_) => return Ok(()),
            },
            () = place(&context, current) => {}
        }
        tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
            changed = ownership.changed() => if changed.is_err() {
                return Ok(());
            },
        }
    }
}

/// Locates the source partitions of `ownership` (nothing while the group rebalances): each
/// owned topic's name in the mirror cluster from the gate (a topic not decided within the
/// gate's wait is left to its first message), then each producer's share at once.
async fn place(context: &PlaceAheadContext, ownership: Option<Ownership>) {
    let Some(ownership) = ownership else {
        return;
    };
    let mut by_topic: BTreeMap<TopicName, Vec<(Arc<SourceKey>, u64)>> = BTreeMap::new();
    for (topic, partition, epoch) in ownership.partitions {
        let key = Arc::new(SourceKey {
            cluster: context.cluster.clone(),
            topic: topic.clone(),
            partition,
        });
        by_topic.entry(topic).or_default().push((key, epoch));
    }
    let named = copied_names(&context.gate, by_topic.keys().cloned().collect()).await;
    let count = context.producers.len();
    let mut shares: BTreeMap<usize, BTreeMap<TopicName, BTreeMap<Arc<SourceKey>, u64>>> =
        BTreeMap::new();
    for (topic, keys) in by_topic {
        let Some(target) = named.get(&topic) else {
            continue;
        };
        for (key, epoch) in keys {
            shares
                .entry(producer_index(&key, count))
                .or_default()
                .entry(target.clone())
                .or_default()
                .insert(key, epoch);
        }
    }
    let placing = shares.into_iter().filter_map(|(index, share)| {
        let producer = context.producers.get(index)?.clone();
        Some(async move { producer.locate_ahead(share).await })
    });
    futures_util::future::join_all(placing).await;
}

/// The mirror cluster's name of each of `topics` that is copied, as the gate decides it
/// ([`AHEAD_IN_FLIGHT`] decisions at once, each waited for [`AHEAD_WAIT`] at most).
async fn copied_names(gate: &OriginGate, topics: Vec<TopicName>) -> BTreeMap<TopicName, TopicName> {
    use futures_util::StreamExt;
    futures_util::stream::iter(topics)
        .map(|topic| async move {
            match tokio::time::timeout(AHEAD_WAIT, gate.verdict(&topic)).await {
                Ok((Verdict::Copy(name), _)) => Some((topic, name)),
                _ => None,
            }
        })
        .buffer_unordered(AHEAD_IN_FLIGHT)
        .filter_map(std::future::ready)
        .collect()
        .await
}
