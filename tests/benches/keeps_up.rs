//! Whether the mirror keeps up with its source, measured against the source's own ingest rate
//! in the same run on the same machine:
//!
//! 1. **Source ingest**: `producer-perf --threads 4 --async` writes 1 KiB messages into an
//!    8-partition topic of the source broker, alone on the machine: the rate a source takes.
//! 2. **Backlog copy**: the mirror (the production engine, in process: 4 streams, the seed's
//!    `mirror-producer.properties` with the durable acknowledgements the mirror always asks
//!    for) copies an 8-partition backlog of 1 KiB and of 100 B messages, started once the
//!    source serves all of it (a broker serves only what it has flushed); its rate from its
//!    first message to the acknowledgement of the last, as a ratio of the ingest rate, and the
//!    MB/s it copies per CPU core (every thread but the brokers'). Beside each case, the cores
//!    the whole machine was busy: a case near all of them is bound by the CPU it shares.
//! 3. **Live**: a producer writes 1 KiB messages at half the ingest rate while the mirror copies
//!    them, for 10 minutes (30 s in the quick run); the lag (messages written to the source and
//!    not yet acknowledged by the mirror cluster; what waits in the writers' own queues is
//!    stated apart) is sampled every second, with the rate the source really took and how
//!    busy the machine was. The mirror keeps up when the lag of the last tenth of the run is
//!    no larger than that of the first. A lag past
//!    2,000,000 messages ends the run there (it does not keep up, and the disk is bounded).
//!
//! Both brokers keep 512 MiB a partition (128 MiB segments, retention every minute): at this
//! machine's rates a full live run needs about 25 GB free per broker.
//!
//! Both brokers flush as the seed's `server.properties` says (10,000 messages or 1 s).
//! `TRIBUTARY_BENCH_PRODUCERS` sets the mirror's producers (default 1, as 0.7's MirrorMaker);
//! `TRIBUTARY_BENCH_LIVE_SECS` the live run's length, `TRIBUTARY_BENCH_LIVE_PERCENT` its rate as a
//! percentage of the ingest (default 50); `TRIBUTARY_BENCH_ONLY=live` skips the backlog cases.
//!
//! `cargo bench -p tributary-tests --bench keeps_up` (needs ZooKeeper: scripts/install-deps.sh).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tributary::env::TokioEnv;
use tributary::mirror::Mirror;
use tributary::producer::{Producer, Record};
use tributary_core::config::{BrokerConfig, ProducerConfig};
use tributary_core::message::MessageSetBuilder;
use tributary_core::wire::{OffsetsRequest, Request, Response, TopicName};
use tributary_tests::zookeeper::ZooKeeper;

mod support;
use support::{bench_mirror_settings, mirror_consumer_config, properties, BenchBroker};

/// Partitions of every topic of the source.
const PARTITIONS: usize = 8;
/// Streams of the mirror.
const STREAMS: u32 = 4;
/// Sending tasks of the ingest and of the live producer.
const THREADS: usize = 4;

/// Bytes written by the ingest case and copied by each backlog case: 512 MiB, 64 MiB quick.
fn volume() -> usize {
    if tributary_tests::bench::quick() {
        64 << 20
    } else {
        512 << 20
    }
}

/// How long the live case runs: 600 s, 30 s quick, or `TRIBUTARY_BENCH_LIVE_SECS`.
fn live_seconds() -> u64 {
    let default = if tributary_tests::bench::quick() {
        30
    } else {
        600
    };
    tributary_tests::bench::env_number("TRIBUTARY_BENCH_LIVE_SECS", default)
}

/// The lag (messages written and not yet acknowledged by the mirror cluster) at which the live
/// case stops: the mirror has then fallen 2 GiB behind, about 256 MiB a partition, which the
/// source still holds (its retention deletes whole 128 MiB segments past 512 MiB, so it keeps
/// at least 384 MiB a partition). A run that does not keep up ends there instead of filling the
/// disk with a backlog that only grows.
const LAG_BOUND: u64 = 2_000_000;

