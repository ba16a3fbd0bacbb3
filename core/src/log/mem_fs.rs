//! An in-memory [`LogFs`], for fuzzing and fast tests. Every write is immediately "durable";
//! it has no crash model (the simulator's file system has one).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::fs::{DirEntry, LogFile, LogFs};

type Data = Arc<Mutex<Vec<u8>>>;

#[derive(Debug, Default)]
struct Tree {
    dirs: BTreeMap<PathBuf, ()>,
    files: BTreeMap<PathBuf, Data>,
}

/// An in-memory file system; clones share the same tree.
#[derive(Debug, Clone, Default)]
pub struct MemFs {
    tree: Arc<Mutex<Tree>>,
    /// Modification time reported for every file.
    modified_ms: i64,
}

/// An open in-memory file.
#[derive(Debug)]
pub struct MemFile(Data);

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

impl MemFs {
    /// An empty file system whose files all report `modified_ms` as their modification time.
    pub fn new(modified_ms: i64) -> Self {
        MemFs {
            tree: Arc::default(),
            modified_ms,
        }
    }

    /// Puts a file (and its parent directories) in place.
    pub fn put(&self, path: &Path, contents: &[u8]) {
        let mut tree = guard(&self.tree);
        for ancestor in path.ancestors().skip(1) {
            tree.dirs.insert(ancestor.to_path_buf(), ());
        }
        tree.files
            .insert(path.to_path_buf(), Arc::new(Mutex::new(contents.to_vec())));
    }
}

impl LogFile for MemFile {
    fn size_bytes(&self) -> io::Result<u64> {
        Ok(guard(&self.0).len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let data = guard(&self.0);
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let n = buf.len().min(data.len() - start);
        buf.get_mut(..n)
            .unwrap_or_default()
            .copy_from_slice(data.get(start..start + n).unwrap_or_default());
        Ok(n)
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        let mut data = guard(&self.0);
        let start = usize::try_from(offset).map_err(|_| io::Error::other("offset too large"))?;
        if data.len() < start + bytes.len() {
            data.resize(start + bytes.len(), 0);
        }
        data.get_mut(start..start + bytes.len())
            .unwrap_or_default()
            .copy_from_slice(bytes);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        guard(&self.0).resize(
            usize::try_from(len).map_err(|_| io::Error::other("length too large"))?,
            0,
        );
        Ok(())
    }
}

impl LogFs for MemFs {
    type File = MemFile;
    /// One `MemFs` belongs to one process, so no one else can hold its directories.
    type DirLock = ();

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut tree = guard(&self.tree);
        for ancestor in path.ancestors() {
            tree.dirs.insert(ancestor.to_path_buf(), ());
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let tree = guard(&self.tree);
        if !tree.dirs.contains_key(path) {
            return Err(not_found(path));
        }
        let name = |p: &PathBuf| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let dirs = tree
            .dirs
            .keys()
            .filter(|d| d.parent() == Some(path))
            .map(|d| DirEntry {
                name: name(d),
                is_dir: true,
            });
        let files = tree
            .files
            .keys()
            .filter(|f| f.parent() == Some(path))
            .map(|f| DirEntry {
                name: name(f),
                is_dir: false,
            });
        let mut entries: Vec<DirEntry> = dirs.chain(files).collect();
        entries.sort();
        Ok(entries)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<MemFile> {
        let mut tree = guard(&self.tree);
        if let Some(data) = tree.files.get(path) {
            return Ok(MemFile(data.clone()));
        }
        let parent_exists = path.parent().is_some_and(|p| tree.dirs.contains_key(p));
        if !create || !parent_exists {
            return Err(not_found(path));
        }
        let data: Data = Arc::default();
        tree.files.insert(path.to_path_buf(), data.clone());
        Ok(MemFile(data))
    }

    fn exists(&self, path: &Path) -> bool {
        let tree = guard(&self.tree);
        tree.files.contains_key(path) || tree.dirs.contains_key(path)
    }

    fn modified_ms(&self, path: &Path) -> io::Result<i64> {
        if self.exists(path) {
            Ok(self.modified_ms)
        } else {
            Err(not_found(path))
        }
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        guard(&self.tree)
            .files
            .remove(path)
            .map(drop)
            .ok_or_else(|| not_found(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut tree = guard(&self.tree);
        let data = tree.files.remove(from).ok_or_else(|| not_found(from))?;
        tree.files.insert(to.to_path_buf(), data);
        Ok(())
    }

    fn sync_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    fn lock_dir(&self, _path: &Path, _holder: &str) -> Result<(), super::fs::LockError> {
        Ok(())
    }
}
