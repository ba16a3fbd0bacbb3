//! Tributary's runtime layer: everything that touches files, sockets and clocks, driving the
//! sans-IO state machines of `tributary-core`.
//!
//! So far: reading configuration files from disk and the file-based tools. The broker,
//! producer, consumer and mirror arrive with their issues, written against an environment trait
//! so the same code runs on tokio and in the simulator.

pub mod broker;
pub mod client;
pub mod config_file;
pub mod consumer;
pub mod coordination;
pub mod env;
pub mod metrics;
pub mod mirror;
pub mod producer;
pub mod real_fs;
pub mod server;
pub mod tools;
