//! Kafka 0.7.2's console tools as operators and their scripts stop and call them, against a real
//! ZooKeeper and broker: ^C and SIGTERM finish the work (0.7.2's shutdown hooks: the producer
//! sends what it queued, the consumer commits, leaves its group and removes a made-up one),
//! jopt-simple's option spellings, input that is not UTF-8, a misspelt group.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tributary_tests::broker::{one_broker_properties, tributary_binary, BrokerProcess};
use tributary_tests::zookeeper::{free_port, ZooKeeper};

struct Cluster {
    zk: ZooKeeper,
    broker: BrokerProcess,
    dir: tempfile::TempDir,
}

/// ZooKeeper and one broker with two partitions per topic, every message flushed.
fn cluster() -> Cluster {
    let zk = ZooKeeper::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let properties = one_broker_properties(port, &dir.path().join("logs"), &zk.connect_string());
    let broker = BrokerProcess::start(dir.path(), port, &properties);
    Cluster { zk, broker, dir }
}

fn tributary(args: &[&str]) -> Command {
    let mut command = Command::new(tributary_binary());
    command.args(args).env_remove("RUST_LOG");
    command
}

/// A running tool: its standard input (kept open until dropped), its output lines as they come
/// and its standard error once it ends.
struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Vec<u8>>,
    stdout: Vec<Vec<u8>>,
    stderr_lines: mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn spawn(command: &mut Command) -> Running {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || loop {
        let mut line = Vec::new();
        match out.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if tx.send(line).is_err() {
                    break;
                }
            }
        }
    });
    let err = BufReader::new(child.stderr.take().unwrap());
    let (err_tx, stderr_lines) = mpsc::channel();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        for line in err.lines().map_while(Result::ok) {
            let _ = err_tx.send(line.clone());
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    Running {
        child,
        stdin,
        lines,
        stdout: Vec::new(),
        stderr_lines,
        stderr,
    }
}

impl Running {
    /// Waits until `count` output lines came (at most `limit`).
    fn read_lines(&mut self, count: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.stdout.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.stdout.push(line),
                Err(_) => panic!(
                    "{} of {count} lines within {limit:?}: {:?}",
                    self.stdout.len(),
                    self.stdout
                ),
            }
        }
    }

    /// Waits until a line of standard error holds `needle` (at most `limit`).
    fn wait_for_stderr(&self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(_) => panic!("no \"{needle}\" on standard error within {limit:?}"),
            }
        }
    }

    fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args(["-s", name, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -s {name}");
    }

    /// Waits for the end (at most `limit`); the exit code (`None`: killed by a signal), every
    /// output line and standard error.
    fn finish(mut self, limit: Duration) -> (Option<i32>, Vec<Vec<u8>>, String) {
        drop(self.stdin.take());
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("still running after {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.stdout.push(line);
        }
        (status.code(), self.stdout, self.stderr.join().unwrap())
    }
}

/// Runs a tool to its end with `stdin` as input.
fn run(command: &mut Command, stdin: &[u8]) -> (Option<i32>, Vec<Vec<u8>>, String) {
    let mut running = spawn(command);
    running.stdin.as_mut().unwrap().write_all(stdin).unwrap();
    running.finish(Duration::from_secs(60))
}

fn produce(cluster: &Cluster, topic: &str, lines: usize) {
    let input: String = (0..lines).map(|i| format!("{topic}-{i}\n")).collect();
    let (code, _, stderr) = run(
        tributary(&[
            "console-producer",
            "--zookeeper",
            &cluster.zk.connect_string(),
        ])
        .args(["--topic", topic, "--acks"]),
        input.as_bytes(),
    );
    assert_eq!(code, Some(0), "console-producer: {stderr}");
}

/// Every group's committed offsets, as export-zk-offsets writes them.
fn exported(cluster: &Cluster) -> String {
    let file = cluster.dir.path().join("all.offsets");
    let (code, _, stderr) = run(
        tributary(&[
            "export-zk-offsets",
            "--zkconnect",
            &cluster.zk.connect_string(),
        ])
        .arg("--output-file")
        .arg(&file),
        b"",
    );
    assert_eq!(code, Some(0), "export-zk-offsets: {stderr}");
    std::fs::read_to_string(Path::new(&file)).unwrap()
}

fn sorted(mut lines: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    lines.sort();
    lines
}

/// The debug line console-producer writes once it reads its input, and how to turn it on.
const READY: &str = "reading standard input";
const READY_LOG: &str = "tributary_tools::console_producer=debug";

