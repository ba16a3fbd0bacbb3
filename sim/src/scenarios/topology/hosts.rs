//! The topology scenario's hosts: a producer in every cluster writing origin-tagged,
//! checksummed messages, the mirrors (mirror makers under an operator's supervisor, or embedded
//! in the target cluster's brokers), and the checker that reads every cluster end to end.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::consumer::Subscription;
use tributary::mirror::maker::{self, MakerError};
use tributary::mirror::{supervise, MirrorError, MirrorSettings};
use tributary::producer::{Producer, Record};
use tributary::server::EmbeddedMirror;
use tributary_core::config::{ConsumerConfig, ProducerConfig};
use tributary_core::identity::{ClusterIdentity, CLUSTER_ID_PATH};
use tributary_core::origin::{Origins, ORIGINS_PATH};
use tributary_core::wire::TopicName;

use super::{Edge, TOPIC};
use crate::env::SimEnv;
use crate::scenarios::mirror::{read_whole, registered_settled};
use crate::world::{scenario_config, until_started, Control, MirrorPlan, ZK_PORT};
use crate::zk_model::SharedModel;

/// What the hosts record.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Producing stops once set.
    pub(super) stop_producing: bool,
    /// Every message acknowledged to its producer: (origin cluster, seq).
    pub(super) acked: Vec<(String, u64)>,
    /// Every message sent (acknowledged or not).
    pub(super) sent: Vec<(String, u64)>,
    /// Mirror starts, per mirror host or edge.
    pub(super) starts: BTreeMap<String, u32>,
    /// Mirror runs that ended in an error, by reason.
    pub(super) failures: BTreeMap<String, u32>,
    /// Set by the checker: each cluster read end to end, or why it could not be.
    pub(super) read: Option<Reads>,
    /// The checker reads the clusters once set.
    pub(super) check: bool,
}

/// Every cluster read end to end: per cluster, per (topic, origin, seq), the copies found;
/// and the problems met.
#[derive(Debug, Default, Clone)]
pub(super) struct Reads {
    pub(super) copies: BTreeMap<String, BTreeMap<(String, String, u64), usize>>,
    /// Where each message was found: per (cluster, topic, origin, seq), `<broker>-<partition>
    /// at <offset>` of each copy.
    pub(super) places: BTreeMap<(String, String, String, u64), Vec<String>>,
    /// Payloads that are no message of the run: (cluster, topic, payload).
    pub(super) strangers: Vec<(String, String, String)>,
    pub(super) problems: Vec<String>,
}

pub(super) type Shared = Arc<Mutex<State>>;

pub(super) fn state(shared: &Shared) -> MutexGuard<'_, State> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Message `seq` of cluster `origin`: `t <origin> <seq> <crc32 of "t <origin> <seq>">`.
fn payload(origin: &str, seq: u64) -> Vec<u8> {
    let body = format!("t {origin} {seq}");
    format!("{body} {:08x}", crc32fast::hash(body.as_bytes())).into_bytes()
}

/// The origin and seq of a payload whose checksum holds.
fn parse_payload(bytes: &[u8]) -> Option<(String, u64)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (body, crc) = text.rsplit_once(' ')?;
    (u32::from_str_radix(crc, 16).ok()? == crc32fast::hash(body.as_bytes())).then_some(())?;
    let mut words = body.strip_prefix("t ")?.split(' ');
    let origin = words.next()?.to_string();
    let seq = words.next()?.parse().ok()?;
    Some((origin, seq))
}

