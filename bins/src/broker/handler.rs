//! Serving one decoded request against the log manager, with 0.7's responses and error codes.

use std::sync::Arc;

use bytes::Bytes;
use rand::Rng;
use tributary_core::allow_list::Operation;
use tributary_core::identity::ClusterIdentity;
use tributary_core::log::{LogError, LogFs, Served, TopicPartition, ValidatedSet};
use tributary_core::origin::Origins;
use tributary_core::wire::TOPIC_AUTHORIZATION_FAILED;
use tributary_core::wire::{
    AckedProduceResponse, ClusterIdentityResponse, ErrorCode, FetchRequest, OffsetsRequest,
    OffsetsResponse, ProduceAck, ProduceRequest, Request, Response, TopicName, TopicOriginsRequest,
    TopicOriginsResponse, PARTITION_BROKER_PICKS,
};

use super::access::Access;
use super::acks::FlushRequests;
use super::limits::{ACK_WAIT_TIMEOUT, RESPONSE_BYTES_MAX};
use super::reply::{Reply, ServedBlock};
use crate::env::Env;
use crate::logs::{self, with_log, Logs, SharedLog};
use crate::metrics::broker::{code_label, request_kind, BrokerMeter};
use crate::origin_store::OriginStore;

/// Why a connection must be closed instead of answered (0.7 closes on these).
#[derive(Debug, thiserror::Error)]
pub enum CloseReason {
    /// The request names a partition the topic does not have.
    #[error("{topic}: partition {partition} is not in 0..{count}")]
    InvalidPartition {
        /// The topic.
        topic: TopicName,
        /// The partition asked for.
        partition: i32,
        /// The topic's partition count here.
        count: u32,
    },
    /// The log refused the request (invalid message set, poisoned or failing disk).
    #[error(transparent)]
    Log(#[from] LogError),
    /// The broker does not serve this kind of request.
    #[error("unsupported request: {0}")]
    Unsupported(&'static str),
    /// The topic is copied from a source cluster (replica mode): it takes no produces.
    #[error("{topic}: a replica of the source cluster, read-only (produce to the source, or promote it first)")]
    ReplicaTopic {
        /// The topic.
        topic: TopicName,
    },
    /// The principal on the SSL listener may not produce to the topic (`ssl.allow.list.location`):
    /// nothing of the request was appended.
    #[error("{principal} may not produce to {topic} (ssl.allow.list.location); nothing of the request was appended")]
    Denied {
        /// The client certificate's subject.
        principal: String,
        /// The topic.
        topic: TopicName,
    },
    /// The partition was refused at startup (corruption): it takes no writes.
    #[error("{partition}: refused at startup, takes no writes: {reason}")]
    RefusedPartition {
        /// The partition.
        partition: TopicPartition,
        /// Why it was refused.
        reason: String,
    },
}

impl CloseReason {
    /// The `code` label of the refusal in `tributary_request_errors_total`.
    pub fn code_label(&self) -> &'static str {
        match self {
            CloseReason::InvalidPartition { .. } => "wrong_partition",
            CloseReason::Log(LogError::InvalidMessageSet { .. }) => "invalid_message",
            CloseReason::Log(_) => "unknown",
            CloseReason::Unsupported(_) => "unsupported",
            CloseReason::ReplicaTopic { .. } => "read_only_replica",
            CloseReason::RefusedPartition { .. } => "refused",
            CloseReason::Denied { .. } => "topic_authorization_failed",
        }
    }
}

use tributary_core::wire::READ_ONLY_REPLICA;

/// What a handled request asks of the broker besides its response.
#[derive(Debug, Default)]
pub struct Effects {
    /// Topics that got their first partition on this broker (to register in ZooKeeper).
    pub new_topics: Vec<TopicName>,
}

/// Serves requests for one broker.
#[derive(Debug)]
pub struct Handler<E: Env> {
    env: E,
    logs: Arc<Logs<E::Fs>>,
    /// Where acknowledged produces ask for their flush; without it, ACKED_PRODUCE is refused.
    acks: Option<FlushRequests<E::Fs>>,
    /// `fetch.zero.copy`: serve bytes checked earlier in this process as file ranges (sent
    /// without copying); `false` reads and checks every served byte on every fetch.
    zero_copy: bool,
    /// Counts requests, errors and bytes (nothing when metrics are off).
    meter: BrokerMeter,
    /// The cluster's identity, for CLUSTER_IDENTITY (`None`: a broker without ZooKeeper).
    identity: Option<ClusterIdentity>,
    /// The cluster's origin records, for TOPIC_ORIGINS and renamed copies' partition counts
    /// (`None`: a broker without ZooKeeper).
    origins: Option<Arc<OriginStore<E>>>,
    /// When reading a record before creating a topic last failed (shared by the connections).
    renamed_reads: Arc<super::renamed::Reads>,
}

/// The file type of an environment's logs.
pub type FileOf<E> = <<E as Env>::Fs as LogFs>::File;

impl<E: Env> Clone for Handler<E> {
    fn clone(&self) -> Self {
        Handler {
            env: self.env.clone(),
            logs: self.logs.clone(),
            acks: self.acks.clone(),
            zero_copy: self.zero_copy,
            meter: self.meter.clone(),
            identity: self.identity.clone(),
            origins: self.origins.clone(),
            renamed_reads: self.renamed_reads.clone(),
        }
    }
}

/// Where a set of an acknowledged produce went, before it is durable.
struct Appended<F: tributary_core::log::LogFs> {
    tp: TopicPartition,
    log: SharedLog<F>,
    offset: u64,
    end: u64,
}

/// A set ready to append ([`Handler::prepare`]).
pub(super) struct Prepared<F: tributary_core::log::LogFs> {
    /// Its partition.
    pub(super) tp: TopicPartition,
    /// The partition's log (created if it was not there).
    pub(super) log: SharedLog<F>,
    /// The set, validated.
    pub(super) set: ValidatedSet,
    /// Its size as sent.
    pub(super) bytes: usize,
}

impl<E: Env> Handler<E> {
    /// A handler over `logs`, refusing ACKED_PRODUCE (no committer).
    pub fn new(env: E, logs: Arc<Logs<E::Fs>>) -> Self {
        Handler {
            env,
            logs,
            acks: None,
            zero_copy: true,
            meter: BrokerMeter::default(),
            identity: None,
            origins: None,
            renamed_reads: Arc::default(),
        }
    }

