//! How far behind its source a copied partition is, in bytes and in time, from samples of the
//! source's end offset and the copy's position (sans I/O: the caller brings the clock).
//!
//! Lag in bytes is the source's end minus the position (never negative). Lag in time is the age
//! of the oldest byte the copy does not have yet: how long ago the source's end first passed the
//! copy's position, as the samples saw it (the first sample whose end was past the position).
//! So a mirror that trails a steadily written partition by a moment shows a lag of about one
//! sampling interval, not the time since it last happened to be exactly at the end; a mirror
//! that stopped shows a lag growing with the clock. The time is never overstated: the byte was
//! written at or before that sample, and a partition first seen behind counts from its first
//! sample.

use std::collections::{BTreeMap, VecDeque};

/// Samples kept per partition: past this, the second oldest is dropped (the oldest keeps the
/// age right; what is lost is precision in between).
const HISTORY_MAX: usize = 128;

/// One sample of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LagSample {
    /// The source cluster (its name, else its id; empty where there is one source, as in
    /// replica mode): two sources of one mirror may both have a topic-partition.
    pub source: String,
    /// The partition's topic.
    pub topic: String,
    /// The partition, as `<broker>-<partition>`.
    pub partition: String,
    /// The source's end offset.
    pub source_end: i64,
    /// What the copy durably has (the next offset it will copy).
    pub position: i64,
}

/// A partition's lag, as [`LagClock::observe`] computes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lag {
    /// Bytes the copy is behind.
    pub bytes: i64,
    /// Milliseconds since the source's end first passed the copy's position.
    pub ms: i64,
}

/// Per partition, the samples of the source's end the copy has not reached yet: `(time, end)`,
/// ends increasing. The front is the first sample past the copy's position.
#[derive(Debug, Default)]
pub struct LagClock {
    ahead: BTreeMap<(String, String, String), VecDeque<(i64, i64)>>,
}

impl LagClock {
    /// No partition seen yet.
    pub fn new() -> Self {
        LagClock::default()
    }

    /// Takes one round of samples at `now_ms` and returns each partition's lag, in the order
    /// given. Partitions not in this round are forgotten (no longer copied here): the clock
    /// holds at most [`HISTORY_MAX`] samples per partition of the last round.
    pub fn observe(&mut self, now_ms: i64, samples: &[LagSample]) -> Vec<Lag> {
        let mut kept = BTreeMap::new();
        let lags = samples
            .iter()
            .map(|s| {
                let key = (s.source.clone(), s.topic.clone(), s.partition.clone());
                let mut ahead = self.ahead.remove(&key).unwrap_or_default();
                if ahead.back().is_none_or(|&(_, end)| s.source_end > end) {
                    ahead.push_back((now_ms, s.source_end));
                }
                // What the copy has reached no longer counts.
                while ahead.front().is_some_and(|&(_, end)| end <= s.position) {
                    ahead.pop_front();
                }
                if ahead.len() > HISTORY_MAX {
                    ahead.remove(1);
                }
                let bytes = s.source_end.saturating_sub(s.position).max(0);
                let since = match ahead.front() {
                    Some(&(at, _)) if bytes > 0 => at.min(now_ms),
                    _ => now_ms,
                };
                if bytes == 0 {
                    ahead.clear();
                }
                kept.insert(key, ahead);
                Lag {
                    bytes,
                    ms: now_ms.saturating_sub(since),
                }
            })
            .collect();
        self.ahead = kept;
        lags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(partition: &str, source_end: i64, position: i64) -> LagSample {
        LagSample {
            source: String::new(),
            topic: "t".into(),
            partition: partition.into(),
            source_end,
            position,
        }
    }

    fn lag(clock: &mut LagClock, now: i64, end: i64, position: i64) -> Lag {
        clock.observe(now, &[sample("0-0", end, position)])[0]
    }

    #[test]
    fn a_mirror_trailing_a_steady_stream_lags_by_about_one_interval() {
        let mut clock = LagClock::new();
        // The source grows 1,000 bytes a second; the copy is always 100 bytes behind.
        for second in 1..=600 {
            let end = second * 1_000;
            let got = lag(&mut clock, second * 1_000, end, end - 100);
            assert_eq!(got.bytes, 100);
            assert!(got.ms <= 1_000, "second {second}: {got:?}");
        }
        assert!(clock.ahead.values().all(|a| a.len() <= 2));
    }

    #[test]
    fn a_stopped_mirror_lags_by_the_age_of_its_oldest_missing_byte() {
        let mut clock = LagClock::new();
        assert_eq!(lag(&mut clock, 1_000, 100, 100), Lag { bytes: 0, ms: 0 });
        // The source moves on at 2 s; the copy stays at 100.
        assert_eq!(lag(&mut clock, 2_000, 300, 100), Lag { bytes: 200, ms: 0 });
        assert_eq!(
            lag(&mut clock, 5_000, 400, 100),
            Lag {
                bytes: 300,
                ms: 3_000
            }
        );
        // It copies past what the 2-s sample saw, not yet what the 5-s one saw.
        assert_eq!(
            lag(&mut clock, 6_000, 400, 350),
            Lag {
                bytes: 50,
                ms: 1_000
            }
        );
        assert_eq!(lag(&mut clock, 7_000, 400, 400), Lag { bytes: 0, ms: 0 });
        assert_eq!(lag(&mut clock, 7_500, 500, 400), Lag { bytes: 100, ms: 0 });
        assert_eq!(
            lag(&mut clock, 9_000, 500, 400),
            Lag {
                bytes: 100,
                ms: 1_500
            }
        );
    }

    #[test]
    fn a_partition_first_seen_behind_counts_from_that_sample_and_a_position_past_the_end_is_no_lag()
    {
        let mut clock = LagClock::new();
        let first = clock.observe(10_000, &[sample("0-0", 100, 0), sample("0-1", 50, 80)]);
        assert_eq!(first, [Lag { bytes: 100, ms: 0 }, Lag { bytes: 0, ms: 0 }]);
        let later = clock.observe(12_000, &[sample("0-0", 100, 0)]);
        assert_eq!(
            later,
            [Lag {
                bytes: 100,
                ms: 2_000
            }]
        );
    }

    #[test]
    fn partitions_left_out_of_a_round_are_forgotten_and_history_is_bounded() {
        let mut clock = LagClock::new();
        clock.observe(0, &[sample("0-0", 10, 0)]);
        clock.observe(1_000, &[sample("0-1", 10, 10)]);
        // Back after a round away: counts from its return, not from the first sample.
        assert_eq!(
            clock.observe(3_000, &[sample("0-0", 10, 0)]),
            [Lag { bytes: 10, ms: 0 }]
        );
        assert_eq!(clock.ahead.len(), 1);
        // A copy stuck at 0 while the source grows for a long time: bounded history, and the
        // age still counts from the oldest sample.
        let mut clock = LagClock::new();
        for second in 0..1_000 {
            lag(&mut clock, second * 1_000, 10 + second, 0);
        }
        assert!(clock.ahead.values().all(|a| a.len() <= HISTORY_MAX));
        assert_eq!(lag(&mut clock, 1_000_000, 2_000, 0).ms, 1_000_000);
    }
}
