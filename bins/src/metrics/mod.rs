//! Prometheus metrics: one registry per process (per broker or mirror maker), served in the
//! text format on `metrics.port` (`--metrics.port` for the mirror maker); nothing is collected
//! when the port is unset.
//!
//! The names are part of Tributary's interface (dashboards and alerts depend on them): see
//! docs/operations.md. Counters a component already keeps for its own logs (the producer's,
//! the consumer's, the mirror's) stay where they are counted; a refresher copies them into the
//! registry right before each scrape, so the data path pays nothing for them. The broker counts
//! bytes and requests as it serves them (one labelled counter per request, not per message).

pub mod broker;
pub mod clients;
pub mod mirror;
pub mod server;

use std::sync::{Arc, Mutex, OnceLock};

use prometheus::{Encoder, Registry, TextEncoder};

pub use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

/// Runs right before each scrape to bring gauges and copied counters up to date; returns
/// `false` once what it reads is gone (its component stopped), and is then dropped.
pub type Refresher = Box<dyn FnMut() -> bool + Send>;

/// Refreshers kept at most: each component adds one or two; a component restarted in a loop
/// must not grow the list without bound.
const REFRESHERS_MAX: usize = 256;

/// One process's metrics.
pub struct Metrics {
    registry: Registry,
    refreshers: Mutex<Vec<Refresher>>,
    broker: OnceLock<Arc<broker::BrokerMetrics>>,
    mirror: OnceLock<Arc<mirror::MirrorMetrics>>,
    producer: OnceLock<Arc<clients::ProducerMetrics>>,
    consumer: OnceLock<Arc<clients::ConsumerMetrics>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Metrics disabled or enabled, as components receive them.
pub type MaybeMetrics = Option<Arc<Metrics>>;

impl Metrics {
    /// An empty registry, but for `tributary_build_info{version}` (always 1): every Tributary
    /// process exports it, so dashboards can list instances of every kind.
    pub fn new() -> Arc<Self> {
        let registry = Registry::new();
        let build = gauge_vec(
            &registry,
            "tributary_build_info",
            "Always 1; its label says which Tributary version is running.",
            &["version"],
        );
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        Arc::new(Metrics {
            registry,
            refreshers: Mutex::new(Vec::new()),
            broker: OnceLock::new(),
            mirror: OnceLock::new(),
            producer: OnceLock::new(),
            consumer: OnceLock::new(),
        })
    }

    /// The broker's metrics (registered on first use; one set per process).
    pub fn broker(&self) -> Arc<broker::BrokerMetrics> {
        self.broker
            .get_or_init(|| Arc::new(broker::BrokerMetrics::register(&self.registry)))
            .clone()
    }

    /// The mirror's and replica's metrics (registered on first use; shared by every mirror of
    /// the process).
    pub fn mirror(&self) -> Arc<mirror::MirrorMetrics> {
        self.mirror
            .get_or_init(|| Arc::new(mirror::MirrorMetrics::register(&self.registry)))
            .clone()
    }

    /// The producers' metrics (registered on first use).
    pub fn producer(&self) -> Arc<clients::ProducerMetrics> {
        self.producer
            .get_or_init(|| Arc::new(clients::ProducerMetrics::register(&self.registry)))
            .clone()
    }

    /// The consumers' metrics (registered on first use).
    pub fn consumer(&self) -> Arc<clients::ConsumerMetrics> {
        self.consumer
            .get_or_init(|| Arc::new(clients::ConsumerMetrics::register(&self.registry)))
            .clone()
    }

    /// Adds a refresher, run before every scrape until it returns `false`. Past
    /// [`REFRESHERS_MAX`] (after dropping those whose component is gone) the new one is refused,
    /// with a warning: the metrics it would keep stay as they are.
    pub fn on_scrape(&self, refresher: Refresher) {
        let mut refreshers = self.lock_refreshers();
        if refreshers.len() >= REFRESHERS_MAX {
            refreshers.retain_mut(|refresh| refresh());
        }
        if refreshers.len() >= REFRESHERS_MAX {
            return tracing::warn!("metrics: {REFRESHERS_MAX} components already report here; a new one's counters are not copied");
        }
        refreshers.push(refresher);
    }

    #[allow(clippy::panic)]
    fn lock_refreshers(&self) -> std::sync::MutexGuard<'_, Vec<Refresher>> {
        // Only memory work happens under this lock; a poisoned one is a bug here.
        self.refreshers
            .lock()
            .unwrap_or_else(|_| panic!("the metrics refreshers' lock was poisoned"))
    }

