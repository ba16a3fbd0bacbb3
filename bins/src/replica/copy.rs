//! The copier: rounds of MULTIFETCH at each replica partition's end, each answer decided
//! (`core::replica`) and appended at the same offsets, holes left where the source deleted
//! data first, corrupt source data stopping only its partition.

use super::demote::{demotion, Demoting};
use super::error::{AppendError, SourceError, StopReason};
use super::trouble::Trouble;
#[allow(clippy::wildcard_imports)]
use super::*;
use tributary_core::replica::prefix::{check_prefix, Prefix};

/// The copier itself; tells the lag probe what to ask about through `targets`. Each turn:
/// promotions and demotions from this cluster's ZooKeeper (always first), the source's
/// partitions from its ZooKeeper, a connection to the source broker, a round of copying, and
/// the consumer offsets' sync.
pub(super) async fn copy<E: Env>(
    env: E,
    copier: Copier<E::Fs>,
    targets: watch::Sender<ProbeTargets>,
    mut stop: watch::Receiver<bool>,
) {
    let mut copying = Copying::new(env, copier, targets);
    while !*stop.borrow() {
        let now = copying.env.now_ms();
        let pause_for = match copying.promotions_read(now).await {
            Some(pause) => Some(pause),
            None if copying.stopped_by_promotion() => Some(DISCOVERY_INTERVAL),
            None => match copying.source_discovered(now).await {
                Some(pause) => Some(pause),
                None => match copying.connected().await {
                    Err(pause) => Some(pause),
                    Ok(address) => {
                        let copied_any = copying.copy_round(&address).await;
                        copying.sync_offsets().await;
                        (!copied_any).then_some(copying.backoff)
                    }
                },
            },
        };
        if let Some(pause_for) = pause_for {
            if pause(&mut stop, pause_for).await {
                return;
            }
        }
    }
}

/// The copier's state between its turns. Fields drop in this order when the copier stops: the
/// connection to the source broker, then this cluster's ZooKeeper session, then the source's
/// (the order the cluster's ZooKeeper and the source see them close in).
struct Copying<E: Env> {
    source_trouble: Trouble,
    source_zk_trouble: Trouble,
    own_trouble: Trouble,
    demotion_handled: Option<String>,
    last_promotions: Option<i64>,
    last_discovery: Option<i64>,
    /// Fetched and decided, appended during the next round's fetch.
    pending: Vec<Pending>,
    copied: BTreeMap<TopicPartition, Copied>,
    view: SourceView,
    conn: Option<Connection<E::Stream>>,
    sync_every: i64,
    last_sync: Option<i64>,
    synced: BTreeMap<(String, TopicPartition), i64>,
    /// This cluster's ZooKeeper: promotions are read there, synced offsets written there.
    own: Option<E::Coord>,
    /// The source's ZooKeeper.
    coord: Option<E::Coord>,
    size_limit: u32,
    backoff: Duration,
    timeout: Duration,
    metrics: Option<Arc<MirrorMetrics>>,
    meter: BrokerMeter,
    new_topics: Option<PendingSender<TopicName, ()>>,
    logs: Arc<Logs<E::Fs>>,
    replica: ReplicaConfig,
    broker: BrokerConfig,
    targets: watch::Sender<ProbeTargets>,
    env: E,
}

