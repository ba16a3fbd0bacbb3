//! The `.properties` reader and the typed configurations, including every file in `config/`.
// Tests read the sample files from disk; the sans-IO wall is for core's library code.
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use tributary_core::config::{
    load, AutoOffsetReset, BrokerConfig, ConsumerConfig, Discovery, EnqueueTimeout, LoadError,
    ProducerConfig, ProducerType, Properties, TopicFilter, ZkConnect, ZooKeeperServerConfig,
};
use tributary_core::message::CompressionCodec;

fn props(text: &str) -> Properties {
    Properties::parse("test.properties", text).unwrap()
}

fn value<'a>(p: &'a Properties, key: &str) -> &'a str {
    &p.get(key).unwrap_or_else(|| panic!("{key} missing")).value
}

#[test]
fn properties_follow_java_rules() {
    let p = props(concat!(
        "# comment\n",
        "  ! another comment\n",
        "\n",
        "a=1\n",
        "b : 2\n",
        "c 3\n",
        "d\t=\t  spaced value  \n",
        "e=first \\\n",
        "    second\\\n",
        "\tthird\n",
        "f=ends in backslash\\\\\n",
        "g=\\u0041\\t\\n\\=\\:x\n",
        "key\\ with\\ spaces=v\n",
        "k\\=eq=v2\n",
        "empty=\n",
        "novalue\n",
        "dup=old\r\n",
        "dup=new\r",
        "last=no newline",
    ));
    assert_eq!(value(&p, "a"), "1");
    assert_eq!(value(&p, "b"), "2");
    assert_eq!(value(&p, "c"), "3");
    assert_eq!(value(&p, "d"), "spaced value  ");
    assert_eq!(value(&p, "e"), "first secondthird");
    assert_eq!(value(&p, "f"), "ends in backslash\\");
    assert_eq!(value(&p, "g"), "A\t\n=:x");
    assert_eq!(value(&p, "key with spaces"), "v");
    assert_eq!(value(&p, "k=eq"), "v2");
    assert_eq!(value(&p, "empty"), "");
    assert_eq!(value(&p, "novalue"), "");
    assert_eq!(value(&p, "dup"), "new");
    assert_eq!(value(&p, "last"), "no newline");
    assert_eq!(p.get("a").unwrap().line, 4);
    assert_eq!(p.get("e").unwrap().line, 8);
    assert_eq!(p.get("last").unwrap().line, 19);
}

#[test]
fn a_comment_line_does_not_continue_and_latin1_files_are_read() {
    let p = props("# comment \\\nx=1\n");
    assert_eq!(value(&p, "x"), "1");
    let p = Properties::parse_bytes("latin1", b"name=caf\xe9\n").unwrap();
    assert_eq!(value(&p, "name"), "caf\u{e9}");
}

#[test]
fn a_malformed_unicode_escape_names_the_line() {
    let err = Properties::parse("bad.properties", "a=1\nb=\\u12G4\n").unwrap_err();
    assert_eq!(err.line, 2);
    assert!(
        err.to_string()
            .starts_with("bad.properties line 2: malformed \\uxxxx escape"),
        "{err}"
    );
}

fn broker(text: &str) -> Result<BrokerConfig, String> {
    BrokerConfig::from_properties(&Properties::parse("config/server.properties", text).unwrap())
        .map_err(|e| e.to_string())
}

const BROKER_MIN: &str = "brokerid=3\nlog.dir=/tmp/x\nzk.connect=localhost:2181\n";

#[test]
fn broker_defaults_are_0_7s() {
    let c = broker(BROKER_MIN).unwrap();
    assert_eq!(c.broker_id, 3);
    assert_eq!(c.port, 6667);
    assert_eq!(c.num_threads, None);
    assert_eq!(
        (c.socket_send_buffer_bytes, c.socket_receive_buffer_bytes),
        (102_400, 102_400)
    );
    assert_eq!(c.max_socket_request_bytes, 104_857_600);
    assert_eq!(c.num_partitions, 1);
    assert_eq!(c.log_file_bytes, 1_073_741_824);
    assert_eq!(c.log_flush_interval_messages, 500);
    assert_eq!(c.log_flush_scheduler_interval_ms, 3000);
    assert_eq!(
        c.log_flush_interval_ms, 3000,
        "defaults to the scheduler interval"
    );
    assert_eq!(
        (
            c.log_retention_hours,
            c.log_retention_bytes,
            c.log_cleanup_interval_mins
        ),
        (168, -1, 10)
    );
    assert_eq!(
        (
            c.log_roll_hours,
            c.max_message_bytes,
            c.max_topic_name_bytes
        ),
        (168, 1_000_000, 255)
    );
    assert!(c.enable_zookeeper);
    assert_eq!(
        (
            c.zk.session_timeout_ms,
            c.zk.connection_timeout_ms,
            c.zk.sync_time_ms
        ),
        (6000, 6000, 2000)
    );
    assert!(c.unknown.is_empty());
}

