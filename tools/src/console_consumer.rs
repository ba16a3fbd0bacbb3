//! `console-consumer`: 0.7.2's ConsoleConsumer on the ZooKeeper consumer group. Prints every
//! message of a topic (or of a whitelist/blacklist) with a formatter, commits as it goes, and on
//! exit (`--max-messages`, `--consumer-timeout-ms`, ^C or SIGTERM) leaves the group cleanly: a
//! final commit, its registrations removed, and a group made up for the run (no `--group`)
//! removed altogether — what 0.7.2's shutdown hook does.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use tributary::consumer::{ConsumerConnector, ConsumerError, StartError, Subscription};
use tributary::coordination::{CoordError, Coordination};
use tributary::env::{Env, TokioEnv};
use tributary_core::config::{ConsumerConfig, LoadError, Properties, ZkConnect};
use tributary_core::message::Message;

use crate::cli::{
    finish_unless_stopped_twice, listen_for_stop, next_stop, runtime, StopSignal, StopSignals,
};
use crate::error::ToolError;

/// 0.7.2's default formatter, by its class name.
pub const NEWLINE_FORMATTER: &str = "kafka.consumer.ConsoleConsumer$NewlineMessageFormatter";

/// 0.7.2's checksum formatter, by its class name.
pub const CHECKSUM_FORMATTER: &str = "kafka.consumer.ConsoleConsumer$ChecksumMessageFormatter";

/// `--property` values that are not `key=value`, as 0.7.2 words it: every value that does not
/// split on `=` into exactly a key and a value (a lone `=` is skipped), all values quoted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Invalid parser arguments: {}", .0.join(" "))]
pub struct InvalidProperties(
    /// Every `--property` value given.
    pub Vec<String>,
);

/// Parses `--property` values as 0.7.2's ConsoleConsumer does (Java's `split("=")`: trailing
/// empty pieces dropped, so `a=` is one piece and refused, `a=b=c` is three and refused, `=` is
/// none and skipped; nothing is trimmed).
pub fn parse_properties(values: &[String]) -> Result<BTreeMap<String, String>, InvalidProperties> {
    let mut parsed = BTreeMap::new();
    for value in values {
        let mut pieces: Vec<&str> = value.split('=').collect();
        while pieces.last() == Some(&"") {
            pieces.pop();
        }
        match pieces.as_slice() {
            [] => continue,
            [key, val] => {
                parsed.insert((*key).to_string(), (*val).to_string());
            }
            _ => return Err(InvalidProperties(values.to_vec())),
        }
    }
    Ok(parsed)
}

/// A `--formatter` that is neither of 0.7's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown formatter {0}: use kafka.consumer.ConsoleConsumer$NewlineMessageFormatter (the default; short name newline) or kafka.consumer.ConsoleConsumer$ChecksumMessageFormatter (short name checksum)")]
pub struct UnknownFormatter(
    /// The name given.
    pub String,
);

