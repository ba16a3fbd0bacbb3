//! What a mirror cluster durably holds of its sources, asked of its brokers (MIRROR_POSITIONS):
//! per mirror partition, the source partitions copied into it and how far each copy reaches;
//! and source offsets translated into mirror offsets. The tools that print the loss window
//! and translate a consumer group's offsets read it through here.

use std::collections::BTreeMap;
use std::time::Duration;

use tributary_core::consumer::BrokerPartition;
use tributary_core::mirror::position::SourceKey;
use tributary_core::wire::{
    ErrorCode, MirrorPositionsRequest, Request, Response, SourceHeld, TopicName,
};

use crate::client::{connect, ClientError};
use crate::env::Env;
use crate::producer::directory::Snapshot;

/// The most translations asked in one request (an int16 count holds more; this keeps a
/// request small).
const TRANSLATIONS_PER_REQUEST: usize = 1000;

/// A partition of the mirror cluster: its topic and `<broker>-<partition>`.
pub type MirrorPartition = (TopicName, BrokerPartition);

/// What the mirror cluster's brokers said.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Held {
    /// Per mirror partition that holds copies: each source partition and how far its copy
    /// reaches there.
    pub partitions: BTreeMap<MirrorPartition, Vec<SourceHeld>>,
    /// Brokers (or partitions) that could not be asked, and why: what they hold is unknown.
    pub unanswered: Vec<String>,
}

impl Held {
    /// Per source partition: the mirror partition whose copy reaches furthest, and how far.
    pub fn furthest(&self) -> BTreeMap<&SourceKey, (&MirrorPartition, &SourceHeld)> {
        let mut out: BTreeMap<&SourceKey, (&MirrorPartition, &SourceHeld)> = BTreeMap::new();
        for (partition, held) in &self.partitions {
            for h in held {
                let further = out
                    .get(&h.key)
                    .is_none_or(|(_, best)| h.held_to > best.held_to);
                if further {
                    out.insert(&h.key, (partition, h));
                }
            }
        }
        out
    }
}

/// Asks every partition of every topic `snapshot` lists (on its live brokers) for what it
/// holds; `topics` limits the topics asked when given.
pub async fn read_held<E: Env>(
    env: &E,
    snapshot: &Snapshot,
    topics: Option<&[TopicName]>,
    timeout: Duration,
) -> Held {
    let mut held = Held::default();
    for (topic, brokers) in &snapshot.topics {
        if topics.is_some_and(|wanted| !wanted.contains(topic)) {
            continue;
        }
        for (&broker_id, &count) in brokers {
            let Some((host, port)) = snapshot.brokers.get(&broker_id) else {
                held.unanswered.push(format!(
                    "{topic} on broker {broker_id}: the broker is not registered"
                ));
                continue;
            };
            let asked = async {
                let mut conn = connect(env, host, *port, timeout).await?;
                let mut found = Vec::new();
                for partition in 0..count {
                    let ask = Request::MirrorPositions(MirrorPositionsRequest {
                        topic: topic.clone(),
                        partition: partition as i32,
                        translate: Vec::new(),
                    });
                    match conn.call(&ask).await? {
                        Response::MirrorPositions(r) if r.error == ErrorCode::NoError => {
                            found.push((partition, r.sources));
                        }
                        Response::MirrorPositions(r) => {
                            return Ok(Err(format!("partition {partition}: {}", r.error.name())))
                        }
                        other => return Ok(Err(format!("answered {other:?}"))),
                    }
                }
                Ok::<_, ClientError>(Ok(found))
            };
            match tokio::time::timeout(timeout, asked).await {
                Ok(Ok(Ok(found))) => {
                    for (partition, sources) in found.into_iter().filter(|(_, s)| !s.is_empty()) {
                        let at = BrokerPartition {
                            broker_id,
                            partition,
                        };
                        held.partitions.insert((topic.clone(), at), sources);
                    }
                }
                Ok(Ok(Err(why))) => held.unanswered.push(format!(
                    "{topic} on broker {broker_id} ({host}:{port}): {why}"
                )),
                Ok(Err(e)) => held.unanswered.push(format!(
                    "{topic} on broker {broker_id} ({host}:{port}): {e}"
                )),
                Err(_) => held.unanswered.push(format!(
                    "{topic} on broker {broker_id} ({host}:{port}): no answer within {timeout:?}"
                )),
            }
        }
    }
    held
}

/// Why a mirror partition could not translate offsets.
#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    /// Its broker could not be reached or broke the connection.
    #[error("{partition} at {address}: {source}")]
    Broker {
        /// The mirror partition (`topic/<broker>-<partition>`).
        partition: String,
        /// Where it was asked.
        address: String,
        /// Why.
        source: ClientError,
    },
    /// Its broker answered with an error code, or with something else than positions.
    #[error("{partition} at {address}: {answer}")]
    Refused {
        /// The mirror partition.
        partition: String,
        /// Where it was asked.
        address: String,
        /// What it answered.
        answer: String,
    },
    /// No answer in time.
    #[error("{partition} at {address}: no answer within {timeout:?}")]
    TimedOut {
        /// The mirror partition.
        partition: String,
        /// Where it was asked.
        address: String,
        /// How long it was given.
        timeout: Duration,
    },
}

/// Translates source offsets into one mirror partition's offsets: for each `(key, offset)`,
/// the mirror offset from which a reader that had read `key` up to `offset` misses nothing it
/// had not read (`None`: the partition holds nothing of `key`).
pub async fn translate<E: Env>(
    env: &E,
    address: (&str, u16),
    partition: &MirrorPartition,
    asked: &[(SourceKey, i64)],
    timeout: Duration,
) -> Result<Vec<Option<i64>>, TranslateError> {
    let (host, port) = address;
    let name = format!("{}/{}", partition.0, partition.1);
    let at = format!("{host}:{port}");
    let broker = |source| TranslateError::Broker {
        partition: name.clone(),
        address: at.clone(),
        source,
    };
    let refused = |answer| TranslateError::Refused {
        partition: name.clone(),
        address: at.clone(),
        answer,
    };
    let work = async {
        let mut conn = connect(env, host, port, timeout).await.map_err(broker)?;
        let mut out = Vec::with_capacity(asked.len());
        for chunk in asked.chunks(TRANSLATIONS_PER_REQUEST) {
            let ask = Request::MirrorPositions(MirrorPositionsRequest {
                topic: partition.0.clone(),
                partition: partition.1.partition as i32,
                translate: chunk.to_vec(),
            });
            match conn.call(&ask).await.map_err(broker)? {
                Response::MirrorPositions(r)
                    if r.error == ErrorCode::NoError && r.translated.len() == chunk.len() =>
                {
                    out.extend(r.translated.into_iter().map(|o| (o >= 0).then_some(o)));
                }
                Response::MirrorPositions(r) => return Err(refused(r.error.name().to_string())),
                other => return Err(refused(format!("{other:?}"))),
            }
        }
        Ok(out)
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(TranslateError::TimedOut {
            partition: name.clone(),
            address: at.clone(),
            timeout,
        }),
    }
}