#[test]
fn broker_per_topic_maps_override_defaults_and_skip_bad_entries() {
    let c = broker(&format!(
        "{BROKER_MIN}num.partitions=2\ntopic.partition.count.map=topic1:3, topic2:4, bad, ../x:5, t3:zero\n\
         topic.flush.intervals.ms=topic1:1000\ntopic.log.retention.hours=topic2:24\ntopic.log.retention.size=topic1:100\n"
    ))
    .unwrap();
    let t = |n: &str| n.parse().unwrap();
    assert_eq!(c.partitions_for(&t("topic1")), 3);
    assert_eq!(c.partitions_for(&t("topic2")), 4);
    assert_eq!(c.partitions_for(&t("other")), 2);
    assert_eq!(
        c.topic_partition_count.len(),
        2,
        "malformed entries are skipped"
    );
    assert_eq!(c.flush_interval_ms_for(&t("topic1")), 1000);
    assert_eq!(c.flush_interval_ms_for(&t("topic2")), 3000);
    assert_eq!(c.retention_hours_for(&t("topic2")), 24);
    assert_eq!(c.retention_bytes_for(&t("topic1")), Some(100));
    assert_eq!(c.retention_bytes_for(&t("topic2")), None);
}

#[test]
fn broker_errors_name_file_line_key_and_the_fix() {
    let err =
        broker("brokerid=1\nlog.dir=/x\nzk.connect=h:1\nlog.flush.interval=ten\n").unwrap_err();
    assert_eq!(
        err,
        "log.flush.interval in config/server.properties line 4: expected an integer from 1 to 2147483647, found \"ten\""
    );
    assert_eq!(
        broker("log.dir=/x\nzk.connect=h:1\n").unwrap_err(),
        "brokerid in config/server.properties: required, but not set"
    );
    let err = broker(&format!("{BROKER_MIN}port=70000\n")).unwrap_err();
    assert!(
        err.starts_with(
            "port in config/server.properties line 4: expected an integer from 0 to 65535"
        ),
        "{err}"
    );
    let err = broker(&format!("{BROKER_MIN}enable.zookeeper=yes\n")).unwrap_err();
    assert!(
        err.contains("expected true or false, found \"yes\""),
        "{err}"
    );
    let err = broker("brokerid=1\nlog.dir=/x\n").unwrap_err();
    assert!(
        err.starts_with(
            "zk.connect in config/server.properties: required when enable.zookeeper=true"
        ),
        "{err}"
    );
    assert!(broker("brokerid=1\nlog.dir=/x\nenable.zookeeper=false\n").is_ok());
    let err = broker("brokerid=1\nlog.dir=/x\nzk.connect=host:notaport\n").unwrap_err();
    assert!(err.contains("port \"notaport\""), "{err}");
}

