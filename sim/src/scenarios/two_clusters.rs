//! The faults of the scenarios with two clusters, a source and a cluster that copies it (the
//! [`mirror`](crate::mirror) and [`replica`](crate::replica) scenarios): what each fault is
//! ([`Fault`]), which one comes next ([`pick_fault`]), when faults begin and end
//! ([`FaultSchedule`]), how each begins on the simulation ([`begin`]) and how it ends ([`end`]).
//!
//! What differs between the scenarios stays with each: what its report calls each fault, what
//! it checks while they run, the heal and the drain.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::cluster::Faults;
use crate::world::{Cluster, Control, Links};

/// The two clusters as the faults see them.
#[derive(Debug, Clone, Copy)]
pub struct TwoClusters<'a> {
    /// The source cluster (hosts `src-…`).
    pub source: &'a Cluster,
    /// The cluster that copies it (the mirror cluster, the replica cluster).
    pub destination: &'a Cluster,
    /// The hosts that copy from the source: the mirror brokers (embedded mirror) or the mirror
    /// maker; the replica brokers. [`Fault::Between`] cuts each of them from every source host.
    pub copiers: &'a [String],
}

/// A fault and how it ends. (Its `Debug` form is what the scenarios' traces print.)
#[derive(Debug, Clone)]
pub enum Fault {
    /// Every link between the copying hosts ([`TwoClusters::copiers`]) and the source cluster
    /// (its brokers and its ZooKeeper) cut.
    Between,
    /// One link cut.
    Link(String, String),
    /// A host crashed (restarted when the fault ends).
    Crash(String),
    /// A host stopped gracefully (started again when the fault ends).
    Restart(String),
    /// A cluster's ZooKeeper server killed (`true`: the source's) and started again on its data
    /// when the fault ends.
    ZooKeeper(bool),
    /// A cluster's ZooKeeper followers behind (`true`: the source's): each session reads what
    /// it last caught up to until it writes or syncs, or the fault ends
    /// ([`lag_followers`](crate::zk_model::lag_followers)). Drawn only by schedules built
    /// [`with_follower_lag`](FaultSchedule::with_follower_lag).
    ZooKeeperLag(bool),
}

/// Cuts (`cut`) or repairs every link between the copying hosts and the source cluster's hosts
/// (its brokers, then its ZooKeeper), copier by copier.
pub fn cut_between(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    clusters: TwoClusters<'_>,
    cut: bool,
) {
    let mut source_hosts = clusters.source.brokers.clone();
    source_hosts.push(clusters.source.zk_host.clone());
    for a in clusters.copiers {
        for b in &source_hosts {
            if cut {
                links.partition(sim, a, b);
            } else {
                links.repair(sim, a, b);
            }
        }
    }
}

/// Begins `fault`, to last `length` (the ZooKeeper model's outage is timed by the model itself;
/// the other faults last until [`end`]).
pub fn begin(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    clusters: TwoClusters<'_>,
    fault: &Fault,
    length: Duration,
) {
    match fault {
        Fault::ZooKeeper(source) => {
            let cluster = if *source {
                clusters.source
            } else {
                clusters.destination
            };
            crate::zk_model::crash_and_restart(&cluster.model, length);
        }
        Fault::ZooKeeperLag(source) => {
            let cluster = if *source {
                clusters.source
            } else {
                clusters.destination
            };
            let _already_lagging = !crate::zk_model::lag_followers(&cluster.model, length);
        }
        Fault::Between => cut_between(sim, links, clusters, true),
        Fault::Link(a, b) => links.partition(sim, a, b),
        Fault::Crash(h) => links.crash(sim, h),
        Fault::Restart(h) => control.request_stop(h),
    }
}

/// Whether beginning `fault` now changes anything (a lag of followers already behind does not).
fn takes_effect(clusters: TwoClusters<'_>, fault: &Fault) -> bool {
    match fault {
        Fault::ZooKeeperLag(true) => !crate::zk_model::lagging(&clusters.source.model),
        Fault::ZooKeeperLag(false) => !crate::zk_model::lagging(&clusters.destination.model),
        _ => true,
    }
}

/// Ends `fault`: links repaired, a crashed host restarted, a stopped host started again.
pub fn end(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    clusters: TwoClusters<'_>,
    fault: &Fault,
) {
    match fault {
        Fault::Between => cut_between(sim, links, clusters, false),
        Fault::Link(a, b) => links.repair(sim, a, b),
        Fault::Crash(h) => links.bounce(sim, h),
        // Back on its own when its outage (its lag) ends.
        Fault::ZooKeeper(_) | Fault::ZooKeeperLag(_) => {}
        Fault::Restart(h) => {
            control.forget_stop(h);
            // A graceful stop ended the host's work: start it again (isolated first, as every
            // crash here, so the dying runtime's socket drops cannot reorder the trace).
            links.crash(sim, h);
            links.bounce(sim, h);
        }
    }
}

