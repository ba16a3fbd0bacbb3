//! The scenario's hosts besides the clusters: the mirror as either mode runs it (the plan each
//! mirror broker's server supervises, or the mirror-maker host under an operator's supervisor;
//! each start a new incarnation with its own observer), the producers writing checksummed,
//! sequence-numbered messages to the source, the reader on the mirror cluster, and the checker
//! that reads the clusters when the driver asks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::consumer::{ConsumerConnector, ConsumerError, Subscription};
use tributary::mirror::maker::{self, MakerError};
use tributary::mirror::supervise;
use tributary::mirror::{MirrorError, MirrorObserver, MirrorSettings};
use tributary::producer::{Producer, Record};
use tributary::server::EmbeddedMirror;
use tributary_core::config::{ConsumerConfig, ProducerConfig};
use tributary_core::wire::TopicName;

use super::history::{state, Acked, Observer, Phase, Shared};
use super::reads::{partitions_of, range_of, read_everything};
use super::shape::{settings, Shape};
use super::translation;
use super::{topic_name, Part, MAKER, PRODUCERS, TOPICS};
use crate::env::SimEnv;
use crate::invariants::Invariant;
use crate::metrics_check::{self, BROKER_METRICS_PORT, MIRROR_METRICS_PORT};
use crate::world::{scenario_config, until_started, Cluster, Control, MirrorPlan, ZK_PORT};

/// The payload of message `seq`: `m <seq> <crc32 of "m <seq>">`.
pub(super) fn payload(seq: u64) -> Vec<u8> {
    let body = format!("m {seq}");
    format!("{body} {:08x}", crc32fast::hash(body.as_bytes())).into_bytes()
}

/// The seq of a payload whose checksum holds.
pub(super) fn parse_payload(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (body, crc) = text.rsplit_once(' ')?;
    let seq = body.strip_prefix("m ")?.parse().ok()?;
    (u32::from_str_radix(crc, 16).ok()? == crc32fast::hash(body.as_bytes())).then_some(seq)
}

/// One start of the mirror on `host`: a new incarnation (its consumer's epochs count from 0
/// again) with its own observer, and an environment seeded from `seed` and the time.
fn incarnation(
    host: &str,
    shape: &Shape,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) -> (SimEnv, MirrorSettings) {
    let incarnation = {
        let mut s = state(shared);
        let n = s.starts.entry(host.to_string()).or_insert(0);
        *n += 1;
        *n
    };
    let observer: Arc<dyn MirrorObserver> = Arc::new(Observer {
        owner: format!("{host}#{incarnation}"),
        shared: shared.clone(),
        control: control.clone(),
    });
    control.trace.push(&format!(
        "{host}: mirror starting (incarnation {incarnation})"
    ));
    let env = SimEnv::new(seed ^ turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64);
    (env, settings(shape, observer))
}

/// A failed run of the mirror on `host`: traced, and counted in the report when it is one a
/// running mirror must not have (a start that cannot reach a cluster, a ZooKeeper restarting or
/// a link cut, is waited out).
fn mirror_failed(host: &str, shared: &Shared, control: &Control, e: &MirrorError) {
    control
        .trace
        .push(&format!("{host}: mirror failed: {e}; it is started again"));
    if matches!(e, MirrorError::Send(_)) {
        *state(shared)
            .mirror_failures
            .entry(e.to_string().chars().take(120).collect())
            .or_insert(0) += 1;
    }
}

/// The embedded mirror of every mirror broker, as the production server
/// (`tributary::server::run`) supervises it: each start an incarnation, each failure counted.
pub(super) fn embedded_mirror(
    shape: Shape,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) -> MirrorPlan {
    let (shared, control) = (shared.clone(), control.clone());
    MirrorPlan(Arc::new(move |host: &str| {
        let start = {
            let (host, shared, control) = (host.to_string(), shared.clone(), control.clone());
            move || incarnation(&host, &shape, seed, &shared, &control)
        };
        let failed = {
            let (host, shared, control) = (host.to_string(), shared.clone(), control.clone());
            move |e: &MirrorError| mirror_failed(&host, &shared, &control, e)
        };
        EmbeddedMirror::each(start, failed)
    }))
}

/// The mirror-maker host: the production mirror maker (`tributary::mirror::maker::run`, with
/// its metrics on [`MIRROR_METRICS_PORT`]) under an operator's supervisor, which starts it again
/// after it fails (pausing as the embedded mirror's supervisor does), until `stop`.
async fn run_maker(
    shape: Shape,
    seed: u64,
    shared: Shared,
    control: Arc<Control>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut backoff = supervise::BACKOFF_MIN;
    loop {
        let (env, settings) = incarnation(MAKER, &shape, seed, &shared, &control);
        let stopped = {
            let mut stop = stop.clone();
            async move {
                while !*stop.borrow_and_update() {
                    if stop.changed().await.is_err() {
                        return;
                    }
                }
            }
        };
        match maker::run(
            env,
            settings,
            Some(maker::MetricsAt {
                host: "0.0.0.0",
                port: MIRROR_METRICS_PORT,
                tls: None,
            }),
            stopped,
        )
        .await
        {
            Ok(()) => {
                control.trace.push(&format!("{MAKER}: mirror stopped"));
                return;
            }
            Err(MakerError::Mirror(MirrorError::Config(e))) => {
                return control.violate(
                    Invariant::BrokerHealth,
                    format!("{MAKER}: the mirror's settings cannot work: {e}"),
                );
            }
            Err(MakerError::Mirror(e)) => mirror_failed(MAKER, &shared, &control, &e),
            Err(e) => control
                .trace
                .push(&format!("{MAKER}: {e}; it is started again")),
        }
        if *stop.borrow() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(supervise::BACKOFF_MAX);
    }
}

