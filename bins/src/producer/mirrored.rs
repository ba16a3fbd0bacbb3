//! A mirror's messages: each source partition's go to one broker (chosen from the source
//! partition, and kept while that broker has the topic), which chooses the partition from the
//! source partition too; they travel as MIRROR_PRODUCE sets, one per source partition per
//! request, each naming the source offsets it holds. The broker appends a set only if its
//! partition does not hold it already, so a set sent again — a retry after a lost answer, a
//! restart, a partition moved to another mirror member — is acknowledged without a second
//! copy; a set the partition holds the start of comes back as an overlap, and only its rest is
//! sent again.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tributary_core::message::CompressionCodec;
use tributary_core::mirror::position::placement::{self, BROKER_SALT};
use tributary_core::mirror::position::SourceKey;
use tributary_core::producer::Candidate;
use tributary_core::wire::{
    MirrorAck, MirrorOutcome, MirrorSet, OffsetsRequest, ProduceRequest, Request, Response,
    SourceStamp, TopicName,
};

use super::dispatch::{ack_outcome, retry_all, Dispatcher, Left, Pending, SetOutcome};
use super::targets::how;
use super::{Delivered, SendError};
use crate::client::{connect, ClientError};
use crate::env::Env;

/// The most source partitions whose broker is remembered; past it, a new one is placed afresh
/// each time (still the same broker while the topic's brokers stay).
const PLACEMENTS_MAX: usize = 100_000;

/// Which broker each source partition's messages go to, and what is known of those brokers.
#[derive(Debug, Default)]
pub(super) struct Placements {
    by_key: BTreeMap<Arc<SourceKey>, i32>,
    /// The last address seen for each broker placed on: a broker that lost its ZooKeeper
    /// registration but still answers keeps its source partitions.
    addresses: BTreeMap<i32, (String, u16)>,
    /// Brokers whose sends have failed since then: they keep their source partitions while
    /// registered, and for [`PLACEMENT_GRACE`] after that.
    failing: BTreeMap<i32, tokio::time::Instant>,
}

/// How long a source partition waits for the mirror broker it is placed on when that broker
/// fails and leaves the cluster's registry (a crash, a restart), before it moves to another
/// broker. Moving costs a second copy of what the mirror sent but had not committed (the
/// other broker's positions do not know it); waiting costs that much lag.
pub const PLACEMENT_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// One set: the messages (indexes into the request's slots) of one source partition, in order.
struct Run {
    topic: TopicName,
    key: Arc<SourceKey>,
    indexes: Vec<usize>,
}

impl<E: Env> Dispatcher<E> {
    /// Where a message of the source partition `key` goes among `candidates`: the broker it
    /// went to before while that broker still has the topic or still answers (a source
    /// partition that moves goes to a partition whose positions do not know what was sent
    /// before, so moving is a last resort), else one chosen from `key`; partition -1 (the
    /// broker chooses it from `key`). `registered` are the live brokers' addresses.
    pub(super) fn place(
        &self,
        candidates: &[Candidate],
        registered: &BTreeMap<i32, (String, u16)>,
        key: &Arc<SourceKey>,
    ) -> Option<Candidate> {
        let mut brokers: Vec<i32> = candidates.iter().map(|c| c.broker_id).collect();
        brokers.dedup();
        let mut placed = crate::sync::lock(&self.placed, "the mirror's placements");
        for broker in &brokers {
            if let Some(address) = registered.get(broker) {
                placed.addresses.insert(*broker, address.clone());
            }
        }
        let keep = |broker: &i32, placed: &Placements| {
            let waited = placed.failing.get(broker).map(|since| since.elapsed());
            brokers.contains(broker)
                || (placed.addresses.contains_key(broker)
                    && waited.is_none_or(|waited| waited < PLACEMENT_GRACE))
        };
        let broker_id = match placed.by_key.get(key) {
            Some(broker) if keep(broker, &placed) => *broker,
            _ => {
                let chosen = brokers
                    .get(placement::index(key, BROKER_SALT, brokers.len().max(1)))
                    .copied()?;
                if placed.by_key.len() < PLACEMENTS_MAX || placed.by_key.contains_key(key) {
                    placed.by_key.insert(key.clone(), chosen);
                }
                chosen
            }
        };
        Some(Candidate {
            broker_id,
            partition: -1,
        })
    }

