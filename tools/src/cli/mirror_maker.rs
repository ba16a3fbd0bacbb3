//! `tributary mirror-maker` on the command line: its arguments, and the entry point that reads
//! the files and runs [`tributary::mirror::maker::run`] on tokio until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use tributary::consumer::Subscription;
use tributary::env::TokioEnv;
use tributary::mirror::maker::MetricsAt;
use tributary::mirror::MirrorSettings;
use tributary::tls::server::{ServerTls, MIRROR_MAKER_METRICS_KEYS};
use tributary_core::config::{ClientAuth, MetricsBind, TlsServerSettings};

use super::{load_consumer, load_producer, runtime, wait_for_signal, LOG_TARGET};
use crate::error::ToolError;

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
    /// The address the metrics endpoint binds [default: 0.0.0.0, every interface, when no
    /// config says security.protocol=ssl and the endpoint is plain HTTP, or when it is HTTPS
    /// with --metrics.ssl.client.auth required; else 127.0.0.1].
    #[arg(long = "metrics.host")]
    pub metrics_host: Option<String>,
    /// Serve the metrics over HTTPS only, with this certificate chain (PEM, leaf first); read
    /// again when it changes.
    #[arg(
        long = "metrics.ssl.certificate.location",
        requires_all = ["metrics_port", "metrics_ssl_key"]
    )]
    pub metrics_ssl_certificate: Option<PathBuf>,
    /// The private key of --metrics.ssl.certificate.location (PEM).
    #[arg(
        long = "metrics.ssl.key.location",
        requires = "metrics_ssl_certificate"
    )]
    pub metrics_ssl_key: Option<PathBuf>,
    /// The CA certificates (PEM) scrapers' certificates must chain to.
    #[arg(long = "metrics.ssl.ca.location", requires = "metrics_ssl_certificate")]
    pub metrics_ssl_ca: Option<PathBuf>,
    /// Whether scrapers must present a certificate: none, requested or required (as the
    /// broker's ssl.client.auth; requested and required need --metrics.ssl.ca.location).
    #[arg(
        long = "metrics.ssl.client.auth",
        default_value = "none",
        value_parser = parse_client_auth,
        requires = "metrics_ssl_certificate"
    )]
    pub metrics_ssl_client_auth: ClientAuth,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: crate::cli::StrayWords,
}

/// Runs the mirror maker until SIGINT or SIGTERM, then stops it gracefully (in-flight messages
/// acknowledged, then committed). `Ok(ExitCode::SUCCESS)` only after a clean stop; `Err` says
/// which file or flag is wrong, or why the mirror could not start or failed.
pub fn run_cli(args: MirrorMakerArgs) -> Result<ExitCode, ToolError> {
    let MirrorMakerArgs {
        consumer_config,
        producer_config,
        whitelist,
        blacklist,
        num_streams,
        num_producers,
        metrics_port,
        metrics_host,
        metrics_ssl_certificate,
        metrics_ssl_key,
        metrics_ssl_ca,
        metrics_ssl_client_auth,
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
        (None, None) => return Err(ToolError::Usage("give --whitelist or --blacklist".into())),
    };
    let metrics_tls = match (metrics_ssl_certificate, metrics_ssl_key) {
        (Some(certificate), Some(key)) => {
            if metrics_ssl_client_auth != ClientAuth::None && metrics_ssl_ca.is_none() {
                return Err(ToolError::Usage("--metrics.ssl.client.auth asks scrapers for certificates: name the CA certificates they must chain to with --metrics.ssl.ca.location".into()));
            }
            let settings = TlsServerSettings {
                certificate,
                key,
                ca: metrics_ssl_ca,
                client_auth: metrics_ssl_client_auth,
                allow_list: None,
            };
            let tls = ServerTls::load_for(
                "the metrics endpoint's certificates",
                MIRROR_MAKER_METRICS_KEYS,
                settings,
            )
            .map_err(|e| ToolError::during("the metrics endpoint's TLS", e))?;
            Some(Arc::new(tls))
        }
        _ => None,
    };
    // Metrics stay on the machine by default once the links are secured, unless the endpoint
    // authenticates its scrapers (docs/security.md).
    let tls_on = producer.tls.is_some() || sources.iter().any(|s| s.tls.is_some());
    let https = metrics_tls.is_some().then_some(metrics_ssl_client_auth);
    let metrics_host = metrics_host.unwrap_or_else(|| {
        match MetricsBind::default_for(tls_on, https) {
            MetricsBind::Loopback => "127.0.0.1",
            MetricsBind::Host => "0.0.0.0",
        }
        .to_string()
    });
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
        summary_interval: tributary::mirror::SUMMARY_EVERY,
        observer: None,
        metrics: None,
        target_identity: None,
        target_zookeeper: None,
    };
    let stop = async {
        wait_for_signal().await;
        tracing::info!(target: LOG_TARGET, "signal received: shutting down");
    };
    runtime(None)?
        .block_on(tributary::mirror::maker::run(
            TokioEnv,
            settings,
            metrics_port.map(|port| MetricsAt {
                host: metrics_host.as_str(),
                port,
                tls: metrics_tls,
            }),
            stop,
        ))
        .map_err(ToolError::failed)?;
    Ok(ExitCode::SUCCESS)
}

/// `--metrics.ssl.client.auth`: the broker's `ssl.client.auth` values, in any case.
fn parse_client_auth(raw: &str) -> Result<ClientAuth, UnknownClientAuth> {
    match raw.to_ascii_lowercase().as_str() {
        "none" => Ok(ClientAuth::None),
        "requested" => Ok(ClientAuth::Requested),
        "required" => Ok(ClientAuth::Required),
        _ => Err(UnknownClientAuth(raw.to_string())),
    }
}

/// A `--metrics.ssl.client.auth` value that is not one of the three.
#[derive(Debug, thiserror::Error)]
#[error("expected none, requested or required, found \"{0}\"")]
pub struct UnknownClientAuth(String);
