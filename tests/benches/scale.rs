//! Many partitions, end to end against real ZooKeepers:
//! - **mirror at scale:** the same bytes (1 KiB messages) spread over 1, 10, 100, 1,000 and
//!   10,000 source partitions (topics of 10 partitions each; the 1-partition shape is one
//!   topic of one), mirrored by the production engine into a second cluster; each rate beside
//!   the same mirror's rate on 10 partitions, in this run. The mirror commits every second
//!   meanwhile; its stop (a final commit of every partition) is timed too.
//! - **replica at scale:** a replica broker copies the shapes of 10, 100 and 1,000 partitions,
//!   byte for byte; each rate beside its rate on the 10 partitions of one topic.
//! - **a new topic among many:** once the largest shape is mirrored, one message to a new
//!   topic, timed from the source's answer to the mirror's acknowledgement.
//! - **a consumer group rebalancing many partitions:** three members join one after another
//!   over the largest shape: from each arrival to every partition owned by exactly one member.
//! - **registration:** the source broker restarted on all of it: from its start to every topic
//!   registered in ZooKeeper.
//!
//! `cargo bench -p tributary-tests --bench scale` (needs ZooKeeper: scripts/install-deps.sh);
//! `TRIBUTARY_BENCH_QUICK=1` stops at 1,000 partitions (and leaves the replica's 1,000 out). The mirror cluster's topics are created
//! before each mirror run (timed on its own), so the rates compare steady copying.
//! `TRIBUTARY_BENCH_SHAPES=10,10000` and `TRIBUTARY_BENCH_REPLICA_SHAPES=` (empty: none) run
//! chosen shapes alone; `TRIBUTARY_BENCH_SHAPE_MIB=1024` gives each shape that many MiB.
//! `TRIBUTARY_BENCH_WARM_ZOOKEEPER=1` sends both ZooKeepers the transactions a busy mirror
//! sends before anything is measured: fresh JVMs otherwise compile ZooKeeper's paths during the
//! first shape that commits thousands of offsets, which a running cluster did long ago.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tributary::client::connect;
use tributary::consumer::{ConsumerConnector, Subscription};
use tributary::coordination::pipeline::{pipelined_all, REQUESTS_IN_FLIGHT};
use tributary::coordination::zk::ZkCoordination;
use tributary::coordination::{
    transaction_runs, CoordError, Coordination, NodeKind, TRANSACTION_WRITES_MAX,
};
use tributary::env::TokioEnv;
use tributary::mirror::Mirror;
use tributary_core::config::{BrokerConfig, ZkConnect};
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{OffsetsRequest, ProduceRequest, Request, TopicName};
use tributary_core::zk_layout::{broker_id_path, broker_topic_partitions_path, BROKER_TOPICS_PATH};
use tributary_tests::bench::{point, quick, row, rss};
use tributary_tests::zookeeper::{Served, ZooKeeper};

mod support;
use support::{
    bench_mirror_settings, mirror_consumer_config, properties, wait_until_flushed, BenchBroker,
    Conn,
};

/// Payload of each message.
const SIZE: usize = 1024;
/// Partitions of each topic (`num.partitions` of the source broker).
const PER_TOPIC: usize = 10;
/// `num.partitions` of the mirror cluster's broker.
const TARGET_PARTITIONS: i32 = 2;
/// Partitions produced to in one request while loading.
const LOAD_FANOUT: usize = 100;
/// Most payload bytes a load request carries.
const LOAD_REQUEST_BYTES: usize = 32 << 20;

/// Shapes named by the environment variable `name` (a comma-separated list of partition
/// counts, possibly empty), to run some cases alone; `None` when it is not set.
fn shapes_from_env(name: &str) -> Option<Vec<usize>> {
    let listed = std::env::var(name).ok()?;
    Some(
        listed
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}: {s:?} is not a partition count"))
            })
            .collect(),
    )
}

