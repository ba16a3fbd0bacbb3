//! The command-line tools, named after the 0.7 tools they replace.

pub mod check_config;
pub mod dump_log;
