//! Driving a single-host scenario step by step until its shared state says it is done.

use std::sync::{Mutex, MutexGuard};

use tributary::failure::Failure;

/// The scenario's shared state; a panic that poisoned it is the scenario's to report, so the
/// state is taken as it was left.
pub fn lock_state<T>(state: &Mutex<T>) -> MutexGuard<'_, T> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Steps `sim` until `done` holds for `state`, at most `steps_max` steps (then the scenario is
/// stuck, and says so).
pub fn step_until<T>(
    sim: &mut turmoil::Sim<'_>,
    state: &Mutex<T>,
    steps_max: u32,
    done: impl Fn(&T) -> bool,
) -> Result<(), Failure> {
    for _ in 0..steps_max {
        if done(&lock_state(state)) {
            return Ok(());
        }
        sim.step()
            .map_err(|e| Failure::from(format!("simulation failed: {e}")))?;
    }
    Err(Failure::new(format!(
        "scenario stuck after {steps_max} steps"
    )))
}
