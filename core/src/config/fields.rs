//! Typed reading of properties: each accessor records the key as known, parses with 0.7's rules,
//! and reports a [`ConfigError`] naming file, line and key when the value is unusable.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::str::FromStr;

use super::error::ConfigError;
use super::properties::{Properties, Property};
use super::reference::{self, ConfigKind};
use crate::wire::TopicName;

/// Reads typed values out of [`Properties`], remembering which keys were asked for.
pub(crate) struct Fields<'a> {
    props: &'a Properties,
    kind: ConfigKind,
    known: BTreeSet<&'static str>,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(props: &'a Properties, kind: ConfigKind) -> Self {
        Fields {
            props,
            kind,
            known: BTreeSet::new(),
        }
    }

    fn raw(&mut self, key: &'static str) -> Option<&'a Property> {
        debug_assert!(
            reference::find(self.kind, key).is_some(),
            "{key} is read as a {} setting but not documented in config/reference.rs",
            self.kind.noun()
        );
        self.known.insert(key);
        self.props.get(key)
    }

    /// An error about `key`, located at its line if it is set.
    pub(crate) fn error(&self, key: &str, problem: impl std::fmt::Display) -> ConfigError {
        ConfigError {
            source_name: self.props.source().to_string(),
            line: self.props.get(key).map(|p| p.line),
            key: key.to_string(),
            problem: problem.to_string(),
        }
    }

    /// The trimmed value of `key`, if set and not blank.
    pub(crate) fn string(&mut self, key: &'static str) -> Option<String> {
        self.raw(key)
            .map(|p| p.value.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// The value of `key`, which must be set.
    pub(crate) fn required_string(&mut self, key: &'static str) -> Result<String, ConfigError> {
        self.string(key)
            .ok_or_else(|| self.error(key, "required, but not set"))
    }

    /// An integer in `range`, `default` when unset. Like Java's `parseInt` (optional sign,
    /// decimal digits), but surrounding white space is forgiven.
    pub(crate) fn int<T: TryFrom<i64>>(
        &mut self,
        key: &'static str,
        default: T,
        range: RangeInclusive<i64>,
    ) -> Result<T, ConfigError> {
        match self.optional_int(key, range)? {
            Some(value) => Ok(value),
            None => Ok(default),
        }
    }

    /// An integer in `range`, if set.
    pub(crate) fn optional_int<T: TryFrom<i64>>(
        &mut self,
        key: &'static str,
        range: RangeInclusive<i64>,
    ) -> Result<Option<T>, ConfigError> {
        let Some(raw) = self.raw(key).map(|p| p.value.trim().to_string()) else {
            return Ok(None);
        };
        let expected = || describe_range(&range);
        let value = parse_java_int(&raw)
            .filter(|v| range.contains(v))
            .ok_or_else(|| self.error(key, format!("expected {}, found \"{raw}\"", expected())))?;
        T::try_from(value)
            .map(Some)
            .map_err(|_| self.error(key, format!("expected {}, found \"{raw}\"", expected())))
    }

    /// An integer that must be set.
    pub(crate) fn required_int<T: TryFrom<i64>>(
        &mut self,
        key: &'static str,
        range: RangeInclusive<i64>,
    ) -> Result<T, ConfigError> {
        self.optional_int(key, range)?
            .ok_or_else(|| self.error(key, "required, but not set"))
    }

    /// A boolean: exactly `true` or `false` (0.7 refuses anything else), `default` when unset.
    pub(crate) fn bool(&mut self, key: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.raw(key).map(|p| p.value.trim().to_string()) {
            None => Ok(default),
            Some(v) if v == "true" => Ok(true),
            Some(v) if v == "false" => Ok(false),
            Some(v) => Err(self.error(key, format!("expected true or false, found \"{v}\""))),
        }
    }

    /// A comma list of topic names (blank entries skipped); an invalid name is an error.
    pub(crate) fn topic_list(&mut self, key: &'static str) -> Result<Vec<TopicName>, ConfigError> {
        let Some(raw) = self.string(key) else {
            return Ok(Vec::new());
        };
        raw.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| TopicName::from_str(t).map_err(|e| self.error(key, format!("\"{t}\": {e}"))))
            .collect()
    }

    /// A per-topic map `topic:value, topic:value`. As in 0.7, a malformed entry (no colon, bad
    /// topic, value not an integer in `range`) is skipped with a warning naming it.
    pub(crate) fn topic_map<T: TryFrom<i64>>(
        &mut self,
        key: &'static str,
        range: RangeInclusive<i64>,
    ) -> BTreeMap<TopicName, T> {
        let mut map = BTreeMap::new();
        let Some(raw) = self.string(key) else {
            return map;
        };
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let parsed = entry.rsplit_once(':').and_then(|(topic, value)| {
                let topic = TopicName::from_str(topic.trim()).ok()?;
                let value = parse_java_int(value.trim()).filter(|v| range.contains(v))?;
                Some((topic, T::try_from(value).ok()?))
            });
            match parsed {
                Some((topic, value)) => {
                    map.insert(topic, value);
                }
                None => tracing::warn!(
                    "{}: skipping entry \"{entry}\": expected <topic>:<{}>",
                    self.error(key, "malformed entry"),
                    describe_range(&range)
                ),
            }
        }
        map
    }

    /// Keys set in the file that no accessor asked for, with their values.
    pub(crate) fn unknown(&self) -> BTreeMap<String, String> {
        self.props
            .iter()
            .filter(|(k, _)| !self.known.contains(k))
            .map(|(k, p)| (k.to_string(), p.value.clone()))
            .collect()
    }

    /// Logs every unknown key (0.7 files carry keys Tributary does not use), naming the key it
    /// most likely meant, and returns them.
    pub(crate) fn warn_unknown(&self) -> BTreeMap<String, String> {
        let unknown = self.unknown();
        for key in unknown.keys() {
            let line = self.props.get(key).map(|p| p.line).unwrap_or(0);
            tracing::warn!(
                "{}",
                unknown_key_message(self.kind, self.props.source(), key, line)
            );
        }
        unknown
    }
}

/// What to say about an unknown key: where it is, that it is ignored, and what it may mean.
pub fn unknown_key_message(kind: ConfigKind, source: &str, key: &str, line: usize) -> String {
    let hint = match reference::suggest(kind, key) {
        Some(meant) => format!(" (did you mean {meant}?)"),
        None => String::new(),
    };
    format!(
        "{key} in {source} line {line}: not a {} setting Tributary knows{hint}; ignored",
        kind.noun()
    )
}

/// Java's `Integer.parseInt`/`Long.parseLong` grammar: optional sign, ASCII digits.
pub(crate) fn parse_java_int(raw: &str) -> Option<i64> {
    let digits = raw.strip_prefix(['+', '-']).unwrap_or(raw);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse().ok()
}

fn describe_range(range: &RangeInclusive<i64>) -> String {
    match (*range.start(), *range.end()) {
        (i64::MIN, i64::MAX) => "an integer".to_string(),
        (lo, i64::MAX) => format!("an integer of at least {lo}"),
        (lo, hi) => format!("an integer from {lo} to {hi}"),
    }
}
