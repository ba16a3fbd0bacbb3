//! One rebalance of a group member, as a state machine: what to release, read, claim and
//! record, in which order, what each answer means, when an attempt has failed and when the next
//! one starts. See the module docs of [`super`] for the call order.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::consumer::{PartitionOffsets, Registration};
use crate::wire::TopicName;

use super::plan::{self, BrokerTopicNode, PlanError, Planned};
use super::{PartitionKey, EARLY_RETRIES_MAX, RETRY_BACKOFF, START_RETRY};

/// What a rebalance works with: who the member is and the group's settings.
#[derive(Debug, Clone)]
pub struct RebalanceSettings {
    /// The member's consumer id (`<group>_<id>`).
    pub consumer_id: String,
    /// What the member registered: the topics and streams it consumes.
    pub registration: Registration,
    /// `rebalance.retries.max` (at least one attempt is made).
    pub attempts: u32,
    /// `rebalance.backoff.ms`: the least time between two counted attempts.
    pub backoff: Duration,
    /// Whether the member records where it starts partitions its group never committed (it
    /// commits on its own, or is told of gaps), so data deleted before it was read shows up as
    /// a gap. A group that never commits keeps 0.7's fresh start.
    pub records_starts: bool,
    /// Whether a start the member records past offset 0 is reported as a gap of the bytes
    /// before it (the member is told of gaps and starts from the beginning:
    /// `autooffset.reset=smallest`).
    pub reports_deleted_prefix: bool,
}

/// What an attempt's failure tells the machine.
pub trait AttemptFailure: Clone {
    /// The partition whose owner node, held by another member, failed the attempt: the next
    /// attempt may start as soon as that node goes.
    fn blocked_by(&self) -> Option<PartitionKey>;
}

/// A partition this member held when the rebalance released it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPartition {
    /// The topic and partition.
    pub key: PartitionKey,
    /// The thread id its owner node names.
    pub owner: String,
    /// Its offsets after the commit before the rebalance.
    pub offsets: PartitionOffsets,
    /// The rebalance since which this member has owned it without interruption.
    pub epoch: u64,
}

/// What the driver took back when told [`Step::Release`].
#[derive(Debug, Clone, Default)]
pub struct Released {
    /// Every partition owned up to now.
    pub owned: Vec<HeldPartition>,
    /// Partitions given up since the last rebalance (a stream stopped them), with the thread id
    /// their owner node names: released, never kept.
    pub stopped: Vec<(PartitionKey, String)>,
    /// The generation the release started (the driver's count of rebalances).
    pub generation: u64,
}

/// What ZooKeeper says about the group, read at the start of an attempt.
#[derive(Debug, Clone, Default)]
pub struct GroupRead {
    /// Every member listed under the group's `ids`, with its registration data (`None`: it left
    /// between the listing and the read).
    pub members: Vec<(String, Option<Vec<u8>>)>,
    /// Every topic brokers registered (`/brokers/topics`; empty when the node is missing).
    pub topics: Vec<String>,
}

/// Where a partition new to this member starts, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFound {
    /// The group's committed offset.
    Committed(i64),
    /// `autooffset.reset`'s offset, asked of the broker (nothing committed yet).
    Reset(i64),
    /// It could not be read (the driver keeps why).
    Unreadable,
}

/// An owner node to claim: `/consumers/<group>/owners/<topic>/<partition>` = `thread`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerClaim {
    /// The topic and partition.
    pub key: PartitionKey,
    /// The thread id the node names.
    pub thread: String,
    /// The member held this node, naming this thread, before the rebalance and did not let it
    /// go: the driver checks that its session still holds it (without a request when its
    /// session is the one the node was made or checked in; one read otherwise) and claims it
    /// only if it does not.
    pub held: bool,
}

/// What to settle of a claimed partition's start once its owner node is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettleRequest {
    /// The topic and partition.
    pub key: PartitionKey,
    /// Read the committed offset again: the previous owner may have committed past this start
    /// between the read and its release.
    pub reread_after: Option<i64>,
    /// Record this start as the group's commit, unless one exists by now.
    pub record: Option<i64>,
    /// Once recorded, report the bytes before it as a gap (deleted before the group read them).
    pub report_deleted_prefix: bool,
}

