//! Broker throughput over loopback, beside the same-run throughput of a plain TCP copy between
//! two tasks (the physical ceiling here).
//!
//! - Produce: 100 B and 1 KiB messages in 200-message sets, over 1 and 4 connections; timed
//!   until the broker has appended everything (an OFFSETS request on each connection is answered
//!   only after the produce requests before it).
//! - Fetch: a flushed 1 GiB partition read front to back in 1 MiB fetches.
//!
//! Run: `cargo bench -p tributary --bench broker`. `TRIBUTARY_BENCH_MIB` sets the produce
//! volume per case (default 256) and `TRIBUTARY_BENCH_READ_MIB` the fetch volume (default 1024).

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tributary::broker::Broker;
use tributary::env::TokioEnv;
use tributary::real_fs::RealFs;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::log::{Log, LogPolicy, TopicPartition};
use tributary_core::message::{CompressionCodec, MessageSetBuilder, ShallowIter};
use tributary_core::wire::{
    FetchRequest, OffsetsRequest, ProduceRequest, Request, Response, TopicName,
};

// The benches' shared helpers, this very file; each bench uses some of them.
#[path = "../../tests/src/bench.rs"]
#[allow(dead_code)]
mod bench;
use bench::{point, quick, row, touch_memory};

const BATCH_MESSAGES: usize = 200;
const FETCH_BYTES: i32 = 1 << 20;
const COPY_CHUNK_BYTES: usize = 1 << 20;
/// Repetitions of each case (and of its ceiling); the best is reported. One in the quick run.
fn rounds() -> usize {
    if quick() {
        1
    } else {
        3
    }
}

async fn best_ceiling() -> f64 {
    best_ceiling_of(1).await
}

/// The best of `rounds()` loopback copies by `streams` pairs of tasks at once (aggregate rate).
async fn best_ceiling_of(streams: usize) -> f64 {
    let mut best = 0f64;
    for _ in 0..rounds() {
        if streams == 1 {
            // The writer on this (non-worker) thread, the reader on a worker, as every ratio
            // of this bench has always been taken.
            best = best.max(loopback_ceiling(512 << 20).await);
            continue;
        }
        let start = Instant::now();
        let copies: Vec<_> = (0..streams)
            .map(|_| tokio::spawn(loopback_ceiling(512 << 20)))
            .collect();
        for copy in copies {
            copy.await.expect("copy");
        }
        best = best.max((streams * (512 << 20)) as f64 / start.elapsed().as_secs_f64());
    }
    best
}

fn mib_from_env(name: &str, default: usize) -> usize {
    usize::try_from(bench::env_number(name, default as u64)).expect("a size in MiB")
}

/// The seed's flush policy (10,000 messages or 1 s), or with `fsync: false` one that never
/// flushes during a run, to separate the network path's cost from the disk's.
fn config(dir: &std::path::Path, fsync: bool) -> BrokerConfig {
    config_with(dir, fsync, "")
}

/// [`config`] plus `extra` properties.
fn config_with(dir: &std::path::Path, fsync: bool, extra: &str) -> BrokerConfig {
    let (messages, ms) = if fsync {
        (10_000, 1000)
    } else {
        (i32::MAX, i32::MAX)
    };
    let text = format!(
        "brokerid=0\nhostname=127.0.0.1\nport=0\nlog.dir={}\nenable.zookeeper=false\nnum.partitions=4\n\
         log.flush.interval={messages}\nlog.default.flush.interval.ms={ms}\nlog.default.flush.scheduler.interval.ms=1000\n\
         log.file.size=536870912\nsocket.send.buffer=1048576\nsocket.receive.buffer=1048576\n{extra}",
        dir.display()
    );
    BrokerConfig::from_properties(&Properties::parse("bench", &text).expect("config"))
        .expect("config")
}

fn topic() -> TopicName {
    "bench".parse().expect("topic")
}

fn set(payload_bytes: usize, k: u8) -> Bytes {
    set_of(payload_bytes, BATCH_MESSAGES, k)
}

/// A set of `messages` messages of `payload_bytes` bytes, varied by `k`.
fn set_of(payload_bytes: usize, messages: usize, k: u8) -> Bytes {
    let mut b = MessageSetBuilder::new();
    for i in 0..messages {
        b.push(
            (0..payload_bytes)
                .map(|j| (i + j) as u8 ^ k)
                .collect::<Vec<u8>>(),
        );
    }
    b.build(CompressionCodec::None)
}

/// Bytes per second of a plain TCP copy over loopback between two tasks.
async fn loopback_ceiling(total: usize) -> f64 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let reader = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut buf = vec![0u8; COPY_CHUNK_BYTES];
        let mut got = 0;
        while got < total {
            let n = s.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            got += n;
        }
    });
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let chunk = vec![7u8; COPY_CHUNK_BYTES];
    let start = Instant::now();
    let mut sent = 0;
    while sent < total {
        s.write_all(&chunk).await.expect("write");
        sent += chunk.len();
    }
    reader.await.expect("reader");
    sent as f64 / start.elapsed().as_secs_f64()
}

