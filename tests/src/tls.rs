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

/// `GET /metrics` over HTTPS (Python's ssl), trusting `ca` and presenting `identity` (a
/// certificate and key) if given: the body, or the error Python gave.
pub fn https_metrics(
    port: u16,
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<String, String> {
    let load = match identity {
        Some((cert, key)) => format!(
            "ctx.load_cert_chain({:?}, {:?})",
            cert.display().to_string(),
            key.display().to_string()
        ),
        None => String::new(),
    };
    let program = format!(
        "import ssl, urllib.request\nctx = ssl.create_default_context(cafile={:?})\n{load}\n\
         print(urllib.request.urlopen('https://127.0.0.1:{port}/metrics', context=ctx, timeout=10).read().decode())\n",
        ca.display().to_string()
    );
    let out = Command::new("python3")
        .args(["-c", &program])
        .output()
        .expect("run python3");
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}
