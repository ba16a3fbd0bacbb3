//! A consumer group member claims and commits many partitions in about the time of a few
//! ZooKeeper round trips, not one round trip per partition: its owner claims, offset lookups
//! and offset writes are pipelined on the session. With every simulated link at a fixed 1 ms,
//! one write after another would take at least 2 ms a partition.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tributary::client::connect;
use tributary::consumer::{Commit, CommitOutcome, ConsumerConnector, ConsumerError, Subscription};
use tributary_core::config::{ConsumerConfig, Properties};
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::wire::{ProduceRequest, Request, TopicName};
use tributary_core::zk_layout::consumer_offsets_path;
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::sim_builder;
use tributary_sim::world::{add_cluster, ClusterSpec, Control, BROKER_PORT};

const GROUP: &str = "g";
const PARTITIONS: u32 = 512;
const LINK: Duration = Duration::from_millis(1);

fn topic() -> TopicName {
    "wide".parse().unwrap()
}

fn consumer_config() -> ConsumerConfig {
    let text = format!(
        "zk.connect=zk:2181\ngroupid={GROUP}\nzk.sessiontimeout.ms=6000\nautooffset.reset=smallest\n\
         autocommit.enable=false\nconsumer.timeout.ms=500\n"
    );
    ConsumerConfig::from_properties(&Properties::parse("test", &text).unwrap()).unwrap()
}

