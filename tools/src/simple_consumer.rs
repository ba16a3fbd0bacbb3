//! `simple-consumer`: 0.7's SimpleConsumerShell. Fetches a partition from an offset and prints
//! every message (compressed sets opened), advancing by the valid bytes of each fetch.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use tributary::client::{connect, parse_server, ClientError, ServerAddressError};
use tributary::env::TokioEnv;
use tributary::tls::env::{ClientLink, SecureEnv};
use tributary_core::message::{
    DeepIter, MessageError, ShallowIter, DECOMPRESSED_BYTES_MAX_DEFAULT,
};
use tributary_core::wire::{ErrorCode, FetchRequest, Request, Response, TopicName};

use crate::cli::{runtime, PartitionArgs};
use crate::error::ToolError;

/// Why consuming stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimpleConsumerError {
    /// `--server` is not a broker address.
    #[error(transparent)]
    Server(#[from] ServerAddressError),
    /// The broker could not be reached, or a call on its connection failed.
    #[error(transparent)]
    Broker(#[from] ClientError),
    /// The broker answered FETCH with another kind of response.
    #[error("unexpected response to FETCH")]
    UnexpectedResponse,
    /// The broker answered the fetch with an error code (said in words, with what to do).
    #[error("{}", describe_error(.error, .topic, .partition, .offset))]
    Refused {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: i32,
        /// The offset fetched at.
        offset: i64,
        /// The broker's answer.
        error: ErrorCode,
    },
    /// The fetch holds no whole message: the next one is larger than the fetch size, or corrupt.
    #[error("message at offset {offset} is larger than the fetch size {fetch_bytes} (or corrupt); raise --fetchsize")]
    TooLarge {
        /// Where the message is.
        offset: i64,
        /// Bytes per fetch.
        fetch_bytes: i32,
    },
    /// A message failed its checks (CRC, size, compression).
    #[error(transparent)]
    Corrupt(#[from] MessageError),
    /// The output could not be written.
    #[error(transparent)]
    Output(#[from] std::io::Error),
}

/// What to fetch and how to print it.
#[derive(Debug, Clone)]
pub struct ConsumeOptions {
    /// `host:port` or `kafka://host:port`.
    pub server: String,
    /// The topic.
    pub topic: TopicName,
    /// The partition.
    pub partition: i32,
    /// Where to start.
    pub offset: i64,
    /// Bytes per fetch.
    pub fetch_bytes: i32,
    /// Print each message's resume offset before it.
    pub print_offsets: bool,
    /// Stop after this many messages.
    pub max_messages: Option<u64>,
    /// Stop at the first empty fetch instead of polling.
    pub stop_at_end: bool,
    /// TLS to the broker, when given.
    pub link: Option<ClientLink>,
    /// How each message is shown.
    pub style: Style,
}

/// How each message is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Its payload on a line of standard output (with `next offset = <n>: ` before it under
    /// `--print-offsets`).
    Payloads,
    /// As 0.7.2's SimpleConsumerShell logs it, at `info` under the log target
    /// [`SHELL_TARGET`]: `consumed: <payload>` and `next offset = <n>`, each when asked.
    Shell {
        /// Log `consumed: <payload>`.
        print_messages: bool,
        /// Log `next offset = <n>`.
        print_offsets: bool,
    },
}

/// The log target of `simple-consumer-shell`'s lines: 0.7.2's logger name.
pub const SHELL_TARGET: &str = "kafka.tools.SimpleConsumerShell$";

/// Consumes per `options`, printing to `out`; returns the number of messages printed.
pub async fn consume(
    options: &ConsumeOptions,
    out: &mut impl Write,
) -> Result<u64, SimpleConsumerError> {
    let (host, port) = parse_server(&options.server)?;
    let env = SecureEnv::new(TokioEnv, options.link.clone());
    let mut conn = connect(&env, &host, port, Duration::from_secs(30)).await?;
    let (mut offset, mut printed) = (options.offset, 0u64);
    loop {
        let request = Request::Fetch(FetchRequest {
            topic: options.topic.clone(),
            partition: options.partition,
            offset,
            max_bytes: options.fetch_bytes,
        });
        let Response::Fetch(response) = conn.call(&request).await? else {
            return Err(SimpleConsumerError::UnexpectedResponse);
        };
        if response.error != ErrorCode::NoError {
            return Err(SimpleConsumerError::Refused {
                topic: options.topic.clone(),
                partition: options.partition,
                offset,
                error: response.error,
            });
        }
        let mut top = ShallowIter::new(&response.messages, offset);
        let valid = top.by_ref().map_while(Result::ok).count();
        let valid_bytes = top.end().valid_bytes;
        if valid == 0 && !response.messages.is_empty() {
            return Err(SimpleConsumerError::TooLarge {
                offset,
                fetch_bytes: options.fetch_bytes,
            });
        }
        for entry in DeepIter::new(
            response.messages.slice(..valid_bytes),
            offset,
            DECOMPRESSED_BYTES_MAX_DEFAULT,
        ) {
            let entry = entry?;
            match options.style {
                Style::Payloads => {
                    if options.print_offsets {
                        write!(out, "next offset = {}: ", entry.next_offset)?;
                    }
                    out.write_all(&entry.message.payload)
                        .and_then(|()| out.write_all(b"\n"))?;
                }
                Style::Shell {
                    print_messages,
                    print_offsets,
                } => {
                    if print_messages {
                        tracing::info!(
                            target: SHELL_TARGET,
                            "consumed: {}",
                            String::from_utf8_lossy(&entry.message.payload)
                        );
                    }
                    if print_offsets {
                        tracing::info!(target: SHELL_TARGET, "next offset = {}", entry.next_offset);
                    }
                }
            }
            printed += 1;
            if options.max_messages.is_some_and(|max| printed >= max) {
                return Ok(printed);
            }
        }
        out.flush()?;
        offset += valid_bytes as i64;
        if valid_bytes == 0 {
            if options.stop_at_end {
                if printed == 0 {
                    eprintln!(
                        "no messages in {}-{} from offset {offset}: the partition is empty there, or does not exist on this broker",
                        options.topic, options.partition
                    );
                }
                return Ok(printed);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// A fetch error in words, with what to do about it.
fn describe_error(error: &ErrorCode, topic: &TopicName, partition: &i32, offset: &i64) -> String {
    let what = match error {
        ErrorCode::WrongPartition => format!("partition {partition} does not exist: topic {topic} has fewer partitions on this broker"),
        ErrorCode::OffsetOutOfRange => {
            format!("offset {offset} is outside what {topic}-{partition} holds (see its range with get-offsets --time -2 and --time -1)")
        }
        ErrorCode::Unknown => format!("the broker cannot serve {topic}-{partition} (its log failed or was refused at startup; see the broker's log)"),
        _ => format!("the broker answered a fetch of {topic}-{partition} at offset {offset} with an error"),
    };
    format!("{what} (error {}, {})", error.code(), error.name())
}

/// `tributary simple-consumer`'s arguments (0.7's SimpleConsumerShell flags).
#[derive(Debug, clap::Args)]
pub struct SimpleConsumerArgs {
    /// The broker and partition read.
    #[command(flatten)]
    pub at: PartitionArgs,
    /// The offset to start from.
    #[arg(long, default_value_t = 0)]
    pub offset: i64,
    /// Bytes per fetch.
    #[arg(long, default_value_t = 1_000_000)]
    pub fetchsize: i32,
    /// Print each message's next offset before it.
    #[arg(long = "print-offsets")]
    pub print_offsets: bool,
    /// Stop after this many messages.
    #[arg(long = "max-messages")]
    pub max_messages: Option<u64>,
    /// Stop at the end of the log instead of waiting for more.
    #[arg(long = "stop-at-end")]
    pub stop_at_end: bool,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: crate::cli::StrayWords,
}

/// Prints the partition's messages to standard output as `args` asks. `Err` when the broker
/// cannot be reached or answers a fetch with an error (saying which).
pub fn run_cli(args: SimpleConsumerArgs) -> Result<ExitCode, ToolError> {
    let SimpleConsumerArgs {
        at,
        offset,
        fetchsize,
        print_offsets,
        max_messages,
        stop_at_end,
        stray,
    } = args;
    stray.warn("simple-consumer");
    let link = at.tls.link(None)?;
    let PartitionArgs {
        server,
        topic,
        partition,
        tls: _,
    } = at;
    let options = ConsumeOptions {
        server,
        topic,
        partition,
        offset,
        fetch_bytes: fetchsize,
        print_offsets,
        max_messages,
        stop_at_end,
        link,
        style: Style::Payloads,
    };
    runtime(Some(1))?
        .block_on(consume(&options, &mut std::io::stdout()))
        .map_err(ToolError::failed)?;
    Ok(ExitCode::SUCCESS)
}

/// `tributary simple-consumer-shell`'s arguments: 0.7.2's SimpleConsumerShell, option for
/// option. `--print-messages` and `--print-offsets` take an optional value that 0.7.2 never
/// reads (given at all, they are on).
#[derive(Debug, clap::Args)]
pub struct SimpleConsumerShellArgs {
    /// The broker and partition read.
    #[command(flatten)]
    pub at: PartitionArgs,
    /// The offset to start from.
    #[arg(long, default_value_t = 0)]
    pub offset: i64,
    /// Bytes per fetch.
    #[arg(long, default_value_t = 1_000_000)]
    pub fetchsize: i32,
    /// Log `consumed: <payload>` for each message.
    #[arg(long = "print-messages", num_args = 0..=1, default_missing_value = "true", value_name = "Boolean")]
    pub print_messages: Option<String>,
    /// Log `next offset = <n>` after each message.
    #[arg(long = "print-offsets", num_args = 0..=1, default_missing_value = "true", value_name = "Boolean")]
    pub print_offsets: Option<String>,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: crate::cli::StrayWords,
}

/// Fetches as 0.7.2's SimpleConsumerShell does, without end, logging what `args` asks at
/// `info` (the command's default level). `Err` when the broker cannot be reached or refuses.
pub fn run_shell_cli(args: SimpleConsumerShellArgs) -> Result<ExitCode, ToolError> {
    let SimpleConsumerShellArgs {
        at,
        offset,
        fetchsize,
        print_messages,
        print_offsets,
        stray,
    } = args;
    stray.warn("simple-consumer-shell");
    tracing::info!(target: SHELL_TARGET, "Starting consumer...");
    let link = at.tls.link(None)?;
    let options = ConsumeOptions {
        server: at.server,
        topic: at.topic,
        partition: at.partition,
        offset,
        fetch_bytes: fetchsize,
        print_offsets: false,
        max_messages: None,
        stop_at_end: false,
        link,
        style: Style::Shell {
            print_messages: print_messages.is_some(),
            print_offsets: print_offsets.is_some(),
        },
    };
    runtime(Some(1))?
        .block_on(consume(&options, &mut std::io::stdout()))
        .map_err(ToolError::failed)?;
    Ok(ExitCode::SUCCESS)
}
