//! The SSL listener's TLS: the server configuration built from `ssl.*` settings, the handshake
//! of each accepted connection, and certificate rotation (the files are read again when they
//! change; a change that cannot be used is logged and the previous certificates keep serving).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tributary_core::allow_list::ANONYMOUS;
use tributary_core::config::{ClientAuth, TlsServerSettings};

use super::files::Reloading;
use super::link::Link;
use super::pem;
use super::principal::subject;
use super::refusals::RefusalLog;
use super::TlsError;
use crate::failure::Failure;
use crate::tls::allow_list::AllowListFile;

/// How often the certificate, key and CA files are checked for changes.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// What a TLS listener's settings are called where the operator wrote them, for errors and
/// log lines: the broker's `ssl.*` keys, or the mirror maker's `--metrics.ssl.*` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerTlsKeys {
    /// The certificate chain's setting.
    pub certificate: &'static str,
    /// The private key's setting.
    pub key: &'static str,
    /// The client CAs' setting.
    pub ca: &'static str,
    /// The client authentication setting.
    pub client_auth: &'static str,
}

/// The broker's SSL listener (and its HTTPS metrics, which share its certificates).
pub const BROKER_KEYS: ServerTlsKeys = ServerTlsKeys {
    certificate: "ssl.certificate.location",
    key: "ssl.key.location",
    ca: "ssl.ca.location",
    client_auth: "ssl.client.auth",
};

/// The mirror maker's HTTPS metrics endpoint.
pub const MIRROR_MAKER_METRICS_KEYS: ServerTlsKeys = ServerTlsKeys {
    certificate: "--metrics.ssl.certificate.location",
    key: "--metrics.ssl.key.location",
    ca: "--metrics.ssl.ca.location",
    client_auth: "--metrics.ssl.client.auth",
};

/// The SSL listener's current TLS configuration, replaced when its files change.
pub struct ServerTls {
    settings: TlsServerSettings,
    keys: ServerTlsKeys,
    current: Reloading<TlsAcceptor>,
    /// `ssl.allow.list.location`, read.
    allow_list: Option<Arc<AllowListFile>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads the files of `settings`; an error names the setting and file that cannot be used.
    pub fn load(settings: TlsServerSettings) -> Result<Self, TlsError> {
        Self::load_for("the SSL listener's certificates", BROKER_KEYS, settings)
    }

    /// As [`ServerTls::load`], for a listener other than the broker's SSL listener; `what`
    /// names its certificates in errors and log lines (`the metrics endpoint's certificates`),
    /// `keys` the settings errors name, at load and at every reload.
    pub fn load_for(
        what: &'static str,
        keys: ServerTlsKeys,
        settings: TlsServerSettings,
    ) -> Result<Self, TlsError> {
        let current = Reloading::load(what, files(&settings), || acceptor(&settings, keys))?;
        let allow_list = match &settings.allow_list {
            Some(path) => Some(Arc::new(AllowListFile::load(path.clone())?)),
            None => None,
        };
        Ok(ServerTls {
            allow_list,
            settings,
            keys,
            current,
        })
    }

    /// The allow-list, when `ssl.allow.list.location` is set.
    pub fn allow_list(&self) -> Option<Arc<AllowListFile>> {
        self.allow_list.clone()
    }

    /// The configuration new connections get.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.current.current()
    }

    /// Reads the files again if any changed since they were last read: `Ok(true)` when new
    /// certificates now serve new connections, `Ok(false)` when nothing changed. On an error
    /// the previous certificates keep serving; the same files are not reported again, and are
    /// read again once any of them changes (a rotation may have written the certificate but
    /// not yet the key).
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        self.current
            .reload_if_changed(|| acceptor(&self.settings, self.keys))
    }
}

/// The acceptor of `settings`, its files read now.
fn acceptor(settings: &TlsServerSettings, keys: ServerTlsKeys) -> Result<TlsAcceptor, TlsError> {
    Ok(TlsAcceptor::from(Arc::new(server_config(settings, keys)?)))
}

