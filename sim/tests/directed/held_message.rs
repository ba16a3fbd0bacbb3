//! A directed run of a situation drawn mirror seeds reach about once in 7,000: a stream
//! holds a message while its topic's first origin decision waits, a rebalance moves that
//! message's partition to another stream of the same member in the same epoch, and that stream
//! forwards later messages of the partition before the held one is looked at again.
//!
//! Built step by step instead of drawn: source and mirror clusters of one broker each, topic
//! `t` of three partitions, mirror makers `a` and `b` of two streams each (one group).
//!
//! 1. `a` alone owns `t`: stream 0 has partitions 0 and 1, stream 1 has partition 2.
//! 2. `a` is cut from the mirror cluster's ZooKeeper: no origin decision can be recorded.
//! 3. A message in partition 2: stream 1 starts `t`'s first decision and keeps trying (holding
//!    the topic's lock). A message in partition 1: stream 0 waits for the same decision.
//! 4. `b` joins: four streams for three partitions, so partition 1 moves to `a`'s stream 1 (same
//!    member, same epoch) and partition 2 to `b`.
//! 5. Five more messages in partition 1, fetched for `a`'s stream 1.
//! 6. The cut heals: stream 1's decision is made, it forwards the five, and only then does
//!    stream 0 see its held message again.
//!
//! Forwarding the held message then puts it after later ones, against the mirror scenario's
//! invariant 7 (one ownership forwards in source order; checked here on the observer's events
//! the same way); the mirror must instead withdraw it and read the partition again from its
//! commit. Two guards keep it: the held message's stream withdraws it once it finds its
//! partition moved, and the other stream's later messages wait behind the held one (marked
//! in the window while it waits). With both planted away (`HeldMessageForwarded`,
//! `CommitPastWaitingMessage`) the first run must break the rule, which shows the steps still
//! reach the situation; with only the wait marks planted away, the other stream's later
//! messages must go out first.
//!
//! A second run reaches the same move with the message already recorded as forwarded: maker
//! `a` copies with the mirror's positions and holds its first message of partition 1 between
//! its record and the hand-over to the producer (the observer's `hand_over_delay`: a thread
//! preempted there, a full queue), while the partition moves to its other stream. That stream
//! must wait for the hand-over: its later messages reaching the mirror cluster first would
//! have the first one taken for held, and lost (`HandOverNotAwaited` planted shows it).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncRead, AsyncWrite};
use tributary::client::{connect, latest_offsets, Connection};
use tributary::consumer::Subscription;
use tributary::mirror::{Mirror, MirrorEvent, MirrorObserver, MirrorSettings};
use tributary_core::config::{ConsumerConfig, ProducerConfig, Properties};
use tributary_core::message::{CompressionCodec, DeepIter, MessageSetBuilder};
use tributary_core::planted::Bug;
use tributary_core::wire::{ErrorCode, FetchRequest, ProduceRequest, Request, Response, TopicName};
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::sim_builder;
use tributary_sim::world::{add_cluster, Cluster, ClusterSpec, Control, BROKER_PORT, ZK_PORT};

const TOPIC: &str = "t";

fn topic() -> TopicName {
    TOPIC.parse().unwrap()
}

/// What one mirror maker did with one source partition, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Forwarded { generation: u64, end: i64 },
    Acknowledged { end: i64 },
    Committed { end: i64 },
}

/// Every event of both makers: (maker, partition) → what happened, in order.
type Seens = BTreeMap<(String, String), Vec<Seen>>;

/// [`Seens`] as the makers' observers fill it.
type Events = Arc<Mutex<Seens>>;

#[derive(Debug)]
struct Recorder {
    maker: String,
    events: Events,
    /// Maker `a` holds its first message of partition 1 this long between its record and the
    /// hand-over to the producer.
    stall: Option<Duration>,
    stalled: AtomicBool,
}

impl Recorder {
    fn push(&self, event: &MirrorEvent<'_>, seen: Seen) {
        self.events
            .lock()
            .unwrap()
            .entry((self.maker.clone(), event.partition.to_string()))
            .or_default()
            .push(seen);
    }
}

impl MirrorObserver for Recorder {
    fn forwarded(&self, event: &MirrorEvent<'_>, _payload: &[u8]) {
        let seen = Seen::Forwarded {
            generation: event.epoch,
            end: event.offset,
        };
        self.push(event, seen);
    }
    fn acknowledged(&self, event: &MirrorEvent<'_>) {
        self.push(event, Seen::Acknowledged { end: event.offset });
    }
    fn committed(&self, event: &MirrorEvent<'_>) {
        self.push(event, Seen::Committed { end: event.offset });
    }
    fn hand_over_delay(&self, event: &MirrorEvent<'_>) -> Option<Duration> {
        let first = self.maker == "a"
            && event.partition.to_string() == "0-1"
            && !self.stalled.swap(true, Ordering::SeqCst);
        self.stall.filter(|_| first)
    }
}

