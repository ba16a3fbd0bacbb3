//! Reading certificates and keys from PEM files, with errors that name the setting and the
//! file.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsError;

/// The most bytes read from one PEM file: a certificate chain or key is a few KiB; a setting
/// pointing at something huge (a log, a device) is refused instead of read into memory.
pub const PEM_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// Reads `path` (named by `setting` in errors), at most [`PEM_FILE_BYTES_MAX`] bytes.
pub fn read_file(setting: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let read_error = |source| TlsError::Read {
        setting: setting.to_string(),
        path: path.display().to_string(),
        source,
    };
    let len = std::fs::metadata(path).map_err(read_error)?.len();
    if len > PEM_FILE_BYTES_MAX {
        return Err(TlsError::Content {
            setting: setting.to_string(),
            path: path.display().to_string(),
            problem: format!(
                "{len} bytes is more than a certificate, key or allow-list holds (at most {PEM_FILE_BYTES_MAX})"
            ),
        });
    }
    std::fs::read(path).map_err(read_error)
}

/// Every certificate in the PEM file at `path`; at least one.
pub fn certificates(setting: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_file(setting, path)?;
    let content = |problem: String| TlsError::Content {
        setting: setting.to_string(),
        path: path.display().to_string(),
        problem,
    };
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| content(format!("not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(content(
            "holds no certificate (expected -----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

/// The private key in the PEM file at `path` (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(setting: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_file(setting, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Content {
        setting: setting.to_string(),
        path: path.display().to_string(),
        problem: format!(
            "holds no usable private key (expected -----BEGIN PRIVATE KEY----- or an RSA/EC key): {e}"
        ),
    })
}
