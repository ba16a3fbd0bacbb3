//! MIRROR_PRODUCE end to end on real sockets: a mirror's producer against a broker, the same
//! source messages sent again by a second producer (a mirror restarted, or the partition moved
//! to another member), and what the partition then holds.

use std::sync::Arc;
use std::time::Duration;

use tributary::broker::Broker;
use tributary::client::connect;
use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record, SourceMark};
use tributary_core::config::{BrokerConfig, ProducerConfig, Properties};
use tributary_core::consumer::BrokerPartition;
use tributary_core::identity::ClusterId;
use tributary_core::message::ShallowIter;
use tributary_core::mirror::position::SourceKey;
use tributary_core::wire::{
    ErrorCode, FetchRequest, MirrorPositionsRequest, Request, Response, TopicName,
};

fn topic() -> TopicName {
    "copied".parse().unwrap()
}

fn key() -> Arc<SourceKey> {
    Arc::new(SourceKey {
        cluster: ClusterId::parse("east").unwrap(),
        topic: "orders".parse().unwrap(),
        partition: BrokerPartition {
            broker_id: 4,
            partition: 1,
        },
    })
}

async fn broker(dir: &std::path::Path) -> Broker {
    let text = format!(
        "brokerid=0\nport=0\nhostname=127.0.0.1\nlog.dir={}\nenable.zookeeper=false\nnum.partitions=3\n",
        dir.display()
    );
    Broker::start(
        TokioEnv,
        BrokerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap(),
    )
    .await
    .unwrap()
}

async fn mirror_producer(port: u16) -> Producer<TokioEnv> {
    let text = format!(
        "broker.list=0:127.0.0.1:{port}\ndurable.acks=true\nproducer.type=async\nbatch.size=4\nqueue.time=5\n"
    );
    let config = ProducerConfig::from_properties(&Properties::parse("test", &text).unwrap());
    Producer::start(TokioEnv, config.unwrap()).await.unwrap()
}

/// Sends source messages `from..to` (message i spans source offsets 10 i .. 10 (i + 1)) and
/// returns (delivered, of them held).
async fn send(producer: &Producer<TokioEnv>, from: u64, to: u64) -> (u64, u64) {
    let mut deliveries = Vec::new();
    for i in from..to {
        let mark = SourceMark {
            key: key(),
            start: 10 * i as i64,
            next: 10 * (i + 1) as i64,
            epoch: 1,
        };
        let record = Record::mirrored(topic(), format!("message {i}").into_bytes(), mark);
        deliveries.push(producer.send(record).await.unwrap());
    }
    let (mut delivered, mut held) = (0, 0);
    for delivery in deliveries {
        let d = delivery.await.unwrap();
        delivered += 1;
        held += u64::from(d.held);
    }
    (delivered, held)
}

