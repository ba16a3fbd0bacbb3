//! The SSL listener of the real `tributary server` against independent TLS clients: OpenSSL's
//! `s_client`, and a 0.7 client written on Python's `ssl` (tests/python/tls07.py), with
//! certificates made by scripts/make-tls-certs.sh (the commands docs/security.md shows).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tributary_tests::broker::BrokerProcess;
use tributary_tests::tls::{https_metrics, make_certs};
use tributary_tests::zookeeper::{free_port, ZooKeeper};

/// A standalone broker (no ZooKeeper) with a plaintext and an SSL listener; `extra` adds keys
/// (`CERTS` in it is the certificates' directory).
struct TlsBroker {
    process: BrokerProcess,
    plain: u16,
    ssl: u16,
    certs: PathBuf,
    _dir: tempfile::TempDir,
}

fn start(extra: &str) -> TlsBroker {
    start_with(extra, &[])
}

/// [`start`], writing `files` (name, text) beside the certificates first.
fn start_with(extra: &str, files: &[(&str, &str)]) -> TlsBroker {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(&dir.path().join("certs"));
    for (name, text) in files {
        std::fs::write(certs.join(name), text).unwrap();
    }
    let (plain, ssl) = (free_port(), free_port());
    let properties = format!(
        "brokerid=0\n{}log.dir={}\nenable.zookeeper=false\nlog.flush.interval=1\n\
         listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl}\n\
         ssl.certificate.location={c}/broker.crt\nssl.key.location={c}/broker.key\n{}",
        // `extra` may set its own (an empty one is unset: every interface).
        if extra.contains("hostname=") {
            ""
        } else {
            "hostname=127.0.0.1\n"
        },
        dir.path().join("logs").display(),
        extra.replace("CERTS", &certs.display().to_string()),
        c = certs.display(),
    );
    // Waits on the SSL port, the one bound last.
    let process = BrokerProcess::start(dir.path(), ssl, &properties);
    TlsBroker {
        process,
        plain,
        ssl,
        certs,
        _dir: dir,
    }
}

fn python(args: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/tls07.py");
    Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("run python3")
}

/// `tls07.py handshake` against the SSL port: its printed verdict.
fn handshake(broker: &TlsBroker, options: &[&str]) -> String {
    let port = broker.ssl.to_string();
    let mut args = vec!["handshake", "127.0.0.1", &port];
    args.extend_from_slice(options);
    let out = python(&args);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `tls07.py roundtrip` of `count` messages to `topic` on `port`: the payloads fetched back, or
/// `None` when it failed.
fn roundtrip(port: u16, topic: &str, count: usize, options: &[&str]) -> Option<Vec<String>> {
    let (port, count_text) = (port.to_string(), count.to_string());
    let mut args = vec!["roundtrip", "127.0.0.1", &port, topic, &count_text];
    args.extend_from_slice(options);
    let out = python(&args);
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    })
}

fn expected(topic: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{topic}-{i}")).collect()
}

fn path(dir: &Path, file: &str) -> String {
    dir.join(file).display().to_string()
}

