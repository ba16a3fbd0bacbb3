//! A mirror producer with placement records places the source partitions its member comes to
//! own ahead of their first messages, all at once: located one at a time at each partition's
//! first message, a sync producer sends nothing else while each record is read and written
//! (several ZooKeeper round trips), so a member taking over hundreds of source partitions
//! crawls through them.
//!
//! Every link is a fixed 1 ms. On one sync producer: 32 source partitions each send their
//! first message one after another, placed as they come (the baseline); then 32 other source
//! partitions are located ahead, and each sends its first message. Ahead, every record is in
//! the mirror cluster's ZooKeeper before any of their messages is sent, and the second run
//! (the locate ahead included) takes at most half the first.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tributary::producer::{Producer, Record, SourceMark};
use tributary_core::config::{ProducerConfig, Properties};
use tributary_core::consumer::BrokerPartition;
use tributary_core::identity::ClusterId;
use tributary_core::mirror::position::SourceKey;
use tributary_core::wire::TopicName;
use tributary_core::zk_layout::MIRROR_PLACEMENTS_PATH;
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::sim_builder;
use tributary_sim::world::{add_cluster, ClusterSpec, Control, ZK_PORT};

const LINK: Duration = Duration::from_millis(1);
const PARTITIONS: u32 = 32;

pub(super) fn topic() -> TopicName {
    "t".parse().unwrap()
}

/// Source partition `partition` of cluster `east`, topic `orders`.
pub(super) fn source(partition: u32) -> Arc<SourceKey> {
    Arc::new(SourceKey {
        cluster: ClusterId::parse("east").unwrap(),
        topic: "orders".parse().unwrap(),
        partition: BrokerPartition {
            broker_id: 0,
            partition,
        },
    })
}

/// The first message of `key`, in ownership epoch 1.
fn first_message(key: &Arc<SourceKey>) -> Record {
    let mark = SourceMark {
        key: key.clone(),
        start: 0,
        next: 100,
        epoch: 1,
    };
    Record::mirrored(topic(), format!("{} m0", key.partition), mark)
}

/// A mirror's sync producer with durable acks to the `dst` cluster, with `settings` (lines of
/// producer properties) added.
pub(super) async fn member(
    env: &SimEnv,
    settings: &str,
) -> Result<Producer<SimEnv>, Box<dyn std::error::Error>> {
    let config = format!(
        "zk.connect=dst-zk:{ZK_PORT}\nzk.sessiontimeout.ms=6000\nzk.connectiontimeout.ms=6000\n\
         producer.type=sync\ndurable.acks=true\nsocket.timeout.ms=2000\n{settings}"
    );
    let config = ProducerConfig::from_properties(&Properties::parse("producer", &config)?)?;
    Ok(Producer::start(env.clone(), config).await?)
}

/// Sends the first message of each of `keys`, one after another, each delivered before the
/// next; how long it took.
async fn first_messages(
    producer: &Producer<SimEnv>,
    keys: &[Arc<SourceKey>],
) -> Result<Duration, Box<dyn std::error::Error>> {
    let started = tokio::time::Instant::now();
    for key in keys {
        producer.send(first_message(key)).await?.await?;
    }
    Ok(started.elapsed())
}

/// What the run measured.
#[derive(Debug, Default)]
struct Seen {
    one_at_a_time: Duration,
    ahead: Duration,
    /// Records of the second 32 present once the locate ahead returned (before any message).
    recorded_ahead: usize,
}

#[test]
fn source_partitions_located_ahead_are_placed_at_once_not_one_after_another() {
    let mut builder = sim_builder(7);
    builder
        .simulation_duration(Duration::from_secs(120))
        .min_message_latency(LINK)
        .max_message_latency(LINK);
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let target = add_cluster(&mut sim, &ClusterSpec::new("dst", 2, 1), &mut rng, &control);
    let model = target.model.clone();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let report = seen.clone();
    sim.client("mirror", async move {
        let env = SimEnv::new(1);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let producer = member(&env, "").await?;
        // The topic's first set creates it; placements of a topic without brokers wait.
        first_messages(&producer, &[source(1000)]).await?;
        let baseline: Vec<_> = (0..PARTITIONS).map(source).collect();
        let one_at_a_time = first_messages(&producer, &baseline).await?;
        let taken: Vec<_> = (PARTITIONS..2 * PARTITIONS).map(source).collect();
        let started = tokio::time::Instant::now();
        let ahead: BTreeMap<Arc<SourceKey>, u64> = taken.iter().map(|k| (k.clone(), 1)).collect();
        producer
            .locate_ahead(BTreeMap::from([(topic(), ahead)]))
            .await;
        let parent = format!("{MIRROR_PLACEMENTS_PATH}/{}", topic());
        let recorded: Vec<String> = model.lock().unwrap().children(&parent);
        let recorded_ahead = taken
            .iter()
            .filter(|k| {
                let suffix = format!(",{}", k.partition);
                recorded.iter().any(|node| node.ends_with(&suffix))
            })
            .count();
        first_messages(&producer, &taken).await?;
        let ahead = started.elapsed();
        *report.lock().unwrap() = Seen {
            one_at_a_time,
            ahead,
            recorded_ahead,
        };
        producer.close().await;
        Ok(())
    });
    sim.run().unwrap();
    let seen = seen.lock().unwrap();
    eprintln!("{seen:?}");
    assert_eq!(
        seen.recorded_ahead, PARTITIONS as usize,
        "records in the mirror cluster's ZooKeeper once the locate ahead returned: {seen:?}"
    );
    assert!(
        seen.ahead * 2 <= seen.one_at_a_time,
        "32 source partitions located ahead then sent took {:?}, placed one at a time {:?}",
        seen.ahead,
        seen.one_at_a_time
    );
}
