//! Helpers the `falcon` binary's end-to-end tests share: running the binary
//! from the repository root (or another directory), and scratch directories.

// Each test crate uses its own subset.
#![allow(dead_code)]

pub mod metrics;
pub mod nbd;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_falcon");

/// A scratch directory per test, removed at the end.
pub struct Scratch(PathBuf);

impl Scratch {
    /// `falcon-{suite}-{name}-{pid}` under the temporary directory, empty.
    pub fn new(suite: &str, name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("falcon-{suite}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A path in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `text` to `name` in the directory and returns its path.
    pub fn file(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The repository's root (relative paths like `configs/…` resolve there).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `falcon ARGS…` from the repository root.
pub fn falcon(args: &[&str]) -> Output {
    falcon_in(&repo_root(), args)
}

/// Runs `falcon ARGS…` from `dir`.
pub fn falcon_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run falcon")
}

/// Its standard error, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
