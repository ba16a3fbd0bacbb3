//! The draws of one seed that shape the mirror ([`Shape`]: how it runs, its streams, queue and
//! batch sizes, its producer's kind, whether the source's retention is tiny) and the mirror's
//! settings built from them.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tributary::mirror::{MirrorObserver, MirrorSettings};
use tributary_core::config::{ConsumerConfig, ProducerConfig};

use super::{Options, GROUP};
use crate::world::{scenario_config, ZK_PORT};

/// How the mirror runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// In every mirror broker (0.7.0's embedded consumer), one group.
    Embedded,
    /// A mirror-maker host (0.7.1).
    Maker,
}

/// The draws of one seed that shape the mirror.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub(super) mode: Mode,
    streams: u32,
    queue_size: u32,
    batch_size: u32,
    pub(super) sync_producer: bool,
    drop_timeout: bool,
    pub(super) tiny_retention: bool,
    /// `mirror.preserve.partitions`: drawn apart from the other draws (see [`Shape::preserve`]).
    pub(super) preserve: bool,
}

impl Shape {
    pub(super) fn draw(rng: &mut ChaCha8Rng, options: &Options) -> Self {
        let mode = options.mode.unwrap_or(if rng.random_bool(0.5) {
            Mode::Embedded
        } else {
            Mode::Maker
        });
        Shape {
            mode,
            streams: rng.random_range(1..=2),
            queue_size: [4, 16, 64, 200][rng.random_range(0..4)],
            batch_size: rng.random_range(1..=20),
            sync_producer: rng.random_bool(0.15),
            // A file asking to drop on a full queue (the mirror must block anyway).
            drop_timeout: rng.random_bool(0.5),
            tiny_retention: rng.random_bool(0.3),
            preserve: false,
        }
    }

    /// Whether the seed turns `mirror.preserve.partitions` on (four seeds in five), from a
    /// generator of its own, so that the seed's other draws are those of the runs before it.
    pub(super) fn preserve(seed: u64) -> bool {
        use rand::SeedableRng;
        ChaCha8Rng::seed_from_u64(seed ^ 0x7072_6573_6572_7665).random_bool(0.8)
    }

    /// Invariant 3's bound for one ownership of a partition: what one member can hold
    /// uncommitted, 2 × queue.size per stream.
    pub(super) fn reforward_bound(&self) -> usize {
        2 * self.queue_size as usize * self.streams as usize
    }
}

fn consumer_config(shape: &Shape) -> ConsumerConfig {
    let text = format!(
        "zk.connect=src-zk:{ZK_PORT}\ngroupid={GROUP}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nautooffset.reset=smallest\n\
         fetcher.backoff.ms=100\nrebalance.backoff.ms=500\nrebalance.retries.max=10\nsocket.timeout.ms=2000\nfetch.size=4096\nqueuedchunks.max=4\n\
         mirror.commit.interval.ms=500\nmirror.consumer.numthreads={}\nmirror.preserve.partitions={}\n",
        shape.streams, shape.preserve
    );
    scenario_config("consumer", &text, ConsumerConfig::from_properties)
}

fn mirror_producer_config(shape: &Shape) -> ProducerConfig {
    let text = format!(
        "zk.connect=dst-zk:{ZK_PORT}\nzk.sessiontimeout.ms=3000\nzk.connectiontimeout.ms=5000\nproducer.type={}\nqueue.size={}\nbatch.size={}\nqueue.time=30\n\
         queue.enqueueTimeout.ms={}\nsocket.timeout.ms=2000\nretry.backoff.ms=200\n",
        if shape.sync_producer { "sync" } else { "async" },
        shape.queue_size,
        shape.batch_size,
        if shape.drop_timeout { 0 } else { -1 },
    );
    scenario_config("producer", &text, ProducerConfig::from_properties)
}

/// One start's settings. Their metrics are left to what runs them: a mirror broker's server
/// gives the broker's, the mirror maker makes its own for `--metrics.port`.
pub(super) fn settings(shape: &Shape, observer: Arc<dyn MirrorObserver>) -> MirrorSettings {
    let mut settings =
        MirrorSettings::embedded(consumer_config(shape), mirror_producer_config(shape));
    settings.summary_interval = Duration::from_secs(10);
    settings.observer = Some(observer);
    settings
}
