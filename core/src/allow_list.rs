//! The SSL listener's allow-list (`ssl.allow.list.location`): which principals (client
//! certificate subjects) may produce to and fetch from which topics. Parsed here, decided here;
//! the broker reads the file and asks.
//!
//! The file has one rule per line, `#` starting a comment:
//!
//! ```text
//! # operation  principal                       topics (a regex matching the whole name)
//! fetch        CN=mirror-west,O=Example        .*
//! produce      CN=billing,O=Example            billing\..*|invoices
//! all          *                               public-.*
//! ```
//!
//! `operation` is the first word, `produce`, `fetch` or `all`; the topic regex is the last word;
//! the principal is everything between (so a subject with spaces, `CN=x,O=Example Inc`, is
//! written as it is, runs of white space read as one space): a subject as RFC 4514 writes it
//! (most specific first, as Kafka names SSL principals), `ANONYMOUS` for a client without a
//! certificate (`ssl.client.auth=requested`), or `*` for anyone on the SSL listener. `#` starts
//! a comment at the start of a line or after white space. A request is allowed when some rule
//! allows it; nothing else is.

use std::fmt;

use regex::Regex;

/// The most rules a file may hold.
pub const RULES_MAX: usize = 10_000;
/// The longest line read.
pub const LINE_BYTES_MAX: usize = 4096;

/// What a request does to a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// PRODUCE, MULTIPRODUCE, ACKED_PRODUCE.
    Produce,
    /// FETCH, MULTIFETCH, OFFSETS, TOPIC_ORIGINS.
    Fetch,
}

impl Operation {
    /// The name in the file and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Produce => "produce",
            Operation::Fetch => "fetch",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The principal of a client without a certificate.
pub const ANONYMOUS: &str = "ANONYMOUS";

/// One rule.
#[derive(Debug, Clone)]
struct Rule {
    operations: Vec<Operation>,
    /// `None`: anyone.
    principal: Option<String>,
    topics: Regex,
}

/// The parsed file.
#[derive(Debug, Clone)]
pub struct AllowList {
    rules: Vec<Rule>,
}

/// A line of the file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name} line {line}: {problem}")]
pub struct AllowListError {
    /// The file.
    pub source_name: String,
    /// The line (1-based).
    pub line: usize,
    /// What is wrong, and what would be right.
    pub problem: String,
}

impl AllowList {
    /// Parses the file's text; `source_name` names it in errors. Every line must be a rule,
    /// blank, or a comment: one bad line refuses the whole file (a typo must not silently
    /// deny, or allow, anything).
    pub fn parse(source_name: &str, text: &str) -> Result<AllowList, AllowListError> {
        let error = |line: usize, problem: String| AllowListError {
            source_name: source_name.to_string(),
            line,
            problem,
        };
        let mut rules = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            if raw.len() > LINE_BYTES_MAX {
                return Err(error(line, format!("longer than {LINE_BYTES_MAX} bytes")));
            }
            let content = without_comment(raw).trim();
            if content.is_empty() {
                continue;
            }
            let fields: Vec<&str> = content.split_whitespace().collect();
            let (Some(operation), Some(topics), Some(middle)) = (
                fields.first(),
                fields.last(),
                fields.get(1..fields.len().saturating_sub(1)),
            ) else {
                return Err(error(
                    line,
                    format!("\"{content}\" is not `<produce|fetch|all> <principal|*> <topic regex>` (a principal with spaces is written without them: CN=a,O=b)"),
                ));
            };
            if middle.is_empty() {
                return Err(error(
                    line,
                    format!(
                        "\"{content}\" is not `<produce|fetch|all> <principal|*> <topic regex>`"
                    ),
                ));
            }
            let principal = middle.join(" ");
            let principal = principal.as_str();
            let operations = match operation.to_ascii_lowercase().as_str() {
                "produce" => vec![Operation::Produce],
                "fetch" => vec![Operation::Fetch],
                "all" => vec![Operation::Produce, Operation::Fetch],
                other => {
                    return Err(error(
                        line,
                        format!("\"{other}\" is not an operation: expected produce, fetch or all"),
                    ))
                }
            };
            // Checked alone first: a pattern such as `a)|(.*` must not escape the anchors.
            Regex::new(topics)
                .map_err(|e| error(line, format!("\"{topics}\" is not a regex: {e}")))?;
            let topics = Regex::new(&format!("^(?:{topics})$"))
                .map_err(|e| error(line, format!("\"{topics}\" is not a regex: {e}")))?;
            if rules.len() >= RULES_MAX {
                return Err(error(line, format!("more than {RULES_MAX} rules")));
            }
            rules.push(Rule {
                operations,
                principal: (principal != "*").then(|| principal.to_string()),
                topics,
            });
        }
        Ok(AllowList { rules })
    }

