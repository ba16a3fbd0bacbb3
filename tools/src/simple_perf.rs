//! `simple-consumer-perf`: 0.7.1's SimpleConsumerPerformance. Reads one partition with FETCH
//! from one broker — from its earliest offset, or its latest with `--from-latest` — until a
//! fetch brings nothing (or `--messages` is passed), and prints 0.7's columns: `start.time,
//! end.time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec`.
//! Messages are counted as 0.7 counts them: inner messages of compressed sets one by one, by
//! payload bytes.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tributary::client::{connect, parse_server, ClientError, Connection, ServerAddressError};
use tributary::env::{Env, TokioEnv};
use tributary::tls::env::SecureEnv;
use tributary_core::message::{
    CompressionCodec, DeepIter, MessageError, ShallowIter, DECOMPRESSED_BYTES_MAX_DEFAULT,
};
use tributary_core::wire::{ErrorCode, FetchRequest, OffsetsRequest, Request, Response, TopicName};

use super::date_format::{DateFormat, PERF_DEFAULT};
use super::perf::mb;
use crate::cli::{runtime, PartitionArgs};
use crate::error::ToolError;

/// The socket timeout of the tool's one connection (0.7's: 30 s).
const SOCKET_TIMEOUT: Duration = Duration::from_secs(30);