/// How one [`SettleRequest`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleAnswer {
    /// Nothing was asked.
    Nothing,
    /// The committed offset read again (`None`: none, or it could not be read).
    Reread(Option<i64>),
    /// The start was recorded.
    Recorded,
    /// The group committed this offset since the start was read: start there.
    CommittedSince(i64),
}

/// A partition a successful rebalance gives this member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedPartition {
    /// The topic and partition.
    pub key: PartitionKey,
    /// The owning thread id.
    pub thread: String,
    /// Which of the member's threads of the topic owns it.
    pub thread_index: u32,
    /// Its broker's address.
    pub address: (String, u16),
    /// Where it resumes.
    pub offsets: PartitionOffsets,
    /// The rebalance since which this member has owned it without interruption.
    pub epoch: u64,
    /// Its start could not be read: it is owned but stalled until the next rebalance.
    pub start_unreadable: bool,
}

/// A successful rebalance's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The generation it installs.
    pub generation: u64,
    /// What this member owns, in plan order.
    pub partitions: Vec<ClaimedPartition>,
    /// The brokers those partitions live on.
    pub brokers: BTreeMap<i32, (String, u16)>,
    /// Rebalance again after this long (some starts could not be read).
    pub read_starts_again_in: Option<Duration>,
    /// The member owns exactly what it owned before.
    pub unchanged: bool,
}

/// What the driver does next.
#[derive(Debug, Clone)]
pub enum Step<F> {
    /// Stop every fetcher, take every owned partition back (a new generation), commit them when
    /// autocommit is on, then [`Rebalance::handle_released`]. A driver asked to stop ends the
    /// rebalance here instead.
    Release,
    /// Delete each owner node that still names the thread given (never one another member has
    /// claimed since), every one tried; then [`Rebalance::handle_owners_released`] with those
    /// whose release could not be settled (ZooKeeper unreachable).
    ReleaseOwners(Vec<(PartitionKey, String)>),
    /// Delete each owner node this session holds; then [`Rebalance::handle_strays_left`] with
    /// those that could not be settled.
    ReleaseStrays(Vec<PartitionKey>),
    /// Take the partitions to restart from their commit; then [`Rebalance::handle_restarts`].
    TakeRestarts,
    /// Make sure the member's registration is this session's; then
    /// [`Rebalance::handle_registered`] (or [`Rebalance::handle_failed`]).
    CheckRegistration,
    /// Read the group (watching members, and topics for a wildcard); then
    /// [`Rebalance::handle_group`].
    ReadGroup,
    /// Read (and watch) each topic's broker registrations, in this order; then
    /// [`Rebalance::handle_topics`].
    ReadTopics(Vec<TopicName>),
    /// Read the brokers' addresses, one after another, topic by topic (for each topic of
    /// [`Step::ReadTopics`], in that order, the brokers its partitions are the first to name);
    /// then [`Rebalance::handle_addresses`].
    ReadAddresses(Vec<Vec<i32>>),
    /// Find where these partitions start; then [`Rebalance::handle_starts`].
    ReadStarts(Vec<(PartitionKey, (String, u16))>),
    /// Claim these owner nodes (those [`OwnerClaim::held`] checked first), pipelined, in
    /// order; then [`Rebalance::handle_claimed`] or [`Rebalance::handle_claims_failed`].
    Claim(Vec<OwnerClaim>),
    /// Settle each claimed partition's start, pipelined, draining on a failure; then
    /// [`Rebalance::handle_settled`].
    Settle(Vec<SettleRequest>),
    /// The attempt failed: wait until [`Rebalance::poll_timeout`]
    /// ([`Rebalance::handle_timeout`]), or, when a partition is named, until its owner node
    /// goes ([`Rebalance::handle_owner_gone`]).
    Wait {
        /// The owner node to watch.
        watch_owner: Option<PartitionKey>,
    },
    /// Every owner node is held and every start settled: build the partitions' state (not yet
    /// fetched), stall and report those whose start is unreadable; then
    /// [`Rebalance::handle_prepared`].
    Prepare(Installed),
    /// The rebalance succeeded: install what [`Step::Prepare`] built and start fetching. The
    /// machine is finished.
    Install {
        /// Owner nodes of failed attempts that could not be released (they go with the
        /// session).
        strays_left: usize,
    },
    /// Every attempt failed: tell the streams, own nothing, and rebalance again after
    /// `retry_in` or on the next change. The machine is finished.
    GiveUp {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's failure.
        last: F,
        /// Owner nodes of failed attempts that could not be released.
        strays_left: usize,
        /// When to try again without a change.
        retry_in: Duration,
    },
}

