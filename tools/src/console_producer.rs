//! `console-producer`: lines of standard input to a topic, through the producer (0.7.2's
//! ConsoleProducer): async by default (`--sync` for one request per line), optional compression
//! and durable acknowledgements. Every line's fate is known at the end: the tool says how many
//! were delivered and fails if any was not. ^C or SIGTERM ends the input and, as 0.7.2's
//! shutdown hook does, sends what is queued before exiting: the lines already read are sent,
//! input not yet read stays unread, and a line begun but not ended is said on standard error. Lines are split as Java's `readLine` splits them and sent as the
//! bytes they are ([`crate::line_reader`]).

use std::process::ExitCode;
use std::time::Duration;

use tokio::io::AsyncRead;
use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record, StartError};
use tributary_core::config::{
    BrokerEndpoint, Discovery, LoadError, ProducerConfig, Properties, ZkConnect, ZkSecurity,
};
use tributary_core::message::CompressionCodec;
use tributary_core::wire::TopicName;

use crate::cli::{
    finish_unless_stopped_twice, listen_for_stop, next_stop, runtime, StopSignal, StopSignals,
};
use crate::error::ToolError;
use crate::line_reader::{Line, LineReader};

/// Why standard input could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// The options do not make a valid producer configuration.
    #[error(transparent)]
    Config(#[from] LoadError),
    /// The producer could not start.
    #[error(transparent)]
    Start(#[from] StartError),
}

/// How to send.
#[derive(Debug, Clone)]
pub struct ConsoleProducerOptions {
    /// `zk.connect` or `broker.list`, as a producer.properties line.
    pub discovery: String,
    /// The topic.
    pub topic: TopicName,
    /// One request per line instead of async batches.
    pub sync: bool,
    /// `compression.codec`.
    pub codec: u8,
    /// `batch.size`.
    pub batch_size: usize,
    /// `queue.time` in ms.
    pub queue_time_ms: u64,
    /// Wait for each batch to be durable on the broker (`durable.acks`).
    pub acks: bool,
    /// Extra `key=value` producer settings.
    pub properties: Vec<String>,
    /// ZooKeeper's security from `--zk-tls-config-file`, when given (brokers from ZooKeeper);
    /// without it, the `zk.*` keys among `properties` apply.
    pub zk_security: Option<Box<ZkSecurity>>,
}

/// What was sent, and how the run ended.
#[derive(Debug, Default)]
pub struct Sent {
    /// Lines delivered.
    pub delivered: u64,
    /// Lines that could not be delivered (each reported on standard error).
    pub failed: u64,
    /// Lines handed to the producer whose outcome was not awaited (a second stop signal).
    pub unconfirmed: u64,
    /// The signal that ended the input early, if one did.
    pub stopped_by: Option<StopSignal>,
    /// Why standard input could not be read to its end, if it could not.
    pub input_error: Option<std::io::Error>,
}

impl ConsoleProducerOptions {
    /// The producer configuration these options mean.
    pub fn config(&self) -> Result<ProducerConfig, LoadError> {
        let mut text = format!(
            "{}\nproducer.type={}\ncompression.codec={}\nbatch.size={}\nqueue.time={}\ndurable.acks={}\n\
             queue.enqueueTimeout.ms=-1\nnum.retries=3\n",
            self.discovery,
            if self.sync { "sync" } else { "async" },
            self.codec,
            self.batch_size.max(1),
            self.queue_time_ms,
            self.acks,
        );
        for property in &self.properties {
            text.push_str(property);
            text.push('\n');
        }
        let props = Properties::parse("console-producer options", &text)?;
        let mut config = ProducerConfig::from_properties(&props)?;
        if let (Discovery::ZooKeeper(zk), Some(security)) =
            (&mut config.discovery, &self.zk_security)
        {
            zk.security = security.clone();
        }
        Ok(config)
    }
}

/// Sends the lines of `input` per `options` until its end, a read error or a stop signal from
/// `signals`. As 0.7.2's shutdown hook does, a first signal ends the input (the lines already
/// read are sent; nothing more is read), closes the producer (what is queued is sent) and
/// waits for every line's outcome. A second signal stops all waiting: the lines whose outcome
/// is not known yet are counted in [`Sent::unconfirmed`], never dropped without a word.
pub async fn produce(
    options: &ConsoleProducerOptions,
    input: impl AsyncRead + Unpin,
    signals: &mut Option<StopSignals>,
) -> Result<Sent, ProduceError> {
    let config = options.config()?;
    let limit = usize::try_from(config.max_message_bytes).unwrap_or(usize::MAX);
    let mut sent = Sent::default();
    let start = Producer::start(TokioEnv, config);
    let Some(producer) = finish_unless_stopped_twice(start, signals, &mut sent.stopped_by).await
    else {
        return Ok(sent);
    };
    let producer = producer?;
    tracing::debug!("console-producer: reading standard input");
    let mut lines = LineReader::new(input, limit);
    let mut deliveries = Vec::new();
    // A second signal came: nothing more is waited for.
    let mut cut = false;
    loop {
        let line = if sent.stopped_by.is_some() {
            lines.next_buffered_line().await
        } else {
            // `next_line` is cancel-safe: a signal never loses part of a line already read.
            tokio::select! {
                line = lines.next_line() => line,
                signal = next_stop(signals) => {
                    sent.stopped_by = Some(signal);
                    continue;
                }
            }
        };
        let line = match line {
            Ok(Some(Line::Bytes(line))) => line,
            Ok(Some(Line::TooLong { number, bytes })) => {
                eprintln!("not sent: line {number} is {bytes} bytes, more than max.message.size ({limit})");
                sent.failed += 1;
                continue;
            }
            Ok(None) => break,
            Err(e) => {
                sent.input_error = Some(e);
                break;
            }
        };
        // Handing over waits while the queue is full: signals are seen meanwhile too.
        let send = producer.send(Record::new(options.topic.clone(), line));
        match finish_unless_stopped_twice(send, signals, &mut sent.stopped_by).await {
            Some(Ok(delivery)) => deliveries.push(delivery),
            Some(Err(e)) => {
                eprintln!("not sent: {e}");
                sent.failed += 1;
            }
            None => {
                sent.unconfirmed += 1;
                cut = true;
                break;
            }
        }
        // Keep memory bounded on long inputs: settle what was handed over so far.
        if deliveries.len() >= SETTLE_EVERY && !settle(&mut deliveries, &mut sent, signals).await {
            cut = true;
            break;
        }
    }
    if cut {
        // Complete lines already read but never handed over: said and counted, not dropped.
        let mut read_not_sent = 0u64;
        while let Ok(Some(_)) = lines.next_buffered_line().await {
            read_not_sent += 1;
        }
        if read_not_sent > 0 {
            eprintln!("not sent: {read_not_sent} lines read before the second signal");
            sent.failed += read_not_sent;
        }
    }
    if sent.stopped_by.is_some() && lines.partial_bytes() > 0 {
        eprintln!(
            "not sent: a line begun but not ended when stopped ({} bytes)",
            lines.partial_bytes()
        );
    }
    if !cut {
        let close = producer.close();
        cut = finish_unless_stopped_twice(close, signals, &mut sent.stopped_by)
            .await
            .is_none();
    }
    if cut || !settle(&mut deliveries, &mut sent, signals).await {
        take_known(deliveries, &mut sent);
        eprintln!(
            "stopped again: {} lines not confirmed delivered",
            sent.unconfirmed
        );
    }
    Ok(sent)
}

/// Deliveries awaited at once, at most.
const SETTLE_EVERY: usize = 10_000;
/// How long the deliveries settled at once may take to resolve before the tool gives up on
/// the rest (counted as not confirmed).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

/// Waits for every delivery, counting outcomes (each failure said on standard error). A first
/// stop signal meanwhile is recorded and the wait goes on; a second ends it (`false`): the
/// delivery being waited for counts as unconfirmed and the rest are left in `deliveries`.
async fn settle(
    deliveries: &mut Vec<tributary::producer::Delivery>,
    sent: &mut Sent,
    signals: &mut Option<StopSignals>,
) -> bool {
    // One deadline for the whole batch: stuck deliveries do not add up their waits.
    let deadline = tokio::time::Instant::now() + DELIVERY_TIMEOUT;
    let mut timed_out = 0u64;
    let mut pending = std::mem::take(deliveries).into_iter();
    while let Some(delivery) = pending.next() {
        let wait = tokio::time::timeout_at(deadline, delivery);
        let Some(outcome) = finish_unless_stopped_twice(wait, signals, &mut sent.stopped_by).await
        else {
            sent.unconfirmed += 1 + timed_out;
            deliveries.extend(pending);
            return false;
        };
        match outcome {
            Ok(Ok(_)) => sent.delivered += 1,
            Ok(Err(e)) => {
                eprintln!("not delivered: {e}");
                sent.failed += 1;
            }
            // The producer may still deliver it: not known, so not confirmed.
            Err(_) => timed_out += 1,
        }
    }
    if timed_out > 0 {
        eprintln!("not confirmed: {timed_out} lines had no outcome within {DELIVERY_TIMEOUT:?}");
        sent.unconfirmed += timed_out;
    }
    true
}

/// Counts the outcomes already known, without waiting; the rest are unconfirmed.
fn take_known(deliveries: Vec<tributary::producer::Delivery>, sent: &mut Sent) {
    for mut delivery in deliveries {
        match delivery.try_take() {
            Some(Ok(_)) => sent.delivered += 1,
            Some(Err(e)) => {
                eprintln!("not delivered: {e}");
                sent.failed += 1;
            }
            None => sent.unconfirmed += 1,
        }
    }
}

/// `tributary console-producer`'s arguments (0.7.2's ConsoleProducer flags, and `--acks`).
#[derive(Debug, clap::Args)]
pub struct ConsoleProducerArgs {
    /// TLS to the brokers (`--security.protocol=ssl`, `--ssl.*`).
    #[command(flatten)]
    pub tls: crate::cli::BrokerTlsArgs,
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// The topic.
    #[arg(long)]
    pub topic: TopicName,
    /// ZooKeeper of the cluster: HOST:PORT[/CHROOT].
    #[arg(
        long,
        conflicts_with = "broker_list",
        required_unless_present = "broker_list"
    )]
    pub zookeeper: Option<String>,
    /// Brokers: id:host:port[,id:host:port...]; the broker picks the partition.
    #[arg(long = "broker-list")]
    pub broker_list: Option<String>,
    /// Send each line in its own request, waiting for it (default: async batches).
    #[arg(long)]
    pub sync: bool,
    /// Compression codec: 0 none, 1 gzip, 2 snappy; `--compress` alone is gzip (0.7.2's flag).
    #[arg(long, default_value_t = 0, num_args = 0..=1, default_missing_value = "1")]
    pub compress: u8,
    /// Messages per request (async).
    #[arg(long = "batch-size", default_value_t = 200)]
    pub batch_size: usize,
    /// How long a line may wait for its batch to fill, in ms (async; 0.7's --timeout).
    #[arg(long, default_value_t = 1000)]
    pub timeout: u64,
    /// Wait until the brokers have the lines durably (Tributary's acknowledged produce).
    #[arg(long)]
    pub acks: bool,
    /// How a line becomes a message: 0.7.2's kafka.serializer.StringEncoder (the default) or
    /// kafka.serializer.DefaultEncoder; both send the line's bytes.
    #[arg(long = "message-encoder", default_value = STRING_ENCODER)]
    pub message_encoder: String,
    /// How standard input becomes lines: 0.7.2's
    /// kafka.producer.ConsoleProducer$LineMessageReader (the only one).
    #[arg(long = "line-reader", default_value = LINE_READER)]
    pub line_reader: String,
    /// Another producer setting, key=value (repeatable), e.g. num.retries=5.
    #[arg(long = "property")]
    pub properties: Vec<String>,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: crate::cli::StrayWords,
}

