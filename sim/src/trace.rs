//! A run's trace: what the scenario did and what the production code logged, in simulated-time
//! order. Its hash is what the determinism test compares (same seed, same trace), so broker
//! events count as much as client events.
//!
//! [`Trace::capture`] makes this trace the current thread's (turmoil runs the whole simulation
//! on it): every `tracing` event at INFO or above from Tributary's own crates on this thread is
//! appended to it, stamped with simulated time. The events reach it through one process-wide
//! subscriber that never changes (installed on first use, or composed into the runner's own
//! with [`layer`]): `tracing` caches which call sites are enabled process-wide, and
//! per-thread subscribers coming and going in parallel tests would make that cache, and so
//! the trace, depend on timing.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Lines kept at most, so a runaway run cannot exhaust memory; the hash still covers all.
const LINES_MAX: usize = 200_000;

#[derive(Debug, Default)]
struct Lines {
    kept: Vec<String>,
    hash: u64,
    count: u64,
}

/// A shared, append-only trace.
#[derive(Debug, Clone, Default)]
pub struct Trace(Arc<Mutex<Lines>>);

impl Trace {
    /// Appends a line stamped with simulated time `at`.
    pub fn push_at(&self, at: Duration, line: &str) {
        let stamped = format!("{:>9.3} {line}", at.as_secs_f64());
        let mut lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let start = if lines.count == 0 {
            0xcbf2_9ce4_8422_2325u64
        } else {
            lines.hash
        };
        lines.hash = stamped
            .bytes()
            .chain(std::iter::once(b'\n'))
            .fold(start, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        lines.count += 1;
        if lines.kept.len() < LINES_MAX {
            lines.kept.push(stamped);
        }
    }

    /// Appends a line stamped with the current host's simulated time.
    pub fn push(&self, line: &str) {
        self.push_at(turmoil::sim_elapsed().unwrap_or_default(), line);
    }

    /// The hash of every line so far.
    pub fn hash(&self) -> u64 {
        self.0.lock().map(|l| l.hash).unwrap_or(0)
    }

    /// How many lines were traced.
    pub fn len(&self) -> u64 {
        self.0.lock().map(|l| l.count).unwrap_or(0)
    }

    /// Whether nothing was traced.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The last lines kept for a report: `n`, or every line kept when `TRIBUTARY_FULL_TRACE` is
    /// set (to read a failing seed whole).
    pub fn report_tail(&self, n: usize) -> Vec<String> {
        if std::env::var_os("TRIBUTARY_FULL_TRACE").is_some() {
            self.tail(usize::MAX)
        } else {
            self.tail(n)
        }
    }

    /// The last `n` lines kept.
    pub fn tail(&self, n: usize) -> Vec<String> {
        self.0
            .lock()
            .map(|l| l.kept.iter().rev().take(n).rev().cloned().collect())
            .unwrap_or_default()
    }

    /// Lines containing `needle`.
    pub fn grep(&self, needle: &str) -> Vec<String> {
        self.0
            .lock()
            .map(|l| {
                l.kept
                    .iter()
                    .filter(|line| line.contains(needle))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Routes this thread's `tracing` events (INFO and above, from `tributary*` targets) into the
    /// trace until the guard is dropped.
    pub fn capture(&self) -> CaptureGuard {
        INSTALL.call_once(|| {
            // Fails only if the runner already installed its own subscriber with `layer()`.
            let _composed_by_the_runner = tracing::subscriber::set_global_default(
                tracing_subscriber::registry().with(layer()),
            )
            .is_err();
        });
        let previous = CURRENT.with(|c| c.replace(Some(self.clone())));
        CaptureGuard { previous }
    }
}

static INSTALL: std::sync::Once = std::sync::Once::new();

thread_local! {
    static CURRENT: std::cell::RefCell<Option<Trace>> = const { std::cell::RefCell::new(None) };
}

/// Restores the thread's previous trace when dropped.
#[must_use = "the trace captures events only while the guard lives"]
#[derive(Debug)]
pub struct CaptureGuard {
    previous: Option<Trace>,
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// The layer that feeds each thread's current trace (its own filter: INFO and above from
/// `tributary*` targets, so other layers keep their own levels); the runner composes it with
/// its own output.
pub fn layer<S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>>() -> impl Layer<S>
{
    TraceLayer.with_filter(tracing_subscriber::filter::filter_fn(|metadata| {
        *metadata.level() <= Level::INFO && metadata.target().starts_with("tributary")
    }))
}

struct TraceLayer;

impl<S: Subscriber> Layer<S> for TraceLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let Some(trace) = CURRENT.with(|c| c.borrow().clone()) else {
            return;
        };
        let mut message = Message(String::new());
        event.record(&mut message);
        let meta = event.metadata();
        trace.push(&format!(
            "{} {}: {}",
            meta.level(),
            meta.target(),
            message.0
        ));
    }
}

/// Collects an event's fields as text.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

/// Where two traces' kept lines first differ, for a determinism test's failure message: the
/// index and both lines, or which one is longer. Only the lines given are compared (a report
/// keeps its last 40 unless `TRIBUTARY_FULL_TRACE` is set, which compares whole traces).
pub fn first_difference(first: &[String], second: &[String]) -> String {
    let at = first
        .iter()
        .zip(second)
        .position(|(a, b)| a != b)
        .unwrap_or(first.len().min(second.len()));
    let line = |lines: &[String]| lines.get(at).cloned().unwrap_or_else(|| "(ended)".into());
    if at == first.len() && at == second.len() {
        return format!(
            "the {at} lines compared are equal; set TRIBUTARY_FULL_TRACE=1 to compare whole traces"
        );
    }
    let before = first[at.saturating_sub(CONTEXT_LINES)..at].join("\n  ");
    format!(
        "first difference at line {at} of the {} and {} compared, after:\n  {before}\n  first:  {}\n  second: {}",
        first.len(),
        second.len(),
        line(first),
        line(second)
    )
}

/// Lines shared by both traces shown before their first difference.
const CONTEXT_LINES: usize = 12;
