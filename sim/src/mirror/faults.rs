//! The run's driver: the fault menu (which [`Fault`]s the mirror draws and what its report calls
//! them; what each does and what undoes it is shared with the replica scenario, in
//! [`two_clusters`](crate::two_clusters)), the schedule that injects them (the gap seeds' cut
//! across the source's first cleanup, then one drawn fault at a time), the heal, the drain
//! invariant 5 waits on, and the hand-over to the checker.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::history::{state, Phase, Shared};
use super::judge::{check_commits, lag};
use super::shape::Shape;
use super::{drain_limit, MirrorReport, Options, MAKER, PRODUCERS};
use crate::cluster::Faults;
use crate::two_clusters::{begin, end, Fault, TwoClusters};
use crate::world::{Cluster, Control, Invariant, Links};

/// What the driver steers.
pub(super) struct World<'a> {
    pub(super) source: &'a Cluster,
    pub(super) mirror: &'a Cluster,
    pub(super) mirror_hosts: &'a [String],
    pub(super) shape: Shape,
    pub(super) options: Options,
    pub(super) seed: u64,
}

impl World<'_> {
    /// The two clusters as the shared faults see them: the copying hosts are the mirror's.
    fn clusters(&self) -> TwoClusters<'_> {
        TwoClusters {
            source: self.source,
            destination: self.mirror,
            copiers: self.mirror_hosts,
        }
    }
}

/// What the report calls `fault` (the tests and docs quote these).
fn kind(fault: &Fault) -> &'static str {
    match fault {
        Fault::Between => "link between the clusters cut",
        Fault::Link(_, b) if b.ends_with("zk") => "host cut from a ZooKeeper",
        Fault::Link(..) => "link cut",
        Fault::Crash(h) if h.starts_with("src") => "source broker crash",
        Fault::Crash(h) if h == MAKER => "mirror maker crash",
        Fault::Crash(_) => "mirror broker crash",
        Fault::Restart(h) if h == MAKER => "mirror maker graceful restart",
        Fault::Restart(_) => "mirror broker graceful restart",
        Fault::ZooKeeper(true) => "source zookeeper restart",
        Fault::ZooKeeper(false) => "mirror zookeeper restart",
    }
}

/// Draws the next fault from the menu the run's fault mode allows (up to ten draws; `None` if
/// none was allowed).
fn pick_fault(rng: &mut ChaCha8Rng, world: &World<'_>) -> Option<Fault> {
    let pick =
        |rng: &mut ChaCha8Rng, from: &[String]| from[rng.random_range(0..from.len())].clone();
    let network = matches!(world.options.faults, Faults::Network | Faults::Mixed);
    let crash = matches!(world.options.faults, Faults::Crash | Faults::Mixed);
    for _ in 0..10 {
        let fault = match rng.random_range(0..12) {
            10.. if crash => Fault::ZooKeeper(rng.random_bool(0.5)),
            0..3 if network => Fault::Between,
            3..5 if network => {
                // A mirror host from either ZooKeeper, or a source broker from its own (a
                // source broker never talks to the mirror cluster's).
                let mut hosts: Vec<String> = world.mirror_hosts.to_vec();
                hosts.extend(world.source.brokers.iter().cloned());
                let host = pick(rng, &hosts);
                let zk = if world.source.brokers.contains(&host) || rng.random_bool(0.5) {
                    world.source.zk_host.clone()
                } else {
                    world.mirror.zk_host.clone()
                };
                Fault::Link(host, zk)
            }
            // Gap seeds keep their source brokers up: a restart would reset the cleaner's timer.
            5..7 if crash && !world.shape.tiny_retention => {
                Fault::Crash(pick(rng, &world.source.brokers))
            }
            7..9 if crash => Fault::Crash(pick(rng, world.mirror_hosts)),
            9 if crash => Fault::Restart(pick(rng, world.mirror_hosts)),
            _ => continue,
        };
        return Some(fault);
    }
    None
}

