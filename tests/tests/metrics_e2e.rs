//! Metrics and the live view with real processes: a real Prometheus server (Debian's package)
//! scrapes a source broker, a target broker and a mirror maker; the test asks Prometheus's HTTP
//! API and sees the source's bytes-in grow by exactly what was produced, and the mirror's lag
//! rise while the target is frozen and fall to 0 once it is back. Each endpoint's text is also
//! read by an independent parser (`prometheus-parse`), and `mirror-status` is compared with
//! snapshots while the mirror is behind and once it caught up.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record};
use tributary_core::config::{ProducerConfig, Properties};
use tributary_tests::broker::{tributary_binary, BrokerProcess};
use tributary_tests::prometheus::Prometheus;
use tributary_tests::zookeeper::{free_port, ZooKeeper};

const TOPIC: &str = "metered";
/// Messages per batch, each with a 100-byte payload: 110 bytes as a stored entry (4-byte
/// length, magic, attributes, CRC).
const BATCH: usize = 200;
const ENTRY_BYTES: usize = 110;
/// Generous: Prometheus scrapes every second, the mirror samples lag every 5 s.
const WAIT: Duration = Duration::from_secs(60);

fn server_properties(id: u32, port: u16, metrics: u16, dir: &Path, zk: &ZooKeeper) -> String {
    format!(
        "brokerid={id}\nhostname=127.0.0.1\nport={port}\nlog.dir={}\nnum.partitions=1\n\
         log.flush.interval=1\nzk.connect={}\nzk.sessiontimeout.ms=20000\nzk.connectiontimeout.ms=20000\n\
         metrics.port={metrics}\n",
        dir.join("logs").display(),
        zk.connect_string()
    )
}

async fn produce(zk: &ZooKeeper, batch: usize) {
    let text = format!(
        "zk.connect={}\ndurable.acks=true\nnum.retries=50\nproducer.type=sync\n",
        zk.connect_string()
    );
    let config = ProducerConfig::from_properties(&Properties::parse("test", &text).unwrap())
        .expect("producer config");
    let producer = Producer::start(TokioEnv, config).await.expect("producer");
    for i in 0..BATCH {
        let payload = format!("{batch}-{i:0>98}");
        assert_eq!(payload.len() + 10, ENTRY_BYTES);
        let delivery = producer
            .send(Record::new(TOPIC.parse().unwrap(), payload))
            .await
            .expect("send");
        delivery.await.expect("delivered");
    }
    producer.close().await;
}

fn mirror_maker(
    dir: &Path,
    source: &ZooKeeper,
    target: &ZooKeeper,
    metrics: u16,
    consumer_extra: &str,
) -> Child {
    let consumer = dir.join("consumer.properties");
    let producer = dir.join("producer.properties");
    std::fs::write(
        &consumer,
        format!(
            "zk.connect={}\ngroupid=KafkaMirror\nfetcher.backoff.ms=50\nmirror.commit.interval.ms=200\nautooffset.reset=smallest\n{consumer_extra}",
            source.connect_string()
        ),
    )
    .unwrap();
    std::fs::write(
        &producer,
        format!(
            "zk.connect={}\nzk.sessiontimeout.ms=20000\nproducer.type=async\nqueue.time=20\n",
            target.connect_string()
        ),
    )
    .unwrap();
    Command::new(tributary_binary())
        .args(["mirror-maker", "--whitelist", TOPIC, "--metrics.port"])
        .arg(metrics.to_string())
        .arg("--consumer.config")
        .arg(&consumer)
        .arg("--producer.config")
        .arg(&producer)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("mirror.log")).unwrap())
        .spawn()
        .expect("start the mirror maker")
}

