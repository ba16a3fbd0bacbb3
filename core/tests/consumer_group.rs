//! The rebalance state machine (`core::consumer::group`): the steps of an attempt in order, what
//! each answer decides (kept partitions resume, claimed ones re-read their commit, recorded
//! starts), failures, early retries, giving up, and the call order enforced; and a property:
//! members planning from the same view claim every partition exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary_core::consumer::group::{
    AttemptFailure, BrokerTopicNode, GroupRead, HeldPartition, OwnerClaim, PartitionKey, Rebalance,
    RebalanceSettings, Released, SettleAnswer, StartFound, Step, EARLY_RETRIES_MAX, RETRY_BACKOFF,
};
use tributary_core::consumer::{BrokerPartition, PartitionOffsets, Registration};
use tributary_core::wire::TopicName;

/// A failure as a driver would hand it in: blocked by a partition's owner node, or not.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    Blocked(PartitionKey),
    ZooKeeper,
    Plan(String),
}

impl AttemptFailure for Failure {
    fn blocked_by(&self) -> Option<PartitionKey> {
        match self {
            Failure::Blocked(key) => Some(key.clone()),
            _ => None,
        }
    }
}

impl From<tributary_core::consumer::group::PlanError> for Failure {
    fn from(e: tributary_core::consumer::group::PlanError) -> Self {
        Failure::Plan(e.to_string())
    }
}

fn topic() -> TopicName {
    "t".parse().unwrap()
}

fn key(broker: i32, partition: u32) -> PartitionKey {
    (
        topic(),
        BrokerPartition {
            broker_id: broker,
            partition,
        },
    )
}

fn settings(id: &str, streams: u32) -> RebalanceSettings {
    RebalanceSettings {
        consumer_id: id.to_string(),
        registration: Registration::Static(BTreeMap::from([("t".to_string(), streams)])),
        attempts: 3,
        backoff: Duration::from_secs(2),
        records_starts: true,
        reports_deleted_prefix: true,
    }
}

fn registration(streams: u32) -> Vec<u8> {
    Registration::Static(BTreeMap::from([("t".to_string(), streams)]))
        .encode()
        .into_bytes()
}

/// A group of `members` (one stream each) over `brokers` brokers of `per_broker` partitions.
fn view(members: &[&str]) -> GroupRead {
    GroupRead {
        members: members
            .iter()
            .map(|m| (m.to_string(), Some(registration(1))))
            .collect(),
        topics: vec!["t".to_string()],
    }
}

fn nodes(brokers: i32, per_broker: u32) -> Vec<Vec<BrokerTopicNode>> {
    vec![(0..brokers)
        .map(|broker_id| BrokerTopicNode {
            broker_id,
            data: per_broker.to_string().into_bytes(),
        })
        .collect()]
}

fn addresses(ids: &[i32]) -> BTreeMap<i32, (String, u16)> {
    ids.iter()
        .map(|id| (*id, (format!("broker{id}"), 9092)))
        .collect()
}

const NOW: Duration = Duration::from_secs(100);

/// Answers the release before an attempt (nothing left to try again) and every read up to the
/// plan, for g_a alone in its group over `topics`.
fn plan_alone_after_release(machine: &mut Rebalance<Failure>, topics: Vec<Vec<BrokerTopicNode>>) {
    machine.handle_owners_released(Vec::new());
    assert!(matches!(machine.poll(), Some(Step::ReleaseStrays(_))));
    machine.handle_strays_left(Vec::new(), NOW);
    assert!(matches!(machine.poll(), Some(Step::TakeRestarts)));
    machine.handle_restarts(BTreeSet::new());
    assert!(matches!(machine.poll(), Some(Step::CheckRegistration)));
    machine.handle_registered();
    assert!(matches!(machine.poll(), Some(Step::ReadGroup)));
    machine.handle_group(view(&["g_a"]), NOW);
    assert!(matches!(machine.poll(), Some(Step::ReadTopics(_))));
    machine.handle_topics(topics, NOW);
}

