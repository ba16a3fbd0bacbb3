//! `get-offsets`: 0.7's GetOffsetShell.

use std::process::ExitCode;
use std::time::Duration;

use tributary::client::{connect, parse_server, ClientError, ServerAddressError};
use tributary::env::TokioEnv;
use tributary::tls::env::{ClientLink, SecureEnv};
use tributary_core::wire::{OffsetsRequest, Request, Response, TopicName};

use crate::cli::{runtime, PartitionArgs};
use crate::error::ToolError;

/// Why the offsets could not be had.
#[derive(Debug, thiserror::Error)]
pub enum GetOffsetsError {
    /// `--server` is not a broker address.
    #[error(transparent)]
    Server(#[from] ServerAddressError),
    /// The broker could not be reached, or the call on its connection failed.
    #[error(transparent)]
    Broker(#[from] ClientError),
    /// The broker answered OFFSETS with another kind of response.
    #[error("unexpected response {0:?}")]
    UnexpectedResponse(Box<Response>),
}

/// Asks `server` for up to `count` offsets of `topic`/`partition` before `time`, inside
/// `link`'s TLS when given.
pub async fn get_offsets(
    server: &str,
    topic: &TopicName,
    partition: i32,
    time: i64,
    count: i32,
    link: Option<ClientLink>,
) -> Result<Vec<i64>, GetOffsetsError> {
    let (host, port) = parse_server(server)?;
    let env = SecureEnv::new(TokioEnv, link);
    let mut conn = connect(&env, &host, port, Duration::from_secs(10)).await?;
    let request = Request::Offsets(OffsetsRequest {
        topic: topic.clone(),
        partition,
        time,
        max_offsets: count,
    });
    match conn.call(&request).await? {
        Response::Offsets(r) => Ok(r.offsets),
        other => Err(GetOffsetsError::UnexpectedResponse(Box::new(other))),
    }
}

/// `tributary get-offsets`'s arguments (0.7's GetOffsetShell flags).
#[derive(Debug, clap::Args)]
pub struct GetOffsetsArgs {
    /// The broker and partition asked.
    #[command(flatten)]
    pub at: PartitionArgs,
    /// -1 latest, -2 earliest, or ms since the epoch.
    #[arg(long, allow_hyphen_values = true)]
    pub time: i64,
    /// How many offsets.
    #[arg(long, default_value_t = 1)]
    pub offsets: i32,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: crate::cli::StrayWords,
}

/// Asks the broker and prints `get <n> results`, then one offset per line, to standard output.
/// `Err` when the broker cannot be asked or answers otherwise.
pub fn run_cli(args: GetOffsetsArgs) -> Result<ExitCode, ToolError> {
    let GetOffsetsArgs {
        at,
        time,
        offsets,
        stray,
    } = args;
    stray.warn("get-offsets");
    let link = at.tls.link(None)?;
    let found = runtime(Some(1))?
        .block_on(get_offsets(
            &at.server,
            &at.topic,
            at.partition,
            time,
            offsets,
            link,
        ))
        .map_err(ToolError::failed)?;
    println!("get {} results", found.len());
    found.iter().for_each(|o| println!("{o}"));
    Ok(ExitCode::SUCCESS)
}