    /// The address of a broker placed on that is no longer registered (still tried while it
    /// answers).
    pub(super) fn placed_address(&self, broker_id: i32) -> Option<(String, u16)> {
        crate::sync::lock(&self.placed, "the mirror's placements")
            .addresses
            .get(&broker_id)
            .cloned()
    }

    /// Whether the last send to `broker_id` failed (its source partitions then move once it
    /// is unregistered and has failed for [`PLACEMENT_GRACE`]).
    fn note_send(&self, broker_id: i32, failed: bool) {
        let mut placed = crate::sync::lock(&self.placed, "the mirror's placements");
        match failed {
            true => {
                placed
                    .failing
                    .entry(broker_id)
                    .or_insert_with(tokio::time::Instant::now);
            }
            false => drop(placed.failing.remove(&broker_id)),
        }
    }

    /// Whether some of `pending` waits for the broker its source partition is placed on
    /// (failing for less than [`PLACEMENT_GRACE`]): its retries are not counted meanwhile.
    pub(super) fn waits_for_placement(&self, pending: &[Pending]) -> bool {
        let placed = crate::sync::lock(&self.placed, "the mirror's placements");
        pending.iter().any(|p| {
            p.record
                .source
                .as_ref()
                .and_then(|mark| placed.by_key.get(&mark.key))
                .and_then(|broker| placed.failing.get(broker))
                .is_some_and(|since| since.elapsed() < PLACEMENT_GRACE)
        })
    }

    /// The messages for `broker_id` that go as mirrored sets, and the others.
    pub(super) fn split_marked(
        &self,
        broker_id: i32,
        messages: Vec<(Pending, i32)>,
    ) -> (Vec<Pending>, Vec<(Pending, i32)>) {
        let positions = self.config.durable_acks
            && !crate::sync::lock(&self.without_positions, "the brokers without positions")
                .contains(&broker_id);
        let mut marked = Vec::new();
        let mut plain = Vec::new();
        for (p, partition) in messages {
            match p.record.source.is_some() && positions {
                true => marked.push(p),
                false => plain.push((p, partition)),
            }
        }
        (marked, plain)
    }

    /// Sends a mirror's messages to one broker as one MIRROR_PRODUCE; what is left to retry or
    /// to send again at once.
    pub(super) async fn send_marked(
        &self,
        broker_id: i32,
        address: Option<(String, u16)>,
        messages: Vec<Pending>,
        last: &mut String,
    ) -> Left {
        let mut slots: Vec<Option<Pending>> = messages.into_iter().map(Some).collect();
        let mut sets: Vec<(MirrorSet, Run)> = Vec::new();
        for run in self.runs(&mut slots) {
            sets.extend(self.build_runs(&mut slots, run));
        }
        if sets.is_empty() {
            return Left::default();
        }
        let address = address.or_else(|| self.placed_address(broker_id));
        let outcomes = match address {
            Some((host, port)) => self.send_mirror_sets(broker_id, &host, port, &sets).await,
            None => retry_all(sets.len(), format!("broker {broker_id} is not registered"))
                .into_iter()
                .map(Answer::Plain)
                .collect(),
        };
        let failed = outcomes
            .iter()
            .all(|o| matches!(o, Answer::Plain(SetOutcome::Retry(_))));
        self.note_send(broker_id, failed);
        let mut left = Left::default();
        for ((set, run), outcome) in sets.iter().zip(outcomes) {
            let partition = set.produce.partition;
            for &i in &run.indexes {
                let Some(p) = slots.get_mut(i).and_then(Option::take) else {
                    continue;
                };
                let delivered = |offset, held| Delivered {
                    broker_id,
                    partition,
                    offset: Some(offset),
                    held,
                };
                match &outcome {
                    Answer::Judged(ack) => match ack.outcome {
                        MirrorOutcome::Appended => {
                            self.finish(p.done, Ok(delivered(ack.offset, false)))
                        }
                        MirrorOutcome::Held => self.finish_held(p, ack, broker_id),
                        // Held up to `held_to`: those are acknowledged, the rest sent again.
                        MirrorOutcome::Overlap => match p.record.source.as_ref() {
                            Some(mark) if mark.start < ack.held_to => {
                                self.finish_held(p, ack, broker_id)
                            }
                            _ => left.again.push(p),
                        },
                    },
                    Answer::Plain(SetOutcome::Delivered(offset)) => self.finish(
                        p.done,
                        Ok(Delivered {
                            broker_id,
                            partition,
                            offset: *offset,
                            held: false,
                        }),
                    ),
                    Answer::Plain(SetOutcome::Fail(e)) => self.finish(p.done, Err(e.clone())),
                    Answer::Plain(SetOutcome::Retry(why)) => {
                        last.clone_from(why);
                        left.retry.push(p);
                    }
                }
            }
        }
        left
    }

