//! The coordination conformance suite against the ZooKeeper model (in turmoil) and against a
//! real ZooKeeper (Debian's package, started on a free port).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tributary::coordination::zk::ZkCoordination;
use tributary_core::config::ZkConnect;
use tributary_sim::conformance;
use tributary_sim::zk_model::{crash_and_restart, lag_followers, ModelCoordination, ModelState};
use tributary_tests::zookeeper::ZooKeeper;

const SESSION: Duration = Duration::from_secs(4);

/// A simulation of 120 s with the ZooKeeper model serving on `zk:2181`, and the model's state.
fn model_world() -> (turmoil::Sim<'static>, Arc<Mutex<ModelState>>) {
    crate::support::zk_model_world(120)
}

#[test]
fn the_model_passes_the_conformance_suite() {
    let (mut sim, _model) = model_world();
    sim.client("tester", async {
        conformance::run("/conformance", || {
            ModelCoordination::connect("zk", 2181, SESSION, SESSION)
        })
        .await?;
        Ok(())
    });
    sim.run().unwrap();
}

#[test]
fn the_model_restarts_as_a_real_zookeeper_does() {
    let (mut sim, model) = model_world();
    sim.client("tester", async move {
        conformance::run_restarts(
            "/restarts",
            SESSION,
            || ModelCoordination::connect("zk", 2181, SESSION, SESSION),
            |down| {
                let model = model.clone();
                async move {
                    crash_and_restart(&model, down);
                    // A real server takes a moment to start.
                    tokio::time::sleep(down + Duration::from_millis(500)).await;
                }
            },
        )
        .await?;
        Ok(())
    });
    sim.run().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_zookeeper_restarts_as_the_suite_states() {
    let zk = Arc::new(Mutex::new(ZooKeeper::start()));
    let connect = ZkConnect::parse(&zk.lock().unwrap().connect_string()).unwrap();
    conformance::run_restarts(
        "/restarts",
        SESSION,
        || ZkCoordination::connect(&connect, SESSION, SESSION),
        |down| {
            let zk = zk.clone();
            async move {
                tokio::task::spawn_blocking(move || zk.lock().unwrap().restart(down))
                    .await
                    .unwrap();
            }
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_zookeeper_passes_the_conformance_suite() {
    let zk = ZooKeeper::start();
    let connect = ZkConnect::parse(&zk.connect_string()).unwrap();
    conformance::run("/conformance", || {
        ZkCoordination::connect(&connect, SESSION, SESSION)
    })
    .await
    .unwrap();
}

/// The model alone (turmoil can cut one link): a watch whose event is sent on a connection the
/// network has cut still fires, once the client reconnects and sets its watches again with the
/// last zxid it saw (ZooKeeper's `SetWatches`). Without it, a consumer cut from ZooKeeper while
/// a peer's session expires never rebalances.
#[test]
fn a_watch_whose_event_is_lost_with_its_connection_fires_after_the_reconnect() {
    use tributary::coordination::{Coordination, NodeKind};
    let (mut sim, _model) = model_world();
    // 0: starting; 1: the watch is set; 2: the watcher is cut off (the writer may write).
    let phase = Arc::new(Mutex::new(0u8));
    let fired = Arc::new(Mutex::new(None));
    {
        let (phase, fired) = (phase.clone(), fired.clone());
        sim.client("watcher", async move {
            let watcher = ModelCoordination::connect("zk", 2181, SESSION, SESSION).await?;
            watcher.create("/w", b"x", NodeKind::Persistent).await?;
            let (_, _, watch) = watcher.get_and_watch("/w").await?;
            *phase.lock().unwrap() = 1;
            let outcome = tokio::time::timeout(Duration::from_secs(30), watch).await;
            *fired.lock().unwrap() = Some(outcome.is_ok());
            Ok(())
        });
    }
    {
        let phase = phase.clone();
        sim.client("writer", async move {
            while *phase.lock().unwrap() < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let writer = ModelCoordination::connect("zk", 2181, SESSION, SESSION).await?;
            writer.set("/w", b"y", None).await?;
            Ok(())
        });
    }
    // Cut the watcher off once its watch is set (the change's event goes out on the cut
    // connection), and heal well within its session's timeout.
    let mut cut_at = None;
    while fired.lock().unwrap().is_none() {
        if cut_at.is_none() && *phase.lock().unwrap() == 1 {
            sim.partition("watcher", "zk");
            cut_at = Some(sim.elapsed());
            *phase.lock().unwrap() = 2;
        }
        if cut_at.is_some_and(|at| sim.elapsed() >= at + Duration::from_millis(1500)) {
            sim.repair("watcher", "zk");
        }
        sim.step().unwrap();
    }
    assert_eq!(
        *fired.lock().unwrap(),
        Some(true),
        "the watch never fired after the reconnect"
    );
}

/// The model alone (a single real server never lags): while the followers are behind, a
/// session reads what it last caught up to (a session opened during the lag, the tree as the
/// lag began), so it misses another session's write, and a watch
/// it set on that stale view fires once it catches up; its own writes and a `sync` bring it up
/// to date, its reads never go back, and when the lag ends every session sees everything.
#[test]
fn lagging_followers_give_zookeepers_guarantees_and_no_more() {
    use tributary::coordination::{Coordination, NodeKind};
    let (mut sim, model) = model_world();
    let done = Arc::new(Mutex::new(false));
    {
        let done = done.clone();
        sim.client("tester", async move {
            let a = ModelCoordination::connect("zk", 2181, SESSION, SESSION).await?;
            let b = ModelCoordination::connect("zk", 2181, SESSION, SESSION).await?;
            a.create("/l", b"0", NodeKind::Persistent).await?;
            lag_followers(&model, Duration::from_secs(20));
            // The lag begins at the server's next expiry check.
            tokio::time::sleep(Duration::from_millis(300)).await;
            b.set("/l", b"1", None).await?;
            assert_eq!(b.get("/l").await?.0, b"1", "a session reads its own write");
            assert_eq!(
                a.get("/l").await?.0,
                b"0",
                "a lagging session misses another's write"
            );
            let c = ModelCoordination::connect("zk", 2181, SESSION, SESSION).await?;
            assert_eq!(
                c.get("/l").await?.0,
                b"0",
                "a session opened during the lag may be shown the tree as the lag began"
            );
            c.sync("/l").await?;
            assert_eq!(c.get("/l").await?.0, b"1", "and catches up on sync");
            let (_, _, watch) = a.get_and_watch("/l").await?;
            a.sync("/l").await?;
            assert!(
                tokio::time::timeout(Duration::from_millis(100), watch)
                    .await
                    .is_ok(),
                "a watch set on a stale view fires when the session catches up"
            );
            assert_eq!(
                a.get("/l").await?.0,
                b"1",
                "a read after sync sees the write"
            );
            b.set("/l", b"2", None).await?;
            assert_eq!(a.get("/l").await?.0, b"1", "still behind after the sync");
            a.create("/other", b"", NodeKind::Persistent).await?;
            assert_eq!(
                a.get("/l").await?.0,
                b"2",
                "a session's own write catches it up"
            );
            let (_, _, watch) = a.get_and_watch("/l").await?;
            b.set("/l", b"3", None).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(a.get("/l").await?.0, b"2", "behind while the lag lasts");
            assert!(
                tokio::time::timeout(Duration::from_secs(25), watch)
                    .await
                    .is_ok(),
                "a watch fires when the lag ends"
            );
            assert_eq!(
                a.get("/l").await?.0,
                b"3",
                "every session sees everything after"
            );
            *done.lock().unwrap() = true;
            Ok(())
        });
    }
    sim.run().unwrap();
    assert!(*done.lock().unwrap());
}
