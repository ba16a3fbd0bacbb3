//! `update-offsets-in-zk`: Kafka 0.7.2's `kafka.utils.UpdateOffsetsInZK`. Sets a group's
//! committed offset of every partition of a topic to the partition's earliest or latest offset,
//! as its broker answers OFFSETS: `update-offsets-in-zk earliest|latest consumer.properties
//! topic` (the group and ZooKeeper from the consumer properties). Prints 0.7.2's lines:
//! `updating partition <broker>-<partition> with new offset: <offset>` per partition, then
//! `updated the offset for <n> partitions`.
//!
//! Better than 0.7.2: every partition's offset is asked first and nothing is written unless
//! all answered (0.7.2 wrote the ones before a broker that failed); a group with live members
//! is named in a warning (their next commit overwrites the new offsets).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tributary::client::connect;
use tributary::consumer::write_offset;
use tributary::coordination::{CoordError, Coordination};
use tributary::env::{Env, TokioEnv};
use tributary::failure::Failure;
use tributary::tls::env::{ClientLink, SecureEnv};
use tributary_core::config::ConsumerConfig;
use tributary_core::consumer::BrokerPartition;
use tributary_core::wire::{ErrorCode, OffsetsRequest, Request, Response, TopicName};
use tributary_core::zk_layout::{
    broker_id_path, broker_topic_path, consumer_ids_path, consumer_offsets_path,
    parse_broker_registration,
};

use crate::cli::{load_consumer, runtime};
use crate::error::ToolError;

/// Broker connection timeout (0.7.2's: 10 s).
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);
/// Partitions of one broker read at most (as the group reads them).
const COUNT_MAX: u32 = tributary_core::config::PARTITIONS_PER_TOPIC_MAX as u32;

/// 0.7.2's usage line (printed on standard output, exit 1).
pub const USAGE: &str =
    "USAGE: kafka.utils.UpdateOffsetsInZK$ [earliest | latest] consumer.properties topic";

/// Which end of each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The oldest offset still held (OFFSETS time -2).
    Earliest,
    /// The end of the log (OFFSETS time -1).
    Latest,
}

impl End {
    fn time(self) -> i64 {
        match self {
            End::Earliest => -2,
            End::Latest => -1,
        }
    }
}

