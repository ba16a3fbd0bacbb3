//! Replica mode with real processes and two real ZooKeepers: a replica broker copies a source
//! broker's partitions byte for byte, at the same offsets (plain, gzip and snappy sets), keeps
//! doing so across a kill -9, and refuses produces to what it copies.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tributary::client::Connection;
use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record};
use tributary_core::config::{ProducerConfig, Properties};
use tributary_core::message::ShallowIter;
use tributary_core::wire::{ErrorCode, FetchRequest, OffsetsRequest, Request, Response, TopicName};
use tributary_tests::broker::BrokerProcess;
use tributary_tests::zookeeper::{free_port, ZooKeeper};

const PARTITIONS: i32 = 2;

fn topic(name: &str) -> TopicName {
    name.parse().unwrap()
}

/// A broker (id 0, two partitions per topic, small segments, every message flushed).
fn broker(dir: &std::path::Path, zk: &ZooKeeper, extra: &str) -> BrokerProcess {
    let port = free_port();
    let properties = format!(
        "brokerid=0\nhostname=127.0.0.1\nport={port}\nlog.dir={}\nnum.partitions={PARTITIONS}\nlog.flush.interval=1\n\
         log.file.size=20000\nzk.connect={}\nzk.sessiontimeout.ms=4000\nzk.connectiontimeout.ms=10000\n{extra}",
        dir.join("logs").display(),
        zk.connect_string()
    );
    BrokerProcess::start(dir, port, &properties)
}

async fn connect(port: u16) -> Connection<tokio::net::TcpStream> {
    tributary::client::connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(10))
        .await
        .unwrap()
}

async fn latest(conn: &mut Connection<tokio::net::TcpStream>, t: &str, partition: i32) -> i64 {
    let request = Request::Offsets(OffsetsRequest {
        topic: topic(t),
        partition,
        time: -1,
        max_offsets: 1,
    });
    match conn.call(&request).await.unwrap() {
        Response::Offsets(o) if o.error == ErrorCode::NoError => {
            o.offsets.first().copied().unwrap_or(0)
        }
        _ => -1,
    }
}

/// The partition's bytes from `from` to its visible end, read with FETCH (every fetch must be
/// answered without an error).
async fn bytes_of(
    conn: &mut Connection<tokio::net::TcpStream>,
    t: &str,
    partition: i32,
    from: i64,
) -> Vec<u8> {
    let (bytes, at, error) = bytes_until_refused(conn, t, partition, from).await;
    assert_eq!(error, ErrorCode::NoError, "{t}/{partition} at {at}");
    bytes
}

