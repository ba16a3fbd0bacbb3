//! The async producer's lanes: up to [`LANES`] batches in flight at once, and which lane each
//! message waits in, so that one key's messages are never in two requests at once.
//!
//! With one request in flight a producer waits for every answer before it sends again; with
//! durable acknowledgements that answer waits for the broker's fsync, and the producer builds
//! nothing meanwhile. Lanes overlap the two. A message's key is a mirror's source partition
//! (every other message shares one key): a key stays in the lane that holds it (messages of it
//! waiting there, or in the lane's batch in flight), so its messages go out one batch after
//! another in the order they were queued, retries included, exactly as with one lane; a key
//! no lane holds goes to the lane with the fewest messages. Two batches of one source
//! partition in flight could otherwise have the later one appended past a gap while the
//! earlier is retried, and the earlier then taken as held.

use std::collections::BTreeSet;

/// How many batches an async producer has in flight at most.
pub const LANES: usize = 2;

/// The lanes' keys and message counts; see the module docs.
#[derive(Debug)]
pub struct Lanes<K> {
    lanes: Vec<Lane<K>>,
    /// Counts every [`Lanes::send`] and [`Lanes::answered`]: a caller that remembers the lane
    /// of the last key it routed may add to it with [`Lanes::one_more`] while this is unchanged.
    changes: u64,
}

#[derive(Debug)]
struct Lane<K> {
    /// Keys with messages waiting in this lane.
    waiting: BTreeSet<K>,
    waiting_messages: usize,
    /// Keys of the lane's batch in flight.
    in_flight: BTreeSet<K>,
    in_flight_messages: usize,
    sending: bool,
}

impl<K> Lane<K> {
    fn new() -> Self {
        Lane {
            waiting: BTreeSet::new(),
            waiting_messages: 0,
            in_flight: BTreeSet::new(),
            in_flight_messages: 0,
            sending: false,
        }
    }
}

impl<K: Ord + Clone + std::fmt::Debug> Lanes<K> {
    /// `count` lanes (at least one).
    pub fn new(count: usize) -> Self {
        Lanes {
            lanes: (0..count.max(1)).map(|_| Lane::new()).collect(),
            changes: 0,
        }
    }

    /// How many lanes there are.
    pub fn count(&self) -> usize {
        self.lanes.len()
    }

    /// The lane a message of `key` must wait in: the lane that holds `key`, else the one with
    /// the fewest messages (waiting and in flight; the first of equals). Changes nothing.
    pub fn lane_for(&self, key: &K) -> usize {
        let holding = self
            .lanes
            .iter()
            .position(|l| l.waiting.contains(key) || l.in_flight.contains(key));
        holding.unwrap_or_else(|| {
            let load = |l: &Lane<K>| l.waiting_messages + l.in_flight_messages;
            (0..self.lanes.len())
                .min_by_key(|i| self.lanes.get(*i).map_or(usize::MAX, load))
                .unwrap_or(0)
        })
    }

    /// A message of `key` now waits in `lane`, which must be [`Lanes::lane_for`]'s answer.
    pub fn add(&mut self, lane: usize, key: &K) {
        debug_assert_eq!(
            self.lane_for(key),
            lane,
            "{key:?} put in a lane not its own"
        );
        if let Some(l) = self.lanes.get_mut(lane) {
            if !l.waiting.contains(key) {
                l.waiting.insert(key.clone());
            }
            l.waiting_messages += 1;
        }
    }

    /// Another message of a key that [`Lanes::add`] last put in `lane`, with no lookup: only
    /// while [`Lanes::changes`] is what it was then.
    pub fn one_more(&mut self, lane: usize) {
        if let Some(l) = self.lanes.get_mut(lane) {
            l.waiting_messages += 1;
        }
    }

    /// Changes that end what [`Lanes::one_more`] may assume (a batch sent or answered).
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Messages waiting in `lane`.
    pub fn waiting(&self, lane: usize) -> usize {
        self.lanes.get(lane).map_or(0, |l| l.waiting_messages)
    }

    /// Whether `lane` has a batch in flight.
    pub fn is_sending(&self, lane: usize) -> bool {
        self.lanes.get(lane).is_some_and(|l| l.sending)
    }

    /// Whether any lane has a batch in flight.
    pub fn any_sending(&self) -> bool {
        self.lanes.iter().any(|l| l.sending)
    }

