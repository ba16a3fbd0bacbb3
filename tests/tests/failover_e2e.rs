//! The disaster-recovery drill on real processes and two real ZooKeepers, with only the
//! documented commands (nothing edited by hand in ZooKeeper): datacenter A (a ZooKeeper, two
//! brokers) is primary and datacenter B (a ZooKeeper, two replica brokers syncing the group's
//! offsets) copies it; a producer with durable acknowledgements and a consumer group work on A.
//!
//! 1. Disaster: every process of A is killed (kill -9). `promote` B; the producer and the
//!    group move to B.
//! 2. A returns with its old log.dir, configured as a replica of B. `demote --dry-run` lists
//!    exactly the messages A acknowledged that B never received; `demote` keeps them in
//!    .diverged files and A copies from B only what B wrote since the cut.
//! 3. Planned switchback: producers stop, `promote` A, `demote` B (nothing diverged), the group
//!    moves back to A and re-reads nothing; B protects A again.
//!
//! Checked: every message acknowledged by the cluster that was primary at the time survives at
//! the end (on A, at its offset, or in A's diverged files for those B never received); the
//! group never skips a message; the figures of the drill are printed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tributary::client::Connection;
use tributary::consumer::{ConsumerConnector, ConsumerError, Subscription};
use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record};
use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
use tributary_core::message::ShallowIter;
use tributary_core::wire::{ErrorCode, FetchRequest, OffsetsRequest, Request, Response, TopicName};
use tributary_tests::broker::{tributary_binary, BrokerProcess};
use tributary_tests::zookeeper::{free_port, ZooKeeper};

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 2;
const GROUP: &str = "app";
const SYNC_MS: u64 = 300;
const AUTOCOMMIT_MS: u64 = 300;

fn topic() -> TopicName {
    TOPIC.parse().unwrap()
}

/// One datacenter: its ZooKeeper and two brokers (ids 0 and 1).
struct Datacenter {
    zk: ZooKeeper,
    dirs: Vec<tempfile::TempDir>,
    brokers: Vec<BrokerProcess>,
}

/// A broker's properties: a replica of `source` when given (offsets of GROUP synced).
fn properties(
    id: i32,
    port: u16,
    dir: &std::path::Path,
    zk: &ZooKeeper,
    source: Option<&ZooKeeper>,
) -> String {
    let replica = source.map_or_else(String::new, |s| {
        format!(
            "replica.source.zk.connect={}\nreplica.offsets.sync.groups={GROUP}\nreplica.offsets.sync.interval.ms={SYNC_MS}\nreplica.fetch.backoff.ms=300\n",
            s.connect_string()
        )
    });
    format!(
        "brokerid={id}\nhostname=127.0.0.1\nport={port}\nlog.dir={}\nnum.partitions={PARTITIONS}\nlog.flush.interval=1\n\
         log.file.size=20000\nzk.connect={}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=10000\n{replica}",
        dir.join("logs").display(),
        zk.connect_string()
    )
}

impl Datacenter {
    fn start(source: Option<&ZooKeeper>) -> Datacenter {
        let zk = ZooKeeper::start();
        let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let brokers = dirs
            .iter()
            .enumerate()
            .map(|(i, dir)| {
                let port = free_port();
                BrokerProcess::start(
                    dir.path(),
                    port,
                    &properties(i as i32, port, dir.path(), &zk, source),
                )
            })
            .collect();
        Datacenter { zk, dirs, brokers }
    }

    /// Restarts every broker with its log.dir as a replica of `source`.
    fn restart_as_replicas_of(&mut self, source: &ZooKeeper) {
        for (i, broker) in self.brokers.iter_mut().enumerate() {
            let text = properties(
                i as i32,
                broker.port,
                self.dirs[i].path(),
                &self.zk,
                Some(source),
            );
            std::fs::write(&broker.config, text).unwrap();
            broker.spawn();
        }
    }

    fn logs(&self) -> String {
        self.brokers.iter().map(BrokerProcess::log_text).collect()
    }
}

async fn connect(port: u16) -> Connection<tokio::net::TcpStream> {
    tributary::client::connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(10))
        .await
        .unwrap()
}