/// `keys`, held by thread g_a-0 since generation 2, each resuming at 5.
fn held_by_g_a_0(keys: &[PartitionKey]) -> Vec<HeldPartition> {
    keys.iter()
        .map(|key| HeldPartition {
            key: key.clone(),
            owner: "g_a-0".to_string(),
            offsets: PartitionOffsets::starting_at(5),
            epoch: 2,
        })
        .collect()
}

/// Drives `machine` from its start to the claim step with `held` released and `view`/`nodes`
/// read; returns the claims asked for.
fn to_claims(
    machine: &mut Rebalance<Failure>,
    held: Vec<HeldPartition>,
    group: GroupRead,
    topics: Vec<Vec<BrokerTopicNode>>,
    starts: &dyn Fn(&PartitionKey) -> StartFound,
) -> Vec<OwnerClaim> {
    to_claims_releasing(machine, held, group, topics, starts, Vec::new()).1
}

/// [`to_claims`] of a first attempt, which keeps the nodes it held: also the owner nodes it
/// released once planned (after only those of stopped partitions before it read anything),
/// the release of `left_once_planned` failing.
fn to_claims_releasing(
    machine: &mut Rebalance<Failure>,
    held: Vec<HeldPartition>,
    group: GroupRead,
    topics: Vec<Vec<BrokerTopicNode>>,
    starts: &dyn Fn(&PartitionKey) -> StartFound,
    left_once_planned: Vec<PartitionKey>,
) -> (Vec<(PartitionKey, String)>, Vec<OwnerClaim>) {
    assert!(matches!(machine.poll(), Some(Step::Release)));
    machine.handle_released(Released {
        owned: held,
        stopped: Vec::new(),
        generation: 7,
    });
    let Some(Step::ReleaseOwners(before)) = machine.poll() else {
        panic!("owners released first")
    };
    assert!(
        before.is_empty(),
        "a first attempt releases no node before it plans: {before:?}"
    );
    machine.handle_owners_released(Vec::new());
    let Some(Step::ReleaseStrays(_)) = machine.poll() else {
        panic!("then strays")
    };
    machine.handle_strays_left(Vec::new(), NOW);
    assert!(matches!(machine.poll(), Some(Step::TakeRestarts)));
    machine.handle_restarts(BTreeSet::new());
    assert!(matches!(machine.poll(), Some(Step::CheckRegistration)));
    machine.handle_registered();
    assert!(matches!(machine.poll(), Some(Step::ReadGroup)));
    machine.handle_group(group, NOW);
    let Some(Step::ReadTopics(topics_asked)) = machine.poll() else {
        panic!("topics read next")
    };
    assert_eq!(topics_asked, vec![topic()]);
    machine.handle_topics(topics, NOW);
    let Some(Step::ReleaseOwners(given_away)) = machine.poll() else {
        panic!("what the plan gives away goes once planned")
    };
    machine.handle_owners_released(left_once_planned);
    let Some(Step::ReadAddresses(ids)) = machine.poll() else {
        panic!("addresses next")
    };
    machine.handle_addresses(addresses(&ids.concat()));
    let Some(Step::ReadStarts(new)) = machine.poll() else {
        panic!("starts next")
    };
    machine.handle_starts(new.iter().map(|(k, _)| (k.clone(), starts(k))).collect());
    let Some(Step::Claim(claims)) = machine.poll() else {
        panic!("claims next")
    };
    (given_away, claims)
}

/// Answers a failed keeping attempt's release of every node held before: the wait comes next.
fn release_all_before_the_wait(machine: &mut Rebalance<Failure>) -> Vec<(PartitionKey, String)> {
    let Some(Step::ReleaseOwners(all)) = machine.poll() else {
        panic!("a failed keeping attempt lets every node go before its wait")
    };
    machine.handle_owners_released(Vec::new());
    all
}