/// Every segment file of a partition, concatenated in offset order (segment boundaries may
/// differ: a replica appends what one fetch brought as one set).
fn segment_bytes(log_dir: &std::path::Path, t: &str, partition: i32) -> Vec<u8> {
    let dir = log_dir.join(format!("{t}-{partition}"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".kafka"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .flat_map(|n| std::fs::read(dir.join(n)).unwrap())
        .collect()
}

async fn produce(zk: &ZooKeeper, codec: &str, t: &str, messages: impl Iterator<Item = String>) {
    let text = format!(
        "zk.connect={}\nproducer.type=async\nbatch.size=50\ndurable.acks=true\nnum.retries=10\ncompression.codec={codec}\n",
        zk.connect_string()
    );
    let config =
        ProducerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap();
    let producer = Producer::start(TokioEnv, config).await.unwrap();
    let mut deliveries = Vec::new();
    for m in messages {
        deliveries.push(
            producer
                .send(Record::new(topic(t), Bytes::from(m)))
                .await
                .unwrap(),
        );
    }
    for d in deliveries {
        d.await
            .unwrap_or_else(|e| panic!("a durable send failed: {e}"));
    }
    producer.close().await;
}

/// Waits (up to 60 s) until the replica's partition `t`/`p` ends where the source's does now;
/// returns that end.
async fn wait_until_copied(
    (src, dst): (
        &mut Connection<tokio::net::TcpStream>,
        &mut Connection<tokio::net::TcpStream>,
    ),
    replica: &BrokerProcess,
    t: &str,
    p: i32,
) -> i64 {
    let end = latest(src, t, p).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let copied = latest(dst, t, p).await;
        if copied == end {
            return end;
        }
        assert!(
            Instant::now() < deadline,
            "{t}/{p}: the replica is at {copied}, the source at {end}\n{}",
            replica.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every partition of `topics` on the replica ends where the source's does, then
/// checks both hold the same bytes, read with FETCH and in their segment files.
async fn assert_identical(
    source: &BrokerProcess,
    source_dir: &std::path::Path,
    replica: &BrokerProcess,
    replica_dir: &std::path::Path,
    topics: &[&str],
) {
    let (mut src, mut dst) = (connect(source.port).await, connect(replica.port).await);
    for t in topics {
        for p in 0..PARTITIONS {
            let end = wait_until_copied((&mut src, &mut dst), replica, t, p).await;
            let (a, b) = (
                bytes_of(&mut src, t, p, 0).await,
                bytes_of(&mut dst, t, p, 0).await,
            );
            assert_eq!(a.len() as i64, end, "{t}/{p}: the source reads whole");
            assert!(
                a == b,
                "{t}/{p}: the replica's bytes differ from the source's"
            );
            let (fa, fb) = (
                segment_bytes(&source_dir.join("logs"), t, p),
                segment_bytes(&replica_dir.join("logs"), t, p),
            );
            assert!(fa == fb, "{t}/{p}: the segment files differ");
        }
    }
}

/// A source and a mirror cluster: a ZooKeeper and a data directory each, and the source's
/// broker.
struct Clusters {
    source_zk: ZooKeeper,
    replica_zk: ZooKeeper,
    source_dir: tempfile::TempDir,
    replica_dir: tempfile::TempDir,
    source: BrokerProcess,
}

impl Clusters {
    fn start() -> Self {
        let (source_zk, replica_zk) = (ZooKeeper::start(), ZooKeeper::start());
        let (source_dir, replica_dir) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let source = broker(source_dir.path(), &source_zk, "");
        Clusters {
            source_zk,
            replica_zk,
            source_dir,
            replica_dir,
            source,
        }
    }
}

/// A replica broker (data in `dir`, registered in `zk`) of the cluster behind `source_zk`,
/// with `extra` configuration lines.
fn replica_broker(
    dir: &std::path::Path,
    zk: &ZooKeeper,
    source_zk: &ZooKeeper,
    extra: &str,
) -> BrokerProcess {
    let config = format!(
        "replica.source.zk.connect={}\n{extra}",
        source_zk.connect_string()
    );
    broker(dir, zk, &config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_holds_the_source_byte_for_byte_across_a_kill_and_refuses_produces() {
    let Clusters {
        source_zk,
        replica_zk,
        source_dir,
        replica_dir,
        source,
    } = Clusters::start();
    for (codec, t) in [("0", "plain"), ("1", "zipped"), ("2", "snapped")] {
        produce(
            &source_zk,
            codec,
            t,
            (0..300).map(|i| format!("{t} message {i}")),
        )
        .await;
    }
    let mut replica = replica_broker(replica_dir.path(), &replica_zk, &source_zk, "");
    assert_identical(
        &source,
        source_dir.path(),
        &replica,
        replica_dir.path(),
        &["plain", "zipped", "snapped"],
    )
    .await;

    // The replica's cluster sees the source's layout.
    let zk = zookeeper_client::Client::connect(&replica_zk.connect_string())
        .await
        .unwrap();
    let (count, _) = zk.get_data("/brokers/topics/plain/0").await.unwrap();
    assert_eq!(count, PARTITIONS.to_string().into_bytes());

    // Produces to a replica topic are refused: an acknowledged one fails, and nothing lands.
    let text = format!(
        "zk.connect={}\nproducer.type=sync\ndurable.acks=true\nnum.retries=1\n",
        replica_zk.connect_string()
    );
    let config =
        ProducerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap();
    let producer = Producer::start(TokioEnv, config).await.unwrap();
    let refused = producer
        .send(Record::new(topic("plain"), Bytes::from_static(b"not here")))
        .await;
    let refused = match refused {
        Ok(delivery) => delivery.await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(
        refused.is_err(),
        "a produce to a replica topic was accepted"
    );
    // So is one to a topic the filter allows that the source does not have (yet): its bytes
    // would take offsets the source's data is to have.
    let early = producer
        .send(Record::new(
            topic("not-on-the-source"),
            Bytes::from_static(b"early"),
        ))
        .await;
    let early = match early {
        Ok(delivery) => delivery.await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(
        early.is_err(),
        "a produce to a topic the replica would copy was accepted"
    );
    producer.close().await;

    // kill -9 in the middle of copying more, then a restart: identical again, nothing twice.
    replica.kill();
    let more = tokio::spawn({
        let connect = source_zk.connect_string();
        async move {
            let text = format!("zk.connect={connect}\nproducer.type=async\nbatch.size=20\ndurable.acks=true\ncompression.codec=1\n");
            let config =
                ProducerConfig::from_properties(&Properties::parse("test", &text).unwrap())
                    .unwrap();
            let producer = Producer::start(TokioEnv, config).await.unwrap();
            let mut deliveries = Vec::new();
            for i in 0..2000 {
                deliveries.push(
                    producer
                        .send(Record::new(
                            topic("zipped"),
                            Bytes::from(format!("more {i}")),
                        ))
                        .await
                        .unwrap(),
                );
            }
            for d in deliveries {
                d.await.unwrap();
            }
            producer.close().await;
        }
    });
    replica.spawn();
    tokio::time::sleep(Duration::from_millis(300)).await;
    replica.kill();
    more.await.unwrap();
    replica.spawn();
    assert_identical(
        &source,
        source_dir.path(),
        &replica,
        replica_dir.path(),
        &["plain", "zipped", "snapped"],
    )
    .await;
    drop(replica);
    drop(source);
}

/// The committed offsets of `group` for `t` in a cluster: partition name → offset.
async fn committed(
    zk: &ZooKeeper,
    group: &str,
    t: &str,
) -> std::collections::BTreeMap<String, String> {
    let client = zookeeper_client::Client::connect(&zk.connect_string())
        .await
        .unwrap();
    let path = format!("/consumers/{group}/offsets/{t}");
    let mut out = std::collections::BTreeMap::new();
    for name in client.list_children(&path).await.unwrap_or_default() {
        if let Ok((data, _)) = client.get_data(&format!("{path}/{name}")).await {
            out.insert(name, String::from_utf8(data).unwrap());
        }
    }
    out
}

fn consumer(zk: &ZooKeeper, group: &str) -> tributary_core::config::ConsumerConfig {
    let text = format!(
        "zk.connect={}\ngroupid={group}\nzk.sessiontimeout.ms=4000\nautooffset.reset=smallest\nfetcher.backoff.ms=50\nautocommit.interval.ms=100\n",
        zk.connect_string()
    );
    tributary_core::config::ConsumerConfig::from_properties(
        &Properties::parse("test", &text).unwrap(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_fails_over_to_the_replica_where_it_left_off_and_promote_makes_the_topic_writable(
) {
    use tributary::consumer::{ConsumerConnector, Subscription};
    let Clusters {
        source_zk,
        replica_zk,
        source_dir,
        replica_dir,
        source,
    } = Clusters::start();
    let replica = replica_broker(
        replica_dir.path(),
        &replica_zk,
        &source_zk,
        "replica.offsets.sync.groups=app.*\nreplica.offsets.sync.interval.ms=200\n",
    );
    let all: std::collections::BTreeSet<String> = (0..200).map(|i| format!("order {i}")).collect();
    produce(&source_zk, "0", "orders", all.iter().cloned()).await;

    // Part of the topic consumed on the source, committed.
    let subscription = || Subscription::Topics([(topic("orders"), 1)].into_iter().collect());
    let (on_source, mut streams) =
        ConsumerConnector::start(TokioEnv, consumer(&source_zk, "app"), subscription())
            .await
            .unwrap();
    let mut seen = Vec::new();
    for _ in 0..120 {
        let m = tokio::time::timeout(Duration::from_secs(10), streams[0].next())
            .await
            .unwrap()
            .unwrap();
        seen.push(String::from_utf8(m.payload.to_vec()).unwrap());
    }
    on_source.commit_offsets().await.unwrap();
    on_source.shutdown().await;
    let source_offsets = committed(&source_zk, "app", "orders").await;
    assert!(!source_offsets.is_empty());

    // The replica has it all, and the group's offsets are synced there.
    assert_identical(
        &source,
        source_dir.path(),
        &replica,
        replica_dir.path(),
        &["orders"],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while committed(&replica_zk, "app", "orders").await != source_offsets {
        assert!(
            Instant::now() < deadline,
            "offsets not synced: {:?} vs {source_offsets:?}",
            committed(&replica_zk, "app", "orders").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The consumer moves to the mirror cluster and goes on where it left off.
    let (on_replica, mut streams) =
        ConsumerConnector::start(TokioEnv, consumer(&replica_zk, "app"), subscription())
            .await
            .unwrap();
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(3), streams[0].next()).await {
        seen.push(String::from_utf8(m.payload.to_vec()).unwrap());
    }
    on_replica.shutdown().await;
    // The group now commits on the mirror cluster: a replica broker that restarts (forgetting
    // what it synced) must not put the source's older offsets back.
    let own_commits = committed(&replica_zk, "app", "orders").await;
    assert_ne!(
        own_commits, source_offsets,
        "the group committed on the mirror cluster"
    );
    let mut replica = replica;
    let zk = zookeeper_client::Client::connect(&replica_zk.connect_string())
        .await
        .unwrap();
    let registered = zk.get_data("/brokers/ids/0").await.map(|(d, _)| d).ok();
    replica.kill();
    replica.spawn();
    // Until the restarted broker registered again (its copier starts then), and a few sync
    // intervals more.
    let deadline = Instant::now() + Duration::from_secs(30);
    while zk.get_data("/brokers/ids/0").await.map(|(d, _)| d).ok() == registered {
        assert!(
            Instant::now() < deadline,
            "the replica broker did not register again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        committed(&replica_zk, "app", "orders").await,
        own_commits,
        "the offset sync overwrote the failed-over group's own commits"
    );
    let distinct: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(distinct, all, "the union of both sides is the topic");
    assert_eq!(
        seen.len(),
        all.len(),
        "nothing read twice (the offsets were committed and synced exactly)"
    );

    // Promote: copying stops, the topic takes produces on the mirror cluster.
    let out = std::process::Command::new(tributary_tests::broker::tributary_binary())
        .args([
            "promote",
            "--zookeeper",
            &replica_zk.connect_string(),
            "--topic",
            "orders",
            "--wait",
            "20",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("orders broker 0: copying stopped at"),
        "{text}"
    );
    produce(
        &replica_zk,
        "0",
        "orders",
        ["written on the mirror".to_string()].into_iter(),
    )
    .await;
    let mut dst = connect(replica.port).await;
    let ends: Vec<i64> = ends_of(&mut dst, "orders").await;
    produce(
        &source_zk,
        "0",
        "orders",
        (0..20).map(|i| format!("late {i}")),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        ends_of(&mut dst, "orders").await,
        ends,
        "a promoted topic is no longer copied"
    );
    // Promoting again changes nothing.
    let again = std::process::Command::new(tributary_tests::broker::tributary_binary())
        .args([
            "promote",
            "--zookeeper",
            &replica_zk.connect_string(),
            "--topic",
            "orders",
        ])
        .output()
        .unwrap();
    assert!(again.status.success());
    assert_eq!(String::from_utf8_lossy(&again.stdout), text);
}

/// Every partition's latest offset.
async fn ends_of(conn: &mut Connection<tokio::net::TcpStream>, t: &str) -> Vec<i64> {
    let mut ends = Vec::new();
    for p in 0..PARTITIONS {
        ends.push(latest(conn, t, p).await);
    }
    ends
}

/// The partition's bytes from `from` until its visible end or the first refused offset (a
/// hole), with the offset where reading stopped and the answer there.
async fn bytes_until_refused(
    conn: &mut Connection<tokio::net::TcpStream>,
    t: &str,
    partition: i32,
    from: i64,
) -> (Vec<u8>, i64, ErrorCode) {
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let request = Request::Fetch(FetchRequest {
            topic: topic(t),
            partition,
            offset,
            max_bytes: 64 * 1024,
        });
        let Response::Fetch(f) = conn.call(&request).await.unwrap() else {
            panic!("not a fetch response")
        };
        if f.error != ErrorCode::NoError {
            return (out, offset, f.error);
        }
        let mut entries = ShallowIter::new(&f.messages, offset);
        entries.by_ref().for_each(drop);
        let valid = entries.end().valid_bytes;
        if valid == 0 {
            return (out, offset, ErrorCode::NoError);
        }
        out.extend_from_slice(&f.messages[..valid]);
        offset += valid as i64;
    }
}

async fn earliest(conn: &mut Connection<tokio::net::TcpStream>, t: &str, partition: i32) -> i64 {
    let request = Request::Offsets(OffsetsRequest {
        topic: topic(t),
        partition,
        time: -2,
        max_offsets: 1,
    });
    match conn.call(&request).await.unwrap() {
        Response::Offsets(o) if o.error == ErrorCode::NoError => {
            o.offsets.first().copied().unwrap_or(-1)
        }
        _ => -1,
    }
}

/// Checks one partition of a replica with a hole `from..to`: the bytes before it are what the
/// source had there (`before`), every fetch inside it is refused, OFFSETS start after it, and
/// from `to` on it holds the source's bytes.
async fn assert_hole(
    src: &mut Connection<tokio::net::TcpStream>,
    dst: &mut Connection<tokio::net::TcpStream>,
    (t, p): (&str, i32),
    before: &[u8],
    (from, to): (i64, i64),
) {
    let (head, stopped, error) = bytes_until_refused(dst, t, p, 0).await;
    assert!(head == before, "{t}/{p}: the bytes before the hole changed");
    assert_eq!(
        (stopped, error),
        (from, ErrorCode::OffsetOutOfRange),
        "{t}/{p}: reading stops at the hole's start"
    );
    let (_, _, inside) = bytes_until_refused(dst, t, p, to - 1).await;
    assert_eq!(
        inside,
        ErrorCode::OffsetOutOfRange,
        "{t}/{p}: inside the hole"
    );
    assert_eq!(
        earliest(dst, t, p).await,
        to,
        "{t}/{p}: OFFSETS start after the hole"
    );
    let (tail, _, error) = bytes_until_refused(dst, t, p, to).await;
    assert_eq!(error, ErrorCode::NoError);
    let (source_tail, _, _) = bytes_until_refused(src, t, p, to).await;
    assert!(
        !tail.is_empty() && tail == source_tail,
        "{t}/{p}: after the hole the replica holds the source's bytes ({} vs {})",
        tail.len(),
        source_tail.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gap_leaves_a_recorded_hole_and_copying_goes_on_after_it() {
    let Clusters {
        source_zk,
        replica_zk,
        source_dir,
        replica_dir,
        mut source,
    } = Clusters::start();
    produce(
        &source_zk,
        "0",
        "gappy",
        (0..300).map(|i| format!("first {i}")),
    )
    .await;
    let mut replica = replica_broker(replica_dir.path(), &replica_zk, &source_zk, "");
    assert_identical(
        &source,
        source_dir.path(),
        &replica,
        replica_dir.path(),
        &["gappy"],
    )
    .await;
    let mut src = connect(source.port).await;
    let mut before = Vec::new();
    for p in 0..PARTITIONS {
        before.push(bytes_of(&mut src, "gappy", p, 0).await);
    }

    // While the replica is down, the source takes more and loses all but its newest segment
    // (retention, done by hand with the broker stopped so no timer is waited for).
    replica.kill();
    // (One producer per round: each round's sets are separate, so segments roll.)
    for round in 0..10 {
        let messages = (0..400).map(move |i| format!("second {round}.{i}"));
        produce(&source_zk, "0", "gappy", messages).await;
    }
    drop(src);
    source.kill();
    let mut hole_ends = Vec::new();
    for p in 0..PARTITIONS {
        let dir = source_dir.path().join("logs").join(format!("gappy-{p}"));
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".kafka"))
            .collect();
        names.sort();
        let sizes: Vec<(String, u64)> = names
            .iter()
            .map(|n| (n.clone(), std::fs::metadata(dir.join(n)).unwrap().len()))
            .collect();
        let newest = names.pop().unwrap();
        for name in &names {
            std::fs::remove_file(dir.join(name)).unwrap();
        }
        let start: i64 = newest.trim_end_matches(".kafka").parse().unwrap();
        assert!(
            start > before[p as usize].len() as i64,
            "gappy/{p}: the deleted data must reach past what the replica holds ({} bytes; segments {sizes:?})", before[p as usize].len()
        );
        hole_ends.push(start);
    }
    source.spawn();
    produce(
        &source_zk,
        "0",
        "gappy",
        (0..300).map(|i| format!("third {i}")),
    )
    .await;

    // The replica comes back: each partition gets a hole from its end to the source's new
    // start, recorded on disk, and copying goes on after it.
    replica.spawn();
    let (mut src, mut dst) = (connect(source.port).await, connect(replica.port).await);
    for round in 0..2 {
        for p in 0..PARTITIONS {
            wait_until_copied((&mut src, &mut dst), &replica, "gappy", p).await;
            let from = before[p as usize].len() as i64;
            let to = hole_ends[p as usize];
            assert_hole(
                &mut src,
                &mut dst,
                ("gappy", p),
                &before[p as usize],
                (from, to),
            )
            .await;
            let record = replica_dir
                .path()
                .join("logs")
                .join(format!("gappy-{p}"))
                .join(tributary_core::log::gap_file_name(from as u64, to as u64));
            assert!(record.exists(), "no hole record {}", record.display());
            assert!(
                replica
                    .log_text()
                    .contains(&format!("GAP: the source deleted bytes {from}..{to}")),
                "the replica must say what it could not copy\n{}",
                replica.log_text()
            );
        }
        if round == 0 {
            // A consumer group on the replica cluster reads up to each hole, reports it as a
            // gap, and goes on after it: it sees exactly what the replica serves.
            consume_across_holes(&replica_zk, &mut dst, &before, &hole_ends).await;
            // The hole survives a kill -9 and recovery, and copying goes on.
            drop(dst);
            replica.kill();
            produce(
                &source_zk,
                "2",
                "gappy",
                (0..200).map(|i| format!("fourth {i}")),
            )
            .await;
            replica.spawn();
            dst = connect(replica.port).await;
        }
    }
    drop(replica);
    drop(source);
}

/// Payloads of every message (inner ones of compressed wrappers) in a run of whole sets.
fn payloads(bytes: &[u8], base: i64) -> Vec<String> {
    tributary_core::message::DeepIter::new(Bytes::copy_from_slice(bytes), base, 1 << 24)
        .map(|m| String::from_utf8(m.unwrap().message.payload.to_vec()).unwrap())
        .collect()
}

/// Consumer groups on the replica cluster (`autooffset.reset=smallest`): a new one starts
/// where OFFSETS start (after the holes) and reads the rest; one whose offsets are at 0 reads
/// up to each hole, reports it as a gap, and goes on after it. Each gets every message it
/// should, once.
async fn consume_across_holes(
    replica_zk: &ZooKeeper,
    dst: &mut Connection<tokio::net::TcpStream>,
    before: &[Vec<u8>],
    hole_ends: &[i64],
) {
    use tributary::coordination::{Coordination, NodeKind};
    use tributary::env::Env;
    let (mut heads, mut tails) = (Vec::new(), Vec::new());
    for p in 0..PARTITIONS {
        heads.extend(payloads(&before[p as usize], 0));
        let to = hole_ends[p as usize];
        let (tail, _, _) = bytes_until_refused(dst, "gappy", p, to).await;
        tails.extend(payloads(&tail, to));
    }
    let (new_group, gaps) = consume_all(replica_zk, "new-reader").await;
    assert_eq!(gaps, 0, "a new group starts after the holes");
    assert_same(new_group, tails.clone(), "a new group");

    // A group that was at the start (as one failed over from the source would be).
    let zk = tributary_core::config::ZkConnect::parse(&replica_zk.connect_string()).unwrap();
    let coord = TokioEnv
        .coordinate(&zk, Duration::from_secs(10), Duration::from_secs(10))
        .await
        .unwrap();
    for p in 0..PARTITIONS {
        let path = format!("/consumers/old-reader/offsets/gappy/0-{p}");
        coord.ensure_parents(&path).await.unwrap();
        coord
            .create(&path, b"0", NodeKind::Persistent)
            .await
            .unwrap();
    }
    coord.close().await;
    let (old_group, gaps) = consume_all(replica_zk, "old-reader").await;
    assert_eq!(gaps, PARTITIONS as u64, "one gap reported per hole");
    let mut everything = heads;
    everything.extend(tails);
    assert_same(old_group, everything, "a group that was at offset 0");
}

/// Everything a group reads of `gappy` until it has nothing more for 3 s, and the gaps it
/// reported.
async fn consume_all(zk: &ZooKeeper, group: &str) -> (Vec<String>, u64) {
    use tributary::consumer::{ConsumerConnector, Subscription};
    let subscription = Subscription::Topics([(topic("gappy"), 1)].into_iter().collect());
    let (connector, mut streams) =
        ConsumerConnector::start(TokioEnv, consumer(zk, group), subscription)
            .await
            .unwrap();
    let mut seen = Vec::new();
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(3), streams[0].next()).await {
        seen.push(String::from_utf8(m.payload.to_vec()).unwrap());
    }
    let (gaps, _) = connector.gaps();
    connector.shutdown().await;
    (seen, gaps)
}

fn assert_same(mut seen: Vec<String>, mut expected: Vec<String>, who: &str) {
    seen.sort();
    expected.sort();
    assert_eq!(seen.len(), expected.len(), "{who}: messages read");
    assert!(
        seen == expected,
        "{who} read other messages than the replica serves"
    );
}

/// The offset of the last top-level message of `bytes` (read from offset 0).
fn last_message_offset(bytes: &[u8]) -> Option<i64> {
    ShallowIter::new(bytes, 0)
        .filter_map(Result::ok)
        .last()
        .map(|e| e.offset)
}

/// A replica whose log took writes of its own while the source took others (the offsets line
/// up: every message has the same size) does not append the source's bytes after its own: it
/// checks its last message against the source's at that offset, stops the partition and names
/// the offset and the way forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_log_diverged_from_its_source_stops_that_partition_and_names_the_offset() {
    let Clusters {
        source_zk,
        replica_zk,
        source_dir,
        replica_dir,
        source,
    } = Clusters::start();
    let numbered = |tag: &'static str, range: std::ops::Range<u32>| {
        range.map(move |i| format!("{tag} {i:05}"))
    };
    produce(&source_zk, "0", "orders", numbered("order", 0..50)).await;
    let mut replica = replica_broker(replica_dir.path(), &replica_zk, &source_zk, "");
    assert_identical(
        &source,
        source_dir.path(),
        &replica,
        replica_dir.path(),
        &["orders"],
    )
    .await;
    // The replica's log.dir runs as a plain broker for a while and takes writes of its own,
    // while the source takes others of the same size.
    replica.kill();
    let as_replica = std::fs::read_to_string(&replica.config).unwrap();
    let plain: String = as_replica
        .lines()
        .filter(|l| !l.starts_with("replica."))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&replica.config, plain).unwrap();
    replica.spawn();
    produce(&replica_zk, "0", "orders", numbered("local", 0..30)).await;
    replica.kill();
    produce(&source_zk, "0", "orders", numbered("order", 50..150)).await;
    std::fs::write(&replica.config, as_replica).unwrap();
    replica.spawn();
    let mut dst = connect(replica.port).await;
    let mut src = connect(source.port).await;
    let mut diverged = 0;
    for p in 0..PARTITIONS {
        let held = bytes_of(&mut dst, "orders", p, 0).await;
        let theirs = bytes_of(&mut src, "orders", p, 0).await;
        if theirs.starts_with(&held) {
            continue;
        }
        diverged += 1;
        let at = last_message_offset(&held).unwrap();
        // Diverged where the source is as long, or ahead of a source that is shorter.
        let said = [
            format!("orders-{p}: its log diverged from the source's: its message at offset {at}"),
            format!(
                "orders-{p}: the replica ends at {}, past the source's end",
                held.len()
            ),
        ];
        let deadline = Instant::now() + Duration::from_secs(20);
        while !said.iter().any(|s| replica.log_text().contains(s)) {
            assert!(
                Instant::now() < deadline,
                "orders/{p}: no word of the divergence at {at}\n{}",
                replica.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            replica.log_text().contains("tributary demote"),
            "names the way forward"
        );
    }
    assert!(diverged > 0, "the local writes diverged no partition");
    // Nothing of the source's is appended after the replica's own messages.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for p in 0..PARTITIONS {
        let held = bytes_of(&mut dst, "orders", p, 0).await;
        let theirs = bytes_of(&mut src, "orders", p, 0).await;
        let common = held.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
        let mixed = ShallowIter::new(&held[common.min(held.len())..], 0)
            .filter_map(Result::ok)
            .any(|e| e.message.payload.starts_with(b"order"));
        assert!(
            !mixed,
            "orders/{p}: the source's messages were appended after the replica's own ({} bytes held, {common} in common)",
            held.len()
        );
    }
}

/// `tributary <args>`: its exit status and what it printed (stdout, then stderr).
fn run_tool(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(tributary_tests::broker::tributary_binary())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// What an acknowledged produce of one message to `t` in the cluster behind `zk` came to.
async fn try_produce(zk: &ZooKeeper, t: &str) -> Result<(), String> {
    let text = format!(
        "zk.connect={}\nproducer.type=sync\ndurable.acks=true\nnum.retries=1\nretry.backoff.ms=100\n",
        zk.connect_string()
    );
    let config =
        ProducerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap();
    let producer = Producer::start(TokioEnv, config).await.unwrap();
    let sent = producer
        .send(Record::new(
            topic(t),
            Bytes::from_static(b"after the failover"),
        ))
        .await;
    let result = match sent {
        Ok(delivery) => delivery.await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    producer.close().await;
    result
}

/// `promote` without `--topic` promotes the whole cluster: every topic takes produces, those
/// created afterwards too; the source (dead, as in a disaster) is no longer asked anything.
/// `promote --topic` refuses a topic no broker holds and writes nothing for it. A produce
/// refused by a replica topic says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn promoting_the_whole_cluster_makes_every_topic_writable_new_ones_too() {
    let Clusters {
        source_zk,
        replica_zk,
        source_dir,
        replica_dir,
        source,
    } = Clusters::start();
    produce(
        &source_zk,
        "0",
        "orders",
        (0..40).map(|i| format!("order {i}")),
    )
    .await;
    let replica = replica_broker(replica_dir.path(), &replica_zk, &source_zk, "");
    assert_identical(
        &source,
        source_dir.path(),
        &replica,
        replica_dir.path(),
        &["orders"],
    )
    .await;
    // The disaster: the source cluster is gone.
    drop(source);
    drop(source_zk);

    let refused = try_produce(&replica_zk, "orders-v2").await;
    let why = refused.expect_err("a new topic of a replica cluster took a produce");
    assert!(why.contains("read-only replica"), "{why}");

    let zk = replica_zk.connect_string();
    let (ok, text) = run_tool(&[
        "promote",
        "--zookeeper",
        &zk,
        "--topic",
        "orders-v2",
        "--wait",
        "5",
    ]);
    assert!(
        !ok && text.contains("orders-v2: no broker of this cluster holds it"),
        "{text}"
    );
    let client = zookeeper_client::Client::connect(&zk).await.unwrap();
    assert!(
        client
            .get_data("/tributary/promoted/orders-v2")
            .await
            .is_err(),
        "a refused promotion left its node behind"
    );

    let (ok, text) = run_tool(&["promote", "--zookeeper", &zk, "--wait", "20"]);
    assert!(ok, "{text}");
    assert!(text.contains("the whole cluster is promoted"), "{text}");
    assert!(
        text.contains("orders broker 0: copying stopped at"),
        "{text}"
    );
    try_produce(&replica_zk, "orders")
        .await
        .expect("a promoted topic");
    try_produce(&replica_zk, "orders-v2")
        .await
        .expect("a topic created after the promotion");
    // Said once that the source is no longer read; then not a word about it.
    let said = "the source is no longer read";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !replica.log_text().contains(said) {
        assert!(Instant::now() < deadline, "{}", replica.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let log = replica.log_text();
    let after = &log[log.find(said).unwrap()..];
    assert!(
        !after
            .lines()
            .any(|l| l.contains("WARN") && l.contains("source")),
        "the promoted cluster still tries its source:\n{after}"
    );
    let (ok, again) = run_tool(&["promote", "--zookeeper", &zk, "--wait", "20"]);
    assert!(ok, "{again}");
    for line in text.lines() {
        assert!(
            again.contains(line),
            "promoting again changed {line:?}:\n{again}"
        );
    }
    assert!(
        again.contains("orders-v2 broker 0: copying stopped at (partition:offset) 0:0"),
        "a topic made after the promotion was never copied: its cut is its start\n{again}"
    );
}

/// A whole-cluster promotion is confirmed only once every live replica broker carried it out:
/// the moment `promote` returns, a topic no broker holds yet is created by the first produce.
/// (Confirmed on the topics' acknowledgements alone, a cluster without topics would be
/// "promoted" before any broker had read the request, and refuse that produce.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_whole_cluster_promotion_is_confirmed_by_every_replica_broker() {
    let Clusters {
        source_zk,
        replica_zk,
        source_dir: _source_dir,
        replica_dir,
        source: _source,
    } = Clusters::start();
    let replica = replica_broker(replica_dir.path(), &replica_zk, &source_zk, "");
    // The broker is up and keeps its replica record: it is one `promote` waits for.
    let client = zookeeper_client::Client::connect(&replica_zk.connect_string())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.get_data("/tributary/replicas/0").await.is_err() {
        assert!(Instant::now() < deadline, "{}", replica.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let zk = replica_zk.connect_string();
    let (ok, text) = run_tool(&["promote", "--zookeeper", &zk, "--wait", "20"]);
    assert!(ok, "{text}");
    try_produce(&replica_zk, "fresh")
        .await
        .expect("a topic created right after the whole cluster's promotion was confirmed");
    assert!(
        text.contains("broker 0: the whole cluster's promotion carried out"),
        "{text}"
    );
}
