//! Every configuration key Tributary reads, with its default and meaning: the one table behind
//! unknown-key suggestions, the settings a tool or the server prints, and
//! `docs/configuration.md` (generated from it; a test keeps the file and the table equal).
//!
//! The typed configurations cannot read a key that is not listed here: in debug builds
//! [`Fields`](super::fields) asserts that every key it is asked for is documented, so a new
//! key without documentation fails the tests.

use std::collections::BTreeMap;

use super::properties::Properties;

/// Which configuration file a key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConfigKind {
    /// A broker's `server.properties`.
    Broker,
    /// A producer's `producer.properties`.
    Producer,
    /// A consumer's `consumer.properties` (and the embedded mirror's options).
    Consumer,
    /// A ZooKeeper server's `zookeeper.properties`.
    ZooKeeperServer,
}

impl ConfigKind {
    /// Every kind, in the order the documentation lists them.
    pub const ALL: [ConfigKind; 4] = [
        ConfigKind::Broker,
        ConfigKind::Producer,
        ConfigKind::Consumer,
        ConfigKind::ZooKeeperServer,
    ];

    /// What the kind is called in messages ("a broker setting").
    pub fn noun(self) -> &'static str {
        match self {
            ConfigKind::Broker => "broker",
            ConfigKind::Producer => "producer",
            ConfigKind::Consumer => "consumer",
            ConfigKind::ZooKeeperServer => "ZooKeeper server",
        }
    }

    /// The file such settings usually live in.
    pub fn file(self) -> &'static str {
        match self {
            ConfigKind::Broker => "server.properties",
            ConfigKind::Producer => "producer.properties",
            ConfigKind::Consumer => "consumer.properties",
            ConfigKind::ZooKeeperServer => "zookeeper.properties",
        }
    }
}

