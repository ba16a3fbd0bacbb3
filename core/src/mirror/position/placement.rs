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
}
