//! Where a mirror's source partitions go: before a source partition's first set in each
//! ownership (at its first message, or ahead for every source partition a member comes to own)
//! the producer asks the mirror topic's partitions how far their copies reach and, with
//! placement records, follows, creates or moves each source partition's record in the mirror
//! cluster's ZooKeeper, so every member sends one source partition to one broker.

use std::collections::BTreeMap;
use std::sync::Arc;

use tributary_core::mirror::position::placement::{self, BROKER_SALT};
use tributary_core::mirror::position::SourceKey;
use tributary_core::wire::{ErrorCode, MirrorPositionsRequest, Request, Response, TopicName};

use super::dispatch::{Dispatcher, Pending};
use super::mirrored::{usable, Survey, PLACEMENTS_MAX, PLACEMENT_GRACE, SURVEYS_MAX};
use super::placement_records::{Brokers, Claimed};
use crate::client::{connect, ClientError};
use crate::coordination::CoordError;
use crate::env::Env;

/// The most source partitions of one mirror topic located ahead in one turn (one pipelined
/// claim of their records, well within a ZooKeeper session timeout).
const AHEAD_CHUNK: usize = 1024;

/// The most partitions of one topic asked on one broker of a `broker.list` (whose counts the
/// producer does not know).
const LOCATE_PARTITIONS_MAX: i32 = 1024;

/// The brokers `topic` is registered on, in this member's view, sorted; every live broker when
/// it is registered on none (the first write creates it).
fn topic_brokers(snapshot: &super::directory::Snapshot, topic: &TopicName) -> Vec<i32> {
    let mut brokers: Vec<i32> = snapshot
        .candidates(topic)
        .iter()
        .map(|c| c.broker_id)
        .collect();
    brokers.dedup();
    brokers
}

impl<E: Env> Dispatcher<E> {
    /// Before the first messages of a source partition in an ownership (the mirror's start,
    /// or the source partition taken over from another member): asks each partition of its
    /// mirror topic (on every broker that has it) how far its copies of source partitions
    /// reach, and places the source partition where its copy reaches furthest. What was sent
    /// but not committed before then goes again to the partition that holds it (acknowledged
    /// without a second copy), wherever an earlier member had placed it. A partition that does
    /// not answer is passed over (then the placement stays as it was, or the default).
    pub(super) async fn locate(&self, snapshot: &super::directory::Snapshot, pending: &[Pending]) {
        if !self.config.durable_acks {
            return;
        }
        // Most batches have nothing to locate: looked at under one lock, without a turn.
        let wanted = {
            let mut placed = crate::sync::lock(&self.placed, "the mirror's placements");
            placed.note_registry(&snapshot.brokers, self.env.monotonic());
            let mut wanted: BTreeMap<TopicName, BTreeMap<Arc<SourceKey>, u64>> = BTreeMap::new();
            // Messages come in runs of one source partition: one look per run.
            let mut previous: Option<(&Arc<SourceKey>, u64)> = None;
            for p in pending {
                let Some(mark) = &p.record.source else {
                    continue;
                };
                if previous
                    .is_some_and(|(key, epoch)| Arc::ptr_eq(key, &mark.key) && epoch == mark.epoch)
                {
                    continue;
                }
                previous = Some((&mark.key, mark.epoch));
                if placed.located.get(&mark.key) != Some(&mark.epoch) {
                    wanted
                        .entry(p.record.topic.clone())
                        .or_default()
                        .insert(mark.key.clone(), mark.epoch);
                }
            }
            wanted
        };
        if !wanted.is_empty() {
            self.locate_wanted(snapshot, wanted).await;
        }
    }

    /// Locates, ahead of their first messages, the source partitions a mirror member has just
    /// come to own: per mirror topic, each source partition with its ownership epoch. They are
    /// located as [`Dispatcher::locate`] would at their first message (a survey of the topic
    /// and, with placement records, the records of all of them at once, pipelined), so that a
    /// member taking over many source partitions does not wait for one locate per partition,
    /// one after another, as its messages come. At most [`AHEAD_CHUNK`] source partitions of a
    /// topic are located in one turn: the sender's locate of that topic waits at most one chunk.
    pub(super) async fn locate_ahead(
        &self,
        sources: BTreeMap<TopicName, BTreeMap<Arc<SourceKey>, u64>>,
    ) {
        if !self.config.durable_acks {
            return;
        }
        for (topic, keys) in sources {
            let keys: Vec<(Arc<SourceKey>, u64)> = keys.into_iter().collect();
            for chunk in keys.chunks(AHEAD_CHUNK) {
                let snapshot = self.directory.snapshot();
                let wanted = BTreeMap::from([(topic.clone(), chunk.iter().cloned().collect())]);
                self.locate_wanted(&snapshot, wanted).await;
            }
        }
    }

