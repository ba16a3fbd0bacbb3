//! A demotion's records and decisions (sans-IO): a cluster that was primary becomes a replica
//! of the other cluster again, keeping its data.
//!
//! For every partition a replica broker holds, the demotion names a **cut**: the offset up to
//! which this cluster's log is the other cluster's history. It is the offset where the other
//! cluster's promotion stopped copying (its confirmation, [`CutPoints`]), or, where the other
//! cluster was never promoted, the end of the longest common prefix of the two logs, proven by
//! comparing their messages ([`compare_entries`]). Everything past the cut is this cluster's own
//! (acknowledged here after the other cluster took over, or never copied before a disaster):
//! it is kept in a diverged file, and the log copies the other cluster's history from the cut.
//!
//! The records, all in the demoted cluster's ZooKeeper:
//! - `/tributary/replicas/<id>`: each replica broker's source ([`ReplicaRecord`]);
//! - `/tributary/demotion` (its data the demotion's id), with a child `plan-<id>` per broker
//!   ([`Plan`]) and, once that broker has cut its logs, `done-<id>` ([`Report`]).

use std::collections::BTreeMap;
use std::fmt;

use crate::message::{MessageMark, ShallowIter};
use crate::wire::TopicName;

/// Most lines a plan or report may hold (one per partition of a broker).
pub const PLAN_LINES_MAX: usize = 100_000;

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: line {line}: {problem}")]
pub struct RecordError {
    /// The record ("plan", "report", "replica record", "cut points").
    pub what: &'static str,
    /// The 1-based line (or entry) at fault.
    pub line: usize,
    /// What is wrong with it.
    pub problem: String,
}

fn bad(what: &'static str, line: usize, problem: impl Into<String>) -> RecordError {
    RecordError {
        what,
        line,
        problem: problem.into(),
    }
}

/// A promotion's confirmation by one broker: `partition:offset,...`, where copying stopped —
/// `partition:?` for a partition whose log was not known to be a prefix of its source's when it
/// was promoted (its copy stopped on a divergence, or was not checked yet on that run): its end
/// is then no common history, and a demotion of the other cluster compares the logs instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CutPoints(pub BTreeMap<u32, Option<u64>>);

impl CutPoints {
    /// Reads `0:710,1:?` (an empty text is no partition).
    pub fn parse(text: &str) -> Result<Self, RecordError> {
        let mut out = BTreeMap::new();
        for (i, entry) in text
            .trim()
            .split(',')
            .filter(|e| !e.trim().is_empty())
            .enumerate()
        {
            let (partition, offset) = entry.split_once(':').ok_or_else(|| {
                bad(
                    "cut points",
                    i + 1,
                    format!("{entry:?} is not partition:offset"),
                )
            })?;
            let partition = partition.trim().parse().map_err(|_| {
                bad(
                    "cut points",
                    i + 1,
                    format!("{partition:?} is not a partition"),
                )
            })?;
            let offset = match offset.trim() {
                "?" => None,
                o => Some(o.parse().map_err(|_| {
                    bad("cut points", i + 1, format!("{offset:?} is not an offset"))
                })?),
            };
            if out.len() >= PLAN_LINES_MAX {
                return Err(bad("cut points", i + 1, "too many partitions"));
            }
            out.insert(partition, offset);
        }
        Ok(CutPoints(out))
    }
}

impl fmt::Display for CutPoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (p, o) in &self.0 {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            match o {
                Some(o) => write!(f, "{p}:{o}")?,
                None => write!(f, "{p}:?")?,
            }
        }
        Ok(())
    }
}

/// Where a replica broker copies from, published in its own cluster's ZooKeeper so that
/// `tributary demote` finds the other cluster and the broker there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRecord {
    /// `replica.source.zk.connect`, as configured.
    pub source_zk: String,
    /// `replica.source.brokerid`.
    pub source_broker_id: i32,
}

impl ReplicaRecord {
    /// The record's text: `source.zk.connect=<...>` and `source.brokerid=<n>`, a line each.
    pub fn encode(&self) -> String {
        format!(
            "source.zk.connect={}\nsource.brokerid={}\n",
            self.source_zk, self.source_broker_id
        )
    }

