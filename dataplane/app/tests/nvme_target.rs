//! `falcon nvme-target` end to end: the target in its own process, pinned
//! to CPU 1, and `falcon nvme-perf --connect ... --verify` against it,
//! pinned to CPU 0, over the kernel UDP port on 127.0.0.1, PSP on: several
//! initiators one after another and two at once, every read checked, the
//! target's final figures (SIGTERM) counting them all.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{stderr, Scratch, BIN};

fn free_udp() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .unwrap()
}

fn free_tcp() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

/// A target configuration: the control and UDP addresses, pinned to CPU
/// 1, the loopback's timeouts, and `namespaces` (TOML `[[namespaces]]`
/// tables).
fn config(control: SocketAddr, udp: SocketAddr, namespaces: &str) -> String {
    format!(
        r#"
[node]
ip = "10.0.0.2"
control = "{control}"
core = 1

[port]
kind = "udp"
bind = "{udp}"

[delivery]
initial_rto_us = 10000

[rue.swift]
fabric_base_delay = 1526
min_retransmit_timeout = 76294

{namespaces}
"#
    )
}

/// Starts `falcon nvme-target --config PATH --quiet --json`.
fn start_target(path: &str) -> Child {
    Command::new(BIN)
        .args(["nvme-target", "--config", path, "--quiet", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run falcon nvme-target")
}

/// Waits for `child` at most `limit`; kills it past that.
fn wait(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let start = Instant::now();
    let watchdog = std::thread::spawn(move || {
        while start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(100));
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

/// Stops the target with SIGTERM; its final figures.
fn stop_target(target: Child) -> Value {
    let status = Command::new("kill")
        .args(["-TERM", &target.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = wait(target, Duration::from_secs(30));
    assert!(out.status.success(), "target: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        )
    })
}

/// `falcon nvme-perf --connect CONTROL --core 0 --json --quiet ARGS…`,
/// started.
fn start_perf(control: SocketAddr, args: &[&str]) -> Child {
    let control = control.to_string();
    let mut all = vec![
        "nvme-perf",
        "--connect",
        &control,
        "--core",
        "0",
        "--json",
        "--quiet",
    ];
    all.extend_from_slice(args);
    Command::new(BIN)
        .args(&all)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run falcon nvme-perf")
}

/// A finished nvme-perf run: verified, no error, as many I/Os as asked.
fn verified(perf: Child, ios: u64) -> Value {
    let out = wait(perf, Duration::from_secs(180));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        )
    });
    assert!(out.status.success(), "{report}\n{}", stderr(&out));
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["ios"], ios, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["verify_failures"], 0, "{report}");
    assert!(
        report["verified_reads"].as_u64().unwrap() > ios / 10,
        "few reads checked: {report}"
    );
    assert_eq!(report["falcon"]["connects"], 1, "{report}");
    assert_eq!(report["falcon"]["disconnects"], 0, "{report}");
    report
}

#[test]
fn nvme_perf_verifies_against_a_target_serving_several_initiators() {
    let scratch = Scratch::new("nvme-target", "perf");
    let (control, udp) = (free_tcp(), free_udp());
    let image = scratch.path("ns2.img");
    let namespaces = format!(
        r#"
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
protection = "opaque"
"#,
        image.display()
    );
    let path = scratch.file("target.toml", &config(control, udp, &namespaces));
    let target = start_target(&path);
    let run = |nsid: &str, seed: &str| {
        start_perf(
            control,
            &[
                "--nsid", nsid, "-q", "16", "-w", "randrw", "--ios", "1500", "--verify", "--size",
                "1M", "--seed", seed,
            ],
        )
    };
    // One after another: the RAM namespace, then the file namespace (4 KiB
    // blocks with 8 bytes of metadata).
    let first = verified(run("1", "1"), 1500);
    assert_eq!(first["nsid"], 1);
    assert_eq!(first["lba_size_bytes"], 512);
    let second = verified(run("2", "2"), 1500);
    assert_eq!(
        (
            second["lba_size_bytes"].as_u64(),
            second["metadata_bytes"].as_u64()
        ),
        (Some(4096), Some(8))
    );
    // Two at once, one on each namespace.
    let (a, b) = (run("1", "3"), run("2", "4"));
    verified(a, 1500);
    verified(b, 1500);
    // A namespace the target does not export is refused by name.
    let out = wait(run("9", "5"), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--nsid 9: the target at")
            && stderr(&out).contains("exports namespaces 1, 2"),
        "{}",
        stderr(&out)
    );
    let report = stop_target(target);
    let c = &report["connections"];
    assert_eq!(c["accepted"], 5, "{report}");
    assert_eq!(c["closed"], 4, "{report}");
    // The refused NSID's initiator went away without a word.
    assert_eq!(c["lost"], 1, "{report}");
    assert_eq!(c["failed"], 0, "{report}");
    assert_eq!(c["at_stop"], 0, "{report}");
    assert_eq!(report["stopped_by"], "signal");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(
        report["read_ios"].as_u64().unwrap() + report["write_ios"].as_u64().unwrap(),
        6000,
        "{report}"
    );
    let ns = &report["namespaces"];
    assert_eq!(ns[1]["backing"], "file");
    assert!(ns[1]["direct_io"].is_boolean(), "{report}");
    assert_eq!(report["udp"]["rx_truncated"], 0, "{report}");
}
