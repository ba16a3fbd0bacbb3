//! [`Coordination`] on a real ZooKeeper, through the `zookeeper-client` crate.

use std::time::Duration;

use tokio::sync::Mutex;
use tributary_core::config::ZkConnect;
use zookeeper_client as zk;

use super::zk_security::{self, SessionSecurity};
use super::{CoordError, Coordination, NodeKind, OwnedNode, SessionEvent, Watch};

/// One ZooKeeper session.
pub struct ZkCoordination {
    client: zk::Client,
    states: Mutex<zk::StateWatcher>,
    /// Every call gives up after this long (the session timeout): a ZooKeeper that stopped
    /// answering must not stall its caller forever.
    op_timeout: Duration,
    /// Whether created nodes get ACLs (`zk.set.acl`).
    set_acl: bool,
    /// Whether the ensemble takes transactions, once learnt ([`ZkCoordination::transactions`]).
    transactions: tokio::sync::OnceCell<bool>,
}

impl std::fmt::Debug for ZkCoordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkCoordination")
            .field("session", &self.client.session_id())
            .finish()
    }
}

impl ZkCoordination {
    /// Opens a session with `connect` (chroot included); fails after `connection_timeout`, or at
    /// once when no server accepts a TCP connection (so "nothing listens there" is reported as
    /// such, not as a timeout much later).
    pub async fn connect(
        connect: &ZkConnect,
        session_timeout: Duration,
        connection_timeout: Duration,
    ) -> Result<Self, CoordError> {
        let security = zk_security::load(connect)?;
        probe(connect, connection_timeout.min(PROBE_TIMEOUT)).await?;
        let cluster = connect.to_string();
        let tls_on = security.tls.is_some();
        let SessionSecurity {
            tls,
            digest,
            set_acl,
        } = security;
        let mut connector = zk::Client::connector()
            .with_session_timeout(session_timeout)
            .with_connection_timeout(connection_timeout);
        if let Some(credentials) = &digest {
            connector = connector.with_auth("digest", credentials.as_bytes());
        }
        let connecting = async move {
            match tls {
                Some(tls) => connector.with_tls(tls).secure_connect(&cluster).await,
                None => connector.connect(&cluster).await,
            }
        };
        // What to check when no session comes though the probe connected: most often a
        // plaintext client at a TLS port or the other way round, or (with TLS) the CA.
        let hint = match tls_on {
            true => " (zk.ssl.client.enable=true: is that ZooKeeper's secureClientPort, and does its certificate chain to zk.ssl.ca.location and name that host?)",
            false => " (the port accepts connections but gives no session: if it is ZooKeeper's secureClientPort, set zk.ssl.client.enable=true)",
        };
        let waited = connection_timeout.max(session_timeout);
        let client = tokio::time::timeout(waited, connecting)
            .await
            .map_err(|_| {
                CoordError::ConnectionLoss(format!(
                    "no ZooKeeper session with {connect} within {waited:?}{hint}"
                ))
            })?
            .map_err(|e| match map_error(e, &connect.to_string()) {
                CoordError::ConnectionLoss(why) => {
                    CoordError::ConnectionLoss(format!("{why}{hint}"))
                }
                other => other,
            })?;
        let states = Mutex::new(client.state_watcher());
        Ok(ZkCoordination {
            client,
            states,
            op_timeout: session_timeout,
            set_acl,
            transactions: tokio::sync::OnceCell::new(),
        })
    }

    /// Whether the ensemble takes transactions (`multi`), learnt with the first one: a server
    /// older than 3.4 drops a transaction unanswered (its next reply then breaks the
    /// connection), so transactions are sent only to an ensemble holding `/zookeeper/config`,
    /// which ZooKeeper makes from 3.5 on (a 3.4 ensemble is written one node at a time, as a
    /// 3.3 one is). The node is looked for from the root, whatever the chroot.
    async fn transactions(&self) -> Result<bool, CoordError> {
        const CONFIG_NODE: &str = "/zookeeper/config";
        let learnt = self.transactions.get_or_try_init(|| async {
            let root = match self.client.clone().chroot("/") {
                Ok(root) | Err(root) => root,
            };
            let found = self.bounded(CONFIG_NODE, root.check_stat(CONFIG_NODE)).await?;
            if found.is_none() {
                tracing::info!(
                    "ZooKeeper has no {CONFIG_NODE} (a server before 3.5): offsets, owner nodes and recorded starts are written one node at a time, not in transactions"
                );
            }
            Ok::<bool, CoordError>(found.is_some())
        });
        learnt.await.copied()
    }
}