/// The producer of cluster `cluster`: synchronous, durable acknowledgements, no retries (so a
/// message is in its own cluster at most once: a second copy there is one copied back).
pub(super) fn add_producer(
    sim: &mut turmoil::Sim<'_>,
    cluster: &'static str,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control) = (shared.clone(), control.clone());
    let host = format!("prod-{cluster}");
    crate::host::add(sim, host.clone().as_str(), move || {
        let (shared, control, host) = (shared.clone(), control.clone(), host.clone());
        async move {
            let text = format!("zk.connect={cluster}-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nproducer.type=sync\ndurable.acks=true\nnum.retries=0\nsocket.timeout.ms=2000\n");
            let config = scenario_config("producer", &text, ProducerConfig::from_properties);
            let producer = until_started(&host, &control, || {
                Producer::start(SimEnv::new(seed), config.clone())
            })
            .await;
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let Ok(topic) = TOPIC.parse::<TopicName>() else {
                return Ok(());
            };
            let mut seq = 0u64;
            loop {
                if state(&shared).stop_producing {
                    break;
                }
                seq += 1;
                state(&shared).sent.push((cluster.to_string(), seq));
                match producer
                    .send(Record::new(topic.clone(), payload(cluster, seq)))
                    .await
                {
                    Ok(delivery) => match delivery.await {
                        Ok(d) if d.offset.is_some() => {
                            control.trace.push(&format!("{host}: acked {seq}"));
                            state(&shared).acked.push((cluster.to_string(), seq));
                        }
                        Ok(_) => control
                            .trace
                            .push(&format!("{host}: {seq} delivered without an offset")),
                        Err(e) => control
                            .trace
                            .push(&format!("{host}: {seq} not delivered: {e}")),
                    },
                    Err(e) => control.trace.push(&format!("{host}: {seq} not sent: {e}")),
                }
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..60))).await;
            }
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

/// The mirror settings of `edge`, copying every topic (`.*`) from `edge.from` into `edge.to`.
fn settings(edge: &Edge, queue_size: u32) -> MirrorSettings {
    let rename = if edge.rename {
        "mirror.rename.topics=true\n"
    } else {
        ""
    };
    let consumer = format!(
        "zk.connect={}-zk:{ZK_PORT}\ngroupid=mirror-{}-{}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nautooffset.reset=smallest\n\
         fetcher.backoff.ms=100\nrebalance.backoff.ms=500\nrebalance.retries.max=10\nsocket.timeout.ms=2000\nfetch.size=4096\n\
         mirror.commit.interval.ms=500\n{rename}{preserve}",
        edge.from,
        edge.from,
        edge.to,
        preserve = if edge.preserve {
            "mirror.preserve.partitions=true\n"
        } else {
            ""
        }
    );
    let producer = format!(
        "zk.connect={}-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nproducer.type=async\nqueue.size={queue_size}\nbatch.size=10\nqueue.time=30\n\
         queue.enqueueTimeout.ms=-1\nsocket.timeout.ms=2000\nretry.backoff.ms=200\n",
        edge.to
    );
    let mut settings = MirrorSettings::embedded(
        scenario_config("consumer", &consumer, ConsumerConfig::from_properties),
        scenario_config("producer", &producer, ProducerConfig::from_properties),
    );
    settings.filter = Subscription::Whitelist(".*".into(), 1);
    settings.summary_interval = Duration::from_secs(10);
    settings
}

/// One start of `edge`'s mirror on `host`: counted, traced, its environment seeded from `seed`
/// and the time.
fn start(
    host: &str,
    edge: &Edge,
    queue_size: u32,
    seed: u64,
    shared: &Shared,
    control: &Control,
) -> (SimEnv, MirrorSettings) {
    let n = {
        let mut s = state(shared);
        let n = s.starts.entry(host.to_string()).or_insert(0);
        *n += 1;
        *n
    };
    control.trace.push(&format!(
        "{host}: mirror {}→{} starting ({n})",
        edge.from, edge.to
    ));
    let env = SimEnv::new(seed ^ turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64);
    (env, settings(edge, queue_size))
}

fn failed(host: &str, shared: &Shared, control: &Control, e: &MirrorError) {
    control
        .trace
        .push(&format!("{host}: mirror failed: {e}; it is started again"));
    *state(shared)
        .failures
        .entry(e.to_string().chars().take(100).collect())
        .or_insert(0) += 1;
}

/// `edge`'s mirror embedded in every broker of its target cluster, supervised by the server.
pub(super) fn embedded(
    edge: Edge,
    queue_size: u32,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) -> MirrorPlan {
    let (shared, control) = (shared.clone(), control.clone());
    MirrorPlan(Arc::new(move |host: &str| {
        let begin = {
            let (host, shared, control, edge) = (
                host.to_string(),
                shared.clone(),
                control.clone(),
                edge.clone(),
            );
            move || start(&host, &edge, queue_size, seed, &shared, &control)
        };
        let fail = {
            let (host, shared, control) = (host.to_string(), shared.clone(), control.clone());
            move |e: &MirrorError| failed(&host, &shared, &control, e)
        };
        EmbeddedMirror::each(begin, fail)
    }))
}

/// `edge`'s mirror maker on its own host, from its delay on (and, given `cycle` = its source's
/// and its target's ZooKeeper models, once the cycle it closes is recorded whole: see
/// [`Edge`]), under an operator's supervisor (started again after every failure).
pub(super) fn add_maker(
    sim: &mut turmoil::Sim<'_>,
    edge: Edge,
    queue_size: u32,
    cycle: Option<(SharedModel, SharedModel)>,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control) = (shared.clone(), control.clone());
    let host = edge.maker_host();
    crate::host::add(sim, host.clone().as_str(), move || {
        let (shared, control, host, edge, cycle) = (
            shared.clone(),
            control.clone(),
            host.clone(),
            edge.clone(),
            cycle.clone(),
        );
        async move {
            let since_start = turmoil::sim_elapsed().unwrap_or_default();
            tokio::time::sleep(edge.delay.saturating_sub(since_start)).await;
            if let Some((source, target)) = &cycle {
                while !recorded_through(source, target) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            let mut backoff = supervise::BACKOFF_MIN;
            loop {
                let (env, settings) = start(&host, &edge, queue_size, seed, &shared, &control);
                match maker::run(env, settings, None, std::future::pending()).await {
                    Ok(()) => return Ok(()),
                    Err(MakerError::Mirror(e)) => failed(&host, &shared, &control, &e),
                    Err(e) => control
                        .trace
                        .push(&format!("{host}: {e}; it is started again")),
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(supervise::BACKOFF_MAX);
            }
        }
    });
}

/// Whether `source`'s origin record of the topic shows a route through `target` (both read
/// from the models' state, as an operator would look before adding a mirror).
fn recorded_through(source: &SharedModel, target: &SharedModel) -> bool {
    let id = {
        let state = target.lock().unwrap_or_else(|p| p.into_inner());
        state.data(CLUSTER_ID_PATH)
    };
    let record = {
        let state = source.lock().unwrap_or_else(|p| p.into_inner());
        state.data(&format!("{ORIGINS_PATH}/{TOPIC}"))
    };
    let id = id.and_then(|d| ClusterIdentity::decode(&d).ok());
    let record = record.and_then(|d| Origins::decode(&d).ok());
    matches!((id, record), (Some(id), Some(record)) if record.passed_through(&id.id))
}

/// Reads every cluster end to end when the driver asks (again every second until the driver
/// takes a read).
pub(super) fn add_checker(
    sim: &mut turmoil::Sim<'_>,
    clusters: Vec<(&'static str, crate::zk_model::SharedModel)>,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control) = (shared.clone(), control.clone());
    crate::host::add(sim, "checker", move || {
        let (shared, control, clusters) = (shared.clone(), control.clone(), clusters.clone());
        async move {
            loop {
                if state(&shared).check {
                    let mut reads = Reads::default();
                    for (cluster, model) in &clusters {
                        let copies = reads.copies.entry(cluster.to_string()).or_default();
                        for part in registered_settled(model).await {
                            match read_whole(&part, cluster).await {
                                Ok((_, messages)) => {
                                    for (start, _, payload) in messages {
                                        match parse_payload(&payload) {
                                            Some((origin, seq)) => {
                                                reads
                                                    .places
                                                    .entry((
                                                        cluster.to_string(),
                                                        part.0.clone(),
                                                        origin.clone(),
                                                        seq,
                                                    ))
                                                    .or_default()
                                                    .push(format!("{} at {start}", part.1));
                                                *copies
                                                    .entry((part.0.clone(), origin, seq))
                                                    .or_insert(0) += 1;
                                            }
                                            None => reads.strangers.push((
                                                cluster.to_string(),
                                                part.0.clone(),
                                                String::from_utf8_lossy(&payload).into_owned(),
                                            )),
                                        }
                                    }
                                }
                                Err(e) => reads.problems.push(format!("{cluster} {e}")),
                            }
                        }
                    }
                    control.trace.push(&format!(
                        "checker: read {} clusters, {} problems",
                        reads.copies.len(),
                        reads.problems.len()
                    ));
                    state(&shared).read = Some(reads);
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
}
