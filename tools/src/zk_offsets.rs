//! `export-zk-offsets` and `import-zk-offsets`: Kafka 0.7.2's ExportZkOffsets and
//! ImportZkOffsets. Export writes a group's committed offsets (or every group's) to a file, one
//! `<offset node>:<offset>` line per partition; import writes such a file's offsets back into a
//! ZooKeeper. What operators use to move consumers between clusters at failover (see
//! docs/replica.md) or to put a group back where it was.
//!
//! Better than 0.7.2 where it could lose or corrupt state: the file is written whole or not at
//! all (a temporary file synced, then renamed over it); an import reads and checks the whole
//! file first and writes nothing when a line is bad, naming it; a group with live members is
//! named in a warning (their next commit overwrites what is imported); both say on standard
//! error what they did. The file's format and lines are 0.7.2's, sorted by node.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use tributary::consumer::{read_offset_node, write_offset, OffsetNodeError};
use tributary::coordination::{CoordError, Coordination};
use tributary::env::{Env, TokioEnv};
use tributary_core::config::ZkConnect;
use tributary_core::consumer::offsets_file::{self, OffsetLine, OffsetsFileError};
use tributary_core::consumer::BrokerPartition;
use tributary_core::group_id::GroupId;
use tributary_core::zk_layout::{consumer_ids_path, consumer_offsets_path};

use crate::cli::{runtime, StrayWords};
use crate::error::ToolError;

/// ZooKeeper session and connection timeout (0.7.2's: 30 s).
const ZK_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest offsets file read (about 10 times the longest lines times a million partitions
/// would be more; a larger file is refused rather than buffered).
const FILE_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Why an export or an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ZkOffsetsError {
    /// ZooKeeper could not be reached.
    #[error("{connect}: {source}")]
    Connect {
        /// The connect string.
        connect: ZkConnect,
        /// Why.
        source: CoordError,
    },
    /// Listing, reading or writing a node failed.
    #[error("{path}: {source}")]
    ZooKeeper {
        /// The node.
        path: String,
        /// What ZooKeeper said.
        source: CoordError,
    },
    /// A committed offset node holds something that is not an offset.
    #[error(transparent)]
    Offset(#[from] OffsetNodeError),
    /// The offsets file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The offsets file is larger than [`FILE_BYTES_MAX`].
    #[error("{path}: {bytes} bytes, more than the {FILE_BYTES_MAX} an offsets file may have")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// A group named with `--group` has no committed offsets: the file was left as it was.
    #[error("group {group} has no committed offsets in {connect} (a typo, or another ZooKeeper or chroot?); {} was left as it was", file.display())]
    NoOffsets {
        /// The group.
        group: GroupId,
        /// Where it was looked for.
        connect: ZkConnect,
        /// The file not written.
        file: PathBuf,
    },
    /// The offsets file holds no offset; nothing was written.
    #[error("{}: no offsets in the file; nothing was imported", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A line of the offsets file is not `<offset node>:<offset>`; nothing was written.
    #[error("{}: {source}; nothing was imported", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Which line and why.
        source: OffsetsFileError,
    },
}

/// What an export found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The lines written, sorted by node.
    pub lines: Vec<OffsetLine>,
    /// Groups with no committed offsets (named, or under `/consumers` without `offsets`).
    pub empty_groups: Vec<GroupId>,
}

