//! The simulated world: any number of clusters, each with its own ZooKeeper model and brokers
//! (the production `Broker` on [`SimEnv`]), plus what the scenario needs to steer and judge
//! them: graceful-stop requests, each broker's disk, the trace, and the first violation.
//!
//! Host names: a cluster named `""` has hosts `zk`, `broker0`, `broker1`, …; a cluster named
//! `src` has `src-zk`, `src-broker0`, …. Every broker's config points at its own cluster's
//! ZooKeeper and registers its host name.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::failure::Failure;
use tributary::server::{EmbeddedMirror, ServerError};
use tributary_core::config::{BrokerConfig, Properties};

use crate::env::SimEnv;
use crate::invariants::{Invariant, Violation};
use crate::sim_fs::{Disk, DiskFaults};
use crate::trace::Trace;
use crate::zk_model::{serve, ModelState, SharedModel};

/// The ZooKeeper models' port.
pub const ZK_PORT: u16 = 2181;
/// The brokers' port.
pub const BROKER_PORT: u16 = 9092;

/// Shared between the scenario's driver, its clients and the broker hosts.
#[derive(Debug, Default)]
pub struct Control {
    /// The run's trace.
    pub trace: Trace,
    stop_requested: Mutex<BTreeSet<String>>,
    violation: Mutex<Option<Violation>>,
}

impl Control {
    /// Records a violation (the first one is kept) and traces it.
    pub fn violate(&self, invariant: Invariant, detail: String) {
        self.trace.push(&format!("VIOLATION {invariant}: {detail}"));
        let mut first = self.violation.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(Violation { invariant, detail });
    }

    /// The first violation, if any.
    pub fn violation(&self) -> Option<Violation> {
        self.violation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Asks the broker on `host` to shut down gracefully.
    pub fn request_stop(&self, host: &str) {
        self.stop_requested
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(host.to_string());
    }

    /// Forgets a stop request (a restarted broker must not act on one meant for its previous run).
    pub fn forget_stop(&self, host: &str) {
        self.stop_requested
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(host);
    }

    /// Whether a graceful stop of `host` was asked (and forgets the request).
    pub fn take_stop(&self, host: &str) -> bool {
        self.stop_requested
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(host)
    }
}

/// What a cluster looks like.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// The name (host name prefix; empty for none).
    pub name: String,
    /// How many brokers.
    pub brokers: u32,
    /// `num.partitions` of every broker.
    pub partitions: u32,
    /// `zk.sessiontimeout.ms`.
    pub session_timeout_ms: u32,
    /// Extra `server.properties` lines for every broker.
    pub extra_config: String,
    /// The brokers' disks.
    pub disk: DiskFaults,
    /// The embedded mirror each broker runs beside it (a mirror broker); see [`MirrorPlan`].
    pub mirror: Option<MirrorPlan>,
}

/// The embedded mirror of a mirror broker: called with the host's name at each start of the
/// host, it says how the server's supervisor starts the mirror (`tributary::server::run`).
#[derive(Clone)]
pub struct MirrorPlan(pub Arc<MirrorPlanFn>);

/// What a [`MirrorPlan`] calls.
pub type MirrorPlanFn = dyn Fn(&str) -> EmbeddedMirror<SimEnv> + Send + Sync;

impl std::fmt::Debug for MirrorPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MirrorPlan")
    }
}

impl ClusterSpec {
    /// A cluster of `brokers` brokers with `partitions` partitions per topic, 3 s sessions,
    /// instant disks.
    pub fn new(name: &str, brokers: u32, partitions: u32) -> Self {
        ClusterSpec {
            name: name.to_string(),
            brokers,
            partitions,
            session_timeout_ms: 3000,
            extra_config: String::new(),
            disk: DiskFaults::default(),
            mirror: None,
        }
    }

    /// The host name of `what` (`zk`, `broker0`, …) in this cluster.
    pub fn host(&self, what: &str) -> String {
        if self.name.is_empty() {
            what.to_string()
        } else {
            format!("{}-{what}", self.name)
        }
    }
}

/// A cluster in the simulation.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Its name.
    pub name: String,
    /// The ZooKeeper model's host.
    pub zk_host: String,
    /// Broker hosts, by broker id.
    pub brokers: Vec<String>,
    /// The ZooKeeper model's state (for checks).
    pub model: SharedModel,
    /// Each broker host's disk (kept across restarts).
    pub disks: BTreeMap<String, Arc<Disk>>,
}

