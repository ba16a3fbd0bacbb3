//! Active-active mirroring's topic renaming (sans-IO): the name a mirrored topic gets in the
//! mirror cluster, so that two clusters that both take writes for `orders` each hold the
//! other's as `<other cluster's name>.orders` (MirrorMaker 2's convention) instead of mixing them
//! into their own — which would then be copied back.
//!
//! Off by default (`mirror.rename.topics=false`): a 0.7 mirror keeps names. The pattern
//! (`mirror.rename.pattern`, default [`DEFAULT_PATTERN`]) holds `{topic}` exactly once and may
//! hold `{source}`, the source cluster's name (`cluster.name`); everything else is kept as
//! written and must be valid in a topic name.

use std::fmt;

use crate::identity::ClusterIdentity;
use crate::wire::{TopicError, TopicName};

/// MirrorMaker 2's default: the source cluster's name, a dot, the topic.
pub const DEFAULT_PATTERN: &str = "{source}.{topic}";

/// A checked rename pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenameRule {
    pattern: String,
}

/// Why a pattern, or a rename, was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenameError {
    /// The pattern does not hold `{topic}` exactly once.
    #[error("the pattern {0:?} must hold {{topic}} exactly once")]
    NoTopic(String),
    /// The pattern holds a `{…}` other than `{topic}` and `{source}`, or a character a topic
    /// name cannot have.
    #[error("the pattern {pattern:?} is not a topic name once filled in: {problem}")]
    Invalid {
        /// The pattern as given.
        pattern: String,
        /// What is wrong.
        problem: String,
    },
    /// The pattern uses `{source}` and the source cluster has no name.
    #[error("renaming needs the source cluster's name, and cluster {0} has none: set cluster.name on its brokers (or name it with `tributary cluster-id --zookeeper <source> --name <name>`)")]
    NoSourceName(String),
    /// The renamed topic is not a valid topic name (e.g. longer than 255 bytes).
    #[error("topic {topic} renamed by {pattern:?} is not a valid topic name: {problem}")]
    Renamed {
        /// The source topic.
        topic: TopicName,
        /// The pattern.
        pattern: String,
        /// What is wrong with the result.
        problem: TopicError,
    },
}

impl RenameRule {
    /// Checks a pattern.
    pub fn parse(pattern: &str) -> Result<Self, RenameError> {
        if pattern.matches("{topic}").count() != 1 {
            return Err(RenameError::NoTopic(pattern.to_string()));
        }
        let sample = pattern.replace("{topic}", "t").replace("{source}", "s");
        sample
            .parse::<TopicName>()
            .map_err(|e| RenameError::Invalid {
                pattern: pattern.to_string(),
                problem: e.to_string(),
            })?;
        Ok(RenameRule {
            pattern: pattern.to_string(),
        })
    }

    /// The name `topic` of cluster `source` gets in the mirror cluster.
    pub fn apply(
        &self,
        source: &ClusterIdentity,
        topic: &TopicName,
    ) -> Result<TopicName, RenameError> {
        let mut renamed = self.pattern.replace("{topic}", topic.as_str());
        if self.pattern.contains("{source}") {
            let name = source
                .name
                .as_ref()
                .ok_or_else(|| RenameError::NoSourceName(source.id.to_string()))?;
            renamed = renamed.replace("{source}", name.as_str());
        }
        renamed
            .parse::<TopicName>()
            .map_err(|problem| RenameError::Renamed {
                topic: topic.clone(),
                pattern: self.pattern.clone(),
                problem,
            })
    }

    /// Whether the pattern needs the source cluster's name.
    pub fn needs_source_name(&self) -> bool {
        self.pattern.contains("{source}")
    }
}

impl fmt::Display for RenameRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}
