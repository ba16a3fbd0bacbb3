//! Ephemeral nodes held by the right session.
//!
//! An ephemeral node that already exists with this component's data is not necessarily this
//! session's: a ZooKeeper server restarted from its data directory restores the sessions it had
//! and expires them only after their timeout, while the client may long since have given the
//! old session up and opened a new one. Taking the old session's node as ours leaves the
//! component registered until that session expires, then silently unregistered. So a node is
//! ours only when its `ephemeralOwner` is this session; a node left by a session this component
//! gave up ([`RetiredSessions`]) is deleted and made again; anything else is someone else's.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::{CoordError, Coordination, NodeKind};

/// How many given-up sessions a component remembers (more than a ZooKeeper outage can make:
/// one per expiry, and each is forgotten once its nodes are gone anyway).
const RETIRED_MAX: usize = 16;

/// Sessions a component opened and has given up (it saw them expire, or expired them itself
/// after losing contact for too long). A restarted ZooKeeper may still hold them, with their
/// ephemeral nodes, until they time out; those nodes are the component's own to delete.
#[derive(Debug, Clone, Default)]
pub struct RetiredSessions(Arc<Mutex<VecDeque<u64>>>);

impl RetiredSessions {
    /// Records that `session` was given up (the oldest is forgotten past [`RETIRED_MAX`]).
    pub fn retire(&self, session: u64) {
        if session == 0 {
            return;
        }
        let mut sessions = crate::sync::lock(&self.0, "the retired ZooKeeper sessions");
        if !sessions.contains(&session) {
            if sessions.len() == RETIRED_MAX {
                sessions.pop_front();
            }
            sessions.push_back(session);
        }
        debug_assert!(sessions.len() <= RETIRED_MAX);
    }

    /// Whether `session` is one this component gave up.
    pub fn contains(&self, session: u64) -> bool {
        crate::sync::lock(&self.0, "the retired ZooKeeper sessions").contains(&session)
    }
}

/// Why an ephemeral node could not be held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    /// ZooKeeper failed.
    #[error(transparent)]
    Coord(#[from] CoordError),
    /// The node exists and belongs to a session that is not this component's (or is persistent).
    #[error("{path} is held by {} with {:?}", holder(*owner), String::from_utf8_lossy(data))]
    HeldElsewhere {
        /// The node.
        path: String,
        /// Its owning session (`None`: a persistent node).
        owner: Option<u64>,
        /// What it holds.
        data: Vec<u8>,
    },
}

fn holder(owner: Option<u64>) -> String {
    match owner {
        Some(session) => format!("session {session:#x}"),
        None => "no session (a persistent node)".to_string(),
    }
}

/// How a hold succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// The node was created now.
    Created,
    /// This session held it already (its data is now `data`).
    Already,
    /// A session this component gave up held it: deleted and created again.
    TakenBack,
}

/// [`hold`], creating `path`'s missing ancestors first only when its parent is missing: one
/// round trip in the usual case where they exist (the ancestors' creates, one per level, were
/// most of the cost of claiming or registering many nodes under one parent).
pub async fn hold_creating_parents(
    coord: &impl Coordination,
    path: &str,
    data: &[u8],
    retired: &RetiredSessions,
) -> Result<Held, HoldError> {
    match hold(coord, path, data, retired).await {
        Err(HoldError::Coord(CoordError::NoNode(_))) => {
            coord.ensure_parents(path).await?;
            hold(coord, path, data, retired).await
        }
        held => held,
    }
}

/// Makes `path` an ephemeral node of this session holding `data` (its parent must exist).
/// Guarantees, on `Ok`, that the node's owner is `coord`'s session: it goes when this session
/// ends, and not before.
pub async fn hold(
    coord: &impl Coordination,
    path: &str,
    data: &[u8],
    retired: &RetiredSessions,
) -> Result<Held, HoldError> {
    let mine = coord.session_id();
    let mut taken_back = false;
    // Two rounds: create, or take back a retired session's node and create again. Anything
    // still in the way after that is another session's (or it raced us: the caller retries).
    for _ in 0..2 {
        match coord.create(path, data, NodeKind::Ephemeral).await {
            Ok(_) if taken_back => return Ok(Held::TakenBack),
            Ok(_) => return Ok(Held::Created),
            Err(CoordError::NodeExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let node = match coord.get_with_owner(path).await {
            Ok(node) => node,
            // Gone between the two calls: create again.
            Err(CoordError::NoNode(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        if tributary_core::planted::active(tributary_core::planted::Bug::TrustStaleEphemerals)
            && node.data == data
        {
            // The planted bug: a node with our data is taken as ours, whoever owns it.
            return Ok(Held::Already);
        }
        match node.owner {
            Some(owner) if owner == mine => {
                if node.data != data {
                    coord.set(path, data, Some(node.version)).await?;
                }
                return Ok(Held::Already);
            }
            Some(owner) if retired.contains(owner) => {
                tracing::info!(
                    "{path}: left by this component's earlier ZooKeeper session {owner:#x}; taking it back"
                );
                match coord.delete(path, Some(node.version)).await {
                    Ok(()) | Err(CoordError::NoNode(_)) => taken_back = true,
                    Err(CoordError::BadVersion(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            owner => {
                return Err(HoldError::HeldElsewhere {
                    path: path.to_string(),
                    owner,
                    data: node.data,
                });
            }
        }
    }
    let node = coord.get_with_owner(path).await?;
    Err(HoldError::HeldElsewhere {
        path: path.to_string(),
        owner: node.owner,
        data: node.data,
    })
}

/// Whether `path` is an ephemeral node of this session (`Ok(false)` when it is missing or held
/// by another session).
pub async fn is_held(coord: &impl Coordination, path: &str) -> Result<bool, CoordError> {
    match coord.get_with_owner(path).await {
        Ok(node) => Ok(node.owner == Some(coord.session_id())),
        Err(CoordError::NoNode(_)) => Ok(false),
        Err(e) => Err(e),
    }
}
