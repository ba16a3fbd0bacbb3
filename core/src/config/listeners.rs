//! The broker's listeners (`listeners`, Kafka 0.9's name) and the TLS settings of its SSL
//! listener (`ssl.*`, librdkafka's and Kafka's names).
//!
//! Without `listeners` the broker listens as 0.7 does: plaintext on `hostname:port`. With it,
//! each entry is `PLAINTEXT://host:port` or `SSL://host:port` (an empty host listens on every
//! interface), at most one of each; leaving PLAINTEXT out turns the plaintext listener off.

use std::fmt;
use std::path::PathBuf;

use super::error::ConfigError;
use super::fields::Fields;

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ListenerProtocol {
    /// Kafka 0.7's protocol over plain TCP (what 0.7 clients speak).
    Plaintext,
    /// The same protocol inside TLS 1.2 or 1.3.
    Ssl,
}

impl ListenerProtocol {
    /// The name in `listeners` and in the endpoints registered in ZooKeeper.
    pub fn name(self) -> &'static str {
        match self {
            ListenerProtocol::Plaintext => "PLAINTEXT",
            ListenerProtocol::Ssl => "SSL",
        }
    }

    /// Parses a protocol name, case-insensitively (Kafka upper-cases them).
    pub fn parse(raw: &str) -> Option<Self> {
        match raw.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(ListenerProtocol::Plaintext),
            "SSL" => Some(ListenerProtocol::Ssl),
            _ => None,
        }
    }
}

impl fmt::Display for ListenerProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One listening socket of the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    /// What it speaks.
    pub protocol: ListenerProtocol,
    /// The address bound; `None` listens on every interface.
    pub host: Option<String>,
    /// The port (0 picks a free one: tests).
    pub port: u16,
}

impl fmt::Display for ListenerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}:{}",
            self.protocol,
            self.host.as_deref().unwrap_or(""),
            self.port
        )
    }
}

/// Whether the SSL listener asks connecting clients for a certificate (`ssl.client.auth`,
/// Kafka's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// A certificate is asked for; one that is offered must chain to `ssl.ca.location`, but a
    /// client may offer none.
    Requested,
    /// A certificate chaining to `ssl.ca.location` is required: a client without one is refused
    /// during the handshake.
    Required,
}

/// Where a metrics endpoint listens when no address is configured for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsBind {
    /// 127.0.0.1: only the machine's own scrapers.
    Loopback,
    /// The component's host (every interface when it has none).
    Host,
}

impl MetricsBind {
    /// The default for an endpoint whose component has TLS links (`links_tls`) and which
    /// serves HTTPS asking scrapers for certificates as `https` says (`None`: plain HTTP).
    /// Reachable from other machines only where nothing uses TLS or where it authenticates its
    /// scrapers (HTTPS with client certificates required): metrics name topics and their lags,
    /// so encryption alone does not expose them.
    pub fn default_for(links_tls: bool, https: Option<ClientAuth>) -> MetricsBind {
        match https {
            Some(ClientAuth::Required) => MetricsBind::Host,
            Some(ClientAuth::None | ClientAuth::Requested) => MetricsBind::Loopback,
            None if links_tls => MetricsBind::Loopback,
            None => MetricsBind::Host,
        }
    }
}

/// The SSL listener's TLS settings. PEM files; read at start and again whenever one of them
/// changes (certificate rotation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsServerSettings {
    /// `ssl.certificate.location`: the broker's certificate chain, leaf first.
    pub certificate: PathBuf,
    /// `ssl.key.location`: the private key of that certificate (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// `ssl.ca.location`: certificates that client certificates must chain to; required unless
    /// `ssl.client.auth=none`.
    pub ca: Option<PathBuf>,
    /// `ssl.client.auth`.
    pub client_auth: ClientAuth,
    /// `ssl.allow.list.location`: the allow-list ([`crate::allow_list`]) of what each principal
    /// may do on the SSL listener, read again when it changes; `None` lets every client that
    /// completes the handshake do everything.
    pub allow_list: Option<PathBuf>,
}

