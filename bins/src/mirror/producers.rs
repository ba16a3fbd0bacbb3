//! The mirror's producers: the handle the streams use (type-erased over the environment),
//! which producer a source partition's messages go through, and the producer configuration
//! the mirror forces (durable acknowledgements, no drops, near-endless retries).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use tributary_core::config::{EnqueueTimeout, ProducerConfig};
use tributary_core::mirror::position::SourceKey;
use tributary_core::wire::TopicName;

use super::MirrorError;
use crate::env::Env;
use crate::failure::Failure;
use crate::producer::{Producer, ProducerStats, Record, RunDelivery, SendError};

/// A producer as the mirror uses it (type-erased over the environment).
pub(super) trait ProducerHandle: Send + Sync {
    /// [`Producer::try_send_in`]: queued at once into `run`, or the record back for
    /// [`ProducerHandle::send_in`].
    #[expect(
        clippy::result_large_err,
        reason = "the record comes back as it was, for the caller to send another way; boxing it would allocate at every full queue"
    )]
    fn try_send_in(&self, record: Record, run: &RunDelivery) -> Result<(), Record>;
    /// [`Producer::send_in`].
    fn send_in<'a>(
        &'a self,
        record: Record,
        run: &'a RunDelivery,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), SendError>> + Send + 'a>>;
    fn locate_ahead(
        &self,
        sources: BTreeMap<TopicName, BTreeMap<Arc<SourceKey>, u64>>,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    fn queued(&self) -> usize;
    fn stats_weak(&self) -> std::sync::Weak<ProducerStats>;
    fn close(self: Arc<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;
}

impl<E: Env> ProducerHandle for Producer<E> {
    fn try_send_in(&self, record: Record, run: &RunDelivery) -> Result<(), Record> {
        Producer::try_send_in(self, record, run)
    }

    fn send_in<'a>(
        &'a self,
        record: Record,
        run: &'a RunDelivery,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), SendError>> + Send + 'a>> {
        Box::pin(Producer::send_in(self, record, run))
    }

    fn locate_ahead(
        &self,
        sources: BTreeMap<TopicName, BTreeMap<Arc<SourceKey>, u64>>,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(Producer::locate_ahead(self, sources))
    }

    fn queued(&self) -> usize {
        Producer::queued(self)
    }

    fn stats_weak(&self) -> std::sync::Weak<ProducerStats> {
        Producer::stats_weak(self)
    }

    fn close(self: Arc<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            match Arc::try_unwrap(self) {
                Ok(producer) => producer.close().await,
                Err(_) => tracing::warn!(
                    "a mirror producer is still in use at shutdown; its queue is not drained"
                ),
            }
        })
    }
}

/// Which of `count` producers a source partition's messages all go through (with positions
/// on, so that one producer sees them all in order).
pub(super) fn producer_index(key: &SourceKey, count: usize) -> usize {
    use tributary_core::mirror::position::placement::{index, BROKER_SALT};
    match count {
        0 | 1 => 0,
        _ => index(key, BROKER_SALT, count),
    }
}

/// The mirror's producers (at least one).
pub(super) async fn start_producers<E: Env>(
    env: &E,
    config: &ProducerConfig,
    count: u32,
) -> Result<Vec<Arc<dyn ProducerHandle>>, MirrorError> {
    let mut producers: Vec<Arc<dyn ProducerHandle>> = Vec::new();
    for _ in 0..count.max(1) {
        let producer = Producer::start(env.clone(), config.clone())
            .await
            .map_err(|e| MirrorError::Target(Failure::caused(e.to_string(), e)))?;
        producers.push(Arc::new(producer));
    }
    Ok(producers)
}

/// The mirror's producer: durable acknowledgements always, never dropping on a full queue, and
/// retrying sends until they succeed (a send that fails for good stops the stream instead).
pub(super) fn mirror_producer(mut config: ProducerConfig) -> ProducerConfig {
    if !config.durable_acks {
        tracing::info!("the mirror asks the mirror cluster for durable acknowledgements (durable.acks=true): source offsets are committed only for what it has stored");
        config.durable_acks = true;
    }
    if config.enqueue_timeout != EnqueueTimeout::Block
        && !tributary_core::planted::active(tributary_core::planted::Bug::MirrorDropOnFull)
    {
        tracing::warn!("queue.enqueueTimeout.ms would drop messages on a full queue; the mirror waits instead (as queue.enqueueTimeout.ms=-1)");
        config.enqueue_timeout = EnqueueTimeout::Block;
    }
    if config.durable_acks_fallback {
        tracing::warn!("durable.acks.fallback=true is ignored by the mirror: it never sends unacknowledged (a broker without acknowledged produce cannot be a mirror target)");
        config.durable_acks_fallback = false;
    }
    config.num_retries = config.num_retries.max(1_000_000);
    config
}
