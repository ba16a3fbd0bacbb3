//! The `tributary` command: the broker and the tools that replace Kafka 0.7's.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tributary::config_file::{load_kind, ConfigKind};
use tributary::tools::{check_config, dump_log};

#[derive(Parser)]
#[command(name = "tributary", version, about = "A Kafka 0.7-compatible log broker with cluster mirroring")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a broker (not yet available: the broker is being built).
    #[command(after_help = "Example:\n  tributary server config/server.properties\n  \
        tributary server config/mirror-server.properties config/mirror-consumer.properties config/mirror-producer.properties")]
    Server {
        /// The broker's server.properties.
        server: PathBuf,
        /// For a mirror broker: the embedded consumer's and producer's properties.
        mirror: Vec<PathBuf>,
    },
    /// Check configuration files and print the settings they produce.
    #[command(after_help = "Examples:\n  tributary check-config config/*.properties\n  \
        tributary check-config --kind server my-broker.conf")]
    CheckConfig {
        /// What the files are; by default guessed from names ending in server, producer,
        /// consumer or zookeeper .properties.
        #[arg(long, value_enum)]
        kind: Option<ConfigKind>,
        /// The files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the entries of log segment files (Kafka's DumpLogSegments).
    #[command(after_help = "Example:\n  tributary dump-log /tmp/tributary-logs/test-0/00000000000000000000.kafka")]
    DumpLog {
        /// Do not print message payloads.
        #[arg(long = "noprint", alias = "no-print")]
        no_print: bool,
        /// Segment files (named <20-digit start offset>.kafka).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Server { .. } => Err("the broker is not built yet; `tributary check-config` and \
            `tributary dump-log` work today"
            .into()),
        Command::CheckConfig { kind, files } => check_configs(kind, &files),
        Command::DumpLog { no_print, files } => dump_logs(!no_print, &files),
    }
}

fn check_configs(kind: Option<ConfigKind>, files: &[PathBuf]) -> Result<ExitCode, String> {
    let mut failed = false;
    let mut out = std::io::stdout().lock();
    for path in files {
        let kind = kind.or_else(|| ConfigKind::from_file_name(path)).ok_or_else(|| {
            format!("{}: cannot tell what kind of configuration this is; pass --kind", path.display())
        })?;
        match load_kind(path, kind) {
            Ok(config) => check_config::print_config(&mut out, &path.display().to_string(), &config)
                .map_err(|e| e.to_string())?,
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
            }
        }
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn dump_logs(print_payloads: bool, files: &[PathBuf]) -> Result<ExitCode, String> {
    let mut corrupt = false;
    let mut out = std::io::stdout().lock();
    for path in files {
        let start = dump_log::start_offset_from_name(path).ok_or_else(|| {
            format!("{}: not a segment file name (expected <20-digit offset>.kafka)", path.display())
        })?;
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let found = dump_log::dump_segment(&mut out, &path.display().to_string(), start, &bytes, print_payloads)
            .map_err(|e| e.to_string())?;
        corrupt |= found.is_some();
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(if corrupt { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
