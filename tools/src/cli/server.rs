//! `tributary server` on the command line: its arguments, and the entry point that reads the
//! files and runs [`tributary::server::run`] on tokio until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use tributary::config_file::load_file_with_properties;
use tributary::env::TokioEnv;
use tributary::mirror::MirrorSettings;
use tributary::server::EmbeddedMirror;
use tributary_core::config::{reference, BrokerConfig};

use super::{load_consumer, load_producer, runtime, wait_for_signal, LOG_TARGET};
use crate::error::ToolError;

/// `tributary server`'s arguments: the broker's file, for a mirror broker the embedded mirror's
/// two, and an optional metrics port.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// The broker's server.properties.
    pub server: PathBuf,
    /// For a mirror broker (Kafka 0.7.0): the embedded consumer's properties (the source
    /// cluster's zk.connect, groupid, mirror.topics.whitelist/blacklist,
    /// mirror.consumer.numthreads), then the embedded producer's (the mirror cluster).
    #[arg(num_args = 0..=2)]
    pub mirror: Vec<PathBuf>,
    /// Serve Prometheus metrics on this port (overrides metrics.port in the file, which
    /// stays as it is: e.g. the seed's mirror files, unchanged).
    #[arg(long = "metrics.port")]
    pub metrics_port: Option<u16>,
}

/// Runs a broker (with its embedded mirror when given the two mirror files) until SIGINT or
/// SIGTERM, then stops it in order. `Ok(ExitCode::SUCCESS)` only after a clean stop; `Err` says
/// which file is wrong, or why the server could not start or stopped on its own.
pub fn run_cli(args: ServerArgs) -> Result<ExitCode, ToolError> {
    let ServerArgs {
        server,
        mirror,
        metrics_port,
    } = args;
    let embedded = match mirror.as_slice() {
        [] => None,
        [consumer, producer] => Some(MirrorSettings::embedded(load_consumer(consumer)?, load_producer(producer)?)),
        [only] => {
            return Err(ToolError::Usage(format!(
                "a mirror broker takes three files: server.properties consumer.properties producer.properties; only {} was given after {}",
                only.display(),
                server.display()
            )))
        }
        _ => return Err(ToolError::Usage("tributary server takes one file, or three for a mirror broker".into())),
    };
    let (mut config, props) = load_file_with_properties(&server, BrokerConfig::from_properties)
        .map_err(ToolError::failed)?;
    if let Some(port) = metrics_port {
        if let Some(file) = config.metrics_port.filter(|p| *p != port) {
            tracing::info!(
                target: LOG_TARGET,
                "--metrics.port {port} overrides metrics.port={file} of {}",
                server.display()
            );
        }
        config.metrics_port = Some(port);
    }
    tracing::info!(
        target: LOG_TARGET,
        "configuration from {} (every key; \"(changed)\" where the file differs from the default):\n{}",
        server.display(),
        reference::render_settings(tributary_core::config::ConfigKind::Broker, &props, "  ").trim_end()
    );
    let mirror = embedded.map(|settings| EmbeddedMirror::new(TokioEnv, settings));
    let stop = async {
        wait_for_signal().await;
        tracing::info!(target: LOG_TARGET, "signal received: shutting down");
    };
    runtime(config.num_threads)?
        .block_on(tributary::server::run(TokioEnv, config, mirror, stop))
        .map_err(ToolError::failed)?;
    Ok(ExitCode::SUCCESS)
}
