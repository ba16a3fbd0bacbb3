//! The real `tributary` binary as a broker process on loopback.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `tributary` binary built by `cargo test --workspace` (next to the test executables).
pub fn tributary_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let binary = dir.join("tributary");
    assert!(
        binary.exists(),
        "{} is missing: run `cargo build -p tributary-tools` (cargo test --workspace builds it)",
        binary.display()
    );
    binary
}

/// `server.properties` for a one-broker test cluster: broker 0 on 127.0.0.1:`port`, logs under
/// `log_dir`, two partitions per topic, every message flushed at once (so tools that read the
/// files or ask for offsets see everything acknowledged), a 2 s ZooKeeper session.
pub fn one_broker_properties(port: u16, log_dir: &Path, zk_connect: &str) -> String {
    format!(
        "brokerid=0\nhostname=127.0.0.1\nport={port}\nlog.dir={}\nnum.partitions=2\nlog.flush.interval=1\n\
         zk.connect={zk_connect}\nzk.sessiontimeout.ms=2000\nzk.connectiontimeout.ms=10000\n",
        log_dir.display()
    )
}

/// A broker process; killed when dropped.
#[derive(Debug)]
pub struct BrokerProcess {
    child: Option<Child>,
    /// The broker's port.
    pub port: u16,
    /// Its server.properties.
    pub config: PathBuf,
    /// For a mirror broker: its consumer and producer properties.
    pub mirror: Vec<PathBuf>,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl BrokerProcess {
    /// Writes `properties` to `dir/server.properties`, starts the broker and waits until its
    /// port accepts connections.
    pub fn start(dir: &Path, port: u16, properties: &str) -> BrokerProcess {
        let config = dir.join("server.properties");
        std::fs::write(&config, properties).expect("write server.properties");
        let mut broker = BrokerProcess {
            child: None,
            port,
            config,
            mirror: Vec::new(),
            log: dir.join("broker.log"),
        };
        broker.spawn();
        broker
    }

    /// A mirror broker (Kafka 0.7.0's embedded mirror): `server.properties` written from
    /// `properties`, plus the consumer and producer files.
    pub fn start_mirror(
        dir: &Path,
        port: u16,
        properties: &str,
        consumer: &str,
        producer: &str,
    ) -> BrokerProcess {
        let config = dir.join("server.properties");
        std::fs::write(&config, properties).expect("write server.properties");
        let (c, p) = (
            dir.join("consumer.properties"),
            dir.join("producer.properties"),
        );
        std::fs::write(&c, consumer).expect("write consumer.properties");
        std::fs::write(&p, producer).expect("write producer.properties");
        let mut broker = BrokerProcess {
            child: None,
            port,
            config,
            mirror: vec![c, p],
            log: dir.join("broker.log"),
        };
        broker.spawn();
        broker
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Starts the process again with the same configuration.
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("broker log");
        let child = Command::new(tributary_binary())
            .arg("server")
            .arg(&self.config)
            .args(&self.mirror)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start tributary");
        self.child = Some(child);
        self.wait_until_serving();
    }

    fn wait_until_serving(&mut self) {
        let child = self.child.as_mut().expect("the broker was just spawned");
        wait_until_listening(child, self.port, &self.log, "broker");
    }

    /// Waits (up to 30 s) until the broker says it registered in ZooKeeper: it listens before
    /// it registers, as 0.7's broker does, so a port that answers is not yet a registration.
    pub fn wait_until_registered(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.log_text().contains("registered broker ") {
            assert!(
                Instant::now() < deadline,
                "the broker did not register within 30 s:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The broker's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            send_signal(child, signal);
        }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and wait (up to 30 s) for a clean exit; returns whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        self.child.take().is_some_and(terminate)
    }

    /// SIGSTOP: freeze the process (its ZooKeeper session will expire).
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT: resume a frozen process.
    pub fn resume(&self) {
        self.signal("CONT");
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
        }
        self.kill();
    }
}

/// Sends `signal` (`TERM`, `STOP`, ...) to `child` with `kill`.
pub fn send_signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} failed");
}

/// SIGTERM to `child`, then waits (up to 30 s, SIGKILL after) for it to exit; whether it
/// exited successfully.
pub fn terminate(mut child: Child) -> bool {
    send_signal(&child, "TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status.success();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to 30 s) until `child`, a `what` process writing its log to `log`, accepts
/// connections on 127.0.0.1:`port`; panics with its log if it exits first or never listens.
pub fn wait_until_listening(child: &mut Child, port: u16, log: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let log_text = || std::fs::read_to_string(log).unwrap_or_default();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Some(status) = child.try_wait().ok().flatten() {
            panic!("{what} exited with {status}:\n{}", log_text());
        }
        assert!(
            Instant::now() < deadline,
            "{what} not listening on {addr}:\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
