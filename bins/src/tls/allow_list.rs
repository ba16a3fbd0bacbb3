//! The SSL listener's allow-list file (`ssl.allow.list.location`), read again when it changes,
//! and its denials logged once per principal, operation and topic per minute.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tributary_core::allow_list::{AllowList, Operation};
use tributary_core::wire::TopicName;

use crate::sync::lock;
use crate::tls::files::Reloading;
use crate::tls::TlsError;

/// How often a denial of the same principal, operation and topic is logged.
const DENIAL_LOG_EVERY: Duration = Duration::from_secs(60);
/// The most (principal, operation, topic) triples remembered for that; beyond, the record is
/// cleared (and some denials logged again early).
const DENIALS_REMEMBERED_MAX: usize = 10_000;

/// The allow-list file, read again when it changes.
pub struct AllowListFile {
    path: PathBuf,
    current: Reloading<Arc<AllowList>>,
    /// When each denial was last logged.
    logged: Mutex<BTreeMap<(String, Operation, TopicName), tokio::time::Instant>>,
}

impl std::fmt::Debug for AllowListFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllowListFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl AllowListFile {
    /// Reads `path`; an error names the file and the line that cannot be used.
    pub fn load(path: PathBuf) -> Result<Self, TlsError> {
        let current = Reloading::load("the SSL allow-list", vec![path.clone()], || {
            read(&path).map(Arc::new)
        })?;
        tracing::info!(
            "SSL listener: {} rules from {}",
            current.current().len(),
            path.display()
        );
        Ok(AllowListFile {
            path,
            current,
            logged: Mutex::new(BTreeMap::new()),
        })
    }

    /// The rules in force.
    pub fn current(&self) -> Arc<AllowList> {
        self.current.current()
    }

    /// Reads the file again if it changed: `Ok(true)` when new rules are in force; on an error
    /// the previous rules stay, and the same version is not reported again.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        self.current
            .reload_if_changed(|| read(&self.path).map(Arc::new))
    }

    pub(crate) fn denied(&self, principal: &str, operation: Operation, topic: &TopicName) {
        let now = tokio::time::Instant::now();
        let mut logged = lock(&self.logged, "the SSL allow-list's denial log");
        let key = (principal.to_string(), operation, topic.clone());
        if logged
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < DENIAL_LOG_EVERY)
        {
            return;
        }
        if logged.len() >= DENIALS_REMEMBERED_MAX {
            logged.clear();
        }
        logged.insert(key, now);
        tracing::warn!(
            "SSL listener: {principal} may not {operation} {topic} (no rule of {} allows it); refused (logged once a minute)",
            self.path.display()
        );
    }
}

fn read(path: &std::path::Path) -> Result<AllowList, TlsError> {
    let bytes = crate::tls::pem::read_file("ssl.allow.list.location", path)?;
    let text = String::from_utf8_lossy(&bytes);
    AllowList::parse(&path.display().to_string(), &text).map_err(|e| TlsError::Content {
        setting: "ssl.allow.list.location".into(),
        path: path.display().to_string(),
        problem: e.to_string(),
    })
}
