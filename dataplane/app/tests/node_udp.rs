//! `falcon node` end to end: two processes over the kernel UDP port on
//! 127.0.0.1, their connection set up over the TCP control channel, PSP
//! on. The verify workload under 1 % injected loss each way: both exit 0
//! and count the same verified bytes. `falcon bench udp` runs the same
//! pair in one command; a setup the two sides disagree on is refused by
//! name on both.

use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

mod common;
use common::{falcon, free_tcp, free_udp, stderr, BIN};

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run falcon")
}

/// A target and an initiator with `extra_*` flags; their outputs.
fn pair(extra_target: &[&str], extra_initiator: &[&str]) -> (Output, Output) {
    let (a, b) = (free_udp().to_string(), free_udp().to_string());
    let control = free_tcp().to_string();
    let mut target_args = vec![
        "node",
        "--role",
        "target",
        "--port",
        "udp",
        "--bind",
        &b,
        "--peer",
        &a,
        "--control",
        &control,
        "--seconds",
        "120",
        "--quiet",
        "--json",
    ];
    target_args.extend_from_slice(extra_target);
    let target = spawn(&target_args);
    let mut initiator_args = vec![
        "node",
        "--role",
        "initiator",
        "--port",
        "udp",
        "--bind",
        &a,
        "--peer",
        &b,
        "--control",
        &control,
        "--quiet",
        "--json",
    ];
    initiator_args.extend_from_slice(extra_initiator);
    let initiator = spawn(&initiator_args).wait_with_output().unwrap();
    (target.wait_with_output().unwrap(), initiator)
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", String::from_utf8_lossy(&o.stdout), stderr(o)))
}

#[test]
fn two_processes_verify_every_byte_under_one_percent_loss() {
    let (target, initiator) = pair(
        &["--loss", "0.01"],
        &[
            "--loss",
            "0.01",
            "--workload",
            "verify",
            "--transactions",
            "2000",
        ],
    );
    assert!(initiator.status.success(), "{}", stderr(&initiator));
    assert!(target.status.success(), "{}", stderr(&target));
    let (i, t) = (json(&initiator), json(&target));
    let n = |v: &Value, key: &str| v[key].as_u64().unwrap_or_else(|| panic!("{key}: {v}"));
    assert_eq!(n(&i, "transactions"), 2000, "{i}");
    assert_eq!(n(&t, "transactions"), 2000, "{t}");
    // Pushes: acknowledged at the initiator, checked at the target; pulls:
    // served by the target, checked at the initiator.
    assert_eq!(n(&i, "push_bytes"), n(&t, "push_bytes"));
    assert_eq!(n(&i, "pull_bytes"), n(&t, "pull_bytes"));
    assert_eq!(n(&t, "verified_bytes"), n(&t, "push_bytes"));
    assert_eq!(n(&i, "verified_bytes"), n(&i, "pull_bytes"));
    assert!(
        n(&i, "push_bytes") > 1_000_000 && n(&i, "pull_bytes") > 500_000,
        "{i}"
    );
    // The loss happened and was recovered from.
    assert!(
        n(&i, "injected_losses") + n(&t, "injected_losses") > 0,
        "{i} {t}"
    );
    assert!(
        n(&i, "retransmissions") + n(&t, "retransmissions") > 0,
        "{i} {t}"
    );
    assert_eq!(n(&i, "failures") + n(&t, "failures"), 0);
    assert_eq!(i["psp"], true);
    assert_eq!(i["peer_report"]["role"], "target");
    for side in [&i, &t] {
        let udp = &side["udp"];
        assert_eq!(udp["rx_truncated"], 0, "{side}");
        assert_eq!(udp["rx_unknown_source"], 0, "{side}");
        assert_eq!(udp["tx_errors"], 0, "{side}");
    }
}

#[test]
fn bench_udp_runs_the_pair_in_one_command() {
    let o = falcon(&[
        "bench",
        "udp",
        "--workload",
        "rr",
        "--seconds",
        "0.5",
        "--inflight",
        "16",
        "--quiet",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["workload"], "rr");
    assert!(v["ops"].as_u64().unwrap() > 0, "{v}");
    assert!(v["latency_p50_us"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["response_bytes"], v["peer_report"]["response_bytes"]);
    assert_eq!(v["peer_report"]["core"], 1);
}

#[test]
fn a_setup_the_sides_disagree_on_is_refused_by_name() {
    let (target, initiator) = pair(&["--psp", "off"], &["--transactions", "10"]);
    assert_eq!(initiator.status.code(), Some(1), "{}", stderr(&initiator));
    assert_eq!(target.status.code(), Some(1), "{}", stderr(&target));
    assert!(
        stderr(&initiator)
            .contains("the target refused the connection: connection manager: PSP is off here and on at the peer"),
        "{}",
        stderr(&initiator)
    );
    assert!(
        stderr(&target).contains("PSP is off here and on at the peer"),
        "{}",
        stderr(&target)
    );
}
