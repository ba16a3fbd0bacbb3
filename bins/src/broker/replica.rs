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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tributary_core::config::{BrokerConfig, ReplicaConfig};
use tributary_core::group_id::GroupId;
use tributary_core::log::{TopicPartition, ValidatedSet};
use tributary_core::planted::{self, Bug};
use tributary_core::replica::{decide, fetch_size, Fetched};
use tributary_core::wire::{ErrorCode, FetchRequest, OffsetsRequest, Request, Response, TopicName};
use tributary_core::zk_layout::{
    broker_id_path, broker_topic_partitions_path, consumer_ids_path, consumer_offsets_path,
    parse_broker_registration, promoted_ack_path, BROKER_TOPICS_PATH, PROMOTED_PATH,
};

use super::logs::{self, with_log, Logs};
use super::pending::PendingSender;
use crate::client::{connect, latest_offsets, Connection};
use crate::coordination::{CoordError, Coordination, NodeKind};
use crate::env::Env;
use crate::metrics::broker::BrokerMeter;
use crate::metrics::mirror::{LagGauges, MirrorMetrics};
use tributary_core::mirror::lag::LagSample;

/// Where a replica broker keeps, per group and partition, the offset it last synced (in this
/// cluster's ZooKeeper).
const SYNCED_PATH: &str = "/tributary/synced";
/// How often the source's ZooKeeper is read for new topics and partitions.
const DISCOVERY_INTERVAL: Duration = Duration::from_secs(2);
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
#[derive(Debug, Clone)]
struct Copied {
    /// Bytes asked per fetch (grows for a message larger than `replica.fetch.size`).
    fetch_bytes: u32,
    /// Why copying stopped, if it did (corruption, a gap): said once, then skipped.
    stopped: Option<String>,
    /// Not fetched yet by this run of the copier (only the planted bug looks).
    fresh: bool,
    /// Holes left because the source deleted data before it was copied.
    gaps: u64,
    /// Where the next fetch starts: the log's end once every pending append is done (`None`
    /// until read from the log).
    next: Option<u64>,
}

/// What the source cluster looks like: the source broker's address and its partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SourceView {
    address: Option<(String, u16)>,
    counts: BTreeMap<TopicName, u32>,
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
}

