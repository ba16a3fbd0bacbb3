//! The log manager: every partition log of one broker, under `log.dir`.
//!
//! Startup: reads (and removes) the clean-shutdown marker, reads the recovery checkpoint, opens
//! every `<topic>-<partition>` directory with recovery, refuses (and reports) partitions that
//! are corrupt, then writes a fresh checkpoint. Running: creates partitions on demand, flushes
//! what is due and applies retention when the caller's timers say so, checkpointing flushed
//! ends. Shutdown: flushes everything, writes the checkpoint and the marker.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::checkpoint::{self, CHECKPOINT_FILE};
use super::error::LogError;
use super::fs::{LockError, LogFs};
use super::names::TopicPartition;
use super::partition::Log;
use super::policy::LogPolicy;
use super::recovery::RecoveryHints;
use crate::config::BrokerConfig;
use crate::wire::TopicName;

/// The clean-shutdown marker's name inside `log.dir` (0.7's).
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
/// The lock file held for the life of the process that owns `log.dir`.
pub const DIR_LOCK_FILE: &str = ".lock";

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
    /// Partitions the recovery checkpoint promised data for (with that end) whose directories
    /// are gone: logged as errors; not refused, since removing a topic's directories while the
    /// broker is stopped is how 0.7 deletes a topic.
    pub missing: Vec<(TopicPartition, u64)>,
}

/// Replica mode's view of the topics (see [`LogManager::is_replica`]).
#[derive(Debug, Default)]
struct Replicas {
    /// The topics copied: every topic the filter allows (set once, at startup).
    filter: Option<crate::consumer::TopicPattern>,
    /// The source's partition count of each copied topic seen so far.
    counts: BTreeMap<TopicName, u32>,
    /// Topics promoted: no longer copied, they take produces.
    promoted: std::collections::BTreeSet<TopicName>,
    /// The whole cluster is promoted: no topic is copied, every topic (new ones included)
    /// takes produces.
    cluster_promoted: bool,
    /// The source's per-broker partition count of each renamed mirror copy, from its origin
    /// record (`core::origin`), learnt before the copy's first partition here.
    renamed: BTreeMap<TopicName, u32>,
    /// Topics with more partitions on disk at startup than their count said: the count kept
    /// there, so that no stored partition is hidden.
    on_disk: BTreeMap<TopicName, u32>,
}

/// What the manager keeps each log in: a lock the caller holds while it works on the log (an
/// async mutex in the broker, a plain one in tests), with whatever the caller keeps beside it.
pub trait LogCell<F: LogFs>: Sized {
    /// What every cell of one manager shares: the caller's book-keeping across partitions (the
    /// broker's: which partitions its timers must look at). Made once, by the manager.
    type Shared: Default + Debug;
    /// Puts `log` in a cell that shares `shared` with the manager's other cells.
    fn hold(log: Log<F>, shared: &Arc<Self::Shared>) -> Self;
}

impl<F: LogFs> LogCell<F> for Mutex<Log<F>> {
    type Shared = ();

    fn hold(log: Log<F>, _: &Arc<()>) -> Self {
        Mutex::new(log)
    }
}

/// What the recovery checkpoint holds, as the manager last recorded it.
#[derive(Debug)]
struct Checkpointed {
    /// Each partition's recorded flushed end: served partitions as the caller reported them,
    /// and those refused at startup as the checkpoint read then held them, so their promise is
    /// not forgotten. Partitions are never removed, so an entry is only ever updated.
    ends: BTreeMap<TopicPartition, u64>,
    /// Whether the file holds `ends`: false until the first write, and after a write that
    /// failed (the next call writes even if nothing moved).
    written: bool,
}