/// Bytes per second of writing the same sets to a plain file with the seed's fsync schedule
/// (every 10,000 messages or 1 s): the disk's ceiling for produce.
fn disk_ceiling(dir: &std::path::Path, payload: usize, total: usize, fsync: bool) -> f64 {
    use std::io::Write;
    let sets: Vec<Bytes> = (0..4).map(|k| set(payload, k)).collect();
    let path = dir.join("plain.bin");
    let mut file = std::fs::File::create(&path).expect("create");
    let (start, mut last_sync) = (Instant::now(), Instant::now());
    let (mut written, mut unsynced, mut i) = (0, 0, 0);
    while written < total {
        file.write_all(&sets[i % sets.len()]).expect("write");
        written += sets[i % sets.len()].len();
        unsynced += BATCH_MESSAGES;
        i += 1;
        if fsync && (unsynced >= 10_000 || last_sync.elapsed() >= Duration::from_secs(1)) {
            file.sync_all().expect("fsync");
            (unsynced, last_sync) = (0, Instant::now());
        }
    }
    let rate = written as f64 / start.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(path);
    rate
}

async fn produce(port: u16, partition: i32, sets: Vec<Bytes>, total: usize) -> usize {
    let mut conn = bench_connect(port).await;
    let mut sent = 0;
    let mut i = 0;
    while sent < total {
        let messages = sets[i % sets.len()].clone();
        conn.send(&Request::Produce(ProduceRequest {
            topic: topic(),
            partition,
            messages,
        }))
        .await
        .expect("produce");
        sent += sets[i % sets.len()].len();
        i += 1;
    }
    // Answered only once every produce before it on this connection has been appended.
    let request = Request::Offsets(OffsetsRequest {
        topic: topic(),
        partition,
        time: -1,
        max_offsets: 1,
    });
    conn.call(&request).await.expect("offsets");
    sent
}

async fn produce_case(port: u16, payload: usize, connections: usize, total: usize) -> f64 {
    let sets: Vec<Bytes> = (0..4).map(|k| set(payload, k)).collect();
    let start = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|c| tokio::spawn(produce(port, c as i32, sets.clone(), total / connections)))
        .collect();
    let mut bytes = 0;
    for t in tasks {
        bytes += t.await.expect("producer");
    }
    bytes as f64 / start.elapsed().as_secs_f64()
}

/// Reads `fetched-0` front to back in 1 MiB fetches on one connection, as a 0.7 fetcher does:
/// the next offset comes from the response's whole messages (each CRC-checked here).
/// Returns the bytes read.
async fn fetch_all(port: u16, end: u64) -> usize {
    let mut conn = bench_connect(port).await;
    let (mut offset, mut read) = (0u64, 0usize);
    while offset < end {
        let request = Request::Fetch(FetchRequest {
            topic: "fetched".parse().expect("topic"),
            partition: 0,
            offset: offset as i64,
            max_bytes: FETCH_BYTES,
        });
        let Response::Fetch(f) = conn.call(&request).await.expect("fetch") else {
            panic!("not a fetch response")
        };
        let mut entries = ShallowIter::new(&f.messages, offset as i64);
        entries.by_ref().for_each(drop);
        let valid = entries.end().valid_bytes as u64;
        assert!(valid > 0, "no progress at {offset}");
        read += f.messages.len();
        offset += valid;
    }
    read
}

/// CPU time (ns) spent so far by this process's tokio worker threads (the broker's; the bench
/// clients run on their own thread).
fn worker_cpu_ns() -> u64 {
    bench::thread_cpu_ns(|name| name.starts_with("tokio-r"))
}

/// Runs a client workload on a thread and runtime of its own, as a client process would: it
/// shares no worker threads or I/O driver with the broker under test.
fn on_client_thread<F, Fut, R>(work: F) -> R
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = R>,
    R: Send + 'static,
{
    std::thread::Builder::new()
        .name("bench-client".into())
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("client runtime")
                .block_on(work())
        })
        .expect("client thread")
        .join()
        .expect("client")
}

/// `readers` clients each reading the whole partition at once, on a thread of their own:
/// (bytes per second, broker CPU ns per byte served).
fn fetch_round(port: u16, end: u64, readers: usize) -> (f64, f64) {
    let cpu_before = worker_cpu_ns();
    let start = Instant::now();
    let bytes = on_client_thread(move || async move {
        let tasks: Vec<_> = (0..readers)
            .map(|_| tokio::spawn(fetch_all(port, end)))
            .collect();
        let mut bytes = 0;
        for t in tasks {
            bytes += t.await.expect("reader");
        }
        bytes
    });
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = worker_cpu_ns().saturating_sub(cpu_before) as f64;
    (bytes as f64 / elapsed, cpu / bytes as f64)
}

