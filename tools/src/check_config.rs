//! `check-config`: loads configuration files through the typed configurations and prints what
//! Tributary will run with (every key, `(changed)` where the file differs from the default),
//! or exactly what is wrong.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use tributary::config_file::{load_kind, AnyConfig, ConfigKind};
use tributary_core::config::{reference, unknown_key_message, Properties};

use crate::error::ToolError;

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

/// `tributary check-config`'s arguments: the files, and what they are when their names do not
/// say.
#[derive(Debug, clap::Args)]
pub struct CheckConfigArgs {
    /// What the files are; by default guessed from names ending in server, producer,
    /// consumer or zookeeper .properties.
    #[arg(long, value_enum)]
    pub kind: Option<ConfigKind>,
    /// Exit 0 even when a file has keys Tributary does not know (they are always ignored).
    #[arg(long = "allow-unknown")]
    pub allow_unknown: bool,
    /// The files.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Checks every file and prints the settings of each valid one to standard output (each
/// invalid one's error to standard error). Exit code 1 when a file is invalid, or has unknown
/// keys without `--allow-unknown`; `Err` when a file's kind cannot be told or output fails.
pub fn run_cli(args: CheckConfigArgs) -> Result<ExitCode, ToolError> {
    let CheckConfigArgs {
        kind,
        allow_unknown,
        files,
    } = args;
    let (mut failed, mut unknown) = (false, 0);
    let mut out = std::io::stdout().lock();
    for path in &files {
        let kind = kind
            .or_else(|| ConfigKind::from_file_name(path))
            .ok_or_else(|| {
                ToolError::Usage(format!(
                    "{}: cannot tell what kind of configuration this is; pass --kind",
                    path.display()
                ))
            })?;
        match load_kind(path, kind) {
            Ok((config, props)) => {
                unknown +=
                    print_config(&mut out, &path.display().to_string(), kind, &props, &config)
                        .map_err(ToolError::failed)?
            }
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
            }
        }
    }
    if unknown > 0 && !allow_unknown {
        eprintln!("error: {unknown} unknown keys (see the warnings above); fix them, or pass --allow-unknown if they are meant for another tool");
        failed = true;
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
