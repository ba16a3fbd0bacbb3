//! Locks that fail loudly. A poisoned lock means a task panicked while holding it, so what it
//! guards may be half-changed: the task that meets it panics too, naming the lock, and the
//! component stops and says so, instead of going on with that state.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, whose contents `what` names; panics if it is poisoned.
#[allow(clippy::panic)]
pub fn lock<'a, T>(mutex: &'a Mutex<T>, what: &str) -> MutexGuard<'a, T> {
    mutex
        .lock()
        .unwrap_or_else(|_| panic!("{what}: lock poisoned (a task panicked while holding it)"))
}

/// The text of a panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_stops_whoever_meets_it_and_names_it() {
        let shared = std::sync::Arc::new(Mutex::new(0u32));
        let held = shared.clone();
        let _ = std::thread::spawn(move || {
            let _guard = lock(&held, "counter");
            panic!("a bug while holding it");
        })
        .join();
        let met = std::panic::catch_unwind(|| *lock(&shared, "counter"));
        let message = met.expect_err("a poisoned lock was recovered");
        let message = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(message.contains("counter: lock poisoned"), "{message}");
    }
}
