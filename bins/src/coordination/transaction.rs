//! ZooKeeper transactions (`multi`): their limits, how a failed one is read, and how many
//! writes are cut into transactions. A transaction is written whole or not at all; refused,
//! it wrote nothing; lost with its connection, either may have happened.

use super::{CoordError, NodeKind};

/// The most writes one transaction ([`Coordination::set_all`], [`Coordination::create_all`])
/// takes. ZooKeeper's cost per write falls about twentyfold from one write per request to a
/// hundred per transaction, and little beyond.
///
/// [`Coordination::set_all`]: super::Coordination::set_all
/// [`Coordination::create_all`]: super::Coordination::create_all
pub const TRANSACTION_WRITES_MAX: usize = 100;

/// The most bytes (paths and data) one transaction takes: a quarter of ZooKeeper's default
/// request limit (`jute.maxbuffer`, 1 MiB), whatever the paths' lengths.
pub const TRANSACTION_BYTES_MAX: usize = 256 * 1024;

/// Transactions of a rebalance kept in flight at once on one session. ZooKeeper applies them one
/// after another, so a few keep it busy (a group's first join of 10,000 partitions is 200 of
/// them); and when one fails the attempt, every node the others in flight may have made is
/// looked at again as a stray, so few are in flight.
pub const TRANSACTIONS_IN_FLIGHT: usize = 4;

/// Why `writes` cannot be one transaction, if it cannot.
pub fn transaction_refusal(writes: &[(String, Vec<u8>)]) -> Option<CoordError> {
    let bytes: usize = writes
        .iter()
        .map(|(path, data)| path.len() + data.len())
        .sum();
    (writes.len() > TRANSACTION_WRITES_MAX || bytes > TRANSACTION_BYTES_MAX).then(|| {
        CoordError::Other(format!(
            "a transaction of {} writes ({bytes} bytes) is over the limit of {TRANSACTION_WRITES_MAX} writes and {TRANSACTION_BYTES_MAX} bytes",
            writes.len()
        ))
    })
}

/// Why `creates` of `kind` cannot be one transaction of creates, if it cannot: too large, or
/// sequential nodes, whose names the caller would not learn.
pub fn create_all_refusal(creates: &[(String, Vec<u8>)], kind: NodeKind) -> Option<CoordError> {
    match kind {
        NodeKind::Persistent | NodeKind::Ephemeral => transaction_refusal(creates),
        NodeKind::PersistentSequential | NodeKind::EphemeralSequential => {
            Some(CoordError::Other(format!(
                "a transaction cannot create sequential nodes ({})",
                creates.first().map_or("", |(path, _)| path.as_str())
            )))
        }
    }
}

/// Whether `error` leaves a transaction's outcome unknown (applied whole or not at all: the
/// connection or the session went with it), rather than refused whole, with nothing written.
pub fn outcome_unknown(error: &CoordError) -> bool {
    matches!(
        error,
        CoordError::ConnectionLoss(_) | CoordError::SessionExpired | CoordError::Unreachable(_)
    )
}

/// `items` cut, in order, into runs holding at most [`TRANSACTION_WRITES_MAX`] writes and
/// [`TRANSACTION_BYTES_MAX`] bytes each; `write_bytes` says which items are writes, and their
/// size (an item that is no write goes with the run it falls in). No run is empty.
pub fn transaction_runs<T>(
    items: Vec<T>,
    write_bytes: impl Fn(&T) -> Option<usize>,
) -> Vec<Vec<T>> {
    let mut runs: Vec<Vec<T>> = Vec::new();
    let mut current = Vec::new();
    let (mut writes, mut bytes) = (0usize, 0usize);
    for item in items {
        if let Some(size) = write_bytes(&item) {
            if writes == TRANSACTION_WRITES_MAX
                || (writes > 0 && bytes + size > TRANSACTION_BYTES_MAX)
            {
                runs.push(std::mem::take(&mut current));
                (writes, bytes) = (0, 0);
            }
            writes += 1;
            bytes += size;
        }
        current.push(item);
    }
    if !current.is_empty() {
        runs.push(current);
    }
    runs
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Items as the chunks see them: `Some(path length)` for a write, `None` for an answer.
    fn shape(chunks: &[Vec<Option<usize>>]) -> Vec<(usize, usize)> {
        chunks
            .iter()
            .map(|c| (c.len(), c.iter().filter(|i| i.is_some()).count()))
            .collect()
    }

    #[test]
    fn runs_hold_at_most_the_transaction_limit_of_writes_in_order() {
        let mut items: Vec<Option<usize>> = (0..250).map(Some).collect();
        items.insert(100, None);
        let chunks = transaction_runs(items, |i| i.map(|_| 10));
        assert_eq!(shape(&chunks), vec![(101, 100), (100, 100), (50, 50)]);
        assert_eq!(chunks[1][0], Some(100), "the order is kept");
    }

    #[test]
    fn runs_hold_at_most_the_transaction_limit_of_bytes() {
        let third = TRANSACTION_BYTES_MAX / 3;
        let items: Vec<Option<usize>> = vec![Some(third); 4];
        assert_eq!(
            shape(&transaction_runs(items, |i| *i)),
            vec![(3, 3), (1, 1)]
        );
        let items: Vec<Option<usize>> = vec![Some(third + 1); 4];
        assert_eq!(
            shape(&transaction_runs(items, |i| *i)),
            vec![(2, 2), (2, 2)]
        );
    }
}
