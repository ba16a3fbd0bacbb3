//! Simulated hosts that stop cleanly and are dropped in simulated time.
//!
//! Two ways a host made a seed's run depend on the machine rather than the seed:
//! - **Tasks left running.** Software that returns while tasks it started still run leaves them
//!   to be dropped at the host's next restart, when turmoil drops the old runtime; a runtime
//!   drops its tasks in the order of tokio's task ids, which are counted for the whole process
//!   and so depend on what other tests spawn meanwhile. (A ZooKeeper model client that leaves
//!   its pinger running this way lets the order of the socket closes move a later delay by
//!   1 ms: one seed gives two traces under a full test run.) [`add`] fails the simulation when
//!   software returns with tasks still running, naming the host.
//! - **The machine's clock at a crash.** turmoil runs a host's software on a `LocalSet` and, at
//!   a crash or restart, drops the runtime first and the `LocalSet` after it, outside any
//!   runtime, where `tokio::time::Instant::now()` falls back to the machine's clock: turmoil's
//!   time (`turmoil::sim_elapsed`, which trace stamps and the environment's clock read, and its
//!   file system's modification times) then reads how long the process has really run. [`add`]
//!   runs the software as a task of the host's runtime, whose shutdown drops it in the runtime's
//!   context, where the clock is still the simulated one.
//!
//! Every host of a scenario that can be crashed or restarted is added through [`add`].

use std::error::Error;
use std::future::Future;

/// What a host's software returns: an error ends the simulation with it.
pub type HostResult = Result<(), Box<dyn Error + Send + Sync>>;

/// Adds host `name` to `sim`, running what `software` makes (again at each restart) as a task
/// of the host's runtime. A panic in it is resumed in turmoil's host task, so it still ends the
/// simulation; cancellation (the host crashed) ends it quietly, as turmoil's own hosts do.
///
/// Software that returns must have stopped every task it started: one left running would be
/// dropped only at the host's next restart, in an order set by tokio's process-wide task ids
/// (which depend on what other tests run at the same time), so whatever its drop does (close
/// a socket, say) would make the run depend on them. Tasks still running when the software
/// returns end the simulation with an error naming the host.
pub fn add<F, Fut>(sim: &mut turmoil::Sim<'_>, name: &str, software: F)
where
    F: Fn() -> Fut + 'static,
    Fut: Future<Output = HostResult> + Send + 'static,
{
    let host = name.to_string();
    sim.host(name, move || {
        let task = software();
        let name = host.clone();
        async move {
            match tokio::spawn(task).await {
                Ok(Ok(())) => match tokio::runtime::Handle::current().metrics().num_alive_tasks() {
                    0 => Ok(()),
                    alive => Err(format!(
                        "host {name}: its software returned with {alive} tasks it started still running (a stop must stop everything it started)"
                    )
                    .into()),
                },
                Ok(Err(e)) => Err(e as Box<dyn Error>),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_cancelled) => Ok(()),
            }
        }
    });
}

/// Moves tokio's process-wide task ids on by `n`, so that a run started after it gives its
/// tasks other ids than the same run started before it: a determinism test runs a seed again
/// after this, so a run that depends on task ids (the order in which a runtime drops the tasks
/// it still has) is caught rather than left to what other tests spawn meanwhile.
pub fn shift_task_ids(n: usize) {
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(e) => panic!("a runtime to shift task ids: {e}"),
    };
    runtime.block_on(async {
        for _ in 0..n {
            let _ran = tokio::spawn(async {}).await.is_ok();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Records the simulated time at which it is dropped.
    struct DropClock(Arc<Mutex<Option<Duration>>>);

    impl Drop for DropClock {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = turmoil::sim_elapsed();
        }
    }

    /// Runs a host holding a [`DropClock`] for 20 simulated ms, lets real time run well past
    /// that, crashes the host and returns (simulated time then, time its drop read).
    fn time_read_at_crash(through_runtime_task: bool) -> (Duration, Duration) {
        let seen = Arc::new(Mutex::new(None));
        let mut sim = crate::sim_fs::sim_builder(1).build();
        let held = seen.clone();
        let software = move || {
            let clock = DropClock(held.clone());
            async move {
                let _clock = clock;
                std::future::pending::<()>().await;
                Ok(())
            }
        };
        if through_runtime_task {
            add(&mut sim, "host", software);
        } else {
            sim.host("host", move || {
                let run = software();
                async move { run.await.map_err(|e| -> Box<dyn Error> { e }) }
            });
        }
        for _ in 0..20 {
            sim.step().unwrap();
        }
        // The test's thread stalls, as it does on a loaded machine (a test, not a simulated
        // path: this is the machine's clock the simulation must not see).
        std::thread::sleep(Duration::from_millis(300));
        sim.crash("host");
        let read = seen.lock().unwrap().expect("the drop ran without a host");
        (sim.elapsed(), read)
    }

    #[test]
    fn software_that_returns_leaving_a_task_running_ends_the_simulation() {
        let mut sim = crate::sim_fs::sim_builder(1).build();
        add(&mut sim, "leaky", || async {
            drop(tokio::spawn(std::future::pending::<()>()));
            Ok(())
        });
        let error = (0..10)
            .find_map(|_| sim.step().err())
            .expect("a task left running went unseen");
        assert!(
            error
                .to_string()
                .contains("host leaky: its software returned with 1 tasks"),
            "{error}"
        );
        // The same software waiting for its task returns cleanly.
        let mut sim = crate::sim_fs::sim_builder(1).build();
        add(&mut sim, "tidy", || async {
            tokio::spawn(tokio::time::sleep(std::time::Duration::from_millis(3))).await?;
            Ok(())
        });
        for _ in 0..10 {
            sim.step().unwrap();
        }
    }

    #[test]
    fn software_dropped_at_a_crash_reads_simulated_time() {
        let (now, read) = time_read_at_crash(true);
        // At most one tick ahead: the host's runtime already ran its last tick.
        assert!(
            read <= now + Duration::from_millis(1),
            "the drop read {read:?} at simulated {now:?}"
        );
    }

    /// Why [`add`] exists: turmoil's own host drops its software outside the runtime, where the
    /// clock it reads is the machine's. If this ever fails, turmoil drops in simulated time and
    /// [`add`]'s spawn is no longer needed.
    #[test]
    fn turmoils_own_host_drops_its_software_on_the_machines_clock() {
        let (now, read) = time_read_at_crash(false);
        assert!(
            read >= now + Duration::from_millis(250),
            "the drop read {read:?} at simulated {now:?}"
        );
    }
}
