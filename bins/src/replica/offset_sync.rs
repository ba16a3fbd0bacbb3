//! Consumer offsets synced from the source cluster, clamped to what the replica holds
//! durably, so a consumer that fails over never skips anything.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::coordination::nodes::{data_of, put, versioned_data_of};
use tributary_core::consumer::BrokerPartition;
use tributary_core::replica::offset_sync::{
    group_commits_here, offset_to_write, owned_during_write,
};

/// Copies the committed source offsets of the groups `groups` allows, for the topics still
/// copied, to this cluster's ZooKeeper — each clamped to what the replica holds durably (its
/// flushed end), so a consumer that fails over never skips anything — unless the group has
/// live members here (then it commits for itself). `ids` is (source broker, this broker).
pub(super) async fn sync_offsets<F, C: Coordination>(
    source: &C,
    here: &C,
    logs: &Logs<F>,
    groups: &tributary_core::consumer::TopicPattern,
    (source_id, own_id): (i32, i32),
    synced: &mut BTreeMap<(String, TopicPartition), i64>,
) -> Result<(), CoordError>
where
    F: tributary_core::log::LogFs + Clone + Send + Sync + 'static,
    F::File: Send + Sync,
{
    let names = match source.children("/consumers").await {
        Ok(names) => names,
        Err(CoordError::NoNode(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in names {
        if !groups.allows(&name) {
            continue;
        }
        let Ok(group) = name.parse::<GroupId>() else {
            continue;
        };
        // What follows reads this cluster as of the end of every write made so far (a member
        // that joined here, a commit of the failed-over group), not as a follower that is
        // behind may still serve it.
        here.sync(&consumer_ids_path(&group)).await?;
        match here.children(&consumer_ids_path(&group)).await {
            Ok(members) if !members.is_empty() => continue,
            Ok(_) | Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
        for topic in logs.topics().into_iter().filter(|t| logs.is_replica(t)) {
            let from = consumer_offsets_path(&group, &topic);
            let partitions = match source.children(&from).await {
                Ok(p) => p,
                Err(CoordError::NoNode(_)) => continue,
                Err(e) => return Err(e),
            };
            for partition_name in partitions {
                let Some(BrokerPartition {
                    broker_id: broker,
                    partition,
                }) = BrokerPartition::parse(&partition_name)
                else {
                    continue;
                };
                if broker != source_id {
                    continue;
                }
                let committed = match source.get(&format!("{from}/{partition_name}")).await {
                    Ok((data, _)) => String::from_utf8_lossy(&data).trim().parse::<i64>().ok(),
                    Err(CoordError::NoNode(_)) => None,
                    Err(e) => return Err(e),
                };
                let Some(committed) = committed else { continue };
                let tp = TopicPartition::new(topic.clone(), partition);
                let Some(log) = logs.get(&tp) else { continue };
                let held = i64::try_from(log.lock().await.flushed_end()).unwrap_or(i64::MAX);
                let offset = offset_to_write(committed, held);
                let key = (name.clone(), tp);
                if synced.get(&key) == Some(&offset) {
                    continue;
                }
                let to = format!("{from}/{own_id}-{partition}");
                // What this syncer last wrote there, kept beside it: a different value now means
                // the group committed here itself (it failed over) — never overwrite that.
                let marker = format!("{SYNCED_PATH}/{name}/{topic}/{own_id}-{partition}");
                let current = versioned_data_of(here, &to).await?;
                let last = data_of(here, &marker).await?;
                let current_data = current.as_ref().map(|(data, _)| data.as_slice());
                if group_commits_here(current_data, last.as_deref()) {
                    continue;
                }
                let value = offset.to_string();
                // Both the value replaced and the new one are the syncer's while it writes: a
                // failure between the node and the mark must not read as the group's commit.
                let owned = owned_during_write(current_data, value.as_bytes());
                put(here, &marker, &owned).await?;
                // Only over what was looked at: a commit of the group's own between the look
                // and the write makes the write fail, and the next round leaves the group alone.
                let written = match current {
                    Some((_, version)) => here
                        .set(&to, value.as_bytes(), Some(version))
                        .await
                        .map(drop),
                    None => {
                        here.ensure_parents(&to).await?;
                        here.create(&to, value.as_bytes(), NodeKind::Persistent)
                            .await
                            .map(drop)
                    }
                };
                match written {
                    Ok(()) => {}
                    Err(CoordError::BadVersion(_) | CoordError::NodeExists(_)) => continue,
                    Err(e) => return Err(e),
                }
                put(here, &marker, value.as_bytes()).await?;
                synced.insert(key, offset);
            }
        }
    }
    Ok(())
}

/// At a demotion: hands the offsets of `groups` that this broker's partitions hold in this
/// cluster's ZooKeeper back to the syncer. They were committed before the demotion (by the
/// group while this cluster was primary): another epoch of the group, which the source's
/// commits replace. Each is marked as if the syncer had written it, so a sync overwrites it
/// once the group has no live member here (members left registered by the failed cluster's
/// consumers go when their sessions expire); a commit the group makes here after the
/// demotion differs from the mark and is never overwritten.
pub(super) async fn adopt_offsets<F, C: Coordination>(
    here: &C,
    logs: &Logs<F>,
    groups: &tributary_core::consumer::TopicPattern,
    own_id: i32,
) -> Result<(), CoordError>
where
    F: tributary_core::log::LogFs + Clone + Send + Sync + 'static,
    F::File: Send + Sync,
{
    let names = match here.children("/consumers").await {
        Ok(names) => names,
        Err(CoordError::NoNode(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in names.into_iter().filter(|n| groups.allows(n)) {
        let Ok(group) = name.parse::<GroupId>() else {
            continue;
        };
        let mut adopted = 0;
        for topic in logs.topics().into_iter().filter(|t| logs.is_replica(t)) {
            let at = consumer_offsets_path(&group, &topic);
            let partitions = match here.children(&at).await {
                Ok(p) => p,
                Err(CoordError::NoNode(_)) => continue,
                Err(e) => return Err(e),
            };
            for partition_name in partitions {
                let Some(BrokerPartition { broker_id, .. }) =
                    BrokerPartition::parse(&partition_name)
                else {
                    continue;
                };
                if broker_id != own_id {
                    continue;
                }
                let Some(current) = data_of(here, &format!("{at}/{partition_name}")).await? else {
                    continue;
                };
                let marker = format!("{SYNCED_PATH}/{name}/{topic}/{partition_name}");
                put(here, &marker, &current).await?;
                adopted += 1;
            }
        }
        if adopted > 0 {
            tracing::info!("replica: demotion: group {name}'s {adopted} offsets here (committed before the demotion) follow the source's commits from now on (once it has no live member here)");
        }
    }
    Ok(())
}
