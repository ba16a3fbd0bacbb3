//! Unit tests of the mirror's producer bookkeeping: placement clocks, set grouping and gap
//! refusal.

#![allow(clippy::expect_used, clippy::unwrap_used)]
use super::*;
use crate::env::TokioEnv;
use crate::producer::directory::Directory;
use crate::producer::{Record, SourceMark};
use tributary_core::config::{Discovery, Properties};
use tributary_core::consumer::BrokerPartition;
use tributary_core::identity::ClusterId;

type Answer = crate::producer::Delivery;

fn dispatcher() -> Dispatcher<TokioEnv> {
    let text = "broker.list=0:127.0.0.1:9\ndurable.acks=true\nproducer.type=sync\n";
    let config = tributary_core::config::ProducerConfig::from_properties(
        &Properties::parse("test", text).unwrap(),
    )
    .unwrap();
    let Discovery::BrokerList(list) = &config.discovery else {
        panic!("a broker.list producer");
    };
    let directory = Directory::fixed(list);
    Dispatcher::new(TokioEnv, config, directory)
}

fn key(partition: u32) -> Arc<SourceKey> {
    Arc::new(SourceKey {
        cluster: ClusterId::parse("east").unwrap(),
        topic: "orders".parse().unwrap(),
        partition: BrokerPartition {
            broker_id: 0,
            partition,
        },
    })
}

/// A mirror's message of `key` from `start` to `next` in `epoch`, and where its outcome
/// is told.
fn message(key: &Arc<SourceKey>, start: i64, next: i64, epoch: u64) -> (Option<Pending>, Answer) {
    let (answer, done) = crate::producer::Delivery::pending();
    let mark = SourceMark {
        key: key.clone(),
        start,
        next,
        epoch,
    };
    let record = Record::mirrored("t".parse().unwrap(), &b"m"[..], mark);
    (Some(Pending { record, done }), answer)
}

fn slots(messages: Vec<(Option<Pending>, Answer)>) -> (Vec<Option<Pending>>, Vec<Answer>) {
    messages.into_iter().unzip()
}

#[test]
fn a_broker_keeps_its_source_partitions_until_failing_and_unregistered_for_the_grace() {
    // Stamps on the monotonic clock: `long_ago` is past the grace at `now`, `now` is not.
    let long_ago = std::time::Duration::from_secs(5);
    let now = long_ago + PLACEMENT_GRACE + std::time::Duration::from_secs(10);
    let since = |at| BTreeMap::from([(0, at)]);
    let never = BTreeMap::new();
    type Since = BTreeMap<i32, std::time::Duration>;
    let usable_now =
        |failing: Since, absent: Since, brokers: &[i32]| usable(&failing, &absent, 0, brokers, now);
    assert!(
        usable_now(since(long_ago), since(long_ago), &[0, 1]),
        "registered with the topic"
    );
    assert!(
        usable_now(since(long_ago), since(now), &[1]),
        "failing for long (a partition refusing sets), unregistered just now (a crash)"
    );
    assert!(
        usable_now(since(now), since(long_ago), &[1]),
        "failing just now"
    );
    assert!(
        usable_now(never.clone(), since(long_ago), &[1]),
        "never failed here"
    );
    assert!(
        usable_now(since(long_ago), never.clone(), &[1]),
        "never seen unregistered"
    );
    assert!(
        !usable_now(since(long_ago), since(long_ago), &[1]),
        "gone for the grace"
    );
    assert!(
        usable(
            &since(long_ago),
            &since(long_ago),
            0,
            &[1],
            long_ago + PLACEMENT_GRACE / 2
        ),
        "not yet gone for the grace"
    );
}