/// The parsed listener keys of a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listeners {
    /// Every listener, plaintext first when there is one; never empty.
    pub specs: Vec<ListenerSpec>,
    /// The SSL listener's settings, present exactly when an SSL listener is.
    pub tls: Option<TlsServerSettings>,
    /// `advertised.listeners` (Kafka 0.9's name): where clients reach each listener when that
    /// is not where it binds (a proxy, NAT); one entry at most per listener, each with a host.
    /// Empty: `advertised.host.name` / `advertised.port`, else the listeners themselves.
    pub advertised: Vec<(ListenerProtocol, String, u16)>,
}

impl Listeners {
    /// The listener speaking `protocol`, if there is one.
    pub fn get(&self, protocol: ListenerProtocol) -> Option<&ListenerSpec> {
        self.specs.iter().find(|s| s.protocol == protocol)
    }
}

/// Reads `listeners` and the `ssl.*` keys; `hostname` and `port` give the plaintext listener
/// when `listeners` is unset.
pub(crate) fn read(
    f: &mut Fields<'_>,
    hostname: Option<&str>,
    port: u16,
) -> Result<Listeners, ConfigError> {
    let port_set = f.string("port").is_some();
    let specs = match f.string("listeners") {
        None => vec![ListenerSpec {
            protocol: ListenerProtocol::Plaintext,
            host: hostname.map(str::to_string),
            port,
        }],
        Some(raw) => parse_listeners(&raw).map_err(|e| f.error("listeners", e))?,
    };
    let plaintext_port = specs
        .iter()
        .find(|s| s.protocol == ListenerProtocol::Plaintext)
        .map(|s| s.port);
    if port_set && plaintext_port != Some(port) {
        return Err(f.error(
            "port",
            format!("port={port} is set, but listeners decides where the broker listens and has no PLAINTEXT listener on {port}: remove port, or list PLAINTEXT://:{port}"),
        ));
    }
    let certificate = f.string("ssl.certificate.location").map(PathBuf::from);
    let key = f.string("ssl.key.location").map(PathBuf::from);
    let ca = f.string("ssl.ca.location").map(PathBuf::from);
    let allow_list = f.string("ssl.allow.list.location").map(PathBuf::from);
    let client_auth = match f.string("ssl.client.auth") {
        None => ClientAuth::None,
        Some(raw) => match raw.to_ascii_lowercase().as_str() {
            "none" => ClientAuth::None,
            "requested" => ClientAuth::Requested,
            "required" => ClientAuth::Required,
            _ => {
                return Err(f.error(
                    "ssl.client.auth",
                    format!("expected none, requested or required, found \"{raw}\""),
                ))
            }
        },
    };
    let has_ssl = specs.iter().any(|s| s.protocol == ListenerProtocol::Ssl);
    if !has_ssl && certificate.is_some() {
        tracing::warn!(
            "ssl.certificate.location is set but listeners has no SSL listener: the broker listens in plaintext only (add SSL://host:port to listeners)"
        );
    }
    let tls =
        match (has_ssl, certificate, key) {
            (false, _, _) => None,
            (true, Some(certificate), Some(key)) => Some(TlsServerSettings {
                certificate,
                key,
                ca,
                client_auth,
                allow_list,
            }),
            (true, None, _) => {
                return Err(f.error(
                    "ssl.certificate.location",
                    "an SSL listener needs the broker's certificate (a PEM file)",
                ))
            }
            (true, Some(_), None) => return Err(f.error(
                "ssl.key.location",
                "an SSL listener needs the private key of ssl.certificate.location (a PEM file)",
            )),
        };
    if let Some(tls) = &tls {
        if tls.client_auth != ClientAuth::None && tls.ca.is_none() {
            return Err(f.error(
                "ssl.ca.location",
                "ssl.client.auth asks for client certificates: name the CA certificates (a PEM file) they must chain to",
            ));
        }
    }
    let advertised = match f.string("advertised.listeners") {
        None => Vec::new(),
        Some(raw) => {
            let parsed = parse_listeners(&raw).map_err(|e| f.error("advertised.listeners", e))?;
            let mut advertised = Vec::new();
            for spec in parsed {
                if !specs.iter().any(|s| s.protocol == spec.protocol) {
                    return Err(f.error(
                        "advertised.listeners",
                        format!(
                            "{} is advertised but listeners has no {} listener",
                            spec.protocol, spec.protocol
                        ),
                    ));
                }
                match spec.host {
                    Some(host) if spec.port != 0 => advertised.push((spec.protocol, host, spec.port)),
                    _ => return Err(f.error(
                        "advertised.listeners",
                        format!("the {} entry needs the host and port clients reach (e.g. {}://proxy.example:9093)", spec.protocol, spec.protocol),
                    )),
                }
            }
            let legacy = ["advertised.host.name", "advertised.port"]
                .into_iter()
                .find(|key| f.string(key).is_some());
            if let Some(legacy) = legacy {
                return Err(f.error(
                    "advertised.listeners",
                    format!("{legacy} is set too: give where clients reach the broker once, in advertised.listeners"),
                ));
            }
            advertised
        }
    };
    Ok(Listeners {
        specs,
        tls,
        advertised,
    })
}