/// Writes a flushed partition `fetched-0` of about `bytes` bytes directly through the log.
fn prepare_fetch_partition(dir: &std::path::Path, bytes: usize) -> u64 {
    let config = config(dir, true);
    let tp = TopicPartition::new("fetched".parse().expect("topic"), 0);
    let policy = LogPolicy::for_topic(&config, &tp.topic);
    let mut log = Log::create(RealFs, &dir.join("fetched-0"), tp, policy, 0).expect("log");
    let sets: Vec<Bytes> = (0..4).map(|k| set(1024, k)).collect();
    let mut i = 0;
    while (log.written_end() as usize) < bytes {
        log.append(&sets[i % sets.len()], 0).expect("append");
        i += 1;
    }
    log.close(0).expect("close")
}

fn line(name: &str, rate: f64, ceiling: f64, messages_per_byte: f64) {
    row(
        name,
        &format!("{:.0} MB/s", rate / 1e6),
        &format!("loopback copy {:.0} MB/s", ceiling / 1e6),
        rate / ceiling,
    );
    println!(
        "{name:<40} {:>9.0} msg/s {:>7.0} MB/s {:>7.0} MB/s {:>6.2}",
        rate * messages_per_byte,
        rate / 1e6,
        ceiling / 1e6,
        rate / ceiling
    );
}

/// A client connection to the broker under test (60 s deadlines).
async fn bench_connect(
    port: u16,
) -> tributary::client::Connection<<TokioEnv as tributary::env::Env>::Stream> {
    tributary::client::connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(60))
        .await
        .expect("connect")
}

/// Whether cases tagged `name` run. `TRIBUTARY_BENCH_ONLY` lists groups (`produce`, `acks`,
/// `fetch`, `scaling`)
/// and, within produce, any of `seed flush`, `no fsync`, `100B`, `1024B`, `1conn`, `4conn`;
/// a tag whose kind (group, flush, payload, connections) the list does not mention runs.
fn selected(name: &str) -> bool {
    let Ok(only) = std::env::var("TRIBUTARY_BENCH_ONLY") else {
        return true;
    };
    let kinds: [&[&str]; 4] = [
        &["produce", "acks", "fetch", "scaling"],
        &["seed flush", "no fsync"],
        &["100B", "1024B"],
        &["1conn", "4conn"],
    ];
    let listed: Vec<&str> = only.split(',').map(str::trim).collect();
    let kind = kinds.iter().find(|k| k.contains(&name));
    listed.contains(&name) || kind.is_some_and(|k| !k.iter().any(|t| listed.contains(t)))
}

fn main() {
    touch_memory();
    let (produce_mib, fetch_mib) = if quick() { (32, 128) } else { (256, 1024) };
    let produce_bytes = mib_from_env("TRIBUTARY_BENCH_MIB", produce_mib) << 20;
    let fetch_bytes = mib_from_env("TRIBUTARY_BENCH_READ_MIB", fetch_mib) << 20;
    std::fs::create_dir_all("target").expect("target dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "{:<40} {:>15} {:>12} {:>12} {:>6}",
        "benchmark", "messages", "broker", "loopback", "ratio"
    );
    if selected("produce") {
        rt.block_on(produce_cases(produce_bytes));
    }
    if selected("acks") {
        rt.block_on(ack_cases(produce_bytes));
    }
    let fetch_dir = tempfile::tempdir_in("target").expect("temp dir");
    let prepared = (selected("fetch") || selected("scaling"))
        .then(|| prepare_fetch_partition(fetch_dir.path(), fetch_bytes));
    if let (true, Some(end)) = (selected("fetch"), prepared) {
        rt.block_on(fetch_cases(fetch_dir.path(), end, fetch_bytes));
    }
    if selected("scaling") {
        let fetch = prepared.map(|end| (fetch_dir.path(), end));
        rt.block_on(scaling_cases(produce_bytes, fetch));
    }
}

