//! Replica mode: a broker whose configuration names a source cluster
//! (`replica.source.zk.connect`) copies every partition of source broker
//! `replica.source.brokerid` for the topics its filter passes, byte for byte, at the same
//! offsets (0.7's offsets are byte positions, so the same bytes appended in the same order land
//! at the same offsets).
//!
//! The copy position of a partition is its own log's written end (while copying, that end
//! plus what is fetched and waiting to be appended): after a crash, recovery cuts the
//! unflushed tail and copying resumes there, so nothing is copied twice and nothing is
//! skipped, with no offsets kept anywhere else. What is copied becomes visible as any append
//! does: once flushed. A new replica partition starts at the source's earliest offset.
//!
//! Replica partitions refuse produces from clients (see the handler); a partition whose source
//! data is corrupt stops with an error naming it and its offsets, and the others go on. When
//! the source has deleted bytes before they were copied (a gap), the replica's log records a
//! hole there (never filled with anything) and copying goes on after it. Every wait on the source has a deadline; a
//! connection that failed is never reused.

mod copy;
mod demote;
mod discover;
pub mod error;
mod offset_sync;
mod probe;
mod promote;
mod trouble;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tributary_core::config::{BrokerConfig, ReplicaConfig};
use tributary_core::group_id::GroupId;
use tributary_core::log::{TopicPartition, ValidatedSet};
use tributary_core::message::MessageMark;
use tributary_core::mirror::lag::LagSample;
use tributary_core::planted::{self, Bug};
use tributary_core::replica::{decide, fetch_size, Fetched};
use tributary_core::wire::{ErrorCode, FetchRequest, OffsetsRequest, Request, Response, TopicName};
use tributary_core::zk_layout::{
    broker_id_path, broker_topic_partitions_path, consumer_ids_path, consumer_offsets_path,
    parse_broker_registration, promoted_ack_path, BROKER_TOPICS_PATH, PROMOTED_PATH,
};

use self::copy::{copy, copying};
use self::discover::{announce, discover};
use self::error::StopReason;
use self::offset_sync::sync_offsets;
use self::probe::{probe_lag, ProbeTargets};
use self::promote::promotions;
use crate::client::{connect, latest_offsets, Connection};
use crate::coordination::{CoordError, Coordination, NodeKind};
use crate::env::Env;
use crate::logs::{self, with_log, Logs};
use crate::metrics::broker::BrokerMeter;
use crate::metrics::mirror::{LagGauges, MirrorMetrics};
use crate::pending::PendingSender;
use crate::tls::env::{ClientLink, SecureEnv};

/// Where a replica broker keeps, per group and partition, the offset it last synced (in this
/// cluster's ZooKeeper).
const SYNCED_PATH: &str = "/tributary/synced";
/// How often the source's ZooKeeper is read for new topics and partitions.
const DISCOVERY_INTERVAL: Duration = Duration::from_secs(2);
/// How long one read of the source's ZooKeeper may take before the copier goes back to this
/// cluster's (its promotions and demotions are read every [`DISCOVERY_INTERVAL`] whatever the
/// source does).
const DISCOVERY_WAIT: Duration = Duration::from_secs(4);
/// How often, with metrics on, the source's end of every copied partition is asked for (the
/// lag gauges).
const LAG_PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// Partitions in one MULTIFETCH at most.
const FETCHES_PER_REQUEST_MAX: usize = 200;
/// The most partitions a source topic may have on one broker; a larger count read from the
/// source's ZooKeeper is refused as invalid (a bad value there must not exhaust memory).
const PARTITIONS_MAX: u32 = 10_000;
/// Headers a message's entry adds beyond `max.message.size` (length, magic, attributes, CRC).
const ENTRY_OVERHEAD_BYTES: u32 = 10;

