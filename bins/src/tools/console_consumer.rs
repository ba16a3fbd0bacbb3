//! `console-consumer`: 0.7.2's ConsoleConsumer on the ZooKeeper consumer group. Prints every
//! message of a topic (or of a whitelist/blacklist) with a formatter, commits as it goes, and on
//! exit (`--max-messages`, `--consumer-timeout-ms`, end of input) leaves the group cleanly.

use std::collections::BTreeMap;
use std::io::Write;

use tributary_core::config::{ConsumerConfig, Properties, ZkConnect};
use tributary_core::message::Message;

use crate::consumer::{ConsumerConnector, ConsumerError, Subscription};
use crate::coordination::{CoordError, Coordination};
use crate::env::{Env, TokioEnv};

/// How each message is printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Formatter {
    /// The payload and a newline (0.7's DefaultMessageFormatter).
    Default,
    /// `[<topic>-]checksum:<crc>` (0.7's ChecksumMessageFormatter; the prefix from `--property
    /// topic=<topic>`).
    Checksum {
        /// The prefix, `<topic>-` or empty.
        prefix: String,
    },
}

impl Formatter {
    /// The formatter named `name` (0.7's class names or `default` / `checksum`), configured
    /// from `properties`.
    pub fn named(name: &str, properties: &BTreeMap<String, String>) -> Result<Self, String> {
        match name {
            "kafka.consumer.DefaultMessageFormatter" | "default" => Ok(Formatter::Default),
            "kafka.consumer.ChecksumMessageFormatter" | "checksum" => {
                Ok(Formatter::Checksum { prefix: properties.get("topic").map(|t| format!("{t}-")).unwrap_or_default() })
            }
            other => Err(format!("unknown formatter {other}: use kafka.consumer.DefaultMessageFormatter or kafka.consumer.ChecksumMessageFormatter")),
        }
    }

    /// Writes one message.
    pub fn write(&self, payload: &[u8], out: &mut impl Write) -> std::io::Result<()> {
        match self {
            Formatter::Default => {
                out.write_all(payload)?;
                out.write_all(b"\n")
            }
            Formatter::Checksum { prefix } => writeln!(
                out,
                "{prefix}checksum:{}",
                Message::new(payload.to_vec()).crc
            ),
        }
    }
}

/// What to consume and how.
#[derive(Debug, Clone)]
pub struct ConsoleConsumerOptions {
    /// ZooKeeper of the cluster.
    pub zookeeper: ZkConnect,
    /// What to consume (one stream).
    pub subscription: Subscription,
    /// The group.
    pub group: String,
    /// Start from the beginning: the group's state in ZooKeeper is removed first, and
    /// `autooffset.reset=smallest` (else `largest`).
    pub from_beginning: bool,
    /// Stop after this many messages.
    pub max_messages: Option<u64>,
    /// Consumer settings from the options (`fetch.size`, `socket.buffersize`,
    /// `autocommit.interval.ms`, `consumer.timeout.ms`).
    pub settings: Vec<(String, String)>,
    /// Print an error and go on after a message that cannot be read (else stop).
    pub skip_message_on_error: bool,
    /// The formatter.
    pub formatter: Formatter,
}

impl ConsoleConsumerOptions {
    fn config(&self) -> Result<ConsumerConfig, String> {
        let mut text = format!(
            "zk.connect={}\ngroupid={}\nautooffset.reset={}\n",
            self.zookeeper,
            self.group,
            if self.from_beginning {
                "smallest"
            } else {
                "largest"
            }
        );
        for (key, value) in &self.settings {
            text.push_str(&format!("{key}={value}\n"));
        }
        let props =
            Properties::parse("console-consumer options", &text).map_err(|e| e.to_string())?;
        ConsumerConfig::from_properties(&props).map_err(|e| e.to_string())
    }
}

/// Consumes per `options` into `out`; returns how many messages were printed.
pub async fn consume(
    options: &ConsoleConsumerOptions,
    out: &mut impl Write,
) -> Result<u64, String> {
    let config = options.config()?;
    if options.from_beginning {
        forget_group(&config).await?;
    }
    let (connector, mut streams) =
        ConsumerConnector::start(TokioEnv, config, options.subscription.clone())
            .await
            .map_err(|e| e.to_string())?;
    let Some(stream) = streams.first_mut() else {
        return Err("no stream".into());
    };
    let mut printed = 0u64;
    let result = loop {
        if options.max_messages.is_some_and(|max| printed >= max) {
            break Ok(());
        }
        match stream.next().await {
            Ok(message) => {
                if let Err(e) = options.formatter.write(&message.payload, out) {
                    break Err(format!("writing output: {e}"));
                }
                printed += 1;
            }
            Err(ConsumerError::Timeout(_)) => break Ok(()),
            Err(ConsumerError::Closed) => break Ok(()),
            Err(e) if options.skip_message_on_error => eprintln!("skipping: {e}"),
            Err(e) => break Err(e.to_string()),
        }
    };
    let _ = out.flush();
    connector.shutdown().await;
    result.map(|()| printed)
}

/// Removes the group's state (offsets, owners) so it starts over, as 0.7's `--from-beginning`.
async fn forget_group(config: &ConsumerConfig) -> Result<(), String> {
    let timeout = std::time::Duration::from_millis(config.zk.session_timeout_ms.into());
    let coord = TokioEnv
        .coordinate(&config.zk_connect, timeout, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let root = format!("/consumers/{}", config.group_id);
    delete_tree(&coord, &root)
        .await
        .map_err(|e| format!("{root}: {e}"))?;
    coord.close().await;
    Ok(())
}

/// Deletes `path` and everything under it (missing is fine).
async fn delete_tree(coord: &impl Coordination, path: &str) -> Result<(), CoordError> {
    let mut stack = vec![(path.to_string(), false)];
    while let Some((node, expanded)) = stack.pop() {
        if expanded {
            match coord.delete(&node, None).await {
                Ok(()) | Err(CoordError::NoNode(_)) => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        stack.push((node.clone(), true));
        match coord.children(&node).await {
            Ok(children) => {
                stack.extend(children.into_iter().map(|c| (format!("{node}/{c}"), false)))
            }
            Err(CoordError::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
