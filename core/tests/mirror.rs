//! The mirror's decisions: the window of each source partition (what may be committed,
//! whatever order acknowledgements come in) and the per-source state machine (epochs, limits,
//! the commit schedule and what each outcome does).

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary_core::consumer::{BrokerPartition, Commit, CommitAnswer, CommitOutcome};
use tributary_core::mirror::source::{
    AckEffect, AckOutcome, Admission, CommitEffect, CommitRound, Reset,
};
use tributary_core::mirror::{MirrorWindow, SourceMirror, SourcePartition};

fn bp(s: &str) -> BrokerPartition {
    BrokerPartition::parse(s).unwrap()
}

fn part(s: &str) -> SourcePartition {
    SourcePartition::new(0, "t".parse().unwrap(), bp(s))
}

/// The driver's wake-up at `now`: the clock, then a round if one is due.
fn poll(m: &mut SourceMirror, now: i64) -> Option<CommitRound> {
    m.handle_timeout(now);
    m.poll_commits()
}

fn answer(commit: &Commit, outcome: CommitOutcome) -> CommitAnswer {
    CommitAnswer {
        commit: commit.clone(),
        outcome,
    }
}

// ---- MirrorWindow

#[test]
fn the_mirror_commits_only_the_acknowledged_prefix_whatever_the_ack_order() {
    for seed in 0..200 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let p = SourcePartition::new(0, "t".parse().unwrap(), bp("0-0"));
        let mut w = MirrorWindow::new();
        let offsets: Vec<i64> = (1..=30).map(|i| i * 100).collect();
        for (seq, offset) in offsets.iter().enumerate() {
            w.sent(&p, seq as u64, *offset);
        }
        let mut order: Vec<u64> = (0..30).collect();
        order.shuffle(&mut rng);
        let mut acked = std::collections::BTreeSet::new();
        for seq in order {
            acked.insert(seq);
            // Half the seeds acknowledge by sequence number alone, half with the offset.
            if seed % 2 == 0 {
                w.acked(&p, seq);
            } else {
                w.acked_at(&p, seq, offsets[seq as usize]);
            }
            // The commit point is the offset of the last message of the acknowledged prefix.
            let prefix = (0..30).take_while(|s| acked.contains(s)).count();
            let expected = prefix.checked_sub(1).map(|i| offsets[i]);
            assert_eq!(w.commit_point(&p), expected, "seed {seed}");
            assert!(w.invariants_hold());
            assert_eq!(w.in_flight(), 30 - prefix);
        }
        w.committed(&p, 3000);
        assert_eq!(
            w.commit_point(&p),
            None,
            "nothing new after committing everything"
        );
    }
}

#[test]
fn a_lost_partition_is_forgotten_and_never_committed() {
    let p = SourcePartition::new(0, "t".parse().unwrap(), bp("1-0"));
    let mut w = MirrorWindow::new();
    w.sent(&p, 1, 10);
    w.sent(&p, 2, 20);
    assert_eq!(w.acked(&p, 1), Some(10));
    assert_eq!(w.lost(&p), 1, "one message was still in flight");
    assert_eq!(
        w.acked(&p, 2),
        None,
        "a late ack of a lost partition moves nothing"
    );
    assert!(w.commits_due().is_empty());
    assert_eq!(w.in_flight(), 0);
}

#[test]
fn uncommitted_counts_what_a_crash_would_resend() {
    let (a, b) = (
        SourcePartition::new(0, "t".parse().unwrap(), bp("0-0")),
        SourcePartition::new(0, "t".parse().unwrap(), bp("0-1")),
    );
    let mut w = MirrorWindow::new();
    for seq in 0..4 {
        w.sent(&a, seq, (seq as i64 + 1) * 10);
    }
    w.sent(&b, 4, 7);
    assert_eq!(
        (w.in_flight(), w.uncommitted(), w.acked_uncommitted()),
        (5, 5, 0)
    );
    w.acked(&a, 0);
    w.acked(&a, 1);
    w.acked(&b, 4);
    // Acknowledged, not committed: still resent by a crash.
    assert_eq!(
        (w.in_flight(), w.uncommitted(), w.acked_uncommitted()),
        (2, 5, 3)
    );
    // A commit of an older point covers only what is at or before it.
    w.committed(&a, 10);
    assert_eq!((w.uncommitted(), w.acked_uncommitted()), (4, 2));
    w.committed(&a, 20);
    w.committed(&b, 7);
    assert_eq!(
        (w.in_flight(), w.uncommitted(), w.acked_uncommitted()),
        (2, 2, 0)
    );
    w.acked(&a, 3);
    assert_eq!(
        w.acked_uncommitted(),
        0,
        "an ack past a hole is not in the prefix"
    );
    assert_eq!(w.lost(&a), 2);
    assert_eq!((w.in_flight(), w.uncommitted()), (0, 0));
    assert!(w.invariants_hold());
}

