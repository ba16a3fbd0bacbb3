//! What identifies one version of a certificate or key file, to notice rotations.

use std::path::PathBuf;
use std::time::SystemTime;

/// A file's modification time and length; `None` when it cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp(Option<(SystemTime, u64)>);

/// The stamps of a list of files, in order.
pub type FileStamps = Vec<Stamp>;

impl Stamp {
    /// The stamp of `path` now.
    pub fn of(path: &PathBuf) -> Stamp {
        Stamp(
            std::fs::metadata(path)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len()))),
        )
    }

    /// The stamps of `paths` now.
    pub fn of_all(paths: &[PathBuf]) -> FileStamps {
        paths.iter().map(Stamp::of).collect()
    }
}