/// Why the offsets were not updated (none is written then).
#[derive(Debug, thiserror::Error)]
pub enum UpdateOffsetsError {
    /// ZooKeeper could not be reached.
    #[error("{connect}: {source}")]
    Connect {
        /// The connect string.
        connect: String,
        /// Why.
        source: CoordError,
    },
    /// A node could not be read or written.
    #[error("{path}: {source}")]
    ZooKeeper {
        /// The node.
        path: String,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// No broker registers the topic (0.7.2: "Can't find topic").
    #[error("Can't find topic {0}: no broker registers it")]
    NoTopic(TopicName),
    /// A broker's registration of the topic is not `<broker id>` holding a partition count.
    #[error("{0}: not a broker's registration of the topic (a broker id holding its partition count); no offset was updated")]
    Unreadable(String),
    /// A partition's broker is not registered or cannot be parsed.
    #[error("Broker {0} is unavailable. Cannot issue getOffsetsBefore request")]
    BrokerUnavailable(i32),
    /// A broker did not answer OFFSETS.
    #[error("{topic} partition {partition}: broker {broker} at {address} did not answer OFFSETS: {detail}; no offset was updated")]
    Offsets {
        /// The topic.
        topic: TopicName,
        /// `<broker>-<partition>`.
        partition: BrokerPartition,
        /// The broker.
        broker: i32,
        /// Its address.
        address: String,
        /// What happened.
        #[source]
        detail: Failure,
    },
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated {
    /// Each partition and its new offset, in 0.7's order (string order of `<broker>-<partition>`).
    pub offsets: Vec<(BrokerPartition, i64)>,
    /// Live members of the group when the offsets were written.
    pub live_members: usize,
}

/// Sets `config`'s group's offsets of `topic` to `end`.
pub async fn update<E: Env>(
    env: &E,
    config: &ConsumerConfig,
    topic: &TopicName,
    end: End,
) -> Result<Updated, UpdateOffsetsError> {
    let timeout = |ms: u32| Duration::from_millis(u64::from(ms));
    let coord = env
        .coordinate(
            &config.zk_connect,
            timeout(config.zk.session_timeout_ms),
            timeout(config.zk.connection_timeout_ms),
        )
        .await
        .map_err(|source| UpdateOffsetsError::Connect {
            connect: config.zk_connect.to_string(),
            source,
        })?;
    let result = update_with(env, &coord, config, topic, end).await;
    coord.close().await;
    result
}

async fn update_with<E: Env>(
    env: &E,
    coord: &impl Coordination,
    config: &ConsumerConfig,
    topic: &TopicName,
    end: End,
) -> Result<Updated, UpdateOffsetsError> {
    let zk = |path: String| move |source| UpdateOffsetsError::ZooKeeper { path, source };
    let topic_path = broker_topic_path(topic);
    let brokers = match coord.children(&topic_path).await {
        Ok(brokers) => brokers,
        Err(CoordError::NoNode(_)) => Vec::new(),
        Err(source) => return Err(zk(topic_path)(source)),
    };
    let mut partitions = Vec::new();
    for broker in brokers {
        let path = format!("{topic_path}/{broker}");
        // Every registered broker's partitions, or nothing: a node that cannot be read stops
        // the update before anything is written (0.7.2 would have moved only some).
        let Ok(broker_id) = broker.parse::<i32>() else {
            return Err(UpdateOffsetsError::Unreadable(path));
        };
        let count = match coord.get(&path).await {
            Ok((data, _)) => String::from_utf8_lossy(&data).trim().parse::<u32>().ok(),
            // Gone since the listing: that broker no longer has the topic.
            Err(CoordError::NoNode(_)) => continue,
            Err(source) => return Err(zk(path)(source)),
        };
        match count {
            Some(count) if count <= COUNT_MAX => {
                partitions.extend((0..count).map(|partition| BrokerPartition {
                    broker_id,
                    partition,
                }))
            }
            _ => return Err(UpdateOffsetsError::Unreadable(path)),
        }
    }
    if partitions.is_empty() {
        return Err(UpdateOffsetsError::NoTopic(topic.clone()));
    }
    partitions.sort();
    // Every offset first; nothing is written unless all answered.
    let mut offsets = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let path = broker_id_path(partition.broker_id);
        let address = match coord.get(&path).await {
            Ok((data, _)) => parse_broker_registration(&String::from_utf8_lossy(&data)),
            Err(CoordError::NoNode(_)) => None,
            Err(source) => return Err(zk(path)(source)),
        };
        let (host, port) =
            address.ok_or(UpdateOffsetsError::BrokerUnavailable(partition.broker_id))?;
        let failed = |detail: Failure| UpdateOffsetsError::Offsets {
            topic: topic.clone(),
            partition,
            broker: partition.broker_id,
            address: format!("{host}:{port}"),
            detail,
        };
        let mut conn = connect(env, &host, port, BROKER_TIMEOUT)
            .await
            .map_err(|e| failed(Failure::caused(e.to_string(), e)))?;
        let request = Request::Offsets(OffsetsRequest {
            topic: topic.clone(),
            partition: i32::try_from(partition.partition).unwrap_or(i32::MAX),
            time: end.time(),
            max_offsets: 1,
        });
        let offset = match conn
            .call(&request)
            .await
            .map_err(|e| failed(Failure::caused(e.to_string(), e)))?
        {
            Response::Offsets(o) if o.error == ErrorCode::NoError => o
                .offsets
                .first()
                .copied()
                .ok_or_else(|| failed("no offset in the answer".into()))?,
            Response::Offsets(o) => return Err(failed(format!("error {:?}", o.error).into())),
            other => return Err(failed(format!("unexpected answer {other:?}").into())),
        };
        offsets.push((partition, offset));
    }
    let ids_path = consumer_ids_path(&config.group_id);
    let live_members = match coord.children(&ids_path).await {
        Ok(members) => members.len(),
        Err(CoordError::NoNode(_)) => 0,
        Err(source) => return Err(zk(ids_path)(source)),
    };
    let offsets_path = consumer_offsets_path(&config.group_id, topic);
    for (partition, offset) in &offsets {
        let path = format!("{offsets_path}/{partition}");
        write_offset(coord, &path, *offset)
            .await
            .map_err(zk(path))?;
    }
    Ok(Updated {
        offsets,
        live_members,
    })
}

/// `tributary update-offsets-in-zk`'s arguments: 0.7.2's three positional words.
#[derive(Debug, clap::Args)]
pub struct UpdateOffsetsArgs {
    /// earliest | latest, the consumer properties file (groupid, zk.connect), the topic.
    #[arg(num_args = 0.., allow_hyphen_values = true, value_name = "earliest|latest consumer.properties topic")]
    pub words: Vec<String>,
}

/// Updates as `args` asks, printing 0.7.2's lines; 0.7.2's usage line and exit 1 for wrong
/// words.
pub fn run_cli(args: UpdateOffsetsArgs) -> Result<ExitCode, ToolError> {
    let (end, config, topic) = match args.words.as_slice() {
        [end, config, topic, ..] if end == "earliest" || end == "latest" => (
            if end == "earliest" {
                End::Earliest
            } else {
                End::Latest
            },
            PathBuf::from(config),
            topic.clone(),
        ),
        _ => {
            println!("{USAGE}");
            return Ok(ExitCode::from(1));
        }
    };
    let config = load_consumer(&config)?;
    // The brokers asked for offsets are reached as the file's security.protocol says.
    let zk_timeout = Duration::from_millis(u64::from(config.zk.session_timeout_ms));
    let link = ClientLink::load(
        config.tls.as_ref(),
        Some((&config.zk_connect, zk_timeout, zk_timeout)),
    )
    .map_err(ToolError::failed)?;
    let topic: TopicName = topic.parse().map_err(|e| ToolError::flag("topic", e))?;
    let updated = runtime(Some(1))?
        .block_on(update(
            &SecureEnv::new(TokioEnv, link),
            &config,
            &topic,
            end,
        ))
        .map_err(ToolError::failed)?;
    for (partition, offset) in &updated.offsets {
        println!("updating partition {partition} with new offset: {offset}");
    }
    println!(
        "updated the offset for {} partitions",
        updated.offsets.len()
    );
    if updated.live_members > 0 {
        tracing::warn!(
            "group {} has {} live member(s): their next commit overwrites these offsets; stop them and run this again",
            config.group_id,
            updated.live_members
        );
    }
    Ok(ExitCode::SUCCESS)
}
