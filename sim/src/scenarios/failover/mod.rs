//! The failover scenario: disaster recovery as a cycle. Two clusters, `a` and `b` (a ZooKeeper
//! model and two brokers each), every broker configured as a replica of the other cluster
//! (replica mode, the group `app`'s offsets synced), exactly one cluster promoted at a time; a
//! producer with durable acknowledgements and a consumer group work on the promoted one. The
//! drill, run by an operator host with the production tools (`promote`, `demote`):
//!
//! 1. `promote` a; the clients work on a while b copies it;
//! 2. the disaster: a's brokers crash (disks as they were) and its ZooKeeper goes down, with
//!    the clients of its datacenter; `promote` b, the clients move to b;
//! 3. a returns (its ZooKeeper restores its data and sessions); `demote` a: its partitions are
//!    cut back where they diverged, their tails kept in diverged files, and a copies from b;
//! 4. the planned switchback once a has caught up: producers stop, the group stops on b (its
//!    last commit), its offsets reach a; `promote` a, `demote` b; the clients go back to a,
//!    and b copies a again;
//!
//! under the two-cluster faults (links cut, crashes and graceful restarts, ZooKeeper restarts)
//! except while a is down. Invariants S27–S31 (see [`crate::invariants::Invariant`]).

mod hosts;
mod judge;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::failure::Failure;

use crate::cluster::Faults;
use crate::invariants::{Invariant, Violation};
use crate::mirror::Part;
use crate::sim_fs::{sim_builder, DiskFaults};
use crate::two_clusters::{Fault, FaultSchedule, TwoClusters};
use crate::world::{add_cluster, Cluster, ClusterSpec, Control, Links, ZK_PORT};

/// After the run's faults heal, how long the drill may take to finish and the clusters to
/// settle.
pub const DRAIN: Duration = Duration::from_secs(90);
/// The consumer group whose offsets follow the clients.
pub(crate) const GROUP: &str = "app";
/// The topic produced to.
pub(crate) const TOPIC: &str = "events";

/// What a run does.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Simulated time of the drill and its faults before healing.
    pub duration: Duration,
    /// Which faults.
    pub faults: Faults,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct FailoverReport {
    /// Simulated time covered.
    pub simulated: Duration,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Messages acknowledged, by the cluster (and phase) that acknowledged them.
    pub acked: BTreeMap<&'static str, usize>,
    /// Messages a acknowledged that b never received before the disaster.
    pub lost_at_disaster: usize,
    /// Messages the diverged files hold.
    pub diverged: usize,
    /// From the disaster until the first produce b acknowledged.
    pub first_produce_after: Option<Duration>,
    /// Messages the group read again when it moved to b, and when it moved back.
    pub rereads: (usize, usize),
    /// Whether the drill reached its end (the switchback done).
    pub completed: bool,
    /// Hash of the trace (same seed, same hash).
    pub trace_hash: u64,
    /// The trace's last lines.
    pub trace_tail: Vec<String>,
}

/// Where the drill is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Step {
    /// Promoting a.
    #[default]
    Start,
    /// a is primary.
    OnA,
    /// a is down; b being promoted.
    Disaster,
    /// b is primary, a down.
    OnB,
    /// a is back; being demoted, then catching up.
    Returned,
    /// The switchback: clients stopped, offsets following, a promoted, b demoted.
    Switching,
    /// a is primary again and b copies it.
    Back,
}

/// An acknowledged message.
#[derive(Debug, Clone)]
pub(crate) struct Acked {
    /// The cluster that acknowledged it (`a`, `b`).
    pub(crate) cluster: &'static str,
    /// The step it was acknowledged in.
    pub(crate) step: Step,
    /// The partition (`<broker>-<partition>`) and its offset.
    pub(crate) part: Part,
    pub(crate) offset: u64,
    pub(crate) payload: Vec<u8>,
}

/// A message the group read.
#[derive(Debug, Clone)]
pub(crate) struct Read {
    /// The consumer's generation (0 on a before the disaster, 1 on b, 2 back on a).
    pub(crate) generation: u64,
    /// Its partition (`<broker>-<partition>`) and the offset after it.
    pub(crate) partition: String,
    pub(crate) next: i64,
    pub(crate) payload: Vec<u8>,
}