impl<E: Env> Copying<E> {
    fn new(env: E, copier: Copier<E::Fs>, targets: watch::Sender<ProbeTargets>) -> Self {
        let Copier {
            broker,
            replica,
            logs,
            new_topics,
            meter,
            metrics,
            // Already in `env` (see `replica::run`).
            link: _,
        } = copier;
        tracing::info!(
            "replica: copying source broker {} of {} (topics {})",
            replica.source_broker_id,
            replica.source,
            replica.topics.pattern()
        );
        let own_zk = broker
            .zk_connect
            .as_ref()
            .map_or_else(String::new, ToString::to_string);
        Copying {
            timeout: Duration::from_millis(replica.socket_timeout_ms.into()),
            backoff: Duration::from_millis(replica.fetch_backoff_ms.into()),
            size_limit: broker
                .max_message_bytes
                .saturating_add(ENTRY_OVERHEAD_BYTES)
                .max(replica.fetch_bytes),
            sync_every: i64::from(replica.offsets_sync_interval_ms),
            own_trouble: Trouble::new(format!("this cluster's ZooKeeper at {own_zk}")),
            source_zk_trouble: Trouble::new(format!(
                "the source's ZooKeeper at {}",
                replica.source
            )),
            source_trouble: Trouble::new(format!("source broker {}", replica.source_broker_id)),
            env,
            broker,
            replica,
            logs,
            new_topics,
            meter,
            metrics,
            targets,
            coord: None,
            own: None,
            synced: BTreeMap::new(),
            last_sync: None,
            conn: None,
            view: SourceView::default(),
            copied: BTreeMap::new(),
            pending: Vec::new(),
            last_discovery: None,
            last_promotions: None,
            demotion_handled: None,
        }
    }

    /// Promotions first, from this cluster's ZooKeeper, whether or not the source answers: a
    /// promoted topic is never copied into again, and nothing is copied before they are known.
    /// Then a demotion, if one is planned. A pause when this cluster's ZooKeeper failed.
    async fn promotions_read(&mut self, now: i64) -> Option<Duration> {
        if self
            .last_promotions
            .is_some_and(|at| now - at < DISCOVERY_INTERVAL.as_millis() as i64)
        {
            return None;
        }
        // The partitions whose logs are known prefixes of the source's (their end is a common
        // point if they are promoted now).
        let checked: std::collections::BTreeSet<TopicPartition> = self
            .copied
            .iter()
            .filter(|(_, s)| s.verified && s.stopped.is_none() && s.verifying.is_none())
            .map(|(tp, _)| tp.clone())
            .collect();
        let mut read = promotions(
            &self.env,
            (&self.broker, &self.replica),
            &self.logs,
            &mut self.own,
            (&self.meter, &checked),
        )
        .await;
        if let (Ok(()), Some(c)) = (&read, self.own.as_ref()) {
            let demoting = Demoting {
                broker: &self.broker,
                replica: &self.replica,
                logs: &self.logs,
                copied: &mut self.copied,
                synced: &mut self.synced,
                handled: &mut self.demotion_handled,
            };
            read = match demotion(&self.env, c, demoting).await {
                Ok(true) => {
                    // What was fetched before the cut is fetched again from each log's end
                    // (now the cut, or where the log was left).
                    for p in self.pending.drain(..) {
                        if let Some(state) = self.copied.get_mut(&p.tp) {
                            state.next = None;
                            state.mark = None;
                            state.verified = false;
                        }
                    }
                    Ok(())
                }
                Ok(false) => Ok(()),
                Err(e) => Err(e),
            };
        }
        match read {
            Ok(()) => {
                self.last_promotions = Some(now);
                self.own_trouble.answered(now);
                None
            }
            Err(e) => {
                self.own_trouble
                    .failed(now, e, "reading promotions; not copying until it answers");
                self.own = None;
                Some(self.backoff.max(Duration::from_secs(1)))
            }
        }
    }

    /// Whether the whole cluster is promoted: nothing is copied any more, the source (perhaps
    /// the cluster that failed) is not asked anything, and only this cluster's ZooKeeper is
    /// read, for a demotion.
    fn stopped_by_promotion(&mut self) -> bool {
        if !self.logs.is_cluster_promoted() {
            return false;
        }
        let (had_source_zk, had_source) = (self.coord.take().is_some(), self.conn.take().is_some());
        if had_source_zk || had_source {
            self.pending.clear();
            tracing::info!("replica: the cluster is promoted: the source is no longer read");
        }
        true
    }

