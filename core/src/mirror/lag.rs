//! How far behind its source a copied partition is, in bytes and in time, from samples of the
//! source's end offset and the copy's position (sans I/O: the caller brings the clock).
//!
//! Lag in bytes is the source's end minus the position (never negative). Lag in time is how
//! long ago the partition was last seen caught up (position at or past the source's end): 0
//! while it is, growing while it is not. A partition first seen behind counts from that first
//! sample (when it was caught up before is not known), so the time lag is never overstated.

use std::collections::BTreeMap;

/// One sample of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LagSample {
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
    /// Milliseconds since it was last caught up.
    pub ms: i64,
}

/// When each partition was last caught up.
#[derive(Debug, Default)]
pub struct LagClock {
    caught_up_at: BTreeMap<(String, String), i64>,
}

impl LagClock {
    /// No partition seen yet.
    pub fn new() -> Self {
        LagClock::default()
    }

    /// Takes one round of samples at `now_ms` and returns each partition's lag, in the order
    /// given. Partitions not in this round are forgotten (no longer copied here): the clock
    /// holds at most one entry per partition of the last round.
    pub fn observe(&mut self, now_ms: i64, samples: &[LagSample]) -> Vec<Lag> {
        let mut kept = BTreeMap::new();
        let lags = samples
            .iter()
            .map(|s| {
                let key = (s.topic.clone(), s.partition.clone());
                let behind = s.source_end.saturating_sub(s.position).max(0);
                let since = match self.caught_up_at.get(&key) {
                    Some(&at) if behind > 0 => at.min(now_ms),
                    _ => now_ms,
                };
                kept.insert(key, since);
                Lag {
                    bytes: behind,
                    ms: now_ms.saturating_sub(since),
                }
            })
            .collect();
        self.caught_up_at = kept;
        lags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(partition: &str, source_end: i64, position: i64) -> LagSample {
        LagSample {
            topic: "t".into(),
            partition: partition.into(),
            source_end,
            position,
        }
    }

    #[test]
    fn time_lag_grows_from_the_last_caught_up_sample_and_resets_when_caught_up() {
        let mut clock = LagClock::new();
        let lag = |c: &mut LagClock, now, end, pos| c.observe(now, &[sample("0-0", end, pos)])[0];
        assert_eq!(lag(&mut clock, 1_000, 100, 100), Lag { bytes: 0, ms: 0 });
        assert_eq!(
            lag(&mut clock, 2_000, 300, 150),
            Lag {
                bytes: 150,
                ms: 1_000
            }
        );
        assert_eq!(
            lag(&mut clock, 5_000, 400, 390),
            Lag {
                bytes: 10,
                ms: 4_000
            }
        );
        assert_eq!(lag(&mut clock, 6_000, 400, 400), Lag { bytes: 0, ms: 0 });
        assert_eq!(
            lag(&mut clock, 7_500, 500, 400),
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
    fn partitions_left_out_of_a_round_are_forgotten() {
        let mut clock = LagClock::new();
        clock.observe(0, &[sample("0-0", 10, 0)]);
        clock.observe(1_000, &[sample("0-1", 10, 10)]);
        // Back after a round away: counts from its return, not from the first sample.
        assert_eq!(
            clock.observe(3_000, &[sample("0-0", 10, 0)]),
            [Lag { bytes: 10, ms: 0 }]
        );
        assert_eq!(clock.caught_up_at.len(), 1);
    }
}
