//! Which bytes of a segment file this process has checked (CRC, lengths), so that serving them
//! again needs no second pass: a few disjoint ranges of file positions.
//!
//! A range starts only where a message is known to start — the file's first byte, where an
//! append began, where recovery's scan began — or grows from inside a range by a read that
//! checked the bytes after it. Its end is always the end of a checked message. At most
//! [`RANGES_MAX`] ranges are kept; forgetting one only means its bytes are checked again.

use std::sync::{Mutex, MutexGuard};

/// The most ranges kept per segment (the shortest is forgotten first).
const RANGES_MAX: usize = 8;

/// The checked ranges of one segment file, `[from, to)` in file positions, sorted, disjoint and
/// not touching.
#[derive(Debug, Default)]
pub(crate) struct CheckedRanges {
    ranges: Mutex<Vec<(u64, u64)>>,
}

impl CheckedRanges {
    /// The ranges, or none if a panic left them half-updated (then everything is checked again,
    /// which is always safe).
    fn ranges(&self) -> MutexGuard<'_, Vec<(u64, u64)>> {
        self.ranges.lock().unwrap_or_else(|poisoned| {
            tracing::error!("checked ranges of a segment were poisoned; checking everything again");
            let mut ranges = poisoned.into_inner();
            ranges.clear();
            ranges
        })
    }

    /// Records `[from, to)` as checked, `from` being known to start a message.
    pub fn record(&self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        let mut ranges = self.ranges();
        ranges.push((from, to));
        normalize(&mut ranges);
    }

    /// Records `[from, to)` as checked by a read at `from`, which is trusted as a message start
    /// only at the file's first byte or inside a range already checked.
    pub fn extend(&self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        let mut ranges = self.ranges();
        if from == 0 || ranges.iter().any(|(lo, hi)| *lo <= from && from <= *hi) {
            ranges.push((from, to));
            normalize(&mut ranges);
        }
    }

    /// Whether `[from, to)` lies inside one checked range.
    pub fn covers(&self, from: u64, to: u64) -> bool {
        self.ranges()
            .iter()
            .any(|(lo, hi)| *lo <= from && to <= *hi)
    }

    /// Forgets everything at or past `len` (the file was cut there).
    pub fn truncate(&self, len: u64) {
        let mut ranges = self.ranges();
        ranges.retain(|(lo, _)| *lo < len);
        for range in ranges.iter_mut() {
            range.1 = range.1.min(len);
        }
    }
}

/// Sorts, merges overlapping or touching ranges, and keeps at most [`RANGES_MAX`].
fn normalize(ranges: &mut Vec<(u64, u64)>) {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(lo, hi) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    while merged.len() > RANGES_MAX {
        let shortest = merged
            .iter()
            .enumerate()
            .min_by_key(|(_, (lo, hi))| hi - lo)
            .map(|(i, _)| i);
        if let Some(i) = shortest {
            merged.remove(i);
        }
    }
    *ranges = merged;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_start_only_at_known_message_starts_and_merge_when_they_touch() {
        let checked = CheckedRanges::default();
        checked.extend(500, 900);
        assert!(
            !checked.covers(500, 900),
            "a read at an unknown position starts nothing"
        );
        checked.record(1000, 2000);
        checked.extend(1500, 2600);
        assert!(checked.covers(1000, 2600));
        checked.extend(0, 400);
        assert!(checked.covers(0, 400) && !checked.covers(0, 1000));
        checked.extend(400, 1000);
        assert!(checked.covers(0, 2600), "touching ranges merge");
        checked.truncate(2000);
        assert!(checked.covers(0, 2000) && !checked.covers(0, 2001));
    }

    #[test]
    fn at_most_a_few_ranges_are_kept_the_shortest_forgotten_first() {
        let checked = CheckedRanges::default();
        for i in 0..20u64 {
            checked.record(i * 100, i * 100 + 10 + i);
        }
        assert_eq!(checked.ranges().len(), RANGES_MAX);
        assert!(checked.covers(1900, 1929), "the longest stays");
        assert!(!checked.covers(0, 10), "the shortest went");
    }
}