/// Copies until `stop`; returns only then (every failure is retried, loudly, or stops one
/// partition). With metrics on, a lag probe runs beside the copier; a panic in it ends this
/// task with that panic (the broker stops on it).
pub async fn run<E: Env>(env: E, copier: Copier<E::Fs>, stop: watch::Receiver<bool>) {
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

/// The copier itself; tells the lag probe what to ask about through `targets`.
async fn copy<E: Env>(
    env: E,
    copier: Copier<E::Fs>,
    targets: watch::Sender<ProbeTargets>,
    mut stop: watch::Receiver<bool>,
) {
    let Copier {
        broker,
        replica,
        logs,
        new_topics,
        meter,
        metrics,
    } = copier;
    let timeout = Duration::from_millis(replica.socket_timeout_ms.into());
    let backoff = Duration::from_millis(replica.fetch_backoff_ms.into());
    let size_limit = broker
        .max_message_bytes
        .saturating_add(ENTRY_OVERHEAD_BYTES)
        .max(replica.fetch_bytes);
    let mut coord: Option<E::Coord> = None;
    // This cluster's ZooKeeper: promotions are read there, synced offsets written there.
    let mut own: Option<E::Coord> = None;
    let mut synced: BTreeMap<(String, TopicPartition), i64> = BTreeMap::new();
    let mut last_sync: Option<i64> = None;
    let sync_every = i64::from(replica.offsets_sync_interval_ms);
    let mut conn: Option<Connection<E::Stream>> = None;
    let mut view = SourceView::default();
    let mut copied: BTreeMap<TopicPartition, Copied> = BTreeMap::new();
    // Fetched and decided, appended during the next round's fetch.
    let mut pending: Vec<Pending> = Vec::new();
    let mut last_discovery: Option<i64> = None;
    tracing::info!(
        "replica: copying source broker {} of {} (topics {})",
        replica.source_broker_id,
        replica.source,
        replica.topics.pattern()
    );
    let mut last_promotions: Option<i64> = None;
    while !*stop.borrow() {
        let now = env.now_ms();
        // Promotions first, from this cluster's ZooKeeper, whether or not the source answers:
        // a promoted topic is never copied into again, and nothing is copied before they are
        // known.
        if last_promotions.is_none_or(|at| now - at >= DISCOVERY_INTERVAL.as_millis() as i64) {
            match promotions(&env, &broker, &logs, &mut own, &meter).await {
                Ok(()) => last_promotions = Some(now),
                Err(e) => {
                    tracing::warn!("replica: reading promotions from this cluster's ZooKeeper: {e}; not copying until it answers");
                    own = None;
                    if pause(&mut stop, backoff.max(Duration::from_secs(1))).await {
                        return;
                    }
                    continue;
                }
            }
        }
        if last_discovery.is_none_or(|at| now - at >= DISCOVERY_INTERVAL.as_millis() as i64) {
            match discover(&env, &broker, &replica, &mut coord).await {
                Ok(fresh) => {
                    last_discovery = Some(now);
                    if fresh.address != view.address {
                        conn = None;
                    }
                    announce(&logs, &view, &fresh, new_topics.as_ref());
                    for (topic, count) in &fresh.counts {
                        for p in 0..*count {
                            copied
                                .entry(TopicPartition::new(topic.clone(), p))
                                .or_insert(Copied {
                                    fetch_bytes: replica.fetch_bytes,
                                    stopped: None,
                                    fresh: true,
                                    gaps: 0,
                                    next: None,
                                });
                        }
                    }
                    view = fresh;
                    targets.send_replace(ProbeTargets {
                        address: view.address.clone(),
                        partitions: copied.keys().cloned().collect(),
                    });
                }
                Err(e) => {
                    tracing::warn!(
                        "replica: reading the source's ZooKeeper at {}: {e}; retrying",
                        replica.source
                    );
                    coord = None;
                    if pause(&mut stop, backoff.max(Duration::from_secs(1))).await {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some((host, port)) = view.address.clone() else {
            if pause(&mut stop, DISCOVERY_INTERVAL).await {
                return;
            }
            continue;
        };
        if conn.is_none() {
            match connect(&env, &host, port, timeout).await {
                Ok(fresh) => conn = Some(fresh),
                Err(e) => {
                    tracing::warn!("replica: source broker {host}:{port}: {e}; retrying");
                    if pause(&mut stop, backoff.max(Duration::from_secs(1))).await {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some(open) = conn.as_mut() else { continue };
        let sizes = (replica.fetch_bytes, size_limit);
        let copying_with = (&meter, metrics.as_deref());
        let copied_any = match round(
            &env,
            open,
            &logs,
            &mut copied,
            &mut pending,
            sizes,
            copying_with,
        )
        .await
        {
            Ok(any) => any,
            Err(e) => {
                tracing::warn!("replica: source broker {host}:{port}: {e}; reconnecting");
                conn = None;
                false
            }
        };
        if let Some(groups) = &replica.offsets_sync_groups {
            let now = env.now_ms();
            if last_sync.is_none_or(|at| now - at >= sync_every) {
                last_sync = Some(now);
                if let (Some(source), Some(here)) = (coord.as_ref(), own.as_ref()) {
                    let ids = (replica.source_broker_id, broker.broker_id);
                    if let Err(e) =
                        sync_offsets(source, here, &logs, groups, ids, &mut synced).await
                    {
                        tracing::warn!("replica: syncing consumer offsets: {e}; trying again");
                    }
                }
            }
        }
        if !copied_any && pause(&mut stop, backoff).await {
            return;
        }
    }
}

/// A source broker's `(host, port)`.
type SourceAddress = (String, u16);

/// What the lag probe asks about: the source broker's address and the partitions copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ProbeTargets {
    address: Option<SourceAddress>,
    partitions: Vec<TopicPartition>,
}

/// With metrics on, every [`LAG_PROBE_INTERVAL`]: asks the source broker (over a connection of
/// its own, so copying never waits for it) for the end of every partition still copied, and
/// sets the lag gauges against each replica log's flushed end (what the replica durably has). A
/// round the source does not fully answer leaves the gauges as they were. Runs until `stop`.
async fn probe_lag<E: Env>(
    env: E,
    logs: Arc<Logs<E::Fs>>,
    (source_broker, timeout): (i32, Duration),
    metrics: Arc<MirrorMetrics>,
    targets: watch::Receiver<ProbeTargets>,
    mut stop: watch::Receiver<bool>,
) {
    let mut lag = LagGauges::default();
    // The connection, with the address it goes to.
    let mut conn: Option<(SourceAddress, Connection<E::Stream>)> = None;
    loop {
        if pause(&mut stop, LAG_PROBE_INTERVAL).await {
            return;
        }
        let wanted = targets.borrow().clone();
        let Some(address) = wanted.address else {
            continue;
        };
        if conn.as_ref().is_none_or(|(at, _)| *at != address) {
            match connect(&env, &address.0, address.1, timeout).await {
                Ok(fresh) => conn = Some((address.clone(), fresh)),
                Err(e) => {
                    tracing::debug!(
                        "replica: lag probe: source broker {}:{}: {e}",
                        address.0,
                        address.1
                    );
                    conn = None;
                    continue;
                }
            }
        }
        let Some((_, open)) = conn.as_mut() else {
            continue;
        };
        let partitions: Vec<&TopicPartition> = wanted
            .partitions
            .iter()
            .filter(|tp| copying(&logs, &tp.topic))
            .collect();
        let asked: Vec<(TopicName, i32)> = partitions
            .iter()
            .map(|tp| (tp.topic.clone(), tp.partition as i32))
            .collect();
        let (ends, failed) = latest_offsets(open, &asked).await;
        if let Some(e) = failed {
            tracing::debug!("replica: lag probe: {e}; reconnecting at the next round");
            conn = None;
            continue;
        }
        // A stopped partition keeps its gauges: its lag grows, which is what to alert on.
        let samples: Vec<LagSample> = partitions
            .iter()
            .zip(ends)
            .filter_map(|(tp, end)| {
                let log = logs.get(tp)?;
                Some(LagSample {
                    topic: tp.topic.to_string(),
                    partition: format!("{source_broker}-{}", tp.partition),
                    source_end: end?,
                    position: i64::try_from(log.ends().1).unwrap_or(i64::MAX),
                })
            })
            .collect();
        lag.update(&metrics, env.now_ms(), &samples);
    }
}

/// Waits `how_long` or until stopped; `true` when stopped.
async fn pause(stop: &mut watch::Receiver<bool>, how_long: Duration) -> bool {
    let stopped = tokio::select! {
        biased;
        _ = stop.wait_for(|s| *s) => true,
        () = tokio::time::sleep(how_long) => false,
    };
    stopped || *stop.borrow()
}

/// Reads the source broker's address and partition counts from the source's ZooKeeper.
async fn discover<E: Env>(
    env: &E,
    broker: &BrokerConfig,
    replica: &ReplicaConfig,
    coord: &mut Option<E::Coord>,
) -> Result<SourceView, CoordError> {
    if coord.is_none() {
        let session = Duration::from_millis(broker.zk.session_timeout_ms.into());
        let connection = Duration::from_millis(broker.zk.connection_timeout_ms.into());
        *coord = Some(env.coordinate(&replica.source, session, connection).await?);
    }
    let Some(c) = coord.as_ref() else {
        return Ok(SourceView::default());
    };
    let address = match c.get(&broker_id_path(replica.source_broker_id)).await {
        Ok((data, _)) => parse_broker_registration(&String::from_utf8_lossy(&data)),
        Err(CoordError::NoNode(_)) => None,
        Err(e) => return Err(e),
    };
    let mut counts = BTreeMap::new();
    let topics = match c.children(BROKER_TOPICS_PATH).await {
        Ok(topics) => topics,
        Err(CoordError::NoNode(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    for name in topics {
        if !replica.topics.allows(&name) {
            continue;
        }
        let Ok(topic) = name.parse::<TopicName>() else {
            tracing::warn!("replica: the source registers topic {name:?}, which is not a valid topic name; skipped");
            continue;
        };
        let path = broker_topic_partitions_path(&topic, replica.source_broker_id);
        match c.get(&path).await {
            Ok((data, _)) => match String::from_utf8_lossy(&data).trim().parse::<u32>() {
                Ok(count) if count > 0 && count <= PARTITIONS_MAX => {
                    counts.insert(topic, count);
                }
                _ => tracing::warn!(
                    "replica: {path} holds {:?}, not a partition count; skipped",
                    String::from_utf8_lossy(&data)
                ),
            },
            Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(SourceView { address, counts })
}

/// Makes new or grown source topics replica topics here (with the source's counts) and has
/// them registered.
fn announce<F: tributary_core::log::LogFs + Clone>(
    logs: &Logs<F>,
    old: &SourceView,
    fresh: &SourceView,
    new_topics: Option<&PendingSender<TopicName, ()>>,
) {
    for (topic, count) in &fresh.counts {
        if old.counts.get(topic) == Some(count) {
            continue;
        }
        logs.set_replica(topic, *count);
        tracing::info!(
            "replica: {topic} has {count} partitions on the source broker; copying them"
        );
        if let Some(sender) = new_topics {
            // The registration task is gone only while the broker stops.
            let _stopping = sender.add(topic.clone(), ()).is_err();
        }
    }
}

/// Bytes fetched and decided, waiting to be appended at `offset` (the log's end once the
/// appends before it are done).
#[derive(Debug)]
struct Pending {
    tp: TopicPartition,
    offset: i64,
    bytes: bytes::Bytes,
    /// Top-level messages in `bytes`.
    messages: u64,
}

/// Whether the copier still copies `topic` (not promoted; `copied` holds only topics the filter
/// passes).
fn copying<F: tributary_core::log::LogFs + Clone>(logs: &Logs<F>, topic: &TopicName) -> bool {
    logs.is_replica(topic) || planted::active(Bug::ReplicaCopyAfterPromote)
}

/// One round, pipelined: the MULTIFETCH of every partition still copied (each at its end once
/// `pending` is appended) runs while `pending` — what the previous round fetched — is
/// appended; then what came back is decided into the next `pending`. `true` when anything was
/// appended or is pending. An append that fails stops its partition (what was fetched for it
/// meanwhile is dropped); a connection failure is returned after `pending` was appended.
async fn round<E: Env>(
    env: &E,
    conn: &mut Connection<E::Stream>,
    logs: &Arc<Logs<E::Fs>>,
    copied: &mut BTreeMap<TopicPartition, Copied>,
    pending: &mut Vec<Pending>,
    sizes: (u32, u32),
    (meter, metrics): (&BrokerMeter, Option<&MirrorMetrics>),
) -> Result<bool, String> {
    let wanted = wanted(env, conn, logs, copied).await?;
    let (fetched, appended) = tokio::join!(
        fetch_all(conn, &wanted),
        append_all(env, logs, std::mem::take(pending), meter, metrics)
    );
    let appended_any = !appended.is_empty();
    for (tp, result) in appended {
        if let (Err(reason), Some(state)) = (result, copied.get_mut(&tp)) {
            tracing::error!("replica: {tp}: {reason}; this partition stops copying");
            state.stopped = Some(reason);
        }
    }
    let fetched = fetched?;
    decide_all(env, conn, logs, copied, pending, sizes, fetched, metrics).await?;
    if let Some(m) = metrics {
        let waiting: usize = pending.iter().map(|p| p.bytes.len()).sum();
        m.in_flight_bytes
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }
    Ok(appended_any || !pending.is_empty())
}

/// The fetch of every partition still copied, at its end once what is pending is appended
/// (read from its log the first time, or created at the source's earliest offset).
async fn wanted<E: Env>(
    env: &E,
    conn: &mut Connection<E::Stream>,
    logs: &Arc<Logs<E::Fs>>,
    copied: &mut BTreeMap<TopicPartition, Copied>,
) -> Result<Vec<(TopicPartition, FetchRequest)>, String> {
    let mut wanted = Vec::new();
    let keys: Vec<TopicPartition> = copied.keys().cloned().collect();
    for tp in keys {
        let Some(state) = copied.get_mut(&tp) else {
            continue;
        };
        if !copying(logs, &tp.topic) || state.stopped.is_some() {
            continue;
        }
        let end = match (state.next, logs.get(&tp)) {
            (Some(next), _) => next,
            (None, Some(log)) => log.lock().await.written_end(),
            (None, None) => match create(env, conn, logs, &tp).await? {
                Created::At(start) => start,
                Created::NotYet => continue,
                Created::Refused(reason) => {
                    tracing::error!("replica: {tp}: {reason}; this partition stops copying");
                    state.stopped = Some(reason);
                    continue;
                }
            },
        };
        let end = if state.fresh && planted::active(Bug::ReplicaWrongResumeOffset) {
            match source_offset(conn, &tp, -1).await? {
                Some(latest) => u64::try_from(latest).unwrap_or(end),
                None => end,
            }
        } else {
            end
        };
        state.next = Some(end);
        let Ok(offset) = i64::try_from(end) else {
            let reason = format!("its end {end} is past the largest offset");
            tracing::error!("replica: {tp}: {reason}; this partition stops copying");
            state.stopped = Some(reason);
            continue;
        };
        let request = FetchRequest {
            topic: tp.topic.clone(),
            partition: tp.partition as i32,
            offset,
            max_bytes: state.fetch_bytes as i32,
        };
        wanted.push((tp, request));
    }
    Ok(wanted)
}

/// MULTIFETCHes `wanted`, FETCHES_PER_REQUEST_MAX at a time: each fetch with its answer.
async fn fetch_all<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    wanted: &[(TopicPartition, FetchRequest)],
) -> Result<
    Vec<(
        TopicPartition,
        FetchRequest,
        tributary_core::wire::FetchResponse,
    )>,
    String,
> {
    let mut out = Vec::with_capacity(wanted.len());
    for batch in wanted.chunks(FETCHES_PER_REQUEST_MAX) {
        let fetches: Vec<FetchRequest> = batch.iter().map(|(_, f)| f.clone()).collect();
        let blocks = match conn.call(&Request::MultiFetch(fetches)).await {
            Ok(Response::MultiFetch(m)) if m.blocks.len() == batch.len() => m.blocks,
            Ok(other) => return Err(format!("unexpected answer to MULTIFETCH: {other:?}")),
            Err(e) => return Err(e.to_string()),
        };
        for ((tp, request), block) in batch.iter().zip(blocks) {
            out.push((tp.clone(), request.clone(), block));
        }
    }
    Ok(out)
}

/// Appends everything pending (at most one set per partition: one round's), partition by
/// partition, skipping topics promoted meanwhile (nothing is copied into a topic after its
/// promote point); each partition with its outcome. (One partition at a time: appends spawned
/// side by side made the simulation's traces differ between runs of one seed.)
async fn append_all<E: Env>(
    env: &E,
    logs: &Arc<Logs<E::Fs>>,
    pending: Vec<Pending>,
    meter: &BrokerMeter,
    metrics: Option<&MirrorMetrics>,
) -> Vec<(TopicPartition, Result<(), String>)> {
    let mut out: Vec<(TopicPartition, Result<(), String>)> = Vec::with_capacity(pending.len());
    for p in pending {
        if !copying(logs, &p.tp.topic) {
            continue;
        }
        let (bytes, messages) = (p.bytes.len() as u64, p.messages);
        let result = append(env, logs, &p.tp, p.offset, p.bytes, meter).await;
        if let (Ok(()), Some(m)) = (&result, metrics) {
            m.messages.inc_by(messages);
            m.bytes.inc_by(bytes);
        }
        out.push((p.tp, result));
    }
    out
}

/// Decides what of each fetched block is appended (into `pending`, moving the partition's next
/// offset past it), and handles what the source refused: a gap leaves a hole, corruption and
/// oversized messages stop the partition.
#[allow(clippy::too_many_arguments)]
async fn decide_all<E: Env>(
    env: &E,
    conn: &mut Connection<E::Stream>,
    logs: &Arc<Logs<E::Fs>>,
    copied: &mut BTreeMap<TopicPartition, Copied>,
    pending: &mut Vec<Pending>,
    (base_bytes, limit_bytes): (u32, u32),
    fetched: Vec<(
        TopicPartition,
        FetchRequest,
        tributary_core::wire::FetchResponse,
    )>,
    metrics: Option<&MirrorMetrics>,
) -> Result<(), String> {
    for (tp, request, block) in fetched {
        let Some(state) = copied.get_mut(&tp) else {
            continue;
        };
        // Stopped by a failed append while this was fetched: dropped.
        if state.stopped.is_some() {
            continue;
        }
        state.fresh = false;
        match block.error {
            ErrorCode::NoError => {}
            ErrorCode::OffsetOutOfRange => {
                match out_of_range(conn, &tp, request.offset).await? {
                    OutOfRange::Gap { from, to } => {
                        match leave_hole(env, logs, &tp, from, to).await {
                            Ok(()) => {
                                state.gaps += 1;
                                state.next = Some(to);
                                if let Some(m) = metrics {
                                    m.gaps.inc();
                                    m.gap_bytes.inc_by(to.saturating_sub(from));
                                }
                                tracing::error!("replica: {tp}: GAP: the source deleted bytes {from}..{to} before they were copied; this replica's log holds a hole there (recorded as {}; nothing is filled in, reads inside it answer OffsetOutOfRange); copying goes on at {to} ({} gaps in this partition since start)", tributary_core::log::gap_file_name(from, to), state.gaps);
                            }
                            Err(reason) => {
                                tracing::error!("replica: {tp}: the source deleted bytes {from}..{to} before they were copied, and the hole cannot be recorded: {reason}; this partition stops copying");
                                state.stopped = Some(reason);
                            }
                        }
                    }
                    OutOfRange::Stop(reason) => {
                        tracing::error!("replica: {tp}: {reason}; this partition stops copying");
                        state.stopped = Some(reason);
                    }
                    OutOfRange::Unknown => tracing::warn!(
                        "replica: {tp}: the source refused offset {} and did not say its range; trying again",
                        request.offset
                    ),
                }
                continue;
            }
            other => {
                tracing::warn!(
                    "replica: {tp}: the source answered {other:?} at offset {}; trying again",
                    request.offset
                );
                continue;
            }
        }
        match decide(request.offset, &block.messages) {
            Fetched::Nothing => {}
            // The whole first message fits what was asked: the source cut the answer short
            // (its response budget); ask again.
            Fetched::TooSmall { needed } if needed <= state.fetch_bytes as usize => {}
            Fetched::TooSmall { needed } => {
                match fetch_size(state.fetch_bytes, Some(needed), limit_bytes) {
                    Some(bigger) if bigger > state.fetch_bytes => {
                        tracing::info!("replica: {tp}: a message of {needed} bytes at offset {}; fetching it whole", request.offset);
                        state.fetch_bytes = bigger;
                    }
                    _ => {
                        let reason = format!("the message at offset {} needs {needed} bytes, more than max.message.size allows ({limit_bytes} with its headers)", request.offset);
                        tracing::error!("replica: {tp}: {reason}; this partition stops copying");
                        state.stopped = Some(reason);
                    }
                }
            }
            Fetched::Corrupt { offset, error } => {
                let reason = format!("corrupt source data at offset {offset}: {error}");
                tracing::error!("replica: {tp}: {reason}; this partition stops copying (nothing at or after it was copied)");
                state.stopped = Some(reason);
            }
            Fetched::Append { bytes, messages } => {
                state.next = u64::try_from(request.offset).ok().map(|o| o + bytes as u64);
                pending.push(Pending {
                    tp: tp.clone(),
                    offset: request.offset,
                    bytes: block.messages.slice(..bytes),
                    messages,
                });
                // A fetch size grown for one large message goes back once it is copied.
                state.fetch_bytes = base_bytes;
            }
        }
    }
    Ok(())
}

/// What creating a replica partition came to.
enum Created {
    /// The log exists; copying goes on from this offset.
    At(u64),
    /// The source does not answer for the partition yet.
    NotYet,
    /// The partition cannot be created here (refused at startup, disk error): it stops.
    Refused(String),
}

/// Creates a replica partition at the source's earliest offset. `Err` only for a failure of the
/// connection to the source.
async fn create<E: Env>(
    env: &E,
    conn: &mut Connection<E::Stream>,
    logs: &Arc<Logs<E::Fs>>,
    tp: &TopicPartition,
) -> Result<Created, String> {
    let Some(earliest) = source_offset(conn, tp, -2).await? else {
        return Ok(Created::NotYet);
    };
    let Ok(start) = u64::try_from(earliest) else {
        return Ok(Created::Refused(format!(
            "the source's earliest offset {earliest} is negative"
        )));
    };
    let (logs, key, now) = (logs.clone(), tp.clone(), env.now_ms());
    let log = match env
        .blocking(move || logs.get_or_create_at(&key, start, now))
        .await
    {
        Ok((log, _created)) => log,
        Err(e) => return Ok(Created::Refused(format!("cannot create its log: {e}"))),
    };
    let end = log.lock().await.written_end();
    tracing::info!("replica: {tp}: copying from offset {end}");
    Ok(Created::At(end))
}

/// One offset of the source for `tp` (`time` -1 latest, -2 earliest), `None` on an error code.
async fn source_offset<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    tp: &TopicPartition,
    time: i64,
) -> Result<Option<i64>, String> {
    let request = Request::Offsets(OffsetsRequest {
        topic: tp.topic.clone(),
        partition: tp.partition as i32,
        time,
        max_offsets: 1,
    });
    match conn.call(&request).await.map_err(|e| e.to_string())? {
        Response::Offsets(o) if o.error == ErrorCode::NoError => Ok(o.offsets.first().copied()),
        Response::Offsets(o) => {
            tracing::warn!(
                "replica: {tp}: the source answered OFFSETS with {:?}",
                o.error
            );
            Ok(None)
        }
        other => Err(format!("unexpected answer to OFFSETS: {other:?}")),
    }
}

/// Why the source refused a fetch at an offset.
enum OutOfRange {
    /// Its data from `from` (the replica's end) to `to` (its earliest offset now) was deleted
    /// before it was copied.
    Gap { from: u64, to: u64 },
    /// The replica is ahead of the source (the source lost data it holds), or the source's
    /// range makes no sense: the partition stops.
    Stop(String),
    /// The source's range could not be read: try again.
    Unknown,
}

/// Why the source answered OffsetOutOfRange at `offset`: its data from `offset` was deleted
/// before it was copied (a gap), or the replica is ahead of the source.
async fn out_of_range<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    tp: &TopicPartition,
    offset: i64,
) -> Result<OutOfRange, String> {
    let earliest = source_offset(conn, tp, -2).await?;
    let latest = source_offset(conn, tp, -1).await?;
    Ok(match (earliest, latest) {
        (Some(earliest), latest) if earliest > offset => {
            let earliest = match latest {
                Some(latest) if planted::active(Bug::ReplicaHoleToLatest) => latest,
                _ => earliest,
            };
            match (u64::try_from(offset), u64::try_from(earliest)) {
                (Ok(from), Ok(to)) => OutOfRange::Gap { from, to },
                _ => OutOfRange::Stop(format!(
                    "the source's earliest offset {earliest} or this replica's end {offset} is negative"
                )),
            }
        }
        (_, Some(latest)) if latest < offset => OutOfRange::Stop(format!(
            "the replica ends at {offset}, past the source's end {latest} (the source lost data this replica holds)"
        )),
        (None, _) | (_, None) => OutOfRange::Unknown,
        (earliest, latest) => OutOfRange::Stop(format!(
            "the source refuses offset {offset} (its range is {earliest:?}..{latest:?})"
        )),
    })
}

/// Leaves a hole `from..to` in the replica's log (see [`Log::skip_to`]): nothing is written
/// into it, and copying goes on at `to`. The log must still end at `from`.
///
/// [`Log::skip_to`]: tributary_core::log::Log::skip_to
async fn leave_hole<E: Env>(
    env: &E,
    logs: &Arc<Logs<E::Fs>>,
    tp: &TopicPartition,
    from: u64,
    to: u64,
) -> Result<(), String> {
    let Some(log) = logs.get(tp) else {
        return Err(format!("{tp}: the replica's log is gone"));
    };
    let now = env.now_ms();
    with_log(env, &log, move |l| {
        let end = l.written_end();
        if end != from {
            return Err(format!(
                "the log ends at {end}, not at the gap's start {from}"
            ));
        }
        l.skip_to(to, now).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| format!("{tp}: {e}"))
}

/// Appends `bytes`, fetched at `offset`, at the log's end, which must be `offset`; an error
/// (a refused set, a poisoned log, an end that moved) stops the partition.
async fn append<E: Env>(
    env: &E,
    logs: &Arc<Logs<E::Fs>>,
    tp: &TopicPartition,
    offset: i64,
    bytes: bytes::Bytes,
    meter: &BrokerMeter,
) -> Result<(), String> {
    let Some(log) = logs.get(tp) else {
        return Err(format!("{tp}: the replica's log is gone"));
    };
    let limits = logs.policy_for(&tp.topic).validation;
    let set = env
        .blocking(move || ValidatedSet::check(bytes, limits))
        .await
        .map_err(|e| format!("{tp}: copied data refused by the log: {e}"))?;
    let now = env.now_ms();
    // (Planted bugs are per thread: read here, not on the blocking thread.)
    let planted_skip = planted::active(Bug::ReplicaWrongResumeOffset);
    let appended = with_log(env, &log, move |l| {
        let end = l.written_end();
        if i64::try_from(end).ok() != Some(offset) && !planted_skip {
            return Err(format!(
                "the log ends at {end}, not at the fetch offset {offset}"
            ));
        }
        l.append_validated(&set, now).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| format!("{tp}: {e}"))?;
    debug_assert!(
        appended.offset as i64 == offset || planted::active(Bug::ReplicaWrongResumeOffset),
        "a replica append landed elsewhere"
    );
    if appended.flush_needed {
        logs::flush(env, &log, meter)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Reads the promoted topics from this cluster's ZooKeeper; promotes each replica topic named
/// there (it stops being copied and takes produces), logs where each partition stopped and
/// confirms with `promoted_ack_path` (what `tributary promote` waits for). Idempotent.
async fn promotions<E: Env>(
    env: &E,
    broker: &BrokerConfig,
    logs: &Arc<Logs<E::Fs>>,
    own: &mut Option<E::Coord>,
    meter: &BrokerMeter,
) -> Result<(), CoordError> {
    let Some(connect) = broker.zk_connect.as_ref() else {
        return Ok(());
    };
    if own.is_none() {
        let session = Duration::from_millis(broker.zk.session_timeout_ms.into());
        let connection = Duration::from_millis(broker.zk.connection_timeout_ms.into());
        *own = Some(env.coordinate(connect, session, connection).await?);
    }
    let Some(c) = own.as_ref() else { return Ok(()) };
    let promoted = match c.children(PROMOTED_PATH).await {
        Ok(names) => names,
        Err(CoordError::NoNode(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in promoted {
        let Ok(topic) = name.parse::<TopicName>() else {
            continue;
        };
        let path = promoted_ack_path(&topic, broker.broker_id);
        let copied_now = logs.is_replica(&topic);
        let acknowledged = c.get(&path).await.is_ok();
        if !copied_now && acknowledged {
            continue;
        }
        // The ends first, then the promotion: until `promote` below, clients' produces are
        // refused and this task (the copier) is the only writer, so every byte below a reported
        // end is the source's and every byte after it a client's.
        let mut stopped_at = Vec::new();
        // Every partition of the topic held here (not only those this run of the copier has
        // seen: after a restart, promotions are read before the source is).
        for tp in logs.partitions().into_iter().filter(|tp| tp.topic == topic) {
            if let Some(log) = logs.get(&tp) {
                // Everything copied made visible first: the reported end is the real one.
                if let Err(e) = logs::flush(env, &log, meter).await {
                    tracing::error!("replica: {tp}: flushing at promotion: {e}");
                }
                let end = log.lock().await.flushed_end();
                stopped_at.push(format!("{}:{end}", tp.partition));
            }
        }
        let at = stopped_at.join(",");
        let newly = logs.promote(&topic);
        if newly {
            tracing::info!("replica: {topic} promoted: no longer copied, takes produces; copying stopped at (partition:offset) {at}");
        }
        match c.create(&path, at.as_bytes(), NodeKind::Persistent).await {
            Ok(_) | Err(CoordError::NodeExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Copies the committed source offsets of the groups `groups` allows, for the topics still
/// copied, to this cluster's ZooKeeper — each clamped to what the replica holds durably (its
/// flushed end), so a consumer that fails over never skips anything — unless the group has
/// live members here (then it commits for itself). `ids` is (source broker, this broker).
async fn sync_offsets<F, C: Coordination>(
    source: &C,
    here: &C,
    logs: &Logs<F>,
    groups: &tributary_core::consumer::TopicPattern,
    (source_id, own_id): (i32, i32),
    synced: &mut BTreeMap<(String, TopicPartition), i64>,
) -> Result<(), CoordError>
where
    F: tributary_core::log::LogFs + Clone + Send + Sync + 'static,
    F::File: Send + Sync,
{
    let names = match source.children("/consumers").await {
        Ok(names) => names,
        Err(CoordError::NoNode(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in names {
        if !groups.allows(&name) {
            continue;
        }
        let Ok(group) = name.parse::<GroupId>() else {
            continue;
        };
        match here.children(&consumer_ids_path(&group)).await {
            Ok(members) if !members.is_empty() => continue,
            Ok(_) | Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
        for topic in logs.topics().into_iter().filter(|t| logs.is_replica(t)) {
            let from = consumer_offsets_path(&group, &topic);
            let partitions = match source.children(&from).await {
                Ok(p) => p,
                Err(CoordError::NoNode(_)) => continue,
                Err(e) => return Err(e),
            };
            for partition_name in partitions {
                let Some((broker, partition)) = partition_name.split_once('-') else {
                    continue;
                };
                let (Ok(broker), Ok(partition)) = (broker.parse::<i32>(), partition.parse::<u32>())
                else {
                    continue;
                };
                if broker != source_id {
                    continue;
                }
                let committed = match source.get(&format!("{from}/{partition_name}")).await {
                    Ok((data, _)) => String::from_utf8_lossy(&data).trim().parse::<i64>().ok(),
                    Err(CoordError::NoNode(_)) => None,
                    Err(e) => return Err(e),
                };
                let Some(committed) = committed else { continue };
                let tp = TopicPartition::new(topic.clone(), partition);
                let Some(log) = logs.get(&tp) else { continue };
                let held = i64::try_from(log.lock().await.flushed_end()).unwrap_or(i64::MAX);
                let offset = if planted::active(Bug::ReplicaSyncUnclamped) {
                    committed
                } else {
                    committed.min(held)
                };
                let key = (name.clone(), tp);
                if synced.get(&key) == Some(&offset) {
                    continue;
                }
                let to = format!("{from}/{own_id}-{partition}");
                // What this syncer last wrote there, kept beside it: a different value now means
                // the group committed here itself (it failed over) — never overwrite that.
                let marker = format!("{SYNCED_PATH}/{name}/{topic}/{own_id}-{partition}");
                let current = data_of(here, &to).await?;
                let last = data_of(here, &marker).await?;
                if current.is_some() && current != last {
                    continue;
                }
                let value = offset.to_string();
                put(here, &to, value.as_bytes()).await?;
                put(here, &marker, value.as_bytes()).await?;
                synced.insert(key, offset);
            }
        }
    }
    Ok(())
}

/// Creates `path` with `data`, or sets it.
async fn put<C: Coordination>(coord: &C, path: &str, data: &[u8]) -> Result<(), CoordError> {
    coord.ensure_parents(path).await?;
    match coord.create(path, data, NodeKind::Persistent).await {
        Ok(_) => Ok(()),
        Err(CoordError::NodeExists(_)) => coord.set(path, data, None).await.map(drop),
        Err(e) => Err(e),
    }
}

/// The data of `path`, `None` when it does not exist.
async fn data_of<C: Coordination>(coord: &C, path: &str) -> Result<Option<Vec<u8>>, CoordError> {
    match coord.get(path).await {
        Ok((data, _)) => Ok(Some(data)),
        Err(CoordError::NoNode(_)) => Ok(None),
        Err(e) => Err(e),
    }
}