/// Every message of the topic on the broker, in order, over its partitions.
async fn stored(port: u16) -> Vec<String> {
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(10))
        .await
        .unwrap();
    let mut out = Vec::new();
    for partition in 0..3 {
        let fetch = Request::Fetch(FetchRequest {
            topic: topic(),
            partition,
            offset: 0,
            max_bytes: 1 << 20,
        });
        match conn.call(&fetch).await.unwrap() {
            Response::Fetch(f) => out.extend(
                ShallowIter::new(&f.messages, 0)
                    .map(|e| String::from_utf8(e.unwrap().message.payload.to_vec()).unwrap()),
            ),
            other => panic!("{other:?}"),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_messages_sent_again_by_another_producer_are_held_not_copied_twice() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let port = broker.addr.port();
    let first = mirror_producer(port).await;
    assert_eq!(send(&first, 0, 10).await, (10, 0));
    first.close().await;
    // As a mirror restarted from a commit at message 4: 4..10 are sent again, then new ones;
    // the first set sent again starts inside what is held (an overlap when batches differ).
    let second = mirror_producer(port).await;
    assert_eq!(send(&second, 4, 15).await, (11, 6), "4..10 were held");
    second.close().await;
    let stored = stored(port).await;
    let expected: Vec<String> = (0..15).map(|i| format!("message {i}")).collect();
    assert_eq!(
        stored, expected,
        "one copy of each, in source order, in one partition"
    );

    // The broker says how far the copy has reached, durably.
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(10))
        .await
        .unwrap();
    let mut partitions_holding = Vec::new();
    for partition in 0..3 {
        let ask = Request::MirrorPositions(MirrorPositionsRequest {
            topic: topic(),
            partition,
            translate: vec![((*key()).clone(), 45), ((*key()).clone(), 0)],
        });
        match conn.call(&ask).await.unwrap() {
            Response::MirrorPositions(p) if !p.sources.is_empty() => {
                assert_eq!(p.error, ErrorCode::NoError);
                assert_eq!(p.sources.len(), 1);
                assert_eq!(p.sources[0].held_to, 150);
                assert_eq!(p.translated[1], 0, "nothing read: from the start");
                assert!(
                    (0..p.sources[0].mirror_end).contains(&p.translated[0]),
                    "a reader at source offset 45 resumes inside the copy: {:?}",
                    p.translated
                );
                partitions_holding.push(partition);
            }
            Response::MirrorPositions(p) => assert_eq!(p.translated, vec![-1, -1]),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(partitions_holding.len(), 1, "{partitions_holding:?}");
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_source_offsets_go_back_stores_each_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let port = broker.addr.port();
    // One batch holds 0..6 and, read again from an earlier offset (a partition this member
    // took over again), 3..9: sent as one set, 3..6 would be stored twice.
    let text = format!(
        "broker.list=0:127.0.0.1:{port}\ndurable.acks=true\nproducer.type=async\nbatch.size=100\nqueue.time=300\n"
    );
    let config = ProducerConfig::from_properties(&Properties::parse("test", &text).unwrap());
    let producer = Producer::start(TokioEnv, config.unwrap()).await.unwrap();
    let (first, again) = tokio::join!(send(&producer, 0, 6), async {
        tokio::task::yield_now().await;
        send(&producer, 3, 9).await
    });
    assert_eq!(first.0 + again.0, 12);
    producer.close().await;
    let expected: Vec<String> = (0..9).map(|i| format!("message {i}")).collect();
    assert_eq!(stored(port).await, expected);
    broker.shutdown().await.unwrap();
}

/// A broker that never answers a MIRROR_PRODUCE (each one it receives is reported with the
/// connection it came on) and has no partitions of the topic (it says so to every other
/// request: a producer's question where a source partition's copy is).
async fn silent_broker() -> (u16, tokio::sync::mpsc::UnboundedReceiver<usize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tributary_core::wire::{MirrorPositionsResponse, MIRROR_PRODUCE_ID};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut connection = 0;
        while let Ok((mut stream, _)) = listener.accept().await {
            connection += 1;
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Ok(size) = stream.read_i32().await {
                    let mut body = vec![0; size as usize];
                    if stream.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    if i16::from_be_bytes([body[0], body[1]]) == MIRROR_PRODUCE_ID {
                        let _ = tx.send(connection);
                        continue;
                    }
                    let none = Response::MirrorPositions(MirrorPositionsResponse {
                        error: ErrorCode::WrongPartition,
                        sources: Vec::new(),
                        translated: Vec::new(),
                    });
                    let _ = stream.write_all(&none.to_bytes().unwrap()).await;
                }
            });
        }
    });
    (port, rx)
}

/// Messages `from..to` of source partition `partition`, queued without waiting for them.
async fn queue(producer: &Producer<TokioEnv>, partition: u32, from: i64, to: i64) {
    let key = Arc::new(SourceKey {
        partition: BrokerPartition {
            broker_id: 4,
            partition,
        },
        ..(*key()).clone()
    });
    for i in from..to {
        let mark = SourceMark {
            key: key.clone(),
            start: 10 * i,
            next: 10 * (i + 1),
            epoch: 1,
        };
        let record = Record::mirrored(topic(), format!("message {i}").into_bytes(), mark);
        drop(producer.send(record).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_source_partitions_have_a_request_in_flight_each_and_one_never_has_two() {
    let (port, mut requests) = silent_broker().await;
    let text = format!(
        "broker.list=0:127.0.0.1:{port}\ndurable.acks=true\nproducer.type=async\nbatch.size=1\nqueue.time=5\nsocket.timeout.ms=30000\n"
    );
    let config = ProducerConfig::from_properties(&Properties::parse("test", &text).unwrap());
    let producer = Producer::start(TokioEnv, config.unwrap()).await.unwrap();
    queue(&producer, 0, 0, 1).await;
    let first = tokio::time::timeout(Duration::from_secs(10), requests.recv()).await;
    let first = first.expect("a first batch").expect("sent");
    queue(&producer, 0, 1, 5).await;
    let more = tokio::time::timeout(Duration::from_millis(500), requests.recv()).await;
    assert!(
        more.is_err(),
        "one source partition's next batch waits for the answer to its first: {more:?}"
    );
    queue(&producer, 1, 0, 5).await;
    let second = tokio::time::timeout(Duration::from_secs(10), requests.recv()).await;
    let second = second.expect("another source partition's batch goes while the first waits");
    assert_ne!(Some(first), second, "on a connection of its own");
    let more = tokio::time::timeout(Duration::from_millis(500), requests.recv()).await;
    assert!(more.is_err(), "at most two in flight: {more:?}");
}
