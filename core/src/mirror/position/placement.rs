//! Where a source partition's copy goes: a stable number per source partition, so that every
//! mirror member, after any restart, sends a source partition's sets to the same mirror
//! partition (one book judges them all) while the mirror topic's layout stays.

use super::SourceKey;

/// Picks the broker among a broker list's brokers.
pub const BROKER_SALT: u64 = 0x6272_6f6b_6572;
/// Picks the partition among a broker's partitions of the topic (the broker's choice, for a
/// set sent with partition -1).
pub const PARTITION_SALT: u64 = 0x7061_7274;
/// Picks the (broker, partition) pair among a topic's registered partitions.
pub const CANDIDATE_SALT: u64 = 0x6361_6e64;

/// A number that depends only on `key` and `salt` (FNV-1a, 64 bits, over the salt, the
/// cluster id, the topic, the broker id and the partition): the same in every process and
/// release. Different salts give independent choices, so a broker chosen by one and a
/// partition chosen by another do not move together.
pub fn slot(key: &SourceKey, salt: u64) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    eat(&salt.to_be_bytes());
    eat(key.cluster.as_str().as_bytes());
    eat(&[0]);
    eat(key.topic.as_str().as_bytes());
    eat(&[0]);
    eat(&key.partition.broker_id.to_be_bytes());
    eat(&key.partition.partition.to_be_bytes());
    hash
}

/// `slot(key, salt)` reduced to `0..count` (`count` > 0).
pub fn index(key: &SourceKey, salt: u64, count: usize) -> usize {
    debug_assert!(count > 0, "no place to choose from");
    (slot(key, salt) % count.max(1) as u64) as usize
}

/// What a mirror member does with one source partition's placement record: the mirror broker
/// its copy goes to, kept in the mirror cluster's ZooKeeper so that every member sends it to the
/// same broker whatever each one's view of the cluster (the first member to place a source
/// partition writes the record; the others follow it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordStep {
    /// The record names a broker this member may send to: send there.
    Follow(i32),
    /// There is no record: create one naming this broker. Created by another member
    /// meanwhile: read it again.
    Create(i32),
    /// The record (of this version) names a broker that is gone, or is not a broker id:
    /// replace it with this broker. Changed by another member meanwhile: read it again.
    Move {
        /// The broker the record is to name.
        to: i32,
        /// The version of the record replaced.
        version: i32,
    },
    /// No broker to name: wait.
    Wait,
}

/// The step for `key`'s record, read as `recorded` (the broker it names, or `None` when it
/// does not hold a broker id, and its version; `None` when there is no record). `usable` says
/// whether this member may send to a broker (registered with the topic, or known and not failing
/// for longer than its grace). A new or moved record names the broker whose copy of `key`
/// reaches furthest (`furthest`) when it is usable, else one of `brokers` (the topic's
/// brokers, sorted) chosen from `key`. A new record waits for a `complete` survey of the
/// copies (a broker that did not answer may hold the furthest one); a record moved off a gone
/// broker does not (the gone broker is the one that does not answer).
pub fn record_step(
    key: &SourceKey,
    recorded: Option<(Option<i32>, i32)>,
    furthest: Option<i32>,
    complete: bool,
    brokers: &[i32],
    usable: impl Fn(i32) -> bool,
) -> RecordStep {
    if let Some((Some(broker), _)) = recorded {
        if usable(broker) {
            return RecordStep::Follow(broker);
        }
    }
    let chosen = match furthest.filter(|b| usable(*b)) {
        Some(broker) => Some(broker),
        None => {
            let usable: Vec<i32> = brokers.iter().copied().filter(|b| usable(*b)).collect();
            match usable.is_empty() {
                true => None,
                false => usable.get(index(key, BROKER_SALT, usable.len())).copied(),
            }
        }
    };
    match (chosen, recorded) {
        (None, _) => RecordStep::Wait,
        (Some(_), None) if !complete => RecordStep::Wait,
        (Some(to), None) => RecordStep::Create(to),
        (Some(to), Some((_, version))) => RecordStep::Move { to, version },
    }
}

/// A placement record's data: the broker id in decimal.
pub fn record_data(broker_id: i32) -> Vec<u8> {
    broker_id.to_string().into_bytes()
}

