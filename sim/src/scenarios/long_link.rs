//! The long-link scenario: a source cluster and a mirror cluster in two datacenters joined by a
//! long, capped link — `tributary link-proxy`'s code on a turmoil host between them (turmoil has
//! latency but no bandwidth model), the source broker advertising the proxy
//! (`advertised.host.name`) so the mirror reaches it only across the link. A loader fills the
//! source partitions (locally, not across the link), then the production mirror copies them
//! and a watcher in the mirror's datacenter samples the mirror cluster's log ends.
//!
//! Reported: the mirror's steady rate (from a fifth to four fifths of the bytes copied) as a
//! ratio of the link's rate, with the consumer settings of [`Options`]. Checked: every byte
//! arrives, and the run ends within its time limit. The test (`sim/tests/long_link.rs`) holds
//! the tuned settings to at least 0.8 of the link, and shows 0.7's one fetch at a time per
//! broker falling short of it on the same link.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tributary::client::{connect, latest_offsets};
use tributary::failure::Failure;
use tributary::mirror::maker::{self, MakerError};
use tributary::mirror::{MirrorError, MirrorSettings};
use tributary_core::config::{ConsumerConfig, ProducerConfig};
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{ProduceRequest, Request, TopicName};
use tributary_tools::link_proxy::{LinkProxy, LinkSpec};

use crate::env::SimEnv;
use crate::sim_fs::sim_builder;
use crate::world::{
    add_cluster, rng, scenario_config, until_started, ClusterSpec, Control, BROKER_PORT, ZK_PORT,
};

/// The host of the link proxy; the source broker advertises it.
const LINK: &str = "link";
/// The topic copied.
const TOPIC: &str = "wan";
/// Bytes of payload per message.
const PAYLOAD_BYTES: usize = 1000;
/// Messages per produce request of the loader.
const SET_MESSAGES: usize = 200;
/// How often the watcher samples the mirror cluster.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// What a run does.
#[derive(Debug, Clone)]
pub struct Options {
    /// The link's rate in each direction, bytes a second.
    pub link_rate: u64,
    /// The link's round trip.
    pub round_trip: Duration,
    /// Source partitions (one broker).
    pub partitions: u32,
    /// Bytes of payload loaded into each partition.
    pub bytes_per_partition: usize,
    /// The mirror's consumer settings: `fetch.size`.
    pub fetch_bytes: u32,
    /// `num.consumer.fetchers`.
    pub fetchers: u32,
    /// Simulated time allowed for the copy.
    pub limit: Duration,
}

impl Options {
    /// The long link (1 Gb/s, 100 ms) with 0.7's settings: `fetch.size` 1 MiB, one fetch at
    /// a time per broker.
    pub fn seven(partitions: u32, bytes_per_partition: usize) -> Self {
        Options {
            link_rate: 125_000_000,
            round_trip: Duration::from_millis(100),
            partitions,
            bytes_per_partition,
            fetch_bytes: 1 << 20,
            fetchers: 1,
            limit: Duration::from_secs(120),
        }
    }