async fn produce_cases(produce_bytes: usize) {
    let dir = tempfile::tempdir_in("target").expect("temp dir");
    let broker = Broker::start(TokioEnv, config(dir.path(), true))
        .await
        .expect("broker");
    let no_fsync_dir = tempfile::tempdir_in("target").expect("temp dir");
    let no_fsync = Broker::start(TokioEnv, config(no_fsync_dir.path(), false))
        .await
        .expect("broker");
    // The machine is noisy: each case and its ceiling are measured back to back, best of
    // rounds() each, so a ratio compares like with like.
    for (flush, port) in [
        ("seed flush", broker.addr.port()),
        ("no fsync", no_fsync.addr.port()),
    ] {
        // The quick run keeps the seed's flush policy only.
        if !selected(flush) || (quick() && flush == "no fsync") {
            continue;
        }
        for payload in [100, 1024] {
            for connections in [1, 4] {
                if !selected(&format!("{payload}B")) || !selected(&format!("{connections}conn")) {
                    continue;
                }
                let mut rate = 0f64;
                for _ in 0..rounds() {
                    rate = rate.max(tokio::task::block_in_place(|| {
                        on_client_thread(move || {
                            produce_case(port, payload, connections, produce_bytes)
                        })
                    }));
                }
                let ceiling = best_ceiling().await;
                let fsync = flush == "seed flush";
                let disk_dir = dir.path().to_path_buf();
                // Best of as many rounds as the broker figure got.
                let disk = tokio::task::spawn_blocking(move || {
                    (0..rounds())
                        .map(|_| disk_ceiling(&disk_dir, payload, produce_bytes, fsync))
                        .fold(0f64, f64::max)
                })
                .await
                .expect("disk");
                line(
                    &format!("produce {payload} B x200, {connections} conn, {flush}"),
                    rate,
                    ceiling,
                    1.0 / (payload + 10) as f64,
                );
                println!(
                    "{:<40} {:>15} {:>12} {:>7.0} MB/s {:>6.2}",
                    "  (same bytes to a plain file)",
                    "",
                    "",
                    disk / 1e6,
                    rate / disk
                );
                row(
                    &format!("produce {payload} B x200, {connections} conn, {flush}"),
                    &format!("{:.0} MB/s", rate / 1e6),
                    &format!("same bytes to a plain file {:.0} MB/s", disk / 1e6),
                    rate / disk,
                );
            }
        }
    }
    no_fsync.shutdown().await.expect("shutdown");
    broker.shutdown().await.expect("shutdown");
}

/// Fetch of the prepared partition, by a broker serving checked bytes with sendfile (the
/// default) and by one re-checking every fetch (`fetch.zero.copy=false`), each started fresh
/// on the same directory; by one reader, and by two at once (two consumer groups). A fresh
/// broker has checked nothing yet, so its first pass is shown on its own. Beside each rate:
/// the broker's CPU time per GiB served.
async fn fetch_cases(dir: &std::path::Path, end: u64, fetch_bytes: usize) {
    let mib = fetch_bytes >> 20;
    let line_cpu = |name: &str, (rate, cpu): (f64, f64), ceiling: f64| {
        line(name, rate, ceiling, 1.0 / 1034.0);
        println!(
            "{:<40} {:>15.2} s CPU per GiB served",
            "",
            cpu * (1u64 << 30) as f64 / 1e9
        );
    };
    // The re-checking broker goes first: its clean shutdown leaves nothing for the next start's
    // recovery to check, so the zero-copy broker's first pass checks every byte itself.
    let mut cpu_per_gib = [0f64; 2];
    for zero_copy in [false, true] {
        let config = config_with(dir, true, &format!("fetch.zero.copy={zero_copy}\n"));
        let broker = Broker::start(TokioEnv, config).await.expect("broker");
        let port = broker.addr.port();
        let first = tokio::task::block_in_place(|| fetch_round(port, end, 1));
        let name = match zero_copy {
            true => "zero copy",
            false => "copy + check",
        };
        if zero_copy {
            line_cpu(
                &format!("fetch {mib} MiB, first pass after start"),
                first,
                best_ceiling().await,
            );
        }
        for readers in [1, 2] {
            let mut best = (0f64, 0f64);
            for _ in 0..rounds() {
                let round = tokio::task::block_in_place(|| fetch_round(port, end, readers));
                if round.0 > best.0 {
                    best = round;
                }
            }
            // Several readers compare with as many copies at once.
            let ceiling = best_ceiling_of(readers).await;
            line_cpu(
                &format!("fetch {mib} MiB, {name}, {readers} reader(s)"),
                best,
                ceiling,
            );
            if readers == 1 {
                cpu_per_gib[usize::from(zero_copy)] = best.1 * (1u64 << 30) as f64 / 1e9;
            }
        }
        broker.shutdown().await.expect("shutdown");
    }
    let [copying, zero_copy] = cpu_per_gib;
    // Higher is better here too: how many times less CPU zero copy needs per GiB.
    row(
        "fetch: broker CPU per GiB, copy + check / zero copy",
        &format!("zero copy {zero_copy:.2} s"),
        &format!("copy + check {copying:.2} s"),
        copying / zero_copy,
    );
}

/// Partitions of each point of the recovery curve (the quick run stops at 1,000), and
/// segments in each partition.
fn recovery_shapes() -> &'static [usize] {
    if quick() {
        &[1, 10, 100, 1000]
    } else {
        &[1, 10, 100, 1000, 10_000]
    }
}
const RECOVERY_SEGMENTS: usize = 3;