pub(super) fn add_maker(
    sim: &mut turmoil::Sim<'_>,
    shape: Shape,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control) = (shared.clone(), control.clone());
    crate::host::add(sim, MAKER, move || {
        let (shared, control) = (shared.clone(), control.clone());
        async move {
            // A graceful stop of the maker is asked through the control, as for brokers.
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let watcher = {
                let control = control.clone();
                async move {
                    while !control.take_stop(MAKER) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    let _ = stop.send(true);
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                biased;
                () = run_maker(shape, seed, shared, control.clone(), stopped) => {}
                () = watcher => {}
            }
            control.trace.push("mirrormaker: stopped gracefully");
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

pub(super) fn add_producer(
    sim: &mut turmoil::Sim<'_>,
    index: u32,
    topics: usize,
    duration: Duration,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control, name) = (shared.clone(), control.clone(), format!("producer{index}"));
    crate::host::add(sim, name.clone().as_str(), move || {
        let (shared, control, name) = (shared.clone(), control.clone(), name.clone());
        async move {
            let durable = index + 1 < PRODUCERS;
            let text = format!("zk.connect=src-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nproducer.type=sync\ndurable.acks={durable}\nnum.retries=3\nsocket.timeout.ms=2000\n");
            let config = scenario_config("producer", &text, ProducerConfig::from_properties);
            let producer = until_started(&name, &control, || {
                Producer::start(SimEnv::new(seed), config.clone())
            })
            .await;
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            loop {
                let seq = {
                    let mut s = state(&shared);
                    if s.stop_producing {
                        s.producers_stopped += 1;
                        s.producers_stopped_at = turmoil::sim_elapsed();
                        break;
                    }
                    s.next_seq += 1;
                    let seq = s.next_seq;
                    s.sent.insert(seq);
                    seq
                };
                // The second topic appears a third of the way in.
                let late = turmoil::sim_elapsed().unwrap_or_default() > duration / 3;
                let topic = if topics > TOPICS.len() {
                    // Many topics: any of them, but the second still only after a third.
                    match rng.random_range(0..topics) {
                        1 if !late => topic_name(0),
                        i => topic_name(i),
                    }
                } else if late && rng.random_bool(0.5) {
                    topic_name(1)
                } else {
                    topic_name(0)
                };
                let Ok(t) = topic.parse::<TopicName>() else {
                    continue;
                };
                let bytes = payload(seq);
                let len = bytes.len() as i64;
                match producer.send(Record::new(t, bytes)).await {
                    Ok(delivery) => match delivery.await {
                        Ok(d) => match d.offset {
                            Some(start) => {
                                let part = (
                                    topic.to_string(),
                                    format!("{}-{}", d.broker_id, d.partition),
                                );
                                control.trace.push(&format!(
                                    "acked m {seq} at {}/{} {start}..{}",
                                    part.0,
                                    part.1,
                                    start + 10 + len
                                ));
                                state(&shared).acked.insert(seq, Acked { part, start });
                            }
                            None if durable => control
                                .trace
                                .push(&format!("m {seq} delivered without an offset")),
                            None => {}
                        },
                        Err(e) => control.trace.push(&format!("m {seq} not delivered: {e}")),
                    },
                    Err(e) => control.trace.push(&format!("m {seq} not sent: {e}")),
                }
                // The plain producer writes less: enough that the source always holds unflushed
                // data, not so much that it dominates what the mirror must copy.
                let pause = if durable { 5..30 } else { 30..90 };
                tokio::time::sleep(Duration::from_millis(rng.random_range(pause))).await;
            }
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

/// A consumer group on the mirror cluster: every message it reads must be one a producer sent,
/// intact (2).
pub(super) fn add_reader(
    sim: &mut turmoil::Sim<'_>,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control) = (shared.clone(), control.clone());
    crate::host::add(sim, "reader", move || {
        let (shared, control) = (shared.clone(), control.clone());
        async move {
            let text = format!("zk.connect=dst-zk:{ZK_PORT}\ngroupid=readers\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nautooffset.reset=smallest\nfetcher.backoff.ms=200\nconsumer.timeout.ms=1000\nsocket.timeout.ms=2000\n");
            let config = scenario_config("consumer", &text, ConsumerConfig::from_properties);
            let (connector, mut streams) = until_started("reader", &control, || {
                ConsumerConnector::start(
                    SimEnv::new(seed),
                    config.clone(),
                    Subscription::Whitelist(".*".into(), 1),
                )
            })
            .await;
            let mut stream = streams.remove(0);
            loop {
                match stream.next().await {
                    Ok(m) => {
                        let known = parse_payload(&m.payload)
                            .is_some_and(|seq| state(&shared).sent.contains(&seq));
                        if !known {
                            control.violate(Invariant::MirrorNoPhantom, format!("the mirror cluster served {}/{} a message no producer sent: {:?}", m.topic, m.partition, String::from_utf8_lossy(&m.payload)));
                        }
                    }
                    Err(ConsumerError::Timeout(_)) => {}
                    Err(ConsumerError::Closed) => break,
                    Err(e) => control.trace.push(&format!("reader: {e}")),
                }
            }
            drop(connector);
            Ok(())
        }
    });
}

/// Reads the clusters when the driver asks: the source's latest offsets while the lag drains,
/// then both clusters end to end (and, with `translate`, has the mirror brokers translate
/// every source offset they hold copies of).
pub(super) fn add_checker(
    sim: &mut turmoil::Sim<'_>,
    (source, mirror, mirror_hosts): (&Cluster, &Cluster, &[String]),
    shared: &Shared,
    control: &Arc<Control>,
    (poll_earliest, translate): (bool, bool),
) {
    let (shared, control) = (shared.clone(), control.clone());
    let (source_model, mirror_model) = (source.model.clone(), mirror.model.clone());
    let mirror_hosts = mirror_hosts.to_vec();
    // With positions, the mirror brokers' held offsets must reach every source partition's end.
    let held_by: Vec<String> = if translate {
        mirror.brokers.clone()
    } else {
        Vec::new()
    };
    crate::host::add(sim, "checker", move || {
        let (shared, control, source_model, mirror_model) = (
            shared.clone(),
            control.clone(),
            source_model.clone(),
            mirror_model.clone(),
        );
        let (mirror_hosts, held_by) = (mirror_hosts.clone(), held_by.clone());
        async move {
            loop {
                let phase = state(&shared).phase;
                match phase {
                    Phase::Run if poll_earliest => {
                        for part in partitions_of(&source_model) {
                            // Stamped before asking: the answer holds for that moment or later.
                            let at = turmoil::sim_elapsed().unwrap_or_default();
                            if let Ok((earliest, _)) = range_of(&part, "src").await {
                                state(&shared)
                                    .earliest_seen
                                    .entry(part)
                                    .or_default()
                                    .push((at, earliest));
                            }
                        }
                    }
                    Phase::Run => {}
                    Phase::Drain => {
                        for part in partitions_of(&source_model) {
                            // Stamped before asking: the end holds for that moment or later.
                            let at = turmoil::sim_elapsed().unwrap_or_default();
                            if let Ok((_, end)) = range_of(&part, "src").await {
                                state(&shared).source_latest.insert(part, (at, end));
                            }
                        }
                    }
                    Phase::Check => {
                        // A broker restarted at healing may still be registering: read again
                        // (for up to 30 s) before calling what cannot be read a problem.
                        let known: BTreeSet<Part> = state(&shared)
                            .acked
                            .values()
                            .map(|a| a.part.clone())
                            .collect();
                        let read_all = || async {
                            let mut read = read_everything(&source_model, &mirror_model).await;
                            for part in known.iter().filter(|p| !read.source.contains_key(*p)) {
                                read.problems
                                    .push(format!("source {}/{}: not registered", part.0, part.1));
                            }
                            read
                        };
                        let mut read = read_all().await;
                        for _ in 0..30 {
                            if read.problems.is_empty() {
                                break;
                            }
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            read = read_all().await;
                        }
                        control.trace.push(&format!("checker: read {} source partitions, {} distinct mirror messages, {} problems", read.source.len(), read.mirror.len(), read.problems.len()));
                        // The metrics against the clusters, before the read is handed over (the
                        // driver ends the run then).
                        let mut latest = BTreeMap::new();
                        for part in partitions_of(&source_model) {
                            if let Ok((_, end)) = range_of(&part, "src").await {
                                latest.insert(part, end);
                            }
                        }
                        // The mirror maker serves its own endpoint; an embedded mirror's
                        // metrics are its broker's.
                        let endpoints: Vec<(String, u16)> = mirror_hosts
                            .iter()
                            .map(|h| {
                                let port = if h == MAKER {
                                    MIRROR_METRICS_PORT
                                } else {
                                    BROKER_METRICS_PORT
                                };
                                (h.clone(), port)
                            })
                            .collect();
                        let problems =
                            metrics_check::check(&latest, "src", &endpoints, &held_by).await;
                        control.trace.push(&format!(
                            "checker: metrics of {} source partitions read, {} disagreements",
                            latest.len(),
                            problems.len()
                        ));
                        let translations = if translate && read.problems.is_empty() {
                            Some(translation::ask(&read).await)
                        } else {
                            None
                        };
                        let mut s = state(&shared);
                        s.metrics_problems = problems;
                        s.translations = translations;
                        s.final_read = Some(read);
                        return Ok(());
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });
}