/// Which answer the machine waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    Released,
    OwnersReleased(After),
    StraysLeft(After),
    Restarts,
    Registration,
    Group,
    Topics,
    Addresses,
    Starts,
    Claims,
    Settled,
    Prepared,
    WaitOver,
    Finished,
}

/// Where a release sits in the rebalance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Before an attempt reads anything.
    BeforeAttempt,
    /// The attempt planned, keeping the nodes it held: those it gives away go.
    Planned,
    /// An attempt that kept the nodes it held failed: they all go before its wait.
    Failed,
    /// A claim failed: what it claimed goes.
    ClaimFailed,
    /// The attempt succeeded: what was given away goes.
    Success,
    /// Every attempt failed.
    GiveUp,
}

/// What one attempt has read and decided so far.
#[derive(Debug, Default)]
struct Attempt {
    members: BTreeMap<String, Registration>,
    registered: Vec<String>,
    wanted: Vec<(TopicName, u32)>,
    plan: Vec<Planned>,
    /// The brokers to read the addresses of, per topic, once the plan's releases are done.
    brokers: Vec<Vec<i32>>,
    addresses: BTreeMap<i32, (String, u16)>,
    starts: BTreeMap<PartitionKey, StartFound>,
    /// Per planned partition (plan order): its offsets and epoch before settling, the start to
    /// compare a re-read against, and whether its start was unreadable.
    settling: Vec<(PartitionOffsets, u64, Option<i64>, bool)>,
    /// What the attempt claimed, once it succeeded.
    claimed: BTreeSet<PartitionKey>,
}

/// One rebalance, from the release of what the member owns to an installed assignment (or the
/// last failed attempt). Sans-IO: the driver carries out each [`Step`] and hands the answer to
/// the matching `handle_*`; time comes in as `now`, a monotonic [`Duration`] from any origin the
/// driver keeps fixed.
#[derive(Debug)]
pub struct Rebalance<F> {
    settings: RebalanceSettings,
    /// The current attempt, counted from 1 (an early retry is not counted).
    attempt: u32,
    /// Retries made early (a blocking owner node went), bounded by [`EARLY_RETRIES_MAX`].
    early_retries: u32,
    /// When the current counted attempt's backoff ends (set at its first failure).
    backoff_until: Option<Duration>,
    /// What this member held before, to resume where it was (never partitions to restart from
    /// their commit).
    kept: BTreeMap<PartitionKey, (PartitionOffsets, u64)>,
    /// Every partition owned before the rebalance (or stopped), with its owner thread: its node
    /// is released before every attempt but a keeping one, and once more after success unless
    /// claimed again, so a node of ours never outlives the rebalance that gave its partition
    /// away.
    owned_before: BTreeMap<PartitionKey, String>,
    /// Whether the current attempt keeps the owner nodes held before (the first attempt, until
    /// it fails): it releases, once planned, only those it gives away, and claims the rest as
    /// held. A rebalance that moves nothing writes nothing to ZooKeeper, and no other member
    /// can own a kept partition in between. After a failure every node goes before the wait,
    /// and every later attempt releases them first, as 0.7 does.
    keeping: bool,
    /// The owner nodes a keeping attempt still holds from before, with the thread each names.
    held_through: BTreeMap<PartitionKey, String>,
    /// Nodes owned before that a release settled (gone, or another thread's) and no claim has
    /// touched since: not released again after success.
    let_go: BTreeSet<PartitionKey>,
    /// The nodes the release in progress was asked to let go.
    releasing: Vec<PartitionKey>,
    /// Owner nodes a failed attempt may have left (a release or claim failed after ZooKeeper
    /// made the node): released, if this session holds them, before every attempt and after.
    strays: Vec<PartitionKey>,
    /// This attempt's released partitions, until the partitions to restart are known.
    released: Vec<HeldPartition>,
    generation: u64,
    current: Attempt,
    failure: Option<F>,
    next: Option<Step<F>>,
    awaiting: Awaiting,
}