/// A key's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultValue {
    /// This literal value.
    Value(&'static str),
    /// Unset (the feature is off, or the value is derived elsewhere).
    Unset,
    /// The key must be set.
    Required,
    /// The value of another key of the same file.
    SameAs(&'static str),
}

/// One documented key.
#[derive(Debug, Clone, Copy)]
pub struct KeyDoc {
    /// Which file it belongs to.
    pub kind: ConfigKind,
    /// The key, spelled as in 0.7.
    pub key: &'static str,
    /// Its default.
    pub default: DefaultValue,
    /// What it does.
    pub meaning: &'static str,
    /// How Kafka 0.7 differs, or what Tributary does beyond it (empty when nothing).
    pub note: &'static str,
}

use ConfigKind::{Broker as B, Consumer as C, Producer as P, ZooKeeperServer as Z};
use DefaultValue::{Required, SameAs, Unset, Value as V};

const fn doc(
    kind: ConfigKind,
    key: &'static str,
    default: DefaultValue,
    meaning: &'static str,
    note: &'static str,
) -> KeyDoc {
    KeyDoc {
        kind,
        key,
        default,
        meaning,
        note,
    }
}

/// Every key, grouped by kind, in the order the documentation lists them.
pub const KEYS: &[KeyDoc] = &[
    doc(B, "brokerid", Required, "The broker's id, unique in the cluster; registered as /brokers/ids/<id>.", ""),
    doc(B, "hostname", Unset, "The host name or address the broker registers for clients; unset means the host's IP address.", ""),
    doc(B, "port", V("6667"), "The TCP port to listen on.", "The sample configs use 9092."),
    doc(B, "advertised.host.name", SameAs("hostname"), "The host registered in ZooKeeper for clients, when they reach the broker by another name than the one it binds to (NAT, a proxy).", "Tributary, named as in Kafka 0.8.1."),
    doc(B, "advertised.port", Unset, "The port registered in ZooKeeper for clients, when they reach the broker through another port (a proxy, port forwarding); unset registers the port listened on.", "Tributary, named as in Kafka 0.8.1."),
    doc(B, "advertised.listeners", Unset, "Where clients reach each listener when not where it binds (a proxy, NAT): PLAINTEXT://host:port,SSL://host:port, an entry only for listeners that exist, each with its host. Registered in /brokers/ids (plaintext) and /tributary/endpoints. Not with advertised.host.name or advertised.port.", "Tributary; Kafka 0.9's name."),
    doc(B, "num.threads", Unset, "Worker threads serving connections; unset means one per CPU.", ""),
    doc(B, "socket.send.buffer", V("102400"), "SO_SNDBUF of accepted connections, in bytes (a hint to the OS).", "Applied from 0.7.1."),
    doc(B, "socket.receive.buffer", V("102400"), "SO_RCVBUF of accepted connections, in bytes; also the most read from a socket at once.", "Applied from 0.7.1."),
    doc(B, "max.socket.request.bytes", V("104857600"), "The largest request accepted; a larger size prefix closes the connection before anything is buffered.", ""),
    doc(B, "monitoring.period.secs", V("600"), "The window of the broker's request statistics.", ""),
    doc(B, "log.dir", Required, "The directory holding every partition's log; locked by one broker at a time.", "Tributary refuses a second process on the same log.dir (0.7 let both run and corrupt each other)."),
    doc(B, "num.partitions", V("1"), "Partitions of a topic on this broker, unless topic.partition.count.map says otherwise (at most 65536, as every count in the map).", "0.7 took any int; Tributary refuses more than 65536 (a consumer skips a registration with more)."),
    doc(B, "topic.partition.count.map", Unset, "Per-topic partition counts: topic:count,topic:count.", "Malformed entries are skipped with a warning, as in 0.7."),
    doc(B, "log.file.size", V("1073741824"), "A segment rolls before it would pass this many bytes.", "0.7.0/0.7.1 rolled after the append; 0.7.2 and Tributary before."),
    doc(B, "topic.log.file.size", Unset, "Per-topic segment sizes: topic:bytes,...", "0.7.2."),
    doc(B, "log.roll.hours", V("168"), "A segment rolls when its first append is this old.", "0.7.2."),
    doc(B, "topic.log.roll.hours", Unset, "Per-topic roll ages: topic:hours,...", "0.7.2."),
    doc(B, "log.flush.interval", V("500"), "Unflushed messages that force a flush. Messages are invisible to consumers until flushed.", ""),
    doc(B, "log.default.flush.scheduler.interval.ms", V("3000"), "How often the flush timer looks for partitions due a flush.", ""),
    doc(B, "log.default.flush.interval.ms", SameAs("log.default.flush.scheduler.interval.ms"), "A partition is flushed once its oldest unflushed data is this old.", ""),
    doc(B, "topic.flush.intervals.ms", Unset, "Per-topic flush ages: topic:ms,...", ""),
    doc(B, "log.retention.hours", V("168"), "Segments last modified longer ago are deleted.", ""),
    doc(B, "topic.log.retention.hours", Unset, "Per-topic retention: topic:hours,...", ""),
    doc(B, "log.retention.size", V("-1"), "Oldest segments are deleted while a partition holds more bytes than this; -1 turns it off.", "An int in 0.7.0, a long from 0.7.1."),
    doc(B, "topic.log.retention.size", Unset, "Per-topic size retention: topic:bytes,...", "0.7.2."),
    doc(B, "log.cleanup.interval.mins", V("10"), "How often retention runs (the first run is one minute after start).", ""),
    doc(B, "max.message.size", V("1000000"), "The largest top-level message payload (a compressed wrapper counts compressed).", "0.7.2 drops a larger message silently; Tributary refuses the request (the connection closes) so the producer sees it."),
    doc(B, "max.topic.name.length", V("255"), "The longest topic name accepted.", "0.7.2."),
    doc(B, "acks.flush.delay.ms", V("5"), "The longest a flush for producers waiting on durable acknowledgements waits for requests the broker is already appending to join it (one fsync acknowledges them all). It does not wait when nothing else is being appended.", "Tributary (ACKED_PRODUCE); 0.7 has no acknowledgements."),
    doc(B, "fetch.zero.copy", V("true"), "Serve fetched bytes whose messages this broker already checked (when appended, at recovery, or by an earlier fetch) straight from the page cache with sendfile; false reads every served byte into memory and checks its CRC again on every fetch.", "Tributary; 0.7 serves with sendfile and never checks what it serves."),
    doc(B, "metrics.port", Unset, "Serve Prometheus metrics (text format) at http://<host>:<port>/metrics, on metrics.host; unset serves and collects none. The names are listed in docs/operations.md.", "Tributary; 0.7 reports through JMX."),
    doc(B, "metrics.host", Unset, "The address the metrics endpoint binds: unset, 127.0.0.1 when the broker has an SSL listener (TLS on), unless metrics.ssl is true with ssl.client.auth=required (scrapers authenticated); else hostname (every interface when hostname is unset).", "Tributary."),
    doc(B, "metrics.ssl", V("false"), "true: the metrics endpoint speaks HTTPS with the SSL listener's certificate, and asks scrapers for certificates as ssl.client.auth says. Needs an SSL listener.", "Tributary."),
    doc(B, "max.connections.per.ip", V("2147483647"), "Connections one client address may hold open (both listeners together); one more is closed at once, logged once until the address has room again, and counted in tributary_connections_refused_total{reason=\"per_ip\"}.", "Tributary; Kafka 0.8.2's name."),
    doc(B, "max.connections.per.ip.overrides", Unset, "Limits of particular addresses, <IP address>:<count>[,...] (IPv6 in brackets, [fd00::7]:50; 0 refuses the address, said once; host names are not resolved).", "Tributary; Kafka 0.8.2's name, which also takes host names."),
    doc(B, "listeners", Unset, "Where the broker listens and what each port speaks: PLAINTEXT://host:port and/or SSL://host:port, comma-separated (an empty host is every interface). Unset listens as 0.7 does, plaintext on hostname:port. Leaving PLAINTEXT out turns the plaintext listener off; the endpoints are registered in /tributary/endpoints/<id>.", "Tributary, named as in Kafka 0.9; 0.7 clients speak plaintext only and find it in /brokers/ids/<id>."),
    doc(B, "ssl.certificate.location", Unset, "The SSL listener's certificate chain (PEM, leaf first); required with an SSL listener. Read again when the file changes (rotation without restart).", "Tributary, librdkafka's name."),
    doc(B, "ssl.key.location", Unset, "The private key of ssl.certificate.location (PEM: PKCS#8, PKCS#1 or SEC1); required with an SSL listener.", "Tributary, librdkafka's name."),
    doc(B, "ssl.ca.location", Unset, "Certificates (PEM) that client certificates must chain to; required when ssl.client.auth is requested or required.", "Tributary, librdkafka's name."),
    doc(B, "ssl.allow.list.location", Unset, "The SSL listener's allow-list: one rule per line, `<produce|fetch|all> <principal|*> <topic regex>`, the principal being the client certificate's subject as RFC 4514 writes it (CN=mirror-west,O=Example) or ANONYMOUS; a request naming a topic no rule allows is refused (FETCH and OFFSETS answer error 29, a produce closes the connection; nothing is stored). Unset: every client that completes the handshake may do everything. Read again when the file changes. The plaintext listener is not affected.", "Tributary (docs/security.md)."),
    doc(B, "ssl.client.auth", V("none"), "none: clients are not asked for a certificate; requested: one offered must chain to ssl.ca.location; required: a client without such a certificate is refused during the handshake. TLS 1.2 and 1.3 only.", "Tributary, Kafka's name and values."),
    doc(B, "cluster.name", Unset, "This cluster's readable name (1 to 64 letters, digits, '_' or '-'), recorded with its identity in ZooKeeper (/cluster/id) by the first broker given one; a broker given another name than the recorded one refuses to start. Shown in logs, metrics and mirror-status.", "Tributary; 0.7 clusters have no identity."),
    doc(B, "enable.zookeeper", V("true"), "Register in ZooKeeper; false runs a standalone broker.", ""),
    doc(B, "zk.connect", Unset, "ZooKeeper servers host:port[,host:port...][/chroot]; required when enable.zookeeper=true.", "The chroot node must exist."),
    doc(B, "zk.sessiontimeout.ms", V("6000"), "The ZooKeeper session timeout: the broker's registration goes this long after it dies.", ""),
    doc(B, "zk.connectiontimeout.ms", SameAs("zk.sessiontimeout.ms"), "How long to keep trying to reach ZooKeeper at startup before giving up.", ""),
    doc(B, "zk.synctime.ms", V("2000"), "How far a ZooKeeper follower may lag its leader.", ""),
    doc(B, "zk.ssl.client.enable", V("false"), "true: the broker's ZooKeeper sessions use TLS 1.2 or 1.3 (the servers' secureClientPort, which zk.connect must then name).", "Tributary; Kafka 2.5's zookeeper.ssl.client.enable."),
    doc(B, "zk.ssl.ca.location", Unset, "The CA certificates (PEM) ZooKeeper's certificate must chain to; required with zk.ssl.client.enable=true.", "Tributary, PEM like ssl.ca.location."),
    doc(B, "zk.ssl.certificate.location", Unset, "This session's certificate (PEM, leaf first), for a ZooKeeper that asks for one; with ZooKeeper's x509 provider its subject is the session's identity. With zk.ssl.key.location.", "Tributary."),
    doc(B, "zk.ssl.key.location", Unset, "The private key of zk.ssl.certificate.location (PEM).", "Tributary."),
    doc(B, "zk.auth.digest.location", Unset, "A file (keep it 0600) whose first line is user:password: the session authenticates with ZooKeeper's digest scheme.", "Tributary (docs/security.md)."),
    doc(B, "zk.set.acl", V("false"), "true: the nodes this process creates get ACLs, everything for the identities its session authenticated with (digest or certificate), read for anyone; /consumers itself also lets anyone create (0.7 consumers' own groups). Needs zk.auth.digest.location or a ZooKeeper certificate; every process of one cluster must present the same identity. Nodes created before keep their ACLs.", "Tributary; Kafka 0.9's zookeeper.set.acl."),
    doc(B, "replica.source.zk.connect", Unset, "Replica mode: the source cluster's ZooKeeper. Set, this broker copies the partitions of one source broker byte for byte, at the same offsets, and refuses produces to them.", "Tributary."),
    doc(B, "replica.source.brokerid", SameAs("brokerid"), "Replica mode: the source broker whose partitions this broker copies.", "Tributary."),
    doc(B, "replica.topics.whitelist", Unset, "Replica mode: copy only topics matching this regex (0.7.1's rules: commas mean |, the whole name must match); every topic when neither list is set.", "Tributary; setting both lists is an error."),
    doc(B, "replica.topics.blacklist", Unset, "Replica mode: copy every topic but those matching this regex.", "Tributary."),
    doc(B, "replica.fetch.size", V("1048576"), "Replica mode: bytes asked per partition and fetch; a larger message is fetched with a larger size, up to max.message.size.", "Tributary."),
    doc(B, "replica.fetch.backoff.ms", V("100"), "Replica mode: pause after a fetch round that brought nothing.", "Tributary."),
    doc(B, "replica.socket.timeout.ms", V("30000"), "Replica mode: deadline of every request to the source broker.", "Tributary."),
    doc(B, "replica.offsets.sync.groups", Unset, "Replica mode: consumer groups (regex, whole name) whose committed source offsets are copied to this cluster's ZooKeeper, never past what the replica holds, while the group has no live member here.", "Tributary."),
    doc(B, "replica.offsets.sync.interval.ms", V("1000"), "Replica mode: how often consumer offsets are synced; a consumer that fails over re-reads at most this long's progress.", "Tributary."),
    doc(B, "replica.security.protocol", V("plaintext"), "plaintext, or ssl: the replica copier connects to brokers' SSL listeners (found in /tributary/endpoints/<id>; a broker listed without one is connected to at the address given) inside TLS 1.2 or 1.3.", "Tributary, librdkafka's name; 0.7 speaks plaintext only."),
    doc(B, "replica.ssl.ca.location", Unset, "The CA certificates (PEM) the brokers' certificates must chain to; required with replica.security.protocol=ssl.", "Tributary, librdkafka's name."),
    doc(B, "replica.ssl.certificate.location", Unset, "This client's certificate (PEM, leaf first), shown to brokers that ask for one (ssl.client.auth); with replica.ssl.key.location. Read again when the file changes.", "Tributary, librdkafka's name."),
    doc(B, "replica.ssl.key.location", Unset, "The private key of replica.ssl.certificate.location (PEM).", "Tributary, librdkafka's name."),
    doc(B, "replica.ssl.endpoint.identification.algorithm", V("https"), "https: the broker's certificate must name the host connected to; none: it need only chain to the CA.", "Tributary, librdkafka's name and values."),
    doc(B, "replica.source.zk.ssl.client.enable", V("false"), "true: the replica's source ZooKeeper sessions use TLS 1.2 or 1.3 (the source servers' secureClientPort, which replica.source.zk.connect must then name).", "Tributary; Kafka 2.5's zookeeper.ssl.client.enable."),
    doc(B, "replica.source.zk.ssl.ca.location", Unset, "The CA certificates (PEM) ZooKeeper's certificate must chain to; required with replica.source.zk.ssl.client.enable=true.", "Tributary, PEM like ssl.ca.location."),
    doc(B, "replica.source.zk.ssl.certificate.location", Unset, "This session's certificate (PEM, leaf first), for a ZooKeeper that asks for one; with ZooKeeper's x509 provider its subject is the session's identity. With replica.source.zk.ssl.key.location.", "Tributary."),
    doc(B, "replica.source.zk.ssl.key.location", Unset, "The private key of replica.source.zk.ssl.certificate.location (PEM).", "Tributary."),
    doc(B, "replica.source.zk.auth.digest.location", Unset, "A file (keep it 0600) whose first line is user:password: the session authenticates with ZooKeeper's digest scheme.", "Tributary (docs/security.md)."),
    doc(P, "broker.list", Unset, "Static brokers id:host:port,...; the broker picks the partition. Exactly one of broker.list and zk.connect.", "0.7.1+ refuses both; Tributary, like 0.7.0, warns and uses zk.connect."),
    doc(P, "zk.connect", Unset, "ZooKeeper of the target cluster, to discover brokers and partitions.", ""),
    doc(P, "zk.sessiontimeout.ms", V("6000"), "The ZooKeeper session timeout.", ""),
    doc(P, "zk.connectiontimeout.ms", SameAs("zk.sessiontimeout.ms"), "How long to try to reach ZooKeeper.", ""),
    doc(P, "zk.synctime.ms", V("2000"), "How far a ZooKeeper follower may lag its leader.", ""),
    doc(P, "zk.ssl.client.enable", V("false"), "true: the producer's ZooKeeper sessions use TLS 1.2 or 1.3 (the servers' secureClientPort, which zk.connect must then name).", "Tributary; Kafka 2.5's zookeeper.ssl.client.enable."),
    doc(P, "zk.ssl.ca.location", Unset, "The CA certificates (PEM) ZooKeeper's certificate must chain to; required with zk.ssl.client.enable=true.", "Tributary, PEM like ssl.ca.location."),
    doc(P, "zk.ssl.certificate.location", Unset, "This session's certificate (PEM, leaf first), for a ZooKeeper that asks for one; with ZooKeeper's x509 provider its subject is the session's identity. With zk.ssl.key.location.", "Tributary."),
    doc(P, "zk.ssl.key.location", Unset, "The private key of zk.ssl.certificate.location (PEM).", "Tributary."),
    doc(P, "zk.auth.digest.location", Unset, "A file (keep it 0600) whose first line is user:password: the session authenticates with ZooKeeper's digest scheme.", "Tributary (docs/security.md)."),
    doc(P, "zk.set.acl", V("false"), "true: the nodes this process creates get ACLs, everything for the identities its session authenticated with (digest or certificate), read for anyone; /consumers itself also lets anyone create (0.7 consumers' own groups). Needs zk.auth.digest.location or a ZooKeeper certificate; every process of one cluster must present the same identity. Nodes created before keep their ACLs.", "Tributary; Kafka 0.9's zookeeper.set.acl."),
    doc(P, "partitioner.class", Unset, "Chooses the partition for a keyed message; not allowed with broker.list.", "Only the default (hash of the key) is built in."),
    doc(P, "producer.type", V("sync"), "sync sends each request before returning; async queues and sends in batches.", ""),
    doc(P, "compression.codec", V("0"), "0 none, 1 gzip, 2 snappy.", "Snappy from 0.7.1."),
    doc(P, "compressed.topics", Unset, "With a codec set: compress only these topics (comma list); unset compresses all.", "Ignored in sync mode by 0.7."),
    doc(P, "zk.read.num.retries", V("3"), "Re-reads of ZooKeeper when a chosen broker is not in the cache.", ""),
    doc(P, "num.retries", V("0"), "Times a failed send is retried.", "0.7.1+."),
    doc(P, "serializer.class", V("kafka.serializer.DefaultEncoder"), "How values become message payloads.", ""),
    doc(P, "buffer.size", V("102400"), "SO_SNDBUF of producer connections.", ""),
    doc(P, "connect.timeout.ms", V("5000"), "How long a connection attempt may take.", ""),
    doc(P, "socket.timeout.ms", V("30000"), "How long a send may take.", ""),
    doc(P, "reconnect.interval", V("30000"), "Requests after which a connection is replaced.", ""),
    doc(P, "reconnect.time.interval.ms", V("10000000"), "Age after which a connection is replaced; negative turns it off.", "0.7.1+."),
    doc(P, "max.message.size", V("1000000"), "The largest message payload the producer sends.", ""),
    doc(P, "queue.time", V("5000"), "Async: the longest a message waits in the queue before its batch is sent.", ""),
    doc(P, "queue.size", V("10000"), "Async: messages the queue holds.", ""),
    doc(P, "queue.enqueueTimeout.ms", V("0"), "Async, queue full: 0 fails at once, -1 waits, >0 waits that long then fails.", "0.7 drops silently on failure; Tributary reports every message it cannot queue."),
    doc(P, "batch.size", V("200"), "Async: messages per batch.", ""),
    doc(P, "callback.handler", Unset, "Async: a callback class.", "Java classes are not loaded; ignored."),
    doc(P, "callback.handler.props", Unset, "Properties for callback.handler.", "Ignored."),
    doc(P, "event.handler", Unset, "Async: an event handler class.", "Java classes are not loaded; ignored."),
    doc(P, "event.handler.props", Unset, "Properties for event.handler.", "Ignored."),
    doc(P, "durable.acks", V("false"), "Ask brokers to acknowledge each request once its data is flushed (durable and visible); each message's delivery then reports its offset, and a failure is reported, never assumed away.", "Tributary (ACKED_PRODUCE, request type 100); 0.7 produce has no response."),
    doc(P, "durable.acks.fallback", V("false"), "When a broker does not know ACKED_PRODUCE (a Kafka 0.7 broker closes the connection on it): true sends to it without acknowledgements, false fails those messages. Either way it is logged once per broker.", "Tributary."),
    doc(P, "security.protocol", V("plaintext"), "plaintext, or ssl: the producer connects to brokers' SSL listeners (found in /tributary/endpoints/<id>; a broker listed without one is connected to at the address given) inside TLS 1.2 or 1.3.", "Tributary, librdkafka's name; 0.7 speaks plaintext only."),
    doc(P, "ssl.ca.location", Unset, "The CA certificates (PEM) the brokers' certificates must chain to; required with security.protocol=ssl.", "Tributary, librdkafka's name."),
    doc(P, "ssl.certificate.location", Unset, "This client's certificate (PEM, leaf first), shown to brokers that ask for one (ssl.client.auth); with ssl.key.location. Read again when the file changes.", "Tributary, librdkafka's name."),
    doc(P, "ssl.key.location", Unset, "The private key of ssl.certificate.location (PEM).", "Tributary, librdkafka's name."),
    doc(P, "ssl.endpoint.identification.algorithm", V("https"), "https: the broker's certificate must name the host connected to; none: it need only chain to the CA.", "Tributary, librdkafka's name and values."),
    doc(C, "groupid", Required, "The consumer group.", "Validated like a topic name, as it becomes a ZooKeeper path."),
    doc(C, "consumerid", Unset, "A fixed consumer id instead of a generated one (for tests).", ""),
    doc(C, "zk.connect", Required, "ZooKeeper of the cluster to consume from.", ""),
    doc(C, "zk.sessiontimeout.ms", V("6000"), "The ZooKeeper session timeout: a dead consumer's partitions move after this long.", ""),
    doc(C, "zk.connectiontimeout.ms", SameAs("zk.sessiontimeout.ms"), "How long to try to reach ZooKeeper.", ""),
    doc(C, "zk.synctime.ms", V("2000"), "How far a ZooKeeper follower may lag its leader.", ""),
    doc(C, "zk.ssl.client.enable", V("false"), "true: the consumer's ZooKeeper sessions use TLS 1.2 or 1.3 (the servers' secureClientPort, which zk.connect must then name).", "Tributary; Kafka 2.5's zookeeper.ssl.client.enable."),
    doc(C, "zk.ssl.ca.location", Unset, "The CA certificates (PEM) ZooKeeper's certificate must chain to; required with zk.ssl.client.enable=true.", "Tributary, PEM like ssl.ca.location."),
    doc(C, "zk.ssl.certificate.location", Unset, "This session's certificate (PEM, leaf first), for a ZooKeeper that asks for one; with ZooKeeper's x509 provider its subject is the session's identity. With zk.ssl.key.location.", "Tributary."),
    doc(C, "zk.ssl.key.location", Unset, "The private key of zk.ssl.certificate.location (PEM).", "Tributary."),
    doc(C, "zk.auth.digest.location", Unset, "A file (keep it 0600) whose first line is user:password: the session authenticates with ZooKeeper's digest scheme.", "Tributary (docs/security.md)."),
    doc(C, "zk.set.acl", V("false"), "true: the nodes this process creates get ACLs, everything for the identities its session authenticated with (digest or certificate), read for anyone; /consumers itself also lets anyone create (0.7 consumers' own groups). Needs zk.auth.digest.location or a ZooKeeper certificate; every process of one cluster must present the same identity. Nodes created before keep their ACLs.", "Tributary; Kafka 0.9's zookeeper.set.acl."),
    doc(C, "socket.timeout.ms", V("30000"), "How long a fetch may take.", ""),
    doc(C, "socket.buffersize", V("65536"), "SO_RCVBUF of fetch connections (a hint to the OS, which caps it at net.core.rmem_max); 0 leaves the buffer to the kernel's autotuning, which grows it with the link. One connection moves at most this many bytes per round trip: raise it (or use 0) across a long link.", "0 is Tributary's; 0.7 always sets it."),
    doc(C, "fetch.size", V("1048576"), "Bytes per partition per fetch; a message must fit in it. One partition moves at most this many bytes per round trip to its broker.", "307200 in 0.7.0."),
    doc(C, "num.consumer.fetchers", V("1"), "Fetch connections per broker (at most 64), each fetching its own share of the broker's partitions, so that this many fetches are in flight to one broker at once: across a long link, raise it until (partitions x fetch.size) per connection fills the link.", "Tributary, named as in Kafka 0.8; 0.7 has one fetch at a time per broker."),
    doc(C, "backoff.increment.ms", V("1000"), "0.7.0's name for fetcher.backoff.ms.", ""),
    doc(C, "fetcher.backoff.ms", SameAs("backoff.increment.ms"), "Pause after a fetch round that returned nothing.", "0.7.1+."),
    doc(C, "autocommit.enable", V("true"), "Commit consumed offsets to ZooKeeper periodically.", ""),
    doc(C, "autocommit.interval.ms", V("10000"), "How often offsets are committed.", ""),
    doc(C, "queuedchunks.max", V("10"), "Fetched chunks buffered per stream.", "100 in 0.7.0."),
    doc(C, "autooffset.reset", V("smallest"), "Where to start without a committed offset or after OffsetOutOfRange: smallest, largest, or anything else for an error.", ""),
    doc(C, "consumer.timeout.ms", V("-1"), "How long a stream waits for a message before giving up; -1 waits forever.", ""),
    doc(C, "rebalance.retries.max", V("4"), "Rebalance attempts before giving up.", "0.7.1+."),
    doc(C, "rebalance.backoff.ms", SameAs("zk.synctime.ms"), "Pause between rebalance attempts.", "0.7.1+."),
    doc(C, "shallowiterator.enable", V("false"), "0.7: streams yield compressed wrappers unopened. Tributary: not supported yet; a warning says so and messages are yielded decompressed.", "0.7.1+."),
    doc(C, "mirror.topics.whitelist", Unset, "Embedded mirror: mirror only these topics (comma list of exact names).", "0.7.0; setting both lists is an error."),
    doc(C, "mirror.topics.blacklist", Unset, "Embedded mirror: mirror every topic but these.", "0.7.0."),
    doc(C, "mirror.consumer.numthreads", V("1"), "Embedded mirror: streams per mirrored topic.", "0.7.0."),
    doc(C, "mirror.unowned.alarm.ms", V("30000"), "Mirror: how long a source partition the filter covers may have no live owner in the mirror's group before the mirror logs an error (once a minute), counts it in tributary_mirror_unowned_partitions and rejoins the group.", "Tributary; 0.7 said nothing when a partition had no owner."),
    doc(C, "mirror.commit.interval.ms", V("1000"), "Mirror: how often source offsets are committed, each up to what the mirror cluster has durably acknowledged.", "Tributary; 0.7 committed what was queued, acknowledged or not."),
    doc(C, "mirror.gap.policy", V("skip"), "Mirror: when the source deleted data before it was copied, skip (log an error with the byte range lost, count it, go on from the earliest offset) or stop (that partition stops, with the error).", "Tributary; 0.7 reset silently."),
    doc(C, "mirror.rename.topics", V("false"), "Mirror: name each mirrored topic in the mirror cluster by mirror.rename.pattern (active-active: both clusters take writes for a topic and each holds the other's under its own name). Replica mode keeps names.", "Tributary; 0.7 kept names."),
    doc(C, "mirror.preserve.partitions", V("false"), "Mirror: copy each source partition into one mirror partition (chosen from the source partition: a broker recorded in the mirror cluster's ZooKeeper by the first member to place it, or of the broker.list, then one of its partitions), in MIRROR_PRODUCE sets the mirror cluster appends at most once each, recording their source positions with the data: a set sent again after a crash, kill, rebalance or bounce is not copied twice. Needs Tributary brokers of this release in the mirror cluster. Do not turn on for a source whose partitions may start again at lower offsets (a log lost, a topic re-created): those messages would be taken for copies already held.", "Tributary; 0.7 spread messages at random and re-sent what was uncommitted."),
    doc(C, "mirror.offsets.sync.groups", Unset, "Mirror: consumer groups (regex, whole name) whose committed source offsets the mirror translates through its positions into the mirror cluster's partitions and writes in the mirror cluster's ZooKeeper, never past what the mirror holds, while the group has no live member there and never over an offset the group committed there itself. Needs mirror.preserve.partitions=true.", "Tributary (MirrorMaker 2's sync.group.offsets)."),
    doc(C, "mirror.offsets.sync.interval.ms", V("1000"), "Mirror: how often consumer offsets are synced; a group that fails over re-reads at most this long's progress (and the set its position fell inside).", "Tributary."),
    doc(C, "mirror.rename.pattern", V("{source}.{topic}"), "Mirror: the mirrored topic's name when mirror.rename.topics=true; {topic} (exactly once) is the source topic, {source} the source cluster's cluster.name.", "Tributary (MirrorMaker 2's convention)."),
    doc(C, "security.protocol", V("plaintext"), "plaintext, or ssl: the consumer connects to brokers' SSL listeners (found in /tributary/endpoints/<id>; a broker listed without one is connected to at the address given) inside TLS 1.2 or 1.3.", "Tributary, librdkafka's name; 0.7 speaks plaintext only."),
    doc(C, "ssl.ca.location", Unset, "The CA certificates (PEM) the brokers' certificates must chain to; required with security.protocol=ssl.", "Tributary, librdkafka's name."),
    doc(C, "ssl.certificate.location", Unset, "This client's certificate (PEM, leaf first), shown to brokers that ask for one (ssl.client.auth); with ssl.key.location. Read again when the file changes.", "Tributary, librdkafka's name."),
    doc(C, "ssl.key.location", Unset, "The private key of ssl.certificate.location (PEM).", "Tributary, librdkafka's name."),
    doc(C, "ssl.endpoint.identification.algorithm", V("https"), "https: the broker's certificate must name the host connected to; none: it need only chain to the CA.", "Tributary, librdkafka's name and values."),
    doc(Z, "dataDir", Required, "Where ZooKeeper keeps its snapshots.", "Read by ZooKeeper; Tributary's scripts read it too."),
    doc(Z, "clientPort", V("2181"), "The port clients connect to.", ""),
    doc(Z, "maxClientCnxns", V("60"), "Connections per client address; 0 is unlimited.", ""),
    doc(Z, "tickTime", V("2000"), "ZooKeeper's basic time unit in ms.", ""),
];

/// The documented keys of `kind`.
pub fn keys_of(kind: ConfigKind) -> impl Iterator<Item = &'static KeyDoc> {
    KEYS.iter().filter(move |k| k.kind == kind)
}

