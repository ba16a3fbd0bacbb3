//! Configuration: a Java `.properties` reader and the typed configurations built on it.
//!
//! Every 0.7 key is read with its 0.7.2 default, accepting what 0.7.0 accepted. Errors name the
//! file, the line, the key and what would be right; unknown keys are kept and logged through
//! `tracing`, never fatal, because 0.7 files carry keys Tributary does not use.

mod broker;
mod consumer;
mod error;
mod fields;
mod listeners;
mod producer;
mod properties;
pub mod reference;
mod replica;
mod tls_client;
mod zk;
mod zk_security;
mod zookeeper_server;

pub use broker::{BrokerConfig, PARTITIONS_PER_TOPIC_MAX};
pub use consumer::{AutoOffsetReset, ConsumerConfig, MirrorOptions, TopicFilter};
pub use error::ConfigError;
pub use fields::unknown_key_message;
pub use listeners::{
    endpoints_registration, parse_endpoints, parse_listeners, ClientAuth, ListenerError,
    ListenerProtocol, ListenerSpec, Listeners, MetricsBind, TlsServerSettings,
};
pub use producer::{
    BrokerEndpoint, BrokerEndpointError, Discovery, EnqueueTimeout, ProducerConfig, ProducerType,
};
pub use properties::{Properties, PropertiesError, Property};
pub use reference::ConfigKind;
pub use replica::ReplicaConfig;
pub use tls_client::{read_client_tls, TlsClientSettings};
pub use zk::{ZkConfig, ZkConnect, ZkConnectError, ZkServer};
pub use zk_security::{
    parse_digest, read_zk_security, DigestError, DigestIdentity, ZkSecurity, ZkTls,
};
pub use zookeeper_server::ZooKeeperServerConfig;

/// Why a configuration file could not be used: not a valid `.properties` file, or a value that
/// the typed configuration refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The file is not valid `.properties` text.
    #[error(transparent)]
    Syntax(#[from] PropertiesError),
    /// A value is unusable.
    #[error(transparent)]
    Value(#[from] ConfigError),
}

/// Parses file bytes and reads them as a typed configuration with `read`.
pub fn load<T>(
    source: &str,
    bytes: &[u8],
    read: impl FnOnce(&Properties) -> Result<T, ConfigError>,
) -> Result<T, LoadError> {
    let props = Properties::parse_bytes(source, bytes)?;
    Ok(read(&props)?)
}
