//! What the tasks of one source share: core's [`SourceMirror`] behind a lock, and the two
//! wake-ups around it. The streams feed it messages and acknowledgements; the source's commit
//! task (`commits.rs`) runs the rounds it decides.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tributary_core::mirror::{SourceMirror, SourcePartition};

/// One source's mirror state, shared by its streams and its commit task.
#[derive(Debug)]
pub(super) struct SourceWindow {
    state: Mutex<SourceMirror>,
    /// Bumped on every change that may make room (acknowledgements, commit rounds, dropped
    /// windows): a stream waiting for room looks again. A version, not a `Notify`, so a change
    /// made between a stream's last look and its wait is never missed.
    changed: watch::Sender<u64>,
    /// Woken when a full window of acknowledgements waits (the commit task looks at once).
    pub(super) commit_wanted: Notify,
}

impl SourceWindow {
    /// Source `source` at `now_ms`: at most `limit` messages unacknowledged (`queue.size` ×
    /// streams); a commit round every `commit_interval`, or as soon as `limit` acknowledged
    /// messages wait.
    pub(super) fn new(source: usize, limit: usize, commit_interval: Duration, now_ms: i64) -> Self {
        SourceWindow {
            state: Mutex::new(SourceMirror::new(source, limit, commit_interval, now_ms)),
            changed: watch::Sender::new(0),
            commit_wanted: Notify::new(),
        }
    }

    /// The state. Only memory work happens under this lock; a poisoned one is a bug here, and
    /// stops the task that meets it.
    #[allow(clippy::panic)]
    pub(super) fn lock(&self) -> MutexGuard<'_, SourceMirror> {
        self.state
            .lock()
            .unwrap_or_else(|_| panic!("the mirror window's lock was poisoned"))
    }

    /// Tells the streams waiting for room to look again.
    pub(super) fn changed(&self) {
        self.changed
            .send_modify(|version| *version = version.wrapping_add(1));
    }

    /// What a stream waits on for room: it resolves after every [`SourceWindow::changed`] since
    /// the receiver last looked.
    pub(super) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Whether a stream may take another message from the source.
    pub(super) fn has_room(&self) -> bool {
        self.lock().has_room()
    }
}

/// A message a stream holds across a wait (its topic's decision, a rebalance under way, an
/// earlier message of its partition held by another stream), marked in the window until
/// dropped: meanwhile later messages of its partition wait behind it and nothing of the
/// partition is committed (`SourceMirror::on_wait`).
pub(super) struct WaitMark<'a> {
    window: &'a SourceWindow,
    key: SourcePartition,
    offset: i64,
}

impl<'a> WaitMark<'a> {
    /// Marks the message of `key` with resume offset `offset`.
    pub(super) fn new(window: &'a SourceWindow, key: &SourcePartition, offset: i64) -> Self {
        window.lock().on_wait(key, offset);
        WaitMark {
            window,
            key: key.clone(),
            offset,
        }
    }
}

impl Drop for WaitMark<'_> {
    fn drop(&mut self) {
        // A poisoned lock stopped the mirror where it was met; nothing is left to unmark.
        if let Ok(mut state) = self.window.state.lock() {
            state.on_wait_over(&self.key, self.offset);
        }
        self.window.changed();
    }
}
