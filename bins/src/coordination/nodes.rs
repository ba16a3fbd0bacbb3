//! Small helpers on ZooKeeper nodes: create-or-set, and reads that take a missing node as
//! `None`.

use super::{CoordError, Coordination, NodeKind};

/// Creates `path` with `data`, or sets it.
pub async fn put<C: Coordination>(coord: &C, path: &str, data: &[u8]) -> Result<(), CoordError> {
    coord.ensure_parents(path).await?;
    match coord.create(path, data, NodeKind::Persistent).await {
        Ok(_) => Ok(()),
        Err(CoordError::NodeExists(_)) => coord.set(path, data, None).await.map(drop),
        Err(e) => Err(e),
    }
}

/// The data of `path` and its version, `None` when it does not exist.
pub async fn versioned_data_of<C: Coordination>(
    coord: &C,
    path: &str,
) -> Result<Option<(Vec<u8>, i32)>, CoordError> {
    match coord.get(path).await {
        Ok(found) => Ok(Some(found)),
        Err(CoordError::NoNode(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The data of `path`, `None` when it does not exist.
pub async fn data_of<C: Coordination>(
    coord: &C,
    path: &str,
) -> Result<Option<Vec<u8>>, CoordError> {
    match coord.get(path).await {
        Ok((data, _)) => Ok(Some(data)),
        Err(CoordError::NoNode(_)) => Ok(None),
        Err(e) => Err(e),
    }
}