#[test]
fn a_broker_is_absent_from_the_first_look_without_it_to_the_next_with_it() {
    let mut placed = Placements::default();
    let both = BTreeMap::from([(0, ("b0".to_string(), 9)), (1, ("b1".to_string(), 9))]);
    let one = BTreeMap::from([(1, ("b1".to_string(), 9))]);
    let (t1, t2) = (
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(2),
    );
    placed.note_registry(&both, t1);
    assert!(placed.absent.is_empty());
    placed.note_registry(&one, t1);
    let first = placed.absent.get(&0).copied();
    assert_eq!(first, Some(t1), "broker 0 missing");
    placed.note_registry(&one, t2);
    assert_eq!(
        placed.absent.get(&0).copied(),
        first,
        "absent since the first look"
    );
    assert_eq!(placed.addresses.get(&0).map(|a| a.0.as_str()), Some("b0"));
    placed.note_registry(&both, t2);
    assert!(placed.absent.is_empty(), "seen again");
}

#[test]
fn runs_group_each_source_partition_in_order_and_cut_where_its_offsets_go_back_or_skip() {
    let d = dispatcher();
    let (a, b) = (key(0), key(1));
    // The same source partition under another pointer (a key built again for a later
    // chunk) joins the same run.
    let a_again = Arc::new((*a).clone());
    let (mut slots, _answers) = slots(vec![
        message(&a, 0, 100, 1),
        message(&a, 100, 200, 1),
        message(&b, 0, 100, 1),
        message(&a_again, 200, 300, 1),
        message(&a, 50, 150, 1),
        message(&b, 100, 200, 1),
        message(&a, 150, 250, 1),
    ]);
    let partitions = vec![-1; slots.len()];
    let runs = d.runs(&mut slots, &partitions);
    let grouped: Vec<(u32, Vec<usize>)> = runs
        .iter()
        .map(|r| (r.key.partition.partition, r.indexes.clone()))
        .collect();
    assert_eq!(
        grouped,
        vec![(0, vec![0, 1, 3]), (1, vec![2, 5]), (0, vec![4, 6])],
    );
    // The rest of an earlier ownership's messages queued among a later one's: a message
    // that skips ahead of where its group resumes starts a set of its own (joined, the set
    // would claim the source offsets between, which it does not hold).
    let (mut skipping, _answers) = self::slots(vec![
        message(&a, 0, 100, 6),
        message(&a, 100, 200, 6),
        message(&a, 50, 60, 4),
        message(&a, 60, 70, 4),
        message(&a, 200, 300, 6),
    ]);
    let runs = d.runs(&mut skipping, &[-1; 5]);
    let grouped: Vec<Vec<usize>> = runs.iter().map(|r| r.indexes.clone()).collect();
    assert_eq!(grouped, vec![vec![0, 1], vec![2, 3], vec![4]]);
    // Another partition asked for is another run.
    let (mut slots, _answers) = slots_of(&a);
    let runs = d.runs(&mut slots, &[-1, 3, -1]);
    let grouped: Vec<(i32, Vec<usize>)> = runs
        .iter()
        .map(|r| (r.partition, r.indexes.clone()))
        .collect();
    // ... and the one asked for first resumes only where its own messages do: joined, its
    // set would claim 10..20, which the other partition holds.
    assert_eq!(grouped, vec![(-1, vec![0]), (3, vec![1]), (-1, vec![2])]);
}

fn slots_of(key: &Arc<SourceKey>) -> (Vec<Option<Pending>>, Vec<Answer>) {
    slots(vec![
        message(key, 0, 10, 1),
        message(key, 10, 20, 1),
        message(key, 20, 30, 1),
    ])
}