/// Why consuming stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    /// The options do not make a valid consumer configuration.
    #[error(transparent)]
    Config(#[from] LoadError),
    /// ZooKeeper could not be reached to remove the group's state (`--from-beginning`).
    #[error(transparent)]
    ForgetConnect(CoordError),
    /// Removing the group's state (`--from-beginning`) failed.
    #[error("{root}: {source}")]
    ForgetGroup {
        /// The group's node.
        root: String,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// The consumer could not join its group.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The consumer started with no stream.
    #[error("no stream")]
    NoStream,
    /// A message could not be written out.
    #[error("writing output: {0}")]
    Output(#[source] std::io::Error),
    /// A message could not be read (without `--skip-message-on-error`).
    #[error(transparent)]
    Consume(#[from] ConsumerError),
}

/// How each message is printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Formatter {
    /// The payload and a newline byte (0.7.2's `ConsoleConsumer$NewlineMessageFormatter`).
    Default,
    /// `[<topic>-]checksum:<crc>` (0.7.2's `ConsoleConsumer$ChecksumMessageFormatter`; the
    /// prefix from `--property topic=<topic>`; the CRC as an unsigned decimal).
    Checksum {
        /// The prefix, `<topic>-` or empty.
        prefix: String,
    },
}

impl Formatter {
    /// The formatter named `name`, configured from `properties`: 0.7.2's class names
    /// (`kafka.consumer.ConsoleConsumer$NewlineMessageFormatter`, `…$ChecksumMessageFormatter`),
    /// the top-level names Tributary accepted before (`kafka.consumer.DefaultMessageFormatter`,
    /// `kafka.consumer.ChecksumMessageFormatter`) and the short names `newline` (or `default`)
    /// and `checksum`.
    pub fn named(
        name: &str,
        properties: &BTreeMap<String, String>,
    ) -> Result<Self, UnknownFormatter> {
        match name {
            NEWLINE_FORMATTER
            | "kafka.consumer.DefaultMessageFormatter"
            | "newline"
            | "default" => Ok(Formatter::Default),
            CHECKSUM_FORMATTER | "kafka.consumer.ChecksumMessageFormatter" | "checksum" => {
                Ok(Formatter::Checksum {
                    prefix: properties
                        .get("topic")
                        .map(|t| format!("{t}-"))
                        .unwrap_or_default(),
                })
            }
            other => Err(UnknownFormatter(other.to_string())),
        }
    }

    /// Writes one message.
    pub fn write(&self, payload: &[u8], out: &mut impl Write) -> std::io::Result<()> {
        match self {
            Formatter::Default => {
                out.write_all(payload)?;
                out.write_all(b"\n")
            }
            Formatter::Checksum { prefix } => writeln!(
                out,
                "{prefix}checksum:{}",
                Message::new(payload.to_vec()).crc
            ),
        }
    }
}

/// What to consume and how.
#[derive(Debug, Clone)]
pub struct ConsoleConsumerOptions {
    /// ZooKeeper of the cluster.
    pub zookeeper: ZkConnect,
    /// What to consume (one stream).
    pub subscription: Subscription,
    /// The group.
    pub group: String,
    /// Start from the beginning: the group's state in ZooKeeper is removed first, and
    /// `autooffset.reset=smallest` (else `largest`).
    pub from_beginning: bool,
    /// Stop after this many messages.
    pub max_messages: Option<u64>,
    /// Consumer settings from the options (`fetch.size`, `socket.buffersize`,
    /// `autocommit.interval.ms`, `consumer.timeout.ms`).
    pub settings: Vec<(String, String)>,
    /// Print an error and go on after a message that cannot be read (else stop).
    pub skip_message_on_error: bool,
    /// The formatter.
    pub formatter: Formatter,
    /// The group was made up for this run (no `--group`): its state is removed at the end.
    pub forget_group_at_exit: bool,
}

impl ConsoleConsumerOptions {
    fn config(&self) -> Result<ConsumerConfig, LoadError> {
        let mut text = format!(
            "zk.connect={}\ngroupid={}\nautooffset.reset={}\n",
            self.zookeeper,
            self.group,
            if self.from_beginning {
                "smallest"
            } else {
                "largest"
            }
        );
        for (key, value) in &self.settings {
            text.push_str(&format!("{key}={value}\n"));
        }
        let props = Properties::parse("console-consumer options", &text)?;
        let mut config = ConsumerConfig::from_properties(&props)?;
        // The connect string as parsed, with `--zk-tls-config-file`'s settings, which `text`
        // cannot carry.
        config.zk_connect = self.zookeeper.clone();
        Ok(config)
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Consumed {
    /// Messages printed.
    pub printed: u64,
    /// The signal that stopped the run, if one did (the group was then left as at any end,
    /// unless a second signal cut the leaving short, which is said on standard error).
    pub stopped_by: Option<StopSignal>,
}

/// Consumes per `options` into `out` until `--max-messages`, the consumer timeout, or a stop
/// signal from `signals`; then leaves the group cleanly (a final offset commit; its
/// registrations removed), as 0.7.2's shutdown hook does, and removes a throw-away group's
/// state ([`ConsoleConsumerOptions::forget_group_at_exit`]). A signal while leaving is recorded
/// (the leaving goes on); a second one stops at once, saying what was not done.
pub async fn consume(
    options: &ConsoleConsumerOptions,
    out: &mut impl Write,
    signals: &mut Option<StopSignals>,
) -> Result<Consumed, ConsumeError> {
    let config = options.config()?;
    if options.from_beginning {
        forget_group(&config).await?;
    }
    let mut consumed = Consumed {
        printed: 0,
        stopped_by: None,
    };
    // Joining is short, and left half-done it would leave a member registered until its
    // session expires: a first signal lets it finish (nothing is consumed after it).
    let start = ConsumerConnector::start(TokioEnv, config.clone(), options.subscription.clone());
    let Some(started) = finish_unless_stopped_twice(start, signals, &mut consumed.stopped_by).await
    else {
        eprintln!("stopped again while joining the group: its registration ends with the ZooKeeper session");
        return Ok(consumed);
    };
    let (connector, mut streams) = started?;
    let Some(stream) = streams.first_mut() else {
        connector.shutdown().await;
        return Err(ConsumeError::NoStream);
    };
    let result = loop {
        if consumed.stopped_by.is_some()
            || options
                .max_messages
                .is_some_and(|max| consumed.printed >= max)
        {
            break Ok(());
        }
        // `next` is cancel-safe: a message is handed out (and counted for the commit) only
        // when it is returned, so one interrupted by a signal is read again next time.
        let next = tokio::select! {
            next = stream.next() => next,
            signal = next_stop(signals) => {
                consumed.stopped_by = Some(signal);
                break Ok(());
            }
        };
        match next {
            Ok(message) => {
                if let Err(e) = options.formatter.write(&message.payload, out) {
                    break Err(ConsumeError::Output(e));
                }
                consumed.printed += 1;
            }
            Err(ConsumerError::Timeout(_)) => break Ok(()),
            Err(ConsumerError::Closed) => break Ok(()),
            Err(e) if options.skip_message_on_error => eprintln!("skipping: {e}"),
            Err(e) => break Err(ConsumeError::Consume(e)),
        }
    };
    let _ = out.flush();
    let left =
        finish_unless_stopped_twice(connector.shutdown(), signals, &mut consumed.stopped_by).await;
    if left.is_none() {
        eprintln!("stopped again: no final offset commit (the group reads again what was printed since the last one)");
        return result.map(|()| consumed);
    }
    leave_throw_away_group(options, &config, signals, &mut consumed.stopped_by).await;
    result.map(|()| consumed)
}

/// Removes the group's state when it was made up for this run (no `--group`), as 0.7.2's
/// shutdown hook does, so ZooKeeper does not fill with `console-consumer-<n>` groups and a later
/// run that draws the same number does not resume at old offsets. A failure is said, not fatal
/// (the messages were printed); a second stop signal cuts the clean-up short, saying so.
async fn leave_throw_away_group(
    options: &ConsoleConsumerOptions,
    config: &ConsumerConfig,
    signals: &mut Option<StopSignals>,
    stopped_by: &mut Option<StopSignal>,
) {
    if !options.forget_group_at_exit {
        return;
    }
    match finish_unless_stopped_twice(forget_group(config), signals, stopped_by).await {
        Some(Ok(())) => {}
        Some(Err(e)) => eprintln!(
            "warning: could not remove the throw-away group {}: {e}",
            config.group_id
        ),
        None => eprintln!(
            "warning: stopped again before removing the throw-away group {}",
            config.group_id
        ),
    }
}

/// Removes the group's state (offsets, owners) so it starts over, as 0.7's `--from-beginning`.
pub(crate) async fn forget_group(config: &ConsumerConfig) -> Result<(), ConsumeError> {
    let timeout = std::time::Duration::from_millis(config.zk.session_timeout_ms.into());
    let coord = TokioEnv
        .coordinate(&config.zk_connect, timeout, timeout)
        .await
        .map_err(ConsumeError::ForgetConnect)?;
    let root = format!("/consumers/{}", config.group_id);
    let deleted = delete_tree(&coord, &root).await;
    if let Err(source) = deleted {
        return Err(ConsumeError::ForgetGroup { root, source });
    }
    coord.close().await;
    Ok(())
}

/// Deletes `path` and everything under it (missing is fine).
async fn delete_tree(coord: &impl Coordination, path: &str) -> Result<(), CoordError> {
    let mut stack = vec![(path.to_string(), false)];
    while let Some((node, expanded)) = stack.pop() {
        if expanded {
            match coord.delete(&node, None).await {
                Ok(()) | Err(CoordError::NoNode(_)) => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        stack.push((node.clone(), true));
        match coord.children(&node).await {
            Ok(children) => {
                stack.extend(children.into_iter().map(|c| (format!("{node}/{c}"), false)))
            }
            Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `tributary console-consumer`'s arguments (0.7.2's ConsoleConsumer flags).
#[derive(Debug, clap::Args)]
pub struct ConsoleConsumerArgs {
    /// TLS to the brokers (`--security.protocol=ssl`, `--ssl.*`).
    #[command(flatten)]
    pub tls: crate::cli::BrokerTlsArgs,
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// ZooKeeper of the cluster: HOST:PORT[/CHROOT].
    #[arg(long)]
    pub zookeeper: String,
    /// The topic: as in 0.7.2, a whitelist (`a,b` or `logs.*` consume several topics).
    #[arg(long, conflicts_with_all = ["whitelist", "blacklist"], required_unless_present_any = ["whitelist", "blacklist"])]
    pub topic: Option<String>,
    /// Consume every topic this regex matches (commas mean "or"; quotes are stripped).
    #[arg(long, conflicts_with = "blacklist")]
    pub whitelist: Option<String>,
    /// Consume every topic this regex does not match.
    #[arg(long)]
    pub blacklist: Option<String>,
    /// The consumer group (default: a new console-consumer-<n>).
    #[arg(long)]
    pub group: Option<String>,
    /// Start from the earliest message (the group's saved state is removed first).
    #[arg(long = "from-beginning")]
    pub from_beginning: bool,
    /// Stop after this many messages (a negative number: no limit, as 0.7.2's -1).
    #[arg(long = "max-messages")]
    pub max_messages: Option<i64>,
    /// Bytes per partition per fetch.
    #[arg(long = "fetch-size", default_value_t = 1024 * 1024)]
    pub fetch_size: u32,
    /// Socket receive buffer of fetch connections.
    #[arg(long = "socket-buffer-size", default_value_t = 2 * 1024 * 1024)]
    pub socket_buffer_size: u32,
    /// How often offsets are committed, in ms.
    #[arg(long = "autocommit.interval.ms", default_value_t = 10_000)]
    pub autocommit_interval_ms: u32,
    /// Exit (cleanly) after this long without a message, in ms.
    #[arg(long = "consumer-timeout-ms", allow_hyphen_values = true)]
    pub consumer_timeout_ms: Option<i64>,
    /// Print an error and go on when a message cannot be read (default: stop).
    #[arg(long = "skip-message-on-error")]
    pub skip_message_on_error: bool,
    /// kafka.consumer.ConsoleConsumer$NewlineMessageFormatter (the payload per line; short
    /// name newline) or kafka.consumer.ConsoleConsumer$ChecksumMessageFormatter
    /// ([<topic>-]checksum:<crc> per line; short name checksum).
    #[arg(long, default_value = NEWLINE_FORMATTER)]
    pub formatter: String,
    /// A formatter property, key=value (repeatable), e.g. topic=<name> for the checksum one.
    #[arg(long = "property")]
    pub properties: Vec<String>,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: crate::cli::StrayWords,
}

/// Consumes as `args` asks, printing each message to standard output, then says on standard
/// error how many were consumed. `Err` for a wrong flag or a consumer that could not run.
pub fn run_cli(args: ConsoleConsumerArgs) -> Result<ExitCode, ToolError> {
    let ConsoleConsumerArgs {
        zookeeper,
        topic,
        whitelist,
        blacklist,
        group,
        from_beginning,
        max_messages,
        fetch_size,
        socket_buffer_size,
        autocommit_interval_ms,
        consumer_timeout_ms,
        skip_message_on_error,
        formatter,
        properties,
        stray,
        zk_security,
        tls,
    } = args;
    stray.warn("console-consumer");
    let zookeeper = zk_security.connect("--zookeeper", &zookeeper)?;
    let subscription = match (topic, whitelist, blacklist) {
        // 0.7.2 reads --topic as a whitelist too (a plain name matches only itself).
        (Some(w), _, _) | (None, Some(w), _) => Subscription::Whitelist(w, 1),
        (None, None, Some(b)) => Subscription::Blacklist(b, 1),
        (None, None, None) => {
            return Err(ToolError::Usage(
                "give --topic, --whitelist or --blacklist".into(),
            ))
        }
    };
    let properties = match parse_properties(&properties) {
        Ok(parsed) => parsed,
        Err(invalid) => {
            // 0.7.2 says this on standard error and exits 1.
            eprintln!("{invalid}");
            return Ok(ExitCode::from(1));
        }
    };
    let forget_group_at_exit = group.is_none();
    let group =
        group.unwrap_or_else(|| format!("console-consumer-{}", TokioEnv.rng_seed() % 100_000));
    let mut settings = vec![
        ("fetch.size".to_string(), fetch_size.to_string()),
        (
            "socket.buffersize".to_string(),
            socket_buffer_size.to_string(),
        ),
        (
            "autocommit.interval.ms".to_string(),
            autocommit_interval_ms.to_string(),
        ),
    ];
    if let Some(ms) = consumer_timeout_ms {
        settings.push(("consumer.timeout.ms".to_string(), ms.to_string()));
    }
    settings.extend(tls.pairs());
    let options = ConsoleConsumerOptions {
        zookeeper,
        subscription,
        group,
        from_beginning,
        max_messages: max_messages.and_then(|max| u64::try_from(max).ok()),
        settings,
        skip_message_on_error,
        formatter: Formatter::named(&formatter, &properties).map_err(ToolError::failed)?,
        forget_group_at_exit,
    };
    let consumed = match runtime(Some(2))?.block_on(async {
        let mut signals = listen_for_stop("console-consumer");
        consume(&options, &mut std::io::stdout(), &mut signals).await
    }) {
        Ok(consumed) => consumed,
        // 0.7.2's words and exit code when nobody reads the output any more (`| head`).
        Err(ConsumeError::Output(_)) => {
            eprintln!("Unable to write to standard out, closing consumer.");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(ToolError::failed(e)),
    };
    eprintln!("Consumed {} messages", consumed.printed);
    // Stopped by a signal: the exit code a JVM gives after its shutdown hooks.
    Ok(consumed.stopped_by.map_or(ExitCode::SUCCESS, |signal| {
        ExitCode::from(signal.exit_code())
    }))
}
