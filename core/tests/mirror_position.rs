//! The mirror's position records (`core::mirror::position`): the records file survives a torn
//! or damaged write, recovery brings data and records back together, the deduplication decision
//! lets every message into the mirror partition exactly once whatever a sender sends again, and
//! a translated offset never skips a message the reader had not read.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary_core::consumer::BrokerPartition;
use tributary_core::identity::ClusterId;
use tributary_core::mirror::position::book::{HISTORY_MAX, SOURCES_MAX};
use tributary_core::mirror::position::record::{self, Record, RecordProblem, Tail};
use tributary_core::mirror::position::{
    Decision, Position, PositionBook, PositionError, SourceKey,
};

fn key(partition: u32) -> SourceKey {
    SourceKey {
        cluster: ClusterId::parse("west-7Qx").unwrap(),
        topic: "orders".parse().unwrap(),
        partition: BrokerPartition {
            broker_id: 1,
            partition,
        },
    }
}

fn at(key: &SourceKey, source: (i64, i64), mirror: (u64, u64)) -> Position {
    Position {
        key: key.clone(),
        source_start: source.0,
        source_next: source.1,
        mirror_start: mirror.0,
        mirror_end: mirror.1,
    }
}

/// Three sets of one source partition and one of another, as a broker records them.
fn four() -> Vec<Position> {
    let (a, b) = (key(0), key(1));
    vec![
        at(&a, (0, 100), (0, 120)),
        at(&b, (500, 560), (120, 190)),
        at(&a, (100, 250), (190, 360)),
        at(&a, (250, 300), (400, 460)),
    ]
}

fn file_of(positions: &[Position]) -> Vec<u8> {
    positions.iter().flat_map(record::encode).collect()
}

#[test]
fn records_read_back_as_written_and_a_torn_last_record_leaves_the_others() {
    let positions = four();
    let file = file_of(&positions);
    let decoded = record::decode(&file);
    assert_eq!(decoded.tail, Tail::Clean);
    assert_eq!(decoded.valid_bytes, file.len());
    let read: Vec<Position> = decoded
        .records
        .into_iter()
        .map(|(_, r)| match r {
            Record::Mirrored(p) => p,
            other => panic!("not a mirrored set: {other:?}"),
        })
        .collect();
    assert_eq!(read, positions);
    let last_start = file.len() - record::encode(&positions[3]).len();
    for cut in last_start..file.len() {
        let decoded = record::decode(&file[..cut]);
        assert_eq!(decoded.records.len(), 3, "cut at {cut}");
        assert_eq!(decoded.valid_bytes, last_start);
        let clean_cut = cut == last_start;
        assert_eq!(
            decoded.tail,
            if clean_cut { Tail::Clean } else { Tail::Torn }
        );
    }
}

#[test]
fn a_damaged_record_ends_the_valid_ones_and_says_where() {
    let positions = four();
    let mut file = file_of(&positions);
    let second = record::encode(&positions[0]).len();
    file[second + 12] ^= 0x40;
    let decoded = record::decode(&file);
    assert_eq!(decoded.records.len(), 1);
    assert_eq!(decoded.valid_bytes, second);
    assert_eq!(
        decoded.tail,
        Tail::Damaged {
            at: second,
            problem: RecordProblem::Crc
        }
    );
    let mut huge = file_of(&positions[..1]);
    huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    assert!(matches!(
        record::decode(&huge).tail,
        Tail::Damaged {
            problem: RecordProblem::TooLong(_),
            ..
        }
    ));
}