#[test]
fn listeners_and_their_tls_settings_are_read_and_checked() {
    use tributary_core::config::{ClientAuth, ListenerProtocol};
    // Unset: plaintext on hostname:port, as 0.7.
    let c = broker(&format!("{BROKER_MIN}hostname=h\nport=9092\n")).unwrap();
    assert_eq!(c.listeners.specs.len(), 1);
    assert_eq!(c.listeners.specs[0].to_string(), "PLAINTEXT://h:9092");
    assert!(c.listeners.tls.is_none());
    let tls = "ssl.certificate.location=/c/broker.crt\nssl.key.location=/c/broker.key\n";
    let c = broker(&format!(
        "{BROKER_MIN}listeners=SSL://:9093,PLAINTEXT://127.0.0.1:9092\n{tls}ssl.client.auth=Required\nssl.ca.location=/c/ca.crt\n"
    ))
    .unwrap();
    let protocols: Vec<_> = c.listeners.specs.iter().map(|s| s.protocol).collect();
    assert_eq!(
        protocols,
        [ListenerProtocol::Plaintext, ListenerProtocol::Ssl]
    );
    let settings = c.listeners.tls.unwrap();
    assert_eq!(settings.client_auth, ClientAuth::Required);
    assert_eq!(settings.ca.unwrap().to_str(), Some("/c/ca.crt"));
    // Plaintext off.
    let c = broker(&format!("{BROKER_MIN}listeners=SSL://:9093\n{tls}")).unwrap();
    assert!(c.listeners.get(ListenerProtocol::Plaintext).is_none());
    for (text, expect) in [
        (
            "listeners=SSL://:9093\n".to_string(),
            "ssl.certificate.location in config/server.properties: an SSL listener needs the broker's certificate",
        ),
        (
            "listeners=SSL://:9093\nssl.certificate.location=/c/b.crt\n".to_string(),
            "ssl.key.location in config/server.properties: an SSL listener needs the private key",
        ),
        (
            format!("listeners=SSL://:9093\n{tls}ssl.client.auth=required\n"),
            "ssl.ca.location in config/server.properties: ssl.client.auth asks for client certificates",
        ),
        (
            format!("listeners=SSL://:9093\n{tls}ssl.client.auth=always\n"),
            "ssl.client.auth in config/server.properties line 7: expected none, requested or required, found \"always\"",
        ),
        (
            "listeners=PLAINTEXT://:9092,TLS://:9093\n".to_string(),
            "listeners in config/server.properties line 4: \"TLS\" in \"TLS://:9093\" is not a protocol",
        ),
        (
            format!("port=9092\nlisteners=SSL://:9093\n{tls}"),
            "port in config/server.properties line 4: port=9092 is set, but listeners decides",
        ),
    ] {
        let err = broker(&format!("{BROKER_MIN}{text}")).unwrap_err();
        assert!(err.starts_with(expect), "{text}: {err}");
    }
    // The same port in both is no conflict.
    assert!(broker(&format!(
        "{BROKER_MIN}port=9092\nlisteners=PLAINTEXT://:9092\n"
    ))
    .is_ok());
}

#[test]
fn client_tls_settings_are_read_and_checked_for_consumers_producers_and_replicas() {
    let c = consumer(
        "groupid=g\nzk.connect=h:1\nsecurity.protocol=SSL\nssl.ca.location=/c/ca.crt\n\
         ssl.certificate.location=/c/me.crt\nssl.key.location=/c/me.key\n\
         ssl.endpoint.identification.algorithm=none\n",
    )
    .unwrap();
    let tls = c.tls.unwrap();
    assert_eq!(tls.ca.to_str(), Some("/c/ca.crt"));
    assert!(tls.identity.is_some() && !tls.verify_hostname);
    // Plaintext by default, ssl.* keys then ignored.
    assert!(
        consumer("groupid=g\nzk.connect=h:1\nssl.ca.location=/c/ca.crt\n")
            .unwrap()
            .tls
            .is_none()
    );
    let p = producer("zk.connect=h:1\nsecurity.protocol=ssl\nssl.ca.location=/c/ca.crt\n").unwrap();
    let tls = p.tls.unwrap();
    assert!(tls.identity.is_none() && tls.verify_hostname);
    for (text, expect) in [
        ("security.protocol=ssl\n", "ssl.ca.location in t: security.protocol=ssl needs the CA certificates"),
        ("security.protocol=tls\n", "security.protocol in t line 2: expected plaintext or ssl, found \"tls\""),
        (
            "security.protocol=ssl\nssl.ca.location=/c\nssl.certificate.location=/c/me.crt\n",
            "ssl.key.location in t: ssl.certificate.location is set: name its private key too",
        ),
        (
            "security.protocol=ssl\nssl.ca.location=/c\nssl.endpoint.identification.algorithm=dns\n",
            "ssl.endpoint.identification.algorithm in t line 4: expected https or none",
        ),
    ] {
        let err = ProducerConfig::from_properties(
            &Properties::parse("t", &format!("zk.connect=h:1\n{text}")).unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with(expect), "{text}: {err}");
    }
    let replica = |extra: &str| {
        broker(&format!(
            "{BROKER_MIN}replica.source.zk.connect=src:2181\nreplica.security.protocol=ssl\n{extra}"
        ))
    };
    let err = replica("").unwrap_err();
    assert!(
        err.starts_with("replica.ssl.ca.location in config/server.properties: replica.security.protocol=ssl needs"),
        "{err}"
    );
    let tls = replica("replica.ssl.ca.location=/c/ca.crt\n")
        .unwrap()
        .replica
        .unwrap()
        .tls
        .unwrap();
    assert_eq!(tls.key_prefix, "replica.");
}

