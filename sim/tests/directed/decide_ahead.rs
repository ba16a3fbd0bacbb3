//! A mirror decides the topics its member owns ahead of their first messages, many at once on
//! one ZooKeeper session per cluster: decided one after another, whether at each topic's first
//! message or ahead of it, 100 new topics take a mirror about half a second.
//!
//! Every link is a fixed 1 ms. One topic is decided alone first, to measure a decision; then
//! 64 topics are decided ahead, and must take at most a quarter of 64 such decisions.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tributary::mirror::origins::{
    DecideAhead, OriginGate, OriginsAccess, OriginsAccessError, Verdict, AHEAD_IN_FLIGHT,
};
use tributary::origin_store::OriginStore;
use tributary_core::config::ZkConnect;
use tributary_core::identity::{ClusterId, ClusterIdentity, ClusterName};
use tributary_core::origin::Origins;
use tributary_core::wire::TopicName;
use tributary_sim::env::SimEnv;
use tributary_sim::sim_fs::sim_builder;
use tributary_sim::world::ZK_PORT;
use tributary_sim::zk_model::{serve, ModelState};

const SESSION: Duration = Duration::from_secs(6);
const LINK: Duration = Duration::from_millis(1);
const TOPICS: usize = 64;

fn identity(name: &str, byte: u8) -> ClusterIdentity {
    ClusterIdentity {
        id: ClusterId::from_random([byte; 16]),
        name: Some(ClusterName::parse(name).unwrap()),
    }
}

type Boxed<'a, T> =
    Pin<Box<dyn std::future::Future<Output = Result<T, OriginsAccessError>> + Send + 'a>>;

/// A cluster's records, counting operations under way (the most at once) and merges done.
struct Counted {
    store: OriginStore<SimEnv>,
    now: AtomicUsize,
    most: AtomicUsize,
    merges: AtomicUsize,
}

impl Counted {
    fn new(env: &SimEnv, cluster: &str) -> Arc<Self> {
        let connect = ZkConnect::parse(&format!("{cluster}:{ZK_PORT}")).unwrap();
        Arc::new(Counted {
            store: OriginStore::new(env.clone(), connect, SESSION, SESSION),
            now: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            merges: AtomicUsize::new(0),
        })
    }

    async fn counted<T>(
        &self,
        op: impl std::future::Future<Output = Result<T, OriginsAccessError>>,
    ) -> Result<T, OriginsAccessError> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let outcome = op.await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        outcome
    }
}

impl OriginsAccess for Counted {
    fn read<'a>(&'a self, topic: &'a TopicName) -> Boxed<'a, Origins> {
        Box::pin(self.counted(OriginsAccess::read(&self.store, topic)))
    }

    fn read_and_watch<'a>(
        &'a self,
        topic: &'a TopicName,
    ) -> Boxed<'a, (Origins, Option<tributary::coordination::Watch>)> {
        Box::pin(self.counted(OriginsAccess::read_and_watch(&self.store, topic)))
    }

    fn merge<'a>(&'a self, topic: &'a TopicName, add: &'a Origins) -> Boxed<'a, Origins> {
        Box::pin(async move {
            let merged = self
                .counted(OriginsAccess::merge(&self.store, topic, add))
                .await;
            self.merges.fetch_add(1, Ordering::SeqCst);
            merged
        })
    }
}

/// What the run measured: one decision alone, all decided ahead, the most operations at once
/// in the source, merges after a second `follow` of the same generation, verdicts.
#[derive(Debug, Default)]
struct Seen {
    alone: Duration,
    ahead: Duration,
    most_at_once: usize,
    merges_after_refollow: usize,
    copied: usize,
}

#[test]
fn topics_owned_are_decided_ahead_many_at_once() {
    let mut builder = sim_builder(5);
    builder
        .simulation_duration(Duration::from_secs(120))
        .min_message_latency(LINK)
        .max_message_latency(LINK);
    let mut sim = builder.build();
    for cluster in ["src-zk", "dst-zk"] {
        let model = Arc::new(Mutex::new(ModelState::default()));
        sim.host(cluster, move || {
            let model = model.clone();
            async move { serve(ZK_PORT, model).await.map_err(Into::into) }
        });
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let out = seen.clone();
    sim.client("mirror", async move {
        let env = SimEnv::new(5);
        let (source, target) = (Counted::new(&env, "src-zk"), Counted::new(&env, "dst-zk"));
        let gate = Arc::new(OriginGate::new(
            identity("east", 1),
            identity("west", 2),
            None,
            source.clone(),
            target.clone(),
        ));
        // Sessions open and the records' parents exist before anything is timed.
        gate.verdict(&"warm".parse()?).await;
        // Time is the simulation's (as commit_pipeline reads it), never a clock read here.
        let now = || turmoil::sim_elapsed().unwrap_or_default();
        let started = now();
        gate.verdict(&"alone".parse()?).await;
        let alone = now() - started;
        let topics: Vec<TopicName> = (0..TOPICS)
            .map(|i| format!("t{i}").parse())
            .collect::<Result<_, _>>()?;
        let before = target.merges.load(Ordering::SeqCst);
        source.most.store(0, Ordering::SeqCst);
        let mut ahead = DecideAhead::default();
        let started = now();
        ahead.follow(&gate, None, || panic!("no generation: nothing is asked"));
        ahead.follow(&gate, Some(1), || topics.clone());
        while target.merges.load(Ordering::SeqCst) < before + TOPICS {
            if now() - started > Duration::from_secs(30) {
                return Err("the topics were not decided ahead within 30 s".into());
            }
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        let took = now() - started;
        ahead.follow(&gate, Some(1), || {
            panic!("the same generation is not followed again")
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut copied = 0;
        for topic in &topics {
            if matches!(gate.verdict(topic).await.0, Verdict::Copy(ref to) if to == topic) {
                copied += 1;
            }
        }
        *out.lock().unwrap() = Seen {
            alone,
            ahead: took,
            most_at_once: source.most.load(Ordering::SeqCst),
            merges_after_refollow: target.merges.load(Ordering::SeqCst) - before - TOPICS,
            copied,
        };
        Ok(())
    });
    sim.run().unwrap();
    let seen = seen.lock().unwrap();
    eprintln!("{seen:?}");
    assert!(
        seen.alone >= 4 * LINK,
        "a decision takes several round trips: {seen:?}"
    );
    assert!(
        seen.ahead * 4 <= seen.alone * TOPICS as u32,
        "{TOPICS} topics decided ahead took {:?}, more than a quarter of {TOPICS} × {:?}",
        seen.ahead,
        seen.alone
    );
    assert!(
        (2..=AHEAD_IN_FLIGHT).contains(&seen.most_at_once),
        "operations at once in the source: {seen:?}"
    );
    assert_eq!(seen.merges_after_refollow, 0, "{seen:?}");
    assert_eq!(seen.copied, TOPICS, "{seen:?}");
}
