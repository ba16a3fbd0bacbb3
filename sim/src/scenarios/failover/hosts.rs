//! The failover scenario's hosts: the producer and the consumer group (working on whatever
//! cluster is primary), the operator (the drill, with the production `promote` and `demote`),
//! and the checker (both clusters read whole at the end).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary::consumer::{ConsumerConnector, ConsumerError, Subscription};
use tributary::failure::Failure;
use tributary::producer::{Producer, Record};
use tributary_core::config::{ConsumerConfig, ProducerConfig, ZkConnect};
use tributary_core::wire::TopicName;
use tributary_tools::demote::{demote, DemoteOptions};
use tributary_tools::promote::{promote, PromoteOptions};

use super::{state, Acked, Shared, Step, GROUP, TOPIC};
use crate::env::SimEnv;
use crate::invariants::Invariant;
use crate::mirror::{fetch_bytes, partitions_of, range_of, Part};
use crate::world::{scenario_config, Cluster, Control, ZK_PORT};
use crate::zk_model::SharedModel;

fn topic() -> TopicName {
    TOPIC
        .parse()
        .unwrap_or_else(|_| unreachable!("a valid topic name"))
}

fn zk_of(cluster: &str) -> String {
    format!("{cluster}-zk:{ZK_PORT}")
}

fn producer_config(cluster: &str) -> ProducerConfig {
    let text = format!(
        "zk.connect={}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=4000\nproducer.type=sync\ndurable.acks=true\nnum.retries=1\nsocket.timeout.ms=2000\n",
        zk_of(cluster)
    );
    scenario_config("producer", &text, ProducerConfig::from_properties)
}

