//! The model of one direction of a long link, without I/O: bytes leave one after another at the
//! link's rate and arrive one propagation delay after they left.

use std::time::Duration;

/// One direction of a link. Times are durations since the link was made (the caller's clock).
///
/// Guarantees: what is sent later never arrives earlier (arrival times never decrease), and
/// over any stretch of time the bytes that have left add up to no more than the rate allows
/// (plus one chunk, which leaves whole).
#[derive(Debug, Clone)]
pub struct Link {
    /// Bytes a second; `None` for no cap (delay only).
    rate: Option<u64>,
    /// One-way propagation delay.
    delay: Duration,
    /// When the last byte handed over so far has left (the link is busy until then).
    free_at: Duration,
}

impl Link {
    /// A link carrying `rate` bytes a second (`None` or 0: no cap) with a one-way `delay`.
    pub fn new(rate: Option<u64>, delay: Duration) -> Self {
        Link {
            rate: rate.filter(|r| *r > 0),
            delay,
            free_at: Duration::ZERO,
        }
    }

    /// Hands `len` bytes to the link at `now`; returns when their last byte arrives at the far
    /// end. An empty send (an end of stream) arrives after everything sent before it.
    pub fn send(&mut self, now: Duration, len: usize) -> Duration {
        let start = self.free_at.max(now);
        self.free_at = start + self.wire_time(len);
        debug_assert!(self.free_at >= start, "the link's clock went backwards");
        self.free_at + self.delay
    }

    /// How long `len` bytes take to leave at the link's rate (rounded up to a nanosecond).
    pub fn wire_time(&self, len: usize) -> Duration {
        let Some(rate) = self.rate else {
            return Duration::ZERO;
        };
        let nanos = (len as u128 * 1_000_000_000).div_ceil(u128::from(rate));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The bytes in flight when the link is full: rate × delay (the bandwidth-delay product of
    /// one direction); `None` without a cap.
    pub fn bytes_in_flight_when_full(&self) -> Option<u64> {
        let rate = self.rate?;
        let bytes = u128::from(rate) * self.delay.as_nanos() / 1_000_000_000;
        Some(u64::try_from(bytes).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn an_idle_link_delivers_after_the_wire_time_and_the_delay() {
        // 1 MB/s: 1,000 bytes take 1 ms on the wire, then 50 ms of propagation.
        let mut link = Link::new(Some(1_000_000), 50 * MS);
        assert_eq!(link.send(10 * MS, 1000), 61 * MS);
    }

    #[test]
    fn a_busy_link_queues_bytes_behind_those_sent_before() {
        let mut link = Link::new(Some(1_000_000), 50 * MS);
        let first = link.send(Duration::ZERO, 10_000); // leaves until 10 ms
        let second = link.send(2 * MS, 1000); // waits for the first: leaves 10..11 ms
        assert_eq!(first, 60 * MS);
        assert_eq!(second, 61 * MS);
        // Once idle again, a send starts at once.
        assert_eq!(link.send(100 * MS, 1000), 151 * MS);
    }

    #[test]
    fn over_a_long_stream_the_rate_is_the_cap() {
        let mut link = Link::new(Some(125_000_000), 50 * MS);
        let mut last = Duration::ZERO;
        // Offered far faster than the cap: 1 GB in 64 KiB chunks, all at time 0.
        let chunks = 1_000_000_000 / 65_536;
        for _ in 0..chunks {
            let arrival = link.send(Duration::ZERO, 65_536);
            assert!(arrival >= last, "arrivals went backwards");
            last = arrival;
        }
        let carried = (chunks * 65_536) as f64;
        let seconds = (last - 50 * MS).as_secs_f64();
        let rate = carried / seconds;
        assert!(
            (rate - 125e6).abs() < 125e6 * 1e-6,
            "carried at {rate} B/s, not the cap"
        );
    }

    #[test]
    fn without_a_cap_only_the_delay_counts() {
        let mut link = Link::new(None, 50 * MS);
        assert_eq!(link.send(MS, 1 << 30), 51 * MS);
        assert_eq!(Link::new(Some(0), MS).wire_time(1 << 20), Duration::ZERO);
        assert_eq!(link.bytes_in_flight_when_full(), None);
    }

    #[test]
    fn the_bandwidth_delay_product_is_rate_times_delay() {
        let link = Link::new(Some(125_000_000), 50 * MS);
        assert_eq!(link.bytes_in_flight_when_full(), Some(6_250_000));
    }
}
