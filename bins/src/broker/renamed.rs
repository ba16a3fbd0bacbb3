//! Renamed mirror copies keep their source's partition count: a mirror that copies `orders`
//! from `east` as `east.orders` records `orders`' per-broker count in `east.orders`' origin
//! record (`core::origin`), before it forwards anything of it. A broker reads that record
//! before it creates the first partition of a topic it does not hold, and at startup for the
//! topics it holds, and gives the topic that count (unless `topic.partition.count.map` names
//! it): the log manager's `partition_count`.
//!
//! A record that cannot be read within [`READ_WAIT`] does not stop the produce: the topic is
//! created with this broker's own count, as Kafka 0.7 would, and the log says so (naming the
//! broker); after such a failure, topics created within [`FAILURE_PAUSE`] do not wait for
//! ZooKeeper again. The source's count applies from this broker's next restart, unless
//! partitions past it were created meanwhile ([`keep_on_disk`]: no stored partition is ever
//! hidden). At startup the records are read as the registration is: retried until
//! `zk.connectiontimeout.ms`, then the broker does not start.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tributary_core::wire::TopicName;

use crate::env::Env;
use crate::logs::Logs;
use crate::origin_store::{OriginStore, OriginsStoreError};

/// How long a produce creating a topic waits for its origin record.
pub const READ_WAIT: Duration = Duration::from_secs(3);
/// After a failed read, how long topics are created without asking ZooKeeper.
pub const FAILURE_PAUSE: Duration = Duration::from_secs(10);
/// Between two attempts at startup.
const STARTUP_RETRY: Duration = Duration::from_millis(500);

/// What the produce path remembers between reads: when the last one failed.
#[derive(Debug)]
pub struct Reads {
    failed_at_ms: AtomicI64,
}

impl Default for Reads {
    fn default() -> Self {
        Reads {
            failed_at_ms: AtomicI64::new(i64::MIN),
        }
    }
}

/// Before a produce creates `topic`'s first partition here (broker `broker_id`): its renamed
/// count, if its record has one.
pub async fn learn_before_creating<E: Env>(
    env: &E,
    store: &OriginStore<E>,
    logs: &Logs<<E as Env>::Fs>,
    reads: &Reads,
    topic: &TopicName,
) {
    if logs.has_topic(topic) || logs.has_refused(topic) || logs.is_replica(topic) {
        return;
    }
    let broker = logs.config().broker_id;
    let now = env.now_ms();
    let failed_at = reads.failed_at_ms.load(Ordering::Relaxed);
    let pause = FAILURE_PAUSE.as_millis() as i64;
    let why = if now.saturating_sub(failed_at) < pause {
        format!("ZooKeeper failed {} ms ago", now.saturating_sub(failed_at))
    } else {
        match tokio::time::timeout(READ_WAIT, store.read(topic)).await {
            Ok(Ok(record)) => {
                if let Some(count) = record.partitions() {
                    if logs.set_renamed_count(topic, count) {
                        tracing::info!(
                            "broker {broker}: {topic}: a renamed mirror copy: {} partitions here (its source has {count} per broker)",
                            logs.partition_count(topic)
                        );
                    }
                }
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {READ_WAIT:?}"),
        }
    };
    reads.failed_at_ms.store(now, Ordering::Relaxed);
    tracing::warn!(
        "broker {broker}: {topic}: its origin record was not read ({why}); created with this broker's partition count (a renamed mirror copy gets its source's count at this broker's next restart)"
    );
}

/// At startup, before the broker registers or serves: the renamed count of every topic it
/// holds that has a record; then [`keep_on_disk`]. ZooKeeper failures are retried until
/// `connection_timeout` has passed (as the registration does), then fail the start; a damaged
/// record leaves its topic to the settings and the disk, said in the log.
pub async fn learn_at_startup<E: Env>(
    store: &OriginStore<E>,
    logs: &Logs<<E as Env>::Fs>,
    connection_timeout: Duration,
) -> Result<(), OriginsStoreError> {
    let held: BTreeSet<TopicName> = logs.local_counts().into_keys().collect();
    if !held.is_empty() {
        let deadline = tokio::time::Instant::now() + connection_timeout;
        let learnt = loop {
            match read_held(store, logs, &held).await {
                Ok(learnt) => break learnt,
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    tracing::warn!("reading the origin records: {e}; retrying");
                    tokio::time::sleep(STARTUP_RETRY).await;
                }
            }
        };
        if learnt > 0 {
            tracing::info!(
                "{learnt} renamed mirror copies here keep their sources' partition counts"
            );
        }
    }
    keep_on_disk(logs);
    Ok(())
}

/// One pass over the records of the topics held: how many renamed counts were recorded.
async fn read_held<E: Env>(
    store: &OriginStore<E>,
    logs: &Logs<<E as Env>::Fs>,
    held: &BTreeSet<TopicName>,
) -> Result<usize, OriginsStoreError> {
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
    Ok(learnt)
}

/// Every topic keeps at least the served partitions on its disk (said in the log for each topic
/// whose count would have hidden some).
pub fn keep_on_disk<F: tributary_core::log::LogFs + Clone>(logs: &Logs<F>) {
    for (topic, count, on_disk) in logs.keep_partitions_on_disk() {
        tracing::warn!("{topic}: {on_disk} partitions are on disk but this broker's settings give it {count}; all {on_disk} are kept and served");
    }
}
