//! `mirror-status`: how far a mirror (its consumer group on the source cluster) is behind the
//! source, per topic or partition, with the rate it moves at and the time to catch up.
//!
//! Each sample reads the group's committed offsets from the source's ZooKeeper (what the mirror
//! cluster durably has: a mirror commits only that) and asks each source broker, over one
//! connection, for its partitions' latest offsets. Without `--watch` it takes two samples
//! `--interval` apart and prints once; with it, it redraws in place after every interval until
//! interrupted. With the mirror cluster's ZooKeeper it also shows how far the mirror's durable
//! copy of each source partition reaches (mirror positions). Everything goes through [`Env`].

mod cli;
pub mod render;

pub use self::cli::{run_cli, MirrorStatusArgs};

use std::collections::BTreeMap;
use std::time::Duration;

use tributary::consumer::view::latest_ends;
use tributary::consumer::{read_offset_node, OffsetNodeError};
use tributary::coordination::identity::read_identity;
use tributary::coordination::{CoordError, Coordination};
use tributary::env::Env;
use tributary_core::config::ZkConnect;
use tributary_core::consumer::BrokerPartition;
use tributary_core::group_id::GroupId;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::consumer_offsets_path;

use self::render::{render, PartitionSample, Sample};

/// `(topic, <broker>-<partition>)`.
type PartitionKey = (String, String);

/// ZooKeeper session and connection timeout.
const ZK_TIMEOUT: Duration = Duration::from_secs(30);
/// Broker connection timeout.
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);
/// Partitions looked at per sample at most (a bad ZooKeeper must not exhaust memory).
const PARTITIONS_MAX: usize = 100_000;

/// Why the status could not be shown.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The source's ZooKeeper could not be reached.
    #[error("{connect}: {source}")]
    Connect {
        /// The source's ZooKeeper.
        connect: ZkConnect,
        /// Why.
        source: CoordError,
    },
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
    /// The group covers more partitions than one sample looks at.
    #[error("group {group} has more than {max} partitions; not shown")]
    TooManyPartitions {
        /// The group.
        group: GroupId,
        /// The most one sample looks at.
        max: usize,
    },
    /// The status could not be written.
    #[error("writing the status: {0}")]
    Output(#[source] std::io::Error),
}

/// What to show.
#[derive(Debug, Clone)]
pub struct StatusOptions {
    /// The mirror's consumer group.
    pub group: GroupId,
    /// The source cluster's ZooKeeper.
    pub zk_connect: ZkConnect,
    /// The mirror cluster's ZooKeeper: also show how far its durable copies reach (positions).
    pub mirror_zk: Option<ZkConnect>,
    /// One line per partition too.
    pub verbose: bool,
    /// Redraw every interval until interrupted.
    pub watch: bool,
    /// Between the two samples (and between redraws).
    pub interval: Duration,
    /// Redraws at most (`--watch`; `None`: until interrupted).
    pub rounds: Option<u64>,
    /// With `watch`: stop once every partition is caught up (its source end known and reached).
    pub until_caught_up: bool,
    /// Redraw in place (a terminal); otherwise each table follows the last.
    pub in_place: bool,
}

/// Prints the status as `options` asks, to `out`.
pub async fn run<E: Env>(
    env: &E,
    options: &StatusOptions,
    out: &mut impl std::io::Write,
) -> Result<(), StatusError> {
    let coord = env
        .coordinate(&options.zk_connect, ZK_TIMEOUT, ZK_TIMEOUT)
        .await
        .map_err(|source| StatusError::Connect {
            connect: options.zk_connect.clone(),
            source,
        })?;
    let result = run_with(env, &coord, options, out).await;
    coord.close().await;
    result
}

async fn run_with<E: Env>(
    env: &E,
    coord: &E::Coord,
    options: &StatusOptions,
    out: &mut impl std::io::Write,
) -> Result<(), StatusError> {
    let group = options.group.as_str();
    // Which cluster this is: what a mirror's lag series call it (`source` label).
    let cluster = match read_identity(coord).await {
        Ok(Some(identity)) => format!("source cluster {identity}\n"),
        Ok(None) => "source cluster without an identity yet (no Tributary broker or mirror has run against it)\n".to_string(),
        Err(e) => format!("source cluster identity unreadable: {e}\n"),
    };
    let header = |rounds: u64| {
        format!(
            "mirror group {group} on {} (every {}s, round {rounds}; ^C to stop)\n{cluster}",
            options.zk_connect,
            options.interval.as_secs_f64()
        )
    };
    let mut earlier = sample(env, coord, &options.group).await?;
    let mut taken = tokio::time::Instant::now();
    let clear = if options.in_place { CLEAR } else { "\n" };
    if options.watch {
        write(out, &format!("{clear}{}", header(0)))?;
        write(out, &render(group, None, &earlier, None, options.verbose))?;
        if options.until_caught_up && render::caught_up(&earlier) {
            return Ok(());
        }
    }
    let mut round = 0;
    loop {
        tokio::time::sleep(options.interval).await;
        let now = sample(env, coord, &options.group).await?;
        let elapsed = taken.elapsed().as_secs_f64();
        taken = tokio::time::Instant::now();
        round += 1;
        let table = render(group, Some(&earlier), &now, Some(elapsed), options.verbose);
        let held = held_section(env, options).await;
        if !options.watch {
            return write(out, &format!("{cluster}{table}{held}"));
        }
        write(out, &format!("{clear}{}{table}{held}", header(round)))?;
        let done = options.until_caught_up && render::caught_up(&now);
        if done || options.rounds.is_some_and(|max| round >= max) {
            return Ok(());
        }
        earlier = now;
    }
}