async fn latest(port: u16, partition: i32) -> u64 {
    let mut conn = connect(port).await;
    let request = Request::Offsets(OffsetsRequest {
        topic: topic(),
        partition,
        time: -1,
        max_offsets: 1,
    });
    match conn.call(&request).await.unwrap() {
        Response::Offsets(o) if o.error == ErrorCode::NoError => {
            o.offsets.first().copied().unwrap_or(0) as u64
        }
        _ => 0,
    }
}

/// A partition's bytes from 0 to its visible end.
async fn bytes_of(port: u16, partition: i32) -> Vec<u8> {
    let mut conn = connect(port).await;
    let mut out = Vec::new();
    loop {
        let request = Request::Fetch(FetchRequest {
            topic: topic(),
            partition,
            offset: out.len() as i64,
            max_bytes: 1 << 20,
        });
        match conn.call(&request).await.unwrap() {
            Response::Fetch(f) if f.error == ErrorCode::NoError && !f.messages.is_empty() => {
                out.extend_from_slice(&f.messages)
            }
            _ => return out,
        }
    }
}

/// The payloads of a set of messages (uncompressed, one per entry), with their offsets.
fn payloads(bytes: &[u8], base: u64) -> Vec<(u64, String)> {
    ShallowIter::new(bytes, base as i64)
        .filter_map(Result::ok)
        .map(|e| {
            (
                e.offset as u64,
                String::from_utf8_lossy(e.message.payload).into_owned(),
            )
        })
        .collect()
}

/// Every message of a datacenter's `orders`: (broker, partition) → offset → payload.
async fn contents(dc: &Datacenter) -> BTreeMap<(usize, i32), BTreeMap<u64, String>> {
    let mut out = BTreeMap::new();
    for (b, broker) in dc.brokers.iter().enumerate() {
        for p in 0..PARTITIONS {
            let bytes = bytes_of(broker.port, p).await;
            out.insert((b, p), payloads(&bytes, 0).into_iter().collect());
        }
    }
    out
}

/// Every `.diverged` file under a datacenter's log dirs.
fn diverged_files(dc: &Datacenter) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for dir in &dc.dirs {
        for p in 0..PARTITIONS {
            let partition = dir.path().join("logs").join(format!("{TOPIC}-{p}"));
            for entry in std::fs::read_dir(&partition)
                .into_iter()
                .flatten()
                .flatten()
            {
                if entry.file_name().to_string_lossy().ends_with(".diverged") {
                    out.push(entry.path());
                }
            }
        }
    }
    out
}

/// The messages of every `.diverged` file under a datacenter's log dirs.
fn diverged(dc: &Datacenter) -> BTreeSet<String> {
    diverged_files(dc)
        .iter()
        .flat_map(|f| payloads(&std::fs::read(f).unwrap(), 0))
        .map(|(_, m)| m)
        .collect()
}

/// The group's committed offsets in a cluster: partition name → offset.
async fn committed(zk: &ZooKeeper) -> BTreeMap<String, String> {
    let client = zookeeper_client::Client::connect(&zk.connect_string())
        .await
        .unwrap();
    let path = format!("/consumers/{GROUP}/offsets/{TOPIC}");
    let mut out = BTreeMap::new();
    for name in client.list_children(&path).await.unwrap_or_default() {
        if let Ok((data, _)) = client.get_data(&format!("{path}/{name}")).await {
            out.insert(name, String::from_utf8(data).unwrap());
        }
    }
    out
}

fn run_tool(args: &[&str]) -> String {
    let started = Instant::now();
    let out = std::process::Command::new(tributary_binary())
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "tributary {args:?} failed:\n{text}");
    eprintln!(
        "tributary {} ({:.1} s):\n{text}",
        args.join(" "),
        started.elapsed().as_secs_f64()
    );
    text
}

/// Acknowledged messages, by the cluster that acknowledged them.
type Acked = Arc<Mutex<BTreeMap<String, &'static str>>>;

