//! A failed fsync, then a process restart, then a machine crash: bytes the failed fsync left
//! only in the page cache survive the process restart, so recovery finds them; if it served and
//! checkpointed them without syncing, the machine crash would take them back and the next start
//! would refuse the partition for good.
//!
//! The same shape with a segment instead of bytes: a log's creation whose segment sync fails
//! leaves the empty segment in the page cache only; the restart finds it, and if its first
//! flushes synced the file but never the directory holding it, the machine crash would take the
//! whole segment back — with the data the checkpoint promised.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tributary_core::config::{BrokerConfig, Properties};
use tributary_core::log::{Log, LogManager, TopicPartition};
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_sim::sim_fs::{sim_builder, Disk, SimFs, SIM_EPOCH_MS};

type Manager = LogManager<SimFs, Mutex<Log<SimFs>>>;

/// What each phase saw, for the test to judge after the simulation.
#[derive(Debug, Default)]
struct Seen {
    /// The restarted process served (took as flushed) this end before the machine crashed.
    served_end: Option<u64>,
    /// After the machine crash: partitions refused, and the flushed end of the partition.
    after_crash: Option<(Vec<String>, Option<u64>)>,
    /// Anything that went wrong where nothing should have.
    failure: Option<String>,
}

fn config() -> BrokerConfig {
    let text = "brokerid=0\nlog.dir=/data/logs\nenable.zookeeper=false\nnum.partitions=1\n\
                log.flush.interval=1000000\n";
    BrokerConfig::from_properties(&Properties::parse("test", text).expect("properties"))
        .expect("config")
}

fn now_ms() -> i64 {
    SIM_EPOCH_MS
        + i64::try_from(turmoil::sim_elapsed().unwrap_or_default().as_millis()).unwrap_or(0)
}

fn set(text: &'static str) -> Bytes {
    MessageSetBuilder::new()
        .push(text.as_bytes())
        .build(CompressionCodec::None)
}

/// Every partition's flushed end, checkpointed (the broker's flush timer does this).
fn checkpoint(manager: &Manager) -> Result<u64, String> {
    let mut ends = std::collections::BTreeMap::new();
    let mut end = 0;
    for (tp, log) in manager.all() {
        let log = log.lock().map_err(|e| e.to_string())?;
        end = log.flushed_end();
        ends.insert(tp, end);
    }
    manager.write_checkpoint(ends).map_err(|e| e.to_string())?;
    Ok(end)
}

/// Phase 0: a durable set, then a set whose fsync fails; the process restarts (the page cache
/// survives) and recovers, serves and checkpoints what it found.
fn before_the_crash(disk: &Arc<Disk>, tp: &TopicPartition) -> Result<u64, String> {
    let fs = SimFs::on_disk(disk.clone());
    let (manager, _) = Manager::open(fs.clone(), config(), now_ms()).map_err(|e| e.to_string())?;
    let (log, _) = manager
        .get_or_create(tp, now_ms())
        .map_err(|e| e.to_string())?;
    {
        let mut log = log.lock().map_err(|e| e.to_string())?;
        log.append(&set("durable"), now_ms())
            .map_err(|e| e.to_string())?;
        log.flush(now_ms()).map_err(|e| e.to_string())?;
    }
    checkpoint(&manager)?;
    {
        let mut log = log.lock().map_err(|e| e.to_string())?;
        log.append(&set("only in the page cache"), now_ms())
            .map_err(|e| e.to_string())?;
        disk.fail_syncs_after(0);
        if log.flush(now_ms()).is_ok() {
            return Err("a flush succeeded on a disk whose syncs fail".into());
        }
        disk.fail_syncs_after(u64::MAX);
    }
    // The process stops without a clean shutdown; a new one opens the same files.
    drop(log);
    drop(manager);
    let (manager, report) = Manager::open(fs, config(), now_ms()).map_err(|e| e.to_string())?;
    if let Some((tp, why)) = report.refused.first() {
        return Err(format!("the restart refused {tp}: {why}"));
    }
    checkpoint(&manager)
}

