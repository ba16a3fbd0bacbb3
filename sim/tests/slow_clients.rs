//! Peers that hold a broker connection without completing a request (anyone who can reach the
//! plaintext port, or any authenticated peer of the SSL one): a started request must arrive
//! whole within the broker's deadline however its bytes are spread, while a connection between
//! requests may idle until its own, longer deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tributary::broker::limits::{IDLE_TIMEOUT, REQUEST_READ_TIMEOUT};
use tributary::broker::Broker;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::{sim_builder, Disk};

/// Runs a standalone broker and `client` against it; `client` returns how long after its
/// first byte the broker closed the connection (`None`: never, within the simulation).
fn against_a_broker<F>(seconds: u64, client: fn(turmoil::net::TcpStream) -> F) -> Option<Duration>
where
    F: std::future::Future<Output = Option<Duration>> + 'static,
{
    let mut sim = sim_builder(21)
        .simulation_duration(Duration::from_secs(seconds))
        .build();
    sim.host("broker", || async {
        let text = "brokerid=0\nport=9092\nlog.dir=/data/logs\nenable.zookeeper=false\n";
        let config = BrokerConfig::from_properties(&Properties::parse("test", text)?)?;
        let broker = Broker::start(SimEnv::on_disk(21, Disk::perfect()), config).await?;
        broker.run_until(std::future::pending()).await?;
        Ok(())
    });
    let closed = Arc::new(Mutex::new(None));
    let out = closed.clone();
    sim.client("peer", async move {
        // Let the broker bind.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let stream = turmoil::net::TcpStream::connect(("broker", 9092)).await?;
        *out.lock().unwrap() = Some(client(stream).await);
        Ok(())
    });
    sim.run().unwrap();
    let result = closed.lock().unwrap().take();
    result.expect("the client ran to its end")
}

/// Whether the broker has closed `stream` (a read returning end of file or an error) within
/// `wait`.
async fn closed_within(stream: &mut turmoil::net::TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(wait, stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[test]
fn a_request_trickled_a_byte_at_a_time_is_cut_off_at_its_deadline() {
    let cut_after = against_a_broker(560, |mut stream| async move {
        let started = tokio::time::Instant::now();
        // A FETCH announcing 100 bytes, then one byte every 5 s: each byte arrives well
        // within the deadline, the request never does.
        if stream.write_all(&100i32.to_be_bytes()).await.is_err() {
            return Some(started.elapsed());
        }
        for _ in 0..100 {
            if closed_within(&mut stream, Duration::from_secs(5)).await
                || stream.write_all(&[0]).await.is_err()
            {
                return Some(started.elapsed());
            }
        }
        None
    });
    let cut_after = cut_after.expect("a request trickled for 500 s was never cut off");
    assert!(
        cut_after >= REQUEST_READ_TIMEOUT
            && cut_after <= REQUEST_READ_TIMEOUT + Duration::from_secs(6),
        "cut off {cut_after:?} after its first byte, not at the {REQUEST_READ_TIMEOUT:?} deadline"
    );
}

#[test]
fn a_connection_idle_between_requests_is_kept_until_the_idle_deadline() {
    let closed_after = against_a_broker(IDLE_TIMEOUT.as_secs() + 100, |mut stream| async move {
        let started = tokio::time::Instant::now();
        closed_within(&mut stream, IDLE_TIMEOUT + Duration::from_secs(60))
            .await
            .then(|| started.elapsed())
    });
    let closed_after = closed_after.expect("an idle connection was never closed");
    assert!(
        // Counted from the connect's return, a network delay after the broker's accept.
        closed_after >= IDLE_TIMEOUT - Duration::from_secs(1)
            && closed_after <= IDLE_TIMEOUT + Duration::from_secs(1),
        "an idle connection closed after {closed_after:?}, not at {IDLE_TIMEOUT:?}"
    );
}
