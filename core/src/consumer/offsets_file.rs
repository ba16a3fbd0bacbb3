//! The file of committed offsets that Kafka 0.7.2's `ExportZkOffsets` writes and
//! `ImportZkOffsets` reads: one line per partition, `<offset node path>:<offset>`, e.g.
//! `/consumers/group1/offsets/topic1/1-0:286894308`.
//!
//! Reading is stricter than 0.7.2's (which took any text after the first `:` and stopped at the
//! first empty line without a word): every line must name a committed-offset node of the 0.7
//! layout and hold a non-negative decimal offset, a path given twice must agree, and the first
//! bad line refuses the whole file, named by its line number, before anything is written.
//! 0.7.2 stopped reading at the first empty line; here empty lines at the end are ignored and
//! offsets after an empty line refuse the file (0.7.2 would have dropped them without a word).

use std::collections::BTreeMap;

use crate::consumer::BrokerPartition;
use crate::group_id::GroupId;
use crate::wire::TopicName;

/// Lines read at most (a file of more is refused rather than buffered).
pub const LINES_MAX: usize = 1_000_000;

/// One partition's committed offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OffsetLine {
    /// The group.
    pub group: GroupId,
    /// The topic.
    pub topic: TopicName,
    /// `<broker>-<partition>`.
    pub partition: BrokerPartition,
    /// The offset.
    pub offset: i64,
}

impl OffsetLine {
    /// The offset node's path, `/consumers/<group>/offsets/<topic>/<broker>-<partition>`.
    pub fn path(&self) -> String {
        format!(
            "/consumers/{}/offsets/{}/{}",
            self.group, self.topic, self.partition
        )
    }

    /// The line as 0.7.2 writes it, without its newline.
    pub fn format(&self) -> String {
        format!("{}:{}", self.path(), self.offset)
    }
}

/// Why a file of offsets was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffsetsFileError {
    /// A line is not `<path>:<offset>`.
    #[error("line {line}: expected /consumers/<group>/offsets/<topic>/<broker>-<partition>:<offset>, found {found:?}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// The line (its first 200 characters).
        found: String,
    },
    /// The offset is not a non-negative decimal number.
    #[error("line {line}: offset {found:?} is not a non-negative integer")]
    BadOffset {
        /// 1-based line number.
        line: usize,
        /// What was there.
        found: String,
    },
    /// One node given twice with two offsets.
    #[error("line {line}: {path} was given offset {first} on line {first_line}, now {second}")]
    Conflict {
        /// 1-based line number of the second.
        line: usize,
        /// The node.
        path: String,
        /// The first offset.
        first: i64,
        /// Its line.
        first_line: usize,
        /// The second offset.
        second: i64,
    },
    /// Lines after an empty line (0.7.2 stops reading at an empty line, so they would be
    /// dropped without a word).
    #[error("line {line}: offsets after the empty line {empty}; 0.7.2 would drop them: remove the empty line or the lines after it")]
    AfterEmptyLine {
        /// The first non-empty line after it.
        line: usize,
        /// The empty line.
        empty: usize,
    },
    /// More than [`LINES_MAX`] lines.
    #[error("more than {LINES_MAX} lines")]
    TooLong,
}

/// Parses a file's text: the lines up to the first empty one (or the end), sorted by node.
pub fn parse(text: &str) -> Result<Vec<OffsetLine>, OffsetsFileError> {
    let mut read: BTreeMap<String, (usize, OffsetLine)> = BTreeMap::new();
    let mut empty = None;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            empty.get_or_insert(line);
            continue;
        }
        if let Some(empty) = empty {
            return Err(OffsetsFileError::AfterEmptyLine { line, empty });
        }
        if index >= LINES_MAX {
            return Err(OffsetsFileError::TooLong);
        }
        let parsed = parse_line(raw.trim_end_matches('\r'), line)?;
        let path = parsed.path();
        match read.get(&path) {
            Some((first_line, first)) if first.offset != parsed.offset => {
                return Err(OffsetsFileError::Conflict {
                    line,
                    path,
                    first: first.offset,
                    first_line: *first_line,
                    second: parsed.offset,
                });
            }
            Some(_) => {}
            None => {
                read.insert(path, (line, parsed));
            }
        }
    }
    Ok(read.into_values().map(|(_, parsed)| parsed).collect())
}

