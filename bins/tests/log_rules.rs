//! Every rule of the log, on the real file system in a temp dir.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tributary::env::TokioEnv;
use tributary::logs::{self, Logs, Mark};
use tributary::real_fs::{RealFile, RealFs};
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::log::segment_file_name;
use tributary_core::log::{
    DirEntry, LockError, Log, LogError, LogFile, LogFs, LogPolicy, RecoveryHints, TopicPartition,
    CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE,
};
use tributary_core::message::{CompressionCodec, MessageSetBuilder, ShallowIter};

const HOUR_MS: i64 = 3_600_000;
const T0: i64 = 1_700_000_000_000;

fn policy() -> LogPolicy {
    let config = config("/unused", "");
    LogPolicy::for_topic(&config, &"t".parse().unwrap())
}

fn config(dir: &str, extra: &str) -> BrokerConfig {
    let text = format!("brokerid=0\nlog.dir={dir}\nenable.zookeeper=false\n{extra}");
    BrokerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap()
}

fn tp(topic: &str, partition: u32) -> TopicPartition {
    TopicPartition::new(topic.parse().unwrap(), partition)
}

/// A set of `n` messages of `size` bytes each, tagged with `tag`.
fn set(tag: u8, n: usize, size: usize) -> Bytes {
    let mut b = MessageSetBuilder::new();
    for i in 0..n {
        let mut payload = vec![tag; size];
        payload[0] = i as u8;
        b.push(payload);
    }
    b.build(CompressionCodec::None)
}

fn new_log(dir: &Path, policy: LogPolicy) -> Log<RealFs> {
    Log::create(RealFs, &dir.join("t-0"), tp("t", 0), policy, T0).unwrap()
}

fn messages_in(bytes: &[u8], base: i64) -> usize {
    ShallowIter::new(bytes, base).filter(|e| e.is_ok()).count()
}

#[test]
fn appended_data_is_invisible_until_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), policy());
    let info = log.append(&set(1, 3, 10), T0).unwrap();
    assert_eq!(
        (info.offset, info.next_offset, info.messages, info.flushed),
        (0, 60, 3, false)
    );
    assert_eq!(log.flushed_end(), 0);
    assert!(
        log.read(0, 1000).unwrap().is_empty(),
        "unflushed data must not be served"
    );
    assert!(matches!(
        log.read(20, 1000),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(log.offsets_before(-1, 10, T0).unwrap(), vec![0]);
    log.flush(T0).unwrap();
    assert_eq!(log.read(0, 1000).unwrap(), set(1, 3, 10));
    assert_eq!(log.offsets_before(-1, 10, T0).unwrap(), vec![60, 0]);
}

#[test]
fn message_count_trigger_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(
        dir.path(),
        LogPolicy {
            flush_interval_messages: 5,
            ..policy()
        },
    );
    assert!(!log.append(&set(1, 4, 10), T0).unwrap().flushed);
    let info = log.append(&set(2, 1, 10), T0).unwrap();
    assert!(info.flushed);
    assert_eq!(log.flushed_end(), info.next_offset);
}

#[test]
fn time_trigger_is_due_after_the_interval_of_the_oldest_unflushed_append() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(
        dir.path(),
        LogPolicy {
            flush_interval_ms: 1000,
            ..policy()
        },
    );
    assert!(!log.flush_due(T0 + 5000), "nothing unflushed, nothing due");
    log.append(&set(1, 1, 10), T0).unwrap();
    log.append(&set(1, 1, 10), T0 + 900).unwrap();
    assert!(!log.flush_due(T0 + 999));
    assert!(log.flush_due(T0 + 1000));
    log.flush(T0 + 1000).unwrap();
    assert!(!log.flush_due(T0 + 10_000));
}

#[test]
fn segments_roll_before_they_would_exceed_the_size_and_reads_stay_in_one_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(
        dir.path(),
        LogPolicy {
            segment_bytes_max: 100,
            ..policy()
        },
    );
    for i in 0..5 {
        log.append(&set(i, 1, 30), T0).unwrap(); // 40-byte entries
    }
    log.flush(T0).unwrap();
    assert_eq!(log.segment_starts(), vec![0, 80, 160]);
    let names: Vec<String> = std::fs::read_dir(dir.path().join("t-0"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names.contains(&"00000000000000000080.kafka".to_string()),
        "{names:?}"
    );
    let read = log.read(0, 10_000).unwrap();
    assert_eq!(read.len(), 80, "a read never spans into the next segment");
    assert_eq!(log.read(80, 10_000).unwrap().len(), 80);
    assert_eq!(log.read(160, 10_000).unwrap().len(), 40);
}

#[test]
fn a_set_larger_than_a_segment_gets_a_segment_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(
        dir.path(),
        LogPolicy {
            segment_bytes_max: 50,
            ..policy()
        },
    );
    log.append(&set(1, 1, 10), T0).unwrap();
    log.append(&set(2, 5, 30), T0).unwrap();
    log.append(&set(3, 1, 10), T0).unwrap();
    assert_eq!(log.segment_starts(), vec![0, 20, 220]);
}

#[test]
fn segments_roll_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(
        dir.path(),
        LogPolicy {
            segment_age_ms_max: HOUR_MS,
            ..policy()
        },
    );
    log.append(&set(1, 1, 10), T0).unwrap();
    log.append(&set(1, 1, 10), T0 + HOUR_MS - 1).unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append(&set(1, 1, 10), T0 + HOUR_MS).unwrap();
    assert_eq!(log.segment_starts(), vec![0, 40]);
}

