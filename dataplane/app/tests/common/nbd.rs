//! `falcon nbd-gateway` under the real NBD clients, for the tests of its
//! backends (`nbd_clients` on RAM, `nvme_nbd` over NVMe over Falcon): the
//! client binaries (a missing one fails by name, pointing at
//! scripts/setup.sh), a running gateway stopped with SIGTERM and its summary
//! read, and random files compared byte for byte.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::Value;

use super::{Scratch, BIN};

/// The path of a client binary, or a failure naming the setup script.
pub fn tool(name: &str) -> String {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match found {
        Some(path) if !path.is_empty() => path,
        _ => panic!(
            "`{name}` is not installed: run scripts/setup.sh (it installs fio, qemu-utils, \
             libnbd-bin and nbdkit, the NBD clients these tests drive)"
        ),
    }
}

/// Runs a client to its end; fails the test with its output unless it
/// exits 0.
pub fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(tool(program))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A running `falcon nbd-gateway`.
pub struct Gateway {
    pub child: Option<Child>,
    /// What it has printed on stderr so far, and the thread collecting it
    /// (it ends with the pipe).
    pub stderr: Arc<Mutex<String>>,
    pub collector: Option<thread::JoinHandle<()>>,
    /// The address it listens on (`unix:PATH`, `tcp:IP:PORT`).
    pub address: String,
}

impl Gateway {
    /// Starts a gateway on `backend` (`ram`, `falcon`) listening on
    /// `listen`, with `extra` flags, and waits for its "listening on" line.
    pub fn start(backend: &str, listen: &str, extra: &[&str]) -> Gateway {
        let mut child = Command::new(BIN)
            .args([
                "nbd-gateway",
                "--listen",
                listen,
                "--backend",
                backend,
                "--json",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run falcon nbd-gateway");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        let log = Arc::clone(&stderr);
        let collector = thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("nbd-gateway: listening on ") {
                    let _ = tx.send(rest.split(' ').next().unwrap_or_default().to_string());
                }
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let address = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "the gateway did not start listening:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        Gateway {
            child: Some(child),
            stderr,
            collector: Some(collector),
            address,
        }
    }

    /// A Unix-socket gateway on `backend` in `scratch`.
    pub fn unix(backend: &str, scratch: &Scratch, extra: &[&str]) -> Gateway {
        let path = scratch.path("nbd.sock");
        Gateway::start(backend, &format!("unix:{}", path.display()), extra)
    }

    pub fn socket(&self) -> &str {
        self.address.strip_prefix("unix:").expect("a unix gateway")
    }

    /// The NBD URI of export `name`.
    pub fn uri(&self, name: &str) -> String {
        match self.address.strip_prefix("tcp:") {
            Some(addr) => format!("nbd://{addr}/{name}"),
            None => format!("nbd+unix:///{name}?socket={}", self.socket()),
        }
    }

    /// SIGTERM; waits for the exit and returns the summary and stderr.
    pub fn stop(mut self) -> (Value, String) {
        let child = self.child.take().unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.finish(child)
    }

    /// Waits for an exit the gateway makes on its own (`--duration`).
    pub fn wait(mut self) -> (Value, String) {
        let child = self.child.take().unwrap();
        self.finish(child)
    }

    fn finish(&mut self, child: Child) -> (Value, String) {
        let out = child.wait_with_output().unwrap();
        if let Some(collector) = self.collector.take() {
            collector.join().unwrap();
        }
        let stderr = self.stderr.lock().unwrap().clone();
        assert!(
            out.status.success(),
            "the gateway exited {}:\n{stderr}",
            out.status
        );
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "summary is not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        (summary, stderr)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Deterministic bytes that do not compress to a pattern (xorshift64).
pub fn random_file(scratch: &Scratch, name: &str, len: usize, seed: u64) -> std::path::PathBuf {
    let mut x = seed | 1;
    let mut bytes = Vec::with_capacity(len);
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    bytes.truncate(len);
    let path = scratch.path(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

pub fn same_bytes(a: &std::path::Path, b: &std::path::Path) {
    let (a_bytes, b_bytes) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(
        a_bytes.len(),
        b_bytes.len(),
        "{} vs {}",
        a.display(),
        b.display()
    );
    let first = a_bytes.iter().zip(&b_bytes).position(|(x, y)| x != y);
    assert_eq!(
        first,
        None,
        "first differing byte of {} and {}",
        a.display(),
        b.display()
    );
}

pub fn counter(summary: &Value, key: &str) -> u64 {
    summary[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {summary}"))
}

/// fio's nbd engine on `gateway`: 4 KiB randrw at iodepth 32 over 16 MiB
/// with crc32c verification; fails on any fio error and returns the job's
/// (reads, writes).
pub fn fio_randrw_verify(gateway: &Gateway) -> (u64, u64) {
    let uri = format!("--uri={}", gateway.uri(""));
    let out = run(
        "fio",
        &[
            "--name=verify",
            "--ioengine=nbd",
            &uri,
            "--rw=randrw",
            "--bs=4k",
            "--iodepth=32",
            "--size=16M",
            "--verify=crc32c",
            "--verify_fatal=1",
            // No state file left in the working directory.
            "--verify_state_save=0",
            "--output-format=json",
        ],
    );
    // fio's nbd engine prints a line before the JSON.
    let text = String::from_utf8_lossy(&out.stdout);
    let json: Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    let job = &json["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    (
        job["read"]["total_ios"].as_u64().unwrap(),
        job["write"]["total_ios"].as_u64().unwrap(),
    )
}
