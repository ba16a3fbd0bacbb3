//! The real `tributary server` over loopback, registered in a real ZooKeeper.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tributary::client::Connection;
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{
    ErrorCode, FetchRequest, OffsetsRequest, ProduceRequest, Request, Response, TopicName,
};
use tributary_tests::broker::{tributary_binary, BrokerProcess};
use tributary_tests::zookeeper::{free_port, ZooKeeper};

const SESSION_MS: u64 = 2000;

fn properties(dir: &std::path::Path, port: u16, zk: &ZooKeeper, extra: &str) -> String {
    format!(
        "brokerid=0\nhostname=127.0.0.1\nport={port}\nlog.dir={}\nnum.partitions=2\nlog.flush.interval=1\n\
         zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\nzk.connectiontimeout.ms=10000\n{extra}",
        dir.join("logs").display(),
        zk.connect_string()
    )
}

fn topic(name: &str) -> TopicName {
    name.parse().unwrap()
}

fn set(codec: CompressionCodec, tag: &str, n: usize) -> Bytes {
    let mut b = MessageSetBuilder::new();
    for i in 0..n {
        b.push(format!("{tag}-{i}").into_bytes());
    }
    b.build(codec)
}

async fn connect(port: u16) -> Connection<tokio::net::TcpStream> {
    tributary::client::connect(
        &tributary::env::TokioEnv,
        "127.0.0.1",
        port,
        Duration::from_secs(10),
    )
    .await
    .unwrap()
}

async fn fetch(
    conn: &mut Connection<tokio::net::TcpStream>,
    t: &str,
    partition: i32,
    offset: i64,
) -> (ErrorCode, Bytes) {
    let request = Request::Fetch(FetchRequest {
        topic: topic(t),
        partition,
        offset,
        max_bytes: 1 << 20,
    });
    match conn.call(&request).await.unwrap() {
        Response::Fetch(f) => (f.error, f.messages),
        other => panic!("unexpected {other:?}"),
    }
}

async fn offsets(
    conn: &mut Connection<tokio::net::TcpStream>,
    t: &str,
    partition: i32,
    time: i64,
) -> Vec<i64> {
    let request = Request::Offsets(OffsetsRequest {
        topic: topic(t),
        partition,
        time,
        max_offsets: 10,
    });
    match conn.call(&request).await.unwrap() {
        Response::Offsets(o) => o.offsets,
        other => panic!("unexpected {other:?}"),
    }
}

