//! A real ZooKeeper session's security, from [`ZkSecurity`]: TLS options for the
//! `zookeeper-client` crate, the digest identity, and the ACLs given to the nodes it creates.

use std::path::Path;

use tributary_core::config::{parse_digest, ZkConnect, ZkSecurity};
use zookeeper_client as zk;

use super::CoordError;

/// What a session is opened with.
pub(super) struct SessionSecurity {
    /// TLS to every server, when set.
    pub tls: Option<zk::TlsOptions>,
    /// `user:password` for the digest scheme, when set.
    pub digest: Option<String>,
    /// Whether created nodes get [`acls_for`]'s ACLs (else anyone may do anything, as 0.7).
    pub set_acl: bool,
}

/// Reads the files `connect.security` names; an error names the file and what it is for.
pub(super) fn load(connect: &ZkConnect) -> Result<SessionSecurity, CoordError> {
    let security: &ZkSecurity = &connect.security;
    let tls = match &security.tls {
        None => None,
        Some(settings) => {
            for server in &connect.servers {
                // The crate would panic on a name TLS cannot check; say so here instead. It
                // takes an IPv6 address in brackets and strips them, as this check does.
                let host = server.host.trim_start_matches('[').trim_end_matches(']');
                if rustls::pki_types::ServerName::try_from(host).is_err() {
                    return Err(CoordError::Settings(format!(
                        "ZooKeeper server \"{}\" is not a host name or address TLS can verify",
                        server.host
                    )));
                }
            }
            install_crypto_provider();
            let ca = read("ZooKeeper's CA certificates", &settings.ca)?;
            let mut options = zk::TlsOptions::new()
                .with_pem_ca(&ca)
                .map_err(|e| unusable("ZooKeeper's CA certificates", &settings.ca, e))?;
            if let Some((certificate, key)) = &settings.identity {
                let chain = read("the ZooKeeper certificate", certificate)?;
                let private = read("the ZooKeeper certificate's key", key)?;
                options = options
                    .with_pem_identity(&chain, &private)
                    .map_err(|e| unusable("the ZooKeeper certificate or key", certificate, e))?;
            }
            Some(options)
        }
    };
    let digest = match &security.digest {
        None => None,
        Some(path) => {
            let text = read("the ZooKeeper digest credentials", path)?;
            let identity = parse_digest(&text).map_err(|e| {
                CoordError::Settings(format!(
                    "ZooKeeper digest credentials {}: {e}",
                    path.display()
                ))
            })?;
            Some(identity.credentials)
        }
    };
    Ok(SessionSecurity {
        tls,
        digest,
        set_acl: security.set_acl,
    })
}

/// Parents in which other identities create children, so anyone may create in them (each
/// child is then its creator's): `/consumers` (a 0.7 consumer's own group; a mirror's group in
/// its source cluster) and `/cluster/origins` (a mirror's origin records; brokers make it at
/// registration). `/cluster` itself is not open: nobody but the cluster's identity may create
/// `/cluster/id`. docs/security.md lists the layout.
const OPEN_PARENTS: [&str; 2] = ["/consumers", tributary_core::origin::ORIGINS_PATH];

/// The ACLs of a node created at `path` (below the chroot) with `zk.set.acl=true`: everything
/// for the identities the session authenticated with, read for anyone, and create for anyone
/// in [`OPEN_PARENTS`].
pub(super) fn acls_for(path: &str) -> Vec<zk::Acl> {
    let anyone = match OPEN_PARENTS.contains(&path) {
        true => zk::Permission::READ | zk::Permission::CREATE,
        false => zk::Permission::READ,
    };
    vec![
        zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed()),
        zk::Acl::new(anyone, zk::AuthId::anyone()),
    ]
}

/// rustls needs one process-wide provider once two are compiled in (the crate's default and
/// Tributary's ring): ring, as everywhere in Tributary.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err means another thread installed one first; any installed provider will do.
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
    }
}

fn read(what: &str, path: &Path) -> Result<String, CoordError> {
    std::fs::read_to_string(path)
        .map_err(|e| CoordError::Settings(format!("{what} ({}): {e}", path.display())))
}

fn unusable(what: &str, path: &Path, error: zk::Error) -> CoordError {
    CoordError::Settings(format!("{what} ({}): {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_shared_parents_let_anyone_create() {
        let anyone = |path: &str| {
            acls_for(path)
                .into_iter()
                .find(|acl| acl.scheme() == "world")
                .map(|acl| acl.permission())
        };
        for open in OPEN_PARENTS {
            assert_eq!(
                anyone(open),
                Some(zk::Permission::READ | zk::Permission::CREATE)
            );
        }
        for closed in [
            "/brokers",
            "/brokers/ids/0",
            "/cluster",
            "/cluster/id",
            "/tributary/promoted",
            "/consumers/g",
        ] {
            assert_eq!(anyone(closed), Some(zk::Permission::READ), "{closed}");
        }
        assert!(acls_for("/brokers/ids/0")
            .iter()
            .any(|acl| acl.scheme() == "auth" && acl.permission() == zk::Permission::ALL));
    }
}