    /// Locates each source partition of `wanted` (per mirror topic, with the ownership epoch
    /// its messages were read in) not located for that epoch yet, a topic at a time, in the
    /// topic's turn.
    async fn locate_wanted(
        &self,
        snapshot: &super::directory::Snapshot,
        wanted: BTreeMap<TopicName, BTreeMap<Arc<SourceKey>, u64>>,
    ) {
        for (topic, keys) in wanted {
            let turn = crate::sync::lock(&self.placed, "the mirror's placements").turn(&topic);
            let _turn = turn.lock().await;
            // Looked at again in the turn: another locate may have placed them meanwhile.
            let (keys, known) = {
                let mut placed = crate::sync::lock(&self.placed, "the mirror's placements");
                placed.note_registry(&snapshot.brokers, self.env.monotonic());
                let keys: BTreeMap<Arc<SourceKey>, u64> = keys
                    .into_iter()
                    .filter(|(key, epoch)| placed.located.get(key) != Some(epoch))
                    .collect();
                (keys, placed.addresses.clone())
            };
            if keys.is_empty() {
                continue;
            }
            self.locate_topic(snapshot, &known, topic, keys).await;
        }
    }

    /// Locates `keys` (not located for their epochs yet) in the mirror topic `topic`.
    async fn locate_topic(
        &self,
        snapshot: &super::directory::Snapshot,
        known: &BTreeMap<i32, (String, u16)>,
        topic: TopicName,
        keys: BTreeMap<Arc<SourceKey>, u64>,
    ) {
        // One epoch for every key: a survey made for it serves them all.
        let mut epochs = keys.values();
        let epoch = epochs
            .next()
            .copied()
            .filter(|e| epochs.all(|other| other == e));
        let cached = epoch.and_then(|epoch| {
            let placed = crate::sync::lock(&self.placed, "the mirror's placements");
            placed
                .surveyed
                .get(&topic)
                .filter(|(at, _)| *at == epoch)
                .map(|(_, survey)| survey.clone())
        });
        let (found, complete) = match cached {
            Some(survey) => (survey, true),
            None => self.survey(snapshot, known, &topic).await,
        };
        let brokers = topic_brokers(snapshot, &topic);
        let claimed = self
            .claim_records(&topic, &keys, &found, complete, &brokers)
            .await;
        let now = self.env.monotonic();
        let mut placed = crate::sync::lock(&self.placed, "the mirror's placements");
        if let (Some(epoch), true) = (epoch, complete) {
            if placed.surveyed.len() >= SURVEYS_MAX && !placed.surveyed.contains_key(&topic) {
                placed.surveyed.clear();
            }
            placed
                .surveyed
                .insert(topic.clone(), (epoch, found.clone()));
        }
        for (i, (key, epoch)) in keys.into_iter().enumerate() {
            let waited = placed.locating_for(&key, now);
            let patient = waited.is_none_or(|w| w < PLACEMENT_GRACE);
            let copy = found.get(&*key);
            let chosen = match &claimed {
                Some(Ok(claimed)) => match claimed.get(i) {
                    Some(Claimed::Broker(broker)) => {
                        let partition = copy.filter(|c| c.1 == *broker).map_or(-1, |c| c.2);
                        Some((*broker, partition))
                    }
                    _ => {
                        placed.start_locating(key, now);
                        continue;
                    }
                },
                // Records unreadable (ZooKeeper out of reach): wait for them, however
                // long (past the grace, the messages' retries count and run out: a
                // failure the mirror sees, never a second copy). Without records, a survey
                // not complete: wait for it up to the grace.
                Some(Err(_)) => {
                    placed.start_locating(key, now);
                    continue;
                }
                None if patient && !complete => {
                    placed.start_locating(key, now);
                    continue;
                }
                // Without records: the furthest copy, else the broker chosen from the
                // source partition.
                _ => copy.map(|c| (c.1, c.2)).or_else(|| {
                    let at = placement::index(&key, BROKER_SALT, brokers.len().max(1));
                    brokers.get(at).map(|broker| (*broker, -1))
                }),
            };
            placed.locating.remove(&key);
            match chosen {
                Some((broker_id, partition)) => {
                    match copy {
                        Some((held_to, b, p)) if (*b, *p) == (broker_id, partition) => tracing::debug!(
                            "{topic}: the copy of {key} reaches {held_to} in partition {partition} of broker {broker_id}; sending there"
                        ),
                        _ => tracing::debug!(
                            "{topic}: {key} placed on broker {broker_id} (its furthest copy: {copy:?}; survey complete: {complete})"
                        ),
                    }
                    if placed.by_key.len() < PLACEMENTS_MAX || placed.by_key.contains_key(&key) {
                        placed.by_key.insert(key.clone(), (broker_id, partition));
                    }
                }
                None => tracing::debug!("{topic}: no broker for {key} yet"),
            }
            if placed.located.len() < PLACEMENTS_MAX || placed.located.contains_key(&key) {
                placed.located.insert(key, epoch);
            }
        }
    }

    /// The placement records, when this producer keeps them.
    pub(super) fn records(&self) -> Option<&super::placement_records::PlacementRecords<E>> {
        if tributary_core::planted::active(tributary_core::planted::Bug::PlacementRecordsIgnored) {
            return None;
        }
        self.records.as_ref()
    }