#[test]
fn a_message_after_a_gap_in_its_epoch_is_refused_and_the_sent_point_is_kept_across_batches() {
    let d = dispatcher();
    let (a, b) = (key(0), key(1));
    // The same source partition under another pointer (a key built again for a later
    // chunk) goes on from where the first left it.
    let a_again = Arc::new((*a).clone());
    let (mut first, mut answers) = slots(vec![
        message(&a, 0, 50, 1),
        message(&a_again, 50, 100, 1),
        message(&b, 0, 10, 1),
        message(&a, 100, 200, 1),
        // A gap: 200..300 was not handed on.
        message(&a, 300, 400, 1),
        message(&a, 200, 300, 1),
        // Sent again (went back): not a gap.
        message(&a, 0, 100, 1),
    ]);
    d.refuse_gaps(&mut first);
    let kept: Vec<bool> = first.iter().map(Option::is_some).collect();
    assert_eq!(kept, vec![true, true, true, true, false, true, true]);
    match answers.get_mut(4).unwrap().try_take() {
        Some(Err(SendError::SourceGap {
            expected, found, ..
        })) => assert_eq!((expected, found), (200, 300)),
        other => panic!("the message after the gap: {other:?}"),
    }
    {
        let placed = d.placed.lock().unwrap();
        assert_eq!(placed.sent.get(&a), Some(&(1, 300)));
        assert_eq!(placed.sent.get(&b), Some(&(1, 10)));
    }
    // The next batch goes on from there; a new epoch starts afresh.
    let (mut second, _answers) = slots(vec![
        message(&a, 350, 450, 1),
        message(&b, 10, 20, 1),
        message(&a, 900, 1000, 2),
    ]);
    d.refuse_gaps(&mut second);
    let kept: Vec<bool> = second.iter().map(Option::is_some).collect();
    assert_eq!(kept, vec![false, true, true]);
    {
        let placed = d.placed.lock().unwrap();
        assert_eq!(placed.sent.get(&a), Some(&(2, 1000)));
        assert_eq!(placed.sent.get(&b), Some(&(1, 20)));
    }
    // A run under another pointer right after one of the same source partition goes on
    // from where that run left it, not from what the batch found.
    let (mut third, _answers) = slots(vec![
        message(&a, 1000, 1100, 2),
        message(&a_again, 1100, 1200, 2),
    ]);
    d.refuse_gaps(&mut third);
    let kept: Vec<bool> = third.iter().map(Option::is_some).collect();
    assert_eq!(kept, vec![true, true]);
    assert_eq!(d.placed.lock().unwrap().sent.get(&a), Some(&(2, 1200)));
}

/// What a round leaves to send again, put through the next round's gap check: the messages
/// that would be sent on, by their source offsets.
fn sent_on_after(d: &Dispatcher<TokioEnv>, again: Vec<Pending>) -> Vec<(i64, i64)> {
    let mut next: Vec<Option<Pending>> = again.into_iter().map(Some).collect();
    d.refuse_gaps(&mut next);
    next.iter()
        .flatten()
        .filter_map(|p| p.record.source.as_ref().map(|m| (m.start, m.next)))
        .collect()
}

#[test]
fn a_source_partitions_later_run_is_not_sent_past_its_first_set_that_failed() {
    let d = dispatcher();
    let (a, b) = (key(0), key(1));
    let (mut slots, mut answers) = slots(vec![
        message(&a, 0, 10, 1),
        message(&a, 10, 20, 1),
        // Asked for another partition: a later run of `a`, for the next round.
        message(&a, 20, 30, 1),
        message(&b, 0, 10, 1),
    ]);
    let partitions = [-1, -1, 3, -1];
    d.refuse_gaps(&mut slots);
    let (sets, later) = d.first_sets(&mut slots, &partitions);
    assert_eq!((sets.len(), later.len()), (2, 1));
    let refused = SendError::Refused {
        broker_id: 0,
        reason: "invalid message set".into(),
    };
    let appended = MirrorAck {
        error: ErrorCode::NoError,
        partition: 0,
        offset: 0,
        outcome: tributary_core::wire::MirrorOutcome::Appended,
        held_to: 10,
    };
    let outcomes = vec![
        super::Answer::Plain(SetOutcome::Fail(refused)),
        super::Answer::Judged(appended),
    ];
    let mut last = String::new();
    let left = d.settle(0, &mut slots, &sets, outcomes, later, &mut last);
    assert!(left.retry.is_empty());
    for (i, answer) in answers.iter_mut().enumerate().take(2) {
        match answer.try_take() {
            Some(Err(SendError::Refused { .. })) => {}
            other => panic!("message {i} of the failed set: {other:?}"),
        }
    }
    assert!(matches!(answers[3].try_take(), Some(Ok(_))), "b's set");
    // 0..20 was not stored: 20..30, appended, would have the partition take 0..20 for held
    // when the mirror sends it again from its commit.
    assert_eq!(sent_on_after(&d, left.again), vec![]);
    match answers[2].try_take() {
        Some(Err(SendError::SourceGap {
            expected, found, ..
        })) => assert_eq!((expected, found), (0, 20)),
        other => panic!("the later run: {other:?}"),
    }
    // The mirror starts the partition again from its commit: 0..10 goes on.
    let (resent, _answer) = message(&a, 0, 10, 1);
    assert_eq!(
        sent_on_after(&d, resent.into_iter().collect()),
        vec![(0, 10)]
    );
}

