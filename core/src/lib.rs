//! Tributary's sans-IO core.
//!
//! Everything here is a pure function or a state machine: bytes, time and randomness come in from
//! the caller, results go out as values. Nothing in this crate opens a socket or a file, reads the
//! wall clock or draws from a global random source; `clippy.toml` beside this crate enforces that.
//!
//! - [`wire`]: the Kafka 0.7 request/response protocol and the incremental frame decoder.
//! - [`message`]: messages (magic 0 and 1), compression codecs and the validating message-set
//!   iterators.
//! - [`log`]: the segmented byte-offset log, its flush and retention rules and crash recovery,
//!   over a small file-system trait.
//! - [`config`]: the Java `.properties` reader and the typed broker, producer, consumer and mirror
//!   configurations with their 0.7 defaults.
//! - [`consumer`]: the consumer group's decisions: range assignment, topic filters, offsets to
//!   commit, registration data.
//! - [`producer`]: partition choice and the async producer's queue and batching policy.
//! - [`mirror`]: the mirror's per-source state machine (epochs, in-flight window, commit
//!   point and schedule), lag arithmetic and the ownership watchdog.
//! - [`replica`]: replica mode's decisions (what of a fetched block is appended, how the fetch
//!   size grows for a large message).
//! - [`zk_layout`] and [`group_id`]: 0.7's ZooKeeper paths and node data, and group names;
//!   [`identity`]: a cluster's id and name, kept in its ZooKeeper; [`origin`]: where each
//!   mirrored topic came from, and the loop check.
//! - `planted` (hidden): the test-only bug switches that prove the checkers can fail.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![warn(missing_docs)]

pub mod allow_list;
pub mod config;
pub mod connection_quota;
pub mod consumer;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod group_id;
pub mod identity;
pub mod log;
pub mod message;
pub mod mirror;
pub mod origin;
#[doc(hidden)]
pub mod planted;
pub mod producer;
pub mod replica;
pub mod wire;
pub mod zk_layout;