#[test]
fn misaligned_and_out_of_range_offsets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), policy());
    log.append(&set(1, 3, 10), T0).unwrap();
    log.flush(T0).unwrap();
    for bad in [-1, 1, 5, 15, 19, 21, 59, 1000] {
        assert!(
            matches!(log.read(bad, 1000), Err(LogError::OffsetOutOfRange { .. })),
            "offset {bad}"
        );
    }
    assert!(
        log.read(60, 1000).unwrap().is_empty(),
        "the end offset gives an empty set"
    );
    assert_eq!(messages_in(&log.read(20, 1000).unwrap(), 20), 2);
    // A max size smaller than the first message: the partial bytes are returned, 0.7-style.
    let partial = log.read(20, 10).unwrap();
    assert_eq!(partial.len(), 10);
    assert!(matches!(
        log.read(21, 3),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(log.read(20, 3).unwrap().len(), 3);
}

#[test]
fn an_invalid_set_is_refused_whole_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), policy());
    log.append(&set(1, 2, 10), T0).unwrap();
    let mut bad = set(2, 3, 10).to_vec();
    bad[16 + 12] ^= 1; // second message's payload
    let err = log.append(&Bytes::from(bad), T0).unwrap_err();
    assert!(err.to_string().contains("CRC mismatch"), "{err}");
    let partial = set(3, 2, 10).slice(..25);
    assert!(log.append(&partial, T0).is_err());
    assert_eq!(log.written_end(), 40);
    let file = dir.path().join("t-0/00000000000000000000.kafka");
    assert_eq!(std::fs::metadata(file).unwrap().len(), 40);
}

#[test]
fn offsets_before_follow_0_7() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(
        dir.path(),
        LogPolicy {
            segment_bytes_max: 40,
            ..policy()
        },
    );
    assert_eq!(
        log.offsets_before(-1, 5, T0).unwrap(),
        vec![0],
        "empty log: latest is 0"
    );
    assert_eq!(
        log.offsets_before(-2, 5, T0).unwrap(),
        vec![0],
        "empty log: earliest is 0"
    );
    log.append(&set(1, 2, 4), T0 + 10).unwrap(); // 28 bytes, segment 0
    log.append(&set(1, 2, 4), T0 + 20).unwrap(); // rolls: segment 28
    log.append(&set(1, 2, 4), T0 + 30).unwrap(); // rolls: segment 56
    log.flush(T0 + 40).unwrap();
    assert_eq!(
        log.offsets_before(-1, 10, T0 + 50).unwrap(),
        vec![84, 56, 28, 0]
    );
    assert_eq!(log.offsets_before(-1, 2, T0 + 50).unwrap(), vec![84, 56]);
    assert_eq!(log.offsets_before(-2, 10, T0 + 50).unwrap(), vec![0]);
    assert_eq!(
        log.offsets_before(T0 + 25, 10, T0 + 50).unwrap(),
        vec![28, 0]
    );
    assert_eq!(
        log.offsets_before(T0 + 5, 10, T0 + 50).unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(
        log.offsets_before(-1, 0, T0 + 50).unwrap(),
        Vec::<i64>::new()
    );
}