/// Source partitions of each shape; the first is the baseline (`TRIBUTARY_BENCH_SHAPES`
/// overrides them).
fn shapes() -> Vec<usize> {
    if let Some(shapes) = shapes_from_env("TRIBUTARY_BENCH_SHAPES") {
        assert!(!shapes.is_empty(), "TRIBUTARY_BENCH_SHAPES names no shape");
        return shapes;
    }
    if quick() {
        vec![10, 1, 100, 1000]
    } else {
        vec![10, 1, 100, 1000, 10_000]
    }
}

/// The shapes the replica copies; the first is the baseline. (10,000 partitions are left out:
/// the replica took over 9 minutes to copy that shape's 128 MiB — docs/performance.md.)
fn replica_shapes() -> Vec<usize> {
    if let Some(shapes) = shapes_from_env("TRIBUTARY_BENCH_REPLICA_SHAPES") {
        return shapes;
    }
    if quick() {
        vec![10, 100]
    } else {
        vec![10, 100, 1000]
    }
}

/// Topics of a shape of `partitions` and partitions of each (one topic of one partition for the
/// shape of 1).
fn layout(partitions: usize) -> (usize, usize) {
    (partitions.div_ceil(PER_TOPIC), partitions.min(PER_TOPIC))
}

/// Bytes of payload each shape carries (`TRIBUTARY_BENCH_SHAPE_MIB` MiB when set).
fn shape_bytes() -> usize {
    if let Ok(mib) = std::env::var("TRIBUTARY_BENCH_SHAPE_MIB") {
        let mib: usize = mib
            .parse()
            .unwrap_or_else(|_| panic!("TRIBUTARY_BENCH_SHAPE_MIB={mib} is not a count of MiB"));
        return mib << 20;
    }
    if quick() {
        16 << 20
    } else {
        128 << 20
    }
}

fn topic(name: &str) -> TopicName {
    name.parse().expect("topic")
}

fn prefix(partitions: usize) -> String {
    format!("p{partitions}-")
}

fn broker_config(zk: &ZooKeeper, dir: &std::path::Path, partitions: usize) -> BrokerConfig {
    broker_config_with(zk, dir, partitions, "brokerid=0\n")
}

/// [`broker_config`] with `extra` lines (which carry the broker id).
fn broker_config_with(
    zk: &ZooKeeper,
    dir: &std::path::Path,
    partitions: usize,
    extra: &str,
) -> BrokerConfig {
    let text = format!(
        "port=0\nhostname=127.0.0.1\nlog.dir={}\nnum.partitions={partitions}\nlog.flush.interval=100000\n\
         log.default.flush.interval.ms=200\nlog.default.flush.scheduler.interval.ms=50\nzk.connect={}\n{extra}",
        dir.display(),
        zk.connect_string(),
    );
    properties(&text, BrokerConfig::from_properties)
}

/// Every partition of a shape of `partitions`: (topic, partition).
fn partitions_of(partitions: usize) -> Vec<(TopicName, i32)> {
    let (topics, each) = layout(partitions);
    (0..topics)
        .flat_map(|t| {
            let name = topic(&format!("{}{t}", prefix(partitions)));
            (0..each as i32).map(move |p| (name.clone(), p))
        })
        .collect()
}

/// Loads `per_partition` messages into every partition of the shape, then waits until each is
/// flushed and visible; returns the message count.
async fn load(conn: &mut Conn, partitions: usize, per_partition: usize) -> usize {
    let set_of = |messages: usize| {
        let mut b = MessageSetBuilder::new();
        (0..messages).for_each(|_| {
            b.push(vec![b's'; SIZE]);
        });
        b.build(CompressionCodec::None)
    };
    // A partition's messages go in sets of at most LOAD_REQUEST_BYTES (the broker closes a
    // connection whose request is over `max.socket.request.bytes`, 100 MiB: the shape of one
    // partition holds 128 MiB), and a request carries as many partitions' sets as fit.
    let per_set = per_partition.clamp(1, LOAD_REQUEST_BYTES / (SIZE + 10));
    let mut sets = vec![set_of(per_set); per_partition / per_set];
    if !per_partition.is_multiple_of(per_set) {
        sets.push(set_of(per_partition % per_set));
    }
    let all = partitions_of(partitions);
    let fanout = (LOAD_REQUEST_BYTES / sets[0].len().max(1)).clamp(1, LOAD_FANOUT);
    for set in &sets {
        for chunk in all.chunks(fanout) {
            let request = Request::MultiProduce(
                chunk
                    .iter()
                    .map(|(topic, partition)| ProduceRequest {
                        topic: topic.clone(),
                        partition: *partition,
                        messages: set.clone(),
                    })
                    .collect(),
            );
            conn.send(&request).await.expect("load");
        }
    }
    let end = (per_partition * (SIZE + 10)) as i64;
    for (topic, partition) in &all {
        wait_until_flushed(conn, topic, *partition, end).await;
    }
    all.len() * per_partition
}

