//! The producer's and the consumer group's decisions: partition choice, batching, range
//! assignment, registration data, wildcard filters, offsets.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tributary_core::consumer::{
    assign, consumer_id, thread_id, BrokerPartition, FilterKind, PartitionOffsets, Registration,
    TopicPattern,
};
use tributary_core::producer::{
    choose, group_by_partition, java_string_hash, BatchPolicy, Candidate,
};

fn bp(s: &str) -> BrokerPartition {
    BrokerPartition::parse(s).unwrap()
}

#[test]
fn range_assignment_sorts_as_strings_and_splits_as_0_7() {
    let partitions: Vec<BrokerPartition> = ["2-0", "10-0", "1-0", "1-1", "2-1"]
        .iter()
        .map(|s| bp(s))
        .collect();
    let threads = vec!["g_b-1".to_string(), "g_a-0".to_string()];
    let owned = assign(&partitions, &threads);
    let names = |t: &str| owned[t].iter().map(ToString::to_string).collect::<Vec<_>>();
    // Sorted as strings: 1-0, 1-1, 10-0, 2-0, 2-1; P=5, C=2: [0,3) and [3,5).
    assert_eq!(names("g_a-0"), ["1-0", "1-1", "10-0"]);
    assert_eq!(names("g_b-1"), ["2-0", "2-1"]);
    let many: Vec<String> = (0..7).map(|i| format!("t-{i}")).collect();
    let owned = assign(&partitions, &many);
    assert_eq!(
        owned.len(),
        5,
        "threads beyond the partition count get nothing"
    );
    assert!(owned.values().all(|p| p.len() == 1));
    assert!(assign(&partitions, &[]).is_empty());
}

#[test]
fn partitions_order_exactly_as_their_string_forms_do() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(23);
    let edges = [
        0,
        1,
        2,
        9,
        10,
        11,
        99,
        100,
        1_000_000_000,
        i32::MAX as i64,
        u32::MAX as i64,
    ];
    let pick = |rng: &mut rand_chacha::ChaCha8Rng, max: i64| -> i64 {
        if rng.random_bool(0.3) {
            edges[rng.random_range(0..edges.len())].min(max)
        } else {
            rng.random_range(0..=max.min(200))
        }
    };
    for _ in 0..20_000 {
        let a = BrokerPartition {
            broker_id: pick(&mut rng, i32::MAX as i64) as i32,
            partition: pick(&mut rng, u32::MAX as i64) as u32,
        };
        let b = BrokerPartition {
            broker_id: pick(&mut rng, i32::MAX as i64) as i32,
            partition: pick(&mut rng, u32::MAX as i64) as u32,
        };
        assert_eq!(
            a.cmp(&b),
            a.to_string().cmp(&b.to_string()),
            "{a} against {b}"
        );
    }
}

