//! `check-config`: loads configuration files through the typed configurations and prints what
//! Tributary will run with (every key, `(changed)` where the file differs from the default),
//! or exactly what is wrong.

use std::io::Write;

use tributary_core::config::{reference, unknown_key_message, Properties};

use crate::config_file::{AnyConfig, ConfigKind};

/// Prints the effective settings of a loaded configuration and its unknown keys (each with the
/// key it most likely meant); returns how many unknown keys there were.
pub fn print_config(
    out: &mut impl Write,
    name: &str,
    kind: ConfigKind,
    props: &Properties,
    config: &AnyConfig,
) -> std::io::Result<usize> {
    let kind = kind.reference();
    writeln!(out, "{name}: valid {} configuration", kind.noun())?;
    write!(out, "{}", reference::render_settings(kind, props, "  "))?;
    let unknown = config.unknown_keys();
    for key in &unknown {
        let line = props.get(key).map_or(0, |p| p.line);
        writeln!(
            out,
            "  warning: {}",
            unknown_key_message(kind, name, key, line)
        )?;
    }
    Ok(unknown.len())
}
