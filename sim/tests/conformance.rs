//! The coordination conformance suite against the ZooKeeper model (in turmoil) and against a
//! real ZooKeeper (Debian's package, started on a free port).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tributary::coordination::zk::ZkCoordination;
use tributary_core::config::ZkConnect;
use tributary_sim::conformance;
use tributary_sim::zk_model::{crash_and_restart, serve, ModelCoordination, ModelState};
use tributary_tests::zookeeper::ZooKeeper;

const SESSION: Duration = Duration::from_secs(4);

#[test]
fn the_model_passes_the_conformance_suite() {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(120))
        .build();
    let model = Arc::new(Mutex::new(ModelState::default()));
    sim.host("zk", move || serve(2181, model.clone()).map_ok_box());
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
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(120))
        .build();
    let model = Arc::new(Mutex::new(ModelState::default()));
    let served = model.clone();
    sim.host("zk", move || serve(2181, served.clone()).map_ok_box());
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

trait MapOkBox {
    fn map_ok_box(
        self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = turmoil::Result> + 'static>>;
}

impl<F: std::future::Future<Output = std::io::Result<()>> + 'static> MapOkBox for F {
    fn map_ok_box(
        self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = turmoil::Result> + 'static>> {
        Box::pin(async move { self.await.map_err(|e| e.into()) })
    }
}