#[test]
fn acknowledgements_by_offset_find_their_message_among_equal_offsets() {
    // A wrapper's inner messages share its start offset; the last resumes past it.
    let p = SourcePartition::new(0, "t".parse().unwrap(), bp("0-0"));
    let mut w = MirrorWindow::new();
    for seq in 1..=4 {
        w.sent(&p, seq, 100);
    }
    w.sent(&p, 5, 400);
    w.sent(&p, 6, 500);
    assert_eq!(w.acked_at(&p, 3, 100), None, "a hole before it");
    assert_eq!(w.acked_at(&p, 6, 500), None);
    assert_eq!(
        w.acked_at(&p, 7, 100),
        None,
        "an unknown message marks nothing"
    );
    assert_eq!(w.acked_at(&p, 1, 100), Some(100));
    assert_eq!(
        w.acked_at(&p, 2, 100),
        Some(100),
        "through 3, acknowledged earlier"
    );
    assert_eq!(w.acked_at(&p, 4, 100), Some(100));
    assert_eq!(
        w.acked_at(&p, 5, 400),
        Some(500),
        "and 6, acknowledged earlier"
    );
    assert_eq!(w.in_flight(), 0);
    assert!(w.invariants_hold());
}

#[test]
fn messages_of_a_committed_wrapper_start_do_not_count_as_uncommitted() {
    // A compressed wrapper [100, 400): its inner messages resume at 100, the last at 400.
    let p = SourcePartition::new(0, "t".parse().unwrap(), bp("0-0"));
    let mut w = MirrorWindow::new();
    w.sent(&p, 1, 100);
    w.acked(&p, 1);
    w.committed(&p, 100);
    for seq in 2..50 {
        w.sent(&p, seq, 100);
        w.acked(&p, seq);
    }
    assert_eq!(
        w.uncommitted(),
        0,
        "nothing past the committed wrapper start is pending"
    );
    w.sent(&p, 50, 400);
    w.acked(&p, 50);
    assert_eq!((w.uncommitted(), w.commit_point(&p)), (1, Some(400)));
    assert!(w.invariants_hold());
}

/// Runs recorded as one entry each give the window exactly what the same messages recorded
/// one by one give, when each run's messages are acknowledged together: the same commit
/// points, counts and commits due, whatever order the runs are acknowledged in.
#[test]
fn a_run_is_its_messages_acknowledged_together() {
    for seed in 0..200 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let p = part("0-0");
        let (mut runs, mut singles) = (MirrorWindow::new(), MirrorWindow::new());
        // Runs of 1 to 5 messages, each resuming past the one before. (Messages inside a
        // compressed wrapper share a resume offset, the wrapper's start: once that is
        // committed, one by one they no longer count as uncommitted, while a run holding them
        // counts them until its end is committed, as a crash would indeed send them again.)
        let (mut offset, mut seq) = (0i64, 0u64);
        let mut made: Vec<(u64, Vec<(u64, i64)>)> = Vec::new();
        for run in 0..20u64 {
            let mut messages = Vec::new();
            for _ in 0..rng.random_range(1..=5) {
                offset += rng.random_range(1..=2);
                seq += 1;
                singles.sent(&p, seq, offset);
                messages.push((seq, offset));
            }
            runs.sent_run(&p, run, offset, messages.len());
            made.push((run, messages));
        }
        made.shuffle(&mut rng);
        let mut points = Vec::new();
        for (run, messages) in &made {
            let last = messages.last().unwrap().1;
            runs.acked_at(&p, *run, last);
            for (seq, offset) in messages {
                singles.acked_at(&p, *seq, *offset);
            }
            let counts = |w: &MirrorWindow| (w.in_flight(), w.uncommitted(), w.acked_uncommitted());
            assert_eq!(counts(&runs), counts(&singles), "seed {seed}");
            assert_eq!(
                runs.commit_point(&p),
                singles.commit_point(&p),
                "seed {seed}"
            );
            assert_eq!(runs.commits_due(), singles.commits_due(), "seed {seed}");
            assert!(runs.invariants_hold());
            // A commit of a point the window reached (now or earlier: commits are made at
            // commit points, which are the ends of runs) covers the same messages in both.
            points.extend(runs.commit_point(&p));
            if !points.is_empty() && rng.random_bool(0.3) {
                let at = points[rng.random_range(0..points.len())];
                runs.committed(&p, at);
                singles.committed(&p, at);
                assert_eq!(
                    counts(&runs),
                    counts(&singles),
                    "seed {seed}, commit at {at}"
                );
            }
        }
        assert_eq!(runs.in_flight(), 0);
        assert_eq!(runs.lost(&p), singles.lost(&p));
    }
}