/// `tributary mirror-status` for the mirror's group, with one line per partition.
fn mirror_status(source: &ZooKeeper) -> String {
    let out = Command::new(tributary_binary())
        .args([
            "mirror-status",
            "--group",
            "KafkaMirror",
            "-v",
            "--interval",
            "0.5",
        ])
        .args(["--zkconnect", &source.connect_string()])
        .output()
        .expect("run mirror-status");
    assert!(
        out.status.success(),
        "mirror-status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    // The first line names the source cluster, whose id is random: checked, then left out.
    let (cluster, table) = text.split_once('\n').expect("a first line");
    assert!(cluster.starts_with("source cluster "), "{text}");
    table.to_string()
}

/// Every sample of an endpoint, read by `prometheus-parse`: `name{labels sorted}` → value.
fn parse_scrape(text: &str) -> BTreeMap<String, f64> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the text format parses");
    scrape
        .samples
        .into_iter()
        .filter_map(|s| {
            let value = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => return None,
            };
            let labels: BTreeMap<String, String> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            Some((format!("{}{{{}}}", s.metric, labels.join(",")), value))
        })
        .collect()
}

fn scrape(rt: &tokio::runtime::Runtime, port: u16) -> String {
    rt.block_on(tributary::metrics::server::scrape(
        &TokioEnv,
        "127.0.0.1",
        port,
    ))
    .unwrap_or_else(|e| panic!("scraping port {port}: {e}"))
}

