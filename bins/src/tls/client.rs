//! The client side of TLS: the configuration built from `security.protocol=ssl` and `ssl.*`,
//! read again when its files change (a rotated client certificate, a new CA), and the
//! handshake of each outbound connection.

use std::io;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tributary_core::config::TlsClientSettings;

use super::files::Reloading;
use super::link::Link;
use super::server::provider;
use super::{pem, TlsError};
use crate::failure::Failure;

/// An outbound link's TLS configuration, replaced when its files change.
pub struct ClientTls {
    settings: TlsClientSettings,
    current: Reloading<TlsConnector>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Reads the files of `settings`; an error names the setting and file that cannot be used.
    pub fn load(settings: TlsClientSettings) -> Result<Self, TlsError> {
        let current = Reloading::load("an outbound link's certificates", files(&settings), || {
            connector(&settings)
        })?;
        Ok(ClientTls { settings, current })
    }

    /// The connector for a new connection: the files are read again first if they changed
    /// (logged); files that cannot be used are reported once and the previous ones kept.
    fn connector(&self) -> TlsConnector {
        match self.current.reload_if_changed(|| connector(&self.settings)) {
            Ok(false) => {}
            Ok(true) => tracing::info!(
                "TLS: certificates read again from {} (rotation); new connections use them",
                self.settings.ca.display()
            ),
            Err(e) => tracing::error!("TLS: the changed certificate files cannot be used ({e}); new connections keep the previous ones"),
        }
        self.current.current()
    }

    /// Completes a TLS handshake on `stream` with the broker at `host:port` (the name checked
    /// against its certificate unless `ssl.endpoint.identification.algorithm=none`).
    pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
        host: &str,
        port: u16,
    ) -> io::Result<Link<S>> {
        let name = ServerName::try_from(host.to_string()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host}: not a host name or address for TLS: {e}"),
            )
        })?;
        let tls = self.connector().connect(name, stream).await.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "TLS handshake with {host}:{port} failed: {e} ({p}security.protocol=ssl needs the broker's SSL listener, and {p}ssl.ca.location the CA of its certificate)",
                    p = self.settings.key_prefix
                ),
            )
        })?;
        Ok(Link::Tls(Box::new(tokio_rustls::TlsStream::Client(tls))))
    }
}

fn files(settings: &TlsClientSettings) -> Vec<std::path::PathBuf> {
    let mut files = vec![settings.ca.clone()];
    if let Some((certificate, key)) = &settings.identity {
        files.push(certificate.clone());
        files.push(key.clone());
    }
    files
}

/// The connector of `settings`, its files read now.
fn connector(settings: &TlsClientSettings) -> Result<TlsConnector, TlsError> {
    Ok(TlsConnector::from(Arc::new(client_config(settings)?)))
}

/// Builds the client configuration of `settings`.
fn client_config(settings: &TlsClientSettings) -> Result<ClientConfig, TlsError> {
    let mut roots = RootCertStore::empty();
    let key = |name: &str| format!("{}{name}", settings.key_prefix);
    for cert in pem::certificates(&key("ssl.ca.location"), &settings.ca)? {
        roots.add(cert).map_err(|e| TlsError::Content {
            setting: key("ssl.ca.location"),
            path: settings.ca.display().to_string(),
            problem: format!("a certificate that cannot be a CA: {e}"),
        })?;
    }
    let provider = provider();
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| {
            TlsError::Config(Failure::caused(
                format!("{}: {e}", key("ssl.ca.location")),
                e,
            ))
        })?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Config(Failure::caused(e.to_string(), e)))?;
    let builder = if settings.verify_hostname {
        builder.with_webpki_verifier(verifier)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
    };
    match &settings.identity {
        None => Ok(builder.with_no_client_auth()),
        Some((certificate, private_key)) => {
            let chain = pem::certificates(&key("ssl.certificate.location"), certificate)?;
            let private = pem::private_key(&key("ssl.key.location"), private_key)?;
            builder.with_client_auth_cert(chain, private).map_err(|e| {
                TlsError::Config(Failure::caused(
                    format!(
                        "{} with {}: {e}",
                        key("ssl.certificate.location"),
                        key("ssl.key.location")
                    ),
                    e,
                ))
            })
        }
    }
}

/// `ssl.endpoint.identification.algorithm=none`: the broker's certificate must chain to the CA
/// and be valid now, but need not name the host connected to.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
