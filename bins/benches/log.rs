//! Log append and read throughput on the real disk, each beside a plain-file baseline doing the
//! same I/O in the same run.
//!
//! - Append: 100 B and 1 KiB messages in 200-message sets, with the seed's flush policy
//!   (flush every 10,000 messages or 1 s), vs. sequential `write` of the same bytes plus `fsync`
//!   on the same schedule.
//! - Read: a fully flushed 1 GiB partition read front to back in 1 MiB fetches (every message
//!   CRC-checked by the log), vs. plain 1 MiB positioned reads of the same segment files.
//!
//! Run: `cargo bench -p tributary --bench log`. `TRIBUTARY_BENCH_MIB` sets the append volume
//! (default 256 MiB per case) and `TRIBUTARY_BENCH_READ_MIB` the read volume (default 1024).

use std::fs::File;
use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use bytes::Bytes;
use tributary::real_fs::RealFs;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::log::{Log, LogPolicy, TopicPartition};
use tributary_core::message::{CompressionCodec, MessageSetBuilder};

// The benches' shared helpers, this very file; each bench uses some of them.
#[path = "../../tests/src/bench.rs"]
#[allow(dead_code)]
mod bench;
use bench::quick;

const BATCH_MESSAGES: usize = 200;
const FLUSH_MESSAGES: usize = 10_000;
const FLUSH_MS: u128 = 1000;
const FETCH_BYTES: usize = 1024 * 1024;
/// Rounds per append case; the best of each side is reported. One in the quick run.
fn rounds() -> usize {
    if quick() {
        1
    } else {
        4
    }
}

/// A row of `scripts/bench.sh`'s table: `figure` beside `baseline`, both in bytes per second.
fn row(case: &str, figure: f64, ceiling: &str, baseline: f64) {
    bench::row(
        case,
        &format!("{:.0} MB/s", figure / 1e6),
        &format!("{ceiling} {:.0} MB/s", baseline / 1e6),
        figure / baseline,
    );
}

fn mib_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn policy() -> LogPolicy {
    let text = "brokerid=0\nlog.dir=/unused\nenable.zookeeper=false\nlog.flush.interval=10000\n\
                log.default.flush.interval.ms=1000\nlog.file.size=536870912\n";
    let config =
        BrokerConfig::from_properties(&Properties::parse("bench", text).expect("bench config"))
            .expect("bench config");
    LogPolicy::for_topic(&config, &"bench".parse().expect("topic"))
}