    /// The same link with settings sized for it (docs/operations.md): a fetcher per partition,
    /// 2 MiB fetches.
    pub fn tuned(partitions: u32, bytes_per_partition: usize) -> Self {
        Options {
            fetch_bytes: 2 << 20,
            fetchers: partitions,
            ..Options::seven(partitions, bytes_per_partition)
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct LinkReport {
    /// Bytes the source held (log bytes, all partitions).
    pub source_bytes: u64,
    /// Bytes the mirror cluster held at the end.
    pub copied_bytes: u64,
    /// Simulated time from the mirror's start to the last byte copied.
    pub elapsed: Duration,
    /// The steady rate, bytes a second: from a fifth to four fifths of the bytes copied.
    pub steady_rate: f64,
    /// `steady_rate` over the link's rate.
    pub ratio: f64,
    /// Bytes the link carried toward the mirror.
    pub link_bytes: u64,
}

#[derive(Debug, Default)]
struct Shared {
    /// Log bytes per source partition once loaded.
    loaded: Option<u64>,
    /// When the mirror started.
    mirror_started: Option<Duration>,
    /// (simulated time, bytes in the mirror cluster).
    samples: Vec<(Duration, u64)>,
    /// Bytes the link carried toward the mirror.
    link_bytes: u64,
    /// Why the run failed, if it did.
    failure: Option<String>,
    done: bool,
}

fn state(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

fn topic() -> TopicName {
    TOPIC
        .parse()
        .unwrap_or_else(|_| panic!("{TOPIC} is a valid topic name"))
}

/// Runs the scenario once.
pub fn run(seed: u64, options: &Options) -> Result<LinkReport, Failure> {
    let mut sim = sim_builder(seed)
        .simulation_duration(options.limit + Duration::from_secs(60))
        // The proxy is the link: the network between hosts adds (almost) nothing.
        .min_message_latency(Duration::ZERO)
        .max_message_latency(Duration::from_millis(1))
        .tcp_capacity(1024)
        .build();
    let control = Arc::new(Control::default());
    let shared = Arc::new(Mutex::new(Shared::default()));
    let mut draws = rng(seed, 0);
    // Segments of 64 MiB (a fetch reads from one segment), flushed often: the mirror may copy
    // only flushed data.
    let broker_extra = "log.file.size=67108864\nlog.flush.interval=100\nlog.default.flush.interval.ms=50\nmax.socket.request.bytes=104857600\n";
    let mut source = ClusterSpec::new("src", 1, options.partitions);
    source.extra_config = format!("{broker_extra}advertised.host.name={LINK}\n");
    let mut target = ClusterSpec::new("dst", 1, options.partitions);
    target.extra_config = broker_extra.to_string();
    let source = add_cluster(&mut sim, &source, &mut draws, &control);
    let target = add_cluster(&mut sim, &target, &mut draws, &control);
    let source_broker = source.brokers[0].clone();
    let target_broker = target.brokers[0].clone();

    let spec = LinkSpec::new(options.round_trip, Some(options.link_rate));
    {
        let (shared, upstream) = (shared.clone(), source_broker.clone());
        crate::host::add(&mut sim, LINK, move || {
            let (shared, upstream) = (shared.clone(), upstream.clone());
            async move {
                let proxy = LinkProxy::start(
                    SimEnv::new(seed),
                    "0.0.0.0",
                    BROKER_PORT,
                    (upstream, BROKER_PORT),
                    spec,
                )
                .await?;
                loop {
                    tokio::time::sleep(SAMPLE_EVERY).await;
                    state(&shared).link_bytes = proxy
                        .stats()
                        .downstream_bytes
                        .load(std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
    }
    {
        let (shared, control, broker) = (shared.clone(), control.clone(), source_broker.clone());
        let options = options.clone();
        sim.client("loader", async move {
            if let Err(e) = load(&broker, &options, &shared, &control).await {
                state(&shared).failure = Some(format!("loader: {e}"));
            }
            Ok(())
        });
    }
    {
        let (shared, control) = (shared.clone(), control.clone());
        let options = options.clone();
        crate::host::add(&mut sim, "mirrormaker", move || {
            let (shared, control, options) = (shared.clone(), control.clone(), options.clone());
            async move {
                while state(&shared).loaded.is_none() {
                    tokio::time::sleep(SAMPLE_EVERY).await;
                }
                state(&shared).mirror_started = turmoil::sim_elapsed();
                let settings = MirrorSettings::embedded(consumer(&options), producer());
                // The production mirror maker; a start that cannot reach a cluster yet is
                // tried again, any other failure ends the run.
                loop {
                    let env = SimEnv::new(seed ^ 1);
                    match maker::run(env, settings.clone(), None, std::future::pending()).await {
                        Err(MakerError::Mirror(
                            e @ (MirrorError::Source(_) | MirrorError::Target(_)),
                        )) => {
                            control.trace.push(&format!("mirror: {e}; retrying"));
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Err(e) => {
                            state(&shared).failure = Some(format!("mirror: {e}"));
                            return Ok(());
                        }
                        Ok(()) => return Ok(()),
                    }
                }
            }
        });
    }
    {
        let (shared, broker) = (shared.clone(), target_broker.clone());
        let partitions = options.partitions;
        sim.client("watcher", async move {
            watch(&broker, partitions, &shared).await;
            Ok(())
        });
    }
    // Once every byte is copied the run goes on for one sampling interval, so that the link's
    // count is read after the last byte crossed it.
    let mut settled_at: Option<Duration> = None;
    loop {
        {
            let s = state(&shared);
            if let Some(failure) = &s.failure {
                return Err(Failure::from(format!(
                    "{failure}\n{}",
                    control.trace.tail(40).join("\n")
                )));
            }
            let now = sim.elapsed();
            if s.done && *settled_at.get_or_insert(now + SAMPLE_EVERY) <= now {
                break;
            }
        }
        match sim.step() {
            Ok(_) => {}
            Err(e) => {
                return Err(Failure::from(format!(
                    "simulation failed: {e}\n{}",
                    control.trace.tail(40).join("\n")
                )))
            }
        }
        if sim.elapsed() > options.limit + Duration::from_secs(30) {
            let s = state(&shared);
            return Err(Failure::from(format!(
                "the mirror copied {} of {} bytes within {:?}",
                s.samples.last().map_or(0, |x| x.1),
                s.loaded.unwrap_or(0) * u64::from(options.partitions),
                options.limit
            )));
        }
    }
    let report = report(&state(&shared), options);
    Ok(report)
}

fn report(s: &Shared, options: &Options) -> LinkReport {
    let total = s.loaded.unwrap_or(0) * u64::from(options.partitions);
    let started = s.mirror_started.unwrap_or_default();
    // The first samples past a fifth and past four fifths of the bytes: the rate between them
    // counts the bytes actually copied between the two samples (a sample lands up to one
    // sampling interval past its mark, so taking the marks' three fifths instead is off by
    // up to two intervals' worth of the link: 6 % over 0.6 s).
    let first_at = |part: u64| {
        s.samples
            .iter()
            .find(|(_, bytes)| *bytes * 5 >= total * part)
            .copied()
    };
    let steady_rate = match (first_at(1), first_at(4)) {
        (Some((low, low_bytes)), Some((high, high_bytes))) if high > low => {
            high_bytes.saturating_sub(low_bytes) as f64 / (high - low).as_secs_f64()
        }
        _ => 0.0,
    };
    let copied = s.samples.last().map_or(0, |x| x.1);
    LinkReport {
        source_bytes: total,
        copied_bytes: copied,
        elapsed: s
            .samples
            .last()
            .map_or(Duration::ZERO, |(t, _)| t.saturating_sub(started)),
        steady_rate,
        ratio: steady_rate / options.link_rate as f64,
        link_bytes: s.link_bytes,
    }
}

/// Fills every source partition with `bytes_per_partition` of payload, directly (the loader is
/// in the source's datacenter), then waits until the source has flushed it all.
async fn load(
    broker: &str,
    options: &Options,
    shared: &Mutex<Shared>,
    control: &Control,
) -> Result<(), Failure> {
    let env = SimEnv::new(7);
    let timeout = Duration::from_secs(30);
    let mut conn = until_started("loader", control, || {
        connect(&env, broker, BROKER_PORT, timeout)
    })
    .await;
    let mut set = MessageSetBuilder::new();
    for i in 0..SET_MESSAGES {
        set.push(vec![(i % 251) as u8; PAYLOAD_BYTES]);
    }
    let set: Bytes = set.build(CompressionCodec::None);
    let sets = options
        .bytes_per_partition
        .div_ceil(SET_MESSAGES * PAYLOAD_BYTES);
    for _ in 0..sets {
        for partition in 0..options.partitions {
            conn.send(&Request::Produce(ProduceRequest {
                topic: topic(),
                partition: partition as i32,
                messages: set.clone(),
            }))
            .await
            .map_err(|e| Failure::caused(e.to_string(), e))?;
        }
    }
    let per_partition = (set.len() * sets) as u64;
    let parts: Vec<(TopicName, i32)> = (0..options.partitions)
        .map(|p| (topic(), p as i32))
        .collect();
    loop {
        let (ends, error) = latest_offsets(&mut conn, &parts).await;
        if let Some(e) = error {
            return Err(Failure::from(e.to_string()));
        }
        if ends.iter().all(|e| *e == Some(per_partition as i64)) {
            break;
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    control
        .trace
        .push(&format!("loaded {per_partition} bytes into each partition"));
    state(shared).loaded = Some(per_partition);
    Ok(())
}

/// Samples the bytes the mirror cluster holds until it holds what the source does.
async fn watch(broker: &str, partitions: u32, shared: &Mutex<Shared>) {
    let env = SimEnv::new(11);
    let parts: Vec<(TopicName, i32)> = (0..partitions).map(|p| (topic(), p as i32)).collect();
    let mut conn = None;
    loop {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let Some(loaded) = state(shared).loaded else {
            continue;
        };
        if conn.is_none() {
            conn = connect(&env, broker, BROKER_PORT, Duration::from_secs(5))
                .await
                .ok();
        }
        let Some(open) = conn.as_mut() else { continue };
        let (ends, error) = latest_offsets(open, &parts).await;
        if error.is_some() {
            conn = None;
            continue;
        }
        let held: u64 = ends.iter().map(|e| e.unwrap_or(0).max(0) as u64).sum();
        let now = turmoil::sim_elapsed().unwrap_or_default();
        let mut s = state(shared);
        s.samples.push((now, held));
        if held >= loaded * u64::from(partitions) {
            s.done = true;
            return;
        }
    }
}

/// The mirror's consumer of the source, across the link.
fn consumer(options: &Options) -> ConsumerConfig {
    let text = format!(
        "zk.connect=src-zk:{ZK_PORT}\ngroupid=wan-mirror\nzk.sessiontimeout.ms=6000\nzk.connectiontimeout.ms=6000\nautooffset.reset=smallest\n\
         fetch.size={}\nnum.consumer.fetchers={}\nsocket.buffersize=0\nqueuedchunks.max=4\nfetcher.backoff.ms=50\nsocket.timeout.ms=30000\n\
         mirror.consumer.numthreads=2\nmirror.commit.interval.ms=1000\n",
        options.fetch_bytes, options.fetchers
    );
    scenario_config("consumer", &text, ConsumerConfig::from_properties)
}

/// The mirror's producer into the mirror cluster (in the mirror's datacenter).
fn producer() -> ProducerConfig {
    let text = format!(
        "zk.connect=dst-zk:{ZK_PORT}\nproducer.type=async\nbatch.size=400\nqueue.size=40000\nqueue.time=20\nqueue.enqueueTimeout.ms=-1\nsocket.timeout.ms=30000\n"
    );
    scenario_config("producer", &text, ProducerConfig::from_properties)
}