/// Draws the next fault, among those `faults` allows: a ZooKeeper restart (either cluster's),
/// the link between the clusters cut, a copier or source broker cut from a ZooKeeper (a source
/// broker only from its own), a source broker crash (not in gap seeds, where a restart would
/// start the source's cleanup timer over), a copier crash or graceful restart, and with `lag` a
/// cluster's ZooKeeper followers falling behind (without it the draws are made as if that fault
/// did not exist, so the scenarios that do not ask for it keep their seeds' runs). Up to
/// ten draws; `None` if none was allowed.
pub fn pick_fault(
    rng: &mut ChaCha8Rng,
    clusters: TwoClusters<'_>,
    faults: Faults,
    gap_seed: bool,
    lag: bool,
) -> Option<Fault> {
    let pick =
        |rng: &mut ChaCha8Rng, from: &[String]| from[rng.random_range(0..from.len())].clone();
    let network = matches!(faults, Faults::Network | Faults::Mixed);
    let crash = matches!(faults, Faults::Crash | Faults::Mixed);
    let source = clusters.source;
    for _ in 0..10 {
        let kinds = if lag { 14 } else { 12 };
        let fault = match rng.random_range(0..kinds) {
            12.. if network => Fault::ZooKeeperLag(rng.random_bool(0.5)),
            10..12 if crash => Fault::ZooKeeper(rng.random_bool(0.5)),
            0..3 if network => Fault::Between,
            3..5 if network => {
                let mut hosts: Vec<String> = clusters.copiers.to_vec();
                hosts.extend(source.brokers.iter().cloned());
                let host = pick(rng, &hosts);
                let zk = if source.brokers.contains(&host) || rng.random_bool(0.5) {
                    source.zk_host.clone()
                } else {
                    clusters.destination.zk_host.clone()
                };
                Fault::Link(host, zk)
            }
            5..7 if crash && !gap_seed => Fault::Crash(pick(rng, &source.brokers)),
            7..9 if crash => Fault::Crash(pick(rng, clusters.copiers)),
            9 if crash => Fault::Restart(pick(rng, clusters.copiers)),
            _ => continue,
        };
        return Some(fault);
    }
    None
}

/// When the faults of a two-cluster run begin and end: in gap seeds the link between the
/// clusters cut across the source's first cleanup (60 s after its brokers start: from 35 s to
/// 70 s), so retention deletes what was not copied; then one drawn fault at a time, 1 to 10 s
/// long, 1 to 5 s apart, until the run's length.
#[derive(Debug)]
pub struct FaultSchedule {
    rng: ChaCha8Rng,
    faults: Faults,
    duration: Duration,
    gap_seed: bool,
    gap_cut: Option<(Duration, Duration)>,
    next_fault: Duration,
    active: Vec<(Duration, Fault)>,
    /// Whether ZooKeeper followers may fall behind ([`Fault::ZooKeeperLag`]).
    lag: bool,
}

impl FaultSchedule {
    /// A schedule for a run of `duration` with the faults `faults` allows, drawn from `rng`.
    pub fn new(mut rng: ChaCha8Rng, faults: Faults, duration: Duration, gap_seed: bool) -> Self {
        let next_fault = Duration::from_secs(rng.random_range(3..6));
        FaultSchedule {
            rng,
            faults,
            duration,
            gap_seed,
            gap_cut: gap_seed.then_some((Duration::from_secs(35), Duration::from_secs(70))),
            next_fault,
            active: Vec::new(),
            lag: false,
        }
    }

    /// The same schedule, drawing [`Fault::ZooKeeperLag`] among the others.
    pub fn with_follower_lag(mut self) -> Self {
        self.lag = true;
        self
    }

    /// When the faults are over: the run's length, or past the gap cut in gap seeds.
    pub fn end_at(&self) -> Duration {
        if self.gap_seed {
            self.duration.max(Duration::from_secs(72))
        } else {
            self.duration
        }
    }

    /// Begins and ends what is due now; each fault begun is traced and counted in `counts`
    /// under `kind(fault)`.
    pub fn step(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        links: &mut Links,
        control: &Control,
        clusters: TwoClusters<'_>,
        kind: fn(&Fault) -> &'static str,
        counts: &mut BTreeMap<&'static str, u32>,
    ) {
        let now = sim.elapsed();
        if let Some((from, until)) = self.gap_cut.filter(|(from, _)| now >= *from) {
            // A fault still running would repair links of this cut when it ends: end it now.
            self.end_all(sim, links, control, clusters);
            control.trace.push_at(
                now,
                &format!("fault Between (gap seed, from {from:?}) until {until:?}"),
            );
            *counts.entry(kind(&Fault::Between)).or_default() += 1;
            begin(sim, links, control, clusters, &Fault::Between, until - now);
            self.active.push((until, Fault::Between));
            self.gap_cut = None;
            self.next_fault = self.next_fault.max(until + Duration::from_secs(1));
        }
        if now >= self.next_fault && now < self.duration && self.faults != Faults::None {
            let fault = pick_fault(
                &mut self.rng,
                clusters,
                self.faults,
                self.gap_seed,
                self.lag,
            );
            let length = Duration::from_millis(self.rng.random_range(1000..10_000));
            self.next_fault =
                now + length + Duration::from_millis(self.rng.random_range(1000..5000));
            // A lag drawn while the followers already lag would change nothing: not counted.
            if let Some(fault) = fault.filter(|f| takes_effect(clusters, f)) {
                control
                    .trace
                    .push_at(now, &format!("fault {fault:?} for {length:?}"));
                *counts.entry(kind(&fault)).or_default() += 1;
                begin(sim, links, control, clusters, &fault, length);
                self.active.push((now + length, fault));
            }
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.active)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        self.active = later;
        for (_, fault) in due {
            end(sim, links, control, clusters, &fault);
        }
    }

    /// Ends every fault still running.
    pub fn end_all(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        links: &mut Links,
        control: &Control,
        clusters: TwoClusters<'_>,
    ) {
        for (_, fault) in std::mem::take(&mut self.active) {
            end(sim, links, control, clusters, &fault);
        }
    }
}
