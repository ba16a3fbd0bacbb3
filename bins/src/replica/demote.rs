//! Demotion, on a replica broker: this cluster becomes a replica of its source again, keeping
//! its data. `tributary demote` writes a plan per broker in this cluster's ZooKeeper
//! (`core::replica::demotion`); the copier carries it out between two rounds, before copying
//! anything more:
//!
//! 1. every promotion is undone: the topics the filter allows are read-only again;
//! 2. each planned partition whose log took writes here (its topic was writable) or does not
//!    copy (stopped for divergence, or not checked yet on this run) is cut back to its cut,
//!    everything past it kept in a diverged file ([`Log::cut_tail`]); a partition that copies
//!    from the source already, its prefix checked, holds only the source's bytes past the cut
//!    and is left as it is;
//! 3. the synced groups' offsets here are handed back to the syncer (see
//!    [`super::offset_sync::adopt_offsets`]): commits made here before the demotion are of
//!    another epoch of the group, and the source's replace them;
//! 4. what was moved out is added to the broker's diverged log (`/tributary/diverged/<id>`,
//!    which no later demotion replaces); the broker confirms with a report (`done-<id>`), and
//!    copying resumes at each cut, every partition's prefix checked again first.
//!
//! A broker that is down when the plan is written carries it out when it starts, before
//! copying anything; one that stops half way does it again (a cut already made moves nothing,
//! a tail already saved is not saved twice).
//!
//! [`Log::cut_tail`]: tributary_core::log::Log::cut_tail

use super::offset_sync::adopt_offsets;
#[allow(clippy::wildcard_imports)]
use super::*;
use tributary_core::replica::demotion::{
    DivergedEntry, DivergedLog, Outcome, Plan, PlanEntry, Report, ReportEntry,
};
use tributary_core::zk_layout::{
    demotion_done_path, demotion_plan_path, diverged_log_path, DEMOTION_PATH,
};

/// What the demotion works on, besides this cluster's ZooKeeper.
pub(super) struct Demoting<'a, F: tributary_core::log::LogFs + Clone> {
    pub(super) broker: &'a BrokerConfig,
    pub(super) replica: &'a ReplicaConfig,
    pub(super) logs: &'a Arc<Logs<F>>,
    pub(super) copied: &'a mut BTreeMap<TopicPartition, Copied>,
    pub(super) synced: &'a mut BTreeMap<(String, TopicPartition), i64>,
    /// The last demotion this run carried out or found confirmed (not read again).
    pub(super) handled: &'a mut Option<String>,
}

