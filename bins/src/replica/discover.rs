//! What the source cluster looks like (the source broker's address, its partitions), read
//! from the source's ZooKeeper, and new topics announced for registration here.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Reads the source broker's address and partition counts from the source's ZooKeeper.
pub(super) async fn discover<E: Env>(
    env: &E,
    broker: &BrokerConfig,
    replica: &ReplicaConfig,
    coord: &mut Option<E::Coord>,
) -> Result<SourceView, CoordError> {
    if coord.is_none() {
        let session = Duration::from_millis(broker.zk.session_timeout_ms.into());
        let connection = Duration::from_millis(broker.zk.connection_timeout_ms.into());
        *coord = Some(env.coordinate(&replica.source, session, connection).await?);
    }
    let Some(c) = coord.as_ref() else {
        return Ok(SourceView::default());
    };
    let address = match c.get(&broker_id_path(replica.source_broker_id)).await {
        Ok((data, _)) => parse_broker_registration(&String::from_utf8_lossy(&data)),
        Err(CoordError::NoNode(_)) => None,
        Err(e) => return Err(e),
    };
    let mut counts = BTreeMap::new();
    let topics = match c.children(BROKER_TOPICS_PATH).await {
        Ok(topics) => topics,
        Err(CoordError::NoNode(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    for name in topics {
        if !replica.topics.allows(&name) {
            continue;
        }
        let Ok(topic) = name.parse::<TopicName>() else {
            tracing::warn!("replica: the source registers topic {name:?}, which is not a valid topic name; skipped");
            continue;
        };
        let path = broker_topic_partitions_path(&topic, replica.source_broker_id);
        match c.get(&path).await {
            Ok((data, _)) => match String::from_utf8_lossy(&data).trim().parse::<u32>() {
                Ok(count) if count > 0 && count <= PARTITIONS_MAX => {
                    counts.insert(topic, count);
                }
                _ => tracing::warn!(
                    "replica: {path} holds {:?}, not a partition count; skipped",
                    String::from_utf8_lossy(&data)
                ),
            },
            Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(SourceView { address, counts })
}

/// Makes new or grown source topics replica topics here (with the source's counts) and has
/// them registered.
pub(super) fn announce<F: tributary_core::log::LogFs + Clone>(
    logs: &Logs<F>,
    old: &SourceView,
    fresh: &SourceView,
    new_topics: Option<&PendingSender<TopicName, ()>>,
) {
    for (topic, count) in &fresh.counts {
        if old.counts.get(topic) == Some(count) {
            continue;
        }
        logs.set_replica(topic, *count);
        tracing::info!(
            "replica: {topic} has {count} partitions on the source broker; copying them"
        );
        if let Some(sender) = new_topics {
            // The registration task is gone only while the broker stops.
            let _stopping = sender.add(topic.clone(), ()).is_err();
        }
    }
}
