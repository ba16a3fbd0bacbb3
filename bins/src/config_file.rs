//! Reading `.properties` files from disk into typed configurations.

use std::path::Path;

use tributary_core::config::{
    BrokerConfig, ConfigError, ConsumerConfig, LoadError, ProducerConfig, Properties,
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

    /// The core's name for this kind (for its key reference).
    pub fn reference(self) -> tributary_core::config::ConfigKind {
        use tributary_core::config::ConfigKind as K;
        match self {
            ConfigKind::Server => K::Broker,
            ConfigKind::Producer => K::Producer,
            ConfigKind::Consumer => K::Consumer,
            ConfigKind::Zookeeper => K::ZooKeeperServer,
        }
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
    load_file_with_properties(path, read).map(|(config, _)| config)
}

/// Like [`load_file`], also returning the file's properties (to print what is in effect).
pub fn load_file_with_properties<T>(
    path: &Path,
    read: impl FnOnce(&Properties) -> Result<T, ConfigError>,
) -> Result<(T, Properties), FileError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| FileError::Read(shown.clone(), e))?;
    let props = Properties::parse_bytes(&shown, &bytes)
        .map_err(|e| FileError::Load(LoadError::Syntax(e)))?;
    let config = read(&props).map_err(|e| FileError::Load(LoadError::Value(e)))?;
    Ok((config, props))
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

/// Loads `path` as `kind`, with the file's properties.
pub fn load_kind(path: &Path, kind: ConfigKind) -> Result<(AnyConfig, Properties), FileError> {
    fn boxed<T>(loaded: (T, Properties), wrap: fn(Box<T>) -> AnyConfig) -> (AnyConfig, Properties) {
        (wrap(Box::new(loaded.0)), loaded.1)
    }
    Ok(match kind {
        ConfigKind::Server => boxed(
            load_file_with_properties(path, BrokerConfig::from_properties)?,
            AnyConfig::Server,
        ),
        ConfigKind::Producer => boxed(
            load_file_with_properties(path, ProducerConfig::from_properties)?,
            AnyConfig::Producer,
        ),
        ConfigKind::Consumer => boxed(
            load_file_with_properties(path, ConsumerConfig::from_properties)?,
            AnyConfig::Consumer,
        ),
        ConfigKind::Zookeeper => boxed(
            load_file_with_properties(path, ZooKeeperServerConfig::from_properties)?,
            AnyConfig::Zookeeper,
        ),
    })
}

impl AnyConfig {
    /// Keys the file sets that are not settings of its kind (ZooKeeper's own keys excepted:
    /// ZooKeeper reads that file, not Tributary).
    pub fn unknown_keys(&self) -> Vec<String> {
        match self {
            AnyConfig::Server(c) => c.unknown.keys().cloned().collect(),
            AnyConfig::Producer(c) => c.unknown.keys().cloned().collect(),
            AnyConfig::Consumer(c) => c.unknown.keys().cloned().collect(),
            AnyConfig::Zookeeper(_) => Vec::new(),
        }
    }
}
