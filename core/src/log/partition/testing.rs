//! What the partition log's unit tests share: a partition `t-0` under `/logs` on an in-memory
//! file system, with the broker's default policy.
#![allow(clippy::expect_used)]

use std::path::Path;

use super::Log;
use crate::config::{BrokerConfig, Properties};
use crate::log::{LogPolicy, MemFs, RecoveryHints, TopicPartition};

/// The partition's directory.
pub(crate) const DIR: &str = "/logs/t-0";
/// Its first segment.
pub(crate) const SEGMENT: &str = "/logs/t-0/00000000000000000000.kafka";

/// The default policy of topic `t`.
pub(crate) fn policy() -> LogPolicy {
    let props = Properties::parse(
        "test",
        "brokerid=0\nlog.dir=/logs\nenable.zookeeper=false\n",
    )
    .expect("properties");
    let config = BrokerConfig::from_properties(&props).expect("config");
    LogPolicy::for_topic(&config, &"t".parse().expect("topic"))
}

/// Partition 0 of `t`.
pub(crate) fn tp() -> TopicPartition {
    TopicPartition::new("t".parse().expect("topic"), 0)
}

/// The log in [`DIR`] opened again, as after a stop (`clean`) or a crash.
pub(crate) fn reopen(fs: &MemFs, clean: bool) -> Log<MemFs> {
    let hints = RecoveryHints {
        clean_shutdown: clean,
        checkpoint: None,
    };
    Log::open(fs.clone(), Path::new(DIR), tp(), policy(), hints, 0).expect("open")
}
