//! A cluster's identity in its ZooKeeper ([`core::identity`](tributary_core::identity)): read
//! it, or create it when this component is the first to need it.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary_core::identity::{
    reconcile, ClusterId, ClusterIdentity, ClusterName, IdentityError, NameMismatch, Reconcile,
    CLUSTER_ID_PATH,
};

use super::{CoordError, Coordination, NodeKind};

/// How often a lost race (another component created or named the identity between our read
/// and our write) is retried before giving up: each loss means someone else's write landed, so
/// the next read settles it.
const RACES_MAX: usize = 4;

/// Why a cluster's identity could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterIdentityError {
    /// ZooKeeper failed.
    #[error("{CLUSTER_ID_PATH}: {0}")]
    ZooKeeper(#[source] CoordError),
    /// The node exists but does not hold an identity.
    #[error("{CLUSTER_ID_PATH}: {0}; fix or delete the node by hand (it is never rewritten)")]
    Damaged(#[source] IdentityError),
    /// This component's `cluster.name` is not the cluster's.
    #[error(transparent)]
    Name(#[from] NameMismatch),
    /// Other components kept changing the node.
    #[error("{CLUSTER_ID_PATH}: changed under us {RACES_MAX} times in a row")]
    Contended,
}

/// The cluster's identity, `None` when no component has created one yet.
pub async fn read_identity(
    coord: &impl Coordination,
) -> Result<Option<ClusterIdentity>, ClusterIdentityError> {
    Ok(read_versioned(coord).await?.map(|(identity, _)| identity))
}

async fn read_versioned(
    coord: &impl Coordination,
) -> Result<Option<(ClusterIdentity, i32)>, ClusterIdentityError> {
    match coord.get(CLUSTER_ID_PATH).await {
        Ok((data, version)) => ClusterIdentity::decode(&data)
            .map(|identity| Some((identity, version)))
            .map_err(ClusterIdentityError::Damaged),
        Err(CoordError::NoNode(_)) => Ok(None),
        Err(e) => Err(ClusterIdentityError::ZooKeeper(e)),
    }
}

/// The cluster's identity, created (with a fresh id from `seed`, and `name`) when there is none,
/// and named when it has no name and `name` is given. Refuses a `name` other than the recorded
/// one: the component points at another cluster than it was told.
pub async fn ensure_identity(
    coord: &impl Coordination,
    name: Option<&ClusterName>,
    seed: u64,
) -> Result<ClusterIdentity, ClusterIdentityError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..RACES_MAX {
        let stored = read_versioned(coord).await?;
        let version = stored.as_ref().map(|(_, v)| *v);
        let fresh = ClusterId::from_random(rng.random());
        match reconcile(stored.map(|(identity, _)| identity), name, fresh)? {
            Reconcile::Use(identity) => return Ok(identity),
            Reconcile::Create(identity) => {
                coord
                    .ensure_parents(CLUSTER_ID_PATH)
                    .await
                    .map_err(ClusterIdentityError::ZooKeeper)?;
                match coord
                    .create(CLUSTER_ID_PATH, &identity.encode(), NodeKind::Persistent)
                    .await
                {
                    Ok(_) => {
                        tracing::info!("created this cluster's identity: {identity}");
                        return Ok(identity);
                    }
                    // Another component created it first: use theirs.
                    Err(CoordError::NodeExists(_)) => {}
                    Err(e) => return Err(ClusterIdentityError::ZooKeeper(e)),
                }
            }
            Reconcile::Name(identity) => {
                match coord
                    .set(CLUSTER_ID_PATH, &identity.encode(), version)
                    .await
                {
                    Ok(_) => {
                        tracing::info!("recorded this cluster's name: {identity}");
                        return Ok(identity);
                    }
                    // Changed since we read it (named by another broker?): read again.
                    Err(CoordError::BadVersion(_) | CoordError::NoNode(_)) => {}
                    Err(e) => return Err(ClusterIdentityError::ZooKeeper(e)),
                }
            }
        }
    }
    Err(ClusterIdentityError::Contended)
}