impl<F: AttemptFailure> Rebalance<F> {
    /// A rebalance about to start: its first step is [`Step::Release`].
    pub fn new(settings: RebalanceSettings) -> Self {
        Rebalance {
            settings,
            attempt: 1,
            early_retries: 0,
            backoff_until: None,
            kept: BTreeMap::new(),
            owned_before: BTreeMap::new(),
            keeping: true,
            held_through: BTreeMap::new(),
            let_go: BTreeSet::new(),
            releasing: Vec::new(),
            strays: Vec::new(),
            released: Vec::new(),
            generation: 0,
            current: Attempt::default(),
            failure: None,
            next: Some(Step::Release),
            awaiting: Awaiting::Released,
        }
    }

    /// The next step to carry out, once; `None` while an answer is awaited or once finished.
    pub fn poll(&mut self) -> Option<Step<F>> {
        self.next.take()
    }

    /// When the wait after a failed attempt ends ([`Rebalance::handle_timeout`]); `None` unless
    /// waiting.
    pub fn poll_timeout(&self) -> Option<Duration> {
        (self.awaiting == Awaiting::WaitOver)
            .then_some(self.backoff_until)
            .flatten()
    }

    /// How long the wait after a failed attempt has left at `now`: never more than one backoff,
    /// whatever the clock did (a wall clock set back does not stretch it); `None` unless waiting.
    pub fn wait_left(&self, now: Duration) -> Option<Duration> {
        self.poll_timeout()
            .map(|until| until.saturating_sub(now).min(self.settings.backoff))
    }

    /// The current attempt (from 1) and the attempts allowed, for the driver's logs.
    pub fn attempts(&self) -> (u32, u32) {
        (self.attempt, self.max_attempts())
    }

    fn max_attempts(&self) -> u32 {
        self.settings.attempts.max(1)
    }

    fn expect(&self, awaiting: Awaiting) {
        // On in release: an answer out of turn means the driver lost track of the steps.
        assert!(
            self.awaiting == awaiting && self.next.is_none(),
            "rebalance: an answer for {awaiting:?} while awaiting {:?}",
            self.awaiting
        );
    }

    fn then(&mut self, step: Step<F>, awaiting: Awaiting) {
        self.awaiting = awaiting;
        self.next = Some(step);
    }

    /// What the driver released for [`Step::Release`].
    pub fn handle_released(&mut self, released: Released) {
        self.expect(Awaiting::Released);
        assert!(
            released.generation > self.generation,
            "a release that did not start a new generation"
        );
        self.generation = released.generation;
        for held in &released.owned {
            self.owned_before
                .insert(held.key.clone(), held.owner.clone());
        }
        let stopped = released.stopped;
        for (key, owner) in &stopped {
            self.owned_before.insert(key.clone(), owner.clone());
        }
        self.released = released.owned;
        self.current = Attempt::default();
        let release: Vec<(PartitionKey, String)> = if self.keeping {
            // Only what streams stopped goes now (never kept); the plan decides the rest.
            self.held_through = self.owned_before.clone();
            for (key, _) in &stopped {
                self.held_through.remove(key);
            }
            stopped
        } else {
            self.held_through.clear();
            self.all_owned_before()
        };
        self.release_owners(release, After::BeforeAttempt);
    }

    /// Asks for `owners` to be released, remembering which, and awaits the answer `after`.
    fn release_owners(&mut self, owners: Vec<(PartitionKey, String)>, after: After) {
        self.releasing = owners.iter().map(|(key, _)| key.clone()).collect();
        self.then(Step::ReleaseOwners(owners), Awaiting::OwnersReleased(after));
    }

