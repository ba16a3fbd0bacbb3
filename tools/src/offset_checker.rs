//! `consumer-offset-checker`: 0.7's ConsumerOffsetChecker, byte for byte.
//!
//! For each topic of the group (sorted) and each `<broker>-<partition>` under it (sorted as
//! strings): the committed offset, the owner (or `null`), the partition's log size (OFFSETS
//! latest from its broker) and the lag, each number also with comma grouping and in GiB (two
//! decimals, Java's rounding: half up). A broker that cannot be reached or whose registration
//! cannot be read leaves out that partition's log size, lag and blank line, as 0.7 does. Then
//! `BROKER INFO`, one line per broker contacted (by id).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use tributary::client::connect;
use tributary::consumer::{read_offset_node, OffsetNodeError};
use tributary::coordination::{CoordError, Coordination};
use tributary::env::{Env, TokioEnv};
use tributary_core::config::ZkConnect;
use tributary_core::consumer::BrokerPartition;
use tributary_core::group_id::GroupId;
use tributary_core::wire::{ErrorCode, OffsetsRequest, Request, Response, TopicName};
use tributary_core::zk_layout::{
    broker_id_path, consumer_offsets_path, consumer_owners_path, parse_broker_registration,
};

use crate::cli::runtime;
use crate::error::ToolError;

/// ZooKeeper session and connection timeout of the tool (0.7's: 30 s).
const ZK_TIMEOUT: Duration = Duration::from_secs(30);
/// Broker connection timeout (0.7's: 10 s).
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);

