//! Client throughput over loopback, each beside a baseline measured in the same run:
//! - the async producer (100 B messages, batches of 200), without and with durable acks, beside
//!   the same messages sent as prebuilt MULTIPRODUCE requests on one connection;
//! - the consumer group (two streams) beside a plain FETCH loop over the same partitions (a
//!   topic of their own: 4,000,000 messages, 400,000 when quick);
//! - the perf tools a user measures with, each beside the raw loop it stands for against the
//!   same broker: `simple-consumer-perf` (1 MiB fetches of one partition, messages counted as
//!   0.7 counts them) beside a FETCH loop of that partition that only walks the set's entries,
//!   and `producer-perf --threads 4 --async` (1 KiB messages) beside 4 connections sending
//!   prebuilt MULTIPRODUCE requests of the same messages.
//!
//! `cargo bench -p tributary-tests --bench clients` (needs ZooKeeper: scripts/install-deps.sh);
//! `TRIBUTARY_BENCH_ONLY=consumer` runs the consumer cases alone.

use std::time::{Duration, Instant};

use tributary::client::connect;
use tributary::consumer::{ConsumerConnector, Subscription};
use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record};
use tributary_core::config::{BrokerConfig, ConsumerConfig, ProducerConfig, Properties};
use tributary_core::message::{CompressionCodec, MessageSetBuilder, ShallowIter};
use tributary_core::wire::{
    FetchRequest, OffsetsRequest, ProduceRequest, Request, Response, TopicName,
};
use tributary_tests::zookeeper::ZooKeeper;
use tributary_tools::date_format::DateFormat;
use tributary_tools::simple_perf::{simple_consumer_perf, SimplePerfOptions};

mod support;
use support::BenchBroker;

/// Messages per case: 400,000, or 100,000 in the quick run. Read once (the environment is not
/// cheap to consult in a hot loop).
fn messages() -> usize {
    static MESSAGES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MESSAGES.get_or_init(|| {
        if tributary_tests::bench::quick() {
            100_000
        } else {
            400_000
        }
    })
}
const MESSAGE_BYTES: usize = 100;
const BATCH: usize = 200;

/// Messages the consumers read: 4,000,000 (440 MB), or 400,000 in the quick run.
fn consumer_messages() -> usize {
    if tributary_tests::bench::quick() {
        400_000
    } else {
        4_000_000
    }
}

/// A prebuilt set of [`BATCH`] messages of [`MESSAGE_BYTES`] bytes `fill`.
fn set_of(fill: u8) -> bytes::Bytes {
    let mut set = MessageSetBuilder::new();
    (0..BATCH).for_each(|_| {
        set.push(vec![fill; MESSAGE_BYTES]);
    });
    set.build(CompressionCodec::None)
}