/// One copied partition's state.
#[derive(Debug)]
pub(super) struct Copied {
    /// Bytes asked per fetch (grows for a message larger than `replica.fetch.size`).
    pub(super) fetch_bytes: u32,
    /// Why copying stopped, if it did (corruption, a gap): said once, then skipped.
    pub(super) stopped: Option<StopReason>,
    /// Not fetched yet by this run of the copier (only the planted bug looks).
    pub(super) fresh: bool,
    /// Holes left because the source deleted data before it was copied.
    pub(super) gaps: u64,
    /// Where the next fetch starts: the log's end once every pending append is done (`None`
    /// until read from the log).
    pub(super) next: Option<u64>,
    /// The last message the log holds once every pending append is done (`None` until known,
    /// or while it holds none).
    pub(super) mark: Option<MessageMark>,
    /// Whether the log was found a prefix of the source's on the current connection (checked
    /// before anything more is appended: at start and after every reconnect).
    pub(super) verified: bool,
    /// The fetch in flight checks the prefix at this message (not new data).
    pub(super) verifying: Option<MessageMark>,
}

impl Copied {
    /// A partition not fetched yet by this run of the copier.
    pub(super) fn new(fetch_bytes: u32) -> Self {
        Copied {
            fetch_bytes,
            stopped: None,
            fresh: true,
            gaps: 0,
            next: None,
            mark: None,
            verified: false,
            verifying: None,
        }
    }
}

/// What the source cluster looks like: the source broker's address and its partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct SourceView {
    pub(super) address: Option<(String, u16)>,
    pub(super) counts: BTreeMap<TopicName, u32>,
}

/// What the copier works with.
#[derive(Debug)]
pub struct Copier<F: tributary_core::log::LogFs + Clone> {
    /// This broker's configuration.
    pub broker: BrokerConfig,
    /// Its `replica.*` settings.
    pub replica: ReplicaConfig,
    /// Its logs.
    pub logs: Arc<Logs<F>>,
    /// Where new topics are announced for registration (`None` without ZooKeeper).
    pub new_topics: Option<PendingSender<TopicName, ()>>,
    /// Flush latency.
    pub meter: BrokerMeter,
    /// Lag, copied bytes and gaps (metrics on).
    pub metrics: Option<Arc<MirrorMetrics>>,
    /// TLS to the source brokers (`replica.security.protocol=ssl`); `None` is plaintext.
    pub link: Option<ClientLink>,
}

/// Copies until `stop`; returns only then (every failure is retried, loudly, or stops one
/// partition). With metrics on, a lag probe runs beside the copier; a panic in it ends this
/// task with that panic (the broker stops on it).
pub async fn run<E: Env>(env: E, copier: Copier<E::Fs>, stop: watch::Receiver<bool>) {
    // Every connection to the source inside TLS when replica.security.protocol=ssl.
    let env = SecureEnv::new(env, copier.link.clone());
    let (targets, targets_rx) = watch::channel(ProbeTargets::default());
    let Some(metrics) = copier.metrics.clone() else {
        return copy(env, copier, targets, stop).await;
    };
    let probe_with = (
        copier.replica.source_broker_id,
        Duration::from_millis(copier.replica.socket_timeout_ms.into()),
    );
    let mut probe = tokio::spawn(probe_lag(
        env.clone(),
        copier.logs.clone(),
        probe_with,
        metrics,
        targets_rx,
        stop.clone(),
    ));
    let copying = copy(env, copier, targets, stop);
    tokio::pin!(copying);
    let mut probe_ended = false;
    loop {
        tokio::select! {
            biased;
            joined = &mut probe, if !probe_ended => {
                probe_ended = true;
                if let Err(e) = joined {
                    if e.is_panic() {
                        std::panic::resume_unwind(e.into_panic());
                    }
                }
            }
            // The copier finishes what it is doing when stopped, whatever the probe does.
            () = &mut copying => break,
        }
    }
    if !probe_ended {
        if let Err(e) = probe.await {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
}

/// Waits `how_long` or until stopped; `true` when stopped.
pub(super) async fn pause(stop: &mut watch::Receiver<bool>, how_long: Duration) -> bool {
    let stopped = tokio::select! {
        biased;
        _ = stop.wait_for(|s| *s) => true,
        () = tokio::time::sleep(how_long) => false,
    };
    stopped || *stop.borrow()
}