#[test]
fn a_second_signal_stops_console_producer_waiting_and_counts_what_is_unconfirmed() {
    // A "broker" that accepts connections and never answers: every acknowledged send waits.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let brokers = format!("0:127.0.0.1:{}", silent.local_addr().unwrap().port());
    let mut producer = spawn(
        tributary(&[
            "console-producer",
            "--broker-list",
            &brokers,
            "--topic",
            "t",
        ])
        .args(["--acks", "--batch-size", "1", "--timeout", "0"])
        .env("RUST_LOG", READY_LOG),
    );
    let input_kept_open = producer.stdin.take();
    producer.wait_for_stderr(READY, Duration::from_secs(30));
    let mut stdin = input_kept_open.unwrap();
    stdin.write_all(b"one\ntwo\nthree\n").unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    producer.signal("TERM");
    std::thread::sleep(Duration::from_secs(1));
    producer.signal("TERM");
    // Without the second signal it would wait for the socket timeout and its retries.
    let (code, _, stderr) = producer.finish(Duration::from_secs(15));
    drop(stdin);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("delivered 0 messages to t (durable); 0 not delivered; 3 not confirmed"),
        "{stderr}"
    );
    drop(silent);
}

#[test]
fn console_producer_sends_what_it_queued_when_stopped() {
    let cluster = cluster();
    let zk = cluster.zk.connect_string();
    // Batches of 1,000 lines or a minute: nothing is sent before the signal.
    let mut producer = spawn(
        tributary(&[
            "console-producer",
            "--zookeeper",
            &zk,
            "--topic",
            "stopped",
            "--batch-size",
            "1000",
            "--timeout",
            "60000",
        ])
        .env("RUST_LOG", READY_LOG),
    );
    producer.wait_for_stderr(READY, Duration::from_secs(30));
    let input: String = (0..100).map(|i| format!("stopped-{i}\n")).collect();
    let stdin = producer.stdin.as_mut().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    stdin.flush().unwrap();
    // As `tail -f log | console-producer` is stopped: input still open until it has exited.
    let input_kept_open = producer.stdin.take();
    std::thread::sleep(Duration::from_secs(1));
    producer.signal("TERM");
    let (code, _, stderr) = producer.finish(Duration::from_secs(60));
    drop(input_kept_open);
    assert_eq!(code, Some(143), "SIGTERM's exit code; stderr: {stderr}");
    assert!(
        stderr.contains("delivered 100 messages to stopped; 0 not delivered"),
        "{stderr}"
    );
    let (code, out, stderr) = run(
        tributary(&["console-consumer", "--zookeeper", &zk, "--topic", "stopped"]).args([
            "--from-beginning",
            "--consumer-timeout-ms",
            "3000",
        ]),
        b"",
    );
    assert_eq!(code, Some(0), "{stderr}");
    let want: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("stopped-{i}\n").into_bytes())
        .collect();
    assert_eq!(sorted(out), sorted(want));
}

#[test]
fn console_consumer_commits_and_leaves_when_stopped_and_removes_a_group_it_made_up() {
    let cluster = cluster();
    let zk = cluster.zk.connect_string();
    produce(&cluster, "c", 20);
    let consumer = |group: Option<&str>| {
        let mut command = tributary(&["console-consumer", "--zookeeper", &zk, "--topic", "c"]);
        command.arg("--from-beginning");
        if let Some(group) = group {
            command.args(["--group", group]);
        }
        command
    };
    // With a group: ^C after everything was printed, well before the 10 s autocommit.
    let mut kept = spawn(&mut consumer(Some("kept")));
    kept.read_lines(20, Duration::from_secs(30));
    kept.signal("INT");
    let (code, out, stderr) = kept.finish(Duration::from_secs(30));
    assert_eq!(code, Some(130), "^C's exit code; stderr: {stderr}");
    assert_eq!(out.len(), 20);
    assert!(stderr.contains("Consumed 20 messages"), "{stderr}");
    // The final commit: no lag left on either partition.
    let (code, report, stderr) = run(
        &mut tributary(&[
            "consumer-offset-checker",
            "--zkconnect",
            &zk,
            "--group",
            "kept",
        ]),
        b"",
    );
    assert_eq!(code, Some(0), "{stderr}");
    let report: String = report.iter().map(|l| String::from_utf8_lossy(l)).collect();
    let lags: Vec<&str> = report
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Consumer lag = "))
        .collect();
    assert_eq!(lags, ["0", "0"], "{report}");
    // Without a group: the made-up group is gone at a normal end and after ^C.
    let (code, out, stderr) = run(consumer(None).args(["--consumer-timeout-ms", "2000"]), b"");
    assert_eq!((code, out.len()), (Some(0), 20), "{stderr}");
    let mut throw_away = spawn(&mut consumer(None));
    throw_away.read_lines(20, Duration::from_secs(30));
    throw_away.signal("INT");
    let (code, _, stderr) = throw_away.finish(Duration::from_secs(30));
    assert_eq!(code, Some(130), "{stderr}");
    let groups = exported(&cluster);
    assert!(groups.contains("/consumers/kept/"), "{groups}");
    assert!(!groups.contains("console-consumer-"), "{groups}");
}