/// The documentation of `key` in `kind`, if it is a key of that kind.
pub fn find(kind: ConfigKind, key: &str) -> Option<&'static KeyDoc> {
    keys_of(kind).find(|k| k.key == key)
}

/// Names later Kafka versions (or common guesses) use for a 0.7 key.
const LATER_NAMES: &[(&str, &str)] = &[
    ("broker.id", "brokerid"),
    ("host.name", "hostname"),
    ("log.dirs", "log.dir"),
    ("zookeeper.connect", "zk.connect"),
    ("zookeeper.session.timeout.ms", "zk.sessiontimeout.ms"),
    ("zookeeper.connection.timeout.ms", "zk.connectiontimeout.ms"),
    ("zookeeper.sync.time.ms", "zk.synctime.ms"),
    ("num.network.threads", "num.threads"),
    ("num.io.threads", "num.threads"),
    ("socket.send.buffer.bytes", "socket.send.buffer"),
    ("socket.receive.buffer.bytes", "socket.receive.buffer"),
    ("socket.request.max.bytes", "max.socket.request.bytes"),
    ("log.segment.bytes", "log.file.size"),
    ("log.flush.interval.messages", "log.flush.interval"),
    ("log.flush.interval.ms", "log.default.flush.interval.ms"),
    (
        "log.flush.scheduler.interval.ms",
        "log.default.flush.scheduler.interval.ms",
    ),
    ("log.retention.bytes", "log.retention.size"),
    (
        "log.retention.check.interval.ms",
        "log.cleanup.interval.mins",
    ),
    ("message.max.bytes", "max.message.size"),
    ("group.id", "groupid"),
    ("consumer.id", "consumerid"),
    ("auto.offset.reset", "autooffset.reset"),
    ("auto.commit.enable", "autocommit.enable"),
    ("auto.commit.interval.ms", "autocommit.interval.ms"),
    ("fetch.message.max.bytes", "fetch.size"),
    ("socket.receive.buffer.bytes", "socket.buffersize"),
    ("queued.max.message.chunks", "queuedchunks.max"),
    ("metadata.broker.list", "broker.list"),
    ("queue.buffering.max.ms", "queue.time"),
    ("queue.buffering.max.messages", "queue.size"),
    ("queue.enqueue.timeout.ms", "queue.enqueueTimeout.ms"),
    ("batch.num.messages", "batch.size"),
    ("message.send.max.retries", "num.retries"),
    ("send.buffer.bytes", "buffer.size"),
];