/// Produces to the primary with durable acknowledgements, recording what each cluster
/// acknowledged; a new producer whenever the primary changes.
pub(super) fn add_producer(
    sim: &mut turmoil::Sim<'_>,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control) = (shared.clone(), control.clone());
    crate::host::add(sim, "producer", move || {
        let (shared, control) = (shared.clone(), control.clone());
        async move {
            let mut rng = ChaCha8Rng::seed_from_u64(
                seed ^ turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64,
            );
            let mut current: Option<(&'static str, Producer<SimEnv>)> = None;
            loop {
                let (primary, over) = {
                    let s = state(&shared);
                    (s.primary, s.over)
                };
                let Some(target) = primary.filter(|_| !over) else {
                    if let Some((_, p)) = current.take() {
                        p.close().await;
                    }
                    state(&shared).producer_idle = true;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                state(&shared).producer_idle = false;
                if current.as_ref().map(|(c, _)| *c) != Some(target) {
                    if let Some((_, p)) = current.take() {
                        p.close().await;
                    }
                    match Producer::start(SimEnv::new(rng.random()), producer_config(target)).await
                    {
                        Ok(p) => current = Some((target, p)),
                        Err(e) => {
                            control
                                .trace
                                .push(&format!("producer on {target}: {e}; retrying"));
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            continue;
                        }
                    }
                }
                let Some((cluster, producer)) = current.as_ref() else {
                    continue;
                };
                let payload = {
                    let mut s = state(&shared);
                    s.next_seq += 1;
                    format!("m{}", s.next_seq).into_bytes()
                };
                if let Ok(delivery) = producer.send(Record::new(topic(), payload.clone())).await {
                    if let Ok(d) = delivery.await {
                        let mut s = state(&shared);
                        let step = s.step;
                        if let (Some(at), "b", None) =
                            (s.disaster_at, *cluster, s.first_produce_after)
                        {
                            s.first_produce_after =
                                turmoil::sim_elapsed().map(|now| now.saturating_sub(at));
                        }
                        if let Some(offset) = d.offset.and_then(|o| u64::try_from(o).ok()) {
                            s.acked.push(Acked {
                                cluster,
                                step,
                                part: (
                                    TOPIC.to_string(),
                                    format!("{}-{}", d.broker_id, d.partition),
                                ),
                                offset,
                                payload,
                            });
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(rng.random_range(5..30))).await;
            }
        }
    });
}

fn consumer_config(cluster: &str) -> ConsumerConfig {
    let text = format!(
        "zk.connect={}\ngroupid={GROUP}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=4000\nautooffset.reset=smallest\nfetcher.backoff.ms=100\nautocommit.interval.ms=300\nconsumer.timeout.ms=500\nsocket.timeout.ms=2000\n",
        zk_of(cluster)
    );
    scenario_config("consumer", &text, ConsumerConfig::from_properties)
}

/// The group's member: reads on the cluster its generation names until the generation
/// changes; a generation stopped on purpose (the switchback) shuts down cleanly (last commit).
pub(super) fn add_consumer(
    sim: &mut turmoil::Sim<'_>,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
) {
    let (shared, control) = (shared.clone(), control.clone());
    crate::host::add(sim, "consumer", move || {
        let (shared, control) = (shared.clone(), control.clone());
        async move {
            let mut attempt = 0u64;
            loop {
                let Some((generation, cluster)) = state(&shared).consumer else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                attempt += 1;
                let started = ConsumerConnector::start(
                    SimEnv::new(seed.wrapping_add(attempt)),
                    consumer_config(cluster),
                    Subscription::Topics([(topic(), 1)].into_iter().collect()),
                )
                .await;
                let (connector, mut streams) = match started {
                    Ok(started) => started,
                    Err(e) => {
                        control
                            .trace
                            .push(&format!("consumer on {cluster}: {e}; retrying"));
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                };
                let mut stream = streams.remove(0);
                while state(&shared).consumer == Some((generation, cluster)) {
                    match stream.next().await {
                        Ok(m) => state(&shared).reads.push(super::Read {
                            generation,
                            partition: m.partition.to_string(),
                            next: m.offset,
                            payload: m.payload.to_vec(),
                        }),
                        Err(ConsumerError::Timeout(_)) => {}
                        Err(ConsumerError::Closed) => break,
                        Err(e) => control.trace.push(&format!("consumer: {e}")),
                    }
                }
                connector.shutdown().await;
                state(&shared).consumer_stopped.insert(generation);
                control.trace.push(&format!(
                    "consumer generation {generation} on {cluster} stopped"
                ));
            }
        }
    });
}

/// Waits (checking every 100 ms) until `done` holds.
async fn until(shared: &Shared, done: impl Fn(&super::State) -> bool) {
    while !done(&state(shared)) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `tributary promote` of the whole `cluster`, again until it is confirmed.
async fn promote_cluster(env: &SimEnv, cluster: &str, control: &Control) {
    let options = PromoteOptions {
        zk_connect: ZkConnect::parse(&zk_of(cluster)).unwrap_or_else(|_| unreachable!("valid")),
        topics: Vec::new(),
        wait: Duration::from_secs(10),
    };
    loop {
        let mut out = Vec::new();
        let result = promote(env, &options, &mut out).await;
        control.trace.push(&format!(
            "operator: promote {cluster}: {}: {}",
            match &result {
                Ok(()) => "confirmed".to_string(),
                Err(e) => format!("Err({e})"),
            },
            String::from_utf8_lossy(&out).trim()
        ));
        if result.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `tributary demote` of `cluster`, again until every broker confirmed it (what the brokers
/// moved out is read from their diverged logs at the end).
async fn demote_cluster(env: &SimEnv, cluster: &str, control: &Control) {
    let options = DemoteOptions {
        zk_connect: ZkConnect::parse(&zk_of(cluster)).unwrap_or_else(|_| unreachable!("valid")),
        dry_run: false,
        wait: Duration::from_secs(10),
    };
    loop {
        let mut out = Vec::new();
        let result = demote(env, &options, &mut out).await;
        control.trace.push(&format!(
            "operator: demote {cluster}: {}\n{}",
            match &result {
                Ok(_) => "confirmed".to_string(),
                Err(e) => format!("Err({e})"),
            },
            String::from_utf8_lossy(&out).trim()
        ));
        if result.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Once a demotion of `cluster` is confirmed, an acknowledged produce to it must be refused.
async fn probe_read_only(seed: u64, cluster: &str, control: &Control) {
    let Ok(producer) = Producer::start(SimEnv::new(seed), producer_config(cluster)).await else {
        return;
    };
    let sent = producer.send(Record::new(topic(), b"probe".to_vec())).await;
    let taken = match sent {
        Ok(delivery) => delivery.await.is_ok(),
        Err(_) => false,
    };
    producer.close().await;
    if taken {
        control.violate(
            Invariant::FailoverWritableOnlyPromoted,
            format!(
                "cluster {cluster} took an acknowledged produce after its demotion was confirmed"
            ),
        );
    }
}

/// Every partition of `cluster`, whole (`None` when one cannot be read now).
async fn read_cluster(cluster: &str) -> Option<BTreeMap<Part, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for part in every_partition() {
        let (bytes, refused) = fetch_bytes(&part, cluster, 0).await.ok()?;
        if refused.is_some() {
            return None;
        }
        out.insert(part, bytes);
    }
    Some(out)
}

/// Every partition a broker of either cluster can hold: both brokers' two (the scenario's
/// `num.partitions`). Which of them exist is the producer's choice; a broker answers a fetch
/// of one it does not hold with nothing (0.7.1's rule), so reading them all misses nothing a
/// registration not yet made again would hide.
fn every_partition() -> Vec<Part> {
    (0..2)
        .flat_map(|b| (0..2).map(move |p| (TOPIC.to_string(), format!("{b}-{p}"))))
        .collect()
}

/// Whether every partition of `behind` ends where the same partition of `ahead` does: every
/// partition `ahead` registers or acknowledged a message in (`acked`), all of them registered
/// and answering (a broker that is down is not caught up). Which brokers hold the topic is the
/// producer's choice (0.7 sends a new topic to one broker, then to those that registered it),
/// so the partitions are read from the cluster, not assumed.
async fn caught_up(
    ahead: &SharedModel,
    acked: &BTreeSet<Part>,
    (behind, ahead_name): (&str, &str),
) -> Result<(), Failure> {
    let registered = partitions_of(ahead);
    let wanted: BTreeSet<Part> = registered.iter().chain(acked).cloned().collect();
    if wanted.is_empty() {
        return Err(Failure::from(format!(
            "{ahead_name} registers no partition"
        )));
    }
    for part in wanted {
        if !registered.contains(&part) {
            return Err(Failure::from(format!(
                "{part:?} is not registered on {ahead_name}"
            )));
        }
        match (
            range_of(&part, ahead_name).await,
            range_of(&part, behind).await,
        ) {
            (Ok((_, x)), Ok((_, y))) if x == y => {}
            (x, y) => {
                return Err(Failure::from(format!(
                    "{part:?}: {ahead_name} {x:?}, {behind} {y:?}"
                )))
            }
        }
    }
    Ok(())
}

/// The group's committed offsets in a cluster's model.
fn committed(model: &SharedModel) -> BTreeMap<String, Vec<u8>> {
    let m = model.lock().unwrap_or_else(|p| p.into_inner());
    let path = format!("/consumers/{GROUP}/offsets/{TOPIC}");
    m.children(&path)
        .into_iter()
        .filter_map(|p| m.data(&format!("{path}/{p}")).map(|d| (p, d)))
        .collect()
}

/// The drill (see the scenario's documentation).
pub(super) fn add_operator(
    sim: &mut turmoil::Sim<'_>,
    seed: u64,
    shared: &Shared,
    control: &Arc<Control>,
    (a, b): (&Cluster, &Cluster),
) {
    let (shared, control) = (shared.clone(), control.clone());
    let (a_model, b_model) = (a.model.clone(), b.model.clone());
    crate::host::add(sim, "operator", move || {
        let (shared, control, a_model, b_model) = (
            shared.clone(),
            control.clone(),
            a_model.clone(),
            b_model.clone(),
        );
        async move {
            let env = SimEnv::new(seed);
            if state(&shared).step != super::Step::Start {
                // The operator runs once; a restart of its host does not run the drill again.
                std::future::pending::<()>().await;
            }
            promote_cluster(&env, "a", &control).await;
            {
                let mut s = state(&shared);
                s.primary = Some("a");
                s.consumer = Some((0, "a"));
                s.step = Step::OnA;
            }
            until(&shared, |s| s.step == Step::Disaster).await;
            promote_cluster(&env, "b", &control).await;
            {
                let mut s = state(&shared);
                s.primary = Some("b");
                s.consumer = Some((1, "b"));
                s.step = Step::OnB;
            }
            until(&shared, |s| s.returned).await;
            // What a holds before its demotion: its diverged files are cut from it.
            let before = loop {
                // Once every broker of a is registered again, with every partition b has.
                let wanted = partitions_of(&b_model);
                let registered = partitions_of(&a_model);
                if wanted.iter().all(|p| registered.contains(p)) {
                    if let Some(read) = read_cluster("a").await {
                        break read;
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            {
                let mut s = state(&shared);
                s.before_demotion = before;
                s.step = Step::Returned;
            }
            demote_cluster(&env, "a", &control).await;
            probe_read_only(seed ^ 1, "a", &control).await;
            // The clients keep working on b a while, a copying from it.
            tokio::time::sleep(Duration::from_secs(5)).await;
            // The planned switchback: clients stop, a catches up, the group's offsets follow.
            {
                let mut s = state(&shared);
                s.primary = None;
                s.consumer = None;
                s.step = Step::Switching;
            }
            // Producers stopped first, their last sends answered: nothing lands on b after a
            // has copied it all.
            let mut waits = 0u32;
            loop {
                let (idle, stopped) = {
                    let s = state(&shared);
                    (s.producer_idle, s.consumer_stopped.contains(&1))
                };
                if idle && stopped {
                    break;
                }
                waits += 1;
                if waits.is_multiple_of(100) {
                    control.trace.push(&format!(
                        "operator: waiting for the clients to stop (producer idle {idle}, consumer on b stopped {stopped})"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let mut waits = 0u32;
            let acked_on_b: BTreeSet<Part> = state(&shared)
                .acked
                .iter()
                .filter(|m| m.cluster == "b")
                .map(|m| m.part.clone())
                .collect();
            while let Err(behind) = caught_up(&b_model, &acked_on_b, ("a", "b")).await {
                waits += 1;
                if waits.is_multiple_of(20) {
                    control
                        .trace
                        .push(&format!("operator: a has not caught up with b: {behind}"));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let deadline = turmoil::sim_elapsed().unwrap_or_default() + Duration::from_secs(30);
            loop {
                let (on_a, on_b) = (committed(&a_model), committed(&b_model));
                if !on_b.is_empty() && on_a == on_b {
                    break;
                }
                if turmoil::sim_elapsed().unwrap_or_default() > deadline {
                    control.trace.push(&format!("operator: the group's offsets did not reach a within 30 s (a {on_a:?}, b {on_b:?}); switching back anyway"));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            state(&shared).committed_at_switch = committed(&b_model)
                .into_iter()
                .filter_map(|(p, o)| Some((p, String::from_utf8_lossy(&o).trim().parse().ok()?)))
                .collect();
            promote_cluster(&env, "a", &control).await;
            demote_cluster(&env, "b", &control).await;
            probe_read_only(seed ^ 2, "b", &control).await;
            {
                let mut s = state(&shared);
                s.primary = Some("a");
                s.consumer = Some((2, "a"));
                s.step = Step::Back;
            }
            control
                .trace
                .push("operator: the drill is done: a is primary again and b copies it");
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

/// Reads both clusters whole when the driver asks.
pub(super) fn add_checker(sim: &mut turmoil::Sim<'_>, shared: &Shared) {
    let shared = shared.clone();
    crate::host::add(sim, "checker", move || {
        let shared = shared.clone();
        async move {
            until(&shared, |s| s.check).await;
            let mut out = BTreeMap::new();
            let mut problem = None;
            for name in ["a", "b"] {
                match read_cluster(name).await {
                    Some(parts) => out.extend(
                        parts
                            .into_iter()
                            .map(|(p, bytes)| ((name.to_string(), p), bytes)),
                    ),
                    None => problem = Some(format!("cluster {name} cannot be read whole")),
                }
            }
            state(&shared).final_read = Some(match problem {
                None => Ok(out),
                Some(p) => Err(Failure::from(p)),
            });
            Ok(())
        }
    });
}
