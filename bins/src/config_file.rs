//! Reading `.properties` files from disk into typed configurations.

use std::path::Path;

use tributary_core::config::{
    load, BrokerConfig, ConfigError, ConsumerConfig, LoadError, ProducerConfig, Properties,
    ZooKeeperServerConfig,
};

/// Which typed configuration a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConfigKind {
    /// A broker's `server.properties`.
    Server,
    /// A producer's `producer.properties`.
    Producer,
    /// A consumer's `consumer.properties` (and the embedded mirror's options).
    Consumer,
    /// A ZooKeeper server's `zookeeper.properties`.
    Zookeeper,
}

impl ConfigKind {
    /// Guesses the kind from a file name ending in `server`, `producer`, `consumer` or
    /// `zookeeper` `.properties`, as the sample files are named.
    pub fn from_file_name(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        let stem = name.strip_suffix(".properties")?;
        [
            ("server", ConfigKind::Server),
            ("producer", ConfigKind::Producer),
            ("consumer", ConfigKind::Consumer),
            ("zookeeper", ConfigKind::Zookeeper),
        ]
        .into_iter()
        .find(|(suffix, _)| stem.ends_with(suffix))
        .map(|(_, kind)| kind)
    }
}

/// Why a configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// The file's contents are not usable.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// Reads `path` and builds a typed configuration with `read`; errors name the file.
pub fn load_file<T>(
    path: &Path,
    read: impl FnOnce(&Properties) -> Result<T, ConfigError>,
) -> Result<T, FileError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| FileError::Read(shown.clone(), e))?;
    load(&shown, &bytes, read).map_err(FileError::Load)
}

/// Any of the typed configurations.
#[derive(Debug)]
pub enum AnyConfig {
    /// A broker configuration.
    Server(Box<BrokerConfig>),
    /// A producer configuration.
    Producer(Box<ProducerConfig>),
    /// A consumer configuration.
    Consumer(Box<ConsumerConfig>),
    /// A ZooKeeper server configuration.
    Zookeeper(Box<ZooKeeperServerConfig>),
}

/// Loads `path` as `kind`.
pub fn load_kind(path: &Path, kind: ConfigKind) -> Result<AnyConfig, FileError> {
    Ok(match kind {
        ConfigKind::Server => AnyConfig::Server(Box::new(load_file(path, BrokerConfig::from_properties)?)),
        ConfigKind::Producer => AnyConfig::Producer(Box::new(load_file(path, ProducerConfig::from_properties)?)),
        ConfigKind::Consumer => AnyConfig::Consumer(Box::new(load_file(path, ConsumerConfig::from_properties)?)),
        ConfigKind::Zookeeper => {
            AnyConfig::Zookeeper(Box::new(load_file(path, ZooKeeperServerConfig::from_properties)?))
        }
    })
}