#[test]
fn a_lost_run_returns_its_messages() {
    let p = part("0-0");
    let mut w = MirrorWindow::new();
    w.sent_run(&p, 1, 10, 4);
    w.sent_run(&p, 2, 20, 3);
    assert_eq!(w.acked_at(&p, 1, 10), Some(10));
    assert_eq!((w.in_flight(), w.acked_uncommitted()), (3, 4));
    assert_eq!(w.lost(&p), 3, "the unacknowledged run's three messages");
    assert_eq!((w.in_flight(), w.uncommitted()), (0, 0));
}

// ---- SourceMirror

const SECOND: Duration = Duration::from_secs(1);

fn forward(m: &mut SourceMirror, p: &SourcePartition, epoch: u64, offset: i64) -> u64 {
    match m.on_message(p, epoch, offset, 0) {
        Admission::Forward { seq, .. } => seq,
        Admission::Skip => panic!("{p} at {offset} was skipped"),
    }
}

#[test]
fn a_message_of_a_new_epoch_starts_a_new_window_and_acks_of_the_old_change_nothing() {
    let p = part("0-0");
    let mut m = SourceMirror::new(0, 10, SECOND, 0);
    let old = forward(&mut m, &p, 1, 100);
    forward(&mut m, &p, 1, 200);
    assert_eq!(
        m.on_message(&p, 2, 100, 0),
        Admission::Forward {
            seq: 3,
            reset: Some(Reset::NewEpoch { dropped: 2 }),
            messages: 1
        }
    );
    assert_eq!(m.in_flight(), 1);
    assert_eq!(m.epoch_of(&p), Some(2));
    assert_eq!(
        m.on_ack(&p, 1, old, 100, AckOutcome::Durable),
        AckEffect::Ignored,
        "an ack of the old epoch"
    );
    assert_eq!(
        m.force_commits(),
        None,
        "nothing of the new epoch is acknowledged"
    );
    assert_eq!(
        m.on_ack(&p, 2, 3, 100, AckOutcome::Durable),
        AckEffect::Recorded
    );
    let round = m.force_commits().unwrap();
    assert_eq!(
        (
            round.commits.len(),
            round.commits[0].epoch,
            round.commits[0].offset
        ),
        (1, 2, 100)
    );
    assert!(m.invariants_hold());
}

#[test]
fn offsets_going_back_within_an_epoch_start_a_new_window() {
    let p = part("0-0");
    let mut m = SourceMirror::new(0, 10, SECOND, 0);
    forward(&mut m, &p, 1, 500);
    forward(&mut m, &p, 1, 600);
    assert_eq!(
        m.on_message(&p, 1, 50, 0),
        Admission::Forward {
            seq: 3,
            reset: Some(Reset::WentBack {
                from: 600,
                dropped: 2
            }),
            messages: 1
        }
    );
    // An ack of the old offsets finds nothing in the new window: no commit at 500 or 600.
    m.on_ack(&p, 1, 1, 500, AckOutcome::Durable);
    m.on_ack(&p, 1, 2, 600, AckOutcome::Durable);
    assert_eq!(m.force_commits(), None);
    m.on_ack(&p, 1, 3, 50, AckOutcome::Durable);
    assert_eq!(m.force_commits().unwrap().commits[0].offset, 50);
}

