//! The broker's listeners: binding them, and one accept routine for both — admission (the
//! connection limit, the per-address quotas, the TLS handshake permits), the TLS handshake on
//! the SSL listener, and one place that spawns a connection's task. A failing accept backs off
//! (doubling from 10 ms to 1 s, reset by the next connection) instead of spinning.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinError, JoinSet};
use tributary_core::config::{BrokerConfig, ListenerProtocol};
use tributary_core::connection_quota::ConnectionQuotas;

use super::access::Access;
use super::connection::{self, Shared};
use super::limits::{CONNECTIONS_MAX, SHUTDOWN_GRACE, TLS_HANDSHAKES_MAX, TLS_HANDSHAKE_TIMEOUT};
use super::{BrokerError, StartError};
use crate::env::{Env, Listener};
use crate::metrics::broker::BrokerMeter;
use crate::tls::link::Link;
use crate::tls::refusals::RefusalLog;
use crate::tls::server::ServerTls;

/// The first pause after a failed accept; it doubles with each failure in a row.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest pause after failed accepts.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
const _: () = assert!(ACCEPT_BACKOFF_MIN.as_millis() < ACCEPT_BACKOFF_MAX.as_millis());

/// The pause after a failed accept: [`ACCEPT_BACKOFF_MIN`], doubling with each failure in a
/// row up to [`ACCEPT_BACKOFF_MAX`], back to the least once a connection comes.
#[derive(Debug, Clone, Copy)]
struct AcceptBackoff {
    next: Duration,
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        AcceptBackoff {
            next: ACCEPT_BACKOFF_MIN,
        }
    }
}

impl AcceptBackoff {
    /// An accept failed: how long to pause.
    fn failed(&mut self) -> Duration {
        let pause = self.next;
        self.next = (pause * 2).min(ACCEPT_BACKOFF_MAX);
        pause
    }

    /// A connection came: the next failure pauses the least again.
    fn succeeded(&mut self) {
        self.next = ACCEPT_BACKOFF_MIN;
    }
}

/// Which listener a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The plaintext listener: served as it comes.
    Plaintext,
    /// The SSL listener: served after its TLS handshake.
    Ssl,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plaintext => "the plaintext listener",
            Kind::Ssl => "the SSL listener",
        }
    }
}

/// Admits accepted connections and runs each in a task of its own; the tasks end with their
/// client's address, for the quotas.
pub(super) struct Acceptor<E: Env> {
    shared: Arc<Shared<E>>,
    stop: watch::Receiver<bool>,
    meter: BrokerMeter,
    tls: Option<Arc<ServerTls>>,
    handshakes: Arc<Semaphore>,
    refusals: Arc<RefusalLog>,
    quotas: ConnectionQuotas,
    /// The last seed handed to a connection (each gets the next of a fixed sequence).
    seeds: u64,
    /// The pause after the next failed accept, per listener.
    backoff: [AcceptBackoff; 2],
    /// Every connection's task.
    pub(super) connections: JoinSet<IpAddr>,
}

impl<E: Env> Acceptor<E> {
    /// An acceptor for `shared`'s broker; its connections stop on `stop`.
    pub(super) fn new(
        env: &E,
        config: &BrokerConfig,
        shared: Arc<Shared<E>>,
        tls: Option<Arc<ServerTls>>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let meter = shared.handler.meter().clone();
        Acceptor {
            shared,
            stop,
            meter,
            tls,
            handshakes: Arc::new(Semaphore::new(TLS_HANDSHAKES_MAX)),
            refusals: Arc::new(RefusalLog::new("SSL listener")),
            quotas: ConnectionQuotas::new(
                config.max_connections_per_ip,
                config.max_connections_per_ip_overrides.clone(),
            ),
            seeds: env.rng_seed(),
            backoff: [AcceptBackoff::default(); 2],
            connections: JoinSet::new(),
        }
    }