    /// Whether `principal` may do `operation` to `topic`.
    pub fn allows(&self, principal: &str, operation: Operation, topic: &str) -> bool {
        self.rules.iter().any(|rule| {
            rule.operations.contains(&operation)
                && rule.principal.as_deref().is_none_or(|p| p == principal)
                && rule.topics.is_match(topic)
        })
    }

    /// How many rules it holds.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether it holds no rule (then it allows nothing).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// `line` up to a `#` that starts it or follows white space.
fn without_comment(line: &str) -> &str {
    let mut previous_blank = true;
    for (i, c) in line.char_indices() {
        if c == '#' && previous_blank {
            return line.get(..i).unwrap_or_default();
        }
        previous_blank = c.is_whitespace();
    }
    line
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const FILE: &str = "\
# who may do what
fetch   CN=mirror-west,O=Example  .*          # the mirror reads everything
produce CN=billing,O=Example      billing\\..*|invoices
all     *                         public-.*
";

    #[test]
    fn a_request_is_allowed_only_when_a_rule_allows_it() {
        let list = AllowList::parse("acl", FILE).unwrap();
        assert_eq!(list.len(), 3);
        let mirror = "CN=mirror-west,O=Example";
        assert!(list.allows(mirror, Operation::Fetch, "orders"));
        assert!(!list.allows(mirror, Operation::Produce, "orders"));
        let billing = "CN=billing,O=Example";
        assert!(list.allows(billing, Operation::Produce, "billing.eu"));
        assert!(list.allows(billing, Operation::Produce, "invoices"));
        // Whole names only: a prefix or suffix of an allowed name is not allowed.
        assert!(!list.allows(billing, Operation::Produce, "invoices2"));
        assert!(!list.allows(billing, Operation::Produce, "xbilling.eu"));
        assert!(!list.allows(billing, Operation::Fetch, "billing.eu"));
        for who in [mirror, billing, ANONYMOUS, "CN=anyone"] {
            assert!(list.allows(who, Operation::Produce, "public-news"));
            assert!(list.allows(who, Operation::Fetch, "public-news"));
        }
        assert!(!list.allows("CN=mirror-west", Operation::Fetch, "orders"));
        // A subject with a space, and a `#` inside a word that is not a comment.
        let list =
            AllowList::parse("acl", "fetch CN=a\\#1,O=Example  Inc  t.* # comment\n").unwrap();
        assert!(list.allows("CN=a\\#1,O=Example Inc", Operation::Fetch, "t1"));
        assert!(!list.allows("CN=a\\#1,O=Example", Operation::Fetch, "t1"));
        assert!(AllowList::parse("acl", "# nothing\n").unwrap().is_empty());
    }

    #[test]
    fn a_bad_line_refuses_the_file_naming_the_line() {
        for (text, expect) in [
            ("fetch CN=a\n", "acl line 1: \"fetch CN=a\" is not"),
            (
                "\nread CN=a .*\n",
                "acl line 2: \"read\" is not an operation",
            ),
            ("fetch CN=a (\n", "acl line 1: \"(\" is not a regex"),
            ("fetch .*\n", "acl line 1: \"fetch .*\" is not"),
            // It would read `^(?:a)|(.*)$`, matching every name, were it not checked alone.
            (
                "fetch CN=a a)|(.*\n",
                "acl line 1: \"a)|(.*\" is not a regex",
            ),
        ] {
            let e = AllowList::parse("acl", text).unwrap_err().to_string();
            assert!(e.starts_with(expect), "{text}: {e}");
        }
    }
}