    /// A handler over `logs` that answers ACKED_PRODUCE through `acks`.
    pub fn with_acks(env: E, logs: Arc<Logs<E::Fs>>, acks: FlushRequests<E::Fs>) -> Self {
        Handler {
            env,
            logs,
            acks: Some(acks),
            zero_copy: true,
            meter: BrokerMeter::default(),
            identity: None,
            origins: None,
            renamed_reads: Arc::default(),
        }
    }

    /// Sets `fetch.zero.copy` (on by default).
    pub fn with_zero_copy(self, zero_copy: bool) -> Self {
        Handler { zero_copy, ..self }
    }

    /// Answers CLUSTER_IDENTITY with `identity` (without one, the answer says there is none).
    pub fn with_identity(self, identity: Option<ClusterIdentity>) -> Self {
        Handler { identity, ..self }
    }

    /// Answers TOPIC_ORIGINS from `origins` (without, the answer says it cannot).
    pub fn with_origins(self, origins: Option<Arc<OriginStore<E>>>) -> Self {
        Handler { origins, ..self }
    }

    /// Counts what it serves with `meter`.
    pub fn with_meter(self, meter: BrokerMeter) -> Self {
        Handler { meter, ..self }
    }

    /// What it counts with.
    pub fn meter(&self) -> &BrokerMeter {
        &self.meter
    }