/// The free disk under the brokers' logs below which the live case stops writing: a mirror
/// that keeps up runs the full 10 minutes, and on a disk too small for what retention keeps
/// plus a minute of writes the run ends there, said in its row, rather than the disk filling.
const DISK_FLOOR: u64 = 4 << 30;

/// Why the live case stopped before its time.
enum Stop {
    /// The lag passed [`LAG_BOUND`]: the mirror does not keep up.
    Lag,
    /// The disk under the logs had less than [`DISK_FLOOR`] free (bytes free then).
    Disk(u64),
}

/// What both brokers keep of a partition: segments of 128 MiB, the oldest deleted past 512 MiB
/// (retention runs every minute, 0.7's shortest). The live case writes at half the source's
/// ingest rate for 10 minutes, far more than this machine's disk; at 360 MB/s a broker holds at
/// most 4 GiB retained and one minute of writes, about 25 GB.
const SEGMENT_BYTES: u64 = 128 << 20;
const RETAINED_BYTES: u64 = 512 << 20;

fn topic(name: &str) -> TopicName {
    name.parse().expect("topic")
}

/// A broker of `zk`'s cluster with the seed's flush policy and 8 partitions per topic.
fn start_broker(zk: &ZooKeeper, dir: &std::path::Path) -> BenchBroker {
    let text = format!(
        "brokerid=0\nport=0\nhostname=127.0.0.1\nlog.dir={}\nnum.partitions={PARTITIONS}\n\
         log.flush.interval=10000\nlog.default.flush.interval.ms=1000\n\
         log.default.flush.scheduler.interval.ms=1000\nzk.connect={}\n\
         log.file.size={SEGMENT_BYTES}\nlog.retention.size={RETAINED_BYTES}\nlog.cleanup.interval.mins=1\n",
        dir.display(),
        zk.connect_string()
    );
    BenchBroker::start(properties(&text, BrokerConfig::from_properties))
}

/// The seed's `config/mirror-producer.properties`, pointed at the cluster of `zk`.
fn seed_mirror_producer(zk: &ZooKeeper) -> ProducerConfig {
    let seed = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../config/mirror-producer.properties"),
    )
    .expect("config/mirror-producer.properties");
    let text: String = seed
        .lines()
        .filter(|l| !l.trim_start().starts_with("broker.list"))
        .map(|l| format!("{l}\n"))
        .chain([format!("zk.connect={}\n", zk.connect_string())])
        .collect();
    properties(&text, ProducerConfig::from_properties)
}

/// `producer-perf --threads 4 --async` writing `messages` messages of `size` bytes to `name`
/// through the cluster of `zk`; bytes per second.
async fn producer_perf_rate(zk: &ZooKeeper, name: &str, size: usize, messages: u64) -> f64 {
    support::producer_perf_rate(
        format!("zk.connect={}", zk.connect_string()),
        topic(name),
        messages,
        size,
        THREADS as u32,
    )
    .await
}

/// The mirror's producers: `TRIBUTARY_BENCH_PRODUCERS`, or 1.
fn producers() -> u32 {
    u32::try_from(tributary_tests::bench::env_number(
        "TRIBUTARY_BENCH_PRODUCERS",
        1,
    ))
    .expect("TRIBUTARY_BENCH_PRODUCERS: a number of producers")
}

/// A mirror of `name` (by group `group`) from the source of `source` into the cluster of
/// `target`, started and running until the returned sender is dropped.
async fn start_mirror(
    source: &ZooKeeper,
    target: &ZooKeeper,
    name: &str,
    group: &str,
) -> (
    Arc<tributary::metrics::mirror::MirrorStats>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), tributary::mirror::MirrorError>>,
) {
    let consumer = mirror_consumer_config(source, group, "smallest");
    let mut settings = bench_mirror_settings(consumer, target, name.to_string());
    settings.producer = seed_mirror_producer(target);
    settings.streams = STREAMS;
    settings.producers = producers();
    let mirror = Mirror::start(TokioEnv, settings).await.expect("mirror");
    let stats = mirror.stats.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(mirror.run_until(async { drop(stopped.await) }));
    (stats, stop, running)
}

