//! What can go wrong in the consumer group, as types: for the application reading its streams
//! ([`ConsumerError`]), starting a member ([`StartError`]), committing ([`CommitError`]), one
//! rebalance attempt ([`RebalanceError`]), reading where a partition starts
//! ([`StartOffsetError`], [`OffsetNodeError`]), and an observer reading the group
//! ([`ViewError`]). Each message names what failed (the node, the partition, the broker).

use std::sync::Arc;
use std::time::Duration;

use tributary_core::consumer::{BrokerPartition, TopicPatternError};
use tributary_core::group_id::GroupId;
use tributary_core::wire::{ErrorCode, TopicName};

use crate::client::ClientError;
use crate::coordination::CoordError;

/// What went wrong for the application.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsumerError {
    /// No message within `consumer.timeout.ms`; the stream stays usable.
    #[error("no message within {0:?}")]
    Timeout(Duration),
    /// The consumer was shut down.
    #[error("the consumer is shut down")]
    Closed,
    /// A message failed its checks (CRC, size, compression); nothing after it in its chunk is
    /// handed out.
    #[error("{topic}/{partition}: corrupt message: {detail}")]
    Corrupt {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: BrokerPartition,
        /// What failed, with its offset.
        detail: String,
    },
    /// A message is larger than `fetch.size`: the partition cannot move on until it is raised.
    #[error("{topic}/{partition}: the message at offset {offset} is larger than fetch.size ({fetch_bytes} bytes); raise fetch.size")]
    MessageTooLarge {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: BrokerPartition,
        /// Where it is.
        offset: i64,
        /// `fetch.size`.
        fetch_bytes: i32,
    },
    /// The offset is outside the partition and `autooffset.reset` does not say where to go.
    #[error("{topic}/{partition}: offset {offset} is out of range (the partition holds {earliest}..{latest}) and autooffset.reset={policy} says not to move")]
    OffsetOutOfRange {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: BrokerPartition,
        /// The offset.
        offset: i64,
        /// The partition's first offset.
        earliest: i64,
        /// The partition's end.
        latest: i64,
        /// The configured policy.
        policy: String,
    },
    /// A mirror with positions met an offset past the source partition's end: the partition
    /// went back (its log lost and started again, or the topic deleted and made again). Its
    /// new messages sit at offsets the mirror holds copies of, and would be taken for them.
    #[error("{topic}/{partition}: offset {offset} is past the partition's end {latest}: the source partition went back (its log lost, or the topic made again). With mirror.preserve.partitions its new messages would be taken for copies the mirror already holds, so this partition is not mirrored; move the mirror topic aside (or mirror this source without mirror.preserve.partitions) and restart the mirror")]
    SourceWentBack {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: BrokerPartition,
        /// The offset asked for.
        offset: i64,
        /// The partition's end now.
        latest: i64,
    },
    /// The data at an offset inside the partition cannot be read.
    #[error("{topic}/{partition}: cannot read at offset {offset}: {detail}")]
    Unreadable {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: BrokerPartition,
        /// The offset.
        offset: i64,
        /// Why.
        detail: String,
    },
    /// The member's rebalance failed `rebalance.retries.max` times: it owns nothing until the
    /// group or the topics change (it tries again then, and after a pause).
    #[error("could not join the group's partitions after {attempts} rebalance attempts: {last}")]
    Rebalance {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's failure.
        last: RebalanceError,
    },
    /// The broker answered a fetch with an error code.
    #[error("{topic}/{partition}: the broker answered a fetch at {offset} with {} ({})", code.code(), code.name())]
    Broker {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: BrokerPartition,
        /// The offset.
        offset: i64,
        /// The error code.
        code: ErrorCode,
    },
}

