//! Mirror positions with real processes and real ZooKeepers on loopback: a mirror maker with
//! `mirror.preserve.partitions=true`; a consumer group moved from the source cluster to the
//! mirror cluster by `tributary translate-offsets`, and after a disaster of the whole source
//! (its ZooKeeper too) by the mirror's offset syncer, skipping nothing either way; and after
//! the source loses its mirror, `tributary mirror-positions` listing exactly the acknowledged
//! messages the mirror lacks, and the mirror broker's `tributary_mirror_held_offset` agreeing;
//! and the mirror's placement records covering every source partition it owns, messages or not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tributary::consumer::{ConsumerConnector, Subscription};
use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record};
use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
use tributary_core::wire::TopicName;
use tributary_tests::broker::{tributary_binary, BrokerProcess};
use tributary_tests::zookeeper::{free_port, ZooKeeper};

const SESSION_MS: u64 = 2000;
const TOPIC: &str = "orders";

/// A cluster of one broker (two partitions of each topic, metrics served) and its ZooKeeper.
struct Cluster {
    zk: ZooKeeper,
    broker: BrokerProcess,
    metrics_port: u16,
    _dir: tempfile::TempDir,
}

fn cluster() -> Cluster {
    let zk = ZooKeeper::start();
    let dir = tempfile::tempdir().unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let properties = format!(
        "brokerid=0\nhostname=127.0.0.1\nport={port}\nmetrics.port={metrics_port}\nlog.dir={}\nnum.partitions=2\nlog.flush.interval=1000\n\
         log.default.flush.interval.ms=100\nlog.default.flush.scheduler.interval.ms=50\n\
         zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\nzk.connectiontimeout.ms=20000\n",
        dir.path().join("logs").display(),
        zk.connect_string()
    );
    let broker = BrokerProcess::start(dir.path(), port, &properties);
    broker.wait_until_registered();
    Cluster {
        zk,
        broker,
        metrics_port,
        _dir: dir,
    }
}

struct KilledOnDrop(Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A mirror maker copying `orders` from `source` into `target` with positions, in small sets.
fn mirror_maker(dir: &Path, source: &Cluster, target: &Cluster, extra: &str) -> KilledOnDrop {
    let consumer = dir.join("consumer.properties");
    std::fs::write(
        &consumer,
        format!(
            "zk.connect={}\ngroupid=mirror\nzk.sessiontimeout.ms={SESSION_MS}\nzk.connectiontimeout.ms=20000\n\
             fetcher.backoff.ms=50\nmirror.commit.interval.ms=200\nmirror.preserve.partitions=true\n{extra}",
            source.zk.connect_string()
        ),
    )
    .unwrap();
    let producer = dir.join("producer.properties");
    std::fs::write(
        &producer,
        format!(
            "zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\nproducer.type=async\nqueue.size=50\nbatch.size=5\nqueue.time=5\n",
            target.zk.connect_string()
        ),
    )
    .unwrap();
    let child = Command::new(tributary_binary())
        .args(["mirror-maker", "--whitelist", TOPIC, "--consumer.config"])
        .arg(&consumer)
        .arg("--producer.config")
        .arg(&producer)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("maker.log")).unwrap())
        .spawn()
        .unwrap();
    KilledOnDrop(child)
}

async fn producer(zk: &ZooKeeper) -> Producer<TokioEnv> {
    let text = format!("zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\ndurable.acks=true\nnum.retries=50\nproducer.type=sync\n", zk.connect_string());
    Producer::start(
        TokioEnv,
        ProducerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap(),
    )
    .await
    .unwrap()
}

