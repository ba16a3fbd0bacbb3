//! Tributary's deterministic simulation suite.
//!
//! Runs Tributary's real code on turmoil: its simulated file system (unsynced writes lost on a
//! crash, never-synced files deleted, writes torn at block boundaries) and, as the broker lands,
//! its simulated network. One `u64` seed drives turmoil's RNG and every workload and fault
//! choice, so a failure replays exactly from its seed.
//!
//! - [`sim_fs`]: the log's [`LogFs`](tributary_core::log::LogFs) on turmoil's file system, with
//!   a crash point that can be set at any file-system operation.
//! - [`log_crash`]: the log crash scenario: random appends, flushes, rolls, reads and retention,
//!   a crash at a random file-system operation, then recovery checked against what was visible.

// turmoil forwards task panics as failures, and seeds tokio's RNG, only with this cfg (set in
// .cargo/config.toml; a RUSTFLAGS environment variable replaces it, which must not pass silently).
#[cfg(not(tokio_unstable))]
compile_error!("build the simulator with --cfg tokio_unstable (.cargo/config.toml sets it; a RUSTFLAGS environment variable overrides that file: add --cfg tokio_unstable to it)");

pub mod clients;
pub mod cluster;
pub mod conformance;
pub mod env;
pub mod history;
pub mod log_crash;
pub mod long_link;
pub mod metrics_check;
pub mod mirror;
pub mod replica;
pub mod retention_restart;
pub mod sim_fs;
pub mod trace;
pub mod world;
pub mod zk_model;
