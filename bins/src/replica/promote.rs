//! Promotion: topics named in this cluster's ZooKeeper (or all of them, when the whole
//! cluster is promoted) stop being copied and take produces.

#[allow(clippy::wildcard_imports)]
use super::*;
use std::collections::BTreeSet;
use tributary_core::replica::demotion::ReplicaRecord;
use tributary_core::zk_layout::{
    cluster_promoted_ack_path, promoted_topic_path, replica_record_path, CLUSTER_PROMOTED,
};

/// Reads the promoted topics from this cluster's ZooKeeper; promotes each replica topic named
/// there (it stops being copied and takes produces), logs where each partition stopped and
/// confirms with `promoted_ack_path` (what `tributary promote` waits for). Idempotent.
///
/// A partition's confirmed end is a common point with the source only if its log is known to
/// be a prefix of the source's (`checked`: its copy was checked on this run and is not
/// stopped) or is empty; otherwise it is confirmed as `?` (see
/// `core::replica::demotion::CutPoints`).
pub(super) async fn promotions<E: Env>(
    env: &E,
    (broker, replica): (&BrokerConfig, &ReplicaConfig),
    logs: &Arc<Logs<E::Fs>>,
    own: &mut Option<E::Coord>,
    (meter, checked): (&BrokerMeter, &BTreeSet<TopicPartition>),
) -> Result<(), CoordError> {
    let Some(connect) = broker.zk_connect.as_ref() else {
        return Ok(());
    };
    if own.is_none() {
        let session = Duration::from_millis(broker.zk.session_timeout_ms.into());
        let connection = Duration::from_millis(broker.zk.connection_timeout_ms.into());
        let c = env.coordinate(connect, session, connection).await?;
        if connect.security.set_acl {
            // Made now, with this cluster's ACLs, so that nobody without its identity can
            // create a promotion request (zk.set.acl; without it 0.7's open nodes are kept).
            c.ensure_parents(PROMOTED_PATH).await?;
            match c.create(PROMOTED_PATH, b"", NodeKind::Persistent).await {
                Ok(_) | Err(CoordError::NodeExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // Where this broker copies from, for `tributary demote` (which reads the other
        // cluster's promotion and compares the logs).
        let record = ReplicaRecord {
            source_zk: replica.source.to_string(),
            source_broker_id: replica.source_broker_id,
        };
        crate::coordination::nodes::put(
            &c,
            &replica_record_path(broker.broker_id),
            record.encode().as_bytes(),
        )
        .await?;
        *own = Some(c);
    }
    let Some(c) = own.as_ref() else { return Ok(()) };
    let whole = match c.get(PROMOTED_PATH).await {
        Ok((data, _)) => data == CLUSTER_PROMOTED,
        Err(CoordError::NoNode(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut named: BTreeSet<TopicName> = c
        .children(PROMOTED_PATH)
        .await?
        .iter()
        .filter_map(|name| name.parse().ok())
        .collect();
    if whole {
        // Every topic held here is promoted and confirmed like a named one (its cut point is
        // what a later demotion of the other cluster cuts at).
        named.extend(logs.topics());
    }
    for topic in named {
        let path = promoted_ack_path(&topic, broker.broker_id);
        let copied_now = logs.is_replica(&topic);
        let acknowledged = c.get(&path).await.is_ok();
        if !copied_now && acknowledged {
            continue;
        }
        // The ends first, then the promotion: until `promote` below, clients' produces are
        // refused and this task (the copier) is the only writer, so every byte below a reported
        // end is the source's and every byte after it a client's.
        // A topic made after the whole cluster was promoted was never copied: everything in it
        // is this cluster's own, so its cut point is where it starts.
        let never_copied = !copied_now && logs.is_cluster_promoted();
        let mut stopped_at = Vec::new();
        // Every partition of the topic held here (not only those this run of the copier has
        // seen: after a restart, promotions are read before the source is).
        for tp in logs.partitions().into_iter().filter(|tp| tp.topic == topic) {
            if let Some(log) = logs.get(&tp) {
                // Everything copied made visible first: the reported end is the real one.
                if let Err(e) = logs::flush(env, &log, meter).await {
                    tracing::error!("replica: {tp}: flushing at promotion: {e}");
                }
                let locked = log.lock().await;
                let empty = locked.written_end() == locked.start_offset();
                let cut = if never_copied {
                    Some(locked.start_offset())
                } else if empty || checked.contains(&tp) || !copied_now {
                    Some(locked.flushed_end())
                } else {
                    None
                };
                stopped_at.push(match cut {
                    Some(cut) => format!("{}:{cut}", tp.partition),
                    None => format!("{}:?", tp.partition),
                });
            }
        }
        let at = stopped_at.join(",");
        let newly = logs.promote(&topic);
        if newly {
            tracing::info!("replica: {topic} promoted: no longer copied, takes produces; copying stopped at (partition:offset) {at}");
        }
        // Under the promotion only while it stands: `/tributary/promoted` itself is never made
        // here (a demotion deleting it must not see it come back).
        let topic_node = promoted_topic_path(&topic);
        match c.create(&topic_node, b"", NodeKind::Persistent).await {
            Ok(_) | Err(CoordError::NodeExists(_)) => {}
            Err(CoordError::NoNode(_)) => return Ok(()),
            Err(e) => return Err(e),
        }
        match c.create(&path, at.as_bytes(), NodeKind::Persistent).await {
            Ok(_) | Err(CoordError::NodeExists(_)) => {}
            Err(CoordError::NoNode(_)) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    if whole {
        if logs.promote_cluster() {
            tracing::info!("replica: the whole cluster is promoted: nothing is copied any more, and every topic, including those created from now on, takes produces");
        }
        // Confirmed once carried out (what `tributary promote` of the whole cluster waits
        // for); under the promotion only while it stands, like a topic's confirmation.
        let ack = cluster_promoted_ack_path(broker.broker_id);
        match c.create(&ack, b"", NodeKind::Persistent).await {
            Ok(_) | Err(CoordError::NodeExists(_) | CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