/// The broker a placement record names; `None` when its data is not a broker id (written by
/// something else: the record is then replaced).
pub fn parse_record(data: &[u8]) -> Option<i32> {
    std::str::from_utf8(data)
        .ok()?
        .trim()
        .parse::<i32>()
        .ok()
        .filter(|id| *id >= 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;
    use crate::consumer::BrokerPartition;
    use crate::identity::ClusterId;

    fn key(partition: u32) -> SourceKey {
        SourceKey {
            cluster: ClusterId::parse("east").expect("id"),
            topic: "orders".parse().expect("topic"),
            partition: BrokerPartition {
                broker_id: 1,
                partition,
            },
        }
    }

    #[test]
    fn the_slot_is_fixed_across_releases() {
        // A changed hash would send every source partition elsewhere after an upgrade
        // (its sets judged by a book that never saw them): pinned here.
        assert_eq!(slot(&key(0), PARTITION_SALT), 0x30e9_c072_7103_c269);
    }

    #[test]
    fn source_partitions_spread_over_the_mirror_partitions() {
        let mut used = [0u32; 8];
        for p in 0..64 {
            used[index(&key(p), PARTITION_SALT, 8)] += 1;
        }
        assert!(used.iter().all(|n| *n >= 3), "{used:?}");
    }

    fn step(
        recorded: Option<(Option<i32>, i32)>,
        furthest: Option<i32>,
        usable: &[i32],
    ) -> RecordStep {
        record_step(&key(3), recorded, furthest, true, &[0, 1, 2], |b| {
            usable.contains(&b)
        })
    }

    #[test]
    fn a_new_record_waits_for_a_complete_survey_a_moved_one_does_not() {
        let incomplete =
            |recorded| record_step(&key(3), recorded, Some(1), false, &[0, 1], |_| true);
        assert_eq!(incomplete(None), RecordStep::Wait);
        assert_eq!(
            incomplete(Some((None, 2))),
            RecordStep::Move { to: 1, version: 2 }
        );
    }

    #[test]
    fn a_record_naming_a_usable_broker_is_followed_whatever_the_copies_say() {
        assert_eq!(
            step(Some((Some(2), 5)), Some(1), &[0, 1, 2]),
            RecordStep::Follow(2)
        );
        // Even a broker outside the topic's brokers, while this member may send to it.
        assert_eq!(step(Some((Some(7), 5)), None, &[7]), RecordStep::Follow(7));
    }

    #[test]
    fn a_new_record_names_the_furthest_copy_else_the_hashed_broker() {
        assert_eq!(step(None, Some(1), &[0, 1, 2]), RecordStep::Create(1));
        let hashed = [0, 1, 2][index(&key(3), BROKER_SALT, 3)];
        assert_eq!(step(None, None, &[0, 1, 2]), RecordStep::Create(hashed));
        // The furthest copy on a broker this member cannot use: hashed among the usable.
        let usable: Vec<i32> = [0, 1, 2].into_iter().filter(|b| *b != hashed).collect();
        let rehashed = usable[index(&key(3), BROKER_SALT, 2)];
        assert_eq!(
            step(None, Some(hashed), &usable),
            RecordStep::Create(rehashed)
        );
    }

    #[test]
    fn a_record_naming_a_gone_broker_or_no_broker_is_moved_at_its_version() {
        assert_eq!(
            step(Some((Some(2), 9)), Some(0), &[0, 1]),
            RecordStep::Move { to: 0, version: 9 }
        );
        assert!(matches!(
            step(Some((None, 4)), None, &[0, 1, 2]),
            RecordStep::Move { version: 4, .. }
        ));
        assert_eq!(step(Some((Some(2), 9)), None, &[]), RecordStep::Wait);
        assert_eq!(step(None, None, &[]), RecordStep::Wait);
    }

    #[test]
    fn a_record_holds_a_broker_id_and_nothing_else() {
        assert_eq!(parse_record(&record_data(12)), Some(12));
        assert_eq!(parse_record(b" 3\n"), Some(3));
        for bad in [&b""[..], b"-1", b"x", b"\xff", b"99999999999"] {
            assert_eq!(parse_record(bad), None, "{bad:?}");
        }
    }
}