/// The produce curves: (partitions, connections, payload bytes) of each point. Partitions
/// 1 to 10,000 (4 connections, 1 KiB), connections 1 to 64 (100 partitions, 1 KiB), messages
/// 100 B to 100 KiB (100 partitions, 4 connections). The quick run leaves 10,000 partitions out
/// (creating them takes seconds).
fn produce_curve() -> Vec<(usize, usize, usize)> {
    let mut points = Vec::new();
    for partitions in [1, 10, 100, 1000, 10_000] {
        if !(quick() && partitions == 10_000) {
            points.push((partitions, 4, 1024));
        }
    }
    for connections in [1, 16, 64] {
        points.push((100, connections, 1024));
    }
    for payload in [100, 10 * 1024, 100 * 1024] {
        points.push((100, 4, payload));
    }
    points
}

/// Messages in each produce request of a curve's point: 200 (0.7's batch), fewer for large
/// messages so that a request stays near 200 KiB.
fn curve_batch(payload: usize) -> usize {
    (200 * 1024 / payload).clamp(1, BATCH_MESSAGES)
}

/// How cost grows with work: produce over more partitions, more connections and larger
/// messages (with the broker's CPU per GiB, which includes the flush scheduler's rounds), broker
/// start (recovery) time from 1 to 10,000 partitions, and memory with many idle connections or
/// a fetch backlog. The partitions curve is reported against the 100-partition rate of the
/// same run, the others against the loopback copy.
async fn scaling_cases(produce_bytes: usize, fetch: Option<(&std::path::Path, u64)>) {
    let dir = tempfile::tempdir_in("target").expect("temp dir");
    let extra = "topic.partition.count.map=scale-1:1,scale-10:10,scale-100:100,scale-1000:1000,scale-10000:10000\n";
    let broker = Broker::start(TokioEnv, config_with(dir.path(), true, extra))
        .await
        .expect("broker");
    let port = broker.addr.port();
    let ceiling = best_ceiling().await;
    let mut by_partitions = Vec::new();
    for (partitions, connections, payload) in produce_curve() {
        let topic: TopicName = format!("scale-{partitions}").parse().expect("topic");
        // Creating a partition (its directory and first segment, each made durable) is a
        // one-time cost: timed on its own, before the produce rate is measured.
        let (created, (rss_before, _)) = (Instant::now(), bench::rss());
        let new = tokio::task::block_in_place(|| {
            let topic = topic.clone();
            on_client_thread(move || create_partitions(port, topic, partitions))
        });
        if new {
            let secs = created.elapsed().as_secs_f64();
            // What an idle partition holds (its log, segment, index and file handle; the
            // broker and the client are in this process, the client holds nothing per
            // partition once its requests are answered).
            let per_partition =
                bench::rss().0.saturating_sub(rss_before) as f64 / partitions as f64;
            println!(
                "scaling: create {partitions} partitions (first produce to each)   {:.3} s, {:.2} ms each, {:.1} KiB RSS each",
                secs,
                secs * 1000.0 / partitions as f64,
                per_partition / 1024.0
            );
            point(
                &format!("scaling: create {partitions} partitions, per partition"),
                &format!("{:.2} ms", secs * 1000.0 / partitions as f64),
            );
            if partitions >= 1000 {
                point(
                    &format!("scaling: RSS per idle partition, {partitions} created"),
                    &format!("{:.1} KiB", per_partition / 1024.0),
                );
            }
        }
        let cpu_before = worker_cpu_ns();
        let start = Instant::now();
        let bytes = tokio::task::block_in_place(|| {
            on_client_thread(move || {
                spread_produce(port, topic, partitions, connections, payload, produce_bytes)
            })
        });
        let rate = bytes as f64 / start.elapsed().as_secs_f64();
        let cpu = worker_cpu_ns().saturating_sub(cpu_before) as f64 / bytes as f64;
        let size = match payload {
            100 => "100 B".to_string(),
            p => format!("{} KiB", p / 1024),
        };
        let name = format!("scaling: produce {size}, {partitions} partitions, {connections} conn");
        println!(
            "{name:<40} {:>9.0} msg/s {:>7.0} MB/s {:>7.0} MB/s {:>6.2}  {:.2} s broker CPU per GiB",
            rate / (payload + 10) as f64,
            rate / 1e6,
            ceiling / 1e6,
            rate / ceiling,
            cpu * (1u64 << 30) as f64 / 1e9
        );
        if connections == 4 && payload == 1024 {
            by_partitions.push((name, rate));
        } else {
            row(
                &name,
                &format!("{:.0} MB/s", rate / 1e6),
                &format!("loopback copy {:.0} MB/s", ceiling / 1e6),
                rate / ceiling,
            );
        }
    }
    // The partitions curve, each point against the 100-partition rate.
    let hundred = by_partitions
        .iter()
        .find(|(name, _)| name.contains(" 100 partitions"))
        .map(|(_, rate)| *rate)
        .expect("the 100-partition point");
    for (name, rate) in &by_partitions {
        row(
            name,
            &format!("{:.0} MB/s", rate / 1e6),
            &format!("100 partitions {:.0} MB/s", hundred / 1e6),
            rate / hundred,
        );
    }
    idle_connections(port).await;
    if let Some((dir, end)) = fetch {
        fetch_backlog_memory(dir, end).await;
    }
    broker.shutdown().await.expect("shutdown");
    for &partitions in recovery_shapes() {
        tokio::task::block_in_place(|| recovery_case(partitions));
    }
}