#[test]
fn time_retention_deletes_old_segments_and_keeps_offsets_growing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(
        dir.path(),
        LogPolicy {
            segment_bytes_max: 40,
            retention_ms: 10 * HOUR_MS,
            ..policy()
        },
    );
    log.append(&set(1, 2, 4), T0).unwrap();
    log.append(&set(1, 2, 4), T0 + HOUR_MS).unwrap();
    log.append(&set(1, 2, 4), T0 + 5 * HOUR_MS).unwrap();
    log.flush(T0 + 5 * HOUR_MS).unwrap();
    assert_eq!(log.retain(T0 + 10 * HOUR_MS + 1).unwrap(), 1);
    assert_eq!(log.segment_starts(), vec![28, 56]);
    assert!(matches!(
        log.read(0, 100),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(!dir.path().join("t-0/00000000000000000000.kafka").exists());
    // Everything old: a fresh empty segment is rolled at the end first.
    assert_eq!(log.retain(T0 + 100 * HOUR_MS).unwrap(), 2);
    assert_eq!(log.segment_starts(), vec![84]);
    assert_eq!((log.start_offset(), log.flushed_end()), (84, 84));
    assert_eq!(
        log.append(&set(1, 1, 4), T0 + 100 * HOUR_MS)
            .unwrap()
            .offset,
        84
    );
    // An empty last segment is kept (and its time refreshed), never deleted.
    let mut empty = new_log(
        &dir.path().join("other"),
        LogPolicy {
            retention_ms: HOUR_MS,
            ..policy()
        },
    );
    assert_eq!(empty.retain(T0 + 2 * HOUR_MS).unwrap(), 0);
    assert_eq!(empty.segment_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn size_retention_deletes_whole_segments_while_over_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(
        dir.path(),
        LogPolicy {
            segment_bytes_max: 40,
            retention_bytes: Some(60),
            ..policy()
        },
    );
    for _ in 0..4 {
        log.append(&set(1, 2, 4), T0).unwrap(); // 28 bytes per segment
    }
    log.flush(T0).unwrap();
    assert_eq!(
        log.retain(T0).unwrap(),
        1,
        "112 bytes, limit 60: one 28-byte segment goes, the next would undershoot"
    );
    assert_eq!(log.segment_starts(), vec![28, 56, 84]);
}

/// The broker's log manager, as the broker opens it.
fn manager(dir: &Path, extra: &str) -> (Arc<Logs<RealFs>>, tributary_core::log::OpenReport) {
    let (m, report) = Logs::open(RealFs, config(dir.to_str().unwrap(), extra), T0).unwrap();
    (Arc::new(m), report)
}

/// A partition's log; these tests run one task, so the lock is always free.
fn lock(log: &tributary::logs::Partition<RealFs>) -> tributary::logs::Reading<'_, RealFs> {
    log.try_lock().expect("no other task holds the log")
}

/// What the broker's flush timer does at `now`: flush every due partition, then checkpoint
/// the ends that moved.
async fn flush_due(m: &Arc<Logs<RealFs>>, now: i64) {
    for log in logs::due_for_flush(m, now) {
        logs::flush(&TokioEnv, &log, &Default::default())
            .await
            .unwrap();
    }
    logs::checkpoint_moved(&TokioEnv, m).await.unwrap();
}

async fn write_through(m: &Logs<RealFs>, t: &TopicPartition, data: &Bytes) {
    let (log, _) = m.get_or_create(t, T0).unwrap();
    let data = data.clone();
    logs::with_log(&TokioEnv, &log, move |l| l.append(&data, T0))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn clean_shutdown_writes_marker_and_checkpoint_and_restart_serves_everything() {
    let dir = tempfile::tempdir().unwrap();
    let (m, report) = manager(dir.path(), "num.partitions=2\n");
    assert!(!report.clean_shutdown);
    write_through(&m, &tp("a", 1), &set(1, 3, 10)).await;
    write_through(&m, &tp("b-c", 0), &set(2, 1, 10)).await;
    logs::close(&TokioEnv, &m, T0, true).await.unwrap();
    assert!(dir.path().join(CLEAN_SHUTDOWN_FILE).exists());
    let checkpoint = std::fs::read_to_string(dir.path().join(CHECKPOINT_FILE)).unwrap();
    assert!(
        checkpoint.contains("a 1 60\n") && checkpoint.contains("b-c 0 20\n"),
        "{checkpoint}"
    );
    drop(m); // a restart: the old process lets go of log.dir
    let (m, report) = manager(dir.path(), "num.partitions=2\n");
    assert!(report.clean_shutdown);
    assert!(
        !dir.path().join(CLEAN_SHUTDOWN_FILE).exists(),
        "the marker is removed at startup"
    );
    assert_eq!(report.opened, vec![tp("a", 1), tp("b-c", 0)]);
    let log = m.get(&tp("a", 1)).unwrap();
    assert_eq!(lock(&log).read(0, 1000).unwrap(), set(1, 3, 10));
}

#[tokio::test(flavor = "multi_thread")]
async fn recovery_truncates_a_torn_tail_of_the_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = manager(dir.path(), "");
    write_through(&m, &tp("t", 0), &set(1, 3, 10)).await;
    flush_due(&m, T0 + 10_000).await;
    drop(m); // no close: an unclean shutdown
    let segment = dir.path().join("t-0/00000000000000000000.kafka");
    let mut bytes = std::fs::read(&segment).unwrap();
    let whole = set(2, 2, 10);
    bytes.extend_from_slice(&whole); // unflushed but complete: kept
    bytes.extend_from_slice(&set(3, 1, 50)[..30]); // torn: dropped
    std::fs::write(&segment, &bytes).unwrap();
    let (m, report) = manager(dir.path(), "");
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    let log = m.get(&tp("t", 0)).unwrap();
    let log = lock(&log);
    assert_eq!(log.flushed_end(), 60 + 40);
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), 100);
    assert_eq!(messages_in(&log.read(0, 1000).unwrap(), 0), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partition_directory_gone_under_the_checkpoints_promise_is_reported_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = manager(dir.path(), "");
    write_through(&m, &tp("t", 0), &set(1, 3, 10)).await;
    write_through(&m, &tp("u", 0), &set(1, 3, 10)).await;
    flush_due(&m, T0 + 10_000).await;
    drop(m);
    // How 0.7 deletes a topic (or how a disk loses a directory): the promise is left behind.
    std::fs::remove_dir_all(dir.path().join("t-0")).unwrap();
    let (m, report) = manager(dir.path(), "");
    assert_eq!(report.missing, vec![(tp("t", 0), 60)]);
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    assert!(m.get(&tp("u", 0)).is_some());
    assert!(
        m.get_or_create(&tp("t", 0), T0).is_ok(),
        "a deleted topic can be written again"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn corruption_below_the_checkpoint_refuses_the_partition_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = manager(dir.path(), "");
    write_through(&m, &tp("t", 0), &set(1, 3, 10)).await;
    write_through(&m, &tp("u", 0), &set(1, 3, 10)).await;
    flush_due(&m, T0 + 10_000).await;
    drop(m);
    let segment = dir.path().join("t-0/00000000000000000000.kafka");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[20 + 10] ^= 0xff;
    std::fs::write(&segment, &bytes).unwrap();
    // Without the checkpoint's promise this would look like a torn tail and be cut.
    let (m, report) = manager(dir.path(), "");
    assert_eq!(report.refused.len(), 1);
    assert!(
        report.refused[0].1.contains("corrupt"),
        "{}",
        report.refused[0].1
    );
    assert!(m.get(&tp("t", 0)).is_none());
    assert!(
        m.get_or_create(&tp("t", 0), T0).is_err(),
        "a refused partition is not recreated"
    );
    assert!(m.get(&tp("u", 0)).is_some(), "other partitions are served");
    assert_eq!(
        std::fs::read(&segment).unwrap(),
        bytes,
        "nothing was deleted or truncated"
    );
    // A later checkpoint (another partition's end moved) keeps the promise too.
    write_through(&m, &tp("u", 0), &set(2, 1, 10)).await;
    flush_due(&m, T0 + 20_000).await;
    let checkpoint = std::fs::read_to_string(dir.path().join(CHECKPOINT_FILE)).unwrap();
    assert!(
        checkpoint.contains("t 0 60\n") && checkpoint.contains("u 0 80\n"),
        "the refused partition's promise is kept: {checkpoint}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_is_written_only_when_a_flushed_end_moved() {
    // At 10,000 partitions the flush timer rewrote and synced the same checkpoint every
    // interval. The file is taken away behind the broker's back to see whether it is written.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(CHECKPOINT_FILE);
    let (m, _) = manager(dir.path(), "");
    write_through(&m, &tp("t", 0), &set(1, 3, 10)).await;
    flush_due(&m, T0 + 10_000).await;
    assert!(
        std::fs::read_to_string(&path).unwrap().contains("t 0 60\n"),
        "a moved end is checkpointed"
    );
    std::fs::remove_file(&path).unwrap();
    flush_due(&m, T0 + 20_000).await;
    assert!(
        !path.exists(),
        "nothing moved, yet the checkpoint was written again"
    );
    write_through(&m, &tp("u", 0), &set(2, 1, 10)).await;
    flush_due(&m, T0 + 30_000).await;
    assert_checkpoint_holds(&path, &["t 0 60", "u 0 20"]);
    // The same partitions, one end moved: written again.
    std::fs::remove_file(&path).unwrap();
    write_through(&m, &tp("t", 0), &set(3, 1, 10)).await;
    flush_due(&m, T0 + 40_000).await;
    assert_checkpoint_holds(&path, &["t 0 80", "u 0 20"]);
}

/// Fails unless the checkpoint at `path` has each of `lines`.
fn assert_checkpoint_holds(path: &Path, lines: &[&str]) {
    let checkpoint = std::fs::read_to_string(path).unwrap();
    for line in lines {
        assert!(
            checkpoint.lines().any(|l| l == *line),
            "no `{line}` in the checkpoint: {checkpoint}"
        );
    }
}

#[test]
fn a_checkpoint_write_that_failed_is_written_by_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FlakyFs::default();
    let (m, _) = tributary_core::log::LogManager::<FlakyFs, std::sync::Mutex<Log<FlakyFs>>>::open(
        fs.clone(),
        config(dir.path().to_str().unwrap(), ""),
        T0,
    )
    .unwrap();
    let path = dir.path().join(CHECKPOINT_FILE);
    let ends = |end: u64| [(tp("t", 0), end)];
    m.write_checkpoint(ends(60)).unwrap();
    fs.fail_writes.store(true, Ordering::SeqCst);
    assert!(m.write_checkpoint(ends(80)).is_err());
    fs.fail_writes.store(false, Ordering::SeqCst);
    m.write_checkpoint(ends(80)).unwrap();
    let checkpoint = std::fs::read_to_string(&path).unwrap();
    assert!(
        checkpoint.contains("t 0 80\n"),
        "the failed write was taken as written: {checkpoint}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_damaged_checkpoint_falls_back_to_validating_everything() {
    for damage in ["remove", "garble"] {
        let dir = tempfile::tempdir().unwrap();
        let (m, _) = manager(dir.path(), "");
        write_through(&m, &tp("t", 0), &set(1, 3, 10)).await;
        flush_due(&m, T0 + 10_000).await;
        drop(m);
        let checkpoint = dir.path().join(CHECKPOINT_FILE);
        match damage {
            "remove" => std::fs::remove_file(&checkpoint).unwrap(),
            _ => std::fs::write(
                &checkpoint,
                b"tributary-recovery-checkpoint 1\nt 0 60\ncrc 00000000\n",
            )
            .unwrap(),
        }
        let segment = dir.path().join("t-0/00000000000000000000.kafka");
        let mut bytes = std::fs::read(&segment).unwrap();
        bytes.extend_from_slice(&[0, 0, 0, 99, 1, 0]);
        std::fs::write(&segment, &bytes).unwrap();
        let (m, report) = manager(dir.path(), "");
        assert!(report.refused.is_empty(), "{damage}");
        assert_eq!(
            lock(&m.get(&tp("t", 0)).unwrap()).flushed_end(),
            60,
            "{damage}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn data_missing_below_the_checkpoint_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = manager(dir.path(), "");
    write_through(&m, &tp("t", 0), &set(1, 3, 10)).await;
    flush_due(&m, T0 + 10_000).await;
    drop(m);
    let segment = dir.path().join("t-0/00000000000000000000.kafka");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.set_len(20).unwrap();
    let (_, report) = manager(dir.path(), "");
    assert!(
        report.refused[0]
            .1
            .contains("checkpoint promised data up to 60"),
        "{:?}",
        report.refused
    );
}

#[test]
fn gaps_between_segments_refuse_the_partition() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("t-0");
    std::fs::create_dir_all(&part).unwrap();
    std::fs::write(part.join("00000000000000000000.kafka"), set(1, 1, 10)).unwrap();
    std::fs::write(part.join("00000000000000000100.kafka"), set(1, 1, 10)).unwrap();
    let (_, report) = manager(dir.path(), "");
    assert!(
        report.refused[0].1.contains("next segment starts at 100"),
        "{:?}",
        report.refused
    );
}

fn open_again(path: &Path, policy: LogPolicy) -> Result<Log<RealFs>, LogError> {
    let hints = RecoveryHints {
        clean_shutdown: false,
        checkpoint: None,
    };
    Log::open(RealFs, path, tp("t", 0), policy, hints, T0)
}

#[test]
fn a_hole_holds_nothing_and_survives_reopening_while_a_stale_record_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = new_log(dir.path(), policy());
    log.append(&set(1, 2, 10), T0).unwrap();
    log.skip_to(1000, T0).unwrap();
    log.append(&set(2, 2, 10), T0).unwrap();
    log.flush(T0).unwrap();
    let check = |log: &Log<RealFs>| {
        assert_eq!(log.holes(), &[(40, 1000)]);
        for inside in [40, 41, 500, 999] {
            assert!(
                matches!(
                    log.read(inside, 100),
                    Err(LogError::OffsetOutOfRange { .. })
                ),
                "a read at {inside}, inside the hole, must be refused"
            );
        }
        assert_eq!(
            messages_in(&log.read(0, 100).unwrap(), 0),
            2,
            "before the hole"
        );
        assert_eq!(
            messages_in(&log.read(1000, 100).unwrap(), 1000),
            2,
            "after it"
        );
        assert_eq!(
            log.offsets_before(-2, 1, T0).unwrap(),
            vec![1000],
            "OFFSETS start after it"
        );
        assert_eq!(log.flushed_end(), 1040);
    };
    check(&log);
    assert!(path
        .join(tributary_core::log::gap_file_name(40, 1000))
        .exists());
    assert!(matches!(
        log.skip_to(1040, T0),
        Err(LogError::SkipBackwards { .. })
    ));
    drop(log);
    // A record left by a crash before the segment after it existed: separates nothing.
    let stale = path.join(tributary_core::log::gap_file_name(1040, 2000));
    std::fs::write(&stale, b"").unwrap();
    let log = open_again(&path, policy()).unwrap();
    check(&log);
    assert!(
        !stale.exists(),
        "a record that separates no segments is removed at open"
    );
    drop(log);
    // Without its record, the same discontinuity is corruption.
    std::fs::remove_file(path.join(tributary_core::log::gap_file_name(40, 1000))).unwrap();
    let refused = open_again(&path, policy()).unwrap_err();
    assert!(matches!(refused, LogError::Corrupt { .. }), "{refused}");
}

#[test]
fn retention_drops_a_hole_record_only_once_the_segments_before_it_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FlakyFs::default();
    let path: PathBuf = dir.path().join("t-0");
    let retention = LogPolicy {
        retention_ms: HOUR_MS,
        ..policy()
    };
    let mut log = Log::create(fs.clone(), &path, tp("t", 0), retention, T0).unwrap();
    log.append(&set(1, 2, 10), T0).unwrap();
    log.skip_to(1000, T0).unwrap();
    log.append(&set(2, 2, 10), T0 + 2 * HOUR_MS).unwrap();
    log.flush(T0 + 2 * HOUR_MS).unwrap();
    let record = path.join(tributary_core::log::gap_file_name(40, 1000));
    // The segment before the hole cannot be deleted: it will be back at restart, and so must
    // the record of the hole after it.
    fs.fail_segment_removal.store(true, Ordering::SeqCst);
    assert_eq!(log.retain(T0 + 2 * HOUR_MS).unwrap(), 1);
    assert_eq!(log.start_offset(), 1000);
    assert!(
        record.exists(),
        "the record stays while a segment before it may come back"
    );
    drop(log);
    let log = open_again(&path, policy()).unwrap();
    assert_eq!((log.start_offset(), log.holes()), (0, &[(40, 1000)][..]));
    drop(log);
    // Deleted for real this time: the record goes with them. (Reopened segments carry their
    // files' modification times: the clock is taken from them.)
    fs.fail_segment_removal.store(false, Ordering::SeqCst);
    let now = fs.modified_ms(&path.join(segment_file_name(1000))).unwrap();
    let mut log = Log::open(
        fs.clone(),
        &path,
        tp("t", 0),
        retention,
        RecoveryHints {
            clean_shutdown: true,
            checkpoint: None,
        },
        now,
    )
    .unwrap();
    assert_eq!(log.retain(now + 2 * HOUR_MS).unwrap(), 2);
    assert!(!record.exists(), "no segment before it: the record goes");
    assert!(log.holes().is_empty());
}

#[test]
fn strange_entries_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("t-0");
    std::fs::create_dir_all(&part).unwrap();
    std::fs::write(part.join("00000000000000000000.kafka"), set(1, 1, 10)).unwrap();
    std::fs::write(part.join("notes.txt"), b"keep me").unwrap();
    std::fs::write(part.join("123.kafka"), b"keep me too").unwrap();
    std::fs::create_dir_all(dir.path().join("no_partition_number")).unwrap();
    std::fs::create_dir_all(dir.path().join("t-01")).unwrap();
    std::fs::write(dir.path().join("stray-file-0"), b"x").unwrap();
    let (m, report) = manager(dir.path(), "");
    assert_eq!(report.opened, vec![tp("t", 0)]);
    assert_eq!(report.ignored.len(), 3, "{:?}", report.ignored);
    assert!(part.join("notes.txt").exists() && part.join("123.kafka").exists());
    assert_eq!(lock(&m.get(&tp("t", 0)).unwrap()).flushed_end(), 20);
    // An empty partition directory (crash right after mkdir) gets a fresh segment.
    std::fs::create_dir_all(dir.path().join("e-0")).unwrap();
    drop(m);
    let (m, _) = manager(dir.path(), "");
    assert_eq!(lock(&m.get(&tp("e", 0)).unwrap()).segment_count(), 1);
}

