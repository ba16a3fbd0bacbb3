//! A panic in any broker task stops the broker and says so; it is never swallowed.

use std::time::Duration;

use tributary::broker::{Broker, BrokerError};
use tributary::client::connect;
use tributary::env::TokioEnv;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::planted::{plant, Bug};
use tributary_core::wire::{OffsetsRequest, Request};

// One thread: the planted bug is per thread, and every broker task runs on this one.
#[tokio::test(flavor = "current_thread")]
async fn a_panicking_connection_task_stops_the_broker_with_the_panic() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "brokerid=0\nport=0\nhostname=127.0.0.1\nlog.dir={}\nenable.zookeeper=false\n",
        dir.path().display()
    );
    let config = BrokerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap();
    let broker = Broker::start(TokioEnv, config).await.unwrap();
    let port = broker.addr.port();
    plant(&[Bug::PanicInRequest]);
    let client = tokio::spawn(async move {
        let mut conn = connect(&TokioEnv, "127.0.0.1", port, Duration::from_secs(5))
            .await
            .unwrap();
        let offsets = Request::Offsets(OffsetsRequest {
            topic: "t".parse().unwrap(),
            partition: 0,
            time: -1,
            max_offsets: 1,
        });
        conn.call(&offsets).await
    });
    let stopped = tokio::time::timeout(
        Duration::from_secs(20),
        broker.run_until(std::future::pending()),
    )
    .await;
    plant(&[]);
    match stopped.expect("the broker kept running after a task panicked") {
        Err(BrokerError::Panicked { task, message }) => {
            assert_eq!(task, "a connection task");
            assert!(message.contains("planted bug"), "{message}");
        }
        other => panic!("expected the panic to stop the broker, got {other:?}"),
    }
    assert!(
        client.await.unwrap().is_err(),
        "the client got an answer from a panicked handler"
    );
}
