//! A reader for Java `.properties` files, following `java.util.Properties.load`.
//!
//! - Lines end at `\n`, `\r` or `\r\n`. A line whose first non-blank character is `#` or `!` is a
//!   comment; blank lines are skipped.
//! - A line ending in an odd number of backslashes continues on the next line, whose leading
//!   white space is dropped.
//! - The key runs to the first unescaped `=`, `:` or white space; then white space, at most one
//!   `=` or `:`, and white space again are skipped; the rest is the value.
//! - Escapes `\t \n \r \f \uXXXX` are decoded, any other escaped character stands for itself.
//! - A later duplicate key replaces an earlier one (as Java does).
//!
//! Files that are not UTF-8 are read as ISO-8859-1, as Java's `load(InputStream)` does.

use std::collections::BTreeMap;

/// One key's value and the line it was defined on (1-based, the first line of a continued one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// The value, escapes decoded.
    pub value: String,
    /// The line the key appears on.
    pub line: usize,
}

/// The keys and values of one `.properties` file, in key order, with where they came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Properties {
    source: String,
    entries: BTreeMap<String, Property>,
}

/// A `.properties` file that Java itself would refuse (only a malformed `\uXXXX` escape).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name} line {line}: {problem}")]
pub struct PropertiesError {
    /// The file (or other source) name.
    pub source_name: String,
    /// The line at fault.
    pub line: usize,
    /// What is wrong and what would be right.
    pub problem: String,
}

impl Properties {
    /// Parses file contents. `source` names the file in error messages.
    pub fn parse_bytes(source: &str, bytes: &[u8]) -> Result<Self, PropertiesError> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::parse(source, text),
            Err(_) => Self::parse(
                source,
                &bytes.iter().map(|&b| char::from(b)).collect::<String>(),
            ),
        }
    }

    /// Parses text. `source` names the file in error messages.
    pub fn parse(source: &str, text: &str) -> Result<Self, PropertiesError> {
        let mut props = Properties {
            source: source.to_string(),
            entries: BTreeMap::new(),
        };
        let lines = split_lines(text);
        let mut index = 0;
        while let Some(&first) = lines.get(index) {
            let line_number = index + 1;
            index += 1;
            let trimmed = first.trim_start_matches(is_blank);
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
                continue;
            }
            let mut logical = String::from(trimmed);
            while ends_in_continuation(&logical) {
                logical.pop();
                match lines.get(index) {
                    Some(next) => logical.push_str(next.trim_start_matches(is_blank)),
                    None => break,
                }
                index += 1;
            }
            let (key, value) = split_key_value(&logical);
            let key =
                unescape(key).map_err(|problem| props.error(line_number, problem.to_string()))?;
            let value =
                unescape(value).map_err(|problem| props.error(line_number, problem.to_string()))?;
            props.entries.insert(
                key,
                Property {
                    value,
                    line: line_number,
                },
            );
        }
        Ok(props)
    }

    /// A set of properties built in code (tests, defaults), named `source`.
    pub fn from_pairs<'a>(
        source: &str,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        let entries = pairs
            .into_iter()
            .enumerate()
            .map(|(i, (k, v))| {
                (
                    k.to_string(),
                    Property {
                        value: v.to_string(),
                        line: i + 1,
                    },
                )
            })
            .collect();
        Properties {
            source: source.to_string(),
            entries,
        }
    }

    fn error(&self, line: usize, problem: String) -> PropertiesError {
        PropertiesError {
            source_name: self.source.clone(),
            line,
            problem,
        }
    }

    /// The name of the file these came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The property for `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Property> {
        self.entries.get(key)
    }

    /// Every key and property, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Property)> {
        self.entries.iter().map(|(k, p)| (k.as_str(), p))
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Java's white space for properties: space, tab, form feed.
fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{c}')
}

fn split_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find(['\n', '\r']) {
            Some(at) => {
                lines.push(rest.get(..at).unwrap_or_default());
                let skip = if rest.get(at..at + 2) == Some("\r\n") {
                    2
                } else {
                    1
                };
                rest = rest.get(at + skip..).unwrap_or_default();
            }
            None => {
                lines.push(rest);
                rest = "";
            }
        }
    }
    lines
}

fn ends_in_continuation(line: &str) -> bool {
    line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

/// Splits a logical line into raw (still escaped) key and value.
fn split_key_value(line: &str) -> (&str, &str) {
    let mut escaped = false;
    let mut key_end = line.len();
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '=' || c == ':' || is_blank(c) {
            key_end = i;
            break;
        }
    }
    let key = line.get(..key_end).unwrap_or_default();
    let mut rest = line
        .get(key_end..)
        .unwrap_or_default()
        .trim_start_matches(is_blank);
    if let Some(after) = rest.strip_prefix(['=', ':']) {
        rest = after.trim_start_matches(is_blank);
    }
    (key, rest)
}

/// A `\\uxxxx` escape without four hex digits; holds the digits found.
struct MalformedEscape(String);

impl std::fmt::Display for MalformedEscape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "malformed \\uxxxx escape \"\\u{}\": expected four hex digits",
            self.0
        )
    }
}

fn unescape(raw: &str) -> Result<String, MalformedEscape> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = (hex.len() == 4)
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .ok_or_else(|| MalformedEscape(hex.clone()))?;
                // Lone surrogates (half of a Java UTF-16 pair) have no char; keep a replacement.
                out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
}