/// Produces one small message to every partition of `topic` not produced to yet (so each is
/// created), on one connection; `false` when the topic's partitions already existed.
async fn create_partitions(port: u16, topic: TopicName, partitions: usize) -> bool {
    static DONE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    {
        let mut done = DONE.lock().expect("created topics");
        if done.contains(&topic.to_string()) {
            return false;
        }
        done.push(topic.to_string());
    }
    let mut conn = bench_connect(port).await;
    let one = {
        let mut b = MessageSetBuilder::new();
        b.push(&b"create"[..]);
        b.build(CompressionCodec::None)
    };
    for partition in 0..partitions {
        let request = Request::Produce(ProduceRequest {
            topic: topic.clone(),
            partition: partition as i32,
            messages: one.clone(),
        });
        conn.send(&request).await.expect("produce");
    }
    let request = Request::Offsets(OffsetsRequest {
        topic,
        partition: partitions as i32 - 1,
        time: -1,
        max_offsets: 1,
    });
    conn.call(&request).await.expect("offsets");
    true
}

/// `connections` connections producing `total` bytes of sets of `payload`-byte messages
/// ([`curve_batch`] a set) to `partitions` partitions of `topic`, each connection cycling over
/// its share of them.
async fn spread_produce(
    port: u16,
    topic: TopicName,
    partitions: usize,
    connections: usize,
    payload: usize,
    total: usize,
) -> usize {
    let sets: Vec<Bytes> = (0..4)
        .map(|k| set_of(payload, curve_batch(payload), k))
        .collect();
    let tasks: Vec<_> = (0..connections)
        .map(|c| {
            let (topic, sets) = (topic.clone(), sets.clone());
            tokio::spawn(async move {
                let mut conn = bench_connect(port).await;
                let mine: Vec<usize> = (c..partitions.max(connections))
                    .step_by(connections)
                    .map(|p| p % partitions)
                    .collect();
                let (mut sent, mut i) = (0, 0);
                while sent < total / connections {
                    let messages = sets[i % sets.len()].clone();
                    sent += messages.len();
                    let partition = mine[i % mine.len()] as i32;
                    let request = Request::Produce(ProduceRequest {
                        topic: topic.clone(),
                        partition,
                        messages,
                    });
                    conn.send(&request).await.expect("produce");
                    i += 1;
                }
                // Answered only once every produce before it on this connection is appended.
                let request = Request::Offsets(OffsetsRequest {
                    topic,
                    partition: mine[0] as i32,
                    time: -1,
                    max_offsets: 1,
                });
                conn.call(&request).await.expect("offsets");
                sent
            })
        })
        .collect();
    let mut bytes = 0;
    for t in tasks {
        bytes += t.await.expect("producer");
    }
    bytes
}

