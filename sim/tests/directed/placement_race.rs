//! A directed run of the situation behind the fresh mirror seeds' doubled copies: two mirror
//! members place one source partition of a new topic at the same moment while they see the
//! mirror topic's brokers differently, and neither has sent anything yet that the other's
//! survey could find.
//!
//! Built step by step: a mirror cluster of two brokers with one partition each; member `a`
//! (a synchronous mirror producer with positions) and member `b`.
//!
//! 1. `t` is registered on broker 0 only. `a` sends a message of another source partition:
//!    its survey of `t` (nothing copied yet) serves every source partition of that ownership.
//! 2. `a` is cut from broker 0, then sends source partition `K`'s five messages: placed from
//!    its view (broker 0, the only one with `t`) without asking again, they wait for broker 0.
//! 3. `t` is registered on broker 1 as well. `b` takes `K` over (the old owner's sends still
//!    on their way) and sends the same five: its survey finds no copy of `K`, and `K` hashes to
//!    broker 1 among `b`'s two.
//! 4. The cut heals and `a`'s sets land.
//!
//! Without a placement both members share, `K` is then copied into both brokers (the planted
//! `PlacementRecordsIgnored` must show it, which proves the steps still reach the race). With
//! the mirror cluster's placement record, `a` recorded broker 0 before it sent, `b` follows the
//! record, and broker 0's positions judge `a`'s sets held: one copy.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tributary::client::connect;
use tributary::producer::{Producer, Record, SourceMark};
use tributary_core::config::{ProducerConfig, Properties};
use tributary_core::consumer::BrokerPartition;
use tributary_core::identity::ClusterId;
use tributary_core::message::{CompressionCodec, MessageSetBuilder};
use tributary_core::mirror::position::placement::{index, BROKER_SALT};
use tributary_core::mirror::position::SourceKey;
use tributary_core::planted::{plant, Bug};
use tributary_core::wire::{
    ErrorCode, MirrorPositionsRequest, ProduceRequest, Request, Response, TopicName,
};
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::sim_builder;
use tributary_sim::world::{add_cluster, ClusterSpec, Control, BROKER_PORT, ZK_PORT};

fn topic() -> TopicName {
    "t".parse().unwrap()
}

/// A source partition of cluster `east`, topic `orders`.
fn source(partition: u32) -> SourceKey {
    SourceKey {
        cluster: ClusterId::parse("east").unwrap(),
        topic: "orders".parse().unwrap(),
        partition: BrokerPartition {
            broker_id: 0,
            partition,
        },
    }
}

/// The source partition `K`: one that hashes to broker 1 among brokers 0 and 1.
fn raced() -> SourceKey {
    (0..64)
        .map(source)
        .find(|key| index(key, BROKER_SALT, 2) == 1)
        .unwrap()
}

/// `count` messages of `key` from source offset 0, in ownership epoch 1.
fn copies(key: &SourceKey, count: i64) -> Vec<Record> {
    let key = Arc::new(key.clone());
    (0..count)
        .map(|i| {
            let mark = SourceMark {
                key: key.clone(),
                start: i * 100,
                next: (i + 1) * 100,
                epoch: 1,
            };
            Record::mirrored(topic(), format!("{} m{i}", key.partition), mark)
        })
        .collect()
}

async fn member(env: &SimEnv) -> Result<Producer<SimEnv>, Box<dyn std::error::Error>> {
    let config = format!(
        "zk.connect=dst-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\n\
         producer.type=sync\ndurable.acks=true\nsocket.timeout.ms=2000\n"
    );
    let config = ProducerConfig::from_properties(&Properties::parse("producer", &config)?)?;
    Ok(Producer::start(env.clone(), config).await?)
}

/// A plain produce of one message to `t` on `broker` (the first one registers `t` there).
async fn register_on(env: &SimEnv, broker: u32) -> Result<(), Box<dyn std::error::Error>> {
    let host = format!("dst-broker{broker}");
    let mut conn = connect(env, &host, BROKER_PORT, Duration::from_secs(5)).await?;
    let mut set = MessageSetBuilder::new();
    set.push(b"plain".to_vec());
    let messages: Bytes = set.build(CompressionCodec::None);
    conn.send(&Request::Produce(ProduceRequest {
        topic: topic(),
        partition: 0,
        messages,
    }))
    .await?;
    Ok(())
}

/// How far each broker's partition of `t` holds `key` (`None`: not at all).
async fn held_by_broker(
    env: &SimEnv,
    key: &SourceKey,
) -> Result<Vec<Option<i64>>, Box<dyn std::error::Error>> {
    let mut held = Vec::new();
    for broker in 0..2 {
        let host = format!("dst-broker{broker}");
        let mut conn = connect(env, &host, BROKER_PORT, Duration::from_secs(5)).await?;
        let ask = Request::MirrorPositions(MirrorPositionsRequest {
            topic: topic(),
            partition: 0,
            translate: Vec::new(),
        });
        match conn.call(&ask).await? {
            Response::MirrorPositions(r) if r.error == ErrorCode::NoError => held.push(
                r.sources
                    .into_iter()
                    .find(|s| s.key == *key)
                    .map(|s| s.held_to),
            ),
            other => return Err(format!("dst-broker{broker}: {other:?}").into()),
        }
    }
    Ok(held)
}

/// Runs the steps, with or without the records planted away; how far each broker holds `K`.
fn run(planted: bool) -> Vec<Option<i64>> {
    plant(if planted {
        &[Bug::PlacementRecordsIgnored]
    } else {
        &[]
    });
    let mut builder = sim_builder(5);
    builder.simulation_duration(Duration::from_secs(90));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let _target = add_cluster(&mut sim, &ClusterSpec::new("dst", 2, 1), &mut rng, &control);
    let held: Arc<Mutex<Vec<Option<i64>>>> = Arc::default();
    sim.client("a", async move {
        let env = SimEnv::new(1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        register_on(&env, 0).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let a = member(&env).await?;
        a.send_all(copies(&source(60), 1)).await?;
        turmoil::partition("a", "dst-broker0");
        // Waits for broker 0 until the cut heals (at 20 s).
        let sent = a.send_all(copies(&raced(), 5)).await?;
        for delivery in sent {
            delivery.await?;
        }
        a.close().await;
        Ok(())
    });
    let b_held = held.clone();
    sim.client("b", async move {
        let env = SimEnv::new(2);
        tokio::time::sleep(Duration::from_secs(8)).await;
        register_on(&env, 1).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let b = member(&env).await?;
        let sent = b.send_all(copies(&raced(), 5)).await?;
        for delivery in sent {
            delivery.await?;
        }
        tokio::time::sleep(Duration::from_secs(8)).await;
        turmoil::repair("a", "dst-broker0");
        tokio::time::sleep(Duration::from_secs(30)).await;
        *b_held.lock().unwrap() = held_by_broker(&env, &raced()).await?;
        b.close().await;
        Ok(())
    });
    let outcome = sim.run();
    plant(&[]);
    if let Err(e) = outcome {
        panic!("the simulation failed: {e}");
    }
    let held = held.lock().unwrap().clone();
    held
}

#[test]
fn two_members_that_see_the_brokers_differently_copy_a_new_source_partition_once() {
    let planted = run(true);
    assert_eq!(
        planted,
        vec![Some(500), Some(500)],
        "without placement records the source partition was not copied into both brokers: the steps no longer reach the race"
    );
    let held = run(false);
    assert_eq!(
        held,
        vec![Some(500), None],
        "with placement records the source partition is copied once, into the broker the first member recorded"
    );
}
