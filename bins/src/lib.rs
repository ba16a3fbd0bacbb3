//! Tributary's runtime layer: everything that touches files, sockets, clocks and ZooKeeper,
//! driving the sans-IO state machines of `tributary-core`.
//!
//! Every component is written once against [`env::Env`], so the same code runs on tokio in
//! production and on turmoil in the simulator: the broker ([`broker`], composed with a mirror
//! broker's embedded mirror in [`server`]), the producer ([`producer`]), the consumer group
//! ([`consumer`]), the mirror ([`mirror`], with the mirror maker in [`mirror::maker`]), replica
//! mode ([`replica`]), the ZooKeeper sessions ([`coordination`]), the metrics endpoint ([`metrics`]), the client
//! connection ([`client`]) and the tools ([`tools`]). [`cli`] holds the command line the
//! `tributary` binary parses; each subcommand's entry point lives beside what it runs.

pub mod broker;
pub mod cli;
pub mod client;
pub mod config_file;
pub mod consumer;
pub mod coordination;
pub mod env;
pub mod metrics;
pub mod mirror;
pub mod producer;
pub mod real_fs;
pub mod replica;
pub mod server;
pub mod sync;
pub mod tls;
pub mod tools;
