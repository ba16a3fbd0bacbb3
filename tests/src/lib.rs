//! Support for Tributary's end-to-end tests: a real ZooKeeper, the real `tributary` binary as
//! broker processes on loopback, and Java's codecs for interoperability checks.

pub mod bench;
pub mod broker;
pub mod java;
pub mod maker;
pub mod prometheus;
pub mod tls;
pub mod zookeeper;