#[test]
fn an_attempt_plans_the_range_claims_it_and_settles_each_start() {
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_b", 1));
    // Member g_b of two owns the second half of 4 partitions (0.7's range: "0-0" "0-1" "1-0"
    // "1-1" sorted, threads g_a-0 and g_b-0); it held 1-0 before, at 40 committed / 55 handed out.
    let held = vec![HeldPartition {
        key: key(1, 0),
        owner: "g_b-0".to_string(),
        offsets: PartitionOffsets::resume(40, 55),
        epoch: 3,
    }];
    let claims = to_claims(
        &mut machine,
        held,
        view(&["g_a", "g_b"]),
        nodes(2, 2),
        &|k| {
            if *k == key(1, 1) {
                StartFound::Committed(10)
            } else {
                StartFound::Reset(0)
            }
        },
    );
    let claimed: Vec<PartitionKey> = claims.iter().map(|c| c.key.clone()).collect();
    assert_eq!(claimed, vec![key(1, 0), key(1, 1)]);
    assert!(claims.iter().all(|c| c.thread == "g_b-0"));
    machine.handle_claimed();
    let Some(Step::Settle(requests)) = machine.poll() else {
        panic!("settle next")
    };
    // The kept partition needs nothing; the committed one is read again after its claim.
    assert_eq!(requests[0].reread_after, None);
    assert_eq!(requests[0].record, None);
    assert_eq!(requests[1].reread_after, Some(10));
    // Its previous owner committed 25 meanwhile: it starts there.
    machine.handle_settled(vec![SettleAnswer::Nothing, SettleAnswer::Reread(Some(25))]);
    let Some(Step::Prepare(installed)) = machine.poll() else {
        panic!("prepare next")
    };
    assert_eq!(installed.generation, 7);
    let kept = &installed.partitions[0];
    assert_eq!(
        (kept.offsets.committed(), kept.offsets.consumed()),
        (40, 55)
    );
    assert_eq!(
        kept.offsets.fetched(),
        55,
        "resumes after what was handed out"
    );
    assert_eq!(kept.epoch, 3, "a kept partition keeps its epoch");
    let fresh = &installed.partitions[1];
    assert_eq!(fresh.offsets.consumed(), 25);
    assert_eq!(fresh.epoch, 7, "a new partition's epoch is this generation");
    assert!(!installed.unchanged);
    machine.handle_prepared();
    let Some(Step::ReleaseOwners(given_away)) = machine.poll() else {
        panic!("what was given away goes")
    };
    assert!(
        given_away.is_empty(),
        "1-0 was claimed again: {given_away:?}"
    );
    machine.handle_owners_released(Vec::new());
    let Some(Step::ReleaseStrays(_)) = machine.poll() else {
        panic!("strays")
    };
    machine.handle_strays_left(Vec::new(), NOW);
    assert!(matches!(
        machine.poll(),
        Some(Step::Install { strays_left: 0 })
    ));
    assert!(
        machine.poll().is_none(),
        "finished: no step after the install"
    );
}

#[test]
fn a_start_from_autooffset_reset_is_recorded_and_a_commit_made_since_wins() {
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 1));
    let claims = to_claims(
        &mut machine,
        Vec::new(),
        view(&["g_a"]),
        nodes(1, 2),
        &|_| StartFound::Reset(500),
    );
    assert_eq!(claims.len(), 2);
    machine.handle_claimed();
    let Some(Step::Settle(requests)) = machine.poll() else {
        panic!("settle")
    };
    assert!(requests.iter().all(|r| r.record == Some(500)));
    assert!(
        requests.iter().all(|r| r.report_deleted_prefix),
        "a start past 0 recorded by a member told of gaps reports the bytes before it"
    );
    machine.handle_settled(vec![
        SettleAnswer::Recorded,
        SettleAnswer::CommittedSince(700),
    ]);
    let Some(Step::Prepare(installed)) = machine.poll() else {
        panic!("prepare")
    };
    assert_eq!(installed.partitions[0].offsets.consumed(), 500);
    assert_eq!(installed.partitions[1].offsets.consumed(), 700);
}