/// A few distinct 200-message sets, reused round-robin.
fn batches(payload_bytes: usize) -> Vec<Bytes> {
    (0..8u8)
        .map(|k| {
            let mut b = MessageSetBuilder::new();
            for i in 0..BATCH_MESSAGES {
                let payload: Vec<u8> = (0..payload_bytes).map(|j| (j + i) as u8 ^ k).collect();
                b.push(payload);
            }
            b.build(CompressionCodec::None)
        })
        .collect()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn append_log(dir: &Path, sets: &[Bytes], total_bytes: usize) -> (f64, Log<RealFs>) {
    let tp = TopicPartition::new("bench".parse().expect("topic"), 0);
    let mut log =
        Log::create(RealFs, &dir.join("bench-0"), tp, policy(), now_ms()).expect("create log");
    let start = Instant::now();
    let mut written = 0;
    let mut i = 0;
    while written < total_bytes {
        let set = &sets[i % sets.len()];
        let now = now_ms();
        log.append(set, now).expect("append");
        if log.flush_due(now) {
            log.flush(now).expect("flush");
        }
        written += set.len();
        i += 1;
    }
    log.flush(now_ms()).expect("flush");
    (written as f64 / start.elapsed().as_secs_f64(), log)
}

fn append_plain(dir: &Path, sets: &[Bytes], total_bytes: usize) -> f64 {
    let mut file = File::create(dir.join("plain.bin")).expect("create");
    let start = Instant::now();
    let mut last_sync = Instant::now();
    let (mut written, mut unsynced_messages, mut i) = (0, 0, 0);
    while written < total_bytes {
        let set = &sets[i % sets.len()];
        file.write_all(set).expect("write");
        written += set.len();
        unsynced_messages += BATCH_MESSAGES;
        if unsynced_messages >= FLUSH_MESSAGES || last_sync.elapsed().as_millis() >= FLUSH_MS {
            file.sync_all().expect("fsync");
            unsynced_messages = 0;
            last_sync = Instant::now();
        }
        i += 1;
    }
    file.sync_all().expect("fsync");
    written as f64 / start.elapsed().as_secs_f64()
}

fn read_log(log: &Log<RealFs>) -> f64 {
    let start = Instant::now();
    let mut pos = log.start_offset();
    let mut read = 0;
    while pos < log.flushed_end() {
        let chunk = log.read(pos as i64, FETCH_BYTES).expect("read");
        let valid = tributary_core::message::ShallowIter::new(&chunk, pos as i64)
            .map_while(Result::ok)
            .last()
            .map_or(0, |e| e.next_offset as u64 - pos);
        read += chunk.len();
        pos += valid.max(1);
        black_box(&chunk);
    }
    read as f64 / start.elapsed().as_secs_f64()
}

fn read_plain(dir: &Path) -> f64 {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("bench-0"))
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let start = Instant::now();
    let mut read = 0;
    let mut buf = vec![0u8; FETCH_BYTES];
    for path in files {
        let file = File::open(path).expect("open");
        let mut pos = 0;
        loop {
            let n = file.read_at(&mut buf, pos).expect("read");
            if n == 0 {
                break;
            }
            read += n;
            pos += n as u64;
            black_box(&buf);
        }
    }
    read as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let (append_mib, read_mib) = if quick() { (32, 128) } else { (256, 1024) };
    let append_bytes = mib_from_env("TRIBUTARY_BENCH_MIB", append_mib) << 20;
    let read_bytes = mib_from_env("TRIBUTARY_BENCH_READ_MIB", read_mib) << 20;
    std::fs::create_dir_all("target").expect("target dir");
    println!(
        "{:<34} {:>12} {:>12} {:>7}",
        "benchmark", "tributary", "baseline", "ratio"
    );
    for payload in [100, 1024] {
        let sets = batches(payload);
        let dir = tempfile::tempdir_in("target").expect("temp dir");
        // Alternate the order over rounds so neither side always runs on a warmer disk.
        let (mut ours, mut plain) = (0f64, 0f64);
        for round in 0..rounds() {
            let round_dir = tempfile::tempdir_in(dir.path()).expect("temp dir");
            if round % 2 == 0 {
                plain = plain.max(append_plain(round_dir.path(), &sets, append_bytes));
                ours = ours.max(append_log(round_dir.path(), &sets, append_bytes).0);
            } else {
                ours = ours.max(append_log(round_dir.path(), &sets, append_bytes).0);
                plain = plain.max(append_plain(round_dir.path(), &sets, append_bytes));
            }
        }
        println!(
            "{:<34} {:>7.0} MB/s {:>7.0} MB/s {:>7.2}",
            format!("append {payload} B msgs x200"),
            ours / 1e6,
            plain / 1e6,
            ours / plain
        );
        row(
            &format!("log append {payload} B msgs x200, seed flush"),
            ours,
            "plain write + fsync",
            plain,
        );
    }
    let dir = tempfile::tempdir_in("target").expect("temp dir");
    let (_, log) = append_log(dir.path(), &batches(1024), read_bytes);
    let plain = read_plain(dir.path());
    let ours = read_log(&log);
    println!(
        "{:<34} {:>7.0} MB/s {:>7.0} MB/s {:>7.2}",
        format!("read {} MiB in 1 MiB fetches", read_bytes >> 20),
        ours / 1e6,
        plain / 1e6,
        ours / plain
    );
    row(
        &format!("log read {} MiB in 1 MiB reads, checked", read_bytes >> 20),
        ours,
        "plain pread",
        plain,
    );
}
