//! Where a broker's SSL listener is: clients learn brokers from `/brokers/ids/<id>` (0.7's
//! registration, the plaintext listener's address) or from a `broker.list`; a client with
//! `security.protocol=ssl` looks the address up here, in the endpoints brokers register in
//! `/tributary/endpoints/<id>`, and connects to the SSL listener instead.

use std::collections::BTreeMap;
use std::time::Duration;

use tributary_core::config::{parse_endpoints, ListenerProtocol, ZkConnect};
use tributary_core::zk_layout::BROKER_ENDPOINTS_PATH;

use crate::coordination::{CoordError, Coordination};
use crate::env::Env;

/// How long what was read stays trusted before a lookup reads ZooKeeper again.
const REREAD_AFTER: Duration = Duration::from_secs(30);
/// The least time between two reads when a lookup finds nothing (an address no broker
/// registered, e.g. an SSL port given directly in a broker list).
const MISS_REREAD_MIN: Duration = Duration::from_secs(1);
/// The most endpoints kept (a cluster's brokers, each under each of its addresses).
const ENDPOINTS_MAX: usize = 65_536;

/// Every registered address of each broker with an SSL listener, mapped to that listener.
pub struct EndpointBook {
    zk: ZkConnect,
    session_timeout: Duration,
    connection_timeout: Duration,
    state: tokio::sync::Mutex<BookState>,
}

#[derive(Default)]
struct BookState {
    ssl_of: BTreeMap<(String, u16), (String, u16)>,
    read_at: Option<tokio::time::Instant>,
}

impl std::fmt::Debug for EndpointBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointBook")
            .field("zk", &self.zk)
            .finish_non_exhaustive()
    }
}

impl EndpointBook {
    /// A book read from the cluster whose ZooKeeper is `zk`, when first needed.
    pub fn new(zk: ZkConnect, session_timeout: Duration, connection_timeout: Duration) -> Self {
        EndpointBook {
            zk,
            session_timeout,
            connection_timeout,
            state: tokio::sync::Mutex::new(BookState::default()),
        }
    }

    /// The SSL listener of the broker registered at `host:port`; `host:port` itself when no
    /// broker registered it (or ZooKeeper cannot be read: logged, and the address is tried as
    /// given, so a TLS handshake with a plaintext port fails loudly rather than silently).
    pub async fn ssl_endpoint<E: Env>(&self, env: &E, host: &str, port: u16) -> (String, u16) {
        let key = (host.to_string(), port);
        let mut state = self.state.lock().await;
        let age = state.read_at.map(|at| at.elapsed());
        let stale = age.is_none_or(|age| age >= REREAD_AFTER);
        let found = state.ssl_of.get(&key).cloned();
        let miss_may_read = age.is_none_or(|age| age >= MISS_REREAD_MIN);
        if stale || (found.is_none() && miss_may_read) {
            match self.read(env).await {
                Ok(ssl_of) => {
                    state.ssl_of = ssl_of;
                    state.read_at = Some(tokio::time::Instant::now());
                }
                Err(e) => {
                    // Backs off as after a read: connects go on with what is known meanwhile.
                    state.read_at = Some(tokio::time::Instant::now());
                    tracing::warn!(
                        "cannot read the brokers' SSL endpoints in ZooKeeper {} ({e}); connecting to {host}:{port} as given",
                        self.zk
                    )
                }
            }
        }
        state.ssl_of.get(&key).cloned().unwrap_or(key)
    }

    async fn read<E: Env>(
        &self,
        env: &E,
    ) -> Result<BTreeMap<(String, u16), (String, u16)>, CoordError> {
        let coord = env
            .coordinate(&self.zk, self.session_timeout, self.connection_timeout)
            .await?;
        let read = read_endpoints(&coord).await;
        coord.close().await;
        read
    }
}

async fn read_endpoints(
    coord: &impl Coordination,
) -> Result<BTreeMap<(String, u16), (String, u16)>, CoordError> {
    let ids = match coord.children(BROKER_ENDPOINTS_PATH).await {
        Ok(ids) => ids,
        Err(CoordError::NoNode(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    let mut ssl_of = BTreeMap::new();
    for id in ids {
        let path = format!("{BROKER_ENDPOINTS_PATH}/{id}");
        let data = match coord.get(&path).await {
            Ok((data, _)) => data,
            // The broker left between the two reads.
            Err(CoordError::NoNode(_)) => continue,
            Err(e) => return Err(e),
        };
        let endpoints = match parse_endpoints(&String::from_utf8_lossy(&data)) {
            Ok(endpoints) => endpoints,
            Err(e) => {
                tracing::warn!("{path}: {e}; that broker's SSL listener is not known");
                continue;
            }
        };
        let Some((_, host, port)) = endpoints
            .iter()
            .find(|(protocol, _, _)| *protocol == ListenerProtocol::Ssl)
        else {
            continue;
        };
        for (_, h, p) in &endpoints {
            if ssl_of.len() >= ENDPOINTS_MAX {
                tracing::warn!("more than {ENDPOINTS_MAX} broker endpoints in {BROKER_ENDPOINTS_PATH}: the rest are not known");
                return Ok(ssl_of);
            }
            ssl_of.insert((h.clone(), *p), (host.clone(), *port));
        }
    }
    Ok(ssl_of)
}
