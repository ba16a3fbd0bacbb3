//! The simulator's environment: a file range sent to a socket pays its disk's latency while it
//! is sent (as the broker's other disk work pays it in `blocking`), leaving none behind for
//! whatever disk operation comes next.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tributary::env::Env;
use tributary_core::log::{LogFile, LogFs};
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::{sim_builder, Disk, DiskFaults};

#[test]
fn send_file_waits_out_the_disk_latency_of_its_reads() {
    let mut sim = sim_builder(9).build();
    sim.host("reader", || async {
        let listener = turmoil::net::TcpListener::bind(("0.0.0.0", 7000)).await?;
        let (mut conn, _) = listener.accept().await?;
        let mut got = Vec::new();
        conn.read_to_end(&mut got).await?;
        assert_eq!(got.len(), 300_000);
        assert!(got.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
        Ok(())
    });
    let seen = Arc::new(Mutex::new(None));
    let out = seen.clone();
    sim.client("broker", async move {
        let disk = Disk::new(
            DiskFaults {
                latency_max: Duration::from_millis(20),
                ..DiskFaults::default()
            },
            9,
        );
        let env = SimEnv::on_disk(9, disk.clone());
        let fs = env.fs();
        fs.create_dir_all(Path::new("/data"))?;
        let file = fs.open(Path::new("/data/segment"), true)?;
        let bytes: Vec<u8> = (0..300_000).map(|i| (i % 251) as u8).collect();
        file.write_all_at(&bytes, 0)?;
        disk.take_debt();
        let mut conn = env.connect("reader", 7000).await?;
        let started = tokio::time::Instant::now();
        env.send_file(&mut conn, &file, 0, bytes.len()).await?;
        // Five 64 KiB reads, each up to 20 ms: their latency was waited out here.
        *out.lock().unwrap() = Some((started.elapsed(), disk.take_debt()));
        Ok(())
    });
    sim.run().unwrap();
    let (took, left) = seen.lock().unwrap().unwrap();
    assert_eq!(
        left,
        Duration::ZERO,
        "disk latency left for the next operation"
    );
    assert!(took > Duration::ZERO, "the reads took no simulated time");
}

/// A disk whose syncs all fail at shutdown: the broker still stops cleanly (the failure logged),
/// writes no clean-shutdown marker, and starts again from what it had.
#[test]
fn a_broker_stops_when_its_checkpoint_cannot_be_synced_and_recovers_next_start() {
    use tributary::broker::Broker;
    use tributary_core::config::{BrokerConfig, Properties};
    use tributary_core::log::CLEAN_SHUTDOWN_FILE;
    let mut sim = sim_builder(4).build();
    let outcome = Arc::new(Mutex::new(None));
    let out = outcome.clone();
    sim.client("broker", async move {
        let text = "brokerid=0\nport=9092\nlog.dir=/data/logs\nenable.zookeeper=false\n";
        let config = BrokerConfig::from_properties(&Properties::parse("test", text)?)?;
        let disk = Disk::new(
            DiskFaults {
                sync_failures_per_million: 1_000_000,
                ..DiskFaults::default()
            },
            4,
        );
        disk.stop_failing();
        let env = SimEnv::on_disk(4, disk.clone());
        let broker = Broker::start(env.clone(), config.clone()).await?;
        disk.start_failing();
        let stopped = broker.run_until(async {}).await;
        let marker = env
            .fs()
            .exists(&Path::new("/data/logs").join(CLEAN_SHUTDOWN_FILE));
        disk.stop_failing();
        let restarted = Broker::start(env, config).await.map(drop);
        *out.lock().unwrap() = Some((
            stopped.map_err(|e| e.to_string()),
            marker,
            restarted.map_err(|e| e.to_string()),
        ));
        Ok(())
    });
    sim.run().unwrap();
    let (stopped, marker, restarted) = outcome.lock().unwrap().take().unwrap();
    assert_eq!(stopped, Ok(()), "the stop failed on the failing disk");
    assert!(!marker, "a clean-shutdown marker after a failed checkpoint");
    assert_eq!(restarted, Ok(()));
}

/// A disk that dies at any sync of a graceful stop (after each of the first 40): the stop still
/// succeeds (the failure logged), and the broker starts again from what it had: the
/// clean-shutdown marker's fsync may fail after a good checkpoint.
#[test]
fn a_broker_stops_cleanly_whichever_sync_of_its_shutdown_fails() {
    use tributary::broker::Broker;
    use tributary_core::config::{BrokerConfig, Properties};
    let mut stops_with_failed_syncs = 0;
    for good_syncs in 0..40u64 {
        let mut sim = sim_builder(5).build();
        let outcome = Arc::new(Mutex::new(None));
        let out = outcome.clone();
        sim.client("broker", async move {
            let text = "brokerid=0\nport=9092\nlog.dir=/data/logs\nenable.zookeeper=false\nnum.partitions=3\n";
            let config = BrokerConfig::from_properties(&Properties::parse("test", text)?)?;
            let disk = Disk::perfect();
            let env = SimEnv::on_disk(5, disk.clone());
            let broker = Broker::start(env.clone(), config.clone()).await?;
            // Some data in a few partitions, so the stop has logs to close.
            let mut producer = tributary::client::connect(&env, "broker", 9092, Duration::from_secs(5)).await?;
            for partition in 0..3 {
                let set = tributary_core::message::MessageSetBuilder::new()
                    .push(&b"x"[..])
                    .build(tributary_core::message::CompressionCodec::None);
                producer
                    .send(&tributary_core::wire::Request::Produce(tributary_core::wire::ProduceRequest {
                        topic: "t".parse()?,
                        partition,
                        messages: set,
                    }))
                    .await?;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            disk.fail_syncs_after(good_syncs);
            let stopped = broker.run_until(async {}).await;
            let failed = disk.sync_failures();
            disk.fail_syncs_after(u64::MAX);
            let restarted = Broker::start(env, config).await.map(drop);
            *out.lock().unwrap() = Some((
                stopped.map_err(|e| e.to_string()),
                failed,
                restarted.map_err(|e| e.to_string()),
            ));
            Ok(())
        });
        sim.run().unwrap();
        let (stopped, failed, restarted) = outcome.lock().unwrap().take().unwrap();
        assert_eq!(
            stopped,
            Ok(()),
            "the stop failed when syncs failed after the first {good_syncs} ({failed} failed)"
        );
        assert_eq!(restarted, Ok(()), "after {good_syncs} good syncs");
        stops_with_failed_syncs += usize::from(failed > 0);
    }
    assert!(
        stops_with_failed_syncs >= 3,
        "only {stops_with_failed_syncs} of the stops met a failing sync: the sweep tests nothing"
    );
}
