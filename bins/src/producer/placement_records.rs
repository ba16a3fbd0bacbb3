//! The mirror cluster's placement records: for each source partition copied with positions, the
//! mirror broker its copy goes to, in the mirror cluster's ZooKeeper
//! ([`tributary_core::zk_layout::mirror_placement_path`]). Every member of a mirror reads the
//! record before it sends a source partition's first set in an ownership, so two members that
//! hold the same source partition for a moment (the old and the new owner across a rebalance),
//! or that see the cluster's brokers differently (one of them has not yet seen a restarted
//! broker, or a topic registered on a new broker), still send it to the same broker: one
//! broker's positions judge every set, and none is copied twice. The first member to place a
//! source partition creates the record; a record is moved only by a versioned write, once the
//! broker it names is gone ([`tributary_core::mirror::position::placement::record_step`]).
//!
//! The records use a ZooKeeper session of their own, opened when first needed and opened again
//! after a failure; reads are made after a `sync`, so a record another member has just written is
//! seen.

use std::sync::Arc;
use std::time::Duration;

use tributary_core::config::ZkConnect;
use tributary_core::mirror::position::placement::{
    parse_record, record_data, record_step, RecordStep,
};
use tributary_core::mirror::position::SourceKey;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::mirror_placement_path;

use crate::coordination::pipeline::{try_pipelined, OnFailure, REQUESTS_IN_FLIGHT};
use crate::coordination::{CoordError, Coordination, NodeKind};
use crate::env::Env;

/// How many times one record is read again after another member changed it between the read
/// and the write; past it, the record is left for the next attempt.
const CONFLICTS_MAX: usize = 4;

/// What one source partition's record asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claimed {
    /// Send to this broker: the record names it (read, created or moved).
    Broker(i32),
    /// No broker can be named yet (none usable, or where the copy is is not known): wait.
    Wait,
}

/// What is known, when records are claimed, of the brokers a member may send to.
pub(super) struct Brokers<'a> {
    /// The topic's brokers, sorted: where a new record may point.
    pub(super) topic: &'a [i32],
    /// Whether this member may send to a broker (see `Placements::usable`).
    pub(super) usable: &'a (dyn Fn(i32) -> bool + Sync),
}

/// The records, on a ZooKeeper session of their own.
pub(super) struct PlacementRecords<E: Env> {
    connect: ZkConnect,
    session_timeout: Duration,
    connection_timeout: Duration,
    session: tokio::sync::Mutex<Option<E::Coord>>,
}

impl<E: Env> PlacementRecords<E> {
    /// Records in the ZooKeeper at `connect` (a session is opened when first needed).
    pub(super) fn new(
        connect: ZkConnect,
        session_timeout: Duration,
        connection_timeout: Duration,
    ) -> Self {
        PlacementRecords {
            connect,
            session_timeout,
            connection_timeout,
            session: tokio::sync::Mutex::new(None),
        }
    }

    /// Reads the record of each source partition in `claims` (with the broker where its copy
    /// reaches furthest, and whether that survey is complete), follows it, or creates or moves
    /// it as [`record_step`] says; what each record asks, in the order of `claims`. An error
    /// when ZooKeeper could not be used (the session is then opened again next time).
    pub(super) async fn claim(
        &self,
        env: &E,
        topic: &TopicName,
        claims: &[(Arc<SourceKey>, Option<i32>, bool)],
        brokers: &Brokers<'_>,
    ) -> Result<Vec<Claimed>, CoordError> {
        let mut session = self.session.lock().await;
        if session.is_none() {
            let opened = env
                .coordinate(&self.connect, self.session_timeout, self.connection_timeout)
                .await?;
            *session = Some(opened);
        }
        let Some(coord) = session.as_ref() else {
            return Err(CoordError::ConnectionLoss(
                "placement records: no ZooKeeper session".to_string(),
            ));
        };
        let deadline = self.session_timeout.max(self.connection_timeout);
        let claimed =
            tokio::time::timeout(deadline, claim_all(coord, topic, claims, brokers)).await;
        // A claim cancelled by its caller keeps the session: its requests in flight land or
        // not, and the next claim reads the records again after a `sync`.
        match claimed {
            Ok(Ok(claimed)) => Ok(claimed),
            Ok(Err(e)) => {
                *session = None;
                Err(e)
            }
            Err(_) => {
                *session = None;
                Err(CoordError::ConnectionLoss(format!(
                    "placement records not read within {} ms",
                    deadline.as_millis()
                )))
            }
        }
    }
}

/// Every claim, pipelined on one session after a `sync` of the topic's records.
async fn claim_all(
    coord: &impl Coordination,
    topic: &TopicName,
    claims: &[(Arc<SourceKey>, Option<i32>, bool)],
    brokers: &Brokers<'_>,
) -> Result<Vec<Claimed>, CoordError> {
    let Some((first, _, _)) = claims.first() else {
        return Ok(Vec::new());
    };
    let first_path = mirror_placement_path(topic, first);
    coord.ensure_parents(&first_path).await?;
    coord.sync(&first_path).await?;
    let requests = claims.iter().map(|(key, furthest, complete)| {
        claim_one(coord, topic, key, *furthest, *complete, brokers)
    });
    try_pipelined(REQUESTS_IN_FLIGHT, OnFailure::Abandon, requests).await
}

/// One record: read, then followed, created or moved; read again when another member wrote it
/// between the read and the write.
async fn claim_one(
    coord: &impl Coordination,
    topic: &TopicName,
    key: &SourceKey,
    furthest: Option<i32>,
    complete: bool,
    brokers: &Brokers<'_>,
) -> Result<Claimed, CoordError> {
    let path = mirror_placement_path(topic, key);
    for _ in 0..CONFLICTS_MAX {
        let recorded = match coord.get(&path).await {
            Ok((data, version)) => Some((parse_record(&data), version)),
            Err(CoordError::NoNode(_)) => None,
            Err(e) => return Err(e),
        };
        if let Some((None, _)) = recorded {
            tracing::warn!("{path}: not a broker id; the record is replaced");
        }
        let step = record_step(
            key,
            recorded,
            furthest,
            complete,
            brokers.topic,
            brokers.usable,
        );
        match step {
            RecordStep::Follow(broker) => return Ok(Claimed::Broker(broker)),
            RecordStep::Wait => return Ok(Claimed::Wait),
            RecordStep::Create(broker) => {
                match coord
                    .create(&path, &record_data(broker), NodeKind::Persistent)
                    .await
                {
                    Ok(_) => {
                        tracing::debug!("{path}: placed on broker {broker}");
                        return Ok(Claimed::Broker(broker));
                    }
                    Err(CoordError::NodeExists(_)) => continue,
                    Err(e) => return Err(e),
                }
            }
            RecordStep::Move { to, version } => {
                match coord.set(&path, &record_data(to), Some(version)).await {
                    Ok(_) => {
                        tracing::info!("{path}: the broker it named is gone; moved to broker {to}");
                        return Ok(Claimed::Broker(to));
                    }
                    Err(CoordError::BadVersion(_) | CoordError::NoNode(_)) => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    tracing::warn!("{path}: changed by other members {CONFLICTS_MAX} times while placing it; left for the next attempt");
    Ok(Claimed::Wait)
}
