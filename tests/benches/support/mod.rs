//! What the benches that run brokers in-process share (each bench uses some of it).

#![allow(dead_code)]

use tributary::broker::Broker;
use tributary::env::TokioEnv;
use tributary_core::config::{
    BrokerConfig, ConfigError, ConsumerConfig, ProducerConfig, Properties,
};
use tributary_core::wire::{OffsetsRequest, Request, Response, TopicName};
use tributary_tests::zookeeper::ZooKeeper;

/// A connection of a bench's client.
pub type Conn = tributary::client::Connection<<TokioEnv as tributary::env::Env>::Stream>;

/// Waits until `topic`'s `partition` ends at `end` or later: flushed and visible to readers.
pub async fn wait_until_flushed(conn: &mut Conn, topic: &TopicName, partition: i32, end: i64) {
    loop {
        let offsets = Request::Offsets(OffsetsRequest {
            topic: topic.clone(),
            partition,
            time: -1,
            max_offsets: 1,
        });
        let Response::Offsets(o) = conn.call(&offsets).await.expect("offsets") else {
            panic!("the broker answered OFFSETS with another response")
        };
        if o.offsets.first().copied().unwrap_or(0) >= end {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Logs to standard error, filtered by `RUST_LOG`, when it is set (benches are quiet otherwise).
pub fn trace_from_env() {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
}

/// A configuration parsed from `.properties` text; a bench's own text that does not parse is
/// the bench's bug, so it panics.
pub fn properties<T>(text: &str, parse: impl Fn(&Properties) -> Result<T, ConfigError>) -> T {
    parse(&Properties::parse("bench", text).expect("properties")).expect("config")
}

/// The mirror's consumer of a source in `zk` (the seed's tuning: 1 MiB fetches), group
/// `group`, starting at `reset` (`smallest` or `largest`) without a commit.
pub fn mirror_consumer_config(zk: &ZooKeeper, group: &str, reset: &str) -> ConsumerConfig {
    let text = format!(
        "zk.connect={}\ngroupid={group}\nautooffset.reset={reset}\nfetch.size=1048576\nsocket.buffersize=1048576\nqueuedchunks.max=10\nfetcher.backoff.ms=10\nconsumer.timeout.ms=5000\n",
        zk.connect_string()
    );
    properties(&text, ConsumerConfig::from_properties)
}

/// The mirror's producer into the cluster of `zk` (async, durable acks, as the mirror runs it).
pub fn mirror_producer_config(zk: &ZooKeeper) -> ProducerConfig {
    let text = format!("zk.connect={}\nproducer.type=async\nbatch.size=200\nqueue.size=20000\nqueue.time=50\nqueue.enqueueTimeout.ms=-1\ndurable.acks=true\n", zk.connect_string());
    properties(&text, ProducerConfig::from_properties)
}

/// A broker on a thread and runtime of its own (as in its own process), its threads named
/// [`tributary_tests::bench::BROKER_THREAD_NAME`] so that their CPU time can be told apart from
/// the component measured. [`BenchBroker::stop`] stops it and waits for it.
pub struct BenchBroker {
    /// The port it listens on.
    pub port: u16,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl BenchBroker {
    /// Starts a broker with `config` and waits until it listens.
    pub fn start(config: BrokerConfig) -> Self {
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(tributary_tests::bench::BROKER_THREAD_NAME.into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name(tributary_tests::bench::BROKER_THREAD_NAME)
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async move {
                    let broker = Broker::start(TokioEnv, config).await.expect("broker");
                    port_tx.send(broker.addr.port()).expect("port");
                    broker
                        .run_until(async { drop(stop_rx.await) })
                        .await
                        .expect("broker run");
                });
            })
            .expect("broker thread");
        let port = port_rx.recv().expect("the broker did not start");
        BenchBroker { port, stop, thread }
    }

    /// Stops the broker and waits for its thread; a broker that failed fails the bench.
    pub fn stop(self) {
        drop(self.stop);
        self.thread.join().expect("the broker thread panicked");
    }
}

/// How the benches run the mirror: `consumer` reading the source, the mirror's producer into
/// the cluster of `target`, topics by `whitelist`, 2 streams, one producer, a commit every
/// second, no summary lines, no observer, metrics or identity check.
pub fn bench_mirror_settings(
    consumer: ConsumerConfig,
    target: &ZooKeeper,
    whitelist: String,
) -> tributary::mirror::MirrorSettings {
    tributary::mirror::MirrorSettings {
        sources: vec![consumer],
        producer: mirror_producer_config(target),
        filter: tributary::consumer::Subscription::Whitelist(whitelist, 0),
        streams: 2,
        producers: 1,
        commit_interval: std::time::Duration::from_secs(1),
        summary_interval: std::time::Duration::from_secs(3600),
        observer: None,
        metrics: None,
        target_identity: None,
        target_zookeeper: None,
    }
}

/// Runs `producer-perf` as the benches do (`--async`, 200-message batches, no compression, no
/// acknowledgements, no report lines): `messages` of `message_size` bytes to `topic` through
/// `brokerinfo` from `threads` tasks. Bytes per second; a message not delivered fails the bench.
pub async fn producer_perf_rate(
    brokerinfo: String,
    topic: TopicName,
    messages: u64,
    message_size: usize,
    threads: u32,
) -> f64 {
    let args = tributary_tools::perf::ProducerPerfArgs {
        brokerinfo,
        topic,
        messages,
        message_size,
        vary_message_size: false,
        async_mode: true,
        batch_size: 200,
        threads,
        compression_codec: 0,
        acks: false,
        reporting_interval: 5000,
        show_detailed_stats: false,
        hide_header: true,
        date_format: tributary_tools::date_format::PERF_DEFAULT.to_string(),
        stray: Default::default(),
        tls: Default::default(),
        zk_security: Default::default(),
    };
    let start = std::time::Instant::now();
    let (delivered, failed) = tributary_tools::perf::producer_perf(&args, &mut std::io::sink())
        .await
        .expect("producer-perf");
    assert_eq!(
        (delivered, failed),
        (messages, 0),
        "producer-perf lost messages"
    );
    (messages as usize * message_size) as f64 / start.elapsed().as_secs_f64()
}
