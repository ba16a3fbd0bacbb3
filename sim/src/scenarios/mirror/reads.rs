//! The clusters read from outside, as a checker reads them: the partitions a cluster's ZooKeeper
//! model registers, a partition's offset range (OFFSETS), its raw bytes and its messages (FETCH),
//! and both clusters end to end ([`FinalRead`]). The replica scenario reads with the first three.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use tributary::client::connect;
use tributary::failure::Failure;
use tributary_core::consumer::BrokerPartition;
use tributary_core::message::{DeepIter, ShallowIter};
use tributary_core::wire::{ErrorCode, FetchRequest, OffsetsRequest, Request, Response, TopicName};

use super::Part;
use crate::env::SimEnv;
use crate::world::BROKER_PORT;

/// Both clusters read end to end.
#[derive(Debug, Default)]
pub(super) struct FinalRead {
    /// Per source partition: its earliest offset and its messages as (start, end, payload).
    pub(super) source: BTreeMap<Part, SourceRead>,
    /// Every payload in the mirror cluster, with its copies.
    pub(super) mirror: BTreeMap<Vec<u8>, usize>,
    /// Per mirror partition: its messages as (start, end, payload).
    pub(super) mirror_parts: BTreeMap<Part, Vec<(i64, i64, Vec<u8>)>>,
    /// Problems met while reading.
    pub(super) problems: Vec<String>,
}

/// One source partition read end to end: its earliest offset and its messages as
/// (start, end, payload).
pub(crate) type SourceRead = (i64, Vec<(i64, i64, Vec<u8>)>);

/// Every (topic, broker-partition) registered in a cluster's ZooKeeper model.
pub(crate) fn partitions_of(model: &crate::zk_model::SharedModel) -> Vec<Part> {
    let m = model.lock().unwrap_or_else(|p| p.into_inner());
    let mut parts = Vec::new();
    for topic in m.children("/brokers/topics") {
        for broker in m.children(&format!("/brokers/topics/{topic}")) {
            let count: u32 = m
                .data(&format!("/brokers/topics/{topic}/{broker}"))
                .and_then(|d| String::from_utf8_lossy(&d).trim().parse().ok())
                .unwrap_or(0);
            parts.extend((0..count.min(64)).map(|p| (topic.clone(), format!("{broker}-{p}"))));
        }
    }
    parts
}

fn broker_and_partition(part: &Part) -> Option<(String, i32)> {
    let parsed = BrokerPartition::parse(&part.1)?;
    Some((
        parsed.broker_id.to_string(),
        i32::try_from(parsed.partition).ok()?,
    ))
}

/// A partition's (earliest, latest) offsets, asked of its broker in cluster `cluster`.
pub(crate) async fn range_of(part: &Part, cluster: &str) -> Result<(i64, i64), Failure> {
    let (broker, partition) = broker_and_partition(part).ok_or("bad partition name")?;
    let topic: TopicName = part.0.parse().map_err(|_| "bad topic")?;
    let mut conn = connect(
        &SimEnv::new(0),
        &format!("{cluster}-broker{broker}"),
        BROKER_PORT,
        Duration::from_secs(2),
    )
    .await
    .map_err(|e| Failure::caused(e.to_string(), e))?;
    let mut ends = [0i64; 2];
    for (i, time) in [-2i64, -1].into_iter().enumerate() {
        match conn
            .call(&Request::Offsets(OffsetsRequest {
                topic: topic.clone(),
                partition,
                time,
                max_offsets: 1,
            }))
            .await
            .map_err(|e| Failure::caused(e.to_string(), e))?
        {
            Response::Offsets(o) if o.error == ErrorCode::NoError => {
                ends[i] = o.offsets.first().copied().unwrap_or(0)
            }
            other => return Err(Failure::from(format!("{other:?}"))),
        }
    }
    Ok((ends[0], ends[1]))
}