/// The longest a reachability probe of one server may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Succeeds when at least one server accepts a TCP connection.
async fn probe(connect: &ZkConnect, timeout: Duration) -> Result<(), CoordError> {
    let mut reasons = Vec::new();
    for server in &connect.servers {
        match tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect((server.host.as_str(), server.port)),
        )
        .await
        {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => reasons.push(e.kind().to_string()),
            Err(_) => reasons.push(format!("no answer within {timeout:?}")),
        }
    }
    reasons.dedup();
    let servers: Vec<String> = connect
        .servers
        .iter()
        .map(|s| format!("{}:{}", s.host, s.port))
        .collect();
    Err(CoordError::Unreachable(format!(
        "cannot connect to ZooKeeper at {} ({})",
        servers.join(","),
        reasons.join("; ")
    )))
}

fn map_error(error: zk::Error, path: &str) -> CoordError {
    match error {
        zk::Error::NoNode => CoordError::NoNode(path.to_string()),
        zk::Error::NodeExists => CoordError::NodeExists(path.to_string()),
        zk::Error::BadVersion => CoordError::BadVersion(path.to_string()),
        zk::Error::NotEmpty => CoordError::NotEmpty(path.to_string()),
        zk::Error::SessionExpired => CoordError::SessionExpired,
        zk::Error::ConnectionLoss | zk::Error::Timeout => {
            CoordError::ConnectionLoss(error.to_string())
        }
        zk::Error::NoAuth => CoordError::NoAuth(format!(
            "{path}: ZooKeeper refused it: the node's ACL does not allow this session's identity \
             (zk.auth.digest.location or the ZooKeeper certificate)"
        )),
        zk::Error::InvalidAcl => CoordError::NoAuth(format!(
            "{path}: ZooKeeper has no identity for this session to give the node to \
             (zk.set.acl=true: check zk.auth.digest.location, or ZooKeeper's x509 provider for a certificate)"
        )),
        zk::Error::AuthFailed => CoordError::NoAuth(
            "ZooKeeper refused this session's credentials (zk.auth.digest.location or the ZooKeeper certificate)"
                .to_string(),
        ),
        other => CoordError::Other(format!("{path}: {other}")),
    }
}

impl ZkCoordination {
    async fn bounded<T>(
        &self,
        path: &str,
        op: impl std::future::Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, CoordError> {
        match tokio::time::timeout(self.op_timeout, op).await {
            Ok(result) => result.map_err(|e| map_error(e, path)),
            Err(_) => Err(CoordError::ConnectionLoss(format!(
                "{path}: no answer within {:?}",
                self.op_timeout
            ))),
        }
    }

    /// A new transaction, if this ensemble takes them (see [`ZkCoordination::transactions`]);
    /// `nodes` are the nodes it is for, named in the error otherwise.
    async fn transaction(
        &self,
        nodes: &[(String, Vec<u8>)],
    ) -> Result<zk::MultiWriter<'_>, CoordError> {
        if !self.transactions().await? {
            let first = nodes.first().map_or("", |(path, _)| path.as_str());
            return Err(CoordError::Other(format!(
                "{first}: this ZooKeeper takes no transactions (a server before 3.5)"
            )));
        }
        Ok(self.client.new_multi_writer())
    }

    /// Commits `transaction`, made of one operation per node of `nodes` in order; a refused one
    /// is mapped to the failed operation's error, naming its node. `done` says what was done
    /// to the nodes, for a transaction with no answer.
    async fn commit(
        &self,
        mut transaction: zk::MultiWriter<'_>,
        nodes: &[(String, Vec<u8>)],
        done: &str,
    ) -> Result<(), CoordError> {
        let first = nodes.first().map_or("", |(path, _)| path.as_str());
        match tokio::time::timeout(self.op_timeout, transaction.commit()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(zk::MultiWriteError::OperationFailed { index, source })) => {
                let path = nodes.get(index).map_or(first, |(path, _)| path.as_str());
                Err(map_error(source, path))
            }
            Ok(Err(zk::MultiWriteError::RequestFailed { source })) => Err(map_error(source, first)),
            Err(_) => Err(CoordError::ConnectionLoss(format!(
                "{first} and {} more {done} together: no answer within {:?}",
                nodes.len().saturating_sub(1),
                self.op_timeout
            ))),
        }
    }
}

fn mode(kind: NodeKind) -> zk::CreateMode {
    match kind {
        NodeKind::Persistent => zk::CreateMode::Persistent,
        NodeKind::Ephemeral => zk::CreateMode::Ephemeral,
        NodeKind::PersistentSequential => zk::CreateMode::PersistentSequential,
        NodeKind::EphemeralSequential => zk::CreateMode::EphemeralSequential,
    }
}