/// Adds a cluster's hosts to `sim`: its ZooKeeper model and its brokers. Broker settings not
/// fixed by `spec` (flush interval, segment size) are drawn from `rng`.
pub fn add_cluster(
    sim: &mut turmoil::Sim<'_>,
    spec: &ClusterSpec,
    rng: &mut ChaCha8Rng,
    control: &Arc<Control>,
) -> Cluster {
    let model: SharedModel = Arc::new(Mutex::new(ModelState::default()));
    let zk_host = spec.host("zk");
    let zk_model = model.clone();
    crate::host::add(sim, zk_host.as_str(), move || {
        let m = zk_model.clone();
        async move { serve(ZK_PORT, m).await.map_err(Into::into) }
    });
    let mut cluster = Cluster {
        name: spec.name.clone(),
        zk_host: zk_host.clone(),
        brokers: Vec::new(),
        model,
        disks: BTreeMap::new(),
    };
    for id in 0..spec.brokers {
        let host = spec.host(&format!("broker{id}"));
        let config = broker_config(spec, id, &host, &zk_host, rng);
        let env_seed: u64 = rng.random();
        let disk = Disk::new(spec.disk, rng.random());
        cluster.disks.insert(host.clone(), disk.clone());
        add_broker(
            sim,
            host.clone(),
            config,
            env_seed,
            disk,
            control.clone(),
            spec.mirror.clone(),
        );
        cluster.brokers.push(host);
    }
    cluster
}

fn broker_config(
    spec: &ClusterSpec,
    id: u32,
    host: &str,
    zk_host: &str,
    rng: &mut ChaCha8Rng,
) -> BrokerConfig {
    let text = format!(
        "brokerid={id}\nhostname={host}\nport={BROKER_PORT}\nlog.dir=/data/logs\nnum.partitions={}\n\
         log.flush.interval={}\nlog.default.flush.interval.ms=200\nlog.default.flush.scheduler.interval.ms=100\n\
         log.file.size={}\nzk.connect={zk_host}:{ZK_PORT}\nzk.sessiontimeout.ms={}\nzk.connectiontimeout.ms=600000\n{}",
        spec.partitions,
        rng.random_range(1..40),
        rng.random_range(2000..20_000),
        spec.session_timeout_ms,
        spec.extra_config,
    );
    match BrokerConfig::from_properties(&Properties::parse("sim", &text).unwrap_or_default()) {
        Ok(c) => c,
        Err(e) => panic!("scenario broker config refused: {e}"),
    }
}

