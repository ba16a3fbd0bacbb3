//! `demote`: a cluster becomes a replica of the other cluster again, keeping its data — the
//! step that makes failover a cycle (fail over with `promote`, fail back with `demote` on the
//! cluster that returns, or on the old primary in a planned switchback).
//!
//! Run against a cluster whose brokers are configured as replicas of the other cluster
//! (`replica.source.zk.connect`; each broker says so in `/tributary/replicas/<id>`), it works out
//! for every partition they hold where the two clusters' logs diverged (`cut`), prints it with
//! what this cluster holds past it (messages, bytes, the diverged file it will go to) and, unless
//! `--dry-run`, asks the brokers to carry it out: every promotion of this cluster is undone
//! (`/tributary/promoted` deleted), a plan per broker is written under `/tributary/demotion`,
//! and each broker cuts its logs back, keeps the tails in `.diverged` files, hands the synced
//! groups' offsets back to the syncer, confirms, and copies the other cluster's history from
//! each cut. The tool waits for every broker's confirmation and prints it.
//!
//! Nothing is written in `--dry-run`; nothing is ever deleted from a log without being kept
//! in its diverged file first.

pub mod cut;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use tributary::client::connect;
use tributary::coordination::{CoordError, Coordination, NodeKind};
use tributary::env::{Env, TokioEnv};
use tributary::failure::Failure;
use tributary_core::config::ZkConnect;
use tributary_core::log::{diverged_file_name, TopicPartition};
use tributary_core::replica::demotion::{
    CutPoints, Outcome, Plan, PlanEntry, RecordError, ReplicaRecord, Report,
};
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::{
    broker_id_path, broker_topic_partitions_path, demotion_done_path, demotion_plan_path,
    parse_broker_registration, promoted_ack_path, BROKER_IDS_PATH, BROKER_TOPICS_PATH,
    CLUSTER_PROMOTED, DEMOTION_PATH, PROMOTED_PATH, REPLICAS_PATH,
};

use self::cut::{CutError, CutFrom, Found};
use crate::cli::runtime;
use crate::error::ToolError;

/// ZooKeeper session and connection timeout of the tool.
const ZK_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline of each call to a broker.
const BROKER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a registered broker's replica record is waited for, in ms.
const RECORD_WAIT_MS: i64 = 15_000;
/// Pause between looks at the brokers' confirmations.
const CONFIRM_POLL: Duration = Duration::from_millis(200);