    /// Every metric in Prometheus's text format (version 0.0.4), after running the refreshers.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        self.lock_refreshers().retain_mut(|refresh| refresh());
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Registers `metric` (a programming error if its name is taken: each is registered once, by
/// [`Metrics`]).
#[allow(clippy::panic)]
fn register<M: prometheus::core::Collector + Clone + 'static>(registry: &Registry, metric: M) -> M {
    if let Err(e) = registry.register(Box::new(metric.clone())) {
        panic!("metrics: registering a metric failed: {e}");
    }
    metric
}

/// A counter vector (a programming error if `name`, `help` or `labels` are invalid).
#[allow(clippy::panic)]
fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let made = IntCounterVec::new(prometheus::Opts::new(name, help), labels)
        .unwrap_or_else(|e| panic!("metrics: {name}: {e}"));
    register(registry, made)
}

/// A gauge vector.
#[allow(clippy::panic)]
fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let made = IntGaugeVec::new(prometheus::Opts::new(name, help), labels)
        .unwrap_or_else(|e| panic!("metrics: {name}: {e}"));
    register(registry, made)
}

/// A counter.
#[allow(clippy::panic)]
fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let made = IntCounter::new(name, help).unwrap_or_else(|e| panic!("metrics: {name}: {e}"));
    register(registry, made)
}

/// A gauge.
#[allow(clippy::panic)]
fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let made = IntGauge::new(name, help).unwrap_or_else(|e| panic!("metrics: {name}: {e}"));
    register(registry, made)
}

/// Copies a monotonic count kept elsewhere into `counter`: adds what it grew by since `last`.
/// (A count that went back, which a monotonic one never does, adds nothing.)
pub fn copy_count(counter: &IntCounter, last: &mut u64, now: u64) {
    counter.inc_by(now.saturating_sub(*last));
    *last = (*last).max(now);
}

/// Keeps a gauge vector's label sets to those set in one refresh: sets each, then removes the
/// ones of the previous refresh not set this time (a partition no longer owned).
#[derive(Debug, Default)]
pub struct LabelledGauges {
    previous: std::collections::BTreeSet<Vec<String>>,
    current: std::collections::BTreeSet<Vec<String>>,
}

impl LabelledGauges {
    /// Sets `gauges{labels} = value` for this refresh.
    pub fn set(&mut self, gauges: &IntGaugeVec, labels: &[&str], value: i64) {
        gauges.with_label_values(labels).set(value);
        self.current
            .insert(labels.iter().map(|l| (*l).to_string()).collect());
    }

    /// Ends this refresh: removes label sets not set since the last call.
    pub fn finish(&mut self, gauges: &IntGaugeVec) {
        for gone in self.previous.difference(&self.current) {
            let labels: Vec<&str> = gone.iter().map(String::as_str).collect();
            let _absent_already = gauges.remove_label_values(&labels).is_err();
        }
        self.previous = std::mem::take(&mut self.current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresher_runs_before_every_scrape_until_it_says_it_is_done() {
        let metrics = Metrics::new();
        let gauge = gauge(&metrics.registry, "test_gauge", "a test gauge");
        let mut runs = 0;
        let seen = gauge.clone();
        metrics.on_scrape(Box::new(move || {
            runs += 1;
            seen.set(runs);
            runs < 2
        }));
        assert!(metrics.render().unwrap().contains("test_gauge 1"));
        assert!(metrics.render().unwrap().contains("test_gauge 2"));
        // Dropped after saying it is done: the gauge keeps its last value.
        assert!(metrics.render().unwrap().contains("test_gauge 2"));
    }

    #[test]
    fn copied_counts_add_only_what_they_grew_by() {
        let registry = Registry::new();
        let c = counter(&registry, "test_total", "a test counter");
        let mut last = 0;
        copy_count(&c, &mut last, 5);
        copy_count(&c, &mut last, 5);
        copy_count(&c, &mut last, 7);
        copy_count(&c, &mut last, 3);
        assert_eq!(c.get(), 7);
    }

    #[test]
    fn label_sets_not_set_in_a_refresh_disappear() {
        let registry = Registry::new();
        let g = gauge_vec(&registry, "test_lag", "lag", &["partition"]);
        let mut sets = LabelledGauges::default();
        sets.set(&g, &["0-0"], 5);
        sets.set(&g, &["0-1"], 6);
        sets.finish(&g);
        sets.set(&g, &["0-1"], 0);
        sets.finish(&g);
        let families = registry.gather();
        let labels: Vec<String> = families[0]
            .get_metric()
            .iter()
            .map(|m| m.get_label()[0].value().to_string())
            .collect();
        assert_eq!(labels, ["0-1"]);
    }
}
