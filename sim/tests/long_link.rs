//! The long link in the simulator: the link proxy's timing exactly, and the mirror across a
//! 1 Gb/s link with a 100 ms round trip — at least 0.8 of the link with settings sized for it,
//! and 0.7's one fetch at a time per broker falling short on the same link.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tributary_sim::env::SimEnv;
use tributary_sim::long_link::{run, Options};
use tributary_sim::sim_fs::sim_builder;
use tributary_tools::link_proxy::{LinkProxy, LinkSpec};

/// 8 partitions of 16 MB: 128 MB across the link (about 1 s at its rate).
const PARTITIONS: u32 = 8;
const BYTES_PER_PARTITION: usize = 16_000_000;

#[test]
fn the_mirror_fills_a_long_fat_link_with_a_fetcher_per_partition() {
    let options = Options::tuned(PARTITIONS, BYTES_PER_PARTITION);
    let report = run(1, &options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.copied_bytes, report.source_bytes, "{report:?}");
    assert!(
        report.ratio >= 0.8,
        "the mirror ran at {:.2} of the link: {report:?}",
        report.ratio
    );
    // The watcher samples every 20 ms: a rate above the link's by more than that error would
    // mean the link is not capping.
    assert!(report.ratio <= 1.05, "faster than the link: {report:?}");
    // Every copied byte crossed the link (plus the fetch answers' framing).
    assert!(report.link_bytes >= report.source_bytes, "{report:?}");
}

#[test]
fn one_fetch_at_a_time_per_broker_cannot_fill_the_same_link() {
    let seven =
        run(1, &Options::seven(PARTITIONS, BYTES_PER_PARTITION)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(seven.copied_bytes, seven.source_bytes, "{seven:?}");
    // 8 partitions x 1 MiB per round trip plus its time on the wire: about 0.4 of the link.
    assert!(
        (0.3..0.6).contains(&seven.ratio),
        "0.7's settings ran at {:.2} of the link: {seven:?}",
        seven.ratio
    );
}

#[test]
fn the_same_seed_copies_in_the_same_simulated_time() {
    let options = Options::tuned(4, 4_000_000);
    let a = run(3, &options).unwrap_or_else(|e| panic!("{e}"));
    // The second run's tasks get other ids (see `shift_task_ids`).
    tributary_sim::host::shift_task_ids(2);
    let b = run(3, &options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((a.elapsed, a.link_bytes), (b.elapsed, b.link_bytes));
}

/// The proxy on turmoil: a small message takes the round trip (plus at most 1 ms a hop of the
/// simulated network), and 1 MB takes its time on a 10 MB/s wire on top.
#[test]
fn the_link_proxy_adds_its_round_trip_and_holds_the_rate() {
    let mut sim = sim_builder(5)
        .min_message_latency(Duration::ZERO)
        .max_message_latency(Duration::from_millis(1))
        .build();
    sim.host("echo", || async {
        let listener = turmoil::net::TcpListener::bind(("0.0.0.0", 7000)).await?;
        loop {
            let (mut conn, _) = listener.accept().await?;
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                loop {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if conn.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    let spec = LinkSpec::new(Duration::from_millis(100), Some(10_000_000));
    sim.host("link", move || async move {
        let proxy =
            LinkProxy::start(SimEnv::new(5), "0.0.0.0", 7001, ("echo".into(), 7000), spec).await?;
        proxy.run_until(std::future::pending()).await?;
        Ok(())
    });
    let times = Arc::new(Mutex::new(Vec::new()));
    let seen = times.clone();
    sim.client("client", async move {
        let mut conn = turmoil::net::TcpStream::connect(("link", 7001)).await?;
        let started = tokio::time::Instant::now();
        conn.write_all(b"ping").await?;
        let mut back = [0u8; 4];
        conn.read_exact(&mut back).await?;
        seen.lock().unwrap().push(started.elapsed());
        let started = tokio::time::Instant::now();
        let bulk = vec![7u8; 1_000_000];
        let (mut r, mut w) = conn.into_split();
        let writer = tokio::spawn(async move { w.write_all(&bulk).await });
        let mut got = vec![0u8; 1_000_000];
        r.read_exact(&mut got).await?;
        writer.await??;
        seen.lock().unwrap().push(started.elapsed());
        assert!(got.iter().all(|b| *b == 7));
        Ok(())
    });
    sim.run().unwrap();
    let times = times.lock().unwrap().clone();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    assert!(
        (100.0..=106.0).contains(&ms(times[0])),
        "a ping took {:?}",
        times[0]
    );
    // 1 MB leaves at 10 MB/s (100 ms) each way; the echo sends back as it receives, so the two
    // directions overlap: 100 ms on the wire + 100 ms round trip + the first chunk's wire time.
    assert!(
        (200.0..=220.0).contains(&ms(times[1])),
        "1 MB echoed in {:?}",
        times[1]
    );
}