/// Why a demotion failed, or was not confirmed.
#[derive(Debug, thiserror::Error)]
pub enum DemoteError {
    /// This cluster's ZooKeeper could not be reached, read or written.
    #[error("ZooKeeper at {connect}: {source}")]
    ZooKeeper {
        /// The cluster's ZooKeeper.
        connect: ZkConnect,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// The other cluster's ZooKeeper (a replica broker's source) could not be reached or read.
    #[error("the other cluster's ZooKeeper at {connect} (broker {broker}'s replica.source.zk.connect): {problem}")]
    SourceZooKeeper {
        /// Its connect string, as the broker has it.
        connect: String,
        /// The broker whose source it is.
        broker: i32,
        /// What went wrong.
        #[source]
        problem: Failure,
    },
    /// A replica broker of the cluster is not registered (down): its partitions cannot be
    /// planned, nor cut until it runs.
    #[error("broker {0} of this cluster is a replica broker (/tributary/replicas/{0}) but is not registered in ZooKeeper: start it (each broker cuts its own logs) and demote again; nothing was changed")]
    BrokerDown(i32),
    /// A registered broker of the cluster wrote no replica record.
    #[error("broker {0} of this cluster is registered but is not a replica broker (it wrote no /tributary/replicas/{0}): configure it with replica.source.zk.connect=<the other cluster's ZooKeeper> and restart it; nothing was changed")]
    NotAReplica(String),
    /// No broker of the cluster is a replica broker.
    #[error("no broker of the cluster at {0} is a replica broker (none wrote /tributary/replicas): restart its brokers with replica.source.zk.connect=<the other cluster's ZooKeeper> first, then demote")]
    NoReplicaBrokers(ZkConnect),
    /// A record in ZooKeeper cannot be read.
    #[error("{path}: {error}")]
    Record {
        /// The node.
        path: String,
        /// What is wrong with it.
        error: RecordError,
    },
    /// A partition's cut could not be found.
    #[error("broker {broker}: {error}")]
    Cut {
        /// The broker of this cluster.
        broker: i32,
        /// Why.
        error: CutError,
    },
    /// The plan could not be written out.
    #[error(transparent)]
    Output(#[from] std::io::Error),
    /// The demotion is requested (the plans are written) but some brokers did not confirm in
    /// time.
    #[error("demotion {} requested, but brokers {missing:?} did not confirm within {wait:?}; a broker that is down carries it out when it starts, before copying anything", .demotion.id)]
    NotConfirmed {
        /// The demotion, with the confirmations that came.
        demotion: Box<Demotion>,
        /// How long the tool waited.
        wait: Duration,
        /// The brokers that did not confirm.
        missing: Vec<i32>,
    },
}

/// What to demote.
#[derive(Debug, Clone)]
pub struct DemoteOptions {
    /// The cluster that becomes a replica again (its ZooKeeper); the other cluster's is read
    /// from its brokers' replica records, with the same TLS and identity settings.
    pub zk_connect: ZkConnect,
    /// Only work out and print the plan; change nothing.
    pub dry_run: bool,
    /// How long to wait for every broker's confirmation.
    pub wait: Duration,
}

/// One partition of the plan, as worked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The broker of this cluster holding it.
    pub broker: i32,
    /// The partition.
    pub tp: TopicPartition,
    /// Its cut, and what lies past it.
    pub found: Found,
}

/// What a demotion came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Demotion {
    /// Its id (empty for a dry run).
    pub id: String,
    /// Every partition's cut.
    pub planned: Vec<Planned>,
    /// Partitions left alone (the other cluster does not have their topic), with why.
    pub left: Vec<(i32, TopicPartition, String)>,
    /// Each broker's confirmation.
    pub reports: BTreeMap<i32, Report>,
    /// The confirmations of the previous demotion found when this one was requested (a broker
    /// may have confirmed it after its tool stopped waiting): what those brokers cut then.
    pub earlier: BTreeMap<i32, Report>,
}

/// A replica broker of this cluster, registered now.
struct ReplicaBroker {
    id: i32,
    record: ReplicaRecord,
    address: (String, u16),
}

/// Works out the plan, prints it, and (unless a dry run) has the brokers carry it out; see the
/// module's documentation.
pub async fn demote<E: Env>(
    env: &E,
    options: &DemoteOptions,
    out: &mut impl Write,
) -> Result<Demotion, DemoteError> {
    let zk = |source: CoordError| DemoteError::ZooKeeper {
        connect: options.zk_connect.clone(),
        source,
    };
    let coord = env
        .coordinate(&options.zk_connect, ZK_TIMEOUT, ZK_TIMEOUT)
        .await
        .map_err(zk)?;
    let brokers = replica_brokers(env, &coord, options).await?;
    let mut demotion = Demotion::default();
    let mut sources: BTreeMap<String, E::Coord> = BTreeMap::new();
    for broker in &brokers {
        let connect_text = broker.record.source_zk.clone();
        let source_error = |problem: Failure| DemoteError::SourceZooKeeper {
            connect: connect_text.clone(),
            broker: broker.id,
            problem,
        };
        if !sources.contains_key(&connect_text) {
            let mut connect = ZkConnect::parse(&connect_text)
                .map_err(|e| source_error(Failure::caused(e.to_string(), e)))?;
            connect.security = options.zk_connect.security.clone();
            let source = env
                .coordinate(&connect, ZK_TIMEOUT, ZK_TIMEOUT)
                .await
                .map_err(|e| source_error(Failure::caused(e.to_string(), e)))?;
            sources.insert(connect_text.clone(), source);
        }
        let Some(source) = sources.get(&connect_text) else {
            continue;
        };
        plan_broker(env, &coord, source, broker, &mut demotion)
            .await
            .map_err(|e| match e {
                PlanError::Here(c) => zk(c),
                PlanError::Source(c) => source_error(Failure::caused(c.to_string(), c)),
                PlanError::NotPromotedYet(id, topic) => source_error(Failure::new(format!("its broker {id} has not confirmed the promotion of {topic} yet (it may still copy from this cluster): wait for it (tributary promote there prints it) and demote again; nothing was changed"))),
                PlanError::SourceDown(id) => source_error(Failure::new(format!("its broker {id}, which broker {} copies, is not registered: start it (what it holds decides the cuts) and demote again; nothing was changed", broker.id))),
                PlanError::Record(path, error) => DemoteError::Record { path, error },
                PlanError::Cut(error) => DemoteError::Cut {
                    broker: broker.id,
                    error,
                },
            })?;
    }
    print_plan(out, options, &brokers, &demotion)?;
    for (_, source) in sources {
        source.close().await;
    }
    if options.dry_run {
        writeln!(
            out,
            "dry run: nothing was changed; run again without --dry-run to demote"
        )?;
        coord.close().await;
        return Ok(demotion);
    }
    demotion.id = format!("{}-{:08x}", env.now_ms(), env.rng_seed() as u32);
    demotion.earlier = request(&coord, &brokers, &demotion).await.map_err(zk)?;
    for (broker, report) in &demotion.earlier {
        writeln!(
            out,
            "broker {broker} had confirmed the previous demotion {} ({} partitions)",
            report.demotion,
            report.entries.len()
        )?;
    }
    writeln!(
        out,
        "demotion {} requested: every promotion of this cluster is undone; waiting for the brokers",
        demotion.id
    )?;
    let missing = confirmations(env, &coord, &brokers, options.wait, &mut demotion)
        .await
        .map_err(zk)?;
    print_reports(out, &demotion)?;
    coord.close().await;
    if missing.is_empty() {
        Ok(demotion)
    } else {
        Err(DemoteError::NotConfirmed {
            demotion: Box::new(demotion),
            wait: options.wait,
            missing,
        })
    }
}

