//! The invariants judged from the history: 4 against the mirror group's committed offsets in
//! the source's ZooKeeper while the run goes, the lag the drain (invariant 5) waits out, and after
//! the drain 1, 2, 3 and 6 and the metrics' agreement, against the final read of both clusters.

use std::collections::{BTreeMap, BTreeSet};

use super::history::{state, Shared, State};
use super::hosts::{parse_payload, payload};
use super::reads::{partitions_of, FinalRead};
use super::shape::Shape;
use super::{MirrorReport, Part, GROUP};
use crate::invariants::Invariant;
use crate::world::{Cluster, Control};

/// Source partitions whose committed offset is not yet their latest: (partition, committed,
/// latest).
pub(super) fn lag(source: &Cluster, shared: &Shared) -> Vec<(Part, i64, i64)> {
    let committed = committed_offsets(source);
    let s = state(shared);
    let Some(since) = s.producers_stopped_at else {
        return vec![(("?".into(), "?".into()), 0, -1)];
    };
    // Every partition known: registered now, or written or forwarded (a bounced broker may not
    // be registered again yet). One whose end was not read since the producers stopped counts
    // as behind (latest -1): its end is not known.
    let mut parts: BTreeSet<Part> = partitions_of(&source.model).into_iter().collect();
    parts.extend(s.acked.values().map(|a| a.part.clone()));
    parts.extend(s.forwards.keys().cloned());
    parts
        .into_iter()
        .filter_map(|part| {
            let at = committed.get(&part).copied().unwrap_or(0);
            match s.source_latest.get(&part) {
                Some((polled, latest)) if *polled >= since => {
                    (*latest > 0 && at < *latest).then_some((part, at, *latest))
                }
                _ => Some((part, at, -1)),
            }
        })
        .collect()
}

/// How many messages the source acknowledged start at or past the mirror group's committed
/// offset of their partition: what the mirror has still to copy.
pub(super) fn messages_behind(source: &Cluster, shared: &Shared) -> usize {
    let committed = committed_offsets(source);
    state(shared)
        .acked
        .values()
        .filter(|a| a.start >= committed.get(&a.part).copied().unwrap_or(0))
        .count()
}

/// The mirror group's committed offsets in the source's ZooKeeper model.
fn committed_offsets(source: &Cluster) -> BTreeMap<Part, i64> {
    let m = source.model.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = BTreeMap::new();
    let base = format!("/consumers/{GROUP}/offsets");
    for topic in m.children(&base) {
        for partition in m.children(&format!("{base}/{topic}")) {
            if let Some(offset) = m
                .data(&format!("{base}/{topic}/{partition}"))
                .and_then(|d| String::from_utf8_lossy(&d).trim().parse().ok())
            {
                out.insert((topic.clone(), partition), offset);
            }
        }
    }
    out
}

/// 4: every committed offset is the end of a message some mirror durably acknowledged — or the
/// starting point the group recorded when it first claimed the partition (before it forwarded
/// anything ending there).
pub(super) fn check_commits(source: &Cluster, shared: &Shared, control: &Control) {
    let committed = committed_offsets(source);
    let mut s = state(shared);
    for (part, offset) in committed {
        s.commits_checked += 1;
        let acked = s
            .acked_ends
            .get(&part)
            .is_some_and(|ends| ends.contains(&offset));
        let start = !s
            .forwards
            .get(&part)
            .is_some_and(|forwards| forwards.iter().any(|f| f.end <= offset));
        if !acked && !start {
            drop(s);
            return control.violate(Invariant::MirrorCommitSafety, format!("{}/{} committed at {offset}, which ends no message the mirror cluster acknowledged", part.0, part.1));
        }
    }
}

