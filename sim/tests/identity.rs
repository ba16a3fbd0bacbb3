//! Cluster identity in ZooKeeper, against the ZooKeeper model: created once by the first
//! component that needs it, whoever races; named once; a damaged node or an unreachable
//! ZooKeeper is an error, never a fresh identity.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tributary::coordination::identity::{ensure_identity, read_identity, ClusterIdentityError};
use tributary::coordination::{Coordination, NodeKind};
use tributary_core::identity::{ClusterName, CLUSTER_ID_PATH};
use tributary_sim::zk_model::{crash_and_restart, ModelCoordination, ModelState};

const SESSION: Duration = Duration::from_secs(4);

fn world() -> (turmoil::Sim<'static>, Arc<Mutex<ModelState>>) {
    crate::support::zk_model_world(60)
}

async fn session() -> ModelCoordination {
    ModelCoordination::connect("zk", 2181, SESSION, SESSION)
        .await
        .expect("a session")
}

#[test]
fn racing_components_agree_on_one_identity_and_its_name() {
    let (mut sim, _model) = world();
    sim.client("a", async {
        let east = ClusterName::parse("east").unwrap();
        let (one, two) = (session().await, session().await);
        // Two components that both find none race to create it: one id wins, for both.
        let (first, second) = tokio::join!(
            ensure_identity(&one, None, 1),
            ensure_identity(&two, None, 2)
        );
        let (first, second) = (first?, second?);
        assert_eq!(first, second);
        assert_eq!(first.name, None);
        // A broker given a name records it; the id stays.
        let named = ensure_identity(&one, Some(&east), 3).await?;
        assert_eq!(
            (named.id.clone(), named.name.clone()),
            (first.id.clone(), Some(east))
        );
        assert_eq!(read_identity(&two).await?, Some(named.clone()));
        // Another name is refused: that component points at another cluster than it was told.
        let west = ClusterName::parse("west").unwrap();
        match ensure_identity(&two, Some(&west), 4).await {
            Err(ClusterIdentityError::Name(mismatch)) => {
                assert_eq!(mismatch.recorded, named)
            }
            other => panic!("expected a name mismatch, got {other:?}"),
        }
        Ok(())
    });
    sim.run().unwrap();
}

#[test]
fn a_damaged_identity_is_an_error_and_is_never_replaced() {
    let (mut sim, model) = world();
    sim.client("a", async move {
        let coord = session().await;
        coord.ensure_parents(CLUSTER_ID_PATH).await?;
        coord
            .create(CLUSTER_ID_PATH, b"not an identity", NodeKind::Persistent)
            .await?;
        match ensure_identity(&coord, None, 1).await {
            Err(ClusterIdentityError::Damaged(_)) => {}
            other => panic!("expected a damaged identity, got {other:?}"),
        }
        assert_eq!(
            model.lock().unwrap().data(CLUSTER_ID_PATH).as_deref(),
            Some(&b"not an identity"[..])
        );
        Ok(())
    });
    sim.run().unwrap();
}

#[test]
fn an_unreachable_zookeeper_is_an_error_not_a_new_identity() {
    let (mut sim, model) = world();
    sim.client("a", async move {
        let coord = session().await;
        let before = ensure_identity(&coord, None, 1).await?;
        crash_and_restart(&model, Duration::from_secs(10));
        match ensure_identity(&coord, None, 2).await {
            Err(ClusterIdentityError::ZooKeeper(_)) => {}
            other => panic!("expected a ZooKeeper error while it is down, got {other:?}"),
        }
        tokio::time::sleep(Duration::from_secs(12)).await;
        assert_eq!(ensure_identity(&session().await, None, 3).await?, before);
        Ok(())
    });
    sim.run().unwrap();
}