#[test]
fn unknown_keys_are_kept_not_fatal() {
    let c = broker(&format!(
        "{BROKER_MIN}kafka.metrics.reporters=x\nsome.future.key=1\n"
    ))
    .unwrap();
    assert_eq!(
        c.unknown.get("some.future.key").map(String::as_str),
        Some("1")
    );
    assert_eq!(c.unknown.len(), 2);
}

#[test]
fn zk_connect_parses_servers_and_chroot() {
    let z = ZkConnect::parse("a:2181,b:2182/kafka/prod").unwrap();
    assert_eq!(z.servers.len(), 2);
    assert_eq!((z.servers[1].host.as_str(), z.servers[1].port), ("b", 2182));
    assert_eq!(z.chroot.as_deref(), Some("/kafka/prod"));
    assert_eq!(z.to_string(), "a:2181,b:2182/kafka/prod");
    assert_eq!(ZkConnect::parse("h").unwrap().servers[0].port, 2181);
    assert_eq!(ZkConnect::parse("h:1/").unwrap().chroot, None);
    assert!(ZkConnect::parse("h:1/a//b").is_err());
    assert!(ZkConnect::parse("h:1/a/../b").is_err());
    assert!(ZkConnect::parse(":1").is_err());
}

fn producer(text: &str) -> Result<ProducerConfig, String> {
    ProducerConfig::from_properties(&Properties::parse("producer.properties", text).unwrap())
        .map_err(|e| e.to_string())
}

#[test]
fn producer_defaults_and_discovery() {
    let c = producer("zk.connect=127.0.0.1:2181\n").unwrap();
    assert!(matches!(c.discovery, Discovery::ZooKeeper(_)));
    assert_eq!(c.producer_type, ProducerType::Sync);
    assert_eq!(c.enqueue_timeout, EnqueueTimeout::Immediate);
    assert_eq!(
        (c.queue_time_ms, c.queue_size, c.batch_size),
        (5000, 10_000, 200)
    );
    assert_eq!(
        (c.buffer_bytes, c.connect_timeout_ms, c.socket_timeout_ms),
        (102_400, 5000, 30_000)
    );
    assert_eq!(
        (c.reconnect_interval_requests, c.reconnect_time_interval_ms),
        (30_000, Some(10_000_000))
    );
    assert_eq!(
        (c.max_message_bytes, c.zk_read_num_retries, c.num_retries),
        (1_000_000, 3, 0)
    );
    assert_eq!(c.serializer_class, "kafka.serializer.DefaultEncoder");

    let c = producer("broker.list=0:localhost:9095, 1:h2:9096\nproducer.type=async\nqueue.enqueueTimeout.ms=-1\n").unwrap();
    let Discovery::BrokerList(list) = &c.discovery else {
        panic!("expected broker.list")
    };
    assert_eq!(list.len(), 2);
    assert_eq!(
        (list[1].id, list[1].host.as_str(), list[1].port),
        (1, "h2", 9096)
    );
    assert_eq!(c.enqueue_timeout, EnqueueTimeout::Block);
    assert_eq!(
        producer("zk.connect=h:1\nqueue.enqueueTimeout.ms=250\n")
            .unwrap()
            .enqueue_timeout,
        EnqueueTimeout::Wait(250)
    );

    // 0.7.0 accepts both and uses ZooKeeper.
    assert!(matches!(
        producer("zk.connect=h:1\nbroker.list=0:h:2\n")
            .unwrap()
            .discovery,
        Discovery::ZooKeeper(_)
    ));
    assert!(producer("producer.type=sync\n")
        .unwrap_err()
        .contains("neither zk.connect nor broker.list"));
    assert!(producer("broker.list=0:h:1\npartitioner.class=x\n")
        .unwrap_err()
        .starts_with("partitioner.class"));
    assert!(producer("broker.list=0:h\n")
        .unwrap_err()
        .contains("not id:host:port"));
    assert!(producer("zk.connect=h:1\nproducer.type=fast\n")
        .unwrap_err()
        .contains("expected sync or async"));
}

#[test]
fn producer_compression_applies_to_listed_topics() {
    let c = producer("zk.connect=h:1\ncompression.codec=2\ncompressed.topics=a,b\n").unwrap();
    assert_eq!(c.codec_for(&"a".parse().unwrap()), CompressionCodec::Snappy);
    assert_eq!(c.codec_for(&"c".parse().unwrap()), CompressionCodec::None);
    let all = producer("zk.connect=h:1\ncompression.codec=1\n").unwrap();
    assert_eq!(all.codec_for(&"c".parse().unwrap()), CompressionCodec::Gzip);
    let err = producer("zk.connect=h:1\ncompression.codec=3\n").unwrap_err();
    assert_eq!(err, "compression.codec in producer.properties line 2: unknown codec 3; expected 0 (none), 1 (gzip) or 2 (snappy)");
}

