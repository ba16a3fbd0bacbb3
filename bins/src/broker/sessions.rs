//! The ZooKeeper sessions a broker registered on, remembered in its `log.dir`.
//!
//! A broker killed and restarted at once finds its previous run's registration still held by
//! that run's session, which ZooKeeper expires only after its timeout. Whoever holds `log.dir`'s
//! lock is the only process that can be this broker, so a session written here by an earlier
//! holder belongs to a process that is gone: its nodes are this broker's to take back at once
//! (`coordination::ephemeral`'s retired sessions) rather than waited out. A session is written
//! here before any node is made on it.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tributary_core::log::LogFs;

use crate::env::Env;

/// The file in `log.dir` (one session id a line, in hexadecimal, the newest last).
pub const SESSIONS_FILE: &str = ".tributary-zk-sessions";
/// Sessions remembered (more than one run opens in any realistic outage: one per expiry).
const SESSIONS_MAX: usize = 16;

/// Writes the file's new contents durably.
type Writer = Arc<dyn Fn(Vec<u8>) -> io::Result<()> + Send + Sync>;

/// The sessions this `log.dir`'s brokers registered on. Cheap to clone.
#[derive(Clone)]
pub struct SessionBook {
    /// Those of earlier runs, as read at start.
    previous: Vec<u64>,
    /// Every session known, the newest last (at most [`SESSIONS_MAX`]).
    known: Arc<Mutex<VecDeque<u64>>>,
    write: Writer,
}

impl std::fmt::Debug for SessionBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionBook")
            .field("previous", &self.previous)
            .finish_non_exhaustive()
    }
}

impl SessionBook {
    /// Reads `log_dir`'s file (call it only while holding `log.dir`'s lock). A missing file is
    /// an empty book; a line that is not a session id is skipped with a warning.
    pub fn open<F: LogFs + Send + Sync + 'static>(fs: F, log_dir: &Path) -> Self {
        let path = log_dir.join(SESSIONS_FILE);
        let previous = if fs.exists(&path) {
            match fs.read_file(&path) {
                Ok(bytes) => parse(&path, &String::from_utf8_lossy(&bytes)),
                Err(e) => {
                    tracing::warn!(
                        "{}: {e}; an earlier run's ZooKeeper registration is waited out instead",
                        path.display()
                    );
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        let target: PathBuf = path;
        let write: Writer = Arc::new(move |contents| fs.write_file_atomic(&target, &contents));
        SessionBook {
            known: Arc::new(Mutex::new(previous.iter().copied().collect())),
            previous,
            write,
        }
    }

    /// The sessions earlier runs registered on (their processes are gone).
    pub fn previous(&self) -> &[u64] {
        &self.previous
    }

    /// Writes `session` down durably before anything is registered on it.
    pub async fn record<E: Env>(&self, env: E, session: u64) -> io::Result<()> {
        let contents = {
            let mut known = crate::sync::lock(&self.known, "the broker's session book");
            if known.back() == Some(&session) {
                return Ok(());
            }
            known.retain(|s| *s != session);
            if known.len() == SESSIONS_MAX {
                known.pop_front();
            }
            known.push_back(session);
            debug_assert!(known.len() <= SESSIONS_MAX);
            known
                .iter()
                .map(|s| format!("{s:x}\n"))
                .collect::<String>()
                .into_bytes()
        };
        let write = self.write.clone();
        // Boxed as a `Send` future: the generic one trips rustc's higher-ranked `Send`
        // inference inside the spawned broker task.
        let writing: std::pin::Pin<
            Box<dyn std::future::Future<Output = io::Result<()>> + Send + '_>,
        > = Box::pin(env.blocking(move || write(contents)));
        writing.await
    }
}

/// The session ids in `text`, one hexadecimal id a line.
fn parse(path: &Path, text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match u64::from_str_radix(line, 16) {
            Ok(session) if session != 0 => out.push(session),
            _ => tracing::warn!("{}: {line:?} is not a session id; skipped", path.display()),
        }
    }
    let keep_from = out.len().saturating_sub(SESSIONS_MAX);
    out.split_off(keep_from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_read_one_a_line_and_junk_is_skipped() {
        let path = Path::new("x");
        assert_eq!(parse(path, "1a\n\nzz\n0\nff\n"), vec![0x1a, 0xff]);
        let many: String = (1..40u64).map(|s| format!("{s:x}\n")).collect();
        let kept = parse(path, &many);
        assert_eq!(kept.len(), SESSIONS_MAX);
        assert_eq!(kept.last(), Some(&39));
    }
}
