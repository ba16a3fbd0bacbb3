//! A directed run of two mirrors deciding at the same moment, in opposite directions, whether
//! to copy `orders` (no renaming), while both clusters' ZooKeeper followers are behind.
//!
//! Both clusters already hold a record for `orders` (its messages also come from a third
//! cluster, `south`): a session reading a record that exists is answered from its follower's
//! view without a write on the way (a missing record's read creates the parent nodes, and that
//! write would catch the session up as well as a sync does).
//!
//! Each gate reads the topic's record in its source, records its route in its target, and reads
//! the source's record again. A follower that is behind serves each session what it last caught
//! up to, so the second read, unless synced first, misses the record the other mirror has just
//! written: both copy, and `orders` goes round for ever. With the sync, the second of the two
//! second reads sees the first mirror's record (written before the first's second read), so at
//! least one refuses. With the sync planted away (`OriginReadNotSynced`) both must copy, which
//! shows the steps still reach the situation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tributary::mirror::origins::{OriginGate, Verdict};
use tributary::origin_store::OriginStore;
use tributary_core::config::ZkConnect;
use tributary_core::identity::{ClusterId, ClusterIdentity, ClusterName};
use tributary_core::origin::{routes_into, Origins};
use tributary_core::planted::{plant, Bug};
use tributary_core::wire::TopicName;
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::sim_builder;
use tributary_sim::world::ZK_PORT;
use tributary_sim::zk_model::{lag_followers, serve, ModelState};

const SESSION: Duration = Duration::from_secs(6);

fn identity(name: &str, byte: u8) -> ClusterIdentity {
    ClusterIdentity {
        id: ClusterId::from_random([byte; 16]),
        name: Some(ClusterName::parse(name).unwrap()),
    }
}

/// Both gates' verdicts on `orders`, by direction (`east→west`, `west→east`).
fn race(planted: bool) -> BTreeMap<String, Verdict> {
    let mut sim = sim_builder(1)
        .simulation_duration(Duration::from_secs(60))
        .build();
    let verdicts = Arc::new(Mutex::new(BTreeMap::new()));
    let clusters = [("east", 1u8), ("west", 2u8)];
    let mut models = Vec::new();
    for (name, _) in clusters {
        let model = Arc::new(Mutex::new(ModelState::default()));
        models.push(model.clone());
        sim.host(format!("{name}-zk"), move || {
            let model = model.clone();
            async move { serve(ZK_PORT, model).await.map_err(Into::into) }
        });
    }
    // `south`'s route into both, then the followers fall behind (from the servers' next expiry
    // check) until long after both decisions.
    sim.client("admin", async move {
        let env = SimEnv::new(3);
        let south = routes_into(&identity("south", 3), &Origins::default())?;
        for ((name, _), model) in clusters.into_iter().zip(&models) {
            let connect = ZkConnect::parse(&format!("{name}-zk:{ZK_PORT}"))?;
            let store = OriginStore::new(env.clone(), connect, SESSION, SESSION);
            store.merge(&"orders".parse()?, &south).await?;
            store.close().await;
            lag_followers(model, Duration::from_secs(30));
        }
        Ok(())
    });
    for ((from, a), (to, b)) in [(clusters[0], clusters[1]), (clusters[1], clusters[0])] {
        let verdicts = verdicts.clone();
        sim.client(format!("mirror-{from}-{to}"), async move {
            let env = SimEnv::new(u64::from(a));
            let store = |cluster: &str| {
                let connect = ZkConnect::parse(&format!("{cluster}-zk:{ZK_PORT}")).unwrap();
                Arc::new(OriginStore::new(env.clone(), connect, SESSION, SESSION))
            };
            // Once the lag has begun.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let gate = OriginGate::new(
                identity(from, a),
                identity(to, b),
                None,
                store(from),
                store(to),
            );
            let topic: TopicName = "orders".parse().unwrap();
            let (verdict, _) = gate.verdict(&topic).await;
            verdicts
                .lock()
                .unwrap()
                .insert(format!("{from}→{to}"), verdict);
            Ok(())
        });
    }
    if planted {
        plant(&[Bug::OriginReadNotSynced]);
    }
    let run = sim.run();
    plant(&[]);
    run.unwrap();
    let verdicts = verdicts.lock().unwrap().clone();
    assert_eq!(verdicts.len(), 2, "both gates decide: {verdicts:?}");
    verdicts
}

fn refused(verdicts: &BTreeMap<String, Verdict>) -> usize {
    verdicts
        .values()
        .filter(|v| matches!(v, Verdict::Refused(why) if why.contains("loop forever")))
        .count()
}

#[test]
fn two_mirrors_deciding_at_once_behind_lagging_followers_do_not_both_copy() {
    let verdicts = race(false);
    assert!(
        refused(&verdicts) >= 1,
        "both directions copy `orders`: {verdicts:?}"
    );
}

#[test]
fn without_the_sync_both_mirrors_copy() {
    let verdicts = race(true);
    assert_eq!(
        refused(&verdicts),
        0,
        "the directed steps no longer reach the race: {verdicts:?}"
    );
}