#[test]
fn partitions_are_created_on_demand_within_the_topic_count() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = manager(
        dir.path(),
        "num.partitions=2\ntopic.partition.count.map=big:5\n",
    );
    assert!(m.get_or_create(&tp("small", 1), T0).is_ok());
    assert!(matches!(
        m.get_or_create(&tp("small", 2), T0),
        Err(LogError::UnknownPartition { count: 2, .. })
    ));
    assert!(m.get_or_create(&tp("big", 4), T0).is_ok());
    assert!(dir.path().join("big-4/00000000000000000000.kafka").exists());
    assert_eq!(m.topics().len(), 2);
    assert!(m.has_topic(&"big".parse().unwrap()) && m.has_topic(&"small".parse().unwrap()));
    assert!(!m.has_topic(&"bi".parse().unwrap()) && !m.has_topic(&"smaller".parse().unwrap()));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_manager_flushes_what_is_due_and_applies_retention() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = manager(dir.path(), "log.default.flush.interval.ms=1000\ntopic.flush.intervals.ms=slow:5000\nlog.retention.hours=1\n");
    write_through(&m, &tp("fast", 0), &set(1, 1, 10)).await;
    write_through(&m, &tp("slow", 0), &set(1, 1, 10)).await;
    flush_due(&m, T0 + 1000).await;
    assert_eq!(lock(&m.get(&tp("fast", 0)).unwrap()).flushed_end(), 20);
    assert_eq!(
        lock(&m.get(&tp("slow", 0)).unwrap()).flushed_end(),
        0,
        "per-topic interval"
    );
    flush_due(&m, T0 + 5000).await;
    assert_eq!(lock(&m.get(&tp("slow", 0)).unwrap()).flushed_end(), 20);
    assert_eq!(logs::cleanup(&TokioEnv, &m, T0 + 2 * HOUR_MS).await, 2);
    assert_eq!(lock(&m.get(&tp("fast", 0)).unwrap()).start_offset(), 20);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partition_busy_at_its_flush_tick_is_flushed_at_a_later_one() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = manager(dir.path(), "log.default.flush.interval.ms=1000\n");
    write_through(&m, &tp("t", 0), &set(1, 1, 10)).await;
    let log = m.get(&tp("t", 0)).unwrap();
    {
        let _busy = log.lock().await;
        assert!(
            logs::due_for_flush(&m, T0 + 1000).is_empty(),
            "a busy partition is waited for"
        );
    }
    flush_due(&m, T0 + 2000).await;
    assert_eq!(
        lock(&log).flushed_end(),
        20,
        "a partition busy at one tick was forgotten by the next"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_flush_timer_and_the_checkpoint_visit_only_partitions_that_moved() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(CHECKPOINT_FILE);
    let (m, _) = manager(
        dir.path(),
        "num.partitions=100\nlog.default.flush.interval.ms=1000\n",
    );
    for partition in 0..100 {
        write_through(&m, &tp("t", partition), &set(1, 1, 10)).await;
    }
    let activity = m.shared();
    assert_eq!(activity.marked(Mark::Unflushed), 100);
    flush_due(&m, T0 + 1000).await;
    let marked = || {
        (
            activity.marked(Mark::Unflushed),
            activity.marked(Mark::Flushed),
        )
    };
    assert_eq!(marked(), (0, 0), "all flushed and checkpointed");
    write_through(&m, &tp("t", 7), &set(2, 1, 10)).await;
    // A read publishes the partition's state too, and marks nothing.
    let read = m.get(&tp("t", 3)).unwrap();
    logs::with_log(&TokioEnv, &read, |l| l.read(0, 100).map(|_| ()))
        .await
        .unwrap();
    assert_eq!(marked(), (1, 0));
    let due: Vec<TopicPartition> = logs::due_for_flush(&m, T0 + 2000)
        .iter()
        .map(|p| p.topic_partition().clone())
        .collect();
    assert_eq!(due, [tp("t", 7)]);
    logs::flush(&TokioEnv, &m.get(&tp("t", 7)).unwrap(), &Default::default())
        .await
        .unwrap();
    assert_eq!(marked(), (0, 1), "the flushed end moved");
    logs::checkpoint_moved(&TokioEnv, &m).await.unwrap();
    assert_eq!(marked(), (0, 0));
    assert_checkpoint_holds(&path, &["t 7 40", "t 3 20", "t 99 20"]);
}

