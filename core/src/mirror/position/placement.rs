//! Where a source partition's copy goes: a stable number per source partition, so that every
//! mirror member, after any restart, sends a source partition's sets to the same mirror
//! partition (one book judges them all) while the mirror topic's layout stays.

use super::SourceKey;

/// Picks the broker among a broker list's brokers.
pub const BROKER_SALT: u64 = 0x6272_6f6b_6572;
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

/// A place among `count` (> 0) that spreads one source broker's partitions evenly: the source
/// partition's number plus its broker's id, modulo `count`. A mirror broker gives a set that
/// asks it to choose (partition -1) the partition with this index, and the mirror's streams
/// hand a source partition to the producer with it: consecutive source partitions take
/// consecutive places, so `count` of them never share one (a hash would put two source
/// partitions of two places in one half the time, and that place would carry the whole copy).
pub fn spread(key: &SourceKey, count: usize) -> usize {
    debug_assert!(count > 0, "no place to choose from");
    let count = count.max(1) as i64;
    let sum = i64::from(key.partition.partition) + i64::from(key.partition.broker_id);
    sum.rem_euclid(count) as usize
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
        assert_eq!(slot(&key(0), BROKER_SALT), 0x8939_8b33_5062_e591);
    }

    #[test]
    fn source_partitions_spread_over_the_brokers() {
        let mut used = [0u32; 8];
        for p in 0..64 {
            used[index(&key(p), BROKER_SALT, 8)] += 1;
        }
        assert!(used.iter().all(|n| *n >= 3), "{used:?}");
    }

    #[test]
    fn consecutive_source_partitions_take_every_place_once() {
        for count in 1..=8 {
            let mut used = vec![0u32; count];
            for p in 0..count as u32 {
                used[spread(&key(p), count)] += 1;
            }
            assert!(used.iter().all(|n| *n == 1), "{count}: {used:?}");
        }
        // Two source brokers' partition 0 into two places: one each.
        let mut other = key(0);
        other.partition.broker_id = 2;
        assert_ne!(spread(&key(0), 2), spread(&other, 2));
        other.partition.broker_id = -3;
        assert!(spread(&other, 2) < 2);
    }
}
