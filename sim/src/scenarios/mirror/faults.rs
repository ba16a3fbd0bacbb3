//! The run's driver: what the report calls each [`Fault`] (which faults come when, what each
//! does and what undoes it are shared with the replica scenario, in
//! [`two_clusters`](crate::two_clusters)), the commit checks while they run, the heal, the
//! drain invariant 5 waits on, and the hand-over to the checker.

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tributary::failure::Failure;

use super::history::{state, Phase, Shared};
use super::judge::{check_commits, lag, messages_behind};
use super::shape::Shape;
use super::{drain_limit, MirrorReport, Options, MAKER, PRODUCERS};
use crate::invariants::Invariant;
use crate::two_clusters::{Fault, FaultSchedule, TwoClusters};
use crate::world::{Cluster, Control, Links};

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
        Fault::ZooKeeperLag(true) => "source zookeeper followers behind",
        Fault::ZooKeeperLag(false) => "mirror zookeeper followers behind",
    }
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
) -> Result<(), Failure> {
    let duration = world.options.duration;
    let mut schedule = FaultSchedule::new(
        ChaCha8Rng::seed_from_u64(world.seed ^ 0x3177_0FF5),
        world.options.faults,
        duration,
        world.shape.tiny_retention,
    );
    let mut last_check = Duration::ZERO;
    while sim.elapsed() < schedule.end_at() {
        let now = sim.elapsed();
        schedule.step(
            sim,
            links,
            control,
            world.clusters(),
            kind,
            &mut report.faults,
        );
        if now - last_check >= Duration::from_millis(5) {
            last_check = now;
            check_commits(world.source, shared, control);
        }
        if control.violation().is_some() {
            return Ok(());
        }
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
    }
    schedule.end_all(sim, links, control, world.clusters());
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
        if let Some(stalls) = s.stalls.as_ref().filter(|s| s.count > 0) {
            *report
                .faults
                .entry("mirror stream stalled before a hand-over")
                .or_default() += stalls.count;
        }
    }
    let healed = sim.elapsed();
    let behind = messages_behind(world.source, shared);
    let limit = drain_limit(duration, &world.shape, behind);
    control.trace.push_at(
        healed,
        &format!(
            "healed; producing stopped; {behind} acknowledged messages to copy within {limit:?}"
        ),
    );
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
            sim.step()
                .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
        }
    }
    state(shared).phase = Phase::Check;
    // The end-to-end reads (up to 30 s of retries) and the metrics check (up to 20 s).
    let deadline = sim.elapsed() + Duration::from_secs(90);
    while state(shared).final_read.is_none() {
        if sim.elapsed() > deadline {
            return Err("the checker did not finish reading the clusters".into());
        }
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))?;
    }
    Ok(())
}
