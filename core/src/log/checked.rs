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
        if to > from {
            add(&mut self.ranges(), from, to);
        }
    }

    /// Records `[from, to)` as checked by a read at `from`, which is trusted as a message start
    /// only at the file's first byte or inside a range already checked.
    pub fn extend(&self, from: u64, to: u64) {
        let mut ranges = self.ranges();
        if to > from && (from == 0 || ranges.iter().any(|(lo, hi)| *lo <= from && from <= *hi)) {
            add(&mut ranges, from, to);
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

/// Adds `[from, to)` to sorted, disjoint, non-touching `ranges`, in place: an append that
/// continues the last range (every append does) only moves that range's end. Keeps at most
/// [`RANGES_MAX`], forgetting the shortest.
fn add(ranges: &mut Vec<(u64, u64)>, from: u64, to: u64) {
    // The first range that ends at or after `from`: the one to grow, or where to insert.
    let at = ranges.partition_point(|(_, hi)| *hi < from);
    match ranges.get_mut(at) {
        Some(range) if range.0 <= to => {
            range.0 = range.0.min(from);
            range.1 = range.1.max(to);
        }
        _ => ranges.insert(at, (from, to)),
    }
    // The grown range may now reach the ranges after it.
    while let (Some(&(_, hi)), Some(&(next_lo, next_hi))) = (ranges.get(at), ranges.get(at + 1)) {
        if next_lo > hi {
            break;
        }
        if let Some(range) = ranges.get_mut(at) {
            range.1 = hi.max(next_hi);
        }
        ranges.remove(at + 1);
    }
    if ranges.len() > RANGES_MAX {
        let shortest = ranges
            .iter()
            .enumerate()
            .min_by_key(|(_, (lo, hi))| hi - lo)
            .map(|(i, _)| i);
        if let Some(i) = shortest {
            ranges.remove(i);
        }
    }
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
    fn a_range_that_bridges_several_merges_them_all() {
        let checked = CheckedRanges::default();
        for lo in [100, 300, 500, 700] {
            checked.record(lo, lo + 50);
        }
        checked.record(120, 720);
        assert_eq!(*checked.ranges(), vec![(100, 750)]);
        checked.record(10, 20);
        checked.record(20, 30);
        assert_eq!(*checked.ranges(), vec![(10, 30), (100, 750)]);
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