/// A create's options: `kind`, and the ACLs `protected` when the node is protected (open to
/// anyone otherwise).
fn create_options(kind: NodeKind, protected: Option<&[zk::Acl]>) -> zk::CreateOptions<'_> {
    let acls = match protected {
        Some(acls) => zk::Acls::new(acls),
        None => zk::Acls::anyone_all(),
    };
    mode(kind).with_acls(acls)
}

fn watch(watcher: zk::OneshotWatcher) -> Watch {
    Box::pin(async move {
        watcher.changed().await;
    })
}

impl Coordination for ZkCoordination {
    async fn create(&self, path: &str, data: &[u8], kind: NodeKind) -> Result<String, CoordError> {
        let protected = self.set_acl.then(|| zk_security::acls_for(path));
        let options = create_options(kind, protected.as_deref());
        let (_, sequence) = self
            .bounded(path, self.client.create(path, data, &options))
            .await?;
        Ok(match kind {
            NodeKind::PersistentSequential | NodeKind::EphemeralSequential => {
                format!("{path}{sequence}")
            }
            _ => path.to_string(),
        })
    }

    async fn get(&self, path: &str) -> Result<(Vec<u8>, i32), CoordError> {
        let (data, stat) = self.bounded(path, self.client.get_data(path)).await?;
        Ok((data, stat.version))
    }

    async fn get_with_owner(&self, path: &str) -> Result<OwnedNode, CoordError> {
        let (data, stat) = self.bounded(path, self.client.get_data(path)).await?;
        Ok(OwnedNode {
            data,
            version: stat.version,
            owner: (stat.ephemeral_owner != 0).then_some(stat.ephemeral_owner as u64),
        })
    }

    async fn get_and_watch(&self, path: &str) -> Result<(Vec<u8>, i32, Watch), CoordError> {
        let (data, stat, watcher) = self
            .bounded(path, self.client.get_and_watch_data(path))
            .await?;
        Ok((data, stat.version, watch(watcher)))
    }

    async fn set(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<i32, CoordError> {
        let stat = self
            .bounded(path, self.client.set_data(path, data, version))
            .await?;
        Ok(stat.version)
    }

    async fn set_all(&self, writes: &[(String, Vec<u8>)]) -> Result<(), CoordError> {
        if let Some(refused) = super::transaction_refusal(writes) {
            return Err(refused);
        }
        let mut transaction = self.transaction(writes).await?;
        for (path, data) in writes {
            transaction
                .add_set_data(path, data, None)
                .map_err(|e| map_error(e, path))?;
        }
        self.commit(transaction, writes, "set").await
    }

    async fn create_all(
        &self,
        creates: &[(String, Vec<u8>)],
        kind: NodeKind,
    ) -> Result<(), CoordError> {
        if let Some(refused) = super::create_all_refusal(creates, kind) {
            return Err(refused);
        }
        let mut transaction = self.transaction(creates).await?;
        for (path, data) in creates {
            let protected = self.set_acl.then(|| zk_security::acls_for(path));
            transaction
                .add_create(path, data, &create_options(kind, protected.as_deref()))
                .map_err(|e| map_error(e, path))?;
        }
        self.commit(transaction, creates, "created").await
    }

    async fn delete(&self, path: &str, version: Option<i32>) -> Result<(), CoordError> {
        self.bounded(path, self.client.delete(path, version)).await
    }

    async fn sync(&self, path: &str) -> Result<(), CoordError> {
        self.bounded(path, self.client.sync(path)).await
    }

    async fn children(&self, path: &str) -> Result<Vec<String>, CoordError> {
        let mut children = self.bounded(path, self.client.list_children(path)).await?;
        children.sort();
        Ok(children)
    }

    async fn children_and_watch(&self, path: &str) -> Result<(Vec<String>, Watch), CoordError> {
        let (mut children, _, watcher) = self
            .bounded(path, self.client.get_and_watch_children(path))
            .await?;
        children.sort();
        Ok((children, watch(watcher)))
    }

    fn session_id(&self) -> u64 {
        self.client.session_id().0 as u64
    }

    async fn next_event(&self) -> SessionEvent {
        let mut states = self.states.lock().await;
        loop {
            match states.changed().await {
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    return SessionEvent::Connected
                }
                zk::SessionState::Disconnected => return SessionEvent::Disconnected,
                zk::SessionState::Expired | zk::SessionState::AuthFailed => {
                    return SessionEvent::Expired
                }
                zk::SessionState::Closed => return SessionEvent::Closed,
                #[allow(unreachable_patterns)]
                _ => continue,
            }
        }
    }

    async fn close(self) {
        drop(self.client);
    }
}