    /// With placement records: reads (creating or moving) the record of each of `keys` in
    /// `topic`, from the copies `found` by a survey (`complete` or not, or past the grace for
    /// one). `None` without records; an error (said in the log) when ZooKeeper was not usable.
    async fn claim_records(
        &self,
        topic: &TopicName,
        keys: &BTreeMap<Arc<SourceKey>, u64>,
        found: &Survey,
        complete: bool,
        brokers: &[i32],
    ) -> Option<Result<Vec<Claimed>, CoordError>> {
        let records = self.records()?;
        let (claims, failing, absent) = {
            let now = self.env.monotonic();
            let placed = crate::sync::lock(&self.placed, "the mirror's placements");
            let claims: Vec<_> = keys
                .keys()
                .map(|key| {
                    let waited = placed.locating_for(key, now);
                    let complete = complete || waited.is_some_and(|w| w >= PLACEMENT_GRACE);
                    (key.clone(), found.get(&**key).map(|c| c.1), complete)
                })
                .collect();
            (claims, placed.failing.clone(), placed.absent.clone())
        };
        let on = Brokers {
            topic: brokers,
            usable: &|broker| usable(&failing, &absent, broker, brokers, self.env.monotonic()),
        };
        let claimed = records.claim(&self.env, topic, &claims, &on).await;
        if let Err(e) = &claimed {
            tracing::warn!(
                "{topic}: the mirror's placement records in the mirror cluster's ZooKeeper cannot be read ({e}); its new source partitions wait for them"
            );
        }
        Some(claimed)
    }

    /// Asks every broker that may hold a copy of `topic` (those with the topic registered,
    /// and every other broker known: a crashed one is unregistered, yet holds what it held)
    /// how far each partition's copies reach; whether every one answered.
    async fn survey(
        &self,
        snapshot: &super::directory::Snapshot,
        known: &BTreeMap<i32, (String, u16)>,
        topic: &TopicName,
    ) -> (Survey, bool) {
        let mut brokers: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for c in snapshot.candidates(topic) {
            brokers.entry(c.broker_id).or_default().push(c.partition);
        }
        for broker in known.keys() {
            brokers.entry(*broker).or_insert_with(|| vec![-1]);
        }
        tracing::debug!(
            "{topic}: surveying {brokers:?} (registered: {:?})",
            snapshot.brokers.keys().collect::<Vec<_>>()
        );
        let mut found = Survey::new();
        let mut complete = true;
        for (broker_id, partitions) in brokers {
            let Some((host, port)) = known.get(&broker_id).cloned() else {
                continue;
            };
            complete &= self
                .locate_on(topic, broker_id, &host, port, &partitions, &mut found)
                .await;
        }
        (found, complete)
    }

    /// Whether `p` waits for its source partition's copy to be located (a broker that may
    /// hold it has not answered yet, for less than [`PLACEMENT_GRACE`]).
    pub(super) fn is_locating(&self, p: &Pending) -> bool {
        let placed = crate::sync::lock(&self.placed, "the mirror's placements");
        if placed.locating.is_empty() {
            return false;
        }
        p.record
            .source
            .as_ref()
            .is_some_and(|mark| placed.locating_within_grace(&mark.key, self.env.monotonic()))
    }

    /// Asks one broker about its partitions of `topic` (`-1` among them: every partition,
    /// until one past its count); whether it answered.
    async fn locate_on(
        &self,
        topic: &TopicName,
        broker_id: i32,
        host: &str,
        port: u16,
        partitions: &[i32],
        found: &mut Survey,
    ) -> bool {
        let timeout = std::time::Duration::from_millis(self.config.socket_timeout_ms.into());
        let Ok(Ok(mut conn)) =
            tokio::time::timeout(timeout, connect(&self.env, host, port, timeout)).await
        else {
            return false;
        };
        let every = partitions.iter().any(|p| *p < 0);
        let asked: Vec<i32> = match every {
            true => (0..LOCATE_PARTITIONS_MAX).collect(),
            false => partitions.to_vec(),
        };
        for partition in asked {
            let ask = Request::MirrorPositions(MirrorPositionsRequest {
                topic: topic.clone(),
                partition,
                translate: Vec::new(),
            });
            match tokio::time::timeout(timeout, conn.call(&ask)).await {
                Ok(Ok(Response::MirrorPositions(r))) if r.error == ErrorCode::NoError => {
                    for held in r.sources {
                        let best = found.entry(held.key).or_insert((-1, broker_id, partition));
                        if held.held_to > best.0 {
                            *best = (held.held_to, broker_id, partition);
                        }
                    }
                }
                // Past the broker's count (or the topic is not there): all it has is known.
                Ok(Ok(Response::MirrorPositions(r))) if r.error == ErrorCode::WrongPartition => {
                    return true
                }
                // A broker that does not know the request (closes on it) holds no positions.
                Ok(Err(ClientError::Closed(_))) => return true,
                _ => return false,
            }
        }
        true
    }
}
