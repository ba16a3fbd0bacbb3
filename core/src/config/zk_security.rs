//! How a ZooKeeper session is secured: TLS to ZooKeeper's `secureClientPort`
//! (`zk.ssl.client.enable` and `zk.ssl.*`, Kafka 2.5's `zookeeper.ssl.*` names with 0.7's `zk.`
//! prefix), the session's identity (`zk.auth.digest.location`, or the TLS certificate), and
//! whether the nodes it creates are protected (`zk.set.acl`, Kafka's `zookeeper.set.acl`).

use std::path::PathBuf;

use super::error::ConfigError;
use super::fields::Fields;
use super::tls_client::certificate_and_key;

/// TLS to ZooKeeper. Its certificate must chain to `ca` and name the host `zk.connect` names
/// (there is no setting to skip the name: a session carries every offset and registration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkTls {
    /// The CA certificates (PEM) ZooKeeper's certificate must chain to.
    pub ca: PathBuf,
    /// This session's certificate and key (PEM), for a ZooKeeper that asks for one; with
    /// ZooKeeper's x509 provider its subject is the session's identity (`x509:<subject>`).
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// The security of one ZooKeeper session; the default is 0.7's: plaintext, no identity, every
/// node created open to anyone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZkSecurity {
    /// TLS, when `zk.ssl.client.enable=true`.
    pub tls: Option<ZkTls>,
    /// A file holding `user:password`, ZooKeeper's digest identity for the session.
    pub digest: Option<PathBuf>,
    /// Nodes this session creates get ACLs: everything for the identities it authenticated
    /// with, read for anyone (`/consumers` itself also lets anyone create, so 0.7 consumers can
    /// make groups of their own). Needs an identity.
    pub set_acl: bool,
}

impl ZkSecurity {
    /// Whether anything differs from 0.7's plaintext, open sessions.
    pub fn is_plain(&self) -> bool {
        self == &ZkSecurity::default()
    }
}

/// The key names of one set of ZooKeeper security settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ZkSecurityKeys {
    enable: &'static str,
    ca: &'static str,
    certificate: &'static str,
    key: &'static str,
    digest: &'static str,
    /// `None` where nodes are never created (a replica's source).
    set_acl: Option<&'static str>,
}

/// The keys beside `zk.connect`.
pub(crate) const ZK_KEYS: ZkSecurityKeys = ZkSecurityKeys {
    enable: "zk.ssl.client.enable",
    ca: "zk.ssl.ca.location",
    certificate: "zk.ssl.certificate.location",
    key: "zk.ssl.key.location",
    digest: "zk.auth.digest.location",
    set_acl: Some("zk.set.acl"),
};

/// The keys beside `replica.source.zk.connect` (the source cluster's ZooKeeper, only read).
pub(crate) const REPLICA_SOURCE_KEYS: ZkSecurityKeys = ZkSecurityKeys {
    enable: "replica.source.zk.ssl.client.enable",
    ca: "replica.source.zk.ssl.ca.location",
    certificate: "replica.source.zk.ssl.certificate.location",
    key: "replica.source.zk.ssl.key.location",
    digest: "replica.source.zk.auth.digest.location",
    set_acl: None,
};

/// Reads one set of ZooKeeper security settings; an error names the key that is wrong.
pub(crate) fn read(f: &mut Fields<'_>, keys: ZkSecurityKeys) -> Result<ZkSecurity, ConfigError> {
    let enabled = f.bool(keys.enable, false)?;
    let ca = f.string(keys.ca).map(PathBuf::from);
    let certificate = f.string(keys.certificate).map(PathBuf::from);
    let key = f.string(keys.key).map(PathBuf::from);
    let digest = f.string(keys.digest).map(PathBuf::from);
    let set_acl = match keys.set_acl {
        Some(set_acl) => f.bool(set_acl, false)?,
        None => false,
    };
    let tls = match enabled {
        false => {
            if let Some(named) = [
                (keys.ca, &ca),
                (keys.certificate, &certificate),
                (keys.key, &key),
            ]
            .into_iter()
            .find_map(|(name, value)| value.as_ref().map(|_| name))
            {
                // Refused rather than warned: an operator who named ZooKeeper's CA meant the
                // session to be encrypted, and plaintext credentials must not go out unnoticed.
                return Err(f.error(
                    named,
                    format!(
                        "is set but {} is false: set it to true to use TLS",
                        keys.enable
                    ),
                ));
            }
            None
        }
        true => {
            let Some(ca) = ca else {
                return Err(f.error(
                    keys.ca,
                    format!(
                        "{}=true needs the CA certificates (a PEM file) ZooKeeper's certificate chains to",
                        keys.enable
                    ),
                ));
            };
            let identity =
                certificate_and_key(f, (keys.certificate, certificate), (keys.key, key))?;
            Some(ZkTls { ca, identity })
        }
    };
    let has_identity = digest.is_some() || tls.as_ref().is_some_and(|t| t.identity.is_some());
    if set_acl && !has_identity {
        return Err(f.error(
            keys.set_acl.unwrap_or(keys.enable),
            format!(
                "true needs an identity for ZooKeeper to give the nodes to: {} (a user:password file) or {} with {}=true",
                keys.digest, keys.certificate, keys.enable
            ),
        ));
    }
    Ok(ZkSecurity {
        tls,
        digest,
        set_acl,
    })
}

