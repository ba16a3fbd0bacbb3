//! The metrics of the mirror (embedded and mirror maker) and of replica mode: lag per source
//! partition in bytes and time, what was copied, what is in flight, gaps, rebalances.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Weak;

/// What the mirror did.
#[derive(Debug, Default)]
pub struct MirrorStats {
    /// Messages handed to the producer.
    pub sent: AtomicU64,
    /// Bytes handed to the producer.
    pub sent_bytes: AtomicU64,
    /// Messages durably acknowledged by the mirror cluster.
    pub acked: AtomicU64,
    /// Their bytes.
    pub acked_bytes: AtomicU64,
    /// Source offsets committed.
    pub commits: AtomicU64,
    /// Read errors (unreadable source data: each stops its partition until the next rebalance).
    pub errors: AtomicU64,
    /// Messages not copied because their topic is refused (a loop, or a name the rename rule
    /// cannot make): their partitions stop, uncommitted.
    pub refused: AtomicU64,
}

use prometheus::{IntCounter, IntGauge, IntGaugeVec, Registry};
use tributary_core::mirror::lag::{LagClock, LagSample};

use super::{copy_count, counter, gauge, gauge_vec, LabelledGauges, Metrics};

/// The mirror's and replica's metrics, registered once per process.
#[derive(Debug)]
pub struct MirrorMetrics {
    lag_bytes: IntGaugeVec,
    lag_seconds: IntGaugeVec,
    /// Messages durably acknowledged by the mirror cluster (replica: appended).
    pub messages: IntCounter,
    /// Their bytes.
    pub bytes: IntCounter,
    /// Sent to the mirror cluster and not yet acknowledged (replica: fetched, not yet appended).
    pub in_flight_bytes: IntGauge,
    /// Source ranges deleted before they were copied.
    pub gaps: IntCounter,
    /// Their bytes.
    pub gap_bytes: IntCounter,
    /// Rebalances of the source consumer group (the mirror's members).
    pub rebalances: IntCounter,
    /// Partitions stopped on unreadable source data.
    pub read_errors: IntCounter,
    /// Source offsets committed.
    pub commits: IntCounter,
    /// Source partitions the filter covers that have had no live owner in the mirror's group
    /// for longer than `mirror.unowned.alarm.ms`.
    pub unowned: IntGauge,
    /// Times a supervised (embedded) mirror was started again after a failure.
    pub restarts: IntCounter,
}

impl MirrorMetrics {
    /// Registers every mirror metric in `registry`.
    pub fn register(registry: &Registry) -> Self {
        MirrorMetrics {
            lag_bytes: gauge_vec(
                registry,
                "tributary_mirror_lag_bytes",
                "Source end offset minus the offset durably mirrored, per source partition (source: the source cluster's name, else its id; empty in replica mode).",
                &["source", "topic", "partition"],
            ),
            lag_seconds: gauge_vec(
                registry,
                "tributary_mirror_lag_seconds",
                "Age of the oldest source byte not yet mirrored, in seconds: how long ago the source's end passed the mirrored position (0 while caught up).",
                &["source", "topic", "partition"],
            ),
            messages: counter(
                registry,
                "tributary_mirror_messages_total",
                "Messages durably stored by the mirror (replica: appended).",
            ),
            bytes: counter(
                registry,
                "tributary_mirror_bytes_total",
                "Bytes durably stored by the mirror (payloads; replica: message-set bytes appended).",
            ),
            in_flight_bytes: gauge(
                registry,
                "tributary_mirror_in_flight_bytes",
                "Bytes read from the source and not yet stored by the mirror.",
            ),
            gaps: counter(
                registry,
                "tributary_mirror_gaps_total",
                "Source ranges deleted before they were copied (each reported in the log).",
            ),
            gap_bytes: counter(
                registry,
                "tributary_mirror_gap_bytes_total",
                "Bytes of those ranges: lost at the source before the mirror read them.",
            ),
            rebalances: counter(
                registry,
                "tributary_mirror_rebalances_total",
                "Rebalances of the mirror's source consumer group.",
            ),
            read_errors: counter(
                registry,
                "tributary_mirror_read_errors_total",
                "Source partitions stopped on unreadable data (until the next rebalance).",
            ),
            commits: counter(
                registry,
                "tributary_mirror_commits_total",
                "Source offsets committed.",
            ),
            unowned: gauge(
                registry,
                "tributary_mirror_unowned_partitions",
                "Source partitions the mirror's filter covers with no live owner in its group for longer than mirror.unowned.alarm.ms (nothing copies them).",
            ),
            restarts: counter(
                registry,
                "tributary_mirror_restarts_total",
                "Times the embedded mirror was started again after a failure (each logged as an error with its cause).",
            ),
        }
    }
}

/// Turns rounds of lag samples into the lag gauges (see [`LagClock`]); partitions left out of a
/// round lose their gauges.
#[derive(Debug, Default)]
pub struct LagGauges {
    clock: LagClock,
    bytes: LabelledGauges,
    seconds: LabelledGauges,
}

impl LagGauges {
    /// Sets the lag gauges from one round of samples taken at `now_ms`.
    pub fn update(&mut self, metrics: &MirrorMetrics, now_ms: i64, samples: &[LagSample]) {
        let lags = self.clock.observe(now_ms, samples);
        for (sample, lag) in samples.iter().zip(lags) {
            let labels = [
                sample.source.as_str(),
                sample.topic.as_str(),
                sample.partition.as_str(),
            ];
            self.bytes.set(&metrics.lag_bytes, &labels, lag.bytes);
            self.seconds
                .set(&metrics.lag_seconds, &labels, lag.ms / 1_000);
        }
        self.bytes.finish(&metrics.lag_bytes);
        self.seconds.finish(&metrics.lag_seconds);
    }
}

/// Copies the mirror's own counters into the mirror metrics before each scrape, while the
/// mirror lives.
pub fn watch_mirror(metrics: &Metrics, stats: Weak<MirrorStats>) {
    let m = metrics.mirror();
    let mut last = [0u64; 4];
    metrics.on_scrape(Box::new(move || {
        let Some(stats) = stats.upgrade() else {
            // The mirror is gone: nothing of it is in flight any more.
            m.in_flight_bytes.set(0);
            return false;
        };
        let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let (acked_bytes, sent_bytes) = (load(&stats.acked_bytes), load(&stats.sent_bytes));
        let [messages, bytes, errors, commits] = &mut last;
        copy_count(&m.messages, messages, load(&stats.acked));
        copy_count(&m.bytes, bytes, acked_bytes);
        copy_count(&m.read_errors, errors, load(&stats.errors));
        copy_count(&m.commits, commits, load(&stats.commits));
        let in_flight = sent_bytes.saturating_sub(acked_bytes);
        m.in_flight_bytes
            .set(i64::try_from(in_flight).unwrap_or(i64::MAX));
        true
    }));
}