#[test]
fn a_partition_owned_elsewhere_is_retried_when_its_node_goes_without_counting_an_attempt() {
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 1));
    let claims = to_claims(
        &mut machine,
        Vec::new(),
        view(&["g_a"]),
        nodes(1, 4),
        &|_| StartFound::Committed(0),
    );
    assert_eq!(claims.len(), 4);
    // The third claim failed after three were sent: those three may have made their nodes.
    machine.handle_claims_failed(3, Failure::Blocked(key(0, 2)));
    let Some(Step::ReleaseStrays(strays)) = machine.poll() else {
        panic!("what the attempt claimed goes")
    };
    assert_eq!(strays, vec![key(0, 0), key(0, 1), key(0, 2)]);
    // One could not be released: it is tried again before the next attempt.
    machine.handle_strays_left(vec![key(0, 1)], NOW);
    assert!(release_all_before_the_wait(&mut machine).is_empty());
    let Some(Step::Wait { watch_owner }) = machine.poll() else {
        panic!("wait")
    };
    assert_eq!(watch_owner, Some(key(0, 2)));
    assert_eq!(machine.poll_timeout(), Some(NOW + Duration::from_secs(2)));
    assert_eq!(
        machine.wait_left(NOW + Duration::from_millis(500)),
        Some(Duration::from_millis(1_500))
    );
    assert_eq!(
        machine.wait_left(Duration::ZERO),
        Some(Duration::from_secs(2)),
        "a wall clock set back does not stretch the backoff"
    );
    assert_eq!(
        machine.wait_left(NOW + Duration::from_secs(9)),
        Some(Duration::ZERO)
    );
    machine.handle_owner_gone();
    assert_eq!(machine.attempts(), (1, 3), "an early retry is not counted");
    assert!(matches!(machine.poll(), Some(Step::Release)));
    machine.handle_released(Released {
        generation: 8,
        ..Released::default()
    });
    let Some(Step::ReleaseOwners(_)) = machine.poll() else {
        panic!()
    };
    machine.handle_owners_released(Vec::new());
    let Some(Step::ReleaseStrays(strays)) = machine.poll() else {
        panic!()
    };
    assert_eq!(strays, vec![key(0, 1)], "the stray left is released first");
}

#[test]
fn early_retries_are_bounded_and_every_counted_attempt_waits_its_backoff() {
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 1));
    let mut generation = 1;
    let mut release = |machine: &mut Rebalance<Failure>| {
        assert!(matches!(machine.poll(), Some(Step::Release)));
        machine.handle_released(Released {
            generation,
            ..Released::default()
        });
        generation += 1;
        let Some(Step::ReleaseOwners(_)) = machine.poll() else {
            panic!()
        };
        machine.handle_owners_released(Vec::new());
        let Some(Step::ReleaseStrays(_)) = machine.poll() else {
            panic!()
        };
        machine.handle_strays_left(Vec::new(), NOW);
        assert!(matches!(machine.poll(), Some(Step::TakeRestarts)));
        machine.handle_restarts(BTreeSet::new());
        assert!(matches!(machine.poll(), Some(Step::CheckRegistration)));
    };
    let mut watched = 0;
    let mut first_attempt = true;
    loop {
        release(&mut machine);
        // The registration check fails as if blocked by an owner node.
        machine.handle_failed(Failure::Blocked(key(0, 0)), NOW);
        if first_attempt {
            // The first attempt kept what it held: it all goes before the wait.
            release_all_before_the_wait(&mut machine);
            first_attempt = false;
        }
        let Some(Step::Wait { watch_owner }) = machine.poll() else {
            panic!()
        };
        if watch_owner.is_some() {
            watched += 1;
            machine.handle_owner_gone();
            continue;
        }
        assert!(
            machine.poll_timeout().is_some(),
            "a counted attempt waits out its backoff"
        );
        machine.handle_timeout();
        assert_eq!(
            machine.attempts(),
            (2, 3),
            "the first counted attempt is over"
        );
        break;
    }
    assert_eq!(
        watched, EARLY_RETRIES_MAX,
        "early retries stop at the bound"
    );
    // Each further counted attempt only ends at its backoff, until every attempt is used.
    let mut gave_up = false;
    while !gave_up {
        match machine.poll() {
            Some(Step::Release) => {
                machine.handle_released(Released {
                    generation: 100 + u64::from(machine.attempts().0),
                    ..Released::default()
                });
            }
            Some(Step::ReleaseOwners(_)) => machine.handle_owners_released(Vec::new()),
            Some(Step::ReleaseStrays(_)) => machine.handle_strays_left(Vec::new(), NOW),
            Some(Step::TakeRestarts) => machine.handle_restarts(BTreeSet::new()),
            Some(Step::CheckRegistration) => machine.handle_failed(Failure::ZooKeeper, NOW),
            Some(Step::Wait { watch_owner }) => {
                assert_eq!(watch_owner, None);
                assert!(machine.poll_timeout().is_some());
                machine.handle_timeout();
            }
            Some(Step::GiveUp {
                attempts,
                last,
                retry_in,
                ..
            }) => {
                assert_eq!(attempts, 3);
                assert_eq!(last, Failure::ZooKeeper);
                assert_eq!(retry_in, Duration::from_secs(2).max(RETRY_BACKOFF));
                gave_up = true;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn a_failed_settle_releases_every_claim_before_the_attempt_counts_as_failed() {
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 1));
    let claims = to_claims(
        &mut machine,
        Vec::new(),
        view(&["g_a"]),
        nodes(1, 3),
        &|_| StartFound::Reset(0),
    );
    machine.handle_claimed();
    let Some(Step::Settle(_)) = machine.poll() else {
        panic!()
    };
    machine.handle_failed(Failure::ZooKeeper, NOW);
    let Some(Step::ReleaseStrays(strays)) = machine.poll() else {
        panic!("claims released")
    };
    assert_eq!(
        strays,
        claims.into_iter().map(|c| c.key).collect::<Vec<_>>()
    );
    machine.handle_strays_left(Vec::new(), NOW);
    release_all_before_the_wait(&mut machine);
    assert!(matches!(
        machine.poll(),
        Some(Step::Wait { watch_owner: None })
    ));
}

#[test]
fn an_unreadable_registration_fails_the_attempt_rather_than_assign_without_it() {
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 1));
    assert!(matches!(machine.poll(), Some(Step::Release)));
    machine.handle_released(Released {
        generation: 1,
        ..Released::default()
    });
    machine.poll();
    machine.handle_owners_released(Vec::new());
    machine.poll();
    machine.handle_strays_left(Vec::new(), NOW);
    machine.poll();
    machine.handle_restarts(BTreeSet::new());
    machine.poll();
    machine.handle_registered();
    machine.poll();
    let mut group = view(&["g_a"]);
    group
        .members
        .push(("g_z".to_string(), Some(b"not a registration".to_vec())));
    machine.handle_group(group, NOW);
    release_all_before_the_wait(&mut machine);
    assert!(matches!(
        machine.poll(),
        Some(Step::Wait { watch_owner: None })
    ));
}