#[test]
fn a_partition_stopped_in_an_epoch_forwards_and_commits_nothing_more_in_it() {
    let (p, q) = (part("0-0"), part("0-1"));
    let mut m = SourceMirror::new(0, 10, SECOND, 0);
    let first = forward(&mut m, &p, 1, 100);
    let second = forward(&mut m, &p, 1, 200);
    forward(&mut m, &q, 1, 100);
    assert_eq!(
        m.on_ack(&p, 1, first, 100, AckOutcome::Durable),
        AckEffect::Recorded
    );
    assert_eq!(
        m.on_ack(&p, 1, second, 200, AckOutcome::TooLarge),
        AckEffect::Stop
    );
    assert_eq!(
        m.on_ack(&p, 1, second, 200, AckOutcome::TooLarge),
        AckEffect::Ignored,
        "stopped once"
    );
    assert!(m.is_stopped(&p, 1));
    assert_eq!(m.on_message(&p, 1, 300, 0), Admission::Skip);
    assert_eq!(m.in_flight(), 1, "only q's message");
    assert_eq!(m.force_commits(), None, "p's window went with the stop");
    // Another partition goes on; a new epoch starts p again.
    m.on_ack(&q, 1, 3, 100, AckOutcome::Durable);
    let round = m.force_commits().unwrap();
    assert_eq!(round.commits.len(), 1, "only q");
    m.on_commit_outcome(&answer(&round.commits[0], CommitOutcome::Written));
    m.on_round_done();
    assert!(matches!(
        m.on_message(&p, 2, 100, 0),
        Admission::Forward { .. }
    ));
    // Refused before sending: withdrawn, and stopped in its epoch.
    forward(&mut m, &p, 2, 200);
    assert_eq!(m.on_withdrawn(&p, 2), 2, "it and the one before, in flight");
    assert_eq!(m.in_flight(), 0, "a withdrawn message holds no room");
    assert_eq!(
        m.force_commits(),
        None,
        "nothing of a stopped partition is committed"
    );
    assert_eq!(m.on_message(&p, 2, 300, 0), Admission::Skip);
    assert!(m.invariants_hold());
}

#[test]
fn a_partition_moved_between_streams_within_its_epoch_waits_for_the_first_streams_hand_over() {
    let (p, q) = (part("0-0"), part("0-1"));
    let mut m = SourceMirror::new(0, 10, SECOND, 0);
    let busy = |_| true;
    // Nothing recorded yet: nothing to wait for.
    assert!(m.on_message_in_order(&p, 1, 100, 0, busy).is_some());
    // The same stream goes on whatever it is handing over.
    assert!(m.on_message_in_order(&p, 1, 110, 0, busy).is_some());
    // A rebalance in the same epoch hands p to stream 1: it waits while stream 0 hands over,
    // and is told which stream it waits for.
    let mut asked = None;
    let waited = m.on_message_in_order(&p, 1, 200, 1, |from| {
        asked = Some(from);
        true
    });
    assert_eq!((waited, asked), (None, Some(0)));
    assert_eq!(m.in_flight(), 2, "nothing recorded while it waits");
    // Another partition, and a new epoch (which starts from the commit), go on.
    assert!(m.on_message_in_order(&q, 1, 200, 1, busy).is_some());
    // Once stream 0's messages are with the producer, stream 1 goes on, and p is then its.
    assert!(m.on_message_in_order(&p, 1, 200, 1, |_| false).is_some());
    assert!(m.on_message_in_order(&p, 1, 210, 1, busy).is_some());
    assert!(m.on_message_in_order(&p, 1, 220, 0, busy).is_none());
    assert!(m.on_message_in_order(&p, 2, 50, 0, busy).is_some());
    assert!(m.invariants_hold());
}

#[test]
fn a_held_message_keeps_later_ones_of_its_partition_back_and_commits_waiting() {
    let (p, q) = (part("0-0"), part("0-1"));
    let mut m = SourceMirror::new(0, 10, SECOND, 0);
    // Stream A holds p's first message (to 100) while its topic is decided; the partition
    // moves to stream B in the same epoch, whose next message must wait behind it.
    m.on_wait(&p, 100);
    assert!(m.waits_behind(&p, 200), "a later message waits");
    assert!(!m.waits_behind(&p, 100), "the held message itself does not");
    assert!(!m.waits_behind(&q, 200), "another partition goes on");
    // Whatever is forwarded meanwhile (here q, and p's own message of the same offset), p is
    // not committed while A holds its message.
    let same = forward(&mut m, &p, 1, 100);
    let other = forward(&mut m, &q, 1, 100);
    m.on_ack(&p, 1, same, 100, AckOutcome::Durable);
    m.on_ack(&q, 1, other, 100, AckOutcome::Durable);
    let round = m.force_commits().unwrap();
    let committed: Vec<_> = round.commits.iter().map(|c| c.partition).collect();
    assert_eq!(
        committed,
        vec![bp("0-1")],
        "p waits for A's message; q goes on"
    );
    for commit in &round.commits {
        m.on_commit_outcome(&answer(commit, CommitOutcome::Written));
    }
    m.on_round_done();
    // A's wait is over: B goes on, and p is committed again.
    m.on_wait_over(&p, 100);
    assert!(!m.waits_behind(&p, 200));
    let round = m.force_commits().unwrap();
    assert_eq!(round.commits[0].offset, 100);
    assert!(m.invariants_hold());
}

