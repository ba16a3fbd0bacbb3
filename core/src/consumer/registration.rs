//! What a group member registers under `/consumers/<group>/ids/<consumer id>`, and its ids.
//!
//! - static subscription: topic → stream count as JSON; 0.7's Scala writer emits
//!   `{ "t1": 2, "t2": 1 }`, other clients plain JSON (`{"t1":2}`); both are read, the Scala form
//!   is written;
//! - wildcard (0.7.1+): `*<streams>*<regex>` for a whitelist, `!<streams>!<regex>` for a
//!   blacklist.
//!
//! Ids: `<group>_<host>-<epoch ms>-<8 hex digits>` (or `<group>_<consumerid>` when configured);
//! thread `i` of a member is `<consumer id>-<i>`.

use std::collections::BTreeMap;

use super::filter::{FilterKind, TopicPattern, TopicPatternError};

/// A member's registration data.
#[derive(Debug, Clone)]
pub enum Registration {
    /// Topic → number of streams.
    Static(BTreeMap<String, u32>),
    /// Streams shared by every topic the pattern allows.
    Wildcard {
        /// How many streams.
        streams: u32,
        /// The filter.
        pattern: TopicPattern,
    },
}

/// Why registration data could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// Not the JSON object or wildcard form.
    #[error("consumer registration \"{0}\" is neither {{\"topic\": streams, ...}} nor *N*regex / !N!regex")]
    Unreadable(String),
    /// The wildcard's regex does not compile.
    #[error(transparent)]
    Pattern(#[from] TopicPatternError),
}

impl Registration {
    /// The data as 0.7 writes it.
    pub fn encode(&self) -> String {
        match self {
            Registration::Static(topics) => {
                let entries: Vec<String> = topics
                    .iter()
                    .map(|(t, n)| format!("\"{t}\": {n}"))
                    .collect();
                format!("{{ {} }}", entries.join(","))
            }
            Registration::Wildcard { streams, pattern } => {
                let mark = if pattern.kind() == FilterKind::Whitelist {
                    '*'
                } else {
                    '!'
                };
                format!("{mark}{streams}{mark}{}", pattern.pattern())
            }
        }
    }

    /// Reads registration data leniently (see the module docs).
    pub fn parse(data: &str) -> Result<Self, RegistrationError> {
        let data = data.trim();
        let unreadable = || RegistrationError::Unreadable(data.chars().take(200).collect());
        for (mark, kind) in [('*', FilterKind::Whitelist), ('!', FilterKind::Blacklist)] {
            if let Some(rest) = data.strip_prefix(mark) {
                let (streams, regex) = rest.split_once(mark).ok_or_else(unreadable)?;
                let streams = streams.parse().map_err(|_| unreadable())?;
                return Ok(Registration::Wildcard {
                    streams,
                    pattern: TopicPattern::new(kind, regex)?,
                });
            }
        }
        parse_counts(data)
            .map(Registration::Static)
            .ok_or_else(unreadable)
    }

    /// Streams per topic for the topics this member consumes among `topics` (all registered
    /// topics, for a wildcard).
    pub fn streams_for<'a>(
        &self,
        topics: impl IntoIterator<Item = &'a str>,
    ) -> BTreeMap<String, u32> {
        match self {
            Registration::Static(counts) => counts.clone(),
            Registration::Wildcard { streams, pattern } => topics
                .into_iter()
                .filter(|t| pattern.allows(t))
                .map(|t| (t.to_string(), *streams))
                .collect(),
        }
    }
}

/// A flat JSON object of string keys and non-negative integer values.
fn parse_counts(data: &str) -> Option<BTreeMap<String, u32>> {
    let inner = data.strip_prefix('{')?.strip_suffix('}')?.trim();
    let mut counts = BTreeMap::new();
    if inner.is_empty() {
        return Some(counts);
    }
    for entry in inner.split(',') {
        let (key, value) = entry.split_once(':')?;
        let key = key.trim().strip_prefix('"')?.strip_suffix('"')?;
        if key.contains('"') || key.contains('\\') {
            return None;
        }
        counts.insert(key.to_string(), value.trim().parse().ok()?);
    }
    Some(counts)
}

/// A member's consumer id: `<group>_<consumerid>` when one is configured, else
/// `<group>_<host>-<epoch ms>-<first 8 hex digits of random>`.
pub fn consumer_id(
    group: &str,
    configured: Option<&str>,
    host: &str,
    now_ms: i64,
    random: u64,
) -> String {
    match configured {
        Some(id) => format!("{group}_{id}"),
        None => format!("{group}_{host}-{now_ms}-{:08x}", random >> 32),
    }
}

/// Thread `index` of a member.
pub fn thread_id(consumer_id: &str, index: u32) -> String {
    format!("{consumer_id}-{index}")
}
