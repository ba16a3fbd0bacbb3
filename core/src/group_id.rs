//! Consumer group ids: they become ZooKeeper paths (`/consumers/<group>/...`), so they are
//! validated once, as a type, with the rules of topic names: a `groupid` such as `a/../b` or
//! `..` can never address a node outside its own `/consumers/<group>`.

use std::fmt;

use crate::wire::{TopicError, TopicName};

/// A group id: non-empty, at most 255 bytes of `[A-Za-z0-9._-]`, and neither `.` nor `..`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId(String);

/// Why a group id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("group id \"{id}\" refused: {}", reason.to_string().replace("topic name", "the name"))]
pub struct GroupIdError {
    /// The id as given (lossily, for the message).
    pub id: String,
    /// What is wrong with it.
    pub reason: TopicError,
}

impl GroupId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for GroupId {
    type Err = GroupIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Same rules as topic names: safe as one path component.
        TopicName::from_bytes(s.as_bytes())
            .map(|name| GroupId(name.as_str().to_string()))
            .map_err(|reason| GroupIdError {
                id: s.to_string(),
                reason,
            })
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