/// Creates every topic of the shape in the mirror cluster (one small message to each of its
/// `TARGET_PARTITIONS` partitions), so that the mirror's rate is its steady rate, not the
/// mirror cluster's one-time cost of creating hundreds of topics (timed and reported apart).
async fn precreate(conn: &mut Conn, partitions: usize) -> f64 {
    let start = Instant::now();
    let one = {
        let mut b = MessageSetBuilder::new();
        b.push(&b"precreated"[..]);
        b.build(CompressionCodec::None)
    };
    let topics: Vec<TopicName> = (0..layout(partitions).0)
        .map(|t| topic(&format!("{}{t}", prefix(partitions))))
        .collect();
    for chunk in topics.chunks(LOAD_FANOUT) {
        let request = Request::MultiProduce(
            chunk
                .iter()
                .flat_map(|topic| {
                    (0..TARGET_PARTITIONS).map(|partition| ProduceRequest {
                        topic: topic.clone(),
                        partition,
                        messages: one.clone(),
                    })
                })
                .collect(),
        );
        conn.send(&request).await.expect("precreate");
    }
    // Answered once every produce before it on this connection is appended.
    let last = topics.last().expect("topics").clone();
    let request = Request::Offsets(OffsetsRequest {
        topic: last,
        partition: TARGET_PARTITIONS - 1,
        time: -1,
        max_offsets: 1,
    });
    conn.call(&request).await.expect("offsets");
    start.elapsed().as_secs_f64()
}

/// What one mirror run measured.
struct MirrorRun {
    /// Messages per second, first sent to last acknowledged.
    rate: f64,
    /// Partition commits made while copying.
    commits: u64,
    /// Process RSS growth from before the mirror started to when it had caught up.
    rss_growth: u64,
    /// Seconds the stop took (the final commit of every partition).
    stop_seconds: f64,
    /// For the largest shape: seconds from a new topic's first message to its acknowledgement.
    new_topic: Option<Arrival>,
}

