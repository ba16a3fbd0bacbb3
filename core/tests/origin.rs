//! Origin records and the loop check: what a mirror records in the mirror cluster, and which
//! copies it refuses; the active-active rename rule.

use tributary_core::config::{ConsumerConfig, Properties};
use tributary_core::identity::{ClusterId, ClusterIdentity, ClusterName};
use tributary_core::mirror::rename::{RenameError, RenameRule};
use tributary_core::origin::{
    check_copy, routes_into, Hop, Origins, OriginsError, HOPS_MAX, ROUTES_MAX,
};
use tributary_core::wire::TopicName;

fn cluster(id: &str, name: Option<&str>) -> ClusterIdentity {
    ClusterIdentity {
        id: ClusterId::parse(id).unwrap(),
        name: name.map(|n| ClusterName::parse(n).unwrap()),
    }
}

fn topic(name: &str) -> TopicName {
    name.parse().unwrap()
}

/// The record `target` holds for a topic after a mirror copied it from `source`, whose record
/// for it was `in_source`.
fn copied(source: &ClusterIdentity, in_source: &Origins) -> Origins {
    routes_into(source, in_source).unwrap()
}

#[test]
fn a_topic_copied_one_way_may_not_come_back() {
    let (east, west) = (cluster("E1", Some("east")), cluster("W1", Some("west")));
    let local = Origins::default();
    // east → west: a local topic may go.
    check_copy(&topic("orders"), &east, &west, &local).unwrap();
    let in_west = copied(&east, &local);
    assert!(in_west.passed_through(&east.id));
    // west → east: refused, naming the route.
    let refused = check_copy(&topic("orders"), &west, &east, &in_west).unwrap_err();
    assert_eq!(refused.route, "east → west");
    let said = refused.to_string();
    assert!(
        said.contains("orders") && said.contains("from west into east"),
        "{said}"
    );
    // ... but west → a third cluster may.
    check_copy(&topic("orders"), &west, &cluster("N1", None), &in_west).unwrap();
}

#[test]
fn a_cycle_of_three_is_refused_where_it_closes() {
    let (a, b, c) = (cluster("A", None), cluster("B", None), cluster("C", None));
    let in_b = copied(&a, &Origins::default());
    check_copy(&topic("t"), &b, &c, &in_b).unwrap();
    let in_c = copied(&b, &in_b);
    // C's record: B's local writes ([B]) and A's through B ([A, B]).
    assert_eq!(in_c.routes().count(), 2);
    let refused = check_copy(&topic("t"), &c, &a, &in_c).unwrap_err();
    assert_eq!(refused.route, "A → B → C");
    // A renamed topic keeps its record: the check does not look at names.
    check_copy(&topic("b.t"), &c, &a, &in_c).unwrap_err();
}

#[test]
fn records_merge_by_cluster_id_and_read_back_what_they_wrote() {
    let (a, b) = (cluster("A", Some("east")), cluster("B", None));
    let from_a = copied(&a, &Origins::default());
    let from_b = copied(&b, &from_a);
    let merged = from_a.merged(&from_b).unwrap();
    assert!(merged.covers(&from_a) && merged.covers(&from_b));
    assert!(!from_a.covers(&from_b));
    assert_eq!(Origins::decode(&merged.encode()).unwrap(), merged);
    assert_eq!(
        String::from_utf8(from_b.encode()).unwrap(),
        r#"{"version":1,"routes":[["A/east","B"],["B"]]}"#
    );
    // The same cluster under a name learnt later is the same hop.
    let unnamed = copied(&cluster("A", None), &Origins::default());
    assert!(from_a.covers(&unnamed));
    // Empty data and spaced JSON read too.
    assert!(Origins::decode(b"").unwrap().is_empty());
    let spaced = Origins::decode(b"{ \"version\": 1, \"routes\": [ [\"A\", \"B\"] ] }").unwrap();
    assert!(spaced.passed_through(&ClusterId::parse("B").unwrap()));
}

#[test]
fn a_renamed_copy_records_its_sources_partition_count_and_merging_keeps_the_larger() {
    let a = cluster("A", Some("east"));
    let plain = copied(&a, &Origins::default());
    assert_eq!(plain.partitions(), None);
    let three = plain.clone().with_partitions(3).unwrap();
    assert_eq!(
        String::from_utf8(three.encode()).unwrap(),
        r#"{"version":1,"routes":[["A/east"]],"partitions":3}"#
    );
    assert_eq!(Origins::decode(&three.encode()).unwrap(), three);
    // A record with no route yet still carries its count.
    let only = Origins::default().with_partitions(8).unwrap();
    assert!(!only.is_empty());
    assert_eq!(
        Origins::decode(&only.encode()).unwrap().partitions(),
        Some(8)
    );
    let spaced = Origins::decode(b"{ \"version\":1, \"routes\":[[\"A\"]], \"partitions\": 5 }");
    assert_eq!(spaced.unwrap().partitions(), Some(5));
    // A count is something to write until the record has it (or more); never lowered.
    assert!(!plain.covers(&three));
    assert!(three.covers(&plain));
    let five = plain.clone().with_partitions(5).unwrap();
    assert_eq!(three.merged(&five).unwrap().partitions(), Some(5));
    assert_eq!(five.merged(&three).unwrap().partitions(), Some(5));
    assert_eq!(five.merged(&plain).unwrap().partitions(), Some(5));
    assert!(five.covers(&three));
    for bad in [0, 65_537] {
        assert!(plain.clone().with_partitions(bad).is_err(), "{bad}");
    }
}

