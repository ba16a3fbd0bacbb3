//! The broker's metrics: bytes in and out per topic, requests and their errors per type, each
//! partition's end and flushed end, how far its durable copies of source partitions reach (a
//! mirror partition with positions), flush latency, open connections.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Registry};
use tributary_core::mirror::position::SourceKey;
use tributary_core::wire::{ErrorCode, Request};

use super::{counter_vec, gauge, gauge_vec, register, LabelledGauges, Metrics};

/// Flush latency buckets, in seconds: from a page-cache-only sync to a stalled disk.
const FLUSH_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The broker's metrics, registered once per process.
#[derive(Debug)]
pub struct BrokerMetrics {
    bytes_in: IntCounterVec,
    bytes_out: IntCounterVec,
    requests: IntCounterVec,
    request_errors: IntCounterVec,
    log_end: IntGaugeVec,
    log_flushed: IntGaugeVec,
    mirror_held: IntGaugeVec,
    flush_seconds: Histogram,
    connections: IntGauge,
    connections_refused: IntCounterVec,
    cluster: IntGaugeVec,
}

impl BrokerMetrics {
    /// Registers every broker metric in `registry`.
    #[allow(clippy::panic)]
    pub fn register(registry: &Registry) -> Self {
        let flush_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "tributary_flush_duration_seconds",
                "Time one log flush (fsync) took.",
            )
            .buckets(FLUSH_BUCKETS.to_vec()),
        )
        .unwrap_or_else(|e| panic!("metrics: tributary_flush_duration_seconds: {e}"));
        BrokerMetrics {
            bytes_in: counter_vec(
                registry,
                "tributary_bytes_in_total",
                "Message-set bytes appended by produce requests.",
                &["topic"],
            ),
            bytes_out: counter_vec(
                registry,
                "tributary_bytes_out_total",
                "Message-set bytes sent in fetch answers.",
                &["topic"],
            ),
            requests: counter_vec(
                registry,
                "tributary_requests_total",
                "Requests served, by type.",
                &["type"],
            ),
            request_errors: counter_vec(
                registry,
                "tributary_request_errors_total",
                "Requests (or parts of them) answered with an error or refused by closing the connection, by type and error.",
                &["type", "code"],
            ),
            log_end: gauge_vec(
                registry,
                "tributary_log_end_offset",
                "A partition's end offset (bytes written; 0.7 offsets are byte positions).",
                &["topic", "partition"],
            ),
            log_flushed: gauge_vec(
                registry,
                "tributary_log_flushed_offset",
                "A partition's flushed end: every byte below it is durable and visible to consumers.",
                &["topic", "partition"],
            ),
            mirror_held: gauge_vec(
                registry,
                "tributary_mirror_held_offset",
                "Per source partition copied into a partition here with mirror.preserve.partitions: the source offset up to which its copy is durable. After a disaster of the source, the acknowledged messages the mirror lacks are those at or past it.",
                &["source_cluster", "source_topic", "source_partition", "topic", "partition"],
            ),
            flush_seconds: register(registry, flush_seconds),
            connections: gauge(
                registry,
                "tributary_connections",
                "Open client connections.",
            ),
            connections_refused: counter_vec(
                registry,
                "tributary_connections_refused_total",
                "Connections closed as soon as accepted, by reason: per_ip (max.connections.per.ip), connections_max (10,000 open), tls_handshakes (2,048 TLS handshakes in progress).",
                &["reason"],
            ),
            cluster: gauge_vec(
                registry,
                "tributary_cluster_info",
                "1, labelled with the id and name (empty: none) of the cluster this broker is in (/cluster/id).",
                &["id", "name"],
            ),
        }
    }
}

/// The broker's handle on its metrics: does nothing when metrics are off.
#[derive(Debug, Clone, Default)]
pub struct BrokerMeter(Option<Arc<BrokerMetrics>>);

impl BrokerMeter {
    /// Metrics on (`Some`) or off.
    pub fn new(metrics: Option<&Metrics>) -> Self {
        BrokerMeter(metrics.map(Metrics::broker))
    }

    /// Says which cluster the broker is in (`tributary_cluster_info`).
    pub fn cluster(&self, identity: &tributary_core::identity::ClusterIdentity) {
        if let Some(m) = &self.0 {
            let name = identity
                .name
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            m.cluster
                .with_label_values(&[identity.id.as_str(), name.as_str()])
                .set(1);
        }
    }

    /// Counts one request of `kind`.
    pub fn request(&self, kind: &'static str) {
        if let Some(m) = &self.0 {
            m.requests.with_label_values(&[kind]).inc();
        }
    }

    /// Counts an error answered (or a refusal by closing) for a request of `kind`.
    pub fn error(&self, kind: &'static str, code: &str) {
        if let Some(m) = &self.0 {
            m.request_errors.with_label_values(&[kind, code]).inc();
        }
    }