/// How a maker runs: with the mirror's positions, and with a stalled hand-over.
#[derive(Debug, Clone, Copy, Default)]
struct Mode {
    positions: bool,
    stall: Option<Duration>,
}

fn settings(maker: &str, events: &Events, mode: Mode) -> MirrorSettings {
    let consumer = format!(
        "zk.connect=src-zk:{ZK_PORT}\ngroupid=mirror\nconsumerid={maker}\nzk.sessiontimeout.ms=3000\n\
         zk.connectiontimeout.ms=5000\nautooffset.reset=smallest\nfetcher.backoff.ms=100\n\
         rebalance.backoff.ms=500\nsocket.timeout.ms=2000\nmirror.preserve.partitions={}\n",
        mode.positions
    );
    let producer = format!(
        "zk.connect=dst-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\n\
         producer.type=async\nqueue.size=64\nbatch.size=5\nqueue.time=30\nsocket.timeout.ms=2000\n"
    );
    let consumer =
        ConsumerConfig::from_properties(&Properties::parse("consumer", &consumer).unwrap())
            .unwrap();
    let producer =
        ProducerConfig::from_properties(&Properties::parse("producer", &producer).unwrap())
            .unwrap();
    let mut settings = MirrorSettings::embedded(consumer, producer);
    settings.filter = Subscription::Whitelist(TOPIC.to_string(), 0);
    settings.streams = 2;
    settings.commit_interval = Duration::from_millis(500);
    settings.observer = Some(Arc::new(Recorder {
        maker: maker.to_string(),
        events: events.clone(),
        stall: mode.stall,
        stalled: AtomicBool::new(false),
    }));
    settings
}

