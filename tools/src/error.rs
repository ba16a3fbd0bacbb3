//! Why a subcommand stopped: [`ToolError`], which `main` prints after `error:` before it exits
//! with 1. Every entry point (`run_cli`) returns it; the cause inside is the typed error of
//! whatever failed, kept as itself so its `source()` chain reaches the original.

use std::error::Error;

use tributary::config_file::FileError;
use tributary_core::config::ConfigError;

/// A typed cause of any kind: what failed, as the component that failed reported it.
pub type Cause = Box<dyn Error + Send + Sync + 'static>;

/// Why a tool could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The async runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A flag's value was refused by what reads it.
    #[error("{flag}: {cause}")]
    Flag {
        /// The flag, as the person typed it (`--zookeeper`).
        flag: String,
        /// Why its value was refused.
        #[source]
        cause: Cause,
    },
    /// A setting given as a flag (`--ssl.ca.location`) was refused by the configuration
    /// reader that checks it.
    #[error("--{}: {}", .0.key, .0.problem)]
    Setting(#[source] ConfigError),
    /// Flags that do not fit together, or a value no reader checks: the sentence names the
    /// flags and what to do; there is no cause below it.
    #[error("{0}")]
    Usage(String),
    /// A configuration file could not be read or is not valid.
    #[error(transparent)]
    File(#[from] FileError),
    /// Reading standard input or writing standard output or a file failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being read or written.
        what: String,
        /// How it failed.
        #[source]
        source: std::io::Error,
    },
    /// The tool's own work failed; the cause says why.
    #[error(transparent)]
    Failed(Cause),
    /// The tool's work failed in a step it names (in 0.7's words where a script reads them).
    #[error("{step}: {cause}")]
    During {
        /// The step, as the tool says it.
        step: &'static str,
        /// Why it failed.
        #[source]
        cause: Cause,
    },
}

impl ToolError {
    /// `flag`'s value was refused for `cause`.
    pub fn flag(flag: impl Into<String>, cause: impl Error + Send + Sync + 'static) -> Self {
        ToolError::Flag {
            flag: flag.into(),
            cause: Box::new(cause),
        }
    }

    /// The tool's work failed for `cause`.
    pub fn failed(cause: impl Error + Send + Sync + 'static) -> Self {
        ToolError::Failed(Box::new(cause))
    }

    /// The step `step` failed for `cause`.
    pub fn during(step: &'static str, cause: impl Error + Send + Sync + 'static) -> Self {
        ToolError::During {
            step,
            cause: Box::new(cause),
        }
    }

    /// Reading or writing `what` failed.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        ToolError::Io {
            what: what.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_error_names_the_flag_and_keeps_its_cause() {
        let cause = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = ToolError::flag("--zk-tls-config-file", cause);
        assert_eq!(error.to_string(), "--zk-tls-config-file: no such file");
        let source = error.source().expect("the cause is kept");
        assert!(source.downcast_ref::<std::io::Error>().is_some());
    }
}
