//! The broker-wide memory budget makes requests wait for room instead of failing them, and
//! never lets more than the budget be held at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tributary::broker::budget::Budget;
use tributary::broker::connection::{serve, Shared};
use tributary::broker::handler::Handler;
use tributary::env::TokioEnv;
use tributary::logs::Logs;
use tributary::real_fs::RealFs;
use tributary::tls::link::Link;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::log::TopicPartition;
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{ErrorCode, FetchRequest, Request, Response};

/// A broker's logs in `dir` whose partition `t-0` holds `count` messages of 50 KB, flushed;
/// with the set appended.
async fn logs_holding(dir: &std::path::Path, count: u8) -> (Arc<Logs<RealFs>>, bytes::Bytes) {
    let text = format!(
        "brokerid=0\nlog.dir={}\nenable.zookeeper=false\n",
        dir.display()
    );
    let config = BrokerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap();
    let (logs, _) = Logs::<RealFs>::open(RealFs, config, 0).unwrap();
    let logs = Arc::new(logs);
    let mut set = MessageSetBuilder::new();
    (0..count).for_each(|i| {
        set.push(vec![i; 50_000]);
    });
    let set = set.build(CompressionCodec::None);
    let (log, _) = logs
        .get_or_create(&TopicPartition::new("t".parse().unwrap(), 0), 0)
        .unwrap();
    let appended = set.clone();
    tributary::logs::with_log(&TokioEnv, &log, move |l| {
        l.append(&appended, 0)?;
        l.flush(0)
    })
    .await
    .unwrap();
    (logs, set)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_that_together_exceed_the_budget_wait_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (logs, set) = logs_holding(dir.path(), 10).await;
    // Room for one 600 KB response at a time, not two.
    let budget_bytes = 700 * 1024;
    let shared = Arc::new(Shared {
        handler: Handler::new(TokioEnv, logs),
        request_bytes_max: 1 << 20,
        read_chunk_bytes: 1 << 16,
        budget: Budget::new(budget_bytes),
        new_topics: None,
    });
    let observed = shared.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_stop, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut seed = 0;
        while let Ok((stream, peer)) = listener.accept().await {
            seed += 1;
            tokio::spawn(serve::<TokioEnv>(
                Link::Plain(stream),
                peer,
                tributary::broker::access::Access::unrestricted(),
                shared.clone(),
                stop_rx.clone(),
                seed,
            ));
        }
    });
    let fetch = Request::Fetch(FetchRequest {
        topic: "t".parse().unwrap(),
        partition: 0,
        offset: 0,
        max_bytes: 600_000,
    });
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let fetch = fetch.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = tributary::client::connect(
                &tributary::env::TokioEnv,
                "127.0.0.1",
                port,
                Duration::from_secs(20),
            )
            .await
            .unwrap();
            conn.call(&fetch).await.unwrap()
        }));
    }
    for task in tasks {
        match task.await.unwrap() {
            Response::Fetch(f) => {
                assert_eq!((f.error, f.messages.len()), (ErrorCode::NoError, set.len()))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // Every response took its share of the budget.
    let peak = observed.budget.peak_bytes();
    assert!(
        peak >= 600_000 && peak <= budget_bytes,
        "responses did not take their share of the budget (peak {peak} bytes)"
    );
}

/// A fetch whose reader stalls keeps its share of the budget until its response is written:
/// another fetch that would not fit beside it waits, and goes through once the first reader
/// takes its response. (A broker that gave the share back before writing would let the second
/// through at once, holding both responses in memory.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_waiting_for_a_slow_reader_keeps_its_share() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let (logs, _) = logs_holding(dir.path(), 12).await;
    let shared = Arc::new(Shared {
        handler: Handler::new(TokioEnv, logs),
        request_bytes_max: 1 << 20,
        read_chunk_bytes: 1 << 16,
        budget: Budget::new(700 * 1024),
        new_topics: None,
    });
    // Small socket buffers, so a 600 KB response cannot hide in the kernel.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(4096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_stop, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut seed = 0;
        while let Ok((stream, peer)) = listener.accept().await {
            seed += 1;
            tokio::spawn(serve::<TokioEnv>(
                Link::Plain(stream),
                peer,
                tributary::broker::access::Access::unrestricted(),
                shared.clone(),
                stop_rx.clone(),
                seed,
            ));
        }
    });
    let fetch = Request::Fetch(FetchRequest {
        topic: "t".parse().unwrap(),
        partition: 0,
        offset: 0,
        max_bytes: 600_000,
    });
    // The slow reader: sends its fetch and reads nothing yet.
    let slow = tokio::net::TcpSocket::new_v4().unwrap();
    slow.set_recv_buffer_size(4096).unwrap();
    let mut slow = slow
        .connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .unwrap();
    slow.write_all(&fetch.to_bytes().unwrap()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = tokio::spawn(async move {
        let mut conn =
            tributary::client::connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(30))
                .await
                .unwrap();
        conn.call(&fetch).await.unwrap()
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !second.is_finished(),
        "a second 600 KB response went out while the first still held its share of a 700 KB budget"
    );
    // The slow reader takes its response; the second fetch goes through.
    let size = slow.read_i32().await.unwrap() as usize;
    let mut body = vec![0; size];
    slow.read_exact(&mut body).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("the second fetch never got its turn")
        .unwrap()
    {
        Response::Fetch(f) => assert_eq!(f.error, ErrorCode::NoError),
        other => panic!("unexpected {other:?}"),
    }
}