    /// Reads [`ReplicaRecord::encode`]'s text.
    pub fn parse(text: &str) -> Result<Self, RecordError> {
        let (mut zk, mut id) = (None, None);
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            match line.split_once('=') {
                Some(("source.zk.connect", v)) => zk = Some(v.trim().to_string()),
                Some(("source.brokerid", v)) => {
                    id = Some(v.trim().parse().map_err(|_| {
                        bad("replica record", i + 1, format!("{v:?} is not a broker id"))
                    })?)
                }
                _ => {
                    return Err(bad(
                        "replica record",
                        i + 1,
                        format!("{line:?} is not a known key"),
                    ))
                }
            }
        }
        match (zk, id) {
            (Some(source_zk), Some(source_broker_id)) if !source_zk.is_empty() => {
                Ok(ReplicaRecord {
                    source_zk,
                    source_broker_id,
                })
            }
            _ => Err(bad(
                "replica record",
                0,
                "source.zk.connect or source.brokerid is missing",
            )),
        }
    }
}

/// One partition's cut in a plan.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PlanEntry {
    /// The topic.
    pub topic: TopicName,
    /// The partition on this broker.
    pub partition: u32,
    /// Where the log is cut back to (everything from it on is kept in a diverged file).
    pub cut: u64,
    /// The log held nothing past the cut when the demotion was planned: it had copied the
    /// other cluster's messages up to its end. A broker that is a replica when it carries the
    /// plan out (it takes no produces) then keeps what it holds past the cut, which can only
    /// be copies made since; one that takes produces cuts as planned.
    pub nothing_past: bool,
}

/// The marker of [`PlanEntry::nothing_past`] in a plan line.
const NOTHING_PAST: &str = "nothing-past";

/// What one broker of a demoted cluster is to cut: a line `<topic> <partition> <cut>` per
/// partition, followed by `nothing-past` when [`PlanEntry::nothing_past`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan(pub Vec<PlanEntry>);

impl Plan {
    /// The plan's text.
    pub fn encode(&self) -> String {
        self.0
            .iter()
            .map(|e| {
                let (space, marker) = if e.nothing_past {
                    (" ", NOTHING_PAST)
                } else {
                    ("", "")
                };
                format!("{} {} {}{space}{marker}\n", e.topic, e.partition, e.cut)
            })
            .collect()
    }

    /// Reads [`Plan::encode`]'s text.
    pub fn parse(text: &str) -> Result<Self, RecordError> {
        let mut out = Vec::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            if out.len() >= PLAN_LINES_MAX {
                return Err(bad("plan", i + 1, "too many lines"));
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (topic, partition, cut, nothing_past) = match fields.as_slice() {
                [topic, partition, cut] => (topic, partition, cut, false),
                [topic, partition, cut, NOTHING_PAST] => (topic, partition, cut, true),
                _ => {
                    return Err(bad(
                        "plan",
                        i + 1,
                        format!("{line:?} is not `topic partition cut [nothing-past]`"),
                    ))
                }
            };
            out.push(PlanEntry {
                topic: topic
                    .parse()
                    .map_err(|e| bad("plan", i + 1, format!("topic {topic:?}: {e}")))?,
                partition: partition
                    .parse()
                    .map_err(|_| bad("plan", i + 1, format!("{partition:?} is not a partition")))?,
                cut: cut
                    .parse()
                    .map_err(|_| bad("plan", i + 1, format!("{cut:?} is not an offset")))?,
                nothing_past,
            });
        }
        Ok(Plan(out))
    }
}

/// What a broker did with one partition of its plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Cut back: `entries` top-level messages (`end - cut` bytes) moved to `file` (none when
    /// nothing was past the cut).
    Cut {
        /// Where the log ended before.
        end: u64,
        /// Top-level messages moved out.
        entries: u64,
        /// The diverged file's name, `-` for none.
        file: String,
    },
    /// Not cut (the reason): the partition does not copy until an operator has looked.
    Refused(String),
}