#[test]
#[should_panic(expected = "rebalance")]
fn an_answer_out_of_turn_stops_the_member() {
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 1));
    assert!(matches!(machine.poll(), Some(Step::Release)));
    // The driver skipped the release: the machine must not go on.
    machine.handle_claimed();
}

#[test]
fn partitions_owned_before_and_not_claimed_again_are_released_after_success() {
    // g_a held all four partitions; g_b joined: g_a keeps the first half, gives up the rest.
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 1));
    let held = held_by_g_a_0(&[key(0, 0), key(0, 1), key(1, 0), key(1, 1)]);
    let (given_away_once_planned, claims) = to_claims_releasing(
        &mut machine,
        held,
        view(&["g_a", "g_b"]),
        nodes(2, 2),
        &|_| panic!("every planned partition was kept: no start is read"),
        vec![key(1, 1)],
    );
    let given_away = vec![
        (key(1, 0), "g_a-0".to_string()),
        (key(1, 1), "g_a-0".to_string()),
    ];
    assert_eq!(
        given_away_once_planned, given_away,
        "what the plan gives away goes before the starts are read"
    );
    assert_eq!(claims.len(), 2);
    assert!(
        claims.iter().all(|c| c.held),
        "the half kept is checked, not claimed again"
    );
    machine.handle_claimed();
    machine.poll();
    machine.handle_settled(vec![SettleAnswer::Nothing; 2]);
    let Some(Step::Prepare(installed)) = machine.poll() else {
        panic!()
    };
    assert!(installed.partitions.iter().all(|p| p.epoch == 2));
    machine.handle_prepared();
    let Some(Step::ReleaseOwners(after_success)) = machine.poll() else {
        panic!()
    };
    assert_eq!(
        after_success,
        vec![(key(1, 1), "g_a-0".to_string())],
        "only the release that could not be settled is tried once more after success"
    );
}

