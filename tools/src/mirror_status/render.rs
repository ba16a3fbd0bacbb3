//! The mirror-status table, from two samples (pure: the same samples give the same text).
//!
//! One line per topic (per partition with `verbose`): the source's end, the mirror's position
//! (its committed offset: what the mirror cluster durably has), the lag, the rate the position
//! moved at between the samples, and the time to catch up at the rate the lag closed at (the
//! mirror's rate minus the source's growth). Offsets are byte positions, as in 0.7.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One source partition at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSample {
    /// The source's latest offset; `None` when its broker could not be asked.
    pub source_end: Option<i64>,
    /// The group's committed offset.
    pub position: i64,
}

/// Every partition of the group at one moment: `(topic, <broker>-<partition>)` → sample.
pub type Sample = BTreeMap<(String, String), PartitionSample>;

/// What one line sums up.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    partitions: usize,
    /// Partitions whose source end is not known (left out of every sum).
    unknown: usize,
    source_end: i64,
    position: i64,
    lag: i64,
    /// Position and lag in the earlier sample, summed over the same partitions.
    earlier_position: i64,
    earlier_lag: i64,
    /// A summed partition had no earlier sample: no rate for this line.
    earlier_missing: bool,
}

impl Totals {
    fn add(&mut self, now: &PartitionSample, before: Option<&PartitionSample>) {
        self.partitions += 1;
        let Some(end) = now.source_end else {
            self.unknown += 1;
            return;
        };
        self.source_end = self.source_end.saturating_add(end);
        self.position = self.position.saturating_add(now.position);
        self.lag = self.lag.saturating_add(lag_of(end, now.position));
        match before.and_then(|b| Some((b.position, lag_of(b.source_end?, b.position)))) {
            Some((position, lag)) => {
                self.earlier_position = self.earlier_position.saturating_add(position);
                self.earlier_lag = self.earlier_lag.saturating_add(lag);
            }
            None => self.earlier_missing = true,
        }
    }

    /// Whether the line has partitions with a known end, each with an earlier sample.
    fn has_earlier(&self) -> bool {
        !self.earlier_missing && self.partitions > self.unknown
    }
}

/// Bytes behind: never negative (a position past the end is caught up).
fn lag_of(source_end: i64, position: i64) -> i64 {
    source_end.saturating_sub(position).max(0)
}

/// Whether every partition of `sample` is caught up: its source end known and its position at or
/// past it (an empty sample is not: nothing was committed yet).
pub fn caught_up(sample: &Sample) -> bool {
    !sample.is_empty()
        && sample
            .values()
            .all(|p| p.source_end.is_some_and(|end| lag_of(end, p.position) == 0))
}

/// `1.5 MiB`, `312 B`.
pub fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes.abs();
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let sign = if bytes < 0.0 { "-" } else { "" };
    match unit {
        0 => format!("{sign}{value:.0} {}", UNITS[unit]),
        _ => format!("{sign}{value:.1} {}", UNITS[unit]),
    }
}

/// `45s`, `12m05s`, `3h20m`.
pub fn human_duration(seconds: f64) -> String {
    let s = seconds.round().max(0.0) as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The rate and catch-up columns of a line, from the earlier sample `elapsed` seconds before.
fn rate_and_eta(t: &Totals, elapsed: Option<f64>) -> (String, String) {
    let caught_up = t.lag == 0 && t.partitions > t.unknown;
    let secs = match elapsed.filter(|s| *s > 0.0) {
        Some(secs) if t.has_earlier() => secs,
        _ => return ("-".into(), if caught_up { "caught up" } else { "-" }.into()),
    };
    let rate = t.position.saturating_sub(t.earlier_position) as f64 / secs;
    let closing = t.earlier_lag.saturating_sub(t.lag) as f64 / secs;
    let eta = if caught_up {
        "caught up".to_string()
    } else if closing > 0.0 {
        human_duration(t.lag as f64 / closing)
    } else {
        "not closing".to_string()
    };
    (format!("{}/s", human_bytes(rate)), eta)
}

/// The table: a header, one line per topic (and per partition when `verbose`), and a total.
/// `earlier` is the sample taken `elapsed` seconds before `now` (none: no rate yet).
pub fn render(
    group: &str,
    earlier: Option<&Sample>,
    now: &Sample,
    elapsed: Option<f64>,
    verbose: bool,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<28} {:>14} {:>14} {:>12} {:>13} {:>12}",
        "TOPIC / PARTITION", "SOURCE END", "MIRRORED", "LAG", "RATE", "CATCH-UP"
    );
    let mut topics: BTreeMap<&str, Totals> = BTreeMap::new();
    let mut all = Totals::default();
    let mut partition_lines: BTreeMap<&str, String> = BTreeMap::new();
    for ((topic, partition), sample) in now {
        let before = earlier.and_then(|e| e.get(&(topic.clone(), partition.clone())));
        topics.entry(topic).or_default().add(sample, before);
        all.add(sample, before);
        if verbose {
            let mut one = Totals::default();
            one.add(sample, before);
            let line = partition_line(partition, sample, &one, elapsed);
            partition_lines.entry(topic).or_default().push_str(&line);
        }
    }
    for (topic, totals) in &topics {
        out.push_str(&line(topic, totals, elapsed));
        if let Some(lines) = partition_lines.get(topic) {
            out.push_str(lines);
        }
    }
    if topics.is_empty() {
        let _ = writeln!(
            out,
            "(group {group} has committed no offsets yet: is the mirror running, and is this the source cluster's ZooKeeper?)"
        );
        return out;
    }
    out.push_str(&line(
        &format!("all ({})", count(all.partitions, "partition")),
        &all,
        elapsed,
    ));
    if all.unknown > 0 {
        let _ = writeln!(
            out,
            "{} left out of the sums: their source broker did not answer",
            count(all.unknown, "partition")
        );
    }
    out
}