/// A file system whose syncs, writes, truncations and removals of segment files can be made
/// to fail.
#[derive(Debug, Clone, Default)]
struct FlakyFs {
    fail_sync: Arc<AtomicBool>,
    fail_segment_removal: Arc<AtomicBool>,
    /// Files created from now on never sync.
    fail_new_files_sync: Arc<AtomicBool>,
    /// Writes put the first half of their bytes in the file, then fail (a disk filling up).
    fail_writes: Arc<AtomicBool>,
    /// Truncations fail.
    fail_truncates: Arc<AtomicBool>,
}

#[derive(Debug)]
struct FlakyFile {
    file: RealFile,
    fail_sync: Arc<AtomicBool>,
    fail_writes: Arc<AtomicBool>,
    fail_truncates: Arc<AtomicBool>,
}

fn injected() -> std::io::Error {
    std::io::Error::other("injected EIO")
}

impl LogFile for FlakyFile {
    fn size_bytes(&self) -> std::io::Result<u64> {
        self.file.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.file.read_at(buf, offset)
    }
    fn write_all_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        if self.fail_writes.load(Ordering::SeqCst) {
            self.file.write_all_at(&data[..data.len() / 2], offset)?;
            return Err(injected());
        }
        self.file.write_all_at(data, offset)
    }
    fn sync(&self) -> std::io::Result<()> {
        if self.fail_sync.load(Ordering::SeqCst) {
            Err(injected())
        } else {
            self.file.sync()
        }
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        if self.fail_truncates.load(Ordering::SeqCst) {
            return Err(injected());
        }
        self.file.set_len(len)
    }
}