/// Reads the ZooKeeper security keys of a tool's `--zk-tls-config-file` (the `zk.*` keys above,
/// as in a consumer's file; other keys are logged as unknown).
pub fn read_zk_security(props: &super::Properties) -> Result<ZkSecurity, ConfigError> {
    let mut f = Fields::new(props, super::ConfigKind::Consumer);
    let security = read(&mut f, ZK_KEYS)?;
    let _logged = f.warn_unknown();
    Ok(security)
}

/// A digest identity as read from its file: `user:password` on the first line.
#[derive(Clone, PartialEq, Eq)]
pub struct DigestIdentity {
    /// The user name.
    pub user: String,
    /// `user:password`, as ZooKeeper's digest scheme takes it.
    pub credentials: String,
}

impl std::fmt::Debug for DigestIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password: this may be logged.
        f.debug_struct("DigestIdentity")
            .field("user", &self.user)
            .finish()
    }
}

/// What is wrong with a digest file's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// No `user:password` line.
    #[error("expected user:password on its first line, found no ':'")]
    NoColon,
    /// An empty user or password.
    #[error("expected user:password with neither empty")]
    Empty,
}

/// Parses a digest file's text: its first line, `user:password` (the password may hold ':').
pub fn parse_digest(text: &str) -> Result<DigestIdentity, DigestError> {
    let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
    let (user, password) = line.split_once(':').ok_or(DigestError::NoColon)?;
    if user.is_empty() || password.is_empty() {
        return Err(DigestError::Empty);
    }
    Ok(DigestIdentity {
        user: user.to_string(),
        credentials: line.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::{ConfigKind, Properties};

    fn read_text(text: &str) -> Result<ZkSecurity, String> {
        let props = Properties::parse_bytes("t.properties", text.as_bytes()).unwrap();
        let mut f = Fields::new(&props, ConfigKind::Broker);
        read(&mut f, ZK_KEYS).map_err(|e| e.to_string())
    }

    #[test]
    fn unset_is_zero_seven_plain() {
        let security = read_text("").unwrap();
        assert!(security.is_plain());
    }

    #[test]
    fn tls_with_identity_and_acls() {
        let security = read_text(
            "zk.ssl.client.enable=true\nzk.ssl.ca.location=/c/ca.pem\nzk.ssl.certificate.location=/c/z.pem\nzk.ssl.key.location=/c/z.key\nzk.set.acl=true\n",
        )
        .unwrap();
        let tls = security.tls.as_ref().unwrap();
        assert_eq!(tls.ca, PathBuf::from("/c/ca.pem"));
        assert!(tls.identity.is_some());
        assert!(security.set_acl);
        assert!(!security.is_plain());
    }

    #[test]
    fn every_wrong_combination_names_its_key() {
        for (text, key, says) in [
            ("zk.ssl.client.enable=true\n", "zk.ssl.ca.location", "needs the CA"),
            ("zk.ssl.ca.location=/ca.pem\n", "zk.ssl.ca.location", "is false"),
            (
                "zk.ssl.client.enable=true\nzk.ssl.ca.location=/a\nzk.ssl.certificate.location=/c\n",
                "zk.ssl.key.location",
                "private key",
            ),
            (
                "zk.ssl.client.enable=true\nzk.ssl.ca.location=/a\nzk.ssl.key.location=/k\n",
                "zk.ssl.certificate.location",
                "certificate too",
            ),
            ("zk.set.acl=true\n", "zk.set.acl", "needs an identity"),
            (
                "zk.ssl.client.enable=true\nzk.ssl.ca.location=/a\nzk.set.acl=true\n",
                "zk.set.acl",
                "needs an identity",
            ),
            ("zk.ssl.client.enable=yes please\n", "zk.ssl.client.enable", ""),
        ] {
            let error = read_text(text).unwrap_err();
            assert!(
                error.contains(key) && error.contains(says),
                "{text:?}: {error}"
            );
        }
    }

    #[test]
    fn digest_alone_allows_acls() {
        let security =
            read_text("zk.auth.digest.location=/etc/t/zk.digest\nzk.set.acl=true\n").unwrap();
        assert_eq!(security.digest, Some(PathBuf::from("/etc/t/zk.digest")));
        assert!(security.tls.is_none());
    }

    #[test]
    fn digest_files() {
        let identity = parse_digest("tributary:s3cr:et\nignored\n").unwrap();
        assert_eq!(identity.user, "tributary");
        assert_eq!(identity.credentials, "tributary:s3cr:et");
        assert!(!format!("{identity:?}").contains("s3cr"));
        assert_eq!(parse_digest("no colon"), Err(DigestError::NoColon));
        assert_eq!(parse_digest(":pw"), Err(DigestError::Empty));
        assert_eq!(parse_digest("user:"), Err(DigestError::Empty));
        assert_eq!(parse_digest(""), Err(DigestError::NoColon));
        assert_eq!(parse_digest("u:p\r\n").unwrap().credentials, "u:p");
    }
}