    /// Everything waiting in `lane` goes out as its batch: its keys are in flight until
    /// [`Lanes::answered`]. The lane must have no batch in flight.
    pub fn send(&mut self, lane: usize) {
        self.changes += 1;
        let Some(l) = self.lanes.get_mut(lane) else {
            return;
        };
        assert!(
            !l.sending,
            "lane {lane} sent a batch while one was in flight"
        );
        l.in_flight = std::mem::take(&mut l.waiting);
        l.in_flight_messages = std::mem::take(&mut l.waiting_messages);
        l.sending = true;
    }

    /// `lane`'s batch in flight is decided (every message delivered or failed): its keys are
    /// free unless messages of them wait in the lane.
    pub fn answered(&mut self, lane: usize) {
        self.changes += 1;
        if let Some(l) = self.lanes.get_mut(lane) {
            l.in_flight.clear();
            l.in_flight_messages = 0;
            l.sending = false;
        }
    }

    /// The invariant: no key is held by two lanes.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for (i, l) in self.lanes.iter().enumerate() {
            for key in l.waiting.union(&l.in_flight) {
                if !seen.insert(key) {
                    return Err(format!("{key:?} is held by lane {i} and another"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn put(lanes: &mut Lanes<u32>, key: u32) -> usize {
        let lane = lanes.lane_for(&key);
        lanes.add(lane, &key);
        lane
    }

    #[test]
    fn a_key_stays_in_its_lane_while_the_lane_holds_it() {
        let mut lanes = Lanes::new(2);
        assert_eq!(put(&mut lanes, 7), 0);
        assert_eq!(put(&mut lanes, 8), 1, "a new key goes to the emptier lane");
        assert_eq!(put(&mut lanes, 7), 0);
        lanes.send(0);
        assert_eq!(
            put(&mut lanes, 7),
            0,
            "in flight: later messages wait behind it"
        );
        assert_eq!(put(&mut lanes, 9), 1, "lane 0 holds more messages");
        lanes.answered(0);
        assert_eq!(put(&mut lanes, 7), 0, "still waiting in lane 0");
        lanes.send(0);
        lanes.answered(0);
        lanes.send(1);
        assert_eq!(put(&mut lanes, 7), 0, "free again: the emptier lane");
        assert_eq!(put(&mut lanes, 8), 1, "lane 1 has it in flight");
        lanes.check().unwrap();
    }

    /// Random routes, sends and answers never put a key in two lanes, and a key's messages go
    /// out in the order they were queued.
    #[test]
    fn no_key_is_ever_held_by_two_lanes_and_its_batches_keep_its_order() {
        for seed in 0..200u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut lanes = Lanes::new(2);
            let mut waiting: Vec<Vec<(u32, u32)>> = vec![Vec::new(), Vec::new()];
            let mut flying: Vec<Vec<(u32, u32)>> = vec![Vec::new(), Vec::new()];
            let mut next = [0u32; 6];
            let mut delivered = [0u32; 6];
            for _ in 0..400 {
                match rng.random_range(0..4) {
                    0 | 1 => {
                        let key = rng.random_range(0..6u32);
                        let lane = put(&mut lanes, key);
                        waiting[lane].push((key, next[key as usize]));
                        next[key as usize] += 1;
                    }
                    2 => {
                        let lane = rng.random_range(0..2);
                        if !lanes.is_sending(lane) && !waiting[lane].is_empty() {
                            lanes.send(lane);
                            flying[lane] = std::mem::take(&mut waiting[lane]);
                        }
                    }
                    _ => {
                        let lane = rng.random_range(0..2);
                        if lanes.is_sending(lane) {
                            for (key, n) in std::mem::take(&mut flying[lane]) {
                                assert_eq!(delivered[key as usize], n, "seed {seed}: key {key}");
                                delivered[key as usize] += 1;
                            }
                            lanes.answered(lane);
                        }
                    }
                }
                lanes.check().unwrap();
            }
        }
    }

    #[test]
    #[should_panic(expected = "while one was in flight")]
    fn a_lane_has_one_batch_in_flight_at_most() {
        let mut lanes = Lanes::new(2);
        put(&mut lanes, 1);
        lanes.send(0);
        lanes.send(0);
    }
}
