//! `falcon run` on DPDK virtual devices (issue #26, items 1, 2 and 4):
//!
//! - the loopback node of configs/run-loopback.toml (net_ring, two
//!   datapath lcores, every frame steered to the other lcore through the
//!   software dispatcher) for a bounded time: every byte verified, a stats
//!   line a second, the JSON summary, and its metrics endpoint scraped
//!   twice while it runs and passed through `promtool check metrics`;
//! - the same node stopped by SIGINT: it drains and reports, exit 0;
//! - the initiator/target pair of configs/run-{initiator,target}.toml, two
//!   processes over net_memif, connections set up over the control
//!   channel, the run ending when the initiator is done;
//! - configs/run-pktgen.toml as the reflector of a `falcon pktgen`
//!   generator: the generator checks the node's counts against its own.
//!
//! `scripts/test.sh` runs this file with `--features dpdk`, one test at a
//! time (each run polls both CPUs).
#![cfg(feature = "dpdk")]

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;
use common::metrics::{promtool, scrape};
use common::{free_tcp, repo_root, BIN};

fn config(name: &str) -> String {
    repo_root()
        .join("configs")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn start(args: &[&str]) -> Child {
    Command::new(BIN)
        .arg("run")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("falcon run starts")
}

/// Waits for `child` (killing it after `limit`) and parses its JSON.
fn finish(child: Child, limit: Duration) -> (Output, Value) {
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(limit);
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    });
    let out = child.wait_with_output().unwrap();
    drop(watchdog);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {stdout}\nstderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, report)
}