#[test]
fn recovery_keeps_what_the_log_holds_and_cuts_a_set_only_partly_in_it() {
    let positions = four();
    let file = file_of(&positions);
    let kept_three = file.len() - record::encode(&positions[3]).len();

    let whole = PositionBook::recover(&file, 460);
    assert_eq!(
        (whole.keep_bytes, whole.cut_log_to, whole.dropped),
        (file.len(), None, 0)
    );
    assert_eq!(whole.book.resume_at(&key(0)), Some(300));

    // The last set's data never reached the log: its record goes. The log's bytes 360..400
    // have no record (an append whose record the crash lost while the disk kept its bytes:
    // never flushed), so the log is cut back to where the records end.
    let lost = PositionBook::recover(&file, 400);
    assert_eq!(
        (lost.keep_bytes, lost.cut_log_to, lost.dropped),
        (kept_three, Some(360), 1)
    );
    assert_eq!(lost.book.resume_at(&key(0)), Some(250));
    let rewritten = PositionBook::recover(&lost.book.records(), 360);
    assert_eq!(
        rewritten.book, lost.book,
        "a rewrite reads back as the same book"
    );

    // Half of it did: the log is cut back to where the records end (before the set, and
    // before the unrecorded bytes ahead of it).
    let torn = PositionBook::recover(&file, 430);
    assert_eq!(
        (torn.keep_bytes, torn.cut_log_to, torn.dropped),
        (kept_three, Some(360), 1)
    );

    // A set torn in the middle of the file: it and everything after go.
    let early = PositionBook::recover(&file, 300);
    assert_eq!(early.cut_log_to, Some(190));
    assert_eq!(early.dropped, 2);
    assert_eq!(early.book.resume_at(&key(0)), Some(100));
    assert_eq!(early.book.resume_at(&key(1)), Some(560));
}

#[test]
fn records_that_do_not_follow_the_log_are_damage() {
    let mut positions = four();
    positions[2].mirror_start = 100;
    let file = file_of(&positions);
    let recovery = PositionBook::recover(&file, 1000);
    let second_end: usize = positions[..2].iter().map(|p| record::encode(p).len()).sum();
    assert_eq!(recovery.keep_bytes, second_end);
    assert!(matches!(
        recovery.tail,
        Tail::Damaged {
            problem: RecordProblem::OutOfOrder,
            ..
        }
    ));
}

#[test]
fn a_set_is_held_new_or_partly_held() {
    let mut book = PositionBook::new();
    let a = key(0);
    assert_eq!(book.decide(&a, 0, 100), Ok(Decision::Append));
    book.record(at(&a, (0, 100), (0, 120))).unwrap();
    assert_eq!(book.decide(&a, 0, 100), Ok(Decision::Held));
    assert_eq!(book.decide(&a, 40, 100), Ok(Decision::Held));
    assert_eq!(book.decide(&a, 100, 180), Ok(Decision::Append));
    assert_eq!(book.decide(&a, 150, 180), Ok(Decision::Append));
    assert_eq!(
        book.decide(&a, 60, 180),
        Ok(Decision::Overlap { held_to: 100 })
    );
    assert_eq!(book.decide(&key(1), 60, 180), Ok(Decision::Append));
    assert!(matches!(
        book.decide(&a, 100, 100),
        Err(PositionError::BadSourceRange { .. })
    ));
    assert!(matches!(
        book.decide(&a, -1, 10),
        Err(PositionError::BadSourceRange { .. })
    ));
}

#[test]
fn a_record_that_goes_back_or_out_of_log_order_is_refused_and_changes_nothing() {
    let mut book = PositionBook::new();
    let a = key(0);
    book.record(at(&a, (0, 100), (0, 120))).unwrap();
    let before = book.clone();
    assert!(matches!(
        book.record(at(&a, (50, 150), (120, 200))),
        Err(PositionError::Backwards { held_to: 100, .. })
    ));
    assert!(matches!(
        book.record(at(&a, (100, 150), (110, 200))),
        Err(PositionError::OutOfLogOrder { known_end: 120, .. })
    ));
    assert!(matches!(
        book.record(at(&a, (100, 150), (130, 130))),
        Err(PositionError::OutOfLogOrder { .. })
    ));
    assert_eq!(book, before);
    // A source offset past the held copy is accepted: the source deleted what lay between.
    book.record(at(&a, (400, 450), (130, 180))).unwrap();
    assert_eq!(book.resume_at(&a), Some(450));
}

#[test]
fn fan_in_is_bounded_and_says_so() {
    let mut book = PositionBook::new();
    for (i, partition) in (0..SOURCES_MAX as u32).enumerate() {
        let start = i as u64 * 10;
        book.record(at(&key(partition), (0, 10), (start, start + 10)))
            .unwrap();
    }
    let end = SOURCES_MAX as u64 * 10;
    assert!(matches!(
        book.record(at(&key(SOURCES_MAX as u32), (0, 10), (end, end + 10))),
        Err(PositionError::TooManySources { .. })
    ));
    // A source partition already known goes on.
    book.record(at(&key(0), (10, 20), (end, end + 10))).unwrap();
}