    /// Counts `bytes` appended to `topic` by a produce.
    pub fn bytes_in(&self, topic: &str, bytes: usize) {
        if let Some(m) = &self.0 {
            m.bytes_in.with_label_values(&[topic]).inc_by(bytes as u64);
        }
    }

    /// Counts `bytes` of `topic` served by a fetch.
    pub fn bytes_out(&self, topic: &str, bytes: usize) {
        if let Some(m) = &self.0 {
            m.bytes_out.with_label_values(&[topic]).inc_by(bytes as u64);
        }
    }

    /// Records one flush's duration.
    pub fn flushed(&self, took: Duration) {
        if let Some(m) = &self.0 {
            m.flush_seconds.observe(took.as_secs_f64());
        }
    }

    /// Counts a connection closed at accept, for `reason`.
    pub fn connection_refused(&self, reason: &str) {
        if let Some(m) = &self.0 {
            m.connections_refused.with_label_values(&[reason]).inc();
        }
    }

    /// Sets the number of open connections.
    pub fn connections(&self, open: usize) {
        if let Some(m) = &self.0 {
            m.connections.set(i64::try_from(open).unwrap_or(i64::MAX));
        }
    }

    /// Sets each partition's end and flushed end (`(topic, partition, end, flushed)`), removing
    /// partitions no longer served.
    pub fn partitions(
        &self,
        seen: &mut LabelledGauges,
        seen_flushed: &mut LabelledGauges,
        partitions: impl IntoIterator<Item = (String, u32, u64, u64)>,
    ) {
        let Some(m) = &self.0 else { return };
        for (topic, partition, end, flushed) in partitions {
            let partition = partition.to_string();
            let labels = [topic.as_str(), partition.as_str()];
            seen.set(&m.log_end, &labels, i64::try_from(end).unwrap_or(i64::MAX));
            seen_flushed.set(
                &m.log_flushed,
                &labels,
                i64::try_from(flushed).unwrap_or(i64::MAX),
            );
        }
        seen.finish(&m.log_end);
        seen_flushed.finish(&m.log_flushed);
    }

    /// Sets, per mirror partition and source partition copied into it, the source offset up
    /// to which the copy is durable (`(topic, partition, source, held_to)`), removing those no
    /// longer there.
    pub fn mirror_held<'a>(
        &self,
        seen: &mut LabelledGauges,
        held: impl IntoIterator<Item = (String, u32, &'a SourceKey, i64)>,
    ) {
        let Some(m) = &self.0 else { return };
        for (topic, partition, source, held_to) in held {
            let (cluster, source_partition) =
                (source.cluster.to_string(), source.partition.to_string());
            let partition = partition.to_string();
            let labels = [
                cluster.as_str(),
                source.topic.as_str(),
                source_partition.as_str(),
                topic.as_str(),
                partition.as_str(),
            ];
            seen.set(&m.mirror_held, &labels, held_to);
        }
        seen.finish(&m.mirror_held);
    }
}

/// The `type` label of a request.
pub fn request_kind(request: &Request) -> &'static str {
    match request {
        Request::Produce(_) => "produce",
        Request::MultiProduce(_) => "multiproduce",
        Request::Fetch(_) => "fetch",
        Request::MultiFetch(_) => "multifetch",
        Request::Offsets(_) => "offsets",
        Request::AckedProduce(_) => "acked_produce",
        Request::ClusterIdentity => "cluster_identity",
        Request::TopicOrigins(_) => "topic_origins",
        Request::MirrorProduce(_) => "mirror_produce",
        Request::MirrorPositions(_) => "mirror_positions",
    }
}

/// The `code` label of an error code: 0.7's name for it, in snake case, or its number.
pub fn code_label(code: ErrorCode) -> Cow<'static, str> {
    match code {
        ErrorCode::NoError => Cow::Borrowed("none"),
        ErrorCode::Unknown => Cow::Borrowed("unknown"),
        ErrorCode::OffsetOutOfRange => Cow::Borrowed("offset_out_of_range"),
        ErrorCode::InvalidMessage => Cow::Borrowed("invalid_message"),
        ErrorCode::WrongPartition => Cow::Borrowed("wrong_partition"),
        ErrorCode::InvalidFetchSize => Cow::Borrowed("invalid_fetch_size"),
        code if code == tributary_core::wire::TOPIC_AUTHORIZATION_FAILED => {
            Cow::Borrowed("topic_authorization_failed")
        }
        code if code == tributary_core::wire::READ_ONLY_REPLICA => {
            Cow::Borrowed("read_only_replica")
        }
        ErrorCode::Other(n) => Cow::Owned(n.to_string()),
    }
}