    /// What an accept on `kind`'s listener gave: a connection to admit, or a failure to back
    /// off from.
    pub(super) async fn accepted(
        &mut self,
        kind: Kind,
        accepted: std::io::Result<(E::Stream, SocketAddr)>,
    ) {
        let backoff = &mut self.backoff[kind as usize];
        match accepted {
            Ok((stream, peer)) => {
                backoff.succeeded();
                self.admit(kind, stream, peer);
            }
            Err(e) => {
                let pause = backoff.failed();
                tracing::warn!(
                    "accept failed on {}: {e}; trying again in {pause:?}",
                    kind.name()
                );
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// A connection task ended: its address leaves the quotas. A task that panicked is the
    /// broker's failure.
    pub(super) fn closed(&mut self, joined: Result<IpAddr, JoinError>) -> Result<(), BrokerError> {
        self.meter.connections(self.connections.len());
        let ip = joined.map_err(|e| BrokerError::from_join("a connection task", e))?;
        self.quotas.closed(ip);
        Ok(())
    }

    /// Serves `stream` from `peer` if it is admitted (see [`admitted`]); on the SSL listener
    /// only with a handshake permit, after the handshake.
    fn admit(&mut self, kind: Kind, stream: E::Stream, peer: SocketAddr) {
        if !admitted(&mut self.quotas, peer, self.connections.len(), &self.meter) {
            return;
        }
        match kind {
            Kind::Plaintext => {
                let seed = self.next_seed();
                let serving = connection::serve(
                    Link::Plain(stream),
                    peer,
                    Access::unrestricted(),
                    self.shared.clone(),
                    self.stop.clone(),
                    seed,
                );
                self.spawn_connection(peer, serving);
            }
            Kind::Ssl => {
                let Ok(handshake) = self.handshakes.clone().try_acquire_owned() else {
                    self.quotas.closed(peer.ip());
                    self.meter.connection_refused("tls_handshakes");
                    tracing::warn!(
                        "{peer}: refused: {TLS_HANDSHAKES_MAX} TLS handshakes already in progress"
                    );
                    return;
                };
                let seed = self.next_seed();
                let (shared, stop) = (self.shared.clone(), self.stop.clone());
                let acceptor = self.tls.as_ref().map(|t| t.acceptor());
                let rules = self.tls.as_ref().and_then(|t| t.allow_list());
                let refusals = self.refusals.clone();
                self.spawn_connection(peer, async move {
                    let Some(acceptor) = acceptor else { return };
                    let link = crate::tls::server::handshake(
                        acceptor,
                        stream,
                        peer,
                        TLS_HANDSHAKE_TIMEOUT,
                        &refusals,
                    )
                    .await;
                    drop(handshake);
                    let Some((link, principal)) = link else {
                        return;
                    };
                    let access = Access::of(principal, rules);
                    connection::serve(link, peer, access, shared, stop, seed).await;
                });
            }
        }
    }

    /// The next connection's seed.
    fn next_seed(&mut self) -> u64 {
        self.seeds = self
            .seeds
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.seeds
    }

    /// Runs one connection (`serving`) in a task of its own, which ends with its client's
    /// address.
    fn spawn_connection(
        &mut self,
        peer: SocketAddr,
        serving: impl Future<Output = ()> + Send + 'static,
    ) {
        self.connections.spawn(async move {
            serving.await;
            peer.ip()
        });
        self.meter.connections(self.connections.len());
    }
}

/// One bound listener.
pub(super) struct Bound<L> {
    listener: L,
    pub(super) addr: SocketAddr,
}

/// The broker's listeners (at least one of the two).
pub(super) struct BoundListeners<L> {
    pub(super) plaintext: Option<Bound<L>>,
    /// With the TLS configuration its connections get.
    pub(super) ssl: Option<Bound<L>>,
    pub(super) tls: Option<Arc<ServerTls>>,
}

impl<L> BoundListeners<L> {
    /// The plaintext listener's address, else the SSL listener's.
    pub(super) fn addr(&self) -> SocketAddr {
        match (&self.plaintext, &self.ssl) {
            (Some(p), _) => p.addr,
            (None, Some(s)) => s.addr,
            // `listeners` is never empty (checked when the configuration is read).
            (None, None) => unreachable!("a broker with no listener"),
        }
    }
}

/// Binds every listener of `config.listeners`.
pub(super) async fn bind_listeners<E: Env>(
    env: &E,
    config: &BrokerConfig,
    tls: Option<Arc<ServerTls>>,
) -> Result<BoundListeners<E::Listener>, StartError> {
    let mut bound = BoundListeners {
        plaintext: None,
        ssl: None,
        tls,
    };
    for spec in &config.listeners.specs {
        let host = spec.host.clone().unwrap_or_else(|| "0.0.0.0".into());
        let bind_addr = format!("{host}:{}", spec.port);
        let listen_error = |source| StartError::Listen {
            addr: format!("{bind_addr} ({})", spec.protocol),
            source,
        };
        let listener = env
            .bind(
                &host,
                spec.port,
                config.socket_send_buffer_bytes,
                config.socket_receive_buffer_bytes,
            )
            .await
            .map_err(listen_error)?;
        let addr = listener.local_addr().map_err(listen_error)?;
        let slot = match spec.protocol {
            ListenerProtocol::Plaintext => &mut bound.plaintext,
            ListenerProtocol::Ssl => &mut bound.ssl,
        };
        *slot = Some(Bound { listener, addr });
    }
    assert!(
        bound.plaintext.is_some() || bound.ssl.is_some(),
        "a broker with no listener"
    );
    assert_eq!(
        bound.ssl.is_some(),
        bound.tls.is_some(),
        "an SSL listener without TLS settings, or settings without the listener"
    );
    Ok(bound)
}

/// Whether a connection just accepted from `peer` may be served: the broker holds fewer than
/// [`CONNECTIONS_MAX`] (`open`) and `peer`'s address is within its limit (counted in `quotas`
/// when admitted). A refused one is dropped by the caller, which closes it.
fn admitted(
    quotas: &mut ConnectionQuotas,
    peer: SocketAddr,
    open: usize,
    meter: &BrokerMeter,
) -> bool {
    if open >= CONNECTIONS_MAX {
        meter.connection_refused("connections_max");
        tracing::warn!("{peer}: refused: {CONNECTIONS_MAX} connections already open");
        return false;
    }
    match quotas.admit(peer.ip()) {
        Ok(()) => true,
        Err(refused) => {
            meter.connection_refused("per_ip");
            if refused.first {
                tracing::warn!(
                    "{}: connections refused: it holds its limit of {} (max.connections.per.ip or its override); said again once it has room",
                    refused.ip,
                    refused.limit
                );
            }
            false
        }
    }
}

/// The next connection on `listener`; pending forever without one.
pub(super) async fn accept_on<L: Listener>(
    listener: &mut Option<Bound<L>>,
) -> std::io::Result<(L::Stream, SocketAddr)> {
    match listener {
        Some(bound) => bound.listener.accept().await,
        None => std::future::pending().await,
    }
}

impl<E: Env> Acceptor<E> {
    /// Waits for the connections to finish what they are doing (they were told to stop), at
    /// most [`SHUTDOWN_GRACE`]; then closes those still busy and waits until none can append
    /// any more. A connection task that panicked is the broker's failure, unless it has one.
    pub(super) async fn drain(&mut self, failure: &mut Option<BrokerError>) {
        tracing::info!(
            "shutting down: waiting for {} connections",
            self.connections.len()
        );
        let connections = &mut self.connections;
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while let Some(joined) = connections.join_next().await {
                if let Err(e) = joined {
                    failure.get_or_insert(BrokerError::from_join("a connection task", e));
                }
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                "{} connections still busy after {SHUTDOWN_GRACE:?}: closing them",
                self.connections.len()
            );
            self.connections.abort_all();
            // An aborted task stops only at its next await: wait until none can append any more.
            while let Some(joined) = self.connections.join_next().await {
                if let Err(e) = joined {
                    if e.is_panic() {
                        failure.get_or_insert(BrokerError::from_join("a connection task", e));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Failing accepts pause longer and longer, never past the most, and a connection resets
    /// the pause: a listener that keeps failing (out of file descriptors) neither spins nor
    /// stalls for long.
    #[test]
    fn failing_accepts_back_off_up_to_a_bound_and_a_connection_resets_it() {
        let mut backoff = AcceptBackoff::default();
        let pauses: Vec<Duration> = (0..10).map(|_| backoff.failed()).collect();
        assert_eq!(pauses[0], ACCEPT_BACKOFF_MIN);
        assert!(pauses.windows(2).all(|w| w[1] >= w[0]), "{pauses:?}");
        assert_eq!(pauses[9], ACCEPT_BACKOFF_MAX);
        backoff.succeeded();
        assert_eq!(backoff.failed(), ACCEPT_BACKOFF_MIN);
    }
}