#[test]
fn a_stop_in_an_old_epoch_leaves_the_window_of_a_newer_one() {
    let p = part("0-0");
    let mut m = SourceMirror::new(0, 10, SECOND, 0);
    let old = forward(&mut m, &p, 1, 100);
    forward(&mut m, &p, 2, 100);
    assert_eq!(
        m.on_ack(&p, 1, old, 100, AckOutcome::TooLarge),
        AckEffect::Stop
    );
    assert!(m.is_stopped(&p, 1));
    assert_eq!(m.in_flight(), 1, "the epoch-2 window is not the stop's");
    assert_eq!(m.on_withdrawn(&p, 1), 0);
    assert!(matches!(
        m.on_message(&p, 2, 200, 0),
        Admission::Forward { .. }
    ));
}

#[test]
fn room_closes_at_the_limit_in_flight_and_at_twice_it_uncommitted() {
    let p = part("0-0");
    let mut m = SourceMirror::new(0, 3, SECOND, 0);
    let mut seqs = Vec::new();
    for offset in 1..=3 {
        assert!(m.has_room());
        seqs.push(forward(&mut m, &p, 1, offset));
    }
    assert!(!m.has_room(), "3 in flight");
    for (seq, offset) in seqs.iter().zip(1..) {
        m.on_ack(&p, 1, *seq, offset, AckOutcome::Durable);
    }
    assert!(m.has_room(), "acknowledged: 3 uncommitted of 6");
    for offset in 4..=6 {
        let seq = forward(&mut m, &p, 1, offset);
        m.on_ack(&p, 1, seq, offset, AckOutcome::Durable);
    }
    assert!(!m.has_room(), "6 uncommitted, none in flight");
    let round = m.force_commits().unwrap();
    let effect = m.on_commit_outcome(&answer(&round.commits[0], CommitOutcome::Written));
    assert_eq!(effect, CommitEffect::Committed);
    m.on_round_done();
    assert!(m.has_room());
    assert_eq!(m.uncommitted(), 0);
}

#[test]
fn a_round_falls_due_each_interval_or_early_for_a_full_window_and_one_runs_at_a_time() {
    let p = part("0-0");
    let start: i64 = 1_000_000;
    let mut m = SourceMirror::new(0, 2, SECOND, start);
    assert_eq!(poll(&mut m, start), None, "nothing to commit");
    assert_eq!(m.poll_timeout(), Some(start + 1_000));
    let a = forward(&mut m, &p, 1, 10);
    m.on_ack(&p, 1, a, 10, AckOutcome::Durable);
    assert_eq!(
        poll(&mut m, start),
        None,
        "one acknowledged of 2: not early"
    );
    let round = poll(&mut m, start + 1_000).expect("the interval passed");
    assert_eq!(m.poll_timeout(), None, "a round runs");
    assert_eq!(poll(&mut m, start + 5_000), None, "one round at a time");
    assert_eq!(m.force_commits(), None, "one round at a time");
    m.on_commit_outcome(&answer(&round.commits[0], CommitOutcome::Written));
    m.on_round_done();
    assert_eq!(m.poll_timeout(), Some(start + 2_000));
    // Two acknowledged: a round is due before the interval.
    for offset in [20, 30] {
        let seq = forward(&mut m, &p, 1, offset);
        m.on_ack(&p, 1, seq, offset, AckOutcome::Durable);
    }
    assert!(m.early_commit_due());
    let round = poll(&mut m, start + 1_000).expect("early: the next interval is at 2 s");
    assert_eq!(round.commits[0].offset, 30);
    // It fails: no early round until one succeeds (ZooKeeper is retried at the interval).
    assert_eq!(
        m.on_commit_outcome(&answer(&round.commits[0], CommitOutcome::NotWritten)),
        CommitEffect::Failed
    );
    m.on_round_done();
    assert!(!m.commits_ok() && !m.early_commit_due());
    assert_eq!(poll(&mut m, start + 1_000), None);
    let round = poll(&mut m, start + 2_000).expect("the interval passed");
    m.on_commit_outcome(&answer(&round.commits[0], CommitOutcome::Written));
    m.on_round_done();
    assert!(m.commits_ok());
    // A round whose commits the driver gave up waiting for (answered not written) failed.
    let seq = forward(&mut m, &p, 1, 40);
    m.on_ack(&p, 1, seq, 40, AckOutcome::Durable);
    let round = m.force_commits().unwrap();
    m.on_commit_outcome(&answer(&round.commits[0], CommitOutcome::NotWritten));
    m.on_round_done();
    assert!(!m.commits_ok());
}

