//! Tributary's tools and the `tributary` binary: the command line ([`command`]), what its
//! subcommands share ([`cli`], with the broker's and the mirror maker's entry points), and one
//! module per tool, named after the Kafka 0.7 tool it replaces. Everything here drives the
//! runtime library (`tributary`); nothing in the runtime names a tool.
//!
//! Arrows point down only: `jopt` (0.7's option spellings) reads `command`'s options;
//! `command` names every tool and `cli`; the tools use `cli`'s shared arguments and helpers;
//! `cli` names no tool; `error` (what every entry point returns) names nothing of the crate.

pub mod check_config;
pub mod cli;
pub mod cluster_id;
pub mod command;
pub mod console_consumer;
pub mod console_producer;
pub mod date_format;
pub mod demote;
pub mod dump_log;
pub mod error;
pub mod get_offsets;
pub mod jmx_tool;
pub mod jopt;
pub mod line_reader;
pub mod link_proxy;
pub mod mirror_positions;
pub mod mirror_status;
pub mod offset_checker;
pub mod perf;
pub mod promote;
pub mod replay;
pub mod shells;
pub mod simple_consumer;
pub mod simple_perf;
pub mod translate_offsets;
pub mod update_offsets;
pub mod verify_rebalance;
pub mod zk_offsets;
