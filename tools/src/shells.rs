//! `consumer-shell` and `producer-shell`: Kafka 0.7.2's ConsumerShell and ProducerShell, small
//! interactive tools driven by a client properties file.
//!
//! - `producer-shell --props producer.properties --topic t`: sends each line of standard input
//!   (trimmed as Java trims) and prints `Sent: <line> (<n> bytes)`, as 0.7.2 does, once the
//!   message is delivered (0.7.2 printed it once handed over; a line that is not delivered is
//!   said on standard error instead, and the exit code is 1). Lines are the bytes they are
//!   (0.7.2 re-encoded what was not valid in its charset).
//! - `consumer-shell --props consumer.properties --topic t [--partitions n]`: joins the group of
//!   the properties with `n` streams and prints 0.7.2's lines: `Starting consumer...`, then per
//!   stream `Starting consumer thread..`, `consumed: <payload>` per message, and at the stream's
//!   end (`consumer.timeout.ms` reached, or ^C) `Received <n> messages` and `thread shutdown !`;
//!   after ^C, `consumer threads shutted down`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use tributary::consumer::{ConsumerConnector, ConsumerError, Subscription};
use tributary::env::TokioEnv;
use tributary::producer::{Producer, Record};
use tributary_core::wire::TopicName;

use crate::cli::{load_consumer, load_producer, runtime, wait_for_signal, StrayWords};
use crate::error::ToolError;
use crate::line_reader::{Line, LineReader};

/// `tributary producer-shell`'s arguments (0.7.2's ProducerShell flags).
#[derive(Debug, clap::Args)]
pub struct ProducerShellArgs {
    /// The producer properties file.
    #[arg(long)]
    pub props: PathBuf,
    /// The topic.
    #[arg(long)]
    pub topic: TopicName,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: StrayWords,
}

/// Sends standard input's lines, one message each, printing 0.7.2's line for each delivered.
pub fn run_producer_cli(args: ProducerShellArgs) -> Result<ExitCode, ToolError> {
    args.stray.warn("producer-shell");
    let config = load_producer(&args.props)?;
    let max_message_bytes = config.max_message_bytes;
    let failed = runtime(Some(1))?.block_on(async {
        let producer = Producer::start(TokioEnv, config)
            .await
            .map_err(ToolError::failed)?;
        let limit = usize::try_from(max_message_bytes).unwrap_or(usize::MAX);
        let mut lines = LineReader::new(tokio::io::stdin(), limit);
        let mut failed = 0u64;
        let mut input_error = None;
        loop {
            let line = match lines.next_line().await {
                Ok(Some(Line::Bytes(line))) => line,
                Ok(Some(Line::TooLong { number, bytes })) => {
                    eprintln!("not sent: line {number} is {bytes} bytes, more than max.message.size ({limit})");
                    failed += 1;
                    continue;
                }
                Ok(None) => break,
                Err(e) => {
                    input_error = Some(ToolError::io("reading standard input", e));
                    break;
                }
            };
            // Java's `trim`: every character up to U+0020 at either end.
            let message = java_trim(&line).to_vec();
            let bytes = message.len();
            let shown = String::from_utf8_lossy(&line);
            let delivered = match producer
                .send(Record::new(args.topic.clone(), message))
                .await
            {
                Ok(delivery) => delivery.await.map_err(ToolError::failed),
                Err(e) => Err(ToolError::failed(e)),
            };
            match delivered {
                Ok(_) => {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "Sent: {shown} ({bytes} bytes)");
                    let _ = out.flush();
                }
                Err(e) => {
                    eprintln!("not delivered: {shown}: {e}");
                    failed += 1;
                }
            }
        }
        producer.close().await;
        if let Some(e) = input_error {
            return Err(e);
        }
        Ok::<u64, ToolError>(failed)
    })?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `tributary consumer-shell`'s arguments (0.7.2's ConsumerShell flags).
#[derive(Debug, clap::Args)]
pub struct ConsumerShellArgs {
    /// The consumer properties file (groupid, zk.connect, consumer.timeout.ms, ...).
    #[arg(long)]
    pub props: PathBuf,
    /// The topic.
    #[arg(long)]
    pub topic: TopicName,
    /// Streams (0.7.2: threads), each printing its own messages.
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: StrayWords,
}

/// Consumes as `args` asks, printing 0.7.2's lines, until every stream ends or ^C.
pub fn run_consumer_cli(args: ConsumerShellArgs) -> Result<ExitCode, ToolError> {
    args.stray.warn("consumer-shell");
    // As 0.7.2: the first line comes before the properties file is read.
    say("Starting consumer...")?;
    let config = load_consumer(&args.props)?;
    let streams = args.partitions.max(1);
    let failed = runtime(None)?.block_on(async {
        let subscription =
            Subscription::Topics([(args.topic.clone(), streams)].into_iter().collect());
        let (connector, streams) = ConsumerConnector::start(TokioEnv, config, subscription)
            .await
            .map_err(ToolError::failed)?;
        let mut threads = tokio::task::JoinSet::new();
        for mut stream in streams {
            threads.spawn(async move {
                say("Starting consumer thread..")?;
                let mut received = 0u64;
                let ended = loop {
                    match stream.next().await {
                        Ok(message) => {
                            received += 1;
                            let mut out = std::io::stdout().lock();
                            let written = out
                                .write_all(b"consumed: ")
                                .and_then(|()| out.write_all(&message.payload))
                                .and_then(|()| out.write_all(b"\n"))
                                .and_then(|()| out.flush());
                            if let Err(e) = written {
                                break Err(ToolError::io("writing standard output", e));
                            }
                        }
                        Err(ConsumerError::Timeout(_) | ConsumerError::Closed) => break Ok(()),
                        // Said and counted in the exit code (0.7.2 logged it and went on).
                        Err(e) => break Err(ToolError::failed(e)),
                    }
                };
                say(&format!("Received {received} messages"))?;
                say("thread shutdown !")?;
                ended
            });
        }
        let mut failed = None;
        let interrupted = tokio::select! {
            biased;
            () = wait_for_signal() => true,
            () = async {
                while let Some(ended) = threads.join_next().await {
                    note_failure(&mut failed, ended);
                }
            } => false,
        };
        connector.shutdown().await;
        while let Some(ended) = threads.join_next().await {
            note_failure(&mut failed, ended);
        }
        if interrupted {
            say("consumer threads shutted down")?;
        }
        Ok::<_, ToolError>(failed)
    })?;
    // A stream that failed was logged (ERROR) when it ended; the exit code says so too.
    Ok(match failed {
        Some(_) => ExitCode::from(1),
        None => ExitCode::SUCCESS,
    })
}

/// `bytes` without what Java's `String.trim` removes: every byte up to 0x20 at either end.
fn java_trim(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| *b > b' ').unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| *b > b' ')
        .map_or(start, |at| at + 1);
    &bytes[start..end]
}

/// Prints a line of the shell's own; an error (a closed pipe) instead of a panic.
fn say(line: &str) -> Result<(), ToolError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| ToolError::io("writing standard output", e))
}

/// Keeps the first failure of a stream's task.
fn note_failure(
    failed: &mut Option<ToolError>,
    ended: Result<Result<(), ToolError>, tokio::task::JoinError>,
) {
    let failure = match ended {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(e) => ToolError::failed(e),
    };
    tracing::error!("consumer-shell: {failure}");
    failed.get_or_insert(failure);
}
