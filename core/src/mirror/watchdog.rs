//! The mirror's ownership watchdog, without I/O: which source partitions have had no live owner
//! in the mirror's group for too long, and when to say so.
//!
//! Each round the caller passes every partition its filter covers with whether a live member
//! owns it (read from the source's ZooKeeper) and the time. A partition unowned in every round
//! since `t` is alarmed once `now - t` reaches the alarm time; partitions owned again, or no
//! longer covered, are forgotten. The caller logs (and asks the members to rejoin) when
//! [`Verdict::speak`] says so: at the first alarm, then at most once per [`SPEAK_EVERY_MS`]
//! while any partition stays alarmed.

use std::collections::BTreeMap;

/// How often, at most, the watchdog speaks while partitions stay unowned.
pub const SPEAK_EVERY_MS: i64 = 60_000;
/// The most partitions tracked (more are counted, not remembered).
pub const TRACKED_MAX: usize = 1_000_000;

/// A partition: (topic, `<broker>-<partition>`).
pub type PartitionKey = (String, String);

/// What one round found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Partitions without a live owner for at least the alarm time, in key order, each with
    /// how long (ms).
    pub alarmed: Vec<(PartitionKey, i64)>,
    /// Whether to log them now (and have the members rejoin the group).
    pub speak: bool,
}

/// The watchdog's memory between rounds.
#[derive(Debug, Clone)]
pub struct OwnershipWatch {
    alarm_after_ms: i64,
    unowned_since: BTreeMap<PartitionKey, i64>,
    spoke_at: Option<i64>,
}

impl OwnershipWatch {
    /// A watchdog alarming after `alarm_after_ms` without a live owner.
    pub fn new(alarm_after_ms: i64) -> Self {
        assert!(alarm_after_ms >= 0, "an alarm time is not negative");
        OwnershipWatch {
            alarm_after_ms,
            unowned_since: BTreeMap::new(),
            spoke_at: None,
        }
    }

    /// One round at `now_ms`: every covered partition with whether a live member owns it.
    pub fn observe(
        &mut self,
        now_ms: i64,
        partitions: impl IntoIterator<Item = (PartitionKey, bool)>,
    ) -> Verdict {
        let mut since = BTreeMap::new();
        for (key, owned) in partitions {
            if owned || since.len() >= TRACKED_MAX {
                continue;
            }
            let first = self.unowned_since.get(&key).copied().unwrap_or(now_ms);
            since.insert(key, first.min(now_ms));
        }
        self.unowned_since = since;
        let alarmed: Vec<(PartitionKey, i64)> = self
            .unowned_since
            .iter()
            .map(|(key, first)| (key.clone(), now_ms - first))
            .filter(|(_, unowned_for)| *unowned_for >= self.alarm_after_ms)
            .collect();
        let speak = !alarmed.is_empty()
            && self
                .spoke_at
                .is_none_or(|at| now_ms - at >= SPEAK_EVERY_MS || now_ms < at);
        if speak {
            self.spoke_at = Some(now_ms);
        }
        if alarmed.is_empty() {
            // Everything is owned again: the next alarm speaks at once.
            self.spoke_at = None;
        }
        debug_assert!(self.unowned_since.len() <= TRACKED_MAX);
        Verdict { alarmed, speak }
    }
}
