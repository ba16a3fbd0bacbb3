//! S33: source offsets translated into mirror offsets by the mirror brokers (the production
//! [`translate`] a syncer and `translate-offsets` use), asked after the drain and judged
//! against both clusters read end to end.
//!
//! Each mirror partition is asked which source partitions it holds copies of; for each, the
//! start of every message the source still holds (and its end) is translated. A mirror
//! message is matched to its source message by payload, walking both partitions in order (a
//! copy keeps its source partition's order); payloads found in more than one source partition
//! cannot be matched and are left out.

use std::collections::BTreeMap;
use std::time::Duration;

use tributary::client::connect;
use tributary::mirror::held::translate;
use tributary_core::consumer::BrokerPartition;
use tributary_core::wire::{ErrorCode, MirrorPositionsRequest, Request, Response, TopicName};

use super::reads::FinalRead;
use super::Part;
use crate::env::SimEnv;
use crate::world::BROKER_PORT;

/// The most source offsets translated per (mirror partition, source partition).
const ASKED_MAX: usize = 600;
/// How long one broker is given.
const TIMEOUT: Duration = Duration::from_secs(5);

/// One translation: `from` (a source offset of `source`) into `to` (an offset of `mirror`).
#[derive(Debug, Clone)]
pub(super) struct Translation {
    pub(super) mirror: Part,
    pub(super) source: Part,
    pub(super) from: i64,
    pub(super) to: Option<i64>,
}

/// What the translations came to: how many were judged, and the most messages one of them
/// has a reader read again (messages before the source offset at or past the translation).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TranslationReport {
    /// Translations judged.
    pub judged: usize,
    /// The most messages one translation re-reads.
    pub rereads_max: usize,
}

/// Asks every mirror partition read in `read` for the source partitions it holds and
/// translates their offsets. An error names the partition that could not be asked.
pub(super) async fn ask(read: &FinalRead) -> Result<Vec<Translation>, String> {
    let mut out = Vec::new();
    for part in read.mirror_parts.keys() {
        let at = BrokerPartition::parse(&part.1).ok_or("bad mirror partition name")?;
        let topic: TopicName = part.0.parse().map_err(|_| "bad mirror topic")?;
        let host = format!("dst-broker{}", at.broker_id);
        let sources = held_sources(&host, &topic, at.partition).await?;
        for key in sources {
            let source: Part = (key.topic.to_string(), key.partition.to_string());
            let Some((_, messages)) = read.source.get(&source) else {
                continue;
            };
            let asked: Vec<(_, i64)> = offsets_to_ask(messages)
                .into_iter()
                .map(|offset| (key.clone(), offset))
                .collect();
            let answers = translate(
                &SimEnv::new(0),
                (&host, BROKER_PORT),
                &(topic.clone(), at),
                &asked,
                TIMEOUT,
            )
            .await
            .map_err(|e| e.to_string())?;
            out.extend(
                asked
                    .iter()
                    .zip(answers)
                    .map(|((_, from), to)| Translation {
                        mirror: part.clone(),
                        source: source.clone(),
                        from: *from,
                        to,
                    }),
            );
        }
    }
    Ok(out)
}

/// The source partitions a mirror partition holds copies of.
async fn held_sources(
    host: &str,
    topic: &TopicName,
    partition: u32,
) -> Result<Vec<tributary_core::mirror::position::SourceKey>, String> {
    let mut conn = connect(&SimEnv::new(0), host, BROKER_PORT, TIMEOUT)
        .await
        .map_err(|e| format!("{host}: {e}"))?;
    let ask = Request::MirrorPositions(MirrorPositionsRequest {
        topic: topic.clone(),
        partition: i32::try_from(partition).map_err(|_| "partition out of range")?,
        translate: Vec::new(),
    });
    match conn.call(&ask).await.map_err(|e| format!("{host}: {e}"))? {
        Response::MirrorPositions(r) if r.error == ErrorCode::NoError => {
            Ok(r.sources.into_iter().map(|s| s.key).collect())
        }
        other => Err(format!("{host} {topic}/{partition}: answered {other:?}")),
    }
}

