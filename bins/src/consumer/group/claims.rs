//! A rebalance's writes of owner nodes and recorded starts, in ZooKeeper transactions: a
//! group's first join of 10,000 partitions is 20,000 creates, and one request each was what
//! bounded it (ZooKeeper's work per write falls about twentyfold in transactions of a hundred).
//!
//! Each run of at most a hundred nodes ([`transaction_runs`]) is one transaction
//! ([`Coordination::create_all`]), at most [`TRANSACTIONS_IN_FLIGHT`] pipelined on the
//! session. A transaction refused made nothing. Refused for one owner node (held by another
//! member, left by a retired session of this one, its parent missing), that node is claimed
//! alone, as 0.7 claims every node, which tells whose node is in the way and settles it; the
//! rest go together again. Refused for anything else (a server without transactions), or a
//! transaction of starts refused (one already recorded by another member), the run is done one
//! node at a time, as a claim or a record of one partition is. A transaction lost with the
//! connection may have made its nodes or not: the attempt fails, as one create lost would fail
//! it, and the nodes its claims may have made are released as strays.

use std::sync::atomic::{AtomicUsize, Ordering};

use tributary_core::consumer::group::{OwnerClaim, SettleAnswer, SettleRequest};
use tributary_core::planted::{self, Bug};
use tributary_core::zk_layout::{consumer_offsets_root, consumer_owners_root};

use super::super::offset_node::read_offset_node;
use super::super::{OffsetNodeError, RebalanceError};
use super::Member;
use crate::coordination::pipeline::{try_pipelined, OnFailure, REQUESTS_IN_FLIGHT};
use crate::coordination::{
    outcome_unknown, transaction_runs, CoordError, Coordination, NodeKind, TRANSACTIONS_IN_FLIGHT,
};
use crate::env::Env;

/// The most bytes an offset takes in a node (an `i64` in decimal).
const OFFSET_DIGITS_MAX: usize = 20;

impl<E: Env> Member<E> {
    /// Claims every owner node of `claims`: a node held through the rebalance is only checked
    /// (see [`Member::still_held`]), the others are made in transactions, pipelined. On a
    /// failure, how many claims were started, in plan order: each of those may have made its
    /// node (a transaction lost with the connection after it was applied, or one abandoned in
    /// flight when another failed).
    pub(super) async fn claim_all(
        &self,
        coord: &E::Coord,
        claims: &[OwnerClaim],
    ) -> Result<(), (usize, RebalanceError)> {
        let new_topics = claims.iter().filter(|c| !c.held).map(|c| &c.key.0);
        self.ensure_topic_dirs(coord, &consumer_owners_root(self.group()), new_topics)
            .await;
        let started = AtomicUsize::new(0);
        let runs = transaction_runs(claims.iter().collect(), |claim: &&OwnerClaim| {
            Some(self.claim_path(claim).len() + claim.thread.len())
        });
        let requests = runs.into_iter().map(|run| {
            // Counted from the moment its request is made, before it is sent.
            started.fetch_add(run.len(), Ordering::Relaxed);
            self.claim_run(coord, run)
        });
        match try_pipelined(TRANSACTIONS_IN_FLIGHT, OnFailure::Abandon, requests).await {
            Ok(_) => Ok(()),
            Err(e) => Err((started.load(Ordering::Relaxed), e)),
        }
    }

    fn claim_path(&self, claim: &OwnerClaim) -> String {
        super::owner_path(self.group(), &claim.key.0, claim.key.1)
    }

    /// Claims one run's owner nodes: those held through the rebalance checked, the others made
    /// in one transaction. When it is refused for one node (in the way, or its parent missing),
    /// that node is claimed alone — which fails the attempt when another member holds it, and
    /// otherwise settles it (a retired session's node taken back, a parent made) — and the rest
    /// are made together again; refused for anything else, one node at a time.
    async fn claim_run(
        &self,
        coord: &E::Coord,
        run: Vec<&OwnerClaim>,
    ) -> Result<(), RebalanceError> {
        let checks = run.into_iter().map(|claim| async move {
            let (topic, partition) = (&claim.key.0, claim.key.1);
            let held = claim.held
                && self
                    .still_held(coord, topic, partition, &claim.thread)
                    .await?;
            Ok::<_, RebalanceError>((claim, held))
        });
        let mut to_make: Vec<&OwnerClaim> =
            try_pipelined(REQUESTS_IN_FLIGHT, OnFailure::Abandon, checks)
                .await?
                .into_iter()
                .filter_map(|(claim, held)| (!held).then_some(claim))
                .collect();
        // Each round makes every node or settles one alone: at most one round per node.
        while to_make.len() >= 2 {
            let creates: Vec<(String, Vec<u8>)> = to_make
                .iter()
                .map(|claim| (self.claim_path(claim), claim.thread.clone().into_bytes()))
                .collect();
            let in_the_way = match coord.create_all(&creates, NodeKind::Ephemeral).await {
                Ok(()) => return Ok(()),
                Err(source) if outcome_unknown(&source) => {
                    let path = creates.into_iter().next().map_or_else(String::new, |c| c.0);
                    return Err(RebalanceError::ZooKeeper { path, source });
                }
                Err(CoordError::NodeExists(_)) if planted::active(Bug::ClaimRefusedTakenAsMade) => {
                    return Ok(());
                }
                Err(CoordError::NodeExists(path) | CoordError::NoNode(path)) => {
                    creates.iter().position(|(made, _)| *made == path)
                }
                Err(_) => None,
            };
            let Some(index) = in_the_way else {
                tracing::debug!(
                    "consumer {}: {} owner nodes not made together; one at a time",
                    self.consumer_id,
                    creates.len()
                );
                break;
            };
            let claim = to_make.remove(index);
            self.claim(coord, &claim.key.0, claim.key.1, &claim.thread)
                .await?;
        }
        let claims = to_make
            .into_iter()
            .map(|claim| self.claim(coord, &claim.key.0, claim.key.1, &claim.thread));
        try_pipelined(REQUESTS_IN_FLIGHT, OnFailure::Abandon, claims).await?;
        Ok(())
    }

