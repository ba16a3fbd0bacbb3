//! What Tributary needs from ZooKeeper, as a trait: nodes (persistent, ephemeral, sequential),
//! reads and versioned writes, children, one-shot watches, and session events. Production uses
//! [`zk::ZkCoordination`] (the `zookeeper-client` crate); the simulator plugs in its model.

pub mod ephemeral;
pub mod identity;
pub mod nodes;
pub mod pipeline;
pub mod transaction;
pub mod zk;
mod zk_security;

pub use transaction::{
    create_all_refusal, outcome_unknown, transaction_refusal, transaction_runs,
    TRANSACTIONS_IN_FLIGHT, TRANSACTION_BYTES_MAX, TRANSACTION_WRITES_MAX,
};

use std::future::Future;
use std::pin::Pin;

/// Kinds of node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// Stays until deleted.
    Persistent,
    /// Goes with the session that created it.
    Ephemeral,
    /// Persistent, with a sequence number appended to the name.
    PersistentSequential,
    /// Ephemeral, with a sequence number appended to the name.
    EphemeralSequential,
}

/// A coordination failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordError {
    /// The node does not exist.
    #[error("no node {0}")]
    NoNode(String),
    /// The node already exists.
    #[error("node {0} already exists")]
    NodeExists(String),
    /// The node's version is not the one expected.
    #[error("node {0} has another version")]
    BadVersion(String),
    /// The node has children.
    #[error("node {0} has children")]
    NotEmpty(String),
    /// The session expired: ephemeral nodes are gone; a new session is needed.
    #[error("session expired")]
    SessionExpired,
    /// No ZooKeeper server accepted a connection (the message names them and why).
    #[error("{0}")]
    Unreachable(String),
    /// The connection is lost or an operation timed out; the session may still be alive.
    #[error("connection lost: {0}")]
    ConnectionLoss(String),
    /// ZooKeeper refused the operation: the node's ACL does not let this session's identity do
    /// it (or, creating a node with `zk.set.acl=true`, the session has no identity).
    #[error("{0}")]
    NoAuth(String),
    /// The session's security settings cannot be used (a certificate or digest file).
    #[error("{0}")]
    Settings(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// A session's state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent {
    /// Connected (again) within the same session.
    Connected,
    /// Disconnected; the session lives on until its timeout.
    Disconnected,
    /// The session expired: its ephemeral nodes are deleted.
    Expired,
    /// The session was closed by us.
    Closed,
}

/// A node as read with its owner: what [`Coordination::get_with_owner`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedNode {
    /// The node's data.
    pub data: Vec<u8>,
    /// The node's data version.
    pub version: i32,
    /// The session that owns it when it is ephemeral (ZooKeeper's `ephemeralOwner`); `None` for
    /// a persistent node.
    pub owner: Option<u64>,
}

/// A one-shot watch: resolves once when the watched node or its children change.
pub type Watch = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The coordination service (one session).
pub trait Coordination: Send + Sync + 'static {
    /// Creates a node; returns its actual path (sequential nodes get a suffix).
    fn create(
        &self,
        path: &str,
        data: &[u8],
        kind: NodeKind,
    ) -> impl Future<Output = Result<String, CoordError>> + Send;
    /// A node's data and version.
    fn get(&self, path: &str) -> impl Future<Output = Result<(Vec<u8>, i32), CoordError>> + Send;
    /// A node's data, version and owning session (ephemeral nodes), so that a node left by an
    /// earlier session is never taken for this one's.
    fn get_with_owner(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<OwnedNode, CoordError>> + Send;
    /// A node's data and version, and a watch that fires when it changes or goes.
    fn get_and_watch(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, i32, Watch), CoordError>> + Send;
    /// Sets a node's data if its version is `version` (any version when `None`); returns the new version.
    fn set(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> impl Future<Output = Result<i32, CoordError>> + Send;
    /// Sets each node of `writes` to its data, whatever its version, as one transaction
    /// (ZooKeeper's `multi`): every node is written, under one zxid, or none is. When one of
    /// them cannot be written the error is that write's and names its node (`NoNode` for a
    /// node that does not exist). A transaction lost with the connection may have been applied
    /// whole or not at all. `writes` must hold at most [`TRANSACTION_WRITES_MAX`] writes of at most
    /// [`TRANSACTION_BYTES_MAX`] bytes (paths and data) in all; a larger one is refused unsent.
    fn set_all(
        &self,
        writes: &[(String, Vec<u8>)],
    ) -> impl Future<Output = Result<(), CoordError>> + Send;
    /// Creates each node of `creates` with its data, every one of `kind`, as one transaction
    /// (ZooKeeper's `multi`): every node is created, under one zxid, or none is. When one of
    /// them cannot be created the error is that create's and names its node (`NodeExists`;
    /// `NoNode` for a parent that neither exists nor is created earlier in the transaction). A
    /// transaction lost with the connection may have been applied whole or not at all.
    /// `kind` must not be sequential (the caller would not learn the names), and `creates`
    /// must fit the limits of [`transaction_refusal`]: otherwise it is refused unsent.
    fn create_all(
        &self,
        creates: &[(String, Vec<u8>)],
        kind: NodeKind,
    ) -> impl Future<Output = Result<(), CoordError>> + Send;
    /// Deletes a node if its version is `version` (any when `None`).
    fn delete(
        &self,
        path: &str,
        version: Option<i32>,
    ) -> impl Future<Output = Result<(), CoordError>> + Send;
    /// ZooKeeper's `sync`: returns once this session's server has applied every write
    /// completed (by any session) before the call, so that a read made after it sees them. A
    /// read without it may lag other sessions' writes: in an ensemble a follower serves reads
    /// from what it has applied so far (this session's own writes are always seen). ZooKeeper's
    /// sync is not itself agreed by a quorum: across a change of leader between the sync and
    /// the read the promise can fail (ZOOKEEPER-1675, -2136).
    fn sync(&self, path: &str) -> impl Future<Output = Result<(), CoordError>> + Send;
    /// A node's children, sorted.
    fn children(&self, path: &str) -> impl Future<Output = Result<Vec<String>, CoordError>> + Send;
    /// A node's children, sorted, and a watch that fires when they change.
    fn children_and_watch(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<String>, Watch), CoordError>> + Send;
    /// This session's id, as ZooKeeper names it in an ephemeral node's owner.
    fn session_id(&self) -> u64;
    /// The next session event.
    fn next_event(&self) -> impl Future<Output = SessionEvent> + Send;
    /// Closes the session (its ephemeral nodes go at once).
    fn close(self) -> impl Future<Output = ()> + Send;

    /// Creates `path`'s missing ancestors as persistent nodes. An ancestor that exists is left
    /// as it is, even when this session may not create beside it (with ACLs, ZooKeeper answers
    /// a create under a parent closed to the session with NoAuth before it looks whether the
    /// node exists).
    fn ensure_parents(&self, path: &str) -> impl Future<Output = Result<(), CoordError>> + Send {
        async move {
            for ancestor in tributary_core::zk_layout::ancestors(path) {
                match self.create(ancestor, b"", NodeKind::Persistent).await {
                    Ok(_) | Err(CoordError::NodeExists(_)) => {}
                    Err(refused @ CoordError::NoAuth(_)) => match self.get(ancestor).await {
                        Ok(_) => {}
                        Err(_) => return Err(refused),
                    },
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }
    }
}
