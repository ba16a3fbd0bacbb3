//! Renamed mirror copies keep their source's partition count: a mirror that copies `orders`
//! from `east` as `east.orders` records `orders`' per-broker count in `east.orders`' origin
//! record (`core::origin`), before it forwards anything of it. A broker reads that record
//! before it creates the first partition of a topic it does not hold, and at startup for the
//! topics it holds, and gives the topic that count (unless `topic.partition.count.map` names
//! it): the log manager's `partition_count`.
//!
//! A record that cannot be read within [`READ_WAIT`] does not stop the produce: the topic is
//! created with this broker's own count, as Kafka 0.7 would, and the log says so; the source's
//! count then applies from this broker's next restart (no stored partition is ever hidden:
//! [`keep_on_disk`]). At startup the records are read like the registration: without
//! ZooKeeper the broker does not start.

use std::collections::BTreeSet;
use std::time::Duration;

use tributary_core::wire::TopicName;

use super::logs::Logs;
use crate::coordination::origins::{OriginStore, OriginsStoreError};
use crate::env::Env;

/// How long a produce creating a topic waits for its origin record.
pub const READ_WAIT: Duration = Duration::from_secs(3);

/// Before a produce creates `topic`'s first partition here: its renamed count, if its record
/// has one.
pub async fn learn_before_creating<E: Env>(
    store: &OriginStore<E>,
    logs: &Logs<<E as Env>::Fs>,
    topic: &TopicName,
) {
    if logs.has_topic(topic) || logs.is_replica(topic) {
        return;
    }
    match tokio::time::timeout(READ_WAIT, store.read(topic)).await {
        Ok(Ok(record)) => {
            if let Some(count) = record.partitions() {
                if logs.set_renamed_count(topic, count) {
                    tracing::info!("{topic}: a renamed mirror copy: {count} partitions on this broker, as in its source");
                }
            }
        }
        Ok(Err(e)) => tracing::warn!(
            "{topic}: its origin record cannot be read ({e}); created with this broker's partition count (a renamed mirror copy gets its source's count at the next restart)"
        ),
        Err(_) => tracing::warn!(
            "{topic}: its origin record was not read within {READ_WAIT:?}; created with this broker's partition count (a renamed mirror copy gets its source's count at the next restart)"
        ),
    }
}

/// At startup, before the broker registers or serves: the renamed count of every topic it
/// holds that has a record; then [`keep_on_disk`]. A ZooKeeper that cannot be reached fails
/// the start, as registration would; a damaged record leaves its topic to the settings and the
/// disk, said in the log.
pub async fn learn_at_startup<E: Env>(
    store: &OriginStore<E>,
    logs: &Logs<<E as Env>::Fs>,
) -> Result<(), OriginsStoreError> {
    let held: BTreeSet<TopicName> = logs.local_counts().into_keys().collect();
    if !held.is_empty() {
        let mut learnt = 0usize;
        for name in store.recorded_topics().await? {
            let Ok(topic) = name.parse::<TopicName>() else {
                continue;
            };
            if !held.contains(&topic) || logs.is_replica(&topic) {
                continue;
            }
            match store.read(&topic).await {
                Ok(record) => {
                    if let Some(count) = record.partitions() {
                        logs.set_renamed_count_at_startup(&topic, count);
                        learnt += 1;
                    }
                }
                Err(e @ OriginsStoreError::Damaged { .. }) => {
                    tracing::error!("{e}; {topic} keeps this broker's partition count");
                }
                Err(e) => return Err(e),
            }
        }
        if learnt > 0 {
            tracing::info!(
                "{learnt} renamed mirror copies here keep their sources' partition counts"
            );
        }
    }
    keep_on_disk(logs);
    Ok(())
}

/// Every topic keeps at least the partitions on its disk (said in the log for each topic whose
/// count would have hidden some).
pub fn keep_on_disk<F: tributary_core::log::LogFs + Clone>(logs: &Logs<F>) {
    for (topic, count, on_disk) in logs.keep_partitions_on_disk() {
        tracing::warn!("{topic}: {on_disk} partitions are on disk but this broker's settings give it {count}; all {on_disk} are kept and served");
    }
}