    fn all_owned_before(&self) -> Vec<(PartitionKey, String)> {
        self.owned_before
            .iter()
            .map(|(key, owner)| (key.clone(), owner.clone()))
            .collect()
    }

    /// The owner nodes of [`Step::ReleaseOwners`] were released, but for `left`, whose release
    /// could not be settled.
    pub fn handle_owners_released(&mut self, left: Vec<PartitionKey>) {
        let awaiting = self.awaiting;
        let after = match awaiting {
            Awaiting::OwnersReleased(after) => after,
            other => unreachable_state(other),
        };
        self.expect(awaiting);
        let left: BTreeSet<PartitionKey> = left.into_iter().collect();
        for key in std::mem::take(&mut self.releasing) {
            if !left.contains(&key) {
                self.let_go.insert(key);
            }
        }
        let strays = match after {
            After::Planned => {
                let brokers = std::mem::take(&mut self.current.brokers);
                return self.then(Step::ReadAddresses(brokers), Awaiting::Addresses);
            }
            After::Failed => return self.wait_step(),
            After::BeforeAttempt => std::mem::take(&mut self.strays),
            After::Success => {
                let strays = std::mem::take(&mut self.strays);
                strays
                    .into_iter()
                    .filter(|key| !self.current.claimed.contains(key))
                    .collect()
            }
            After::ClaimFailed | After::GiveUp => unreachable_state(awaiting),
        };
        self.then(Step::ReleaseStrays(strays), Awaiting::StraysLeft(after));
    }

    /// The owner nodes of [`Step::ReleaseStrays`] that could not be settled.
    pub fn handle_strays_left(&mut self, left: Vec<PartitionKey>, now: Duration) {
        let awaiting = self.awaiting;
        let after = match awaiting {
            Awaiting::StraysLeft(after) => after,
            other => unreachable_state(other),
        };
        self.expect(awaiting);
        match after {
            After::BeforeAttempt => {
                self.strays = left;
                self.then(Step::TakeRestarts, Awaiting::Restarts);
            }
            After::ClaimFailed => {
                self.strays.extend(left);
                self.wait(now);
            }
            After::Success => {
                self.then(
                    Step::Install {
                        strays_left: left.len(),
                    },
                    Awaiting::Finished,
                );
            }
            After::Planned | After::Failed => unreachable_state(awaiting),
            After::GiveUp => {
                let last = self
                    .failure
                    .take()
                    .unwrap_or_else(|| unreachable_state(awaiting));
                self.then(
                    Step::GiveUp {
                        attempts: self.max_attempts(),
                        last,
                        strays_left: left.len(),
                        retry_in: self.settings.backoff.max(RETRY_BACKOFF),
                    },
                    Awaiting::Finished,
                );
            }
        }
    }

    /// The partitions to restart from their commit (their offsets here mean nothing, or must
    /// not be resumed past): they are not kept.
    pub fn handle_restarts(&mut self, restart_from_commit: BTreeSet<PartitionKey>) {
        self.expect(Awaiting::Restarts);
        for held in std::mem::take(&mut self.released) {
            if !restart_from_commit.contains(&held.key) {
                self.kept.insert(held.key, (held.offsets, held.epoch));
            }
        }
        // Everything kept was owned before, so its node is released if it is not claimed again.
        assert!(
            self.kept
                .keys()
                .all(|key| self.owned_before.contains_key(key)),
            "a kept partition that was not owned before"
        );
        self.then(Step::CheckRegistration, Awaiting::Registration);
    }

    /// The member's registration is this session's.
    pub fn handle_registered(&mut self) {
        self.expect(Awaiting::Registration);
        self.then(Step::ReadGroup, Awaiting::Group);
    }

    /// The group as read for [`Step::ReadGroup`].
    pub fn handle_group(&mut self, group: GroupRead, now: Duration)
    where
        F: From<PlanError>,
    {
        self.expect(Awaiting::Group);
        match plan::parse_members(group.members) {
            Ok(members) => self.current.members = members,
            Err(e) => return self.fail(now, e.into()),
        }
        self.current.wanted = plan::wanted_topics(&self.settings.registration, &group.topics);
        self.current.registered = group.topics;
        let names = self.current.wanted.iter().map(|(t, _)| t.clone()).collect();
        self.then(Step::ReadTopics(names), Awaiting::Topics);
    }