/// All partition logs of a broker, each in a cell `C` of the caller's choosing.
///
/// The manager owns `log.dir` for its whole life (an OS lock on [`DIR_LOCK_FILE`]), knows which
/// partitions exist and which were refused at startup, creates partitions durably, and writes
/// the recovery checkpoint and the clean-shutdown marker. Work on a partition's data (append,
/// read, flush, retention) is done by the caller through the cell, so the manager never holds
/// one partition's lock while another waits, and never does I/O under its map's lock.
#[derive(Debug)]
pub struct LogManager<F: LogFs + Clone, C: LogCell<F>> {
    fs: F,
    config: BrokerConfig,
    log_dir: PathBuf,
    logs: Mutex<BTreeMap<TopicPartition, Arc<C>>>,
    /// Serializes creation of new partitions (file-system work), outside the map's lock.
    creating: Mutex<()>,
    refused: BTreeMap<TopicPartition, String>,
    /// What the checkpoint holds. Only the ends a caller reports are updated, so a call costs
    /// what moved; a checkpoint that would hold the same is not written again (at 10,000
    /// partitions, rewriting and syncing an unchanged file every flush interval put the broker
    /// at 80 % system time).
    checkpointed: Mutex<Checkpointed>,
    /// Shared by every cell (see [`LogCell::Shared`]).
    shared: Arc<C::Shared>,
    /// Replica mode: the source's partition counts of copied topics, and which are promoted.
    replicas: Mutex<Replicas>,
    dir_lock: F::DirLock,
}

impl<F: LogFs + Clone, C: LogCell<F>> LogManager<F, C> {
    /// Locks `config.log_dir` (refusing when another process holds it), then opens every
    /// partition under it, recovering as needed, and writes a fresh checkpoint.
    pub fn open(fs: F, config: BrokerConfig, now_ms: i64) -> Result<(Self, OpenReport), LogError> {
        let log_dir = PathBuf::from(&config.log_dir);
        let io = |op, path: &Path, source| LogError::Io {
            partition: "log.dir".into(),
            op,
            path: path.display().to_string(),
            source,
        };
        fs.create_dir_all(&log_dir)
            .map_err(|e| io("create directory", &log_dir, e))?;
        let lock_path = log_dir.join(DIR_LOCK_FILE);
        let dir_lock = fs
            .lock_dir(
                &lock_path,
                &format!("brokerid {} port {}", config.broker_id, config.port),
            )
            .map_err(|e| match e {
                LockError::Held { holder, stopping } => LogError::DirInUse {
                    dir: log_dir.display().to_string(),
                    holder,
                    stopping,
                },
                LockError::Io(source) => io("lock", &lock_path, source),
            })?;
        let marker = log_dir.join(CLEAN_SHUTDOWN_FILE);
        let mut report = OpenReport {
            clean_shutdown: fs.exists(&marker),
            ..OpenReport::default()
        };
        let checkpoints = read_checkpoint(&fs, &log_dir);
        let shared = Arc::new(C::Shared::default());
        let mut logs = BTreeMap::new();
        let mut ends = BTreeMap::new();
        let mut refused = BTreeMap::new();
        for entry in fs.list_dir(&log_dir).map_err(|e| io("list", &log_dir, e))? {
            let tp = TopicPartition::from_dir_name(&entry.name).filter(|_| entry.is_dir);
            let Some(tp) = tp else {
                let over_limit = entry.is_dir
                    && entry.name.rsplit_once('-').is_some_and(|(topic, _)| {
                        topic.len() > crate::wire::TOPIC_NAME_BYTES_MAX
                            && topic
                                .get(..crate::wire::TOPIC_NAME_BYTES_MAX)
                                .is_some_and(|head| {
                                    TopicPartition::from_dir_name(&format!("{head}-0")).is_some()
                                })
                    });
                if over_limit {
                    // A 0.7 broker could create these (names up to 255 bytes, directories up to
                    // 255): said loudly, since their data is not served.
                    tracing::error!(
                        "not serving {} in {}: its topic name is longer than {} bytes (docs/migrating.md: rename the topic, and this directory, to serve its data)",
                        entry.name,
                        log_dir.display(),
                        crate::wire::TOPIC_NAME_BYTES_MAX
                    );
                    report.ignored.push(entry.name);
                } else if !entry.name.starts_with('.') {
                    tracing::warn!(
                        "ignoring {} in {}: not a <topic>-<partition> directory",
                        entry.name,
                        log_dir.display()
                    );
                    report.ignored.push(entry.name);
                }
                continue;
            };
            let hints = RecoveryHints {
                clean_shutdown: report.clean_shutdown,
                checkpoint: checkpoints.as_ref().and_then(|c| c.get(&tp).copied()),
            };
            let policy = LogPolicy::for_topic(&config, &tp.topic);
            match Log::open(
                fs.clone(),
                &log_dir.join(&entry.name),
                tp.clone(),
                policy,
                hints,
                now_ms,
            ) {
                Ok(log) => {
                    report.opened.push(tp.clone());
                    ends.insert(tp.clone(), log.flushed_end());
                    logs.insert(tp, Arc::new(C::hold(log, &shared)));
                }
                Err(error) => {
                    tracing::error!("{error}");
                    report.refused.push((tp.clone(), error.to_string()));
                    refused.insert(tp, error.to_string());
                }
            }
        }
        for (tp, end) in checkpoints.iter().flatten() {
            if *end > 0 && !logs.contains_key(tp) && !refused.contains_key(tp) {
                tracing::error!(
                    "{tp}: the recovery checkpoint promised data up to {end}, but {} is gone (removed by hand, or lost by the disk); the partition starts empty if written again",
                    log_dir.join(tp.dir_name()).display()
                );
                report.missing.push((tp.clone(), *end));
            }
        }
        if report.clean_shutdown {
            fs.remove_file(&marker)
                .map_err(|e| io("remove", &marker, e))?;
        }
        // Once per start, whatever the last stop was: every partition directory found here may
        // be there only because the page cache kept it (its creation's directory sync failed),
        // and the logs' first flushes sync only their own directories.
        fs.sync_dir(&log_dir)
            .map_err(|e| io("sync directory", &log_dir, e))?;
        let refused_ends = checkpoints
            .into_iter()
            .flatten()
            .filter(|(tp, _)| refused.contains_key(tp))
            .collect();
        let manager = LogManager {
            fs,
            config,
            log_dir,
            logs: Mutex::new(logs),
            creating: Mutex::new(()),
            refused,
            checkpointed: Mutex::new(Checkpointed {
                ends: refused_ends,
                written: false,
            }),
            shared,
            replicas: Mutex::new(Replicas::default()),
            dir_lock,
        };
        manager.write_checkpoint(ends)?;
        Ok((manager, report))
    }