impl LogFs for FlakyFs {
    type File = FlakyFile;
    type DirLock = ();
    fn lock_dir(&self, _path: &Path, _holder: &str) -> Result<(), LockError> {
        Ok(())
    }
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        RealFs.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<DirEntry>> {
        RealFs.list_dir(path)
    }
    fn open(&self, path: &Path, create: bool) -> std::io::Result<FlakyFile> {
        let fails =
            if create && !RealFs.exists(path) && self.fail_new_files_sync.load(Ordering::SeqCst) {
                Arc::new(AtomicBool::new(true))
            } else {
                self.fail_sync.clone()
            };
        Ok(FlakyFile {
            file: RealFs.open(path, create)?,
            fail_sync: fails,
            fail_writes: self.fail_writes.clone(),
            fail_truncates: self.fail_truncates.clone(),
        })
    }
    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }
    fn modified_ms(&self, path: &Path) -> std::io::Result<i64> {
        RealFs.modified_ms(path)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        let segment = path.extension().is_some_and(|e| e == "kafka");
        if segment && self.fail_segment_removal.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("injected EIO"));
        }
        RealFs.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        RealFs.rename(from, to)
    }
    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        RealFs.sync_dir(path)
    }
}

#[test]
fn a_failed_sync_poisons_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FlakyFs::default();
    let path: PathBuf = dir.path().join("t-0");
    let mut log = Log::create(fs.clone(), &path, tp("t", 0), policy(), T0).unwrap();
    log.append(&set(1, 2, 10), T0).unwrap();
    fs.fail_sync.store(true, Ordering::SeqCst);
    assert!(log.flush(T0).is_err());
    assert!(log.is_poisoned());
    assert_eq!(
        log.flushed_end(),
        0,
        "nothing becomes visible on a failed sync"
    );
    fs.fail_sync.store(false, Ordering::SeqCst);
    let err = log.append(&set(2, 1, 10), T0).unwrap_err();
    assert!(matches!(err, LogError::Poisoned { .. }), "{err}");
    assert!(err.to_string().contains("restart the broker"));
    assert!(
        log.flush(T0).is_err(),
        "a poisoned log does not pretend to flush"
    );
    assert!(
        !log.flush_due(T0 + 3_600_000),
        "a poisoned log is never due for a flush (the scheduler would log its error every round)"
    );
}

