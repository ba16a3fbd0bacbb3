//! The broker-wide memory budget: bytes of requests and responses held at once, across all
//! connections. A request waits for its share instead of failing; a share never exceeds the
//! whole budget, so even the largest request can be served (alone).

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Semaphore, SemaphorePermit};

/// Budget accounting granularity.
const UNIT_BYTES: usize = 1024;

/// A budget of bytes in flight. Counts what is held and the most ever held, so tests (and
/// later, metrics) can see that the limit holds.
#[derive(Debug)]
pub struct Budget {
    semaphore: Semaphore,
    capacity_units: u32,
    held_units: AtomicU64,
    peak_units: AtomicU64,
}

/// A share of the budget, given back when dropped.
#[derive(Debug)]
pub struct BudgetShare<'a> {
    budget: &'a Budget,
    units: u32,
    _permit: SemaphorePermit<'a>,
}

impl Budget {
    /// A budget of `bytes` (rounded up to whole KiB).
    pub fn new(bytes: usize) -> Self {
        let capacity_units = u32::try_from(bytes.div_ceil(UNIT_BYTES))
            .unwrap_or(u32::MAX)
            .min(Semaphore::MAX_PERMITS as u32);
        Budget {
            semaphore: Semaphore::new(capacity_units as usize),
            capacity_units,
            held_units: AtomicU64::new(0),
            peak_units: AtomicU64::new(0),
        }
    }

    /// Waits until `bytes` (at most the whole budget) can be held, and holds them.
    pub async fn acquire(&self, bytes: usize) -> BudgetShare<'_> {
        let units = u32::try_from(bytes.div_ceil(UNIT_BYTES))
            .unwrap_or(u32::MAX)
            .min(self.capacity_units);
        let permit = match self.semaphore.acquire_many(units).await {
            Ok(permit) => permit,
            // The semaphore is never closed.
            Err(_) => unreachable!("the memory budget's semaphore was closed"),
        };
        let held = self
            .held_units
            .fetch_add(u64::from(units), Ordering::SeqCst)
            + u64::from(units);
        self.peak_units.fetch_max(held, Ordering::SeqCst);
        BudgetShare {
            budget: self,
            units,
            _permit: permit,
        }
    }

    /// The whole budget in bytes.
    pub fn capacity_bytes(&self) -> usize {
        self.capacity_units as usize * UNIT_BYTES
    }

    /// The most bytes ever held at once.
    pub fn peak_bytes(&self) -> usize {
        self.peak_units.load(Ordering::SeqCst) as usize * UNIT_BYTES
    }
}

impl Drop for BudgetShare<'_> {
    fn drop(&mut self) {
        self.budget
            .held_units
            .fetch_sub(u64::from(self.units), Ordering::SeqCst);
    }
}