    fn finish_held(&self, p: Pending, ack: &MirrorAck, broker_id: i32) {
        self.stats.held.fetch_add(1, Ordering::Relaxed);
        self.finish(
            p.done,
            Ok(Delivered {
                broker_id,
                partition: ack.partition,
                offset: Some(-1),
                held: true,
            }),
        );
    }

    /// The messages grouped by topic and source partition, each group in the order sent.
    fn runs(&self, slots: &mut [Option<Pending>]) -> Vec<Run> {
        let mut runs: BTreeMap<(TopicName, Arc<SourceKey>), Vec<usize>> = BTreeMap::new();
        for (i, slot) in slots.iter().enumerate() {
            let Some(p) = slot else { continue };
            if let Some(mark) = &p.record.source {
                runs.entry((p.record.topic.clone(), mark.key.clone()))
                    .or_default()
                    .push(i);
            }
        }
        runs.into_iter()
            .map(|((topic, key), indexes)| Run {
                topic,
                key,
                indexes,
            })
            .collect()
    }

    /// The sets of one run: one, unless a message is too large on its own — it alone fails,
    /// and the messages before and after it go as sets of their own (a set's source offsets
    /// never cover a message it does not hold).
    fn build_runs(&self, slots: &mut [Option<Pending>], run: Run) -> Vec<(MirrorSet, Run)> {
        let values = |indexes: &[usize], slots: &[Option<Pending>]| -> Vec<bytes::Bytes> {
            indexes
                .iter()
                .filter_map(|i| slots.get(*i).and_then(Option::as_ref))
                .map(|p| p.record.value.clone())
                .collect()
        };
        if let Ok(set) = self.build_set(&run.topic, &values(&run.indexes, slots)) {
            return self.stamped(slots, run, set).into_iter().collect();
        }
        let mut out = Vec::new();
        let mut current = Vec::new();
        for i in run.indexes.iter().copied() {
            let value = values(&[i], slots);
            let too_large = match self.config.codec_for(&run.topic) {
                CompressionCodec::None => value
                    .first()
                    .is_some_and(|v| v.len() > self.config.max_message_bytes as usize),
                _ => self.build_set(&run.topic, &value).is_err(),
            };
            if !too_large {
                current.push(i);
                continue;
            }
            out.extend(self.close_run(slots, &run, std::mem::take(&mut current)));
            if let Some(p) = slots.get_mut(i).and_then(Option::take) {
                let size = p.record.value.len();
                let max = self.config.max_message_bytes;
                self.finish(p.done, Err(SendError::TooLarge { size, max }));
            }
        }
        out.extend(self.close_run(slots, &run, current));
        out
    }

    fn close_run(
        &self,
        slots: &mut [Option<Pending>],
        run: &Run,
        indexes: Vec<usize>,
    ) -> Option<(MirrorSet, Run)> {
        if indexes.is_empty() {
            return None;
        }
        let values: Vec<bytes::Bytes> = indexes
            .iter()
            .filter_map(|i| slots.get(*i).and_then(Option::as_ref))
            .map(|p| p.record.value.clone())
            .collect();
        let part = Run {
            topic: run.topic.clone(),
            key: run.key.clone(),
            indexes,
        };
        match self.build_set(&run.topic, &values) {
            Ok(set) => self.stamped(slots, part, set),
            Err(e) => {
                for i in part.indexes {
                    if let Some(p) = slots.get_mut(i).and_then(Option::take) {
                        self.finish(p.done, Err(e.clone()));
                    }
                }
                None
            }
        }
    }

    /// The set with the source offsets its messages cover: from the first one's start to the
    /// last one's resume offset.
    fn stamped(
        &self,
        slots: &[Option<Pending>],
        run: Run,
        set: bytes::Bytes,
    ) -> Option<(MirrorSet, Run)> {
        let mark = |i: &usize| {
            slots
                .get(*i)
                .and_then(Option::as_ref)
                .and_then(|p| p.record.source.as_ref())
        };
        let start = run.indexes.first().and_then(mark)?.start;
        let next = run.indexes.last().and_then(mark)?.next;
        Some((
            MirrorSet {
                produce: ProduceRequest {
                    topic: run.topic.clone(),
                    partition: -1,
                    messages: set,
                },
                source: SourceStamp {
                    key: (*run.key).clone(),
                    start,
                    next: next.max(start),
                },
            },
            run,
        ))
    }

