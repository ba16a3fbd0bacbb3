//! Every integration test of this crate, in one test binary: the broker and clients, generic
//! over their environment, are then built once rather than once per file (most of the
//! workspace's test build time). Each file is a module: run one with
//! `cargo test -p tributary --test suite producer::` (its name as the filter).

mod support;

#[path = "allow_list.rs"]
mod allow_list;
#[path = "broker_failure.rs"]
mod broker_failure;
#[path = "broker_partitions.rs"]
mod broker_partitions;
#[path = "client_poison.rs"]
mod client_poison;
#[path = "dashboard.rs"]
mod dashboard;
#[path = "log_rules.rs"]
mod log_rules;
#[path = "memory_budget.rs"]
mod memory_budget;
#[path = "mirrored_produce.rs"]
mod mirrored_produce;
#[path = "producer.rs"]
mod producer;
#[path = "zero_copy.rs"]
mod zero_copy;
