//! `producer-perf` and `consumer-perf`: 0.7.1's ProducerPerformance and ConsumerPerformance,
//! with their options and output columns; the load generators of the benchmarks.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tributary::consumer::{self, ConsumerConnector, ConsumerError, Subscription};
use tributary::env::{Env, TokioEnv};
use tributary::producer::{self, Producer, Record, SendError};
use tributary_core::config::{
    ConsumerConfig, Discovery, LoadError, ProducerConfig, Properties, ZkSecurity,
};
use tributary_core::wire::TopicName;

use crate::cli::runtime;
use crate::date_format::{DateFormat, DateFormatError, PERF_DEFAULT};
use crate::error::ToolError;

/// Why `producer-perf` or `consumer-perf` could not run.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// The options do not make a valid client configuration.
    #[error(transparent)]
    Config(#[from] LoadError),
    /// A producer could not start.
    #[error(transparent)]
    ProducerStart(#[from] producer::StartError),
    /// A message could not be handed to its producer.
    #[error(transparent)]
    NotSent(#[from] SendError),
    /// The consumer could not join its group.
    #[error(transparent)]
    ConsumerStart(#[from] consumer::StartError),
    /// A sending or consuming task panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// The output could not be written.
    #[error(transparent)]
    Output(#[from] std::io::Error),
    /// `--date-format` has a letter that is not formatted.
    #[error(transparent)]
    DateFormat(#[from] DateFormatError),
    /// `--zk-tls-config-file` cannot be used (the error names the file and key).
    #[error(transparent)]
    ZkSecurity(Box<ToolError>),
    /// The group's state from an earlier run could not be removed.
    #[error(transparent)]
    ForgetGroup(#[from] crate::console_consumer::ConsumeError),
}

/// 0.7's default date format, `yyyy-MM-dd HH:mm:ss:SSS`, in UTC.
pub fn format_time(at: SystemTime) -> String {
    DateFormat::perf_default().format(at)
}

/// Bytes in MB as 0.7's perf tools count them (2^20).
pub(crate) fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Runs `producer-perf`; prints 0.7.1's columns; returns (messages delivered, failed).
pub async fn producer_perf(
    options: &ProducerPerfArgs,
    out: &mut impl Write,
) -> Result<(u64, u64), PerfError> {
    let text = format!(
        "{}\nproducer.type={}\nbatch.size={}\ncompression.codec={}\ndurable.acks={}\nqueue.enqueueTimeout.ms=-1\nqueue.time=100\nnum.retries=3\n",
        options.brokerinfo,
        if options.async_mode { "async" } else { "sync" },
        options.batch_size,
        options.compression_codec,
        options.acks
    ) + &options.tls.properties();
    let props = Properties::parse("producer-perf options", &text).map_err(LoadError::from)?;
    let mut config = ProducerConfig::from_properties(&props).map_err(LoadError::from)?;
    if let Discovery::ZooKeeper(zk) = &mut config.discovery {
        options
            .zk_security
            .apply(zk)
            .map_err(|e| PerfError::ZkSecurity(Box::new(e)))?;
    }
    let dates = DateFormat::parse(&options.date_format)?;
    if !options.hide_header {
        let header = if options.show_detailed_stats {
            "time, compression, thread.id, message.size, batch.size, total.data.sent.in.MB, MB.sec, total.data.sent.in.nMsg, nMsg.sec"
        } else {
            "start.time, end.time, compression, message.size, batch.size, total.data.sent.in.MB, MB.sec, total.data.sent.in.nMsg, nMsg.sec"
        };
        writeln!(out, "{header}")?;
    }
    let (started, start) = (SystemTime::now(), Instant::now());
    let (bytes, delivered, failed) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    if options.vary_message_size {
        tracing::info!(target: "kafka.perf.ProducerPerformance$", "WARN: Throughput will be slower due to changing message size per request");
    }
    let threads = options.threads.max(1) as u64;
    let seed = TokioEnv.rng_seed();
    // Detailed rows are printed as the threads make them, as 0.7.2's threads print them.
    let (rows_tx, mut rows_rx) = tokio::sync::mpsc::channel::<String>(1024);
    let mut tasks = Vec::new();
    for thread in 0..threads {
        let count = options.messages / threads + u64::from(thread < options.messages % threads);
        let (config, options, bytes, delivered, failed, dates, rows) = (
            config.clone(),
            options.clone(),
            bytes.clone(),
            delivered.clone(),
            failed.clone(),
            dates.clone(),
            rows_tx.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let producer = Producer::start(TokioEnv, config).await?;
            let mut pending = std::collections::VecDeque::new();
            let mut payloads = Payloads::new(&options, seed.wrapping_add(thread));
            let mut progress = ThreadProgress::new(Instant::now());
            tracing::debug!(target: CHECKSUM_TARGET, "Messages per thread = {count}");
            // Sync: `--batch-size` messages per request, each request waited for (0.7.2's
            // sync ProducerPerformance). Async: one message at a time into the queue.
            let per_request = if options.async_mode {
                1
            } else {
                options.batch_size.max(1) as u64
            };
            let mut left = count;
            while left > 0 {
                let n = left.min(per_request);
                left -= n;
                let mut records = Vec::new();
                let mut sizes = Vec::new();
                for _ in 0..n {
                    let payload = payloads.next();
                    if tracing::enabled!(target: CHECKSUM_TARGET, tracing::Level::DEBUG) {
                        let crc = tributary_core::message::Message::new(payload.clone()).crc;
                        tracing::debug!(target: CHECKSUM_TARGET, "{}-checksum:{crc}", options.topic);
                    }
                    sizes.push(payload.len() as u64);
                    records.push(Record::new(options.topic.clone(), payload));
                }
                let deliveries = producer.send_all(records).await?;
                for (delivery, size) in deliveries.into_iter().zip(sizes) {
                    progress.handed_over(size);
                    pending.push_back((delivery, size));
                }
                // Bounded in-flight: settle the oldest when many are waiting.
                while pending.len() > 10_000 || (!options.async_mode && !pending.is_empty()) {
                    settle(pending.pop_front(), &bytes, &delivered, &failed).await;
                }
                if options.show_detailed_stats
                    && progress
                        .messages
                        .is_multiple_of(options.reporting_interval.max(1))
                {
                    let (mb_per_sec, messages_per_sec) = progress.interval(Instant::now());
                    let row = format!(
                        "{}, {}, {thread}, {}, {}, {:.2}, {mb_per_sec:.4}, {}, {messages_per_sec:.4}",
                        dates.format(SystemTime::now()),
                        options.compression_codec,
                        options.message_size,
                        options.batch_size,
                        mb(progress.bytes),
                        progress.messages,
                    );
                    // The receiver lives until every task ended.
                    let _ = rows.send(row).await;
                }
            }
            while let Some(next) = pending.pop_front() {
                settle(Some(next), &bytes, &delivered, &failed).await;
            }
            producer.close().await;
            Ok::<_, PerfError>(())
        }));
    }
    drop(rows_tx);
    while let Some(row) = rows_rx.recv().await {
        writeln!(out, "{row}")?;
    }
    for task in tasks {
        task.await??;
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let (sent_bytes, sent) = (
        bytes.load(Ordering::Relaxed),
        delivered.load(Ordering::Relaxed),
    );
    if !options.show_detailed_stats {
        writeln!(
            out,
            "{}, {}, {}, {}, {}, {:.2}, {:.4}, {sent}, {:.4}",
            dates.format(started),
            dates.format(SystemTime::now()),
            options.compression_codec,
            options.message_size,
            options.batch_size,
            mb(sent_bytes),
            mb(sent_bytes) / secs,
            sent as f64 / secs
        )?;
    }
    Ok((sent, failed.load(Ordering::Relaxed)))
}

/// One sending thread's progress for its detailed rows, as 0.7.2 counts it: what it handed to
/// its producer so far, and the rates over the last reporting interval.
struct ThreadProgress {
    bytes: u64,
    messages: u64,
    last: (Instant, u64, u64),
}

impl ThreadProgress {
    fn new(now: Instant) -> Self {
        ThreadProgress {
            bytes: 0,
            messages: 0,
            last: (now, 0, 0),
        }
    }

    fn handed_over(&mut self, size: u64) {
        self.bytes += size;
        self.messages += 1;
    }

    /// MB/s and messages/s since the last call (or the start), which becomes the new start.
    fn interval(&mut self, now: Instant) -> (f64, f64) {
        let (at, bytes, messages) = self.last;
        let secs = now.duration_since(at).as_secs_f64().max(1e-9);
        self.last = (now, self.bytes, self.messages);
        (
            mb(self.bytes - bytes) / secs,
            (self.messages - messages) as f64 / secs,
        )
    }
}

/// The log target of the per-message checksum line (`<topic>-checksum:<crc>`, debug), named
/// after the logger 0.7.2's broker-failure test enables for it, so `RUST_LOG=kafka=debug`,
/// `RUST_LOG=kafka.perf.ProducerPerformance$=debug` and the full name all turn it on.
pub const CHECKSUM_TARGET: &str = "kafka.perf.ProducerPerformance$ProducerThread";

/// One sending task's payloads, as 0.7.2's ProducerPerformance makes them: `--message-size`
/// zero bytes each, or with `--vary-message-size` random bytes of a random size below
/// `--message-size` (a draw of 0 gives 5 bytes), so every varied message has its own checksum.
struct Payloads {
    fixed: Option<bytes::Bytes>,
    size_bound: usize,
    rng: rand_chacha::ChaCha8Rng,
}

impl Payloads {
    fn new(options: &ProducerPerfArgs, seed: u64) -> Self {
        use rand::SeedableRng;
        Payloads {
            fixed: (!options.vary_message_size)
                .then(|| bytes::Bytes::from(vec![0u8; options.message_size])),
            size_bound: options.message_size.max(1),
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn next(&mut self) -> bytes::Bytes {
        use rand::{Rng, RngCore};
        if let Some(fixed) = &self.fixed {
            return fixed.clone();
        }
        let size = match self.rng.random_range(0..self.size_bound) {
            0 => 5,
            size => size,
        };
        let mut payload = vec![0u8; size];
        self.rng.fill_bytes(&mut payload);
        payload.into()
    }
}

async fn settle(
    next: Option<(tributary::producer::Delivery, u64)>,
    bytes: &AtomicU64,
    delivered: &AtomicU64,
    failed: &AtomicU64,
) {
    let Some((delivery, size)) = next else { return };
    match delivery.await {
        Ok(_) => {
            bytes.fetch_add(size, Ordering::Relaxed);
            delivered.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                eprintln!("not delivered: {e}");
            }
        }
    }
}

/// What `consumer-perf` does.
#[derive(Debug, Clone)]
pub struct ConsumerPerfOptions {
    /// ZooKeeper of the cluster.
    pub zookeeper: String,
    /// The topic.
    pub topic: TopicName,
    /// The group.
    pub group: String,
    /// `fetch.size`.
    pub fetch_size: u32,
    /// Start from the latest offset instead of the earliest.
    pub from_latest: bool,
    /// `socket.buffersize`.
    pub socket_buffer_size: u32,
    /// Streams.
    pub threads: u32,
    /// Stop after this many messages (else after 5 s without one).
    pub messages: Option<u64>,
    /// No header line.
    pub hide_header: bool,
    /// A row per stream every this many messages it read (and at its end), instead of the
    /// summary row (`--show-detailed-stats`).
    pub report_every: Option<u64>,
    /// How times are printed.
    pub dates: DateFormat,
    /// TLS settings for the consumer, as `.properties` lines (empty: plaintext).
    pub tls_properties: String,
    /// ZooKeeper's security (`--zk-tls-config-file`), when given.
    pub zk_security: Option<Box<ZkSecurity>>,
}

/// Runs `consumer-perf`: removes the group's state first (as 0.7.2 does), then reads and
/// prints 0.7.1's columns; returns (messages, bytes).
pub async fn consumer_perf(
    options: &ConsumerPerfOptions,
    out: &mut impl Write,
) -> Result<(u64, u64), PerfError> {
    let text = format!(
        "zk.connect={}\ngroupid={}\nfetch.size={}\nsocket.buffersize={}\nautooffset.reset={}\nconsumer.timeout.ms=5000\n",
        options.zookeeper,
        options.group,
        options.fetch_size,
        options.socket_buffer_size,
        if options.from_latest { "largest" } else { "smallest" }
    ) + &options.tls_properties;
    let props = Properties::parse("consumer-perf options", &text).map_err(LoadError::from)?;
    let mut config = ConsumerConfig::from_properties(&props).map_err(LoadError::from)?;
    if let Some(security) = &options.zk_security {
        config.zk_connect.security = security.clone();
    }
    // As 0.7.2: every run starts from the group's reset point, not where the last one stopped.
    crate::console_consumer::forget_group(&config).await?;
    let subscription = Subscription::Topics(
        [(options.topic.clone(), options.threads.max(1))]
            .into_iter()
            .collect(),
    );
    let (connector, streams) = ConsumerConnector::start(TokioEnv, config, subscription).await?;
    if !options.hide_header {
        // 0.7.2's detailed header names six columns for rows of seven (the thread is the
        // second); kept as 0.7.2 prints it.
        let header = match options.report_every {
            Some(_) => "time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec",
            None => "start.time, end.time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec",
        };
        writeln!(out, "{header}")?;
    }
    let (messages, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (started, start) = (SystemTime::now(), Instant::now());
    let last = Arc::new(std::sync::Mutex::new(start));
    // Detailed rows go out as they are made, as 0.7.2 printed them (a bounded queue: a slow
    // output slows the streams rather than filling memory).
    let (rows_tx, mut rows_rx) = tokio::sync::mpsc::channel::<String>(1024);
    let mut tasks = Vec::new();
    for (thread, mut stream) in streams.into_iter().enumerate() {
        let (messages, bytes, limit, last, options, rows) = (
            messages.clone(),
            bytes.clone(),
            options.messages,
            last.clone(),
            options.clone(),
            rows_tx.clone(),
        );
        tasks.push(tokio::spawn(async move {
            // This stream's own counts, for its detailed rows (0.7.2's columns: time, thread,
            // fetch size, MB so far, MB/s and messages/s over the interval, messages so far).
            let (mut read, mut read_bytes) = (0u64, 0u64);
            let (mut since, mut since_read, mut since_bytes) = (Instant::now(), 0u64, 0u64);
            let mut row = |read: u64, read_bytes: u64| {
                let secs = since.elapsed().as_secs_f64().max(1e-3);
                let line = format!(
                    "{}, {thread}, {}, {:.4}, {:.4}, {read}, {:.4}",
                    options.dates.format(SystemTime::now()),
                    options.fetch_size,
                    mb(read_bytes),
                    mb(read_bytes - since_bytes) / secs,
                    (read - since_read) as f64 / secs
                );
                (since, since_read, since_bytes) = (Instant::now(), read, read_bytes);
                line
            };
            loop {
                if limit.is_some_and(|l| messages.load(Ordering::Relaxed) >= l) {
                    break;
                }
                match stream.next().await {
                    Ok(m) => {
                        bytes.fetch_add(m.payload.len() as u64, Ordering::Relaxed);
                        messages.fetch_add(1, Ordering::Relaxed);
                        *tributary::sync::lock(&last, "the consumer-perf clock") = Instant::now();
                        read += 1;
                        read_bytes += m.payload.len() as u64;
                        if options.report_every.is_some_and(|every| read % every == 0) {
                            // The receiver lives until every task ended.
                            let _ = rows.send(row(read, read_bytes)).await;
                        }
                    }
                    Err(ConsumerError::Timeout(_)) | Err(ConsumerError::Closed) => break,
                    Err(e) => eprintln!("{e}"),
                }
            }
            if options.report_every.is_some() {
                let _ = rows.send(row(read, read_bytes)).await;
            }
        }));
    }
    drop(rows_tx);
    while let Some(row) = rows_rx.recv().await {
        writeln!(out, "{row}")?;
    }
    for task in tasks {
        task.await?;
    }
    connector.shutdown().await;
    // Like 0.7, the time counts until the last message (not the final timeout).
    let end = *tributary::sync::lock(&last, "the consumer-perf clock");
    let secs = end.duration_since(start).as_secs_f64().max(1e-9);
    let ended = started + end.duration_since(start);
    let (n, b) = (
        messages.load(Ordering::Relaxed),
        bytes.load(Ordering::Relaxed),
    );
    if options.report_every.is_some() {
        return Ok((n, b));
    }
    writeln!(
        out,
        "{}, {}, {}, {:.4}, {:.4}, {n}, {:.4}",
        options.dates.format(started),
        options.dates.format(ended),
        options.fetch_size,
        mb(b),
        mb(b) / secs,
        n as f64 / secs
    )?;
    Ok((n, b))
}

/// What `producer-perf` does: `tributary producer-perf`'s arguments (0.7.1's
/// ProducerPerformance flags, and `--acks`).
#[derive(Debug, Clone, clap::Args)]
pub struct ProducerPerfArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// TLS to the brokers (`--security.protocol=ssl`, `--ssl.*`).
    #[command(flatten)]
    pub tls: crate::cli::BrokerTlsArgs,
    /// zk.connect=HOST:PORT[/CHROOT] or broker.list=id:host:port,...
    #[arg(long)]
    pub brokerinfo: String,
    /// The topic.
    #[arg(long)]
    pub topic: TopicName,
    /// Messages to send in all.
    #[arg(long)]
    pub messages: u64,
    /// Bytes per message.
    #[arg(long = "message-size", default_value_t = 100)]
    pub message_size: usize,
    /// Random sizes below --message-size (a draw of 0 gives 5 bytes) and random bytes, as 0.7.2.
    #[arg(long = "vary-message-size")]
    pub vary_message_size: bool,
    /// Use the async producer.
    #[arg(long = "async")]
    pub async_mode: bool,
    /// Messages per request.
    #[arg(long = "batch-size", default_value_t = 200)]
    pub batch_size: u32,
    /// Sending tasks, each with its own producer.
    #[arg(long, default_value_t = 10)]
    pub threads: u32,
    /// 0 none, 1 gzip, 2 snappy.
    #[arg(long = "compression-codec", default_value_t = 0)]
    pub compression_codec: u8,
    /// Wait for durable acknowledgements (Tributary).
    #[arg(long)]
    pub acks: bool,
    /// Messages between detailed lines.
    #[arg(long = "reporting-interval", default_value_t = 5000)]
    pub reporting_interval: u64,
    /// A line per reporting interval and thread.
    #[arg(long = "show-detailed-stats")]
    pub show_detailed_stats: bool,
    /// Do not print the header line.
    #[arg(long = "hide-header")]
    pub hide_header: bool,
    /// How times are printed (Java's SimpleDateFormat letters, in UTC).
    #[arg(long = "date-format", default_value = PERF_DEFAULT)]
    pub date_format: String,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: crate::cli::StrayWords,
}

/// Runs `producer-perf` as `args` asks, printing 0.7.1's columns to standard output. Exit code
/// 1 (after saying how many on standard error) when any message was not delivered; `Err` for a
/// wrong `--brokerinfo` or a run that could not start.
pub fn run_producer_perf_cli(args: ProducerPerfArgs) -> Result<ExitCode, ToolError> {
    args.stray.warn("producer-perf");
    if !(args.brokerinfo.starts_with("zk.connect=") || args.brokerinfo.starts_with("broker.list="))
    {
        return Err(ToolError::Usage(format!(
            "--brokerinfo {}: expected zk.connect=HOST:PORT or broker.list=id:host:port,...",
            args.brokerinfo
        )));
    }
    let (_, failed) = runtime(None)?
        .block_on(producer_perf(&args, &mut std::io::stdout()))
        .map_err(ToolError::failed)?;
    if failed > 0 {
        eprintln!("{failed} messages not delivered");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// `tributary consumer-perf`'s arguments (0.7.1's ConsumerPerformance flags).
#[derive(Debug, clap::Args)]
pub struct ConsumerPerfArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// TLS to the brokers (`--security.protocol=ssl`, `--ssl.*`).
    #[command(flatten)]
    pub tls: crate::cli::BrokerTlsArgs,
    /// ZooKeeper: HOST:PORT[/CHROOT].
    #[arg(long)]
    pub zookeeper: String,
    /// The topic.
    #[arg(long)]
    pub topic: TopicName,
    /// The group (default: a new perf-consumer-<n>).
    #[arg(long)]
    pub group: Option<String>,
    /// Bytes per partition per fetch.
    #[arg(long = "fetch-size", default_value_t = 1024 * 1024)]
    pub fetch_size: u32,
    /// Start at the latest offset instead of the earliest.
    #[arg(long = "from-latest")]
    pub from_latest: bool,
    /// Socket receive buffer of fetch connections.
    #[arg(long = "socket-buffer-size", default_value_t = 2 * 1024 * 1024)]
    pub socket_buffer_size: u32,
    /// Streams.
    #[arg(long, default_value_t = 10)]
    pub threads: u32,
    /// Stop after this many messages (default: after 5 s without one).
    #[arg(long)]
    pub messages: Option<u64>,
    /// Do not print the header line.
    #[arg(long = "hide-header")]
    pub hide_header: bool,
    /// Messages a stream reads between its detailed rows.
    #[arg(long = "reporting-interval", default_value_t = 5000)]
    pub reporting_interval: u64,
    /// A row per stream every --reporting-interval messages, instead of the summary.
    #[arg(long = "show-detailed-stats")]
    pub show_detailed_stats: bool,
    /// How times are printed (Java's SimpleDateFormat letters, in UTC).
    #[arg(long = "date-format", default_value = PERF_DEFAULT)]
    pub date_format: String,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: crate::cli::StrayWords,
}

/// Runs `consumer-perf` as `args` asks, printing 0.7.1's columns to standard output. `Err` when
/// the consumer could not run.
pub fn run_consumer_perf_cli(args: ConsumerPerfArgs) -> Result<ExitCode, ToolError> {
    let ConsumerPerfArgs {
        zookeeper,
        topic,
        group,
        fetch_size,
        from_latest,
        socket_buffer_size,
        threads,
        messages,
        hide_header,
        reporting_interval,
        show_detailed_stats,
        date_format,
        stray,
        tls,
        zk_security,
    } = args;
    stray.warn("consumer-perf");
    let dates = DateFormat::parse(&date_format).map_err(ToolError::failed)?;
    let group = group.unwrap_or_else(|| format!("perf-consumer-{}", TokioEnv.rng_seed() % 100_000));
    let options = ConsumerPerfOptions {
        zookeeper,
        topic,
        group,
        fetch_size,
        from_latest,
        socket_buffer_size,
        threads,
        messages,
        hide_header,
        report_every: show_detailed_stats.then_some(reporting_interval.max(1)),
        dates,
        tls_properties: tls.properties(),
        zk_security: zk_security.security()?,
    };
    runtime(None)?
        .block_on(consumer_perf(&options, &mut std::io::stdout()))
        .map_err(ToolError::failed)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn times_print_in_0_7s_default_format() {
        assert_eq!(format_time(UNIX_EPOCH), "1970-01-01 00:00:00:000");
        assert_eq!(
            format_time(UNIX_EPOCH + Duration::from_millis(1_325_376_000_123)),
            "2012-01-01 00:00:00:123"
        );
        assert_eq!(
            format_time(UNIX_EPOCH + Duration::from_millis(951_782_400_000)),
            "2000-02-29 00:00:00:000"
        );
    }
}
