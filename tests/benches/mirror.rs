//! Mirror throughput end to end, beside two baselines measured in the same run on the same
//! machine, for 100 B and 1 KiB messages:
//! - the **source fetch rate**: the mirror's own consumer configuration reading the same source
//!   topic as a consumer group (what the mirror could read at best);
//! - the **mirror produce rate**: the mirror's own producer configuration (async, durable acks)
//!   writing the same number of messages of the same size into the mirror cluster (what it
//!   could write at best).
//!
//! The mirror (the production engine, in process) then copies the source topic; its rate is
//! counted from its first message to the durable acknowledgement of the last, and reported as
//! a ratio of the slower baseline. Each broker runs on its own runtime (its own threads), as it
//! would in its own process; all share the machine's cores.
//!
//! Then replica mode: a replica broker copies the same topics (and a larger one) byte for byte;
//! its rate from its start until caught up, beside the same run's raw FETCH rate over the same
//! bytes.
//!
//! Then the long link: a second source broker, reached only through `tributary link-proxy`
//! (1 Gb/s each way, 100 ms round trip; the broker advertises the proxy's port), mirrored with
//! 0.7's settings (one fetch at a time per broker), with settings sized for the link, and with
//! those settings over TLS with client certificates (the broker's SSL listener behind its own
//! proxy of the same link): the rates as ratios of the link, and CPU per GB copied with TLS
//! against without.
//!
//! `cargo bench -p tributary-tests --bench mirror` (needs ZooKeeper: scripts/install-deps.sh);
//! `TRIBUTARY_BENCH_ONLY=replica` measures replica mode alone, `TRIBUTARY_BENCH_ONLY=long-link`
//! the long link alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tributary::client::{connect, Connection};
use tributary::consumer::{ConsumerConnector, Subscription};
use tributary::env::TokioEnv;
use tributary::mirror::Mirror;
use tributary::producer::{Producer, Record};
use tributary_core::config::{BrokerConfig, ConsumerConfig};
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{OffsetsRequest, ProduceRequest, Request, Response, TopicName};
use tributary_tests::zookeeper::{free_port, ZooKeeper};

mod support;
use support::{
    bench_mirror_settings, mirror_consumer_config, mirror_producer_config, properties,
    wait_until_flushed, BenchBroker,
};

/// Bytes of payload copied per size (the message count follows).
/// Bytes loaded per message size: 48 MiB, or 8 MiB in the quick run.
fn payload_bytes() -> usize {
    if tributary_tests::bench::quick() {
        8 << 20
    } else {
        48 << 20
    }
}
/// Messages per prebuilt request when the source is loaded.
const LOAD_BATCH: usize = 200;

fn topic(name: &str) -> TopicName {
    name.parse().expect("topic")
}

/// A broker of `zk`'s cluster on its own runtime, with `extra` lines of configuration.
fn start_broker(zk: &ZooKeeper, dir: &std::path::Path, extra: &str) -> BenchBroker {
    let text = format!(
        "brokerid=0\nport=0\nhostname=127.0.0.1\nlog.dir={}\nnum.partitions=2\nlog.flush.interval=100000\nlog.default.flush.interval.ms=200\n\
         log.default.flush.scheduler.interval.ms=50\nzk.connect={}\n{extra}",
        dir.display(),
        zk.connect_string()
    );
    BenchBroker::start(properties(&text, BrokerConfig::from_properties))
}

/// Writes `count` messages of `size` bytes to both partitions of `name` and waits until all
/// of it is flushed and visible.
async fn load_source(
    conn: &mut Connection<<TokioEnv as tributary::env::Env>::Stream>,
    name: &str,
    size: usize,
    count: usize,
) {
    let mut set = MessageSetBuilder::new();
    (0..LOAD_BATCH).for_each(|_| {
        set.push(vec![b's'; size]);
    });
    let set = set.build(CompressionCodec::None);
    let request = Request::MultiProduce(vec![
        ProduceRequest {
            topic: topic(name),
            partition: 0,
            messages: set.clone(),
        },
        ProduceRequest {
            topic: topic(name),
            partition: 1,
            messages: set,
        },
    ]);
    for _ in 0..count / (2 * LOAD_BATCH) {
        conn.send(&request).await.expect("load");
    }
    wait_for_end(conn, name, 2, (count / 2 * (size + 10)) as i64).await;
}