/// What the hosts and the driver share.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) step: Step,
    /// The cluster clients work on (`None`: paused, at the switchback).
    pub(crate) primary: Option<&'static str>,
    pub(crate) acked: Vec<Acked>,
    pub(crate) next_seq: u64,
    /// The producer has nothing in flight and no producer open (it saw `primary` empty).
    pub(crate) producer_idle: bool,
    /// The consumer's generation (a new consumer on each move) and its cluster; a stop of the
    /// current generation is clean (last commit) when `clean`.
    pub(crate) consumer: Option<(u64, &'static str)>,
    pub(crate) consumer_stopped: BTreeSet<u64>,
    /// What the group read, in order.
    pub(crate) reads: Vec<Read>,
    /// The group's offsets on b when it stopped there for the switchback (partition → offset).
    pub(crate) committed_at_switch: BTreeMap<String, i64>,
    /// When the disaster struck (driver), and when a is back.
    pub(crate) disaster_at: Option<Duration>,
    pub(crate) returned: bool,
    pub(crate) first_produce_after: Option<Duration>,
    /// a's partitions as read before its demotion (what its diverged files are cut from).
    pub(crate) before_demotion: BTreeMap<Part, Vec<u8>>,
    /// Set by the driver once the run is over: the operator stops, the hosts drain.
    pub(crate) over: bool,
    /// The final read, by the checker: every partition of both clusters.
    pub(crate) check: bool,
    pub(crate) final_read: Option<Result<FinalRead, Failure>>,
}

pub(crate) type Shared = Arc<Mutex<State>>;

/// Both clusters as read at the end: (cluster, partition) → bytes from offset 0.
pub(crate) type FinalRead = BTreeMap<(String, Part), Vec<u8>>;

pub(crate) fn state(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The configuration both clusters' brokers share: a replica of `other`.
fn replica_config(other: &str, rng: &mut ChaCha8Rng) -> String {
    format!(
        "replica.source.zk.connect={other}-zk:{ZK_PORT}\nreplica.offsets.sync.groups={GROUP}\nreplica.offsets.sync.interval.ms={}\n\
         replica.fetch.size={}\nreplica.fetch.backoff.ms={}\nreplica.socket.timeout.ms=2000\n",
        rng.random_range(100..600),
        rng.random_range(1024..65_536),
        rng.random_range(20..300),
    )
}

/// What the report calls each fault.
fn kind(fault: &Fault) -> &'static str {
    match fault {
        Fault::Between => "link between the clusters cut",
        Fault::Link(..) => "broker cut from a ZooKeeper",
        Fault::Crash(h) if h.starts_with("a-") => "cluster a broker crash",
        Fault::Crash(_) => "cluster b broker crash",
        Fault::Restart(_) => "cluster b broker graceful restart",
        Fault::ZooKeeper(true) => "cluster a zookeeper restart",
        Fault::ZooKeeper(false) => "cluster b zookeeper restart",
        Fault::ZooKeeperLag(_) => "zookeeper followers behind",
    }
}

/// Runs one seed; `Err` names the broken invariant.
#[expect(
    clippy::result_large_err,
    reason = "one result per simulated run; the report is the point"
)]
pub fn run_seed(
    seed: u64,
    options: Options,
) -> Result<FailoverReport, (Violation, FailoverReport)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut builder = sim_builder(seed);
    builder
        .simulation_duration(options.duration + DRAIN * 3)
        .tcp_capacity(rng.random_range(64..256))
        .max_message_latency(Duration::from_millis(rng.random_range(2..20)));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let _capture = control.trace.capture();
    control.trace.push(&format!("seed {seed}"));
    let shared: Shared = Arc::default();
    let mut specs = Vec::new();
    for (name, other) in [("a", "b"), ("b", "a")] {
        let mut spec = ClusterSpec::new(name, 2, 2);
        spec.extra_config = replica_config(other, &mut rng);
        if options.faults == Faults::Mixed && rng.random_bool(0.3) {
            spec.disk = DiskFaults {
                latency_max: Duration::from_millis(rng.random_range(1..10)),
                sync_failures_per_million: 0,
            };
        }
        specs.push(spec);
    }
    let a = add_cluster(&mut sim, &specs[0], &mut rng, &control);
    let b = add_cluster(&mut sim, &specs[1], &mut rng, &control);
    hosts::add_producer(&mut sim, rng.random(), &shared, &control);
    hosts::add_consumer(&mut sim, rng.random(), &shared, &control);
    hosts::add_operator(&mut sim, rng.random(), &shared, &control, (&a, &b));
    hosts::add_checker(&mut sim, &shared);
    let mut all = vec![
        a.zk_host.clone(),
        b.zk_host.clone(),
        "producer".into(),
        "consumer".into(),
        "operator".into(),
        "checker".into(),
    ];
    all.extend(a.brokers.iter().cloned());
    all.extend(b.brokers.iter().cloned());
    let mut links = Links::new(all);
    let disaster_at = Duration::from_millis(rng.random_range(12_000..20_000));
    let outage = Duration::from_millis(rng.random_range(4_000..10_000));
    let mut report = FailoverReport::default();
    let result = drive(
        &mut sim,
        &mut links,
        &control,
        (&a, &b),
        &shared,
        (seed, options, disaster_at, outage),
        &mut report,
    );
    if result.is_ok() && control.violation().is_none() {
        judge::judge(&shared, &control, &a.model, &mut report);
    }
    {
        let s = state(&shared);
        for acked in &s.acked {
            let key = match (acked.cluster, acked.step >= Step::Back) {
                ("a", false) => "a (before the disaster)",
                ("a", true) => "a (after the switchback)",
                _ => "b",
            };
            *report.acked.entry(key).or_default() += 1;
        }
        report.first_produce_after = s.first_produce_after;
        report.completed = s.step == Step::Back;
    }
    report.trace_hash = control.trace.hash();
    report.trace_tail = control.trace.report_tail(40);
    report.simulated = sim.elapsed();
    crate::world::outcome(result, &control, report)
}