/// Adds mirror maker `maker`, started at `start` and stopped once `stop` is set.
fn add_maker(
    sim: &mut turmoil::Sim<'_>,
    maker: &'static str,
    start: Duration,
    events: &Events,
    stop: &Arc<AtomicBool>,
    mode: Mode,
) {
    let (events, stop) = (events.clone(), stop.clone());
    sim.client(format!("mm-{maker}"), async move {
        tokio::time::sleep(start).await;
        let mirror = loop {
            match Mirror::start(SimEnv::new(1), settings(maker, &events, mode)).await {
                Ok(mirror) => break mirror,
                Err(e) => tracing::info!("mirror maker {maker}: {e}; retrying"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let stopped = async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        mirror.run_until(stopped).await?;
        Ok(())
    });
}

/// One produce request of `count` messages to `t`/`partition` (the first creates the topic).
async fn produce<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    partition: i32,
    count: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    produce_named(conn, partition, count, "m").await
}

/// [`produce`], the payloads named `p<partition> <name><i>`.
async fn produce_named<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Connection<S>,
    partition: i32,
    count: usize,
    name: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut set = MessageSetBuilder::new();
    for i in 0..count {
        set.push(format!("p{partition} {name}{i}").into_bytes());
    }
    let messages: Bytes = set.build(CompressionCodec::None);
    conn.send(&Request::Produce(ProduceRequest {
        topic: topic(),
        partition,
        messages,
    }))
    .await?;
    Ok(())
}

/// `bugs` planted, and a simulation of 90 s from `seed` with source and mirror clusters of one
/// broker each (kept for as long as the simulation runs).
fn world(bugs: &[Bug], seed: u64) -> (turmoil::Sim<'static>, [Cluster; 2]) {
    tributary_core::planted::plant(bugs);
    let mut builder = sim_builder(seed);
    builder.simulation_duration(Duration::from_secs(90));
    let mut sim = builder.build();
    let control = Arc::new(Control::default());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let source = add_cluster(&mut sim, &ClusterSpec::new("src", 1, 3), &mut rng, &control);
    let target = add_cluster(&mut sim, &ClusterSpec::new("dst", 1, 3), &mut rng, &control);
    (sim, [source, target])
}

/// Runs the steps with `bugs` planted; every event, and each partition's end in the source.
fn run(bugs: &[Bug]) -> (Seens, Vec<Option<i64>>) {
    let (mut sim, _clusters) = world(bugs, 11);
    let events: Events = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mode = Mode::default();
    add_maker(&mut sim, "a", Duration::from_secs(2), &events, &stop, mode);
    add_maker(&mut sim, "b", Duration::from_secs(12), &events, &stop, mode);
    let ends: Arc<Mutex<Vec<Option<i64>>>> = Arc::default();
    let (app_ends, app_stop) = (ends.clone(), stop.clone());
    sim.client("app", async move {
        let env = SimEnv::new(2);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut conn = connect(&env, "src-broker0", BROKER_PORT, Duration::from_secs(5)).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        turmoil::partition("mm-a", "dst-zk");
        produce(&mut conn, 2, 1).await?;
        tokio::time::sleep(Duration::from_secs(4)).await;
        produce(&mut conn, 1, 1).await?;
        // `b` joins at 12 s; its rebalance is done well before 16 s.
        tokio::time::sleep(Duration::from_secs(7)).await;
        produce(&mut conn, 1, 5).await?;
        tokio::time::sleep(Duration::from_secs(4)).await;
        turmoil::repair("mm-a", "dst-zk");
        tokio::time::sleep(Duration::from_secs(30)).await;
        let parts: Vec<(TopicName, i32)> = (0..3).map(|p| (topic(), p)).collect();
        let (read, error) = latest_offsets(&mut conn, &parts).await;
        if let Some(e) = error {
            return Err(e.into());
        }
        *app_ends.lock().unwrap() = read;
        app_stop.store(true, Ordering::Relaxed);
        Ok(())
    });
    let outcome = sim.run();
    tributary_core::planted::plant(&[]);
    if let Err(e) = outcome {
        panic!("the simulation failed: {e}");
    }
    let events = events.lock().unwrap().clone();
    let ends = ends.lock().unwrap().clone();
    (events, ends)
}

/// The first forward of one ownership (maker, epoch) that ends at or before one it forwarded
/// earlier: a message put after later ones.
fn out_of_order(events: &Seens) -> Option<String> {
    for ((maker, partition), seen) in events {
        let mut last: BTreeMap<u64, i64> = BTreeMap::new();
        for s in seen {
            if let Seen::Forwarded { generation, end } = *s {
                if let Some(previous) = last.insert(generation, end) {
                    if end <= previous {
                        return Some(format!(
                            "{maker}: {TOPIC}/{partition} epoch {generation}: forwarded offset {end} after {previous}"
                        ));
                    }
                }
            }
        }
    }
    None
}

/// The end of the first message `maker` forwarded of `t`'s partition `partition`.
fn first_forward(events: &Seens, maker: &str, partition: &str) -> Option<i64> {
    events
        .get(&(maker.to_string(), partition.to_string()))
        .into_iter()
        .flatten()
        .find_map(|s| match s {
            Seen::Forwarded { end, .. } => Some(*end),
            _ => None,
        })
}

#[test]
fn a_message_held_while_its_topic_is_decided_is_not_forwarded_after_the_next_stream() {
    let (planted, _) = run(&[Bug::HeldMessageForwarded, Bug::CommitPastWaitingMessage]);
    let broken = out_of_order(&planted);
    assert!(
        broken
            .as_deref()
            .is_some_and(|b| b.starts_with(&format!("a: {TOPIC}/0-1 "))),
        "with the held message forwarded as it is, a's partition 1 did not go out of order: the steps no longer reach the situation: {broken:?} {planted:?}"
    );
    // With only the wait marks planted away, the held message is withdrawn, but the other
    // stream has sent the later ones first (with positions, the held one sent again would then
    // be taken for held by the mirror partition's positions, and lost).
    let (unmarked, _) = run(&[Bug::CommitPastWaitingMessage]);
    let first = first_forward(&unmarked, "a", "0-1");
    assert!(
        first.is_some_and(|end| end > 15),
        "without the wait marks, a's first forward of partition 1 was not a later message: {first:?} {unmarked:?}"
    );
    let (events, ends) = run(&[]);
    assert_eq!(out_of_order(&events), None, "{events:?}");
    // Nothing lost: each partition is committed up to its end in the source, and every
    // forwarded message was acknowledged.
    assert_eq!(ends.len(), 3, "{ends:?}");
    for (partition, end) in ends.iter().enumerate() {
        let end = end.unwrap_or_else(|| panic!("no end for partition {partition}"));
        let committed = events
            .iter()
            .filter(|((_, p), _)| p.ends_with(&format!("-{partition}")))
            .flat_map(|(_, seen)| seen)
            .filter_map(|s| match s {
                Seen::Committed { end } => Some(*end),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        assert_eq!(committed, end, "partition {partition}: {events:?}");
    }
    // An offset is committed only once acknowledged (by the maker that commits it).
    for ((maker, partition), seen) in &events {
        for (i, s) in seen.iter().enumerate() {
            if let Seen::Committed { end } = *s {
                let acked = seen[..i].contains(&Seen::Acknowledged { end });
                assert!(
                    end == 0 || acked,
                    "{maker}: {TOPIC}/{partition}: committed {end} before it was acknowledged: {seen:?}"
                );
            }
        }
    }
    // Nothing of partition 1 went out ahead of the held message: `a`'s first forward of it is
    // that message, the partition's first (15 bytes), and the rest follow it in order.
    assert_eq!(first_forward(&events, "a", "0-1"), Some(15), "{events:?}");
}

/// Every payload of `t` in the mirror cluster, sorted.
async fn mirrored_payloads(env: &SimEnv) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut conn = connect(env, "dst-broker0", BROKER_PORT, Duration::from_secs(5)).await?;
    let mut payloads = Vec::new();
    for partition in 0..8 {
        let fetch = Request::Fetch(FetchRequest {
            topic: topic(),
            partition,
            offset: 0,
            max_bytes: 1 << 20,
        });
        let Response::Fetch(answer) = conn.call(&fetch).await? else {
            return Err("not a fetch answer".into());
        };
        if answer.error != ErrorCode::NoError {
            // Past the mirror topic's partitions.
            break;
        }
        for entry in DeepIter::new(answer.messages, 0, 1 << 20) {
            payloads.push(String::from_utf8_lossy(&entry?.message.payload).into_owned());
        }
    }
    payloads.sort();
    Ok(payloads)
}

/// The hand-over steps with `bugs` planted: maker `a` copies with the mirror's positions, and
/// holds its first message of partition 1 between its record and the hand-over to the producer
/// (as a preempted thread would) while `b` joins and partition 1 moves to `a`'s other stream,
/// which then reads five later messages of it. Returns what the mirror cluster holds of `t`.
fn run_stalled(bugs: &[Bug]) -> Vec<String> {
    let (mut sim, _clusters) = world(bugs, 12);
    let events: Events = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let stalled = Mode {
        positions: true,
        stall: Some(Duration::from_secs(12)),
    };
    add_maker(
        &mut sim,
        "a",
        Duration::from_secs(2),
        &events,
        &stop,
        stalled,
    );
    let joining = Mode {
        positions: true,
        stall: None,
    };
    add_maker(
        &mut sim,
        "b",
        Duration::from_secs(12),
        &events,
        &stop,
        joining,
    );
    let mirrored: Arc<Mutex<Vec<String>>> = Arc::default();
    let (app_mirrored, app_stop) = (mirrored.clone(), stop.clone());
    sim.client("app", async move {
        let env = SimEnv::new(2);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut conn = connect(&env, "src-broker0", BROKER_PORT, Duration::from_secs(5)).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        // `a`'s stream 0 records it at once and holds it until about 17 s.
        produce_named(&mut conn, 1, 1, "first").await?;
        // `b` joins at 12 s; its rebalance is done well before 16 s.
        tokio::time::sleep(Duration::from_secs(11)).await;
        produce_named(&mut conn, 1, 5, "later").await?;
        tokio::time::sleep(Duration::from_secs(30)).await;
        *app_mirrored.lock().unwrap() = mirrored_payloads(&env).await?;
        app_stop.store(true, Ordering::Relaxed);
        Ok(())
    });
    let outcome = sim.run();
    tributary_core::planted::plant(&[]);
    if let Err(e) = outcome {
        panic!("the simulation failed: {e}");
    }
    let mirrored = mirrored.lock().unwrap().clone();
    mirrored
}

#[test]
fn a_partition_moved_between_streams_waits_for_the_hand_over_of_the_first_streams_message() {
    let expected: Vec<String> = std::iter::once("p1 first0".to_string())
        .chain((0..5).map(|i| format!("p1 later{i}")))
        .collect();
    // Planted: the other stream's later messages reach the mirror cluster first, and the held
    // one, handed over after them, is taken for held: lost.
    let planted = run_stalled(&[Bug::HandOverNotAwaited]);
    assert!(
        !planted.contains(&expected[0]) && planted.contains(&expected[1]),
        "with the hand-over not awaited, the held message still reached the mirror cluster: the steps no longer reach the situation: {planted:?}"
    );
    let mirrored = run_stalled(&[]);
    assert_eq!(
        mirrored, expected,
        "the mirror cluster holds each message once"
    );
}
