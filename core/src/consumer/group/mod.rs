//! A consumer group member's rebalance, sans-IO: 0.7.1's protocol and layout, decided here and
//! carried out by a driver (`bins::consumer::group`) against ZooKeeper and the brokers.
//!
//! A rebalance: stop fetching and take back what is owned (committing it with autocommit);
//! read the members and the partitions; compute the range assignment (`plan`); release the
//! owner nodes held that the plan gives away; find each new partition's start (committed, or
//! `autooffset.reset`); claim the owner nodes, checking rather than making again those held
//! through (a node held by someone else fails the attempt: what it claimed is released, then
//! every node held before, and after `rebalance.backoff.ms` it is tried again — releasing every
//! node before it reads, as 0.7 does before each attempt — `rebalance.retries.max` times, then
//! the member owns nothing until the next change). Unlike 0.7, the first attempt keeps the
//! nodes it will own again in place: a rebalance that moves nothing writes nothing to
//! ZooKeeper, and no other member can own a kept partition while this one rebalances. Also
//! unlike 0.7, a blocked attempt is tried again as soon as the blocking node goes, without
//! counting as an attempt (at most [`EARLY_RETRIES_MAX`] such early tries; every counted
//! attempt still waits out its backoff).
//! A claimed partition's committed offset is read again, so a commit its previous owner made
//! meanwhile is not delivered again; a partition kept through a rebalance resumes after what was
//! handed out, not from ZooKeeper; a start taken from `autooffset.reset` is recorded, so data
//! deleted before the group read it shows up as a gap.
//!
//! # Call order
//! 1. [`Rebalance::new`] for each rebalance (the member's task decides when one is due).
//! 2. Loop: [`Rebalance::poll`] gives the next [`Step`]; carry it out and hand its answer to
//!    the `handle_*` the step names (its failure to [`Rebalance::handle_failed`]). While the
//!    step is [`Step::Wait`], sleep for [`Rebalance::wait_left`] and call
//!    [`Rebalance::handle_timeout`], or call [`Rebalance::handle_owner_gone`] when the named
//!    owner node goes first.
//! 3. It ends at [`Step::Install`] (own what [`Step::Prepare`] listed) or [`Step::GiveUp`]; a
//!    driver asked to stop drops the machine at any step.
//!
//! Every answer out of turn panics (on in release): a driver that lost track of the steps must
//! not go on claiming partitions.

mod plan;
mod rebalance;

use std::time::Duration;

use crate::wire::TopicName;

use super::BrokerPartition;

pub use plan::{BrokerTopicNode, PlanError, Planned, COUNT_MAX};
pub use rebalance::{
    AttemptFailure, ClaimedPartition, GroupRead, HeldPartition, Installed, OwnerClaim, Rebalance,
    RebalanceSettings, Released, SettleAnswer, SettleRequest, StartFound, Step,
};

/// A partition of a topic, as the group names it.
pub type PartitionKey = (TopicName, BrokerPartition);

/// Retries of one rebalance made early, as soon as a partition's previous owner let it go: a
/// bound on the attempts a rebalance makes within its backoffs.
pub const EARLY_RETRIES_MAX: u32 = 16;

/// The least wait before a rebalance that gave up is tried again, and before ZooKeeper is
/// retried after a failure.
pub const RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// How soon a member whose partitions' starts could not be read rebalances to read them again.
pub const START_RETRY: Duration = Duration::from_secs(10);

const _: () = assert!(EARLY_RETRIES_MAX > 0);
const _: () = assert!(RETRY_BACKOFF.as_millis() < START_RETRY.as_millis());