#[test]
fn a_refused_commit_drops_the_window_and_outcomes_of_another_epoch_change_nothing() {
    let p = part("0-0");
    let mut m = SourceMirror::new(0, 10, SECOND, 0);
    let a = forward(&mut m, &p, 1, 10);
    forward(&mut m, &p, 1, 20);
    m.on_ack(&p, 1, a, 10, AckOutcome::Durable);
    let round = m.force_commits().unwrap();
    assert_eq!(
        m.on_commit_outcome(&answer(&round.commits[0], CommitOutcome::NotOwned)),
        CommitEffect::Dropped { resent: 1 }
    );
    m.on_round_done();
    assert_eq!(
        (m.in_flight(), m.uncommitted(), m.epoch_of(&p)),
        (0, 0, None)
    );
    // An outcome arriving for an epoch the window no longer has is ignored.
    let b = forward(&mut m, &p, 2, 10);
    m.on_ack(&p, 2, b, 10, AckOutcome::Durable);
    let round = m.force_commits().unwrap();
    let mut stale = round.commits[0].clone();
    stale.epoch = 1;
    assert_eq!(
        m.on_commit_outcome(&answer(&stale, CommitOutcome::Written)),
        CommitEffect::Ignored
    );
    assert_eq!(
        m.on_commit_outcome(&answer(&stale, CommitOutcome::NotOwned)),
        CommitEffect::Ignored
    );
    assert_eq!(m.uncommitted(), 1, "the epoch-2 window is untouched");
}

#[test]
fn ownership_drops_the_windows_of_lost_partitions_but_not_newer_ones() {
    let (p, q, r) = (part("0-0"), part("0-1"), part("0-2"));
    let mut m = SourceMirror::new(0, 10, SECOND, 0);
    forward(&mut m, &p, 3, 10);
    forward(&mut m, &q, 3, 10);
    forward(&mut m, &r, 5, 10);
    // As of generation 4: p kept in epoch 3, q gone; r's window (epoch 5) is newer than that.
    let effect = m.on_ownership(4, &[(p.clone(), 3)]);
    assert_eq!((effect.windows, effect.in_flight), (1, 1));
    assert_eq!(
        (m.epoch_of(&p), m.epoch_of(&q), m.epoch_of(&r)),
        (Some(3), None, Some(5))
    );
    // As of generation 5, p is owned in a new epoch: its epoch-3 window goes.
    let effect = m.on_ownership(5, &[(p.clone(), 5), (r.clone(), 5)]);
    assert_eq!((effect.windows, effect.in_flight), (1, 1));
    assert_eq!(m.in_flight(), 1);
    assert!(m.invariants_hold());
}

#[test]
fn a_window_of_acknowledged_messages_only_counts_as_dropped_so_its_room_is_known_freed() {
    let p = part("0-0");
    let mut m = SourceMirror::new(0, 2, SECOND, 0);
    for offset in 1..=4 {
        let seq = forward(&mut m, &p, 1, offset);
        m.on_ack(&p, 1, seq, offset, AckOutcome::Durable);
    }
    assert!(!m.has_room(), "4 acknowledged, uncommitted");
    let effect = m.on_ownership(2, &[(p.clone(), 2)]);
    assert_eq!((effect.windows, effect.in_flight), (1, 0));
    assert!(m.has_room());
}

#[test]
fn a_stopped_partition_stays_stopped_in_its_epoch_when_ownership_no_longer_lists_it() {
    let p = part("0-0");
    let mut m = SourceMirror::new(0, 10, SECOND, 0);
    let a = forward(&mut m, &p, 2, 10);
    m.on_ack(&p, 2, a, 10, AckOutcome::TooLarge);
    m.on_ownership(2, &[]);
    assert_eq!(
        m.on_message(&p, 2, 20, 0),
        Admission::Skip,
        "still held by a stream"
    );
    m.on_ownership(3, &[(p.clone(), 3)]);
    assert!(
        !m.is_stopped(&p, 2),
        "forgotten once owned in a newer epoch"
    );
    assert!(matches!(
        m.on_message(&p, 3, 10, 0),
        Admission::Forward { .. }
    ));
}

/// A message as the property test's model knows it.
#[derive(Debug, Clone)]
struct Sent {
    partition: usize,
    epoch: u64,
    seq: u64,
    offset: i64,
    acked: bool,
}