    /// The source's partitions and its broker's address, from its ZooKeeper, every
    /// [`DISCOVERY_INTERVAL`]; a pause when it failed.
    async fn source_discovered(&mut self, now: i64) -> Option<Duration> {
        if self
            .last_discovery
            .is_some_and(|at| now - at < DISCOVERY_INTERVAL.as_millis() as i64)
        {
            return None;
        }
        // Bounded: a source ZooKeeper that does not answer (the cluster that failed) never
        // holds up reading this cluster's promotions and demotions for long.
        let discovered = tokio::time::timeout(
            DISCOVERY_WAIT,
            discover(&self.env, &self.broker, &self.replica, &mut self.coord),
        )
        .await
        .unwrap_or_else(|_| {
            Err(CoordError::Unreachable(format!(
                "no answer within {DISCOVERY_WAIT:?}"
            )))
        });
        match discovered {
            Ok(fresh) => {
                self.last_discovery = Some(now);
                if fresh.address != self.view.address {
                    self.conn = None;
                }
                announce(&self.logs, &self.view, &fresh, self.new_topics.as_ref());
                for (topic, count) in &fresh.counts {
                    for p in 0..*count {
                        self.copied
                            .entry(TopicPartition::new(topic.clone(), p))
                            .or_insert_with(|| Copied::new(self.replica.fetch_bytes));
                    }
                }
                self.view = fresh;
                self.targets.send_replace(ProbeTargets {
                    address: self.view.address.clone(),
                    partitions: self.copied.keys().cloned().collect(),
                });
                self.source_zk_trouble.answered(now);
                None
            }
            Err(e) => {
                self.source_zk_trouble.failed(now, e, "retrying");
                self.coord = None;
                Some(self.backoff.max(Duration::from_secs(1)))
            }
        }
    }

    /// The source broker's address, connected to; a pause while it is unknown or unreachable.
    async fn connected(&mut self) -> Result<(String, u16), Duration> {
        let Some((host, port)) = self.view.address.clone() else {
            return Err(DISCOVERY_INTERVAL);
        };
        if self.conn.is_none() {
            match connect(&self.env, &host, port, self.timeout).await {
                Ok(fresh) => {
                    self.conn = Some(fresh);
                    self.source_trouble.answered(self.env.now_ms());
                    // A new connection may reach another source (a failover, a restored
                    // cluster): every partition's prefix is checked again before it grows.
                    for state in self.copied.values_mut() {
                        state.verified = false;
                    }
                }
                Err(e) => {
                    self.source_trouble.failed(
                        self.env.now_ms(),
                        format!("{host}:{port}: {e}"),
                        "retrying",
                    );
                    return Err(self.backoff.max(Duration::from_secs(1)));
                }
            }
        }
        Ok((host, port))
    }

    /// One round of copying from the source broker at `address`; whether it copied anything.
    async fn copy_round(&mut self, (host, port): &(String, u16)) -> bool {
        let Some(open) = self.conn.as_mut() else {
            return false;
        };
        let sizes = (self.replica.fetch_bytes, self.size_limit);
        let copying_with = (&self.meter, self.metrics.as_deref());
        match round(
            &self.env,
            open,
            &self.logs,
            &mut self.copied,
            &mut self.pending,
            sizes,
            copying_with,
        )
        .await
        {
            Ok(any) => any,
            Err(e) => {
                self.source_trouble.failed(
                    self.env.now_ms(),
                    format!("{host}:{port}: {e}"),
                    "reconnecting",
                );
                self.conn = None;
                false
            }
        }
    }

    /// The consumer offsets' sync (`replica.offsets.sync.groups`), every sync interval.
    async fn sync_offsets(&mut self) {
        let Some(groups) = &self.replica.offsets_sync_groups else {
            return;
        };
        let now = self.env.now_ms();
        if self.last_sync.is_some_and(|at| now - at < self.sync_every) {
            return;
        }
        self.last_sync = Some(now);
        if let (Some(source), Some(here)) = (self.coord.as_ref(), self.own.as_ref()) {
            let ids = (self.replica.source_broker_id, self.broker.broker_id);
            if let Err(e) =
                sync_offsets(source, here, &self.logs, groups, ids, &mut self.synced).await
            {
                tracing::warn!("replica: syncing consumer offsets: {e}; trying again");
            }
        }
    }
}

