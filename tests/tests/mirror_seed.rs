//! The original mirroring patch's setup, from the files in `config/` unchanged: a source
//! cluster (zookeeper.properties, server.properties) and a mirror broker started with three
//! files (mirror-server.properties mirror-consumer.properties mirror-producer.properties) on its
//! own ZooKeeper (mirror-zookeeper.properties). Every message produced to the source reaches
//! the mirror. (The files' ports are fixed: 2181, 2171, 9092, 9095; this is its own test binary
//! so nothing else runs beside it.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tributary::consumer::{ConsumerConnector, Subscription};
use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record};
use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
use tributary_tests::broker::tributary_binary;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A child process killed (TERM, then KILL) when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
        .is_ok()
}

fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !port_open(port) {
        assert!(Instant::now() < deadline, "nothing listens on :{port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn spawn(command: &mut Command, log: &Path) -> Process {
    Process(
        command
            .current_dir(repo())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

fn zookeeper(config: &str, log: &Path) -> Process {
    spawn(
        Command::new("java").args([
            "-Xmx256m",
            "-cp",
            "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            config,
        ]),
        log,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_seeds_three_files_unchanged_mirror_every_message() {
    for port in [2181, 2171, 9092, 9095] {
        assert!(
            !port_open(port),
            "port {port} is in use; the sample configs need 2181, 2171, 9092 and 9095 free"
        );
    }
    for dir in [
        "/tmp/zookeeper",
        "/tmp/mirror-zookeeper",
        "/tmp/tributary-logs",
        "/tmp/mirror-kafka-logs",
    ] {
        let _ = std::fs::remove_dir_all(dir);
    }
    let logs = tempfile::tempdir().unwrap();
    let _source_zk = zookeeper("config/zookeeper.properties", &logs.path().join("zk.log"));
    let _mirror_zk = zookeeper(
        "config/mirror-zookeeper.properties",
        &logs.path().join("mirror-zk.log"),
    );
    wait_port(2181);
    wait_port(2171);
    let _source = spawn(
        Command::new(tributary_binary()).args(["server", "config/server.properties"]),
        &logs.path().join("source.log"),
    );
    wait_port(9092);
    let mirror_log = logs.path().join("mirror.log");
    let _mirror = spawn(
        Command::new(tributary_binary())
            .args([
                "server",
                "config/mirror-server.properties",
                "config/mirror-consumer.properties",
                "config/mirror-producer.properties",
            ])
            .env("RUST_LOG", "info"),
        &mirror_log,
    );
    wait_port(9095);

    let text = "zk.connect=localhost:2181\ndurable.acks=true\nproducer.type=async\nqueue.enqueueTimeout.ms=-1\nnum.retries=20\n";
    let producer = Producer::start(
        TokioEnv,
        ProducerConfig::from_properties(&Properties::parse("test", text).unwrap()).unwrap(),
    )
    .await
    .unwrap();
    let mut deliveries = Vec::new();
    let mut expected = BTreeSet::new();
    for i in 0..3000 {
        let m = format!("seed-{i}");
        deliveries.push(
            producer
                .send(Record::new(
                    "seed-topic".parse().unwrap(),
                    m.clone().into_bytes(),
                ))
                .await
                .unwrap(),
        );
        expected.insert(m);
    }
    for d in deliveries {
        d.await.unwrap();
    }
    producer.close().await;

    let text = "zk.connect=localhost:2171\ngroupid=seed-reader\nautooffset.reset=smallest\nconsumer.timeout.ms=1000\n";
    let config =
        ConsumerConfig::from_properties(&Properties::parse("test", text).unwrap()).unwrap();
    let (consumer, mut streams) = ConsumerConnector::start(
        TokioEnv,
        config,
        Subscription::Topics([("seed-topic".parse().unwrap(), 1)].into_iter().collect()),
    )
    .await
    .unwrap();
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < expected.len() && Instant::now() < deadline {
        if let Ok(m) = streams[0].next().await {
            seen.insert(String::from_utf8_lossy(&m.payload).into_owned());
        }
    }
    consumer.shutdown().await;
    let missing = expected.difference(&seen).count();
    assert_eq!(
        missing,
        0,
        "{missing} messages did not reach the mirror:\n{}",
        std::fs::read_to_string(&mirror_log).unwrap_or_default()
    );
    let log = std::fs::read_to_string(&mirror_log).unwrap_or_default();
    assert!(
        log.contains("mirroring from 127.0.0.1:2181 (group KafkaMirror)"),
        "{log}"
    );
}
