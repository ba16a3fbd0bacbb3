//! A real ZooKeeper server for a test binary: Debian's `zookeeper` package, a temp data dir, a
//! free port on 127.0.0.1. Killed (exactly that process) when dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's ZooKeeper classpath (config dir first, for log4j).
/// netty-codec is missing from the jar's manifest and needed for TLS (`secureClientPort`).
const CLASSPATH: &str =
    "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar";
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running ZooKeeper.
#[derive(Debug)]
pub struct ZooKeeper {
    child: Child,
    port: u16,
    /// The TLS port, when started with [`ZooKeeper::start_secure`].
    secure_port: Option<u16>,
    dir: tempfile::TempDir,
}

/// The ports [`free_port`] hands out: below Linux's ephemeral range (32768 and up by default),
/// so the kernel never gives one to an outgoing connection between the moment it is chosen and
/// the moment its server binds it. (A port asked of the kernel with `bind(:0)` comes from that
/// range, and any client connecting meanwhile could take it: a broker of a test then fails to
/// listen, or a Prometheus scrapes a port that has become someone else's.)
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A free TCP port on 127.0.0.1 that no other call in this process has returned (until the
/// range wraps), and that nothing listened on when it was chosen. Assumes Linux's default
/// ephemeral range (32768 and up) and IPv4 loopback; two test processes running at once could
/// still pick the same port before either binds it (their start points are scattered, CI runs
/// one test binary at a time).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(PORTS.end - PORTS.start);
    // Processes start at scattered places (they check only that a port is not bound yet, so
    // two of them walking the same ports could both pick one).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // Only the first call sets the start; later ones find it set.
    let _set_by_an_earlier_call = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id().wrapping_mul(2_654_435_761) ^ nanos) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = PORTS.start + u16::try_from(offset).expect("offset < span");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {PORTS:?}");
}

impl ZooKeeper {
    /// Starts a standalone server with `tickTime=500` (so sessions may be as short as 1 s) and
    /// waits until it answers `srvr`.
    pub fn start() -> ZooKeeper {
        ZooKeeper::start_on("127.0.0.1")
    }

    /// [`ZooKeeper::start`] listening on every interface, so that other loopback addresses
    /// (127.0.0.2) reach it too: one server under two addresses.
    pub fn start_on_every_interface() -> ZooKeeper {
        ZooKeeper::start_on("0.0.0.0")
    }

    /// [`ZooKeeper::start`] with a TLS port beside the plaintext one: Netty, the certificates of
    /// `scripts/make-tls-certs.sh` in `certs` (the broker's as ZooKeeper's own; client
    /// certificates must chain to its CA), and ZooKeeper's x509 provider, so that a client's
    /// certificate subject is its identity (`x509:<subject>`) for ACLs.
    pub fn start_secure(certs: &Path) -> ZooKeeper {
        let key_store = certs.join("zookeeper-keystore.pem");
        let mut pem = std::fs::read(certs.join("broker.key")).expect("broker.key");
        pem.extend(std::fs::read(certs.join("broker.crt")).expect("broker.crt"));
        std::fs::write(&key_store, pem).expect("write the key store");
        let secure_port = free_port();
        let extra = format!(
            "secureClientPort={secure_port}\nsecureClientPortAddress=127.0.0.1\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
             ssl.trustStore.location={}\nssl.trustStore.type=PEM\n\
             ssl.clientAuth=want\n\
             authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n",
            key_store.display(),
            certs.join("ca.crt").display()
        );
        let mut zk = ZooKeeper::start_with("127.0.0.1", &extra);
        zk.secure_port = Some(secure_port);
        zk
    }

    /// The TLS port ([`ZooKeeper::start_secure`]).
    pub fn secure_port(&self) -> u16 {
        self.secure_port.expect("started with start_secure")
    }

    fn start_on(address: &str) -> ZooKeeper {
        ZooKeeper::start_with(address, "")
    }

    fn start_with(address: &str, extra: &str) -> ZooKeeper {
        assert!(
            Path::new("/usr/share/java/zookeeper.jar").exists(),
            "ZooKeeper is not installed: run scripts/install-deps.sh (apt-get install -y zookeeper)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let cfg = dir.path().join("zoo.cfg");
        let config = format!(
            "tickTime=500\ndataDir={}\nclientPort={port}\nclientPortAddress={address}\nadmin.enableServer=false\nmaxClientCnxns=0\n{extra}",
            dir.path().join("data").display()
        );
        std::fs::write(&cfg, config).expect("write zoo.cfg");
        let child = spawn(&cfg);
        let zk = ZooKeeper {
            child,
            port,
            secure_port: None,
            dir,
        };
        zk.wait_until_serving();
        zk
    }

    /// Kills the server (SIGKILL, as a crash), keeps it down for `down`, and starts it again
    /// on the same data directory and port; returns once it answers.
    pub fn restart(&mut self, down: Duration) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(down);
        self.child = spawn(&self.dir.path().join("zoo.cfg"));
        self.wait_until_serving();
    }

    /// Kills the server (SIGKILL: a datacenter lost); [`ZooKeeper::start_again`] brings it back
    /// on the same data directory and port.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a killed server again on its data directory and port; returns once it answers.
    pub fn start_again(&mut self) {
        self.child = spawn(&self.dir.path().join("zoo.cfg"));
        self.wait_until_serving();
    }

    fn wait_until_serving(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        while !self.answers() {
            assert!(
                Instant::now() < deadline,
                "ZooKeeper did not answer on port {} within {START_TIMEOUT:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What the server has served so far, from its `srvr` answer: the requests it received
    /// (every client's, reads and writes) and its last zxid (one per write it logged, failed
    /// writes included). `None` when it does not answer.
    pub fn served(&self) -> Option<Served> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut reply = String::new();
        stream.write_all(b"srvr").ok()?;
        stream.read_to_string(&mut reply).ok()?;
        let field = |name: &str| {
            reply
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(str::trim)
        };
        let received = field("Received:")?.parse().ok()?;
        let zxid = u64::from_str_radix(field("Zxid:")?.trim_start_matches("0x"), 16).ok()?;
        Some(Served {
            received,
            writes: zxid & 0xffff_ffff,
        })
    }

    fn answers(&self) -> bool {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut reply = String::new();
        stream.write_all(b"srvr").is_ok()
            && stream.read_to_string(&mut reply).is_ok()
            && reply.contains("Mode:")
    }
}

/// What a server has served ([`ZooKeeper::served`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// Requests received, reads and writes.
    pub received: u64,
    /// Writes logged in the current epoch (the zxid's counter), failed ones included.
    pub writes: u64,
}

impl Served {
    /// What was served between `before` and this reading (0 where a restart reset a count).
    pub fn since(self, before: Served) -> Served {
        Served {
            received: self.received.saturating_sub(before.received),
            writes: self.writes.saturating_sub(before.writes),
        }
    }
}

fn spawn(cfg: &Path) -> Child {
    Command::new("java")
        .args(["-Xmx256m", "-cp", CLASSPATH, MAIN_CLASS])
        .arg(cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start java (apt-get install -y default-jre-headless)")
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
