//! Where a TLS client finds a broker's SSL listener (`tls::endpoints::EndpointBook`, reading
//! `/tributary/endpoints/<id>`) while its ZooKeeper restarts: a lookup ZooKeeper cannot answer
//! falls back to the address as given (the TLS handshake with a plaintext port then fails
//! loudly and the caller retries), and the next lookup after ZooKeeper is back finds the SSL
//! listener within a second or so — not after the book's 30 s re-read interval.

use std::time::Duration;

use tributary::coordination::{Coordination, NodeKind};
use tributary::env::Env;
use tributary::tls::endpoints::EndpointBook;
use tributary_core::config::ZkConnect;
use tributary_core::zk_layout::BROKER_ENDPOINTS_PATH;
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::Disk;
use tributary_sim::zk_model::{crash_and_restart, ModelCoordination};

const SESSION: Duration = Duration::from_secs(4);
const CONNECTION: Duration = Duration::from_secs(2);
const OUTAGE: Duration = Duration::from_secs(8);

#[test]
fn a_lookup_during_a_zookeeper_restart_falls_back_and_the_next_one_after_it_finds_the_ssl_listener()
{
    let (mut sim, model) = crate::support::zk_model_world(120);
    sim.client("client", async move {
        let broker = ModelCoordination::connect("zk", 2181, SESSION, CONNECTION).await?;
        let path = format!("{BROKER_ENDPOINTS_PATH}/0");
        broker.ensure_parents(&path).await?;
        broker
            .create(
                &path,
                b"PLAINTEXT://b0:9092,SSL://b0:9093",
                NodeKind::Persistent,
            )
            .await?;
        let env = SimEnv::on_disk(1, Disk::perfect());
        let book = EndpointBook::new(ZkConnect::parse("zk:2181")?, SESSION, CONNECTION);
        assert_eq!(
            book.ssl_endpoint(&env, "b0", 9092).await,
            ("b0".to_string(), 9093),
            "the SSL listener of a registered broker"
        );
        // A host the book has not seen sends it back to ZooKeeper, which is now down.
        crash_and_restart(&model, OUTAGE);
        // Time from the environment (the simulated clock).
        let since = |at: i64| Duration::from_millis((env.now_ms() - at).max(0) as u64);
        let down_at = env.now_ms();
        // Past the book's least time between two reads (1 s), so the lookup goes to ZooKeeper.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            book.ssl_endpoint(&env, "b1", 9092).await,
            ("b1".to_string(), 9092),
            "with ZooKeeper down, the address as given"
        );
        // The lookup tried ZooKeeper until its connection timeout: it did not read it.
        assert!(
            since(down_at) >= Duration::from_millis(1500) + CONNECTION,
            "the lookup answered {:?} into the outage: ZooKeeper was not down",
            since(down_at)
        );
        assert_eq!(
            book.ssl_endpoint(&env, "b0", 9092).await,
            ("b0".to_string(), 9093),
            "a broker known before the outage is forgotten while ZooKeeper is down"
        );
        // Broker 1 registers once ZooKeeper is back (the broker's own session reconnects).
        let registered_at = loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let second = ModelCoordination::connect("zk", 2181, SESSION, CONNECTION).await;
            let Ok(second) = second else { continue };
            second
                .create(
                    &format!("{BROKER_ENDPOINTS_PATH}/1"),
                    b"PLAINTEXT://b1:9092,SSL://b1:9093",
                    NodeKind::Persistent,
                )
                .await?;
            break env.now_ms();
        };
        let into_outage = Duration::from_millis((registered_at - down_at).max(0) as u64);
        assert!(
            into_outage >= OUTAGE - Duration::from_secs(1),
            "ZooKeeper answered {into_outage:?} into an outage of {OUTAGE:?}"
        );
        // A client retrying its connect every 500 ms finds the SSL listener soon after.
        let after = loop {
            if book.ssl_endpoint(&env, "b1", 9092).await == ("b1".to_string(), 9093) {
                break since(registered_at);
            }
            assert!(
                since(registered_at) < Duration::from_secs(60),
                "the book never found broker 1's SSL listener after ZooKeeper came back"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert!(
            after <= Duration::from_secs(5),
            "the SSL listener was found {after:?} after it was registered (the book waits out its re-read interval after a failed read)"
        );
        assert_eq!(
            book.ssl_endpoint(&env, "b0", 9092).await,
            ("b0".to_string(), 9093),
            "broker 0 after the outage"
        );
        Ok(())
    });
    sim.run().unwrap();
}