/// The replica brokers of this cluster, with their sources and addresses.
async fn replica_brokers<E: Env>(
    env: &E,
    coord: &E::Coord,
    options: &DemoteOptions,
) -> Result<Vec<ReplicaBroker>, DemoteError> {
    let zk = |source: CoordError| DemoteError::ZooKeeper {
        connect: options.zk_connect.clone(),
        source,
    };
    let children = |path: &'static str| async move {
        match coord.children(path).await {
            Ok(ids) => Ok(ids),
            Err(CoordError::NoNode(_)) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    };
    // A broker just started registers before its copier writes where it copies from: every
    // registered broker's record is waited for a while (one that never writes it is not a
    // replica broker, and the cluster cannot be demoted as a whole).
    let deadline = env.now_ms().saturating_add(RECORD_WAIT_MS);
    let ids = loop {
        let ids = children(REPLICAS_PATH).await.map_err(zk)?;
        let registered = children(BROKER_IDS_PATH).await.map_err(zk)?;
        match registered.iter().find(|r| !ids.contains(r)) {
            None => break ids,
            Some(missing) if env.now_ms() >= deadline => {
                return Err(DemoteError::NotAReplica(missing.clone()))
            }
            Some(_) => tokio::time::sleep(CONFIRM_POLL).await,
        }
    };
    let mut brokers = Vec::new();
    for name in ids {
        let Ok(id) = name.parse::<i32>() else {
            continue;
        };
        let path = format!("{REPLICAS_PATH}/{name}");
        let (data, _) = coord.get(&path).await.map_err(zk)?;
        let record = ReplicaRecord::parse(&String::from_utf8_lossy(&data))
            .map_err(|error| DemoteError::Record { path, error })?;
        // What a broker holds is known only from its registration, and only it can cut its
        // logs: a broker that is down stops the demotion before anything is written.
        let address = match coord.get(&broker_id_path(id)).await {
            Ok((data, _)) => parse_broker_registration(&String::from_utf8_lossy(&data)),
            Err(CoordError::NoNode(_)) => None,
            Err(e) => return Err(zk(e)),
        }
        .ok_or(DemoteError::BrokerDown(id))?;
        brokers.push(ReplicaBroker {
            id,
            record,
            address,
        });
    }
    brokers.sort_by_key(|b| b.id);
    if brokers.is_empty() {
        return Err(DemoteError::NoReplicaBrokers(options.zk_connect.clone()));
    }
    Ok(brokers)
}

/// Why one broker's plan could not be worked out.
enum PlanError {
    Here(CoordError),
    /// The other cluster's broker (this id) is not registered.
    SourceDown(i32),
    /// The other cluster's broker (this id) has not confirmed its promotion of a topic yet.
    NotPromotedYet(i32, String),
    Source(CoordError),
    Record(String, RecordError),
    Cut(CutError),
}