    /// Where acknowledged and mirrored produces ask for their flush (`None`: refused).
    pub(super) fn acks(&self) -> Option<&FlushRequests<E::Fs>> {
        self.acks.as_ref()
    }

    /// The log manager served.
    pub(super) fn logs(&self) -> &Arc<Logs<E::Fs>> {
        &self.logs
    }

    /// The environment it serves in.
    pub fn env(&self) -> &E {
        &self.env
    }

    /// Serves `request`: `Ok(None)` for the produce requests (no response in 0.7). Counts the
    /// request, and a refusal by closing as an error of its type.
    pub async fn handle(
        &self,
        request: Request,
        rng: &mut impl Rng,
        effects: &mut Effects,
    ) -> Result<Option<Reply<FileOf<E>>>, CloseReason> {
        self.handle_as(request, rng, effects, &Access::unrestricted())
            .await
    }

    /// [`Handler::handle`] for a client whose `access` may be limited (the SSL listener's
    /// allow-list): what it may not do is refused (see docs/security.md).
    pub async fn handle_as(
        &self,
        request: Request,
        rng: &mut impl Rng,
        effects: &mut Effects,
        access: &Access,
    ) -> Result<Option<Reply<FileOf<E>>>, CloseReason> {
        let kind = request_kind(&request);
        self.meter.request(kind);
        let handled = self.serve(request, rng, effects, access).await;
        if let Err(reason) = &handled {
            self.meter.error(kind, reason.code_label());
        }
        handled
    }