fn consumer(text: &str) -> Result<ConsumerConfig, String> {
    ConsumerConfig::from_properties(&Properties::parse("consumer.properties", text).unwrap())
        .map_err(|e| e.to_string())
}

#[test]
fn consumer_defaults_and_mirror_filters() {
    let c = consumer("zk.connect=h:1\ngroupid=g\n").unwrap();
    assert_eq!(
        (c.fetch_bytes, c.socket_buffer_bytes, c.socket_timeout_ms),
        (1_048_576, 65_536, 30_000)
    );
    assert_eq!(
        (
            c.fetcher_backoff_ms,
            c.autocommit_interval_ms,
            c.queued_chunks_max
        ),
        (1000, 10_000, 10)
    );
    assert_eq!((c.rebalance_retries_max, c.rebalance_backoff_ms), (4, 2000));
    assert_eq!(c.auto_offset_reset, AutoOffsetReset::Smallest);
    assert_eq!(c.consumer_timeout_ms, None);
    assert!(c.autocommit_enable && !c.shallow_iterator_enable);
    assert_eq!(c.mirror.topics, TopicFilter::All);
    assert_eq!(c.mirror.consumer_threads, 1);

    let c = consumer("zk.connect=h:1\ngroupid=g\nmirror.topics.whitelist=GoodTopic1, GoodTopic2\nbackoff.increment.ms=50\n").unwrap();
    assert!(c.mirror.topics.allows(&"GoodTopic2".parse().unwrap()));
    assert!(!c.mirror.topics.allows(&"Other".parse().unwrap()));
    assert_eq!(
        c.fetcher_backoff_ms, 50,
        "0.7.0's name for the fetch backoff is accepted"
    );
    let c = consumer("zk.connect=h:1\ngroupid=g\nmirror.topics.blacklist=UnwantedTopic1\nautooffset.reset=never\n").unwrap();
    assert!(!c.mirror.topics.allows(&"UnwantedTopic1".parse().unwrap()));
    assert!(c.mirror.topics.allows(&"Other".parse().unwrap()));
    assert_eq!(c.auto_offset_reset, AutoOffsetReset::Raise("never".into()));

    let err = consumer(
        "zk.connect=h:1\ngroupid=g\nmirror.topics.whitelist=a\nmirror.topics.blacklist=b\n",
    )
    .unwrap_err();
    assert_eq!(err, "mirror.topics.blacklist in consumer.properties line 4: mirror.topics.whitelist is also set; a mirror takes a whitelist or a blacklist, not both");
    let err =
        consumer("zk.connect=h:1\ngroupid=g\nmirror.topics.whitelist=ok,../etc\n").unwrap_err();
    assert!(
        err.contains("\"../etc\": topic name has byte 0x2f"),
        "{err}"
    );
    assert!(consumer("zk.connect=h:1\n")
        .unwrap_err()
        .starts_with("groupid in consumer.properties: required"));
    assert!(consumer("groupid=g\n")
        .unwrap_err()
        .starts_with("zk.connect in consumer.properties: required"));
}

/// Every sample properties file in config/ loads through the typed configuration its name says
/// it is.
#[test]
fn every_file_in_config_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
    let mut loaded = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        // The Grafana dashboard: checked against the metrics the binaries register
        // (bins/tests/dashboard.rs).
        // The Prometheus alert rules: loaded by a real Prometheus in
        // tests/tests/metrics_e2e.rs.
        // log4j.properties: read by bin/kafka-run-class.sh for its levels, not by Tributary
        // (tests/tests/launchers_e2e.rs).
        if name.ends_with(".json") || name.ends_with(".yml") || name == "log4j.properties" {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let source = format!("config/{name}");
        let result: Result<(), LoadError> = if name.ends_with("server.properties") {
            load(&source, &bytes, BrokerConfig::from_properties)
                .map(|c| assert!(c.unknown.is_empty(), "{name}: {:?}", c.unknown))
        } else if name.ends_with("producer.properties") {
            load(&source, &bytes, ProducerConfig::from_properties)
                .map(|c| assert!(c.unknown.is_empty(), "{name}: {:?}", c.unknown))
        } else if name.ends_with("consumer.properties") {
            load(&source, &bytes, ConsumerConfig::from_properties)
                .map(|c| assert!(c.unknown.is_empty(), "{name}: {:?}", c.unknown))
        } else if name.ends_with("zookeeper.properties") {
            load(&source, &bytes, ZooKeeperServerConfig::from_properties).map(drop)
        } else {
            panic!("config/{name}: no typed configuration for this file name");
        };
        result.unwrap_or_else(|e| panic!("{e}"));
        loaded.push(name);
    }
    loaded.sort();
    assert_eq!(loaded.len(), 8, "{loaded:?}");
}