/// The end-of-run invariants: 1, 2, 3, 6 (5 and 4 are the driver's, 7 the observer's).
pub(super) fn judge(shared: &Shared, control: &Control, shape: &Shape, report: &mut MirrorReport) {
    let s = state(shared);
    let Some(read) = &s.final_read else { return };
    if let Some(problem) = read.problems.first() {
        return control.violate(
            Invariant::BrokerHealth,
            format!("the clusters cannot be read end to end after healing: {problem}"),
        );
    }
    // Where each source message is now: (partition, end offset) → payload.
    let mut at: BTreeMap<(&Part, i64), &[u8]> = BTreeMap::new();
    let mut source_copies: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (part, (_, messages)) in &read.source {
        for (_, end, payload) in messages {
            at.insert((part, *end), payload);
            *source_copies.entry(payload).or_insert(0) += 1;
        }
    }
    let judged = no_phantoms(&s, read, &at)
        .and_then(|()| acked_mirrored_or_gapped(&s, read, &source_copies))
        .and_then(|gap_messages| gaps_cover_only_deleted(&s, read).map(|()| gap_messages))
        .and_then(|gap_messages| {
            reforwards_bounded(&s, shape.reforward_bound()).map(|r| (gap_messages, r))
        });
    let (gap_messages, (worst, per_owner_max)) = match judged {
        Ok(judged) => judged,
        Err((invariant, detail)) => return control.violate(invariant, detail),
    };
    report.reforwards_owner_max = per_owner_max;
    report.reforwards_max = worst;
    report.acked = s.acked.len();
    report.mirrored = read
        .mirror
        .keys()
        .filter(|p| source_copies.contains_key(p.as_slice()))
        .count();
    report.duplicates = read
        .mirror
        .iter()
        .map(|(p, n)| {
            n.saturating_sub(source_copies.get(p.as_slice()).copied().unwrap_or(1).max(1))
        })
        .sum();
    report.gaps = s.gaps.len();
    report.gap_messages = gap_messages;
    // 32: with positions, a set sent again is never copied twice.
    if shape.preserve && report.duplicates > 0 {
        let example = read
            .mirror
            .iter()
            .find(|(p, n)| **n > source_copies.get(p.as_slice()).copied().unwrap_or(1).max(1))
            .map(|(p, n)| {
                // Where each copy is (mirror partition and offset), and where it came from.
                let copies: Vec<String> = read
                    .mirror_parts
                    .iter()
                    .flat_map(|(part, messages)| {
                        messages
                            .iter()
                            .filter(|m| m.2 == *p)
                            .map(move |m| format!("{}/{} at {}", part.0, part.1, m.0))
                    })
                    .collect();
                let source: Vec<String> = read
                    .source
                    .iter()
                    .flat_map(|(part, (_, messages))| {
                        messages
                            .iter()
                            .filter(|m| m.2 == *p)
                            .map(move |m| format!("{}/{} at {}", part.0, part.1, m.0))
                    })
                    .collect();
                format!(
                    "{} ({n} copies: {}; from {})",
                    String::from_utf8_lossy(p),
                    copies.join(", "),
                    source.join(", ")
                )
            });
        return control.violate(
            Invariant::MirrorExactlyOnce,
            format!(
                "{} duplicate copies with mirror.preserve.partitions on, e.g. {}",
                report.duplicates,
                example.unwrap_or_default()
            ),
        );
    }
    // 33: translated offsets skip nothing and stay within the mirror's data.
    if let Some(translations) = &s.translations {
        let judged = translations
            .as_ref()
            .map_err(|e| {
                format!("the mirror brokers could not translate offsets after the drain: {e}")
            })
            .and_then(|t| super::translation::judge(read, t));
        match judged {
            Ok(translated) => report.translations = translated,
            Err(detail) => return control.violate(Invariant::MirrorTranslation, detail),
        }
    }
    // 8: the metrics agree with the clusters.
    if let Some(problem) = s.metrics_problems.first() {
        control.violate(
            Invariant::MirrorMetrics,
            format!(
                "after the drain, the metrics disagree with the clusters ({} disagreements): {problem}",
                s.metrics_problems.len()
            ),
        );
    }
}

/// An invariant the final read breaks, with what breaks it.
type Judged<T> = Result<T, (Invariant, String)>;

/// 2: every forward is what the source holds at that offset (or was deleted by retention), and
/// the mirror cluster holds only messages a producer sent.
fn no_phantoms(s: &State, read: &FinalRead, at: &BTreeMap<(&Part, i64), &[u8]>) -> Judged<()> {
    for (part, forwards) in &s.forwards {
        let earliest = read.source.get(part).map_or(0, |(e, _)| *e);
        for f in forwards {
            if f.end <= earliest {
                continue;
            }
            if at.get(&(part, f.end)) != Some(&f.payload.as_slice()) {
                return Err((
                    Invariant::MirrorNoPhantom,
                    format!(
                        "{}/{}: {:?} forwarded {:?} ending at {}, but the source holds {:?} there",
                        part.0,
                        part.1,
                        f.owner,
                        String::from_utf8_lossy(&f.payload),
                        f.end,
                        at.get(&(part, f.end)).map(|p| String::from_utf8_lossy(p))
                    ),
                ));
            }
        }
    }
    for payload in read.mirror.keys() {
        if !parse_payload(payload).is_some_and(|seq| s.sent.contains(&seq)) {
            return Err((
                Invariant::MirrorNoPhantom,
                format!(
                    "the mirror cluster holds a message no producer sent: {:?}",
                    String::from_utf8_lossy(payload)
                ),
            ));
        }
    }
    Ok(())
}

