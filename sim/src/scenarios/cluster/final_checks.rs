//! The cluster scenario's final checks, once every fault has healed: the brokers serve again,
//! everything ever read reads the same, every acknowledged message is readable end to end,
//! new messages become readable, and the broker registry in ZooKeeper settles.

use std::time::Duration;

use bytes::Bytes;
use tributary_core::message::{CompressionCodec, Message, MessageSetBuilder, ShallowIter};
use tributary_core::wire::{
    ErrorCode, FetchRequest, OffsetsRequest, ProduceRequest, Request, Response, TopicName,
};

use super::{broker_host, record_entries, seen, topic, Client, SharedSeen, BROKERS, HEAL};
use crate::env::sim_now_ms;
use crate::history::{self, Location};
use crate::invariants::{Invariant, Violation};
use crate::world::Control;
use crate::zk_model::SharedModel;

/// After healing, in order: every broker serves every partition it had (5); every entry ever
/// read reads back the same (1); every partition reads end to end (2) and the history has no
/// loss (6); a new message to every partition becomes readable (6); ZooKeeper lists exactly
/// the live brokers and their topics (4).
pub(super) async fn final_checks(st: &SharedSeen, control: &Control, model: &SharedModel) {
    let mut client = Client::new();
    let checks = async {
        brokers_serve_again(&mut client, st).await?;
        reread_everything_seen(&mut client, st).await?;
        let layout = seen(st).layout;
        for (broker, t, partition) in layout.every_partition() {
            read_end_to_end(&mut client, st, broker, &t, partition).await?;
        }
        seen(st)
            .history
            .check_nothing_lost()
            .map_err(|e| Violation {
                invariant: Invariant::History,
                detail: e.to_string(),
            })?;
        new_messages_become_readable(&mut client, st).await?;
        registry_settles(st, model).await
    };
    match checks.await {
        Ok(()) => control.trace.push("final checks passed"),
        Err(v) => control.violate(v.invariant, v.detail),
    }
}

