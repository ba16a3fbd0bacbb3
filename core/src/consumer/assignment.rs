//! 0.7's range assignment.
//!
//! For each topic: its partitions are the strings `"<broker id>-<partition>"` over every broker
//! registered for it, **sorted as strings** (so `"10-0"` sorts before `"2-0"`); its consumers are
//! the thread ids of every member subscribed to it, sorted as strings. With P partitions and C
//! threads, thread i owns `P/C` partitions (one more for the first `P%C` threads), in order:
//! P=5, C=2 gives thread 0 partitions [0, 3) and thread 1 [3, 5). Every member computes the same
//! assignment from the same ZooKeeper view, which is what lets 0.7 members and Tributary
//! members share a group.

use std::collections::BTreeMap;
use std::fmt;

/// A partition as the consumer group names it: `<broker id>-<partition>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BrokerPartition {
    /// The broker.
    pub broker_id: i32,
    /// The partition on that broker.
    pub partition: u32,
}

impl BrokerPartition {
    /// Parses `"<broker id>-<partition>"`.
    pub fn parse(name: &str) -> Option<Self> {
        let (broker, partition) = name.split_once('-')?;
        Some(BrokerPartition {
            broker_id: broker.parse().ok().filter(|b: &i32| *b >= 0)?,
            partition: partition.parse().ok()?,
        })
    }
}

impl fmt::Display for BrokerPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.broker_id, self.partition)
    }
}

/// Sorted as 0.7 sorts them: by their string form (`"10-0"` before `"2-0"`). Partitions are
/// compared on every lookup of a map keyed by them (per message, in the mirror), so the order
/// is computed from the numbers: with no minus sign, the string order is the broker ids'
/// digit strings in dictionary order, then the partitions'. A negative broker id (which no
/// registered broker has) falls back to comparing the strings, written on the stack.
impl Ord for BrokerPartition {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (
            u64::try_from(self.broker_id),
            u64::try_from(other.broker_id),
        ) {
            (Ok(a), Ok(b)) => digit_order(a, b)
                .then_with(|| digit_order(u64::from(self.partition), u64::from(other.partition))),
            _ => self.name().as_bytes().cmp(other.name().as_bytes()),
        }
    }
}

/// The order of `a`'s and `b`'s decimal digit strings as strings (`"10"` before `"2"`, a
/// prefix before what it starts), without writing them.
fn digit_order(a: u64, b: u64) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    // Equal numbers are the common case (one broker's partitions, one partition looked up).
    if a == b {
        return Ordering::Equal;
    }
    let digits = |n: u64| n.checked_ilog10().map_or(1, |log| log + 1);
    let (da, db) = (digits(a), digits(b));
    match da.cmp(&db) {
        Ordering::Equal => a.cmp(&b),
        // b's first `da` digits against a; equal means a is a prefix of b, so it sorts first.
        Ordering::Less => a.cmp(&(b / 10u64.pow(db - da))).then(Ordering::Less),
        Ordering::Greater => (a / 10u64.pow(da - db)).cmp(&b).then(Ordering::Greater),
    }
}

impl BrokerPartition {
    /// The string form on the stack, the digits written by hand (for negative broker ids,
    /// whose order the numbers do not give directly).
    fn name(&self) -> NameBuf {
        let mut name = NameBuf::default();
        // Always fits: at most 11 + 1 + 10 bytes ("-2147483648-4294967295").
        name.push_decimal(i64::from(self.broker_id));
        name.push(b'-');
        name.push_decimal(i64::from(self.partition));
        name
    }
}

/// A partition's string form, written without allocating.
#[derive(Default)]
struct NameBuf {
    bytes: [u8; 24],
    len: usize,
}

impl NameBuf {
    fn as_bytes(&self) -> &[u8] {
        // In range: `push` never moves `len` past the buffer.
        &self.bytes[..self.len]
    }

