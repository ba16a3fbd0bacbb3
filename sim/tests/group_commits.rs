//! A commit asked for just as the group starts to rebalance is served before the rebalance
//! releases the member's partitions (commits do not queue behind rebalances), so it is written
//! rather than refused as "not owned" for the partitions that move to the new member.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tributary::consumer::{Commit, CommitOutcome, ConsumerConnector, ConsumerError, Subscription};
use tributary::producer::{Producer, Record};
use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
use tributary_core::consumer::BrokerPartition;
use tributary_core::wire::TopicName;
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::sim_builder;
use tributary_sim::world::{add_cluster, ClusterSpec, Control};

const GROUP: &str = "g";

fn topic() -> TopicName {
    "t".parse().unwrap()
}

fn consumer_config() -> ConsumerConfig {
    let text = format!(
        "zk.connect=zk:2181\ngroupid={GROUP}\nzk.sessiontimeout.ms=3000\nautooffset.reset=smallest\n\
         autocommit.enable=false\nrebalance.backoff.ms=500\nconsumer.timeout.ms=500\n"
    );
    ConsumerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap()
}

fn producer_config() -> ProducerConfig {
    let text = "zk.connect=zk:2181\nzk.sessiontimeout.ms=3000\nproducer.type=sync\n";
    ProducerConfig::from_properties(&Properties::parse("test", text).unwrap()).unwrap()
}

#[test]
fn a_commit_asked_for_as_a_rebalance_begins_is_written_before_the_partitions_move() {
    let mut builder = sim_builder(7);
    builder.simulation_duration(Duration::from_secs(120));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let _cluster = add_cluster(&mut sim, &ClusterSpec::new("", 1, 4), &mut rng, &control);
    type Asked = (BrokerPartition, Vec<(Duration, Option<CommitOutcome>)>);
    let answer: Arc<Mutex<Option<Asked>>> = Arc::default();
    let answered = answer.clone();
    sim.client("app", async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let producer = Producer::start(SimEnv::new(1), producer_config()).await?;
        // The first message creates the topic; its four partitions are known once registered.
        producer
            .send(Record::new(topic(), b"first".to_vec()))
            .await?
            .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        for i in 0..40u32 {
            let mut record = Record::new(topic(), format!("m {i}").into_bytes());
            record.key = Some(vec![i as u8].into());
            producer.send(record).await?.await?;
        }
        let subscription = Subscription::Topics([(topic(), 1)].into_iter().collect());
        let (first, mut streams) =
            ConsumerConnector::start(SimEnv::new(2), consumer_config(), subscription.clone())
                .await?;
        // Read until a message of each of the four partitions was handed out.
        let mut read: BTreeMap<BrokerPartition, Commit> = BTreeMap::new();
        while read.len() < 4 {
            let message = match streams[0].next().await {
                Ok(message) => message,
                Err(ConsumerError::Timeout(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            read.insert(
                message.partition,
                Commit {
                    topic: message.topic.clone(),
                    partition: message.partition,
                    offset: message.offset,
                    epoch: message.epoch,
                },
            );
        }
        // A second member joins: the first one's coordinator sees it and, after coalescing
        // the change, rebalances, giving two of its four partitions away. Meanwhile the first
        // asks every 10 ms to commit the last partition (which moves), each time it still owns
        // all four as of its last rebalance.
        let first = Arc::new(first);
        let second = tokio::spawn(ConsumerConnector::start(
            SimEnv::new(3),
            consumer_config(),
            subscription,
        ));
        let last = read
            .values()
            .next_back()
            .cloned()
            .expect("four partitions read");
        let mut asked = tokio::task::JoinSet::new();
        while first
            .ownership()
            .is_some_and(|o| o.partitions.len() == 4 && o.generation == 1)
        {
            let (first, last) = (first.clone(), last.clone());
            asked.spawn(async move {
                let sent = turmoil::sim_elapsed().unwrap_or_default();
                (sent, first.commit_each(vec![last]).await)
            });
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut outcomes = Vec::new();
        while let Some(joined) = asked.join_next().await {
            let (sent, batch) = joined?;
            assert!(batch.failed.is_none(), "{:?}", batch.failed);
            outcomes.push((sent, batch.answers.first().map(|a| a.outcome)));
        }
        outcomes.sort_by_key(|(sent, _)| *sent);
        *answered.lock().unwrap() = Some((last.partition, outcomes));
        let (second, _streams) = second.await??;
        second.shutdown().await;
        if let Ok(first) = Arc::try_unwrap(first) {
            first.shutdown().await;
        }
        Ok(())
    });
    sim.run().unwrap();
    let (partition, outcomes) = answer
        .lock()
        .unwrap()
        .take()
        .expect("the commits were answered");
    assert!(outcomes.len() > 10, "{outcomes:?}");
    let refused: Vec<_> = outcomes
        .iter()
        .filter(|(_, outcome)| {
            !matches!(
                outcome,
                Some(CommitOutcome::Written | CommitOutcome::NothingNew)
            )
        })
        .collect();
    assert!(
        refused.is_empty(),
        "commits of {partition} asked for while the member owned it were refused: {refused:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|(_, o)| *o == Some(CommitOutcome::Written)),
        "{outcomes:?}"
    );
}