    /// The map of served partitions. Only memory operations happen under this lock, so a
    /// panic while it is held is a bug in this module: it is not recovered from.
    #[expect(
        clippy::panic,
        reason = "a poisoned map lock is a bug in this module; stopping loudly is the point"
    )]
    fn logs(&self) -> MutexGuard<'_, BTreeMap<TopicPartition, Arc<C>>> {
        self.logs.lock().unwrap_or_else(|_| {
            panic!("the partition map's lock was poisoned by a panic while it was held")
        })
    }

    /// The broker configuration the logs follow.
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// The log policy of `topic` (per-topic overrides applied).
    pub fn policy_for(&self, topic: &TopicName) -> LogPolicy {
        LogPolicy::for_topic(&self.config, topic)
    }

    /// Partitions `topic` has on this broker: a replica topic's source count; else the
    /// per-topic override (`topic.partition.count.map`); else a renamed mirror copy's source
    /// count; else `num.partitions` — and never fewer than were found on disk at startup.
    pub fn partition_count(&self, topic: &TopicName) -> u32 {
        let replicas = self.replicas();
        let count = match replicas.counts.get(topic) {
            Some(count) => *count,
            None => match replicas.renamed.get(topic) {
                Some(count)
                    if !self.config.topic_partition_count.contains_key(topic)
                        && !crate::planted::active(crate::planted::Bug::RenamedCountIgnored) =>
                {
                    *count
                }
                _ => self.config.partitions_for(topic),
            },
        };
        count.max(replicas.on_disk.get(topic).copied().unwrap_or(0))
    }

    /// Records a renamed mirror copy's source count (its origin record's), which decides its
    /// partition count here unless `topic.partition.count.map` names it. `false` (and nothing
    /// recorded) once the topic has a partition here: a count in use never changes while the
    /// broker runs (as a changed `num.partitions` waits for a restart).
    #[expect(
        clippy::panic,
        reason = "a poisoned creation lock means a creation panicked: a bug; stopping loudly is the point"
    )]
    pub fn set_renamed_count(&self, topic: &TopicName, count: u32) -> bool {
        // Under the creation lock: no partition of the topic is being created meanwhile.
        let _creating = self.creating.lock().unwrap_or_else(|_| {
            panic!("the partition creation lock was poisoned by a panic while it was held")
        });
        if self.has_topic(topic) || self.has_refused(topic) {
            return false;
        }
        self.replicas().renamed.insert(topic.clone(), count);
        true
    }

    /// At startup, before the broker serves: records the source count of a renamed mirror
    /// copy it already holds (read from the copy's origin record).
    pub fn set_renamed_count_at_startup(&self, topic: &TopicName, count: u32) {
        self.replicas().renamed.insert(topic.clone(), count);
    }

    /// Whether a partition of `topic` was refused at startup.
    pub fn has_refused(&self, topic: &TopicName) -> bool {
        self.refused
            .range(TopicPartition::new(topic.clone(), 0)..)
            .next()
            .is_some_and(|(tp, _)| tp.topic == *topic)
    }

    /// At startup, after every renamed count was recorded: each topic with more served
    /// partitions on disk than its count keeps them all (they are served and registered, not
    /// hidden; a partition refused at startup does not count). Returns those topics, with the
    /// count they had and the count kept.
    pub fn keep_partitions_on_disk(&self) -> Vec<(TopicName, u32, u32)> {
        let mut served: BTreeMap<TopicName, u32> = BTreeMap::new();
        for tp in self.logs().keys() {
            let n = served.entry(tp.topic.clone()).or_insert(0);
            *n = (*n).max(tp.partition + 1);
        }
        let mut kept = Vec::new();
        for (topic, on_disk) in served {
            let count = self.partition_count(&topic);
            if on_disk > count {
                self.replicas().on_disk.insert(topic.clone(), on_disk);
                kept.push((topic, count, on_disk));
            }
        }
        kept
    }

    /// Replica mode: every topic `filter` allows is copied from the source, read-only here
    /// until promoted — from the start, before the source has been asked about it, so no
    /// client write can ever land where the source's bytes are to go.
    pub fn set_replica_filter(&self, filter: crate::consumer::TopicPattern) {
        self.replicas().filter = Some(filter);
    }

    /// Records the source's partition count of a copied topic. A count never shrinks (0.7
    /// partitions are never removed): the larger one is kept.
    pub fn set_replica(&self, topic: &TopicName, count: u32) {
        let mut replicas = self.replicas();
        let kept = replicas.counts.entry(topic.clone()).or_insert(count);
        *kept = (*kept).max(count);
    }

    /// Promotes a copied topic: no longer copied, it takes produces (its partition count stays
    /// the source's). `true` the first time, for a topic that was copied.
    pub fn promote(&self, topic: &TopicName) -> bool {
        let copied = self.is_replica(topic);
        copied && self.replicas().promoted.insert(topic.clone())
    }

    /// Promotes the whole cluster: no topic is copied any more, and every topic, including
    /// those created from now on, takes produces. `true` the first time.
    pub fn promote_cluster(&self) -> bool {
        let mut replicas = self.replicas();
        let newly = replicas.filter.is_some() && !replicas.cluster_promoted;
        replicas.cluster_promoted = replicas.filter.is_some();
        newly
    }

    /// Whether the whole cluster is promoted ([`LogManager::promote_cluster`]).
    pub fn is_cluster_promoted(&self) -> bool {
        self.replicas().cluster_promoted
    }

    /// Undoes every promotion (a demotion): every topic the filter allows is a replica topic
    /// again, read-only and copied. The topics that were promoted, for the caller to report.
    pub fn demote(&self) -> Vec<TopicName> {
        let mut replicas = self.replicas();
        replicas.cluster_promoted = false;
        std::mem::take(&mut replicas.promoted).into_iter().collect()
    }

    /// Whether `topic` is copied from the source and not promoted: its partitions refuse
    /// produces, and only the copier appends to them.
    pub fn is_replica(&self, topic: &TopicName) -> bool {
        let replicas = self.replicas();
        replicas
            .filter
            .as_ref()
            .is_some_and(|f| f.allows(topic.as_str()))
            && !replicas.cluster_promoted
            && !replicas.promoted.contains(topic)
    }

    /// Topics this broker holds partitions of, with the highest partition number + 1 found on
    /// disk or created since (what a replica topic's count was when it was last copied).
    pub fn local_counts(&self) -> BTreeMap<TopicName, u32> {
        let mut counts = BTreeMap::new();
        for tp in self.logs().keys().chain(self.refused.keys()) {
            let n = counts.entry(tp.topic.clone()).or_insert(0u32);
            *n = (*n).max(tp.partition + 1);
        }
        counts
    }

    #[expect(
        clippy::panic,
        reason = "a poisoned map lock is a bug in this module; stopping loudly is the point"
    )]
    fn replicas(&self) -> MutexGuard<'_, Replicas> {
        self.replicas.lock().unwrap_or_else(|_| {
            panic!("the replica map's lock was poisoned by a panic while it was held")
        })
    }

    /// The log of `tp`, if it exists and is served.
    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<C>> {
        self.logs().get(tp).cloned()
    }

    /// Why `tp` was refused at startup, if it was: such a partition serves nothing (neither
    /// reads nor writes) until an operator has looked at it and restarted the broker.
    pub fn refused(&self, tp: &TopicPartition) -> Option<&str> {
        self.refused.get(tp).map(String::as_str)
    }

    /// The log of `tp`, created (durably) if it does not exist, and whether this call created
    /// it. Refuses partitions outside the topic's count and partitions refused at startup.
    /// Creation happens outside the map's lock, so readers of other partitions never wait for it.
    pub fn get_or_create(
        &self,
        tp: &TopicPartition,
        now_ms: i64,
    ) -> Result<(Arc<C>, bool), LogError> {
        self.get_or_create_at(tp, 0, now_ms)
    }

    /// [`LogManager::get_or_create`], a new log starting at offset `start` (replica mode: the
    /// source's earliest offset).
    #[expect(
        clippy::panic,
        reason = "a poisoned creation lock means a creation panicked: a bug; stopping loudly is the point"
    )]
    pub fn get_or_create_at(
        &self,
        tp: &TopicPartition,
        start: u64,
        now_ms: i64,
    ) -> Result<(Arc<C>, bool), LogError> {
        if let Some(reason) = self.refused.get(tp) {
            return Err(LogError::Corrupt {
                partition: tp.to_string(),
                segment: String::new(),
                offset: 0,
                detail: reason.clone(),
            });
        }
        let count = self.partition_count(&tp.topic);
        if tp.partition >= count {
            return Err(LogError::UnknownPartition {
                partition: tp.to_string(),
                count,
            });
        }
        if let Some(log) = self.get(tp) {
            return Ok((log, false));
        }
        let _creating = self.creating.lock().unwrap_or_else(|_| {
            panic!("the partition creation lock was poisoned by a panic while it was held")
        });
        if let Some(log) = self.get(tp) {
            return Ok((log, false));
        }
        // Again under the lock: a renamed copy's count may have been learnt meanwhile.
        let count = self.partition_count(&tp.topic);
        if tp.partition >= count {
            return Err(LogError::UnknownPartition {
                partition: tp.to_string(),
                count,
            });
        }
        let log = Log::create_at(
            self.fs.clone(),
            &self.log_dir.join(tp.dir_name()),
            tp.clone(),
            self.policy_for(&tp.topic),
            start,
            now_ms,
        )?;
        tracing::info!("{tp}: created log");
        let shared = Arc::new(C::hold(log, &self.shared));
        let before = self.logs().insert(tp.clone(), shared.clone());
        // On in release: under the creation lock no other log of this partition can appear.
        assert!(
            before.is_none(),
            "{tp}: a second log created for one partition"
        );
        Ok((shared, true))
    }

    /// Every served partition with its log, in partition order.
    pub fn all(&self) -> Vec<(TopicPartition, Arc<C>)> {
        self.logs()
            .iter()
            .map(|(tp, log)| (tp.clone(), log.clone()))
            .collect()
    }

    /// Every served partition.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        self.logs().keys().cloned().collect()
    }

    /// Whether `topic` has at least one served partition (without listing every topic).
    pub fn has_topic(&self, topic: &TopicName) -> bool {
        let first = TopicPartition::new(topic.clone(), 0);
        self.logs()
            .range(first..)
            .next()
            .is_some_and(|(tp, _)| tp.topic == *topic)
    }

    /// Topics with at least one served partition.
    pub fn topics(&self) -> Vec<TopicName> {
        let mut topics: Vec<TopicName> = self.logs().keys().map(|tp| tp.topic.clone()).collect();
        topics.dedup();
        topics
    }

    /// What every cell shares (see [`LogCell::Shared`]).
    pub fn shared(&self) -> &Arc<C::Shared> {
        &self.shared
    }

    /// Records `ends`, the flushed ends of served partitions the caller read from their logs
    /// (a partition not named keeps the end recorded before), and writes the recovery
    /// checkpoint atomically from every recorded end. Partitions refused at startup keep
    /// their entries, so their promise is not forgotten. When no end moved and the last write
    /// succeeded, nothing is written (the file already says it); a write that failed is tried
    /// again by the next call.
    pub fn write_checkpoint(
        &self,
        ends: impl IntoIterator<Item = (TopicPartition, u64)>,
    ) -> Result<(), LogError> {
        let mut checkpointed = self.checkpointed();
        for (tp, end) in ends {
            if checkpointed.ends.get(&tp) != Some(&end) {
                checkpointed.ends.insert(tp, end);
                checkpointed.written = false;
            }
        }
        if checkpointed.written {
            return Ok(());
        }
        let path = self.log_dir.join(CHECKPOINT_FILE);
        self.fs
            .write_file_atomic(&path, &checkpoint::encode(&checkpointed.ends))
            .map_err(|source| LogError::Io {
                partition: "log.dir".into(),
                op: "write checkpoint",
                path: path.display().to_string(),
                source,
            })?;
        checkpointed.written = true;
        Ok(())
    }

    /// What the checkpoint holds. Held across a write, so that two writers do not
    /// interleave; only this module's code runs under it, so a poisoned lock is a bug here.
    #[expect(
        clippy::panic,
        reason = "a poisoned checkpoint lock is a bug in this module; stopping loudly is the point"
    )]
    fn checkpointed(&self) -> MutexGuard<'_, Checkpointed> {
        self.checkpointed.lock().unwrap_or_else(|_| {
            panic!("the checkpoint lock was poisoned: a checkpoint write panicked")
        })
    }

    /// Says in `log.dir`'s lock file that this process is stopping: a broker started on the
    /// same directory meanwhile waits for the lock instead of exiting. Failing to say it only
    /// costs that wait, so the error is the caller's to log.
    pub fn note_stopping(&self) -> std::io::Result<()> {
        self.fs.note_stopping(&self.dir_lock)
    }

    /// Writes the clean-shutdown marker, unless a partition was refused at startup (the next
    /// start must look at it again). Call it only after every log was flushed and closed
    /// without error, and after the last checkpoint.
    pub fn write_clean_marker(&self) -> Result<(), LogError> {
        if !self.refused.is_empty() {
            return Ok(());
        }
        let marker = self.log_dir.join(CLEAN_SHUTDOWN_FILE);
        let io = |op, source| LogError::Io {
            partition: "log.dir".into(),
            op,
            path: marker.display().to_string(),
            source,
        };
        self.fs
            .write_file_atomic(&marker, b"")
            .map_err(|e| io("write", e))
    }
}

/// The checkpoint, or `None` (with a warning) when missing or damaged: then every partition is
/// validated in full.
fn read_checkpoint<F: LogFs>(fs: &F, log_dir: &Path) -> Option<BTreeMap<TopicPartition, u64>> {
    let path = log_dir.join(CHECKPOINT_FILE);
    if !fs.exists(&path) {
        return None;
    }
    match fs
        .read_file(&path)
        .map_err(|e| e.to_string())
        .and_then(|bytes| checkpoint::decode(&bytes).map_err(|e| e.to_string()))
    {
        Ok(ends) => Some(ends),
        Err(problem) => {
            tracing::warn!(
                "{}: {problem}; validating every partition in full",
                path.display()
            );
            None
        }
    }
}
