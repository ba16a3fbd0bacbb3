//! The produce history checker (after Jepsen's Kafka checks): every message a client sends
//! carries a serial number; every read reports what it found where. From that:
//!
//! - **phantom**: a message read that no client sent;
//! - **wrong partition**: a message read from another broker or partition than it was sent to;
//! - **duplicated**: one message at two places of a partition;
//! - **reordered**: two messages sent on one connection to one partition, read in the other
//!   order;
//! - **lost**: a message sent on a connection before another one to the same partition, when
//!   the later one was read and it was not. A broker handles a connection's requests in order
//!   and closes the connection on the first it refuses, and flushes are prefixes of a
//!   partition, so once the later message is durable, every earlier one from that connection is
//!   too. Checked once every partition has been read end to end.
//!
//! Payloads look like `msg <serial> ...`; the checker needs nothing else from them.

use std::collections::BTreeMap;

use tributary::failure::Failure;

/// Where a message lives: (broker host, topic, partition).
pub type Location = (String, String, u32);
/// Where in a partition: (offset of the top-level entry, index inside a compressed wrapper).
pub type Position = (i64, u32);

#[derive(Debug, Clone)]
struct Sent {
    location: Location,
    connection: u64,
}

/// The history of one run.
#[derive(Debug, Default)]
pub struct History {
    sent: BTreeMap<u64, Sent>,
    /// serial → where it was read.
    read_at: BTreeMap<u64, (Location, Position)>,
    /// (location, connection) → serial → position, for order and loss checks.
    by_connection: BTreeMap<(Location, u64), BTreeMap<u64, Position>>,
    /// Messages read (distinct).
    pub messages_read: u64,
}

/// The payload of message `serial` (what the checker recognizes).
pub fn payload(serial: u64, location: &Location, connection: u64) -> Vec<u8> {
    format!(
        "msg {serial} to {}-{}@{} c{connection}",
        location.1, location.2, location.0
    )
    .into_bytes()
}

fn serial_of(payload: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(payload).ok()?;
    text.strip_prefix("msg ")?.split(' ').next()?.parse().ok()
}

impl History {
    /// Records that message `serial` was sent to `location` on `connection` (sent: the bytes
    /// were handed to the socket; 0.7 produce has no acknowledgement).
    pub fn sent(&mut self, serial: u64, location: Location, connection: u64) {
        self.sent.insert(
            serial,
            Sent {
                location,
                connection,
            },
        );
    }

    /// Records a message read at `location`/`position`; `Err` says what is wrong with it.
    pub fn read(
        &mut self,
        location: &Location,
        position: Position,
        payload: &[u8],
    ) -> Result<(), Failure> {
        let Some(serial) = serial_of(payload) else {
            return Err(Failure::from(format!(
                "phantom: {location:?} at {position:?} holds a message no client sent ({:?})",
                String::from_utf8_lossy(payload)
            )));
        };
        let Some(sent) = self.sent.get(&serial).cloned() else {
            return Err(Failure::from(format!(
                "phantom: message {serial} read at {location:?} {position:?} was never sent"
            )));
        };
        if sent.location != *location {
            return Err(Failure::from(format!("wrong partition: message {serial} was sent to {:?} but read from {location:?} at {position:?}", sent.location)));
        }
        match self.read_at.get(&serial) {
            Some((_, before)) if *before == position => return Ok(()),
            Some((_, before)) => return Err(Failure::from(format!("duplicated: message {serial} read at {before:?} and at {position:?} of {location:?}"))),
            None => {}
        }
        self.read_at.insert(serial, (location.clone(), position));
        self.messages_read += 1;
        let order = self
            .by_connection
            .entry((location.clone(), sent.connection))
            .or_default();
        let earlier = order.range(..serial).next_back().map(|(s, p)| (*s, *p));
        let later = order.range(serial + 1..).next().map(|(s, p)| (*s, *p));
        order.insert(serial, position);
        if let Some((s, p)) = earlier.filter(|(_, p)| *p >= position) {
            return Err(Failure::from(format!("reordered: message {s} (sent before {serial} on connection {}) is at {p:?}, after {serial} at {position:?}", sent.connection)));
        }
        if let Some((s, p)) = later.filter(|(_, p)| *p <= position) {
            return Err(Failure::from(format!("reordered: message {s} (sent after {serial} on connection {}) is at {p:?}, before {serial} at {position:?}", sent.connection)));
        }
        Ok(())
    }

    /// The loss check; call once every partition has been read end to end.
    pub fn check_nothing_lost(&self) -> Result<(), Failure> {
        for ((location, connection), read) in &self.by_connection {
            let Some(&last) = read.keys().next_back() else {
                continue;
            };
            let missing = self.sent.range(..last).find(|(serial, sent)| {
                sent.connection == *connection
                    && sent.location == *location
                    && !read.contains_key(serial)
            });
            if let Some((serial, _)) = missing {
                return Err(Failure::from(format!("lost: message {serial} sent to {location:?} on connection {connection} was never read, though message {last}, sent after it on that connection, was")));
            }
        }
        Ok(())
    }

    /// Whether message `serial` has been read.
    pub fn was_read(&self, serial: u64) -> bool {
        self.read_at.contains_key(&serial)
    }
}