/// `1 partition`, `3 partitions`.
fn count(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ => format!("{n} {noun}s"),
    }
}

fn line(name: &str, t: &Totals, elapsed: Option<f64>) -> String {
    let (rate, eta) = rate_and_eta(t, elapsed);
    format!(
        "{:<28} {:>14} {:>14} {:>12} {:>13} {:>12}\n",
        name,
        t.source_end,
        t.position,
        human_bytes(t.lag as f64),
        rate,
        eta
    )
}

fn partition_line(
    partition: &str,
    sample: &PartitionSample,
    t: &Totals,
    elapsed: Option<f64>,
) -> String {
    let name = format!("  {partition}");
    match sample.source_end {
        Some(_) => line(&name, t, elapsed),
        None => format!(
            "{:<28} {:>14} {:>14} {:>12} {:>13} {:>12}\n",
            name, "?", sample.position, "?", "-", "-"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(parts: &[(&str, &str, Option<i64>, i64)]) -> Sample {
        parts
            .iter()
            .map(|(t, p, end, pos)| {
                (
                    (t.to_string(), p.to_string()),
                    PartitionSample {
                        source_end: *end,
                        position: *pos,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_mirror_catching_up_shows_its_rate_and_time_to_catch_up() {
        let before = sample(&[
            ("clicks", "0-0", Some(10_000_000), 2_000_000),
            ("clicks", "0-1", Some(10_000_000), 10_000_000),
            ("orders", "1-0", Some(5_000), 5_000),
        ]);
        let now = sample(&[
            ("clicks", "0-0", Some(11_000_000), 5_000_000),
            ("clicks", "0-1", Some(10_000_000), 10_000_000),
            ("orders", "1-0", Some(6_000), 6_000),
        ]);
        let text = render("KafkaMirror", Some(&before), &now, Some(2.0), true);
        insta::assert_snapshot!(text);
    }

    #[test]
    fn the_first_sample_has_no_rate_and_an_unreachable_broker_is_left_out_of_the_sums() {
        let now = sample(&[
            ("clicks", "0-0", Some(1_000), 400),
            ("clicks", "2-0", None, 900),
        ]);
        let text = render("KafkaMirror", None, &now, None, true);
        insta::assert_snapshot!(text);
    }

    #[test]
    fn a_mirror_falling_behind_is_not_closing() {
        let before = sample(&[("t", "0-0", Some(1_000), 500)]);
        let now = sample(&[("t", "0-0", Some(3_000), 900)]);
        let text = render("g", Some(&before), &now, Some(1.0), false);
        assert!(text.contains("not closing"), "{text}");
        assert!(text.contains("400 B/s"), "{text}");
    }

    #[test]
    fn caught_up_means_every_end_known_and_reached() {
        assert!(caught_up(&sample(&[
            ("t", "0-0", Some(10), 10),
            ("t", "0-1", Some(5), 6)
        ])));
        assert!(!caught_up(&sample(&[("t", "0-0", Some(10), 9)])));
        assert!(!caught_up(&sample(&[("t", "0-0", None, 10)])));
        assert!(!caught_up(&Sample::new()));
    }

    #[test]
    fn an_empty_group_says_what_to_check() {
        let text = render("g", None, &Sample::new(), None, false);
        assert!(text.contains("committed no offsets"), "{text}");
    }

    #[test]
    fn durations_and_sizes_read_as_people_write_them() {
        assert_eq!(human_duration(45.2), "45s");
        assert_eq!(human_duration(725.0), "12m05s");
        assert_eq!(human_duration(12_000.0), "3h20m");
        assert_eq!(human_bytes(312.0), "312 B");
        assert_eq!(human_bytes(1_572_864.0), "1.5 MiB");
    }
}