/// Random events from a driver that obeys the rules (room before reading, one round at a time):
/// every commit decided covers only acknowledged messages of its window, the limits hold, and
/// once everything is acknowledged and committed nothing is left uncommitted.
#[test]
fn random_drivers_never_get_a_commit_past_an_unacknowledged_message() {
    const LIMIT: usize = 8;
    let parts = [part("0-0"), part("0-1"), part("1-0")];
    for seed in 0..300 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let start: i64 = 1_000_000;
        let mut now = start;
        let mut m = SourceMirror::new(0, LIMIT, SECOND, start);
        // Per partition: its current epoch at the source group, its next offset, the messages
        // of its current window, and messages out for delivery.
        let mut epoch = [1u64; 3];
        let mut next = [0i64; 3];
        let mut window: [Vec<Sent>; 3] = Default::default();
        let mut out: Vec<Sent> = Vec::new();
        for step in 0..400 {
            let context = format!("seed {seed} step {step}");
            match rng.random_range(0..100) {
                0..=39 if m.has_room() => {
                    let i = rng.random_range(0..3);
                    if rng.random_range(0..30) == 0 {
                        epoch[i] += 1;
                    }
                    if rng.random_range(0..40) == 0 {
                        next[i] = (next[i] - rng.random_range(1..5)).max(0);
                    }
                    next[i] += rng.random_range(0..3);
                    let offset = next[i];
                    match m.on_message(&parts[i], epoch[i], offset, 0) {
                        Admission::Forward { seq, reset, .. } => {
                            if reset.is_some()
                                || m.epoch_of(&parts[i]) != window[i].first().map(|s| s.epoch)
                            {
                                window[i].clear();
                            }
                            let sent = Sent {
                                partition: i,
                                epoch: epoch[i],
                                seq,
                                offset,
                                acked: false,
                            };
                            if rng.random_range(0..50) == 0 {
                                m.on_withdrawn(&parts[i], epoch[i]);
                                window[i].clear();
                            } else {
                                window[i].push(sent.clone());
                                out.push(sent);
                            }
                        }
                        Admission::Skip => assert!(m.is_stopped(&parts[i], epoch[i]), "{context}"),
                    }
                }
                40..=69 if !out.is_empty() => {
                    let sent = out.swap_remove(rng.random_range(0..out.len()));
                    let i = sent.partition;
                    let outcome = if rng.random_range(0..60) == 0 {
                        AckOutcome::TooLarge
                    } else {
                        AckOutcome::Durable
                    };
                    let effect = m.on_ack(&parts[i], sent.epoch, sent.seq, sent.offset, outcome);
                    match effect {
                        // The stop drops the window only if it is of the stopped epoch.
                        AckEffect::Stop
                            if window[i].first().map(|s| s.epoch) == Some(sent.epoch) =>
                        {
                            window[i].clear()
                        }
                        AckEffect::Stop => {}
                        AckEffect::Recorded => {
                            if let Some(s) = window[i].iter_mut().find(|s| s.seq == sent.seq) {
                                s.acked = true;
                            }
                        }
                        AckEffect::Ignored => {}
                    }
                }
                70..=79 => {
                    let generation = epoch.iter().copied().max().unwrap_or(0);
                    let owned: Vec<(SourcePartition, u64)> = (0..3)
                        .filter(|_| rng.random_range(0..4) != 0)
                        .map(|i| (parts[i].clone(), epoch[i]))
                        .collect();
                    m.on_ownership(generation, &owned);
                }
                _ => {
                    now += rng.random_range(0..700);
                    let Some(round) = poll(&mut m, now) else {
                        continue;
                    };
                    for commit in &round.commits {
                        let i = parts
                            .iter()
                            .position(|p| {
                                p.topic == commit.topic && p.partition == commit.partition
                            })
                            .unwrap();
                        // The commit may reach the end of the acknowledged prefix, in send
                        // order; a later message with the same resume offset is inside a
                        // wrapper starting there, which reading from it delivers again.
                        let prefix_end = window[i].iter().take_while(|s| s.acked).last();
                        assert!(
                            prefix_end.is_some_and(|s| commit.offset <= s.offset),
                            "{context}: commit {commit:?} past the acknowledged prefix of {:?}",
                            window[i]
                        );
                        let outcome = match rng.random_range(0..10) {
                            0 => CommitOutcome::NotWritten,
                            1 => CommitOutcome::NotOwned,
                            _ => CommitOutcome::Written,
                        };
                        if let CommitEffect::Dropped { .. } =
                            m.on_commit_outcome(&answer(commit, outcome))
                        {
                            window[i].clear();
                        }
                    }
                    m.on_round_done();
                }
            }
            // The model's windows follow the machine's: a window it dropped is empty here too.
            for i in 0..3 {
                if m.epoch_of(&parts[i]).is_none() {
                    window[i].clear();
                }
            }
            assert!(m.invariants_hold(), "{context}");
            assert!(m.in_flight() <= LIMIT, "{context}");
            assert!(m.uncommitted() <= 2 * LIMIT, "{context}");
        }
        // Everything acknowledged, then committed: nothing is left to resend.
        for sent in out.drain(..) {
            m.on_ack(
                &parts[sent.partition],
                sent.epoch,
                sent.seq,
                sent.offset,
                AckOutcome::Durable,
            );
        }
        if let Some(round) = m.force_commits() {
            for commit in &round.commits {
                m.on_commit_outcome(&answer(commit, CommitOutcome::Written));
            }
            m.on_round_done();
        }
        assert_eq!(m.in_flight(), 0, "seed {seed}");
        assert_eq!(m.uncommitted(), 0, "seed {seed}");
    }
}