    async fn serve(
        &self,
        request: Request,
        rng: &mut impl Rng,
        effects: &mut Effects,
        access: &Access,
    ) -> Result<Option<Reply<FileOf<E>>>, CloseReason> {
        // Produces are refused whole, before anything is appended (0.7 has no answer to them:
        // the connection closes).
        if let Request::Produce(_) | Request::MultiProduce(_) = &request {
            let topics: Vec<&TopicName> = match &request {
                Request::Produce(p) => vec![&p.topic],
                Request::MultiProduce(ps) => ps.iter().map(|p| &p.topic).collect(),
                _ => Vec::new(),
            };
            if let Some(topic) = topics
                .into_iter()
                .find(|t| !access.allows(Operation::Produce, t))
            {
                return Err(CloseReason::Denied {
                    principal: access.principal().unwrap_or_default().to_string(),
                    topic: topic.clone(),
                });
            }
        }
        match request {
            // Planted bug: a quarter of the produce requests vanish without a trace.
            Request::Produce(_)
                if tributary_core::planted::active(
                    tributary_core::planted::Bug::DropSomeProduces,
                ) && rng.random_ratio(1, 4) =>
            {
                Ok(None)
            }
            Request::Produce(p) => self.produce(p, rng, effects).await.map(|()| None),
            Request::MultiProduce(ps) => {
                // As in 0.7, earlier parts stay appended if a later one fails.
                for p in ps {
                    self.produce(p, rng, effects).await?;
                }
                Ok(None)
            }
            Request::Fetch(f) if !access.allows(Operation::Fetch, &f.topic) => {
                self.meter
                    .error("fetch", &code_label(TOPIC_AUTHORIZATION_FAILED));
                Ok(Some(Reply::Fetch(ServedBlock::empty(
                    TOPIC_AUTHORIZATION_FAILED,
                ))))
            }
            Request::Fetch(f) => Ok(Some(Reply::Fetch(
                self.fetch(f, RESPONSE_BYTES_MAX, "fetch").await,
            ))),
            Request::MultiFetch(fs) => {
                let mut budget = RESPONSE_BYTES_MAX;
                let mut blocks = Vec::with_capacity(fs.len());
                for f in fs {
                    if !access.allows(Operation::Fetch, &f.topic) {
                        self.meter
                            .error("multifetch", &code_label(TOPIC_AUTHORIZATION_FAILED));
                        blocks.push(ServedBlock::empty(TOPIC_AUTHORIZATION_FAILED));
                        continue;
                    }
                    let block = self.fetch(f, budget, "multifetch").await;
                    budget -= block.data.len().min(budget);
                    blocks.push(block);
                }
                Ok(Some(Reply::MultiFetch(blocks)))
            }
            Request::Offsets(_)
                if tributary_core::planted::active(
                    tributary_core::planted::Bug::PanicInRequest,
                ) =>
            {
                panic!("planted bug: the request handler panicked")
            }
            Request::Offsets(o) if !access.allows(Operation::Fetch, &o.topic) => {
                self.meter
                    .error("offsets", &code_label(TOPIC_AUTHORIZATION_FAILED));
                Ok(Some(Reply::Response(Response::Offsets(OffsetsResponse {
                    error: TOPIC_AUTHORIZATION_FAILED,
                    offsets: Vec::new(),
                }))))
            }
            Request::Offsets(o) => self.offsets(o).await.map(|r| {
                if r.error != ErrorCode::NoError {
                    self.meter.error("offsets", &code_label(r.error));
                }
                Some(Reply::Response(Response::Offsets(r)))
            }),
            Request::AckedProduce(ps) => self
                .acked_produce(ps, rng, effects, access)
                .await
                .map(|r| Some(Reply::Response(Response::AckedProduce(r)))),
            Request::MirrorProduce(sets) => self
                .mirror_produce(sets, effects, access)
                .await
                .map(|r| Some(Reply::Response(Response::MirrorProduce(r)))),
            Request::MirrorPositions(p) => Ok(Some(Reply::Response(Response::MirrorPositions(
                self.mirror_positions(p, access).await,
            )))),
            Request::ClusterIdentity => Ok(Some(Reply::Response(Response::ClusterIdentity(
                match &self.identity {
                    Some(identity) => ClusterIdentityResponse {
                        error: ErrorCode::NoError,
                        id: identity.id.to_string(),
                        name: identity
                            .name
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default(),
                    },
                    None => ClusterIdentityResponse {
                        error: ErrorCode::Unknown,
                        id: String::new(),
                        name: String::new(),
                    },
                },
            )))),
            Request::TopicOrigins(o) => {
                // Merging routes writes the topic's record; reading it is a fetch.
                let operation = match o.merge.is_empty() {
                    true => Operation::Fetch,
                    false => Operation::Produce,
                };
                let response = match access.allows(operation, &o.topic) {
                    true => self.topic_origins(o).await,
                    false => {
                        self.meter
                            .error("topic_origins", &code_label(TOPIC_AUTHORIZATION_FAILED));
                        TopicOriginsResponse {
                            error: TOPIC_AUTHORIZATION_FAILED,
                            record: Bytes::new(),
                        }
                    }
                };
                Ok(Some(Reply::Response(Response::TopicOrigins(response))))
            }
        }
    }

    /// Before the first partition of `topic` here: a renamed mirror copy's source count
    /// (see `broker::renamed`). Nothing without ZooKeeper.
    async fn learn_renamed_count(&self, topic: &TopicName) {
        if let Some(store) = &self.origins {
            super::renamed::learn_before_creating(
                &self.env,
                store,
                &self.logs,
                &self.renamed_reads,
                topic,
            )
            .await;
        }
    }

    /// Reads a topic's origin record, merging the request's routes into it first. A failure
    /// answers `Unknown` with no record (the mirror asking fails closed) and is logged here.
    async fn topic_origins(&self, request: TopicOriginsRequest) -> TopicOriginsResponse {
        let failed = TopicOriginsResponse {
            error: ErrorCode::Unknown,
            record: Bytes::new(),
        };
        let Some(store) = &self.origins else {
            return failed;
        };
        let outcome = if request.merge.is_empty() {
            store.read(&request.topic).await
        } else {
            match Origins::decode(&request.merge) {
                Ok(add) => store.merge(&request.topic, &add).await,
                Err(e) => {
                    tracing::warn!(
                        "TOPIC_ORIGINS for {}: the routes sent are refused: {e}",
                        request.topic
                    );
                    return failed;
                }
            }
        };
        match outcome {
            Ok(origins) => TopicOriginsResponse {
                error: ErrorCode::NoError,
                record: Bytes::from(if origins.is_empty() {
                    Vec::new()
                } else {
                    origins.encode()
                }),
            },
            Err(e) => {
                tracing::warn!("TOPIC_ORIGINS for {}: {e}", request.topic);
                failed
            }
        }
    }

