//! Work waiting for one task, where asking twice for the same item is asking once: a map from
//! item to its latest value, shared by any number of senders and one receiver. It holds at most
//! one entry per distinct item — partitions waiting for a flush, topics waiting to be
//! registered — so it is bounded by how many such items exist, where a channel would grow with
//! the number of requests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// The receiver is gone: nobody will take the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the receiving task has stopped")]
pub struct Closed;

#[derive(Debug)]
struct State<K, V> {
    items: BTreeMap<K, V>,
    closed: bool,
}

#[derive(Debug)]
struct Inner<K, V> {
    state: Mutex<State<K, V>>,
    wake: Notify,
}

impl<K, V> Inner<K, V> {
    fn lock(&self) -> MutexGuard<'_, State<K, V>> {
        // Nothing panics while the lock is held (map operations only): a poisoned lock is a bug.
        self.state
            .lock()
            .unwrap_or_else(|_| panic!("a pending set's lock was poisoned by a panic"))
    }
}

/// Adds items for the receiver; clones share the same set.
#[derive(Debug)]
pub struct PendingSender<K, V> {
    inner: Arc<Inner<K, V>>,
}

impl<K, V> Clone for PendingSender<K, V> {
    fn clone(&self) -> Self {
        PendingSender {
            inner: self.inner.clone(),
        }
    }
}

/// Takes the items added; the set closes when it is dropped.
#[derive(Debug)]
pub struct PendingReceiver<K, V> {
    inner: Arc<Inner<K, V>>,
}

/// A new, empty set: its sender and its receiver.
pub fn pending<K: Ord, V>() -> (PendingSender<K, V>, PendingReceiver<K, V>) {
    let inner = Arc::new(Inner {
        state: Mutex::new(State {
            items: BTreeMap::new(),
            closed: false,
        }),
        wake: Notify::new(),
    });
    (
        PendingSender {
            inner: inner.clone(),
        },
        PendingReceiver { inner },
    )
}

impl<K: Ord, V> PendingSender<K, V> {
    /// Adds `key` with `value` (replacing the value of a `key` already pending) and wakes the
    /// receiver; `Err` once the receiver is gone.
    pub fn add(&self, key: K, value: V) -> Result<(), Closed> {
        {
            let mut state = self.inner.lock();
            if state.closed {
                return Err(Closed);
            }
            state.items.insert(key, value);
        }
        self.inner.wake.notify_one();
        Ok(())
    }
}

impl<K: Ord, V> PendingReceiver<K, V> {
    /// Waits until something is pending, then takes everything pending, in key order.
    /// Cancel-safe: items are taken only by the call that returns them.
    pub async fn next(&mut self) -> BTreeMap<K, V> {
        loop {
            let taken = self.take_now();
            if !taken.is_empty() {
                return taken;
            }
            // A sender adding after `take_now` leaves a permit: this returns at once then.
            self.inner.wake.notified().await;
        }
    }

    /// Takes everything pending now, without waiting (empty when nothing is).
    pub fn take_now(&mut self) -> BTreeMap<K, V> {
        std::mem::take(&mut self.inner.lock().items)
    }
}

impl<K, V> Drop for PendingReceiver<K, V> {
    fn drop(&mut self) {
        // Whatever is left is dropped with the set; senders learn it is closed.
        let mut state = self.inner.lock();
        state.closed = true;
        let _left: Vec<(K, V)> = std::mem::take(&mut state.items).into_iter().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn an_item_added_many_times_is_pending_once_with_its_latest_value() {
        let (tx, mut rx) = pending();
        for round in 0..10_000 {
            tx.add("orders-0", round).expect("open");
            tx.add("clicks-1", round).expect("open");
        }
        let taken = rx.take_now();
        assert_eq!(
            taken.into_iter().collect::<Vec<_>>(),
            vec![("clicks-1", 9_999), ("orders-0", 9_999)]
        );
        assert!(rx.take_now().is_empty());
    }

    #[test]
    fn the_receiver_wakes_for_an_item_added_while_it_waits_and_before_it_waits() {
        block_on(async {
            let (tx, mut rx) = pending::<u32, ()>();
            tx.add(1, ()).expect("open");
            assert_eq!(rx.next().await.len(), 1);
            let sender = tx.clone();
            let waiter = tokio::spawn(async move { rx.next().await });
            tokio::task::yield_now().await;
            sender.add(2, ()).expect("open");
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("woken")
                .expect("no panic");
            assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![2]);
        });
    }

    #[test]
    fn senders_learn_that_the_receiver_is_gone() {
        let (tx, rx) = pending::<u32, ()>();
        drop(rx);
        assert_eq!(tx.add(1, ()), Err(Closed));
    }
}