    /// Sends the sets in one MIRROR_PRODUCE; one answer per set, in order.
    async fn send_mirror_sets(
        &self,
        broker_id: i32,
        host: &str,
        port: u16,
        sets: &[(MirrorSet, Run)],
    ) -> Vec<Answer> {
        let plain = |outcomes: Vec<SetOutcome>| outcomes.into_iter().map(Answer::Plain).collect();
        let request = Request::MirrorProduce(sets.iter().map(|(s, _)| s.clone()).collect());
        let mut connections = self.connections.lock().await;
        connections.retain(|_, pooled| pooled.used.elapsed() < super::dispatch::IDLE_REUSE_MAX);
        let fresh = !connections.contains_key(&broker_id);
        let conn = match self
            .connection(&mut connections, broker_id, host, port)
            .await
        {
            Ok(conn) => conn,
            Err(e) => {
                self.targets
                    .failed(&self.stats, broker_id, &format!("{host}:{port}"), &e);
                return plain(retry_all(
                    sets.len(),
                    format!("broker {broker_id} at {host}:{port}: {}", how(&e)),
                ));
            }
        };
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        match conn.call(&request).await {
            Ok(Response::MirrorProduce(r)) if r.acks.len() == sets.len() => {
                self.targets.answered(broker_id, &format!("{host}:{port}"));
                r.acks
                    .iter()
                    .map(|ack| match ack.error {
                        tributary_core::wire::ErrorCode::NoError => Answer::Judged(*ack),
                        error => Answer::Plain(ack_outcome(broker_id, error, -1)),
                    })
                    .collect()
            }
            Ok(other) => {
                connections.remove(&broker_id);
                plain(retry_all(
                    sets.len(),
                    format!("broker {broker_id} answered a mirrored produce with {other:?}"),
                ))
            }
            // Closed on a connection dialled for it: the broker may not know the request.
            Err(ClientError::Closed(_)) if fresh => {
                connections.remove(&broker_id);
                drop(connections);
                self.after_positions_refused(broker_id, host, port, sets).await
            }
            Err(e) => {
                connections.remove(&broker_id);
                self.targets
                    .failed(&self.stats, broker_id, &format!("{host}:{port}"), &e);
                plain(retry_all(sets.len(), format!("broker {broker_id}: {}", how(&e))))
            }
        }
    }

    /// The broker closed the connection on MIRROR_PRODUCE: it died, or does not know the
    /// request (then it appended nothing). An OFFSETS request on a new connection tells which;
    /// a broker that answers it gets the mirror's messages as acknowledged produces from now
    /// on (without positions: sets sent again may be copied twice), and the log says so once.
    async fn after_positions_refused(
        &self,
        broker_id: i32,
        host: &str,
        port: u16,
        sets: &[(MirrorSet, Run)],
    ) -> Vec<Answer> {
        let timeout = std::time::Duration::from_millis(self.config.socket_timeout_ms.into());
        let retry = |why: String| {
            retry_all(sets.len(), why)
                .into_iter()
                .map(Answer::Plain)
                .collect()
        };
        let Some((first, _)) = sets.first() else {
            return Vec::new();
        };
        let probe = Request::Offsets(OffsetsRequest {
            topic: first.produce.topic.clone(),
            partition: 0,
            time: -1,
            max_offsets: 1,
        });
        let probed = match connect(&self.env, host, port, timeout).await {
            Ok(mut conn) => conn.call(&probe).await.map(drop),
            Err(e) => Err(e),
        };
        if let Err(e) = probed {
            self.targets
                .failed(&self.stats, broker_id, &format!("{host}:{port}"), &e);
            return retry(format!("broker {broker_id}: {}", how(&e)));
        }
        if crate::sync::lock(&self.without_positions, "the brokers without positions")
            .insert(broker_id)
        {
            tracing::warn!(
                "broker {broker_id} ({host}:{port}) does not know mirrored produce (a Tributary release before it, or Kafka 0.7): the mirror's messages go to it as acknowledged produces, without source positions, so a set sent again after a failure may be copied twice; upgrade that broker for exactly-once copies"
            );
        }
        retry(format!(
            "broker {broker_id} does not know mirrored produce; sending again without positions"
        ))
    }
}

/// One set's answer: judged by the broker, or the ordinary outcome of a failed send.
enum Answer {
    Judged(MirrorAck),
    Plain(SetOutcome),
}