/// The seed's mirror configs keep their meaning.
#[test]
fn the_seed_mirror_configs_mean_what_the_seed_says() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let p = load(
        "mirror-producer",
        &read("mirror-producer.properties"),
        ProducerConfig::from_properties,
    )
    .unwrap();
    assert_eq!(p.producer_type, ProducerType::Async);
    assert_eq!(
        p.enqueue_timeout,
        EnqueueTimeout::Block,
        "the mirror producer must block on a full queue"
    );
    let Discovery::BrokerList(list) = p.discovery else {
        panic!("broker.list expected")
    };
    assert_eq!(
        (list[0].id, list[0].host.as_str(), list[0].port),
        (0, "localhost", 9095)
    );
    let c = load(
        "mirror-consumer",
        &read("mirror-consumer.properties"),
        ConsumerConfig::from_properties,
    )
    .unwrap();
    assert_eq!(
        (c.group_id.as_str(), c.zk_connect.to_string().as_str()),
        ("KafkaMirror", "127.0.0.1:2181")
    );
    assert_eq!(
        (c.consumer_timeout_ms, &c.mirror.topics),
        (None, &TopicFilter::All)
    );
    let s = load(
        "mirror-server",
        &read("mirror-server.properties"),
        BrokerConfig::from_properties,
    )
    .unwrap();
    assert_eq!(
        (s.broker_id, s.port, s.log_dir.as_str()),
        (0, 9095, "/tmp/mirror-kafka-logs")
    );
    assert_eq!(
        (
            s.num_threads,
            s.log_flush_interval_messages,
            s.log_flush_interval_ms
        ),
        (Some(8), 10_000, 1000)
    );
    assert_eq!(s.zk_connect.unwrap().to_string(), "localhost:2171");
    let z = load(
        "mirror-zookeeper",
        &read("mirror-zookeeper.properties"),
        ZooKeeperServerConfig::from_properties,
    )
    .unwrap();
    assert_eq!(
        (z.client_port, z.data_dir.as_str(), z.max_client_connections),
        (2171, "/tmp/mirror-zookeeper", 0)
    );
}

#[test]
fn a_group_id_that_would_escape_its_zookeeper_path_is_refused() {
    for bad in ["a/b", "..", "../x", "", "with space"] {
        let e = consumer(&format!("groupid={bad}\nzk.connect=localhost:2181\n")).unwrap_err();
        assert!(
            e.starts_with("groupid in consumer.properties line 1:"),
            "{bad}: {e}"
        );
    }
    let c = consumer("groupid=console-consumer-42.x_y\nzk.connect=localhost:2181\n").unwrap();
    assert_eq!(
        tributary_core::zk_layout::consumer_ids_path(&c.group_id),
        "/consumers/console-consumer-42.x_y/ids"
    );
}

#[test]
fn connection_limits_and_the_metrics_endpoint_are_read_and_wrong_ones_named() {
    let broker = |extra: &str| {
        BrokerConfig::from_properties(&props(&format!(
            "brokerid=0\nenable.zookeeper=false\nlog.dir=/tmp/l\n{extra}"
        )))
    };
    let config = broker(
        "max.connections.per.ip=20\nmax.connections.per.ip.overrides=10.0.0.7:50, [::1]:0 ,[::2]:3\n",
    )
    .unwrap();
    assert_eq!(config.max_connections_per_ip, 20);
    let overrides: Vec<String> = config
        .max_connections_per_ip_overrides
        .iter()
        .map(|(ip, n)| format!("{ip}={n}"))
        .collect();
    assert_eq!(overrides, ["10.0.0.7=50", "::1=0", "::2=3"]);
    assert_eq!(broker("").unwrap().max_connections_per_ip, i32::MAX as u32);
    assert_eq!(broker("").unwrap().metrics_host, None);
    for (extra, says) in [
        ("max.connections.per.ip=0\n", "max.connections.per.ip"),
        (
            "max.connections.per.ip.overrides=broker-3:5\n",
            "host names are not resolved",
        ),
        (
            "max.connections.per.ip.overrides=10.0.0.7\n",
            "\"10.0.0.7\"",
        ),
        (
            "max.connections.per.ip.overrides=10.0.0.7:-1\n",
            "count of 0 or more",
        ),
        (
            "max.connections.per.ip.overrides=10.0.0.7:1,10.0.0.7:2\n",
            "given twice",
        ),
        // Bare IPv6 is ambiguous (`fd00::1:7`: fd00::1 with 7, or fd00::1:7 with no count).
        ("max.connections.per.ip.overrides=fd00::1:7\n", "[fd00::7]:50"),
        ("metrics.ssl=true\n", "needs an SSL listener"),
        (
            "listeners=PLAINTEXT://:9092\nadvertised.listeners=SSL://proxy:9093\n",
            "no SSL listener",
        ),
        (
            "listeners=PLAINTEXT://:9092\nadvertised.listeners=PLAINTEXT://:9092\n",
            "needs the host and port",
        ),
        (
            "listeners=PLAINTEXT://:9092\nadvertised.listeners=PLAINTEXT://proxy:1\nadvertised.port=7\n",
            "advertised.port is set too",
        ),
    ] {
        let error = broker(extra).unwrap_err().to_string();
        assert!(error.contains(says), "{extra:?}: {error}");
    }
}