/// The key of `kind` that an unknown `key` most likely meant: the 0.7 name of a later Kafka
/// key, a key differing only in case, or one within a small edit distance.
pub fn suggest(kind: ConfigKind, key: &str) -> Option<&'static str> {
    if let Some(target) = LATER_NAMES
        .iter()
        .filter(|(later, _)| *later == key)
        .map(|(_, old)| *old)
        .find(|old| find(kind, old).is_some())
    {
        return Some(target);
    }
    let lower = key.to_ascii_lowercase();
    let mut best: Option<(usize, &'static str)> = None;
    for candidate in keys_of(kind) {
        if candidate.key.to_ascii_lowercase() == lower {
            return Some(candidate.key);
        }
        let distance = edit_distance(&lower, &candidate.key.to_ascii_lowercase());
        let allowed = (candidate.key.len() / 5).clamp(1, 3);
        if distance <= allowed && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate.key));
        }
    }
    best.map(|(_, key)| key)
}

/// Levenshtein distance over bytes (keys are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = Vec::with_capacity(b.len() + 1);
        current.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous
                .get(j)
                .copied()
                .unwrap_or(usize::MAX)
                .saturating_add(usize::from(ca != cb));
            let delete = previous
                .get(j + 1)
                .copied()
                .unwrap_or(usize::MAX)
                .saturating_add(1);
            let insert = current
                .get(j)
                .copied()
                .unwrap_or(usize::MAX)
                .saturating_add(1);
            current.push(substitute.min(delete).min(insert));
        }
        previous = current;
    }
    previous.last().copied().unwrap_or(0)
}