/// Polls until `fetch` returns at least `len` bytes.
async fn fetch_until(
    conn: &mut Connection<tokio::net::TcpStream>,
    t: &str,
    partition: i32,
    len: usize,
) -> Bytes {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (error, bytes) = fetch(conn, t, partition, 0).await;
        assert_eq!(error, ErrorCode::NoError);
        if bytes.len() >= len {
            return bytes;
        }
        assert!(
            Instant::now() < deadline,
            "{t}-{partition}: {} bytes readable after 10 s, waiting for {len}",
            bytes.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn zk_client(zk: &ZooKeeper) -> zookeeper_client::Client {
    zookeeper_client::Client::connect(&zk.connect_string())
        .await
        .unwrap()
}

async fn zk_data(client: &zookeeper_client::Client, path: &str) -> Option<String> {
    client
        .get_data(path)
        .await
        .ok()
        .map(|(d, _)| String::from_utf8(d).unwrap())
}

async fn wait_for(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn produce_and_fetch_single_and_multi_byte_exact_with_every_codec() {
    let zk = ZooKeeper::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _broker = BrokerProcess::start(dir.path(), port, &properties(dir.path(), port, &zk, ""));
    let mut conn = connect(port).await;
    let plain = set(CompressionCodec::None, "plain", 3);
    let gzip = set(CompressionCodec::Gzip, "gzip", 5);
    let snappy = set(CompressionCodec::Snappy, "snappy", 4);
    conn.send(&Request::Produce(ProduceRequest {
        topic: topic("e2e"),
        partition: 0,
        messages: plain.clone(),
    }))
    .await
    .unwrap();
    conn.send(&Request::MultiProduce(vec![
        ProduceRequest {
            topic: topic("e2e"),
            partition: 0,
            messages: gzip.clone(),
        },
        ProduceRequest {
            topic: topic("e2e"),
            partition: 1,
            messages: snappy.clone(),
        },
    ]))
    .await
    .unwrap();
    let mut expected0 = plain.to_vec();
    expected0.extend_from_slice(&gzip);
    assert_eq!(
        fetch_until(&mut conn, "e2e", 0, expected0.len()).await,
        expected0
    );
    assert_eq!(fetch_until(&mut conn, "e2e", 1, snappy.len()).await, snappy);

    let multi = Request::MultiFetch(vec![
        FetchRequest {
            topic: topic("e2e"),
            partition: 0,
            offset: plain.len() as i64,
            max_bytes: 1 << 20,
        },
        FetchRequest {
            topic: topic("e2e"),
            partition: 1,
            offset: 0,
            max_bytes: 1 << 20,
        },
        FetchRequest {
            topic: topic("e2e"),
            partition: 7,
            offset: 0,
            max_bytes: 1 << 20,
        },
        FetchRequest {
            topic: topic("e2e"),
            partition: 0,
            offset: 1,
            max_bytes: 1 << 20,
        },
        FetchRequest {
            topic: topic("nothing-here"),
            partition: 0,
            offset: 0,
            max_bytes: 1 << 20,
        },
    ]);
    let Response::MultiFetch(m) = conn.call(&multi).await.unwrap() else {
        panic!("expected MULTIFETCH response")
    };
    let got: Vec<(ErrorCode, usize)> = m
        .blocks
        .iter()
        .map(|b| (b.error, b.messages.len()))
        .collect();
    assert_eq!(
        got,
        vec![
            (ErrorCode::NoError, gzip.len()),
            (ErrorCode::NoError, snappy.len()),
            (ErrorCode::WrongPartition, 0),
            (ErrorCode::OffsetOutOfRange, 0),
            (ErrorCode::NoError, 0),
        ]
    );
    assert_eq!(m.blocks[0].messages, gzip);

    let end = expected0.len() as i64;
    assert_eq!(offsets(&mut conn, "e2e", 0, -1).await, vec![end, 0]);
    assert_eq!(offsets(&mut conn, "e2e", 0, -2).await, vec![0]);
    assert_eq!(
        offsets(&mut conn, "e2e", 0, 1_000).await,
        Vec::<i64>::new(),
        "nothing was written before 1970"
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert_eq!(
        offsets(&mut conn, "e2e", 0, now_ms + 60_000).await,
        vec![end, 0]
    );
    assert_eq!(offsets(&mut conn, "absent", 0, -1).await, vec![0]);
    assert_eq!(
        fetch(&mut conn, "e2e", 0, end).await,
        (ErrorCode::NoError, Bytes::new())
    );
    assert_eq!(
        fetch(&mut conn, "e2e", 0, end + 100).await.0,
        ErrorCode::OffsetOutOfRange
    );
}

/// A broker killed and started again at once takes its registration back from its previous
/// run's session (written down in its log.dir) instead of waiting for ZooKeeper to expire it.
#[tokio::test]
async fn a_broker_killed_and_restarted_at_once_does_not_wait_out_its_previous_session() {
    const LONG_SESSION_MS: u64 = 15_000;
    let zk = ZooKeeper::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = properties(dir.path(), port, &zk, "").replace(
        &format!("zk.sessiontimeout.ms={SESSION_MS}"),
        &format!("zk.sessiontimeout.ms={LONG_SESSION_MS}"),
    );
    let mut broker = BrokerProcess::start(dir.path(), port, &text);
    let client = zk_client(&zk).await;
    wait_for("the broker's registration", async || {
        zk_data(&client, "/brokers/ids/0").await.is_some()
    })
    .await;
    let before = zk_data(&client, "/brokers/ids/0").await;
    let (_, old) = client.get_data("/brokers/ids/0").await.unwrap();
    broker.kill();
    let restarted = Instant::now();
    broker.spawn();
    wait_for("the restarted broker's registration", async || {
        let now = zk_data(&client, "/brokers/ids/0").await;
        now.is_some() && now != before
    })
    .await;
    let took = restarted.elapsed();
    let (_, new) = client.get_data("/brokers/ids/0").await.unwrap();
    assert_ne!(
        new.ephemeral_owner, old.ephemeral_owner,
        "still the old session's node"
    );
    assert!(
        took < Duration::from_millis(LONG_SESSION_MS / 3),
        "registered {took:?} after the restart: it waited for the old session ({LONG_SESSION_MS} ms) to expire\n{}",
        broker.log_text()
    );
    let mut conn = connect(port).await;
    let data = set(CompressionCodec::None, "after", 3);
    conn.send(&Request::Produce(ProduceRequest {
        topic: topic("back"),
        partition: 0,
        messages: data.clone(),
    }))
    .await
    .unwrap();
    assert_eq!(fetch_until(&mut conn, "back", 0, data.len()).await, data);
}

#[tokio::test]
async fn registration_survives_kill_restart_and_session_expiry() {
    let zk = ZooKeeper::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut broker = BrokerProcess::start(dir.path(), port, &properties(dir.path(), port, &zk, ""));
    let client = zk_client(&zk).await;
    // The broker listens, then registers (0.7's start order): listening is not yet registered.
    wait_for("the broker's registration", async || {
        zk_data(&client, "/brokers/ids/0").await.is_some()
    })
    .await;
    let registration = zk_data(&client, "/brokers/ids/0")
        .await
        .unwrap_or_else(|| panic!("registered: {}", broker.log_text()));
    let parts: Vec<&str> = registration.split(':').collect();
    assert_eq!(parts.len(), 3, "{registration}");
    assert!(
        parts[0].starts_with("127.0.0.1-") && parts[0][10..].parse::<i64>().is_ok(),
        "{registration}"
    );
    assert_eq!(
        (parts[1], parts[2]),
        ("127.0.0.1", port.to_string().as_str())
    );

    let mut conn = connect(port).await;
    let data = set(CompressionCodec::None, "kept", 10);
    conn.send(&Request::Produce(ProduceRequest {
        topic: topic("reg"),
        partition: 1,
        messages: data.clone(),
    }))
    .await
    .unwrap();
    assert_eq!(fetch_until(&mut conn, "reg", 1, data.len()).await, data);
    wait_for("topic registration", async || {
        zk_data(&client, "/brokers/topics/reg/0").await.as_deref() == Some("2")
    })
    .await;

    // SIGKILL: the ephemeral node goes when the session times out.
    broker.kill();
    wait_for("the killed broker's node to expire", async || {
        zk_data(&client, "/brokers/ids/0").await.is_none()
    })
    .await;
    assert!(zk_data(&client, "/brokers/topics/reg/0").await.is_none());

    // Restart: registered again, log recovered, flushed data still served.
    broker.spawn();
    wait_for("re-registration after restart", async || {
        zk_data(&client, "/brokers/ids/0").await.is_some()
    })
    .await;
    let mut conn = connect(port).await;
    assert_eq!(
        fetch(&mut conn, "reg", 1, 0).await,
        (ErrorCode::NoError, data.clone())
    );
    assert_eq!(
        zk_data(&client, "/brokers/topics/reg/0").await.as_deref(),
        Some("2")
    );
    let before = zk_data(&client, "/brokers/ids/0").await;

    // Freeze past the session timeout: ZooKeeper expires the session; on resume the broker
    // notices, registers again (new creator timestamp) and keeps serving.
    broker.pause();
    wait_for("the frozen broker's session to expire", async || {
        zk_data(&client, "/brokers/ids/0").await.is_none()
    })
    .await;
    broker.resume();
    wait_for("re-registration after expiry", async || {
        let now = zk_data(&client, "/brokers/ids/0").await;
        now.is_some() && now != before
    })
    .await;
    wait_for("topic re-registration after expiry", async || {
        zk_data(&client, "/brokers/topics/reg/0").await.is_some()
    })
    .await;
    let mut conn = connect(port).await;
    assert_eq!(
        fetch(&mut conn, "reg", 1, 0).await,
        (ErrorCode::NoError, data)
    );
    assert!(
        broker.log_text().contains("session expired"),
        "{}",
        broker.log_text()
    );
    assert!(
        broker.terminate(),
        "clean shutdown on SIGTERM:\n{}",
        broker.log_text()
    );
    assert!(dir.path().join("logs/.kafka_cleanshutdown").exists());
}

#[tokio::test]
async fn a_second_broker_with_the_same_id_refuses_to_start() {
    let zk = ZooKeeper::start();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let port_a = free_port();
    let a = BrokerProcess::start(
        dir_a.path(),
        port_a,
        &properties(dir_a.path(), port_a, &zk, ""),
    );
    // The first broker listens before it registers: a second one started in between could
    // register first (and then run for ever), as it did once under load.
    a.wait_until_registered();
    let port_b = free_port();
    let config_b = dir_b.path().join("server.properties");
    std::fs::write(&config_b, properties(dir_b.path(), port_b, &zk, "")).unwrap();
    let out = std::process::Command::new(tributary_binary())
        .arg("server")
        .arg(&config_b)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("broker id 0 is already registered by a live broker"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_second_broker_on_the_same_log_dir_refuses_to_start_naming_the_holder() {
    let zk = ZooKeeper::start();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let port_a = free_port();
    let _a = BrokerProcess::start(
        dir_a.path(),
        port_a,
        &properties(dir_a.path(), port_a, &zk, ""),
    );
    // A copied config with only brokerid and port changed: same log.dir.
    let port_b = free_port();
    let copied = properties(dir_a.path(), port_b, &zk, "").replace("brokerid=0", "brokerid=1");
    let config_b = dir_b.path().join("server.properties");
    std::fs::write(&config_b, copied).unwrap();
    let out = std::process::Command::new(tributary_binary())
        .arg("server")
        .arg(&config_b)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let logs = dir_a.path().join("logs");
    assert!(
        stderr.contains(&format!(
            "log.dir {} is in use by another process (brokerid 0 port {port_a}, pid",
            logs.display()
        )),
        "{stderr}"
    );
    assert!(!logs.join(".kafka_cleanshutdown").exists());
}

#[tokio::test]
async fn simple_consumer_says_what_a_missing_partition_or_offset_means() {
    let zk = ZooKeeper::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _broker = BrokerProcess::start(dir.path(), port, &properties(dir.path(), port, &zk, ""));
    let server = format!("kafka://127.0.0.1:{port}");
    let consume = |extra: &[&str]| {
        let out = std::process::Command::new(tributary_binary())
            .args([
                "simple-consumer",
                "--server",
                &server,
                "--topic",
                "nothing-here",
                "--stop-at-end",
            ])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = consume(&[]);
    assert_eq!((code, stdout.as_str()), (Some(0), ""), "{stderr}");
    assert!(stderr.contains("no messages in nothing-here-0 from offset 0: the partition is empty there, or does not exist on this broker"), "{stderr}");
    let (code, _, stderr) = consume(&["--partition", "5"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("partition 5 does not exist: topic nothing-here has fewer partitions on this broker (error 3, WrongPartitionCode)"), "{stderr}");
    let mut conn = connect(port).await;
    let produce = Request::Produce(ProduceRequest {
        topic: topic("nothing-here"),
        partition: 0,
        messages: set(CompressionCodec::None, "m", 2),
    });
    conn.send(&produce).await.unwrap();
    fetch_until(&mut conn, "nothing-here", 0, 2).await;
    let (code, _, stderr) = consume(&["--offset", "1000000"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("offset 1000000 is outside what nothing-here-0 holds"),
        "{stderr}"
    );
}

#[tokio::test]
async fn hostile_clients_get_closed_and_a_good_client_is_served_throughout() {
    let zk = ZooKeeper::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let broker = BrokerProcess::start(
        dir.path(),
        port,
        &properties(dir.path(), port, &zk, "max.socket.request.bytes=1048576\n"),
    );
    let mut good = connect(port).await;
    let data = set(CompressionCodec::Gzip, "precious", 20);
    good.send(&Request::Produce(ProduceRequest {
        topic: topic("safe"),
        partition: 0,
        messages: data.clone(),
    }))
    .await
    .unwrap();
    assert_eq!(fetch_until(&mut good, "safe", 0, data.len()).await, data);

    let raw = |bytes: Vec<u8>| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&bytes).unwrap();
        s
    };
    let closed = |mut s: TcpStream| {
        let mut buf = [0u8; 16];
        matches!(s.read(&mut buf), Ok(0) | Err(_))
    };
    let frame = |body: &[u8]| {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    };
    let fetch_body = |t: &[u8]| {
        let mut b = vec![0, 1];
        b.extend_from_slice(&(t.len() as i16).to_be_bytes());
        b.extend_from_slice(t);
        b.extend_from_slice(&[0; 12]);
        b.extend_from_slice(&(2i32 << 20).to_be_bytes());
        b
    };
    assert!(
        closed(raw(vec![0x13, 0x37, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3])),
        "random bytes"
    );
    assert!(
        closed(raw(0x7fff_ffffi32.to_be_bytes().to_vec())),
        "2 GiB frame"
    );
    assert!(closed(raw(frame(&[0, 42, 0, 0]))), "unknown request type");
    for bad_topic in [&b"../x"[..], b"", &[b'a'; 300]] {
        assert!(
            closed(raw(frame(&fetch_body(bad_topic)))),
            "topic {:?}",
            String::from_utf8_lossy(bad_topic)
        );
    }
    let mut bad_crc = set(CompressionCodec::None, "x", 2).to_vec();
    bad_crc[12] ^= 1;
    let produce = Request::Produce(ProduceRequest {
        topic: topic("safe"),
        partition: 0,
        messages: Bytes::from(bad_crc),
    })
    .to_bytes()
    .unwrap();
    assert!(closed(raw(produce.to_vec())), "corrupt message set");

    // Stallers and idlers: a truncated frame then silence, a thousand idle connections, and a
    // client that asks for data and never reads it.
    let _truncated = raw(frame(&fetch_body(b"safe"))[..9].to_vec());
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let mut big = MessageSetBuilder::new();
    for i in 0..10u8 {
        big.push(vec![i; 100_000]);
    }
    let big = big.build(CompressionCodec::None);
    good.send(&Request::Produce(ProduceRequest {
        topic: topic("big"),
        partition: 0,
        messages: big.clone(),
    }))
    .await
    .unwrap();
    assert_eq!(
        fetch_until(&mut good, "big", 0, big.len()).await.len(),
        big.len()
    );
    let mut lazy_request = Vec::new();
    for _ in 0..200 {
        lazy_request.extend_from_slice(&frame(&fetch_body(b"big"))[..]);
    }
    let _lazy = raw(lazy_request);

    for i in 0..20 {
        let more = set(CompressionCodec::Snappy, &format!("more{i}"), 2);
        good.send(&Request::Produce(ProduceRequest {
            topic: topic("other"),
            partition: 0,
            messages: more,
        }))
        .await
        .unwrap();
        let (error, bytes) = fetch(&mut good, "safe", 0, 0).await;
        assert_eq!(
            (error, &bytes),
            (ErrorCode::NoError, &data),
            "the good client is served, data unchanged"
        );
    }
    let mut fresh = connect(port).await;
    assert_eq!(
        fetch(&mut fresh, "safe", 0, 0).await,
        (ErrorCode::NoError, data)
    );
    drop(idle);
    assert!(
        broker.log_text().contains("closing"),
        "the broker says why it closed connections"
    );
}
