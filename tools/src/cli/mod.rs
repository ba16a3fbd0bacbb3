//! What every subcommand shares: the arguments that name a partition ([`PartitionArgs`]),
//! ZooKeeper security and broker TLS flags, and the helpers every entry point uses (a runtime,
//! the stop signals, loading client configuration files); and the entry points of the two
//! long-running commands, the broker ([`server`]) and the mirror maker ([`mirror_maker`]).
//!
//! Each tool's arguments and entry point (`run_cli`) live beside the tool, at the crate's root;
//! the parse tree naming them all is [`crate::command`].

pub mod mirror_maker;
pub mod server;

use std::path::Path;

use tributary::config_file::{load_file_with_properties, FileError};
use tributary_core::config::{
    read_zk_security, ConsumerConfig, ProducerConfig, ZkConnect, ZkSecurity,
};
use tributary_core::wire::TopicName;

use crate::error::ToolError;

/// Which broker and partition a tool talks to.
#[derive(Debug, clap::Args)]
pub struct PartitionArgs {
    /// The broker: kafka://host:port or host:port.
    #[arg(long)]
    pub server: String,
    /// The topic.
    #[arg(long)]
    pub topic: TopicName,
    /// The partition.
    #[arg(long, default_value_t = 0)]
    pub partition: i32,
    /// TLS to the broker (`--security.protocol=ssl`, `--ssl.*`).
    #[command(flatten)]
    pub tls: BrokerTlsArgs,
}

/// Words that are not options, which Kafka 0.7's tools accept anywhere and ignore (jopt-simple
/// collects them and no tool reads them; 0.7.2's own producer-performance test passes one). A
/// tool that takes them says so in one warning line instead of refusing to run.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StrayWords {
    /// Ignored, as 0.7's tools ignore them.
    #[arg(hide = true, value_name = "IGNORED")]
    pub words: Vec<String>,
}

impl StrayWords {
    /// Logs one warning naming the ignored words, if any, for `tool`.
    pub fn warn(&self, tool: &str) {
        if !self.words.is_empty() {
            tracing::warn!(
                "{tool}: ignoring {} (not options; Kafka 0.7's tools ignore such words too)",
                self.words.join(" ")
            );
        }
    }
}

/// A tool's ZooKeeper security: `--zk-tls-config-file` (Kafka 2.5's flag) names a `.properties`
/// file with `zk.ssl.client.enable`, `zk.ssl.ca.location`, `zk.ssl.certificate.location`,
/// `zk.ssl.key.location`, `zk.auth.digest.location` and `zk.set.acl`, as in a consumer's file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ZkSecurityFile {
    /// ZooKeeper's TLS and identity for this tool: a .properties file with the zk.ssl.* keys,
    /// zk.auth.digest.location and zk.set.acl (docs/security.md).
    #[arg(long = "zk-tls-config-file", value_name = "FILE")]
    pub zk_tls_config_file: Option<std::path::PathBuf>,
}

impl ZkSecurityFile {
    /// The file's settings, when the flag was given.
    pub fn security(&self) -> Result<Option<Box<ZkSecurity>>, ToolError> {
        let Some(path) = &self.zk_tls_config_file else {
            return Ok(None);
        };
        tributary::config_file::load_file(path, read_zk_security)
            .map(|security| Some(Box::new(security)))
            .map_err(|e| ToolError::flag("--zk-tls-config-file", e))
    }

    /// Parses the connect string given with `flag`, secured as the file says.
    pub fn connect(&self, flag: &str, raw: &str) -> Result<ZkConnect, ToolError> {
        let mut connect = ZkConnect::parse(raw).map_err(|e| ToolError::flag(flag, e))?;
        self.apply(&mut connect)?;
        Ok(connect)
    }

    /// Secures `connect` (one a tool's configuration read from a `zk.connect=` it built) as the
    /// file says; without the flag, `connect` keeps what it has.
    pub fn apply(&self, connect: &mut ZkConnect) -> Result<(), ToolError> {
        if let Some(security) = self.security()? {
            connect.security = security;
        }
        Ok(())
    }
}

/// A tool's TLS to brokers: the consumer's and producer's keys as flags (librdkafka's names).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BrokerTlsArgs {
    /// plaintext (the default) or ssl: connect to the brokers' SSL listeners (found in
    /// /tributary/endpoints when brokers come from ZooKeeper; given ports are used as given).
    #[arg(long = "security.protocol", value_name = "plaintext|ssl")]
    pub security_protocol: Option<String>,
    /// The CA certificates (PEM) the brokers' certificates must chain to.
    #[arg(long = "ssl.ca.location", value_name = "FILE")]
    pub ssl_ca_location: Option<String>,
    /// This tool's certificate (PEM), for brokers that require one.
    #[arg(long = "ssl.certificate.location", value_name = "FILE")]
    pub ssl_certificate_location: Option<String>,
    /// The private key of --ssl.certificate.location (PEM).
    #[arg(long = "ssl.key.location", value_name = "FILE")]
    pub ssl_key_location: Option<String>,
    /// https (the default): a broker's certificate must name the host connected to; none.
    #[arg(
        long = "ssl.endpoint.identification.algorithm",
        value_name = "https|none"
    )]
    pub ssl_endpoint_identification_algorithm: Option<String>,
}

impl BrokerTlsArgs {
    /// The flags given, as `.properties` lines (appended to a tool's consumer or producer
    /// configuration, whose reading checks them and names a wrong one).
    pub fn properties(&self) -> String {
        self.pairs()
            .into_iter()
            .map(|(key, value)| format!("{key}={value}\n"))
            .collect()
    }

