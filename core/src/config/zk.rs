//! The ZooKeeper keys shared by broker, producer and consumer, and the `zk.connect` string.

use std::fmt;

use super::error::ConfigError;
use super::fields::Fields;
use super::zk_security::{self, ZkSecurity};

const I32_MAX: i64 = i32::MAX as i64;

/// One ZooKeeper server address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ZkServer {
    /// Host name or address.
    pub host: String,
    /// Client port.
    pub port: u16,
}

/// A parsed `zk.connect`: `host:port[,host:port…][/chroot]`.
///
/// The chroot, when present, is an absolute path with no empty, `.` or `..` component, and no
/// trailing slash; every Kafka path is placed under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkConnect {
    /// The servers, in the order given.
    pub servers: Vec<ZkServer>,
    /// The chroot, e.g. `/kafka`, if any.
    pub chroot: Option<String>,
    /// How sessions with these servers are secured (`zk.ssl.*`, `zk.auth.digest.location`,
    /// `zk.set.acl`); not part of the connect string, which is all [`fmt::Display`] writes.
    pub security: Box<ZkSecurity>,
}

/// What is wrong with a `zk.connect` string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkConnectError {
    /// A server entry with an empty host, e.g. `:2181`.
    NoHost {
        /// The entry as written.
        entry: String,
    },
    /// A server entry whose port is not 1 to 65535.
    BadPort {
        /// The entry as written.
        entry: String,
        /// The port as written.
        port: String,
    },
    /// A chroot with an empty, `.` or `..` component.
    BadChroot {
        /// The chroot as written.
        chroot: String,
    },
}

impl fmt::Display for ZkConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZkConnectError::NoHost { entry } => {
                write!(f, "server \"{entry}\" has no host; expected host:port")
            }
            ZkConnectError::BadPort { entry, port } => write!(
                f,
                "server \"{entry}\" has port \"{port}\"; expected 1 to 65535"
            ),
            ZkConnectError::BadChroot { chroot } => {
                write!(f, "chroot \"{chroot}\" is not a valid ZooKeeper path")
            }
        }
    }
}

impl std::error::Error for ZkConnectError {}

impl ZkConnect {
    /// Parses a connect string; the error says what is wrong with it.
    pub fn parse(raw: &str) -> Result<Self, ZkConnectError> {
        let raw = raw.trim();
        let (hosts, chroot) = match raw.find('/') {
            Some(at) => (
                raw.get(..at).unwrap_or_default(),
                Some(raw.get(at..).unwrap_or_default()),
            ),
            None => (raw, None),
        };
        let chroot = chroot
            .filter(|c| *c != "/")
            .map(validate_chroot)
            .transpose()?;
        let servers = hosts
            .split(',')
            .map(str::trim)
            .map(parse_server)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ZkConnect {
            servers,
            chroot,
            security: Box::default(),
        })
    }
}

fn parse_server(entry: &str) -> Result<ZkServer, ZkConnectError> {
    let (host, port) = match entry.rsplit_once(':') {
        Some((host, port)) => (host, port),
        // ZooKeeper's client defaults the port to 2181.
        None => (entry, "2181"),
    };
    if host.is_empty() {
        return Err(ZkConnectError::NoHost {
            entry: entry.to_string(),
        });
    }
    let port =
        port.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| ZkConnectError::BadPort {
                entry: entry.to_string(),
                port: port.to_string(),
            })?;
    Ok(ZkServer {
        host: host.to_string(),
        port,
    })
}

fn validate_chroot(chroot: &str) -> Result<String, ZkConnectError> {
    let trimmed = chroot.strip_suffix('/').unwrap_or(chroot);
    let bad = trimmed
        .split('/')
        .skip(1)
        .any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        return Err(ZkConnectError::BadChroot {
            chroot: chroot.to_string(),
        });
    }
    Ok(trimmed.to_string())
}

impl fmt::Display for ZkConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("{}:{}", s.host, s.port))
            .collect();
        write!(
            f,
            "{}{}",
            servers.join(","),
            self.chroot.as_deref().unwrap_or("")
        )
    }
}

/// Reads `zk.connect`, if set, with its security settings (read either way, so they are known).
pub(crate) fn read_connect(fields: &mut Fields<'_>) -> Result<Option<ZkConnect>, ConfigError> {
    let security = zk_security::read(fields, zk_security::ZK_KEYS)?;
    match fields.string("zk.connect") {
        Some(raw) => ZkConnect::parse(&raw)
            .map(|connect| {
                Some(ZkConnect {
                    security: Box::new(security),
                    ..connect
                })
            })
            .map_err(|p| fields.error("zk.connect", p)),
        None => Ok(None),
    }
}

/// `zk.connect`, or an error saying it is needed for `why`.
pub(crate) fn require_connect(
    fields: &mut Fields<'_>,
    why: &str,
) -> Result<ZkConnect, ConfigError> {
    read_connect(fields)?
        .ok_or_else(|| fields.error("zk.connect", format!("required {why}, but not set")))
}

/// The ZooKeeper session settings (`zk.*` but `zk.connect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkConfig {
    /// `zk.sessiontimeout.ms` (6000).
    pub session_timeout_ms: u32,
    /// `zk.connectiontimeout.ms` (defaults to the session timeout).
    pub connection_timeout_ms: u32,
    /// `zk.synctime.ms` (2000).
    pub sync_time_ms: u32,
}

impl ZkConfig {
    pub(crate) fn read(fields: &mut Fields<'_>) -> Result<Self, ConfigError> {
        let session_timeout_ms = fields.int("zk.sessiontimeout.ms", 6000, 1..=I32_MAX)?;
        Ok(ZkConfig {
            session_timeout_ms,
            connection_timeout_ms: fields.int(
                "zk.connectiontimeout.ms",
                session_timeout_ms,
                1..=I32_MAX,
            )?,
            sync_time_ms: fields.int("zk.synctime.ms", 2000, 1..=I32_MAX)?,
        })
    }
}
