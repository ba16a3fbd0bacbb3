//! Tributary's own outbound links inside TLS with mutual authentication, end to end: an
//! embedded mirror and a replica broker copying a source cluster whose brokers require client
//! certificates, each side registered in its own real ZooKeeper. The source's 0.7 clients keep
//! the plaintext listener.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tributary_tests::broker::BrokerProcess;
use tributary_tests::tls::{https_metrics, make_certs};
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

/// The ZooKeeper keys of a session over TLS presenting `identity`'s certificate, prefixed.
fn zk_tls(prefix: &str, certs: &Path, identity: &str) -> String {
    let c = certs.display();
    format!(
        "{prefix}zk.ssl.client.enable=true\n{prefix}zk.ssl.ca.location={c}/ca.crt\n\
         {prefix}zk.ssl.certificate.location={c}/{identity}.crt\n{prefix}zk.ssl.key.location={c}/{identity}.key\n"
    )
}

/// What a ZooKeeper client without credentials gets for one operation: `Ok(())`, or the error.
type Outcome = Result<(), zookeeper_client::Error>;

/// Runs `ops` as a client of `connect` that presents no credentials (plaintext, no auth): a 0.7
/// client, or anyone who can reach ZooKeeper's port.
fn as_anonymous<T>(
    connect: &str,
    ops: impl for<'c> FnOnce(
        &'c zookeeper_client::Client,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'c>>,
) -> T {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = zookeeper_client::Client::connect(connect).await.unwrap();
        ops(&client).await
    })
}

/// The session owning the node at `path` in the ZooKeeper at `connect` (0: persistent), read
/// anonymously; `None` when there is no such node.
fn owner(connect: &str, path: &'static str) -> Option<i64> {
    as_anonymous(connect, |c| {
        Box::pin(async move {
            c.get_data(path)
                .await
                .ok()
                .map(|(_, stat)| stat.ephemeral_owner)
        })
    })
}

