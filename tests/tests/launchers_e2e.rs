//! Kafka 0.7.2's tools as 0.7 operators and their scripts call them: through the `bin/`
//! launcher scripts, with 0.7.2's class names, arguments and output, against a real ZooKeeper
//! and real brokers.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tributary_tests::broker::{one_broker_properties, tributary_binary, BrokerProcess};
use tributary_tests::zookeeper::{free_port, ZooKeeper};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A `bin/` script, with the binary under test and no inherited log settings.
fn script(name: &str) -> Command {
    let mut command = Command::new(repo_root().join("bin").join(name));
    command
        .env("TRIBUTARY_BIN", tributary_binary())
        .env_remove("RUST_LOG")
        .env_remove("KAFKA_OPTS")
        .env_remove("KAFKA_JMX_OPTS")
        .env_remove("JMX_PORT");
    command
}

fn run(command: &mut Command, stdin: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({:?}):\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

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
    // It listens before it registers (as 0.7's does): a producer finding brokers through
    // ZooKeeper before the registration has none to send to.
    broker.wait_until_registered();
    Cluster { zk, broker, dir }
}

impl Cluster {
    fn zk(&self) -> String {
        self.zk.connect_string()
    }

    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// The latest offset of a partition, as 0.7.2's scripts read it (GetOffsetShell | tail -1).
    fn latest(&self, topic: &str, partition: u32) -> i64 {
        let out = run(
            script("kafka-run-class.sh").args([
                "kafka.tools.GetOffsetShell",
                "--server",
                &format!("kafka://127.0.0.1:{}", self.broker.port),
                "--topic",
                topic,
                "--partition",
                &partition.to_string(),
                "--time",
                "-1",
                "--offsets",
                "1",
            ]),
            "",
        );
        let stdout = ok(&out, "GetOffsetShell");
        stdout.lines().last().unwrap().trim().parse().unwrap()
    }

    fn export(&self, group: &str, name: &str) -> String {
        let path = self.dir.path().join(name);
        let out = run(
            script("kafka-run-class.sh").args([
                "kafka.tools.ExportZkOffsets",
                "--zkconnect",
                &self.zk(),
                "--group",
                group,
                "--output-file",
                path.to_str().unwrap(),
            ]),
            "",
        );
        ok(&out, "ExportZkOffsets");
        assert_eq!(
            text(&out.stdout),
            "",
            "ExportZkOffsets prints nothing on stdout"
        );
        std::fs::read_to_string(path).unwrap()
    }
}

/// The numbers of every whitespace-separated word holding `checksum`, after its first `:` —
/// the pipeline 0.7.2's broker-failure test runs on producer-perf's log.
fn producer_checksums(log: &str) -> Vec<u32> {
    log.split_whitespace()
        .filter(|w| w.contains("checksum"))
        .map(|w| w.split_once(':').unwrap().1.parse().unwrap())
        .collect()
}

/// Lines that begin with `checksum:` (ChecksumMessageFormatter without a topic), as 0.7.2's
/// broker-failure test reads the consumers' output.
fn consumer_checksums(out: &str) -> Vec<u32> {
    out.lines()
        .filter_map(|l| l.strip_prefix("checksum:"))
        .map(|n| n.trim().parse().unwrap())
        .collect()
}