/// The files of `settings`, in a fixed order.
fn files(settings: &TlsServerSettings) -> Vec<PathBuf> {
    let mut files = vec![settings.certificate.clone(), settings.key.clone()];
    files.extend(settings.ca.clone());
    files
}

/// The rustls provider: ring, TLS 1.2 and 1.3 (rustls implements nothing older).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the server configuration of `settings`; errors name the settings as `keys` says.
fn server_config(
    settings: &TlsServerSettings,
    keys: ServerTlsKeys,
) -> Result<ServerConfig, TlsError> {
    let chain = pem::certificates(keys.certificate, &settings.certificate)?;
    let key = pem::private_key(keys.key, &settings.key)?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Config(Failure::caused(e.to_string(), e)))?;
    let builder = match (settings.client_auth, &settings.ca) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (ClientAuth::Requested | ClientAuth::Required, None) => {
            return Err(TlsError::Config(Failure::new(format!(
                "{} asks for client certificates but {} is not set",
                keys.client_auth, keys.ca
            ))))
        }
        (auth, Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for cert in pem::certificates(keys.ca, ca)? {
                roots.add(cert).map_err(|e| TlsError::Content {
                    setting: keys.ca.into(),
                    path: ca.display().to_string(),
                    problem: format!("a certificate that cannot be a CA: {e}"),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Config(Failure::caused(format!("{}: {e}", keys.ca), e)))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(chain, key).map_err(|e| {
        TlsError::Config(Failure::caused(
            format!("{} with {}: {e}", keys.certificate, keys.key),
            e,
        ))
    })
}

/// Completes the TLS handshake of a connection accepted on a TLS listener within `timeout`,
/// with the client's principal (its certificate's subject, or `ANONYMOUS`); `None` when the
/// peer does not, or fails it (no certificate when one is required, one from an unknown CA or
/// expired, not TLS at all), said through the listener's `refusals` (a flood is summed up).
pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    acceptor: TlsAcceptor,
    stream: S,
    peer: std::net::SocketAddr,
    timeout: Duration,
    refusals: &RefusalLog,
) -> Option<(Link<S>, String)> {
    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let principal = match tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                None => ANONYMOUS.to_string(),
                Some(certificate) => match subject(certificate) {
                    Ok(subject) => subject,
                    Err(e) => {
                        refusals.refused(peer, format_args!("closing: {e}"));
                        return None;
                    }
                },
            };
            tracing::debug!("{peer}: TLS session of {principal}");
            Some((
                Link::Tls(Box::new(tokio_rustls::TlsStream::Server(tls))),
                principal,
            ))
        }
        Ok(Err(e)) => {
            refusals.refused(peer, format_args!("TLS handshake refused: {e}"));
            None
        }
        Err(_) => {
            refusals.refused(
                peer,
                format_args!("closing: TLS handshake not completed within {timeout:?}"),
            );
            None
        }
    }
}

/// Checks the files every [`RELOAD_CHECK_INTERVAL`] until `stop` changes or its sender is
/// dropped, logging each rotation and each change that cannot be used; `what` names the
/// listener in those lines (`SSL listener`, `metrics endpoint`).
pub async fn watch_files<E: crate::env::Env>(
    env: E,
    tls: Arc<ServerTls>,
    what: &'static str,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(RELOAD_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: the files were just read.
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        let checked = tls.clone();
        if let Some(rules) = tls.allow_list() {
            match env.blocking(move || rules.reload_if_changed()).await {
                Ok(true) => tracing::info!("{what}: the allow-list was read again; its rules are in force"),
                Ok(false) => {}
                Err(e) => tracing::error!("{what}: the changed allow-list cannot be used ({e}); the previous rules stay in force"),
            }
        }
        match env.blocking(move || checked.reload_if_changed()).await {
            Ok(true) => tracing::info!(
                "{what}: certificates read again from {} (rotation); new connections use them",
                tls.settings.certificate.display()
            ),
            Ok(false) => {}
            Err(e) => tracing::error!(
                "{what}: the changed certificate files cannot be used ({e}); the previous certificates keep serving"
            ),
        }
    }
}
