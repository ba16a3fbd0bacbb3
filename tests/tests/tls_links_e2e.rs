//! Tributary's own outbound links inside TLS with mutual authentication, end to end: an
//! embedded mirror and a replica broker copying a source cluster whose brokers require client
//! certificates, each side registered in its own real ZooKeeper. The source's 0.7 clients keep
//! the plaintext listener.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tributary_tests::broker::BrokerProcess;
use tributary_tests::tls::make_certs;
use tributary_tests::zookeeper::{free_port, ZooKeeper};

const SESSION_MS: u64 = 2000;

fn python(args: &[String]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/tls07.py");
    let out = Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("run python3");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Sends `topic-first` .. `topic-(first+count-1)` to partition 0 on the plaintext `port`.
fn produce(port: u16, topic: &str, first: usize, count: usize) {
    let args = [
        "produce",
        "127.0.0.1",
        &port.to_string(),
        topic,
        &first.to_string(),
        &count.to_string(),
        "--plain",
    ]
    .map(str::to_string);
    let (ok, _) = python(&args);
    assert!(ok, "producing to {topic} on port {port} failed");
}

/// Every payload of partition 0 of `topic` on the plaintext `port` (empty if it fails).
fn fetched(port: u16, topic: &str) -> Vec<String> {
    let args = ["fetch", "127.0.0.1", &port.to_string(), topic, "--plain"].map(str::to_string);
    let (_, out) = python(&args);
    out.lines().map(str::to_string).collect()
}

/// Waits until partition 0 of `topic` on `port` holds every one of `want`, at most `within`;
/// returns what it holds then.
fn until_holds(port: u16, topic: &str, want: &[String], within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let got = fetched(port, topic);
        if want.iter().all(|w| got.contains(w)) || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn names(topic: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{topic}-{i}")).collect()
}

fn broker_properties(id: usize, zk: &ZooKeeper, logs: &Path, extra: &str) -> String {
    format!(
        "brokerid={id}\nhostname=127.0.0.1\nlog.dir={}\nnum.partitions=1\nlog.flush.interval=1\n\
         zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\nzk.connectiontimeout.ms=20000\n{extra}",
        logs.display(),
        zk.connect_string()
    )
}

/// The client TLS keys of a link presenting `identity` (`client` or `stranger`), prefixed.
fn client_tls(prefix: &str, certs: &Path, identity: &str) -> String {
    let c = certs.display();
    format!(
        "{prefix}security.protocol=ssl\n{prefix}ssl.ca.location={c}/ca.crt\n\
         {prefix}ssl.certificate.location={c}/{identity}.crt\n{prefix}ssl.key.location={c}/{identity}.key\n"
    )
}

#[test]
fn a_mirror_and_a_replica_copy_across_mutual_tls_and_a_bad_certificate_stops_the_link_without_loss()
{
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(&dir.path().join("certs"));
    // The mirror's and the replica's own identities, which the test tampers with and repairs.
    let links = dir.path().join("links");
    std::fs::create_dir_all(&links).unwrap();
    for file in ["ca.crt", "client.crt", "client.key"] {
        std::fs::copy(certs.join(file), links.join(file)).unwrap();
    }
    let source_zk = ZooKeeper::start();
    let (plain, ssl) = (free_port(), free_port());
    let source_dir = dir.path().join("source");
    std::fs::create_dir_all(&source_dir).unwrap();
    let c = certs.display();
    let mut source = BrokerProcess::start(
        &source_dir,
        ssl,
        &broker_properties(
            0,
            &source_zk,
            &source_dir.join("logs"),
            &format!(
                "listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl}\n\
                 ssl.certificate.location={c}/broker.crt\nssl.key.location={c}/broker.key\n\
                 ssl.client.auth=required\nssl.ca.location={c}/ca.crt\n"
            ),
        ),
    );
    source.wait_until_registered();
    produce(plain, "orders", 0, 100);

    // The mirror cluster: one broker whose embedded mirror consumes the source over TLS.
    let mirror_zk = ZooKeeper::start();
    let mirror_port = free_port();
    let mirror_dir = dir.path().join("mirror");
    std::fs::create_dir_all(&mirror_dir).unwrap();
    let mirror = BrokerProcess::start_mirror(
        &mirror_dir,
        mirror_port,
        &broker_properties(0, &mirror_zk, &mirror_dir.join("logs"), &format!("port={mirror_port}\n")),
        &format!(
            "zk.connect={}\ngroupid=KafkaMirror\nzk.sessiontimeout.ms={SESSION_MS}\nzk.connectiontimeout.ms=20000\n\
             fetcher.backoff.ms=50\nrebalance.backoff.ms=500\nrebalance.retries.max=20\nmirror.commit.interval.ms=200\n{}",
            source_zk.connect_string(),
            client_tls("", &links, "client")
        ),
        &format!(
            "zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\nproducer.type=async\nqueue.enqueueTimeout.ms=-1\nbatch.size=50\nqueue.time=20\n",
            mirror_zk.connect_string()
        ),
    );
    // A replica broker of the source, copying over TLS too.
    let replica_zk = ZooKeeper::start();
    let replica_port = free_port();
    let replica_dir = dir.path().join("replica");
    std::fs::create_dir_all(&replica_dir).unwrap();
    let replica = BrokerProcess::start(
        &replica_dir,
        replica_port,
        &broker_properties(
            0,
            &replica_zk,
            &replica_dir.join("logs"),
            &format!(
                "port={replica_port}\nreplica.source.zk.connect={}\nreplica.source.brokerid=0\nreplica.fetch.backoff.ms=50\n{}",
                source_zk.connect_string(),
                client_tls("replica.", &links, "client")
            ),
        ),
    );
    let first = names("orders", 0..100);
    let copied = until_holds(mirror_port, "orders", &first, Duration::from_secs(60));
    assert!(
        first.iter().all(|m| copied.contains(m)),
        "the mirror copied {} of 100 over TLS:\n{}",
        first.iter().filter(|m| copied.contains(m)).count(),
        mirror.log_text()
    );
    let replicated = until_holds(replica_port, "orders", &first, Duration::from_secs(60));
    assert_eq!(
        replicated,
        first,
        "the replica's copy:\n{}",
        replica.log_text()
    );

    // A bad identity: the links' certificate replaced by one from a CA the source does not
    // trust, and the source restarted so that both links must connect again.
    for (from, to) in [
        ("stranger.crt", "client.crt"),
        ("stranger.key", "client.key"),
    ] {
        std::fs::copy(certs.join(from), links.join(to)).unwrap();
    }
    source.kill();
    source.spawn();
    produce(plain, "orders", 100, 100);
    let second = names("orders", 100..200);
    // The links stop, loudly: the source refuses each handshake and each side says why.
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = "the broker refused this client's TLS certificate (alert UnknownCA)";
    while !(mirror.log_text().contains(refused) && replica.log_text().contains(refused)) {
        assert!(
            Instant::now() < deadline,
            "a refused TLS link was not reported:\nmirror:\n{}\nreplica:\n{}",
            mirror.log_text(),
            replica.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        source.log_text().contains("TLS handshake refused"),
        "{}",
        source.log_text()
    );
    let meanwhile = fetched(mirror_port, "orders");
    assert!(
        !second.iter().any(|m| meanwhile.contains(m)),
        "copied across a link whose certificate the source refuses"
    );
    // Repaired without restarting either side: every message arrives, nothing lost.
    for file in ["client.crt", "client.key"] {
        std::fs::copy(certs.join(file), links.join(file)).unwrap();
    }
    let all: Vec<String> = names("orders", 0..200);
    let copied = until_holds(mirror_port, "orders", &all, Duration::from_secs(60));
    let missing: Vec<_> = all.iter().filter(|m| !copied.contains(m)).collect();
    assert!(
        missing.is_empty(),
        "the mirror lost {missing:?}:\n{}",
        mirror.log_text()
    );
    let replicated = until_holds(replica_port, "orders", &all, Duration::from_secs(60));
    assert_eq!(
        replicated,
        all,
        "the replica's copy:\n{}",
        replica.log_text()
    );
}
