//! The real `tributary mirror-maker` as a process: started, stopped with SIGTERM or SIGKILL,
//! started again with the same files.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::broker::{terminate, tributary_binary};

/// A mirror maker process; killed when dropped.
#[derive(Debug)]
pub struct MakerProcess {
    child: Option<Child>,
    consumer: PathBuf,
    producer: PathBuf,
    whitelist: String,
    log: PathBuf,
}

impl MakerProcess {
    /// Writes `consumer` and `producer` (the two `.properties` files) under `dir` and starts
    /// `tributary mirror-maker --whitelist <whitelist>`; its stderr goes to `dir/maker.log`.
    pub fn start(dir: &Path, consumer: &str, producer: &str, whitelist: &str) -> MakerProcess {
        std::fs::create_dir_all(dir).expect("maker directory");
        let (c, p) = (
            dir.join("consumer.properties"),
            dir.join("producer.properties"),
        );
        std::fs::write(&c, consumer).expect("write consumer.properties");
        std::fs::write(&p, producer).expect("write producer.properties");
        let mut maker = MakerProcess {
            child: None,
            consumer: c,
            producer: p,
            whitelist: whitelist.to_string(),
            log: dir.join("maker.log"),
        };
        maker.spawn();
        maker
    }

    /// Starts the process (again), appending to its log.
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("maker log");
        let child = Command::new(tributary_binary())
            .args(["mirror-maker", "--whitelist", &self.whitelist])
            .arg("--consumer.config")
            .arg(&self.consumer)
            .arg("--producer.config")
            .arg(&self.producer)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start tributary mirror-maker");
        self.child = Some(child);
    }

    /// SIGTERM, and wait (up to 30 s) for it to exit; whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        self.child.take().is_some_and(terminate)
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for MakerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