    /// Appends each set on its own (a refused set does not stop the others; its ack says why),
    /// then answers once every appended set is durable.
    async fn acked_produce(
        &self,
        ps: Vec<ProduceRequest>,
        rng: &mut impl Rng,
        effects: &mut Effects,
        access: &Access,
    ) -> Result<AckedProduceResponse, CloseReason> {
        let Some(acks) = &self.acks else {
            return Err(CloseReason::Unsupported(
                "acknowledged produce (this broker has no committer)",
            ));
        };
        let arriving = acks.arriving();
        let mut appended = Vec::with_capacity(ps.len());
        for p in ps {
            appended.push(match access.allows(Operation::Produce, &p.topic) {
                true => self.append(p, rng, effects).await,
                false => Err(TOPIC_AUTHORIZATION_FAILED),
            });
        }
        // Every partition's flush is asked for first, so one round of the committer covers the
        // whole request; then one deadline for all of them.
        for a in appended.iter().flatten() {
            if acks.request(&a.tp, &a.log, a.end).is_err() {
                tracing::warn!("{}: the committer is gone (shutting down)", a.tp);
            }
        }
        drop(arriving);
        let deadline = tokio::time::Instant::now() + ACK_WAIT_TIMEOUT;
        let mut out = Vec::with_capacity(appended.len());
        for result in appended {
            let ack = match result {
                Ok(a) => match acks.wait_durable(&a.log, a.end, deadline).await {
                    Ok(()) => ProduceAck {
                        error: ErrorCode::NoError,
                        offset: a.offset as i64,
                    },
                    Err(why) => {
                        tracing::warn!("{}: set at {} not acknowledged: {why:?}", a.tp, a.offset);
                        ProduceAck {
                            error: ErrorCode::Unknown,
                            offset: -1,
                        }
                    }
                },
                Err(error) => ProduceAck { error, offset: -1 },
            };
            if ack.error != ErrorCode::NoError {
                self.meter.error("acked_produce", &code_label(ack.error));
            }
            out.push(ack);
        }
        Ok(AckedProduceResponse {
            error: ErrorCode::NoError,
            acks: out,
        })
    }

    /// One set of an acknowledged produce: appended (not yet durable), or the error code to
    /// answer with.
    async fn append(
        &self,
        p: ProduceRequest,
        rng: &mut impl Rng,
        effects: &mut Effects,
    ) -> Result<Appended<E::Fs>, ErrorCode> {
        let prepared = self
            .prepare(p, |count| rng.random_range(0..count) as i32, effects)
            .await?;
        let Prepared {
            tp,
            log,
            set,
            bytes,
        } = prepared;
        let now = self.env.now_ms();
        let info = with_log(&self.env, &log, move |l| l.append_validated(&set, now))
            .await
            .map_err(|e| {
                tracing::error!("{e}");
                ErrorCode::Unknown
            })?;
        self.meter.bytes_in(tp.topic.as_str(), bytes);
        Ok(Appended {
            tp,
            log,
            offset: info.offset,
            end: info.next_offset,
        })
    }

