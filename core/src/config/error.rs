//! Configuration errors that name the file, the line, the key and what would be right.

use std::fmt;

/// A configuration value that cannot be used.
///
/// Displays as `<key> in <file> line <n>: <problem>`, e.g.
/// `log.flush.interval in config/server.properties line 12: expected an integer from 1 to 2147483647, found "ten"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or other source) name.
    pub source_name: String,
    /// The line of the key, when the key is present.
    pub line: Option<usize>,
    /// The key at fault (or the keys, for a conflict).
    pub key: String,
    /// What is wrong and what would be right.
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(
                f,
                "{} in {} line {}: {}",
                self.key, self.source_name, line, self.problem
            ),
            None => write!(f, "{} in {}: {}", self.key, self.source_name, self.problem),
        }
    }
}

impl std::error::Error for ConfigError {}
