//! A real Kafka 0.7 client, node-kafka 0.2.3 (npm), against the real broker: it produces
//! magic-0 messages and fetches them back; our own client reads the same bytes.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tributary_core::message::DeepIter;
use tributary_core::wire::{ErrorCode, FetchRequest, Request, Response};
use tributary_tests::broker::BrokerProcess;
use tributary_tests::zookeeper::free_port;

#[tokio::test]
async fn node_kafka_produces_and_fetches_through_tributary() {
    let node_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
    assert!(
        node_dir.join("node_modules/kafka").exists(),
        "node-kafka is missing: run scripts/install-deps.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let properties = format!("brokerid=0\nhostname=127.0.0.1\nport={port}\nlog.dir={}\nenable.zookeeper=false\nlog.flush.interval=1\n", dir.path().join("logs").display());
    let _broker = BrokerProcess::start(dir.path(), port, &properties);

    let out = Command::new("node")
        .arg(node_dir.join("interop.js"))
        .args([&port.to_string(), "from-node", "5"])
        .current_dir(&node_dir)
        .output()
        .expect("node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "node-kafka failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Magic-0 entry of "node message i" = 4 + 1 + 4 + 14 bytes; node-kafka reports each next offset.
    let expected: Vec<String> = (0..5)
        .map(|i| format!("got from-node node message {i} next={}", 23 * (i + 1)))
        .collect();
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);

    let mut conn = tributary::client::connect(
        &tributary::env::TokioEnv,
        "127.0.0.1",
        port,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let request = Request::Fetch(FetchRequest {
        topic: "from-node".parse().unwrap(),
        partition: 0,
        offset: 0,
        max_bytes: 1 << 20,
    });
    let Response::Fetch(f) = conn.call(&request).await.unwrap() else {
        panic!("expected a FETCH response")
    };
    assert_eq!(f.error, ErrorCode::NoError);
    let payloads: Vec<String> = DeepIter::new(f.messages, 0, 1 << 20)
        .map(|e| String::from_utf8(e.unwrap().message.payload.to_vec()).unwrap())
        .collect();
    assert_eq!(
        payloads,
        (0..5)
            .map(|i| format!("node message {i}"))
            .collect::<Vec<_>>()
    );
}