#[test]
fn claiming_and_committing_many_partitions_take_a_few_round_trips_not_one_per_partition() {
    let mut builder = sim_builder(11);
    builder
        .simulation_duration(Duration::from_secs(300))
        .min_message_latency(LINK)
        .max_message_latency(LINK);
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let cluster = add_cluster(
        &mut sim,
        &ClusterSpec::new("", 1, PARTITIONS),
        &mut rng,
        &control,
    );
    let took: Arc<Mutex<Option<(Duration, Duration, usize)>>> = Arc::default();
    let answer = took.clone();
    sim.client("app", async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        // One message to every partition, on one connection (each creates its partition).
        let env = SimEnv::new(1);
        let mut conn = connect(&env, "broker0", BROKER_PORT, Duration::from_secs(5)).await?;
        let one = {
            let mut b = MessageSetBuilder::new();
            b.push(Bytes::from_static(b"m"));
            b.build(CompressionCodec::None)
        };
        for partition in 0..PARTITIONS {
            let request = Request::Produce(ProduceRequest {
                topic: topic(),
                partition: partition as i32,
                messages: one.clone(),
            });
            conn.send(&request).await?;
        }
        // Let every partition's first message be flushed, so the member's start is all ZooKeeper.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let subscription = Subscription::Topics([(topic(), 1)].into_iter().collect());
        // Time is the simulation's (as `group_commits` reads it), never the host's clock.
        let now = || turmoil::sim_elapsed().unwrap_or_default();
        let joining = now();
        let (member, mut streams) =
            ConsumerConnector::start(SimEnv::new(2), consumer_config(), subscription).await?;
        while member
            .ownership()
            .is_none_or(|o| o.partitions.len() < PARTITIONS as usize)
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let joined = now() - joining;
        let mut read = BTreeSet::new();
        while read.len() < PARTITIONS as usize {
            match streams[0].next().await {
                Ok(message) => {
                    read.insert(message.partition);
                }
                Err(ConsumerError::Timeout(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let start = now();
        let written = member.commit_offsets().await?;
        *answer.lock().unwrap() = Some((joined, now() - start, written));
        member.shutdown().await;
        Ok(())
    });
    sim.run().unwrap();
    let (joined, elapsed, written) = took.lock().unwrap().take().expect("the commit finished");
    assert_eq!(
        written, PARTITIONS as usize,
        "every partition's offset written"
    );
    println!(
        "joining and owning {PARTITIONS} partitions took {joined:?}; committing them (nodes created) {elapsed:?}"
    );
    // One after another: at least a round trip (2 ms) a partition, over a second in all.
    let serial = LINK * 2 * PARTITIONS;
    assert!(
        elapsed * 5 < serial,
        "committing {PARTITIONS} partitions took {elapsed:?}; one write after another takes {serial:?}"
    );
    // Claims, committed-offset lookups and start offsets are pipelined, each broker's address is
    // read once, so the join takes a few round trips per batch, not per partition. Measured:
    // 4.1 s with one request in flight, 2.1 s with ZooKeeper pipelined, 1.1 s with OFFSETS
    // pipelined too, 95 ms with the broker's address read once per attempt.
    assert!(
        joined * 5 < serial,
        "owning {PARTITIONS} partitions took {joined:?}; one claim after another takes {serial:?}"
    );
    let model = cluster.model.lock().unwrap();
    let offsets = consumer_offsets_path(&GROUP.parse().unwrap(), &topic());
    let children = model.children(&offsets);
    assert_eq!(
        children.len(),
        PARTITIONS as usize,
        "{offsets}: {children:?}"
    );
    for broker_partition in children {
        let data = model.data(&format!("{offsets}/{broker_partition}"));
        assert_eq!(
            data.as_deref(),
            Some(&b"11"[..]),
            "{offsets}/{broker_partition}"
        );
    }
}

/// Two items of one partition in one commit request: the second (lower) is decided after the
/// first is written, so the node keeps the higher offset. Pipelined together, both writes would
/// be decided at once and the lower one, sent last, would be what ZooKeeper keeps.
#[test]
fn a_partition_asked_twice_in_one_commit_keeps_the_higher_offset() {
    let mut sim = sim_builder(12).build();
    let control = Arc::new(Control::default());
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let cluster = add_cluster(&mut sim, &ClusterSpec::new("", 1, 1), &mut rng, &control);
    type Asked = (Vec<CommitOutcome>, i64);
    let asked: Arc<Mutex<Option<Asked>>> = Arc::default();
    let answer = asked.clone();
    sim.client("app", async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut conn = connect(
            &SimEnv::new(1),
            "broker0",
            BROKER_PORT,
            Duration::from_secs(5),
        )
        .await?;
        for text in [&b"first"[..], b"second"] {
            let mut set = MessageSetBuilder::new();
            set.push(Bytes::from_static(text));
            let request = Request::Produce(ProduceRequest {
                topic: topic(),
                partition: 0,
                messages: set.build(CompressionCodec::None),
            });
            conn.send(&request).await?;
        }
        let subscription = Subscription::Topics([(topic(), 1)].into_iter().collect());
        let (member, mut streams) =
            ConsumerConnector::start(SimEnv::new(2), consumer_config(), subscription).await?;
        let mut read = Vec::new();
        while read.len() < 2 {
            match streams[0].next().await {
                Ok(message) => read.push(Commit {
                    topic: message.topic.clone(),
                    partition: message.partition,
                    offset: message.offset,
                    epoch: message.epoch,
                }),
                Err(ConsumerError::Timeout(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let (first, second) = (read[0].clone(), read[1].clone());
        let batch = member.commit_each(vec![second.clone(), first]).await;
        assert!(batch.failed.is_none(), "{:?}", batch.failed);
        *answer.lock().unwrap() = Some((
            batch.answers.iter().map(|a| a.outcome).collect(),
            second.offset,
        ));
        member.shutdown().await;
        Ok(())
    });
    sim.run().unwrap();
    let (outcomes, higher) = asked
        .lock()
        .unwrap()
        .take()
        .expect("the commit was answered");
    assert_eq!(
        outcomes,
        [CommitOutcome::Written, CommitOutcome::NothingNew],
        "{outcomes:?}"
    );
    let path = format!(
        "{}/0-0",
        consumer_offsets_path(&GROUP.parse().unwrap(), &topic())
    );
    let kept = cluster.model.lock().unwrap().data(&path);
    assert_eq!(
        kept.as_deref(),
        Some(higher.to_string().as_bytes()),
        "{path} after committing offset {higher} then a lower one in one request"
    );
}

/// A member of a whitelist subscription joining a cluster of many small topics reads every
/// topic's registration pipelined (one after another: two round trips a topic, 1 s over 256
/// topics at 2 ms each) and works out each member's streams once, not once per topic.
#[test]
fn joining_many_topics_reads_them_pipelined() {
    const TOPICS: u32 = 256;
    let mut builder = sim_builder(13);
    builder
        .simulation_duration(Duration::from_secs(300))
        .min_message_latency(LINK)
        .max_message_latency(LINK);
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let _cluster = add_cluster(&mut sim, &ClusterSpec::new("", 1, 2), &mut rng, &control);
    let took: Arc<Mutex<Option<(Duration, usize)>>> = Arc::default();
    let answer = took.clone();
    sim.client("app", async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        // One message to each topic (each creates and registers its topic).
        let mut conn = connect(
            &SimEnv::new(1),
            "broker0",
            BROKER_PORT,
            Duration::from_secs(5),
        )
        .await?;
        for t in 0..TOPICS {
            let mut set = MessageSetBuilder::new();
            set.push(Bytes::from_static(b"m"));
            let request = Request::Produce(ProduceRequest {
                topic: format!("t{t}").parse()?,
                partition: 0,
                messages: set.build(CompressionCodec::None),
            });
            conn.send(&request).await?;
        }
        // Let every topic be registered, so the member's join is all its own.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = || turmoil::sim_elapsed().unwrap_or_default();
        let joining = now();
        let subscription = Subscription::Whitelist("t.*".to_string(), 1);
        let (member, _streams) =
            ConsumerConnector::start(SimEnv::new(2), consumer_config(), subscription).await?;
        let want = (TOPICS * 2) as usize;
        while member.ownership().is_none_or(|o| o.partitions.len() < want) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let owned = member.ownership().map_or(0, |o| o.partitions.len());
        *answer.lock().unwrap() = Some((now() - joining, owned));
        member.shutdown().await;
        Ok(())
    });
    sim.run().unwrap();
    let (joined, owned) = took.lock().unwrap().take().expect("the member joined");
    assert_eq!(owned, (TOPICS * 2) as usize, "every topic's two partitions");
    println!("joining {TOPICS} topics ({owned} partitions) took {joined:?}");
    let serial = LINK * 2 * 2 * TOPICS;
    assert!(
        joined * 4 < serial,
        "owning {TOPICS} topics took {joined:?}; reading them one after another takes {serial:?}"
    );
}

/// A member joins while another session holds partition 0-0's owner node; the holder changes
/// the node `changes` times (each change wakes the blocked member early) and deletes it after
/// `held`. Returns how long after joining the member owned all four partitions and the
/// rebalance errors its stream was told of.
fn blocked_join(
    seed: u64,
    held: Duration,
    changes: u32,
    retries_max: u32,
) -> (Duration, Vec<String>) {
    use tributary::coordination::{Coordination, NodeKind};
    use tributary::env::Env;
    use tributary_core::config::ZkConnect;
    use tributary_core::zk_layout::consumer_owners_path;

    let mut builder = sim_builder(seed);
    builder
        .simulation_duration(Duration::from_secs(300))
        .min_message_latency(LINK)
        .max_message_latency(LINK);
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let _cluster = add_cluster(&mut sim, &ClusterSpec::new("", 1, 4), &mut rng, &control);
    type Found = (Duration, Vec<String>);
    let took: Arc<Mutex<Option<Found>>> = Arc::default();
    let answer = took.clone();
    sim.client("app", async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut conn = connect(
            &SimEnv::new(1),
            "broker0",
            BROKER_PORT,
            Duration::from_secs(5),
        )
        .await?;
        let mut set = MessageSetBuilder::new();
        set.push(Bytes::from_static(b"m"));
        conn.send(&Request::Produce(ProduceRequest {
            topic: topic(),
            partition: 0,
            messages: set.build(CompressionCodec::None),
        }))
        .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Another session holds partition 0-0's owner node (a member that has not let go yet).
        let blocker = SimEnv::new(3)
            .coordinate(
                &ZkConnect::parse("zk:2181")?,
                Duration::from_secs(6),
                Duration::from_secs(6),
            )
            .await?;
        let owner = format!("{}/0-0", consumer_owners_path(&GROUP.parse()?, &topic()));
        blocker.ensure_parents(&owner).await?;
        blocker
            .create(&owner, b"someone-else-0", NodeKind::Ephemeral)
            .await?;
        let text = format!(
            "zk.connect=zk:2181\ngroupid={GROUP}\nzk.sessiontimeout.ms=6000\nautooffset.reset=smallest\n\
             autocommit.enable=false\nconsumer.timeout.ms=500\nrebalance.backoff.ms={BACKOFF_MS}\n\
             rebalance.retries.max={retries_max}\n"
        );
        let config = ConsumerConfig::from_properties(&Properties::parse("test", &text)?)?;
        let now = || turmoil::sim_elapsed().unwrap_or_default();
        let joining = now();
        let subscription = Subscription::Topics([(topic(), 1)].into_iter().collect());
        let (member, mut streams) =
            ConsumerConnector::start(SimEnv::new(2), config, subscription).await?;
        for change in 0..changes {
            tokio::time::sleep(held / (changes + 1)).await;
            blocker
                .set(&owner, format!("someone-else-{change}").as_bytes(), None)
                .await?;
        }
        tokio::time::sleep(held / (changes + 1)).await;
        assert!(
            member.ownership().is_none_or(|o| o.partitions.is_empty()),
            "the member owned partitions while one of them was held elsewhere"
        );
        blocker.delete(&owner, None).await?;
        while member.ownership().is_none_or(|o| o.partitions.len() < 4) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let joined = now() - joining;
        let mut errors = Vec::new();
        loop {
            match streams[0].next().await {
                Ok(_) | Err(ConsumerError::Timeout(_)) => break,
                Err(e) => errors.push(e.to_string()),
            }
        }
        *answer.lock().unwrap() = Some((joined, errors));
        member.shutdown().await;
        blocker.close().await;
        Ok(())
    });
    sim.run().unwrap();
    let found = took
        .lock()
        .unwrap()
        .take()
        .expect("the member owned every partition");
    found
}

const BACKOFF_MS: u64 = 10_000;

/// A rebalance attempt blocked by a partition another member still owns is tried again as soon
/// as that owner node goes, not a whole `rebalance.backoff.ms` later (0.7 sleeps the backoff:
/// a member joining a group over 1,000 partitions waited about 2 s for the others to let go).
/// With the backoff slept, the join takes 10.06 s.
#[test]
fn a_blocked_rebalance_claims_as_soon_as_the_owner_lets_go() {
    let held = Duration::from_secs(1);
    let (joined, errors) = blocked_join(14, held, 0, 4);
    println!("owned every partition {joined:?} after joining; the owner let go after {held:?}");
    assert!(
        joined < held + Duration::from_millis(100),
        "owned every partition {joined:?} after joining, the owner let go after {held:?}: it waited for the backoff ({BACKOFF_MS} ms)"
    );
    assert!(errors.is_empty(), "{errors:?}");
}

/// Retries woken early (the blocking node changed, and is still held) do not count as
/// attempts: a member with two attempts, woken five times, has not given up (counting them,
/// it would: "could not join the group's partitions after 2 rebalance attempts").
#[test]
fn early_retries_do_not_use_up_the_attempts() {
    let held = Duration::from_secs(1);
    let (joined, errors) = blocked_join(15, held, 5, 2);
    assert!(errors.is_empty(), "the rebalance gave up: {errors:?}");
    assert!(
        joined < held + Duration::from_millis(100),
        "owned every partition {joined:?} after joining, the owner let go after {held:?}"
    );
}

/// Once its early retries are used up, a blocked member waits out the backoff before each
/// counted attempt, however often the blocking node changes: woken 20 times with two attempts,
/// it has not given up (were a wake to end the wait once the early retries are used up, it
/// would: "the rebalance gave up").
#[test]
fn after_the_early_retries_only_the_backoff_ends_a_wait() {
    let held = Duration::from_secs(1);
    let (joined, errors) = blocked_join(16, held, 20, 2);
    assert!(errors.is_empty(), "the rebalance gave up: {errors:?}");
    assert!(
        joined >= Duration::from_millis(BACKOFF_MS),
        "owned every partition {joined:?} after joining: a counted attempt came before the backoff ({BACKOFF_MS} ms) ended"
    );
}