#[test]
fn a_clock_that_went_back_postpones_the_next_round_by_one_interval_at_most() {
    let p = part("0-0");
    let mut m = SourceMirror::new(0, 10, SECOND, 10_000_000 - 1_000);
    assert_eq!(poll(&mut m, 10_000_000), None);
    let seq = forward(&mut m, &p, 1, 10);
    m.on_ack(&p, 1, seq, 10, AckOutcome::Durable);
    // The wall clock is set back an hour: the round is due one interval later, not an hour.
    let back = 10_000_000 - 3_600_000;
    assert_eq!(poll(&mut m, back), None);
    assert_eq!(m.poll_timeout(), Some(back + 1_000));
    let round = poll(&mut m, back + 1_000).expect("due one interval after the clock went back");
    assert_eq!(round.commits.len(), 1);
}

#[test]
fn a_run_is_cut_to_the_room_left_and_forwarded_whole_when_there_is_room() {
    let p = part("0-0");
    // At most 10 in flight.
    let mut m = SourceMirror::new(0, 10, SECOND, 0);
    assert_eq!(m.room_left(), 10);
    let offsets: Vec<i64> = (1..=7).map(|i| i * 10).collect();
    assert_eq!(
        m.on_run(&p, 1, &offsets, 0),
        Admission::Forward {
            seq: 1,
            reset: None,
            messages: 7
        }
    );
    assert_eq!((m.in_flight(), m.room_left()), (7, 3));
    // Five offered, three recorded: the run ends at its third message.
    let more: Vec<i64> = (8..=12).map(|i| i * 10).collect();
    assert_eq!(
        m.on_run(&p, 1, &more, 0),
        Admission::Forward {
            seq: 2,
            reset: None,
            messages: 3
        }
    );
    assert_eq!((m.in_flight(), m.room_left()), (10, 0));
    assert!(!m.has_room());
    // The cut run's acknowledgement names its last recorded offset, 100; the first run's
    // comes later, and the commit then covers both.
    assert_eq!(
        m.on_ack(&p, 1, 2, 100, AckOutcome::Durable),
        AckEffect::Recorded
    );
    assert_eq!(m.in_flight(), 10, "the older run is still in flight");
    assert_eq!(
        m.on_ack(&p, 1, 1, 70, AckOutcome::Durable),
        AckEffect::Recorded
    );
    assert_eq!(m.in_flight(), 0);
    let round = m.force_commits().unwrap();
    assert_eq!(round.commits[0].offset, 100);
    // Without room, one message still goes (as a single message would).
    let mut full = SourceMirror::new(0, 1, SECOND, 0);
    forward(&mut full, &p, 1, 10);
    assert!(matches!(
        full.on_run(&p, 1, &[20, 30], 0),
        Admission::Forward { messages: 1, .. }
    ));
    assert_eq!(full.in_flight(), 2);
}

#[test]
fn a_run_that_goes_back_starts_a_new_window_from_its_first_offset() {
    let p = part("0-0");
    let mut m = SourceMirror::new(0, 100, SECOND, 0);
    forward(&mut m, &p, 1, 500);
    assert_eq!(
        m.on_run(&p, 1, &[300, 400, 600], 0),
        Admission::Forward {
            seq: 2,
            reset: Some(Reset::WentBack {
                from: 500,
                dropped: 1
            }),
            messages: 3
        }
    );
    assert_eq!(m.in_flight(), 3);
    // A run starting at the last offset sent does not go back.
    assert!(matches!(
        m.on_run(&p, 1, &[600, 700], 0),
        Admission::Forward {
            reset: None,
            messages: 2,
            ..
        }
    ));
}
