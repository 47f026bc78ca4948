//! Test support: scratch directories removed on drop.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::{fs, process};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A fresh directory, removed with its contents on drop.
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Under the system temp directory (`/tmp`).
    pub(crate) fn new(name: &str) -> TempDir {
        TempDir::under(&std::env::temp_dir(), name)
    }

    /// Under the workspace's `target/` (the file system of the checkout).
    pub(crate) fn in_target(name: &str) -> TempDir {
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/nvme-ulp-tests");
        TempDir::under(&target, name)
    }

    fn under(parent: &Path, name: &str) -> TempDir {
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = parent.join(format!("nvme-ulp-{name}-{}-{unique}", process::id()));
        fs::create_dir_all(&path).expect("test directory");
        TempDir { path }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}
