//! A committed offset node (`/consumers/<group>/offsets/<topic>/<broker>-<partition>`) read and
//! parsed in one place, for the group, the start offsets and the tools.

use super::OffsetNodeError;
use crate::coordination::{CoordError, Coordination};

/// The offset the node at `path` holds; `None` when there is no node (nothing committed, or it
/// went since it was listed). Data that is not a decimal offset is an error naming the node.
pub async fn read_offset_node(
    coord: &impl Coordination,
    path: String,
) -> Result<Option<i64>, OffsetNodeError> {
    match coord.get(&path).await {
        Ok((data, _)) => match String::from_utf8_lossy(&data).trim().parse::<i64>() {
            Ok(offset) => Ok(Some(offset)),
            Err(_) => Err(OffsetNodeError::NotAnOffset { path }),
        },
        Err(CoordError::NoNode(_)) => Ok(None),
        Err(source) => Err(OffsetNodeError::ZooKeeper { path, source }),
    }
}