    /// Each topic's broker registrations, in the order [`Step::ReadTopics`] named the topics.
    pub fn handle_topics(&mut self, topics: Vec<Vec<BrokerTopicNode>>, now: Duration)
    where
        F: From<PlanError>,
    {
        self.expect(Awaiting::Topics);
        assert_eq!(
            topics.len(),
            self.current.wanted.len(),
            "an answer per topic asked"
        );
        let read: Vec<_> = self
            .current
            .wanted
            .iter()
            .zip(&topics)
            .map(|((topic, streams), nodes)| {
                (topic.clone(), *streams, plan::partitions_of(topic, nodes))
            })
            .collect();
        let planned = match plan::plan(
            &self.settings.consumer_id,
            &self.current.members,
            &self.current.registered,
            &read,
        ) {
            Ok(planned) => planned,
            Err(e) => return self.fail(now, e.into()),
        };
        let topics: Vec<TopicName> = self.current.wanted.iter().map(|(t, _)| t.clone()).collect();
        let brokers = plan::brokers_by_topic(&topics, &planned);
        self.current.plan = planned;
        if !self.keeping {
            return self.then(Step::ReadAddresses(brokers), Awaiting::Addresses);
        }
        // The nodes held that the plan does not keep for the same thread go now, before the
        // starts are read, so a member that plans them is not kept waiting.
        let planned_threads: BTreeMap<&PartitionKey, &String> = self
            .current
            .plan
            .iter()
            .map(|p| (&p.key, &p.thread))
            .collect();
        let given_away: Vec<(PartitionKey, String)> = self
            .held_through
            .iter()
            .filter(|(key, owner)| planned_threads.get(key) != Some(owner))
            .map(|(key, owner)| (key.clone(), owner.clone()))
            .collect();
        for (key, _) in &given_away {
            self.held_through.remove(key);
        }
        self.current.brokers = brokers;
        if crate::planted::active(crate::planted::Bug::GivenAwayNotReleased) {
            self.let_go
                .extend(given_away.into_iter().map(|(key, _)| key));
            return self.release_owners(Vec::new(), After::Planned);
        }
        self.release_owners(given_away, After::Planned);
    }

    /// The addresses of the brokers [`Step::ReadAddresses`] named.
    pub fn handle_addresses(&mut self, addresses: BTreeMap<i32, (String, u16)>) {
        self.expect(Awaiting::Addresses);
        assert!(
            self.current
                .plan
                .iter()
                .all(|p| addresses.contains_key(&p.key.1.broker_id)),
            "an address for every planned partition's broker"
        );
        let new: Vec<(PartitionKey, (String, u16))> = self
            .current
            .plan
            .iter()
            .filter(|p| !self.kept.contains_key(&p.key))
            .map(|p| (p.key.clone(), addresses[&p.key.1.broker_id].clone()))
            .collect();
        self.current.addresses = addresses;
        self.then(Step::ReadStarts(new), Awaiting::Starts);
    }

    /// Where the new partitions start (a partition missing counts as unreadable).
    pub fn handle_starts(&mut self, starts: BTreeMap<PartitionKey, StartFound>) {
        self.expect(Awaiting::Starts);
        self.current.starts = starts;
        let claims = self
            .current
            .plan
            .iter()
            .map(|p| OwnerClaim {
                key: p.key.clone(),
                thread: p.thread.clone(),
                held: self.held_through.get(&p.key) == Some(&p.thread),
            })
            .collect();
        // A claim may make a node again: released or not, it is settled after the attempt.
        for planned in &self.current.plan {
            self.let_go.remove(&planned.key);
        }
        self.then(Step::Claim(claims), Awaiting::Claims);
    }