    fn push(&mut self, byte: u8) {
        debug_assert!(
            self.len < self.bytes.len(),
            "a partition name longer than its buffer"
        );
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = byte;
            self.len += 1;
        }
    }

    /// Writes `n` in decimal, as `Display` does.
    fn push_decimal(&mut self, n: i64) {
        if n < 0 {
            self.push(b'-');
        }
        let mut magnitude = n.unsigned_abs();
        let mut digits = [0u8; 20];
        let mut count = 0;
        loop {
            if let Some(slot) = digits.get_mut(count) {
                *slot = b'0' + (magnitude % 10) as u8;
            }
            count += 1;
            magnitude /= 10;
            if magnitude == 0 {
                break;
            }
        }
        for digit in digits.iter().take(count).rev() {
            self.push(*digit);
        }
    }
}

impl PartialOrd for BrokerPartition {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One topic's assignment: every thread id → the partitions it owns (threads that get none are
/// absent). `partitions` and `threads` may come in any order; both are sorted as strings here.
pub fn assign(
    partitions: &[BrokerPartition],
    threads: &[String],
) -> BTreeMap<String, Vec<BrokerPartition>> {
    let mut partitions = partitions.to_vec();
    partitions.sort();
    partitions.dedup();
    let mut threads = threads.to_vec();
    threads.sort();
    threads.dedup();
    let mut out = BTreeMap::new();
    if threads.is_empty() {
        return out;
    }
    let (per, extra) = (
        partitions.len() / threads.len(),
        partitions.len() % threads.len(),
    );
    for (i, thread) in threads.into_iter().enumerate() {
        let start = per * i + i.min(extra);
        let count = per + usize::from(i < extra);
        if let Some(owned) = partitions
            .get(start..start + count)
            .filter(|p| !p.is_empty())
        {
            out.insert(thread, owned.to_vec());
        }
    }
    debug_assert!(
        out.values().map(Vec::len).sum::<usize>() == partitions.len(),
        "every partition is owned exactly once"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::{digit_order, BrokerPartition};
    use rand::{Rng, SeedableRng};

    /// The numbers' order is the strings' for every pair up to 1,500 (every digit count up to
    /// four, every prefix case), and for seeded random pairs across the whole range.
    #[test]
    fn digit_order_is_the_order_of_the_digit_strings() {
        for a in 0u64..1_500 {
            let a_text = a.to_string();
            for b in 0u64..1_500 {
                assert_eq!(
                    digit_order(a, b),
                    a_text.cmp(&b.to_string()),
                    "{a} against {b}"
                );
            }
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..200_000 {
            let digits = |rng: &mut rand_chacha::ChaCha8Rng| {
                let n: u64 = rng.random_range(0..=u64::from(u32::MAX));
                n / 10u64.pow(rng.random_range(0..10))
            };
            let (a, b) = (digits(&mut rng), digits(&mut rng));
            assert_eq!(
                digit_order(a, b),
                a.to_string().cmp(&b.to_string()),
                "{a} against {b}"
            );
        }
    }

    #[test]
    fn partitions_sort_as_their_names_do() {
        let values_b = [
            i32::MIN,
            -10,
            -1,
            0,
            1,
            2,
            9,
            10,
            11,
            19,
            100,
            123,
            i32::MAX,
        ];
        let values_p = [0u32, 1, 2, 9, 10, 11, 99, 100, 4_294_967_295];
        let all: Vec<BrokerPartition> = values_b
            .iter()
            .flat_map(|b| {
                values_p.iter().map(|p| BrokerPartition {
                    broker_id: *b,
                    partition: *p,
                })
            })
            .collect();
        for a in &all {
            assert_eq!(a.name().as_bytes(), a.to_string().as_bytes());
            for b in &all {
                assert_eq!(
                    a.cmp(b),
                    a.to_string().cmp(&b.to_string()),
                    "{a} against {b}"
                );
            }
        }
    }
}
