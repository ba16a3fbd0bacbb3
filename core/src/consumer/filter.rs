//! 0.7.1's wildcard topic filter (`TopicFilter`): a whitelist or blacklist regex.
//!
//! The filter string is trimmed, commas become `|`, spaces are removed and surrounding quotes
//! (`"` or `'`, as shells and properties files leave them) are stripped, so `"a, b"` means
//! `a|b`; it must then compile as a regex; a topic matches when the **whole** name
//! matches. Whitelist: consume matching topics; blacklist: consume the others. (Rust's regex
//! dialect: Java-only constructs such as look-around are refused with an error naming them.)

use regex::Regex;

/// Whitelist or blacklist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterKind {
    /// Consume topics that match.
    Whitelist,
    /// Consume topics that do not match.
    Blacklist,
}

/// A compiled topic filter.
#[derive(Debug, Clone)]
pub struct TopicPattern {
    kind: FilterKind,
    /// The normalized pattern (what 0.7 registers in ZooKeeper).
    pattern: String,
    regex: Regex,
}

/// Why a filter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("topic filter \"{given}\" is not a valid regular expression: {reason}")]
pub struct TopicPatternError {
    /// The filter as given.
    pub given: String,
    /// What is wrong.
    pub reason: String,
}

/// Two patterns are equal when they are of one kind and normalize to the same text.
impl PartialEq for TopicPattern {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.pattern == other.pattern
    }
}

impl Eq for TopicPattern {}

impl TopicPattern {
    /// Normalizes `filter` as 0.7.1 does and compiles it.
    pub fn new(kind: FilterKind, filter: &str) -> Result<Self, TopicPatternError> {
        let spaced: String = filter
            .trim()
            .replace(',', "|")
            .chars()
            .filter(|c| *c != ' ')
            .collect();
        let pattern = spaced.trim_matches(|c| c == '"' || c == '\'').to_string();
        let regex = Regex::new(&format!("^(?:{pattern})$")).map_err(|e| TopicPatternError {
            given: filter.to_string(),
            reason: e.to_string(),
        })?;
        Ok(TopicPattern {
            kind,
            pattern,
            regex,
        })
    }

    /// Whitelist or blacklist.
    pub fn kind(&self) -> FilterKind {
        self.kind
    }

    /// The normalized pattern.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether `topic` is to be consumed.
    pub fn allows(&self, topic: &str) -> bool {
        self.regex.is_match(topic) == (self.kind == FilterKind::Whitelist)
    }
}
