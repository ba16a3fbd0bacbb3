//! The per-partition rules the log follows, derived from the broker configuration.

use crate::config::BrokerConfig;
use crate::message::ValidationLimits;
use crate::wire::TopicName;

const MS_PER_HOUR: i64 = 3_600_000;

/// How one partition's log rolls, flushes and retains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPolicy {
    /// Roll before a segment would exceed this many bytes (`log.file.size`).
    pub segment_bytes_max: u64,
    /// Roll when the active segment's first append is older than this (`log.roll.hours`).
    pub segment_age_ms_max: i64,
    /// Flush after this many unflushed messages (`log.flush.interval`).
    pub flush_interval_messages: u64,
    /// Flush when unflushed data is this old (`log.default.flush.interval.ms` or per topic).
    pub flush_interval_ms: i64,
    /// Delete segments last modified longer ago than this (`log.retention.hours`).
    pub retention_ms: i64,
    /// Delete old segments while the log exceeds this (`log.retention.size`), if set.
    pub retention_bytes: Option<u64>,
    /// Limits applied to appended sets (`max.message.size`).
    pub validation: ValidationLimits,
}

impl LogPolicy {
    /// The policy for `topic` under `config`, per-topic overrides applied.
    pub fn for_topic(config: &BrokerConfig, topic: &TopicName) -> Self {
        LogPolicy {
            segment_bytes_max: config.file_bytes_for(topic).into(),
            segment_age_ms_max: i64::from(config.roll_hours_for(topic)) * MS_PER_HOUR,
            flush_interval_messages: config.log_flush_interval_messages.into(),
            flush_interval_ms: config.flush_interval_ms_for(topic).into(),
            retention_ms: i64::from(config.retention_hours_for(topic)) * MS_PER_HOUR,
            retention_bytes: config.retention_bytes_for(topic),
            validation: ValidationLimits {
                message_bytes_max: config.max_message_bytes as usize,
                ..ValidationLimits::default()
            },
        }
    }
}
