//! `dump-log`: 0.7's DumpLogSegments. Prints every top-level entry of segment files with its
//! offset, validity, size, magic and codec, then where the valid log ends.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tributary_core::log::parse_segment_file_name;
use tributary_core::message::{CompressionCodec, MessageError, ShallowIter};

/// The start offset a segment file's name encodes (`00000000000000000000.kafka`).
pub fn start_offset_from_name(path: &Path) -> Option<i64> {
    let start = parse_segment_file_name(path.file_name()?.to_str()?)?;
    i64::try_from(start).ok()
}

/// Dumps one segment's bytes in 0.7's format. Returns the first corruption found, if any, after
/// printing everything valid before it.
pub fn dump_segment(
    out: &mut impl Write,
    name: &str,
    start_offset: i64,
    bytes: &[u8],
    print_payloads: bool,
) -> std::io::Result<Option<MessageError>> {
    writeln!(out, "Dumping {name}")?;
    writeln!(out, "Starting offset: {start_offset}")?;
    let mut entries = ShallowIter::new(bytes, start_offset);
    let mut corruption = None;
    for entry in entries.by_ref() {
        match entry {
            Ok(e) => {
                let codec = e.message.codec();
                writeln!(
                    out,
                    "offset: {} isvalid: true payloadsize: {} magic: {} compresscodec: {}",
                    e.offset,
                    e.message.payload.len(),
                    e.message.magic.byte(),
                    codec.name()
                )?;
                if print_payloads && codec == CompressionCodec::None {
                    writeln!(
                        out,
                        "payload:\t{}",
                        String::from_utf8_lossy(e.message.payload)
                    )?;
                }
            }
            Err(error) => {
                writeln!(out, "offset: {} isvalid: false ({error})", error.offset())?;
                corruption = Some(error);
            }
        }
    }
    let valid = i64::try_from(entries.end().valid_bytes).unwrap_or(i64::MAX);
    if corruption.is_none() {
        let trailing = entries.end().trailing_bytes;
        if trailing > 0 {
            writeln!(
                out,
                "partial message of {trailing} bytes at the end (an unflushed or torn write)"
            )?;
        }
    }
    writeln!(
        out,
        "tail of the log is at offset: {}",
        start_offset.saturating_add(valid)
    )?;
    Ok(corruption)
}

/// `tributary dump-log`'s arguments: the segment files, and whether to print payloads.
#[derive(Debug, clap::Args)]
pub struct DumpLogArgs {
    /// Do not print message payloads.
    #[arg(long = "noprint", alias = "no-print")]
    pub no_print: bool,
    /// Segment files (named <20-digit start offset>.kafka).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Dumps every file to standard output, in order. Exit code 1 when a file holds a corrupt
/// entry (everything valid before it is printed); `Err` when a file's name is not a segment's,
/// it cannot be read, or output fails.
pub fn run_cli(args: DumpLogArgs) -> Result<ExitCode, String> {
    let DumpLogArgs { no_print, files } = args;
    let print_payloads = !no_print;
    let mut corrupt = false;
    let mut out = std::io::stdout().lock();
    for path in &files {
        let start = start_offset_from_name(path).ok_or_else(|| {
            format!(
                "{}: not a segment file name (expected <20-digit offset>.kafka)",
                path.display()
            )
        })?;
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let found = dump_segment(
            &mut out,
            &path.display().to_string(),
            start,
            &bytes,
            print_payloads,
        )
        .map_err(|e| e.to_string())?;
        corrupt |= found.is_some();
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(if corrupt {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