/// Runs the seed: faults (none while a is down), the disaster at `disaster_at` for `outage`,
/// the heal at the run's length, then until the drill is done and both clusters settled.
fn drive(
    sim: &mut turmoil::Sim<'_>,
    links: &mut Links,
    control: &Control,
    (a, b): (&Cluster, &Cluster),
    shared: &Shared,
    (seed, options, disaster_at, outage): (u64, Options, Duration, Duration),
    report: &mut FailoverReport,
) -> Result<(), Failure> {
    let both = TwoClusters {
        source: a,
        destination: b,
        copiers: &b.brokers,
    };
    let mut schedule = FaultSchedule::new(
        ChaCha8Rng::seed_from_u64(seed ^ 0xFA11_0BAC),
        options.faults,
        options.duration,
        false,
    );
    let mut struck: Option<Duration> = None;
    let mut healed = false;
    let step = |sim: &mut turmoil::Sim<'_>| {
        sim.step()
            .map_err(|e| Failure::from(format!("simulation error: {e}")))
    };
    loop {
        let now = sim.elapsed();
        if control.violation().is_some() {
            return Ok(());
        }
        let current = state(shared).step;
        match struck {
            None if now >= disaster_at
                && current == Step::OnA
                && !crate::zk_model::down(&a.model) =>
            {
                // Every fault ends first: none may bring part of a back early.
                schedule.end_all(sim, links, control, both);
                for host in a
                    .brokers
                    .iter()
                    .chain(["producer".to_string(), "consumer".to_string()].iter())
                {
                    links.crash(sim, host);
                }
                crate::zk_model::crash_and_restart(&a.model, outage);
                control.trace.push_at(
                    now,
                    &format!("DISASTER: cluster a and its clients down for {outage:?}"),
                );
                {
                    // Its clients went down with it: they start again only on the cluster the
                    // operator promotes.
                    let mut s = state(shared);
                    s.disaster_at = Some(now);
                    s.step = Step::Disaster;
                    s.primary = None;
                    s.consumer = None;
                }
                // The clients restart at once, elsewhere: they work on whatever is primary.
                links.bounce(sim, "producer");
                links.bounce(sim, "consumer");
                struck = Some(now);
            }
            Some(at) if !state(shared).returned && now >= at + outage => {
                for host in &a.brokers {
                    links.bounce(sim, host);
                }
                control
                    .trace
                    .push_at(now, "cluster a is back with its disks as they were");
                state(shared).returned = true;
            }
            _ => {}
        }
        let a_down = struck.is_some() && !state(shared).returned;
        if !a_down && now < options.duration {
            schedule.step(sim, links, control, both, kind, &mut report.faults);
        }
        if now >= options.duration && !healed {
            // The faults end with the run; the drill may still be finishing.
            schedule.end_all(sim, links, control, both);
            links.repair_all(sim);
            healed = true;
        }
        if healed && !a_down && (current == Step::Back || now >= options.duration + DRAIN) {
            break;
        }
        step(sim)?;
    }
    let healed = sim.elapsed();
    control.trace.push_at(healed, "healed; the drill is done");
    if state(shared).step != Step::Back {
        control.violate(
            Invariant::FailoverCompletes,
            format!(
                "the drill is still at {:?} {DRAIN:?} after the run's end",
                state(shared).step
            ),
        );
        return Ok(());
    }
    state(shared).over = true;
    // The clients drain and b catches up; then both clusters are read whole.
    while sim.elapsed() < healed + Duration::from_secs(8) {
        step(sim)?;
    }
    state(shared).check = true;
    loop {
        if control.violation().is_some() {
            return Ok(());
        }
        let taken = state(shared).final_read.take();
        if let Some(read) = taken {
            match read {
                Ok(parts) if judge::settled(&parts) => {
                    state(shared).final_read = Some(Ok(parts));
                    return Ok(());
                }
                other if sim.elapsed() > healed + DRAIN => {
                    let detail = match other {
                        Ok(parts) => judge::unsettled(&parts),
                        Err(e) => e.to_string(),
                    };
                    control.violate(
                        Invariant::FailoverCompletes,
                        format!("{DRAIN:?} after healing, b has not caught up with a: {detail}"),
                    );
                    return Ok(());
                }
                _ => {
                    links.crash(sim, "checker");
                    links.bounce(sim, "checker");
                }
            }
        }
        for _ in 0..50 {
            step(sim)?;
        }
    }
}