/// With a mirror cluster given: a heading and one line per source partition it holds copies
/// of (how far the durable copy reaches, the source's end, what it lacks), and what could not
/// be asked. Empty without one.
async fn held_section<E: Env>(env: &E, options: &StatusOptions) -> String {
    let Some(mirror) = &options.mirror_zk else {
        return String::new();
    };
    let mut text = format!("durable copies in the mirror cluster {mirror}:\n");
    match crate::mirror_positions::positions(env, mirror, Some(&options.zk_connect), &[]).await {
        Ok((lines, unanswered)) => {
            if lines.is_empty() {
                text.push_str(
                    "  none (copies made with mirror.preserve.partitions=true have positions)\n",
                );
            }
            for line in &lines {
                text.push_str(&format!("  {}\n", crate::mirror_positions::render(line)));
            }
            for why in &unanswered {
                text.push_str(&format!("  not asked: {why}\n"));
            }
        }
        Err(e) => text.push_str(&format!("  not read: {e}\n")),
    }
    text
}

/// Moves the cursor home and clears the screen (the redraw of `--watch`).
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Writes `text` and flushes it.
fn write(out: &mut impl std::io::Write, text: &str) -> Result<(), StatusError> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(StatusError::Output)
}

/// One sample of every partition the group has committed offsets for.
async fn sample<E: Env>(env: &E, coord: &E::Coord, group: &GroupId) -> Result<Sample, StatusError> {
    let mut positions: BTreeMap<(String, String), i64> = BTreeMap::new();
    let topics = children(coord, &format!("/consumers/{group}/offsets")).await?;
    for name in &topics {
        let Ok(topic) = name.parse::<TopicName>() else {
            tracing::warn!("/consumers/{group}/offsets/{name}: not a valid topic name; left out");
            continue;
        };
        let path = consumer_offsets_path(group, &topic);
        for partition in children(coord, &path).await? {
            if positions.len() >= PARTITIONS_MAX {
                return Err(StatusError::TooManyPartitions {
                    group: group.clone(),
                    max: PARTITIONS_MAX,
                });
            }
            // `None`: removed between the listing and the read.
            let Some(offset) = read_offset_node(coord, format!("{path}/{partition}")).await? else {
                continue;
            };
            positions.insert((topic.to_string(), partition), offset);
        }
    }
    let ends = source_ends(env, coord, positions.keys()).await;
    Ok(positions
        .into_iter()
        .map(|(key, position)| {
            let source_end = ends.get(&key).copied();
            (
                key,
                PartitionSample {
                    source_end,
                    position,
                },
            )
        })
        .collect())
}

/// The latest offset of each `(topic, <broker>-<partition>)`, asking every broker at once
/// (`consumer::view::latest_ends`); partitions whose broker cannot be found or asked are left
/// out (and logged).
async fn source_ends<'a, E: Env>(
    env: &E,
    coord: &E::Coord,
    partitions: impl Iterator<Item = &'a PartitionKey>,
) -> BTreeMap<PartitionKey, i64> {
    let mut typed = Vec::new();
    for key in partitions {
        match (key.0.parse::<TopicName>(), BrokerPartition::parse(&key.1)) {
            (Ok(topic), Some(partition)) => typed.push((topic, partition)),
            _ => tracing::warn!("{}/{}: not <topic>/<broker>-<partition>", key.0, key.1),
        }
    }
    latest_ends(env, coord, typed, BROKER_TIMEOUT)
        .await
        .into_iter()
        .map(|((topic, partition), end)| ((topic.to_string(), partition.to_string()), end))
        .collect()
}

/// A node's children; none when it does not exist.
async fn children(coord: &impl Coordination, path: &str) -> Result<Vec<String>, StatusError> {
    match coord.children(path).await {
        Ok(children) => Ok(children),
        Err(CoordError::NoNode(_)) => Ok(Vec::new()),
        Err(source) => Err(StatusError::ZooKeeper {
            path: path.to_string(),
            source,
        }),
    }
}
