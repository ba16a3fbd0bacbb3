//! A ZooKeeper model for the simulator: a server on its own turmoil host and a client that
//! implements [`tributary::coordination::Coordination`] over simulated TCP. The conformance
//! suite (`crate::conformance`) runs the same checks against it and a real ZooKeeper.

pub mod client;
pub mod proto;
pub mod server;

pub use client::ModelCoordination;
pub use server::{crash_and_restart, down, lag_followers, lagging, serve, ModelState, SharedModel};