/// A log on a `FlakyFs` in a temp dir, holding one set (returned).
fn log_with_one_set() -> (tempfile::TempDir, FlakyFs, Log<FlakyFs>, Bytes) {
    let dir = tempfile::tempdir().unwrap();
    let fs = FlakyFs::default();
    let mut log = Log::create(
        fs.clone(),
        &dir.path().join("t-0"),
        tp("t", 0),
        policy(),
        T0,
    )
    .unwrap();
    let first = set(1, 2, 10);
    log.append(&first, T0).unwrap();
    (dir, fs, log, first)
}

/// A write that fails half-way is cut back off the segment, and the log goes on where it was.
#[test]
fn a_failed_write_is_cut_off_and_the_log_goes_on() {
    let (dir, fs, mut log, first) = log_with_one_set();
    fs.fail_writes.store(true, Ordering::SeqCst);
    // Half of this set reaches the file: more than the next, smaller, set overwrites.
    assert!(log.append(&set(2, 8, 50), T0).is_err());
    fs.fail_writes.store(false, Ordering::SeqCst);
    assert!(!log.is_poisoned());
    let second = set(3, 1, 10);
    let info = log.append(&second, T0).unwrap();
    let segment = dir.path().join("t-0").join("00000000000000000000.kafka");
    assert_eq!(
        std::fs::metadata(&segment).unwrap().len(),
        (first.len() + second.len()) as u64,
        "bytes of the failed write left past the log's end"
    );
    assert_eq!(
        info.offset,
        first.len() as u64,
        "the torn bytes were cut off"
    );
    log.flush(T0).unwrap();
    let read = log.read(0, first.len() + second.len()).unwrap();
    assert_eq!(read, [first, second].concat());
}

/// A write that fails half-way and whose bytes cannot be cut off either poisons the log: the
/// next append would otherwise sit behind garbage.
#[test]
fn a_failed_write_that_cannot_be_cut_off_poisons_the_log() {
    let (_dir, fs, mut log, _first) = log_with_one_set();
    fs.fail_writes.store(true, Ordering::SeqCst);
    fs.fail_truncates.store(true, Ordering::SeqCst);
    assert!(log.append(&set(2, 2, 10), T0).is_err());
    fs.fail_writes.store(false, Ordering::SeqCst);
    fs.fail_truncates.store(false, Ordering::SeqCst);
    assert!(log.is_poisoned());
    let err = log.append(&set(3, 1, 10), T0).unwrap_err();
    assert!(matches!(err, LogError::Poisoned { .. }), "{err}");
    assert!(err.to_string().contains("could not be cut"), "{err}");
}

/// A roll whose new segment cannot be synced leaves that empty file where the log ends: the log
/// is poisoned, so nothing more goes into the old segment past it, and the log reopens (a
/// segment reaching into the next one would be refused as corrupt).
#[test]
fn a_roll_that_fails_poisons_the_log_and_the_log_still_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FlakyFs::default();
    let path: PathBuf = dir.path().join("t-0");
    let small = LogPolicy {
        segment_bytes_max: 100,
        ..policy()
    };
    let mut log = Log::create(fs.clone(), &path, tp("t", 0), small, T0).unwrap();
    log.append(&set(1, 3, 10), T0).unwrap(); // 60 bytes
    log.flush(T0).unwrap();
    fs.fail_new_files_sync.store(true, Ordering::SeqCst);
    assert!(
        log.append(&set(2, 2, 15), T0).is_err(),
        "50 bytes do not fit: a roll, which fails"
    );
    fs.fail_new_files_sync.store(false, Ordering::SeqCst);
    let err = log.append(&set(3, 1, 10), T0).unwrap_err();
    assert!(
        matches!(err, LogError::Poisoned { .. }),
        "20 more bytes went into the old segment: {err}"
    );
    drop(log);
    let hints = RecoveryHints {
        clean_shutdown: false,
        checkpoint: None,
    };
    let reopened = Log::open(RealFs, &path, tp("t", 0), small, hints, T0);
    assert!(reopened.is_ok(), "{:?}", reopened.err());
}

