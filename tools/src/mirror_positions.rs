//! `mirror-positions`: how far the mirror cluster's durable copy of each source partition
//! reaches (asked of its brokers: MIRROR_POSITIONS). That is the loss window of an
//! asynchronous mirror: after a disaster of the source, the acknowledged messages the mirror
//! lacks are exactly those past it. With `--source-zookeeper` (the source back, or still
//! running) each line also gives the source's end and the range the mirror lacks.
//!
//! Only copies made with `mirror.preserve.partitions=true` have positions.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use tributary::consumer::view::latest_ends;
use tributary::coordination::identity::read_identity;
use tributary::coordination::{CoordError, Coordination};
use tributary::env::{Env, TokioEnv};
use tributary::mirror::held::{read_held, Held};
use tributary::producer::directory::Directory;
use tributary_core::config::ZkConnect;
use tributary_core::identity::ClusterId;
use tributary_core::wire::TopicName;

use crate::cli::runtime;
use crate::error::ToolError;

/// How long ZooKeeper and each broker are waited for.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// `tributary mirror-positions`'s arguments.
#[derive(Debug, clap::Args)]
pub struct MirrorPositionsArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// The MIRROR cluster's ZooKeeper: host:port[,host:port...][/chroot].
    #[arg(long)]
    pub zookeeper: String,
    /// The SOURCE cluster's ZooKeeper: also print its end and the range the mirror lacks.
    #[arg(long = "source-zookeeper")]
    pub source_zookeeper: Option<String>,
    /// Only these mirror topics (repeat the flag); all by default.
    #[arg(long)]
    pub topic: Vec<String>,
}

/// Why the positions could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PositionsError {
    /// A ZooKeeper could not be reached.
    #[error("{connect}: {source}")]
    Connect {
        /// The connect string.
        connect: ZkConnect,
        /// Why.
        source: CoordError,
    },
}

/// One source partition's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLine {
    /// `<cluster>/<topic>/<broker>-<partition>` at the source.
    pub source: String,
    /// The source offset the mirror's durable copy reaches.
    pub held_to: i64,
    /// Where: `<mirror topic>/<broker>-<partition>`.
    pub mirror: String,
    /// The source's end, when asked and known.
    pub source_end: Option<i64>,
}

/// Every source partition the mirror cluster holds copies of (its furthest copy), and what
/// could not be asked.
pub async fn positions<E: Env>(
    env: &E,
    mirror: &ZkConnect,
    source: Option<&ZkConnect>,
    topics: &[TopicName],
) -> Result<(Vec<HeldLine>, Vec<String>), PositionsError> {
    let connect_failed = |connect: &ZkConnect| {
        let connect = connect.clone();
        move |source| PositionsError::Connect { connect, source }
    };
    let directory = Directory::from_zookeeper(env, mirror, TIMEOUT, TIMEOUT)
        .await
        .map_err(connect_failed(mirror))?;
    let wanted = (!topics.is_empty()).then_some(topics);
    let held: Held = read_held(env, &directory.snapshot(), wanted, TIMEOUT).await;
    let mut ends = BTreeMap::new();
    let mut source_id: Option<ClusterId> = None;
    if let Some(source) = source {
        let coord = env
            .coordinate(source, TIMEOUT, TIMEOUT)
            .await
            .map_err(connect_failed(source))?;
        source_id = match read_identity(&coord).await {
            Ok(identity) => identity.map(|i| i.id),
            Err(e) => {
                // Said: without it the lines cannot name what the mirror lacks.
                eprintln!("{source}: the source cluster's identity could not be read ({e}); the source's ends are left out");
                None
            }
        };
        let asked = held
            .furthest()
            .keys()
            .filter(|k| Some(&k.cluster) == source_id.as_ref())
            .map(|k| (k.topic.clone(), k.partition))
            .collect::<Vec<_>>();
        ends = latest_ends(env, &coord, asked, TIMEOUT).await;
        coord.close().await;
    }
    let lines = held
        .furthest()
        .into_iter()
        .map(|(key, ((topic, at), h))| HeldLine {
            source: key.to_string(),
            held_to: h.held_to,
            mirror: format!("{topic}/{at}"),
            source_end: (Some(&key.cluster) == source_id.as_ref())
                .then(|| ends.get(&(key.topic.clone(), key.partition)).copied())
                .flatten(),
        })
        .collect();
    Ok((lines, held.unanswered))
}

/// One line: the copy's reach, and with the source's end, what the mirror lacks.
pub fn render(line: &HeldLine) -> String {
    let lacks = match line.source_end {
        Some(end) if end > line.held_to => format!(
            "  source end {end}: lacks offsets {}..{end} ({} bytes)",
            line.held_to,
            end - line.held_to
        ),
        Some(end) => format!("  source end {end}: lacks nothing"),
        None => String::new(),
    };
    format!(
        "{}  held to {}  in {}{lacks}",
        line.source, line.held_to, line.mirror
    )
}

/// Prints one line per source partition; exit code 1 when some partition could not be asked
/// (then what it holds is unknown, and said on standard error).
pub fn run_cli(args: MirrorPositionsArgs) -> Result<ExitCode, ToolError> {
    let mirror = args.zk_security.connect("--zookeeper", &args.zookeeper)?;
    let source = match &args.source_zookeeper {
        Some(raw) => Some(args.zk_security.connect("--source-zookeeper", raw)?),
        None => None,
    };
    let mut topics = Vec::new();
    for topic in &args.topic {
        topics.push(
            topic
                .parse::<TopicName>()
                .map_err(|e| ToolError::flag("--topic", e))?,
        );
    }
    let (lines, unanswered) = runtime(Some(1))?
        .block_on(positions(&TokioEnv, &mirror, source.as_ref(), &topics))
        .map_err(ToolError::failed)?;
    if lines.is_empty() {
        println!("no mirror positions in {mirror} (copies made with mirror.preserve.partitions=true have them)");
    }
    for line in &lines {
        println!("{}", render(line));
    }
    for why in &unanswered {
        eprintln!("not asked: {why}");
    }
    Ok(match unanswered.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}
