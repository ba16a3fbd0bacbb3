//! Tributary's runtime layer: everything that touches files, sockets, clocks and ZooKeeper,
//! driving the sans-IO state machines of `tributary-core`.
//!
//! Every component is written once against [`env::Env`], so the same code runs on tokio in
//! production and on turmoil in the simulator: the broker ([`broker`], composed with a mirror
//! broker's embedded mirror in [`server`]), the producer ([`producer`]), the consumer group
//! ([`consumer`]), the mirror ([`mirror`], with the mirror maker in [`mirror::maker`]), replica
//! mode ([`replica`]), the ZooKeeper sessions ([`coordination`]), the metrics endpoint
//! ([`metrics`]) and the client connection ([`client`]). The tools and the `tributary` binary
//! are a crate of their own (`tributary-tools`) over this one; nothing here names them.

pub mod broker;
pub mod client;
pub mod config_file;
pub mod consumer;
pub mod coordination;
pub mod env;
pub mod failure;
pub mod logs;
pub mod metrics;
pub mod mirror;
pub mod origin_store;
pub mod pending;
pub mod producer;
pub mod real_fs;
pub mod replica;
pub mod server;
pub mod sync;
pub mod tls;