#[test]
fn hints_with_a_clean_marker_skip_validation_but_not_the_promise() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), policy());
    log.append(&set(1, 2, 10), T0).unwrap();
    log.flush(T0).unwrap();
    drop(log);
    let path = dir.path().join("t-0");
    let hints = RecoveryHints {
        clean_shutdown: true,
        checkpoint: Some(64),
    };
    assert!(matches!(
        Log::open(RealFs, &path, tp("t", 0), policy(), hints, T0),
        Err(LogError::Corrupt { .. })
    ));
    let hints = RecoveryHints {
        clean_shutdown: true,
        checkpoint: Some(20),
    };
    assert_eq!(
        Log::open(RealFs, &path, tp("t", 0), policy(), hints, T0)
            .unwrap()
            .flushed_end(),
        40
    );
}

#[test]
fn after_one_sync_fails_no_later_sync_makes_data_visible() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), policy());
    log.append(&set(1, 2, 10), T0).unwrap();
    let first = log.begin_flush(T0).unwrap().unwrap();
    log.append(&set(2, 2, 10), T0).unwrap();
    let second = log.begin_flush(T0).unwrap().unwrap();
    assert!(log
        .finish_flush(first, Err(std::io::Error::other("EIO")))
        .is_err());
    // The second sync "succeeds", but the first's failure may have dropped pages it covers.
    assert!(matches!(
        log.finish_flush(second, Ok(())),
        Err(LogError::Poisoned { .. })
    ));
    assert_eq!(
        log.flushed_end(),
        0,
        "nothing after a failed sync becomes visible"
    );
}

#[test]
fn message_counts_stay_exact_with_overlapping_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(
        dir.path(),
        LogPolicy {
            flush_interval_messages: 5,
            ..policy()
        },
    );
    log.append(&set(1, 2, 10), T0).unwrap();
    let first = log.begin_flush(T0).unwrap().unwrap();
    let info = log
        .append_validated(
            &tributary_core::log::ValidatedSet::check(set(2, 3, 10), policy().validation).unwrap(),
            T0,
        )
        .unwrap();
    assert!(
        !info.flush_needed,
        "a flush is already running: no second one is asked for"
    );
    let second = log.begin_flush(T0).unwrap().unwrap();
    log.finish_flush(first, Ok(())).unwrap();
    assert_eq!(
        log.unflushed_messages(),
        3,
        "the first flush covered only the first 2 messages"
    );
    log.finish_flush(second, Ok(())).unwrap();
    assert_eq!(log.unflushed_messages(), 0);
    assert_eq!(log.flushed_end(), log.written_end());
}

/// Replica mode: a log created at the source's earliest offset holds the same bytes at the
/// same offsets, names its first segment after that offset, and reopens there.
#[test]
fn a_log_created_at_an_offset_serves_from_it_and_reopens_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut log = Log::create_at(RealFs, &path, tp("t", 0), policy(), 1000, T0).unwrap();
    assert_eq!(
        (log.start_offset(), log.written_end(), log.flushed_end()),
        (1000, 1000, 1000)
    );
    let bytes = set(1, 2, 10);
    let info = log.append(&bytes, T0).unwrap();
    assert_eq!(
        (info.offset, info.next_offset),
        (1000, 1000 + bytes.len() as u64)
    );
    log.flush(T0).unwrap();
    assert_eq!(log.read(1000, 1 << 20).unwrap(), bytes);
    assert!(
        log.read(0, 100).is_err(),
        "nothing is served below the start"
    );
    drop(log);
    assert!(path.join(segment_file_name(1000)).exists());
    let hints = RecoveryHints {
        clean_shutdown: false,
        checkpoint: None,
    };
    let log = Log::open(RealFs, &path, tp("t", 0), policy(), hints, T0).unwrap();
    assert_eq!(
        (log.start_offset(), log.flushed_end()),
        (1000, 1000 + bytes.len() as u64)
    );
}

/// Mirror position records that cannot begin durably (their new file's sync fails) poison the
/// log as any failed sync does: opened again by the next mirrored set, a beginning that is not
/// durable could come back from a crash without the records of the sets after it. With the
/// poisoning planted away, the next set is appended on that beginning.
#[test]
fn mirror_position_records_that_fail_to_begin_durably_poison_the_log() {
    use tributary_core::consumer::BrokerPartition;
    use tributary_core::identity::ClusterId;
    use tributary_core::log::{SourceRange, ValidatedSet};
    use tributary_core::mirror::position::SourceKey;
    use tributary_core::planted::{plant, Bug};
    let range = |start: i64, next: i64| SourceRange {
        key: SourceKey {
            cluster: ClusterId::parse("east").unwrap(),
            topic: "orders".parse().unwrap(),
            partition: BrokerPartition {
                broker_id: 0,
                partition: 0,
            },
        },
        start,
        next,
    };
    let checked = |tag: u8| ValidatedSet::check(set(tag, 2, 10), policy().validation).unwrap();
    for planted in [true, false] {
        plant(if planted {
            &[Bug::PositionsBeginFailureIgnored]
        } else {
            &[]
        });
        let dir = tempfile::tempdir().unwrap();
        let fs = FlakyFs::default();
        let mut log = Log::create(
            fs.clone(),
            &dir.path().join("t-0"),
            tp("t", 0),
            policy(),
            T0,
        )
        .unwrap();
        fs.fail_new_files_sync.store(true, Ordering::SeqCst);
        let first = log.append_mirrored(&checked(1), &range(0, 100), T0);
        fs.fail_new_files_sync.store(false, Ordering::SeqCst);
        let second = log.append_mirrored(&checked(2), &range(100, 200), T0);
        plant(&[]);
        assert!(
            first.is_err(),
            "the records' beginning did not fail to sync"
        );
        match planted {
            true => assert!(
                second.is_ok() && !log.is_poisoned(),
                "with the poisoning planted away the next set is appended: {second:?}"
            ),
            false => {
                assert!(log.is_poisoned());
                assert!(
                    matches!(second, Err(LogError::Poisoned { .. })),
                    "{second:?}"
                );
            }
        }
    }
}
