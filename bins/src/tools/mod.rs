//! The command-line tools, named after the 0.7 tools they replace.

pub mod check_config;
pub mod cluster_id;
pub mod console_consumer;
pub mod console_producer;
pub mod date_format;
pub mod demote;
pub mod dump_log;
pub mod get_offsets;
pub mod jmx_tool;
pub mod line_reader;
pub mod link_proxy;
pub mod mirror_status;
pub mod offset_checker;
pub mod perf;
pub mod promote;
pub mod replay;
pub mod shells;
pub mod simple_consumer;
pub mod simple_perf;
pub mod update_offsets;
pub mod verify_rebalance;
pub mod zk_offsets;
