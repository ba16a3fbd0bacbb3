//! Cluster identity: the node's format, ids and names, and what a component does with what it
//! finds.

use tributary_core::identity::{
    reconcile, ClusterId, ClusterIdentity, ClusterName, IdentityError, Reconcile,
};

fn named(id: &str, name: Option<&str>) -> ClusterIdentity {
    ClusterIdentity {
        id: ClusterId::parse(id).unwrap(),
        name: name.map(|n| ClusterName::parse(n).unwrap()),
    }
}

#[test]
fn ids_are_16_random_bytes_in_url_safe_base64() {
    assert_eq!(
        ClusterId::from_random([0; 16]).as_str(),
        "AAAAAAAAAAAAAAAAAAAAAA"
    );
    let mut bytes = [0xff; 16];
    bytes[0] = 0xfb;
    let id = ClusterId::from_random(bytes);
    assert_eq!(id.as_str().len(), 22);
    assert!(id.as_str().starts_with("-_"), "{id}");
    // Every id made is one `parse` accepts.
    assert_eq!(ClusterId::parse(id.as_str()).unwrap(), id);
}

#[test]
fn the_node_reads_what_it_wrote_and_what_kafka_writes() {
    for identity in [named("abc-DEF_123", Some("east")), named("x", None)] {
        assert_eq!(
            ClusterIdentity::decode(&identity.encode()).unwrap(),
            identity
        );
    }
    assert_eq!(
        named("abc", Some("east")).encode(),
        br#"{"version":"1","id":"abc","name":"east"}"#
    );
    // Kafka 0.10+'s node, with spaces and keys in another order, and a key we do not know.
    let kafka = br#" { "id" : "Lt4oM2fURDKexS-ZEpRfaw", "version":"1", "later":"x" } "#;
    assert_eq!(
        ClusterIdentity::decode(kafka).unwrap(),
        named("Lt4oM2fURDKexS-ZEpRfaw", None)
    );
}

#[test]
fn a_damaged_node_is_an_error_that_says_what_is_wrong() {
    let cases: [&[u8]; 8] = [
        b"",
        b"{}",
        b"not json",
        br#"{"id":1}"#,
        br#"{"id":"a b"}"#,
        br#"{"id":"ok","name":"bad name"}"#,
        br#"{"id":"ok""#,
        &[0xff, 0xfe],
    ];
    for data in cases {
        let error = ClusterIdentity::decode(data).unwrap_err();
        assert!(
            matches!(
                error,
                IdentityError::Malformed(_) | IdentityError::Invalid { .. }
            ),
            "{data:?}: {error:?}"
        );
    }
    assert!(ClusterIdentity::decode(&vec![b' '; 2000]).is_err());
}

#[test]
fn names_and_ids_are_checked() {
    for good in ["east", "dc-1", "A_b"] {
        assert!(ClusterName::parse(good).is_ok(), "{good}");
    }
    for bad in ["", "has space", "dot.ted", "slash/", &"x".repeat(65)] {
        assert!(ClusterName::parse(bad).is_err(), "{bad:?}");
        assert!(ClusterId::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn the_first_component_creates_the_identity_and_the_others_use_it() {
    let fresh = ClusterId::parse("fresh").unwrap();
    let east = ClusterName::parse("east").unwrap();
    assert_eq!(
        reconcile(None, Some(&east), fresh.clone()).unwrap(),
        Reconcile::Create(named("fresh", Some("east")))
    );
    assert_eq!(
        reconcile(None, None, fresh.clone()).unwrap(),
        Reconcile::Create(named("fresh", None))
    );
    let stored = named("old", Some("east"));
    assert_eq!(
        reconcile(Some(stored.clone()), None, fresh.clone()).unwrap(),
        Reconcile::Use(stored.clone())
    );
    assert_eq!(
        reconcile(Some(stored.clone()), Some(&east), fresh.clone()).unwrap(),
        Reconcile::Use(stored)
    );
    // A name given to a cluster that had none is recorded, the id kept.
    assert_eq!(
        reconcile(Some(named("old", None)), Some(&east), fresh.clone()).unwrap(),
        Reconcile::Name(named("old", Some("east")))
    );
    // Another name than the recorded one: the component points at the wrong cluster.
    let west = ClusterName::parse("west").unwrap();
    let mismatch = reconcile(Some(named("old", Some("east"))), Some(&west), fresh).unwrap_err();
    assert!(
        mismatch.to_string().contains("cluster.name is west"),
        "{mismatch}"
    );
}