    /// A set of an acknowledged or mirrored produce made ready to append: its partition
    /// (`pick` chooses one from the topic's count when the request says -1; created here if
    /// needed) and the validated set; or the error code to answer with.
    pub(super) async fn prepare(
        &self,
        p: ProduceRequest,
        pick: impl FnOnce(u32) -> i32,
        effects: &mut Effects,
    ) -> Result<Prepared<E::Fs>, ErrorCode> {
        if self.logs.is_replica(&p.topic) {
            tracing::warn!(
                "{}: acknowledged produce refused: the topic is a read-only replica",
                p.topic
            );
            return Err(READ_ONLY_REPLICA);
        }
        self.learn_renamed_count(&p.topic).await;
        let count = self.logs.partition_count(&p.topic);
        let partition = if p.partition == PARTITION_BROKER_PICKS {
            pick(count)
        } else {
            p.partition
        };
        let partition = planted_wrong_partition(partition, count);
        let tp = self
            .partition(&p.topic, partition)
            .ok_or(ErrorCode::WrongPartition)?;
        if self.logs.refused(&tp).is_some() {
            return Err(ErrorCode::Unknown);
        }
        let limits = self.logs.policy_for(&tp.topic).validation;
        let (messages, name) = (p.messages, tp.to_string());
        let bytes = messages.len();
        let set = self
            .env
            .blocking(move || ValidatedSet::check(messages, limits))
            .await
            .map_err(|e| {
                tracing::warn!("{name}: set refused: {e}");
                ErrorCode::InvalidMessage
            })?;
        let (logs, now, key) = (self.logs.clone(), self.env.now_ms(), tp.clone());
        let (log, created) = self
            .env
            .blocking(move || logs.get_or_create(&key, now))
            .await
            .map_err(|e| {
                tracing::error!("{e}");
                ErrorCode::Unknown
            })?;
        if created {
            effects.new_topics.push(p.topic);
        }
        Ok(Prepared {
            tp,
            log,
            set,
            bytes,
        })
    }

    fn partition(&self, topic: &TopicName, partition: i32) -> Option<TopicPartition> {
        let count = self.logs.partition_count(topic);
        u32::try_from(partition)
            .ok()
            .filter(|p| *p < count)
            .map(|p| TopicPartition::new(topic.clone(), p))
    }

    /// Validates the set (before any partition is touched, so an invalid first set of a new
    /// topic creates nothing), creates the partition if needed (then the topic is registered,
    /// whatever the append does next), appends, and flushes when the message count says so.
    async fn produce(
        &self,
        p: ProduceRequest,
        rng: &mut impl Rng,
        effects: &mut Effects,
    ) -> Result<(), CloseReason> {
        if self.logs.is_replica(&p.topic) {
            return Err(CloseReason::ReplicaTopic { topic: p.topic });
        }
        self.learn_renamed_count(&p.topic).await;
        let count = self.logs.partition_count(&p.topic);
        let partition = if p.partition == PARTITION_BROKER_PICKS {
            rng.random_range(0..count) as i32
        } else {
            p.partition
        };
        let partition = planted_wrong_partition(partition, count);
        let tp = self
            .partition(&p.topic, partition)
            .ok_or(CloseReason::InvalidPartition {
                topic: p.topic.clone(),
                partition,
                count,
            })?;
        if let Some(reason) = self.logs.refused(&tp) {
            return Err(CloseReason::RefusedPartition {
                partition: tp,
                reason: reason.to_string(),
            });
        }
        let limits = self.logs.policy_for(&tp.topic).validation;
        let (messages, name) = (p.messages, tp.to_string());
        let (bytes, topic) = (messages.len(), tp.topic.clone());
        let set = self
            .env
            .blocking(move || ValidatedSet::check(messages, limits))
            .await
            .map_err(|source| LogError::InvalidMessageSet {
                partition: name,
                source,
            })?;
        let (logs, now) = (self.logs.clone(), self.env.now_ms());
        let (log, created) = self
            .env
            .blocking(move || logs.get_or_create(&tp, now))
            .await?;
        if created {
            effects.new_topics.push(p.topic);
        }
        let appended = with_log(&self.env, &log, move |l| l.append_validated(&set, now)).await?;
        self.meter.bytes_in(topic.as_str(), bytes);
        if appended.flush_needed {
            logs::flush(&self.env, &log, &self.meter).await?;
        }
        Ok(())
    }

