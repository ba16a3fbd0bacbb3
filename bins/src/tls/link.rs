//! A connection that is plain TCP or TLS over it: one type for the broker's connection code and
//! the clients, whichever listener or setting it came from.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection, plain or inside TLS.
#[derive(Debug)]
pub enum Link<S> {
    /// Bytes as they are (0.7's protocol on a plaintext listener).
    Plain(S),
    /// Bytes inside a TLS session whose handshake has finished.
    Tls(Box<tokio_rustls::TlsStream<S>>),
}

impl<S> Link<S> {
    /// Whether the connection is inside TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Link::Tls(_))
    }
}

/// Alerts by which a peer says it refused this side's certificate (or, with TLS 1.3, its
/// refusal of the client's certificate arrives after the client's handshake has ended, with
/// the first read).
fn refuses_certificate(alert: rustls::AlertDescription) -> bool {
    use rustls::AlertDescription as A;
    matches!(
        alert,
        A::UnknownCA
            | A::BadCertificate
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::CertificateUnknown
            | A::CertificateRequired
            | A::UnsupportedCertificate
            | A::AccessDenied
    )
}

/// `error` with what to do, when it says the peer refused this side's certificate.
fn explained<S>(stream: &tokio_rustls::TlsStream<S>, error: io::Error) -> io::Error {
    let alert = match error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::AlertReceived(alert)) if refuses_certificate(*alert) => *alert,
        _ => return error,
    };
    let why = match stream {
        tokio_rustls::TlsStream::Client(_) => format!(
            "the broker refused this client's TLS certificate (alert {alert:?}): ssl.certificate.location must hold a current certificate signed by a CA in the broker's ssl.ca.location"
        ),
        tokio_rustls::TlsStream::Server(_) => format!(
            "the client refused the broker's TLS certificate (alert {alert:?}): its ssl.ca.location must hold the CA of the broker's ssl.certificate.location"
        ),
    };
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Link<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Link::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Link::Tls(s) => match Pin::new(s.as_mut()).poll_read(cx, buf) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(explained(s, e))),
                other => other,
            },
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Link<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Link::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Link::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Link::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Link::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Link::Plain(s) => s.is_write_vectored(),
            Link::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Link::Plain(s) => Pin::new(s).poll_flush(cx),
            Link::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Link::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Link::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
