//! What the hosts record into while a run goes: the shared [`State`] (every send and
//! acknowledgement, every forward, acknowledgement, commit and gap of the mirror, the source's
//! offsets as polled, the final read) and the mirror's [`Observer`], which records the mirror's
//! events as they happen and checks invariants 4 and 7 on the spot.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::consumer::GapReport;
use tributary::mirror::{MirrorEvent, MirrorObserver};

use super::reads::FinalRead;
use super::translation::Translation;
use super::Part;
use crate::invariants::Invariant;
use crate::world::Control;

/// One forward seen by the observer.
#[derive(Debug, Clone)]
pub(super) struct Forward {
    /// The mirror incarnation (host and start count) and epoch.
    pub(super) owner: (String, u64),
    pub(super) end: i64,
    pub(super) payload: Vec<u8>,
}

/// A source message as acknowledged to its producer.
#[derive(Debug, Clone)]
pub(super) struct Acked {
    pub(super) part: Part,
    pub(super) start: i64,
}

/// The seed's stalls of a mirror stream between its record of a message and the hand-over to
/// the producer: what a thread preempted there, or a full queue, does to a real mirror, and
/// what the simulator's single-threaded tasks never do by themselves.
#[derive(Debug)]
pub(super) struct HandOverStalls {
    rng: ChaCha8Rng,
    /// About one forward in this many stalls ...
    one_in: u32,
    /// ... for up to this long.
    longest_ms: u64,
    /// Stalls so far.
    pub(super) count: u32,
}

impl HandOverStalls {
    /// Stalls on half the seeds with faults, drawn from a generator of their own (the seed's
    /// other draws are those of the runs before them).
    pub(super) fn draw(seed: u64) -> Option<Self> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6861_6e64_6f76_6572);
        rng.random_bool(0.5).then(|| HandOverStalls {
            one_in: rng.random_range(100..=2000),
            longest_ms: rng.random_range(100..=3000),
            count: 0,
            rng,
        })
    }

    /// How long the forward just made stalls, if it does.
    fn next(&mut self) -> Option<Duration> {
        if !self.rng.random_ratio(1, self.one_in) {
            return None;
        }
        self.count += 1;
        Some(Duration::from_millis(
            self.rng.random_range(1..=self.longest_ms),
        ))
    }
}

#[derive(Debug, Default)]
pub(super) struct State {
    /// The seed's stalls before hand-overs (none on some seeds), while the run goes.
    pub(super) stalls: Option<HandOverStalls>,
    pub(super) next_seq: u64,
    pub(super) stop_producing: bool,
    /// Producers whose last send has resolved after `stop_producing`, and when the last did.
    pub(super) producers_stopped: u32,
    pub(super) producers_stopped_at: Option<Duration>,
    /// Every seq sent, and the acknowledged ones with where the source put them.
    pub(super) sent: BTreeSet<u64>,
    pub(super) acked: BTreeMap<u64, Acked>,
    /// Per source partition, every forward in order.
    pub(super) forwards: BTreeMap<Part, Vec<Forward>>,
    /// Per source partition and ownership, the forwards not acknowledged yet (their ends).
    pub(super) unacked: BTreeMap<(Part, (String, u64)), BTreeSet<i64>>,
    /// Per source partition, the end offsets some mirror had durably acknowledged.
    pub(super) acked_ends: BTreeMap<Part, BTreeSet<i64>>,
    /// Gaps reported: (partition, from, to).
    pub(super) gaps: Vec<(Part, i64, i64, Duration)>,
    /// Gap seeds: the source's earliest offset per partition as polled while running (every
    /// 250 ms), with when, to judge each gap report against what the source held right after it.
    pub(super) earliest_seen: BTreeMap<Part, Vec<(Duration, i64)>>,
    /// Mirror starts per host (incarnations).
    pub(super) starts: BTreeMap<String, u64>,
    pub(super) commits_checked: u64,
    /// Mirrors that stopped with an error (and were started again), by reason.
    pub(super) mirror_failures: BTreeMap<String, u32>,
    /// What the checker host read at the end.
    pub(super) final_read: Option<FinalRead>,
    /// The mirror brokers' translations of source offsets, asked after the final read (with
    /// `mirror.preserve.partitions` on), or why they could not be asked.
    pub(super) translations: Option<Result<Vec<Translation>, String>>,
    /// Where the metrics disagreed with the clusters at the end (empty: they agreed).
    pub(super) metrics_problems: Vec<String>,
    /// Source partitions' latest offsets, polled during the drain.
    pub(super) source_latest: BTreeMap<Part, (Duration, i64)>,
    /// The phase the checker host acts on.
    pub(super) phase: Phase,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    #[default]
    Run,
    /// Poll the source's latest offsets.
    Drain,
    /// Read both clusters end to end.
    Check,
}