/// `openssl s_client` against the SSL port with `args`: (succeeded, everything it printed).
fn s_client(broker: &TlsBroker, args: &[&str]) -> (bool, String) {
    let out = Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(format!("127.0.0.1:{}", broker.ssl))
        .args(["-brief", "-verify_return_error", "-CAfile"])
        .arg(broker.certs.join("ca.crt"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run openssl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_ssl_listener_speaks_tls_1_2_and_1_3_and_refuses_older_protocols() {
    let broker = start("");
    let ca = path(&broker.certs, "ca.crt");
    for (flag, version) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let (ok, text) = s_client(&broker, &[flag]);
        assert!(ok, "openssl s_client {flag} failed:\n{text}");
        assert!(
            text.contains(&format!("Protocol version: {version}"))
                && text.contains("Verification: OK"),
            "{flag}:\n{text}"
        );
    }
    for flag in ["-tls1", "-tls1_1"] {
        let (ok, text) = s_client(&broker, &[flag, "-cipher", "DEFAULT@SECLEVEL=0"]);
        assert!(!ok, "openssl s_client {flag} was served:\n{text}");
        // rustls answers an old ClientHello with an alert (protocol_version or
        // handshake_failure, as the offered version allows).
        assert!(
            text.contains("alert protocol version") || text.contains("alert handshake failure"),
            "{flag}:\n{text}"
        );
    }
    for (max, verdict) in [
        ("1.0", "refused"),
        ("1.1", "refused"),
        ("1.2", "ok TLSv1.2"),
        ("1.3", "ok TLSv1.3"),
    ] {
        let said = handshake(&broker, &["--ca", &ca, "--max-version", max]);
        assert!(said.starts_with(verdict), "TLS at most {max}: {said}");
    }
    // A client that does not trust the broker's CA refuses it (the broker is authenticated).
    let other = path(&broker.certs, "other-ca.crt");
    let said = handshake(&broker, &["--ca", &other]);
    assert!(said.starts_with("refused"), "{said}");
}

#[test]
fn messages_produced_over_tls_are_the_same_log_that_0_7_clients_read_in_plaintext() {
    let broker = start("");
    let ca = path(&broker.certs, "ca.crt");
    let over_tls = roundtrip(broker.ssl, "secure", 50, &["--ca", &ca]);
    assert_eq!(over_tls, Some(expected("secure", 50)));
    let plain = roundtrip(broker.plain, "plain", 20, &["--plain"]);
    assert_eq!(plain, Some(expected("plain", 20)));
    // What came in over TLS is read back on the plaintext port, and the other way round
    // (each roundtrip produces again: the fetch from offset 0 sees the first copies first).
    let read_plain = roundtrip(broker.plain, "secure", 50, &["--plain"]).unwrap();
    assert_eq!(read_plain[..50], expected("secure", 50)[..]);
    let read_tls = roundtrip(broker.ssl, "plain", 20, &["--ca", &ca]).unwrap();
    assert_eq!(read_tls[..20], expected("plain", 20)[..]);
    // Plaintext bytes on the SSL port are not a request: the connection is closed.
    assert!(roundtrip(broker.ssl, "plain-on-ssl", 1, &["--plain"]).is_none());
}

#[test]
fn required_client_certificates_refuse_none_an_unknown_ca_and_an_expired_one() {
    let dir_certs = |b: &TlsBroker, f: &str| path(&b.certs, f);
    let broker = start("ssl.client.auth=required\nssl.ca.location=CERTS/ca.crt\n");
    let ca = dir_certs(&broker, "ca.crt");
    let with = |name: &str| {
        vec![
            "--ca".to_string(),
            ca.clone(),
            "--cert".to_string(),
            dir_certs(&broker, &format!("{name}.crt")),
            "--key".to_string(),
            dir_certs(&broker, &format!("{name}.key")),
        ]
    };
    let client = with("client");
    let client: Vec<&str> = client.iter().map(String::as_str).collect();
    assert_eq!(
        roundtrip(broker.ssl, "authenticated", 10, &client),
        Some(expected("authenticated", 10))
    );
    for (who, options) in [
        ("no certificate", vec!["--ca".to_string(), ca.clone()]),
        ("another CA's certificate", with("stranger")),
        ("an expired certificate", with("expired")),
    ] {
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let said = handshake(&broker, &options);
        assert!(said.starts_with("refused"), "{who}: {said}");
        assert!(
            roundtrip(broker.ssl, "refused", 5, &options).is_none(),
            "{who} produced and fetched"
        );
    }
    // Nothing the refused clients sent was stored.
    let stored = roundtrip(broker.plain, "refused", 0, &["--plain"]).unwrap();
    assert!(stored.is_empty(), "stored from refused clients: {stored:?}");
    // TLS 1.2: the refusal comes within the handshake, before s_client would report success.
    let (ok, text) = s_client(&broker, &["-tls1_2"]);
    assert!(!ok, "s_client without a certificate was served:\n{text}");
    let client_args = [
        "-tls1_2",
        "-cert",
        &dir_certs(&broker, "client.crt"),
        "-key",
        &dir_certs(&broker, "client.key"),
    ]
    .map(str::to_string);
    let client_args: Vec<&str> = client_args.iter().map(String::as_str).collect();
    let (ok, text) = s_client(&broker, &client_args);
    assert!(ok, "s_client with the client certificate:\n{text}");
}

#[test]
fn requested_client_certificates_admit_a_client_without_one_but_not_a_bad_one() {
    let broker = start("ssl.client.auth=requested\nssl.ca.location=CERTS/ca.crt\n");
    let ca = path(&broker.certs, "ca.crt");
    let said = handshake(&broker, &["--ca", &ca]);
    assert!(said.starts_with("ok"), "without a certificate: {said}");
    let (cert, key) = (
        path(&broker.certs, "client.crt"),
        path(&broker.certs, "client.key"),
    );
    let said = handshake(&broker, &["--ca", &ca, "--cert", &cert, "--key", &key]);
    assert!(
        said.starts_with("ok"),
        "with the client certificate: {said}"
    );
    let (cert, key) = (
        path(&broker.certs, "stranger.crt"),
        path(&broker.certs, "stranger.key"),
    );
    let said = handshake(&broker, &["--ca", &ca, "--cert", &cert, "--key", &key]);
    assert!(
        said.starts_with("refused"),
        "another CA's certificate: {said}"
    );
}

/// The broker's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// Whether the peer closed `stream` (EOF or reset) within `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            // An alert, then the close.
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn hostile_input_on_the_ssl_listener_leaves_the_broker_serving_with_bounded_memory() {
    let mut broker = start("");
    let ca = path(&broker.certs, "ca.crt");
    let pid = broker.process.pid().unwrap();
    // A peer that completes the handshake, then trickles a request a byte every 2 s (each
    // byte within any per-read timeout): cut off 30 s after its first byte, while the rest
    // of this test runs.
    let trickle = {
        let (port, ca) = (broker.ssl.to_string(), ca.clone());
        std::thread::spawn(move || python(&["trickle", "127.0.0.1", &port, "60", "--ca", &ca]))
    };
    // Garbage before any handshake: refused at once.
    let mut garbage = TcpStream::connect(("127.0.0.1", broker.ssl)).unwrap();
    garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    assert!(
        closed_within(&mut garbage, Duration::from_secs(5)),
        "garbage kept open"
    );
    // A handshake cut in the middle: the record header of a ClientHello and part of it.
    let mut cut = TcpStream::connect(("127.0.0.1", broker.ssl)).unwrap();
    cut.write_all(&[
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ])
    .unwrap();
    drop(cut);
    // A thousand connections that never finish a handshake, half of them mid-record.
    let before = rss_kib(pid);
    let mut idle = Vec::new();
    for i in 0..1_000 {
        let mut s = TcpStream::connect(("127.0.0.1", broker.ssl)).unwrap();
        if i % 2 == 0 {
            s.write_all(&[0x16, 0x03, 0x01, 0x40, 0x00]).unwrap();
        }
        idle.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    // Real clients are still served, on both listeners, while they hang.
    assert_eq!(
        roundtrip(broker.ssl, "meanwhile", 5, &["--ca", &ca]),
        Some(expected("meanwhile", 5))
    );
    assert_eq!(
        roundtrip(broker.plain, "plain-meanwhile", 5, &["--plain"]),
        Some(expected("plain-meanwhile", 5))
    );
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(
        grown < 64 * 1024,
        "1,000 half-open TLS connections grew the broker by {grown} KiB"
    );
    assert!(broker.process.is_running());
    drop(idle);
    let trickled = trickle.join().unwrap();
    let said = String::from_utf8_lossy(&trickled.stdout);
    let cut_after: f64 = said
        .trim()
        .strip_prefix("cut off after ")
        .and_then(|s| s.strip_suffix(" s"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "a trickled request was not cut off: {said}{}",
                String::from_utf8_lossy(&trickled.stderr)
            )
        });
    assert!(
        (29.0..40.0).contains(&cut_after),
        "a trickled request was cut off after {cut_after} s, not at the 30 s deadline"
    );
}

#[test]
fn rotated_certificates_serve_new_connections_without_a_restart() {
    let broker = start("");
    let old_ca = path(&broker.certs, "ca.crt");
    assert!(handshake(&broker, &["--ca", &old_ca]).starts_with("ok"));
    // A new CA and broker certificate, written over the files the broker reads.
    let fresh = tempfile::tempdir().unwrap();
    let fresh = make_certs(fresh.path()).to_path_buf();
    let new_ca = path(&fresh, "ca.crt");
    assert!(handshake(&broker, &["--ca", &new_ca]).starts_with("refused"));
    for file in ["broker.key", "broker.crt"] {
        std::fs::copy(fresh.join(file), broker.certs.join(file)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !handshake(&broker, &["--ca", &new_ca]).starts_with("ok") {
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served within 20 s:\n{}",
            broker.process.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(handshake(&broker, &["--ca", &old_ca]).starts_with("refused"));
    assert!(
        broker.process.log_text().contains("read again"),
        "{}",
        broker.process.log_text()
    );
    // A rotation gone wrong (a truncated certificate) is logged; the last good one keeps serving.
    // (Counted: the copy above may have been seen half-done, key before certificate, once.)
    let reported = |log: String| log.matches("cannot be used").count();
    let before = reported(broker.process.log_text());
    std::fs::write(
        broker.certs.join("broker.crt"),
        "-----BEGIN CERTIFICATE-----\nAAAA\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while reported(broker.process.log_text()) <= before {
        assert!(
            Instant::now() < deadline,
            "the broken certificate was not reported:\n{}",
            broker.process.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(handshake(&broker, &["--ca", &new_ca]).starts_with("ok"));
}

/// The data of `path` in the ZooKeeper at `zk`.
fn zk_data(zk: &ZooKeeper, path: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = zookeeper_client::Client::connect(&zk.connect_string())
            .await
            .unwrap();
        let (data, _) = client.get_data(path).await.unwrap();
        String::from_utf8(data).unwrap()
    })
}

/// The transaction id that created `path` in the ZooKeeper at `zk` (ZooKeeper orders every
/// change by it).
fn zk_created(zk: &ZooKeeper, path: &str) -> i64 {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = zookeeper_client::Client::connect(&zk.connect_string())
            .await
            .unwrap();
        let (_, stat) = client.get_data(path).await.unwrap();
        stat.czxid
    })
}

#[test]
fn the_endpoints_are_registered_beside_the_0_7_registration() {
    let zk = ZooKeeper::start();
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(&dir.path().join("certs"));
    let (plain, ssl) = (free_port(), free_port());
    let base = |listeners: &str, logs: &str| {
        format!(
            "brokerid=0\nhostname=127.0.0.1\nlog.dir={}\nzk.connect={}\nzk.sessiontimeout.ms=2000\n\
             listeners={listeners}\nssl.certificate.location={c}/broker.crt\nssl.key.location={c}/broker.key\n",
            dir.path().join(logs).display(),
            zk.connect_string(),
            c = certs.display()
        )
    };
    let broker_dir = dir.path().join("both");
    std::fs::create_dir_all(&broker_dir).unwrap();
    let mut both = BrokerProcess::start(
        &broker_dir,
        ssl,
        &base(
            &format!("PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl}"),
            "logs-both",
        ),
    );
    both.wait_until_registered();
    // 0.7 clients find the plaintext listener where they always did.
    assert!(zk_data(&zk, "/brokers/ids/0").ends_with(&format!(":127.0.0.1:{plain}")));
    assert_eq!(
        zk_data(&zk, "/tributary/endpoints/0"),
        format!("PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl}")
    );
    // Written first: a TLS client that sees the broker registered finds its SSL listener.
    assert!(
        zk_created(&zk, "/tributary/endpoints/0") < zk_created(&zk, "/brokers/ids/0"),
        "the endpoints were registered after the broker"
    );
    assert!(both.terminate(), "{}", both.log_text());
    // Plaintext off: the SSL listener is the only one, in both nodes.
    let only_dir = dir.path().join("only");
    std::fs::create_dir_all(&only_dir).unwrap();
    let only_ssl = free_port();
    let mut only = BrokerProcess::start(
        &only_dir,
        only_ssl,
        &base(&format!("SSL://127.0.0.1:{only_ssl}"), "logs-only"),
    );
    only.wait_until_registered();
    assert!(zk_data(&zk, "/brokers/ids/0").ends_with(&format!(":127.0.0.1:{only_ssl}")));
    assert_eq!(
        zk_data(&zk, "/tributary/endpoints/0"),
        format!("SSL://127.0.0.1:{only_ssl}")
    );
    assert!(only.log_text().contains("TLS only"), "{}", only.log_text());
    assert!(only.terminate(), "{}", only.log_text());
    // Behind a proxy: advertised.listeners is what both nodes say.
    let proxied_dir = dir.path().join("proxied");
    std::fs::create_dir_all(&proxied_dir).unwrap();
    let (plain, ssl) = (free_port(), free_port());
    let mut proxied = BrokerProcess::start(
        &proxied_dir,
        ssl,
        &format!(
            "{}advertised.listeners=PLAINTEXT://proxy.example:19092,SSL://proxy.example:19093\n",
            base(
                &format!("PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl}"),
                "logs-proxied"
            )
        ),
    );
    proxied.wait_until_registered();
    assert!(zk_data(&zk, "/brokers/ids/0").ends_with(":proxy.example:19092"));
    assert_eq!(
        zk_data(&zk, "/tributary/endpoints/0"),
        "PLAINTEXT://proxy.example:19092,SSL://proxy.example:19093"
    );
    assert!(proxied.terminate(), "{}", proxied.log_text());
    // A broker given an id another live broker has (one without an SSL listener) waits it out
    // and gives up, advertising no SSL listener under that id meanwhile.
    let (plain_only, plain_only_port) = (dir.path().join("plain-only"), free_port());
    std::fs::create_dir_all(&plain_only).unwrap();
    let mut holder = BrokerProcess::start(
        &plain_only,
        plain_only_port,
        &base(
            &format!("PLAINTEXT://127.0.0.1:{plain_only_port}"),
            "logs-plain-only",
        ),
    );
    holder.wait_until_registered();
    let duplicate_dir = dir.path().join("duplicate");
    std::fs::create_dir_all(&duplicate_dir).unwrap();
    let duplicate_ssl = free_port();
    let mut duplicate = BrokerProcess::start(
        &duplicate_dir,
        duplicate_ssl,
        &base(
            &format!("SSL://127.0.0.1:{duplicate_ssl}"),
            "logs-duplicate",
        ),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let advertised = runtime.block_on(async {
        let client = zookeeper_client::Client::connect(&zk.connect_string())
            .await
            .unwrap();
        let (mut seen, deadline) = (0, Instant::now() + Duration::from_secs(30));
        while duplicate.is_running() && Instant::now() < deadline {
            if client.get_data("/tributary/endpoints/0").await.is_ok() {
                seen += 1;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        seen
    });
    assert!(
        duplicate
            .log_text()
            .contains("already registered by a live broker"),
        "{}",
        duplicate.log_text()
    );
    assert_eq!(
        advertised, 0,
        "the broker waiting for a taken id advertised its SSL listener under it"
    );
    assert!(holder.terminate(), "{}", holder.log_text());
}

/// `tls07.py <mode> ...` against `port`: (succeeded, what it printed).
fn tool(mode: &str, port: u16, args: &[&str], options: &[&str]) -> (bool, String) {
    let port = port.to_string();
    let mut all = vec![mode, "127.0.0.1", &port];
    all.extend_from_slice(args);
    all.extend_from_slice(options);
    let out = python(&all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

#[test]
fn the_allow_list_refuses_what_no_rule_allows_and_stores_nothing_of_it() {
    let broker = start_with(
        "ssl.client.auth=requested\nssl.ca.location=CERTS/ca.crt\nssl.allow.list.location=CERTS/allow.list\n",
        &[(
            "allow.list",
            "# the client's principal\nall CN=mirror-east,O=Tributary allowed-.*\nfetch * public   # anyone\n",
        )],
    );
    let rules = broker.certs.join("allow.list");
    let c = &broker.certs;
    let (ca, cert, key) = (
        path(c, "ca.crt"),
        path(c, "client.crt"),
        path(c, "client.key"),
    );
    let client = ["--ca", &ca, "--cert", &cert, "--key", &key];
    let anonymous = ["--ca", &ca];
    // The client's principal may do everything to allowed-*; anyone may fetch public.
    assert_eq!(
        tool("produce", broker.ssl, &["allowed-1", "0", "5"], &client),
        (true, String::new())
    );
    assert_eq!(
        tool("fetch", broker.ssl, &["allowed-1"], &client).1,
        expected("allowed-1", 5).join("\n")
    );
    produce_plain(broker.plain, "public", 3);
    assert_eq!(
        tool("fetch", broker.ssl, &["public"], &anonymous).1,
        expected("public", 3).join("\n")
    );
    // Not allowed: a produce closes the connection and stores nothing; a fetch answers 29.
    let (ok, _) = tool("produce", broker.ssl, &["secret", "0", "5"], &client);
    assert!(!ok, "a produce no rule allows was answered as if stored");
    let (ok, said) = tool("produce", broker.ssl, &["public", "100", "1"], &anonymous);
    assert!(!ok, "anonymous produced to public: {said}");
    produce_plain(broker.plain, "secret-plain", 2);
    assert_eq!(
        tool("fetch", broker.ssl, &["secret-plain"], &client),
        (false, "error 29".to_string())
    );
    assert_eq!(
        tool("fetch", broker.plain, &["secret"], &["--plain"]),
        (true, String::new()),
        "a refused produce stored something"
    );
    assert_eq!(
        tool("fetch", broker.plain, &["public"], &["--plain"]).1,
        expected("public", 3).join("\n"),
        "a refused produce stored something"
    );
    let log = broker.process.log_text();
    assert!(
        log.contains("CN=mirror-east,O=Tributary may not produce secret"),
        "{log}"
    );
    assert!(log.contains("ANONYMOUS may not produce public"), "{log}");
    // The file is read again when it changes: secret becomes allowed without a restart.
    std::fs::write(
        &rules,
        "all CN=mirror-east,O=Tributary allowed-.*|secret\nfetch * public\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !tool("produce", broker.ssl, &["secret", "0", "2"], &client).0 {
        assert!(
            Instant::now() < deadline,
            "the new rules were not in force within 20 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(
        tool("fetch", broker.plain, &["secret"], &["--plain"]).1,
        expected("secret", 2).join("\n")
    );
}

/// Sends `count` messages `<topic>-<i>` to partition 0 over plaintext.
fn produce_plain(port: u16, topic: &str, count: usize) {
    let count = count.to_string();
    let (ok, _) = tool("produce", port, &[topic, "0", &count], &["--plain"]);
    assert!(ok, "plaintext produce to {topic}");
}

/// `GET /metrics` over plain HTTP on `host:port`: the answer, or `None` when there is none.
fn http_metrics(host: &str, port: u16) -> Option<String> {
    let mut stream = TcpStream::connect((host, port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    text.starts_with("HTTP/1.").then_some(text)
}

/// A TCP connection to `127.0.0.1:port` made from the local address `from` (another loopback
/// address is another client address).
fn connect_from(from: &str, port: u16) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let stream = socket
            .connect(format!("127.0.0.1:{port}").parse().unwrap())
            .await
            .unwrap();
        let stream = stream.into_std().unwrap();
        // tokio's sockets are non-blocking; the checks here read with timeouts.
        stream.set_nonblocking(false).unwrap();
        stream
    })
}

/// A connection accepted and kept (not closed within a moment).
fn kept(stream: &mut TcpStream) -> bool {
    !closed_within(stream, Duration::from_millis(300))
}

#[test]
fn connections_per_address_are_limited_across_both_listeners_with_overrides() {
    let metrics = free_port();
    let broker = start(&format!(
        "max.connections.per.ip=3\nmax.connections.per.ip.overrides=127.0.0.2:1\n\
         metrics.port={metrics}\nmetrics.host=127.0.0.1\n"
    ));
    let mut held: Vec<TcpStream> = (0..3)
        .map(|_| connect_from("127.0.0.1", broker.plain))
        .collect();
    for stream in &mut held {
        assert!(kept(stream), "a connection within the limit was closed");
    }
    // One more from the same address is closed at once, on either listener.
    let mut over_ssl = connect_from("127.0.0.1", broker.ssl);
    assert!(
        closed_within(&mut over_ssl, Duration::from_secs(5)),
        "a 4th connection (SSL) was kept"
    );
    let mut over_plain = connect_from("127.0.0.1", broker.plain);
    assert!(
        closed_within(&mut over_plain, Duration::from_secs(5)),
        "a 4th connection was kept"
    );
    // Another address has its own count, here its override of 1.
    let mut other = connect_from("127.0.0.2", broker.plain);
    assert!(kept(&mut other), "127.0.0.2's first connection was closed");
    let mut other_over = connect_from("127.0.0.2", broker.plain);
    assert!(
        closed_within(&mut other_over, Duration::from_secs(5)),
        "127.0.0.2's override was not applied"
    );
    // A connection that closes makes room again.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = connect_from("127.0.0.1", broker.plain);
        if kept(&mut again) {
            held.push(again);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no room after a connection closed"
        );
    }
    let text = http_metrics("127.0.0.1", metrics).expect("metrics answer");
    let refused: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("tributary_connections_refused_total{reason=\"per_ip\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(refused >= 3, "refusals counted: {refused}\n{text}");
    // Said once per address until it had room, not once per refused connection.
    let log = broker.process.log_text();
    assert_eq!(
        log.matches("127.0.0.1: connections refused").count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("127.0.0.2: connections refused").count(),
        1,
        "{log}"
    );
}

#[test]
fn the_metrics_endpoint_binds_loopback_once_tls_is_on_and_speaks_https_when_asked() {
    // TLS on, no metrics.host, no hostname (which meant every interface before TLS): loopback
    // (127.0.0.1), not every interface.
    let port = free_port();
    let broker = start(&format!("metrics.port={port}\nhostname=\n"));
    assert!(http_metrics("127.0.0.1", port).is_some_and(|t| t.contains("tributary_connections")));
    assert!(
        TcpStream::connect(("127.0.0.2", port)).is_err(),
        "the metrics endpoint listens beyond loopback"
    );
    drop(broker);
    // HTTPS that anyone may scrape (no client certificate asked for) is encrypted, not
    // authenticated: it stays on loopback too.
    let port = free_port();
    let broker = start(&format!(
        "metrics.port={port}\nmetrics.ssl=true\nhostname=\n"
    ));
    let body = https_metrics(port, &broker.certs.join("ca.crt"), None);
    assert!(
        body.as_ref()
            .is_ok_and(|b| b.contains("tributary_connections")),
        "{body:?}"
    );
    assert!(
        TcpStream::connect(("127.0.0.2", port)).is_err(),
        "HTTPS metrics without client authentication listen beyond loopback"
    );
    drop(broker);
    // metrics.ssl: HTTPS with the SSL listener's certificate and its client authentication.
    let port = free_port();
    let broker = start(&format!(
        "metrics.port={port}\nmetrics.ssl=true\nssl.client.auth=required\nssl.ca.location=CERTS/ca.crt\nhostname=\n"
    ));
    let c = &broker.certs;
    // HTTPS metrics are for remote scrapers: they bind where the broker does (no hostname:
    // every interface), not loopback.
    assert!(
        TcpStream::connect(("127.0.0.2", port)).is_ok(),
        "HTTPS metrics bound to loopback only"
    );
    assert!(
        http_metrics("127.0.0.1", port).is_none(),
        "plain HTTP answered"
    );
    let body = https_metrics(
        port,
        &c.join("ca.crt"),
        Some((&c.join("client.crt"), &c.join("client.key"))),
    );
    assert!(
        body.as_ref()
            .is_ok_and(|b| b.contains("tributary_connections")),
        "{body:?}"
    );
    let refused = https_metrics(port, &c.join("ca.crt"), None);
    assert!(
        refused.is_err(),
        "a scraper without a certificate was answered: {refused:?}"
    );
}

/// `tributary <args>` with standard input `input`: (succeeded, standard output, standard error).
fn tributary_tool(args: &[&str], input: &str) -> (bool, String, String) {
    use std::process::Stdio;
    let mut child = Command::new(tributary_tests::broker::tributary_binary())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tributary");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_tools_reach_an_ssl_listener_that_requires_certificates_with_their_ssl_flags() {
    let broker = start("ssl.client.auth=required\nssl.ca.location=CERTS/ca.crt\n");
    let c = &broker.certs;
    let (ca, cert, key) = (
        c.join("ca.crt").display().to_string(),
        c.join("client.crt").display().to_string(),
        c.join("client.key").display().to_string(),
    );
    let tls = [
        "--security.protocol",
        "ssl",
        "--ssl.ca.location",
        &ca,
        "--ssl.certificate.location",
        &cert,
        "--ssl.key.location",
        &key,
    ];
    let server = format!("127.0.0.1:{}", broker.ssl);
    let list = format!("0:127.0.0.1:{}", broker.ssl);
    let with = |args: &[&str], tls_flags: &[&str], input: &str| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(tls_flags);
        tributary_tool(&all, input)
    };
    // console-producer sends over TLS, with acknowledgements.
    let (ok, _, err) = with(
        &[
            "console-producer",
            "--topic",
            "secured",
            "--broker-list",
            &list,
            "--sync",
            "--acks",
        ],
        &tls,
        "one\ntwo\nthree\n",
    );
    assert!(ok, "console-producer over TLS: {err}");
    // simple-consumer reads them back over TLS.
    let (ok, out, err) = with(
        &[
            "simple-consumer",
            "--server",
            &server,
            "--topic",
            "secured",
            "--offset",
            "0",
            "--stop-at-end",
        ],
        &tls,
        "",
    );
    assert!(ok, "simple-consumer over TLS: {err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["one", "two", "three"]);
    // get-offsets over TLS: the end is past the three messages.
    let (ok, out, err) = with(
        &[
            "get-offsets",
            "--server",
            &server,
            "--topic",
            "secured",
            "--time",
            "-1",
        ],
        &tls,
        "",
    );
    assert!(ok, "get-offsets over TLS: {err}");
    let end: i64 = out.lines().last().unwrap().trim().parse().unwrap();
    assert!(end > 0, "{out}");
    // producer-perf over TLS.
    let brokerinfo = format!("broker.list={list}");
    let (ok, _, err) = with(
        &[
            "producer-perf",
            "--brokerinfo",
            &brokerinfo,
            "--topic",
            "perf",
            "--messages",
            "200",
            "--message-size",
            "100",
            "--acks",
        ],
        &tls,
        "",
    );
    assert!(ok, "producer-perf over TLS: {err}");
    // Without a certificate the broker refuses, and the tool says so and fails.
    let (ok, _, err) = with(
        &[
            "get-offsets",
            "--server",
            &server,
            "--topic",
            "secured",
            "--time",
            "-1",
        ],
        &tls[..4],
        "",
    );
    assert!(!ok, "get-offsets without a certificate succeeded");
    assert!(err.contains("certificate"), "{err}");
    // Without TLS at all, the tool says the port speaks TLS and what to set.
    let (ok, _, err) = with(
        &[
            "get-offsets",
            "--server",
            &server,
            "--topic",
            "secured",
            "--time",
            "-1",
        ],
        &[],
        "",
    );
    assert!(!ok && err.contains("set security.protocol=ssl"), "{err}");
    // A wrong flag value is named.
    let (ok, _, err) = with(
        &[
            "get-offsets",
            "--server",
            &server,
            "--topic",
            "secured",
            "--time",
            "-1",
        ],
        &["--security.protocol", "tls"],
        "",
    );
    assert!(!ok && err.contains("--security.protocol"), "{err}");
}

#[test]
fn a_link_proxy_carries_plaintext_0_7_clients_into_tls_to_an_ssl_listener() {
    let broker = start("ssl.client.auth=required\nssl.ca.location=CERTS/ca.crt\n");
    let c = &broker.certs;
    let proxy_port = free_port();
    let mut proxy = std::process::Command::new(tributary_tests::broker::tributary_binary())
        .args([
            "link-proxy",
            "--listen",
            &format!("127.0.0.1:{proxy_port}"),
            "--upstream",
            &format!("127.0.0.1:{}", broker.ssl),
            "--rtt-ms",
            "2",
            "--rate-mbit",
            "0",
            "--security.protocol",
            "ssl",
            "--ssl.ca.location",
            &c.join("ca.crt").display().to_string(),
            "--ssl.certificate.location",
            &c.join("client.crt").display().to_string(),
            "--ssl.key.location",
            &c.join("client.key").display().to_string(),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start link-proxy");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", proxy_port)).is_err() {
        assert!(Instant::now() < deadline, "the link proxy did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A 0.7 client in plaintext, through the proxy, to a listener that takes only TLS with a
    // client certificate: every message back.
    let got = roundtrip(proxy_port, "tunnelled", 20, &["--plain"]);
    let _ = proxy.kill();
    let _ = proxy.wait();
    assert_eq!(got, Some(expected("tunnelled", 20)));
}
