//! Every simulation test of this crate, in one test binary: the broker, mirror and consumer,
//! generic over their environment, are then built for the simulator once rather than once per
//! file (most of the workspace's test build time). Each file is a module: run one with
//! `cargo test -p tributary-sim --test suite mirror::` (its name as the filter).

mod support;

#[path = "clients.rs"]
mod clients;
#[path = "cluster.rs"]
mod cluster;
#[path = "commit_pipeline.rs"]
mod commit_pipeline;
#[path = "conformance.rs"]
mod conformance;
#[path = "endpoint_book.rs"]
mod endpoint_book;
#[path = "failover.rs"]
mod failover;
#[path = "group_commits.rs"]
mod group_commits;
#[path = "identity.rs"]
mod identity;
#[path = "log_crash.rs"]
mod log_crash;
#[path = "log_restart.rs"]
mod log_restart;
#[path = "long_link.rs"]
mod long_link;
#[path = "mirror.rs"]
mod mirror;
#[path = "mirror_positions.rs"]
mod mirror_positions;
#[path = "replica.rs"]
mod replica;
#[path = "retention_restart.rs"]
mod retention_restart;
#[path = "sim_env.rs"]
mod sim_env;
#[path = "slow_clients.rs"]
mod slow_clients;
#[path = "topology.rs"]
mod topology;