/// 0.7.2's default `--message-encoder`.
pub const STRING_ENCODER: &str = "kafka.serializer.StringEncoder";
/// 0.7.2's `--line-reader`.
pub const LINE_READER: &str = "kafka.producer.ConsoleProducer$LineMessageReader";

/// Sends standard input's lines as `args` asks and says on standard error how many were
/// delivered. Exit code 1 when any line was not delivered; `Err` for a wrong flag or a producer
/// that could not start.
pub fn run_cli(args: ConsoleProducerArgs) -> Result<ExitCode, ToolError> {
    let ConsoleProducerArgs {
        topic,
        zookeeper,
        broker_list,
        sync,
        compress,
        batch_size,
        timeout,
        acks,
        message_encoder,
        line_reader,
        properties,
        stray,
        zk_security,
        tls,
    } = args;
    stray.warn("console-producer");
    if message_encoder != STRING_ENCODER && message_encoder != "kafka.serializer.DefaultEncoder" {
        return Err(ToolError::Usage(format!("--message-encoder {message_encoder}: Tributary sends each line's bytes; use {STRING_ENCODER} (the default) or kafka.serializer.DefaultEncoder")));
    }
    if line_reader != LINE_READER {
        return Err(ToolError::Usage(format!(
            "--line-reader {line_reader}: Tributary reads lines; use {LINE_READER} (the default)"
        )));
    }
    CompressionCodec::from_id(compress)
        .ok_or_else(|| ToolError::Usage(format!("--compress {compress}: expected 0, 1 or 2")))?;
    let discovery_is_zk = zookeeper.is_some();
    let discovery = match (zookeeper, broker_list) {
        (Some(zk), _) => format!(
            "zk.connect={}",
            ZkConnect::parse(&zk).map_err(|e| ToolError::flag("--zookeeper", e))?
        ),
        (None, Some(list)) => {
            list.split(',')
                .map(BrokerEndpoint::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ToolError::flag("--broker-list", e))?;
            format!("broker.list={list}")
        }
        (None, None) => return Err(ToolError::Usage("give --zookeeper or --broker-list".into())),
    };
    let options = ConsoleProducerOptions {
        discovery,
        topic: topic.clone(),
        sync,
        codec: compress,
        batch_size,
        queue_time_ms: timeout,
        acks,
        // The TLS flags as settings, after `--property` ones (a flag given wins).
        properties: properties
            .into_iter()
            .chain(tls.pairs().into_iter().map(|(k, v)| format!("{k}={v}")))
            .collect(),
        zk_security: match (&discovery_is_zk, zk_security.security()?) {
            (true, security) => security,
            (false, None) => None,
            (false, Some(_)) => {
                return Err(ToolError::Usage(
                    "--zk-tls-config-file secures ZooKeeper, which --broker-list does not use: give --zookeeper, or leave the file out"
                    .into(),
                ))
            }
        },
    };
    let runtime = runtime(Some(2))?;
    let sent = runtime.block_on(async {
        let mut signals = listen_for_stop("console-producer");
        produce(&options, tokio::io::stdin(), &mut signals).await
    });
    // Standard input is read by a blocking thread that cannot be cancelled: after a signal it
    // may still wait for input (`tail -f`), so the runtime is not waited for.
    runtime.shutdown_background();
    let sent = sent.map_err(ToolError::failed)?;
    let durably = if acks { " (durable)" } else { "" };
    let unconfirmed = match sent.unconfirmed {
        0 => String::new(),
        n => format!("; {n} not confirmed"),
    };
    eprintln!(
        "delivered {} messages to {topic}{durably}; {} not delivered{unconfirmed}",
        sent.delivered, sent.failed
    );
    if let Some(e) = sent.input_error {
        return Err(ToolError::io("reading standard input", e));
    }
    Ok(if sent.failed > 0 || sent.unconfirmed > 0 {
        ExitCode::from(1)
    } else {
        sent.stopped_by.map_or(ExitCode::SUCCESS, |signal| {
            ExitCode::from(signal.exit_code())
        })
    })
}
