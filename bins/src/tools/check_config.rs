//! `check-config`: loads configuration files through the typed configurations and prints what
//! Tributary will run with, or exactly what is wrong.

use std::io::Write;

use crate::config_file::AnyConfig;

/// Prints the effective settings of a loaded configuration.
pub fn print_config(out: &mut impl Write, name: &str, config: &AnyConfig) -> std::io::Result<()> {
    let (kind, body, unknown) = match config {
        AnyConfig::Server(c) => ("broker", format!("{c:#?}"), Some(&c.unknown)),
        AnyConfig::Producer(c) => ("producer", format!("{c:#?}"), Some(&c.unknown)),
        AnyConfig::Consumer(c) => ("consumer", format!("{c:#?}"), Some(&c.unknown)),
        AnyConfig::Zookeeper(c) => ("zookeeper server", format!("{c:#?}"), None),
    };
    writeln!(out, "{name}: valid {kind} configuration")?;
    for line in body.lines() {
        writeln!(out, "  {line}")?;
    }
    if let Some(unknown) = unknown.filter(|u| !u.is_empty()) {
        let keys: Vec<&str> = unknown.keys().map(String::as_str).collect();
        writeln!(out, "  ignored unknown keys: {}", keys.join(", "))?;
    }
    Ok(())
}
