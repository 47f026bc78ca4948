//! `falcon nbd-gateway --backend falcon` driven by real NBD clients: each
//! read and write crosses NVMe over Falcon (initiator, two engines with
//! PSP over the in-process loopback, target RAM namespace). qemu-img
//! convert in and back out (byte-compared) and fio's nbd engine (4 KiB
//! randrw at iodepth 32, crc32c verification); nbdinfo sees the 512-byte
//! minimum block size, the 1 MiB maximum and no trim or write-zeroes.
//!
//! The helpers are those of `nbd_clients.rs` (the RAM backend's tests),
//! with the gateway started on the Falcon backend.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{Scratch, BIN};

/// The path of a client binary, or a failure naming the setup script.
fn tool(name: &str) -> String {
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
fn run(program: &str, args: &[&str]) -> Output {
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
struct Gateway {
    child: Option<Child>,
    /// What it has printed on stderr so far, and the thread collecting it
    /// (it ends with the pipe).
    stderr: Arc<Mutex<String>>,
    collector: Option<thread::JoinHandle<()>>,
    /// The address it listens on (`unix:PATH`, `tcp:IP:PORT`).
    address: String,
}

impl Gateway {
    /// Starts a Falcon gateway on `listen` with `extra` flags and waits for
    /// its "listening on" line.
    fn start(listen: &str, extra: &[&str]) -> Gateway {
        let mut child = Command::new(BIN)
            .args([
                "nbd-gateway",
                "--listen",
                listen,
                "--backend",
                "falcon",
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

    /// A Unix-socket gateway in `scratch`.
    fn unix(scratch: &Scratch, extra: &[&str]) -> Gateway {
        let path = scratch.path("nbd.sock");
        Gateway::start(&format!("unix:{}", path.display()), extra)
    }

    fn socket(&self) -> &str {
        self.address.strip_prefix("unix:").expect("a unix gateway")
    }

    /// The NBD URI of export `name`.
    fn uri(&self, name: &str) -> String {
        match self.address.strip_prefix("tcp:") {
            Some(addr) => format!("nbd://{addr}/{name}"),
            None => format!("nbd+unix:///{name}?socket={}", self.socket()),
        }
    }

    /// SIGTERM; waits for the exit and returns the summary and stderr.
    fn stop(mut self) -> (Value, String) {
        let child = self.child.take().unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
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
fn random_file(scratch: &Scratch, name: &str, len: usize, seed: u64) -> std::path::PathBuf {
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

fn same_bytes(a: &std::path::Path, b: &std::path::Path) {
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

fn counter(summary: &Value, key: &str) -> u64 {
    summary[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {summary}"))
}

/// The Falcon backend's figures in the summary: no failed iCMD.
fn no_icmd_errors(summary: &Value) -> u64 {
    let f = &summary["falcon"];
    assert_eq!(f["icmd_errors"], 0, "{f}");
    assert_eq!(f["refused"], 0, "{f}");
    f["icmds"]
        .as_u64()
        .unwrap_or_else(|| panic!("no icmds in {f}"))
}

#[test]
fn nbdinfo_sees_the_nvme_block_sizes() {
    let scratch = Scratch::new("nvme-nbd", "nbdinfo");
    let gw = Gateway::unix(&scratch, &["--size", "8M", "--quiet"]);
    let out = run("nbdinfo", &["--json", &gw.uri("")]);
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let export = &info["exports"][0];
    assert_eq!(export["export-size"], 8 << 20, "{export}");
    assert_eq!(export["block_size_minimum"], 512, "{export}");
    assert_eq!(export["block_size_maximum"], 1 << 20, "{export}");
    assert_eq!(export["can_flush"], true, "{export}");
    assert_eq!(export["can_fua"], true, "{export}");
    assert_eq!(export["can_trim"], false, "{export}");
    assert_eq!(export["can_zero"], false, "{export}");
    let (summary, _) = gw.stop();
    assert_eq!(counter(&summary, "errors"), 0);
}

#[test]
fn qemu_img_convert_in_and_back_out_over_nvme() {
    let scratch = Scratch::new("nvme-nbd", "qemu-img");
    let gw = Gateway::unix(&scratch, &["--size", "8M", "--quiet"]);
    let src = random_file(&scratch, "src.img", 8 << 20, 11);
    let back = scratch.path("back.img");
    let uri = gw.uri("");
    run(
        "qemu-img",
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            src.to_str().unwrap(),
            &uri,
        ],
    );
    run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &uri,
            back.to_str().unwrap(),
        ],
    );
    same_bytes(&src, &back);
    let (summary, _) = gw.stop();
    assert_eq!(counter(&summary, "written_bytes"), 8 << 20);
    assert!(counter(&summary, "read_bytes") >= 8 << 20);
    assert_eq!(counter(&summary, "errors"), 0);
    // Every read and write was an iCMD.
    let icmds = no_icmd_errors(&summary);
    assert_eq!(
        icmds,
        counter(&summary, "reads") + counter(&summary, "writes")
    );
    assert!(summary["falcon"]["falcon"]["ncmds"].as_u64().unwrap() >= (16 << 20) / 4096);
}

#[test]
fn fio_randrw_iodepth_32_verifies_over_nvme() {
    let scratch = Scratch::new("nvme-nbd", "fio");
    let gw = Gateway::unix(&scratch, &["--size", "16M", "--quiet"]);
    let uri = format!("--uri={}", gw.uri(""));
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
            "--verify_state_save=0",
            "--output-format=json",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let json: Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    let job = &json["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    let (reads, writes) = (
        job["read"]["total_ios"].as_u64().unwrap(),
        job["write"]["total_ios"].as_u64().unwrap(),
    );
    assert!(writes > 1000, "{writes} writes");
    assert!(reads > writes, "{reads} reads for {writes} writes");
    let (summary, _) = gw.stop();
    assert_eq!(counter(&summary, "errors"), 0);
    assert_eq!(counter(&summary, "writes"), writes);
    let icmds = no_icmd_errors(&summary);
    assert_eq!(
        icmds,
        counter(&summary, "reads") + counter(&summary, "writes")
    );
}