/// 1 and 6: every acknowledged message is mirrored, or was deleted inside a reported gap; how
/// many were in gaps.
fn acked_mirrored_or_gapped(
    s: &State,
    read: &FinalRead,
    source_copies: &BTreeMap<&[u8], usize>,
) -> Judged<usize> {
    let mut gap_messages = 0;
    for (seq, acked) in &s.acked {
        let bytes = payload(*seq);
        if read.mirror.contains_key(&bytes) {
            continue;
        }
        let in_source = source_copies.contains_key(bytes.as_slice());
        let deleted = acked.start
            < read
                .source
                .get(&acked.part)
                .map_or(0, |(earliest, _)| *earliest);
        let in_gap = s.gaps.iter().any(|(part, from, to, _)| {
            *part == acked.part && acked.start >= *from && acked.start < *to
        });
        let (part, start) = (&acked.part, acked.start);
        match (in_source, deleted, in_gap) {
            (true, _, _) => return Err((Invariant::MirrorNoLoss, format!("m {seq} acknowledged at {}/{} {start} is in the source but not in the mirror cluster", part.0, part.1))),
            (false, true, true) => gap_messages += 1,
            (false, true, false) => {
                return Err((Invariant::MirrorGaps, format!("m {seq} acknowledged at {}/{} {start} was deleted by the source's retention unmirrored, and no gap was reported over it", part.0, part.1)))
            }
            (false, false, _) => {
                return Err((Invariant::MirrorNoLoss, format!("m {seq} acknowledged at {}/{} {start} is in neither cluster, though the source still holds that offset range: the acknowledgement was taken back", part.0, part.1)))
            }
        }
    }
    Ok(gap_messages)
}

/// 6: a reported gap covers only what the source no longer has.
fn gaps_cover_only_deleted(s: &State, read: &FinalRead) -> Judged<()> {
    for (part, from, to, at) in &s.gaps {
        // What the source held right after the report: its data below `to` must be gone.
        // (Earliest offsets only grow: the first poll after the report must be at or past `to`.)
        let polled_after = s
            .earliest_seen
            .get(part)
            .and_then(|seen| seen.iter().find(|(t, _)| *t >= *at).map(|(_, e)| *e));
        if let Some(earliest) = polled_after.filter(|e| to > e) {
            return Err((
                Invariant::MirrorGaps,
                format!(
                    "{}/{}: gap {from}..{to} reported at {at:?}, but the source still started at {earliest} then",
                    part.0, part.1
                ),
            ));
        }
        let earliest = read.source.get(part).map_or(0, |(e, _)| *e);
        if *to > earliest || from >= to {
            return Err((
                Invariant::MirrorGaps,
                format!(
                    "{}/{}: gap {from}..{to} reported, but the source still starts at {earliest}",
                    part.0, part.1
                ),
            ));
        }
    }
    Ok(())
}

/// 3: what one ownership of a partition (a mirror incarnation's epoch) forwards again is
/// within `bound`: its re-forwards end where its furthest predecessor got, and each had at most
/// that many uncommitted. (Summed over an ownership's partitions the bound holds per fault
/// only: stacked faults leave one window each — `reforwards_owner_max` reports it.) The most
/// one ownership forwarded again in one partition, and summed over its partitions.
fn reforwards_bounded(s: &State, bound: usize) -> Judged<(usize, usize)> {
    let mut worst = 0;
    let mut per_owner: BTreeMap<&(String, u64), usize> = BTreeMap::new();
    for (part, forwards) in &s.forwards {
        let mut seen: BTreeSet<i64> = BTreeSet::new();
        let mut again: BTreeMap<&(String, u64), usize> = BTreeMap::new();
        for f in forwards {
            if !seen.insert(f.end) {
                *again.entry(&f.owner).or_insert(0) += 1;
                *per_owner.entry(&f.owner).or_insert(0) += 1;
            }
        }
        if let Some((owner, n)) = again.iter().max_by_key(|(_, n)| **n) {
            worst = worst.max(*n);
            if *n > bound {
                return Err((Invariant::MirrorDuplicates, format!("{}/{}: {owner:?} forwarded {n} messages again that were forwarded before (bound 2 × queue.size × streams = {bound})", part.0, part.1)));
            }
        }
    }
    Ok((worst, per_owner.values().copied().max().unwrap_or(0)))
}
