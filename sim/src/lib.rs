//! Tributary's deterministic simulation suite.
//!
//! Empty for now: the simulator (turmoil network and file system, a ZooKeeper model, fault
//! injection and invariant checkers) arrives once the broker exists. Everything built before it is
//! designed to be driven from here: core is sans-IO, and bins/ will take its network, file system
//! and clock from an environment trait.