#[test]
fn a_source_partitions_messages_given_up_on_are_not_passed_by_its_next_batch() {
    let d = dispatcher();
    let a = key(0);
    let (mut slots, mut answers) = slots(vec![message(&a, 0, 10, 1), message(&a, 10, 20, 1)]);
    d.refuse_gaps(&mut slots);
    d.give_up(
        slots.into_iter().flatten().collect(),
        4,
        "broker 0 did not answer",
    );
    for answer in &mut answers {
        assert!(matches!(
            answer.try_take(),
            Some(Err(SendError::Failed { attempts: 4, .. }))
        ));
    }
    let (next, _answer) = message(&a, 20, 30, 1);
    assert_eq!(sent_on_after(&d, next.into_iter().collect()), vec![]);
    // Another epoch (the partition taken over again) starts afresh.
    let (other_epoch, _answer) = message(&a, 0, 10, 2);
    assert_eq!(
        sent_on_after(&d, other_epoch.into_iter().collect()),
        vec![(0, 10)]
    );
}

#[test]
fn a_batch_is_split_into_the_mirrors_sets_and_plain_produces_in_order() {
    let d = dispatcher();
    let a = key(0);
    let plain = |n: u8| {
        let (answer, done) = crate::producer::Delivery::pending();
        let record = Record::new("t".parse().unwrap(), vec![n]);
        (Pending { record, done }, answer)
    };
    let starts = |placed: &Placed| -> Vec<Option<i64>> {
        placed
            .iter()
            .map(|(p, _)| p.record.source.as_ref().map(|m| m.start))
            .collect()
    };
    let marked_only = |d: &Dispatcher<TokioEnv>| {
        let (slots, _answers) = slots_of(&a);
        let messages: Vec<(Pending, i32)> = slots.into_iter().flatten().map(|p| (p, -1)).collect();
        d.split_marked(0, messages)
    };
    let (marked, rest) = marked_only(&d);
    assert_eq!(
        (starts(&marked), rest.len()),
        (vec![Some(0), Some(10), Some(20)], 0)
    );
    let (p1, _a1) = plain(1);
    let (p2, _a2) = plain(2);
    let (plain_only, rest) = d.split_marked(0, vec![(p1, 0), (p2, 1)]);
    assert_eq!((plain_only.len(), starts(&rest)), (0, vec![None, None]));
    let (mut mixed, _answers) = slots_of(&a);
    let (p3, _a3) = plain(3);
    let mut messages = vec![(p3, 0)];
    messages.extend(mixed.iter_mut().filter_map(Option::take).map(|p| (p, -1)));
    let (marked, rest) = d.split_marked(0, messages);
    assert_eq!(
        (starts(&marked), starts(&rest)),
        (vec![Some(0), Some(10), Some(20)], vec![None])
    );
    // A broker that does not know mirrored produce gets them all as plain produces.
    d.without_positions.lock().unwrap().insert(0);
    let (marked, rest) = marked_only(&d);
    assert_eq!((marked.len(), rest.len()), (0, 3));
}
