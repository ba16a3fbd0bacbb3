//! The coordination conformance suite against the ZooKeeper model (in turmoil) and against a
//! real ZooKeeper (Debian's package, started on a free port).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tributary::coordination::zk::ZkCoordination;
use tributary_core::config::ZkConnect;
use tributary_sim::conformance;
use tributary_sim::zk_model::{serve, ModelCoordination, ModelState};
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