fn parse_line(raw: &str, line: usize) -> Result<OffsetLine, OffsetsFileError> {
    let malformed = || OffsetsFileError::Malformed {
        line,
        found: raw.chars().take(200).collect(),
    };
    let (path, offset) = raw.rsplit_once(':').ok_or_else(malformed)?;
    let offset_text = offset.trim();
    let offset = offset_text
        .parse::<i64>()
        .ok()
        .filter(|o| *o >= 0)
        .ok_or_else(|| OffsetsFileError::BadOffset {
            line,
            found: offset_text.chars().take(40).collect(),
        })?;
    let rest = path.strip_prefix("/consumers/").ok_or_else(malformed)?;
    let parts: Vec<&str> = rest.split('/').collect();
    let [group, "offsets", topic, partition] = parts.as_slice() else {
        return Err(malformed());
    };
    Ok(OffsetLine {
        group: group.parse().map_err(|_| malformed())?,
        topic: topic.parse().map_err(|_| malformed())?,
        // Only the node's own spelling ("01-0" would write node 1-0, which the line does not name).
        partition: BrokerPartition::parse(partition)
            .filter(|p| p.to_string() == *partition)
            .ok_or_else(malformed)?,
        offset,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn reads_what_0_7_2_writes_and_writes_it_back_byte_for_byte() {
        let text = "/consumers/group1/offsets/topic1/1-0:286894308\n/consumers/group1/offsets/topic1/2-0:0\n";
        let lines = parse(text).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].offset, 286_894_308);
        let written: String = lines.iter().map(|l| format!("{}\n", l.format())).collect();
        assert_eq!(written, text);
    }

    #[test]
    fn empty_lines_at_the_end_are_ignored_but_offsets_after_one_refuse_the_file() {
        let lines = parse("/consumers/g/offsets/t/0-0:5\n\n\n").unwrap();
        assert_eq!(lines.len(), 1);
        let error =
            parse("/consumers/g/offsets/t/0-0:5\n\n/consumers/g/offsets/t/0-1:6\n").unwrap_err();
        assert_eq!(
            error,
            OffsetsFileError::AfterEmptyLine { line: 3, empty: 2 }
        );
    }

    #[test]
    fn a_partition_must_be_written_as_its_node_is_named() {
        for bad in ["01-0", "+1-0", "1-00"] {
            let text = format!("/consumers/g/offsets/t/{bad}:5\n");
            assert!(parse(&text).is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn refuses_a_bad_line_naming_it() {
        let bad = [
            ("/consumers/g/offsets/t/0-0\n", "line 1: expected"),
            (
                "/consumers/g/offsets/t/0-0:5\n/consumers/g/offsets/t/0-1:-3\n",
                "line 2: offset \"-3\"",
            ),
            ("/consumers/g/offsets/t/0-0:x\n", "line 1: offset \"x\""),
            ("/consumers/g/owners/t/0-0:5\n", "line 1: expected"),
            ("/consumers/g/offsets/t/zero:5\n", "line 1: expected"),
            ("/brokers/ids/0:5\n", "line 1: expected"),
            (
                "/consumers/g/offsets/t/0-0:5\n/consumers/g/offsets/t/0-0:6\n",
                "line 2: /consumers/g/offsets/t/0-0 was given offset 5 on line 1, now 6",
            ),
        ];
        for (text, said) in bad {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.starts_with(said), "{text:?}: {error}");
        }
    }

    #[test]
    fn the_same_line_twice_is_one_partition() {
        let lines = parse("/consumers/g/offsets/t/0-0:5\n/consumers/g/offsets/t/0-0:5\n").unwrap();
        assert_eq!(lines.len(), 1);
    }
}
