//! `console-producer`: lines of stdin to a topic, in batches, to a broker from `--broker-list`
//! (partition chosen by the broker) or found in ZooKeeper (`--zookeeper`).

use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncBufReadExt, BufReader};
use tributary_core::config::{BrokerEndpoint, ZkConnect};
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{ProduceRequest, Request, TopicName, PARTITION_BROKER_PICKS};
use tributary_core::zk_layout::{broker_id_path, broker_topic_path, parse_broker_registration, BROKER_IDS_PATH};

use crate::client::connect;
use crate::env::TokioEnv;
use crate::coordination::zk::ZkCoordination;
use crate::coordination::Coordination;

/// Where to send.
#[derive(Debug, Clone)]
pub enum Target {
    /// A fixed list of brokers; one is picked at random and the broker picks the partition.
    BrokerList(Vec<BrokerEndpoint>),
    /// Brokers and partitions registered in ZooKeeper.
    ZooKeeper(ZkConnect),
}

/// Finds `(host, port, partition)` to send `topic` to.
async fn pick(target: &Target, topic: &TopicName) -> Result<(String, u16, i32), String> {
    let mut rng = rand::rng();
    match target {
        Target::BrokerList(list) => {
            let b = list.get(rng.random_range(0..list.len().max(1))).ok_or("--broker-list is empty")?;
            Ok((b.host.clone(), b.port, PARTITION_BROKER_PICKS))
        }
        Target::ZooKeeper(connect) => {
            let zk = ZkCoordination::connect(connect, Duration::from_secs(30), Duration::from_secs(10)).await.map_err(|e| e.to_string())?;
            // Registered partitions of the topic, else partition 0 of any live broker (0.7's bootstrap).
            let mut candidates = Vec::new();
            for id in zk.children(&broker_topic_path(topic)).await.unwrap_or_default() {
                let count: i32 = zk.get(&format!("{}/{id}", broker_topic_path(topic))).await.ok().and_then(|(d, _)| String::from_utf8(d).ok()?.trim().parse().ok()).unwrap_or(0);
                candidates.extend((0..count).map(|p| (id.clone(), p)));
            }
            if candidates.is_empty() {
                candidates = zk.children(BROKER_IDS_PATH).await.map_err(|e| e.to_string())?.into_iter().map(|id| (id, 0)).collect();
            }
            let (id, partition) = candidates.get(rng.random_range(0..candidates.len().max(1))).cloned().ok_or("no live brokers are registered")?;
            let id: i32 = id.parse().map_err(|_| format!("bad broker id {id}"))?;
            let (data, _) = zk.get(&broker_id_path(id)).await.map_err(|e| e.to_string())?;
            let (host, port) = parse_broker_registration(&String::from_utf8_lossy(&data)).ok_or("unreadable broker registration")?;
            zk.close().await;
            Ok((host, port, partition))
        }
    }
}

/// Sends stdin's lines to `topic` in sets of `batch_size` (compressed with `codec`); returns how
/// many messages were sent.
pub async fn produce_stdin(target: &Target, topic: &TopicName, codec: CompressionCodec, batch_size: usize) -> Result<u64, String> {
    let (host, port, partition) = pick(target, topic).await?;
    let mut conn = connect(&TokioEnv, &host, port, Duration::from_secs(10)).await.map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let (mut sent, mut batch) = (0u64, MessageSetBuilder::new());
    loop {
        let line = lines.next_line().await.map_err(|e| e.to_string())?;
        if let Some(line) = &line {
            batch.push(line.clone().into_bytes());
        }
        if batch.len() >= batch_size || (line.is_none() && !batch.is_empty()) {
            let request = Request::Produce(ProduceRequest { topic: topic.clone(), partition, messages: batch.build(codec) });
            conn.send(&request).await.map_err(|e| e.to_string())?;
            sent += batch.len() as u64;
            batch = MessageSetBuilder::new();
        }
        if line.is_none() {
            return Ok(sent);
        }
    }
}