/// `1,234,567` (Java's `%,d`).
pub fn with_commas(value: i64) -> String {
    let digits = value.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if value < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// `value / 1024^3` as Java's `%,.2f` with a US locale: two decimals rounded half up (away
/// from zero), comma grouping, `-0.00` for a small negative.
pub fn gibibytes(value: i64) -> String {
    const GIB: u128 = 1 << 30;
    let magnitude = u128::from(value.unsigned_abs());
    let hundredths = (magnitude * 200 + GIB) / (2 * GIB);
    let whole = i64::try_from(hundredths / 100).unwrap_or(i64::MAX);
    let sign = if value < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", with_commas(whole), hundredths % 100)
}

/// One partition's block, as 0.7 prints it; `log_size` is `None` when its broker could not be
/// asked (then the log size, lag and trailing blank line are left out).
pub fn format_partition(
    group: &str,
    topic: &str,
    partition: &str,
    owner: Option<&str>,
    offset: i64,
    log_size: Option<i64>,
) -> String {
    let mut out = format!("{group},{topic},{partition} (Group,Topic,BrokerId-PartitionId)\n");
    let mut line = |label: &str, value: String| {
        let _ = writeln!(out, "{label:>20}{value}");
    };
    let number = |v: i64| format!("{} ({}G)", with_commas(v), gibibytes(v));
    line("Owner = ", owner.unwrap_or("null").to_string());
    line("Consumer offset = ", offset.to_string());
    line("= ", number(offset));
    if let Some(size) = log_size {
        line("Log size = ", size.to_string());
        line("= ", number(size));
        let lag = size - offset;
        line("Consumer lag = ", lag.to_string());
        line("= ", number(lag));
        out.push('\n');
    }
    out
}

/// Why the report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OffsetCheckError {
    /// ZooKeeper could not be reached.
    #[error(transparent)]
    Connect(CoordError),
    /// Listing or reading a node of the group failed.
    #[error("{path}: {source}")]
    ZooKeeper {
        /// The node.
        path: String,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// A committed offset node could not be read, or holds something that is not an offset.
    #[error(transparent)]
    Offset(#[from] OffsetNodeError),
    /// A partition's owner node could not be read.
    #[error(transparent)]
    Owner(CoordError),
    /// The report could not be written.
    #[error(transparent)]
    Output(#[from] std::io::Error),
    /// No `--topic` was given and the group has committed no offsets in this ZooKeeper: a
    /// misspelt group, ZooKeeper or chroot (0.7.2 fails here too, exit 1).
    #[error("group {group} has no committed offsets here ({path} does not exist): check --group and the --zkconnect address and chroot")]
    NoGroup {
        /// The group.
        group: String,
        /// The node that is missing.
        path: String,
    },
}

/// What to check.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// The group.
    pub group: GroupId,
    /// ZooKeeper (the source cluster's, for a mirror).
    pub zk_connect: ZkConnect,
    /// Topics; every topic with committed offsets when empty.
    pub topics: Vec<TopicName>,
    /// TLS to the brokers asked for their latest offsets, when given.
    pub link: Option<tributary::tls::env::ClientLink>,
}

/// Writes the report for `options`.
pub async fn check(
    options: &CheckOptions,
    out: &mut impl std::io::Write,
) -> Result<(), OffsetCheckError> {
    let env = TokioEnv;
    let coord = env
        .coordinate(&options.zk_connect, ZK_TIMEOUT, ZK_TIMEOUT)
        .await
        .map_err(OffsetCheckError::Connect)?;
    let secure = tributary::tls::env::SecureEnv::new(TokioEnv, options.link.clone());
    let group = &options.group;
    let mut topics: Vec<TopicName> = if options.topics.is_empty() {
        let path = format!("/consumers/{group}/offsets");
        let names = match coord.children(&path).await {
            Ok(names) => names,
            Err(CoordError::NoNode(_)) => {
                coord.close().await;
                return Err(OffsetCheckError::NoGroup {
                    group: group.to_string(),
                    path,
                });
            }
            Err(source) => return Err(OffsetCheckError::ZooKeeper { path, source }),
        };
        names.iter().filter_map(|t| t.parse().ok()).collect()
    } else {
        options.topics.clone()
    };
    // 0.7.2 sorts the topics (as strings), whether listed or given.
    topics.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let mut brokers: BTreeMap<i32, Option<(String, u16)>> = BTreeMap::new();
    for topic in topics {
        let offsets_path = consumer_offsets_path(group, &topic);
        for partition in children(&coord, &offsets_path).await? {
            // `None`: removed between the listing and the read.
            let node = format!("{offsets_path}/{partition}");
            let Some(offset) = read_offset_node(&coord, node).await? else {
                continue;
            };
            let owner = match coord
                .get(&format!(
                    "{}/{partition}",
                    consumer_owners_path(group, &topic)
                ))
                .await
            {
                Ok((owner, _)) => Some(String::from_utf8_lossy(&owner).into_owned()),
                Err(CoordError::NoNode(_)) => None,
                Err(e) => return Err(OffsetCheckError::Owner(e)),
            };
            let log_size = log_size(&secure, &coord, &mut brokers, &topic, &partition).await;
            let block = format_partition(
                group.as_str(),
                topic.as_str(),
                &partition,
                owner.as_deref(),
                offset,
                log_size,
            );
            out.write_all(block.as_bytes())?;
        }
    }
    let mut info = String::from("BROKER INFO\n");
    for (id, address) in brokers {
        if let Some((host, port)) = address {
            let _ = writeln!(info, "{id} -> {host}:{port}");
        }
    }
    out.write_all(info.as_bytes())?;
    coord.close().await;
    Ok(())
}

/// A node's children; none when it does not exist.
async fn children(coord: &impl Coordination, path: &str) -> Result<Vec<String>, OffsetCheckError> {
    match coord.children(path).await {
        Ok(children) => Ok(children),
        Err(CoordError::NoNode(_)) => Ok(Vec::new()),
        Err(source) => Err(OffsetCheckError::ZooKeeper {
            path: path.to_string(),
            source,
        }),
    }
}

/// The latest offset of `<broker>-<partition>`, logging (as 0.7 does) when it cannot be had.
async fn log_size(
    env: &impl Env,
    coord: &impl Coordination,
    brokers: &mut BTreeMap<i32, Option<(String, u16)>>,
    topic: &TopicName,
    name: &str,
) -> Option<i64> {
    let parsed = BrokerPartition::parse(name)
        .and_then(|p| Some((p.broker_id, i32::try_from(p.partition).ok()?)));
    let Some((broker, partition)) = parsed else {
        tracing::error!("{topic}/{name}: not <broker>-<partition>");
        return None;
    };
    if let std::collections::btree_map::Entry::Vacant(slot) = brokers.entry(broker) {
        let address = match coord.get(&broker_id_path(broker)).await {
            Ok((data, _)) => parse_broker_registration(&String::from_utf8_lossy(&data)),
            Err(_) => None,
        };
        if address.is_none() {
            tracing::error!("could not parse broker info of broker {broker}");
        }
        slot.insert(address);
    }
    let (host, port) = brokers.get(&broker)?.clone()?;
    let request = Request::Offsets(OffsetsRequest {
        topic: topic.clone(),
        partition,
        time: -1,
        max_offsets: 1,
    });
    let answer = async {
        let mut conn = connect(env, &host, port, BROKER_TIMEOUT).await.ok()?;
        match conn.call(&request).await.ok()? {
            Response::Offsets(o) if o.error == ErrorCode::NoError => o.offsets.last().copied(),
            _ => None,
        }
    };
    let size = answer.await;
    if size.is_none() {
        tracing::error!(
            "could not read the log size of {topic}/{name} from broker {broker} at {host}:{port}"
        );
    }
    size
}

/// `tributary consumer-offset-checker`'s arguments (0.7's ConsumerOffsetChecker flags).
#[derive(Debug, clap::Args)]
pub struct ConsumerOffsetCheckerArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// TLS to the brokers (`--security.protocol=ssl`, `--ssl.*`).
    #[command(flatten)]
    pub tls: crate::cli::BrokerTlsArgs,
    /// The consumer group.
    #[arg(long)]
    pub group: String,
    /// ZooKeeper: HOST:PORT[/CHROOT].
    #[arg(long, default_value = "localhost:2181")]
    pub zkconnect: String,
    /// Topics, comma-separated (default: every topic of the group).
    #[arg(long)]
    pub topic: Option<String>,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: crate::cli::StrayWords,
}

/// Writes the group's report to standard output. `Err` for a wrong flag, or when ZooKeeper
/// cannot be read.
pub fn run_cli(args: ConsumerOffsetCheckerArgs) -> Result<ExitCode, ToolError> {
    let ConsumerOffsetCheckerArgs {
        group,
        zkconnect,
        topic,
        stray,
        zk_security,
        tls,
    } = args;
    stray.warn("consumer-offset-checker");
    let zk_connect = zk_security.connect("--zkconnect", &zkconnect)?;
    let link = tls.link(Some((&zk_connect, ZK_TIMEOUT, ZK_TIMEOUT)))?;
    let options = CheckOptions {
        group: group.parse().map_err(|e| ToolError::flag("--group", e))?,
        zk_connect,
        link,
        topics: topic
            .map(|t| {
                t.split(',')
                    .map(|t| {
                        t.trim()
                            .parse()
                            .map_err(|e| ToolError::flag(format!("--topic {t}"), e))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?
            .unwrap_or_default(),
    };
    match runtime(Some(1))?.block_on(check(&options, &mut std::io::stdout())) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e @ OffsetCheckError::NoGroup { .. }) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(ToolError::failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_example_is_reproduced_byte_for_byte() {
        let block = format_partition(
            "KafkaMirror",
            "topic1",
            "0-0",
            Some("KafkaMirror_jkoshy-ld-1320972386342-beb4bfc9-0"),
            561_154_288,
            Some(2_231_392_259),
        );
        let expected = "KafkaMirror,topic1,0-0 (Group,Topic,BrokerId-PartitionId)
            Owner = KafkaMirror_jkoshy-ld-1320972386342-beb4bfc9-0
  Consumer offset = 561154288
                  = 561,154,288 (0.52G)
         Log size = 2231392259
                  = 2,231,392,259 (2.08G)
     Consumer lag = 1670237971
                  = 1,670,237,971 (1.56G)

";
        assert_eq!(block, expected);
    }

    #[test]
    fn an_unreachable_broker_leaves_out_size_lag_and_the_blank_line() {
        let block = format_partition("g", "t", "1-0", None, 0, None);
        assert_eq!(block, "g,t,1-0 (Group,Topic,BrokerId-PartitionId)\n            Owner = null\n  Consumer offset = 0\n                  = 0 (0.00G)\n");
    }

    #[test]
    fn numbers_follow_javas_formatting() {
        assert_eq!(with_commas(0), "0");
        assert_eq!(with_commas(999), "999");
        assert_eq!(with_commas(1000), "1,000");
        assert_eq!(with_commas(-1_234_567), "-1,234,567");
        // Half up, as Java's %.2f: 0.125 GiB is 0.13, not banker's 0.12.
        assert_eq!(gibibytes(1 << 27), "0.13");
        assert_eq!(gibibytes(-(1 << 27)), "-0.13");
        assert_eq!(gibibytes(-1000), "-0.00");
        assert_eq!(gibibytes(1_099_511_627_776_000), "1,024,000.00");
    }
}