/// The partition count `path` holds (`None` when it does not exist).
async fn count_at<C: Coordination>(c: &C, path: &str) -> Result<Option<u32>, CoordError> {
    match c.get(path).await {
        Ok((data, _)) => Ok(String::from_utf8_lossy(&data).trim().parse().ok()),
        Err(CoordError::NoNode(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Works out the cut of every partition `broker` holds.
async fn plan_broker<E: Env>(
    env: &E,
    here: &E::Coord,
    source: &E::Coord,
    broker: &ReplicaBroker,
    demotion: &mut Demotion,
) -> Result<(), PlanError> {
    let source_id = broker.record.source_broker_id;
    // The topics this broker may hold: those registered in this cluster (by it or another
    // broker: its own registration may be under way after a restart) and those the other
    // cluster's broker confirmed a promotion of. A partition it does not hold has nothing to
    // cut (OFFSETS answers an empty range for it).
    let mut topics: BTreeSet<String> = BTreeSet::new();
    for (c, err) in [(here, true), (source, false)] {
        let names = match c.children(BROKER_TOPICS_PATH).await {
            Ok(t) => t,
            Err(CoordError::NoNode(_)) => Vec::new(),
            Err(e) if err => return Err(PlanError::Here(e)),
            Err(e) => return Err(PlanError::Source(e)),
        };
        topics.extend(names);
    }
    // Whether the other cluster is promoted as a whole (every topic its brokers hold).
    let whole = match source.get(PROMOTED_PATH).await {
        Ok((data, _)) => data == CLUSTER_PROMOTED,
        Err(CoordError::NoNode(_)) => false,
        Err(e) => return Err(PlanError::Source(e)),
    };
    let promoted_topics = match source.children(PROMOTED_PATH).await {
        Ok(names) => names,
        Err(CoordError::NoNode(_)) => Vec::new(),
        Err(e) => return Err(PlanError::Source(e)),
    };
    topics.extend(promoted_topics.iter().cloned());
    // The other cluster's broker must be up: what it holds (and has confirmed) decides every
    // cut, and nothing is guessed.
    let source_address = match source.get(&broker_id_path(source_id)).await {
        Ok((data, _)) => parse_broker_registration(&String::from_utf8_lossy(&data)),
        Err(CoordError::NoNode(_)) => None,
        Err(e) => return Err(PlanError::Source(e)),
    }
    .ok_or(PlanError::SourceDown(source_id))?;
    let (host, port) = &broker.address;
    let mut ours = connect(env, host, *port, BROKER_TIMEOUT)
        .await
        .map_err(|e| PlanError::Cut(e.into()))?;
    let mut theirs = connect(env, &source_address.0, source_address.1, BROKER_TIMEOUT)
        .await
        .map_err(|e| PlanError::Cut(e.into()))?;
    for name in topics {
        let Ok(topic) = name.parse::<TopicName>() else {
            continue;
        };
        let ack = promoted_ack_path(&topic, source_id);
        let promotion_asked = whole || promoted_topics.contains(&name);
        let recorded = match source.get(&ack).await {
            Ok((data, _)) => Some(
                CutPoints::parse(&String::from_utf8_lossy(&data))
                    .map_err(|e| PlanError::Record(ack.clone(), e))?,
            ),
            Err(CoordError::NoNode(_)) => None,
            Err(e) => return Err(PlanError::Source(e)),
        };
        let on_source = count_at(source, &broker_topic_partitions_path(&topic, source_id))
            .await
            .map_err(PlanError::Source)?;
        let here_count = count_at(here, &broker_topic_partitions_path(&topic, broker.id))
            .await
            .map_err(PlanError::Here)?;
        let recorded_count = recorded
            .as_ref()
            .and_then(|r| r.0.keys().next_back().map(|p| p + 1));
        let Some(count) = here_count.or(recorded_count).or(on_source) else {
            continue;
        };
        let on_source = on_source.is_some();
        // A promotion of the other cluster that its broker has not carried out yet: that
        // broker may still copy from this cluster, so its history is not settled.
        if promotion_asked && recorded.is_none() && on_source {
            return Err(PlanError::NotPromotedYet(source_id, name.clone()));
        }
        for partition in 0..count {
            let tp = TopicPartition::new(topic.clone(), partition);
            // A partition the other broker did not hold when it was promoted was never copied
            // there: all of it is this cluster's own. One it confirmed as `?` is compared.
            let cut = recorded
                .as_ref()
                .and_then(|r| r.0.get(&partition).copied().unwrap_or(Some(0)));
            if recorded.is_none() && !on_source {
                demotion.left.push((
                    broker.id,
                    tp,
                    "the other cluster does not have this topic: left as it is (read-only, not copied)".into(),
                ));
                continue;
            }
            let found = cut::find(&mut ours, &mut theirs, &tp, cut)
                .await
                .map_err(PlanError::Cut)?;
            demotion.planned.push(Planned {
                broker: broker.id,
                tp,
                found,
            });
        }
    }
    Ok(())
}

/// Prints the plan: one line per partition.
fn print_plan(
    out: &mut impl Write,
    options: &DemoteOptions,
    brokers: &[ReplicaBroker],
    demotion: &Demotion,
) -> std::io::Result<()> {
    writeln!(out, "demotion of the cluster at {}:", options.zk_connect)?;
    for b in brokers {
        writeln!(
            out,
            "  broker {} ({}:{}) copies broker {} of {}",
            b.id, b.address.0, b.address.1, b.record.source_broker_id, b.record.source_zk
        )?;
    }
    let (mut messages, mut bytes) = (0u64, 0u64);
    for p in &demotion.planned {
        let why = match p.found.from {
            CutFrom::Promotion => "where the other cluster was promoted",
            CutFrom::PromotionAndCompared => {
                "past the other cluster's promotion: this log copied its messages since"
            }
            CutFrom::Compared => "where the two logs first differ",
        };
        let name = format!("{}/{}-{}", p.tp.topic, p.broker, p.tp.partition);
        match (p.found.end, p.found.entries) {
            (Some(end), Some(entries)) if end > p.found.cut => {
                messages += entries;
                bytes += end - p.found.cut;
                writeln!(
                    out,
                    "  {name}: cut at {} ({why}): {entries} messages, {} bytes ({}..{end}) past it go to {}",
                    p.found.cut,
                    end - p.found.cut,
                    p.found.cut,
                    diverged_file_name(p.found.cut, end)
                )?;
            }
            _ => writeln!(
                out,
                "  {name}: cut at {} ({why}): nothing past it",
                p.found.cut
            )?,
        }
    }
    for (broker, tp, why) in &demotion.left {
        writeln!(out, "  {}/{broker}-{}: {why}", tp.topic, tp.partition)?;
    }
    writeln!(
        out,
        "in all: {messages} messages, {bytes} bytes past the cuts (kept in .diverged files beside the logs)"
    )
}

/// Undoes this cluster's promotions and writes each broker's plan, then the demotion's id
/// (brokers act on the id, so they never see a plan half written).
/// Returns the confirmations of the demotion it replaces.
async fn request<C: Coordination>(
    coord: &C,
    brokers: &[ReplicaBroker],
    demotion: &Demotion,
) -> Result<BTreeMap<i32, Report>, CoordError> {
    let mut earlier = BTreeMap::new();
    for b in brokers {
        match coord.get(&demotion_done_path(b.id)).await {
            Ok((data, _)) => {
                if let Ok(report) = Report::parse(&String::from_utf8_lossy(&data)) {
                    earlier.insert(b.id, report);
                }
            }
            Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    delete_tree(coord, PROMOTED_PATH).await?;
    delete_tree(coord, DEMOTION_PATH).await?;
    coord.ensure_parents(DEMOTION_PATH).await?;
    match coord.create(DEMOTION_PATH, b"", NodeKind::Persistent).await {
        Ok(_) | Err(CoordError::NodeExists(_)) => {}
        Err(e) => return Err(e),
    }
    for b in brokers {
        let plan = Plan(
            demotion
                .planned
                .iter()
                .filter(|p| p.broker == b.id)
                .map(|p| PlanEntry {
                    topic: p.tp.topic.clone(),
                    partition: p.tp.partition,
                    cut: p.found.cut,
                    nothing_past: p.found.end.is_some_and(|end| end <= p.found.cut),
                })
                .collect(),
        );
        coord
            .create(
                &demotion_plan_path(b.id),
                plan.encode().as_bytes(),
                NodeKind::Persistent,
            )
            .await?;
    }
    coord
        .set(DEMOTION_PATH, demotion.id.as_bytes(), None)
        .await?;
    Ok(earlier)
}

/// Deletes `path` and everything under it (nothing there is fine). A child made meanwhile (a
/// broker confirming a promotion as it is withdrawn) is deleted on a second pass.
async fn delete_tree<C: Coordination>(coord: &C, path: &str) -> Result<(), CoordError> {
    for _ in 0..DELETE_PASSES - 1 {
        match delete_tree_once(coord, path).await {
            Err(CoordError::NotEmpty(_)) => continue,
            done => return done,
        }
    }
    delete_tree_once(coord, path).await
}

/// Passes [`delete_tree`] makes at most.
const DELETE_PASSES: usize = 5;

/// One pass of [`delete_tree`].
async fn delete_tree_once<C: Coordination>(coord: &C, path: &str) -> Result<(), CoordError> {
    let mut stack = vec![path.to_string()];
    let mut order = Vec::new();
    while let Some(at) = stack.pop() {
        match coord.children(&at).await {
            Ok(children) => {
                stack.extend(children.iter().map(|c| format!("{at}/{c}")));
                order.push(at);
            }
            Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    for at in order.iter().rev() {
        match coord.delete(at, None).await {
            Ok(()) | Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Waits for every broker's report of this demotion (at most `wait`); the brokers that did not
/// confirm.
async fn confirmations<E: Env>(
    env: &E,
    coord: &E::Coord,
    brokers: &[ReplicaBroker],
    wait: Duration,
    demotion: &mut Demotion,
) -> Result<Vec<i32>, CoordError> {
    let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
    let deadline = env.now_ms().saturating_add(wait_ms);
    let mut missing = Vec::new();
    for b in brokers {
        loop {
            let report = match coord.get(&demotion_done_path(b.id)).await {
                Ok((data, _)) => Report::parse(&String::from_utf8_lossy(&data))
                    .ok()
                    .filter(|r| r.demotion == demotion.id),
                Err(CoordError::NoNode(_)) => None,
                Err(e) => return Err(e),
            };
            if let Some(report) = report {
                demotion.reports.insert(b.id, report);
                break;
            }
            if env.now_ms() >= deadline {
                missing.push(b.id);
                break;
            }
            tokio::time::sleep(CONFIRM_POLL).await;
        }
    }
    Ok(missing)
}

/// Prints every broker's report.
fn print_reports(out: &mut impl Write, demotion: &Demotion) -> std::io::Result<()> {
    for (broker, report) in &demotion.reports {
        writeln!(out, "broker {broker} confirmed:")?;
        for e in &report.entries {
            let name = format!("{}-{}", e.topic, e.partition);
            match &e.outcome {
                Outcome::Cut { end, entries, file } if file != "-" => writeln!(
                    out,
                    "  {name}: cut back to {}: {entries} messages ({} bytes) kept in {file}",
                    e.cut,
                    end.saturating_sub(e.cut)
                )?,
                Outcome::Cut { .. } => writeln!(
                    out,
                    "  {name}: copies on from {} (nothing of its own past it)",
                    e.cut
                )?,
                Outcome::Refused(why) => {
                    writeln!(out, "  {name}: NOT cut back to {}: {why}", e.cut)?
                }
            }
        }
    }
    Ok(())
}

/// `tributary demote`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DemoteArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`), for both clusters.
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// The ZooKeeper of the cluster that becomes a replica again: HOST:PORT[/CHROOT].
    #[arg(long)]
    pub zookeeper: String,
    /// Print the plan (every partition's cut, and what this cluster holds past it) and change
    /// nothing.
    #[arg(long = "dry-run")]
    pub dry_run: bool,
    /// Seconds to wait for every broker's confirmation.
    #[arg(long, default_value_t = 60)]
    pub wait: u64,
}

/// Demotes as `args` asks, printing the plan and the brokers' confirmations. `Err` for a wrong
/// flag, a plan that cannot be worked out, or brokers that did not confirm in time.
pub fn run_cli(args: DemoteArgs) -> Result<ExitCode, ToolError> {
    let DemoteArgs {
        zk_security,
        zookeeper,
        dry_run,
        wait,
    } = args;
    let options = DemoteOptions {
        zk_connect: zk_security.connect("--zookeeper", &zookeeper)?,
        dry_run,
        wait: Duration::from_secs(wait),
    };
    runtime(Some(1))?
        .block_on(demote(&TokioEnv, &options, &mut std::io::stdout()))
        .map_err(ToolError::failed)?;
    Ok(ExitCode::SUCCESS)
}