/// Carries out this broker's part of the cluster's current demotion, if there is one it has
/// not confirmed yet (see the module's documentation); `true` when it did so now.
pub(super) async fn demotion<E: Env>(
    env: &E,
    c: &E::Coord,
    mut d: Demoting<'_, E::Fs>,
) -> Result<bool, CoordError> {
    let me = d.broker.broker_id;
    let Some((id, plan)) = pending_demotion(c, me, d.handled).await? else {
        return Ok(false);
    };
    let done_path = demotion_done_path(me);
    // Which partitions took writes here, before the promotions are undone.
    let writable: BTreeMap<TopicPartition, bool> = plan
        .0
        .iter()
        .map(|e| {
            let tp = TopicPartition::new(e.topic.clone(), e.partition);
            let was_writable = !d.logs.is_replica(&e.topic);
            (tp, was_writable)
        })
        .collect();
    let was_cluster = d.logs.is_cluster_promoted();
    let undone = if planted::active(Bug::DemoteLeavesWritable) {
        Vec::new()
    } else {
        d.logs.demote()
    };
    let undone = if was_cluster {
        "the whole cluster's".to_string()
    } else if undone.is_empty() {
        "no".to_string()
    } else {
        undone
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    tracing::warn!(
        "replica: demotion {id}: this cluster becomes a replica of {} again ({undone} promotion undone); cutting {} partitions back to where they diverged, what they hold past it kept in .diverged files",
        d.replica.source,
        plan.0.len()
    );
    let mut entries = Vec::with_capacity(plan.0.len());
    for entry in &plan.0 {
        entries.push(carry_out(env, &mut d, entry, &writable).await);
    }
    if let Err(e) = logs::checkpoint(env, d.logs).await {
        tracing::warn!("replica: demotion {id}: writing the recovery checkpoint: {e}");
    }
    if let Some(groups) = &d.replica.offsets_sync_groups {
        if !planted::active(Bug::DemoteKeepsOldOffsets) {
            adopt_offsets(c, d.logs, groups, me).await?;
        }
        d.synced.clear();
    }
    index_diverged(c, me, &id, &entries).await?;
    let report = Report {
        demotion: id.clone(),
        entries,
    };
    crate::coordination::nodes::put(c, &done_path, report.encode().as_bytes()).await?;
    tracing::info!("replica: demotion {id} carried out and confirmed; copying from the source resumes at each cut");
    *d.handled = Some(id);
    Ok(true)
}

/// The cluster's current demotion and this broker's plan for it, when this broker has not
/// carried it out yet; `None` when there is none, it is handled (confirmed, or its plan cannot
/// be read: never guessed at, nothing is cut and it is not confirmed).
async fn pending_demotion<C: Coordination>(
    c: &C,
    me: i32,
    handled: &mut Option<String>,
) -> Result<Option<(String, Plan)>, CoordError> {
    let id = match c.get(DEMOTION_PATH).await {
        Ok((data, _)) => String::from_utf8_lossy(&data).trim().to_string(),
        Err(CoordError::NoNode(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    if id.is_empty() || handled.as_deref() == Some(id.as_str()) {
        return Ok(None);
    }
    match c.get(&demotion_done_path(me)).await {
        Ok((data, _))
            if Report::parse(&String::from_utf8_lossy(&data)).is_ok_and(|r| r.demotion == id) =>
        {
            *handled = Some(id);
            return Ok(None);
        }
        Ok(_) | Err(CoordError::NoNode(_)) => {}
        Err(e) => return Err(e),
    }
    let plan = match c.get(&demotion_plan_path(me)).await {
        Ok((data, _)) => match Plan::parse(&String::from_utf8_lossy(&data)) {
            Ok(plan) => plan,
            Err(e) => {
                tracing::error!("replica: demotion {id}: this broker's plan cannot be read ({e}); nothing was cut; run `tributary demote` again");
                *handled = Some(id);
                return Ok(None);
            }
        },
        Err(CoordError::NoNode(_)) => Plan::default(),
        Err(e) => return Err(e),
    };
    Ok(Some((id, plan)))
}

/// Carries out one plan entry: cuts its partition back (unless it holds only copies of the
/// source's messages past the cut), and, once cut, copying resumes at the cut.
async fn carry_out<E: Env>(
    env: &E,
    d: &mut Demoting<'_, E::Fs>,
    entry: &PlanEntry,
    writable: &BTreeMap<TopicPartition, bool>,
) -> ReportEntry {
    let tp = TopicPartition::new(entry.topic.clone(), entry.partition);
    let state = d.copied.get(&tp);
    let copying = state.is_some_and(|s| s.verified && s.stopped.is_none());
    // A replica (no produces taken here) whose log was checked against the source on this
    // run, or held nothing past the cut when the demotion was planned, holds past the cut
    // only copies of the source's messages: cutting them would move common history into
    // a diverged file (a demotion run again while a broker copies, or carried out as it
    // restarts, before its copy is checked again).
    let copies_only = copying || entry.nothing_past;
    let outcome = if copies_only && !writable.get(&tp).copied().unwrap_or(false) {
        Outcome::Cut {
            end: entry.cut,
            entries: 0,
            file: "-".into(),
        }
    } else {
        cut_partition(env, d.logs, &tp, entry.cut).await
    };
    match &outcome {
        Outcome::Cut { end, entries, file } if file != "-" => tracing::warn!(
            "replica: {tp}: cut back to {}: {entries} messages ({} bytes, {}..{end}) written here past the other cluster's history are kept in {file}; dump-log lists them, replay-log-producer --from-file re-publishes them",
            entry.cut,
            end.saturating_sub(entry.cut),
            entry.cut
        ),
        Outcome::Cut { .. } => {}
        Outcome::Refused(why) => tracing::error!(
            "replica: {tp}: not cut back to {}: {why}; it does not copy until this is looked at",
            entry.cut
        ),
    }
    if let Some(state) = d.copied.get_mut(&tp) {
        if matches!(outcome, Outcome::Cut { .. }) {
            // Copying resumes at the cut, its prefix checked again first.
            state.stopped = None;
            state.next = None;
            state.mark = None;
            state.verified = false;
            state.verifying = None;
        }
    }
    ReportEntry {
        topic: entry.topic.clone(),
        partition: entry.partition,
        cut: entry.cut,
        outcome,
    }
}

/// Indexes what the demotion moved out where no later demotion replaces it (before the
/// demotion is confirmed).
async fn index_diverged<C: Coordination>(
    c: &C,
    me: i32,
    id: &str,
    entries: &[ReportEntry],
) -> Result<(), CoordError> {
    let moved: Vec<DivergedEntry> = entries
        .iter()
        .filter_map(|e| match &e.outcome {
            Outcome::Cut { end, entries, file } if file != "-" => Some(DivergedEntry {
                demotion: id.to_string(),
                topic: e.topic.clone(),
                partition: e.partition,
                cut: tributary_core::log::parse_diverged_file_name(file).map_or(e.cut, |(c, _)| c),
                end: *end,
                entries: *entries,
                file: file.clone(),
            }),
            _ => None,
        })
        .collect();
    if !moved.is_empty() {
        let path = diverged_log_path(me);
        let mut log = match c.get(&path).await {
            Ok((data, _)) => {
                DivergedLog::parse(&String::from_utf8_lossy(&data)).unwrap_or_else(|e| {
                    tracing::warn!("replica: {path}: {e}; starting it again");
                    DivergedLog::default()
                })
            }
            Err(CoordError::NoNode(_)) => DivergedLog::default(),
            Err(e) => return Err(e),
        };
        log.extend(moved);
        crate::coordination::nodes::put(c, &path, log.encode().as_bytes()).await?;
    }
    Ok(())
}

/// Cuts `tp`'s log back to `cut` (a planted bug cuts one message earlier).
async fn cut_partition<E: Env>(
    env: &E,
    logs: &Arc<Logs<E::Fs>>,
    tp: &TopicPartition,
    cut: u64,
) -> Outcome {
    let Some(log) = logs.get(tp) else {
        return Outcome::Cut {
            end: cut,
            entries: 0,
            file: "-".into(),
        };
    };
    let now = env.now_ms();
    let early = planted::active(Bug::DemoteCutsOneEarly);
    let result = with_log(env, &log, move |l| {
        let end = l.written_end();
        if cut > end {
            // Shorter than the other cluster's history here: nothing of its own to keep.
            return Ok(tributary_core::log::TailCut {
                cut: end,
                end,
                entries: 0,
                file: None,
            });
        }
        let cut = match (early, l.entry_before(cut)) {
            (true, Ok(Some(before))) => before,
            _ => cut,
        };
        l.cut_tail(cut, now)
    })
    .await;
    match result {
        Ok(done) => Outcome::Cut {
            end: done.end,
            entries: done.entries,
            file: done
                .file
                .and_then(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "-".into()),
        },
        Err(e) => Outcome::Refused(e.to_string()),
    }
}
