//! The log manager: every partition log of one broker, under `log.dir`.
//!
//! Startup: reads (and removes) the clean-shutdown marker, reads the recovery checkpoint, opens
//! every `<topic>-<partition>` directory with recovery, refuses (and reports) partitions that
//! are corrupt, then writes a fresh checkpoint. Running: creates partitions on demand, flushes
//! what is due and applies retention when the caller's timers say so, checkpointing flushed
//! ends. Shutdown: flushes everything, writes the checkpoint and the marker.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::checkpoint::{self, CHECKPOINT_FILE};
use super::error::LogError;
use super::fs::LogFs;
use super::names::TopicPartition;
use super::partition::Log;
use super::policy::LogPolicy;
use super::recovery::RecoveryHints;
use crate::config::BrokerConfig;
use crate::wire::TopicName;

/// The clean-shutdown marker's name inside `log.dir` (0.7's).
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// A partition log shared between request handlers and the flush and retention timers.
pub type SharedLog<F> = Arc<Mutex<Log<F>>>;

/// Locks a shared log, recovering the guard if a holder panicked (the log's own state is only
/// changed after the I/O it depends on succeeded, so it stays consistent).
pub fn lock<F: LogFs>(log: &SharedLog<F>) -> MutexGuard<'_, Log<F>> {
    log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What startup found.
#[derive(Debug, Default)]
pub struct OpenReport {
    /// Whether the previous run shut down cleanly.
    pub clean_shutdown: bool,
    /// Partitions opened and served.
    pub opened: Vec<TopicPartition>,
    /// Partitions refused, with why (corruption below the checkpoint, I/O errors).
    pub refused: Vec<(TopicPartition, String)>,
    /// Entries of `log.dir` that are not partition directories, left alone.
    pub ignored: Vec<String>,
}

/// All partition logs of a broker.
#[derive(Debug)]
pub struct LogManager<F: LogFs + Clone> {
    fs: F,
    config: BrokerConfig,
    log_dir: PathBuf,
    logs: Mutex<BTreeMap<TopicPartition, SharedLog<F>>>,
    refused: BTreeMap<TopicPartition, String>,
}

impl<F: LogFs + Clone> LogManager<F> {
    /// Opens every partition under `config.log_dir`, recovering as needed.
    pub fn open(fs: F, config: BrokerConfig, now_ms: i64) -> Result<(Self, OpenReport), LogError> {
        let log_dir = PathBuf::from(&config.log_dir);
        let io = |op, path: &Path, source| LogError::Io { partition: "log.dir".into(), op, path: path.display().to_string(), source };
        fs.create_dir_all(&log_dir).map_err(|e| io("create directory", &log_dir, e))?;
        let marker = log_dir.join(CLEAN_SHUTDOWN_FILE);
        let mut report = OpenReport { clean_shutdown: fs.exists(&marker), ..OpenReport::default() };
        let checkpoints = read_checkpoint(&fs, &log_dir);
        let mut logs = BTreeMap::new();
        let mut refused = BTreeMap::new();
        for entry in fs.list_dir(&log_dir).map_err(|e| io("list", &log_dir, e))? {
            let tp = TopicPartition::from_dir_name(&entry.name).filter(|_| entry.is_dir);
            let Some(tp) = tp else {
                if !entry.name.starts_with('.') {
                    tracing::warn!("ignoring {} in {}: not a <topic>-<partition> directory", entry.name, log_dir.display());
                    report.ignored.push(entry.name);
                }
                continue;
            };
            let hints = RecoveryHints { clean_shutdown: report.clean_shutdown, checkpoint: checkpoints.as_ref().and_then(|c| c.get(&tp).copied()) };
            let policy = LogPolicy::for_topic(&config, &tp.topic);
            match Log::open(fs.clone(), &log_dir.join(&entry.name), tp.clone(), policy, hints, now_ms) {
                Ok(log) => {
                    report.opened.push(tp.clone());
                    logs.insert(tp, Arc::new(Mutex::new(log)));
                }
                Err(error) => {
                    tracing::error!("{error}");
                    report.refused.push((tp.clone(), error.to_string()));
                    refused.insert(tp, error.to_string());
                }
            }
        }
        if report.clean_shutdown {
            fs.remove_file(&marker).map_err(|e| io("remove", &marker, e))?;
            fs.sync_dir(&log_dir).map_err(|e| io("sync directory", &log_dir, e))?;
        }
        let manager = LogManager { fs, config, log_dir, logs: Mutex::new(logs), refused };
        manager.write_checkpoint()?;
        Ok((manager, report))
    }

    fn logs(&self) -> MutexGuard<'_, BTreeMap<TopicPartition, SharedLog<F>>> {
        self.logs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The broker configuration the logs follow.
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// Partitions `topic` has on this broker (per-topic override, else `num.partitions`).
    pub fn partition_count(&self, topic: &TopicName) -> u32 {
        self.config.partitions_for(topic)
    }

    /// The log of `tp`, if it exists and is served.
    pub fn get(&self, tp: &TopicPartition) -> Option<SharedLog<F>> {
        self.logs().get(tp).cloned()
    }