    /// Settles each claimed partition's start (an answer per request, in order): the starts to
    /// record made in transactions, the rest one request each, pipelined. Drained on a failure:
    /// a start recorded by a request in flight is seen, and its gap reported; abandoned, it
    /// could land unseen and the next attempt would take it as recorded by someone else, never
    /// reporting the gap.
    pub(super) async fn settle(
        &self,
        coord: &E::Coord,
        requests: &[SettleRequest],
    ) -> Result<Vec<SettleAnswer>, RebalanceError> {
        let recorded_topics = requests
            .iter()
            .filter(|r| r.record.is_some())
            .map(|r| &r.key.0);
        self.ensure_topic_dirs(coord, &consumer_offsets_root(self.group()), recorded_topics)
            .await;
        let runs = transaction_runs(requests.iter().collect(), |request: &&SettleRequest| {
            records_only(request).then(|| self.record_path(request).len() + OFFSET_DIGITS_MAX)
        });
        let settles = runs.into_iter().map(|run| self.settle_run(coord, run));
        let answers = try_pipelined(TRANSACTIONS_IN_FLIGHT, OnFailure::Drain, settles).await?;
        Ok(answers.into_iter().flatten().collect())
    }

    fn record_path(&self, request: &SettleRequest) -> String {
        super::offset_path(self.group(), &request.key.0, request.key.1)
    }

    /// Settles one run: its starts to record made in one transaction (one at a time when it is
    /// refused whole), its other requests one at a time, pipelined and drained; an answer per
    /// request, in order, up to the first failure.
    async fn settle_run(
        &self,
        coord: &E::Coord,
        run: Vec<&SettleRequest>,
    ) -> Result<Vec<SettleAnswer>, RebalanceError> {
        let recorded = self.record_together(coord, &run).await?;
        let settles = run.into_iter().map(|request| async move {
            if recorded && records_only(request) {
                self.recorded(request);
                return Ok(SettleAnswer::Recorded);
            }
            self.settle_one(coord, request).await
        });
        try_pipelined(REQUESTS_IN_FLIGHT, OnFailure::Drain, settles).await
    }

    /// Records the starts of `run`'s requests that only record one, in one transaction when
    /// there are two or more: `Ok(true)` when they were all recorded, `Ok(false)` when they are
    /// to be recorded one at a time (fewer than two, or the transaction refused whole).
    async fn record_together(
        &self,
        coord: &E::Coord,
        run: &[&SettleRequest],
    ) -> Result<bool, RebalanceError> {
        let recording: Vec<&SettleRequest> =
            run.iter().copied().filter(|r| records_only(r)).collect();
        let [first, _, ..] = recording.as_slice() else {
            return Ok(false);
        };
        let creates: Vec<(String, Vec<u8>)> = recording
            .iter()
            .filter_map(|r| Some((self.record_path(r), r.record?.to_string().into_bytes())))
            .collect();
        match coord.create_all(&creates, NodeKind::Persistent).await {
            Ok(()) => Ok(true),
            Err(source) if outcome_unknown(&source) => Err(RebalanceError::RecordStart {
                topic: first.key.0.clone(),
                partition: first.key.1,
                source: OffsetNodeError::ZooKeeper {
                    path: self.record_path(first),
                    source,
                },
            }),
            Err(refused) => {
                tracing::debug!(
                    "consumer {}: {} starts not recorded together ({refused}); one at a time",
                    self.consumer_id,
                    creates.len()
                );
                Ok(false)
            }
        }
    }

    /// What follows a start recorded: the bytes before it reported as a gap, when asked.
    fn recorded(&self, request: &SettleRequest) {
        if let (true, Some(start)) = (request.report_deleted_prefix, request.record) {
            self.report_deleted_prefix(&request.key.0, request.key.1, start);
        }
    }

    /// Settles one request: reads the commit again, or records the start.
    async fn settle_one(
        &self,
        coord: &E::Coord,
        request: &SettleRequest,
    ) -> Result<SettleAnswer, RebalanceError> {
        let (topic, partition) = (&request.key.0, request.key.1);
        if let Some(start) = request.reread_after {
            // The previous owner may have committed between the read of the start and its
            // release of the node (it serves the commits asked for before its own rebalance).
            let path = self.record_path(request);
            return Ok(match read_offset_node(coord, path).await {
                Ok(committed) => SettleAnswer::Reread(committed),
                Err(e) => {
                    tracing::warn!("consumer {}: reading {topic}/{partition}'s offset again after claiming it: {e}; starting at {start}, read before (what was committed since is delivered again)", self.consumer_id);
                    SettleAnswer::Reread(None)
                }
            });
        }
        let Some(start) = request.record else {
            return Ok(SettleAnswer::Nothing);
        };
        match self.record_start(coord, topic, partition, start).await {
            Ok(None) => {
                self.recorded(request);
                Ok(SettleAnswer::Recorded)
            }
            // Another member committed since the start was read: resume there.
            Ok(Some(committed)) => Ok(SettleAnswer::CommittedSince(committed)),
            Err(source) => Err(RebalanceError::RecordStart {
                topic: topic.clone(),
                partition,
                source,
            }),
        }
    }
}

/// Whether `request` only records a start (no read again first): such requests are made
/// together.
fn records_only(request: &SettleRequest) -> bool {
    request.reread_after.is_none() && request.record.is_some()
}
