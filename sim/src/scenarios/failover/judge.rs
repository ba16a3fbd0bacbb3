//! The failover scenario's checks on the final read (S27, S28, S30) and its figures.

use std::collections::{BTreeMap, BTreeSet};

use tributary_core::message::ShallowIter;
use tributary_core::replica::demotion::DivergedLog;

use super::{state, FailoverReport, FinalRead, Shared, Step};
use crate::invariants::Invariant;
use crate::mirror::Part;
use crate::world::Control;

/// The messages of `bytes` (read from offset `base`): offset → payload.
fn messages(bytes: &[u8], base: u64) -> BTreeMap<u64, Vec<u8>> {
    ShallowIter::new(bytes, i64::try_from(base).unwrap_or(i64::MAX))
        .filter_map(Result::ok)
        .filter_map(|e| Some((u64::try_from(e.offset).ok()?, e.message.payload.to_vec())))
        .collect()
}

fn of(parts: &FinalRead, cluster: &str) -> BTreeMap<Part, Vec<u8>> {
    parts
        .iter()
        .filter(|((c, _), _)| c == cluster)
        .map(|((_, p), b)| (p.clone(), b.clone()))
        .collect()
}

/// The cuts cluster `model`'s brokers recorded in their diverged logs: partition → (cut, end).
fn diverged_logs(model: &crate::zk_model::SharedModel) -> BTreeMap<Part, (u64, u64)> {
    let m = model.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = BTreeMap::new();
    for broker in m.children("/tributary/diverged") {
        let Some(data) = m.data(&format!("/tributary/diverged/{broker}")) else {
            continue;
        };
        let Ok(log) = DivergedLog::parse(&String::from_utf8_lossy(&data)) else {
            continue;
        };
        for e in log.0 {
            out.insert(
                (e.topic.to_string(), format!("{broker}-{}", e.partition)),
                (e.cut, e.end),
            );
        }
    }
    out
}

/// Whether b holds exactly what a holds (it copies a again after the switchback).
pub(super) fn settled(parts: &FinalRead) -> bool {
    let (a, b) = (of(parts, "a"), of(parts, "b"));
    !a.is_empty() && a.iter().all(|(p, bytes)| b.get(p) == Some(bytes))
}

/// What differs between a and b, for the report.
pub(super) fn unsettled(parts: &FinalRead) -> String {
    let (a, b) = (of(parts, "a"), of(parts, "b"));
    let behind: Vec<String> = a
        .iter()
        .filter(|(p, bytes)| b.get(*p) != Some(*bytes))
        .map(|(p, bytes)| {
            format!(
                "{}/{}: a {} bytes, b {}",
                p.0,
                p.1,
                bytes.len(),
                b.get(p).map_or(0, Vec::len)
            )
        })
        .take(4)
        .collect();
    behind.join("; ")
}

