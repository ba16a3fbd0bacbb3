//! `check-config`: loads configuration files through the typed configurations and prints what
//! Tributary will run with, or exactly what is wrong.

use std::io::Write;

use crate::config_file::AnyConfig;

/// Prints the effective settings of a loaded configuration.
pub fn print_config(out: &mut impl Write, name: &str, config: &AnyConfig) -> std::io::Result<()> {
    let (kind, unknown) = match config {
        AnyConfig::Server(c) => ("broker", Some(&c.unknown)),
        AnyConfig::Producer(c) => ("producer", Some(&c.unknown)),
        AnyConfig::Consumer(c) => ("consumer", Some(&c.unknown)),
        AnyConfig::Zookeeper(_) => ("zookeeper server", None),
    };
    writeln!(out, "{name}: valid {kind} configuration")?;
    let body = match config {
        AnyConfig::Server(c) => format!("{c:#?}"),
        AnyConfig::Producer(c) => format!("{c:#?}"),
        AnyConfig::Consumer(c) => format!("{c:#?}"),
        AnyConfig::Zookeeper(c) => format!("{c:#?}"),
    };
    for line in body.lines() {
        writeln!(out, "  {line}")?;
    }
    if let Some(unknown) = unknown.filter(|u| !u.is_empty()) {
        let keys: Vec<&str> = unknown.keys().map(String::as_str).collect();
        writeln!(out, "  ignored unknown keys: {}", keys.join(", "))?;
    }
    Ok(())
}