    /// One fetch (of a request of `kind`), counting its bytes or its error.
    async fn fetch(
        &self,
        f: FetchRequest,
        budget: usize,
        kind: &'static str,
    ) -> ServedBlock<FileOf<E>> {
        let topic = f.topic.clone();
        let block = self.fetch_block(f, budget).await;
        match block.error {
            // Only bytes served make a series: a fetch of a topic that has no log here (answered
            // empty) must not add one per name a client makes up.
            ErrorCode::NoError if !block.data.is_empty() => {
                self.meter.bytes_out(topic.as_str(), block.data.len());
            }
            ErrorCode::NoError => {}
            error => self.meter.error(kind, &code_label(error)),
        }
        block
    }

    async fn fetch_block(&self, f: FetchRequest, budget: usize) -> ServedBlock<FileOf<E>> {
        let empty = ServedBlock::empty;
        let Some(tp) = self.partition(&f.topic, f.partition) else {
            return empty(ErrorCode::WrongPartition);
        };
        if self.logs.refused(&tp).is_some() {
            // Not "empty and caught up": the partition's data exists but cannot be served.
            return empty(ErrorCode::Unknown);
        }
        // 0.7.1+: a partition that has no log here is an empty answer, not an error.
        let Some(log) = self.logs.get(&tp) else {
            return empty(ErrorCode::NoError);
        };
        let max_bytes = usize::try_from(f.max_bytes).unwrap_or(0).min(budget);
        let zero_copy = self.zero_copy;
        let served = with_log(&self.env, &log, move |l| match zero_copy {
            true => l.serve(f.offset, max_bytes),
            false => l.read(f.offset, max_bytes).map(Served::Bytes),
        });
        match served.await {
            Ok(data) => ServedBlock {
                error: ErrorCode::NoError,
                data,
            },
            Err(LogError::OffsetOutOfRange { .. }) => empty(ErrorCode::OffsetOutOfRange),
            Err(e) => {
                tracing::error!("{e}");
                empty(ErrorCode::Unknown)
            }
        }
    }

    async fn offsets(&self, o: OffsetsRequest) -> Result<OffsetsResponse, CloseReason> {
        let count = self.logs.partition_count(&o.topic);
        let tp = self
            .partition(&o.topic, o.partition)
            .ok_or(CloseReason::InvalidPartition {
                topic: o.topic.clone(),
                partition: o.partition,
                count,
            })?;
        let failed = OffsetsResponse {
            error: ErrorCode::Unknown,
            offsets: Vec::new(),
        };
        if self.logs.refused(&tp).is_some() {
            return Ok(failed);
        }
        let offsets = match self.logs.get(&tp) {
            Some(log) => {
                let now = self.env.now_ms();
                match with_log(&self.env, &log, move |l| {
                    l.offsets_before(o.time, o.max_offsets, now)
                })
                .await
                {
                    Ok(offsets) => offsets,
                    Err(e) => {
                        tracing::error!("{e}");
                        return Ok(failed);
                    }
                }
            }
            // 0.7.1+: no log → [0] for latest/earliest, nothing for a time.
            None if matches!(o.time, -1 | -2) && o.max_offsets > 0 => vec![0],
            None => Vec::new(),
        };
        Ok(OffsetsResponse {
            error: ErrorCode::NoError,
            offsets,
        })
    }
}

/// With the planted bug `ProduceWrongPartition`, an explicit partition is shifted to the next
/// one: the data stays valid and readable, only its place is wrong (the history checker's bug).
fn planted_wrong_partition(partition: i32, count: u32) -> i32 {
    if count > 1
        && tributary_core::planted::active(tributary_core::planted::Bug::ProduceWrongPartition)
    {
        return (partition + 1) % count as i32;
    }
    partition
}