/// S27, S28 and S30 on the final read, and the run's figures.
pub(super) fn judge(
    shared: &Shared,
    control: &Control,
    a_model: &crate::zk_model::SharedModel,
    report: &mut FailoverReport,
) {
    let cuts = &diverged_logs(a_model);
    let s = state(shared);
    let Some(Ok(parts)) = &s.final_read else {
        return;
    };
    let a = of(parts, "a");
    let final_messages: BTreeMap<&Part, BTreeMap<u64, Vec<u8>>> =
        a.iter().map(|(p, bytes)| (p, messages(bytes, 0))).collect();
    let in_final: BTreeSet<&Vec<u8>> = final_messages.values().flat_map(BTreeMap::values).collect();
    // What a's demotion moved out: from what a held before it, between each cut and end.
    let mut diverged: BTreeMap<&Part, BTreeMap<u64, Vec<u8>>> = BTreeMap::new();
    for (part, (cut, end)) in cuts {
        let Some(before) = s.before_demotion.get(part) else {
            return control.violate(
                Invariant::FailoverDivergedExact,
                format!(
                    "{}/{}: cut at {cut}, but a did not hold it before its demotion",
                    part.0, part.1
                ),
            );
        };
        let (from, to) = (
            usize::try_from(*cut).unwrap_or(usize::MAX),
            usize::try_from(*end).unwrap_or(usize::MAX),
        );
        let Some(tail) = before.get(from..to.min(before.len())) else {
            return control.violate(
                Invariant::FailoverDivergedExact,
                format!(
                    "{}/{}: cut at {cut}..{end}, past what a held ({} bytes)",
                    part.0,
                    part.1,
                    before.len()
                ),
            );
        };
        diverged.insert(part, messages(tail, *cut));
    }
    // S28: nothing the other cluster holds was cut: no message moved out is the one the final
    // log holds at that offset (what the other cluster copied is common history).
    for (part, tail) in &diverged {
        let held = final_messages.get(part);
        if let Some((offset, payload)) = tail
            .iter()
            .find(|(o, m)| held.and_then(|h| h.get(*o)) == Some(*m))
        {
            return control.violate(
                Invariant::FailoverDivergedExact,
                format!("{}/{}: the message at {offset} ({}) was moved to the diverged file, yet the clusters hold it", part.0, part.1, String::from_utf8_lossy(payload)),
            );
        }
    }
    // S27: every acknowledgement of the primary of its time holds at its offset.
    let mut lost = 0;
    for acked in &s.acked {
        let held = final_messages
            .get(&acked.part)
            .and_then(|m| m.get(&acked.offset))
            == Some(&acked.payload);
        if held {
            continue;
        }
        let kept = acked.cluster == "a"
            && acked.step < Step::Disaster
            && diverged.get(&acked.part).and_then(|m| m.get(&acked.offset)) == Some(&acked.payload);
        if kept {
            lost += 1;
            continue;
        }
        return control.violate(
            Invariant::FailoverNoLoss,
            format!(
                "{} acknowledged by {} ({:?}) at {}/{} offset {} is neither there nor in a diverged file",
                String::from_utf8_lossy(&acked.payload),
                acked.cluster,
                acked.step,
                acked.part.0,
                acked.part.1,
                acked.offset
            ),
        );
    }
    // S30: the group read everything the final log holds, and back on a it resumed where it
    // had committed on b (it re-reads only what it read there without committing it).
    let read: BTreeSet<&Vec<u8>> = s.reads.iter().map(|r| &r.payload).collect();
    if let Some(skipped) = in_final.iter().find(|m| !read.contains(*m)) {
        return control.violate(
            Invariant::FailoverOffsetsFollow,
            format!("the group never read {}", String::from_utf8_lossy(skipped)),
        );
    }
    let rereads = |generation: u64| {
        let earlier: BTreeSet<&Vec<u8>> = s
            .reads
            .iter()
            .filter(|r| r.generation < generation)
            .map(|r| &r.payload)
            .collect();
        s.reads
            .iter()
            .filter(|r| r.generation == generation && earlier.contains(&r.payload))
            .count()
    };
    report.rereads = (rereads(1), rereads(2));
    let earlier: BTreeSet<&Vec<u8>> = s
        .reads
        .iter()
        .filter(|r| r.generation < 2)
        .map(|r| &r.payload)
        .collect();
    let behind_commit = s.reads.iter().find(|r| {
        r.generation == 2
            && earlier.contains(&r.payload)
            && s.committed_at_switch
                .get(&r.partition)
                .is_some_and(|c| r.next <= *c)
    });
    if let Some(r) = behind_commit {
        return control.violate(
            Invariant::FailoverOffsetsFollow,
            format!(
                "after the planned switchback the group re-read {} messages, among them {} ({} before offset {}), which it had committed on b ({:?})",
                report.rereads.1,
                String::from_utf8_lossy(&r.payload),
                r.partition,
                r.next,
                s.committed_at_switch
            ),
        );
    }
    report.lost_at_disaster = lost;
    report.diverged = diverged.values().map(BTreeMap::len).sum();
}