/// Mirrors the shape of `partitions` (`count` messages) from `source` into `target`; with
/// `new_topic`, then sends one message to a new topic of the shape through `conn` and times it.
async fn mirror_shape(
    source: &ZooKeeper,
    target: &ZooKeeper,
    partitions: usize,
    count: usize,
    new_topic: Option<&mut Conn>,
) -> MirrorRun {
    let settings = bench_mirror_settings(
        mirror_consumer_config(source, &format!("mirror-{partitions}"), "smallest"),
        target,
        format!("p{partitions}-.*"),
    );
    let (rss_before, _) = rss();
    let mirror = Mirror::start(TokioEnv, settings).await.expect("mirror");
    let stats = mirror.stats.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(mirror.run_until(async { drop(stopped.await) }));
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut first = None;
    while stats.acked.load(Ordering::Relaxed) < count as u64 {
        if first.is_none() && stats.sent.load(Ordering::Relaxed) > 0 {
            first = Some(Instant::now());
            // On stderr, for a profiler to follow the copy the rate times (as the replica's):
            // `perf record` between this line and `done` sees the mirror and the brokers
            // copying, not the loading or the mirror's start before.
            eprintln!("copying {partitions} partitions: started");
        }
        assert!(
            Instant::now() < deadline,
            "the mirror of {partitions} partitions did not finish"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = count as f64 / first.expect("no message sent").elapsed().as_secs_f64();
    eprintln!("copying {partitions} partitions: done");
    let (rss_after, _) = rss();
    let commits = stats.commits.load(Ordering::Relaxed);
    let new_topic = match new_topic {
        Some(conn) => {
            let name = topic(&format!("{}new", prefix(partitions)));
            let mut set = MessageSetBuilder::new();
            set.push(vec![b'n'; SIZE]);
            let request = Request::Produce(ProduceRequest {
                topic: name.clone(),
                partition: 0,
                messages: set.build(CompressionCodec::None),
            });
            conn.send(&request).await.expect("new topic");
            // Answered once the produce before it is appended.
            let offsets = Request::Offsets(OffsetsRequest {
                topic: name,
                partition: 0,
                time: -1,
                max_offsets: 1,
            });
            conn.call(&offsets).await.expect("offsets");
            let sent = Instant::now();
            let served_before = source.served();
            while stats.acked.load(Ordering::Relaxed) < count as u64 + 1 {
                assert!(
                    sent.elapsed() < Duration::from_secs(120),
                    "the new topic was not mirrored"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let seconds = sent.elapsed().as_secs_f64();
            let requests = served_since(source, served_before);
            Some(Arrival { seconds, requests })
        }
        None => None,
    };
    let stopping = Instant::now();
    drop(stop);
    running.await.expect("mirror task").expect("mirror run");
    MirrorRun {
        rate,
        commits,
        rss_growth: rss_after.saturating_sub(rss_before),
        stop_seconds: stopping.elapsed().as_secs_f64(),
        new_topic,
    }
}

/// Sets sent to each ZooKeeper to warm it (`TRIBUTARY_BENCH_WARM_ZOOKEEPER`): enough for its
/// JIT compiler to have compiled the paths of transactions of sets (a method is compiled after
/// some ten thousand calls).
const WARM_SETS: usize = 500_000;

/// Sends `zk` [`WARM_SETS`] sets in transactions of [`TRANSACTION_WRITES_MAX`], pipelined on
/// one session, as a mirror's commits are; the seconds it took.
async fn warm_zookeeper(zk: &ZooKeeper) -> f64 {
    let coord = bench_session(zk).await;
    let nodes: Vec<(String, Vec<u8>)> = (0..TRANSACTION_WRITES_MAX)
        .map(|i| (format!("/bench-warm/{i}"), b"0".to_vec()))
        .collect();
    coord
        .ensure_parents(&nodes[0].0)
        .await
        .expect("the warm-up's directory");
    coord
        .create_all(&nodes, NodeKind::Persistent)
        .await
        .expect("the warm-up's nodes");
    let (coord_ref, nodes_ref) = (&coord, &nodes);
    let sets = (0..WARM_SETS / TRANSACTION_WRITES_MAX).map(|_| coord_ref.set_all(nodes_ref));
    let seconds = seconds_pipelined(sets, "a set of the warm-up").await;
    coord.close().await;
    seconds
}

/// A ZooKeeper session of the bench's own on `zk`, for the writes it times directly.
async fn bench_session(zk: &ZooKeeper) -> ZkCoordination {
    let connect = ZkConnect::parse(&zk.connect_string()).expect("zk.connect");
    ZkCoordination::connect(&connect, Duration::from_secs(10), Duration::from_secs(10))
        .await
        .expect("zookeeper")
}

/// Runs `requests` pipelined on their session, as a member does, each expected to succeed
/// (`what` names one in the panic); the seconds from the first sent to the last answered.
async fn seconds_pipelined(
    requests: impl Iterator<Item = impl std::future::Future<Output = Result<(), CoordError>>>,
    what: &str,
) -> f64 {
    let start = Instant::now();
    for done in pipelined_all(REQUESTS_IN_FLIGHT, requests).await {
        done.unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    start.elapsed().as_secs_f64()
}

/// The ceiling of a group's first join over `partitions`: the writes it cannot do without in
/// 0.7's layout (an owner node and a recorded start per partition), pipelined on one session as
/// a member makes them — in transactions of [`TRANSACTION_WRITES_MAX`] when `together`, one
/// request each otherwise; the seconds ZooKeeper took to log them.
async fn zookeeper_write_ceiling(zk: &ZooKeeper, partitions: usize, together: bool) -> f64 {
    let coord = bench_session(zk).await;
    let dir = format!(
        "/write-ceiling-{}",
        if together { "together" } else { "alone" }
    );
    coord
        .ensure_parents(&format!("{dir}/-"))
        .await
        .expect("the ceiling's directory");
    let nodes: Vec<(String, Vec<u8>)> = (0..2 * partitions)
        .map(|i| (format!("{dir}/{i}"), b"0".to_vec()))
        .collect();
    let runs = match together {
        true => transaction_runs(nodes, |(path, data)| Some(path.len() + data.len())),
        false => nodes.into_iter().map(|node| vec![node]).collect(),
    };
    let coord_ref = &coord;
    let creates = runs.iter().map(|run| async move {
        match run.as_slice() {
            [(path, data)] => coord_ref
                .create(path, data, NodeKind::Persistent)
                .await
                .map(drop),
            run => coord_ref.create_all(run, NodeKind::Persistent).await,
        }
    });
    let seconds = seconds_pipelined(creates, "a create of the write ceiling").await;
    coord.close().await;
    seconds
}

/// What `zk` served since `before` (`None` when either reading failed).
fn served_since(zk: &ZooKeeper, before: Option<Served>) -> Option<Served> {
    Some(zk.served()?.since(before?))
}

/// What ZooKeeper served meanwhile, for a printed line (nothing when it did not answer).
fn zookeeper_work(served: Option<Served>) -> String {
    match served {
        Some(Served { received, writes }) => {
            format!("; ZooKeeper received {received} requests, logged {writes} writes")
        }
        None => String::new(),
    }
}

/// A member's arrival in a group: the seconds until every partition was owned by exactly one
/// member, and the requests ZooKeeper received and the writes it logged meanwhile.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    seconds: f64,
    requests: Option<Served>,
}

/// Three members of one group join one after another over the shape of `partitions`: from each
/// arrival until every partition is owned by exactly one member.
async fn group_rebalance(zk: &ZooKeeper, partitions: usize) -> Vec<Arrival> {
    let subscription = Subscription::Whitelist(format!("p{partitions}-[0-9]+"), 1);
    let mut members = Vec::new();
    let mut arrivals = Vec::new();
    for _ in 0..3 {
        let arrived = Instant::now();
        let served_before = zk.served();
        let (member, streams) = ConsumerConnector::start(
            TokioEnv,
            mirror_consumer_config(zk, "scale-group", "largest"),
            subscription.clone(),
        )
        .await
        .expect("member");
        // The streams are held (not read) so that the member keeps running.
        members.push((member, streams));
        loop {
            let owned: Vec<_> = members
                .iter()
                .map(|(m, _)| m.ownership().map(|o| o.partitions).unwrap_or_default())
                .collect();
            let total: usize = owned.iter().map(Vec::len).sum();
            let distinct: BTreeSet<_> = owned
                .iter()
                .flatten()
                .map(|(t, p, _)| (t.clone(), *p))
                .collect();
            if total == partitions
                && distinct.len() == partitions
                && owned.iter().all(|o| !o.is_empty())
            {
                break;
            }
            assert!(
                arrived.elapsed() < Duration::from_secs(600),
                "{} members never owned the {partitions} partitions once each ({total} owned, {} distinct)",
                members.len(),
                distinct.len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        arrivals.push(Arrival {
            seconds: arrived.elapsed().as_secs_f64(),
            requests: served_since(zk, served_before),
        });
    }
    for (member, _) in members {
        member.shutdown().await;
    }
    arrivals
}

/// Replica mode over the shapes the mirror read (still on the source broker): for each, a new
/// replica broker (its own directory, in a ZooKeeper of its own) copies that shape's topics;
/// its rate from its first bytes visible until every partition ends where the source's does,
/// beside the same rate on the 10 partitions of one topic.
async fn replica_shapes_case(source_zk: &ZooKeeper) {
    let replica_zk = ZooKeeper::start();
    let mut baseline = None;
    for (index, &partitions) in replica_shapes().iter().enumerate() {
        let per_partition = (shape_bytes() / SIZE / partitions).max(1);
        let end = (per_partition * (SIZE + 10)) as i64;
        let all = partitions_of(partitions);
        let dir = tempfile::tempdir().expect("dir");
        let extra = format!(
            "brokerid={}\nreplica.source.brokerid=0\nreplica.source.zk.connect={}\nreplica.topics.whitelist={}.*\nreplica.fetch.size=1048576\nreplica.fetch.backoff.ms=10\n",
            index + 1,
            source_zk.connect_string(),
            prefix(partitions)
        );
        let config = broker_config_with(&replica_zk, dir.path(), PER_TOPIC, &extra);
        let (rss_before, _) = rss();
        eprintln!("replicating {partitions} partitions: started");
        let start = Instant::now();
        let replica = tokio::task::spawn_blocking(move || BenchBroker::start(config))
            .await
            .expect("replica broker");
        let mut conn = connect(
            &TokioEnv,
            "127.0.0.1",
            replica.port,
            Duration::from_secs(30),
        )
        .await
        .expect("connect");
        let mut first_visible = None;
        loop {
            let copied = copied_bytes(&mut conn, &all).await;
            if first_visible.is_none() && copied > 0 {
                first_visible = Some((Instant::now(), copied));
            }
            if copied == end * all.len() as i64 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(600),
                "the replica of {partitions} partitions did not catch up"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        eprintln!("replicating {partitions} partitions: done");
        let total = end * all.len() as i64;
        let from_start = total as f64 / start.elapsed().as_secs_f64() / 1e6;
        let (visible_at, visible) = first_visible.expect("nothing copied");
        let steady = (total - visible) as f64 / visible_at.elapsed().as_secs_f64().max(1e-6) / 1e6;
        let rss_growth = rss().0.saturating_sub(rss_before);
        // Every shape is compared from the replica's start (its discovery and creation of the
        // partitions included); the rate once copying is shown beside it where the copy was
        // not mostly visible at the first look (a small shape, the quick run).
        let once_copying = if visible * 2 > total {
            String::new()
        } else {
            format!("; once copying {steady:.0} MB/s")
        };
        let base = *baseline.get_or_insert(from_start);
        println!(
            "replica of {partitions:>6} partitions: {from_start:.1} MB/s from its start{once_copying} = {:.2} of 10 partitions; RSS growth {:.1} KiB per partition",
            from_start / base,
            rss_growth as f64 / 1024.0 / partitions as f64
        );
        row(
            &format!("scale: replica copy from its start, {partitions} partitions"),
            &format!("{from_start:.0} MB/s{once_copying}"),
            &format!("same replica on 10 partitions {base:.0} MB/s"),
            from_start / base,
        );
        drop(conn);
        replica.stop();
    }
}

/// Bytes the broker behind `conn` holds of `partitions` (their latest offsets, summed), asked
/// in pipelined batches.
async fn copied_bytes(conn: &mut Conn, partitions: &[(TopicName, i32)]) -> i64 {
    let mut total = 0;
    for chunk in partitions.chunks(tributary::client::PIPELINED_REQUESTS_MAX) {
        let requests: Vec<Request> = chunk
            .iter()
            .map(|(topic, partition)| {
                Request::Offsets(OffsetsRequest {
                    topic: topic.clone(),
                    partition: *partition,
                    time: -1,
                    max_offsets: 1,
                })
            })
            .collect();
        for answer in conn.call_pipelined(&requests).await.expect("offsets") {
            let tributary_core::wire::Response::Offsets(o) = answer else {
                panic!("the replica answered OFFSETS with another response")
            };
            total += o.offsets.first().copied().unwrap_or(0);
        }
    }
    total
}

/// Seconds from starting a broker on `dir` until each of `topics` is registered under it.
async fn registration(
    zk: &ZooKeeper,
    config: BrokerConfig,
    topics: &[TopicName],
) -> (f64, BenchBroker) {
    let coord = bench_session(zk).await;
    assert!(
        matches!(
            coord.get(&broker_id_path(0)).await,
            Err(CoordError::NoNode(_))
        ),
        "the stopped broker is still registered: its registration would be counted as new"
    );
    let start = Instant::now();
    let broker = tokio::task::spawn_blocking(move || BenchBroker::start(config))
        .await
        .expect("broker");
    let mut left: Vec<&TopicName> = topics.iter().collect();
    while !left.is_empty() {
        // A topic counts once this broker's node for it is back (the stopped broker closed its
        // session, so its nodes were gone: checked before the start). Any other error fails.
        let registered: BTreeSet<String> = coord
            .children(BROKER_TOPICS_PATH)
            .await
            .expect("the children of /brokers/topics")
            .into_iter()
            .collect();
        let mut still = Vec::new();
        for topic in left {
            let path = broker_topic_partitions_path(topic, 0);
            let known = registered.contains(topic.as_str())
                && match coord.get(&path).await {
                    Ok(_) => true,
                    Err(CoordError::NoNode(_)) => false,
                    Err(e) => panic!("reading {path}: {e}"),
                };
            if !known {
                still.push(topic);
            }
        }
        left = still;
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "{} topics still unregistered",
            left.len()
        );
        if !left.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    coord.close().await;
    (seconds, broker)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    support::trace_from_env();
    tributary_tests::bench::touch_memory();
    let (source_zk, target_zk) = (ZooKeeper::start(), ZooKeeper::start());
    if std::env::var("TRIBUTARY_BENCH_WARM_ZOOKEEPER").is_ok_and(|v| v == "1") {
        for zk in [&source_zk, &target_zk] {
            let seconds = warm_zookeeper(zk).await;
            eprintln!("warmed a ZooKeeper with {WARM_SETS} sets in transactions in {seconds:.2} s");
        }
    }
    let (source_dir, target_dir) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    // The shape of 1 is one topic of one partition.
    let source_config = broker_config_with(
        &source_zk,
        source_dir.path(),
        PER_TOPIC,
        &format!("brokerid=0\ntopic.partition.count.map={}0:1\n", prefix(1)),
    );
    let source = BenchBroker::start(source_config.clone());
    let target = BenchBroker::start(broker_config(
        &target_zk,
        target_dir.path(),
        TARGET_PARTITIONS as usize,
    ));
    let mut target_conn = connect(&TokioEnv, "127.0.0.1", target.port, Duration::from_secs(30))
        .await
        .expect("connect");
    let mut conn = connect(&TokioEnv, "127.0.0.1", source.port, Duration::from_secs(30))
        .await
        .expect("connect");
    println!("scale: one source broker -> the mirror (2 streams, commits every second) -> one mirror broker, over loopback; {} MiB of 1 KiB messages per shape", shape_bytes() >> 20);
    let shapes = shapes();
    let largest = *shapes.last().expect("shapes");
    // Rows are printed once every shape is measured, smallest first (the baseline, 10, runs
    // first so that each later shape's ratio is known as it ends).
    let mut baseline = None;
    let mut rows = Vec::new();
    for &partitions in &shapes {
        let per_partition = (shape_bytes() / SIZE / partitions).max(1);
        let loading = Instant::now();
        let count = load(&mut conn, partitions, per_partition).await;
        let loaded = loading.elapsed().as_secs_f64();
        let created = precreate(&mut target_conn, partitions).await;
        let topics = layout(partitions).0;
        let run = mirror_shape(
            &source_zk,
            &target_zk,
            partitions,
            count,
            (partitions == largest).then_some(&mut conn),
        )
        .await;
        let mb = run.rate * SIZE as f64 / 1e6;
        let base = *baseline.get_or_insert(mb);
        println!(
            "{partitions:>6} partitions ({count} messages, loaded in {loaded:.1} s; the mirror cluster created its {topics} topics in {created:.2} s): mirrored at {mb:.1} MB/s = {:.2} of 10 partitions; {} partition commits meanwhile; stop with its final commit {:.2} s; RSS growth {:.1} KiB per partition",
            mb / base,
            run.commits,
            run.stop_seconds,
            run.rss_growth as f64 / 1024.0 / partitions as f64
        );
        rows.push((partitions, created, mb, base, run));
    }
    rows.sort_by_key(|(partitions, ..)| *partitions);
    for (partitions, created, mb, base, run) in &rows {
        row(
            &format!("scale: mirror 1 KiB, {partitions} source partitions"),
            &format!("{mb:.0} MB/s"),
            &format!("same mirror on 10 partitions {base:.0} MB/s"),
            mb / base,
        );
        point(
            &format!(
                "scale: mirror cluster creates the {} topics of {partitions} partitions",
                layout(*partitions).0
            ),
            &format!("{created:.2} s"),
        );
        point(
            &format!("scale: mirror stop (final commit), {partitions} partitions"),
            &format!("{:.2} s", run.stop_seconds),
        );
        // Below 1,000 partitions the process's fixed costs swamp a per-partition figure.
        if *partitions >= 1000 {
            point(
                &format!("scale: mirror RSS growth per source partition, {partitions}"),
                &format!(
                    "{:.1} KiB",
                    run.rss_growth as f64 / 1024.0 / *partitions as f64
                ),
            );
        }
        if let Some(Arrival { seconds, requests }) = run.new_topic {
            println!(
                "a new topic among {} mirrored in {seconds:.3} s (target 1 s){}",
                layout(*partitions).0,
                zookeeper_work(requests)
            );
            row(
                &format!("scale: new topic among {} mirrored", layout(*partitions).0),
                &format!("{seconds:.2} s"),
                "target 1 s",
                1.0 / seconds,
            );
        }
    }
    replica_shapes_case(&source_zk).await;
    let alone = zookeeper_write_ceiling(&source_zk, largest, false).await;
    let ceiling = zookeeper_write_ceiling(&source_zk, largest, true).await;
    println!(
        "ZooKeeper logs {} pipelined creates on one session in {ceiling:.2} s in transactions of {TRANSACTION_WRITES_MAX}, {alone:.2} s one request each",
        2 * largest
    );
    let joins = group_rebalance(&source_zk, largest).await;
    if let Some(first) = joins.first() {
        row(
            &format!("scale: a group of 1 taking {largest} partitions"),
            &format!("{:.2} s", first.seconds),
            &format!(
                "its {} necessary ZooKeeper creates alone {ceiling:.2} s in transactions ({alone:.2} s one request each)",
                2 * largest
            ),
            ceiling / first.seconds,
        );
    }
    for (members, arrival) in joins.iter().enumerate() {
        let seconds = arrival.seconds;
        let requests = zookeeper_work(arrival.requests);
        println!(
            "group of {} over {largest} partitions: every partition owned once {seconds:.2} s after the member's arrival{requests}",
            members + 1
        );
        point(
            &format!(
                "scale: group rebalance to {} members, {largest} partitions",
                members + 1
            ),
            &format!("{seconds:.2} s"),
        );
    }
    drop((conn, target_conn));
    source.stop();
    let topics: Vec<TopicName> = shapes
        .iter()
        .flat_map(|&n| (0..layout(n).0).map(move |t| topic(&format!("{}{t}", prefix(n)))))
        .collect();
    let (seconds, source) = registration(&source_zk, source_config, &topics).await;
    let all: usize = shapes.iter().sum();
    println!(
        "source broker restarted on {all} partitions ({} topics): all registered {seconds:.2} s after its start",
        topics.len()
    );
    point(
        &format!(
            "scale: broker restart to {} topics ({all} partitions) registered",
            topics.len()
        ),
        &format!("{seconds:.2} s"),
    );
    source.stop();
    target.stop();
}
