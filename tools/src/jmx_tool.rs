//! `jmx-tool`: what replaces Kafka 0.7.2's JmxTool. Tributary has no JVM, so no JMX; the
//! figures 0.7's MBeans carried (request rates, flush times, bytes in and out, consumer lag)
//! are on the metrics endpoint, in Prometheus' text format. The command says so, with how to
//! read them, and exits 1 (it cannot do what a JmxTool invocation asks).

use std::process::ExitCode;

use crate::error::ToolError;

/// What the command prints on standard error.
pub const REPLACED_BY_METRICS: &str = "JmxTool: Tributary has no JVM and no JMX. The figures Kafka 0.7's MBeans carried are on the metrics endpoint, in Prometheus' text format: start the broker with --metrics.port <port> (or metrics.port=<port> in server.properties; the mirror maker takes --metrics.port too), then read http://<host>:<port>/metrics, e.g. every 5 s as JmxTool's --reporting-interval: watch -n 5 curl -s http://localhost:<port>/metrics. docs/operations.md (Monitoring) lists the series.";

/// `tributary jmx-tool`'s arguments: 0.7.2's, all accepted and none used.
#[derive(Debug, clap::Args)]
pub struct JmxToolArgs {
    /// JmxTool's options (--object-name, --jmx-url, --reporting-interval, --date-format).
    #[arg(num_args = 0.., allow_hyphen_values = true, trailing_var_arg = true, hide = true)]
    pub ignored: Vec<String>,
}

/// Says what replaces JmxTool; exit 1.
pub fn run_cli(_args: JmxToolArgs) -> Result<ExitCode, ToolError> {
    eprintln!("{REPLACED_BY_METRICS}");
    Ok(ExitCode::from(1))
}