/// Reads the committed offsets of `groups` (every group under `/consumers` when empty) from
/// the ZooKeeper at `connect`. Nodes that are not of the 0.7 layout are skipped with a warning.
pub async fn export<E: Env>(
    env: &E,
    connect: &ZkConnect,
    groups: &[GroupId],
) -> Result<Exported, ZkOffsetsError> {
    let coord = open_session(env, connect).await?;
    let groups = if groups.is_empty() {
        children(&coord, "/consumers")
            .await?
            .into_iter()
            .filter_map(|g| match g.parse::<GroupId>() {
                Ok(group) => Some(group),
                Err(e) => {
                    tracing::warn!("/consumers/{g}: skipped: {e}");
                    None
                }
            })
            .collect()
    } else {
        groups.to_vec()
    };
    let mut exported = Exported {
        lines: Vec::new(),
        empty_groups: Vec::new(),
    };
    for group in groups {
        let before = exported.lines.len();
        for topic_name in children(&coord, &format!("/consumers/{group}/offsets")).await? {
            let Ok(topic) = topic_name.parse() else {
                tracing::warn!(
                    "/consumers/{group}/offsets/{topic_name}: skipped: not a topic name"
                );
                continue;
            };
            let topic_path = consumer_offsets_path(&group, &topic);
            for name in children(&coord, &topic_path).await? {
                let Some(partition) = BrokerPartition::parse(&name) else {
                    tracing::warn!("{topic_path}/{name}: skipped: not <broker>-<partition>");
                    continue;
                };
                // `None`: removed between the listing and the read.
                if let Some(offset) =
                    read_offset_node(&coord, format!("{topic_path}/{name}")).await?
                {
                    exported.lines.push(OffsetLine {
                        group: group.clone(),
                        topic: topic.clone(),
                        partition,
                        offset,
                    });
                }
            }
        }
        if exported.lines.len() == before {
            exported.empty_groups.push(group);
        }
    }
    coord.close().await;
    exported.lines.sort();
    Ok(exported)
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// Offsets written.
    pub written: usize,
    /// Groups that had live members when the offsets were written, with how many.
    pub live_groups: Vec<(GroupId, usize)>,
}

/// Writes `lines` into the ZooKeeper at `connect` (creating nodes and their parents).
pub async fn import<E: Env>(
    env: &E,
    connect: &ZkConnect,
    lines: &[OffsetLine],
) -> Result<Imported, ZkOffsetsError> {
    let coord = open_session(env, connect).await?;
    let mut imported = Imported {
        written: 0,
        live_groups: Vec::new(),
    };
    let mut groups: Vec<&GroupId> = lines.iter().map(|l| &l.group).collect();
    groups.dedup();
    for group in groups {
        let members = children(&coord, &consumer_ids_path(group)).await?.len();
        if members > 0 {
            imported.live_groups.push((group.clone(), members));
        }
    }
    for line in lines {
        let path = line.path();
        write_offset(&coord, &path, line.offset)
            .await
            .map_err(|source| ZkOffsetsError::ZooKeeper { path, source })?;
        imported.written += 1;
    }
    coord.close().await;
    Ok(imported)
}

/// A session on the ZooKeeper at `connect`, 0.7.2's timeouts.
async fn open_session<E: Env>(env: &E, connect: &ZkConnect) -> Result<E::Coord, ZkOffsetsError> {
    env.coordinate(connect, ZK_TIMEOUT, ZK_TIMEOUT)
        .await
        .map_err(|source| ZkOffsetsError::Connect {
            connect: connect.clone(),
            source,
        })
}

/// A node's children, sorted; none when it does not exist.
async fn children(coord: &impl Coordination, path: &str) -> Result<Vec<String>, ZkOffsetsError> {
    match coord.children(path).await {
        Ok(children) => Ok(children),
        Err(CoordError::NoNode(_)) => Ok(Vec::new()),
        Err(source) => Err(ZkOffsetsError::ZooKeeper {
            path: path.to_string(),
            source,
        }),
    }
}

/// Writes `lines` to `path` whole or not at all: a temporary file beside it, synced, renamed
/// over it.
pub fn write_file(path: &Path, lines: &[OffsetLine]) -> Result<(), ZkOffsetsError> {
    let failed = |source| ZkOffsetsError::File {
        path: path.to_path_buf(),
        source,
    };
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut text = String::new();
    for line in lines {
        text.push_str(&line.format());
        text.push('\n');
    }
    let mut file = std::fs::File::create(&tmp).map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(&tmp, path).map_err(failed)
}

