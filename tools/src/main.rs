//! The `tributary` command: the broker and the tools that replace Kafka 0.7's.
//!
//! This file parses the command line, sets up logging and calls the subcommand's entry point;
//! each entry point (`run_cli`) lives beside what it runs (see [`tributary_tools::command`]).

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tributary_tools::cli::{mirror_maker, server};
use tributary_tools::command::{Cli, Command, LogFormat, LogStream};
use tributary_tools::error::ToolError;
use tributary_tools::{
    check_config, cluster_id, console_consumer, console_producer, demote, dump_log, get_offsets,
    jmx_tool, link_proxy, mirror_positions, mirror_status, offset_checker, perf, promote, replay,
    shells, simple_consumer, simple_perf, translate_offsets, update_offsets, verify_rebalance,
    zk_offsets,
};

fn main() -> ExitCode {
    // Read as Kafka 0.7.2's tools read their options (abbreviations, `-topic`, `--max -1`).
    let args = match tributary_tools::jopt::as_jopt_reads(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(args);
    // The broker logs what it does; the tools only what went wrong (RUST_LOG overrides both).
    // check-config prints its own warnings.
    let default_level = match cli.command {
        Command::Server(_) | Command::MirrorMaker(_) | Command::LinkProxy(_) => "info",
        // 0.7.2's shell writes what it consumed as log lines; they are its output.
        Command::SimpleConsumerShell(_) => "warn,kafka.tools.SimpleConsumerShell$=info",
        Command::CheckConfig(_) => "error",
        _ => "warn",
    };
    // A RUST_LOG that does not parse is said, not dropped without a word.
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => {
            tracing_subscriber::EnvFilter::try_new(&directives).unwrap_or_else(|e| {
                eprintln!(
                    "warning: RUST_LOG={directives} is not understood ({e}); using {default_level}"
                );
                default_level.into()
            })
        }
        _ => default_level.into(),
    };
    let (writer, terminal) = match cli.log_to {
        LogStream::Stderr => (
            BoxMakeWriter::new(std::io::stderr),
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
        ),
        LogStream::Stdout => (
            BoxMakeWriter::new(std::io::stdout),
            std::io::IsTerminal::is_terminal(&std::io::stdout()),
        ),
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match cli.log_format {
        LogFormat::Text => logs.with_ansi(terminal).init(),
        LogFormat::Json => {
            logs.json().with_ansi(false).init();
            // A panic's report goes to the log shipper as JSON too.
            std::panic::set_hook(Box::new(|info| tracing::error!("panic: {info}")));
        }
    }
    let json = cli.log_format == LogFormat::Json;
    match run(cli.command) {
        Ok(code) => code,
        Err(message) => {
            match json {
                true => tracing::error!("{message}"),
                false => eprintln!("error: {message}"),
            }
            ExitCode::from(2)
        }
    }
}

/// Runs the subcommand's entry point.
fn run(command: Command) -> Result<ExitCode, ToolError> {
    match command {
        Command::Server(args) => server::run_cli(args),
        Command::MirrorMaker(args) => mirror_maker::run_cli(args),
        Command::MirrorStatus(args) => mirror_status::run_cli(args),
        Command::ConsoleProducer(args) => console_producer::run_cli(args),
        Command::ConsoleConsumer(args) => console_consumer::run_cli(args),
        Command::ConsumerOffsetChecker(args) => offset_checker::run_cli(args),
        Command::Promote(args) => promote::run_cli(args),
        Command::Demote(args) => demote::run_cli(args),
        Command::ProducerPerf(args) => perf::run_producer_perf_cli(args),
        Command::ConsumerPerf(args) => perf::run_consumer_perf_cli(args),
        Command::SimpleConsumerPerf(args) => simple_perf::run_cli(args),
        Command::SimpleConsumer(args) => simple_consumer::run_cli(args),
        Command::GetOffsets(args) => get_offsets::run_cli(args),
        Command::ClusterId(args) => cluster_id::run_cli(args),
        Command::MirrorPositions(args) => mirror_positions::run_cli(args),
        Command::TranslateOffsets(args) => translate_offsets::run_cli(args),
        Command::LinkProxy(args) => link_proxy::run_cli(args),
        Command::CheckConfig(args) => check_config::run_cli(args),
        Command::DumpLog(args) => dump_log::run_cli(args),
        Command::ExportZkOffsets(args) => zk_offsets::run_export_cli(args),
        Command::ImportZkOffsets(args) => zk_offsets::run_import_cli(args),
        Command::UpdateOffsetsInZk(args) => update_offsets::run_cli(args),
        Command::VerifyConsumerRebalance(args) => verify_rebalance::run_cli(args),
        Command::JmxTool(args) => jmx_tool::run_cli(args),
        Command::SimpleConsumerShell(args) => simple_consumer::run_shell_cli(args),
        Command::ProducerShell(args) => shells::run_producer_cli(args),
        Command::ConsumerShell(args) => shells::run_consumer_cli(args),
        Command::ReplayLogProducer(args) => replay::run_cli(args),
    }
}
