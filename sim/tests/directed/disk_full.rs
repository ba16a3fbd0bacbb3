//! A mirror's messages given up on while the mirror cluster's disk is full are not passed by
//! the messages after them: appended past them, those would have the mirror partition take
//! them for held when the mirror sends them again from its commit, and they would be lost.
//!
//! On one sync producer with durable acks (a mirror's, positions on) against a mirror cluster
//! of one broker: source partition a's message 0 is appended; then the broker's disk fills,
//! and message 1 is retried until the producer gives it up (past the placement grace and its
//! retries); the disk is emptied, and message 2 (the next one the stream had queued) is sent.
//! It must be refused as following a gap. Then message 1, sent again from the commit in a new
//! ownership, must be appended, not taken for held.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tributary::producer::{Delivered, Record, SendError, SourceMark};
use tributary_core::mirror::position::SourceKey;
use tributary_core::planted::{plant, Bug};
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::sim_builder;
use tributary_sim::world::{add_cluster, ClusterSpec, Control};

use super::place_ahead::{member, source, topic};

/// Message `n` of `key` (source offsets 100 n .. 100 (n + 1)) in ownership `epoch`.
fn message(key: &Arc<SourceKey>, n: i64, epoch: u64) -> Record {
    let mark = SourceMark {
        key: key.clone(),
        start: 100 * n,
        next: 100 * (n + 1),
        epoch,
    };
    Record::mirrored(topic(), format!("m{n}"), mark)
}

/// What each send came to.
#[derive(Debug, Default)]
struct Seen {
    given_up: Option<Result<Delivered, SendError>>,
    next: Option<Result<Delivered, SendError>>,
    sent_again: Option<Result<Delivered, SendError>>,
}

fn run(bugs: &[Bug]) -> Seen {
    plant(bugs);
    let mut builder = sim_builder(13);
    builder
        .simulation_duration(Duration::from_secs(300))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(1));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let target = add_cluster(&mut sim, &ClusterSpec::new("dst", 1, 1), &mut rng, &control);
    let disk = target
        .disks
        .values()
        .next()
        .cloned()
        .expect("the broker's disk");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let report = seen.clone();
    sim.client("mirror", async move {
        let env = SimEnv::new(1);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let producer = member(&env, "num.retries=2\n").await?;
        let a = source(1);
        producer.send(message(&a, 0, 1)).await?.await?;
        disk.set_full(true);
        let given_up = producer.send(message(&a, 1, 1)).await?.await;
        disk.set_full(false);
        let next = producer.send(message(&a, 2, 1)).await?.await;
        let sent_again = producer.send(message(&a, 1, 2)).await?.await;
        *report.lock().unwrap() = Seen {
            given_up: Some(given_up),
            next: Some(next),
            sent_again: Some(sent_again),
        };
        producer.close().await;
        Ok(())
    });
    let outcome = sim.run();
    plant(&[]);
    if let Err(e) = outcome {
        panic!("the simulation failed: {e}");
    }
    let taken = std::mem::take(&mut *seen.lock().unwrap());
    taken
}

#[test]
fn messages_given_up_on_while_the_disk_is_full_are_not_passed_and_not_taken_for_held() {
    // Planted: the next message is appended past the one given up on, which is then taken
    // for held when sent again: lost.
    let planted = run(&[Bug::GivenUpKeepsSentPoint]);
    assert!(
        matches!(planted.given_up, Some(Err(SendError::Failed { .. }))),
        "the steps no longer reach a message given up on: {planted:?}"
    );
    assert!(
        matches!(planted.sent_again, Some(Ok(Delivered { held: true, .. }))),
        "with the sent point kept, the message given up on was still stored: the steps no longer reach the situation: {planted:?}"
    );
    let seen = run(&[]);
    assert!(
        matches!(seen.given_up, Some(Err(SendError::Failed { .. }))),
        "the message sent while the disk was full is given up on: {seen:?}"
    );
    assert!(
        matches!(
            seen.next,
            Some(Err(SendError::SourceGap {
                expected: 100,
                found: 200,
                ..
            }))
        ),
        "the next message is refused as following the gap: {seen:?}"
    );
    assert!(
        matches!(seen.sent_again, Some(Ok(Delivered { held: false, .. }))),
        "the message given up on, sent again, is appended: {seen:?}"
    );
}
