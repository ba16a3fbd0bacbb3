//! `tributary mirror-status` on the command line: its arguments, and the entry point that runs
//! [`super::run`] on tokio until it is done or interrupted.

use std::process::ExitCode;

use tributary::env::TokioEnv;
use tributary::tls::env::SecureEnv;

use super::{run, StatusOptions};
use crate::cli::{runtime, wait_for_signal};
use crate::error::ToolError;

/// `tributary mirror-status`'s arguments: the source cluster, the mirror's group, and how to
/// show and repeat.
#[derive(Debug, clap::Args)]
pub struct MirrorStatusArgs {
    /// TLS to the source brokers asked for their latest offsets (`--security.protocol=ssl`,
    /// `--ssl.*`).
    #[command(flatten)]
    pub tls: crate::cli::BrokerTlsArgs,
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// The SOURCE cluster's ZooKeeper: HOST:PORT[/CHROOT].
    #[arg(long, default_value = "localhost:2181")]
    pub zkconnect: String,
    /// The mirror's consumer group (the embedded mirror's groupid; KafkaMirror in the seed).
    #[arg(long)]
    pub group: String,
    /// The MIRROR cluster's ZooKeeper: also show, per source partition copied with
    /// mirror.preserve.partitions, how far the mirror's durable copy reaches and what it lacks
    /// (its brokers are asked with the same TLS flags).
    #[arg(long = "mirror-zookeeper")]
    pub mirror_zookeeper: Option<String>,
    /// One line per partition too.
    #[arg(short, long)]
    pub verbose: bool,
    /// Redraw in place every interval until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// Seconds between the two samples (between redraws with --watch).
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// With --watch, stop after this many redraws.
    #[arg(long)]
    pub rounds: Option<u64>,
    /// With --watch, stop once every partition is caught up (for scripts: waits for a
    /// mirror to drain).
    #[arg(long = "until-caught-up", requires = "watch")]
    pub until_caught_up: bool,
}

/// Prints the mirror's status to standard output as `args` asks (redrawn in place on a
/// terminal), until done or until SIGINT or SIGTERM, which end it successfully. `Err` for a
/// wrong flag, or when the source cannot be read.
pub fn run_cli(args: MirrorStatusArgs) -> Result<ExitCode, ToolError> {
    let MirrorStatusArgs {
        zkconnect,
        group,
        mirror_zookeeper,
        verbose,
        watch,
        interval,
        rounds,
        until_caught_up,
        zk_security,
        tls,
    } = args;
    if !(interval.is_finite() && (0.1..=3600.0).contains(&interval)) {
        return Err(ToolError::Usage(format!(
            "--interval {interval}: give seconds between 0.1 and 3600"
        )));
    }
    let zk_connect = zk_security.connect("--zkconnect", &zkconnect)?;
    let mirror_zk = match &mirror_zookeeper {
        Some(raw) => Some(zk_security.connect("--mirror-zookeeper", raw)?),
        None => None,
    };
    let timeout = std::time::Duration::from_secs(10);
    let env = SecureEnv::new(TokioEnv, tls.link(Some((&zk_connect, timeout, timeout)))?);
    let options = StatusOptions {
        group: group.parse().map_err(|e| ToolError::flag("--group", e))?,
        zk_connect,
        mirror_zk,
        verbose,
        watch,
        interval: std::time::Duration::from_secs_f64(interval),
        rounds,
        until_caught_up,
        in_place: std::io::IsTerminal::is_terminal(&std::io::stdout()),
    };
    let mut stdout = std::io::stdout();
    runtime(Some(1))?
        .block_on(async {
            tokio::select! {
                shown = run(&env, &options, &mut stdout) => shown,
                () = wait_for_signal() => Ok(()),
            }
        })
        .map_err(ToolError::failed)?;
    Ok(ExitCode::SUCCESS)
}
