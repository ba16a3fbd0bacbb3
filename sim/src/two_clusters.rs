//! The faults of the scenarios with two clusters, a source and a cluster that copies it (the
//! [`mirror`](crate::mirror) and [`replica`](crate::replica) scenarios): what each fault is
//! ([`Fault`]), how it begins on the simulation ([`begin`]) and how it ends ([`end`]).
//!
//! What differs between the scenarios stays with each: which faults it draws and with what odds,
//! what its report calls each one, and its driver (when faults begin and end, the heal, the
//! drain).

use std::time::Duration;

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
        Fault::Between => cut_between(sim, links, clusters, true),
        Fault::Link(a, b) => links.partition(sim, a, b),
        Fault::Crash(h) => links.crash(sim, h),
        Fault::Restart(h) => control.request_stop(h),
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
        // Back on its own when its outage ends.
        Fault::ZooKeeper(_) => {}
        Fault::Restart(h) => {
            control.forget_stop(h);
            // A graceful stop ended the host's work: start it again (isolated first, as every
            // crash here, so the dying runtime's socket drops cannot reorder the trace).
            links.crash(sim, h);
            links.bounce(sim, h);
        }
    }
}