#[test]
fn a_rebalance_that_moves_nothing_keeps_every_owner_node_in_place() {
    // g_a alone held both partitions of broker 0 and still owns them; a partition on a new
    // broker appeared (a new topic among those mirrored, say).
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 1));
    let held = held_by_g_a_0(&[key(0, 0), key(0, 1)]);
    let mut topics = nodes(1, 2);
    topics[0].push(BrokerTopicNode {
        broker_id: 1,
        data: b"1".to_vec(),
    });
    let (given_away, claims) = to_claims_releasing(
        &mut machine,
        held,
        view(&["g_a"]),
        topics,
        &|k| {
            assert_eq!(*k, key(1, 0), "only the new partition's start is read");
            StartFound::Reset(0)
        },
        Vec::new(),
    );
    assert!(given_away.is_empty(), "nothing moved: {given_away:?}");
    let held: Vec<(PartitionKey, bool)> = claims.iter().map(|c| (c.key.clone(), c.held)).collect();
    assert_eq!(
        held,
        vec![(key(0, 0), true), (key(0, 1), true), (key(1, 0), false)],
        "the nodes held are checked; only the new one is claimed"
    );
    machine.handle_claimed();
    machine.poll();
    machine.handle_settled(vec![
        SettleAnswer::Nothing,
        SettleAnswer::Nothing,
        SettleAnswer::Recorded,
    ]);
    let Some(Step::Prepare(_)) = machine.poll() else {
        panic!()
    };
    machine.handle_prepared();
    let Some(Step::ReleaseOwners(after_success)) = machine.poll() else {
        panic!()
    };
    assert!(after_success.is_empty(), "{after_success:?}");
}

#[test]
fn a_node_held_for_another_thread_is_given_away_and_claimed_anew() {
    // g_a now runs two streams: 0-1, held by g_a-0, is planned for g_a-1.
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 2));
    let held = held_by_g_a_0(&[key(0, 0), key(0, 1)]);
    let mut group = view(&["g_a"]);
    group.members[0].1 = Some(registration(2));
    let (given_away, claims) = to_claims_releasing(
        &mut machine,
        held,
        group,
        nodes(1, 2),
        &|_| panic!("both were owned before: no start is read"),
        Vec::new(),
    );
    assert_eq!(given_away, vec![(key(0, 1), "g_a-0".to_string())]);
    let held: Vec<(String, bool)> = claims.iter().map(|c| (c.thread.clone(), c.held)).collect();
    assert_eq!(
        held,
        vec![("g_a-0".to_string(), true), ("g_a-1".to_string(), false)]
    );
}

#[test]
fn a_failed_keeping_attempt_lets_every_node_go_and_the_next_releases_before_it_reads() {
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 1));
    let held = held_by_g_a_0(&[key(0, 0), key(0, 1)]);
    let claims = to_claims(&mut machine, held, view(&["g_a"]), nodes(1, 3), &|_| {
        StartFound::Committed(0)
    });
    assert_eq!(
        claims.iter().map(|c| c.held).collect::<Vec<_>>(),
        vec![true, true, false]
    );
    machine.handle_claims_failed(3, Failure::Blocked(key(0, 2)));
    let Some(Step::ReleaseStrays(strays)) = machine.poll() else {
        panic!()
    };
    assert_eq!(strays.len(), 3);
    machine.handle_strays_left(Vec::new(), NOW);
    let every_node = vec![
        (key(0, 0), "g_a-0".to_string()),
        (key(0, 1), "g_a-0".to_string()),
    ];
    assert_eq!(
        release_all_before_the_wait(&mut machine),
        every_node,
        "no member waits on a node of ours through the backoff"
    );
    let Some(Step::Wait { .. }) = machine.poll() else {
        panic!()
    };
    machine.handle_owner_gone();
    assert!(matches!(machine.poll(), Some(Step::Release)));
    machine.handle_released(Released {
        generation: 9,
        ..Released::default()
    });
    let Some(Step::ReleaseOwners(before_reading)) = machine.poll() else {
        panic!()
    };
    assert_eq!(
        before_reading, every_node,
        "a later attempt releases everything before it reads, as 0.7 does"
    );
    plan_alone_after_release(&mut machine, nodes(1, 3));
    let Some(Step::ReadAddresses(ids)) = machine.poll() else {
        panic!("no release after planning once nothing is kept")
    };
    machine.handle_addresses(addresses(&ids.concat()));
    let Some(Step::ReadStarts(_)) = machine.poll() else {
        panic!()
    };
    machine.handle_starts(BTreeMap::new());
    let Some(Step::Claim(claims)) = machine.poll() else {
        panic!()
    };
    assert!(
        claims.iter().all(|c| !c.held),
        "nothing is held once released"
    );
}