/// One line of an effective configuration, as printed by the server and `check-config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingLine {
    /// The key.
    pub key: &'static str,
    /// The value in effect, as written in the file, or the default.
    pub value: String,
    /// Whether the file sets it to something other than the default.
    pub differs: bool,
}

/// The effective settings of `props` read as `kind`: every documented key with the file's value
/// or the default (a default that follows another key shows that key's value).
pub fn settings(kind: ConfigKind, props: &Properties) -> Vec<SettingLine> {
    let raw: BTreeMap<&str, String> = keys_of(kind)
        .filter_map(|k| {
            props
                .get(k.key)
                .map(|p| (k.key, p.value.trim().to_string()))
        })
        .collect();
    let default_of = |doc: &KeyDoc| -> String {
        let mut doc = *doc;
        // Follow "same as" chains (at most a few steps; the table has no cycles).
        for _ in 0..4 {
            match doc.default {
                V(v) => return v.to_string(),
                Unset => return "(unset)".to_string(),
                Required => return "(required)".to_string(),
                SameAs(other) => match (raw.get(other), find(kind, other)) {
                    (Some(v), _) => return v.clone(),
                    (None, Some(next)) => doc = *next,
                    (None, None) => return "(unset)".to_string(),
                },
            }
        }
        "(unset)".to_string()
    };
    keys_of(kind)
        .map(|doc| {
            let default = default_of(doc);
            match raw.get(doc.key) {
                // A required key has no default to differ from.
                Some(value) => SettingLine {
                    key: doc.key,
                    value: value.clone(),
                    differs: *value != default && doc.default != Required,
                },
                None => SettingLine {
                    key: doc.key,
                    value: default,
                    differs: false,
                },
            }
        })
        .collect()
}