#[test]
fn jopt_spellings_raw_bytes_a_misspelt_group_and_consumer_perf_reruns() {
    let cluster = cluster();
    let zk = cluster.zk.connect_string();
    // Single-dash and abbreviated options; a Latin-1 byte and a CR LF.
    let (code, _, stderr) = run(
        &mut tributary(&[
            "console-producer",
            "-zookeeper",
            &zk,
            "-top",
            "bytes",
            "--ack",
        ]),
        b"caf\xe9\nplain\r\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("delivered 2 messages"), "{stderr}");
    let (code, out, stderr) = run(
        tributary(&["console-consumer", "-zoo", &zk, "-topic", "bytes", "-from"]).args([
            "--max-messages",
            "-1",
            "--consumer-timeout-ms",
            "3000",
        ]),
        b"",
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        sorted(out),
        [b"caf\xe9\n".to_vec(), b"plain\n".to_vec()],
        "the bytes as they were sent"
    );
    // An ambiguous abbreviation is refused, naming what it could be.
    let (code, _, stderr) = run(
        &mut tributary(&["console-consumer", "--zookeeper", &zk, "--f", "x"]),
        b"",
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("--f is ambiguous: it could be --from-beginning, --fetch-size"),
        "{stderr}"
    );
    // A misspelt group is an error, not an empty report.
    let (code, out, stderr) = run(
        &mut tributary(&[
            "consumer-offset-checker",
            "--zkconnect",
            &zk,
            "--group",
            "nosuch",
        ]),
        b"",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(out.is_empty(), "{out:?}");
    assert!(
        stderr.contains("group nosuch has no committed offsets"),
        "{stderr}"
    );
    // kafka-simple-consumer-perf-test.sh reads each partition from its start: 2 in all.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let server = format!("kafka://127.0.0.1:{}", cluster.broker.port);
    let mut read = 0;
    for partition in ["0", "1"] {
        let (code, out, stderr) = run(
            Command::new(root.join("bin/kafka-simple-consumer-perf-test.sh"))
                .args([
                    "--server",
                    &server,
                    "--topic",
                    "bytes",
                    "--partition",
                    partition,
                ])
                .arg("--hide-header")
                .env("TRIBUTARY_BIN", tributary_binary())
                .env_remove("RUST_LOG"),
            b"",
        );
        assert_eq!(code, Some(0), "{stderr}");
        let row = String::from_utf8_lossy(&out[0]).into_owned();
        read += row
            .split(", ")
            .nth(5)
            .unwrap()
            .trim()
            .parse::<u32>()
            .unwrap();
    }
    assert_eq!(read, 2);
    // consumer-perf starts over every run, as 0.7.2's does.
    for run_number in 1..=2 {
        let (code, out, stderr) = run(
            tributary(&["consumer-perf", "--zookeeper", &zk, "--topic", "bytes"]).args([
                "--group",
                "perf",
                "--messages",
                "2",
                "--hide-header",
            ]),
            b"",
        );
        assert_eq!(code, Some(0), "{stderr}");
        let row = String::from_utf8_lossy(&out[0]).into_owned();
        let messages = row.split(", ").nth(5).map(str::trim);
        assert_eq!(messages, Some("2"), "run {run_number}: {row}");
    }
}

#[test]
fn a_log4j_file_that_writes_target_in_lower_case_still_sends_log_lines_to_stderr() {
    // As 0.7.2's own bin/kafka-console-consumer-log4j.properties spells it, with `:` as separator.
    let dir = tempfile::tempdir().unwrap();
    let log4j = dir.path().join("log4j.properties");
    std::fs::write(
        &log4j,
        "log4j.rootLogger=WARN, stderr\nlog4j.appender.stderr=org.apache.log4j.ConsoleAppender\n\
         log4j.appender.stderr.target: system.err\n",
    )
    .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dead = free_port().to_string();
    // A stray word makes the tool log one warning before it fails to connect.
    let (_, out, stderr) = run(
        Command::new(root.join("bin/kafka-run-class.sh"))
            .args(["kafka.tools.GetOffsetShell", "--server"])
            .arg(format!("127.0.0.1:{dead}"))
            .args(["--topic", "t", "--time", "-1", "stray"])
            .env("TRIBUTARY_BIN", tributary_binary())
            .env(
                "KAFKA_OPTS",
                format!("-Dlog4j.configuration=file:{}", log4j.display()),
            )
            .env_remove("RUST_LOG"),
        b"",
    );
    assert!(stderr.contains("ignoring stray"), "{stderr}");
    let out: String = out.iter().map(|l| String::from_utf8_lossy(l)).collect();
    assert!(
        !out.contains("ignoring"),
        "log lines in the tool's output: {out}"
    );
}

#[test]
fn producer_perf_in_sync_mode_sends_batch_size_messages_per_request() {
    let cluster = cluster();
    let brokers = format!("broker.list=0:127.0.0.1:{}", cluster.broker.port);
    // 0.7.2's sync ProducerPerformance: one request per --batch-size messages. Compressed, a
    // request becomes one wrapper per partition it touches, so the log shows the requests.
    let (code, out, stderr) = run(
        tributary(&["producer-perf", "--brokerinfo", &brokers, "--topic", "perf"]).args([
            "--messages",
            "1000",
            "--threads",
            "1",
            "--batch-size",
            "100",
            "--compression-codec",
            "1",
            "--show-detailed-stats",
            "--reporting-interval",
            "100",
            "--hide-header",
        ]),
        b"",
    );
    assert_eq!(code, Some(0), "{stderr}");
    let rows: Vec<String> = out
        .iter()
        .map(|l| String::from_utf8_lossy(l).trim_end().to_string())
        .collect();
    // A row per 100 messages, this thread's own count in column 8.
    let counts: Vec<&str> = rows.iter().filter_map(|r| r.split(", ").nth(7)).collect();
    let want: Vec<String> = (1..=10).map(|i| (i * 100).to_string()).collect();
    assert_eq!(counts, want, "{rows:?}");
    // The compressed wrappers in the partitions' segments.
    let wrappers = || {
        let mut wrappers = 0;
        for partition in 0..2 {
            let segment = cluster
                .dir
                .path()
                .join(format!("logs/perf-{partition}/00000000000000000000.kafka"));
            if !segment.exists() {
                continue;
            }
            let (code, out, stderr) = run(tributary(&["dump-log", "-noprint"]).arg(&segment), b"");
            assert_eq!(code, Some(0), "{stderr}");
            wrappers += out
                .iter()
                .filter(|l| String::from_utf8_lossy(l).contains("GZIPCompressionCodec"))
                .count();
        }
        wrappers
    };
    // A 0.7 produce has no answer: the broker may still be appending the last requests.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut wrappers_seen = wrappers();
    while wrappers_seen < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        wrappers_seen = wrappers();
    }
    let wrappers = wrappers_seen;
    // 10 requests, each at most one wrapper per partition (one message per request: 1,000).
    assert!(
        (10..=20).contains(&wrappers),
        "{wrappers} compressed wrappers for 10 requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_consumer_rebalance_logs_0_7_2s_lines() {
    let cluster = cluster();
    let zk_connect = cluster.zk.connect_string();
    produce(&cluster, "v", 10);
    let zk = zookeeper_client::Client::connect(&zk_connect)
        .await
        .unwrap();
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    for path in ["/consumers", "/consumers/g", "/consumers/g/ids"] {
        let _ = zk.create(path, b"", &persistent).await;
    }
    // A member subscribed to `v`, and no owner for any partition.
    zk.create("/consumers/g/ids/g_m1", br#"{ "v": 1 }"#, &persistent)
        .await
        .unwrap();
    let verify = || {
        tributary(&[
            "verify-consumer-rebalance",
            "--zk.connect",
            &zk_connect,
            "--group",
            "g",
        ])
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
    };
    let out = verify();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Rebalance operation failed !\n"
    );
    assert!(
        stderr.contains("No owners for any partitions for topic v"),
        "{stderr}"
    );
    assert!(
        stderr.contains("No owner for topic v partition 0-0"),
        "{stderr}"
    );
    // One partition owned by a thread of no registered member: 0.7.2's "valid member" words.
    for path in ["/consumers/g/owners", "/consumers/g/owners/v"] {
        let _ = zk.create(path, b"", &persistent).await;
    }
    zk.create("/consumers/g/owners/v/0-0", b"g_ghost-0", &persistent)
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&verify().stderr).into_owned();
    assert!(!stderr.contains("No owners for any partitions"), "{stderr}");
    assert!(
        stderr.contains(
            "Owner g_ghost-0 for topic v partition 0-0 is not a valid member of consumer group g"
        ),
        "{stderr}"
    );
}