/// Sends `orders-<i>` for `range`, slowly enough that the mirror copies in small sets;
/// where each one landed: message → (`<broker>-<partition>`, offset).
async fn send(
    producer: &Producer<TokioEnv>,
    range: std::ops::Range<usize>,
) -> BTreeMap<String, (String, i64)> {
    let mut landed = BTreeMap::new();
    for i in range {
        let m = format!("{TOPIC}-{i}");
        let record = Record::new(TOPIC.parse::<TopicName>().unwrap(), m.clone().into_bytes());
        let d = producer.send(record).await.unwrap().await.unwrap();
        landed.insert(
            m,
            (
                format!("{}-{}", d.broker_id, d.partition),
                d.offset.unwrap(),
            ),
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    landed
}

/// A consumer of group `group` in the cluster of `zk`; reads until `enough` messages or
/// `idle` without one; commits what it read and leaves. The messages read.
async fn consume(
    zk: &ZooKeeper,
    group: &str,
    reset: &str,
    enough: usize,
    idle: Duration,
) -> Vec<String> {
    let text = format!(
        "zk.connect={}\ngroupid={group}\nautooffset.reset={reset}\nautocommit.enable=false\nfetcher.backoff.ms=50\nconsumer.timeout.ms={}\n",
        zk.connect_string(),
        idle.as_millis()
    );
    let config = ConsumerConfig::from_properties(&Properties::parse("t", &text).unwrap()).unwrap();
    let subscription = Subscription::Topics([(TOPIC.parse().unwrap(), 1)].into_iter().collect());
    let (consumer, mut streams) = ConsumerConnector::start(TokioEnv, config, subscription)
        .await
        .unwrap();
    let mut stream = streams.pop().unwrap();
    let mut read = Vec::new();
    while read.len() < enough {
        match stream.next().await {
            Ok(m) => read.push(String::from_utf8_lossy(&m.payload).into_owned()),
            Err(_) => break,
        }
    }
    consumer.commit_offsets().await.unwrap();
    consumer.shutdown().await;
    read
}

/// Waits until the mirror cluster holds `count` messages of `orders`.
async fn until_mirrored(mirror: &Cluster, count: usize) {
    let started = Instant::now();
    loop {
        let read = consume(
            &mirror.zk,
            &format!("check-{}", rand::random::<u32>()),
            "smallest",
            count,
            Duration::from_secs(2),
        )
        .await;
        let distinct: BTreeSet<String> = read.into_iter().collect();
        if distinct.len() >= count {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the mirror holds {} of {count} messages after 60 s",
            distinct.len()
        );
    }
}

fn run_tool(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(tributary_binary())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The mirror cluster's placement records of `orders`: node name → the broker it names.
async fn placement_records(mirror: &Cluster) -> BTreeMap<String, i32> {
    use tributary::coordination::zk::ZkCoordination;
    use tributary::coordination::Coordination;
    let connect = tributary_core::config::ZkConnect::parse(&mirror.zk.connect_string()).unwrap();
    let coord = ZkCoordination::connect(&connect, Duration::from_secs(10), Duration::from_secs(10))
        .await
        .unwrap();
    let parent = format!(
        "{}/{TOPIC}",
        tributary_core::zk_layout::MIRROR_PLACEMENTS_PATH
    );
    let mut records = BTreeMap::new();
    for node in coord.children(&parent).await.unwrap() {
        let (data, _) = coord.get(&format!("{parent}/{node}")).await.unwrap();
        let broker = String::from_utf8_lossy(&data).parse::<i32>().unwrap();
        records.insert(node, broker);
    }
    coord.close().await;
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_moved_to_the_mirror_cluster_by_translated_offsets_skips_nothing() {
    let mut source = cluster();
    let mirror = cluster();
    let dir = tempfile::tempdir().unwrap();
    let _maker = mirror_maker(dir.path(), &source, &mirror, "");
    let producer = producer(&source.zk).await;
    let sent: BTreeSet<String> = send(&producer, 0..400).await.into_keys().collect();
    producer.close().await;
    // The application reads part of the topic on the source and commits.
    let read_on_source: BTreeSet<String> =
        consume(&source.zk, "app", "smallest", 150, Duration::from_secs(3))
            .await
            .into_iter()
            .collect();
    assert_eq!(read_on_source.len(), 150);
    until_mirrored(&mirror, sent.len()).await;
    // The source's brokers are lost; its ZooKeeper still has the group's offsets.
    source.broker.kill();
    let (ok, table, errors) = run_tool(&[
        "translate-offsets",
        "--group",
        "app",
        "--source-zookeeper",
        &source.zk.connect_string(),
        "--zookeeper",
        &mirror.zk.connect_string(),
        "--write",
    ]);
    assert!(ok, "translate-offsets failed: {errors}\n{table}");
    // `largest`: a partition without a translated offset would skip everything before its end.
    let read_on_mirror: Vec<String> = consume(
        &mirror.zk,
        "app",
        "largest",
        sent.len(),
        Duration::from_secs(3),
    )
    .await;
    let read_on_mirror_set: BTreeSet<String> = read_on_mirror.iter().cloned().collect();
    let unread: Vec<&String> = sent.difference(&read_on_source).collect();
    let skipped: Vec<&&String> = unread
        .iter()
        .filter(|m| !read_on_mirror_set.contains(**m))
        .collect();
    let re_read = read_on_mirror_set.intersection(&read_on_source).count();
    eprintln!(
        "translated:\n{table}read {} on the source, then {} on the mirror: {} skipped, {re_read} read again",
        read_on_source.len(),
        read_on_mirror.len(),
        skipped.len()
    );
    assert!(
        skipped.is_empty(),
        "{} messages unread on the source were skipped on the mirror, e.g. {:?}\n{table}",
        skipped.len(),
        skipped.iter().take(5).collect::<Vec<_>>()
    );
    // What is read again is the set each partition's position fell inside (the mirror sends
    // sets of about batch.size = 5 here), not the history.
    assert!(
        re_read <= 2 * 20,
        "{re_read} of the {} messages read on the source were read again\n{table}",
        read_on_source.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_the_mirror_stops_the_tool_lists_exactly_the_acknowledged_messages_it_lacks() {
    let source = cluster();
    let mirror = cluster();
    let dir = tempfile::tempdir().unwrap();
    let maker = mirror_maker(dir.path(), &source, &mirror, "");
    let producer = producer(&source.zk).await;
    let copied = send(&producer, 0..300).await;
    until_mirrored(&mirror, copied.len()).await;
    // The mirror stops (as if the link to it were cut for good); the source goes on.
    drop(maker);
    let lacking = send(&producer, 300..500).await;
    producer.close().await;
    let (ok, listing, errors) = run_tool(&[
        "mirror-positions",
        "--zookeeper",
        &mirror.zk.connect_string(),
        "--source-zookeeper",
        &source.zk.connect_string(),
    ]);
    assert!(ok, "mirror-positions failed: {errors}\n{listing}");
    // `<cluster>/orders/<b-p>  held to <H>  in ...  source end <E>: lacks offsets H..E (...)`
    let mut held_to: BTreeMap<String, i64> = BTreeMap::new();
    for line in listing.lines() {
        let mut words = line.split_whitespace();
        let source_partition = words.next().unwrap_or_default();
        let partition = source_partition
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let held = line
            .split("held to ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<i64>().ok());
        if let Some(held) = held {
            held_to.insert(partition, held);
        }
    }
    eprintln!("{listing}");
    let lacks = |(partition, offset): &(String, i64)| {
        held_to.get(partition).is_none_or(|held| offset >= held)
    };
    let wrongly_lacking: Vec<&String> = copied
        .iter()
        .filter(|(_, at)| lacks(at))
        .map(|(m, _)| m)
        .collect();
    let wrongly_held: Vec<&String> = lacking
        .iter()
        .filter(|(_, at)| !lacks(at))
        .map(|(m, _)| m)
        .collect();
    assert!(
        wrongly_lacking.is_empty() && wrongly_held.is_empty(),
        "listed as lacking though mirrored: {wrongly_lacking:?}; listed as held though never copied: {wrongly_held:?}\n{listing}"
    );
    assert!(listing.contains("lacks offsets"), "{listing}");
    // Each source partition's placement record in the mirror cluster's ZooKeeper names the
    // broker its copy is in (`in orders/<broker>-<partition>` in the listing).
    let records = placement_records(&mirror).await;
    let mut placed = BTreeMap::new();
    for line in listing.lines().filter(|l| l.contains(" in ")) {
        let source_partition = line.split_whitespace().next().unwrap_or_default();
        let broker = line
            .split(&format!(" in {TOPIC}/"))
            .nth(1)
            .and_then(|rest| rest.split('-').next())
            .and_then(|b| b.parse::<i32>().ok());
        placed.insert(source_partition.replace('/', ","), broker);
    }
    assert!(!placed.is_empty(), "{listing}");
    for (node, broker) in &placed {
        assert_eq!(
            records.get(node).copied(),
            *broker,
            "the placement record of {node} against the listing (records: {records:?})\n{listing}"
        );
    }
    // The mirror broker's gauge says the same, per source partition.
    let scraped = tributary::metrics::server::scrape(&TokioEnv, "127.0.0.1", mirror.metrics_port)
        .await
        .unwrap();
    let mut gauged: BTreeMap<String, i64> = BTreeMap::new();
    for line in scraped
        .lines()
        .filter(|l| l.starts_with("tributary_mirror_held_offset{"))
    {
        let partition = line
            .split("source_partition=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default()
            .to_string();
        let value = line.rsplit(' ').next().and_then(|v| v.parse::<i64>().ok());
        gauged.insert(partition, value.unwrap_or(-1));
    }
    assert_eq!(
        gauged, held_to,
        "tributary_mirror_held_offset against mirror-positions\n{listing}"
    );
    // And mirror-status, given the mirror cluster, shows the same lines under its table.
    let (ok, status, errors) = run_tool(&[
        "mirror-status",
        "--zkconnect",
        &source.zk.connect_string(),
        "--group",
        "mirror",
        "--interval",
        "0.1",
        "--mirror-zookeeper",
        &mirror.zk.connect_string(),
    ]);
    assert!(ok, "mirror-status failed: {errors}\n{status}");
    for line in listing.lines() {
        assert!(
            status.contains(line),
            "mirror-status lacks {line:?}:\n{status}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_whole_source_disaster_the_synced_group_resumes_on_the_mirror_skipping_nothing() {
    let mut source = cluster();
    let mirror = cluster();
    let dir = tempfile::tempdir().unwrap();
    let _maker = mirror_maker(
        dir.path(),
        &source,
        &mirror,
        "mirror.offsets.sync.groups=app\nmirror.offsets.sync.interval.ms=200\n",
    );
    let producer = producer(&source.zk).await;
    let sent: BTreeSet<String> = send(&producer, 0..400).await.into_keys().collect();
    producer.close().await;
    let read_on_source: BTreeSet<String> =
        consume(&source.zk, "app", "smallest", 150, Duration::from_secs(3))
            .await
            .into_iter()
            .collect();
    until_mirrored(&mirror, sent.len()).await;
    // A few sync rounds, then the whole source cluster is gone: brokers and ZooKeeper.
    tokio::time::sleep(Duration::from_secs(2)).await;
    source.broker.kill();
    source.zk.kill();
    let read_on_mirror: BTreeSet<String> = consume(
        &mirror.zk,
        "app",
        "largest",
        sent.len(),
        Duration::from_secs(3),
    )
    .await
    .into_iter()
    .collect();
    let skipped: Vec<&String> = sent
        .difference(&read_on_source)
        .filter(|m| !read_on_mirror.contains(*m))
        .collect();
    let re_read = read_on_mirror.intersection(&read_on_source).count();
    eprintln!(
        "read {} on the source, {} on the mirror after the disaster: {} skipped, {re_read} read again",
        read_on_source.len(),
        read_on_mirror.len(),
        skipped.len()
    );
    assert!(
        skipped.is_empty(),
        "{} messages unread on the source were skipped on the mirror, e.g. {:?}",
        skipped.len(),
        skipped.iter().take(5).collect::<Vec<_>>()
    );
    assert!(re_read <= 2 * 20, "{re_read} messages read again");
}

/// A source partition that went back (its broker's log lost, the broker started again empty,
/// new messages written at offsets the mirror already holds copies of) is stopped and said by
/// the mirror, not taken for copies it holds (which would drop the new messages unsaid).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_source_partition_that_went_back_is_stopped_and_said_not_taken_for_held_copies() {
    let mut source = cluster();
    let mirror = cluster();
    let dir = tempfile::tempdir().unwrap();
    let maker = mirror_maker(dir.path(), &source, &mirror, "");
    let producer = producer(&source.zk).await;
    let first = send(&producer, 0..200).await;
    producer.close().await;
    until_mirrored(&mirror, first.len()).await;
    // Let a commit round pass, then the mirror stops; the source broker loses its disk.
    tokio::time::sleep(Duration::from_millis(600)).await;
    drop(maker);
    source.broker.kill();
    std::fs::remove_dir_all(source._dir.path().join("logs")).unwrap();
    source.broker.spawn();
    let producer = self::producer(&source.zk).await;
    let again = send(&producer, 200..230).await;
    producer.close().await;
    assert!(
        again
            .values()
            .all(|(partition, offset)| first.values().any(|(p, o)| p == partition && o > offset)),
        "the new messages must sit at offsets the mirror already holds copies of"
    );
    let again_dir = tempfile::tempdir().unwrap();
    let _maker = mirror_maker(again_dir.path(), &source, &mirror, "");
    let log = again_dir.path().join("maker.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    let said = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("the source partition went back") {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let held: BTreeSet<String> = consume(
        &mirror.zk,
        "check-after",
        "smallest",
        first.len() + again.len(),
        Duration::from_secs(3),
    )
    .await
    .into_iter()
    .collect();
    let dropped_unsaid = again.keys().filter(|m| !held.contains(*m)).count();
    assert!(
        said,
        "the mirror did not say the source went back ({dropped_unsaid} of {} new messages not copied):\n{}",
        again.len(),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// A mirror with positions places each source partition it owns as it comes to own it, not
/// at the partition's first message: a partition that has had no message yet has its
/// placement record too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_mirror_places_every_source_partition_it_owns_before_its_first_message() {
    let source = cluster();
    let mirror = cluster();
    let dir = tempfile::tempdir().unwrap();
    let producer = producer(&source.zk).await;
    // Under one key, every message goes to one of the topic's two partitions.
    let mut landed = BTreeSet::new();
    for i in 0..20 {
        let mut record = Record::new(
            TOPIC.parse::<TopicName>().unwrap(),
            format!("{TOPIC}-{i}").into_bytes(),
        );
        record.key = Some(bytes::Bytes::from_static(b"one key"));
        let d = producer.send(record).await.unwrap().await.unwrap();
        landed.insert(format!("{}-{}", d.broker_id, d.partition));
    }
    producer.close().await;
    assert_eq!(landed.len(), 1, "{landed:?}");
    let _maker = mirror_maker(dir.path(), &source, &mirror, "");
    until_mirrored(&mirror, 20).await;
    let started = Instant::now();
    let placed = loop {
        // Record names end in `,<broker>-<partition>` of the source partition.
        let placed: BTreeSet<String> = placement_records(&mirror)
            .await
            .into_keys()
            .filter_map(|node| node.rsplit(',').next().map(str::to_string))
            .collect();
        if placed.len() >= 2 || started.elapsed() > Duration::from_secs(20) {
            break placed;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        placed,
        BTreeSet::from(["0-0".to_string(), "0-1".to_string()]),
        "placement records (the messages all went to {landed:?})"
    );
}