fn violation(invariant: Invariant, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// Invariant 5: within [`HEAL`], every broker answers OFFSETS for every partition without an
/// error (a refused partition does not pass). An answer below the end seen before breaks
/// invariant 1 instead: data that was visible is gone.
async fn brokers_serve_again(client: &mut Client, st: &SharedSeen) -> Result<(), Violation> {
    let healed_at = sim_now_ms();
    let layout = seen(st).layout;
    for (broker, t, partition) in layout.every_partition() {
        let seen_end = seen(st)
            .ends
            .get(&(broker, t.to_string(), partition))
            .copied()
            .unwrap_or(0);
        let request = Request::Offsets(OffsetsRequest {
            topic: t.clone(),
            partition: partition as i32,
            time: -1,
            max_offsets: 1,
        });
        loop {
            let answer = client.call(broker, &request).await;
            match &answer {
                Some(Response::Offsets(o)) if o.error == ErrorCode::NoError => match o.offsets.first() {
                    Some(&latest) if latest >= seen_end => break,
                    latest => return Err(violation(Invariant::VisibleIsDurable, format!("broker{broker} {t}-{partition}: latest offset {latest:?} after healing, but {seen_end} was visible before"))),
                },
                _ if sim_now_ms() - healed_at > HEAL.as_millis() as i64 => {
                    return Err(violation(Invariant::RestartedBrokerServes, format!("broker{broker} {t}-{partition}: not served within {HEAL:?} of healing (last answer {answer:?})")));
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    Ok(())
}

/// Invariant 1: every entry ever read reads back byte for byte.
async fn reread_everything_seen(client: &mut Client, st: &SharedSeen) -> Result<(), Violation> {
    let entries: Vec<((u32, String, u32, i64), Bytes)> = seen(st)
        .entries
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for ((broker, t, partition, offset), bytes) in entries {
        let request = Request::Fetch(FetchRequest {
            topic: t.parse().unwrap_or_else(|_| topic(0)),
            partition: partition as i32,
            offset,
            max_bytes: bytes.len() as i32,
        });
        let mut answer = None;
        for _ in 0..5 {
            answer = client.call(broker, &request).await;
            if answer.is_some() {
                break;
            }
        }
        match answer {
            Some(Response::Fetch(f)) if f.error == ErrorCode::NoError && f.messages == bytes => {}
            Some(Response::Fetch(f)) => {
                return Err(violation(Invariant::VisibleIsDurable, format!("broker{broker} {t}-{partition}: entry at {offset} lost or changed after healing ({:?}, {} bytes)", f.error, f.messages.len())))
            }
            _ => return Err(violation(Invariant::RestartedBrokerServes, format!("broker{broker}: no answer re-reading {t}-{partition}@{offset}"))),
        }
    }
    Ok(())
}

async fn offsets_at(
    client: &mut Client,
    broker: u32,
    t: &TopicName,
    partition: u32,
    time: i64,
) -> Result<i64, Violation> {
    let request = Request::Offsets(OffsetsRequest {
        topic: t.clone(),
        partition: partition as i32,
        time,
        max_offsets: 1,
    });
    match client.call(broker, &request).await {
        Some(Response::Offsets(o)) if o.error == ErrorCode::NoError => {
            o.offsets.first().copied().ok_or_else(|| violation(Invariant::NoCorruptRead, format!("broker{broker} {t}-{partition}: OFFSETS {time} answered nothing")))
        }
        Some(Response::Offsets(o)) => Err(violation(Invariant::NoCorruptRead, format!("broker{broker} {t}-{partition}: OFFSETS {time} answered {:?}: the partition cannot be read", o.error))),
        _ => Err(violation(Invariant::RestartedBrokerServes, format!("broker{broker}: no answer for OFFSETS of {t}-{partition}"))),
    }
}

/// Invariant 2 (and 6): walks a partition from its earliest to its latest offset: every fetch
/// returns whole, valid messages and makes progress, and every message goes to the history.
async fn read_end_to_end(
    client: &mut Client,
    st: &SharedSeen,
    broker: u32,
    t: &TopicName,
    partition: u32,
) -> Result<(), Violation> {
    let mut offset = offsets_at(client, broker, t, partition, -2).await?;
    let end = offsets_at(client, broker, t, partition, -1).await?;
    while offset < end {
        let request = Request::Fetch(FetchRequest {
            topic: t.clone(),
            partition: partition as i32,
            offset,
            max_bytes: 8192,
        });
        let Some(Response::Fetch(f)) = client.call(broker, &request).await else {
            return Err(violation(
                Invariant::RestartedBrokerServes,
                format!("broker{broker}: no answer reading {t}-{partition} at {offset}"),
            ));
        };
        record_entries(st, broker, t, partition, offset, &f.messages)?;
        let mut entries = ShallowIter::new(&f.messages, offset);
        entries.by_ref().for_each(drop);
        let valid = entries.end().valid_bytes as i64;
        if f.error != ErrorCode::NoError || valid == 0 {
            return Err(violation(Invariant::NoCorruptRead, format!("broker{broker} {t}-{partition}: stuck at offset {offset} of {end} ({:?}): the log is not readable end to end", f.error)));
        }
        offset += valid;
    }
    Ok(())
}

/// Invariant 6 after healing: a message produced to each partition of each broker becomes
/// readable within [`HEAL`] (a broker that drops produces cannot pass this). Every message is
/// sent first, then all are awaited together: each waits for its partition's flush, and
/// waiting for them one after the other would take a flush interval per partition.
async fn new_messages_become_readable(
    client: &mut Client,
    st: &SharedSeen,
) -> Result<(), Violation> {
    let mut serial = u64::MAX / 2;
    let mut pending = Vec::new();
    let layout = seen(st).layout;
    for (broker, t, partition) in layout.every_partition() {
        let start = offsets_at(client, broker, &t, partition, -1).await?;
        serial += 1;
        let location: Location = (broker_host(broker), t.to_string(), partition);
        let Some((connection, _)) = client.conn(broker).await.map(|(id, _)| (*id, ())) else {
            return Err(violation(
                Invariant::RestartedBrokerServes,
                format!("broker{broker}: cannot connect after healing"),
            ));
        };
        seen(st).history.sent(serial, location.clone(), connection);
        let mut set = MessageSetBuilder::new();
        set.push_message(&Message::new(history::payload(
            serial, &location, connection,
        )));
        let request = Request::Produce(ProduceRequest {
            topic: t.clone(),
            partition: partition as i32,
            messages: set.build(CompressionCodec::None),
        });
        let sent = client.send(broker, &request).await;
        pending.push((serial, location, sent, broker, t, partition, start));
    }
    let deadline = sim_now_ms() + HEAL.as_millis() as i64;
    loop {
        pending.retain(|(serial, ..)| !seen(st).history.was_read(*serial));
        let Some((serial, location, sent, ..)) = pending.first() else {
            return Ok(());
        };
        if sim_now_ms() > deadline {
            return Err(violation(Invariant::History, format!("lost: message {serial} produced to {location:?} after healing (sent={sent}) never became readable, nor {} other messages sent then", pending.len() - 1)));
        }
        for (_, _, _, broker, t, partition, start) in &pending {
            let fetch = Request::Fetch(FetchRequest {
                topic: t.clone(),
                partition: *partition as i32,
                offset: *start,
                max_bytes: 8192,
            });
            if let Some(Response::Fetch(f)) = client.call(*broker, &fetch).await {
                if f.error == ErrorCode::NoError {
                    record_entries(st, *broker, t, *partition, *start, &f.messages)?;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Invariant 4: registrations settle within [`HEAL`] after healing.
async fn registry_settles(st: &SharedSeen, model: &SharedModel) -> Result<(), Violation> {
    let deadline = sim_now_ms() + HEAL.as_millis() as i64;
    loop {
        match registry_problem(st, model) {
            None => return Ok(()),
            Some(problem) if sim_now_ms() > deadline => {
                return Err(violation(Invariant::RegistryMatches, problem))
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

fn registry_problem(st: &SharedSeen, model: &SharedModel) -> Option<String> {
    let m = model.lock().unwrap_or_else(|p| p.into_inner());
    let ids = m.children("/brokers/ids");
    let expected: Vec<String> = (0..BROKERS).map(|b| b.to_string()).collect();
    if ids != expected {
        return Some(format!(
            "ZooKeeper lists brokers {ids:?}, expected {expected:?}"
        ));
    }
    for (broker, t) in seen(st).served_topics.iter() {
        if !m
            .children(&format!("/brokers/topics/{t}"))
            .contains(&broker.to_string())
        {
            return Some(format!("topic {t} is not registered under broker {broker}"));
        }
    }
    None
}
