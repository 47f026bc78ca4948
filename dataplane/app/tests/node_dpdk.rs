//! `falcon node` as two processes on DPDK ports (issue #25, item 7): an
//! initiator and a target, each its own EAL pinned to its own core, move
//! pushes and pulls of many sizes with 1 % injected loss each way, and
//! both check every byte:
//!
//! - over `net_memif` (shared memory; no root needed);
//! - over `net_af_packet` and `net_af_xdp` on a veth pair whose ends sit in
//!   two network namespaces (root only: without it these say so and pass).
//!   The control channel runs over a second veth pair: an XDP program
//!   takes every frame of its interface, the kernel's TCP included.
//!
//! `scripts/test.sh` runs this file with `--features dpdk`, one test at a
//! time (each pair polls both cores).
#![cfg(feature = "dpdk")]

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{wait_at_most, BIN};

/// Starts one side; `netns` runs it in that network namespace.
fn side(netns: Option<&str>, args: &[&str]) -> Child {
    let mut command = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, BIN]);
            c
        }
        None => Command::new(BIN),
    };
    command
        .args(["node", "--json", "--quiet"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("falcon node starts")
}

/// Runs a verify pair with `port_args` (the target's, then the
/// initiator's) and checks both reports.
fn verify_pair(netns: [Option<&str>; 2], control: &str, port_args: [&[&str]; 2], driver: &str) {
    let common = [
        "--control",
        control,
        "--workload",
        "verify",
        "--transactions",
        "3000",
        "--loss",
        "0.01",
    ];
    let target_args: Vec<&str> = ["--role", "target", "--core", "1", "--seconds", "60"]
        .into_iter()
        .chain(common)
        .chain(port_args[0].iter().copied())
        .collect();
    let target = side(netns[1], &target_args);
    std::thread::sleep(Duration::from_millis(500));
    let initiator_args: Vec<&str> = ["--role", "initiator", "--core", "0"]
        .into_iter()
        .chain(common)
        .chain(port_args[1].iter().copied())
        .collect();
    let initiator = wait_at_most(side(netns[0], &initiator_args), Duration::from_secs(90));
    let target = wait_at_most(target, Duration::from_secs(30));
    let text = |o: &Output| {
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(
        initiator.status.success(),
        "initiator: {}",
        text(&initiator)
    );
    assert!(target.status.success(), "target: {}", text(&target));
    let i: Value = serde_json::from_slice(&initiator.stdout).expect("initiator JSON");
    let t: Value = serde_json::from_slice(&target.stdout).expect("target JSON");
    for (who, r) in [("initiator", &i), ("target", &t)] {
        assert_eq!(r["ok"], true, "{who}: {r}");
        assert_eq!(r["failures"], 0, "{who}: {r}");
        assert_eq!(r["dpdk"]["driver"], driver, "{who}: {r}");
        // 1 % of what each side sent was dropped at its port, and
        // recovered: every byte still arrived and was checked.
        assert!(r["injected_losses"].as_u64().unwrap() > 0, "{who}: {r}");
        assert!(r["retransmissions"].as_u64().unwrap() > 0, "{who}: {r}");
    }
    assert_eq!(i["transactions"], 3000, "{i}");
    assert_eq!(i["push_bytes"], t["push_bytes"], "{i}\n{t}");
    assert_eq!(i["pull_bytes"], t["pull_bytes"], "{i}\n{t}");
    // The target checked every pushed byte, the initiator every pulled one.
    assert_eq!(t["verified_bytes"], t["push_bytes"], "{t}");
    assert_eq!(i["verified_bytes"], i["pull_bytes"], "{i}");
    assert!(i["push_bytes"].as_u64().unwrap() > 1_000_000, "{i}");
}

#[test]
fn memif_pair_verifies_every_byte_under_loss() {
    let socket = std::env::temp_dir().join(format!("falcon-node-test-{}.sock", std::process::id()));
    let socket = socket.display().to_string();
    let port: [&str; 4] = ["--port", "memif", "--socket", &socket];
    verify_pair([None, None], "127.0.0.1:17790", [&port, &port], "net_memif");
}

fn root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Two network namespaces joined by a data veth pair (no addresses) and a
/// control veth pair (10.98.x.1 and .2), removed when dropped.
struct Namespaces {
    names: [String; 2],
}

impl Namespaces {
    fn new(tag: &str, subnet: u8) -> Namespaces {
        let id = std::process::id() % 10_000;
        let names = [format!("fl{tag}a{id}"), format!("fl{tag}b{id}")];
        let run = |args: &[&str]| {
            let s = Command::new("ip")
                .args(args)
                .status()
                .expect("ip (iproute2)");
            assert!(s.success(), "ip {}", args.join(" "));
        };
        for n in &names {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
            run(&["netns", "add", n]);
        }
        let ns = Namespaces { names };
        let [a, b] = &ns.names;
        // "d": the data pair; "c": the control pair, with addresses.
        for (x, addr) in [("d", None), ("c", Some(subnet))] {
            let (ea, eb) = (format!("{x}{tag}a{id}"), format!("{x}{tag}b{id}"));
            run(&["link", "add", &ea, "type", "veth", "peer", "name", &eb]);
            run(&["link", "set", &ea, "netns", a]);
            run(&["link", "set", &eb, "netns", b]);
            for (n, e, host) in [(a, &ea, 1), (b, &eb, 2)] {
                if let Some(net) = addr {
                    run(&[
                        "-n",
                        n,
                        "addr",
                        "add",
                        &format!("10.{net}.0.{host}/24"),
                        "dev",
                        e,
                    ]);
                }
                run(&["-n", n, "link", "set", e, "up"]);
                run(&["-n", n, "link", "set", "lo", "up"]);
            }
        }
        ns
    }

    fn data_iface(&self, tag: &str, side: usize) -> String {
        let id = std::process::id() % 10_000;
        format!("d{tag}{}{id}", ["a", "b"][side])
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn namespace_pair(tag: &str, port: &str, driver: &str, subnet: u8) {
    if !root() {
        eprintln!("node_dpdk: not root, the {port} pair across network namespaces is skipped");
        return;
    }
    let ns = Namespaces::new(tag, subnet);
    let (ia, ib) = (ns.data_iface(tag, 0), ns.data_iface(tag, 1));
    let control = format!("10.{subnet}.0.2:17791");
    verify_pair(
        [Some(&ns.names[0]), Some(&ns.names[1])],
        &control,
        [
            &["--port", port, "--iface", &ib],
            &["--port", port, "--iface", &ia],
        ],
        driver,
    );
}

#[test]
fn af_packet_pair_across_namespaces_verifies_every_byte_under_loss() {
    namespace_pair("p", "af-packet", "net_af_packet", 97);
}

#[test]
fn af_xdp_pair_across_namespaces_verifies_every_byte_under_loss() {
    namespace_pair("x", "af-xdp", "net_af_xdp", 96);
}
