//! Topic names: validated once, at the edge, so no later code can turn one into a path outside
//! `log.dir`.

use std::fmt;
use std::sync::Arc;

/// The longest topic name accepted, in bytes. A partition's log directory is
/// `<topic>-<partition>`, and a file name holds at most 255 bytes on Linux's file systems; a
/// partition number has at most 5 digits (fewer than 65,536 partitions), so 249 bytes is the
/// longest name whose every directory fits (Kafka 0.10+ chose the same limit). 0.7.2 accepted
/// up to 255 (`max.topic.name.length`) and then failed to create the directory of a 250- to
/// 255-byte name; such a name is refused here, where it is read, naming the limit.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

/// A topic name that is non-empty, at most [`TOPIC_NAME_BYTES_MAX`] bytes, made only of
/// `[A-Za-z0-9._-]`, and neither `.` nor `..`. Such a name is safe as a directory name.
///
/// Cloning is cheap (a shared, immutable string): a consumer hands one out with every message.
/// Ordered as the names' bytes are; two clones of one name compare without reading the text
/// (the mirror looks its partitions up by topic message by message).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicName(Arc<str>);

impl Ord for TopicName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if self.same_allocation(other) {
            return std::cmp::Ordering::Equal;
        }
        self.0.as_bytes().cmp(other.0.as_bytes())
    }
}

impl PartialOrd for TopicName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Why a topic name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// The name is empty.
    #[error("topic name is empty")]
    Empty,
    /// The name is longer than [`TOPIC_NAME_BYTES_MAX`].
    #[error("topic name is {0} bytes long; the limit is 249 (its log directory <topic>-<partition> must fit the file system's 255-byte file names)")]
    TooLong(usize),
    /// The name is `.` or `..`.
    #[error("topic name may not be \".\" or \"..\"")]
    DotName,
    /// The name holds a byte outside `[A-Za-z0-9._-]`.
    #[error("topic name has byte 0x{byte:02x} at position {position}; only A-Z a-z 0-9 . _ - are allowed")]
    BadByte {
        /// The offending byte.
        byte: u8,
        /// Its index in the name.
        position: usize,
    },
}

impl TopicName {
    /// Validates raw bytes from the wire or a config as a topic name.
    pub fn from_bytes(raw: &[u8]) -> Result<Self, TopicError> {
        if raw.is_empty() {
            return Err(TopicError::Empty);
        }
        if raw.len() > TOPIC_NAME_BYTES_MAX {
            return Err(TopicError::TooLong(raw.len()));
        }
        if raw == b"." || raw == b".." {
            return Err(TopicError::DotName);
        }
        if let Some((position, &byte)) = raw
            .iter()
            .enumerate()
            .find(|(_, b)| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')))
        {
            return Err(TopicError::BadByte { byte, position });
        }
        // Every byte is ASCII, so this cannot fail; map rather than unwrap all the same.
        std::str::from_utf8(raw)
            .map(|name| TopicName(Arc::from(name)))
            .map_err(|_| TopicError::Empty)
    }

    /// The same name in an allocation of its own, not shared with other clones: for a name that
    /// one thread clones message by message, so that threads do not contend for one count.
    pub fn unshared(&self) -> TopicName {
        TopicName(Arc::from(&*self.0))
    }

    /// Whether `other` is a clone of this very value (one allocation), not only the same name.
    pub fn same_allocation(&self, other: &TopicName) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for TopicName {
    type Err = TopicError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_bytes(s.as_bytes())
    }
}

impl fmt::Display for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for TopicName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The longest name's directory for the highest partition fits a 255-byte file name; one
    /// byte more is refused, naming the limit (0.7.2 took it and failed creating the directory).
    #[test]
    fn the_longest_name_leaves_room_for_every_partition_directory() {
        let longest = "t".repeat(TOPIC_NAME_BYTES_MAX);
        let name = TopicName::from_bytes(longest.as_bytes()).unwrap();
        let highest = crate::config::PARTITIONS_PER_TOPIC_MAX - 1;
        assert_eq!(format!("{name}-{highest}").len(), 255);
        let error = TopicName::from_bytes(format!("{longest}t").as_bytes()).unwrap_err();
        assert_eq!(error, TopicError::TooLong(250));
        assert!(error.to_string().contains("the limit is 249"), "{error}");
    }

    /// Names order as their bytes do, whether two values share one allocation (clones) or
    /// not (`unshared`, or parsed apart): the shortcut for clones changes no order.
    #[test]
    fn names_order_as_their_bytes_shared_or_not() {
        let names = ["a", "a.b", "a-b", "a_b", "ab", "b", "B", "z9", "z10", "Z"];
        for a in names {
            for b in names {
                let (x, y) = (
                    a.parse::<TopicName>().unwrap(),
                    b.parse::<TopicName>().unwrap(),
                );
                assert_eq!(x.cmp(&y), a.as_bytes().cmp(b.as_bytes()), "{a} against {b}");
                assert_eq!(x.cmp(&y.unshared()), a.cmp(b), "{a} against {b} apart");
                assert_eq!(x.partial_cmp(&y), Some(a.cmp(b)), "{a} against {b}");
            }
            let x = a.parse::<TopicName>().unwrap();
            assert_eq!(x.cmp(&x.clone()), std::cmp::Ordering::Equal);
            assert_eq!(x.cmp(&x.unshared()), std::cmp::Ordering::Equal);
        }
    }
}