    /// Every owner node of [`Step::Claim`] is held: each partition's start is settled next.
    pub fn handle_claimed(&mut self) {
        self.expect(Awaiting::Claims);
        let mut requests = Vec::with_capacity(self.current.plan.len());
        let mut settling = Vec::with_capacity(self.current.plan.len());
        for planned in &self.current.plan {
            let key = &planned.key;
            let mut request = SettleRequest {
                key: key.clone(),
                reread_after: None,
                record: None,
                report_deleted_prefix: false,
            };
            let entry = match self.kept.get(key) {
                Some((o, epoch)) => (
                    PartitionOffsets::resume(o.committed(), o.consumed()),
                    *epoch,
                    None,
                    false,
                ),
                None => match self.current.starts.get(key) {
                    Some(StartFound::Committed(start)) => {
                        request.reread_after = Some(*start);
                        let offsets = PartitionOffsets::starting_at(*start);
                        (offsets, self.generation, Some(*start), false)
                    }
                    Some(StartFound::Reset(start)) => {
                        if self.settings.records_starts {
                            request.record = Some(*start);
                            request.report_deleted_prefix = self.reports_gap_before(*start);
                        }
                        let offsets = PartitionOffsets::starting_at(*start);
                        (offsets, self.generation, None, false)
                    }
                    Some(StartFound::Unreadable) | None => {
                        let offsets = PartitionOffsets::starting_at(0);
                        (offsets, self.generation, None, true)
                    }
                },
            };
            settling.push(entry);
            requests.push(request);
        }
        self.current.settling = settling;
        self.then(Step::Settle(requests), Awaiting::Settled);
    }

    /// Whether recording a start at `start` reports the bytes before it as deleted unread.
    fn reports_gap_before(&self, start: i64) -> bool {
        start > 0
            && self.settings.reports_deleted_prefix
            && !crate::planted::active(crate::planted::Bug::SkipGapSilently)
    }

    /// A claim failed after the first `started` claims were sent (each may have made its node):
    /// those are released, then the attempt has failed.
    pub fn handle_claims_failed(&mut self, started: usize, failure: F) {
        self.expect(Awaiting::Claims);
        self.handle_claims_failed_at(started, failure);
    }

    fn handle_claims_failed_at(&mut self, started: usize, failure: F) {
        assert!(
            started <= self.current.plan.len(),
            "more claims started than planned"
        );
        self.failure = Some(failure);
        let held = self.current.plan[..started]
            .iter()
            .map(|p| p.key.clone())
            .collect();
        self.then(
            Step::ReleaseStrays(held),
            Awaiting::StraysLeft(After::ClaimFailed),
        );
    }

    /// Every claimed partition's start is settled (an answer per request, in order): the
    /// attempt succeeded.
    pub fn handle_settled(&mut self, answers: Vec<SettleAnswer>) {
        self.expect(Awaiting::Settled);
        assert_eq!(
            answers.len(),
            self.current.plan.len(),
            "an answer per partition settled"
        );
        let mut partitions = Vec::with_capacity(answers.len());
        let mut brokers = BTreeMap::new();
        let settling = std::mem::take(&mut self.current.settling);
        for ((planned, (mut offsets, epoch, committed_start, unreadable)), answer) in
            self.current.plan.iter().zip(settling).zip(answers)
        {
            match answer {
                SettleAnswer::Reread(Some(committed))
                    if committed_start.is_some_and(|start| committed > start) =>
                {
                    offsets = PartitionOffsets::starting_at(committed);
                }
                SettleAnswer::CommittedSince(committed) => {
                    offsets = PartitionOffsets::starting_at(committed);
                }
                SettleAnswer::Nothing | SettleAnswer::Reread(_) | SettleAnswer::Recorded => {}
            }
            let address = self.current.addresses[&planned.key.1.broker_id].clone();
            brokers.insert(planned.key.1.broker_id, address.clone());
            partitions.push(ClaimedPartition {
                key: planned.key.clone(),
                thread: planned.thread.clone(),
                thread_index: planned.thread_index,
                address,
                offsets,
                epoch,
                start_unreadable: unreadable,
            });
        }
        let unchanged = partitions.iter().map(|p| &p.key).eq(self.kept.keys());
        let read_starts_again_in = partitions
            .iter()
            .any(|p| p.start_unreadable)
            .then_some(START_RETRY);
        self.current.claimed = partitions.iter().map(|p| p.key.clone()).collect();
        let installed = Installed {
            generation: self.generation,
            partitions,
            brokers,
            read_starts_again_in,
            unchanged,
        };
        self.then(Step::Prepare(installed), Awaiting::Prepared);
    }