/// Why `simple-consumer-perf` stopped before the end.
#[derive(Debug, thiserror::Error)]
pub enum SimplePerfError {
    /// `--fetch-size` is zero or negative.
    #[error("--fetch-size {0} must be positive")]
    FetchSize(i32),
    /// `--server` is not a broker address.
    #[error(transparent)]
    Server(#[from] ServerAddressError),
    /// The broker could not be reached.
    #[error("{host}:{port}: {source}")]
    Connect {
        /// The broker's host.
        host: String,
        /// The broker's port.
        port: u16,
        /// Why.
        source: ClientError,
    },
    /// Asking the partition's first offset failed on the connection.
    #[error("{topic}/{partition}: asking its first offset: {source} (does the broker have the partition?)")]
    FirstOffset {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: i32,
        /// Why.
        source: ClientError,
    },
    /// The broker answered OFFSETS with no offset.
    #[error("{topic}/{partition}: the broker has no offsets for it (does the partition exist?)")]
    NoOffsets {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: i32,
    },
    /// The broker answered OFFSETS with an error code.
    #[error("{topic}/{partition}: the broker answered OFFSETS with {error:?}")]
    OffsetsRefused {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: i32,
        /// The broker's answer.
        error: ErrorCode,
    },
    /// The broker answered a request with another kind of response.
    #[error("unexpected answer to {0}")]
    UnexpectedAnswer(&'static str),
    /// A FETCH failed on the connection.
    #[error("{topic}/{partition} at offset {offset}: {source}")]
    Fetch {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: i32,
        /// The offset fetched at.
        offset: i64,
        /// Why.
        source: ClientError,
    },
    /// The broker answered FETCH with an error code.
    #[error("{topic}/{partition} at offset {offset}: the broker answered {error:?}")]
    FetchRefused {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: i32,
        /// The offset fetched at.
        offset: i64,
        /// The broker's answer.
        error: ErrorCode,
    },
    /// The fetch holds no whole message: the next one is larger than `--fetch-size`, or corrupt.
    #[error("{topic}/{partition}: the message at offset {offset} is larger than --fetch-size {fetch_size} (or corrupt); raise --fetch-size")]
    TooLarge {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: i32,
        /// Where the message is.
        offset: i64,
        /// Bytes per fetch.
        fetch_size: i32,
    },
    /// A message failed its checks (CRC, size, compression).
    #[error("{topic}/{partition}: {source}")]
    Corrupt {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: i32,
        /// What is wrong with it.
        source: MessageError,
    },
    /// The output could not be written.
    #[error(transparent)]
    Output(#[from] std::io::Error),
}

/// What `simple-consumer-perf` reads.
#[derive(Debug, Clone)]
pub struct SimplePerfOptions {
    /// `kafka://host:port` or `host:port`.
    pub server: String,
    /// The topic.
    pub topic: TopicName,
    /// The partition.
    pub partition: i32,
    /// Bytes per fetch.
    pub fetch_size: i32,
    /// Start at the latest offset instead of the earliest.
    pub from_latest: bool,
    /// Stop once more than this many messages were read (0.7's test: `read > messages`).
    pub messages: Option<u64>,
    /// With `Some(n)`, print a progress line (0.7's detailed stats) every `n` messages.
    pub report_every: Option<u64>,
    /// No header line.
    pub hide_header: bool,
    /// How times are printed.
    pub dates: DateFormat,
}

/// What one run read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimplePerfResult {
    /// Messages read (inner messages counted one by one).
    pub messages: u64,
    /// Their payload bytes.
    pub payload_bytes: u64,
    /// The offset reading stopped at.
    pub end_offset: i64,
}

/// Runs `simple-consumer-perf`, printing to `out` (the header, progress lines when asked, and
/// the summary line).
pub async fn simple_consumer_perf<E: Env>(
    env: &E,
    options: &SimplePerfOptions,
    out: &mut impl Write,
) -> Result<SimplePerfResult, SimplePerfError> {
    if options.fetch_size <= 0 {
        return Err(SimplePerfError::FetchSize(options.fetch_size));
    }
    let (host, port) = parse_server(&options.server)?;
    let connected = connect(env, &host, port, SOCKET_TIMEOUT).await;
    let mut conn = match connected {
        Ok(conn) => conn,
        Err(source) => return Err(SimplePerfError::Connect { host, port, source }),
    };
    let write = |out: &mut dyn Write, line: String| writeln!(out, "{line}");
    // As 0.7.2: the header first, then the starting offset is asked.
    if !options.hide_header {
        let header = if options.report_every.is_some() {
            "time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
        } else {
            "start.time, end.time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
        };
        write(out, header.to_string())?;
    }
    let time = if options.from_latest { -1 } else { -2 };
    let mut offset = first_offset(&mut conn, options, time).await?;
    // Times from the environment's clock (the simulator's, in a simulation).
    let start_ms = env.now_ms();
    let started: SystemTime = UNIX_EPOCH + Duration::from_millis(start_ms.max(0) as u64);
    let (mut messages, mut bytes) = (0u64, 0u64);
    let (mut last_report_ms, mut reported_messages, mut reported_bytes) = (start_ms, 0u64, 0u64);
    loop {
        let (read, read_bytes, valid_bytes) = fetch_once(&mut conn, options, offset).await?;
        // 0.7.2 compares the count before this fetch with --messages (so one more fetch is
        // read past it), and counts that fetch either way.
        let done = read == 0 || options.messages.is_some_and(|limit| messages > limit);
        messages += read;
        bytes += read_bytes;
        offset += valid_bytes as i64;
        if let Some(every) = options.report_every {
            // A row once more than `every` messages came since the last; none at the end.
            if messages - reported_messages > every {
                let now_ms = env.now_ms();
                let secs = ((now_ms - last_report_ms) as f64 / 1000.0).max(1e-3);
                let line = format!(
                    "{}, {}, {:.4}, {:.4}, {messages}, {:.4}",
                    options
                        .dates
                        .format(started + Duration::from_millis((now_ms - start_ms).max(0) as u64)),
                    options.fetch_size,
                    mb(bytes),
                    mb(bytes - reported_bytes) / secs,
                    (messages - reported_messages) as f64 / secs
                );
                write(out, line)?;
                (last_report_ms, reported_messages, reported_bytes) = (now_ms, messages, bytes);
            }
        }
        if done {
            break;
        }
    }
    let elapsed_ms = (env.now_ms() - start_ms).max(0);
    if options.report_every.is_none() {
        let secs = (elapsed_ms as f64 / 1000.0).max(1e-3);
        let line = format!(
            "{}, {}, {}, {:.4}, {:.4}, {messages}, {:.4}",
            options.dates.format(started),
            options
                .dates
                .format(started + Duration::from_millis(elapsed_ms as u64)),
            options.fetch_size,
            mb(bytes),
            mb(bytes) / secs,
            messages as f64 / secs
        );
        write(out, line)?;
    }
    Ok(SimplePerfResult {
        messages,
        payload_bytes: bytes,
        end_offset: offset,
    })
}

/// The partition's earliest (`time` -2) or latest (-1) offset.
async fn first_offset<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    options: &SimplePerfOptions,
    time: i64,
) -> Result<i64, SimplePerfError> {
    let request = Request::Offsets(OffsetsRequest {
        topic: options.topic.clone(),
        partition: options.partition,
        time,
        max_offsets: 1,
    });
    let answer = conn
        .call(&request)
        .await
        .map_err(|source| SimplePerfError::FirstOffset {
            topic: options.topic.clone(),
            partition: options.partition,
            source,
        })?;
    match answer {
        Response::Offsets(o) if o.error == ErrorCode::NoError => o
            .offsets
            .first()
            .copied()
            .ok_or_else(|| SimplePerfError::NoOffsets {
                topic: options.topic.clone(),
                partition: options.partition,
            }),
        Response::Offsets(o) => Err(SimplePerfError::OffsetsRefused {
            topic: options.topic.clone(),
            partition: options.partition,
            error: o.error,
        }),
        _ => Err(SimplePerfError::UnexpectedAnswer("OFFSETS")),
    }
}

/// One FETCH at `offset`: (messages, payload bytes, valid bytes to advance by).
async fn fetch_once<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    options: &SimplePerfOptions,
    offset: i64,
) -> Result<(u64, u64, usize), SimplePerfError> {
    let request = Request::Fetch(FetchRequest {
        topic: options.topic.clone(),
        partition: options.partition,
        offset,
        max_bytes: options.fetch_size,
    });
    let answer = conn
        .call(&request)
        .await
        .map_err(|source| SimplePerfError::Fetch {
            topic: options.topic.clone(),
            partition: options.partition,
            offset,
            source,
        })?;
    let Response::Fetch(response) = answer else {
        return Err(SimplePerfError::UnexpectedAnswer("FETCH"));
    };
    if response.error != ErrorCode::NoError {
        return Err(SimplePerfError::FetchRefused {
            topic: options.topic.clone(),
            partition: options.partition,
            offset,
            error: response.error,
        });
    }
    // One pass over the top level (CRCs compared) counts the plain messages and notes where
    // the compressed wrappers are; those are opened after it, their inner messages counted one
    // by one as 0.7 counts them (and checked: nothing checked them before).
    let (mut messages, mut bytes) = (0u64, 0u64);
    let mut wrappers = Vec::new();
    let mut top = ShallowIter::new(&response.messages, offset);
    loop {
        let at = top.end().valid_bytes;
        // The pass ends at a bad entry: what comes before it is counted and read past.
        let Some(Ok(entry)) = top.next() else { break };
        match entry.message.codec() {
            CompressionCodec::None => {
                messages += 1;
                bytes += entry.message.payload.len() as u64;
            }
            _ => wrappers.push((at..top.end().valid_bytes, entry.offset)),
        }
    }
    let valid_bytes = top.end().valid_bytes;
    if valid_bytes == 0 && !response.messages.is_empty() {
        return Err(SimplePerfError::TooLarge {
            topic: options.topic.clone(),
            partition: options.partition,
            offset,
            fetch_size: options.fetch_size,
        });
    }
    for (range, at) in wrappers {
        // The entry's bytes, as the pass found them (within what it read).
        let wrapper = response.messages.slice(range);
        for entry in DeepIter::prechecked(wrapper, at, DECOMPRESSED_BYTES_MAX_DEFAULT) {
            let entry = entry.map_err(|source| SimplePerfError::Corrupt {
                topic: options.topic.clone(),
                partition: options.partition,
                source,
            })?;
            messages += 1;
            bytes += entry.message.payload.len() as u64;
        }
    }
    Ok((messages, bytes, valid_bytes))
}