    /// The log of `tp`, created (durably) if it does not exist. Refuses partitions outside the
    /// topic's count and partitions refused at startup.
    pub fn get_or_create(&self, tp: &TopicPartition, now_ms: i64) -> Result<SharedLog<F>, LogError> {
        if let Some(reason) = self.refused.get(tp) {
            return Err(LogError::Corrupt { partition: tp.to_string(), segment: String::new(), offset: 0, detail: reason.clone() });
        }
        let count = self.partition_count(&tp.topic);
        if tp.partition >= count {
            return Err(LogError::UnknownPartition { partition: tp.to_string(), count });
        }
        let mut logs = self.logs();
        if let Some(log) = logs.get(tp) {
            return Ok(log.clone());
        }
        let policy = LogPolicy::for_topic(&self.config, &tp.topic);
        let log = Log::create(self.fs.clone(), &self.log_dir.join(tp.dir_name()), tp.clone(), policy, now_ms)?;
        tracing::info!("{tp}: created log");
        let shared = Arc::new(Mutex::new(log));
        logs.insert(tp.clone(), shared.clone());
        Ok(shared)
    }

    /// Every served partition.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        self.logs().keys().cloned().collect()
    }

    /// Whether `topic` has at least one served partition (without listing every topic).
    pub fn has_topic(&self, topic: &TopicName) -> bool {
        let first = TopicPartition::new(topic.clone(), 0);
        self.logs().range(first..).next().is_some_and(|(tp, _)| tp.topic == *topic)
    }

    /// Topics with at least one served partition.
    pub fn topics(&self) -> Vec<TopicName> {
        let mut topics: Vec<TopicName> = self.logs().keys().map(|tp| tp.topic.clone()).collect();
        topics.dedup();
        topics
    }

    /// Partitions whose unflushed data is older than their flush interval. The caller flushes
    /// each on its own, so one slow disk write does not hold up the others.
    pub fn due_for_flush(&self, now_ms: i64) -> Vec<SharedLog<F>> {
        let logs: Vec<SharedLog<F>> = self.logs().values().cloned().collect();
        logs.into_iter().filter(|log| lock(log).flush_due(now_ms)).collect()
    }

    /// Flushes every due partition in turn, then checkpoints. Errors are logged per partition
    /// (a poisoned partition does not stop the others) and the first is returned.
    pub fn flush_due(&self, now_ms: i64) -> Result<(), LogError> {
        let mut first_error = None;
        for log in self.due_for_flush(now_ms) {
            if let Err(error) = lock(&log).flush(now_ms) {
                tracing::error!("{error}");
                first_error.get_or_insert(error);
            }
        }
        self.write_checkpoint()?;
        first_error.map_or(Ok(()), Err)
    }

    /// Applies retention to every partition; returns the number of segments deleted.
    pub fn cleanup(&self, now_ms: i64) -> Result<usize, LogError> {
        let logs: Vec<SharedLog<F>> = self.logs().values().cloned().collect();
        let mut deleted = 0;
        for log in logs {
            match lock(&log).retain(now_ms) {
                Ok(n) => deleted += n,
                Err(error) => tracing::error!("{error}"),
            }
        }
        Ok(deleted)
    }

    /// Writes every partition's flushed end to the checkpoint, atomically. Partitions refused
    /// at startup keep their old entries, so their promise is not forgotten.
    pub fn write_checkpoint(&self) -> Result<(), LogError> {
        let mut ends: BTreeMap<TopicPartition, u64> = read_checkpoint(&self.fs, &self.log_dir)
            .unwrap_or_default()
            .into_iter()
            .filter(|(tp, _)| self.refused.contains_key(tp))
            .collect();
        let logs: Vec<(TopicPartition, SharedLog<F>)> = self.logs().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (tp, log) in logs {
            ends.insert(tp, lock(&log).flushed_end());
        }
        let path = self.log_dir.join(CHECKPOINT_FILE);
        self.fs
            .write_file_atomic(&path, &checkpoint::encode(&ends))
            .map_err(|source| LogError::Io { partition: "log.dir".into(), op: "write checkpoint", path: path.display().to_string(), source })
    }

    /// Flushes every partition, writes the checkpoint and the clean-shutdown marker. If any
    /// partition could not be flushed, the marker is not written (the next start recovers).
    pub fn close(&self, now_ms: i64) -> Result<(), LogError> {
        let logs: Vec<SharedLog<F>> = self.logs().values().cloned().collect();
        let mut clean = true;
        for log in logs {
            let mut log = lock(&log);
            if log.is_poisoned() || log.close(now_ms).is_err() {
                clean = false;
            }
        }
        self.write_checkpoint()?;
        if !clean || !self.refused.is_empty() {
            return Ok(());
        }
        let marker = self.log_dir.join(CLEAN_SHUTDOWN_FILE);
        let io = |op, source| LogError::Io { partition: "log.dir".into(), op, path: marker.display().to_string(), source };
        self.fs.write_file_atomic(&marker, b"").map_err(|e| io("write", e))
    }
}

/// The checkpoint, or `None` (with a warning) when missing or damaged: then every partition is
/// validated in full.
fn read_checkpoint<F: LogFs>(fs: &F, log_dir: &Path) -> Option<BTreeMap<TopicPartition, u64>> {
    let path = log_dir.join(CHECKPOINT_FILE);
    if !fs.exists(&path) {
        return None;
    }
    match fs.read_file(&path).map_err(|e| e.to_string()).and_then(|bytes| checkpoint::decode(&bytes)) {
        Ok(ends) => Some(ends),
        Err(problem) => {
            tracing::warn!("{}: {problem}; validating every partition in full", path.display());
            None
        }
    }
}
