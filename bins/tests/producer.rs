//! The producer and the broker's acknowledged produce: an ack comes only after the data is
//! flushed, many acks share few fsyncs, a lone ack does not wait for the flush delay, a full
//! async queue reports every message it could not take, and a broker that does not know
//! acknowledged produce (Kafka 0.7) is detected.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use support::GateEnv;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tributary::broker::Broker;
use tributary::client::connect;
use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record, RunDelivery, SendError};
use tributary_core::config::{BrokerConfig, ProducerConfig, Properties};
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{
    ErrorCode, FetchRequest, OffsetsResponse, ProduceRequest, Request, Response, TopicName,
};

fn topic() -> TopicName {
    "t".parse().unwrap()
}

/// A standalone broker that never flushes by itself (only for acknowledgements).
async fn broker(env: GateEnv, dir: &std::path::Path) -> Broker {
    broker_with(env, dir, "").await
}

/// [`broker`] with `extra` lines of configuration.
async fn broker_with(env: GateEnv, dir: &std::path::Path, extra: &str) -> Broker {
    let text = format!(
        "brokerid=0\nport=0\nhostname=127.0.0.1\nlog.dir={}\nenable.zookeeper=false\nnum.partitions=1\n\
         log.flush.interval=1000000\nlog.default.flush.interval.ms=3600000\nlog.default.flush.scheduler.interval.ms=3600000\n{extra}",
        dir.display()
    );
    Broker::start(
        env,
        BrokerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap(),
    )
    .await
    .unwrap()
}

fn producer_config(text: &str) -> ProducerConfig {
    ProducerConfig::from_properties(&Properties::parse("test", text).unwrap()).unwrap()
}

/// What the broker serves of partition 0 of [`topic`] from its start (up to 10,000 bytes).
async fn served(
    conn: &mut tributary::client::Connection<<TokioEnv as tributary::env::Env>::Stream>,
) -> Bytes {
    let fetch = Request::Fetch(FetchRequest {
        topic: topic(),
        partition: 0,
        offset: 0,
        max_bytes: 10_000,
    });
    match conn.call(&fetch).await.unwrap() {
        Response::Fetch(f) => f.messages,
        other => panic!("{other:?}"),
    }
}

fn set(n: usize) -> Bytes {
    let mut b = MessageSetBuilder::new();
    (0..n).for_each(|i| {
        b.push(format!("m{i}").into_bytes());
    });
    b.build(CompressionCodec::None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn an_ack_comes_only_after_the_data_is_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let env = GateEnv::default();
    let broker = broker(env.clone(), dir.path()).await;
    let port = broker.addr.port();
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(20))
        .await
        .unwrap();
    // Hold every fsync: the ack must wait for it.
    env.fs.gate.set_closed(true);
    let request = Request::AckedProduce(vec![ProduceRequest {
        topic: topic(),
        partition: 0,
        messages: set(3),
    }]);
    let call = tokio::spawn(async move { (conn.call(&request).await, conn) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !call.is_finished(),
        "acknowledged before the data was flushed"
    );
    env.fs.gate.set_closed(false);
    let (answer, mut conn) = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap()
        .unwrap();
    match answer.unwrap() {
        Response::AckedProduce(r) => assert_eq!(
            (r.acks.len(), r.acks[0].error, r.acks[0].offset),
            (1, ErrorCode::NoError, 0)
        ),
        other => panic!("{other:?}"),
    }
    // Acknowledged means visible (reads stop at the flushed end; nothing else flushes here).
    assert_eq!(served(&mut conn).await, set(3));
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn many_acknowledged_producers_share_few_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let env = GateEnv::default();
    let broker = broker(env.clone(), dir.path()).await;
    let port = broker.addr.port();
    // Create the partition (its directory and segment syncs) before counting.
    let mut first = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(20))
        .await
        .unwrap();
    first
        .call(&Request::AckedProduce(vec![ProduceRequest {
            topic: topic(),
            partition: 0,
            messages: set(1),
        }]))
        .await
        .unwrap();
    let before = env.fs.gate.syncs.load(Ordering::SeqCst);
    const PRODUCERS: usize = 40;
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        tasks.push(tokio::spawn(async move {
            let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(20))
                .await
                .unwrap();
            let request = Request::AckedProduce(vec![ProduceRequest {
                topic: topic(),
                partition: 0,
                messages: set(2),
            }]);
            match conn.call(&request).await.unwrap() {
                Response::AckedProduce(r) => r.acks[0].error,
                other => panic!("{other:?}"),
            }
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), ErrorCode::NoError);
    }
    let fsyncs = env.fs.gate.syncs.load(Ordering::SeqCst) - before;
    eprintln!("{PRODUCERS} acknowledged produces, {fsyncs} fsyncs");
    assert!(
        fsyncs >= 1 && fsyncs <= PRODUCERS as u64 / 4,
        "{PRODUCERS} acks took {fsyncs} fsyncs: no group commit"
    );
    broker.shutdown().await.unwrap();
}