/// One partition's line in a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportEntry {
    /// The topic.
    pub topic: TopicName,
    /// The partition.
    pub partition: u32,
    /// The cut asked for.
    pub cut: u64,
    /// What was done.
    pub outcome: Outcome,
}

/// A broker's confirmation of a demotion: the demotion's id on the first line, then a line per
/// partition: `<topic> <partition> <cut> cut <end> <entries> <file>` or
/// `<topic> <partition> <cut> refused <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The demotion confirmed.
    pub demotion: String,
    /// Each partition of the plan.
    pub entries: Vec<ReportEntry>,
}

impl Report {
    /// The report's text.
    pub fn encode(&self) -> String {
        let mut out = format!("{}\n", self.demotion);
        for e in &self.entries {
            match &e.outcome {
                Outcome::Cut { end, entries, file } => out.push_str(&format!(
                    "{} {} {} cut {end} {entries} {file}\n",
                    e.topic, e.partition, e.cut
                )),
                Outcome::Refused(why) => out.push_str(&format!(
                    "{} {} {} refused {}\n",
                    e.topic,
                    e.partition,
                    e.cut,
                    why.replace('\n', " ")
                )),
            }
        }
        out
    }

    /// Reads [`Report::encode`]'s text.
    pub fn parse(text: &str) -> Result<Self, RecordError> {
        let mut lines = text.lines();
        let demotion = lines.next().unwrap_or_default().trim().to_string();
        let mut entries = Vec::new();
        for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let n = i + 2;
            if entries.len() >= PLAN_LINES_MAX {
                return Err(bad("report", n, "too many lines"));
            }
            let mut fields = line.splitn(5, ' ');
            let (Some(topic), Some(partition), Some(cut), Some(kind)) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(bad("report", n, format!("{line:?} is too short")));
            };
            let rest = fields.next().unwrap_or_default();
            let outcome = match kind {
                "cut" => {
                    let parts: Vec<&str> = rest.split(' ').collect();
                    let [end, count, file] = parts.as_slice() else {
                        return Err(bad(
                            "report",
                            n,
                            format!("{line:?}: `cut end entries file`"),
                        ));
                    };
                    Outcome::Cut {
                        end: end.parse().map_err(|_| {
                            bad("report", n, format!("end {end:?} is not an offset"))
                        })?,
                        entries: count.parse().map_err(|_| {
                            bad("report", n, format!("entries {count:?} is not a count"))
                        })?,
                        file: (*file).to_string(),
                    }
                }
                "refused" => Outcome::Refused(rest.to_string()),
                other => return Err(bad("report", n, format!("{other:?} is not cut or refused"))),
            };
            entries.push(ReportEntry {
                topic: topic
                    .parse()
                    .map_err(|e| bad("report", n, format!("topic {topic:?}: {e}")))?,
                partition: partition
                    .parse()
                    .map_err(|_| bad("report", n, format!("{partition:?} is not a partition")))?,
                cut: cut
                    .parse()
                    .map_err(|_| bad("report", n, format!("cut {cut:?} is not an offset")))?,
                outcome,
            });
        }
        Ok(Report { demotion, entries })
    }
}

/// Most entries a broker's [`DivergedLog`] keeps (the oldest go first).
pub const DIVERGED_LOG_MAX: usize = 1_000;

/// What a broker's demotions moved out of its logs, kept in its cluster's ZooKeeper
/// (`/tributary/diverged/<id>`) across demotions, the most recent last: each line
/// `<demotion> <topic> <partition> <cut> <end> <entries> <file>`, one per partition cut back
/// with something past its cut. The diverged files are the data; this is their index, which a
/// later demotion does not replace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DivergedLog(pub Vec<DivergedEntry>);

/// One partition's tail moved out by a demotion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DivergedEntry {
    /// The demotion's id.
    pub demotion: String,
    /// The topic.
    pub topic: TopicName,
    /// The partition.
    pub partition: u32,
    /// Where the log was cut back to.
    pub cut: u64,
    /// Where it ended before.
    pub end: u64,
    /// Top-level messages moved out.
    pub entries: u64,
    /// The diverged file's name.
    pub file: String,
}

