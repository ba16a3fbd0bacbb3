//! The producer and the consumer group against a real ZooKeeper and two real brokers.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tributary::consumer::{ConsumerConnector, Subscription};
use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record};
use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
use tributary_core::wire::TopicName;
use tributary_tests::broker::{tributary_binary, BrokerProcess};
use tributary_tests::zookeeper::{free_port, ZooKeeper};

const SESSION_MS: u64 = 2000;

struct Cluster {
    zk: ZooKeeper,
    brokers: Vec<BrokerProcess>,
    _dirs: Vec<tempfile::TempDir>,
}

/// ZooKeeper and two brokers (2 partitions per topic each, every message flushed at once).
fn cluster() -> Cluster {
    let zk = ZooKeeper::start();
    let mut brokers = Vec::new();
    let mut dirs = Vec::new();
    for id in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let properties = format!(
            "brokerid={id}\nhostname=127.0.0.1\nport={port}\nlog.dir={}\nnum.partitions=2\nlog.flush.interval=1\n\
             zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\nzk.connectiontimeout.ms=10000\n",
            dir.path().join("logs").display(),
            zk.connect_string()
        );
        brokers.push(BrokerProcess::start(dir.path(), port, &properties));
        dirs.push(dir);
    }
    Cluster {
        zk,
        brokers,
        _dirs: dirs,
    }
}

fn topic(name: &str) -> TopicName {
    name.parse().unwrap()
}

fn producer_config(zk: &ZooKeeper, extra: &str) -> ProducerConfig {
    let text = format!("zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\ndurable.acks=true\nnum.retries=8\n{extra}", zk.connect_string());
    ProducerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap()
}

fn consumer_config(zk: &ZooKeeper, group: &str, extra: &str) -> ConsumerConfig {
    let text = format!(
        "zk.connect={}\ngroupid={group}\nzk.sessiontimeout.ms={SESSION_MS}\nautooffset.reset=smallest\nfetcher.backoff.ms=50\nautocommit.interval.ms=200\nrebalance.backoff.ms=300\n{extra}",
        zk.connect_string()
    );
    ConsumerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap()
}

