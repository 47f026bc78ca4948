//! Helpers the `falcon` binary's end-to-end tests share: running the binary
//! from the repository root (or another directory), and scratch directories.

// Each test crate uses its own subset.
#![allow(dead_code)]

pub mod demo;
pub mod metrics;
pub mod nbd;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

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

/// A TCP port on 127.0.0.1 that was free a moment ago (a control or
/// metrics address for a process under test).
pub fn free_tcp() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

/// A UDP port on 127.0.0.1 that was free a moment ago.
pub fn free_udp() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .unwrap()
}

/// Waits for `child` and its output, SIGKILLing it once `limit` has
/// passed (its pipes are read meanwhile, so a chatty child never blocks).
pub fn wait_at_most(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let start = Instant::now();
    let watchdog = std::thread::spawn(move || {
        while start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(50));
            if std::fs::metadata(format!("/proc/{pid}")).is_err() {
                return;
            }
        }
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    });
    let output = child.wait_with_output().expect("wait");
    let _ = watchdog.join();
    output
}
