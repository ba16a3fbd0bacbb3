//! Every integration test of the tools crate, in one test binary (as in the runtime crate):
//! each file is a module; run one with `cargo test -p tributary-tools --test suite cli::`.

mod support;

#[path = "cli.rs"]
mod cli;
#[path = "link_proxy.rs"]
mod link_proxy;
#[path = "simple_perf.rs"]
mod simple_perf;