/// A partition's raw bytes from `from` up to its end (or up to the first offset its broker
/// refuses: then with that answer), read with FETCH from its broker in cluster `cluster`.
pub(crate) async fn fetch_bytes(
    part: &Part,
    cluster: &str,
    from: i64,
) -> Result<(Vec<u8>, Option<ErrorCode>), Failure> {
    let (broker, partition) = broker_and_partition(part).ok_or("bad partition name")?;
    let topic: TopicName = part.0.parse().map_err(|_| "bad topic")?;
    let mut conn = connect(
        &SimEnv::new(0),
        &format!("{cluster}-broker{broker}"),
        BROKER_PORT,
        Duration::from_secs(2),
    )
    .await
    .map_err(|e| Failure::caused(e.to_string(), e))?;
    let mut out = Vec::new();
    loop {
        let offset = from + out.len() as i64;
        let fetch = Request::Fetch(FetchRequest {
            topic: topic.clone(),
            partition,
            offset,
            max_bytes: 1 << 16,
        });
        let Response::Fetch(f) = conn
            .call(&fetch)
            .await
            .map_err(|e| Failure::caused(e.to_string(), e))?
        else {
            return Err("not a fetch answer".into());
        };
        if f.error != ErrorCode::NoError {
            return Ok((out, Some(f.error)));
        }
        if f.messages.is_empty() {
            return Ok((out, None));
        }
        let mut entries = ShallowIter::new(&f.messages, offset);
        entries.by_ref().for_each(drop);
        let valid = entries.end().valid_bytes;
        if valid == 0 {
            return Err(Failure::from(format!(
                "{cluster} {}/{}: no whole message at {offset}",
                part.0, part.1
            )));
        }
        out.extend_from_slice(f.messages.get(..valid).unwrap_or_default());
    }
}

/// A partition's messages from `from` to its end: (start, end, payload), every inner message
/// of a wrapper with the wrapper's offsets.
async fn read_partition(
    part: &Part,
    cluster: &str,
    from: i64,
) -> Result<Vec<(i64, i64, Vec<u8>)>, Failure> {
    let (raw, refused) = fetch_bytes(part, cluster, from).await?;
    if let Some(error) = refused {
        let at = from + raw.len() as i64;
        return Err(Failure::from(format!(
            "{}/{} at {at}: {error:?}",
            part.0, part.1
        )));
    }
    let raw = Bytes::from(raw);
    let mut out = Vec::new();
    let mut entries = ShallowIter::new(&raw, from);
    for entry in entries.by_ref() {
        let entry = entry
            .map_err(|e| Failure::caused(format!("{}/{}: corrupt: {e}", part.0, part.1), e))?;
        let whole = raw.slice((entry.offset - from) as usize..(entry.next_offset - from) as usize);
        for inner in DeepIter::new(whole, entry.offset, 1 << 24) {
            let inner = inner.map_err(|e| {
                Failure::caused(
                    format!("{}/{}: corrupt inner message: {e}", part.0, part.1),
                    e,
                )
            })?;
            out.push((
                entry.offset,
                entry.next_offset,
                inner.message.payload.to_vec(),
            ));
        }
    }
    Ok(out)
}

/// How long the final read waits before looking for partitions registered meanwhile.
const REGISTRATION_SETTLE: Duration = Duration::from_millis(250);
/// The most rounds of looking again.
const REGISTRATION_ROUNDS: usize = 8;

/// The partitions registered in `model`, looked at until a look finds none not seen before
/// (the union of the looks): after a ZooKeeper restart a broker takes its registrations back
/// (delete, then create), so one look can fall between the two and miss a partition that holds
/// data (its messages then reported lost).
pub(crate) async fn registered_settled(model: &crate::zk_model::SharedModel) -> Vec<Part> {
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..REGISTRATION_ROUNDS {
        let before = seen.len();
        seen.extend(partitions_of(model));
        if seen.len() == before && before > 0 {
            break;
        }
        tokio::time::sleep(REGISTRATION_SETTLE).await;
    }
    seen.into_iter().collect()
}

/// One partition of `cluster` read whole: its earliest offset and its messages.
pub(crate) async fn read_whole(part: &Part, cluster: &str) -> Result<SourceRead, Failure> {
    let (earliest, _) = range_of(part, cluster)
        .await
        .map_err(|e| Failure::caused(format!("{}/{}: {e}", part.0, part.1), e))?;
    Ok((earliest, read_partition(part, cluster, earliest).await?))
}

pub(super) async fn read_everything(
    source_model: &crate::zk_model::SharedModel,
    mirror_model: &crate::zk_model::SharedModel,
) -> FinalRead {
    let mut read = FinalRead::default();
    for part in registered_settled(source_model).await {
        match read_whole(&part, "src").await {
            Ok(whole) => {
                read.source.insert(part, whole);
            }
            Err(e) => read.problems.push(format!("source {e}")),
        }
    }
    for part in registered_settled(mirror_model).await {
        match read_whole(&part, "dst").await {
            Ok((_, messages)) => {
                for (_, _, payload) in &messages {
                    *read.mirror.entry(payload.clone()).or_insert(0) += 1;
                }
                read.mirror_parts.insert(part, messages);
            }
            Err(e) => read.problems.push(format!("mirror {e}")),
        }
    }
    read
}