/// Phase 1, after the machine crash: what a new process finds.
fn after_the_crash(tp: &TopicPartition) -> Result<(Vec<String>, Option<u64>), String> {
    let fs = SimFs::on_disk(Disk::perfect());
    let (manager, report) = Manager::open(fs, config(), now_ms()).map_err(|e| e.to_string())?;
    let refused = report
        .refused
        .iter()
        .map(|(tp, why)| format!("{tp}: {why}"))
        .collect();
    let end = match manager.get(tp) {
        Some(log) => Some(log.lock().map_err(|e| e.to_string())?.flushed_end()),
        None => None,
    };
    Ok((refused, end))
}

/// Phase 0: creating the log fails at its segment's sync (the empty segment is in the page
/// cache only); the process stops cleanly; a new one finds the segment, appends, flushes and
/// checkpoints.
fn after_a_failed_creation(disk: &Arc<Disk>, tp: &TopicPartition) -> Result<u64, String> {
    let fs = SimFs::on_disk(disk.clone());
    {
        let (manager, _) =
            Manager::open(fs.clone(), config(), now_ms()).map_err(|e| e.to_string())?;
        disk.fail_syncs_after(0);
        if manager.get_or_create(tp, now_ms()).is_ok() {
            return Err("a log was created on a disk whose syncs fail".into());
        }
        disk.fail_syncs_after(u64::MAX);
        manager.write_clean_marker().map_err(|e| e.to_string())?;
    }
    let (manager, report) = Manager::open(fs, config(), now_ms()).map_err(|e| e.to_string())?;
    if !report.opened.contains(tp) {
        return Err(format!(
            "the restart did not find the segment the failed creation left: {report:?}"
        ));
    }
    let (log, _) = manager
        .get_or_create(tp, now_ms())
        .map_err(|e| e.to_string())?;
    {
        let mut log = log.lock().map_err(|e| e.to_string())?;
        log.append(&set("flushed after the restart"), now_ms())
            .map_err(|e| e.to_string())?;
        log.flush(now_ms()).map_err(|e| e.to_string())?;
    }
    checkpoint(&manager)
}

#[test]
fn a_machine_crash_after_a_failed_fsync_and_a_restart_takes_back_nothing_the_restart_served() {
    crash_after(732, before_the_crash);
}

#[test]
fn a_machine_crash_after_a_failed_creation_and_a_restart_takes_back_nothing_the_restart_served() {
    crash_after(42_321, after_a_failed_creation);
}

/// Runs `before` on a host, crashes the machine, and checks that the next start serves
/// everything `before` served and checkpointed.
fn crash_after(seed: u64, before: fn(&Arc<Disk>, &TopicPartition) -> Result<u64, String>) {
    let mut builder = sim_builder(seed);
    builder.simulation_duration(Duration::from_secs(600));
    let mut sim = builder.build();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let phase = Arc::new(AtomicU8::new(0));
    let disk = Disk::perfect();
    {
        let (seen, phase) = (seen.clone(), phase.clone());
        sim.host("broker", move || {
            let (seen, phase, disk) = (seen.clone(), phase.clone(), disk.clone());
            async move {
                let tp = TopicPartition::new("t".parse().expect("topic"), 0);
                {
                    let mut seen = seen.lock().expect("seen");
                    let result = if phase.load(Ordering::SeqCst) == 0 {
                        before(&disk, &tp).map(|end| seen.served_end = Some(end))
                    } else {
                        after_the_crash(&tp).map(|after| seen.after_crash = Some(after))
                    };
                    if let Err(e) = result {
                        seen.failure.get_or_insert(e);
                    }
                }
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    let done = |seen: &Arc<Mutex<Seen>>, after: bool| {
        let seen = seen.lock().expect("seen");
        seen.failure.is_some()
            || if after {
                seen.after_crash.is_some()
            } else {
                seen.served_end.is_some()
            }
    };
    while !done(&seen, false) {
        sim.step().expect("simulation");
    }
    // The machine crashes: whatever was never synced is gone.
    sim.crash("broker");
    phase.store(1, Ordering::SeqCst);
    sim.bounce("broker");
    while !done(&seen, true) {
        sim.step().expect("simulation");
    }
    let seen = seen.lock().expect("seen");
    assert_eq!(seen.failure, None);
    let served = seen.served_end.expect("the restart served");
    let (refused, end) = seen.after_crash.clone().expect("the last start ran");
    assert!(
        refused.is_empty(),
        "the start after the machine crash refused: {refused:?}"
    );
    assert_eq!(
        end,
        Some(served),
        "the restart served up to {served}; after the machine crash the log ends at {end:?}"
    );
}
