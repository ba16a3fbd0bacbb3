//! How many connections one client address may hold open on a broker
//! (`max.connections.per.ip` and `max.connections.per.ip.overrides`, Kafka 0.8.2's names):
//! the decision, with the counts; the broker's accept loop calls it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// A connection refused: its address already holds `limit` connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The client address.
    pub ip: IpAddr,
    /// Its limit.
    pub limit: u32,
    /// Whether this is the first refusal since the address last had room (so a flood is logged
    /// once, not once per connection).
    pub first: bool,
}

/// Open connections per client address, against each address's limit.
///
/// Holds one entry per address with an open connection (so at most as many as the broker's
/// open connections); an address's entry goes when its last connection closes.
#[derive(Debug, Clone)]
pub struct ConnectionQuotas {
    default_limit: u32,
    overrides: BTreeMap<IpAddr, u32>,
    open: BTreeMap<IpAddr, Open>,
    /// Addresses refused altogether (an override of 0) that were already reported: at most
    /// the overrides' size, and never said again.
    blocked_reported: BTreeSet<IpAddr>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Open {
    connections: u32,
    refused_since_room: u64,
}

impl ConnectionQuotas {
    /// Every address may hold `default_limit` connections, but those in `overrides` their own
    /// (0 refuses an address altogether).
    pub fn new(default_limit: u32, overrides: BTreeMap<IpAddr, u32>) -> Self {
        ConnectionQuotas {
            default_limit,
            overrides: overrides
                .into_iter()
                .map(|(ip, limit)| (ip.to_canonical(), limit))
                .collect(),
            open: BTreeMap::new(),
            blocked_reported: BTreeSet::new(),
        }
    }

    /// The limit of `ip`.
    pub fn limit(&self, ip: IpAddr) -> u32 {
        let ip = ip.to_canonical();
        self.overrides
            .get(&ip)
            .copied()
            .unwrap_or(self.default_limit)
    }

    /// Counts a new connection from `ip`, or refuses it when `ip` is at its limit. An IPv4
    /// client seen as an IPv4-mapped IPv6 address counts as its IPv4 address.
    pub fn admit(&mut self, ip: IpAddr) -> Result<(), Refused> {
        let ip = ip.to_canonical();
        let limit = self.limit(ip);
        if limit == 0 {
            // Never admitted, so no entry in `open`; reported once, ever.
            let first = self.blocked_reported.insert(ip);
            return Err(Refused { ip, limit, first });
        }
        let open = self.open.entry(ip).or_default();
        if open.connections >= limit {
            open.refused_since_room += 1;
            let first = open.refused_since_room == 1;
            return Err(Refused { ip, limit, first });
        }
        open.connections += 1;
        Ok(())
    }

    /// A connection from `ip` that [`ConnectionQuotas::admit`] counted has closed.
    pub fn closed(&mut self, ip: IpAddr) {
        let ip = ip.to_canonical();
        let Some(open) = self.open.get_mut(&ip) else {
            // A bug in the caller's bookkeeping: said, and the counts left as they are.
            tracing::error!("connection quota: {ip}: a connection closed that was never admitted");
            debug_assert!(false, "{ip}: a connection closed that was never admitted");
            return;
        };
        open.connections = open.connections.saturating_sub(1);
        open.refused_since_room = 0;
        if open.connections == 0 {
            self.open.remove(&ip);
        }
    }

    /// Connections open from `ip`.
    pub fn open(&self, ip: IpAddr) -> u32 {
        self.open
            .get(&ip.to_canonical())
            .map_or(0, |open| open.connections)
    }

    /// Addresses with an open connection.
    pub fn addresses(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_gets_its_limit_and_room_again_when_one_closes() {
        let mut quotas = ConnectionQuotas::new(2, BTreeMap::new());
        let a = ip("10.0.0.1");
        assert_eq!(quotas.admit(a), Ok(()));
        assert_eq!(quotas.admit(a), Ok(()));
        assert_eq!(
            quotas.admit(a),
            Err(Refused {
                ip: a,
                limit: 2,
                first: true
            })
        );
        assert!(
            !quotas.admit(a).unwrap_err().first,
            "a flood is reported once"
        );
        // Another address is not affected.
        assert_eq!(quotas.admit(ip("10.0.0.2")), Ok(()));
        quotas.closed(a);
        assert_eq!(quotas.open(a), 1);
        assert_eq!(quotas.admit(a), Ok(()));
        assert!(
            quotas.admit(a).unwrap_err().first,
            "reported again after room"
        );
        quotas.closed(a);
        quotas.closed(a);
        quotas.closed(ip("10.0.0.2"));
        assert_eq!(quotas.addresses(), 0, "no entry outlives its connections");
    }

    #[test]
    fn overrides_raise_lower_or_close_an_address_and_mapped_ipv4_is_ipv4() {
        let overrides = BTreeMap::from([(ip("10.0.0.9"), 0), (ip("::ffff:10.0.0.5"), 3)]);
        let mut quotas = ConnectionQuotas::new(1, overrides);
        assert!(quotas.admit(ip("10.0.0.9")).unwrap_err().first);
        assert!(
            !quotas.admit(ip("10.0.0.9")).unwrap_err().first,
            "a blocked address is reported once, not once per connection"
        );
        assert_eq!(quotas.addresses(), 0);
        for _ in 0..3 {
            assert_eq!(quotas.admit(ip("10.0.0.5")), Ok(()));
        }
        assert!(quotas.admit(ip("::ffff:10.0.0.5")).is_err());
        assert_eq!(quotas.limit(ip("10.0.0.1")), 1);
        assert_eq!(quotas.admit(ip("::ffff:10.0.0.1")), Ok(()));
        assert!(
            quotas.admit(ip("10.0.0.1")).is_err(),
            "one address, two spellings"
        );
    }
}