/// The settings as text: `key = value` per line, `  # default: ...` after values the file changed.
pub fn render_settings(kind: ConfigKind, props: &Properties, indent: &str) -> String {
    let lines = settings(kind, props);
    let width = lines.iter().map(|l| l.key.len()).max().unwrap_or(0);
    let mut out = String::new();
    for line in &lines {
        let marker = if line.differs { "   (changed)" } else { "" };
        out.push_str(&format!(
            "{indent}{:<width$} = {}{marker}\n",
            line.key, line.value
        ));
    }
    out
}

/// `docs/configuration.md`, generated from [`KEYS`].
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration\n\n\
         Tributary reads Kafka 0.7's `.properties` files with 0.7's key names and 0.7.2's defaults, accepting\n\
         everything 0.7.0 accepted. Unknown keys never fail a start (0.7 files carry keys Tributary does not\n\
         use): each is logged with the key it most likely meant, and `tributary check-config` exits non-zero\n\
         on them unless given `--allow-unknown`. A value that cannot be used stops the start with the file,\n\
         line and key, and what would be right.\n\n\
         This file is generated from `core/src/config/reference.rs` (a test fails when they differ;\n\
         `TRIBUTARY_WRITE_DOCS=1 cargo test -p tributary-core --test config` rewrites it).\n",
    );
    for kind in ConfigKind::ALL {
        out.push_str(&format!("\n## {} (`{}`)\n\n| key | default | meaning | 0.7 and Tributary |\n|---|---|---|---|\n", kind.noun(), kind.file()));
        for k in keys_of(kind) {
            let default = match k.default {
                V(v) => format!("`{v}`"),
                Unset => "unset".to_string(),
                Required => "**required**".to_string(),
                SameAs(other) => format!("= `{other}`"),
            };
            out.push_str(&format!(
                "| `{}` | {default} | {} | {} |\n",
                k.key, k.meaning, k.note
            ));
        }
    }
    out
}
