//! Who may do what on the SSL listener: each connection's [`Access`] (its principal, and the
//! allow-list of `ssl.allow.list.location`), the file read again when it changes, and denials
//! logged once per principal, operation and topic per minute.

use std::sync::Arc;

use tributary_core::allow_list::Operation;
use tributary_core::wire::TopicName;

pub use crate::tls::allow_list::AllowListFile;

/// What one connection may do.
#[derive(Debug, Clone)]
pub struct Access {
    /// `None`: a plaintext connection, or no allow-list: everything is allowed.
    checked: Option<(String, Arc<AllowListFile>)>,
}

impl Access {
    /// Everything allowed (the plaintext listener; the SSL listener without an allow-list).
    pub fn unrestricted() -> Self {
        Access { checked: None }
    }

    /// `principal` on the SSL listener, checked against `rules` when there are any.
    pub fn of(principal: String, rules: Option<Arc<AllowListFile>>) -> Self {
        Access {
            checked: rules.map(|rules| (principal, rules)),
        }
    }

    /// The principal checked, when there is an allow-list.
    pub fn principal(&self) -> Option<&str> {
        self.checked.as_ref().map(|(p, _)| p.as_str())
    }

    /// Whether `operation` on `topic` is allowed; a denial is logged (rate-limited).
    pub fn allows(&self, operation: Operation, topic: &TopicName) -> bool {
        let Some((principal, rules)) = &self.checked else {
            return true;
        };
        let allowed = rules.current().allows(principal, operation, topic.as_str());
        if !allowed {
            rules.denied(principal, operation, topic);
        }
        allowed
    }
}