    /// The flags given, as `(key, value)` settings.
    pub fn pairs(&self) -> Vec<(String, String)> {
        [
            ("security.protocol", &self.security_protocol),
            ("ssl.ca.location", &self.ssl_ca_location),
            ("ssl.certificate.location", &self.ssl_certificate_location),
            ("ssl.key.location", &self.ssl_key_location),
            (
                "ssl.endpoint.identification.algorithm",
                &self.ssl_endpoint_identification_algorithm,
            ),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.as_ref().map(|v| (key.to_string(), v.clone())))
        .collect()
    }

    /// The TLS link the flags ask for (`None`: plaintext); the certificate files are read
    /// now. With `zk`, brokers found there are reached at their SSL listeners
    /// (`/tributary/endpoints`); without, at the addresses given.
    pub fn link(
        &self,
        zk: Option<(&ZkConnect, std::time::Duration, std::time::Duration)>,
    ) -> Result<Option<tributary::tls::env::ClientLink>, ToolError> {
        let pairs = self.pairs();
        let props = tributary_core::config::Properties::from_pairs(
            "--ssl flags",
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        let settings =
            tributary_core::config::read_client_tls(&props).map_err(ToolError::Setting)?;
        tributary::tls::env::ClientLink::load(settings.as_ref(), zk).map_err(ToolError::failed)
    }
}

/// The target of the log lines the entry points write themselves: the binary's, as if they
/// were written in `main.rs`. (The lines of `server::run` and `mirror::maker::run`, which the
/// simulator runs too, carry their own modules' targets.)
pub const LOG_TARGET: &str = "tributary";

/// A multi-threaded tokio runtime with timers and I/O, with `threads` workers (tokio's default,
/// one per core, when `None`). The error says the runtime could not start, and why.
pub fn runtime(threads: Option<u32>) -> Result<tokio::runtime::Runtime, ToolError> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n as usize);
    }
    builder.enable_all().build().map_err(ToolError::Runtime)
}

/// Waits for SIGTERM or SIGINT (^C). If they cannot be listened for, says so and waits for ^C
/// alone; if even that fails, says so and never returns (the process is then stopped with
/// SIGKILL).
pub async fn wait_for_signal() {
    match StopSignals::listen() {
        Ok(mut signals) => {
            signals.next().await;
        }
        Err(why) => {
            tracing::warn!(target: LOG_TARGET, "cannot listen for SIGTERM ({why}); only ^C stops this gracefully");
            if let Err(e) = tokio::signal::ctrl_c().await {
                // Returning would stop at once: wait for a kill instead, and say so.
                tracing::error!(target: LOG_TARGET, "cannot listen for signals ({e}); stop this process with SIGKILL");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// A signal asking the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGINT (^C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

impl StopSignal {
    /// The exit code a JVM gives after running its shutdown hooks for this signal (128 + the
    /// signal's number), which is what scripts that stopped Kafka 0.7's tools saw.
    pub fn exit_code(self) -> u8 {
        match self {
            StopSignal::Interrupt => 130,
            StopSignal::Terminate => 143,
        }
    }
}

impl std::fmt::Display for StopSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
        })
    }
}

/// SIGINT and SIGTERM, listened for from creation on: once listened for, they no longer stop
/// the process at once, so a tool creates this before it starts work it must finish (0.7.2's
/// shutdown hooks), and every signal that arrives afterwards is seen by [`StopSignals::next`].
#[derive(Debug)]
pub struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Starts listening (within a tokio runtime). The error says why the signals cannot be
    /// listened for; they then keep their default action (the process stops at once).
    pub fn listen() -> Result<Self, std::io::Error> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// The next signal.
    pub async fn next(&mut self) -> StopSignal {
        tokio::select! {
            _ = self.terminate.recv() => StopSignal::Terminate,
            _ = self.interrupt.recv() => StopSignal::Interrupt,
        }
    }
}

/// Listens for stop signals if it can; if not, says so once (the tool then stops at once on a
/// signal, without finishing what it was doing) and returns `None`.
pub fn listen_for_stop(tool: &str) -> Option<StopSignals> {
    match StopSignals::listen() {
        Ok(signals) => Some(signals),
        Err(e) => {
            tracing::warn!(target: LOG_TARGET, "{tool}: cannot listen for SIGINT/SIGTERM ({e}); a signal stops it without finishing");
            None
        }
    }
}

/// Runs `work` to its end, as a shutdown hook runs: a stop signal meanwhile is recorded in
/// `stopped_by` if none was yet (the work goes on), and a second one cuts the work short
/// (`None`; the caller says what was left undone).
pub async fn finish_unless_stopped_twice<T>(
    work: impl std::future::Future<Output = T>,
    signals: &mut Option<StopSignals>,
    stopped_by: &mut Option<StopSignal>,
) -> Option<T> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            // The work first: what is done when a signal comes counts as done.
            biased;
            done = &mut work => return Some(done),
            signal = next_stop(signals) => {
                if stopped_by.is_none() {
                    *stopped_by = Some(signal);
                    continue;
                }
                return None;
            }
        }
    }
}

/// The next stop signal of `signals`; never, when there are none.
pub async fn next_stop(signals: &mut Option<StopSignals>) -> StopSignal {
    match signals {
        Some(signals) => signals.next().await,
        None => std::future::pending().await,
    }
}

/// A consumer configuration file (its errors name the file).
pub fn load_consumer(path: &Path) -> Result<ConsumerConfig, FileError> {
    load_file_with_properties(path, ConsumerConfig::from_properties).map(|(c, _)| c)
}

/// A producer configuration file (its errors name the file).
pub fn load_producer(path: &Path) -> Result<ProducerConfig, FileError> {
    load_file_with_properties(path, ProducerConfig::from_properties).map(|(c, _)| c)
}