/// Waits until the source broker on `port` serves all `bytes` of `name`'s partitions. A broker
/// serves only what it has flushed, and the seed flushes every 10,000 messages or each second:
/// a partition's last messages are readable only after that second. Copying a backlog that is
/// not all readable yet would time the source's flush along with the mirror.
async fn wait_until_served(port: u16, name: &str, bytes: u64) {
    let topic: TopicName = name.parse().expect("topic");
    let mut conn =
        tributary::client::connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(10))
            .await
            .expect("connect to the source broker");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut served = 0u64;
        for partition in 0..PARTITIONS as i32 {
            let request = Request::Offsets(OffsetsRequest {
                topic: topic.clone(),
                partition,
                time: -1,
                max_offsets: 1,
            });
            let Ok(Response::Offsets(answer)) = conn.call(&request).await else {
                panic!("the source broker did not answer OFFSETS for {name}/{partition}");
            };
            served += answer.offsets.first().copied().unwrap_or(0).max(0) as u64;
        }
        if served >= bytes {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the source serves {served} of the {bytes} bytes of {name} after a minute"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What one case used of the machine: the cores of its own threads (not the brokers'), and the
/// cores the whole machine was busy (every process, brokers and ZooKeeper included).
struct Cores {
    own: f64,
    machine: f64,
}

/// The mirror copies the `count` messages of `size` bytes of `name`: bytes per second from its
/// first message sent to the acknowledgement of the last, and the CPU it used meanwhile.
async fn backlog_copy(
    source: &ZooKeeper,
    target: &ZooKeeper,
    name: &str,
    size: usize,
    count: u64,
) -> (f64, Cores) {
    let not_broker = |thread: &str| thread != tributary_tests::bench::BROKER_THREAD_NAME;
    let (stats, stop, running) = start_mirror(source, target, name, &format!("copy-{name}")).await;
    let deadline = Instant::now() + Duration::from_secs(1200);
    let mut first = None;
    while stats.acked.load(Ordering::Relaxed) < count {
        if first.is_none() && stats.sent.load(Ordering::Relaxed) > 0 {
            first = Some((
                Instant::now(),
                tributary_tests::bench::thread_cpu_ns(not_broker),
                tributary_tests::bench::machine_busy_ns(),
            ));
        }
        assert!(Instant::now() < deadline, "the mirror did not finish");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (started, cpu_before, busy_before) = first.expect("no message sent");
    let seconds = started.elapsed().as_secs_f64();
    let cpu = tributary_tests::bench::thread_cpu_ns(not_broker).saturating_sub(cpu_before);
    let busy = tributary_tests::bench::machine_busy_ns().saturating_sub(busy_before);
    drop(stop);
    running.await.expect("mirror task").expect("mirror run");
    assert_eq!(
        stats.acked.load(Ordering::Relaxed),
        count,
        "the mirror copied more than the source held"
    );
    (
        (count as usize * size) as f64 / seconds,
        Cores {
            own: cpu as f64 / 1e9 / seconds,
            machine: busy as f64 / 1e9 / seconds,
        },
    )
}

/// One second's look at the live copy.
struct Sample {
    /// Messages the writers had queued so far.
    produced: u64,
    /// Of those, the messages written to the source broker.
    written: u64,
    /// Messages written to the source and not yet acknowledged by the mirror cluster: the
    /// mirror's lag (what still waits in the writers' own queues is not the mirror's).
    lag: u64,
}

/// How the live case went.
struct Live {
    /// One look a second.
    samples: Vec<Sample>,
    /// Seconds the mirror took to drain what was left when the writing stopped.
    drain: f64,
    /// The second at which the writing stopped before its time, and why, if it did.
    stopped: Option<(usize, Stop)>,
    /// Cores of the whole machine busy while the writers wrote.
    busy: f64,
}

/// Writes 1 KiB messages to `name` at `rate` bytes per second for `seconds` (or until the lag
/// passes [`LAG_BOUND`], or the disk under `logs` runs low) while a mirror copies them; samples
/// the lag every second.
async fn live(
    source: &ZooKeeper,
    target: &ZooKeeper,
    name: &str,
    rate: f64,
    seconds: u64,
    logs: &std::path::Path,
) -> Live {
    const SIZE: usize = 1024;
    const TICK: Duration = Duration::from_millis(10);
    let (stats, stop, running) = start_mirror(source, target, name, &format!("live-{name}")).await;
    let config = properties(
        &format!(
            "zk.connect={}\nproducer.type=async\nbatch.size=200\nqueue.time=20\nqueue.size=100000\nqueue.enqueueTimeout.ms=-1\n",
            source.connect_string()
        ),
        ProducerConfig::from_properties,
    );
    let produced = Arc::new(AtomicU64::new(0));
    // Each writer's counters: what it wrote to the source (delivered, without acks: written
    // to the socket).
    let written: Arc<std::sync::Mutex<Vec<Arc<tributary::producer::ProducerStats>>>> =
        Arc::default();
    let stop_writing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let per_tick = rate / SIZE as f64 / THREADS as f64 * TICK.as_secs_f64();
    let end = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let writers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (config, produced, written, stop_writing, name) = (
                config.clone(),
                produced.clone(),
                written.clone(),
                stop_writing.clone(),
                topic(name),
            );
            tokio::spawn(async move {
                let producer = Producer::start(TokioEnv, config).await.expect("producer");
                let stats = producer
                    .stats_weak()
                    .upgrade()
                    .expect("the producer's counters");
                written.lock().expect("the writers' counters").push(stats);
                let payload = bytes::Bytes::from(vec![b'l'; SIZE]);
                let (mut due, mut sent) = (0f64, 0u64);
                let mut tick = tokio::time::interval(TICK);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                while tokio::time::Instant::now() < end && !stop_writing.load(Ordering::Relaxed) {
                    tick.tick().await;
                    due += per_tick;
                    while (sent as f64) < due {
                        // Async without acknowledgements: resolved once written, as 0.7's.
                        drop(
                            producer
                                .send(Record::new(name.clone(), payload.clone()))
                                .await
                                .expect("queued"),
                        );
                        sent += 1;
                        produced.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let failed = producer.stats().failed.load(Ordering::Relaxed);
                assert_eq!(
                    failed, 0,
                    "the live producer failed to send {failed} messages"
                );
                producer.close().await;
            })
        })
        .collect();
    let mut samples = Vec::new();
    let mut stopped = None;
    let (started, busy_before) = (Instant::now(), tributary_tests::bench::machine_busy_ns());
    let mut next = tokio::time::Instant::now() + Duration::from_secs(1);
    while tokio::time::Instant::now() < end {
        tokio::time::sleep_until(next).await;
        next += Duration::from_secs(1);
        let produced = produced.load(Ordering::Relaxed);
        let written: u64 = written
            .lock()
            .expect("the writers' counters")
            .iter()
            .map(|s| s.delivered.load(Ordering::Relaxed))
            .sum();
        let acked = stats.acked.load(Ordering::Relaxed);
        let lag = written.saturating_sub(acked);
        samples.push(Sample {
            produced,
            written,
            lag,
        });
        let free = tributary_tests::bench::free_bytes(logs);
        if free.is_none() && samples.len() == 1 {
            eprintln!(
                "keeps_up: cannot tell the free disk under {} (df did not answer): the live case runs without its disk floor",
                logs.display()
            );
        }
        let reason = match free {
            _ if lag > LAG_BOUND => Some(Stop::Lag),
            Some(free) if free < DISK_FLOOR => Some(Stop::Disk(free)),
            _ => None,
        };
        if let Some(reason) = reason {
            stop_writing.store(true, Ordering::Relaxed);
            stopped = Some((samples.len(), reason));
            break;
        }
    }
    let busy = tributary_tests::bench::machine_busy_ns().saturating_sub(busy_before) as f64
        / 1e9
        / started.elapsed().as_secs_f64();
    for writer in writers {
        writer.await.expect("live producer");
    }
    let total = produced.load(Ordering::Relaxed);
    let writes_ended = Instant::now();
    let deadline = writes_ended + Duration::from_secs(600);
    while stats.acked.load(Ordering::Relaxed) < total {
        assert!(
            Instant::now() < deadline,
            "the mirror did not drain the live run"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain = writes_ended.elapsed().as_secs_f64();
    drop(stop);
    running.await.expect("mirror task").expect("mirror run");
    Live {
        samples,
        drain,
        stopped,
        busy,
    }
}

/// The mean lag of `samples`.
fn mean_lag(samples: &[Sample]) -> f64 {
    samples.iter().map(|s| s.lag as f64).sum::<f64>() / samples.len().max(1) as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    support::trace_from_env();
    tributary_tests::bench::touch_memory();
    let (source_zk, target_zk) = (ZooKeeper::start(), ZooKeeper::start());
    let (source_dir, target_dir) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let source = start_broker(&source_zk, source_dir.path());
    let target = start_broker(&target_zk, target_dir.path());
    let producers = producers();
    println!(
        "keeps up: one source broker -> the mirror ({STREAMS} streams, {producers} producer(s), seed producer settings, durable acks) -> one mirror broker, {PARTITIONS} partitions, seed flush"
    );
    // The source alone: what it takes.
    let machine_cores = tributary_tests::bench::machine_cores();
    let (started, busy_before) = (Instant::now(), tributary_tests::bench::machine_busy_ns());
    let ingest = producer_perf_rate(&source_zk, "ingest", 1024, (volume() / 1024) as u64).await;
    let ingest_busy = tributary_tests::bench::machine_busy_ns().saturating_sub(busy_before) as f64
        / 1e9
        / started.elapsed().as_secs_f64();
    println!(
        "  source ingest, producer-perf --threads {THREADS} --async, 1 KiB: {:.1} MB/s; machine busy {ingest_busy:.2} of {machine_cores} cores",
        ingest / 1e6
    );
    tributary_tests::bench::point(
        "mirror keeps up: machine busy during the source's ingest",
        &format!("{ingest_busy:.2} of {machine_cores} cores"),
    );
    // `TRIBUTARY_BENCH_ONLY=live`: the ingest and the live case alone.
    let sizes: &[usize] = match std::env::var("TRIBUTARY_BENCH_ONLY").as_deref() {
        Ok("live") => &[],
        _ => &[1024, 100],
    };
    for &size in sizes {
        let name = format!("backlog-{size}");
        let count = (volume() / size) as u64;
        producer_perf_rate(&source_zk, &name, size, count).await;
        let entry = MessageSetBuilder::entry_bytes(size) as u64;
        wait_until_served(source.port, &name, count * entry).await;
        let (copy, used) = backlog_copy(&source_zk, &target_zk, &name, size, count).await;
        let cores = used.own;
        println!(
            "  mirror copy of a {} MiB backlog of {size} B messages: {:.1} MB/s = {:.2} of the ingest; {cores:.2} cores, {:.0} MB/s per core; machine busy {:.2} of {machine_cores} cores",
            volume() >> 20,
            copy / 1e6,
            copy / ingest,
            copy / 1e6 / cores.max(1e-9),
            used.machine
        );
        tributary_tests::bench::point(
            &format!("mirror keeps up: machine busy during the copy of {size} B messages"),
            &format!("{:.2} of {machine_cores} cores", used.machine),
        );
        tributary_tests::bench::row(
            &format!("mirror keeps up: backlog of {size} B messages, {producers} producer(s)"),
            &format!("{:.0} MB/s", copy / 1e6),
            &format!(
                "source ingest, producer-perf --threads 4 --async 1 KiB, {:.0} MB/s",
                ingest / 1e6
            ),
            copy / ingest,
        );
        tributary_tests::bench::row(
            &format!("mirror keeps up: CPU per core, {size} B messages, {producers} producer(s)"),
            &format!(
                "{:.0} MB/s per core ({cores:.2} cores)",
                copy / 1e6 / cores.max(1e-9)
            ),
            &format!(
                "target {} MB/s per core",
                if size == 100 { 100 } else { 190 }
            ),
            copy / 1e6 / cores.max(1e-9) / if size == 100 { 100.0 } else { 190.0 },
        );
    }
    // Live: half the ingest rate (or `TRIBUTARY_BENCH_LIVE_PERCENT` of it), the mirror beside it.
    let percent = tributary_tests::bench::env_number("TRIBUTARY_BENCH_LIVE_PERCENT", 50);
    live_case(&source_zk, &target_zk, ingest, percent, source_dir.path()).await;
    source.stop();
    target.stop();
}

/// The live case: writers at `percent` of the `ingest` rate (bytes a second) into the source
/// (whose logs are under `logs`) while the mirror copies; prints its samples and its row.
async fn live_case(
    source_zk: &ZooKeeper,
    target_zk: &ZooKeeper,
    ingest: f64,
    percent: u64,
    logs: &std::path::Path,
) {
    let seconds = live_seconds();
    let offered = ingest * percent as f64 / 100.0;
    let share = match percent {
        50 => "half the ingest".to_string(),
        _ => format!("{percent} % of the ingest"),
    };
    let Live {
        samples,
        drain,
        stopped,
        busy,
    } = live(source_zk, target_zk, "live", offered, seconds, logs).await;
    let ran = match &stopped {
        Some((second, Stop::Lag)) => {
            format!("stopped at {second} s of {seconds}: lag past {LAG_BOUND}")
        }
        Some((second, Stop::Disk(free))) => format!(
            "stopped at {second} s of {seconds}: {:.1} GB free under the logs (free more disk, or point TMPDIR at a larger one)",
            *free as f64 / 1e9
        ),
        None => format!("{seconds} s"),
    };
    let tenth = (samples.len() / 10).max(1);
    let (early, late) = (
        mean_lag(&samples[..tenth.min(samples.len())]),
        mean_lag(&samples[samples.len().saturating_sub(tenth)..]),
    );
    let worst = samples.iter().map(|s| s.lag).max().unwrap_or(0);
    let last = samples.last();
    let per_second =
        |messages: u64| (messages as usize * 1024) as f64 / samples.len().max(1) as f64;
    let queued = per_second(last.map_or(0, |s| s.produced));
    let written = per_second(last.map_or(0, |s| s.written));
    let machine_cores = tributary_tests::bench::machine_cores();
    println!(
        "  live, {ran}, at {:.1} MB/s offered ({:.1} MB/s queued by the writers, {:.1} MB/s written to the source); machine busy {busy:.2} of {machine_cores} cores; the mirror's lag behind the source: first tenth {early:.0}, last tenth {late:.0}, worst {worst} messages; drained {drain:.1} s after the writes stopped",
        offered / 1e6,
        queued / 1e6,
        written / 1e6
    );
    for s in &samples {
        println!(
            "    lag {} of {} written ({} queued)",
            s.lag, s.written, s.produced
        );
    }
    tributary_tests::bench::point(
        "mirror keeps up: machine busy during the live case",
        &format!(
            "{busy:.2} of {machine_cores} cores; the source took {:.0} MB/s of the {:.0} offered",
            written / 1e6,
            offered / 1e6
        ),
    );
    let case = format!(
        "mirror keeps up: live at {share} ({:.0} MB/s), lag sampled each second, {ran}",
        offered / 1e6
    );
    let figure = format!(
        "lag first tenth {early:.0}, last tenth {late:.0}, worst {worst} msgs; drained in {drain:.1} s"
    );
    match stopped {
        // Cut short by the disk, the run says nothing about keeping up: no ratio.
        Some((_, Stop::Disk(_))) => tributary_tests::bench::point(&case, &figure),
        // At or below 1 the lag did not grow.
        _ => tributary_tests::bench::row(
            &case,
            &figure,
            "lag of the first tenth",
            (early + 1.0) / (late + 1.0),
        ),
    }
}