/// Memory per idle connection: 1,000 connections opened and held (both ends are in this
/// process, so the figure covers the client side too).
async fn idle_connections(port: u16) {
    const CONNECTIONS: usize = 1000;
    /// The bound stated for one idle connection: its task, its 4 KiB read buffer, bookkeeping.
    const BOUND_BYTES: f64 = 64.0 * 1024.0;
    let (before, _) = bench::rss();
    let mut held = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        held.push(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect"),
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (after, _) = bench::rss();
    let per = after.saturating_sub(before) as f64 / CONNECTIONS as f64;
    println!(
        "{:<40} {:>15.1} KiB RSS per idle connection (bound 64 KiB)",
        "scaling: 1,000 idle connections",
        per / 1024.0
    );
    row(
        "scaling: RSS per idle connection, 1,000 held",
        &format!("{:.1} KiB", per / 1024.0),
        "stated bound 64 KiB",
        per / BOUND_BYTES,
    );
    drop(held);
}

/// Peak memory while 16 consumers read the prepared partition at once, from a broker started
/// fresh on it: nothing is checked yet, so most answers are read and checked through memory
/// (the worst case; bytes already checked would go out as file ranges and hold nothing).
async fn fetch_backlog_memory(dir: &std::path::Path, end: u64) {
    const READERS: usize = 16;
    /// Stated bound on the peak growth: the readers' 1 MiB responses (each held while
    /// decoded, twice over at most) plus 32 MiB for the broker.
    const BOUND_BYTES: f64 = (READERS * 2 + 32) as f64 * 1048576.0;
    let broker = Broker::start(TokioEnv, config(dir, true))
        .await
        .expect("broker");
    let port = broker.addr.port();
    // Writing 5 to clear_refs resets the peak (VmHWM) to the current resident set.
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
    let (before, _) = bench::rss();
    let (rate, _) = tokio::task::block_in_place(|| fetch_round(port, end, READERS));
    let (_, peak) = bench::rss();
    let growth = peak.saturating_sub(before) as f64;
    println!(
        "{:<40} {:>15.0} MiB peak RSS growth, {:.0} MB/s (bound {:.0} MiB)",
        format!("scaling: {READERS} readers of {} MiB", end >> 20),
        growth / 1048576.0,
        rate / 1e6,
        BOUND_BYTES / 1048576.0
    );
    row(
        &format!(
            "scaling: peak RSS growth, {READERS} readers of the {} MiB partition",
            end >> 20
        ),
        &format!("{:.0} MiB", growth / 1048576.0),
        &format!("stated bound {:.0} MiB", BOUND_BYTES / 1048576.0),
        growth / BOUND_BYTES,
    );
    broker.shutdown().await.expect("shutdown");
}

/// Broker start (recovery) with `partitions` partitions of 3 segments each: after a clean
/// shutdown, after a crash with the recovery checkpoint, and after a crash without it; beside
/// reading every segment byte once with plain 1 MiB preads in the same run. The logs are
/// written without flushes (each is made durable once, at its close): only the start is timed.
fn recovery_case(partitions: usize) {
    use tributary::logs::Logs;
    use tributary_core::log::{CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE};
    let dir = tempfile::tempdir_in("target").expect("temp dir");
    let segment_bytes = if quick() { 16 << 10 } else { 64 << 10 };
    let extra = format!("log.file.size={segment_bytes}\n");
    let config = config_with(dir.path(), true, &extra);
    let writing = config_with(dir.path(), false, &extra);
    let sets: Vec<Bytes> = (0..4).map(small_set).collect();
    for p in 0..partitions {
        let tp = TopicPartition::new("recovered".parse().expect("topic"), p as u32);
        let policy = LogPolicy::for_topic(&writing, &tp.topic);
        let path = dir.path().join(format!("recovered-{p}"));
        let mut log = Log::create(RealFs, &path, tp, policy, 0).expect("log");
        let mut i = 0;
        while log.written_end()
            < (RECOVERY_SEGMENTS as u64 * segment_bytes as u64) - segment_bytes as u64 / 2
        {
            log.append(&sets[i % sets.len()], 0).expect("append");
            i += 1;
        }
        log.close(0).expect("close");
    }
    // A clean close writes the checkpoint and the marker; keep both to put back per case.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let open = |config: BrokerConfig| {
        let start = Instant::now();
        let (logs, _) = Logs::open(RealFs, config, 0).expect("open");
        (start.elapsed().as_secs_f64(), std::sync::Arc::new(logs))
    };
    let (_, logs) = open(config.clone());
    rt.block_on(tributary::logs::close(&TokioEnv, &logs, 0, true))
        .expect("close");
    drop(logs);
    let marker = dir.path().join(CLEAN_SHUTDOWN_FILE);
    let checkpoint = dir.path().join(CHECKPOINT_FILE);
    let checkpoint_bytes = std::fs::read(&checkpoint).expect("checkpoint");
    let plain = read_every_segment(dir.path());
    for (name, keep_marker, keep_checkpoint) in [
        ("clean shutdown", true, true),
        ("crash, with checkpoint", false, true),
        ("crash, no checkpoint", false, false),
    ] {
        std::fs::write(&checkpoint, &checkpoint_bytes).expect("checkpoint");
        if keep_marker {
            std::fs::write(&marker, b"").expect("marker");
        } else if marker.exists() {
            std::fs::remove_file(&marker).expect("remove the clean-shutdown marker");
        }
        if !keep_checkpoint {
            std::fs::remove_file(&checkpoint).expect("remove checkpoint");
        }
        let (seconds, logs) = open(config.clone());
        drop(logs);
        let case = format!(
            "scaling: broker start, {partitions} partitions x {RECOVERY_SEGMENTS} segments, {name}"
        );
        println!(
            "{case:<40} {:>10.3} s (plain read of every segment {plain:.3} s)",
            seconds
        );
        row(
            &case,
            &format!("{seconds:.3} s"),
            &format!("plain read of every segment {plain:.3} s"),
            plain / seconds,
        );
    }
}

/// Seconds to read every file of every partition directory under `dir` once, in 1 MiB preads.
fn read_every_segment(dir: &std::path::Path) -> f64 {
    let start = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let partitions = std::fs::read_dir(dir).expect("list").flatten();
    for partition in partitions.filter(|e| e.path().is_dir()) {
        for segment in std::fs::read_dir(partition.path()).expect("list").flatten() {
            let file = std::fs::File::open(segment.path()).expect("open");
            let mut at = 0;
            while let n @ 1.. =
                std::os::unix::fs::FileExt::read_at(&file, &mut buf, at).expect("read")
            {
                at += n as u64;
            }
        }
    }
    start.elapsed().as_secs_f64()
}