/// Reads and checks an offsets file.
pub fn read_file(path: &Path) -> Result<Vec<OffsetLine>, ZkOffsetsError> {
    let failed = |source| ZkOffsetsError::File {
        path: path.to_path_buf(),
        source,
    };
    let bytes = std::fs::metadata(path).map_err(failed)?.len();
    if bytes > FILE_BYTES_MAX {
        return Err(ZkOffsetsError::TooLarge {
            path: path.to_path_buf(),
            bytes,
        });
    }
    let text = std::fs::read_to_string(path).map_err(failed)?;
    let lines = offsets_file::parse(&text).map_err(|source| ZkOffsetsError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    if lines.is_empty() {
        return Err(ZkOffsetsError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(lines)
}

/// `tributary export-zk-offsets`'s arguments (0.7.2's ExportZkOffsets flags).
#[derive(Debug, clap::Args)]
pub struct ExportZkOffsetsArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// ZooKeeper: host:port[,host:port...][/chroot]. Required, as in 0.7.2.
    #[arg(long)]
    pub zkconnect: String,
    /// A consumer group (repeatable); every group when none is given.
    #[arg(long)]
    pub group: Vec<String>,
    /// Where to write the offsets (replaced whole).
    #[arg(long = "output-file")]
    pub output_file: PathBuf,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: StrayWords,
}

/// Exports as `args` asks; says on standard error how many offsets of how many groups.
pub fn run_export_cli(args: ExportZkOffsetsArgs) -> Result<ExitCode, ToolError> {
    let ExportZkOffsetsArgs {
        zkconnect,
        group,
        output_file,
        stray,
        zk_security,
    } = args;
    stray.warn("export-zk-offsets");
    let connect = zk_security.connect("--zkconnect", &zkconnect)?;
    let groups = group
        .iter()
        .map(|g| g.parse().map_err(|e| ToolError::flag("--group", e)))
        .collect::<Result<Vec<GroupId>, _>>()?;
    let exported = runtime(Some(1))?
        .block_on(export(&TokioEnv, &connect, &groups))
        .map_err(ToolError::failed)?;
    // A group asked for by name that has nothing is a mistake to say, not an empty file to
    // import later; among all groups, an empty one is only named.
    if let Some(group) = exported.empty_groups.iter().find(|g| groups.contains(g)) {
        return Err(ToolError::failed(ZkOffsetsError::NoOffsets {
            group: group.clone(),
            connect,
            file: output_file,
        }));
    }
    write_file(&output_file, &exported.lines).map_err(ToolError::failed)?;
    for group in &exported.empty_groups {
        tracing::warn!("group {group} has no committed offsets in {connect}");
    }
    eprintln!(
        "exported {} offsets to {}",
        exported.lines.len(),
        output_file.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `tributary import-zk-offsets`'s arguments (0.7.2's ImportZkOffsets flags).
#[derive(Debug, clap::Args)]
pub struct ImportZkOffsetsArgs {
    /// ZooKeeper's TLS and identity (`--zk-tls-config-file`).
    #[command(flatten)]
    pub zk_security: crate::cli::ZkSecurityFile,
    /// ZooKeeper: host:port[,host:port...][/chroot].
    #[arg(long, default_value = "localhost:2181")]
    pub zkconnect: String,
    /// The offsets file (as export-zk-offsets writes it).
    #[arg(long = "input-file")]
    pub input_file: PathBuf,
    /// Non-option words, ignored as Kafka 0.7's tools ignore them (one warning says so).
    #[command(flatten)]
    pub stray: StrayWords,
}

/// Imports as `args` asks; says on standard error how many offsets, and which groups were live.
pub fn run_import_cli(args: ImportZkOffsetsArgs) -> Result<ExitCode, ToolError> {
    let ImportZkOffsetsArgs {
        zkconnect,
        input_file,
        stray,
        zk_security,
    } = args;
    stray.warn("import-zk-offsets");
    let connect = zk_security.connect("--zkconnect", &zkconnect)?;
    let lines = read_file(&input_file).map_err(ToolError::failed)?;
    let imported = runtime(Some(1))?
        .block_on(import(&TokioEnv, &connect, &lines))
        .map_err(ToolError::failed)?;
    for (group, members) in &imported.live_groups {
        tracing::warn!(
            "group {group} has {members} live member(s): their next commit overwrites the imported offsets; stop them and import again"
        );
    }
    eprintln!(
        "imported {} offsets from {} into {connect}",
        imported.written,
        input_file.display()
    );
    Ok(ExitCode::SUCCESS)
}
