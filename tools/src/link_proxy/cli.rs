//! `tributary link-proxy` on the command line: its arguments, and the entry point that runs a
//! [`LinkProxy`] on tokio until SIGINT or SIGTERM, logging what it carried every 10 s.

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use tributary::client::parse_server;
use tributary::env::TokioEnv;
use tributary::tls::env::SecureEnv;

use super::{LinkProxy, LinkSpec};
use crate::cli::{runtime, wait_for_signal, LOG_TARGET};
use crate::error::ToolError;

/// `tributary link-proxy`'s arguments: where to listen, where to carry to, and the link's round
/// trip and rate.
#[derive(Debug, clap::Args)]
pub struct LinkProxyArgs {
    /// Where to listen: a port, or host:port.
    #[arg(long)]
    pub listen: String,
    /// The server every connection is carried to: host:port.
    #[arg(long)]
    pub upstream: String,
    /// The round trip the link adds, in ms (half each way).
    #[arg(long = "rtt-ms", default_value_t = 100)]
    pub rtt_ms: u32,
    /// The most each direction carries, in megabits a second (shared by all connections);
    /// 0 for no cap.
    #[arg(long = "rate-mbit", default_value_t = 1000.0)]
    pub rate_mbit: f64,
    /// TLS toward the upstream (`--security.protocol ssl` and `--ssl.*`): clients connect in
    /// plaintext (a 0.7 client in the same datacenter) and the proxy carries their bytes
    /// inside TLS to an SSL listener. Without it, bytes go as they come (TLS end to end when
    /// the clients speak it).
    #[command(flatten)]
    pub tls: crate::cli::BrokerTlsArgs,
}

/// Carries connections as `args` asks until SIGINT or SIGTERM, then stops the proxy.
/// `Ok(ExitCode::SUCCESS)` after a clean stop; `Err` for a wrong flag, or when the proxy could
/// not listen or did not stop cleanly.
pub fn run_cli(args: LinkProxyArgs) -> Result<ExitCode, ToolError> {
    let LinkProxyArgs {
        listen,
        upstream,
        rtt_ms,
        rate_mbit,
        tls,
    } = args;
    let link = tls.link(None)?;
    let upstream_tls = link.is_some();
    let (host, port) = match listen.parse::<u16>() {
        Ok(port) => ("0.0.0.0".to_string(), port),
        Err(_) => parse_server(&listen).map_err(|e| ToolError::flag("--listen", e))?,
    };
    let upstream = parse_server(&upstream).map_err(|e| ToolError::flag("--upstream", e))?;
    if !(rate_mbit.is_finite() && (0.0..=1_000_000.0).contains(&rate_mbit)) {
        return Err(ToolError::Usage(format!(
            "--rate-mbit {rate_mbit}: give megabits a second between 0 (no cap) and 1000000"
        )));
    }
    let rate = (rate_mbit > 0.0).then(|| (rate_mbit * 1e6 / 8.0).max(1.0) as u64);
    let spec = LinkSpec::new(std::time::Duration::from_millis(rtt_ms.into()), rate);
    runtime(None)?.block_on(async {
        let env = SecureEnv::new(TokioEnv, link);
        let proxy = LinkProxy::start(env, &host, port, upstream.clone(), spec)
            .await
            .map_err(ToolError::failed)?;
        tracing::info!(
            target: LOG_TARGET,
            "link proxy on {} to {}:{}{}: {rtt_ms} ms round trip, {}; up to {} KiB queued per direction of a connection",
            proxy.local_addr(),
            upstream.0,
            upstream.1,
            if upstream_tls { " (inside TLS)" } else { "" },
            rate.map_or("no rate cap".to_string(), |_| format!("{rate_mbit} Mb/s each way")),
            spec.queue_bytes / 1024
        );
        let mut every = tokio::time::interval(std::time::Duration::from_secs(10));
        every.tick().await;
        let stats = &proxy.stats();
        let mut last = (0, 0);
        let progress = async {
            loop {
                every.tick().await;
                let now = (
                    stats.upstream_bytes.load(Ordering::Relaxed),
                    stats.downstream_bytes.load(Ordering::Relaxed),
                );
                if now != last {
                    tracing::info!(
                        target: LOG_TARGET,
                        "carried {:.1} MB/s toward the server, {:.1} MB/s back ({} connections so far)",
                        (now.0 - last.0) as f64 / 10e6,
                        (now.1 - last.1) as f64 / 10e6,
                        stats.connections.load(Ordering::Relaxed)
                    );
                }
                last = now;
            }
        };
        tokio::select! {
            _ = progress => {}
            () = wait_for_signal() => {}
        }
        proxy.stop().await.map_err(ToolError::failed)
    })?;
    Ok(ExitCode::SUCCESS)
}
