//! The broker's partitions under concurrency and failure: reads never wait for an fsync, an
//! invalid first set creates nothing, refused partitions answer with an error, a panicking
//! operation stops its partition, and `log.dir` belongs to one process.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use support::{Gate, GateEnv};
use tributary::broker::handler::{CloseReason, Effects, Handler};
use tributary::env::{Env, TokioEnv};
use tributary::logs::{self, with_log, Logs};
use tributary::real_fs::RealFs;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::log::{LogError, TopicPartition, CHECKPOINT_FILE};
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{
    ErrorCode, FetchRequest, OffsetsRequest, ProduceRequest, Request, Response,
};

use crate::support;

const T0: i64 = 1_700_000_000_000;

fn config(dir: &Path, extra: &str) -> BrokerConfig {
    let text = format!(
        "brokerid=0\nlog.dir={}\nenable.zookeeper=false\nlog.flush.interval=100000\n{extra}",
        dir.display()
    );
    BrokerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap()
}

fn tp(topic: &str, partition: u32) -> TopicPartition {
    TopicPartition::new(topic.parse().unwrap(), partition)
}

fn set(tag: u8, n: usize) -> Bytes {
    let mut b = MessageSetBuilder::new();
    (0..n).for_each(|i| {
        b.push(vec![tag, i as u8, 7, 7, 7]);
    });
    b.build(CompressionCodec::None)
}

/// Opens the gate when the test ends, even by a failed assertion, so the runtime can stop.
struct ReopenOnDrop(Arc<Gate>);