/// Waits until `path` exists in the ZooKeeper at `connect` (read anonymously), at most 60 s.
fn until_exists(connect: &str, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let absent = || {
        let path = path.to_string();
        as_anonymous(connect, move |c| {
            Box::pin(async move { c.get_data(&path).await.is_err() })
        })
    };
    while absent() {
        assert!(
            Instant::now() < deadline,
            "{path} never appeared in {connect}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Runs `tributary <args>`; its exit status and standard error.
fn tributary(args: &[&str]) -> (bool, String) {
    let out = Command::new(tributary_tests::broker::tributary_binary())
        .args(args)
        .output()
        .expect("run tributary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn zookeeper_over_tls_with_acls_carries_a_mirror_and_a_replica_and_refuses_clients_without_credentials(
) {
    use zookeeper_client::Error::NoAuth;
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(&dir.path().join("certs"));
    // The source cluster's ZooKeeper speaks TLS and knows clients by their certificates; its
    // plaintext port stays open for 0.7 clients, which may read.
    let source_zk = ZooKeeper::start_secure(&certs);
    let source_secure = format!("127.0.0.1:{}", source_zk.secure_port());
    let source_port = free_port();
    let source_dir = dir.path().join("source");
    std::fs::create_dir_all(&source_dir).unwrap();
    let source = BrokerProcess::start(
        &source_dir,
        source_port,
        &format!(
            "brokerid=0\nhostname=127.0.0.1\nport={source_port}\nlog.dir={}\nnum.partitions=1\nlog.flush.interval=1\n\
             zk.connect={source_secure}\nzk.sessiontimeout.ms={SESSION_MS}\nzk.connectiontimeout.ms=20000\n\
             zk.set.acl=true\n{}",
            source_dir.join("logs").display(),
            zk_tls("", &certs, "broker")
        ),
    );
    source.wait_until_registered();
    produce(source_port, "orders", 0, 100);

    // The mirror cluster's ZooKeeper is plaintext; its processes share one digest identity.
    let digest = dir.path().join("zk.digest");
    std::fs::write(&digest, "tributary-mirror:s3cret\n").unwrap();
    let digest_keys = format!(
        "zk.auth.digest.location={}\nzk.set.acl=true\n",
        digest.display()
    );
    let mirror_zk = ZooKeeper::start();
    let mirror_port = free_port();
    let mirror_dir = dir.path().join("mirror");
    std::fs::create_dir_all(&mirror_dir).unwrap();
    let mirror = BrokerProcess::start_mirror(
        &mirror_dir,
        mirror_port,
        &format!(
            "brokerid=0\nhostname=127.0.0.1\nport={mirror_port}\nlog.dir={}\nnum.partitions=1\nlog.flush.interval=1\n\
             zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\ncluster.name=west\n{digest_keys}",
            mirror_dir.join("logs").display(),
            mirror_zk.connect_string()
        ),
        &format!(
            "zk.connect={source_secure}\ngroupid=KafkaMirror\nzk.sessiontimeout.ms={SESSION_MS}\nzk.connectiontimeout.ms=20000\n\
             fetcher.backoff.ms=50\nrebalance.backoff.ms=500\nrebalance.retries.max=20\nmirror.commit.interval.ms=200\n\
             zk.set.acl=true\n{}",
            zk_tls("", &certs, "client")
        ),
        &format!(
            "zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\nproducer.type=async\nqueue.enqueueTimeout.ms=-1\nbatch.size=50\nqueue.time=20\n{digest_keys}",
            mirror_zk.connect_string()
        ),
    );
    // A replica of the source, reading the source's ZooKeeper over TLS, its own with a digest.
    let replica_zk = ZooKeeper::start();
    let replica_port = free_port();
    let replica_dir = dir.path().join("replica");
    std::fs::create_dir_all(&replica_dir).unwrap();
    let replica = BrokerProcess::start(
        &replica_dir,
        replica_port,
        &format!(
            "brokerid=0\nhostname=127.0.0.1\nport={replica_port}\nlog.dir={}\nnum.partitions=1\nlog.flush.interval=1\n\
             zk.connect={}\nzk.sessiontimeout.ms={SESSION_MS}\n{digest_keys}\
             replica.source.zk.connect={source_secure}\nreplica.source.brokerid=0\nreplica.fetch.backoff.ms=50\n{}",
            replica_dir.join("logs").display(),
            replica_zk.connect_string(),
            zk_tls("replica.source.", &certs, "client")
        ),
    );

    let first = names("orders", 0..100);
    let copied = until_holds(mirror_port, "orders", &first, Duration::from_secs(60));
    assert!(
        first.iter().all(|m| copied.contains(m)),
        "the mirror copied {} of 100 through a TLS ZooKeeper:\n{}",
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

    // The tools reach the TLS ZooKeeper too: consumer-perf with --zk-tls-config-file, and
    // console-producer with the zk.* keys as --property (not overridden when no file is given).
    let tools_zk = dir.path().join("tools-zk.properties");
    std::fs::write(&tools_zk, zk_tls("", &certs, "client")).unwrap();
    let (ok, stderr) = tributary(&[
        "consumer-perf",
        "--zookeeper",
        &source_secure,
        "--topic",
        "orders",
        "--messages",
        "100",
        "--zk-tls-config-file",
        tools_zk.to_str().unwrap(),
    ]);
    assert!(ok, "consumer-perf through a TLS ZooKeeper: {stderr}");
    let mut producer_args = vec![
        "console-producer".to_string(),
        "--topic".into(),
        "from-tools".into(),
        "--zookeeper".into(),
        source_secure.clone(),
        "--sync".into(),
        "--acks".into(),
    ];
    for line in zk_tls("", &certs, "client").lines() {
        producer_args.extend(["--property".to_string(), line.to_string()]);
    }
    let mut producer = Command::new(tributary_tests::broker::tributary_binary())
        .args(&producer_args)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("console-producer");
    std::io::Write::write_all(&mut producer.stdin.take().unwrap(), b"hello\n").unwrap();
    let out = producer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "console-producer with zk.* properties through a TLS ZooKeeper: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The file secures ZooKeeper: with --broker-list it is refused, not ignored.
    let (ok, stderr) = tributary(&[
        "console-producer",
        "--topic",
        "t",
        "--broker-list",
        &format!("0:127.0.0.1:{source_port}"),
        "--zk-tls-config-file",
        tools_zk.to_str().unwrap(),
    ]);
    assert!(!ok && stderr.contains("--broker-list"), "{stderr}");

    // The source's ZooKeeper, to a client without credentials: the registration can be read
    // (0.7 clients find brokers) but not deleted, changed or joined by a fake broker; the
    // mirror's committed offsets cannot be moved; 0.7 consumers may still make their groups.
    let offsets = "/consumers/KafkaMirror/offsets/orders/0-0";
    until_exists(&source_zk.connect_string(), offsets);
    let outcomes: Vec<(&str, Outcome)> = as_anonymous(&source_zk.connect_string(), |c| {
        Box::pin(async move {
            let open = zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all());
            vec![
                (
                    "read the registration",
                    c.get_data("/brokers/ids/0").await.map(|_| ()),
                ),
                (
                    "delete the registration",
                    c.delete("/brokers/ids/0", None).await,
                ),
                (
                    "change the registration",
                    c.set_data("/brokers/ids/0", b"x", None).await.map(|_| ()),
                ),
                (
                    "register a fake broker",
                    c.create("/brokers/ids/7", b"x", &open).await.map(|_| ()),
                ),
                (
                    "move an offset",
                    c.set_data(offsets, b"0", None).await.map(|_| ()),
                ),
                ("delete an offset", c.delete(offsets, None).await),
                (
                    "make a 0.7 group",
                    c.create("/consumers/zero-seven", b"", &open)
                        .await
                        .map(|_| ()),
                ),
                (
                    "create beside the cluster's identity",
                    c.create("/cluster/squat", b"", &open).await.map(|_| ()),
                ),
            ]
        })
    });
    let expected: [(&str, Outcome); 8] = [
        ("read the registration", Ok(())),
        ("delete the registration", Err(NoAuth)),
        ("change the registration", Err(NoAuth)),
        ("register a fake broker", Err(NoAuth)),
        ("move an offset", Err(NoAuth)),
        ("delete an offset", Err(NoAuth)),
        ("make a 0.7 group", Ok(())),
        ("create beside the cluster's identity", Err(NoAuth)),
    ];
    assert_eq!(outcomes, expected);

    // The mirror cluster's (digest): its registration and its identity are its own.
    let outcomes: Vec<Outcome> = as_anonymous(&mirror_zk.connect_string(), |c| {
        Box::pin(async move {
            vec![
                c.delete("/brokers/ids/0", None).await,
                c.set_data("/cluster/id", b"{}", None).await.map(|_| ()),
                c.delete("/cluster/id", None).await,
            ]
        })
    });
    assert_eq!(outcomes, vec![Err(NoAuth), Err(NoAuth), Err(NoAuth)]);

    // The replica cluster's: nobody without its identity may ask for a promotion, neither
    // directly nor through `tributary promote`; with the identity, the promotion is made.
    let outcomes: Vec<Outcome> = as_anonymous(&replica_zk.connect_string(), |c| {
        Box::pin(async move {
            let open = zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all());
            vec![
                c.create("/tributary/promoted/orders", b"", &open)
                    .await
                    .map(|_| ()),
                c.delete("/brokers/ids/0", None).await,
            ]
        })
    });
    assert_eq!(outcomes, vec![Err(NoAuth), Err(NoAuth)]);
    let replica_zk_connect = replica_zk.connect_string();
    let promote = |extra: &[&str]| {
        let mut args = vec![
            "promote",
            "--zookeeper",
            &replica_zk_connect,
            "--topic",
            "orders",
            "--wait",
            "20",
        ];
        args.extend_from_slice(extra);
        tributary(&args)
    };
    let (ok, stderr) = promote(&[]);
    assert!(
        !ok && stderr.contains("ACL"),
        "promote without credentials: {stderr}"
    );
    let wrong = dir.path().join("wrong.properties");
    let wrong_digest = dir.path().join("wrong.digest");
    std::fs::write(&wrong_digest, "tributary-mirror:guess\n").unwrap();
    std::fs::write(
        &wrong,
        format!("zk.auth.digest.location={}\n", wrong_digest.display()),
    )
    .unwrap();
    let (ok, stderr) = promote(&["--zk-tls-config-file", wrong.to_str().unwrap()]);
    assert!(
        !ok && stderr.contains("ACL"),
        "promote with a wrong password: {stderr}"
    );
    let right = dir.path().join("right.properties");
    std::fs::write(&right, digest_keys.as_bytes()).unwrap();
    let (ok, stderr) = promote(&["--zk-tls-config-file", right.to_str().unwrap()]);
    assert!(
        ok,
        "promote with the cluster's identity: {stderr}\n{}",
        replica.log_text()
    );

    // Both ZooKeepers restart (the source's speaking TLS), down longer than the sessions'
    // timeout: every session expires, and the new ones, over TLS and authenticated again, take
    // back their protected nodes (new owners, still closed to others) and go on copying.
    let owners_before = (
        owner(&source_zk.connect_string(), "/brokers/ids/0"),
        owner(&mirror_zk.connect_string(), "/brokers/ids/0"),
    );
    let (mut source_zk, mut mirror_zk) = (source_zk, mirror_zk);
    source_zk.restart(Duration::from_millis(SESSION_MS * 2));
    mirror_zk.restart(Duration::from_millis(SESSION_MS * 2));
    produce(source_port, "orders", 100, 100);
    let all = names("orders", 0..200);
    let copied = until_holds(mirror_port, "orders", &all, Duration::from_secs(90));
    assert!(
        all.iter().all(|m| copied.contains(m)),
        "after ZooKeeper's restart the mirror copied {} of 200:\n{}",
        all.iter().filter(|m| copied.contains(m)).count(),
        mirror.log_text()
    );
    for (zk, before) in [(&source_zk, owners_before.0), (&mirror_zk, owners_before.1)] {
        let connect = zk.connect_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        let now = loop {
            match owner(&connect, "/brokers/ids/0") {
                Some(now) if Some(now) != before => break now,
                _ => assert!(
                    Instant::now() < deadline,
                    "{connect}: never registered again"
                ),
            }
            std::thread::sleep(Duration::from_millis(250));
        };
        assert_ne!(now, 0, "a registration is ephemeral");
        // Changing the node itself checks its own ACL (deleting checks its parent's).
        let outcomes: Vec<Outcome> = as_anonymous(&connect, |c| {
            Box::pin(
                async move { vec![c.set_data("/brokers/ids/0", b"x", None).await.map(|_| ())] },
            )
        });
        assert_eq!(
            outcomes,
            vec![Err(NoAuth)],
            "{connect}: the registration made again is protected"
        );
    }
}

/// A client pointed at the wrong kind of ZooKeeper port (plaintext at the TLS port, TLS at the
/// plaintext port, TLS at a port that accepts and never answers) gives up within its timeout,
/// and says which setting to check rather than only that the connection was lost.
#[test]
fn a_client_at_the_wrong_kind_of_zookeeper_port_gives_up_and_names_the_setting_to_check() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(&dir.path().join("certs"));
    let zk = ZooKeeper::start_secure(&certs);
    let tls_file = dir.path().join("zk-tls.properties");
    std::fs::write(&tls_file, zk_tls("", &certs, "broker")).unwrap();
    let tls_file = tls_file.to_str().unwrap().to_string();
    // Accepts connections (the kernel completes them) and never reads or answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_at = format!("127.0.0.1:{}", silent.local_addr().unwrap().port());
    let secure_at = format!("127.0.0.1:{}", zk.secure_port());
    let plain_at = format!("127.0.0.1:{}", zk.port());
    let cases: [(&str, &str, bool, &str); 3] = [
        (
            "plaintext at the secureClientPort",
            &secure_at,
            false,
            "set zk.ssl.client.enable=true",
        ),
        (
            "TLS at the plaintext port",
            &plain_at,
            true,
            "is that ZooKeeper's secureClientPort",
        ),
        (
            "TLS at a port that never answers",
            &silent_at,
            true,
            "is that ZooKeeper's secureClientPort",
        ),
    ];
    // Side by side: each waits out its whole timeout.
    std::thread::scope(|scope| {
        for (case, at, tls, hint) in cases {
            let tls_file = &tls_file;
            scope.spawn(move || {
                let mut args = vec!["cluster-id", "--zookeeper", at];
                if tls {
                    args.extend(["--zk-tls-config-file", tls_file.as_str()]);
                }
                let started = Instant::now();
                let (ok, stderr) = tributary(&args);
                let took = started.elapsed();
                assert!(!ok, "{case}: cluster-id succeeded: {stderr}");
                assert!(
                    stderr.contains(hint),
                    "{case}: no hint ({hint}) in: {stderr}"
                );
                assert!(
                    took < Duration::from_secs(60),
                    "{case}: gave up only after {took:?}"
                );
                eprintln!("{case}: gave up after {took:?}");
            });
        }
    });
    // The right pairings get a session (the cluster has no identity yet: no broker ran), so
    // the failures above were the pairings'.
    let no_identity = "this cluster has no identity yet";
    let (_, stderr) = tributary(&["cluster-id", "--zookeeper", &plain_at]);
    assert!(stderr.contains(no_identity), "plaintext: {stderr}");
    let (_, stderr) = tributary(&[
        "cluster-id",
        "--zookeeper",
        &secure_at,
        "--zk-tls-config-file",
        &tls_file,
    ]);
    assert!(stderr.contains(no_identity), "TLS: {stderr}");
    drop(silent);
}

/// The mirror maker's metrics endpoint with `--metrics.ssl.*`: HTTPS only, scrapers
/// authenticated by certificate, and bound beyond loopback though the links are TLS (plaintext
/// metrics would stay on loopback then); a wrong flag set is refused before anything starts.
#[test]
fn the_mirror_makers_metrics_endpoint_speaks_https_to_authenticated_scrapers_when_asked() {
    use std::net::TcpStream;
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(&dir.path().join("certs"));
    let (source_zk, target_zk) = (ZooKeeper::start(), ZooKeeper::start());
    let consumer = dir.path().join("consumer.properties");
    std::fs::write(
        &consumer,
        format!(
            "zk.connect={}\ngroupid=KafkaMirror\n{}",
            source_zk.connect_string(),
            client_tls("", &certs, "client")
        ),
    )
    .unwrap();
    let producer = dir.path().join("producer.properties");
    std::fs::write(
        &producer,
        format!("zk.connect={}\n", target_zk.connect_string()),
    )
    .unwrap();
    let port = free_port();
    let c = certs.display().to_string();
    let mut args: Vec<String> = [
        "mirror-maker",
        "--whitelist",
        "orders",
        "--consumer.config",
        consumer.to_str().unwrap(),
        "--producer.config",
        producer.to_str().unwrap(),
        "--metrics.port",
        &port.to_string(),
        "--metrics.ssl.certificate.location",
        &format!("{c}/broker.crt"),
        "--metrics.ssl.client.auth",
        "required",
    ]
    .map(String::from)
    .to_vec();
    // A certificate without its key: refused, naming the missing flag.
    let (ok, stderr) = tributary(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!ok, "no key: started");
    assert!(stderr.contains("metrics.ssl.key.location"), "{stderr}");
    args.extend([
        "--metrics.ssl.key.location".into(),
        format!("{c}/broker.key"),
    ]);
    // Client authentication without a CA to check scrapers against: refused, saying why.
    let (ok, stderr) = tributary(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!ok, "no CA: started");
    assert!(stderr.contains("--metrics.ssl.ca.location"), "{stderr}");
    args.extend(["--metrics.ssl.ca.location".into(), format!("{c}/ca.crt")]);
    // A file that holds no certificate: the error names the flag it came from.
    let wrong: Vec<&str> = args
        .iter()
        .map(|a| match a.ends_with("/broker.crt") {
            true => "/dev/null",
            false => a.as_str(),
        })
        .collect();
    let (ok, stderr) = tributary(&wrong);
    assert!(!ok, "an empty certificate file: started");
    assert!(
        stderr.contains("--metrics.ssl.certificate.location") && stderr.contains("/dev/null"),
        "{stderr}"
    );
    let log = std::fs::File::create(dir.path().join("mirror-maker.log")).unwrap();
    let mut child = Command::new(tributary_tests::broker::tributary_binary())
        .args(&args)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the mirror maker");
    let log_text = || std::fs::read_to_string(dir.path().join("mirror-maker.log")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the mirror maker exited: {}",
            log_text()
        );
        assert!(
            Instant::now() < deadline,
            "no metrics endpoint: {}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        TcpStream::connect(("127.0.0.2", port)).is_ok(),
        "HTTPS metrics bound to loopback only"
    );
    let body = https_metrics(
        port,
        &certs.join("ca.crt"),
        Some((&certs.join("client.crt"), &certs.join("client.key"))),
    );
    assert!(
        body.as_ref()
            .is_ok_and(|b| b.contains("tributary_mirror_messages_total")),
        "{body:?}\n{}",
        log_text()
    );
    let refused = https_metrics(port, &certs.join("ca.crt"), None);
    assert!(
        refused.is_err(),
        "a scraper without a certificate was answered: {refused:?}"
    );
    let plain = Command::new("python3")
        .args([
            "-c",
            &format!("import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=5).read()"),
        ])
        .output()
        .expect("run python3");
    assert!(!plain.status.success(), "plain HTTP answered");
    child.kill().unwrap();
    child.wait().unwrap();
}