impl DivergedLog {
    /// The log's text.
    pub fn encode(&self) -> String {
        self.0
            .iter()
            .map(|e| {
                format!(
                    "{} {} {} {} {} {} {}\n",
                    e.demotion, e.topic, e.partition, e.cut, e.end, e.entries, e.file
                )
            })
            .collect()
    }

    /// Reads [`DivergedLog::encode`]'s text.
    pub fn parse(text: &str) -> Result<Self, RecordError> {
        let mut out = Vec::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let fields: Vec<&str> = line.split(' ').collect();
            let [demotion, topic, partition, cut, end, entries, file] = fields.as_slice() else {
                return Err(bad(
                    "diverged log",
                    i + 1,
                    format!("{line:?} has not 7 fields"),
                ));
            };
            let number = |what: &'static str, v: &str| {
                v.parse::<u64>()
                    .map_err(|_| bad("diverged log", i + 1, format!("{what} {v:?}")))
            };
            out.push(DivergedEntry {
                demotion: (*demotion).to_string(),
                topic: topic
                    .parse()
                    .map_err(|e| bad("diverged log", i + 1, format!("topic {topic:?}: {e}")))?,
                partition: u32::try_from(number("partition", partition)?).map_err(|_| {
                    bad(
                        "diverged log",
                        i + 1,
                        format!("partition {partition:?} is too large"),
                    )
                })?,
                cut: number("cut", cut)?,
                end: number("end", end)?,
                entries: number("entries", entries)?,
                file: (*file).to_string(),
            });
        }
        Ok(DivergedLog(out))
    }

    /// Adds `entries` (an entry already there for the same file is kept once), dropping the
    /// oldest beyond [`DIVERGED_LOG_MAX`].
    pub fn extend(&mut self, entries: impl IntoIterator<Item = DivergedEntry>) {
        for e in entries {
            if !self
                .0
                .iter()
                .any(|x| x.file == e.file && x.topic == e.topic && x.partition == e.partition)
            {
                self.0.push(e);
            }
        }
        let excess = self.0.len().saturating_sub(DIVERGED_LOG_MAX);
        self.0.drain(..excess);
        debug_assert!(self.0.len() <= DIVERGED_LOG_MAX);
    }
}

/// How two logs' bytes fetched at the same offset compare, entry by entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compared {
    /// Every whole entry both hold from there is the same; the comparison goes on at `next`
    /// (where one of the two blocks ran out of whole entries).
    SameThrough {
        /// The offset after the last entry compared.
        next: u64,
    },
    /// The entry at `at` differs (or a boundary of one is not a boundary of the other): the
    /// logs diverge there.
    DiffersAt {
        /// The first offset that is not common.
        at: u64,
    },
}