/// Waits until each of `partitions` partitions of `name` ends at `end` or later (flushed and
/// visible).
async fn wait_for_end(
    conn: &mut Connection<<TokioEnv as tributary::env::Env>::Stream>,
    name: &str,
    partitions: i32,
    end: i64,
) {
    for partition in 0..partitions {
        wait_until_flushed(conn, &topic(name), partition, end).await;
    }
}

/// The source fetch rate: a consumer group with the mirror's settings reads all `count`
/// messages (msg/s from the first message to the last).
async fn source_fetch_rate(zk: &ZooKeeper, name: &str, count: usize) -> f64 {
    let subscription = Subscription::Topics([(topic(name), 2)].into_iter().collect());
    let (consumer, streams) = ConsumerConnector::start(
        TokioEnv,
        mirror_consumer_config(zk, &format!("fetch-{name}"), "smallest"),
        subscription,
    )
    .await
    .expect("consumer");
    let consumed = Arc::new(AtomicUsize::new(0));
    let first = Arc::new(std::sync::OnceLock::<Instant>::new());
    let last = Arc::new(std::sync::OnceLock::<Instant>::new());
    let mut tasks = Vec::new();
    for mut stream in streams {
        let (consumed, first, last) = (consumed.clone(), first.clone(), last.clone());
        tasks.push(tokio::spawn(async move {
            // The other stream may wait for its timeout once everything is read: the rate is
            // taken from the first message to the last.
            while consumed.load(Ordering::Relaxed) < count {
                match stream.next().await {
                    Ok(_) => {
                        first.get_or_init(Instant::now);
                        if consumed.fetch_add(1, Ordering::Relaxed) + 1 == count {
                            last.get_or_init(Instant::now);
                        }
                    }
                    Err(_) => return,
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("stream");
    }
    let elapsed = *last.get().expect("not every message consumed")
        - *first.get().expect("no message consumed");
    assert_eq!(
        consumed.load(Ordering::Relaxed),
        count,
        "the source consumer missed messages"
    );
    consumer.shutdown().await;
    count as f64 / elapsed.as_secs_f64()
}

/// The mirror produce rate: the mirror's producer writes `count` messages of `size` bytes into
/// the mirror cluster, every one durably acknowledged.
async fn mirror_produce_rate(zk: &ZooKeeper, name: &str, size: usize, count: usize) -> f64 {
    let producer = Producer::start(TokioEnv, mirror_producer_config(zk))
        .await
        .expect("producer");
    let payload = bytes::Bytes::from(vec![b'p'; size]);
    let start = Instant::now();
    let mut deliveries = std::collections::VecDeque::new();
    for _ in 0..count {
        deliveries.push_back(
            producer
                .send(Record::new(topic(name), payload.clone()))
                .await
                .expect("queued"),
        );
        if deliveries.len() > 50_000 {
            deliveries
                .pop_front()
                .expect("delivery")
                .await
                .expect("delivered");
        }
    }
    for d in deliveries {
        d.await.expect("delivered");
    }
    let rate = count as f64 / start.elapsed().as_secs_f64();
    producer.close().await;
    rate
}

/// The mirror copies `count` messages of `name`: msg/s from its first message sent to the
/// durable acknowledgement of the last.
/// The mirror's rate (messages per second, first send to last acknowledgement) and the CPU
/// cores it used meanwhile: every thread of this process but the brokers'.
async fn mirror_rate(
    consumer: ConsumerConfig,
    target: &ZooKeeper,
    name: &str,
    count: usize,
) -> (f64, f64) {
    let (rate, cores, _) = mirror_rate_and_brokers(consumer, target, name, count).await;
    (rate, cores)
}

/// [`mirror_rate`], and the cores the brokers' threads (every broker in this process) used
/// meanwhile.
async fn mirror_rate_and_brokers(
    consumer: ConsumerConfig,
    target: &ZooKeeper,
    name: &str,
    count: usize,
) -> (f64, f64, f64) {
    let not_broker = |thread: &str| thread != tributary_tests::bench::BROKER_THREAD_NAME;
    let broker = |thread: &str| thread == tributary_tests::bench::BROKER_THREAD_NAME;
    let settings = bench_mirror_settings(consumer, target, regex_escape(name));
    let mirror = Mirror::start(TokioEnv, settings).await.expect("mirror");
    let stats = mirror.stats.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(mirror.run_until(async { drop(stopped.await) }));
    let mut first = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    while stats.acked.load(Ordering::Relaxed) < count as u64 {
        if first.is_none() && stats.sent.load(Ordering::Relaxed) > 0 {
            first = Some((
                Instant::now(),
                tributary_tests::bench::thread_cpu_ns(not_broker),
                tributary_tests::bench::thread_cpu_ns(broker),
            ));
        }
        assert!(Instant::now() < deadline, "the mirror did not finish");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (started, cpu_before, broker_cpu_before) = first.expect("no message sent");
    let elapsed = started.elapsed();
    let cpu = tributary_tests::bench::thread_cpu_ns(not_broker).saturating_sub(cpu_before);
    let broker_cpu =
        tributary_tests::bench::thread_cpu_ns(broker).saturating_sub(broker_cpu_before);
    drop(stop);
    running.await.expect("mirror task").expect("mirror run");
    assert_eq!(
        stats.acked.load(Ordering::Relaxed),
        count as u64,
        "the mirror copied more than the source held"
    );
    let seconds = elapsed.as_secs_f64();
    (
        count as f64 / seconds,
        cpu as f64 / 1e9 / seconds,
        broker_cpu as f64 / 1e9 / seconds,
    )
}

fn regex_escape(name: &str) -> String {
    name.chars()
        .flat_map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                vec![c]
            } else {
                vec!['\\', c]
            }
        })
        .collect()
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
    let source = start_broker(&source_zk, source_dir.path(), "");
    let target = start_broker(&target_zk, target_dir.path(), "");
    let source_port = source.port;
    let mut conn = connect(&TokioEnv, "127.0.0.1", source_port, Duration::from_secs(30))
        .await
        .expect("connect");
    // TRIBUTARY_BENCH_ONLY=replica: load the source and measure replica mode only;
    // TRIBUTARY_BENCH_ONLY=long-link: the mirror across the link proxy only.
    let only = std::env::var("TRIBUTARY_BENCH_ONLY").unwrap_or_default();
    if only == "long-link" {
        long_link(&source_zk, &target_zk).await;
        source.stop();
        target.stop();
        return;
    }
    let only_replica = only == "replica";
    if !only_replica {
        println!("mirror: one source broker -> the mirror (2 streams, async producer with durable acks) -> one mirror broker, over loopback");
    }
    for size in [100usize, 1024] {
        let count = (payload_bytes() / size) / (2 * LOAD_BATCH) * (2 * LOAD_BATCH);
        let name = format!("bench-{size}");
        load_source(&mut conn, &name, size, count).await;
        if only_replica {
            continue;
        }
        let fetch = source_fetch_rate(&source_zk, &name, count).await;
        let produce =
            mirror_produce_rate(&target_zk, &format!("produce-{size}"), size, count).await;
        let consumer = mirror_consumer_config(&source_zk, &format!("mirror-{name}"), "smallest");
        let (mirror, cores) = mirror_rate(consumer, &target_zk, &name, count).await;
        // The same copy with mirror.preserve.partitions (MIRROR_PRODUCE and position records),
        // measured right after.
        let mut positioned =
            mirror_consumer_config(&source_zk, &format!("positions-{name}"), "smallest");
        positioned.mirror.preserve_partitions = true;
        let (with_positions, _) = mirror_rate(positioned, &target_zk, &name, count).await;
        let mb = |rate: f64| rate * size as f64 / 1e6;
        println!("{count} messages of {size} B:");
        println!(
            "  source fetch (consumer group): {fetch:>10.0} msg/s {:>7.1} MB/s",
            mb(fetch)
        );
        println!(
            "  mirror produce (durable acks): {produce:>10.0} msg/s {:>7.1} MB/s",
            mb(produce)
        );
        println!(
            "  mirror end to end:             {mirror:>10.0} msg/s {:>7.1} MB/s  = {:.2} of source fetch, {:.2} of mirror produce, {:.2} of the slower",
            mb(mirror),
            mirror / fetch,
            mirror / produce,
            mirror / fetch.min(produce)
        );
        println!(
            "  mirror CPU:                     {cores:>10.2} cores = {:.0} MB/s per core",
            mb(mirror) / cores.max(1e-9)
        );
        tributary_tests::bench::row(
            &format!("mirror per CPU core, {size} B messages"),
            &format!(
                "{:.0} MB/s per core ({cores:.2} cores)",
                mb(mirror) / cores.max(1e-9)
            ),
            "published reference (not this run): 190 MB/s per core",
            mb(mirror) / cores.max(1e-9) / 190.0,
        );
        println!(
            "  mirror with positions:         {with_positions:>10.0} msg/s {:>7.1} MB/s  = {:.2} of the mirror without them",
            mb(with_positions),
            with_positions / mirror
        );
        tributary_tests::bench::row(
            &format!("mirror with positions (mirror.preserve.partitions), {size} B messages"),
            &format!("{:.0} MB/s", mb(with_positions)),
            &format!(
                "the same mirror without them, just before: {:.0} MB/s",
                mb(mirror)
            ),
            with_positions / mirror,
        );
        tributary_tests::bench::row(
            &format!("mirror end to end, {size} B messages"),
            &format!("{:.0} MB/s", mb(mirror)),
            &format!(
                "slower of source fetch {:.0} / mirror produce {:.0} MB/s",
                mb(fetch),
                mb(produce)
            ),
            mirror / fetch.min(produce),
        );
    }
    if !only_replica {
        long_link(&source_zk, &target_zk).await;
    }
    replica(&source_zk, &mut conn).await;
    drop(conn);
    source.stop();
    target.stop();
}

/// The topics replica mode copies: the mirror's two, and a larger one so that the copy runs
/// long enough for its rate to be its own (not its start and its last flush interval).
const REPLICA_TOPICS: [&str; 3] = ["bench-100", "bench-1024", "bench-bulk"];
/// Payload of the larger topic, in 1 KiB messages.
/// 512 MiB, or 32 MiB in the quick run.
fn bulk_bytes() -> usize {
    if tributary_tests::bench::quick() {
        32 << 20
    } else {
        512 << 20
    }
}

/// Every partition's latest offset of the replica's topics on the broker behind `conn`.
async fn ends(conn: &mut Connection<<TokioEnv as tributary::env::Env>::Stream>) -> Vec<i64> {
    let mut out = Vec::new();
    for name in REPLICA_TOPICS {
        for partition in 0..2 {
            let offsets = Request::Offsets(OffsetsRequest {
                topic: topic(name),
                partition,
                time: -1,
                max_offsets: 1,
            });
            out.push(match conn.call(&offsets).await.expect("offsets") {
                Response::Offsets(o) => o.offsets.first().copied().unwrap_or(0),
                _ => 0,
            });
        }
    }
    out
}

/// Replica mode: a replica broker copies the bench topics byte for byte; its MB/s from its
/// start until its ends equal the source's, beside the same run's raw FETCH rate over the same
/// bytes (1 MiB fetches on one connection: what copying reads, without writing it).
async fn replica(
    source_zk: &ZooKeeper,
    conn: &mut Connection<<TokioEnv as tributary::env::Env>::Stream>,
) {
    let bulk = bulk_bytes() / 1024 / (2 * LOAD_BATCH) * (2 * LOAD_BATCH);
    load_source(conn, "bench-bulk", 1024, bulk).await;
    let target = ends(conn).await;
    let total: i64 = target.iter().sum();
    // Baseline: read it all with FETCH.
    let start = Instant::now();
    for name in REPLICA_TOPICS {
        for partition in 0..2 {
            let mut offset = 0i64;
            loop {
                let fetch = Request::Fetch(tributary_core::wire::FetchRequest {
                    topic: topic(name),
                    partition,
                    offset,
                    max_bytes: 1 << 20,
                });
                let Response::Fetch(f) = conn.call(&fetch).await.expect("fetch") else {
                    panic!("fetch")
                };
                let mut entries = tributary_core::message::ShallowIter::new(&f.messages, offset);
                entries.by_ref().for_each(drop);
                let valid = entries.end().valid_bytes;
                if valid == 0 {
                    break;
                }
                offset += valid as i64;
            }
        }
    }
    let fetch = total as f64 / start.elapsed().as_secs_f64() / 1e6;
    // The loads' dirty pages written out first, so that the replica does not pay for them.
    settle_disk();
    // The replica.
    let replica_zk = ZooKeeper::start();
    let dir = tempfile::tempdir().expect("dir");
    let extra = format!(
        "replica.source.zk.connect={}\nreplica.topics.whitelist=bench-.*\nreplica.fetch.size=1048576\nreplica.fetch.backoff.ms=10\n",
        source_zk.connect_string()
    );
    let start = Instant::now();
    let replica_broker = start_broker(&replica_zk, dir.path(), &extra);
    let port = replica_broker.port;
    let mut replica_conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(30))
        .await
        .expect("connect");
    let deadline = Instant::now() + Duration::from_secs(600);
    // When the first copied bytes became visible (the broker's start, registration and the
    // source's discovery are behind it).
    let mut first_visible = None;
    loop {
        let now = ends(&mut replica_conn).await;
        if first_visible.is_none() && now.iter().any(|e| *e > 0) {
            first_visible = Some((Instant::now(), now.iter().sum::<i64>()));
        }
        if now == target {
            break;
        }
        assert!(Instant::now() < deadline, "the replica did not catch up");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let copy = total as f64 / start.elapsed().as_secs_f64() / 1e6;
    let (visible_at, visible_bytes) = first_visible.expect("nothing copied");
    let steady =
        (total - visible_bytes) as f64 / visible_at.elapsed().as_secs_f64().max(1e-6) / 1e6;
    println!("replica: one source broker -> a replica broker (byte for byte), {total} bytes of three topics (100 B, 1 KiB, 1 KiB messages), over loopback");
    println!("  source FETCH (1 MiB, one connection): {fetch:>7.1} MB/s");
    println!(
        "  replica copy (start to caught up):    {copy:>7.1} MB/s  = {:.2} of source fetch",
        copy / fetch
    );
    println!(
        "  replica copy (first bytes visible to caught up): {steady:>7.1} MB/s  = {:.2} of source fetch",
        steady / fetch
    );
    // A copy so short that most of it was visible at the first look (the quick run) has no
    // steady part to speak of: its row shows start to caught up instead.
    let (case, rate) = if visible_bytes * 2 > total {
        ("replica copy (start to caught up)", copy)
    } else {
        ("replica copy (first bytes visible to caught up)", steady)
    };
    tributary_tests::bench::row(
        case,
        &format!("{rate:.0} MB/s"),
        &format!("source FETCH {fetch:.0} MB/s"),
        rate / fetch,
    );
    drop(replica_conn);
    replica_broker.stop();
    // The other ceiling: the same bytes written to plain files as the replica writes them.
    settle_disk();
    let disk = plain_write_rate(dir.path(), usize::try_from(total).unwrap_or(0)) / 1e6;
    println!(
        "  same bytes to 6 plain files (1 MiB writes, fsync each every 200 ms): {disk:>7.1} MB/s; the replica {:.2} of it",
        rate / disk
    );
    tributary_tests::bench::row(
        &format!("{case}, against the disk"),
        &format!("{rate:.0} MB/s"),
        &format!("same bytes to plain files {disk:.0} MB/s"),
        rate / disk,
    );
}

/// Bytes per second of writing `total` bytes to six plain files (the replica's partitions) in
/// 1 MiB writes, round robin, each file synced every 200 ms (the bench brokers' flush
/// interval): what the replica's disk allows, without fetching or checking anything.
fn plain_write_rate(dir: &std::path::Path, total: usize) -> f64 {
    use std::io::Write;
    let chunk = vec![b'r'; 1 << 20];
    let mut files: Vec<std::fs::File> = (0..6)
        .map(|i| std::fs::File::create(dir.join(format!("plain-{i}.bin"))).expect("create"))
        .collect();
    let (start, mut last_sync) = (Instant::now(), Instant::now());
    let mut written = 0;
    let mut i = 0;
    while written < total {
        let n = files.len();
        files[i % n].write_all(&chunk).expect("write");
        written += chunk.len();
        i += 1;
        if last_sync.elapsed() >= Duration::from_millis(200) {
            files.iter().for_each(|f| f.sync_all().expect("fsync"));
            last_sync = Instant::now();
        }
    }
    files.iter().for_each(|f| f.sync_all().expect("fsync"));
    let rate = written as f64 / start.elapsed().as_secs_f64();
    drop(files);
    (0..6).for_each(|i| drop(std::fs::remove_file(dir.join(format!("plain-{i}.bin")))));
    rate
}

/// Writes every dirty page of the machine out (`sync`).
fn settle_disk() {
    let synced = std::process::Command::new("sync").status();
    assert!(synced.is_ok_and(|s| s.success()), "sync failed");
}

/// The long link's rate each way (1 Gb/s) and round trip.
const LINK_RATE: u64 = 125_000_000;
const LINK_ROUND_TRIP: Duration = Duration::from_millis(100);
/// Partitions of the topic mirrored across the link.
const LINK_PARTITIONS: i32 = 8;
/// Bytes loaded for the long link: 384 MiB (about 3 s at the link's rate), 48 MiB when quick.
fn link_bytes() -> usize {
    if tributary_tests::bench::quick() {
        48 << 20
    } else {
        384 << 20
    }
}

/// The mirror across a long link: a second source broker (id 1, 8 partitions) that advertises
/// a link proxy's port, loaded directly; then mirrored twice through the proxy — 0.7's settings
/// (1 MiB fetches, one fetch at a time per broker) and tuned ones (2 MiB fetches, a fetcher per
/// partition) — each rate as a ratio of the link.
async fn long_link(source_zk: &ZooKeeper, target_zk: &ZooKeeper) {
    use tributary_tools::link_proxy::{LinkProxy, LinkSpec};
    let (broker_port, proxy_port) = (free_port(), free_port());
    let (ssl_port, ssl_proxy_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let certs = tributary_tests::tls::make_certs(&dir.path().join("certs"));
    let c = certs.display();
    // Both listeners behind their own proxy (the same link spec): the SSL one requires client
    // certificates, as a source cluster's WAN listener would.
    let far = start_broker(
        source_zk,
        &dir.path().join("logs"),
        &format!(
            "brokerid=1\nport={broker_port}\nnum.partitions={LINK_PARTITIONS}\nlog.file.size=1073741824\n\
             listeners=PLAINTEXT://127.0.0.1:{broker_port},SSL://127.0.0.1:{ssl_port}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port},SSL://127.0.0.1:{ssl_proxy_port}\n\
             ssl.certificate.location={c}/broker.crt\nssl.key.location={c}/broker.key\n\
             ssl.client.auth=required\nssl.ca.location={c}/ca.crt\n"
        ),
    );
    let spec = LinkSpec::new(LINK_ROUND_TRIP, Some(LINK_RATE));
    let proxy = LinkProxy::start(
        TokioEnv,
        "127.0.0.1",
        proxy_port,
        ("127.0.0.1".to_string(), far.port),
        spec,
    )
    .await
    .expect("link proxy");
    let ssl_proxy = LinkProxy::start(
        TokioEnv,
        "127.0.0.1",
        ssl_proxy_port,
        ("127.0.0.1".to_string(), ssl_port),
        LinkSpec::new(LINK_ROUND_TRIP, Some(LINK_RATE)),
    )
    .await
    .expect("link proxy (TLS)");
    let mut conn = connect(&TokioEnv, "127.0.0.1", far.port, Duration::from_secs(30))
        .await
        .expect("connect");
    let size = 1024;
    let per_partition = link_bytes() / size / LINK_PARTITIONS as usize / LOAD_BATCH * LOAD_BATCH;
    let count = per_partition * LINK_PARTITIONS as usize;
    let name = "bench-wan";
    let mut set = MessageSetBuilder::new();
    (0..LOAD_BATCH).for_each(|_| {
        set.push(vec![b'w'; size]);
    });
    let set = set.build(CompressionCodec::None);
    let request = Request::MultiProduce(
        (0..LINK_PARTITIONS)
            .map(|partition| ProduceRequest {
                topic: topic(name),
                partition,
                messages: set.clone(),
            })
            .collect(),
    );
    for _ in 0..per_partition / LOAD_BATCH {
        conn.send(&request).await.expect("load");
    }
    let end = (per_partition / LOAD_BATCH * set.len()) as i64;
    wait_for_end(&mut conn, name, LINK_PARTITIONS, end).await;
    println!(
        "long link: {count} messages of {size} B in {LINK_PARTITIONS} partitions, mirrored through a link proxy ({} ms round trip, {} MB/s each way)",
        LINK_ROUND_TRIP.as_millis(),
        LINK_RATE / 1_000_000
    );
    let tls_keys = format!(
        "security.protocol=ssl\nssl.ca.location={c}/ca.crt\nssl.certificate.location={c}/client.crt\nssl.key.location={c}/client.key\n"
    );
    let (mut carried, mut carried_tls, mut round) = (0, 0, 0);
    // (rate MB/s, mirror cores, broker cores) of the tuned runs: plaintext, then TLS.
    let mut tuned = Vec::new();
    for (label, fetch_bytes, fetchers, tls) in [
        (
            "0.7 settings: fetch.size 1 MiB, 1 fetcher per broker",
            1 << 20,
            1,
            false,
        ),
        (
            "tuned: fetch.size 2 MiB, num.consumer.fetchers 8",
            2 << 20,
            LINK_PARTITIONS,
            false,
        ),
        (
            "tuned, over TLS with client certificates",
            2 << 20,
            LINK_PARTITIONS,
            true,
        ),
        // Again in the other order, so that neither gains from running later (warmer caches).
        (
            "tuned, over TLS with client certificates (2nd)",
            2 << 20,
            LINK_PARTITIONS,
            true,
        ),
        (
            "tuned: fetch.size 2 MiB, num.consumer.fetchers 8 (2nd)",
            2 << 20,
            LINK_PARTITIONS,
            false,
        ),
    ] {
        round += 1;
        // A group of its own each round: each copies the whole topic.
        let group = format!("mirror-wan-{round}");
        let text = format!(
            "zk.connect={}\ngroupid={group}\nautooffset.reset=smallest\nfetch.size={fetch_bytes}\nnum.consumer.fetchers={fetchers}\nsocket.buffersize=0\nqueuedchunks.max=4\nfetcher.backoff.ms=10\nconsumer.timeout.ms=5000\n{}",
            source_zk.connect_string(),
            if tls { tls_keys.as_str() } else { "" }
        );
        let consumer = properties(&text, ConsumerConfig::from_properties);
        let (rate, cores, broker_cores) =
            mirror_rate_and_brokers(consumer, target_zk, name, count).await;
        let mb = rate * size as f64 / 1e6;
        let link_mb = LINK_RATE as f64 / 1e6;
        let (crossed, through) = match tls {
            false => {
                let through = proxy.stats().downstream_bytes.load(Ordering::Relaxed);
                (through - carried, &mut carried)
            }
            true => {
                let through = ssl_proxy.stats().downstream_bytes.load(Ordering::Relaxed);
                (through - carried_tls, &mut carried_tls)
            }
        };
        *through += crossed;
        println!(
            "  {label}: {mb:>7.1} MB/s = {:.2} of the link ({cores:.2} cores mirror side, {broker_cores:.2} cores in the brokers; {} MB crossed the link)",
            mb / link_mb,
            crossed / 1_000_000
        );
        tributary_tests::bench::row(
            &format!("mirror over a 1 Gb/s, 100 ms link, {label}"),
            &format!("{mb:.0} MB/s"),
            &format!("the link, {link_mb:.0} MB/s"),
            mb / link_mb,
        );
        if label.starts_with("tuned") {
            tuned.push((tls, mb, cores, broker_cores));
        }
    }
    // TLS against plaintext, same run, same settings, each the mean of its two rounds: the
    // rate, and CPU per GB copied (core-seconds).
    let mean = |tls: bool| {
        let runs: Vec<_> = tuned.iter().filter(|r| r.0 == tls).collect();
        let n = runs.len().max(1) as f64;
        (
            runs.iter().map(|r| r.1).sum::<f64>() / n,
            runs.iter().map(|r| r.2).sum::<f64>() / n,
            runs.iter().map(|r| r.3).sum::<f64>() / n,
        )
    };
    {
        let ((plain_mb, plain_cores, plain_brokers), (tls_mb, tls_cores, tls_brokers)) =
            (mean(false), mean(true));
        tributary_tests::bench::row(
            "mirror over the long link, TLS with client certificates against plaintext (tuned, mean of 2 each)",
            &format!("{tls_mb:.0} MB/s"),
            &format!("plaintext, {plain_mb:.0} MB/s"),
            tls_mb / plain_mb,
        );
        let per_gb = |cores: f64, mb: f64| cores / mb * 1000.0;
        for (side, plain, tls) in [
            (
                "the mirror's process",
                per_gb(plain_cores, plain_mb),
                per_gb(tls_cores, tls_mb),
            ),
            (
                "the brokers",
                per_gb(plain_brokers, plain_mb),
                per_gb(tls_brokers, tls_mb),
            ),
        ] {
            println!("  CPU per GB in {side}: {plain:.2} core-s plaintext, {tls:.2} core-s TLS");
            tributary_tests::bench::row(
                &format!("CPU per GB copied across the link in {side}, TLS"),
                &format!("{tls:.2} core-s"),
                &format!("plaintext, {plain:.2} core-s"),
                tls / plain,
            );
        }
    }
    drop(conn);
    proxy.stop().await.expect("link proxy");
    ssl_proxy.stop().await.expect("link proxy (TLS)");
    far.stop();
}