impl Drop for ReopenOnDrop {
    fn drop(&mut self) {
        self.0.set_closed(false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn reads_of_flushed_data_do_not_wait_for_a_running_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let env = GateEnv::default();
    let (logs, _) = Logs::open(env.fs(), config(dir.path(), ""), T0).unwrap();
    let logs = Arc::new(logs);
    let (log, _) = logs.get_or_create(&tp("t", 0), T0).unwrap();
    let first = set(1, 3);
    with_log(&env, &log, {
        let first = first.clone();
        move |l| l.append(&first, T0).map(drop)
    })
    .await
    .unwrap();
    logs::flush(&env, &log, &Default::default()).await.unwrap();
    with_log(&env, &log, |l| l.append(&set(2, 3), T0).map(drop))
        .await
        .unwrap();

    // A flush whose fsync hangs (a slow disk): it must not hold the partition.
    env.fs.gate.set_closed(true);
    let _reopen = ReopenOnDrop(env.fs.gate.clone());
    let flushing = tokio::spawn({
        let (env, log) = (env.clone(), log.clone());
        async move { logs::flush(&env, &log, &Default::default()).await }
    });
    while !env.fs.gate.waiting.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let read = tokio::time::timeout(
        Duration::from_secs(2),
        with_log(&env, &log, |l| l.read(0, 10_000)),
    )
    .await;
    let read = read
        .expect("a read of flushed data waited for another task's fsync")
        .unwrap();
    assert_eq!(
        read, first,
        "only the flushed set is visible while the second one syncs"
    );
    let more = tokio::time::timeout(
        Duration::from_secs(2),
        with_log(&env, &log, |l| l.append(&set(3, 1), T0).map(drop)),
    )
    .await;
    more.expect("an append waited for another task's fsync")
        .unwrap();

    env.fs.gate.set_closed(false);
    flushing.await.unwrap().unwrap();
    let all = with_log(&env, &log, |l| l.read(0, 10_000)).await.unwrap();
    assert_eq!(
        all.len(),
        first.len() + set(2, 3).len(),
        "the flush published exactly what it synced"
    );
}

fn handler(dir: &Path) -> (Handler<TokioEnv>, Arc<Logs<RealFs>>) {
    let (logs, _) = Logs::open(RealFs, config(dir, "num.partitions=2\n"), T0).unwrap();
    let logs = Arc::new(logs);
    (Handler::new(TokioEnv, logs.clone()), logs)
}

fn produce(topic: &str, partition: i32, messages: Bytes) -> Request {
    Request::Produce(ProduceRequest {
        topic: topic.parse().unwrap(),
        partition,
        messages,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_first_set_creates_no_log_and_the_next_valid_one_registers_the_topic() {
    let dir = tempfile::tempdir().unwrap();
    let (handler, logs) = handler(dir.path());
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut bad = set(1, 2).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff; // CRC mismatch
    let mut effects = Effects::default();
    let refused = handler
        .handle(
            produce("fresh", 0, Bytes::from(bad)),
            &mut rng,
            &mut effects,
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(CloseReason::Log(LogError::InvalidMessageSet { .. }))
        ),
        "{refused:?}"
    );
    assert!(
        !dir.path().join("fresh-0").exists(),
        "an invalid set created the partition"
    );
    assert!(logs.get(&tp("fresh", 0)).is_none());
    assert!(effects.new_topics.is_empty());

    let mut effects = Effects::default();
    handler
        .handle(produce("fresh", 0, set(2, 2)), &mut rng, &mut effects)
        .await
        .unwrap();
    assert_eq!(
        effects.new_topics,
        vec!["fresh".parse().unwrap()],
        "the topic's first log must be registered"
    );
}

/// Writes a flushed partition, then damages it below the checkpoint, so the next open refuses it.
async fn refused_partition(dir: &Path) {
    let (logs, _) = Logs::open(RealFs, config(dir, "num.partitions=2\n"), T0).unwrap();
    let logs = Arc::new(logs);
    let (log, _) = logs.get_or_create(&tp("t", 0), T0).unwrap();
    with_log(&TokioEnv, &log, |l| l.append(&set(1, 3), T0).map(drop))
        .await
        .unwrap();
    logs::flush(&TokioEnv, &log, &Default::default())
        .await
        .unwrap();
    logs::checkpoint(&TokioEnv, &logs).await.unwrap();
    drop((log, logs));
    let segment = dir.join("t-0/00000000000000000000.kafka");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[12] ^= 0xff;
    std::fs::write(&segment, &bytes).unwrap();
    assert!(dir.join(CHECKPOINT_FILE).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partition_refused_at_startup_answers_fetch_and_offsets_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    refused_partition(dir.path()).await;
    let (handler, _) = handler(dir.path());
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let fetch = Request::Fetch(FetchRequest {
        topic: "t".parse().unwrap(),
        partition: 0,
        offset: 0,
        max_bytes: 1000,
    });
    match handler
        .handle(fetch, &mut rng, &mut Effects::default())
        .await
        .unwrap()
        .map(|reply| reply.into_response().unwrap())
    {
        Some(Response::Fetch(f)) => {
            assert_eq!((f.error, f.messages.len()), (ErrorCode::Unknown, 0))
        }
        other => panic!("{other:?}"),
    }
    for time in [-1, -2] {
        let offsets = Request::Offsets(OffsetsRequest {
            topic: "t".parse().unwrap(),
            partition: 0,
            time,
            max_offsets: 1,
        });
        match handler
            .handle(offsets, &mut rng, &mut Effects::default())
            .await
            .unwrap()
            .map(|reply| reply.into_response().unwrap())
        {
            Some(Response::Offsets(o)) => {
                assert_eq!((o.error, o.offsets), (ErrorCode::Unknown, vec![]))
            }
            other => panic!("{other:?}"),
        }
    }
    let write = handler
        .handle(
            produce("t", 0, set(2, 1)),
            &mut rng,
            &mut Effects::default(),
        )
        .await;
    assert!(
        matches!(write, Err(CloseReason::RefusedPartition { .. })),
        "{write:?}"
    );
    // The other partition of the topic is served normally.
    handler
        .handle(
            produce("t", 1, set(2, 1)),
            &mut rng,
            &mut Effects::default(),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operation_that_panics_stops_its_partition() {
    let dir = tempfile::tempdir().unwrap();
    let (logs, _) = Logs::open(RealFs, config(dir.path(), ""), T0).unwrap();
    let (log, _) = logs.get_or_create(&tp("t", 0), T0).unwrap();
    let panicked = tokio::spawn({
        let log = log.clone();
        async move { with_log(&TokioEnv, &log, |_| panic!("injected")).await }
    })
    .await;
    assert!(
        panicked.unwrap_err().is_panic(),
        "the panic reaches the caller"
    );
    let read = with_log(&TokioEnv, &log, |l| l.read(0, 100)).await;
    assert!(matches!(read, Err(LogError::Failed { .. })), "{read:?}");
    let append = with_log(&TokioEnv, &log, |l| l.append(&set(1, 1), T0)).await;
    assert!(matches!(append, Err(LogError::Failed { .. })), "{append:?}");
}

#[test]
fn a_second_process_cannot_open_the_same_log_dir() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = Logs::open(RealFs, config(dir.path(), ""), T0).unwrap();
    let second = Logs::open(RealFs, config(dir.path(), "brokerid=1\nport=9093\n"), T0);
    match second {
        Err(LogError::DirInUse {
            dir: locked,
            holder,
            stopping,
        }) => {
            assert!(
                !stopping,
                "a holder that did not say it stops is not stopping"
            );
            assert_eq!(locked, dir.path().display().to_string());
            assert!(
                holder.contains("brokerid 0")
                    && holder.contains(&format!("pid {}", std::process::id())),
                "{holder}"
            );
        }
        other => panic!("two owners of one log.dir: {:?}", other.map(|_| ())),
    }
    first.note_stopping().unwrap();
    match Logs::open(RealFs, config(dir.path(), "brokerid=1\nport=9093\n"), T0) {
        Err(LogError::DirInUse {
            stopping, holder, ..
        }) => {
            assert!(stopping, "the holder said it is stopping");
            assert!(holder.contains("brokerid 0"), "{holder}");
        }
        other => panic!("two owners of one log.dir: {:?}", other.map(|_| ())),
    }
    drop(first);
    let (third, _) =
        Logs::open(RealFs, config(dir.path(), ""), T0).expect("the lock goes with its holder");
    match Logs::open(RealFs, config(dir.path(), "brokerid=1\nport=9093\n"), T0) {
        Err(LogError::DirInUse { stopping, .. }) => {
            assert!(
                !stopping,
                "a new holder is not stopping because the previous one was"
            )
        }
        other => panic!("two owners of one log.dir: {:?}", other.map(|_| ())),
    }
    drop(third);
}

/// A broker restarted while its previous run is still stopping (0.7.2's broker_failure test
/// restarts a SIGTERM'd broker at once) waits for the lock and serves; one started beside a
/// running broker is refused at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_during_a_stop_waits_for_the_lock_and_serves() {
    use tributary::broker::{Broker, StartError};
    let dir = tempfile::tempdir().unwrap();
    let broker_config = |extra: &str| config(dir.path(), &format!("port=0\n{extra}"));
    let first = Broker::start(TokioEnv, broker_config("")).await.unwrap();
    let started = std::time::Instant::now();
    match Broker::start(TokioEnv, broker_config("")).await {
        Err(StartError::Logs(LogError::DirInUse {
            stopping: false, ..
        })) => {}
        other => panic!("a second broker beside a running one: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once"
    );
    first.stopping_note().say();
    let second = tokio::spawn(Broker::start(TokioEnv, broker_config("")));
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !second.is_finished(),
        "the restart gave up while its predecessor was stopping"
    );
    first.shutdown().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the restart did not start within 5 s of the lock being free")
        .unwrap()
        .expect("the restart failed to start");
    second.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn flushed_appended_bytes_go_out_as_a_file_range_unless_zero_copy_is_off() {
    use tributary::broker::reply::Reply;
    use tributary_core::log::Served;
    let dir = tempfile::tempdir().unwrap();
    let (handler, logs) = handler(dir.path());
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    handler
        .handle(
            produce("t", 0, set(1, 5)),
            &mut rng,
            &mut Effects::default(),
        )
        .await
        .unwrap();
    let log = logs.get(&tp("t", 0)).unwrap();
    logs::flush(&TokioEnv, &log, &Default::default())
        .await
        .unwrap();
    let fetch = || {
        Request::Fetch(FetchRequest {
            topic: "t".parse().unwrap(),
            partition: 0,
            offset: 0,
            max_bytes: 1 << 20,
        })
    };
    let mut served = Vec::new();
    for handler in [handler.clone(), handler.with_zero_copy(false)] {
        match handler
            .handle(fetch(), &mut rng, &mut Effects::default())
            .await
            .unwrap()
        {
            Some(Reply::Fetch(block)) => served.push(block),
            other => panic!("{other:?}"),
        }
    }
    assert!(
        matches!(served[0].data, Served::File(_)),
        "appended bytes are checked: {:?}",
        served[0]
    );
    assert!(
        matches!(served[1].data, Served::Bytes(_)),
        "fetch.zero.copy=false reads through memory: {:?}",
        served[1]
    );
    let bytes: Vec<Bytes> = served
        .into_iter()
        .map(|b| b.data.into_bytes().unwrap())
        .collect();
    assert_eq!(bytes[0], bytes[1]);
    assert_eq!(bytes[0], set(1, 5));
}

/// A renamed mirror copy takes its source's count (learnt before its first partition here) over
/// `num.partitions`, but not over `topic.partition.count.map`; a count in use never changes;
/// and a restart with fewer partitions configured than stored keeps every stored one.
#[test]
fn a_renamed_copy_takes_its_sources_count_and_no_stored_partition_is_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let extra = "num.partitions=2\ntopic.partition.count.map=east.pinned:3\n";
    let (logs, _) = Logs::open(RealFs, config(dir.path(), extra), T0).unwrap();
    let copy: tributary_core::wire::TopicName = "east.orders".parse().unwrap();
    let pinned: tributary_core::wire::TopicName = "east.pinned".parse().unwrap();
    assert_eq!(logs.partition_count(&copy), 2);
    assert!(logs.set_renamed_count(&copy, 5));
    assert!(logs.set_renamed_count(&pinned, 5));
    assert_eq!(logs.partition_count(&copy), 5);
    assert_eq!(logs.partition_count(&pinned), 3, "the operator's map wins");
    logs.get_or_create(&tp("east.orders", 4), T0).unwrap();
    // In use: the count stays.
    assert!(!logs.set_renamed_count(&copy, 7));
    assert_eq!(logs.partition_count(&copy), 5);
    assert!(matches!(
        logs.get_or_create(&tp("east.orders", 5), T0),
        Err(LogError::UnknownPartition { count: 5, .. })
    ));
    drop(logs);
    // Started again without the record (its ZooKeeper unreadable): partition 4 is on disk, so
    // the topic keeps 5 partitions, not num.partitions' 2.
    let (logs, _) = Logs::open(RealFs, config(dir.path(), extra), T0).unwrap();
    assert_eq!(logs.partition_count(&copy), 2);
    assert_eq!(logs.keep_partitions_on_disk(), vec![(copy.clone(), 2, 5)]);
    assert_eq!(logs.partition_count(&copy), 5);
    assert!(logs.get(&tp("east.orders", 4)).is_some());
}