/// Runs the seed: faults until the run's length (the gap seeds' cut included), the heal, the
/// drain (invariant 5), then waits for the checker.
pub(super) fn drive(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    world: &World<'_>,
    shared: &Shared,
    report: &mut MirrorReport,
) -> Result<(), String> {
    let mut rng = ChaCha8Rng::seed_from_u64(world.seed ^ 0x3177_0FF5);
    let duration = world.options.duration;
    let mut next_fault = Duration::from_secs(rng.random_range(3..6));
    let mut active: Vec<(Duration, Fault)> = Vec::new();
    let mut last_check = Duration::ZERO;
    // Gap seeds: the link between the clusters is cut across the source's first cleanup (60 s
    // after its brokers start), so retention deletes what the mirror has not copied.
    let mut gap_cut = world
        .shape
        .tiny_retention
        .then_some((Duration::from_secs(35), Duration::from_secs(70)));
    let fault_end = if world.shape.tiny_retention {
        duration.max(Duration::from_secs(72))
    } else {
        duration
    };
    while sim.elapsed() < fault_end {
        let now = sim.elapsed();
        if let Some((from, _)) = gap_cut.filter(|(from, _)| now >= *from) {
            let until = gap_cut.map_or(from, |(_, until)| until);
            // A fault still running would repair links of this cut when it ends: end it now.
            for (_, fault) in std::mem::take(&mut active) {
                end(sim, links, control, world.clusters(), &fault);
            }
            control
                .trace
                .push_at(now, &format!("fault Between (gap seed) until {until:?}"));
            *report
                .faults
                .entry("link between the clusters cut")
                .or_default() += 1;
            begin(
                sim,
                links,
                control,
                world.clusters(),
                &Fault::Between,
                until - now,
            );
            active.push((until, Fault::Between));
            gap_cut = None;
            next_fault = next_fault.max(until + Duration::from_secs(1));
        }
        if now >= next_fault && now < duration && world.options.faults != Faults::None {
            if let Some(fault) = pick_fault(&mut rng, world) {
                let length = Duration::from_millis(rng.random_range(1000..10_000));
                control
                    .trace
                    .push_at(now, &format!("fault {fault:?} for {length:?}"));
                *report.faults.entry(kind(&fault)).or_default() += 1;
                begin(sim, links, control, world.clusters(), &fault, length);
                active.push((now + length, fault));
                next_fault = now + length + Duration::from_millis(rng.random_range(1000..5000));
            }
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut active)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        active = later;
        for (_, fault) in due {
            end(sim, links, control, world.clusters(), &fault);
        }
        if now - last_check >= Duration::from_millis(5) {
            last_check = now;
            check_commits(world.source, shared, control);
        }
        if control.violation().is_some() {
            return Ok(());
        }
        sim.step().map_err(|e| format!("simulation error: {e}"))?;
    }
    for (_, fault) in std::mem::take(&mut active) {
        end(sim, links, control, world.clusters(), &fault);
    }
    // An operator restarts a mirror broker whose disk failed a sync (its poisoned partitions
    // take nothing until then).
    for (host, disk) in &world.mirror.disks {
        disk.stop_failing();
        if disk.sync_failures() > 0 {
            control.trace.push_at(
                sim.elapsed(),
                &format!(
                    "{host}: restarted after {} failed syncs",
                    disk.sync_failures()
                ),
            );
            *report
                .faults
                .entry("failed fsyncs (mirror broker restarted at heal)")
                .or_default() += 1;
            links.crash(sim, host);
            links.bounce(sim, host);
        }
    }
    {
        let mut s = state(shared);
        s.stop_producing = true;
        s.phase = Phase::Drain;
    }
    let healed = sim.elapsed();
    control.trace.push_at(healed, "healed; producing stopped");
    // 5: the committed offsets reach every source partition's end.
    loop {
        check_commits(world.source, shared, control);
        if control.violation().is_some() {
            return Ok(());
        }
        let behind = lag(world.source, shared);
        // The producers' last sends have resolved, and the source's ends were read since.
        let quiet = {
            let s = state(shared);
            s.producers_stopped == PRODUCERS
                && s.producers_stopped_at
                    .is_some_and(|at| sim.elapsed() > at + Duration::from_secs(1))
        };
        if behind.is_empty() && quiet && sim.elapsed() > healed + Duration::from_secs(3) {
            report.drained_after = Some(sim.elapsed() - healed);
            control.trace.push_at(sim.elapsed(), "lag drained");
            break;
        }
        let limit = drain_limit(duration);
        if sim.elapsed() > healed + limit {
            control.violate(
                Invariant::MirrorProgress,
                format!(
                    "{limit:?} after healing, committed offsets still behind the source: {:?}",
                    behind.iter().take(4).collect::<Vec<_>>()
                ),
            );
            return Ok(());
        }
        for _ in 0..50 {
            sim.step().map_err(|e| format!("simulation error: {e}"))?;
        }
    }
    state(shared).phase = Phase::Check;
    // The end-to-end reads (up to 30 s of retries) and the metrics check (up to 20 s).
    let deadline = sim.elapsed() + Duration::from_secs(90);
    while state(shared).final_read.is_none() {
        if sim.elapsed() > deadline {
            return Err("the checker did not finish reading the clusters".into());
        }
        sim.step().map_err(|e| format!("simulation error: {e}"))?;
    }
    Ok(())
}