/// Compares `ours` and `theirs`, both fetched at `offset` (a boundary of both), entry by entry
/// (size, magic, attributes and payload CRC).
pub fn compare_entries(offset: u64, ours: &[u8], theirs: &[u8]) -> Compared {
    let Ok(base) = i64::try_from(offset) else {
        return Compared::DiffersAt { at: offset };
    };
    let mut a = ShallowIter::new(ours, base);
    let mut b = ShallowIter::new(theirs, base);
    let mut next = offset;
    loop {
        match (a.next(), b.next()) {
            (Some(Ok(x)), Some(Ok(y))) => {
                if MessageMark::of(&x) != MessageMark::of(&y) {
                    return Compared::DiffersAt { at: next };
                }
                next = u64::try_from(x.next_offset).unwrap_or(u64::MAX);
            }
            // A bad entry on either side is not a common one.
            (Some(Err(_)), _) | (_, Some(Err(_))) => return Compared::DiffersAt { at: next },
            _ => return Compared::SameThrough { next },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::message::{CompressionCodec, MessageSetBuilder};

    fn set(payloads: &[&[u8]]) -> Vec<u8> {
        let mut b = MessageSetBuilder::new();
        for p in payloads {
            b.push(p.to_vec());
        }
        b.build(CompressionCodec::None).to_vec()
    }

    #[test]
    fn records_read_back_what_they_wrote_and_name_what_is_wrong() {
        let cuts = CutPoints::parse("0:710,1:0,2:?").unwrap();
        assert_eq!(cuts.0.get(&0), Some(&Some(710)));
        assert_eq!(cuts.0.get(&2), Some(&None));
        assert_eq!(cuts.to_string(), "0:710,1:0,2:?");
        assert_eq!(CutPoints::parse("").unwrap(), CutPoints::default());
        assert!(CutPoints::parse("0-7").is_err());

        let record = ReplicaRecord {
            source_zk: "zk-a:2181/dc".into(),
            source_broker_id: 3,
        };
        assert_eq!(ReplicaRecord::parse(&record.encode()).unwrap(), record);
        assert!(ReplicaRecord::parse("source.brokerid=x\n").is_err());

        let plan = Plan(vec![
            PlanEntry {
                topic: "orders".parse().unwrap(),
                partition: 1,
                cut: 42,
                nothing_past: false,
            },
            PlanEntry {
                topic: "orders".parse().unwrap(),
                partition: 2,
                cut: 7,
                nothing_past: true,
            },
        ]);
        assert_eq!(plan.encode(), "orders 1 42\norders 2 7 nothing-past\n");
        assert_eq!(Plan::parse(&plan.encode()).unwrap(), plan);
        let e = Plan::parse("orders 1\n").unwrap_err();
        assert_eq!((e.what, e.line), ("plan", 1));
        let e = Plan::parse("orders 1 42 maybe\n").unwrap_err();
        assert_eq!((e.what, e.line), ("plan", 1));

        let report = Report {
            demotion: "d-1".into(),
            entries: vec![
                ReportEntry {
                    topic: "orders".parse().unwrap(),
                    partition: 0,
                    cut: 42,
                    outcome: Outcome::Cut {
                        end: 84,
                        entries: 2,
                        file: "00000000000000000042.00000000000000000084.diverged".into(),
                    },
                },
                ReportEntry {
                    topic: "orders".parse().unwrap(),
                    partition: 1,
                    cut: 7,
                    outcome: Outcome::Refused("no message starts there".into()),
                },
            ],
        };
        assert_eq!(Report::parse(&report.encode()).unwrap(), report);
        // A bad field is named with the value found, so the node can be looked at and mended.
        let e = Report::parse("d-1\norders 0 4x2 cut 84 2 f.diverged\n").unwrap_err();
        assert_eq!((e.what, e.line), ("report", 2));
        assert!(e.problem.contains("\"4x2\""), "{e}");
    }

    #[test]
    fn the_diverged_log_reads_back_keeps_each_file_once_and_is_bounded() {
        let entry = |n: u64| DivergedEntry {
            demotion: "d-1".into(),
            topic: "orders".parse().unwrap(),
            partition: 0,
            cut: n,
            end: n + 10,
            entries: 1,
            file: format!("{n}.diverged"),
        };
        let mut log = DivergedLog::default();
        log.extend([entry(1), entry(1), entry(2)]);
        assert_eq!(log.0.len(), 2);
        assert_eq!(DivergedLog::parse(&log.encode()).unwrap(), log);
        log.extend((10..2_000).map(entry));
        assert_eq!(log.0.len(), DIVERGED_LOG_MAX);
        assert_eq!(log.0.last().map(|e| e.cut), Some(1_999));
    }

    #[test]
    fn entries_compare_until_the_first_that_differs() {
        let common = set(&[b"one", b"two"]);
        let mut ours = common.clone();
        ours.extend(set(&[b"ours"]));
        let mut theirs = common.clone();
        theirs.extend(set(&[b"them"]));
        let at = 100 + common.len() as u64;
        assert_eq!(
            compare_entries(100, &ours, &theirs),
            Compared::DiffersAt { at }
        );
        assert_eq!(
            compare_entries(100, &common, &theirs),
            Compared::SameThrough { next: at },
            "a prefix is the same as far as it goes"
        );
        assert_eq!(
            compare_entries(100, &ours[..ours.len() - 2], &theirs),
            Compared::SameThrough { next: at },
            "a partial entry is compared once fetched whole"
        );
    }
}
