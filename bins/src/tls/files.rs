//! What identifies one version of a certificate or key file, to notice rotations, and a value
//! built from such files that is built again when they change.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use crate::sync::lock;

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

/// A value built from files (certificates, an allow-list), built again when any of them
/// changes. A version that cannot be built leaves the previous value in force, and is not tried
/// again (nor reported again by the caller) until one of the files changes once more: a rotation
/// may have written the certificate but not yet the key.
pub struct Reloading<T> {
    paths: Vec<PathBuf>,
    /// What the files are, for the lock's name.
    what: &'static str,
    current: Mutex<Version<T>>,
    /// Held while the files are checked and built again, so that callers at once (outbound
    /// connections opening together) build a changed version once, not each.
    building: Mutex<()>,
}

struct Version<T> {
    value: T,
    stamps: FileStamps,
    /// The stamps of the files when they last could not be used.
    refused: Option<FileStamps>,
}

impl<T: Clone> Reloading<T> {
    /// Builds the first value from `paths` with `build`.
    pub fn load<E>(
        what: &'static str,
        paths: Vec<PathBuf>,
        build: impl FnOnce() -> Result<T, E>,
    ) -> Result<Self, E> {
        let stamps = Stamp::of_all(&paths);
        let value = build()?;
        Ok(Reloading {
            paths,
            what,
            current: Mutex::new(Version {
                value,
                stamps,
                refused: None,
            }),
            building: Mutex::new(()),
        })
    }

    /// The value in force.
    pub fn current(&self) -> T {
        lock(&self.current, self.what).value.clone()
    }

    /// Builds the value again with `build` if a file changed since the last try: `Ok(true)`
    /// when a new value is in force, `Ok(false)` when nothing changed (or the change was
    /// already refused), `Err` (once per change) when it cannot be built.
    pub fn reload_if_changed<E>(&self, build: impl FnOnce() -> Result<T, E>) -> Result<bool, E> {
        let _building = lock(&self.building, self.what);
        let now = Stamp::of_all(&self.paths);
        {
            let current = lock(&self.current, self.what);
            if current.stamps == now || current.refused.as_ref() == Some(&now) {
                return Ok(false);
            }
        }
        // Built without the value's lock: readers keep the value in force meanwhile.
        let built = build();
        let mut current = lock(&self.current, self.what);
        match built {
            Ok(value) => {
                *current = Version {
                    value,
                    stamps: now,
                    refused: None,
                };
                Ok(true)
            }
            Err(e) => {
                current.refused = Some(now);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_changed_file_is_read_again_and_a_bad_version_is_refused_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("value");
        std::fs::write(&path, "1").unwrap();
        let read = || -> Result<u32, String> {
            let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            text.trim()
                .parse()
                .map_err(|_| format!("not a number: {text}"))
        };
        let value = Reloading::load("a test value", vec![path.clone()], read).unwrap();
        assert_eq!(value.reload_if_changed(read), Ok(false), "nothing changed");
        std::fs::write(&path, "22").unwrap();
        assert_eq!(value.reload_if_changed(read), Ok(true));
        assert_eq!(value.current(), 22);
        std::fs::write(&path, "x").unwrap();
        assert!(value.reload_if_changed(read).is_err());
        assert_eq!(value.reload_if_changed(read), Ok(false), "reported once");
        assert_eq!(value.current(), 22, "the previous value stays in force");
        std::fs::write(&path, "333").unwrap();
        assert_eq!(value.reload_if_changed(read), Ok(true));
        assert_eq!(value.current(), 333);
    }
}