#[test]
fn malformed_and_oversized_records_are_refused_not_read_as_empty() {
    for bad in [
        &b"{\"version\":2,\"routes\":[]}"[..],
        b"{\"routes\":[[\"A\"]]}",
        b"{\"version\":1,\"routes\":[[\"A\"]],\"x\":1}",
        b"{\"version\":1,\"routes\":[[A]]}",
        b"{\"version\":1,\"routes\":[[]]}",
        b"{\"version\":1,\"routes\":[[\"A\"][\"B\"]]}",
        b"{\"version\":1,\"routes\":[[[\"A\"]]]}",
        b"{\"version\":1,\"routes\":[[\"a b\"]]}",
        b"{\"version\":1,\"routes\":[[\"A\"]],\"partitions\":0}",
        b"{\"version\":1,\"routes\":[[\"A\"]],\"partitions\":65537}",
        b"{\"version\":1,\"routes\":[[\"A\"]],\"partitions\":-1}",
        b"{\"version\":1,\"routes\":[[\"A\"]],\"partitions\":}",
        b"{\"version\":1,\"routes\":[[\"A\"]],\"partitions\":\"3\"}",
        b"{\"version\":1,\"routes\":[[\"A\"]],\"partitions\":99999999999}",
        b"{\"version\":1,\"routes\":[[\"A\"]],\"partitions\":3,\"x\":1}",
        b"{\"version\":1,\"routes\":[[\"A\"]],\"partitions\":3",
        b"\xff",
    ] {
        assert!(
            Origins::decode(bad).is_err(),
            "{:?} was read",
            String::from_utf8_lossy(bad)
        );
    }
    let long_route: Vec<Hop> = (0..=HOPS_MAX)
        .map(|i| Hop(cluster(&format!("c{i}"), None)))
        .collect();
    assert!(matches!(
        Origins::from_routes([long_route]),
        Err(OriginsError::TooBig(_))
    ));
    let many = (0..=ROUTES_MAX).map(|i| vec![Hop(cluster(&format!("c{i}"), None))]);
    assert!(matches!(
        Origins::from_routes(many),
        Err(OriginsError::TooBig(_))
    ));
    assert!(matches!(
        Origins::decode(&vec![b' '; 20_000]),
        Err(OriginsError::TooBig(_))
    ));
    // Within the counts but past 16 KiB once encoded (64-character ids and names): refused
    // when built, so a record that could not be read back is never written.
    let long = |i: usize| {
        let id = format!("{i:0>64}");
        Hop(cluster(&id, Some(&format!("n{id}")[..64])))
    };
    let big = (0..ROUTES_MAX).map(|r| (0..HOPS_MAX).map(|h| long(r * HOPS_MAX + h)).collect());
    assert!(matches!(
        Origins::from_routes(big),
        Err(OriginsError::TooBig(_))
    ));
}

#[test]
fn renaming_prefixes_the_source_clusters_name_by_default() {
    let rule = RenameRule::parse("{source}.{topic}").unwrap();
    let east = cluster("E1", Some("east"));
    assert_eq!(
        rule.apply(&east, &topic("orders")).unwrap(),
        topic("east.orders")
    );
    // Without a name there is nothing to prefix: refused, saying what to do.
    let err = rule
        .apply(&cluster("E1", None), &topic("orders"))
        .unwrap_err();
    assert!(matches!(err, RenameError::NoSourceName(_)));
    assert!(err.to_string().contains("cluster.name"), "{err}");
    // Other patterns.
    let suffix = RenameRule::parse("{topic}-from-dc2").unwrap();
    assert_eq!(
        suffix
            .apply(&cluster("E1", None), &topic("orders"))
            .unwrap(),
        topic("orders-from-dc2")
    );
    for bad in ["{source}", "{topic}.{topic}", "a b.{topic}", "{topic}/x"] {
        assert!(RenameRule::parse(bad).is_err(), "{bad} was taken");
    }
    // A result over the topic name limit (249 bytes) is refused, not cut.
    let long = "t".repeat(248);
    assert!(matches!(
        rule.apply(&east, &topic(&long)),
        Err(RenameError::Renamed { .. })
    ));
}

fn consumer(extra: &str) -> Result<ConsumerConfig, tributary_core::config::ConfigError> {
    let text = format!("zk.connect=localhost:2181\ngroupid=g\n{extra}");
    ConsumerConfig::from_properties(&Properties::parse("consumer.properties", &text).unwrap())
}

#[test]
fn renaming_is_off_unless_asked_for_and_a_bad_pattern_names_its_key() {
    assert_eq!(consumer("").unwrap().mirror.rename, None);
    let on = consumer("mirror.rename.topics=true").unwrap();
    assert_eq!(on.mirror.rename.unwrap().to_string(), "{source}.{topic}");
    let custom = consumer("mirror.rename.topics=true\nmirror.rename.pattern=dc2_{topic}").unwrap();
    assert_eq!(custom.mirror.rename.unwrap().to_string(), "dc2_{topic}");
    let err = consumer("mirror.rename.topics=true\nmirror.rename.pattern=x").unwrap_err();
    assert!(err.to_string().contains("mirror.rename.pattern"), "{err}");
}
