//! A mirror producer keeps a request in flight for each of two source partitions at once, and
//! never two for one: with one request in flight, a source partition queued while another's
//! request waits for its durable acknowledgement waits a whole round trip more.
//!
//! Every link is a fixed 40 ms. On one async producer with durable acks (batch.size=1): source
//! partitions a and b are placed by a first message each, sent together (a connection for
//! each lane); then a's second message is queued, and once its request has left, b's second
//! and a's third. b's goes at once beside a's and is
//! acknowledged first; a's third waits for a's second (two round trips), and lands after it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tributary::env::Env as _;
use tributary::producer::{Delivered, Producer, Record, SourceMark};
use tributary_core::config::{ProducerConfig, Properties};
use tributary_core::mirror::position::SourceKey;
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::sim_builder;
use tributary_sim::world::{add_cluster, ClusterSpec, Control, ZK_PORT};

use super::place_ahead::{source, topic};

const LINK: Duration = Duration::from_millis(40);
/// A request and its answer.
const ROUND_TRIP: Duration = Duration::from_millis(80);

/// Message `n` of `key` (source offsets 100 n .. 100 (n + 1)), in ownership epoch 1.
fn message(key: &Arc<SourceKey>, n: i64) -> Record {
    let mark = SourceMark {
        key: key.clone(),
        start: 100 * n,
        next: 100 * (n + 1),
        epoch: 1,
    };
    Record::mirrored(topic(), format!("{} m{n}", key.partition), mark)
}

/// What the run measured: each message's time from being queued to its acknowledgement.
#[derive(Debug, Default)]
struct Seen {
    b_beside_a: Duration,
    a_behind_a: Duration,
    a_second: Option<Delivered>,
    a_third: Option<Delivered>,
}

#[test]
fn two_source_partitions_are_in_flight_together_and_one_never_twice() {
    let mut builder = sim_builder(11);
    builder
        .simulation_duration(Duration::from_secs(120))
        .min_message_latency(LINK)
        .max_message_latency(LINK);
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    add_cluster(&mut sim, &ClusterSpec::new("dst", 1, 1), &mut rng, &control);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let report = seen.clone();
    sim.client("mirror", async move {
        let env = SimEnv::new(1);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let config = format!(
            "zk.connect=dst-zk:{ZK_PORT}\nzk.sessiontimeout.ms=6000\nzk.connectiontimeout.ms=6000\n\
             producer.type=async\nbatch.size=1\nqueue.time=5\ndurable.acks=true\nsocket.timeout.ms=5000\n"
        );
        let config = ProducerConfig::from_properties(&Properties::parse("producer", &config)?)?;
        let producer = Producer::start(env.clone(), config).await?;
        let (a, b) = (source(1), source(2));
        // Placed (and the topic created) by a first message each, sent together: the
        // producer then has a connection open for each lane.
        let a_first = producer.send(message(&a, 0)).await?;
        let b_first = producer.send(message(&b, 0)).await?;
        a_first.await?;
        b_first.await?;
        let a_second = producer.send(message(&a, 1)).await?;
        // a's request has left (batch.size=1; the sender takes it at once).
        tokio::time::sleep(Duration::from_millis(10)).await;
        let queued = env.monotonic();
        let b_second = producer.send(message(&b, 1)).await?;
        let a_third = producer.send(message(&a, 2)).await?;
        b_second.await?;
        let b_beside_a = env.monotonic() - queued;
        let a_second = a_second.await?;
        let a_third = a_third.await?;
        *report.lock().unwrap() = Seen {
            b_beside_a,
            a_behind_a: env.monotonic() - queued,
            a_second: Some(a_second),
            a_third: Some(a_third),
        };
        producer.close().await;
        Ok(())
    });
    sim.run().unwrap();
    let seen = seen.lock().unwrap();
    eprintln!("{seen:?}");
    // With one request in flight b's message would go in a's next request, with a's third.
    assert!(
        seen.b_beside_a + LINK / 2 <= seen.a_behind_a,
        "b's message went beside a's request in flight, not behind it: {seen:?}"
    );
    assert!(
        seen.a_behind_a >= ROUND_TRIP + ROUND_TRIP / 2,
        "a's third message waited for a's request in flight: {seen:?}"
    );
    let offset = |d: &Option<Delivered>| d.and_then(|d| d.offset).unwrap_or(-1);
    assert!(
        offset(&seen.a_third) > offset(&seen.a_second),
        "a's messages land in the order queued: {seen:?}"
    );
}
