//! The link proxy on real sockets: it adds its round trip, holds each direction to its rate,
//! passes a closed side on after the bytes before it, and carries bytes unchanged. (The exact
//! timings are checked in the simulator, `sim/tests/long_link.rs`; here wall-clock bounds are
//! one-sided where the machine's load could stretch them.)

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tributary::env::TokioEnv;
use tributary_tools::link_proxy::{LinkProxy, LinkSpec};

/// A server that echoes every connection until it closes, then closes its side.
async fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = conn.split();
                tokio::io::copy(&mut r, &mut w).await.unwrap();
                w.shutdown().await.unwrap();
            });
        }
    });
    port
}

async fn proxy(upstream: u16, rtt_ms: u64, rate: Option<u64>) -> LinkProxy {
    let spec = LinkSpec::new(Duration::from_millis(rtt_ms), rate);
    LinkProxy::start(
        TokioEnv,
        "127.0.0.1",
        0,
        ("127.0.0.1".to_string(), upstream),
        spec,
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_and_its_answer_take_the_round_trip() {
    let server = echo_server().await;
    let proxy = proxy(server, 100, None).await;
    let mut conn = TcpStream::connect(proxy.local_addr()).await.unwrap();
    for round in 0..3u8 {
        let started = Instant::now();
        conn.write_all(&[round; 10]).await.unwrap();
        let mut back = [0u8; 10];
        conn.read_exact(&mut back).await.unwrap();
        let took = started.elapsed();
        assert_eq!(back, [round; 10]);
        assert!(
            took >= Duration::from_millis(100),
            "round {round} came back in {took:?}, under the 100 ms round trip"
        );
        assert!(took < Duration::from_secs(2), "round {round} took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_transfer_is_held_to_the_rate_and_arrives_unchanged() {
    let server = echo_server().await;
    // 8 MB/s each way, 20 ms round trip: 2 MB takes at least 0.25 s to leave, and as long again
    // to come back, but the two directions overlap.
    let proxy = proxy(server, 20, Some(8_000_000)).await;
    let conn = TcpStream::connect(proxy.local_addr()).await.unwrap();
    let (mut r, mut w) = conn.into_split();
    let sent: Vec<u8> = (0..2_000_000u32)
        .map(|i| (i * 7 + i / 1000) as u8)
        .collect();
    let expected = sent.clone();
    let started = Instant::now();
    let writer = tokio::spawn(async move {
        w.write_all(&sent).await.unwrap();
        w.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    r.read_to_end(&mut back).await.unwrap();
    let took = started.elapsed();
    writer.await.unwrap();
    assert!(
        back == expected,
        "the bytes changed on the way ({} came back)",
        back.len()
    );
    assert!(
        took >= Duration::from_millis(250),
        "2 MB went through an 8 MB/s link in {took:?}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_eq!(
        proxy
            .stats()
            .upstream_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
        2_000_000
    );
    assert_eq!(
        proxy
            .stats()
            .downstream_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
        2_000_000
    );
    proxy.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_closes_the_client_and_stop_closes_everything() {
    // A port nothing listens on.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let proxy = proxy(port, 10, None).await;
    let mut conn = TcpStream::connect(proxy.local_addr()).await.unwrap();
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
        .await
        .expect("the proxy kept a connection it could not carry");
    assert!(matches!(read, Ok(0) | Err(_)), "read {read:?}");

    let server = echo_server().await;
    let proxy = self::proxy(server, 10, None).await;
    let mut open = TcpStream::connect(proxy.local_addr()).await.unwrap();
    open.write_all(b"x").await.unwrap();
    let mut one = [0u8; 1];
    open.read_exact(&mut one).await.unwrap();
    proxy.stop().await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), open.read(&mut one))
        .await
        .expect("a connection outlived the proxy");
    assert!(matches!(read, Ok(0) | Err(_)), "read {read:?}");
}
