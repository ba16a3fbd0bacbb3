//! `zookeeper.properties`: the few settings of a ZooKeeper server that Tributary's scripts and
//! tests need to start one (the file itself is read by ZooKeeper).

use std::collections::BTreeMap;

use super::error::ConfigError;
use super::fields::Fields;
use super::properties::Properties;
use super::reference::ConfigKind;

const I32_MAX: i64 = i32::MAX as i64;

/// A standalone ZooKeeper server's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZooKeeperServerConfig {
    /// `dataDir` (required).
    pub data_dir: String,
    /// `clientPort` (2181).
    pub client_port: u16,
    /// `maxClientCnxns` (60; 0 = unlimited).
    pub max_client_connections: u32,
    /// `tickTime` in ms (2000).
    pub tick_time_ms: u32,
    /// Other keys, passed to ZooKeeper unchanged.
    pub other: BTreeMap<String, String>,
}

impl ZooKeeperServerConfig {
    /// Reads the keys Tributary needs; the rest are kept in `other` (not warned about: they are
    /// ZooKeeper's, not ours).
    pub fn from_properties(props: &Properties) -> Result<Self, ConfigError> {
        let mut f = Fields::new(props, ConfigKind::ZooKeeperServer);
        let config = ZooKeeperServerConfig {
            data_dir: f.required_string("dataDir")?,
            client_port: f.int("clientPort", 2181, 1..=65535)?,
            max_client_connections: f.int("maxClientCnxns", 60, 0..=I32_MAX)?,
            tick_time_ms: f.int("tickTime", 2000, 1..=I32_MAX)?,
            other: BTreeMap::new(),
        };
        Ok(ZooKeeperServerConfig {
            other: f.unknown(),
            ..config
        })
    }
}
