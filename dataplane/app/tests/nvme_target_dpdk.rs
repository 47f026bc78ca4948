//! `falcon nvme-target` on a DPDK port: the target serves `net_memif`
//! (its `port.eal_args`), pinned to CPU 1, and `falcon nvme-perf --connect
//! --port memif --verify`, its own EAL on CPU 0, drives a RAM and a file
//! namespace through it; no root needed. The target's final figures
//! (SIGTERM) carry the memif port's counters.
//!
//! `scripts/test.sh` runs this file with `--features dpdk`, one test at a
//! time (each pair polls both cores).
#![cfg(feature = "dpdk")]

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{free_tcp, stderr, wait_at_most, Scratch, BIN};

#[test]
fn nvme_perf_over_memif_verifies_against_the_target() {
    let scratch = Scratch::new("nvme-target-dpdk", "memif");
    let control = free_tcp();
    let socket = scratch.path("memif.sock");
    let image = scratch.path("ns2.img");
    let config = format!(
        r#"
[node]
ip = "10.0.0.2"
control = "{control}"
core = 1

[port]
kind = "dpdk"
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-telemetry", "--log-level=lib.eal:error",
            "--vdev=net_memif0,role=server,socket={},bsize=4608"]
device = "net_memif0"

[delivery]
initial_rto_us = 10000

[rue.swift]
fabric_base_delay = 1526
min_retransmit_timeout = 76294

[[namespaces]]
nsid = 1
backing = "ram"
size = "4M"

[[namespaces]]
nsid = 2
backing = "file"
path = "{}"
size = "4M"
lba_size = 4096
metadata = 8
"#,
        socket.display(),
        image.display()
    );
    let path = scratch.file("target.toml", &config);
    let mut target = Command::new(BIN)
        .args(["nvme-target", "--config", &path, "--quiet", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run falcon nvme-target");
    // The memif client needs the server's socket (abstract: not in the
    // file system) when its EAL starts: the target says when it serves.
    let log = target.stderr.take().expect("piped");
    let (serving, serving_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(log)).map_while(Result::ok) {
            if line.contains("serving") {
                let _ = serving.send(());
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    if serving_rx.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = target.kill();
        let _ = target.wait();
        panic!("the target did not serve: {}", reader.join().unwrap());
    }
    let control = control.to_string();
    let socket = socket.display().to_string();
    for nsid in ["1", "2"] {
        let out = Command::new(BIN)
            .args(["nvme-perf", "--connect", &control, "--port", "memif"])
            .args(["--socket", &socket, "--core", "0", "--nsid", nsid])
            .args(["-q", "16", "-w", "randrw", "--ios", "2000", "--verify"])
            .args(["--size", "1M", "--json", "--quiet"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run falcon nvme-perf");
        let out = wait_at_most(out, Duration::from_secs(120));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                stderr(&out)
            )
        });
        assert!(out.status.success(), "{report}\n{}", stderr(&out));
        assert_eq!(report["ok"], true, "{report}");
        assert_eq!(report["ios"], 2000, "{report}");
        assert_eq!(report["errors"], 0, "{report}");
        assert_eq!(report["verify_failures"], 0, "{report}");
        assert!(report["verified_reads"].as_u64() > Some(200), "{report}");
        assert!(
            report["transport"].as_str().unwrap().contains("DPDK"),
            "{report}"
        );
    }
    assert!(Command::new("kill")
        .args(["-TERM", &target.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = wait_at_most(target, Duration::from_secs(30));
    let log = reader.join().unwrap();
    assert!(out.status.success(), "target: {log}");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{log}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(report["port"], "dpdk", "{report}");
    assert_eq!(report["dpdk"]["driver"], "net_memif", "{report}");
    assert_eq!(report["connections"]["closed"], 2, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(
        report["read_ios"].as_u64().unwrap() + report["write_ios"].as_u64().unwrap(),
        4000,
        "{report}"
    );
}
