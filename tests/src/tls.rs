//! Certificates for the TLS tests, made by `scripts/make-tls-certs.sh` (the openssl commands
//! docs/security.md shows).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Makes the test CA and certificates in `dir` (see the script for the files); returns `dir`.
pub fn make_certs(dir: &Path) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/make-tls-certs.sh");
    let status = Command::new(script)
        .arg(dir)
        .status()
        .expect("run make-tls-certs.sh");
    assert!(status.success(), "make-tls-certs.sh failed");
    dir.to_path_buf()
}