/// Why a listener or endpoint list cannot be read; each names the entry at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenerError {
    /// An entry without `://`.
    #[error("\"{entry}\" is not PROTOCOL://host:port (e.g. PLAINTEXT://:9092,SSL://:9093)")]
    NotAnEndpoint {
        /// The entry.
        entry: String,
    },
    /// A listener's protocol is neither PLAINTEXT nor SSL.
    #[error("\"{protocol}\" in \"{entry}\" is not a protocol: expected PLAINTEXT or SSL")]
    UnknownProtocol {
        /// The protocol as written.
        protocol: String,
        /// The entry.
        entry: String,
    },
    /// An entry without a port.
    #[error("\"{entry}\" has no port")]
    NoPort {
        /// The entry.
        entry: String,
    },
    /// A port that is not a number from 0 to 65535.
    #[error("\"{port}\" in \"{entry}\" is not a port from 0 to 65535")]
    BadPort {
        /// The port as written.
        port: String,
        /// The entry.
        entry: String,
    },
    /// Two listeners of one protocol.
    #[error("more than one {0} listener")]
    Repeated(ListenerProtocol),
    /// No entry at all.
    #[error("no listener: expected PROTOCOL://host:port[,...]")]
    Empty,
}

/// `entry` split into its protocol, host and port as written.
fn split_entry(entry: &str) -> Result<(&str, &str, u16), ListenerError> {
    let (protocol, address) =
        entry
            .split_once("://")
            .ok_or_else(|| ListenerError::NotAnEndpoint {
                entry: entry.to_string(),
            })?;
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| ListenerError::NoPort {
            entry: entry.to_string(),
        })?;
    let port: u16 = port.parse().map_err(|_| ListenerError::BadPort {
        port: port.to_string(),
        entry: entry.to_string(),
    })?;
    Ok((protocol, host, port))
}

/// Parses `PROTOCOL://host:port[,PROTOCOL://host:port]`: at most one listener per protocol,
/// plaintext first in the result.
pub fn parse_listeners(raw: &str) -> Result<Vec<ListenerSpec>, ListenerError> {
    let mut specs: Vec<ListenerSpec> = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (protocol, host, port) = split_entry(entry)?;
        let protocol =
            ListenerProtocol::parse(protocol).ok_or_else(|| ListenerError::UnknownProtocol {
                protocol: protocol.to_string(),
                entry: entry.to_string(),
            })?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = (!host.is_empty() && host != "0.0.0.0").then(|| host.to_string());
        if specs.iter().any(|s| s.protocol == protocol) {
            return Err(ListenerError::Repeated(protocol));
        }
        specs.push(ListenerSpec {
            protocol,
            host,
            port,
        });
    }
    if specs.is_empty() {
        return Err(ListenerError::Empty);
    }
    specs.sort_by_key(|s| s.protocol);
    Ok(specs)
}

