//! TLS for the links Tributary makes and accepts: the stream that is either plain or TLS
//! ([`link::Link`]), and the SSL listener's certificates, loaded from PEM files and loaded again
//! when they change ([`server::ServerTls`]).
//!
//! TLS is below what the simulator models (turmoil carries bytes; rustls draws its randomness
//! from the operating system), so simulated brokers listen in plaintext only: the same code
//! runs, with [`link::Link::Plain`] on every connection.

pub mod allow_list;
pub mod client;
pub mod endpoints;
pub mod env;
pub mod files;
pub mod link;
pub mod pem;
pub mod principal;
pub mod refusals;
pub mod server;

use crate::failure::Failure;

/// Why TLS settings could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("{setting}={path}: cannot read it: {source}")]
    Read {
        /// The setting naming the file.
        setting: String,
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A PEM file holds nothing usable for its setting.
    #[error("{setting}={path}: {problem}")]
    Content {
        /// The setting naming the file.
        setting: String,
        /// The file.
        path: String,
        /// What is wrong, and what would be right.
        problem: String,
    },
    /// rustls refused the certificates or key together (e.g. a key that is not the
    /// certificate's).
    #[error("the TLS settings cannot be used together: {0}")]
    Config(#[source] Failure),
}
