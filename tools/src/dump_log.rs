//! `dump-log`: 0.7.2's DumpLogSegments. Prints every top-level entry of segment files with its
//! offset, validity, size, magic and codec (and payload unless `-noprint`), then where the last
//! entry ends. As in 0.7.2, an entry whose CRC does not match is listed with `isvalid: false`
//! and the listing goes on; Tributary adds one line naming the first such entry (where a
//! broker's recovery would cut the log) and exits 1. An entry whose framing is broken (a length
//! or header that cannot be) ends the listing with a line saying why.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tributary_core::message::{MessageError, ShallowIter};

use crate::error::ToolError;

/// The start offset a segment file's name encodes, read as 0.7.2 reads it: the number before
/// the first `.` (`00000000000000000000.kafka`, and copies such as `5.kafka.bak`).
pub fn start_offset_from_name(path: &Path) -> Option<i64> {
    let name = path.file_name()?.to_str()?;
    name.split('.').next()?.parse().ok()
}

/// What a segment's listing found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The first entry whose CRC does not match, if any.
    pub first_bad_crc: Option<i64>,
    /// The framing error that ended the listing, if one did.
    pub broken: Option<MessageError>,
}

impl Damage {
    /// Whether anything was wrong.
    pub fn any(&self) -> bool {
        self.first_bad_crc.is_some() || self.broken.is_some()
    }
}

/// Dumps one segment's bytes in 0.7.2's format; says what was wrong, after printing every
/// entry the framing allows.
pub fn dump_segment(
    out: &mut impl Write,
    name: &str,
    start_offset: i64,
    bytes: &[u8],
    print_payloads: bool,
) -> std::io::Result<Damage> {
    writeln!(out, "Dumping {name}")?;
    writeln!(out, "Starting offset: {start_offset}")?;
    // CRCs are compared here, entry by entry, so that a bad one does not end the listing.
    let mut entries = ShallowIter::prechecked(bytes, start_offset);
    let mut damage = Damage {
        first_bad_crc: None,
        broken: None,
    };
    for entry in entries.by_ref() {
        match entry {
            Ok(e) => {
                let valid = e.message.crc_matches();
                if !valid && damage.first_bad_crc.is_none() {
                    damage.first_bad_crc = Some(e.offset);
                }
                writeln!(
                    out,
                    "offset: {} isvalid: {valid} payloadsize: {} magic: {} compresscodec: {}",
                    e.offset,
                    e.message.payload.len(),
                    e.message.magic.byte(),
                    e.message.codec().name()
                )?;
                if print_payloads {
                    writeln!(
                        out,
                        "payload:\t{}",
                        String::from_utf8_lossy(e.message.payload)
                    )?;
                }
            }
            Err(error) => {
                writeln!(out, "offset: {} isvalid: false ({error})", error.offset())?;
                damage.broken = Some(error);
            }
        }
    }
    let framed = i64::try_from(entries.end().valid_bytes).unwrap_or(i64::MAX);
    if damage.broken.is_none() {
        let trailing = entries.end().trailing_bytes;
        if trailing > 0 {
            writeln!(
                out,
                "partial message of {trailing} bytes at the end (an unflushed or torn write)"
            )?;
        }
    }
    if let Some(offset) = damage.first_bad_crc {
        writeln!(
            out,
            "first entry with a bad CRC at offset: {offset} (a broker's recovery cuts the log there)"
        )?;
    }
    writeln!(
        out,
        "tail of the log is at offset: {}",
        start_offset.saturating_add(framed)
    )?;
    Ok(damage)
}

/// `tributary dump-log`'s arguments: the segment files, and whether to print payloads.
#[derive(Debug, clap::Args)]
pub struct DumpLogArgs {
    /// Do not print message payloads.
    #[arg(long = "noprint", alias = "no-print")]
    pub no_print: bool,
    /// Segment files (named <start offset>.kafka; the number before the first `.` is read).
    pub files: Vec<PathBuf>,
}

/// Dumps every file to standard output, in order (none given: nothing, as 0.7.2). Exit code 1
/// when a file holds a damaged entry; `Err` when a file's name does not start with its offset,
/// it cannot be read, or output fails.
pub fn run_cli(args: DumpLogArgs) -> Result<ExitCode, ToolError> {
    let DumpLogArgs { no_print, files } = args;
    let print_payloads = !no_print;
    let mut corrupt = false;
    let mut out = std::io::stdout().lock();
    for path in &files {
        let start = start_offset_from_name(path).ok_or_else(|| {
            ToolError::Usage(format!(
                "{}: not a segment file name (expected <start offset>.kafka)",
                path.display()
            ))
        })?;
        let bytes = std::fs::read(path)
            .map_err(|e| ToolError::io(format!("cannot read {}", path.display()), e))?;
        let found = dump_segment(
            &mut out,
            &path.display().to_string(),
            start,
            &bytes,
            print_payloads,
        )
        .map_err(ToolError::failed)?;
        corrupt |= found.any();
        out.flush().map_err(ToolError::failed)?;
    }
    Ok(if corrupt {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