/// Every distinct message start of a source partition and its end, at most [`ASKED_MAX`]
/// spread evenly.
fn offsets_to_ask(messages: &[(i64, i64, Vec<u8>)]) -> Vec<i64> {
    let mut offsets: Vec<i64> = messages.iter().map(|(start, _, _)| *start).collect();
    offsets.extend(messages.last().map(|(_, end, _)| *end));
    offsets.dedup();
    let stride = offsets.len().div_ceil(ASKED_MAX).max(1);
    offsets.into_iter().step_by(stride).collect()
}

/// Per mirror partition and source partition: each matched copy as (mirror start, source
/// start), in mirror order.
type Matched = BTreeMap<(Part, Part), Vec<(i64, i64)>>;

/// Matches the copies of `read`'s mirror partitions to their source messages. An error says
/// where a copy left its source partition's order.
fn match_copies(read: &FinalRead) -> Result<Matched, String> {
    // Payloads found in exactly one source partition, and that partition.
    let mut home: BTreeMap<&[u8], Option<&Part>> = BTreeMap::new();
    for (part, (_, messages)) in &read.source {
        for (_, _, payload) in messages {
            let entry = home.entry(payload.as_slice()).or_insert(Some(part));
            if *entry != Some(part) {
                *entry = None;
            }
        }
    }
    let mut matched = Matched::new();
    for (mirror, copies) in &read.mirror_parts {
        // Per source partition: the index of the next source message to match.
        let mut next: BTreeMap<&Part, usize> = BTreeMap::new();
        for (mirror_start, _, payload) in copies {
            let Some(Some(source)) = home.get(payload.as_slice()) else {
                continue;
            };
            let Some((_, messages)) = read.source.get(*source) else {
                continue;
            };
            let from = next.entry(source).or_insert(0);
            let found = messages
                .iter()
                .enumerate()
                .skip(*from)
                .find(|(_, (_, _, p))| p == payload);
            let Some((index, (source_start, _, _))) = found else {
                return Err(format!(
                    "{}/{} at {mirror_start}: {:?} is out of {}/{}'s order",
                    mirror.0,
                    mirror.1,
                    String::from_utf8_lossy(payload),
                    source.0,
                    source.1
                ));
            };
            *from = index + 1;
            matched
                .entry((mirror.clone(), (*source).clone()))
                .or_default()
                .push((*mirror_start, *source_start));
        }
    }
    Ok(matched)
}

/// S33 over `translations`: each is at most its mirror partition's end, and no copy before it
/// holds a source message at or past the offset translated.
pub(super) fn judge(
    read: &FinalRead,
    translations: &[Translation],
) -> Result<TranslationReport, String> {
    let matched = match_copies(read)?;
    let mut report = TranslationReport::default();
    for t in translations {
        let name = format!(
            "{}/{} {} → {}/{}",
            t.source.0, t.source.1, t.from, t.mirror.0, t.mirror.1
        );
        let Some(to) = t.to else {
            return Err(format!(
                "{name}: no translation, though the partition holds copies of that source"
            ));
        };
        let end = read
            .mirror_parts
            .get(&t.mirror)
            .and_then(|m| m.last())
            .map_or(0, |(_, end, _)| *end);
        if to > end {
            return Err(format!("{name} {to}: past the partition's end {end}"));
        }
        let copies = matched
            .get(&(t.mirror.clone(), t.source.clone()))
            .map_or(&[][..], Vec::as_slice);
        if let Some((at, source_start)) = copies.iter().find(|(m, s)| *m < to && *s >= t.from) {
            return Err(format!(
                "{name} {to}: skips the copy at {at} of source offset {source_start}"
            ));
        }
        let rereads = copies
            .iter()
            .filter(|(m, s)| *m >= to && *s < t.from)
            .count();
        report.rereads_max = report.rereads_max.max(rereads);
        report.judged += 1;
    }
    Ok(report)
}