/// Produces `<prefix><n>` to `orders` on the cluster behind `zk` with durable acknowledgements
/// until `stop`, recording each acknowledged message as acknowledged by `cluster`.
fn producing(
    zk: &ZooKeeper,
    prefix: &'static str,
    cluster: &'static str,
    acked: Acked,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let text = format!(
        "zk.connect={}\nproducer.type=sync\ndurable.acks=true\nnum.retries=0\nsocket.timeout.ms=2000\nzk.sessiontimeout.ms=3000\n",
        zk.connect_string()
    );
    tokio::spawn(async move {
        let config =
            ProducerConfig::from_properties(&Properties::parse("p", &text).unwrap()).unwrap();
        let producer = Producer::start(TokioEnv, config).await.unwrap();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let message = format!("{prefix}{n:07}");
            if let Ok(delivery) = producer
                .send(Record::new(topic(), Bytes::from(message.clone())))
                .await
            {
                if delivery.await.is_ok() {
                    acked.lock().unwrap().insert(message, cluster);
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        producer.close().await;
    })
}

fn consumer_config(zk: &ZooKeeper) -> ConsumerConfig {
    let text = format!(
        "zk.connect={}\ngroupid={GROUP}\nzk.sessiontimeout.ms=3000\nautooffset.reset=smallest\nfetcher.backoff.ms=50\nautocommit.interval.ms={AUTOCOMMIT_MS}\nconsumer.timeout.ms=500\n",
        zk.connect_string()
    );
    ConsumerConfig::from_properties(&Properties::parse("c", &text).unwrap()).unwrap()
}

/// What the group read, with when.
type Reads = Arc<Mutex<Vec<(Instant, String)>>>;

/// Reads the group's messages on the cluster behind `zk` into `read` until `stop`; then stops
/// the consumer cleanly (final commit) when `clean`, or drops it (its cluster is dead).
fn consuming(
    zk: &ZooKeeper,
    read: Reads,
    stop: Arc<AtomicBool>,
    clean: bool,
) -> tokio::task::JoinHandle<()> {
    let config = consumer_config(zk);
    tokio::spawn(async move {
        let subscription = Subscription::Topics([(topic(), 1)].into_iter().collect());
        let (connector, mut streams) = ConsumerConnector::start(TokioEnv, config, subscription)
            .await
            .unwrap();
        while !stop.load(Ordering::Relaxed) {
            match streams[0].next().await {
                Ok(m) => read.lock().unwrap().push((
                    Instant::now(),
                    String::from_utf8_lossy(&m.payload).into_owned(),
                )),
                Err(ConsumerError::Timeout(_)) => {}
                Err(_) => break,
            }
        }
        if clean {
            connector.shutdown().await;
        } else {
            std::mem::forget(connector);
        }
    })
}

async fn wait_for(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `a` and `b` hold the same bytes in every partition.
async fn wait_identical(what: &str, a: &Datacenter, b: &Datacenter) {
    wait_for(what, Duration::from_secs(60), async || {
        for i in 0..2 {
            for p in 0..PARTITIONS {
                if bytes_of(a.brokers[i].port, p).await != bytes_of(b.brokers[i].port, p).await {
                    return false;
                }
            }
        }
        true
    })
    .await;
}

/// Sum of every partition's end.
async fn total_end(dc: &Datacenter) -> u64 {
    let mut total = 0;
    for broker in &dc.brokers {
        for p in 0..PARTITIONS {
            total += latest(broker.port, p).await;
        }
    }
    total
}

/// The sum of the cuts in a demote's confirmations (where every partition's log ends after it).
fn cuts_in(confirmed: &str) -> u64 {
    confirmed
        .lines()
        .filter_map(|l| {
            let (_, rest) = l
                .split_once(": cut back to ")
                .or_else(|| l.split_once(": copies on from "))?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The "n messages, b bytes past the cuts" figures of a demote's plan.
fn past_the_cuts(plan: &str) -> (u64, u64) {
    let line = plan
        .lines()
        .find(|l| l.starts_with("in all: "))
        .unwrap_or_else(|| panic!("no totals in:\n{plan}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disaster_failover_failback_and_reprotect_with_the_documented_commands_only() {
    let mut a = Datacenter::start(None);
    let b = Datacenter::start(Some(&a.zk));
    let acked: Acked = Arc::default();
    let read: Reads = Arc::default();

    // A is primary: a producer and the group work there; B copies.
    let stop_a = Arc::new(AtomicBool::new(false));
    let producer_a = producing(&a.zk, "a-", "A", acked.clone(), stop_a.clone());
    let consumer_a = consuming(&a.zk, read.clone(), stop_a.clone(), false);
    tokio::time::sleep(Duration::from_secs(4)).await;

    // The disaster: every process of A, mid-stream.
    let (a_end, b_end) = (total_end(&a).await, total_end(&b).await);
    for broker in &mut a.brokers {
        broker.kill();
    }
    a.zk.kill();
    let disaster = Instant::now();
    stop_a.store(true, Ordering::Relaxed);
    consumer_a.abort();
    let _ = producer_a.await;
    let lag_at_disaster = a_end.saturating_sub(b_end);

    // Fail over: promote B; producers and the group move.
    let zk_b = b.zk.connect_string();
    let promoted = run_tool(&["promote", "--zookeeper", &zk_b, "--wait", "30"]);
    assert!(
        promoted.contains("the whole cluster is promoted"),
        "{promoted}"
    );
    let b_cut = total_end(&b).await;
    let stop_b = Arc::new(AtomicBool::new(false));
    let producer_b = producing(&b.zk, "b-", "B", acked.clone(), stop_b.clone());
    wait_for(
        "the first acknowledged produce on B",
        Duration::from_secs(30),
        async || acked.lock().unwrap().values().any(|c| *c == "B"),
    )
    .await;
    let first_produce_on_b = disaster.elapsed();
    // The stated bound on what the group reads again on B: what it read on A in the last sync
    // interval plus its autocommit interval before the disaster (and the syncer's round).
    let bound_window = Duration::from_millis(SYNC_MS + AUTOCOMMIT_MS + 500);
    let reread_bound = read
        .lock()
        .unwrap()
        .iter()
        .filter(|(at, _)| *at + bound_window >= disaster)
        .count();
    let consumer_b = consuming(&b.zk, read.clone(), stop_b.clone(), true);
    tokio::time::sleep(Duration::from_secs(3)).await;

    // A returns with its old log.dir, as replicas of B.
    a.zk.start_again();
    a.restart_as_replicas_of(&b.zk);
    let zk_a = a.zk.connect_string();
    let dry = run_tool(&["demote", "--zookeeper", &zk_a, "--dry-run"]);
    let (listed, listed_bytes) = past_the_cuts(&dry);
    let on_b_at_cut: BTreeSet<String> = contents(&b)
        .await
        .values()
        .flat_map(|m| m.values().cloned())
        .collect();
    let lost: BTreeSet<String> = acked
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, c)| **c == "A" && !on_b_at_cut.contains(*m))
        .map(|(m, _)| m.clone())
        .collect();
    let demoted = run_tool(&["demote", "--zookeeper", &zk_a, "--wait", "60"]);
    assert!(
        demoted.contains("broker 0 confirmed") && demoted.contains("broker 1 confirmed"),
        "{demoted}\n{}",
        a.logs()
    );
    // The diverged files hold what A stored past the cuts: every message it acknowledged that
    // B never received, plus at most the one whose acknowledgement the kill cut off (the
    // producer sends one at a time); nothing B holds.
    let kept = diverged(&a);
    assert_eq!(
        listed,
        kept.len() as u64,
        "the dry run lists what the diverged files hold\n{dry}"
    );
    assert!(
        lost.iter().all(|m| kept.contains(m)),
        "a message A acknowledged is in no diverged file"
    );
    assert!(
        kept.iter()
            .all(|m| m.starts_with("a-") && !on_b_at_cut.contains(m)),
        "a diverged file holds a message B has"
    );
    assert!(
        kept.len() <= lost.len() + 1,
        "{} kept for {} lost",
        kept.len(),
        lost.len()
    );

    let a_cut = cuts_in(&demoted);
    // What A acknowledged that B never received is recoverable: re-published to B from the
    // diverged files, it is copied back to A like any message B takes.
    let mut replayed = 0;
    for file in diverged_files(&a) {
        // A valid 0.7 segment at its offsets.
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let cut: u64 = name.split('.').next().unwrap().parse().unwrap();
        let dump = run_tool(&["dump-log", "--noprint", file.to_str().unwrap()]);
        assert!(dump.contains(&format!("Starting offset: {cut}")), "{dump}");
        let out = run_tool(&[
            "replay-log-producer",
            "--from-file",
            file.to_str().unwrap(),
            "--outputtopic",
            TOPIC,
            "--brokerinfo",
            &format!("zk.connect={zk_b}"),
        ]);
        assert!(out.contains(" delivered, 0 not"), "{out}");
        replayed += payloads(&std::fs::read(&file).unwrap(), 0).len();
    }
    assert_eq!(replayed, kept.len(), "every diverged message re-published");

    // A catches up from the cut: only what B wrote since.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_b.store(true, Ordering::Relaxed);
    let _ = producer_b.await;
    let _ = consumer_b.await;
    wait_identical("A to catch up with B", &a, &b).await;
    let b_total = total_end(&b).await;
    let failback_bytes = b_total - a_cut;
    let b_since_cut = b_total - b_cut;

    // The group's offsets follow to A (synced from B: it committed there last).
    let read_before_switch = read.lock().unwrap().len();

    // Planned switchback: promote A, demote B, the group moves back. A's syncer has replaced
    // the group's commits of before the disaster with its commits on B.
    let on_b = committed(&b.zk).await;
    wait_for(
        "the group's offsets on B to reach A",
        Duration::from_secs(20),
        async || committed(&a.zk).await == on_b,
    )
    .await;
    run_tool(&["promote", "--zookeeper", &zk_a, "--wait", "30"]);
    let back = run_tool(&["demote", "--zookeeper", &zk_b, "--dry-run"]);
    assert_eq!(
        past_the_cuts(&back),
        (0, 0),
        "a planned switchback diverges nothing\n{back}"
    );
    run_tool(&["demote", "--zookeeper", &zk_b, "--wait", "60"]);
    let stop_again = Arc::new(AtomicBool::new(false));
    let consumer_back = consuming(&a.zk, read.clone(), stop_again.clone(), true);
    let producer_again = producing(&a.zk, "c-", "A again", acked.clone(), stop_again.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_again.store(true, Ordering::Relaxed);
    let _ = producer_again.await;
    // B protects A again: it copies what A takes now.
    wait_identical("B to copy A again", &b, &a).await;
    // The group drains what is left.
    let drained = Arc::new(AtomicBool::new(false));
    let _ = consumer_back.await;
    let final_reader = consuming(&a.zk, read.clone(), drained.clone(), true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    drained.store(true, Ordering::Relaxed);
    let _ = final_reader.await;

    // Nothing acknowledged by the primary of its time is lost.
    let on_a: BTreeSet<String> = contents(&a)
        .await
        .values()
        .flat_map(|m| m.values().cloned())
        .collect();
    for (message, cluster) in acked.lock().unwrap().iter() {
        assert!(
            on_a.contains(message),
            "{message}, acknowledged by {cluster}, is not on A (nor was it re-published)"
        );
    }
    // The group skipped nothing of the final log, and re-read what the bounds allow.
    let all_read = read.lock().unwrap().clone();
    let distinct: BTreeSet<&String> = all_read.iter().map(|(_, m)| m).collect();
    let skipped: Vec<&String> = on_a.iter().filter(|m| !distinct.contains(m)).collect();
    assert!(
        skipped.is_empty(),
        "the group skipped {} messages, e.g. {:?}",
        skipped.len(),
        skipped.first()
    );
    let mut seen = BTreeSet::new();
    let mut rereads_failover = 0usize;
    let mut rereads_switchback = 0usize;
    for (i, (_, m)) in all_read.iter().enumerate() {
        if !seen.insert(m) {
            if i < read_before_switch {
                rereads_failover += 1;
            } else {
                rereads_switchback += 1;
            }
        }
    }
    assert_eq!(
        rereads_switchback, 0,
        "a planned switchback re-reads nothing"
    );
    assert!(
        rereads_failover <= reread_bound,
        "the failover re-read {rereads_failover}, past the bound: {reread_bound} read on A in the last {bound_window:?} before the disaster"
    );
    eprintln!(
        "DRILL: first acknowledged produce on B {:.1} s after the disaster; lost {} messages ({listed_bytes} bytes) against B's lag of {lag_at_disaster} bytes at the disaster; re-read {rereads_failover} at the failover (bound {reread_bound}), {rereads_switchback} at the switchback; failback copied {failback_bytes} bytes against B's {b_since_cut} since the cut and {b_total} for a full re-copy",
        first_produce_on_b.as_secs_f64(),
        lost.len()
    );
}