/// A broker host: runs the production server (`tributary::server::run`, the broker and its
/// embedded mirror if it has one) until the scenario asks for a graceful stop (then checks
/// that the stop was clean) or the host is crashed.
fn add_broker(
    sim: &mut turmoil::Sim<'_>,
    host: String,
    config: BrokerConfig,
    env_seed: u64,
    disk: Arc<Disk>,
    control: Arc<Control>,
    mirror: Option<MirrorPlan>,
) {
    let name = host.clone();
    crate::host::add(sim, name.as_str(), move || {
        let (config, control, disk, host, mirror) = (
            config.clone(),
            control.clone(),
            disk.clone(),
            host.clone(),
            mirror.clone(),
        );
        async move {
            let mirror = mirror.map(|plan| (plan.0)(&host));
            let stop = {
                let (control, host) = (control.clone(), host.clone());
                async move {
                    while !control.take_stop(&host) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            };
            control.trace.push(&format!("{host} starting"));
            let env = SimEnv::on_disk(env_seed, disk);
            match tributary::server::run(env, config, mirror, stop).await {
                Ok(()) => control.trace.push(&format!("{host} stopped gracefully")),
                Err(ServerError::Start(e)) => {
                    control.trace.push(&format!("{host} failed to start: {e}"));
                }
                Err(e) => control.violate(Invariant::BrokerHealth, format!("{host}: {e}")),
            }
            Ok(())
        }
    });
}

/// Links between hosts that the scenario has cut on purpose, so that isolating and restoring a
/// crashed host does not repair them by accident.
#[derive(Debug, Default)]
pub struct Links {
    hosts: Vec<String>,
    cut: BTreeSet<(String, String)>,
    isolated: BTreeSet<String>,
}

impl Links {
    /// Every host of the world, for isolating one from all others.
    pub fn new(hosts: Vec<String>) -> Self {
        Links {
            hosts,
            ..Links::default()
        }
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        if a <= b {
            (a.to_string(), b.to_string())
        } else {
            (b.to_string(), a.to_string())
        }
    }

    /// Cuts the link between `a` and `b`.
    pub fn partition(&mut self, sim: &mut turmoil::Sim<'_>, a: &str, b: &str) {
        self.cut.insert(Self::pair(a, b));
        sim.partition(a, b);
    }

    /// Restores the link between `a` and `b` (unless one of them is crashed: then when it is back).
    pub fn repair(&mut self, sim: &mut turmoil::Sim<'_>, a: &str, b: &str) {
        self.cut.remove(&Self::pair(a, b));
        if !self.isolated.contains(a) && !self.isolated.contains(b) {
            sim.repair(a, b);
        }
    }

    /// Crashes `host`. It is first cut off from every other host, so nothing it "sends" while
    /// it dies reaches anyone: a crashed machine falls silent, and its peers learn of it from
    /// their deadlines. (It also keeps the run deterministic: the order in which a dying
    /// runtime drops its sockets follows tokio's process-wide task ids.)
    pub fn crash(&mut self, sim: &mut turmoil::Sim<'_>, host: &str) {
        for other in self.hosts.iter().filter(|h| *h != host) {
            sim.partition(host, other.as_str());
        }
        self.isolated.insert(host.to_string());
        sim.crash(host);
    }

    /// Restarts a crashed `host` and restores its links, except those cut on purpose.
    pub fn bounce(&mut self, sim: &mut turmoil::Sim<'_>, host: &str) {
        self.isolated.remove(host);
        for other in self.hosts.iter().filter(|h| *h != host) {
            if !self.cut.contains(&Self::pair(host, other)) && !self.isolated.contains(other) {
                sim.repair(host, other.as_str());
            }
        }
        sim.bounce(host);
    }

    /// Restores every link cut on purpose (crashed hosts' links come back when they do).
    pub fn repair_all(&mut self, sim: &mut turmoil::Sim<'_>) {
        for (a, b) in std::mem::take(&mut self.cut) {
            if !self.isolated.contains(&a) && !self.isolated.contains(&b) {
                sim.repair(a.as_str(), b.as_str());
            }
        }
    }
}

/// A seeded RNG for one part of a run.
pub fn rng(seed: u64, part: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed ^ part.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// How a run ended: the first violation an invariant reported, else a driver error (as
/// `BrokerHealth`: the simulation itself could not go on), else the report.
pub fn outcome<R>(
    result: Result<(), Failure>,
    control: &Control,
    report: R,
) -> Result<R, (Violation, R)> {
    match (result, control.violation()) {
        (_, Some(v)) => Err((v, report)),
        (Err(detail), None) => Err((
            Violation {
                invariant: Invariant::BrokerHealth,
                detail: detail.to_string(),
            },
            report,
        )),
        (Ok(()), None) => Ok(report),
    }
}

/// A scenario's own configuration text, parsed; a refusal is a bug in the scenario, so it
/// panics naming `what`.
pub(crate) fn scenario_config<T>(
    what: &str,
    text: &str,
    f: impl Fn(&tributary_core::config::Properties) -> Result<T, tributary_core::config::ConfigError>,
) -> T {
    let properties = tributary_core::config::Properties::parse("sim", text).unwrap_or_default();
    match f(&properties) {
        Ok(c) => c,
        Err(e) => panic!("scenario {what} config refused: {e}"),
    }
}

/// Starts a client with `start` until it starts, tracing each failure as `<who>: <error>;
/// retrying` and waiting half a second between tries (a cluster may not be up yet).
pub(crate) async fn until_started<T, E: std::fmt::Display, F>(
    who: &str,
    control: &Control,
    mut start: impl FnMut() -> F,
) -> T
where
    F: std::future::Future<Output = Result<T, E>>,
{
    loop {
        match start().await {
            Ok(started) => return started,
            Err(e) => control.trace.push(&format!("{who}: {e}; retrying")),
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}
