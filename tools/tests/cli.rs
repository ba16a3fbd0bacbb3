//! The `tributary` binary's tools, run as a user would.

use std::path::{Path, PathBuf};
use std::process::Command;

use tributary_core::message::{CompressionCodec, MessageSetBuilder};

fn tributary(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tributary"))
        .args(args)
        .current_dir(repo_root())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn check_config_accepts_every_sample_file() {
    let mut files: Vec<String> = std::fs::read_dir(repo_root().join("config"))
        .unwrap()
        .map(|e| format!("config/{}", e.unwrap().file_name().to_string_lossy()))
        // The Grafana dashboard is checked by bins/tests/dashboard.rs; log4j.properties is
        // read by bin/kafka-run-class.sh, not by Tributary (tests/tests/launchers_e2e.rs).
        .filter(|name| name.ends_with(".properties") && name != "config/log4j.properties")
        .collect();
    files.sort();
    let mut args = vec!["check-config"];
    args.extend(files.iter().map(String::as_str));
    let (code, stdout, stderr) = tributary(&args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.matches(": valid ").count(), files.len(), "{stdout}");
    assert!(stdout.contains("config/mirror-producer.properties: valid producer configuration"));
}

#[test]
fn check_config_names_file_line_and_key_of_a_bad_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad-server.properties");
    std::fs::write(
        &path,
        "brokerid=0\nlog.dir=/tmp/x\nzk.connect=localhost:2181\nlog.flush.interval=ten\n",
    )
    .unwrap();
    let (code, _, stderr) = tributary(&["check-config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!(
            "error: log.flush.interval in {} line 4: expected an integer from 1 to 2147483647, found \"ten\"",
            path.display()
        )),
        "{stderr}"
    );
    let (code, _, stderr) = tributary(&["check-config", "no-such.conf"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("pass --kind"), "{stderr}");
}