#[test]
fn translation_lands_at_a_set_boundary_at_or_before_the_reader() {
    let mut book = PositionBook::new();
    for p in four() {
        book.record(p).unwrap();
    }
    let a = key(0);
    assert_eq!(book.translate(&a, 0), Some(0));
    assert_eq!(book.translate(&a, 99), Some(0));
    assert_eq!(book.translate(&a, 100), Some(120));
    assert_eq!(book.translate(&a, 180), Some(120));
    assert_eq!(book.translate(&a, 250), Some(360));
    assert_eq!(book.translate(&a, 300), Some(460));
    assert_eq!(
        book.translate(&a, 9_000),
        Some(460),
        "never past what the mirror holds"
    );
    assert_eq!(book.translate(&key(1), 560), Some(190));
    assert_eq!(book.translate(&key(7), 10), None);
}

#[test]
fn what_is_held_within_a_flushed_end_is_each_source_s_last_set_wholly_below_it() {
    let mut book = PositionBook::new();
    for p in four() {
        book.record(p).unwrap();
    }
    let held = |end| -> Vec<(u32, i64)> {
        book.held_within(end)
            .map(|p| (p.key.partition.partition, p.source_next))
            .collect()
    };
    assert_eq!(held(0), vec![], "nothing is wholly below 0");
    assert_eq!(
        held(119),
        vec![],
        "a set only partly below the end is not held"
    );
    assert_eq!(held(120), vec![(0, 100)]);
    assert_eq!(held(359), vec![(0, 100), (1, 560)]);
    assert_eq!(held(460), vec![(0, 300), (1, 560)]);
    assert_eq!(
        held(u64::MAX),
        book.sources()
            .map(|p| (p.key.partition.partition, p.source_next))
            .collect::<Vec<_>>(),
        "with everything flushed, every source's last position"
    );
}

/// A source partition's messages, `(source offset, size)`, cut into sets at random.
fn messages(rng: &mut ChaCha8Rng, count: usize) -> Vec<(i64, i64)> {
    let mut offset = rng.random_range(0..1000);
    (0..count)
        .map(|_| {
            let size = rng.random_range(10..200);
            let message = (offset, size);
            offset += size;
            message
        })
        .collect()
}

/// A mirror partition fed by a sender that sends sets again at random (a retry after a lost
/// answer, a restart from an old commit, a new owner after a rebalance), cut differently each
/// time: every message of every source partition lands exactly once, in source order.
#[test]
fn whatever_is_sent_again_every_message_lands_exactly_once() {
    for seed in 0..300 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let count = rng.random_range(1..4u32);
        let sources: Vec<(SourceKey, Vec<(i64, i64)>)> = (0..count)
            .map(|p| {
                let n = rng.random_range(1..60);
                (key(p), messages(&mut rng, n))
            })
            .collect();
        let mut book = PositionBook::new();
        let mut log: Vec<(SourceKey, i64)> = Vec::new();
        let mut log_end = 0u64;
        // Each sender's position: where it reads its source next.
        let mut cursors = vec![0usize; sources.len()];
        let mut steps = 0;
        while cursors.iter().zip(&sources).any(|(c, (_, m))| *c < m.len()) {
            steps += 1;
            assert!(steps < 100_000, "seed {seed}: no progress");
            let s = rng.random_range(0..sources.len());
            let (key, msgs) = &sources[s];
            if rng.random_bool(0.15) {
                // Back to an older point: a restart from a stale commit.
                cursors[s] = rng.random_range(0..=cursors[s]);
            }
            if cursors[s] >= msgs.len() {
                continue;
            }
            let take = rng.random_range(1..=(msgs.len() - cursors[s]).min(8));
            let mut set = &msgs[cursors[s]..cursors[s] + take];
            loop {
                let start = set[0].0;
                let next = set[set.len() - 1].0 + set[set.len() - 1].1;
                match book.decide(key, start, next).unwrap() {
                    Decision::Held => break,
                    Decision::Append => {
                        let bytes: u64 = set.iter().map(|m| m.1 as u64).sum();
                        for m in set {
                            log.push((key.clone(), m.0));
                        }
                        let position = at(key, (start, next), (log_end, log_end + bytes));
                        log_end += bytes;
                        book.record(position).unwrap();
                        break;
                    }
                    Decision::Overlap { held_to } => {
                        let keep = set
                            .iter()
                            .position(|m| m.0 >= held_to)
                            .expect("the rest is not held");
                        set = &set[keep..];
                    }
                }
            }
            cursors[s] += take;
            assert!(book.invariants_hold(), "seed {seed}");
        }
        for (key, msgs) in &sources {
            let landed: Vec<i64> = log
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, o)| *o)
                .collect();
            let sent: Vec<i64> = msgs.iter().map(|m| m.0).collect();
            assert_eq!(landed, sent, "seed {seed}: {key}");
        }
    }
}

