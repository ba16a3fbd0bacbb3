//! Partition choice, as 0.7's producer makes it.
//!
//! The candidates of a topic are (broker id, partition) pairs sorted by broker id, then
//! partition: every partition each live broker registered for the topic, or, for a topic no
//! broker has registered yet, partition 0 of every live broker (the first write creates it).
//! With a static `broker.list`, each broker is one candidate with partition -1 ("broker picks").
//!
//! - no key: a uniformly random candidate (drawn from the caller's RNG);
//! - a key: `abs(hash(key)) % candidates`, with Java's `String.hashCode` of the key read as
//!   UTF-8, so a key lands where a 0.7 Scala producer with a `String` key would put it.
//!   (Java's `Math.abs(Integer.MIN_VALUE)` is negative and 0.7 then fails; here it is taken as
//!   2^31, a valid index.)

use rand::Rng;

/// A place a message can go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Candidate {
    /// The broker.
    pub broker_id: i32,
    /// The partition on it, or -1 for "the broker picks".
    pub partition: i32,
}

/// Java's `String.hashCode` of `key` read as UTF-8 (invalid UTF-8 is read lossily): `s[0]*31^(n-1)
/// + ... + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash(key: &[u8]) -> i32 {
    String::from_utf8_lossy(key)
        .encode_utf16()
        .fold(0i32, |h, unit| {
            h.wrapping_mul(31).wrapping_add(i32::from(unit))
        })
}

/// Chooses among `candidates` (sorted; see the module docs): by key when there is one, else at
/// random. `None` when there is no candidate.
pub fn choose(
    candidates: &[Candidate],
    key: Option<&[u8]>,
    rng: &mut impl Rng,
) -> Option<Candidate> {
    if candidates.is_empty() {
        return None;
    }
    let index = match key {
        Some(key) => (java_string_hash(key).unsigned_abs() as usize) % candidates.len(),
        None => rng.random_range(0..candidates.len()),
    };
    candidates.get(index).copied()
}