/// Sends `messages` durably (each delivery must succeed).
async fn produce(
    producer: &Producer<TokioEnv>,
    topic_name: &str,
    messages: impl IntoIterator<Item = String>,
) {
    for m in messages {
        let delivery = producer
            .send(Record::new(topic(topic_name), m.into_bytes()))
            .await
            .unwrap();
        delivery
            .await
            .unwrap_or_else(|e| panic!("a durable send failed: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_splits_partitions_and_a_killed_member_is_replaced_without_loss() {
    let c = cluster();
    let producer = Producer::start(TokioEnv, producer_config(&c.zk, "producer.type=sync\n"))
        .await
        .unwrap();
    let all: Vec<String> = (0..600).map(|i| format!("msg-{i:04}")).collect();
    // The topic exists (registered by both brokers) before anyone consumes.
    produce(&producer, "kt", all[..100].to_vec()).await;
    // Member A: a console-consumer process from the beginning (killed with SIGKILL later).
    let out_a = tempfile::NamedTempFile::new().unwrap();
    let mut a = Command::new(tributary_binary())
        .args([
            "console-consumer",
            "--zookeeper",
            &c.zk.connect_string(),
            "--topic",
            "kt",
            "--group",
            "g",
            "--from-beginning",
            "--autocommit.interval.ms",
            "100",
        ])
        .stdout(Stdio::from(out_a.reopen().unwrap()))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(out_a.path())
        .unwrap()
        .lines()
        .count()
        < 20
    {
        assert!(
            Instant::now() < deadline,
            "the console consumer printed nothing"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Member B: in this process; it joins, and the group rebalances.
    let (b, mut streams) = ConsumerConnector::start(
        TokioEnv,
        consumer_config(&c.zk, "g", ""),
        Subscription::Topics([(topic("kt"), 1)].into_iter().collect()),
    )
    .await
    .unwrap();
    let mut stream = streams.remove(0);
    let mut got_b: Vec<String> = Vec::new();
    let producing = {
        let rest = all[100..].to_vec();
        let config = producer_config(&c.zk, "producer.type=sync\n");
        tokio::spawn(async move {
            let producer = Producer::start(TokioEnv, config).await.unwrap();
            for chunk in rest.chunks(10) {
                produce(&producer, "kt", chunk.to_vec()).await;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };
    // Both members consume for a while, then A dies without a word.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(100), stream.next()).await {
            got_b.push(String::from_utf8(m.payload.to_vec()).unwrap());
        }
    }
    let got_a_before_kill = std::fs::read_to_string(out_a.path())
        .unwrap()
        .lines()
        .count();
    a.kill().unwrap();
    a.wait().unwrap();
    let b_before_kill = got_b.len();
    producing.await.unwrap();
    // B takes A's partitions after A's session expires and consumes the rest.
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let text_a = std::fs::read_to_string(out_a.path()).unwrap();
        let union: BTreeSet<String> = text_a
            .lines()
            .map(str::to_string)
            .chain(got_b.iter().cloned())
            .collect();
        if union.len() == all.len() || Instant::now() > deadline {
            break;
        }
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(200), stream.next()).await {
            got_b.push(String::from_utf8(m.payload.to_vec()).unwrap());
        }
    }
    b.shutdown().await;
    let text_a = std::fs::read_to_string(out_a.path()).unwrap();
    let got_a: Vec<String> = text_a.lines().map(str::to_string).collect();
    let union: BTreeSet<String> = got_a.iter().chain(&got_b).cloned().collect();
    let expected: BTreeSet<String> = all.iter().cloned().collect();
    let lost: Vec<&String> = expected.difference(&union).collect();
    assert!(
        lost.is_empty(),
        "{} messages lost, e.g. {:?}",
        lost.len(),
        lost.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        got_a_before_kill > 0 && b_before_kill > 0,
        "both members consumed while both lived (A {got_a_before_kill}, B {b_before_kill})"
    );
    let duplicates = got_a.len() + got_b.len() - union.len();
    eprintln!(
        "A consumed {}, B {}, duplicates {duplicates} (from A's uncommitted range)",
        got_a.len(),
        got_b.len()
    );
    assert!(
        duplicates <= all.len() / 4,
        "{duplicates} duplicates: more than A's uncommitted range could explain"
    );
    let mut per_message: BTreeMap<&String, usize> = BTreeMap::new();
    got_b
        .iter()
        .for_each(|m| *per_message.entry(m).or_default() += 1);
    assert!(
        per_message.values().all(|n| *n == 1),
        "a member was handed one message twice"
    );
}

/// Each owner node of `topic` in group `group`: (partition, the thread it names, the zxid that
/// made it).
async fn owner_nodes(
    zk: &zookeeper_client::Client,
    group: &str,
    topic: &str,
) -> BTreeMap<String, (String, i64)> {
    let dir = format!("/consumers/{group}/owners/{topic}");
    let mut nodes = BTreeMap::new();
    for partition in zk.list_children(&dir).await.unwrap_or_default() {
        if let Ok((thread, stat)) = zk.get_data(&format!("{dir}/{partition}")).await {
            nodes.insert(
                partition,
                (String::from_utf8_lossy(&thread).into_owned(), stat.czxid),
            );
        }
    }
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_topic_matching_a_whitelist_is_consumed_within_a_second_its_members_nodes_kept() {
    let c = cluster();
    let producer = Producer::start(TokioEnv, producer_config(&c.zk, "producer.type=sync\n"))
        .await
        .unwrap();
    produce(&producer, "wild-a", vec!["first".to_string()]).await;
    let (consumer, mut streams) = ConsumerConnector::start(
        TokioEnv,
        consumer_config(&c.zk, "w", ""),
        Subscription::Whitelist("wild-.*".into(), 1),
    )
    .await
    .unwrap();
    let mut stream = streams.remove(0);
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.payload.as_ref(), b"first");
    let zk = zookeeper_client::Client::connect(&c.zk.connect_string())
        .await
        .unwrap();
    let owned_before = owner_nodes(&zk, "w", "wild-a").await;
    assert!(!owned_before.is_empty(), "wild-a is owned");
    // A topic that does not exist yet: registered by its first write.
    let sent_at = Instant::now();
    produce(&producer, "wild-b", vec!["second".to_string()]).await;
    let second = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap();
    let took = sent_at.elapsed();
    assert_eq!(
        (second.topic.as_str(), second.payload.as_ref()),
        ("wild-b", &b"second"[..])
    );
    eprintln!("a new topic was consumed {took:?} after its first message was acknowledged");
    assert!(
        took < Duration::from_millis(1500),
        "the new topic took {took:?}"
    );
    // The rebalance that took the new topic moved nothing else: wild-a's owner nodes are the
    // very nodes made before it (same creating zxid), not released and made again.
    assert!(
        !owner_nodes(&zk, "w", "wild-b").await.is_empty(),
        "wild-b is owned"
    );
    assert_eq!(owner_nodes(&zk, "w", "wild-a").await, owned_before);
    // The stream kept running for the old topic too.
    produce(&producer, "wild-a", vec!["third".to_string()]).await;
    let third = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(third.payload.as_ref(), b"third");
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_offset_checker_prints_0_7s_report() {
    let c = cluster();
    let producer = Producer::start(TokioEnv, producer_config(&c.zk, "producer.type=sync\n"))
        .await
        .unwrap();
    produce(&producer, "ct", (0..40).map(|i| format!("m{i}"))).await;
    let (consumer, mut streams) = ConsumerConnector::start(
        TokioEnv,
        consumer_config(&c.zk, "chk", ""),
        Subscription::Topics([(topic("ct"), 1)].into_iter().collect()),
    )
    .await
    .unwrap();
    for _ in 0..40 {
        tokio::time::timeout(Duration::from_secs(10), streams[0].next())
            .await
            .unwrap()
            .unwrap();
    }
    assert!(consumer.commit_offsets().await.unwrap() > 0);
    consumer.shutdown().await;
    let out = Command::new(tributary_binary())
        .args([
            "consumer-offset-checker",
            "--group",
            "chk",
            "--zkconnect",
            &c.zk.connect_string(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every partition fully consumed: offset = log size, lag 0; owners released.
    let mut expected = String::new();
    for broker in 0..2 {
        for partition in 0..2 {
            let name = format!("{broker}-{partition}");
            let Some(block) = text
                .split("\n\n")
                .find(|b| b.starts_with(&format!("chk,ct,{name} ")))
            else {
                continue;
            };
            let offset: i64 = block
                .lines()
                .nth(2)
                .unwrap()
                .rsplit(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            expected.push_str(&tributary_tools::offset_checker::format_partition(
                "chk",
                "ct",
                &name,
                None,
                offset,
                Some(offset),
            ));
        }
    }
    expected.push_str("BROKER INFO\n");
    for (id, broker) in c.brokers.iter().enumerate() {
        if text.contains(&format!("{id} -> ")) {
            expected.push_str(&format!("{id} -> 127.0.0.1:{}\n", broker.port));
        }
    }
    assert_eq!(text, expected);
    assert!(
        text.matches("(Group,Topic,BrokerId-PartitionId)").count() >= 2,
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sync_producer_keeps_going_when_one_of_two_brokers_dies() {
    let mut c = cluster();
    let producer = Producer::start(TokioEnv, producer_config(&c.zk, "producer.type=sync\n"))
        .await
        .unwrap();
    let mut brokers_used = BTreeSet::new();
    for i in 0..120 {
        if i == 40 {
            c.brokers[1].kill();
        }
        let delivery = producer
            .send(Record::new(
                topic("keepgoing"),
                format!("m{i}").into_bytes(),
            ))
            .await
            .unwrap();
        let delivered = delivery
            .await
            .unwrap_or_else(|e| panic!("message {i} after a broker died: {e}"));
        assert!(delivered.offset.is_some(), "acknowledged with its offset");
        if i >= 60 {
            brokers_used.insert(delivered.broker_id);
        }
    }
    assert_eq!(
        brokers_used,
        [0].into_iter().collect(),
        "after the death is noticed, only the live broker is used"
    );
}

/// A group's first join writes what 0.7's layout needs (an owner node and a recorded start per
/// partition) and each topic's two parents once: not every ancestor again for each partition
/// (six logged writes a node, most of them creates of ancestors that already exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_groups_first_join_makes_each_topics_parents_once() {
    const TOPICS: usize = 8;
    let c = cluster();
    let producer = Producer::start(TokioEnv, producer_config(&c.zk, "producer.type=sync\n"))
        .await
        .unwrap();
    for t in 0..TOPICS {
        produce(&producer, &format!("join-{t}"), ["m".to_string()]).await;
    }
    let zk = zookeeper_client::Client::connect(&c.zk.connect_string())
        .await
        .unwrap();
    let mut partitions = 0;
    for t in 0..TOPICS {
        let dir = format!("/brokers/topics/join-{t}");
        for broker in zk.list_children(&dir).await.unwrap() {
            let (count, _) = zk.get_data(&format!("{dir}/{broker}")).await.unwrap();
            partitions += String::from_utf8(count)
                .unwrap()
                .trim()
                .parse::<usize>()
                .unwrap();
        }
    }
    let before = c.zk.served().expect("ZooKeeper's srvr answer");
    let (consumer, _streams) = ConsumerConnector::start(
        TokioEnv,
        consumer_config(&c.zk, "fresh", "autocommit.interval.ms=3600000\n"),
        Subscription::Whitelist("join-.*".into(), 1),
    )
    .await
    .unwrap();
    let joined = Instant::now();
    while consumer.owned().len() < partitions {
        assert!(
            joined.elapsed() < Duration::from_secs(30),
            "owns {} of {partitions} partitions",
            consumer.owned().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = c.zk.served().expect("ZooKeeper's srvr answer");
    let writes = after.since(before).writes;
    // An owner node and a recorded start per partition, two parents per topic, and a handful
    // of the group's own nodes (its directories and the member's registration).
    let needed = 2 * partitions + 2 * TOPICS;
    eprintln!(
        "{writes} writes logged for {partitions} partitions of {TOPICS} topics ({needed} needed)"
    );
    assert!(
        writes <= (needed + 16) as u64,
        "{writes} writes logged for {partitions} partitions of {TOPICS} topics: {needed} are needed"
    );
    consumer.shutdown().await;
}

/// A group's join of many partitions makes its owner nodes and recorded starts, and a commit
/// of them writes its offsets, as ZooKeeper transactions: one logged write per hundred nodes,
/// not one per node. Every owner node then names the member's thread, and every offset node
/// holds the recorded start, then what was consumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_join_and_a_commit_of_many_partitions_are_logged_as_one_write_per_hundred_nodes() {
    const TOPICS: usize = 8;
    const PER_TOPIC: usize = 20;
    let c = cluster();
    let producer = Producer::start(TokioEnv, producer_config(&c.zk, "producer.type=sync\n"))
        .await
        .unwrap();
    for t in 0..TOPICS {
        produce(
            &producer,
            &format!("txn-{t}"),
            (0..PER_TOPIC).map(|i| format!("m{i}")),
        )
        .await;
    }
    let zk = zookeeper_client::Client::connect(&c.zk.connect_string())
        .await
        .unwrap();
    let mut partitions = BTreeSet::new();
    for t in 0..TOPICS {
        let topic = format!("txn-{t}");
        for broker in zk
            .list_children(&format!("/brokers/topics/{topic}"))
            .await
            .unwrap()
        {
            let path = format!("/brokers/topics/{topic}/{broker}");
            let (count, _) = zk.get_data(&path).await.unwrap();
            let count: u32 = String::from_utf8(count).unwrap().trim().parse().unwrap();
            partitions.extend((0..count).map(|p| format!("{topic}/{broker}-{p}")));
        }
    }
    let before_join = c.zk.served().expect("ZooKeeper's srvr answer");
    let (consumer, mut streams) = ConsumerConnector::start(
        TokioEnv,
        consumer_config(&c.zk, "txn", "autocommit.interval.ms=3600000\n"),
        Subscription::Whitelist("txn-.*".into(), 1),
    )
    .await
    .unwrap();
    let mut consumed = BTreeMap::new();
    for _ in 0..TOPICS * PER_TOPIC {
        let message = tokio::time::timeout(Duration::from_secs(10), streams[0].next())
            .await
            .unwrap()
            .unwrap();
        let key = format!("{}/{}", message.topic, message.partition);
        consumed.insert(key, message.offset);
    }
    let before = c.zk.served().expect("ZooKeeper's srvr answer");
    let joined = before.since(before_join).writes;
    // Besides its owner nodes and recorded starts, the join makes its registration (the node
    // and its three ancestors) and the group's directories (`owners` and `offsets`, each with
    // its two ancestors, whose creates are logged even when they exist, and its topics' nodes
    // in one transaction): 12 writes here, and a few more allowed.
    let directories = 2 * (TOPICS.div_ceil(100) as u64 + 3) + 4 + 3;
    eprintln!(
        "{} partitions joined in {joined} logged writes",
        partitions.len()
    );
    assert!(
        partitions.len() >= 2 * TOPICS,
        "{partitions:?}: too few to tell"
    );
    assert!(
        joined <= 2 * partitions.len().div_ceil(100) as u64 + directories,
        "{} partitions took {joined} logged writes to join: their nodes were not made together",
        partitions.len()
    );
    for key in &partitions {
        let (topic, partition) = key.split_once('/').unwrap();
        let owner = format!("/consumers/txn/owners/{topic}/{partition}");
        let (thread, stat) = zk.get_data(&owner).await.unwrap();
        assert!(stat.ephemeral_owner != 0, "{owner} is not ephemeral");
        assert!(
            String::from_utf8(thread).unwrap().ends_with("-0"),
            "{owner}"
        );
        let offset = format!("/consumers/txn/offsets/{topic}/{partition}");
        let (start, _) = zk.get_data(&offset).await.unwrap();
        assert_eq!(start, b"0", "{offset}: the recorded start");
    }
    let written = consumer.commit_offsets().await.unwrap();
    let after = c.zk.served().expect("ZooKeeper's srvr answer");
    let writes = after.since(before).writes;
    eprintln!("{written} offsets committed in {writes} logged writes");
    assert_eq!(written, consumed.len(), "every partition read is committed");
    assert!(written >= TOPICS, "{written} partitions: too few to tell");
    assert!(
        writes <= written.div_ceil(100) as u64 + 1,
        "{written} offsets took {writes} logged writes: they were not written together"
    );
    for (key, next) in &consumed {
        let (topic, partition) = key.split_once('/').unwrap();
        let path = format!("/consumers/txn/offsets/{topic}/{partition}");
        let (data, _) = zk.get_data(&path).await.unwrap();
        assert_eq!(String::from_utf8(data).unwrap(), next.to_string(), "{path}");
    }
    consumer.shutdown().await;
}

/// A group that commits (autocommit) but never committed a partition records where it starts
/// it as soon as it claims it, so data deleted later before it was read is a reported gap, not
/// a silent fresh start; a group that never commits keeps 0.7's fresh start and records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_committing_group_records_where_it_starts_a_partition_it_never_committed() {
    let c = cluster();
    let producer = Producer::start(TokioEnv, producer_config(&c.zk, "producer.type=sync\n"))
        .await
        .unwrap();
    produce(&producer, "rs", (0..6).map(|i| format!("m{i}"))).await;
    let zk = zookeeper_client::Client::connect(&c.zk.connect_string())
        .await
        .unwrap();
    let mut partitions = BTreeSet::new();
    for broker in zk.list_children("/brokers/topics/rs").await.unwrap() {
        let (count, _) = zk
            .get_data(&format!("/brokers/topics/rs/{broker}"))
            .await
            .unwrap();
        let count: u32 = String::from_utf8(count).unwrap().trim().parse().unwrap();
        partitions.extend((0..count).map(|p| format!("{broker}-{p}")));
    }
    assert!(!partitions.is_empty());
    // (group, extra config, whether the start is recorded)
    let cases = [
        // An autocommit an hour away: only the recorded start can have written the offsets.
        ("rec", "autocommit.interval.ms=3600000\n", true),
        ("norec", "autocommit.enable=false\n", false),
    ];
    for (group, extra, recorded) in cases {
        let (consumer, mut streams) = ConsumerConnector::start(
            TokioEnv,
            consumer_config(&c.zk, group, extra),
            Subscription::Topics([(topic("rs"), 1)].into_iter().collect()),
        )
        .await
        .unwrap();
        for _ in 0..6 {
            tokio::time::timeout(Duration::from_secs(10), streams[0].next())
                .await
                .unwrap()
                .unwrap();
        }
        for partition in &partitions {
            let path = format!("/consumers/{group}/offsets/rs/{partition}");
            let found = zk.get_data(&path).await.map(|(d, _)| d).ok();
            let expected = recorded.then(|| b"0".to_vec());
            assert_eq!(found, expected, "{path}");
        }
        consumer.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_topic_registered_with_an_absurd_partition_count_does_not_stop_a_wildcard_group() {
    use tributary::coordination::zk::ZkCoordination;
    use tributary::coordination::{Coordination, NodeKind};
    let c = cluster();
    // A broker (or a hand) that registered 100,000,000 partitions for one topic.
    let connect = tributary_core::config::ZkConnect::parse(&c.zk.connect_string()).unwrap();
    let coord = ZkCoordination::connect(&connect, Duration::from_secs(4), Duration::from_secs(4))
        .await
        .unwrap();
    let bad = "/brokers/topics/wild-huge/0";
    coord.ensure_parents(bad).await.unwrap();
    coord
        .create(bad, b"100000000", NodeKind::Persistent)
        .await
        .unwrap();
    let producer = Producer::start(TokioEnv, producer_config(&c.zk, "producer.type=sync\n"))
        .await
        .unwrap();
    produce(&producer, "wild-ok", vec!["kept".to_string()]).await;
    let (consumer, mut streams) = ConsumerConnector::start(
        TokioEnv,
        consumer_config(&c.zk, "absurd", ""),
        Subscription::Whitelist("wild-.*".into(), 1),
    )
    .await
    .unwrap();
    let read = tokio::time::timeout(Duration::from_secs(10), streams[0].next()).await;
    assert!(
        matches!(&read, Ok(Ok(m)) if m.payload.as_ref() == b"kept"),
        "a wildcard group owned nothing because one topic's registration was absurd: {read:?}"
    );
    consumer.shutdown().await;
    coord.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registered_broker_that_never_answers_holds_up_only_its_own_partitions() {
    use tributary::coordination::zk::ZkCoordination;
    use tributary::coordination::{Coordination, NodeKind};
    let c = cluster();
    let producer = Producer::start(TokioEnv, producer_config(&c.zk, "producer.type=sync\n"))
        .await
        .unwrap();
    let sent: Vec<String> = (0..40).map(|i| format!("healthy-{i}")).collect();
    produce(&producer, "silent-t", sent.clone()).await;
    // A "broker" that accepts connections and never answers, registered with two partitions
    // of the topic, as a hung broker process would be.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming().flatten() {
            held.push(conn);
        }
    });
    let connect = tributary_core::config::ZkConnect::parse(&c.zk.connect_string()).unwrap();
    let coord = ZkCoordination::connect(&connect, Duration::from_secs(4), Duration::from_secs(4))
        .await
        .unwrap();
    coord
        .create(
            "/brokers/ids/9",
            format!("hung-1:127.0.0.1:{silent_port}").as_bytes(),
            NodeKind::Ephemeral,
        )
        .await
        .unwrap();
    coord
        .create("/brokers/topics/silent-t/9", b"2", NodeKind::Ephemeral)
        .await
        .unwrap();
    let started = Instant::now();
    let (consumer, mut streams) = ConsumerConnector::start(
        TokioEnv,
        consumer_config(&c.zk, "hung", ""),
        Subscription::Topics([(topic("silent-t"), 1)].into_iter().collect()),
    )
    .await
    .unwrap();
    let mut stream = streams.remove(0);
    let (mut seen, mut errors) = (BTreeSet::new(), Vec::new());
    while seen.len() < sent.len() && started.elapsed() < Duration::from_secs(60) {
        match tokio::time::timeout(Duration::from_secs(1), stream.next()).await {
            Ok(Ok(m)) => drop(seen.insert(String::from_utf8_lossy(&m.payload).into_owned())),
            Ok(Err(e)) => errors.push(e.to_string()),
            Err(_) => {}
        }
    }
    let took = started.elapsed();
    eprintln!("with a broker that never answers: {} of {} messages of the healthy brokers consumed in {took:?}; errors {errors:?}", seen.len(), sent.len());
    assert_eq!(
        seen.len(),
        sent.len(),
        "the healthy brokers' partitions were not consumed"
    );
    // 0.7's serial probes waited socket.timeout.ms (30 s) per silent partition.
    assert!(
        took < Duration::from_secs(15),
        "the healthy partitions waited {took:?} for the silent broker"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("9-0") || e.contains("9-1")),
        "the silent broker's partitions were not reported: {errors:?}"
    );
    consumer.shutdown().await;
    coord.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_console_consumer_that_cannot_join_its_groups_partitions_exits_non_zero() {
    use tributary::coordination::zk::ZkCoordination;
    use tributary::coordination::{Coordination, NodeKind};
    let c = cluster();
    let producer = Producer::start(TokioEnv, producer_config(&c.zk, "producer.type=sync\n"))
        .await
        .unwrap();
    produce(&producer, "unjoinable", vec!["x".to_string()]).await;
    // A member registration nobody can read: every rebalance attempt of the group fails.
    let connect = tributary_core::config::ZkConnect::parse(&c.zk.connect_string()).unwrap();
    let coord = ZkCoordination::connect(&connect, Duration::from_secs(4), Duration::from_secs(4))
        .await
        .unwrap();
    let bad = "/consumers/stuck/ids/garbage";
    coord.ensure_parents(bad).await.unwrap();
    coord
        .create(bad, b"not json", NodeKind::Persistent)
        .await
        .unwrap();
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("console.log");
    let mut child = Command::new(tributary_binary())
        .args([
            "console-consumer",
            "--zookeeper",
            &c.zk.connect_string(),
            "--topic",
            "unjoinable",
            "--group",
            "stuck",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    eprintln!(
        "console-consumer exited with {status:?} after {:?}",
        started.elapsed()
    );
    assert!(
        status.is_some_and(|s| !s.success()),
        "it did not exit non-zero within 60 s without ever joining ({status:?}):\n{stderr}"
    );
    assert!(
        stderr.contains("rebalance attempts") && stderr.contains("garbage"),
        "the error does not say why:\n{stderr}"
    );
    coord.close().await;
}