/// The flush delay is how long a flush waits for requests already being appended: a producer
/// alone is acknowledged as soon as its data is synced, not after the delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_lone_acknowledged_produce_does_not_wait_for_the_flush_delay() {
    let dir = tempfile::tempdir().unwrap();
    let env = GateEnv::default();
    let broker = broker_with(env.clone(), dir.path(), "acks.flush.delay.ms=20000\n").await;
    let mut conn = connect(
        &TokioEnv,
        "127.0.0.1",
        broker.addr.port(),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    for round in 0..3 {
        let request = Request::AckedProduce(vec![ProduceRequest {
            topic: topic(),
            partition: 0,
            messages: set(2),
        }]);
        let answer = tokio::time::timeout(Duration::from_secs(10), conn.call(&request))
            .await
            .unwrap_or_else(|_| panic!("round {round}: the ack waited for the 20 s flush delay"));
        match answer.unwrap() {
            Response::AckedProduce(r) => assert_eq!(
                (r.acks.len(), r.acks[0].error, r.acks[0].offset),
                (1, ErrorCode::NoError, round * set(2).len() as i64)
            ),
            other => panic!("{other:?}"),
        }
    }
    broker.shutdown().await.unwrap();
}

/// A port nothing listens on (bound for a moment, then let go): every send to it fails.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn an_async_producer_that_cannot_queue_or_send_reports_every_message() {
    let port = dead_port();
    let config = producer_config(&format!(
        "broker.list=0:127.0.0.1:{port}\nproducer.type=async\nqueue.size=10\nbatch.size=5\nqueue.time=10\nqueue.enqueueTimeout.ms=0\nnum.retries=1\n"
    ));
    let producer = Producer::start(TokioEnv, config).await.unwrap();
    let (mut refused, mut deliveries) = (0, Vec::new());
    for i in 0..100 {
        match producer
            .send(Record::new(topic(), format!("m{i}").into_bytes()))
            .await
        {
            Ok(d) => deliveries.push(d),
            Err(SendError::QueueFull { size: 10 }) => refused += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    let mut failed = 0;
    for d in deliveries {
        match d.await {
            Err(SendError::Failed { attempts: 2, .. }) => failed += 1,
            other => panic!("a message to a dead broker was {other:?}"),
        }
    }
    assert!(refused > 0, "a 10-message queue took 100 messages at once");
    assert_eq!(refused + failed, 100, "every message is reported");
    assert_eq!(
        producer.stats().queue_full.load(Ordering::SeqCst),
        refused as u64
    );
    assert_eq!(
        producer.stats().failed.load(Ordering::SeqCst),
        failed as u64
    );
    producer.close().await;
}

/// `try_send` queues while the async queue has room and gives the record back, untouched and
/// not counted, when it is full or the producer is sync; what it queued is reported like what
/// `send` queued.
#[tokio::test]
async fn try_send_queues_while_there_is_room_and_gives_the_record_back_otherwise() {
    let port = dead_port();
    let config = producer_config(&format!(
        "broker.list=0:127.0.0.1:{port}\nproducer.type=async\nqueue.size=3\nbatch.size=3\nqueue.time=10\nnum.retries=0\n"
    ));
    let producer = Producer::start(TokioEnv, config).await.unwrap();
    // A current-thread test: the sender task does not run before this task waits, so the
    // queue fills at its size.
    let mut deliveries = Vec::new();
    let mut back = Vec::new();
    for i in 0..5 {
        match producer.try_send(Record::new(topic(), format!("m{i}").into_bytes())) {
            Ok(delivery) => deliveries.push(delivery),
            Err(record) => back.push(record),
        }
    }
    assert_eq!(deliveries.len(), 3, "a 3-message queue took more or fewer");
    assert_eq!(
        back.iter().map(|r| r.value.clone()).collect::<Vec<_>>(),
        vec![Bytes::from_static(b"m3"), Bytes::from_static(b"m4")],
        "the records it could not queue come back as they were"
    );
    assert_eq!(producer.stats().accepted.load(Ordering::SeqCst), 3);
    assert_eq!(producer.stats().queue_full.load(Ordering::SeqCst), 0);
    for d in deliveries {
        assert!(
            matches!(d.await, Err(SendError::Failed { attempts: 1, .. })),
            "a queued message is reported"
        );
    }
    producer.close().await;

    let sync = producer_config(&format!(
        "broker.list=0:127.0.0.1:{port}\nproducer.type=sync\n"
    ));
    let producer = Producer::start(TokioEnv, sync).await.unwrap();
    let record = Record::new(topic(), &b"s"[..]);
    assert_eq!(producer.try_send(record.clone()).err(), Some(record));
    assert_eq!(producer.stats().accepted.load(Ordering::SeqCst), 0);
    producer.close().await;
}

/// A run of messages handed on together resolves once, after every one of them is durably
/// acknowledged, with all of them stored in order; a message the queue has no room for comes
/// back without joining the run, and joins it through `send_in`.
#[tokio::test]
async fn a_run_resolves_once_all_its_messages_are_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let env = GateEnv::default();
    let broker = broker(env.clone(), dir.path()).await;
    let port = broker.addr.port();
    let config = producer_config(&format!(
        "broker.list=0:127.0.0.1:{port}\nproducer.type=async\ndurable.acks=true\nqueue.size=3\nbatch.size=2\nqueue.time=10\nqueue.enqueueTimeout.ms=-1\n"
    ));
    let producer = Producer::start(TokioEnv, config).await.unwrap();
    // Hold every fsync: nothing can be acknowledged yet.
    env.fs.gate.set_closed(true);
    let run = RunDelivery::new();
    let mut back = Vec::new();
    // A current-thread test: the sender does not run before this task waits, so the queue
    // fills at its size.
    for i in 0..5 {
        if let Err(record) = producer.try_send_in(Record::new(topic(), format!("m{i}")), &run) {
            back.push(record);
        }
    }
    assert_eq!(back.len(), 2, "a 3-message queue took more or fewer");
    for record in back {
        producer.send_in(record, &run).await.unwrap();
    }
    let mut delivery = run.seal();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        delivery.try_take().is_none(),
        "the run resolved before its messages were flushed"
    );
    env.fs.gate.set_closed(false);
    let delivered = tokio::time::timeout(Duration::from_secs(10), delivery)
        .await
        .unwrap()
        .unwrap();
    assert!(delivered.offset.is_some(), "not durably acknowledged");
    assert_eq!(producer.stats().delivered.load(Ordering::SeqCst), 5);
    let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        served(&mut conn).await,
        set(5),
        "the run's messages, in order"
    );
    producer.close().await;
    broker.shutdown().await.unwrap();
}