#[test]
fn producer_perf_checksums_match_a_checksum_formatter_consumer_through_the_scripts() {
    let c = cluster();
    // 0.7.2's broker-failure test turns the checksum line on with its own log4j file.
    let log4j = c.file(
        "log4j.properties",
        "log4j.rootLogger=WARN, stdout\nlog4j.appender.stdout=org.apache.log4j.ConsoleAppender\n\
         log4j.logger.kafka.perf.ProducerPerformance$ProducerThread=DEBUG\n",
    );
    // As 0.7.2's producer_perf test calls it, stray word included.
    let out = run(
        script("kafka-producer-perf-test.sh")
            .env(
                "KAFKA_OPTS",
                format!("-Xmx512M -Dlog4j.configuration=file:{}", log4j.display()),
            )
            .args([
                "--brokerinfo",
                &format!("zk.connect={}", c.zk()),
                "--topic",
                "perf",
                "--messages",
                "60",
                "--message-size",
                "500",
                "--batch-size",
                "10",
                "--vary-message-size",
                "--threads",
                "1",
                "--reporting-interval",
                "100000",
                "num_messages",
                "--async",
            ]),
        "",
    );
    let stdout = ok(&out, "kafka-producer-perf-test.sh");
    let stderr = text(&out.stderr);
    // This log4j file sends log lines to standard output, as 0.7.2's did.
    assert!(stdout.contains("ignoring num_messages"), "{stdout}");
    assert!(
        stderr.contains("ignoring JVM-only settings") && stderr.contains("-Xmx512M"),
        "{stderr}"
    );
    let produced = producer_checksums(&stdout);
    assert_eq!(produced.len(), 60, "{stdout}");
    let unique: BTreeSet<u32> = produced.iter().copied().collect();
    assert!(
        unique.len() > 55,
        "varied messages have their own checksums: {unique:?}"
    );

    let out = run(
        script("kafka-console-consumer.sh").args([
            "--zookeeper",
            &c.zk(),
            "--topic",
            "perf",
            "--group",
            "source",
            "--from-beginning",
            "--consumer-timeout-ms",
            "4000",
            "--formatter",
            "kafka.consumer.ConsoleConsumer$ChecksumMessageFormatter",
        ]),
        "",
    );
    let consumed = consumer_checksums(&ok(&out, "kafka-console-consumer.sh"));
    let consumed_unique: BTreeSet<u32> = consumed.iter().copied().collect();
    assert_eq!(consumed.len(), 60);
    assert_eq!(
        consumed_unique, unique,
        "every produced checksum consumed, none other"
    );

    // ConsumerPerformance's detailed rows, in a date format of the caller's: one stream, a row
    // every 20 messages and one at its end, 0.7.2's columns after its six-name header.
    let out = run(
        script("kafka-consumer-perf-test.sh").args([
            "--zookeeper",
            &c.zk(),
            "--topic",
            "perf",
            "--threads",
            "1",
            "--show-detailed-stats",
            "--reporting-interval",
            "20",
            "--date-format",
            "yyyy-MM-dd'T'HH:mm",
        ]),
        "",
    );
    let report = ok(&out, "kafka-consumer-perf-test.sh");
    let mut lines = report.lines();
    assert_eq!(
        lines.next(),
        Some("time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(", ").collect()).collect();
    assert_eq!(rows.len(), 4, "{report}");
    for (row, read) in rows.iter().zip([20, 40, 60, 60]) {
        assert_eq!(row.len(), 7, "{report}");
        assert_eq!((row[0].len(), &row[0][10..11]), (16, "T"), "{report}");
        assert_eq!(
            (row[1], row[2], row[5]),
            ("0", "1048576", read.to_string().as_str())
        );
    }

    // The topic property prefixes each line, as 0.7.2's formatter does.
    let out = run(
        script("kafka-console-consumer.sh").args([
            "--zookeeper",
            &c.zk(),
            "--topic",
            "perf",
            "--from-beginning",
            "--max-messages",
            "1",
            "--formatter",
            "kafka.consumer.ConsoleConsumer$ChecksumMessageFormatter",
            "--property",
            "topic=perf",
        ]),
        "",
    );
    assert!(ok(&out, "consumer").starts_with("perf-checksum:"));
    // 0.7.2's --property parsing: not key=value is refused with its words and exit 1.
    let out = run(
        script("kafka-console-consumer.sh").args([
            "--zookeeper",
            &c.zk(),
            "--topic",
            "perf",
            "--property",
            "topic=a=b",
        ]),
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("Invalid parser arguments: topic=a=b"));
}

#[test]
fn offsets_export_import_update_and_verify_through_the_scripts() {
    let c = cluster();
    let out = run(
        // 0.7.2's flags: --compress alone (gzip), the default encoder named.
        script("kafka-console-producer.sh").args([
            "--zookeeper",
            &c.zk(),
            "--topic",
            "orders",
            "--compress",
            "--message-encoder",
            "kafka.serializer.StringEncoder",
            "--sync",
        ]),
        &(0..40).map(|i| format!("order {i}\n")).collect::<String>(),
    );
    ok(&out, "kafka-console-producer.sh");
    let consumer = c.file(
        "consumer.properties",
        &format!(
            "zk.connect={}\ngroupid=billing\nzk.sessiontimeout.ms=2000\nautooffset.reset=smallest\nconsumer.timeout.ms=3000\n",
            c.zk()
        ),
    );

    // No member yet: the rebalance is not complete; 0.7.2 exits 0 either way.
    let verify = || {
        run(
            script("kafka-run-class.sh").args([
                "kafka.tools.VerifyConsumerRebalance",
                "--zk.connect",
                &c.zk(),
                "--group",
                "billing",
            ]),
            "",
        )
    };
    let out = verify();
    assert_eq!(
        ok(&out, "VerifyConsumerRebalance"),
        "Rebalance operation failed !\n"
    );

    // ConsumerShell reads everything as group billing, then commits and leaves.
    let out = run(
        script("kafka-consumer-shell.sh").args([
            "--props",
            consumer.to_str().unwrap(),
            "--topic",
            "orders",
            "--partitions",
            "2",
        ]),
        "",
    );
    let shell = ok(&out, "kafka-consumer-shell.sh");
    assert!(shell.starts_with("Starting consumer...\n"), "{shell}");
    assert_eq!(
        shell.matches("Starting consumer thread..\n").count(),
        2,
        "{shell}"
    );
    assert_eq!(shell.matches("consumed: order ").count(), 40, "{shell}");
    assert_eq!(shell.matches("thread shutdown !\n").count(), 2, "{shell}");
    let received: u64 = shell
        .lines()
        .filter_map(|l| l.strip_prefix("Received "))
        .map(|l| l.trim_end_matches(" messages").parse::<u64>().unwrap())
        .sum();
    assert_eq!(received, 40);

    // Export: one 0.7.2 line per partition, at the partition's end.
    let exported = c.export("billing", "billing.offsets");
    let expected: String = (0..2)
        .map(|p| {
            format!(
                "/consumers/billing/offsets/orders/0-{p}:{}\n",
                c.latest("orders", p)
            )
        })
        .collect();
    assert_eq!(exported, expected);

    // Import a rewound copy: every offset back to 0.
    let rewound: String = exported
        .lines()
        .map(|l| format!("{}:0\n", l.rsplit_once(':').unwrap().0))
        .collect();
    let file = c.file("rewound.offsets", &rewound);
    let out = run(
        script("kafka-run-class.sh").args([
            "kafka.tools.ImportZkOffsets",
            "--zkconnect",
            &c.zk(),
            "--input-file",
            file.to_str().unwrap(),
        ]),
        "",
    );
    ok(&out, "ImportZkOffsets");
    assert_eq!(c.export("billing", "after-import.offsets"), rewound);

    // A bad line refuses the whole file, naming the line; nothing is written.
    let bad = c.file(
        "bad.offsets",
        "/consumers/billing/offsets/orders/0-0:7\n/consumers/billing/offsets/orders/0-1:seven\n",
    );
    let out = run(
        script("kafka-run-class.sh").args([
            "kafka.tools.ImportZkOffsets",
            "--zkconnect",
            &c.zk(),
            "--input-file",
            bad.to_str().unwrap(),
        ]),
        "",
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("line 2: offset \"seven\""),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(c.export("billing", "after-bad.offsets"), rewound);

    // A named group without offsets (a typo) is an error, and the file is left as it was.
    let kept = c.file("kept.offsets", "kept\n");
    let out = run(
        script("kafka-run-class.sh").args([
            "kafka.tools.ExportZkOffsets",
            "--zkconnect",
            &c.zk(),
            "--group",
            "bililng",
            "--output-file",
            kept.to_str().unwrap(),
        ]),
        "",
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("group bililng has no committed offsets"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "kept\n");

    // UpdateOffsetsInZK: 0.7.2's positional words and lines.
    let out = run(
        script("kafka-run-class.sh").args([
            "kafka.utils.UpdateOffsetsInZK",
            "latest",
            consumer.to_str().unwrap(),
            "orders",
        ]),
        "",
    );
    let mut expected_lines = String::new();
    for p in 0..2 {
        expected_lines.push_str(&format!(
            "updating partition 0-{p} with new offset: {}\n",
            c.latest("orders", p)
        ));
    }
    expected_lines.push_str("updated the offset for 2 partitions\n");
    assert_eq!(ok(&out, "UpdateOffsetsInZK"), expected_lines);
    assert_eq!(c.export("billing", "after-update.offsets"), exported);
    let out = run(
        script("kafka-run-class.sh").args(["kafka.utils.UpdateOffsetsInZK", "sideways", "x", "y"]),
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stdout),
        "USAGE: kafka.utils.UpdateOffsetsInZK$ [earliest | latest] consumer.properties topic\n"
    );

    // DumpLogSegments with 0.7.2's single-dash -noprint: the gzip wrappers as stored.
    let segment = c
        .dir
        .path()
        .join("logs/orders-0/00000000000000000000.kafka");
    let out = run(
        script("kafka-run-class.sh").args([
            "kafka.tools.DumpLogSegments",
            segment.to_str().unwrap(),
            "-noprint",
        ]),
        "",
    );
    let dump = ok(&out, "DumpLogSegments");
    assert!(
        dump.starts_with(&format!(
            "Dumping {}\nStarting offset: 0\n",
            segment.display()
        )),
        "{dump}"
    );
    assert!(
        dump.contains("compresscodec: GZIPCompressionCodec"),
        "{dump}"
    );
    assert!(!dump.contains("payload:"), "{dump}");
    assert!(
        dump.ends_with(&format!(
            "tail of the log is at offset: {}\n",
            c.latest("orders", 0)
        )),
        "{dump}"
    );

    // zookeeper-shell.sh: ZooKeeper's own shell on the cluster's ZooKeeper.
    let out = run(
        script("zookeeper-shell.sh").arg(c.zk()),
        "ls /consumers/billing/offsets\nquit\n",
    );
    assert!(
        text(&out.stdout).contains("[orders]"),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let out = run(&mut script("zookeeper-shell.sh"), "");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("zookeeper_host:port[/path]"));

    // A live member owning every partition: the rebalance is complete.
    let mut member = script("kafka-console-consumer.sh")
        .args([
            "--zookeeper",
            &c.zk(),
            "--topic",
            "orders",
            "--group",
            "billing",
            "--consumer-timeout-ms",
            "30000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = verify();
        if ok(&out, "VerifyConsumerRebalance") == "Rebalance operation successful !\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never complete: {}",
            text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = member.kill();
    let _ = member.wait();
}

/// Reads `child`'s stderr until `wanted` lines hold `needle` or `timeout` passes.
fn read_until(child: &mut Child, needle: &str, wanted: usize, timeout: Duration) -> Vec<String> {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + timeout;
    let mut lines = Vec::new();
    while lines
        .iter()
        .filter(|l: &&String| l.contains(needle))
        .count()
        < wanted
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => break,
        }
    }
    lines
}

#[test]
fn shells_replay_jmx_and_unknown_classes_through_the_scripts() {
    let c = cluster();
    let producer = c.file(
        "producer.properties",
        &format!("zk.connect={}\nproducer.type=sync\n", c.zk()),
    );
    // ProducerShell: each line trimmed and sent; 0.7.2's line printed once delivered.
    let out = run(
        script("kafka-producer-shell.sh").args([
            "--props",
            producer.to_str().unwrap(),
            "--topic",
            "shell",
        ]),
        "  hello  \nworld\n",
    );
    assert_eq!(
        ok(&out, "kafka-producer-shell.sh"),
        "Sent:   hello   (5 bytes)\nSent: world (5 bytes)\n"
    );

    // SimpleConsumerShell never ends; its lines are log lines, on standard error with the
    // default config/log4j.properties.
    // Read the partition holding more of the two messages (each 15 bytes in the log). The
    // latest offset is the flushed end, which may follow the producer's answer by a moment:
    // wait until both messages are readable.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (partition, bytes) = loop {
        let ends: Vec<(u32, i64)> = (0..2).map(|p| (p, c.latest("shell", p))).collect();
        if ends.iter().map(|(_, bytes)| bytes).sum::<i64>() == 30 || Instant::now() > deadline {
            break ends.into_iter().max_by_key(|(_, bytes)| *bytes).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let expected = usize::try_from(bytes / 15).unwrap();
    assert!(expected >= 1);
    let mut shell = script("kafka-simple-consumer-shell.sh")
        .args([
            "--server",
            &format!("kafka://127.0.0.1:{}", c.broker.port),
            "--topic",
            "shell",
            "--partition",
            &partition.to_string(),
            "--print-messages",
            "--print-offsets",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = read_until(
        &mut shell,
        "next offset = ",
        expected,
        Duration::from_secs(15),
    );
    let _ = shell.kill();
    let _ = shell.wait();
    assert_eq!(
        lines.iter().filter(|l| l.contains("consumed: ")).count(),
        expected,
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("Starting consumer...")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(&format!("next offset = {bytes}"))),
        "{lines:?}"
    );

    // ReplayLogProducer copies the topic, then stops 10 s after the last message.
    let out = run(
        script("kafka-replay-log-producer.sh").args([
            "--zookeeper",
            &c.zk(),
            "--brokerinfo",
            &format!("zk.connect={}", c.zk()),
            "--inputtopic",
            "shell",
            "--outputtopic",
            "replayed",
        ]),
        "",
    );
    ok(&out, "kafka-replay-log-producer.sh");
    assert!(
        text(&out.stderr)
            .contains("replayed 2 messages of shell into replayed: 2 delivered, 0 not"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        script("kafka-console-consumer.sh").args([
            "--zookeeper",
            &c.zk(),
            "--topic",
            "replayed",
            "--from-beginning",
            "--consumer-timeout-ms",
            "3000",
        ]),
        "",
    );
    let mut replayed: Vec<String> = ok(&out, "consumer").lines().map(String::from).collect();
    replayed.sort();
    assert_eq!(replayed, ["hello", "world"]);

    // A name whose log directory would not fit the file system is refused before anything is
    // sent (0.7.2 took it and failed creating the directory).
    let out = run(
        script("kafka-console-producer.sh").args([
            "--zookeeper",
            &c.zk(),
            "--topic",
            &"t".repeat(250),
        ]),
        "lost?\n",
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("the limit is 249"),
        "{}",
        text(&out.stderr)
    );

    // JmxTool says what replaces it; an unknown class names the known ones; both exit 1.
    let out = run(
        script("kafka-run-class.sh").args(["kafka.tools.JmxTool", "--object-name", "kafka:*"]),
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("metrics endpoint"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        script("kafka-run-class.sh").args(["kafka.tools.NoSuchTool"]),
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("kafka.tools.NoSuchTool is not a Kafka 0.7 class"),
        "{stderr}"
    );
    assert!(
        stderr.contains("kafka.tools.GetOffsetShell -> tributary get-offsets"),
        "{stderr}"
    );
    let out = run(&mut script("kafka-run-class.sh"), "");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("USAGE: "));
}

/// 0.7.2's `system_test/producer_perf`, through the scripts only: ZooKeeper and a broker
/// started by their start scripts, ProducerPerformance with its arguments (the stray word
/// included), the log's size polled with GetOffsetShell until it settles, then checked:
/// every message is its payload plus 10 bytes of header. Then both stop scripts.
#[test]
fn producer_perf_system_test_through_the_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let (zk_port, broker_port) = (free_port(), free_port());
    let zk_config = dir.path().join("zookeeper.properties");
    std::fs::write(
        &zk_config,
        format!(
            "dataDir={}\nclientPort={zk_port}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\ntickTime=500\n",
            dir.path().join("zookeeper").display()
        ),
    )
    .unwrap();
    let server_config = dir.path().join("server.properties");
    std::fs::write(
        &server_config,
        format!(
            "brokerid=0\nhostname=127.0.0.1\nport={broker_port}\nnum.partitions=1\nlog.dir={}\nlog.flush.interval=600\n\
             log.default.flush.interval.ms=1000\nlog.default.flush.scheduler.interval.ms=1000\n\
             enable.zookeeper=true\nzk.connect=127.0.0.1:{zk_port}\nzk.connectiontimeout.ms=1000000\n",
            dir.path().join("kafka-logs").display()
        ),
    )
    .unwrap();
    // Started as 0.7.2's run-test.sh starts them, `script config > log 2>&1 &` in a
    // non-interactive shell: a background job there begins with SIGINT ignored, and a JVM that
    // starts so never stops on SIGINT (0.7.2's stop signal) — the stop scripts must still stop it.
    let spawn = |name: &str, arg: &Path, log: &str| {
        let shell = script(name);
        let path = repo_root().join("bin").join(name);
        shell
            .get_envs()
            .fold(Command::new("bash"), |mut command, (key, value)| {
                match value {
                    Some(value) => command.env(key, value),
                    None => command.env_remove(key),
                };
                command
            })
            .args(["-c", "\"$0\" \"$@\" & wait $!"])
            .arg(path)
            .arg(arg)
            .stdout(std::fs::File::create(dir.path().join(log)).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut zookeeper = spawn("zookeeper-server-start.sh", &zk_config, "zookeeper.log");
    wait_for_port(zk_port);
    assert!(
        ignores_sigint(zookeeper.id()),
        "ZooKeeper's JVM was meant to start with SIGINT ignored, as a background job does"
    );
    let mut broker = spawn("kafka-server-start.sh", &server_config, "kafka.log");
    wait_for_port(broker_port);

    let (messages, size) = (20_000u64, 200u64);
    let out = run(
        script("kafka-run-class.sh").args([
            "kafka.tools.ProducerPerformance",
            "--brokerinfo",
            &format!("broker.list=0:127.0.0.1:{broker_port}"),
            "--topic",
            "test01",
            "--messages",
            &messages.to_string(),
            "--message-size",
            &size.to_string(),
            "--batch-size",
            "200",
            "--threads",
            "1",
            "--reporting-interval",
            "100000",
            "num_messages",
            "--async",
        ]),
        "",
    );
    let report = ok(&out, "ProducerPerformance");
    assert!(report.starts_with("start.time, end.time, compression, message.size, batch.size, total.data.sent.in.MB, MB.sec, total.data.sent.in.nMsg, nMsg.sec\n"), "{report}");

    let latest = || {
        let out = run(
            script("kafka-run-class.sh").args([
                "kafka.tools.GetOffsetShell",
                "--server",
                &format!("kafka://127.0.0.1:{broker_port}"),
                "--topic",
                "test01",
                "--partition",
                "0",
                "--time",
                "-1",
                "--offsets",
                "1",
            ]),
            "",
        );
        ok(&out, "GetOffsetShell")
            .lines()
            .last()
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    // "wait for data to be persisted", as 0.7.2's test does: two equal readings 2 s apart,
    // then 2 s more and a last reading (the broker flushes every second).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = latest();
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let now = latest();
        if now == last && now > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the log never settled ({now})");
        last = now;
    }
    std::thread::sleep(Duration::from_secs(2));
    let actual = latest();
    assert_eq!(
        actual,
        messages * (size + 10),
        "test failed: actual size {actual}"
    );

    let out = run(script("kafka-server-stop.sh").arg(&server_config), "");
    ok(&out, "kafka-server-stop.sh");
    assert!(
        text(&out.stderr).contains("asked 1 broker(s) to stop"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        exits_within(&mut broker, Duration::from_secs(20)),
        "the broker did not stop"
    );
    let out = run(script("zookeeper-server-stop.sh").arg(&zk_config), "");
    ok(&out, "zookeeper-server-stop.sh");
    assert!(
        text(&out.stderr).contains("ignores SIGINT: sent SIGTERM"),
        "{}",
        text(&out.stderr)
    );
    // On a loaded 2-core machine (all tests at once) the JVM's stop can take more than 20 s.
    assert!(
        exits_within(&mut zookeeper, Duration::from_secs(60)),
        "ZooKeeper did not stop within 60 s of the stop script"
    );
}

/// Whether the one child of the shell `shell` (the server it started) ignores SIGINT.
fn ignores_sigint(shell: u32) -> bool {
    let children =
        std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap_or_default();
    let child: u32 = match children.split_whitespace().next() {
        Some(pid) => pid.parse().unwrap(),
        None => panic!("the shell {shell} has no child"),
    };
    let status = std::fs::read_to_string(format!("/proc/{child}/status")).unwrap();
    let ignored = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .map(|mask| u64::from_str_radix(mask.trim(), 16).unwrap())
        .unwrap();
    ignored & (1 << (2 - 1)) != 0
}

/// Waits (at most 30 s) until the log file at `log` says `needle`.
fn wait_for_log(log: &Path, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(needle)
    {
        assert!(
            Instant::now() < deadline,
            "{} never said {needle:?}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn exits_within(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A server started by a `bin/` script, stopped (SIGTERM, as 0.7.2's tests' kill -15) when
/// bounced or dropped.
struct Started {
    script: &'static str,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Started {
    fn start(script_name: &'static str, args: &[String], log: PathBuf) -> Started {
        let mut started = Started {
            script: script_name,
            args: args.to_vec(),
            log,
            child: None,
        };
        started.spawn();
        started
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.child = Some(
            script(self.script)
                .args(&self.args)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            if !exits_within(&mut child, Duration::from_secs(30)) {
                panic!("{} {:?} did not stop on SIGTERM", self.script, self.args);
            }
        }
    }

    fn bounce(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// 0.7.2's `system_test/broker_failure`, through the scripts only and with 0.7.2's arguments:
/// two source brokers, two target brokers and two mirror makers (`--whitelist=".*"`, quotes
/// included), producer-perf sending batches in the background with its checksum line on
/// (log4j file in KAFKA_OPTS), while a source broker, a mirror maker and a target broker are
/// bounced in turn (SIGTERM, then started again). Then the mirror's lag is waited to zero with
/// ConsumerOffsetChecker, and the unique checksums read from the source and from the target
/// with ChecksumMessageFormatter consumers are compared: 0.7.2's test passes when they are
/// equal and not empty; here also nothing reaches either cluster that the producer did not
/// send.
#[test]
fn broker_failure_system_test_through_the_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let write = |name: &str, text: String| {
        std::fs::write(path(name), text).unwrap();
        path(name).to_str().unwrap().to_string()
    };
    let (source_zk, target_zk) = (free_port(), free_port());
    let mut servers = Vec::new();
    for (name, port) in [
        ("zookeeper_source", source_zk),
        ("zookeeper_target", target_zk),
    ] {
        let config = write(
            &format!("{name}.properties"),
            format!(
                "dataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\ntickTime=500\n",
                path(name).display()
            ),
        );
        servers.push(Started::start(
            "zookeeper-server-start.sh",
            &[config],
            path(&format!("{name}.log")),
        ));
        wait_for_port(port);
    }
    let broker = |name: &str, id: u32, zk: u16| {
        let port = free_port();
        let config = write(
            &format!("server_{name}.properties"),
            format!(
                "brokerid={id}\nhostname=127.0.0.1\nport={port}\nnum.partitions=2\nlog.dir={}\nlog.file.size=10000000\n\
                 log.flush.interval=600\nlog.default.flush.interval.ms=1000\nlog.default.flush.scheduler.interval.ms=1000\n\
                 zk.connect=127.0.0.1:{zk}\nzk.connectiontimeout.ms=1000000\nzk.sessiontimeout.ms=3000\n",
                path(&format!("kafka-{name}-logs")).display()
            ),
        );
        let started = Started::start(
            "kafka-server-start.sh",
            &[config],
            path(&format!("kafka_{name}.log")),
        );
        wait_for_port(port);
        started
    };
    let mut sources = vec![
        broker("source1", 1, source_zk),
        broker("source2", 2, source_zk),
    ];
    let mut targets = vec![
        broker("target1", 1, target_zk),
        broker("target2", 2, target_zk),
    ];
    let consumer = write(
        "whitelisttest.consumer.properties",
        format!("zk.connect=127.0.0.1:{source_zk}\nzk.connectiontimeout.ms=1000000\ngroupid=group1\nmirror.topics.whitelist=test_1,test_2\nautooffset.reset=smallest\n"),
    );
    let producer = write(
        "mirror_producer.properties",
        format!("zk.connect=127.0.0.1:{target_zk}\nzk.connectiontimeout.ms=1000000\nproducer.type=async\nqueue.enqueueTimeout.ms=-1\n"),
    );
    let maker_args = vec![
        "kafka.tools.MirrorMaker".to_string(),
        "--consumer.config".into(),
        consumer,
        "--producer.config".into(),
        producer,
        "--whitelist=\".*\"".into(),
    ];
    let mut makers: Vec<Started> = (1..=2)
        .map(|i| {
            Started::start(
                "kafka-run-class.sh",
                &maker_args,
                path(&format!("kafka_mirrormaker_{i}.log")),
            )
        })
        .collect();

    // The background producer: batches of 500 until told to stop, its checksum lines kept.
    let log4j = write(
        "log4j.properties",
        "log4j.rootLogger=WARN, stdout\nlog4j.logger.kafka=DEBUG\nlog4j.logger.kafka.perf.ProducerPerformance$ProducerThread=DEBUG\n".into(),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let background = {
        let (stop, log4j) = (stop.clone(), log4j.clone());
        std::thread::spawn(move || {
            let mut log = String::new();
            let mut batches = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let out = run(
                    script("kafka-producer-perf-test.sh")
                        .env("KAFKA_OPTS", format!("-Dlog4j.configuration=file:{log4j}"))
                        .args([
                            "--brokerinfo",
                            &format!("zk.connect=127.0.0.1:{source_zk}"),
                            "--topic",
                            "test01",
                            "--messages",
                            "500",
                            "--message-size",
                            "500",
                            "--batch-size",
                            "50",
                            "--vary-message-size",
                            "--threads",
                            "1",
                            "--reporting-interval",
                            "500",
                            "--async",
                        ]),
                    "",
                );
                log.push_str(&text(&out.stdout));
                batches += 1;
                std::thread::sleep(Duration::from_millis(500));
            }
            (log, batches)
        })
    };

    // Bounce, as 0.7.2's test does with -s 123: a source broker, a mirror maker, a target broker.
    std::thread::sleep(Duration::from_secs(3));
    sources[0].bounce();
    std::thread::sleep(Duration::from_secs(3));
    makers[1].bounce();
    std::thread::sleep(Duration::from_secs(3));
    targets[1].bounce();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (producer_log, batches) = background.join().unwrap();
    assert!(batches >= 3, "the producer ran {batches} batches");

    // wait_for_zero_consumer_lags: the mirror group's lag on the source, summed as 0.7.2's
    // script sums it (grep "Consumer lag", strip spaces, the number after "="), zero 4 times.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut zeros = 0;
    while zeros < 4 {
        let out = run(
            script("kafka-run-class.sh").args([
                "kafka.tools.ConsumerOffsetChecker",
                "--group",
                "group1",
                "--zkconnect",
                &format!("127.0.0.1:{source_zk}"),
                "--topic",
                "test01",
            ]),
            "",
        );
        let report = ok(&out, "ConsumerOffsetChecker");
        let lags: Vec<i64> = report
            .lines()
            .filter(|l| l.contains("Consumer lag"))
            .map(|l| {
                l.replace(' ', "")
                    .split('=')
                    .nth(1)
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        if !lags.is_empty() && lags.iter().sum::<i64>() == 0 {
            zeros += 1;
        }
        assert!(
            Instant::now() < deadline,
            "the mirror never caught up:\n{report}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }

    let consume = |zk: u16, group: &str| {
        let out = run(
            script("kafka-console-consumer.sh").args([
                "--zookeeper",
                &format!("127.0.0.1:{zk}"),
                "--topic",
                "test01",
                "--group",
                group,
                "--from-beginning",
                "--consumer-timeout-ms",
                "5000",
                "--formatter",
                "kafka.consumer.ConsoleConsumer$ChecksumMessageFormatter",
            ]),
            "",
        );
        consumer_checksums(&ok(&out, "kafka-console-consumer.sh"))
    };
    let produced: BTreeSet<u32> = producer_checksums(&producer_log).into_iter().collect();
    let in_source: BTreeSet<u32> = consume(source_zk, "source").into_iter().collect();
    let in_target: BTreeSet<u32> = consume(target_zk, "target").into_iter().collect();
    assert!(!in_source.is_empty());
    assert_eq!(
        in_source.len(),
        in_target.len(),
        "source/mirror uniq msg count diff: {} only in the source, {} only in the mirror",
        in_source.difference(&in_target).count(),
        in_target.difference(&in_source).count()
    );
    assert_eq!(in_source, in_target, "## Test FAILED");
    assert!(
        in_source.is_subset(&produced),
        "a checksum no producer sent"
    );
    for mut server in makers
        .into_iter()
        .chain(targets)
        .chain(sources)
        .chain(servers)
    {
        server.stop();
    }
}

/// 0.7.2's `system_test/mirror_maker`, both its tests, through the scripts only. Whitelist: two
/// source clusters and a target cluster, one MirrorMaker with both sources'
/// `--consumer.config` and `--whitelist="white.*" --num.streams 2`, ProducerPerformance into
/// `whitetopic01` on both sources, `whitetopic02` on one and `blacktopic01` on the other; then
/// its `cmp_logs`: each white topic's log size in the target (GetOffsetShell, time -1) equals
/// the sum of its sizes in the sources, and the black topic is not mirrored. Blacklist (on the
/// same clusters, after the first MirrorMaker stopped): one MirrorMaker from the first source
/// with `--blacklist="black.*" --num.streams 2`, `blacktopic01`, `blacktopic02` and then
/// `whitetopic01` produced there; neither black topic is mirrored, and `whitetopic01` is.
#[test]
fn mirror_maker_system_test_through_the_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let write = |name: &str, text: String| {
        std::fs::write(path(name), text).unwrap();
        path(name).to_str().unwrap().to_string()
    };
    let mut servers = Vec::new();
    let mut clusters = Vec::new();
    for name in ["source_1", "source_2", "target"] {
        let (zk, port) = (free_port(), free_port());
        let config = write(
            &format!("zookeeper_{name}.properties"),
            format!(
                "dataDir={}\nclientPort={zk}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\ntickTime=500\n",
                path(&format!("zookeeper_{name}")).display()
            ),
        );
        servers.push(Started::start(
            "zookeeper-server-start.sh",
            &[config],
            path(&format!("zookeeper_{name}.log")),
        ));
        wait_for_port(zk);
        let config = write(
            &format!("server_{name}.properties"),
            format!(
                "brokerid=1\nhostname=127.0.0.1\nport={port}\nnum.partitions=1\nlog.dir={}\nlog.flush.interval=600\n\
                 log.default.flush.interval.ms=1000\nlog.default.flush.scheduler.interval.ms=1000\n\
                 zk.connect=127.0.0.1:{zk}\nzk.connectiontimeout.ms=1000000\n",
                path(&format!("kafka-{name}-logs")).display()
            ),
        );
        servers.push(Started::start(
            "kafka-server-start.sh",
            &[config],
            path(&format!("kafka_{name}.log")),
        ));
        wait_for_port(port);
        // A broker listens before it registers (as 0.7's does): a producer that looks for it
        // in ZooKeeper in between finds no live broker (on a loaded machine that window can
        // outlast the producer's 4 attempts).
        wait_for_log(&path(&format!("kafka_{name}.log")), "registered broker ");
        clusters.push((zk, port));
    }
    let (target_zk, target_port) = clusters[2];
    let consumers: Vec<String> = (0..2)
        .map(|i| {
            write(
                &format!("whitelisttest_{}.consumer.properties", i + 1),
                format!("zk.connect=127.0.0.1:{}\nzk.connectiontimeout.ms=1000000\ngroupid=group1\nshallowiterator.enable=true\n", clusters[i].0),
            )
        })
        .collect();
    let producer = write(
        "mirror_producer.properties",
        format!("zk.connect=127.0.0.1:{target_zk}\nproducer.type=async\nqueue.enqueueTimeout.ms=-1\nnum.producers.per.broker=2\n"),
    );
    let mut maker = Started::start(
        "kafka-run-class.sh",
        &[
            "kafka.tools.MirrorMaker".to_string(),
            "--consumer.config".into(),
            consumers[0].clone(),
            "--consumer.config".into(),
            consumers[1].clone(),
            "--producer.config".into(),
            producer.clone(),
            "--whitelist=\"white.*\"".into(),
            "--num.streams".into(),
            "2".into(),
        ],
        path("kafka_mirrormaker_1.log"),
    );
    let perf = |topic: &str, cluster: usize| {
        let out = run(
            script("kafka-run-class.sh").args([
                "kafka.perf.ProducerPerformance",
                "--brokerinfo",
                &format!("zk.connect=127.0.0.1:{}", clusters[cluster].0),
                "--topic",
                topic,
                "--messages",
                "2000",
                "--message-size",
                "100",
                "--batch-size",
                "200",
                "--vary-message-size",
                "--threads",
                "1",
                "--reporting-interval",
                "2000",
                "--async",
            ]),
            "",
        );
        ok(&out, "ProducerPerformance");
    };
    for (topic, cluster) in [
        ("whitetopic01", 0),
        ("whitetopic01", 1),
        ("whitetopic02", 0),
        ("blacktopic01", 1),
    ] {
        perf(topic, cluster);
    }
    let size = |port: u16, topic: &str| -> u64 {
        let out = run(
            script("kafka-run-class.sh").args([
                "kafka.tools.GetOffsetShell",
                "--server",
                &format!("kafka://127.0.0.1:{port}"),
                "--topic",
                topic,
                "--partition",
                "0",
                "--time",
                "-1",
                "--offsets",
                "1",
            ]),
            "",
        );
        // An empty answer counts as 0, as cmp_logs counts it.
        ok(&out, "GetOffsetShell")
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0)
    };
    // wait_partition_done on the sources: until a source's size has not moved for 3 s. What a
    // broker answers is its flushed end, which follows the producer's last write by up to
    // log.default.flush.interval.ms + its scheduler's interval (2 s here).
    let settled = |port: u16, topic: &str| -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = size(port, topic);
        let mut since = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let now = size(port, topic);
            if now != last {
                (last, since) = (now, Instant::now());
            } else if since.elapsed() >= Duration::from_secs(3) || Instant::now() >= deadline {
                return now;
            }
        }
    };
    // cmp_logs: the target's size of `topic` reaches the sum of the sources' (within a bound).
    let until_mirrored = |topic: &str| {
        let expected: u64 = (0..2).map(|c| settled(clusters[c].1, topic)).sum();
        assert!(expected > 0);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let actual = size(target_port, topic);
            if actual == expected {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{topic}: source size: {expected} target size: {actual}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    };
    for topic in ["whitetopic01", "whitetopic02"] {
        until_mirrored(topic);
    }
    assert_eq!(
        size(target_port, "blacktopic01"),
        0,
        "a topic outside the whitelist was mirrored"
    );
    // Stopped as 0.7.2's test stops it (SIGTERM): its last commit made, the next MirrorMaker of
    // group1 does not copy whitetopic01 again.
    maker.stop();
    // test_blacklists.
    let blacklist = write(
        "blacklisttest.consumer.properties",
        format!(
            "zk.connect=127.0.0.1:{}
zk.connectiontimeout.ms=1000000
groupid=group1
shallowiterator.enable=true
",
            clusters[0].0
        ),
    );
    let maker = Started::start(
        "kafka-run-class.sh",
        &[
            "kafka.tools.MirrorMaker".to_string(),
            "--consumer.config".into(),
            blacklist,
            "--producer.config".into(),
            producer,
            "--blacklist=\"black.*\"".into(),
            "--num.streams".into(),
            "2".into(),
        ],
        path("kafka_mirrormaker_blacklist.log"),
    );
    for topic in ["blacktopic01", "blacktopic02", "whitetopic01"] {
        perf(topic, 0);
    }
    until_mirrored("whitetopic01");
    for topic in ["blacktopic01", "blacktopic02"] {
        assert_eq!(
            size(target_port, topic),
            0,
            "{topic}, blacklisted, was mirrored"
        );
    }
    drop(maker);
    drop(servers);
}
