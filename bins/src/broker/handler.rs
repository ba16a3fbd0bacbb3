//! Serving one decoded request against the log manager, with 0.7's responses and error codes.

use std::sync::Arc;

use bytes::Bytes;
use rand::Rng;
use tributary_core::log::{lock, LogError, LogManager, TopicPartition};
use tributary_core::wire::{
    ErrorCode, FetchRequest, FetchResponse, MultiFetchResponse, OffsetsRequest, OffsetsResponse, ProduceRequest,
    Request, Response, TopicName, PARTITION_BROKER_PICKS,
};

use super::limits::RESPONSE_BYTES_MAX;
use crate::env::Env;

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
}

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
    logs: Arc<LogManager<E::Fs>>,
}

impl<E: Env> Clone for Handler<E> {
    fn clone(&self) -> Self {
        Handler { env: self.env.clone(), logs: self.logs.clone() }
    }
}

impl<E: Env> Handler<E> {
    /// A handler over `logs`.
    pub fn new(env: E, logs: Arc<LogManager<E::Fs>>) -> Self {
        Handler { env, logs }
    }

    /// Serves `request`: `Ok(None)` for the produce requests (no response in 0.7).
    pub async fn handle(&self, request: Request, rng: &mut impl Rng, effects: &mut Effects) -> Result<Option<Response>, CloseReason> {
        match request {
            Request::Produce(p) => self.produce(p, rng, effects).await.map(|()| None),
            Request::MultiProduce(ps) => {
                // As in 0.7, earlier parts stay appended if a later one fails.
                for p in ps {
                    self.produce(p, rng, effects).await?;
                }
                Ok(None)
            }
            Request::Fetch(f) => Ok(Some(Response::Fetch(self.fetch(f, RESPONSE_BYTES_MAX).await))),
            Request::MultiFetch(fs) => {
                let mut budget = RESPONSE_BYTES_MAX;
                let mut blocks = Vec::with_capacity(fs.len());
                for f in fs {
                    let block = self.fetch(f, budget).await;
                    budget -= block.messages.len().min(budget);
                    blocks.push(block);
                }
                Ok(Some(Response::MultiFetch(MultiFetchResponse { error: ErrorCode::NoError, blocks })))
            }
            Request::Offsets(o) => self.offsets(o).await.map(|r| Some(Response::Offsets(r))),
        }
    }

    fn partition(&self, topic: &TopicName, partition: i32) -> Option<TopicPartition> {
        let count = self.logs.partition_count(topic);
        u32::try_from(partition).ok().filter(|p| *p < count).map(|p| TopicPartition::new(topic.clone(), p))
    }

    async fn produce(&self, p: ProduceRequest, rng: &mut impl Rng, effects: &mut Effects) -> Result<(), CloseReason> {
        let count = self.logs.partition_count(&p.topic);
        let partition = if p.partition == PARTITION_BROKER_PICKS { rng.random_range(0..count) as i32 } else { p.partition };
        let tp = self.partition(&p.topic, partition).ok_or(CloseReason::InvalidPartition { topic: p.topic.clone(), partition, count })?;
        let (logs, now) = (self.logs.clone(), self.env.now_ms());
        let is_new_topic = !logs.has_topic(&tp.topic);
        let set = p.messages;
        self.env
            .blocking(move || {
                let log = logs.get_or_create(&tp, now)?;
                let mut log = lock(&log);
                log.append(&set, now).map(drop)
            })
            .await?;
        if is_new_topic {
            effects.new_topics.push(p.topic);
        }
        Ok(())
    }

    async fn fetch(&self, f: FetchRequest, budget: usize) -> FetchResponse {
        let empty = |error| FetchResponse { error, messages: Bytes::new() };
        let Some(tp) = self.partition(&f.topic, f.partition) else { return empty(ErrorCode::WrongPartition) };
        // 0.7.1+: a partition that has no log here is an empty answer, not an error.
        let Some(log) = self.logs.get(&tp) else { return empty(ErrorCode::NoError) };
        let max_bytes = usize::try_from(f.max_bytes).unwrap_or(0).min(budget);
        let result = self.env.blocking(move || lock(&log).read(f.offset, max_bytes)).await;
        match result {
            Ok(messages) => FetchResponse { error: ErrorCode::NoError, messages },
            Err(LogError::OffsetOutOfRange { .. }) => empty(ErrorCode::OffsetOutOfRange),
            Err(e) => {
                tracing::error!("{e}");
                empty(ErrorCode::Unknown)
            }
        }
    }

    async fn offsets(&self, o: OffsetsRequest) -> Result<OffsetsResponse, CloseReason> {
        let count = self.logs.partition_count(&o.topic);
        let tp = self.partition(&o.topic, o.partition).ok_or(CloseReason::InvalidPartition { topic: o.topic.clone(), partition: o.partition, count })?;
        let offsets = match self.logs.get(&tp) {
            Some(log) => {
                let now = self.env.now_ms();
                self.env.blocking(move || lock(&log).offsets_before(o.time, o.max_offsets, now)).await
            }
            // 0.7.1+: no log → [0] for latest/earliest, nothing for a time.
            None if matches!(o.time, -1 | -2) && o.max_offsets > 0 => vec![0],
            None => Vec::new(),
        };
        Ok(OffsetsResponse { error: ErrorCode::NoError, offsets })
    }
}