/// A mirror whose producer reaches the source's ZooKeeper by its address instead of its name.
/// Refused at start by identity; with the check planted away, the mirror starts and copies the
/// cluster into itself (the topic grows with no producer).
#[test]
fn a_mirror_into_its_source_through_another_address_is_refused_and_the_planted_bug_copies() {
    use rand::SeedableRng;
    use tributary::mirror::{Mirror, MirrorError, MirrorSettings};
    use tributary::producer::{Producer, Record};
    use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
    use tributary_core::planted::{plant, Bug};
    use tributary_sim::env::SimEnv;
    use tributary_sim::world::{add_cluster, ClusterSpec, Control};

    // Clean: refused at start by identity. Identity ignored (the check by host name alone): it
    // starts, and the origin check refuses the topic (its first copy would record the cluster
    // on its own route). Both removed: it copies the cluster into itself.
    for planted in [
        &[][..],
        &[Bug::IdentityIgnored],
        &[Bug::IdentityIgnored, Bug::LoopCheckDisabled],
    ] {
        plant(planted);
        let mut builder = tributary_sim::sim_fs::sim_builder(3);
        builder.simulation_duration(Duration::from_secs(60));
        let mut sim = builder.build();
        let control = Arc::new(Control::default());
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        add_cluster(&mut sim, &ClusterSpec::new("src", 1, 1), &mut rng, &control);
        /// The mirror's start (its refusal), and the topic's end before and after.
        type Outcome = (Result<(), String>, i64, i64);
        let outcome: Arc<Mutex<Option<Outcome>>> = Arc::default();
        let told = outcome.clone();
        sim.client("maker", async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let config = |text: &str| Properties::parse("test", text).unwrap();
            let producer = Producer::start(
                SimEnv::new(1),
                ProducerConfig::from_properties(&config(
                    "zk.connect=src-zk:2181\nproducer.type=sync\ndurable.acks=true\n",
                ))
                .unwrap(),
            )
            .await?;
            for i in 0..5 {
                producer
                    .send(Record::new(
                        "t".parse().unwrap(),
                        format!("m{i}").into_bytes(),
                    ))
                    .await?
                    .await?;
            }
            let end = || async {
                let mut conn = tributary::client::connect(
                    &SimEnv::new(2),
                    "src-broker0",
                    9092,
                    Duration::from_secs(5),
                )
                .await
                .unwrap();
                let (ends, _) =
                    tributary::client::latest_offsets(&mut conn, &[("t".parse().unwrap(), 0)])
                        .await;
                ends[0].unwrap_or(-1)
            };
            let before = end().await;
            // The source's ZooKeeper by its address: another name for the same cluster.
            let address = turmoil::lookup("src-zk");
            let consumer = ConsumerConfig::from_properties(&config(
                "zk.connect=src-zk:2181\ngroupid=mirror\nautooffset.reset=smallest\n",
            ))
            .unwrap();
            let target = ProducerConfig::from_properties(&config(&format!(
                "zk.connect={address}:2181\nproducer.type=async\nqueue.enqueueTimeout.ms=-1\n"
            )))
            .unwrap();
            let started =
                Mirror::start(SimEnv::new(3), MirrorSettings::embedded(consumer, target)).await;
            let result = match started {
                Ok(mirror) => {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    drop(mirror);
                    Ok(())
                }
                Err(MirrorError::Config(e)) => Err(e.to_string()),
                Err(e) => panic!("expected a refusal or a start, got {e}"),
            };
            let after = end().await;
            *told.lock().unwrap() = Some((result, before, after));
            Ok(())
        });
        sim.run().unwrap();
        plant(&[]);
        let (result, before, after) = outcome.lock().unwrap().take().expect("the maker ran");
        if planted.len() == 2 {
            assert!(result.is_ok(), "the planted bugs still refused: {result:?}");
            assert!(
                after > before,
                "the planted bugs copied nothing ({before} → {after})"
            );
        } else if planted.len() == 1 {
            assert!(
                result.is_ok(),
                "identity ignored, yet refused at start: {result:?}"
            );
            assert_eq!(
                after, before,
                "the origin check let the copy into itself through"
            );
        } else {
            let refusal = result.expect_err("the mirror into itself started");
            assert!(refusal.contains("are the same cluster"), "{refusal}");
            assert_eq!(after, before, "something was copied");
        }
    }
}

/// A running mirror learns its clusters' identities again every 30 s: when the source's
/// address comes to lead to another cluster (here: the node rewritten, as a ZooKeeper moved
/// behind the same name would show it), the run stops with an error naming both, instead of
/// copying on from another cluster with offsets that mean nothing there.
#[test]
fn a_running_mirror_whose_source_becomes_another_cluster_stops_and_says_so() {
    use rand::SeedableRng;
    use tributary::mirror::{Mirror, MirrorError, MirrorSettings};
    use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
    use tributary_core::identity::{ClusterId, ClusterIdentity};
    use tributary_sim::env::SimEnv;
    use tributary_sim::world::{add_cluster, ClusterSpec, Control};

    let mut builder = tributary_sim::sim_fs::sim_builder(5);
    builder.simulation_duration(Duration::from_secs(120));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    add_cluster(&mut sim, &ClusterSpec::new("src", 1, 1), &mut rng, &control);
    add_cluster(&mut sim, &ClusterSpec::new("dst", 1, 1), &mut rng, &control);
    /// How the run ended, and how long after the change.
    type Outcome = (Result<(), String>, Duration);
    let outcome: Arc<Mutex<Option<Outcome>>> = Arc::default();
    let told = outcome.clone();
    sim.client("maker", async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let config = |text: &str| Properties::parse("test", text).unwrap();
        let consumer = ConsumerConfig::from_properties(&config(
            "zk.connect=src-zk:2181\ngroupid=mirror\nautooffset.reset=smallest\n",
        ))
        .unwrap();
        let target = ProducerConfig::from_properties(&config(
            "zk.connect=dst-zk:2181\nproducer.type=async\nqueue.enqueueTimeout.ms=-1\n",
        ))
        .unwrap();
        let mirror = Mirror::start(SimEnv::new(3), MirrorSettings::embedded(consumer, target))
            .await
            .expect("the mirror starts");
        // The source's identity changes under the running mirror.
        let changed_at = {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let src = ModelCoordination::connect("src-zk", 2181, SESSION, SESSION)
                .await
                .expect("a session");
            let other = ClusterIdentity {
                id: ClusterId::parse("AnotherCluster").unwrap(),
                name: None,
            };
            src.set(CLUSTER_ID_PATH, &other.encode(), None)
                .await
                .expect("rewritten");
            turmoil::sim_elapsed().unwrap_or_default()
        };
        let ended = mirror
            .run_until(tokio::time::sleep(Duration::from_secs(60)))
            .await;
        let after = turmoil::sim_elapsed().unwrap_or_default() - changed_at;
        let result = match ended {
            Ok(()) => Ok(()),
            Err(MirrorError::Source(e)) => Err(e.to_string()),
            Err(e) => Err(format!("another error: {e}")),
        };
        *told.lock().unwrap() = Some((result, after));
        Ok(())
    });
    sim.run().unwrap();
    let (result, after) = outcome.lock().unwrap().take().expect("the maker ran");
    let said = result.expect_err("the mirror went on copying another cluster");
    assert!(
        said.contains("is now cluster AnotherCluster"),
        "the error does not name the new cluster: {said}"
    );
    assert!(
        after <= Duration::from_secs(45),
        "noticed {after:?} after the change"
    );
}