mod reference_table {
    use tributary_core::config::reference::{self, ConfigKind, DefaultValue, KEYS};
    use tributary_core::config::{
        BrokerConfig, ConsumerConfig, ProducerConfig, Properties, ZooKeeperServerConfig,
    };

    /// Keys a file of `kind` must have, so the rest can be tried one at a time.
    fn base(kind: ConfigKind) -> &'static str {
        match kind {
            ConfigKind::Broker => "brokerid=0\nlog.dir=/tmp/x\nzk.connect=localhost:2181\n",
            ConfigKind::Producer => "zk.connect=localhost:2181\n",
            ConfigKind::Consumer => "groupid=g\nzk.connect=localhost:2181\n",
            ConfigKind::ZooKeeperServer => "dataDir=/tmp/zk\n",
        }
    }

    /// A valid value for a key whose default is not a literal.
    fn sample(key: &str) -> &'static str {
        match key {
            k if k.starts_with("topic.") => "t:7",
            "mirror.topics.whitelist" | "compressed.topics" => "t",
            "zk.connect" => "localhost:2182",
            "hostname" => "example",
            "broker.list" => "0:localhost:9092",
            "listeners" => "PLAINTEXT://:9092",
            "max.connections.per.ip.overrides" => "10.0.0.7:5,[::1]:0",
            "metrics.host" => "127.0.0.1",
            "advertised.listeners" => "PLAINTEXT://proxy.example:9092",
            k if k.contains("ssl.") && k.ends_with(".location") => "/etc/tributary/x.pem",
            k if k.contains("zk.auth.digest.location") => "/etc/tributary/zk.digest",
            "partitioner.class" | "callback.handler" | "event.handler" => "x.Y",
            _ => "7",
        }
    }

    /// The keys a key is refused without: a ZooKeeper TLS file needs TLS turned on, with its CA,
    /// and a certificate its key (and the reverse).
    fn companions(key: &str) -> String {
        let Some((prefix, rest)) = key.split_once("zk.ssl.") else {
            return String::new();
        };
        let mut lines = String::new();
        if rest.ends_with(".location") {
            lines += &format!("{prefix}zk.ssl.client.enable=true\n");
        }
        for companion in ["ca", "certificate", "key"] {
            let name = format!("{prefix}zk.ssl.{companion}.location");
            let needed =
                companion == "ca" || rest.starts_with("certificate") || rest.starts_with("key");
            if rest.ends_with(".location") && needed && name != key {
                lines += &format!("{name}=/etc/tributary/{companion}.pem\n");
            }
        }
        lines
    }

    /// `Debug` of the typed config (all derive it) and its unknown keys, or the error.
    fn read(kind: ConfigKind, text: &str) -> Result<(String, Vec<String>), String> {
        let props = Properties::parse("t", text).map_err(|e| e.to_string())?;
        let keys =
            |u: &std::collections::BTreeMap<String, String>| u.keys().cloned().collect::<Vec<_>>();
        match kind {
            ConfigKind::Broker => {
                BrokerConfig::from_properties(&props).map(|c| (format!("{c:?}"), keys(&c.unknown)))
            }
            ConfigKind::Producer => ProducerConfig::from_properties(&props)
                .map(|c| (format!("{c:?}"), keys(&c.unknown))),
            ConfigKind::Consumer => ConsumerConfig::from_properties(&props)
                .map(|c| (format!("{c:?}"), keys(&c.unknown))),
            ConfigKind::ZooKeeperServer => ZooKeeperServerConfig::from_properties(&props)
                .map(|c| (format!("{c:?}"), Vec::new())),
        }
        .map_err(|e| e.to_string())
    }

    #[test]
    fn every_documented_key_is_read_and_its_documented_default_is_the_real_one() {
        for doc in KEYS {
            let base = base(doc.kind);
            let value = match doc.default {
                DefaultValue::Value(v) => v,
                _ => sample(doc.key),
            };
            let with_key = format!("{base}{}{}={value}\n", companions(doc.key), doc.key);
            let (set, unknown) =
                read(doc.kind, &with_key).unwrap_or_else(|e| panic!("{} = {value}: {e}", doc.key));
            assert!(
                !unknown.contains(&doc.key.to_string()),
                "{} is documented but not read as a {} setting",
                doc.key,
                doc.kind.noun()
            );
            if let DefaultValue::Value(_) = doc.default {
                let (unset, _) = read(doc.kind, base).unwrap();
                assert_eq!(
                    set, unset,
                    "{}: the documented default {value} is not the default in effect",
                    doc.key
                );
            }
        }
    }

    #[test]
    fn unknown_keys_get_the_key_they_most_likely_meant() {
        let cases = [
            (ConfigKind::Broker, "num.partition", Some("num.partitions")),
            (
                ConfigKind::Broker,
                "log.flush.intervall",
                Some("log.flush.interval"),
            ),
            (ConfigKind::Broker, "broker.id", Some("brokerid")),
            (ConfigKind::Broker, "log.dirs", Some("log.dir")),
            (ConfigKind::Broker, "zookeeper.connect", Some("zk.connect")),
            (ConfigKind::Broker, "Port", Some("port")),
            (ConfigKind::Consumer, "group.id", Some("groupid")),
            (
                ConfigKind::Consumer,
                "socket.receive.buffer.bytes",
                Some("socket.buffersize"),
            ),
            (
                ConfigKind::Producer,
                "queue.enqueue.timeout.ms",
                Some("queue.enqueueTimeout.ms"),
            ),
            (ConfigKind::Broker, "something.else.entirely", None),
            (ConfigKind::Broker, "groupid", None),
        ];
        for (kind, key, expected) in cases {
            assert_eq!(reference::suggest(kind, key), expected, "{key}");
        }
        let message = tributary_core::config::unknown_key_message(
            ConfigKind::Broker,
            "server.properties",
            "num.partition",
            4,
        );
        assert_eq!(message, "num.partition in server.properties line 4: not a broker setting Tributary knows (did you mean num.partitions?); ignored");
    }

    #[test]
    fn settings_show_every_key_with_its_value_and_mark_changes() {
        let props = Properties::parse("t", "brokerid=3\nlog.dir=/d\nport=6667\nlog.default.flush.scheduler.interval.ms=500\nnum.partition=4\n").unwrap();
        let text = reference::render_settings(ConfigKind::Broker, &props, "");
        let line = |key: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{key} ")))
                .unwrap_or_else(|| panic!("{key} missing:\n{text}"))
                .to_string()
        };
        assert!(
            line("brokerid").ends_with("= 3"),
            "a required key has no default to change: {}",
            line("brokerid")
        );
        assert!(
            line("log.default.flush.scheduler.interval.ms").ends_with("= 500   (changed)"),
            "{}",
            line("log.default.flush.scheduler.interval.ms")
        );
        assert!(
            line("port").ends_with("= 6667"),
            "the default, set explicitly, is not a change: {}",
            line("port")
        );
        assert!(
            line("num.partitions").ends_with("= 1"),
            "{}",
            line("num.partitions")
        );
        assert!(
            line("log.default.flush.interval.ms").ends_with("= 500"),
            "a default that follows another key: {}",
            line("log.default.flush.interval.ms")
        );
        assert!(
            !text.contains("num.partition "),
            "unknown keys are not settings"
        );
        assert_eq!(
            text.lines().count(),
            reference::keys_of(ConfigKind::Broker).count()
        );
    }

    #[test]
    fn docs_configuration_md_is_generated_from_the_table() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
        let generated = reference::markdown();
        if std::env::var_os("TRIBUTARY_WRITE_DOCS").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(on_disk == generated, "docs/configuration.md differs from core/src/config/reference.rs; run TRIBUTARY_WRITE_DOCS=1 cargo test -p tributary-core --test config");
    }
}