pub(super) type Shared = Arc<Mutex<State>>;

pub(super) fn state(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The history's ear in the mirror.
#[derive(Debug)]
pub(super) struct Observer {
    pub(super) owner: String,
    pub(super) shared: Shared,
    pub(super) control: Arc<Control>,
}

impl Observer {
    fn part(event: &MirrorEvent<'_>) -> Part {
        (event.topic.to_string(), event.partition.to_string())
    }
}

impl MirrorObserver for Observer {
    fn forwarded(&self, event: &MirrorEvent<'_>, payload: &[u8]) {
        let part = Self::part(event);
        let owner = (self.owner.clone(), event.epoch);
        let out_of_order = {
            let mut s = state(&self.shared);
            let forwards = s.forwards.entry(part.clone()).or_default();
            // 7: one ownership forwards in source order. (The source here writes no compressed
            // wrappers: every message has its own end offset.)
            let previous = forwards
                .iter()
                .rev()
                .find(|f| f.owner == owner)
                .map(|f| f.end)
                .filter(|end| *end >= event.offset);
            forwards.push(Forward {
                owner: owner.clone(),
                end: event.offset,
                payload: payload.to_vec(),
            });
            s.unacked
                .entry((part.clone(), owner.clone()))
                .or_default()
                .insert(event.offset);
            previous
        };
        if let Some(previous) = out_of_order {
            self.control.violate(
                Invariant::MirrorOrder,
                format!(
                    "{}/{}: {owner:?} forwarded offset {} after {previous}",
                    part.0, part.1, event.offset
                ),
            );
        }
    }

    fn hand_over_delay(&self, _event: &MirrorEvent<'_>) -> Option<Duration> {
        let mut s = state(&self.shared);
        if s.phase != Phase::Run {
            return None;
        }
        s.stalls.as_mut()?.next()
    }

    fn acknowledged(&self, event: &MirrorEvent<'_>) {
        let part = Self::part(event);
        let mut s = state(&self.shared);
        if let Some(unacked) = s
            .unacked
            .get_mut(&(part.clone(), (self.owner.clone(), event.epoch)))
        {
            unacked.remove(&event.offset);
        }
        s.acked_ends.entry(part).or_default().insert(event.offset);
    }

    /// 4, at every commit: the committed offset ends the acknowledged prefix of what this
    /// ownership forwarded — none of its forwards ending at or below it is unacknowledged.
    fn committed(&self, event: &MirrorEvent<'_>) {
        let part = Self::part(event);
        let owner = (self.owner.clone(), event.epoch);
        let hole = {
            let mut s = state(&self.shared);
            s.commits_checked += 1;
            s.unacked
                .get(&(part.clone(), owner.clone()))
                .and_then(|unacked| unacked.first().copied())
                .filter(|first| *first <= event.offset)
        };
        if let Some(first) = hole {
            self.control.violate(
                Invariant::MirrorCommitSafety,
                format!(
                    "{}/{}: {owner:?} committed {} while its forward ending at {first} was not acknowledged",
                    part.0, part.1, event.offset
                ),
            );
        }
    }

    fn gap(&self, _source: usize, report: &GapReport) {
        self.control.trace.push(&format!(
            "{}: gap {}/{} {}..{}",
            self.owner, report.topic, report.partition, report.from, report.to
        ));
        state(&self.shared).gaps.push((
            (report.topic.to_string(), report.partition.to_string()),
            report.from,
            report.to,
            turmoil::sim_elapsed().unwrap_or_default(),
        ));
    }
}