/// The sum of every sample of `family` (over its labels).
fn total(text: &str, family: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(family) && !l.starts_with('#'))
        .filter(|l| l[family.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn stats_lines(out: &Output) -> usize {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("[run "))
        .count()
}

#[test]
fn the_loopback_node_verifies_reports_each_second_and_serves_metrics() {
    let metrics = free_tcp().to_string();
    let child = start(&[
        "--config",
        &config("run-loopback.toml"),
        "--duration",
        "4",
        "--metrics",
        &metrics,
        "--verbose",
        "--json",
    ]);
    // The endpoint has a snapshot once the first second passed.
    let first = scrape(&metrics, Duration::from_secs(20), "falcon_tx_frames_total");
    std::thread::sleep(Duration::from_millis(1500));
    let later = scrape(&metrics, Duration::from_secs(5), "falcon_tx_frames_total");
    let (out, r) = finish(child, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{r:#}");

    assert_eq!(r["ok"], true, "{r:#}");
    assert_eq!(r["stopped_by"], "duration");
    assert_eq!(r["lcores"], 2);
    assert_eq!(r["driver"], "net_ring");
    assert_eq!(r["connections"], 16, "both ends of eight connections");
    assert_eq!(r["failures"], 0);
    assert_eq!(r["undrained"], 0);
    assert!(r["verified_bytes"].as_u64().unwrap() > 0, "{r:#}");
    assert!(r["transactions"].as_u64().unwrap() > 0);
    // Every connection's ends are on different lcores of one port queue
    // each: what one lcore sends comes back to it and goes on to the other.
    assert!(r["dispatched"].as_u64().unwrap() > 0, "{r:#}");
    assert_eq!(r["dispatch_ring_full"], 0);
    let lcores = r["per_lcore"].as_array().unwrap();
    assert_eq!(lcores.len(), 2);
    for l in lcores {
        assert!(
            l["port"]["dispatch_received"].as_u64().unwrap() > 0,
            "{l:#}"
        );
        assert!(l["transactions"].as_u64().unwrap() > 0, "{l:#}");
    }
    // A line a second for the node, and one per lcore (`--verbose`).
    assert!(stats_lines(&out) >= 3, "{stderr}");
    assert!(stderr.contains("  lcore 2 (shard 1"), "{stderr}");

    let tx = "falcon_tx_frames_total";
    assert!(
        total(&later, tx) > total(&first, tx),
        "{first}\n---\n{later}"
    );
    assert!(
        later.contains("falcon_tx_frames_total{lcore=\"1\"}"),
        "{later}"
    );
    assert!(
        later.contains("falcon_drops_total{lcore=\"2\",reason=\"not_udp\"} 0"),
        "{later}"
    );
    assert!(later.contains("falcon_port_rx_packets_total "), "{later}");
    assert!(
        total(&later, "falcon_dispatched_frames_total") > 0,
        "{later}"
    );
    promtool(&first);
    promtool(&later);
}

#[test]
fn the_rue_on_its_own_lcore_serves_the_datapath_lcore() {
    let text = std::fs::read_to_string(config("run-loopback.toml"))
        .unwrap()
        .replace("datapath = [0, 1]", "datapath = [0]")
        .replace("# rue = 1", "rue = 1");
    assert!(
        text.contains("\nrue = 1"),
        "the example keeps its commented `rue` key"
    );
    let path = std::env::temp_dir().join(format!("falcon-run-rue-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let child = start(&[
        "--config",
        path.to_str().unwrap(),
        "--duration",
        "3",
        "--quiet",
        "--json",
    ]);
    let (out, r) = finish(child, Duration::from_secs(60));
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{}\n{r:#}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(r["rue"], "lcore");
    assert_eq!(r["lcores"], 1);
    assert_eq!(r["ok"], true, "{r:#}");
    // The datapath's ACKs became events on the RUE's lcore and came back.
    assert!(r["rue_events"].as_u64().unwrap() > 0, "{r:#}");
}

#[test]
fn sigint_stops_the_node_which_drains_and_reports() {
    let child = start(&[
        "--config",
        &config("run-loopback.toml"),
        "--quiet",
        "--json",
    ]);
    std::thread::sleep(Duration::from_secs(3));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let (out, r) = finish(child, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}\n{r:#}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(r["stopped_by"], "signal", "{r:#}");
    assert_eq!(r["undrained"], 0, "{r:#}");
    assert_eq!(r["ok"], true, "{r:#}");
    assert!(r["transactions"].as_u64().unwrap() > 0);
}

#[test]
fn an_initiator_and_a_target_over_memif_set_up_verify_and_end_together() {
    let target = start(&["--config", &config("run-target.toml"), "--quiet", "--json"]);
    std::thread::sleep(Duration::from_millis(500));
    let initiator = start(&[
        "--config",
        &config("run-initiator.toml"),
        "--quiet",
        "--json",
    ]);
    let (io, i) = finish(initiator, Duration::from_secs(120));
    let (to, t) = finish(target, Duration::from_secs(60));
    assert!(
        io.status.success(),
        "{}\n{i:#}",
        String::from_utf8_lossy(&io.stderr)
    );
    assert!(
        to.status.success(),
        "{}\n{t:#}",
        String::from_utf8_lossy(&to.stderr)
    );
    assert_eq!(i["stopped_by"], "done", "{i:#}");
    assert_eq!(t["stopped_by"], "peers", "{t:#}");
    assert_eq!(i["driver"], "net_memif");
    // 4 connections × 5000 transactions, each completed at the initiator
    // and served at the target; pushes checked there, pulls here.
    assert_eq!(i["transactions"], 20_000, "{i:#}");
    assert_eq!(t["transactions"], 20_000, "{t:#}");
    assert_eq!(i["failures"], 0);
    assert_eq!(t["failures"], 0);
    assert_eq!(t["served_push_bytes"], i["push_bytes"], "{i:#}\n{t:#}");
    assert_eq!(i["pull_bytes"], t["served_pull_bytes"]);
    assert!(i["pull_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn a_pktgen_generator_drives_the_node_as_its_reflector() {
    let node = start(&["--config", &config("run-pktgen.toml"), "--quiet", "--json"]);
    std::thread::sleep(Duration::from_millis(500));
    let generator = Command::new(BIN)
        .args([
            "pktgen",
            "--role",
            "generator",
            "--port",
            "memif",
            "--socket",
            "/tmp/falcon-run-pktgen.sock",
            "--control",
            "127.0.0.1:47230",
            "--core",
            "0",
            "--connections",
            "4",
            "--size",
            "64,512,4096",
            "--seconds",
            "3",
            "--quiet",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("falcon pktgen starts");
    let (go, g) = finish(generator, Duration::from_secs(60));
    let (no, n) = finish(node, Duration::from_secs(60));
    assert!(
        go.status.success(),
        "{}\n{g:#}",
        String::from_utf8_lossy(&go.stderr)
    );
    assert!(
        no.status.success(),
        "{}\n{n:#}",
        String::from_utf8_lossy(&no.stderr)
    );
    // The generator compared the node's pushes and bytes with its own.
    assert_eq!(g["ok"], true, "{g:#}");
    assert_eq!(n["stopped_by"], "peers", "{n:#}");
    assert!(n["pushes_served"].as_u64().unwrap() > 0);
    assert_eq!(n["pushes_served"], g["pushes"], "{g:#}\n{n:#}");
    assert_eq!(n["failures"], 0);
    // Every pushed byte checked at the node (the workload's header aside).
    assert_eq!(n["verified_bytes"], n["served_push_bytes"]);
}