/// Why a consumer could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// ZooKeeper could not be reached or written.
    #[error(transparent)]
    ZooKeeper(#[from] CoordError),
    /// The whitelist or blacklist is not a valid regex.
    #[error(transparent)]
    Filter(#[from] TopicPatternError),
    /// A subscription with no stream at all.
    #[error("a consumer needs at least one stream")]
    NoStreams,
    /// The TLS settings (`security.protocol=ssl`, `ssl.*`) cannot be used.
    #[error("consumer TLS settings: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// Why a commit was not (wholly) written. Offsets written before the failure stay written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// Writing a partition's offset node failed.
    #[error("{path}: {source}")]
    ZooKeeper {
        /// The offset node.
        path: String,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// The consumer was shut down (or its coordinator stopped) before the commit was done.
    #[error("the consumer is shut down")]
    Closed,
}

/// Why one rebalance attempt failed (the attempt's claims are released, and it is tried again
/// after `rebalance.backoff.ms`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RebalanceError {
    /// A ZooKeeper operation on a node failed.
    #[error("{path}: {source}")]
    ZooKeeper {
        /// The node.
        path: String,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// This member's registration was gone and registering it again failed.
    #[error(transparent)]
    Register(CoordError),
    /// The group's view cannot be planned from: a member's registration cannot be read (every
    /// member must see the same members, so the attempt fails rather than assign without it),
    /// or it registers more streams for a topic than any topic has partitions.
    #[error(transparent)]
    Plan(tributary_core::consumer::group::PlanError),
    /// A broker hosting an assigned partition has a registration that names no host and port.
    #[error("{path}: unreadable broker registration")]
    BrokerRegistration {
        /// The broker's ids node.
        path: String,
    },
    /// An assigned partition's owner node is held by another consumer (or another session).
    #[error("{topic}/{partition} is still owned by {owner}")]
    OwnedElsewhere {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: BrokerPartition,
        /// The thread the owner node names.
        owner: String,
    },
    /// Recording where the group starts a partition it never committed failed.
    #[error("recording where {topic}/{partition} starts: {source}")]
    RecordStart {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: BrokerPartition,
        /// Why.
        source: OffsetNodeError,
    },
}

/// Why a partition's offset node (`/consumers/<group>/offsets/<topic>/<partition>`) could not be
/// read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffsetNodeError {
    /// ZooKeeper failed on it.
    #[error("{path}: {source}")]
    ZooKeeper {
        /// The offset node.
        path: String,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// It holds something that is not a decimal offset.
    #[error("{path}: not an offset")]
    NotAnOffset {
        /// The offset node.
        path: String,
    },
}

/// Why the offset a newly assigned partition starts at could not be read (the partition is
/// claimed but stalled, and read again at a rebalance soon).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StartOffsetError {
    /// The group's committed offset could not be read.
    #[error(transparent)]
    Committed(#[from] OffsetNodeError),
    /// The partition's broker could not be reached, or a call on its connection failed (this
    /// partition's and those asked after it on that connection).
    #[error("broker {host}:{port}: {source}")]
    Broker {
        /// The broker's host.
        host: String,
        /// The broker's port.
        port: u16,
        /// What failed.
        source: Arc<ClientError>,
    },
    /// The broker did not answer every OFFSETS asked of it in time.
    #[error("broker {host}:{port} did not answer within {timeout:?}")]
    Timeout {
        /// The broker's host.
        host: String,
        /// The broker's port.
        port: u16,
        /// The time allowed.
        timeout: Duration,
    },
    /// The broker answered OFFSETS with no offset.
    #[error("{topic}/{partition}: no offsets")]
    NoOffsets {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: BrokerPartition,
    },
    /// The broker answered OFFSETS with an error code, or with another response.
    #[error("{topic}/{partition}: OFFSETS answered {answer}")]
    Refused {
        /// The topic.
        topic: TopicName,
        /// The partition.
        partition: BrokerPartition,
        /// The answer, as debug-printed.
        answer: String,
    },
    /// The partition's start was never asked for (no answer came back for it).
    #[error("its start was not asked for")]
    NotAsked,
}

/// Why an observer could not read a group (`consumer::view`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    /// Reading a node failed.
    #[error("{path}: {source}")]
    ZooKeeper {
        /// The node.
        path: String,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// The group covers more partitions than one view reads.
    #[error("group {group} covers more than {max} partitions; not read")]
    TooManyPartitions {
        /// The group.
        group: GroupId,
        /// The most one view reads.
        max: usize,
    },
}
