//! The TLS settings of an outbound link (`security.protocol` and `ssl.*`, librdkafka's names):
//! a consumer's, a producer's (so a mirror's or the mirror maker's two sides), and a replica
//! copier's (`replica.security.protocol`, `replica.ssl.*`).

use std::path::PathBuf;

use super::error::ConfigError;
use super::fields::Fields;

/// What an outbound link speaks, with its TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsClientSettings {
    /// `ssl.ca.location`: the certificates the brokers' certificates must chain to (required:
    /// Tributary trusts no system store by default, so the trusted CAs are always explicit).
    pub ca: PathBuf,
    /// `ssl.certificate.location` and `ssl.key.location`: this client's certificate and key,
    /// for brokers that ask for one (mutual authentication); both or neither.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// `ssl.endpoint.identification.algorithm`: `https` (the default) checks that the broker's
    /// certificate names the host connected to; `none` only that it chains to the CA.
    pub verify_hostname: bool,
    /// What the keys are called in the file ("" or "replica."), for messages.
    pub key_prefix: &'static str,
}

/// The key names of one set of client TLS settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientTlsKeys {
    pub prefix: &'static str,
    pub protocol: &'static str,
    pub ca: &'static str,
    pub certificate: &'static str,
    pub key: &'static str,
    pub identification: &'static str,
}

/// A consumer's or producer's keys.
pub(crate) const CLIENT_KEYS: ClientTlsKeys = ClientTlsKeys {
    prefix: "",
    protocol: "security.protocol",
    ca: "ssl.ca.location",
    certificate: "ssl.certificate.location",
    key: "ssl.key.location",
    identification: "ssl.endpoint.identification.algorithm",
};

/// The replica copier's keys (in `server.properties`, beside the broker's own `ssl.*`).
pub(crate) const REPLICA_KEYS: ClientTlsKeys = ClientTlsKeys {
    prefix: "replica.",
    protocol: "replica.security.protocol",
    ca: "replica.ssl.ca.location",
    certificate: "replica.ssl.certificate.location",
    key: "replica.ssl.key.location",
    identification: "replica.ssl.endpoint.identification.algorithm",
};

/// Reads one set of client TLS settings: `None` for `plaintext` (the default).
pub(crate) fn read(
    f: &mut Fields<'_>,
    keys: ClientTlsKeys,
) -> Result<Option<TlsClientSettings>, ConfigError> {
    let ssl = match f.string(keys.protocol) {
        None => false,
        Some(raw) => match raw.to_ascii_lowercase().as_str() {
            "plaintext" => false,
            "ssl" => true,
            _ => {
                return Err(f.error(
                    keys.protocol,
                    format!("expected plaintext or ssl, found \"{raw}\""),
                ))
            }
        },
    };
    let ca = f.string(keys.ca).map(PathBuf::from);
    let certificate = f.string(keys.certificate).map(PathBuf::from);
    let key = f.string(keys.key).map(PathBuf::from);
    let verify_hostname = match f.string(keys.identification) {
        None => true,
        Some(raw) => match raw.to_ascii_lowercase().as_str() {
            "https" => true,
            "none" => false,
            _ => {
                return Err(f.error(
                    keys.identification,
                    format!("expected https or none, found \"{raw}\""),
                ))
            }
        },
    };
    if !ssl {
        if ca.is_some() || certificate.is_some() {
            tracing::warn!(
                "{} or {} is set but {} is plaintext: the link is not encrypted (set {}=ssl)",
                keys.ca,
                keys.certificate,
                keys.protocol,
                keys.protocol
            );
        }
        return Ok(None);
    }
    let Some(ca) = ca else {
        return Err(f.error(
            keys.ca,
            format!(
                "{}=ssl needs the CA certificates (a PEM file) the brokers' certificates chain to",
                keys.protocol
            ),
        ));
    };
    let identity = certificate_and_key(f, (keys.certificate, certificate), (keys.key, key))?;
    Ok(Some(TlsClientSettings {
        ca,
        identity,
        verify_hostname,
        key_prefix: keys.prefix,
    }))
}

/// A certificate and its private key, named by the keys given with them: both or neither; an
/// error names the one missing.
pub(crate) fn certificate_and_key(
    f: &Fields<'_>,
    (certificate_key, certificate): (&str, Option<PathBuf>),
    (key_key, key): (&str, Option<PathBuf>),
) -> Result<Option<(PathBuf, PathBuf)>, ConfigError> {
    match (certificate, key) {
        (None, None) => Ok(None),
        (Some(certificate), Some(key)) => Ok(Some((certificate, key))),
        (Some(_), None) => Err(f.error(
            key_key,
            format!("{certificate_key} is set: name its private key too"),
        )),
        (None, Some(_)) => Err(f.error(
            certificate_key,
            format!("{key_key} is set: name its certificate too"),
        )),
    }
}

/// Reads a tool's broker TLS settings from `props` (the consumer's and producer's keys:
/// `security.protocol`, `ssl.*`): `None` for plaintext.
pub fn read_client_tls(
    props: &super::Properties,
) -> Result<Option<TlsClientSettings>, ConfigError> {
    let mut f = Fields::new(props, super::ConfigKind::Consumer);
    read(&mut f, CLIENT_KEYS)
}