    /// The claimed partitions' state is built: what was owned before and is not claimed now
    /// is released, unless a release already settled it (one that could not is tried once
    /// more).
    pub fn handle_prepared(&mut self) {
        self.expect(Awaiting::Prepared);
        let given_away: Vec<(PartitionKey, String)> = self
            .owned_before
            .iter()
            .filter(|(key, _)| {
                crate::planted::active(crate::planted::Bug::KeptNodeReleased)
                    || (!self.current.claimed.contains(*key) && !self.let_go.contains(*key))
            })
            .map(|(key, owner)| (key.clone(), owner.clone()))
            .collect();
        self.release_owners(given_away, After::Success);
    }

    /// The step awaited ([`Step::CheckRegistration`] to [`Step::Settle`], except a claim)
    /// failed: the attempt has failed (after a failed settle, every owner node it claimed is
    /// released first).
    pub fn handle_failed(&mut self, failure: F, now: Duration) {
        assert!(
            matches!(
                self.awaiting,
                Awaiting::Registration
                    | Awaiting::Group
                    | Awaiting::Topics
                    | Awaiting::Addresses
                    | Awaiting::Starts
                    | Awaiting::Settled
            ) && self.next.is_none(),
            "rebalance: a failure while awaiting {:?}",
            self.awaiting
        );
        if self.awaiting == Awaiting::Settled {
            // Every owner node is claimed by now: they go before the attempt counts as failed.
            self.current.settling.clear();
            return self.handle_claims_failed_at(self.current.plan.len(), failure);
        }
        self.fail(now, failure);
    }

    fn fail(&mut self, now: Duration, failure: F) {
        self.failure = Some(failure);
        self.wait(now);
    }

    /// The attempt failed: wait out its backoff (started at its first failure), or less when a
    /// blocking owner node goes and early retries are left. An attempt that kept the nodes
    /// held before lets them all go first: no member waits on a node of ours through a
    /// backoff, and every later attempt releases before it reads, as 0.7 does.
    fn wait(&mut self, now: Duration) {
        self.backoff_until
            .get_or_insert(now.saturating_add(self.settings.backoff));
        if self.keeping {
            self.keeping = false;
            self.held_through.clear();
            let all = self.all_owned_before();
            return self.release_owners(all, After::Failed);
        }
        self.wait_step();
    }

    /// The wait of a failed attempt, its backoff set.
    fn wait_step(&mut self) {
        let watch_owner = if self.early_retries < EARLY_RETRIES_MAX {
            self.failure.as_ref().and_then(AttemptFailure::blocked_by)
        } else {
            None
        };
        self.then(Step::Wait { watch_owner }, Awaiting::WaitOver);
    }

    /// The owner node [`Step::Wait`] watched went: the next attempt starts now, not counted.
    pub fn handle_owner_gone(&mut self) {
        self.expect(Awaiting::WaitOver);
        assert!(
            self.early_retries < EARLY_RETRIES_MAX,
            "an early retry past the bound"
        );
        self.early_retries += 1;
        self.then(Step::Release, Awaiting::Released);
    }

    /// The backoff ended ([`Rebalance::wait_left`] ran out): the next counted attempt, or the
    /// end when every attempt is used.
    pub fn handle_timeout(&mut self) {
        self.expect(Awaiting::WaitOver);
        self.backoff_until = None;
        if self.attempt >= self.max_attempts() {
            let strays = std::mem::take(&mut self.strays);
            self.then(
                Step::ReleaseStrays(strays),
                Awaiting::StraysLeft(After::GiveUp),
            );
        } else {
            self.attempt += 1;
            self.then(Step::Release, Awaiting::Released);
        }
    }
}

/// A state the call order rules out: the driver broke it.
#[track_caller]
fn unreachable_state(awaiting: Awaiting) -> ! {
    // On in release: a driver that broke the call order is a bug to stop on.
    #[allow(clippy::panic)]
    {
        panic!("rebalance: a call out of order (awaiting {awaiting:?})")
    }
}
