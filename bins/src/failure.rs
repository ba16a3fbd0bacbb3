//! [`Failure`]: a sentence for the person reading it, with the typed error under it when
//! something below failed. For errors whose kinds are few and whose words matter (a mirror's
//! refusal to start, a simulator's finding): the sentence names what and what to do, and
//! [`std::error::Error::source`] keeps the cause as its own type.

use std::error::Error;
use std::fmt;

/// A typed cause, kept as itself.
pub type Cause = Box<dyn Error + Send + Sync + 'static>;

/// What failed, said for a person, and the cause below it when there is one.
#[derive(Debug)]
pub struct Failure {
    said: String,
    cause: Option<Cause>,
}

impl Failure {
    /// A failure with no cause below it: `said` is the whole story.
    pub fn new(said: impl Into<String>) -> Self {
        Failure {
            said: said.into(),
            cause: None,
        }
    }

    /// A failure caused by `cause`; `said` already says what the cause means here (it is
    /// shown as written; the cause stays reachable through `source()`).
    pub fn caused(said: impl Into<String>, cause: impl Error + Send + Sync + 'static) -> Self {
        Failure {
            said: said.into(),
            cause: Some(Box::new(cause)),
        }
    }

    /// The sentence.
    pub fn said(&self) -> &str {
        &self.said
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.said)
    }
}

impl Error for Failure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause
            .as_deref()
            .map(|cause| cause as &(dyn Error + 'static))
    }
}

impl From<String> for Failure {
    fn from(said: String) -> Self {
        Failure::new(said)
    }
}

impl From<&str> for Failure {
    fn from(said: &str) -> Self {
        Failure::new(said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sentence_is_shown_and_the_cause_is_kept_as_its_type() {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
        let failure = Failure::caused("zk1:2181: cannot learn the identity (timed out)", io);
        assert_eq!(
            failure.to_string(),
            "zk1:2181: cannot learn the identity (timed out)"
        );
        let cause = failure.source().expect("the cause is kept");
        assert_eq!(
            cause.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::TimedOut)
        );
        assert!(Failure::new("no cause").source().is_none());
    }
}