fn topic(name: &str) -> TopicName {
    name.parse().expect("topic")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    support::trace_from_env();
    tributary_tests::bench::touch_memory();
    let zk = ZooKeeper::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let text = format!(
        "brokerid=0\nport=0\nhostname=127.0.0.1\nlog.dir={}\nnum.partitions=2\nlog.flush.interval=100000\nlog.default.flush.interval.ms=200\n\
         log.default.flush.scheduler.interval.ms=50\nzk.connect={}\n{}",
        dir.path().display(),
        zk.connect_string(),
        // Extra broker settings to compare, e.g. `fetch.zero.copy=false`.
        std::env::var("TRIBUTARY_BENCH_BROKER_PROPS").unwrap_or_default()
    );
    // The broker runs on its own runtime (its own threads), as it would in its own process.
    let config = BrokerConfig::from_properties(&Properties::parse("bench", &text).expect("props"))
        .expect("config");
    let broker = BenchBroker::start(config);
    let port = broker.port;
    println!(
        "{} messages of {MESSAGE_BYTES} B, batches of {BATCH}, one broker over loopback",
        messages()
    );

    // Baseline: prebuilt MULTIPRODUCE requests on one connection.
    let set = set_of(b'x');
    let request = Request::MultiProduce(vec![
        ProduceRequest {
            topic: topic("raw"),
            partition: 0,
            messages: set.clone(),
        },
        ProduceRequest {
            topic: topic("raw"),
            partition: 1,
            messages: set,
        },
    ]);
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(30))
        .await
        .expect("connect");
    let start = Instant::now();
    for _ in 0..messages() / (2 * BATCH) {
        conn.send(&request).await.expect("send");
    }
    let raw_rate = messages() as f64 / start.elapsed().as_secs_f64();
    println!("raw MULTIPRODUCE loop:        {raw_rate:>12.0} msg/s");

    // TRIBUTARY_BENCH_ONLY=consumer: the consumer cases alone.
    let producers: &[bool] = if std::env::var("TRIBUTARY_BENCH_ONLY").is_ok_and(|v| v == "consumer")
    {
        &[]
    } else {
        &[false, true]
    };
    for &acks in producers {
        let config = format!("broker.list=0:127.0.0.1:{port}\nproducer.type=async\nbatch.size={BATCH}\nqueue.size=20000\nqueue.time=50\nqueue.enqueueTimeout.ms=-1\ndurable.acks={acks}\n");
        let producer = Producer::start(
            TokioEnv,
            ProducerConfig::from_properties(&Properties::parse("bench", &config).expect("props"))
                .expect("config"),
        )
        .await
        .expect("producer");
        let payload = bytes::Bytes::from(vec![b'y'; MESSAGE_BYTES]);
        let start = Instant::now();
        let mut deliveries = std::collections::VecDeque::new();
        for _ in 0..messages() {
            deliveries.push_back(
                producer
                    .send(Record::new(
                        topic(if acks { "acked" } else { "async" }),
                        payload.clone(),
                    ))
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
        let rate = messages() as f64 / start.elapsed().as_secs_f64();
        let name = if acks {
            "async producer, durable acks:"
        } else {
            "async producer:              "
        };
        println!(
            "{name} {rate:>12.0} msg/s  = {:.2} of the raw loop",
            rate / raw_rate
        );
        tributary_tests::bench::row(
            &format!(
                "producer, 100 B async{}",
                if acks { ", durable acks" } else { "" }
            ),
            &format!("{rate:.0} msg/s"),
            &format!("raw MULTIPRODUCE loop {raw_rate:.0} msg/s"),
            rate / raw_rate,
        );
        producer.close().await;
    }

    // Consumers over a topic of their own, larger than the producer cases' (a read of 44 MB
    // takes a few tens of ms: too short to measure), flushed and visible before they start.
    let consumed_messages = consumer_messages();
    let request = Request::MultiProduce(
        (0..2)
            .map(|partition| ProduceRequest {
                topic: topic("consume"),
                partition,
                messages: set_of(b'c'),
            })
            .collect(),
    );
    for _ in 0..consumed_messages / (2 * BATCH) {
        conn.send(&request).await.expect("send");
    }
    let mut ends = Vec::new();
    for partition in 0..2 {
        loop {
            let offsets = Request::Offsets(OffsetsRequest {
                topic: topic("consume"),
                partition,
                time: -1,
                max_offsets: 1,
            });
            let Response::Offsets(o) = conn.call(&offsets).await.expect("offsets") else {
                panic!("offsets")
            };
            let end = o.offsets.first().copied().unwrap_or(0);
            if end >= (consumed_messages / 2 * (MESSAGE_BYTES + 10)) as i64 {
                ends.push(end);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let total_bytes: i64 = ends.iter().sum();
    let start = Instant::now();
    for (partition, end) in ends.iter().enumerate() {
        let mut offset = 0i64;
        while offset < *end {
            let fetch = Request::Fetch(FetchRequest {
                topic: topic("consume"),
                partition: partition as i32,
                offset,
                max_bytes: 1 << 20,
            });
            let Response::Fetch(f) = conn.call(&fetch).await.expect("fetch") else {
                panic!("fetch")
            };
            let mut entries = ShallowIter::new(&f.messages, offset);
            let count = entries.by_ref().filter(|e| e.is_ok()).count();
            assert!(count > 0, "no progress at {offset}");
            offset += entries.end().valid_bytes as i64;
        }
    }
    let fetch_rate = total_bytes as f64 / start.elapsed().as_secs_f64() / 1e6;
    println!("{consumed_messages} messages of {MESSAGE_BYTES} B for the consumers:");
    println!("plain FETCH loop:             {fetch_rate:>12.1} MB/s");

    let config = format!("zk.connect={}\ngroupid=bench\nautooffset.reset=smallest\nfetch.size=1048576\nqueuedchunks.max=10\nfetcher.backoff.ms=10\nconsumer.timeout.ms=500\n", zk.connect_string());
    let config =
        ConsumerConfig::from_properties(&Properties::parse("bench", &config).expect("props"))
            .expect("config");
    let (consumer, streams) = ConsumerConnector::start(
        TokioEnv,
        config,
        Subscription::Topics([(topic("consume"), 2)].into_iter().collect()),
    )
    .await
    .expect("consumer");
    let start = Instant::now();
    let mut tasks = Vec::new();
    for mut stream in streams {
        // Each stream counts on its own (a counter shared per message would cost the streams
        // more than the consumer's own work) and reads the clock every 256 messages; it stops
        // at its first timeout, once everything is read.
        tasks.push(tokio::spawn(async move {
            let (mut count, mut first, mut last) = (0usize, None, None);
            while let Ok(_message) = stream.next().await {
                count += 1;
                if count == 1 {
                    first = Some(Instant::now());
                }
                if count % 256 == 0 {
                    last = Some(Instant::now());
                }
            }
            (count, first, last.or(first))
        }));
    }
    let (mut got, mut first, mut last) = (0, None::<Instant>, None::<Instant>);
    for task in tasks {
        let (count, f, l) = task.await.expect("stream");
        got += count;
        first = match (first, f) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        last = last.max(l);
    }
    let (first, last) = (
        first.expect("no message consumed"),
        last.expect("no message consumed"),
    );
    // Joining the group (registration, the first rebalance) is not consumption.
    let elapsed = (last - first).as_secs_f64();
    println!("  (joining the group took {:?})", first - start);
    assert_eq!(got, consumed_messages, "the consumer missed messages");
    let rate = total_bytes as f64 / elapsed / 1e6;
    println!(
        "consumer group (2 streams):   {rate:>12.1} MB/s  = {:.2} of the FETCH loop",
        rate / fetch_rate
    );
    tributary_tests::bench::row(
        "consumer group, 2 streams",
        &format!("{rate:.0} MB/s"),
        &format!("plain FETCH loop {fetch_rate:.0} MB/s"),
        rate / fetch_rate,
    );
    consumer.shutdown().await;
    if std::env::var("TRIBUTARY_BENCH_ONLY").map_or(true, |v| v != "consumer") {
        perf_tools(port, &ends).await;
    }
    broker.stop();
}

/// Messages of the producer-perf case and its raw loop: 1 KiB each, 400 MB (100 MB quick).
const PERF_MESSAGE_BYTES: usize = 1024;
const PERF_CONNECTIONS: usize = 4;

/// The perf tools beside their raw loops: `simple-consumer-perf` over partition 0 of the
/// consumers' topic (whose end is `ends[0]`), `producer-perf --threads 4 --async`.
async fn perf_tools(port: u16, ends: &[i64]) {
    // Reading: a raw FETCH loop that walks entries without looking into them, best of two, then
    // the tool (which decodes every message to count it), best of two.
    let end = ends[0];
    let mut raw = 0f64;
    for _ in 0..2 {
        let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(30))
            .await
            .expect("connect");
        let start = Instant::now();
        let mut offset = 0i64;
        while offset < end {
            let fetch = Request::Fetch(FetchRequest {
                topic: topic("consume"),
                partition: 0,
                offset,
                max_bytes: 1 << 20,
            });
            let Response::Fetch(f) = conn.call(&fetch).await.expect("fetch") else {
                panic!("fetch")
            };
            let mut entries = ShallowIter::new(&f.messages, offset);
            assert!(
                entries.by_ref().filter(|e| e.is_ok()).count() > 0,
                "no progress at {offset}"
            );
            offset += entries.end().valid_bytes as i64;
        }
        raw = raw.max(end as f64 / start.elapsed().as_secs_f64());
    }
    let mut tool = 0f64;
    for _ in 0..2 {
        let options = SimplePerfOptions {
            server: format!("127.0.0.1:{port}"),
            topic: topic("consume"),
            partition: 0,
            fetch_size: 1 << 20,
            from_latest: false,
            messages: None,
            report_every: None,
            hide_header: true,
            dates: DateFormat::perf_default(),
        };
        let start = Instant::now();
        let read = simple_consumer_perf(&TokioEnv, &options, &mut std::io::sink())
            .await
            .expect("simple-consumer-perf");
        assert_eq!(read.end_offset, end, "simple-consumer-perf stopped early");
        tool = tool.max(end as f64 / start.elapsed().as_secs_f64());
    }
    tool_row(
        "simple-consumer-perf, 1 MiB fetches, one partition",
        tool,
        "raw FETCH loop",
        raw,
    );

    // Sending: 4 connections of prebuilt requests (2 partitions a request, as the tool's
    // producers spread over the topic's 2), then the tool with 4 threads, async.
    let messages = messages();
    let mut set = MessageSetBuilder::new();
    (0..BATCH).for_each(|_| {
        set.push(vec![b'p'; PERF_MESSAGE_BYTES]);
    });
    let set = set.build(CompressionCodec::None);
    let request = Request::MultiProduce(
        (0..2)
            .map(|partition| ProduceRequest {
                topic: topic("perf-raw"),
                partition,
                messages: set.clone(),
            })
            .collect(),
    );
    let start = Instant::now();
    let loops: Vec<_> = (0..PERF_CONNECTIONS)
        .map(|_| {
            let request = request.clone();
            tokio::spawn(async move {
                let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(30))
                    .await
                    .expect("connect");
                for _ in 0..messages / (2 * BATCH * PERF_CONNECTIONS) {
                    conn.send(&request).await.expect("send");
                }
                // Answered only once every produce before it on this connection is appended,
                // so the loop's time covers the broker's work, not just the sending.
                let offsets = Request::Offsets(OffsetsRequest {
                    topic: topic("perf-raw"),
                    partition: 0,
                    time: -1,
                    max_offsets: 1,
                });
                conn.call(&offsets).await.expect("offsets");
            })
        })
        .collect();
    for task in loops {
        task.await.expect("raw produce loop");
    }
    let sent = (messages / (2 * BATCH * PERF_CONNECTIONS)) * 2 * BATCH * PERF_CONNECTIONS;
    let raw = (sent * PERF_MESSAGE_BYTES) as f64 / start.elapsed().as_secs_f64();
    let tool = support::producer_perf_rate(
        format!("broker.list=0:127.0.0.1:{port}"),
        topic("perf-tool"),
        sent as u64,
        PERF_MESSAGE_BYTES,
        PERF_CONNECTIONS as u32,
    )
    .await;
    tool_row(
        "producer-perf --threads 4 --async, 1 KiB",
        tool,
        "4 raw MULTIPRODUCE loops",
        raw,
    );
}

/// Prints a perf tool's rate (bytes per second) beside its raw loop's, and its table row.
fn tool_row(case: &str, tool: f64, loop_name: &str, raw: f64) {
    println!(
        "{case}: {:.1} MB/s = {:.2} of the {loop_name} ({:.1} MB/s)",
        tool / 1e6,
        tool / raw,
        raw / 1e6
    );
    tributary_tests::bench::row(
        case,
        &format!("{:.0} MB/s", tool / 1e6),
        &format!("{loop_name} {:.0} MB/s", raw / 1e6),
        tool / raw,
    );
}