/// A stand-in for a Kafka 0.7 broker: closes the connection on ACKED_PRODUCE (an unknown
/// request type), answers OFFSETS, and reports the produce requests it receives.
async fn kafka_0_7_stand_in() -> (u16, tokio::sync::mpsc::UnboundedReceiver<i16>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                loop {
                    let Ok(size) = stream.read_i32().await else {
                        return;
                    };
                    let mut body = vec![0; size as usize];
                    if stream.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let kind = i16::from_be_bytes([body[0], body[1]]);
                    let _ = tx.send(kind);
                    match kind {
                        4 => {
                            let answer = Response::Offsets(OffsetsResponse {
                                error: ErrorCode::NoError,
                                offsets: vec![0],
                            });
                            let _ = stream.write_all(&answer.to_bytes().unwrap()).await;
                        }
                        0 | 3 => {}
                        _ => return, // 0.7 closes the connection on an unknown type
                    }
                }
            });
        }
    });
    (port, rx)
}

#[tokio::test]
async fn a_broker_without_acknowledged_produce_is_detected_and_fallback_is_a_choice() {
    let (port, mut seen) = kafka_0_7_stand_in().await;
    let strict = producer_config(&format!(
        "broker.list=0:127.0.0.1:{port}\ndurable.acks=true\nnum.retries=2\n"
    ));
    let producer = Producer::start(TokioEnv, strict).await.unwrap();
    let delivery = producer
        .send(Record::new(topic(), &b"x"[..]))
        .await
        .unwrap();
    assert_eq!(
        delivery.await,
        Err(SendError::AcksUnsupported(0)),
        "no fallback unless asked"
    );
    let again = producer
        .send(Record::new(topic(), &b"x2"[..]))
        .await
        .unwrap();
    assert_eq!(
        again.await,
        Err(SendError::AcksUnsupported(0)),
        "the broker is remembered, and still no fallback"
    );
    producer.close().await;
    while seen.try_recv().is_ok() {}

    let lenient = producer_config(&format!(
        "broker.list=0:127.0.0.1:{port}\ndurable.acks=true\ndurable.acks.fallback=true\n"
    ));
    let producer = Producer::start(TokioEnv, lenient).await.unwrap();
    let delivered = producer
        .send(Record::new(topic(), &b"y"[..]))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        delivered.offset, None,
        "without an ack there is no offset to report"
    );
    // The second message goes straight to MULTIPRODUCE: the broker is remembered.
    producer
        .send(Record::new(topic(), &b"z"[..]))
        .await
        .unwrap()
        .await
        .unwrap();
    producer.close().await;
    let mut kinds = Vec::new();
    while kinds.len() < 4 {
        match tokio::time::timeout(Duration::from_secs(5), seen.recv()).await {
            Ok(Some(kind)) => kinds.push(kind),
            _ => break,
        }
    }
    assert_eq!(
        kinds,
        vec![100, 4, 3, 0],
        "acked produce refused, probed, resent unacknowledged, then plain produce"
    );
}
