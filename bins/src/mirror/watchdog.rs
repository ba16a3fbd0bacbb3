//! The mirror's view of its whole source group, each summary round: every source partition the
//! filter covers (owned by this process or not) with the group's committed offset and the
//! source's end — the lag series and the summary line's lag come from it — and the ownership
//! watchdog (`core::mirror::watchdog`): partitions without a live owner for longer than
//! `mirror.unowned.alarm.ms` are logged as an error (once a minute), counted, and this member
//! rejoins the group.
//!
//! It reads the source's ZooKeeper on a session of its own, so a member whose own registration
//! went wrong is still seen from outside.

use crate::tls::env::SecureEnv;
use std::sync::Arc;
use std::time::Duration;

use tributary_core::config::{ConsumerConfig, ZkConnect};
use tributary_core::group_id::GroupId;
use tributary_core::mirror::lag::LagSample;
use tributary_core::mirror::watchdog::OwnershipWatch;

use crate::consumer::view::{latest_ends, read_group, Owner, ViewError};
use crate::consumer::ConsumerConnector;
use crate::coordination::CoordError;
use crate::env::Env;

/// How long one round of reading the group may take before it is given up.
const ROUND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long asking one source broker for its ends may take.
const ENDS_TIMEOUT: Duration = Duration::from_secs(10);
/// How many alarmed partitions a log line names.
const NAMED_MAX: usize = 8;

/// What one round saw of one source.
#[derive(Debug, Default)]
pub(super) struct Round {
    /// Every covered partition whose end was read: (source end, committed offset or 0).
    pub samples: Vec<LagSample>,
    /// Partitions without a live owner past the alarm time.
    pub unowned: usize,
}

/// Why one round could not read a source's group.
#[derive(Debug, thiserror::Error)]
#[error("reading group {group} at {zk_connect}: {cause}")]
pub(super) struct RoundError {
    /// The source group.
    group: GroupId,
    /// The source's ZooKeeper.
    zk_connect: ZkConnect,
    /// What failed.
    #[source]
    cause: ReadError,
}

/// What failed in reading a source's group.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    /// No session with the source's ZooKeeper could be opened.
    #[error(transparent)]
    Session(CoordError),
    /// No session is open (it was not kept after being opened).
    #[error("no ZooKeeper session")]
    NoSession,
    /// The group could not be read.
    #[error(transparent)]
    View(#[from] ViewError),
    /// The round took too long.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// One source's watch: its session and the watchdog's memory.
pub(super) struct SourceWatch<E: Env> {
    config: ConsumerConfig,
    connector: Arc<ConsumerConnector>,
    coord: Option<E::Coord>,
    watch: OwnershipWatch,
}

impl<E: Env> SourceWatch<E> {
    /// Watches the group of `connector` (joined with `config`).
    pub fn new(config: ConsumerConfig, connector: Arc<ConsumerConnector>) -> Self {
        let alarm = i64::from(config.mirror.unowned_alarm_ms);
        SourceWatch {
            config,
            connector,
            coord: None,
            watch: OwnershipWatch::new(alarm),
        }
    }

    /// Reads the group and the source's ends; `Err` (logged by the caller) when ZooKeeper
    /// could not be read: the session is dropped and opened again next round.
    pub async fn round(&mut self, env: &E, now_ms: i64) -> Result<Round, RoundError> {
        let result = tokio::time::timeout(ROUND_TIMEOUT, self.read(env, now_ms)).await;
        let cause = match result {
            Ok(Ok(round)) => return Ok(round),
            Ok(Err(e)) => e,
            Err(_) => ReadError::Timeout(ROUND_TIMEOUT),
        };
        self.coord = None;
        Err(RoundError {
            group: self.config.group_id.clone(),
            zk_connect: self.config.zk_connect.clone(),
            cause,
        })
    }

    async fn read(&mut self, env: &E, now_ms: i64) -> Result<Round, ReadError> {
        if self.coord.is_none() {
            let session = Duration::from_millis(self.config.zk.session_timeout_ms.into());
            let connection = Duration::from_millis(self.config.zk.connection_timeout_ms.into());
            let coord = env
                .coordinate(&self.config.zk_connect, session, connection)
                .await
                .map_err(ReadError::Session)?;
            self.coord = Some(coord);
        }
        let Some(coord) = self.coord.as_ref() else {
            return Err(ReadError::NoSession);
        };
        let group = &self.config.group_id;
        let view = read_group(coord, group, self.connector.registration()).await?;
        let verdict = self.watch.observe(
            now_ms,
            view.iter().map(|p| {
                (
                    (p.topic.to_string(), p.partition.to_string()),
                    matches!(p.owner, Owner::Live(_)),
                )
            }),
        );
        if verdict.speak {
            let named: Vec<String> = verdict
                .alarmed
                .iter()
                .take(NAMED_MAX)
                .map(|((t, p), ms)| format!("{t}/{p} ({} s)", ms / 1000))
                .collect();
            tracing::error!(
                "mirror: {} source partitions of group {group} have had no live owner for over {} s, so nothing copies them (e.g. {}); rejoining the group",
                verdict.alarmed.len(),
                self.config.mirror.unowned_alarm_ms / 1000,
                named.join(", ")
            );
            self.connector.rejoin();
        }
        // The source's brokers, reached as the consumer reaches them (TLS when it uses TLS).
        let secure = SecureEnv::new(env.clone(), self.connector.link());
        let ends = latest_ends(
            &secure,
            coord,
            view.iter().map(|p| (p.topic.clone(), p.partition)),
            ENDS_TIMEOUT,
        )
        .await;
        let samples = view
            .iter()
            .filter_map(|p| {
                let end = ends.get(&(p.topic.clone(), p.partition))?;
                Some(LagSample {
                    source: String::new(),
                    topic: p.topic.to_string(),
                    partition: p.partition.to_string(),
                    source_end: *end,
                    position: p.committed.unwrap_or(0),
                })
            })
            .collect();
        Ok(Round {
            samples,
            unowned: verdict.alarmed.len(),
        })
    }
}
