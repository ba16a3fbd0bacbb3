//! The broker's limits, named with their units. Everything that can grow is bounded here.

use std::time::Duration;

/// Connections served at once; more are accepted and closed at once.
pub const CONNECTIONS_MAX: usize = 10_000;
/// Bytes of requests and responses held in memory across all connections.
pub const IN_FLIGHT_BYTES_MAX: usize = 512 * 1024 * 1024;
/// Bytes one response may carry (a MULTIFETCH's blocks together): later blocks get less.
pub const RESPONSE_BYTES_MAX: usize = 100 * 1024 * 1024;
/// How long a connection may sit idle between requests.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a started request may take to arrive whole, counted from its first byte (plus any
/// time the broker made it wait for room in its budget), however its bytes are spread.
pub const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long writing a response may take.
pub const RESPONSE_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an acknowledged produce waits for its data to be flushed before answering an error.
pub const ACK_WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection to the SSL listener may take to complete its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// TLS handshakes in progress at once (each holds rustls's buffers, tens of KiB); a connection
/// beyond them is closed at once. Bounds what half-open TLS connections can hold.
pub const TLS_HANDSHAKES_MAX: usize = 2_048;
/// How long shutdown waits for in-flight requests.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a starting broker waits for `log.dir`'s lock while its holder says it is stopping:
/// longer than a mirror broker's whole graceful stop (its mirror's acknowledgements, commits and
/// hand-over, about a minute at worst, then the broker's requests, copier and ZooKeeper).
pub const STOPPING_HOLDER_WAIT: Duration = Duration::from_secs(120);
/// How often the lock is tried again meanwhile.
pub const STOPPING_HOLDER_POLL: Duration = Duration::from_millis(100);
/// First retention run after startup (0.7: 60 s).
pub const CLEANUP_FIRST_DELAY: Duration = Duration::from_secs(60);

const _: () = assert!(RESPONSE_BYTES_MAX <= IN_FLIGHT_BYTES_MAX);
const _: () = assert!(STOPPING_HOLDER_POLL.as_millis() * 10 <= STOPPING_HOLDER_WAIT.as_millis());

// How the limits relate, checked when the broker is compiled: one response fits in the memory
// budget (it is held there while written), a request can be read and answered before an idle
// connection is closed, a handshake is admitted only within the connection limit, a stopping
// broker's grace fits in the wait of the process that takes its log directory over, and that
// wait is polled many times.
const _: () = assert!(RESPONSE_BYTES_MAX <= IN_FLIGHT_BYTES_MAX);
const _: () = assert!(REQUEST_READ_TIMEOUT.as_secs() < IDLE_TIMEOUT.as_secs());
const _: () = assert!(RESPONSE_WRITE_TIMEOUT.as_secs() < IDLE_TIMEOUT.as_secs());
const _: () = assert!(TLS_HANDSHAKES_MAX <= CONNECTIONS_MAX);
const _: () = assert!(TLS_HANDSHAKE_TIMEOUT.as_secs() < REQUEST_READ_TIMEOUT.as_secs());
const _: () = assert!(SHUTDOWN_GRACE.as_secs() < STOPPING_HOLDER_WAIT.as_secs());
const _: () = assert!(STOPPING_HOLDER_POLL.as_millis() * 100 <= STOPPING_HOLDER_WAIT.as_millis());