/// Bytes fetched and decided, waiting to be appended at `offset` (the log's end once the
/// appends before it are done).
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) tp: TopicPartition,
    pub(super) offset: i64,
    pub(super) bytes: bytes::Bytes,
    /// Top-level messages in `bytes`.
    pub(super) messages: u64,
}

/// Whether the copier still copies `topic` (not promoted; `copied` holds only topics the filter
/// passes).
pub(super) fn copying<F: tributary_core::log::LogFs + Clone>(
    logs: &Logs<F>,
    topic: &TopicName,
) -> bool {
    logs.is_replica(topic) || planted::active(Bug::ReplicaCopyAfterPromote)
}

/// One round, pipelined: the MULTIFETCH of every partition still copied (each at its end once
/// `pending` is appended) runs while `pending` — what the previous round fetched — is
/// appended; then what came back is decided into the next `pending`. `true` when anything was
/// appended or is pending. An append that fails stops its partition (what was fetched for it
/// meanwhile is dropped); a connection failure is returned after `pending` was appended.
pub(super) async fn round<E: Env>(
    env: &E,
    conn: &mut Connection<E::Stream>,
    logs: &Arc<Logs<E::Fs>>,
    copied: &mut BTreeMap<TopicPartition, Copied>,
    pending: &mut Vec<Pending>,
    sizes: (u32, u32),
    (meter, metrics): (&BrokerMeter, Option<&MirrorMetrics>),
) -> Result<bool, SourceError> {
    let wanted = wanted(env, conn, logs, copied).await?;
    let (fetched, appended) = tokio::join!(
        fetch_all(conn, &wanted),
        append_all(env, logs, std::mem::take(pending), meter, metrics)
    );
    let appended_any = !appended.is_empty();
    for (tp, result) in appended {
        if let (Err(error), Some(state)) = (result, copied.get_mut(&tp)) {
            stop(&tp, state, StopReason::Append(error));
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
pub(super) async fn wanted<E: Env>(
    env: &E,
    conn: &mut Connection<E::Stream>,
    logs: &Arc<Logs<E::Fs>>,
    copied: &mut BTreeMap<TopicPartition, Copied>,
) -> Result<Vec<(TopicPartition, FetchRequest)>, SourceError> {
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
                    stop(&tp, state, reason);
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
            stop(&tp, state, StopReason::EndPastMax(end));
            continue;
        };
        if !state.verified {
            match prefix_check(env, logs, &tp, state, end).await {
                Ok(Some(request)) => {
                    wanted.push((tp, request));
                    continue;
                }
                Ok(None) => {}
                Err(reason) => {
                    stop(&tp, state, reason);
                    continue;
                }
            }
        }
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

/// The fetch that checks `tp`'s prefix (its last message against the source's at that offset,
/// see `core::replica::prefix`) before anything more is appended at `end`; `None` when there is
/// nothing to compare (the log holds no message, or its last one ends before a hole: the source
/// deleted it), and the partition counts as checked.
async fn prefix_check<E: Env>(
    env: &E,
    logs: &Arc<Logs<E::Fs>>,
    tp: &TopicPartition,
    state: &mut Copied,
    end: u64,
) -> Result<Option<FetchRequest>, StopReason> {
    let mark = match state.mark.filter(|m| m.end() == end) {
        Some(known) => Some(known),
        None => match logs.get(tp) {
            Some(log) => with_log(env, &log, |l| l.last_message())
                .await
                .map_err(StopReason::LastMessage)?,
            None => None,
        },
    };
    let Some(mark) = mark.filter(|m| m.end() == end) else {
        state.verified = true;
        return Ok(None);
    };
    let (Ok(offset), Ok(size)) = (i64::try_from(mark.offset), u32::try_from(mark.size)) else {
        return Err(StopReason::EndPastMax(end));
    };
    state.mark = Some(mark);
    state.verifying = Some(mark);
    let max_bytes = state.fetch_bytes.saturating_add(size).min(i32::MAX as u32) as i32;
    Ok(Some(FetchRequest {
        topic: tp.topic.clone(),
        partition: tp.partition as i32,
        offset,
        max_bytes,
    }))
}

/// MULTIFETCHes `wanted`, FETCHES_PER_REQUEST_MAX at a time: each fetch with its answer.
pub(super) async fn fetch_all<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    wanted: &[(TopicPartition, FetchRequest)],
) -> Result<
    Vec<(
        TopicPartition,
        FetchRequest,
        tributary_core::wire::FetchResponse,
    )>,
    SourceError,
> {
    let mut out = Vec::with_capacity(wanted.len());
    for batch in wanted.chunks(FETCHES_PER_REQUEST_MAX) {
        let fetches: Vec<FetchRequest> = batch.iter().map(|(_, f)| f.clone()).collect();
        let blocks = match conn.call(&Request::MultiFetch(fetches)).await {
            Ok(Response::MultiFetch(m)) if m.blocks.len() == batch.len() => m.blocks,
            Ok(other) => {
                return Err(SourceError::UnexpectedAnswer {
                    request: "MULTIFETCH",
                    answer: format!("{other:?}"),
                })
            }
            Err(e) => return Err(e.into()),
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
pub(super) async fn append_all<E: Env>(
    env: &E,
    logs: &Arc<Logs<E::Fs>>,
    pending: Vec<Pending>,
    meter: &BrokerMeter,
    metrics: Option<&MirrorMetrics>,
) -> Vec<(TopicPartition, Result<(), AppendError>)> {
    let mut out: Vec<(TopicPartition, Result<(), AppendError>)> = Vec::with_capacity(pending.len());
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
pub(super) async fn decide_all<E: Env>(
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
) -> Result<(), SourceError> {
    for (tp, request, block) in fetched {
        let Some(state) = copied.get_mut(&tp) else {
            continue;
        };
        // Stopped by a failed append while this was fetched: dropped.
        if state.stopped.is_some() {
            continue;
        }
        state.fresh = false;
        let (offset, bytes) = match state.verifying.take() {
            None => (request.offset, block.messages.clone()),
            Some(mark) => match checked_prefix(conn, &tp, state, mark, &block).await? {
                Some(after) => after,
                None => continue,
            },
        };
        let request = FetchRequest { offset, ..request };
        let block = tributary_core::wire::FetchResponse {
            messages: bytes,
            ..block
        };
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
                            Err(error) => {
                                stop(&tp, state, StopReason::HoleNotRecorded { from, to, error });
                            }
                        }
                    }
                    OutOfRange::Stop(reason) => stop(&tp, state, reason),
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
                        let reason = StopReason::TooLarge {
                            offset: request.offset,
                            needed,
                            limit: limit_bytes,
                        };
                        stop(&tp, state, reason);
                    }
                }
            }
            Fetched::Corrupt { offset, error } => {
                stop(&tp, state, StopReason::Corrupt { offset, error });
            }
            Fetched::Append {
                bytes,
                messages,
                last,
            } => {
                state.next = u64::try_from(request.offset).ok().map(|o| o + bytes as u64);
                state.mark = Some(last);
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

/// Handles the answer to a prefix check at `mark` (the partition's last message): when the
/// source holds the same message there, the partition is checked and the bytes after it are
/// returned with their offset (the partition's end) to be decided as any fetch; otherwise the
/// partition stops (diverged, or ahead of its source), or the check is tried again (`None`).
async fn checked_prefix<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    tp: &TopicPartition,
    state: &mut Copied,
    mark: MessageMark,
    block: &tributary_core::wire::FetchResponse,
) -> Result<Option<(i64, bytes::Bytes)>, SourceError> {
    let end = i64::try_from(mark.end()).unwrap_or(i64::MAX);
    match block.error {
        ErrorCode::NoError => {}
        ErrorCode::OffsetOutOfRange => {
            let offset = i64::try_from(mark.offset).unwrap_or(i64::MAX);
            let earliest = source_offset(conn, tp, -2).await?;
            let latest = source_offset(conn, tp, -1).await?;
            match (earliest, latest) {
                (Some(earliest), _) if earliest > offset => {
                    // The source deleted it: nothing left to compare with (the copy goes on; a
                    // gap, if any, is found by the next fetch).
                    tracing::info!("replica: {tp}: the source no longer holds offset {offset} (it starts at {earliest}): the last message copied cannot be compared");
                    state.verified = true;
                }
                (_, Some(latest)) if latest < end => stop(
                    tp,
                    state,
                    StopReason::AheadOfSource {
                        end,
                        source_end: latest,
                    },
                ),
                (Some(_), Some(_)) => stop(
                    tp,
                    state,
                    StopReason::Diverged {
                        at: mark.offset,
                        end: mark.end(),
                        theirs: None,
                    },
                ),
                _ => tracing::warn!("replica: {tp}: the source refused offset {offset} and did not say its range; checking again"),
            }
            return Ok(None);
        }
        other => {
            tracing::warn!(
                "replica: {tp}: the source answered {other:?} at offset {}; checking again",
                mark.offset
            );
            return Ok(None);
        }
    }
    match check_prefix(&mark, &block.messages) {
        Prefix::Holds { rest } => {
            state.verified = true;
            tracing::debug!(
                "replica: {tp}: its message at {} is the source's: copying on at {end}",
                mark.offset
            );
            Ok(Some((
                end,
                block.messages.slice(rest.min(block.messages.len())..),
            )))
        }
        Prefix::Differs { theirs } => {
            stop(
                tp,
                state,
                StopReason::Diverged {
                    at: mark.offset,
                    end: mark.end(),
                    theirs: theirs.map(|t| t.size),
                },
            );
            Ok(None)
        }
        Prefix::SourceEnds => {
            stop(
                tp,
                state,
                StopReason::AheadOfSource {
                    end,
                    source_end: i64::try_from(mark.offset).unwrap_or(i64::MAX),
                },
            );
            Ok(None)
        }
        Prefix::Short { needed } => {
            let needed = u32::try_from(needed).unwrap_or(u32::MAX);
            state.fetch_bytes = state.fetch_bytes.max(needed);
            Ok(None)
        }
    }
}

/// What creating a replica partition came to.
pub(super) enum Created {
    /// The log exists; copying goes on from this offset.
    At(u64),
    /// The source does not answer for the partition yet.
    NotYet,
    /// The partition cannot be created here (refused at startup, disk error): it stops.
    Refused(StopReason),
}

/// Creates a replica partition at the source's earliest offset. `Err` only for a failure of the
/// connection to the source.
pub(super) async fn create<E: Env>(
    env: &E,
    conn: &mut Connection<E::Stream>,
    logs: &Arc<Logs<E::Fs>>,
    tp: &TopicPartition,
) -> Result<Created, SourceError> {
    let Some(earliest) = source_offset(conn, tp, -2).await? else {
        return Ok(Created::NotYet);
    };
    let Ok(start) = u64::try_from(earliest) else {
        return Ok(Created::Refused(StopReason::NegativeEarliest(earliest)));
    };
    let (logs, key, now) = (logs.clone(), tp.clone(), env.now_ms());
    let log = match env
        .blocking(move || logs.get_or_create_at(&key, start, now))
        .await
    {
        Ok((log, _created)) => log,
        Err(e) => return Ok(Created::Refused(StopReason::CannotCreate(e))),
    };
    let end = log.lock().await.written_end();
    tracing::info!("replica: {tp}: copying from offset {end}");
    Ok(Created::At(end))
}

/// One offset of the source for `tp` (`time` -1 latest, -2 earliest), `None` on an error code.
pub(super) async fn source_offset<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    tp: &TopicPartition,
    time: i64,
) -> Result<Option<i64>, SourceError> {
    let request = Request::Offsets(OffsetsRequest {
        topic: tp.topic.clone(),
        partition: tp.partition as i32,
        time,
        max_offsets: 1,
    });
    match conn.call(&request).await? {
        Response::Offsets(o) if o.error == ErrorCode::NoError => Ok(o.offsets.first().copied()),
        Response::Offsets(o) => {
            tracing::warn!(
                "replica: {tp}: the source answered OFFSETS with {:?}",
                o.error
            );
            Ok(None)
        }
        other => Err(SourceError::UnexpectedAnswer {
            request: "OFFSETS",
            answer: format!("{other:?}"),
        }),
    }
}

/// Why the source refused a fetch at an offset.
pub(super) enum OutOfRange {
    /// Its data from `from` (the replica's end) to `to` (its earliest offset now) was deleted
    /// before it was copied.
    Gap { from: u64, to: u64 },
    /// The replica is ahead of the source (the source lost data it holds), or the source's
    /// range makes no sense: the partition stops.
    Stop(StopReason),
    /// The source's range could not be read: try again.
    Unknown,
}

/// Why the source answered OffsetOutOfRange at `offset`: its data from `offset` was deleted
/// before it was copied (a gap), or the replica is ahead of the source.
pub(super) async fn out_of_range<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    tp: &TopicPartition,
    offset: i64,
) -> Result<OutOfRange, SourceError> {
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
                _ => OutOfRange::Stop(StopReason::NegativeRange {
                    earliest,
                    end: offset,
                }),
            }
        }
        (_, Some(latest)) if latest < offset => OutOfRange::Stop(StopReason::AheadOfSource {
            end: offset,
            source_end: latest,
        }),
        (None, _) | (_, None) => OutOfRange::Unknown,
        (earliest, latest) => OutOfRange::Stop(StopReason::Refused {
            offset,
            earliest,
            latest,
        }),
    })
}

