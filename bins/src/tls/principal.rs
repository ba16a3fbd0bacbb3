//! The principal of a client on the SSL listener: its certificate's subject, written as
//! RFC 4514 does (most specific first, `CN=mirror-west,O=Example`), as Kafka names SSL
//! principals; [`ANONYMOUS`](tributary_core::allow_list::ANONYMOUS) without a certificate.

use rustls::pki_types::CertificateDer;
use x509_parser::objects::{oid2abbrev, oid_registry};

/// A client certificate that does not parse as X.509.
#[derive(Debug, thiserror::Error)]
#[error("the client certificate cannot be read: {0}")]
pub struct UnreadableCertificate(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>);

/// The subject of `certificate` (already verified by the handshake) as RFC 4514 writes it;
/// an error says why it cannot be read.
pub fn subject(certificate: &CertificateDer<'_>) -> Result<String, UnreadableCertificate> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(certificate.as_ref()).map_err(UnreadableCertificate)?;
    let registry = oid_registry();
    let mut rdns = Vec::new();
    // RFC 4514: the last RDN of the sequence first.
    for rdn in cert.subject().iter().collect::<Vec<_>>().into_iter().rev() {
        let mut parts = Vec::new();
        for attribute in rdn.iter() {
            let oid = attribute.attr_type();
            let name = oid2abbrev(oid, registry)
                .map(str::to_string)
                .unwrap_or_else(|_| oid.to_id_string());
            let value = attribute
                .as_str()
                .map(escape)
                .unwrap_or_else(|_| format!("#{}", hex(attribute.attr_value().data)));
            parts.push(format!("{name}={value}"));
        }
        rdns.push(parts.join("+"));
    }
    Ok(rdns.join(","))
}

/// RFC 4514's escaping of a string value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
            || (i == 0 && matches!(c, '#' | ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        if c.is_control() {
            out.push_str(&format!("\\{:02x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_as_rfc_4514_says() {
        assert_eq!(escape("mirror-west"), "mirror-west");
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape(" x "), "\\ x\\ ");
        assert_eq!(escape("#1"), "\\#1");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [&b""[..], b"\x30", b"\x30\x82\xff\xff", &[0u8; 64]] {
            assert!(subject(&CertificateDer::from(bytes.to_vec())).is_err());
        }
    }
}
