//! Tributary's deterministic simulation suite.
//!
//! Runs Tributary's real code on turmoil: its simulated file system (unsynced writes lost on a
//! crash, never-synced files deleted, writes torn at block boundaries), its simulated network,
//! and a ZooKeeper model. One `u64` seed drives turmoil's RNG and every workload and fault
//! choice, so a failure replays exactly from its seed.
//!
//! The world:
//! - [`env`]: `SimEnv`, the production `Env` on turmoil (sockets, disk, clock, ZooKeeper model
//!   sessions).
//! - [`sim_fs`]: the log's [`LogFs`](tributary_core::log::LogFs) on turmoil's file system, with
//!   a crash point that can be set at any file-system operation and disks that fail syncs.
//! - [`zk_model`]: the ZooKeeper model (server, client, crash and restart with sessions
//!   restored); [`conformance`] is the suite it shares with a real ZooKeeper.
//! - [`world`]: clusters of production servers (`tributary::server::run`) with their ZooKeeper,
//!   the run's control (faults, stops, links); [`invariants`]: every invariant the scenarios
//!   check, numbered S1 to S31 as docs/ARCHITECTURE.md numbers them.
//! - [`trace`]: the run's trace (scenario lines and the code's own `tracing` events).
//!
//! The scenarios (under [`scenarios`], re-exported here), each with its checkers: [`cluster`] (brokers, producers, the produce
//! [`history`] checker), [`clients`] (consumer groups), [`mirror`] (two clusters and the mirror,
//! with [`metrics_check`]), [`replica`] (replica mode and failover), [`long_link`] (the mirror
//! over the link proxy), [`topology`] (three clusters mirrored active-active or in a chain,
//! loops refused), [`log_crash`] (a crash at any file-system operation, then recovery) and
//! [`retention_restart`]. [`two_clusters`] holds the faults the two-cluster scenarios share
//! (what each is, which comes next, when each begins and ends).

// turmoil forwards task panics as failures, and seeds tokio's RNG, only with this cfg (set in
// .cargo/config.toml; a RUSTFLAGS environment variable replaces it, which must not pass silently).
#[cfg(not(tokio_unstable))]
compile_error!("build the simulator with --cfg tokio_unstable (.cargo/config.toml sets it; a RUSTFLAGS environment variable overrides that file: add --cfg tokio_unstable to it)");

pub mod conformance;
pub mod env;
pub mod history;
pub mod host;
pub mod invariants;
pub mod metrics_check;
pub mod scenarios;
pub mod sim_fs;
pub mod stepping;
pub mod trace;
pub mod world;
pub mod zk_model;

pub use scenarios::{
    clients, cluster, failover, log_crash, long_link, mirror, mirror_positions, replica,
    retention_restart, topology, two_clusters,
};