/// `tributary simple-consumer-perf`'s arguments (0.7.1's SimpleConsumerPerformance flags).
#[derive(Debug, clap::Args)]
pub struct SimpleConsumerPerfArgs {
    /// The broker and partition read.
    #[command(flatten)]
    pub at: PartitionArgs,
    /// Bytes per fetch.
    #[arg(long = "fetch-size", default_value_t = 1024 * 1024)]
    pub fetch_size: i32,
    /// Start at the latest offset instead of the earliest.
    #[arg(long = "from-latest")]
    pub from_latest: bool,
    /// Stop once more than this many messages were read (default: at the end).
    #[arg(long)]
    pub messages: Option<u64>,
    /// Print a line every --reporting-interval messages instead of one summary.
    #[arg(long = "show-detailed-stats")]
    pub show_detailed_stats: bool,
    /// Messages between progress lines.
    #[arg(long = "reporting-interval", default_value_t = 5000)]
    pub reporting_interval: u64,
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

/// Reads the partition as `args` asks, printing 0.7.1's columns to standard output. `Err` for
/// a wrong flag, or when the broker cannot be reached or answers with an error.
pub fn run_cli(args: SimpleConsumerPerfArgs) -> Result<ExitCode, ToolError> {
    let SimpleConsumerPerfArgs {
        at,
        fetch_size,
        from_latest,
        messages,
        show_detailed_stats,
        reporting_interval,
        hide_header,
        date_format,
        stray,
    } = args;
    stray.warn("simple-consumer-perf");
    let link = at.tls.link(None)?;
    let options = SimplePerfOptions {
        server: at.server,
        topic: at.topic,
        partition: at.partition,
        fetch_size,
        from_latest,
        messages,
        report_every: show_detailed_stats.then_some(reporting_interval.max(1)),
        hide_header,
        dates: DateFormat::parse(&date_format).map_err(ToolError::failed)?,
    };
    runtime(Some(1))?
        .block_on(simple_consumer_perf(
            &SecureEnv::new(TokioEnv, link),
            &options,
            &mut std::io::stdout(),
        ))
        .map_err(ToolError::failed)?;
    Ok(ExitCode::SUCCESS)
}