/// Leaves a hole `from..to` in the replica's log (see [`Log::skip_to`]): nothing is written
/// into it, and copying goes on at `to`. The log must still end at `from`.
///
/// [`Log::skip_to`]: tributary_core::log::Log::skip_to
pub(super) async fn leave_hole<E: Env>(
    env: &E,
    logs: &Arc<Logs<E::Fs>>,
    tp: &TopicPartition,
    from: u64,
    to: u64,
) -> Result<(), AppendError> {
    let Some(log) = logs.get(tp) else {
        return Err(AppendError::LogGone);
    };
    let now = env.now_ms();
    with_log(env, &log, move |l| {
        let end = l.written_end();
        if end != from {
            return Err(AppendError::EndMoved {
                end,
                what: "gap's start",
                expected: i64::try_from(from).unwrap_or(i64::MAX),
            });
        }
        Ok(l.skip_to(to, now)?)
    })
    .await
}

/// Appends `bytes`, fetched at `offset`, at the log's end, which must be `offset`; an error
/// (a refused set, a poisoned log, an end that moved) stops the partition.
pub(super) async fn append<E: Env>(
    env: &E,
    logs: &Arc<Logs<E::Fs>>,
    tp: &TopicPartition,
    offset: i64,
    bytes: bytes::Bytes,
    meter: &BrokerMeter,
) -> Result<(), AppendError> {
    let Some(log) = logs.get(tp) else {
        return Err(AppendError::LogGone);
    };
    let limits = logs.policy_for(&tp.topic).validation;
    let set = env
        .blocking(move || ValidatedSet::check(bytes, limits))
        .await
        .map_err(AppendError::Refused)?;
    let now = env.now_ms();
    // (Planted bugs are per thread: read here, not on the blocking thread.)
    let planted_skip = planted::active(Bug::ReplicaWrongResumeOffset);
    let appended = with_log(env, &log, move |l| {
        let end = l.written_end();
        if i64::try_from(end).ok() != Some(offset) && !planted_skip {
            return Err(AppendError::EndMoved {
                end,
                what: "fetch offset",
                expected: offset,
            });
        }
        Ok(l.append_validated(&set, now)?)
    })
    .await?;
    debug_assert!(
        appended.offset as i64 == offset || planted::active(Bug::ReplicaWrongResumeOffset),
        "a replica append landed elsewhere"
    );
    if appended.flush_needed {
        logs::flush(env, &log, meter).await?;
    }
    Ok(())
}

/// Stops copying `tp` for `reason`: said once as an error naming the partition, then skipped.
fn stop(tp: &TopicPartition, state: &mut Copied, reason: StopReason) {
    tracing::error!("replica: {tp}: {reason}; this partition stops copying");
    state.stopped = Some(reason);
}