#[test]
fn prometheus_sees_bytes_in_grow_and_the_mirrors_lag_rise_and_fall_to_zero() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (source_zk, target_zk) = (ZooKeeper::start(), ZooKeeper::start());
    let (source_dir, target_dir, mirror_dir) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (source_port, target_port) = (free_port(), free_port());
    let (source_metrics, target_metrics, mirror_metrics) = (free_port(), free_port(), free_port());
    let _source = BrokerProcess::start(
        source_dir.path(),
        source_port,
        &server_properties(
            0,
            source_port,
            source_metrics,
            source_dir.path(),
            &source_zk,
        ),
    );
    let target = BrokerProcess::start(
        target_dir.path(),
        target_port,
        &server_properties(
            1,
            target_port,
            target_metrics,
            target_dir.path(),
            &target_zk,
        ),
    );
    let targets: Vec<String> = [source_metrics, target_metrics, mirror_metrics]
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let prometheus = Prometheus::start(&targets);
    let source = format!(r#"instance="127.0.0.1:{source_metrics}""#);
    let mirror = format!(r#"instance="127.0.0.1:{mirror_metrics}""#);
    let bytes_in = format!(r#"sum(tributary_bytes_in_total{{{source},topic="{TOPIC}"}})"#);
    let lag = format!(r#"max(tributary_mirror_lag_bytes{{{mirror},topic="{TOPIC}"}})"#);

    // The first batch: bytes-in is exactly what was stored.
    rt.block_on(produce(&source_zk, 1));
    let one = (BATCH * ENTRY_BYTES) as f64;
    prometheus.wait_for(&bytes_in, WAIT, |v| v == one);

    // The mirror catches up with it: every target is scraped, lag is there and 0.
    let mut maker = mirror_maker(
        mirror_dir.path(),
        &source_zk,
        &target_zk,
        mirror_metrics,
        "",
    );
    prometheus.wait_for("sum(up)", WAIT, |v| v == 3.0);
    prometheus.wait_for(&lag, WAIT, |v| v == 0.0);
    prometheus.wait_for(
        &format!("sum(tributary_mirror_messages_total{{{mirror}}})"),
        WAIT,
        |v| v == BATCH as f64,
    );

    // The target frozen, a second batch: bytes-in grows by exactly the batch, and the mirror's
    // lag rises to it (nothing more is durably mirrored, so nothing more is committed).
    target.pause();
    rt.block_on(produce(&source_zk, 2));
    prometheus.wait_for(&bytes_in, WAIT, |v| v == 2.0 * one);
    prometheus.wait_for(&lag, WAIT, |v| v == one);
    insta::assert_snapshot!("mirror_status_while_behind", mirror_status(&source_zk));

    // The target back: the lag falls to 0 and everything is mirrored once.
    target.resume();
    prometheus.wait_for(&lag, WAIT, |v| v == 0.0);
    prometheus.wait_for(
        &format!("sum(tributary_mirror_messages_total{{{mirror}}})"),
        WAIT,
        |v| v == 2.0 * BATCH as f64,
    );
    insta::assert_snapshot!("mirror_status_caught_up", mirror_status(&source_zk));
    assert!(
        prometheus
            .query(&format!(
                r#"max_over_time(tributary_mirror_lag_bytes{{{mirror},topic="{TOPIC}"}}[10m])"#
            ))
            .is_some_and(|v| v == one),
        "Prometheus recorded the lag while the target was frozen"
    );

    // The same endpoints read by an independent parser of the text format.
    let source_samples = parse_scrape(&scrape(&rt, source_metrics));
    let two = 2.0 * one;
    assert_eq!(
        source_samples.get(&format!("tributary_bytes_in_total{{topic={TOPIC}}}")),
        Some(&two)
    );
    assert_eq!(
        source_samples.get(&format!(
            "tributary_log_end_offset{{partition=0,topic={TOPIC}}}"
        )),
        Some(&two)
    );
    assert!(source_samples
        .get(&format!(
            "tributary_log_flushed_offset{{partition=0,topic={TOPIC}}}"
        ))
        .is_some_and(|v| *v <= two));
    // The producers asked for durable acknowledgements; the mirror read with MULTIFETCH.
    assert!(source_samples.contains_key("tributary_requests_total{type=acked_produce}"));
    assert!(source_samples.contains_key("tributary_requests_total{type=multifetch}"));
    assert!(
        prometheus
            .query(&format!(
                "sum(tributary_flush_duration_seconds_count{{{source}}})"
            ))
            .is_some_and(|v| v >= 1.0),
        "flushes are timed"
    );
    assert!(source_samples.contains_key("tributary_connections{}"));
    let mirror_samples = parse_scrape(&scrape(&rt, mirror_metrics));
    let batch2 = 2.0 * BATCH as f64;
    for (name, want) in [
        ("tributary_mirror_messages_total{}", batch2),
        ("tributary_producer_acked_total{}", batch2),
        ("tributary_producer_failed_total{}", 0.0),
        ("tributary_producer_dropped_total{}", 0.0),
        ("tributary_mirror_gaps_total{}", 0.0),
        ("tributary_mirror_in_flight_bytes{}", 0.0),
    ] {
        assert_eq!(mirror_samples.get(name), Some(&want), "{name}");
    }
    assert_eq!(
        mirror_samples.get(&format!(
            "tributary_consumer_committed_offset{{partition=0-0,topic={TOPIC}}}"
        )),
        Some(&two)
    );
    let _ = maker.kill();
    let _ = maker.wait();
}

#[test]
fn log_format_json_writes_one_json_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = dir.path().join("server.properties");
    std::fs::write(
        &config,
        format!(
            "brokerid=0\nhostname=127.0.0.1\nport={port}\nlog.dir={}\nenable.zookeeper=false\nno.such.key=1\n",
            dir.path().join("logs").display()
        ),
    )
    .unwrap();
    let log = dir.path().join("broker.log");
    let mut broker = Command::new(tributary_binary())
        .args(["--log-format", "json", "server"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start the broker");
    let deadline = std::time::Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the broker did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &broker.id().to_string()])
        .status();
    assert!(broker.wait().unwrap().success());
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let said = |level: &str, words: &str| {
        lines.iter().any(|l| {
            l["level"] == level
                && l["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(words))
        })
    };
    assert!(said("WARN", "no.such.key"), "{text}");
    assert!(said("INFO", "serving on"), "{text}");
    assert!(said("INFO", "shut down"), "{text}");

    // A command that fails says why in JSON too.
    let failed = Command::new(tributary_binary())
        .args([
            "--log-format",
            "json",
            "server",
            "/nonexistent/server.properties",
        ])
        .output()
        .expect("run the broker");
    assert_eq!(failed.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    let line: serde_json::Value = serde_json::from_str(stderr.trim())
        .unwrap_or_else(|e| panic!("not one JSON line ({e}): {stderr}"));
    assert_eq!(line["level"], "ERROR", "{stderr}");
    assert!(
        line["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("/nonexistent/server.properties")),
        "{stderr}"
    );
}

/// The shipped alert rules (`config/prometheus-alerts.yml`), with every `for:` shortened and
/// the lag threshold (300 s) lowered to 3 s, so a test sees them fire within seconds.
fn shipped_alert_rules() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/prometheus-alerts.yml");
    let rules = std::fs::read_to_string(&path).expect("config/prometheus-alerts.yml");
    assert!(rules.contains("(tributary_mirror_lag_seconds) > 300"));
    rules
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("for:") {
                l.split("for:").next().unwrap_or_default().to_string() + "for: 2s"
            } else {
                l.replace(
                    "(tributary_mirror_lag_seconds) > 300",
                    "(tributary_mirror_lag_seconds) > 3",
                )
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn partitions_nobody_copies_fire_the_unowned_alert_and_show_their_lag_until_a_member_owns_them() {
    use tributary::coordination::zk::ZkCoordination;
    use tributary::coordination::{Coordination, NodeKind};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (source_zk, target_zk) = (ZooKeeper::start(), ZooKeeper::start());
    let (source_dir, target_dir, mirror_dir) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (source_port, target_port, mirror_metrics) = (free_port(), free_port(), free_port());
    let _source = BrokerProcess::start(
        source_dir.path(),
        source_port,
        &server_properties(0, source_port, free_port(), source_dir.path(), &source_zk),
    );
    let _target = BrokerProcess::start(
        target_dir.path(),
        target_port,
        &server_properties(1, target_port, free_port(), target_dir.path(), &target_zk),
    );
    rt.block_on(produce(&source_zk, 1));
    // A session that is no member of the group holds the partition's owner node (as a gone
    // member's session does until it expires): the mirror cannot claim it, and nothing copies it.
    let connect = tributary_core::config::ZkConnect::parse(&source_zk.connect_string()).unwrap();
    let squatter = rt.block_on(async {
        let coord =
            ZkCoordination::connect(&connect, Duration::from_secs(20), Duration::from_secs(20))
                .await
                .unwrap();
        let owner = format!("/consumers/KafkaMirror/owners/{TOPIC}/0-0");
        coord.ensure_parents(&owner).await.unwrap();
        coord
            .create(&owner, b"KafkaMirror_gone-0", NodeKind::Ephemeral)
            .await
            .unwrap();
        coord
    });
    let prometheus = Prometheus::start_with_rules(
        &[format!("127.0.0.1:{mirror_metrics}")],
        Some(&shipped_alert_rules()),
    );
    let mut maker = mirror_maker(
        mirror_dir.path(),
        &source_zk,
        &target_zk,
        mirror_metrics,
        "mirror.unowned.alarm.ms=2000\nrebalance.retries.max=2\nrebalance.backoff.ms=200\n",
    );
    // A failure shows the mirror's log: what it saw of the group is there.
    let wait = |expr: &str, ok: &dyn Fn(f64) -> bool| {
        if let Err(e) = prometheus.try_wait_for(expr, WAIT, ok) {
            let log =
                std::fs::read_to_string(mirror_dir.path().join("mirror.log")).unwrap_or_default();
            panic!("{e}\nthe mirror maker's log:\n{log}");
        }
    };
    let firing = r#"max(ALERTS{alertname="MirrorPartitionsUnowned",alertstate="firing"})"#;
    wait(firing, &|v| v == 1.0);
    // The partition nobody copies falls behind: the lag alert fires too.
    let lagging = r#"max(ALERTS{alertname="MirrorLagHigh",alertstate="firing",topic="metered",partition="0-0"})"#;
    wait(lagging, &|v| v == 1.0);
    // The lag of the partition nobody owns is there, measured against the group's commits.
    let lag = format!(r#"max(tributary_mirror_lag_bytes{{topic="{TOPIC}",partition="0-0"}})"#);
    wait(&lag, &|v| v == (BATCH * ENTRY_BYTES) as f64);
    let log = std::fs::read_to_string(mirror_dir.path().join("mirror.log")).unwrap_or_default();
    assert!(
        log.contains("have had no live owner") && log.contains(&format!("{TOPIC}/0-0")),
        "the mirror did not say which partition nobody copies:\n{log}"
    );
    // The squatter goes: the member rejoins, owns it, copies it; the alert ends, the lag is 0.
    rt.block_on(squatter.close());
    let unowned = "max(tributary_mirror_unowned_partitions)";
    wait(unowned, &|v| v == 0.0);
    wait(&lag, &|v| v == 0.0);
    let _ = maker.kill();
    let _ = maker.wait();
}