#[test]
fn dump_log_prints_entries_and_lists_past_a_bad_crc() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = MessageSetBuilder::new();
    b.push(&b"hello"[..]).push(&b"world"[..]);
    let mut bytes = b.build(CompressionCodec::None).to_vec();
    let mut z = MessageSetBuilder::new();
    z.push(&b"zipped"[..]);
    bytes.extend_from_slice(&z.build(CompressionCodec::Gzip));
    let good = dir.path().join("00000000000000001000.kafka");
    std::fs::write(&good, &bytes).unwrap();
    let (code, stdout, stderr) = tributary(&["dump-log", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[1], "Starting offset: 1000");
    assert_eq!(
        lines[2],
        "offset: 1000 isvalid: true payloadsize: 5 magic: 1 compresscodec: NoCompressionCodec"
    );
    assert_eq!(lines[3], "payload:\thello");
    assert_eq!(
        lines[4],
        "offset: 1015 isvalid: true payloadsize: 5 magic: 1 compresscodec: NoCompressionCodec"
    );
    assert!(
        lines[6].starts_with("offset: 1030 isvalid: true")
            && lines[6].ends_with("GZIPCompressionCodec")
    );
    assert_eq!(
        *lines.last().unwrap(),
        format!("tail of the log is at offset: {}", 1000 + bytes.len())
    );

    // As 0.7.2: a bad CRC is listed as invalid and the listing goes on; Tributary names the
    // first one and exits 1.
    bytes[15 + 12] ^= 0xff; // corrupt "world"
    let bad = dir.path().join("00000000000000000000.kafka");
    std::fs::write(&bad, &bytes).unwrap();
    let (code, stdout, _) = tributary(&["dump-log", "-noprint", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[3],
        "offset: 15 isvalid: false payloadsize: 5 magic: 1 compresscodec: NoCompressionCodec"
    );
    assert!(lines[4].starts_with("offset: 30 isvalid: true"), "{stdout}");
    assert!(
        stdout.ends_with(&format!(
            "first entry with a bad CRC at offset: 15 (a broker's recovery cuts the log there)\n\
             tail of the log is at offset: {}\n",
            bytes.len()
        )),
        "{stdout}"
    );
    assert!(!stdout.contains("payload:"));
    // A copy named as 0.7.2 allows, and a broken length: listed up to it, then why.
    let copy = dir.path().join("7.kafka.bak");
    let mut broken = bytes[..15].to_vec();
    broken.extend_from_slice(&[0, 0, 0, 1, 0]);
    std::fs::write(&copy, &broken).unwrap();
    let (code, stdout, _) = tributary(&["dump-log", "--noprint", copy.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("Starting offset: 7\noffset: 7 isvalid: true"),
        "{stdout}"
    );
    assert!(
        stdout.contains("offset: 22 isvalid: false (message at offset 22: length 1"),
        "{stdout}"
    );
    // No file: nothing, as 0.7.2.
    let (code, stdout, _) = tributary(&["dump-log"]);
    assert_eq!((code, stdout.as_str()), (0, ""));
}

#[test]
fn a_mirror_broker_needs_both_files_and_one_topic_list() {
    let (code, _, stderr) = tributary(&[
        "server",
        "config/mirror-server.properties",
        "config/mirror-consumer.properties",
    ]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("a mirror broker takes three files")
            && stderr.contains("only config/mirror-consumer.properties was given"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let consumer = dir.path().join("consumer.properties");
    std::fs::write(&consumer, "zk.connect=localhost:2181\ngroupid=KafkaMirror\nmirror.topics.whitelist=a,b\nmirror.topics.blacklist=c\n").unwrap();
    let (code, _, stderr) = tributary(&[
        "server",
        "config/mirror-server.properties",
        consumer.to_str().unwrap(),
        "config/mirror-producer.properties",
    ]);
    assert_eq!(
        code, 2,
        "nothing may start on a contradictory mirror config: {stderr}"
    );
    assert!(
        stderr.contains("mirror.topics.blacklist") && stderr.contains("mirror.topics.whitelist"),
        "both keys are named: {stderr}"
    );
    let (_, help, _) = tributary(&["server", "--help"]);
    assert!(
        help.contains("consumer.properties") || help.contains("mirror"),
        "--help explains the three-file form: {help}"
    );
}

#[test]
fn mirroring_a_cluster_into_itself_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let consumer = dir.path().join("consumer.properties");
    let producer = dir.path().join("producer.properties");
    std::fs::write(
        &consumer,
        "zk.connect=localhost:2181/kafka\ngroupid=KafkaMirror\n",
    )
    .unwrap();
    std::fs::write(&producer, "zk.connect=127.0.0.1:2181/kafka\n").unwrap();
    let args = [
        "mirror-maker",
        "--consumer.config",
        consumer.to_str().unwrap(),
        "--producer.config",
        producer.to_str().unwrap(),
        "--whitelist",
        ".*",
    ];
    let (code, _, stderr) = tributary(&args);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("cannot be mirrored into itself") && stderr.contains("2181"),
        "{stderr}"
    );
    // Another chroot of the same ZooKeeper is another cluster: not refused for that reason.
    std::fs::write(
        &producer,
        format!(
            "zk.connect=localhost:{}/mirror\nzk.connectiontimeout.ms=200\n",
            dead_port()
        ),
    )
    .unwrap();
    std::fs::write(
        &consumer,
        format!(
            "zk.connect=localhost:{}/kafka\ngroupid=KafkaMirror\nzk.connectiontimeout.ms=200\n",
            dead_port()
        ),
    )
    .unwrap();
    let (code, _, stderr) = tributary(&args);
    assert_eq!(code, 2, "{stderr}");
    assert!(!stderr.contains("into itself"), "{stderr}");
}

#[test]
fn check_config_names_the_likely_key_of_a_typo_and_fails_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.properties");
    std::fs::write(
        &path,
        "brokerid=0\nlog.dir=/tmp/x\nzk.connect=localhost:2181\nnum.partition=4\nbroker.id=3\n",
    )
    .unwrap();
    let (code, stdout, stderr) = tributary(&["check-config", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("num.partition in")
            && stdout.contains("line 4")
            && stdout.contains("(did you mean num.partitions?)"),
        "{stdout}"
    );
    assert!(stdout.contains("(did you mean brokerid?)"), "{stdout}");
    assert!(
        stdout.contains("  num.partitions")
            && stdout
                .lines()
                .any(|l| l.trim_start().starts_with("num.partitions") && l.ends_with("= 1")),
        "{stdout}"
    );
    assert!(stderr.contains("2 unknown keys"), "{stderr}");
    let (code, _, _) = tributary(&["check-config", "--allow-unknown", path.to_str().unwrap()]);
    assert_eq!(code, 0);
}

#[test]
fn server_names_the_bad_line_of_its_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.properties");
    std::fs::write(&path, "brokerid=zero\nlog.dir=/tmp/x\n").unwrap();
    let (code, _, stderr) = tributary(&["server", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("brokerid in") && stderr.contains("line 1"),
        "{stderr}"
    );
}

/// A local port nothing listens on.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn tools_fail_at_once_when_zookeeper_refuses_connections() {
    let port = dead_port();
    let started = std::time::Instant::now();
    let zk = format!("127.0.0.1:{port}");
    let (code, _, stderr) = tributary(&["console-producer", "--zookeeper", &zk, "--topic", "t"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains(&format!(
            "cannot connect to ZooKeeper at 127.0.0.1:{port} (connection refused)"
        )),
        "{stderr}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn the_server_says_why_it_cannot_reach_zookeeper_and_gives_up_after_the_connection_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let port = dead_port();
    let path = dir.path().join("server.properties");
    let text = format!("brokerid=0\nport=0\nlog.dir={}\nzk.connect=127.0.0.1:{port}\nzk.connectiontimeout.ms=1500\n", dir.path().join("logs").display());
    std::fs::write(&path, text).unwrap();
    let (code, _, stderr) = tributary(&["server", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    let refused = format!("cannot connect to ZooKeeper at 127.0.0.1:{port} (connection refused)");
    assert!(stderr.contains(&format!("{refused}; retrying")), "{stderr}");
    assert!(
        stderr.contains("gave up after zk.connectiontimeout.ms"),
        "{stderr}"
    );
}