/// A set of 20 messages of 1 KiB, so that many fill a small segment.
fn small_set(k: u8) -> Bytes {
    let mut b = MessageSetBuilder::new();
    for i in 0..20usize {
        b.push((0..1024).map(|j| (i + j) as u8 ^ k).collect::<Vec<u8>>());
    }
    b.build(CompressionCodec::None)
}

/// Connections of the acknowledged-produce cases.
const ACK_CONNECTIONS: usize = 16;

/// Acknowledged produce (ACKED_PRODUCE: answered once the set is flushed, with group commit)
/// of 1 KiB x200 sets from 16 connections to 4 partitions: flat out, beside unacknowledged
/// produce flat out in the same run; then at a fixed offered load, with each acknowledgement's
/// latency (p50, p99).
async fn ack_cases(produce_bytes: usize) {
    let dir = tempfile::tempdir_in("target").expect("temp dir");
    let broker = Broker::start(TokioEnv, config(dir.path(), true))
        .await
        .expect("broker");
    let port = broker.addr.port();
    let start = Instant::now();
    let sent = tokio::task::block_in_place(|| {
        on_client_thread(move || {
            spread_produce(port, topic(), 4, ACK_CONNECTIONS, 1024, produce_bytes)
        })
    });
    let unacked = sent as f64 / start.elapsed().as_secs_f64();
    let (acked, latencies) = tokio::task::block_in_place(|| {
        on_client_thread(move || acked_load(port, produce_bytes, None))
    });
    report_acks(
        "acked produce 1 KiB x200, 16 conn, flat out",
        acked,
        &latencies,
        &format!("unacknowledged produce {:.0} MB/s", unacked / 1e6),
        acked / unacked,
    );
    // A fixed offered load of half what acknowledged produce reached flat out.
    let offered = acked / 2.0;
    let (reached, latencies) = tokio::task::block_in_place(|| {
        on_client_thread(move || acked_load(port, produce_bytes / 2, Some(offered)))
    });
    report_acks(
        &format!("acked produce at {:.0} MB/s offered", offered / 1e6),
        reached,
        &latencies,
        &format!("offered {:.0} MB/s", offered / 1e6),
        reached / offered,
    );
    broker.shutdown().await.expect("shutdown");
}

/// Prints an acknowledged-produce case: its rate, the p50 and p99 of its sorted `latencies`,
/// and its row beside `ceiling`.
fn report_acks(case: &str, rate: f64, latencies: &[Duration], ceiling: &str, ratio: f64) {
    let percentile = |p: f64| {
        let at = ((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(at).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    let figure = format!(
        "{:.0} MB/s, ack p50 {:.1} ms p99 {:.1} ms",
        rate / 1e6,
        percentile(0.5),
        percentile(0.99)
    );
    println!("{case:<40} {figure} ({ceiling})");
    row(case, &figure, ceiling, ratio);
}

/// 16 connections each sending acknowledged 1 KiB x200 sets, one at a time (the next after the
/// previous one's acknowledgement), `total` bytes in all; paced to `offered` bytes per second
/// when given. Returns (bytes per second reached, every acknowledgement's latency, sorted).
async fn acked_load(port: u16, total: usize, offered: Option<f64>) -> (f64, Vec<Duration>) {
    let sets: Vec<Bytes> = (0..4).map(|k| set(1024, k)).collect();
    let per_connection = total / ACK_CONNECTIONS;
    let interval = offered
        .map(|rate| Duration::from_secs_f64(sets[0].len() as f64 * ACK_CONNECTIONS as f64 / rate));
    let start = Instant::now();
    let tasks: Vec<_> = (0..ACK_CONNECTIONS)
        .map(|c| {
            let sets = sets.clone();
            tokio::spawn(async move {
                let mut conn = bench_connect(port).await;
                let (mut sent, mut i, mut latencies) = (0, 0, Vec::new());
                let mut next = tokio::time::Instant::now();
                while sent < per_connection {
                    if let Some(interval) = interval {
                        tokio::time::sleep_until(next).await;
                        next += interval;
                    }
                    let messages = sets[i % sets.len()].clone();
                    sent += messages.len();
                    let request = Request::AckedProduce(vec![ProduceRequest {
                        topic: topic(),
                        partition: (c % 4) as i32,
                        messages,
                    }]);
                    let asked = Instant::now();
                    let Response::AckedProduce(r) = conn.call(&request).await.expect("ack") else {
                        panic!("not an acknowledgement")
                    };
                    assert!(r.acks.iter().all(|a| a.error.code() == 0), "refused: {r:?}");
                    latencies.push(asked.elapsed());
                    i += 1;
                }
                (sent, latencies)
            })
        })
        .collect();
    let (mut bytes, mut latencies) = (0, Vec::new());
    for t in tasks {
        let (sent, l) = t.await.expect("producer");
        bytes += sent;
        latencies.extend(l);
    }
    latencies.sort();
    (bytes as f64 / start.elapsed().as_secs_f64(), latencies)
}