/// Every translation against the full record of sets: a reader that read up to the offset
/// misses none of the source's later messages from the translated offset on, even after the
/// history was thinned, and never starts past what the mirror holds.
#[test]
fn a_translated_offset_never_skips_an_unread_message() {
    for seed in 0..100 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let a = key(0);
        let n = rng.random_range(1..2_000);
        let msgs = messages(&mut rng, n);
        let mut book = PositionBook::new();
        let mut all = Vec::new();
        let (mut i, mut end) = (0usize, 0u64);
        while i < msgs.len() {
            let take = rng.random_range(1..=(msgs.len() - i).min(5));
            let set = &msgs[i..i + take];
            end += rng.random_range(0..50); // another writer's bytes between sets
            let bytes: u64 = set.iter().map(|m| m.1 as u64).sum();
            let start = set[0].0;
            let next = set[take - 1].0 + set[take - 1].1;
            let position = at(&a, (start, next), (end, end + bytes));
            end += bytes;
            all.push(position.clone());
            book.record(position).unwrap();
            i += take;
        }
        assert!(book.invariants_hold());
        if all.len() > HISTORY_MAX {
            assert!(
                book.records().len() < file_of(&all).len(),
                "seed {seed}: thinned"
            );
        }
        for _ in 0..200 {
            let read_to = rng.random_range(msgs[0].0 - 5..=all.last().unwrap().source_next + 5);
            let from = book.translate(&a, read_to).unwrap();
            assert!(from <= book.end(), "seed {seed}");
            for set in all.iter().filter(|p| p.source_next > read_to) {
                assert!(
                    from <= set.mirror_start,
                    "seed {seed}: read to {read_to}, translated to {from}, skips the set at {}",
                    set.mirror_start
                );
            }
        }
    }
}

#[test]
fn other_appends_are_accounted_for_and_an_unrecorded_tail_is_cut() {
    let a = key(0);
    let mut file = record::encode(&at(&a, (0, 100), (0, 120)));
    file.extend(record::encode_record(&Record::Other {
        start: 120,
        end: 200,
    }));
    file.extend(record::encode(&at(&a, (100, 200), (200, 330))));
    // Everything recorded is in the log: nothing is cut.
    let whole = PositionBook::recover(&file, 330);
    assert_eq!((whole.cut_log_to, whole.dropped), (None, 0));
    assert_eq!(whole.book.end(), 330);
    // The log goes on past the records: those bytes were never flushed.
    let past = PositionBook::recover(&file, 500);
    assert_eq!((past.cut_log_to, past.dropped), (Some(330), 0));
    // The other append is torn: the log is cut where it began, and the set after it goes.
    let torn = PositionBook::recover(&file, 150);
    assert_eq!((torn.cut_log_to, torn.dropped), (Some(120), 2));
    // A rewrite from the book accounts for the same bytes.
    let mut book = PositionBook::new();
    book.record(at(&a, (0, 100), (0, 120))).unwrap();
    book.note_other(120, 200).unwrap();
    let again = PositionBook::recover(&book.records(), 200);
    assert_eq!((again.cut_log_to, again.book.end()), (None, 200));
    assert!(matches!(
        book.note_other(150, 260),
        Err(PositionError::OtherOutOfLogOrder { known_end: 200, .. })
    ));
}