#[test]
fn registration_data_reads_both_json_forms_and_wildcards_and_writes_scala_form() {
    let r = Registration::parse("{ \"t1\": 2,\"t2\": 1 }").unwrap();
    assert_eq!(r.encode(), "{ \"t1\": 2,\"t2\": 1 }");
    let plain = Registration::parse("{\"t1\":2}").unwrap();
    assert_eq!(plain.streams_for(["x"]).get("t1"), Some(&2));
    let w = Registration::parse("*3*a.*|b").unwrap();
    assert_eq!(w.encode(), "*3*a.*|b");
    assert_eq!(
        w.streams_for(["abc", "b", "bc"])
            .into_iter()
            .collect::<Vec<_>>(),
        vec![("abc".into(), 3), ("b".into(), 3)]
    );
    let b = Registration::parse("!1!internal.*").unwrap();
    assert_eq!(
        b.streams_for(["internal-x", "orders"])
            .keys()
            .collect::<Vec<_>>(),
        ["orders"]
    );
    for bad in [
        "",
        "nonsense",
        "{\"t\": -1}",
        "*x*a",
        "{t: 1}",
        "*1*(unclosed",
    ] {
        assert!(Registration::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn topic_filters_follow_0_7_1_normalization_and_match_whole_names() {
    let w = TopicPattern::new(FilterKind::Whitelist, " \"orders, clicks.*\" ").unwrap();
    assert_eq!(w.pattern(), "orders|clicks.*");
    assert!(
        w.allows("orders") && w.allows("clicks-2") && !w.allows("orders2") && !w.allows("x-orders")
    );
    let b = TopicPattern::new(FilterKind::Blacklist, "tmp.*").unwrap();
    assert!(b.allows("orders") && !b.allows("tmp1"));
    assert!(TopicPattern::new(FilterKind::Whitelist, "a(").is_err());
    assert_eq!(
        TopicPattern::new(FilterKind::Whitelist, "'a.*'")
            .unwrap()
            .pattern(),
        "a.*",
        "single quotes are stripped too"
    );
}

#[test]
fn ids_follow_0_7() {
    assert_eq!(
        consumer_id("g", None, "host1", 1_325_376_000_000, 0xbeb4_bfc9_0000_0000),
        "g_host1-1325376000000-beb4bfc9"
    );
    assert_eq!(consumer_id("g", Some("fixed"), "h", 0, 0), "g_fixed");
    assert_eq!(thread_id("g_fixed", 2), "g_fixed-2");
}

#[test]
fn offsets_never_commit_past_what_was_handed_out() {
    let mut o = PartitionOffsets::starting_at(100);
    o.fetched_chunk(50);
    assert_eq!(o.to_commit(None), None, "nothing handed out yet");
    o.handed_out(120);
    assert_eq!(o.to_commit(None), Some(120));
    assert_eq!(
        o.to_commit(Some(500)),
        Some(120),
        "never past what was handed out"
    );
    assert_eq!(
        o.to_commit(Some(110)),
        Some(110),
        "less is allowed (the mirror commits what is safe)"
    );
    o.committed_at(110);
    assert_eq!(o.to_commit(Some(105)), None, "never backwards");
    o.handed_out(90);
    assert_eq!(o.consumed(), 120, "a stale chunk's offsets change nothing");
    o.rewind_to_consumed();
    assert_eq!(o.fetched(), 120);
    assert!(o.invariants_hold());
}

#[test]
fn keyed_messages_land_where_a_0_7_string_key_would() {
    assert_eq!(java_string_hash(b"abc"), 96354);
    assert_eq!(java_string_hash(b""), 0);
    assert_eq!(java_string_hash("é".as_bytes()), 233);
    let candidates: Vec<Candidate> = (0..3)
        .flat_map(|b| {
            (0..2).map(move |p| Candidate {
                broker_id: b,
                partition: p,
            })
        })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    assert_eq!(
        choose(&candidates, Some(b"abc"), &mut rng),
        Some(candidates[96354 % 6])
    );
    assert_eq!(choose(&[], None, &mut rng), None);
    let picks: std::collections::BTreeSet<Candidate> = (0..200)
        .filter_map(|_| choose(&candidates, None, &mut rng))
        .collect();
    assert_eq!(
        picks.len(),
        6,
        "unkeyed messages spread over every candidate"
    );
}

#[test]
fn a_batch_is_due_when_full_or_when_its_first_message_has_waited_queue_time() {
    let policy = BatchPolicy {
        batch_size: 3,
        queue_time_ms: 100,
    };
    assert!(!policy.due(0, 0, 1000), "an empty batch is never due");
    assert!(!policy.due(2, 0, 50));
    assert!(policy.due(3, 0, 0));
    assert!(policy.due(1, 0, 100));
    assert_eq!(policy.remaining_ms(0, 40), 60);
}

#[test]
fn a_batch_groups_into_one_set_per_partition_each_in_queue_order() {
    let orders: tributary_core::wire::TopicName = "orders".parse().unwrap();
    // The same name built again (a caller making a new name per message) is the same topic.
    let orders_again: tributary_core::wire::TopicName = "orders".parse().unwrap();
    let audit: tributary_core::wire::TopicName = "audit".parse().unwrap();
    let payload = |i: u8| bytes::Bytes::from(vec![i]);
    let batch = [
        (0, &orders, 0),
        (1, &orders_again, 0),
        (2, &orders, 1),
        (3, &audit, 0),
        (4, &orders, 0),
        (5, &orders, 1),
        (6, &orders_again, 0),
    ];
    let grouped = group_by_partition(
        batch
            .iter()
            .map(|(i, topic, partition)| (*i, *topic, *partition, payload(*i as u8))),
    );
    let sets: Vec<(String, i32, Vec<usize>)> = grouped
        .iter()
        .map(|((topic, partition), items)| {
            for (i, value) in items {
                assert_eq!(value.as_ref(), [*i as u8], "each index keeps its payload");
            }
            let indexes = items.iter().map(|(i, _)| *i).collect();
            (topic.to_string(), *partition, indexes)
        })
        .collect();
    assert_eq!(
        sets,
        [
            ("audit".to_string(), 0, vec![3]),
            ("orders".to_string(), 0, vec![0, 1, 4, 6]),
            ("orders".to_string(), 1, vec![2, 5]),
        ]
    );
}