/// Property: every member of a group, planning from the same view, claims a disjoint share, and
/// together they claim every partition of every topic they all consume.
#[test]
fn members_planning_from_one_view_claim_every_partition_exactly_once() {
    for seed in 0..300 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let member_count = rng.random_range(1..=5);
        let members: Vec<(String, u32)> = (0..member_count)
            .map(|i| (format!("g_m{i}"), rng.random_range(1..=3)))
            .collect();
        let brokers = rng.random_range(1..=4);
        let topics: Vec<Vec<BrokerTopicNode>> = vec![(0..brokers)
            .map(|broker_id| BrokerTopicNode {
                broker_id,
                data: rng.random_range(0..=12u32).to_string().into_bytes(),
            })
            .collect()];
        let total: u32 = topics[0]
            .iter()
            .map(|n| String::from_utf8_lossy(&n.data).parse::<u32>().unwrap())
            .sum();
        let group = GroupRead {
            members: members
                .iter()
                .map(|(m, s)| (m.clone(), Some(registration(*s))))
                .collect(),
            topics: vec!["t".to_string()],
        };
        let mut claimed: Vec<PartitionKey> = Vec::new();
        for (member, streams) in &members {
            let mut machine: Rebalance<Failure> = Rebalance::new(settings(member, *streams));
            let claims = to_claims(
                &mut machine,
                Vec::new(),
                group.clone(),
                topics.clone(),
                &|_| StartFound::Committed(0),
            );
            assert!(claims
                .iter()
                .all(|c| c.thread.starts_with(&format!("{member}-"))));
            claimed.extend(claims.into_iter().map(|c| c.key));
        }
        let distinct: BTreeSet<&PartitionKey> = claimed.iter().collect();
        assert_eq!(
            distinct.len(),
            claimed.len(),
            "seed {seed}: a partition claimed twice"
        );
        assert_eq!(
            claimed.len() as u32,
            total,
            "seed {seed}: a partition nobody claims"
        );
    }
}

#[test]
fn a_partition_a_stream_stopped_is_released_before_anything_is_read_and_never_kept() {
    let mut machine: Rebalance<Failure> = Rebalance::new(settings("g_a", 1));
    assert!(matches!(machine.poll(), Some(Step::Release)));
    machine.handle_released(Released {
        owned: vec![HeldPartition {
            key: key(0, 0),
            owner: "g_a-0".to_string(),
            offsets: PartitionOffsets::starting_at(5),
            epoch: 2,
        }],
        stopped: vec![(key(0, 1), "g_a-0".to_string())],
        generation: 3,
    });
    let Some(Step::ReleaseOwners(before)) = machine.poll() else {
        panic!()
    };
    assert_eq!(before, vec![(key(0, 1), "g_a-0".to_string())]);
    plan_alone_after_release(&mut machine, nodes(1, 2));
    let Some(Step::ReleaseOwners(given_away)) = machine.poll() else {
        panic!()
    };
    assert!(given_away.is_empty(), "{given_away:?}");
    machine.handle_owners_released(Vec::new());
    let Some(Step::ReadAddresses(ids)) = machine.poll() else {
        panic!()
    };
    machine.handle_addresses(addresses(&ids.concat()));
    let Some(Step::ReadStarts(new)) = machine.poll() else {
        panic!()
    };
    assert_eq!(
        new.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        vec![key(0, 1)],
        "the stopped partition starts again from its commit"
    );
    machine.handle_starts(BTreeMap::new());
    let Some(Step::Claim(claims)) = machine.poll() else {
        panic!()
    };
    assert_eq!(
        claims.iter().map(|c| c.held).collect::<Vec<_>>(),
        vec![true, false],
        "its node went before the attempt: claimed anew"
    );
}