/// The endpoints a broker registers in ZooKeeper (`/tributary/endpoints/<id>`):
/// `PLAINTEXT://host:port,SSL://host:port`, each as clients reach it.
pub fn endpoints_registration(endpoints: &[(ListenerProtocol, String, u16)]) -> String {
    endpoints
        .iter()
        .map(|(protocol, host, port)| format!("{protocol}://{host}:{port}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses [`endpoints_registration`]'s format; entries of unknown protocols are skipped (a
/// later version may register more), malformed ones are an error.
pub fn parse_endpoints(data: &str) -> Result<Vec<(ListenerProtocol, String, u16)>, ListenerError> {
    let mut endpoints = Vec::new();
    for entry in data.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (protocol, host, port) = split_entry(entry)?;
        if let Some(protocol) = ListenerProtocol::parse(protocol) {
            endpoints.push((protocol, host.to_string(), port));
        }
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn metrics_leave_the_machine_by_default_only_without_tls_or_with_authenticated_scrapers() {
        use ClientAuth::{None as Open, Requested, Required};
        use MetricsBind::{Host, Loopback};
        let cases = [
            (false, None, Host),
            (true, None, Loopback),
            (false, Some(Open), Loopback),
            (true, Some(Open), Loopback),
            (true, Some(Requested), Loopback),
            (false, Some(Required), Host),
            (true, Some(Required), Host),
        ];
        for (links_tls, https, expected) in cases {
            assert_eq!(
                MetricsBind::default_for(links_tls, https),
                expected,
                "links TLS {links_tls}, HTTPS {https:?}"
            );
        }
    }

    #[test]
    fn listeners_parse_with_plaintext_first_and_empty_hosts_meaning_every_interface() {
        let specs = parse_listeners("SSL://:9093, plaintext://127.0.0.1:9092").unwrap();
        assert_eq!(
            specs,
            vec![
                ListenerSpec {
                    protocol: ListenerProtocol::Plaintext,
                    host: Some("127.0.0.1".into()),
                    port: 9092
                },
                ListenerSpec {
                    protocol: ListenerProtocol::Ssl,
                    host: None,
                    port: 9093
                },
            ]
        );
    }

    #[test]
    fn bad_listeners_are_refused_with_the_entry_named() {
        for (raw, expect) in [
            ("SSL://:9093,SSL://:9094", "more than one SSL"),
            ("TLS://:9093", "\"TLS\""),
            ("SSL://host", "no port"),
            ("SSL://:99999", "\"99999\""),
            (":9092", "not PROTOCOL://host:port"),
            (" , ", "no listener"),
        ] {
            let e = parse_listeners(raw).unwrap_err().to_string();
            assert!(e.contains(expect), "{raw}: {e}");
        }
    }

    #[test]
    fn endpoints_round_trip_and_unknown_protocols_are_skipped() {
        let endpoints = vec![
            (ListenerProtocol::Plaintext, "a".to_string(), 9092),
            (ListenerProtocol::Ssl, "a".to_string(), 9093),
        ];
        let data = endpoints_registration(&endpoints);
        assert_eq!(data, "PLAINTEXT://a:9092,SSL://a:9093");
        assert_eq!(parse_endpoints(&data).unwrap(), endpoints);
        assert_eq!(
            parse_endpoints("SASL_SSL://a:1,SSL://b:2").unwrap(),
            vec![(ListenerProtocol::Ssl, "b".to_string(), 2)]
        );
        assert!(parse_endpoints("SSL://b").is_err());
    }
}
