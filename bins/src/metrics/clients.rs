//! The producer's and consumer's metrics, copied from the counters they keep anyway (see
//! [`crate::producer::ProducerStats`] and the consumer's shared state) right before a scrape.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use prometheus::{IntCounter, IntGauge, IntGaugeVec, Registry};

use super::mirror::MirrorMetrics;
use super::{copy_count, counter, gauge, gauge_vec, LabelledGauges, Metrics};
use crate::producer::ProducerStats;

/// The producers' metrics (summed over every producer of the process).
#[derive(Debug)]
pub struct ProducerMetrics {
    sent: IntCounter,
    acked: IntCounter,
    failed: IntCounter,
    dropped: IntCounter,
    target_failures: IntCounter,
    /// Messages waiting in the producers' queues (set by their owner).
    pub queued: IntGauge,
}

impl ProducerMetrics {
    /// Registers every producer metric in `registry`.
    pub fn register(registry: &Registry) -> Self {
        ProducerMetrics {
            target_failures: counter(
                registry,
                "tributary_producer_target_failures_total",
                "Failed attempts to send to a broker (refused, closed, no answer, an answer that is not Kafka's); each failing broker is named in the log every 30 s.",
            ),
            sent: counter(
                registry,
                "tributary_producer_sent_total",
                "Messages accepted by the producer (queued, or sent at once in sync mode).",
            ),
            acked: counter(
                registry,
                "tributary_producer_acked_total",
                "Messages delivered (durably acknowledged when durable.acks=true).",
            ),
            failed: counter(
                registry,
                "tributary_producer_failed_total",
                "Messages whose delivery failed after every retry (reported to the sender).",
            ),
            dropped: counter(
                registry,
                "tributary_producer_dropped_total",
                "Messages refused because the queue was full (reported to the sender).",
            ),
            queued: gauge(
                registry,
                "tributary_producer_queued",
                "Messages waiting in the producers' queues.",
            ),
        }
    }
}

/// Copies `stats` into the producer metrics before each scrape, while the producer lives.
pub fn watch_producer(metrics: &Metrics, stats: Weak<ProducerStats>) {
    let m = metrics.producer();
    let mut last = [0u64; 5];
    metrics.on_scrape(Box::new(move || {
        let Some(stats) = stats.upgrade() else {
            return false;
        };
        let now = [
            stats.accepted.load(Ordering::Relaxed),
            stats.delivered.load(Ordering::Relaxed),
            stats.failed.load(Ordering::Relaxed),
            stats.queue_full.load(Ordering::Relaxed),
            stats.target_failures.load(Ordering::Relaxed),
        ];
        let [sent, acked, failed, dropped, target_failures] = &mut last;
        copy_count(&m.sent, sent, now[0]);
        copy_count(&m.acked, acked, now[1]);
        copy_count(&m.failed, failed, now[2]);
        copy_count(&m.dropped, dropped, now[3]);
        copy_count(&m.target_failures, target_failures, now[4]);
        true
    }));
}

/// The consumers' metrics.
#[derive(Debug)]
pub struct ConsumerMetrics {
    messages: IntCounter,
    committed: IntGaugeVec,
    rebalances: IntCounter,
}

impl ConsumerMetrics {
    /// Registers every consumer metric in `registry`.
    pub fn register(registry: &Registry) -> Self {
        ConsumerMetrics {
            messages: counter(
                registry,
                "tributary_consumer_messages_total",
                "Messages handed out by the consumer's streams.",
            ),
            committed: gauge_vec(
                registry,
                "tributary_consumer_committed_offset",
                "The offset last committed for each owned source partition.",
                &["topic", "partition"],
            ),
            rebalances: counter(
                registry,
                "tributary_consumer_rebalances_total",
                "Rebalances of the consumer group this process took part in.",
            ),
        }
    }
}

/// What a consumer shows its metrics, read right before a scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSnapshot {
    /// Messages handed out so far.
    pub messages: u64,
    /// Rebalances so far.
    pub rebalances: u64,
    /// Gaps met so far (source data deleted before it was consumed).
    pub gaps: u64,
    /// Their bytes.
    pub gap_bytes: u64,
    /// `(topic, partition, committed offset)` of every owned partition.
    pub committed: Vec<(String, String, i64)>,
}

/// Copies what `read` returns into the consumer metrics before each scrape, until it returns
/// `None` (the consumer is gone). When the consumer is a mirror's, its rebalances and gaps also
/// go to `mirror`.
pub fn watch_consumer(
    metrics: &Metrics,
    read: impl Fn() -> Option<ConsumerSnapshot> + Send + 'static,
    mirror: Option<Arc<MirrorMetrics>>,
) {
    let m: Arc<ConsumerMetrics> = metrics.consumer();
    let (mut messages, mut rebalances) = (0, 0);
    let mut mirrored = [0u64; 3];
    let mut committed = LabelledGauges::default();
    metrics.on_scrape(Box::new(move || {
        let Some(now) = read() else {
            committed.finish(&m.committed);
            return false;
        };
        copy_count(&m.messages, &mut messages, now.messages);
        copy_count(&m.rebalances, &mut rebalances, now.rebalances);
        if let Some(mirror) = &mirror {
            let [rebalances, gaps, gap_bytes] = &mut mirrored;
            copy_count(&mirror.rebalances, rebalances, now.rebalances);
            copy_count(&mirror.gaps, gaps, now.gaps);
            copy_count(&mirror.gap_bytes, gap_bytes, now.gap_bytes);
        }
        for (topic, partition, offset) in &now.committed {
            committed.set(&m.committed, &[topic, partition], *offset);
        }
        committed.finish(&m.committed);
        true
    }));
}
