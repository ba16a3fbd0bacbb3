//! `tributary mirror-maker` on the command line: its arguments, and the entry point that reads
//! the files and runs [`crate::mirror::maker::run`] on tokio until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use super::{load_consumer, load_producer, runtime, wait_for_signal, LOG_TARGET};
use crate::consumer::Subscription;
use crate::env::TokioEnv;
use crate::mirror::MirrorSettings;

/// `tributary mirror-maker`'s arguments: the source clusters' and the target's files, the
/// topic filter, and how many streams and producers.
#[derive(Debug, clap::Args)]
pub struct MirrorMakerArgs {
    /// A source cluster's consumer properties (repeat for several sources).
    #[arg(long = "consumer.config", required = true)]
    pub consumer_config: Vec<PathBuf>,
    /// The target cluster's producer properties.
    #[arg(long = "producer.config")]
    pub producer_config: PathBuf,
    /// Mirror the topics this regex matches (commas mean "or").
    #[arg(
        long,
        conflicts_with = "blacklist",
        required_unless_present = "blacklist"
    )]
    pub whitelist: Option<String>,
    /// Mirror every topic but those this regex matches.
    #[arg(long)]
    pub blacklist: Option<String>,
    /// Streams per source cluster.
    #[arg(long = "num.streams", default_value_t = 1)]
    pub num_streams: u32,
    /// Producers, shared round-robin by the streams.
    #[arg(long = "num.producers", default_value_t = 1)]
    pub num_producers: u32,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics (off when not given).
    #[arg(long = "metrics.port")]
    pub metrics_port: Option<u16>,
    /// The address the metrics endpoint binds [default: 127.0.0.1 when a consumer or the
    /// producer config says security.protocol=ssl, else 0.0.0.0, every interface].
    #[arg(long = "metrics.host")]
    pub metrics_host: Option<String>,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: crate::cli::StrayWords,
}

/// Runs the mirror maker until SIGINT or SIGTERM, then stops it gracefully (in-flight messages
/// acknowledged, then committed). `Ok(ExitCode::SUCCESS)` only after a clean stop; `Err` says
/// which file or flag is wrong, or why the mirror could not start or failed.
pub fn run_cli(args: MirrorMakerArgs) -> Result<ExitCode, String> {
    let MirrorMakerArgs {
        consumer_config,
        producer_config,
        whitelist,
        blacklist,
        num_streams,
        num_producers,
        metrics_port,
        metrics_host,
        stray,
    } = args;
    stray.warn("mirror-maker");
    let sources = consumer_config
        .iter()
        .map(|p| load_consumer(p))
        .collect::<Result<Vec<_>, _>>()?;
    let producer = load_producer(&producer_config)?;
    let filter = match (whitelist, blacklist) {
        (Some(w), _) => Subscription::Whitelist(w, 0),
        (None, Some(b)) => Subscription::Blacklist(b, 0),
        (None, None) => return Err("give --whitelist or --blacklist".into()),
    };
    // Loopback by default once the links are secured (docs/security.md).
    let tls_on = producer.tls.is_some() || sources.iter().any(|s| s.tls.is_some());
    let metrics_host =
        metrics_host.unwrap_or_else(|| if tls_on { "127.0.0.1" } else { "0.0.0.0" }.to_string());
    let commit_interval = std::time::Duration::from_millis(
        sources
            .first()
            .map_or(1000, |s| s.mirror.commit_interval_ms)
            .into(),
    );
    let settings = MirrorSettings {
        sources,
        producer,
        filter,
        streams: num_streams,
        producers: num_producers,
        commit_interval,
        summary_interval: crate::mirror::SUMMARY_EVERY,
        observer: None,
        metrics: None,
        target_identity: None,
    };
    let stop = async {
        wait_for_signal().await;
        tracing::info!(target: LOG_TARGET, "signal received: shutting down");
    };
    runtime(None)?
        .block_on(crate::mirror::maker::run(
            TokioEnv,
            settings,
            metrics_port.map(|port| (metrics_host.as_str(), port)),
            stop,
        ))
        .map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
