//! End-to-end tests of the target ULP's answers and of corruption in
//! `falcon demo`: RNR NACKs (`--rnr`, `--rnr-timeout-ms`), completion in
//! error (`--cie`) and flipped bits (`--corrupt`), each run by the release
//! binary and read back from `--json`.

use serde_json::Value;

mod common;
use common::demo::{demo_json, f, u};
use common::{falcon, stderr};

/// `falcon demo --json --no-nvme ARGS…`: the exit status and the report.
/// The NVMe phase takes none of these faults (tests/demo_nvme.rs).
fn demo(args: &[&str]) -> (bool, Value) {
    let mut all = vec!["--no-nvme"];
    all.extend_from_slice(args);
    demo_json(&all)
}

fn sum(v: &Value, key: &str) -> u64 {
    v[key]
        .as_object()
        .unwrap_or_else(|| panic!("{key} in {v}"))
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum()
}

/// Every transaction completed, none failed: the run exited 0.
fn all_complete(ok: bool, v: &Value, transactions: u64) {
    assert!(ok, "{:?}", v["failure_reasons"]);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(u(v, "failures"), 0, "{v}");
    assert_eq!(u(v, "transactions"), transactions, "{v}");
}

/// The demo checks each completion against what the target's ULP did:
/// exactly the transactions it completed in error end with
/// kCmplTargetNackCIE (pushes with its code), in RSN order; any other end
/// would be a failure and exit 1. They are counted apart, the rest verify.
#[test]
fn cie_transactions_end_in_cie_and_the_rest_verify() {
    let (ok, v) = demo(&["--cie", "0.001", "--transactions", "5000"]);
    all_complete(ok, &v, 5000);
    let cie = u(&v, "cie_completions");
    assert!(cie > 0, "0.1 % of 5000 completed in error: {v}");
    assert_eq!(cie, u(&v, "cie_pushes") + u(&v, "cie_pulls"), "{v}");
    assert_eq!(u(&v, "pushes") + u(&v, "pulls") + cie, 5000, "{v}");
    // A push's CIE NACK makes the initiator resync it (OCP Falcon 0.9 §11).
    assert!(u(&v, "resyncs") >= u(&v, "cie_pushes"), "{v}");
    assert!(u(&v, "verified_bytes") > 0);
    assert_eq!(u(&v, "rnr_nacks_sent"), 0);
}

/// 1 % of frames with a bit flipped, under loss, reordering and
/// duplication: nothing lost or duplicated, no wrong byte, and every
/// corrupted frame either dropped by a named check or flipped in a field
/// no receiver checks, the two adding up to the frames corrupted.
#[test]
fn corrupted_frames_are_dropped_by_name_and_recovered() {
    let (ok, v) = demo(&[
        "--corrupt",
        "0.01",
        "--loss",
        "0.01",
        "--reorder",
        "0.02",
        "--duplicate",
        "0.01",
        "--transactions",
        "5000",
    ]);
    all_complete(ok, &v, 5000);
    assert_eq!(u(&v, "pushes") + u(&v, "pulls"), 5000, "{v}");
    let corrupted = u(&v, "corrupted_frames");
    assert!(corrupted > 20, "1 % of the frames: {v}");
    let (dropped, harmless) = (sum(&v, "corruption_drops"), sum(&v, "corrupted_harmless"));
    assert_eq!(dropped + harmless, corrupted, "{v}");
    assert_eq!(v["corruption_accounted"], true);
    // Most of a frame is the PSP-authenticated part.
    assert!(
        u(&v["corruption_drops"], "psp_auth_failed") > dropped / 2,
        "{v}"
    );
    // The drops by reason include them, under the same names.
    for (reason, n) in v["corruption_drops"].as_object().unwrap() {
        assert_eq!(v["drops"][reason], *n, "{reason}");
    }
    assert!(u(&v, "retransmissions") > 0);
}

/// Over IPv6 no checksum covers the addresses: a flip in the destination
/// is dropped by the address check, one in a field no receiver checks
/// (source address, flow label, ...) is counted as harmless, and the
/// account still closes.
#[test]
fn corrupted_ipv6_frames_are_accounted_for() {
    let scratch = common::Scratch::new("demofaults", "ipv6");
    let path = scratch.file(
        "ipv6.toml",
        "[initiator]\nip = \"fd00::1\"\n[target]\nip = \"fd00::2\"\n",
    );
    let (ok, v) = demo(&[
        "--config",
        &path,
        "--corrupt",
        "0.03",
        "--transactions",
        "5000",
    ]);
    all_complete(ok, &v, 5000);
    let (dropped, harmless) = (sum(&v, "corruption_drops"), sum(&v, "corrupted_harmless"));
    assert_eq!(dropped + harmless, u(&v, "corrupted_frames"), "{v}");
    assert!(
        u(&v["corruption_drops"], "destination_ip_mismatch") > 0,
        "{v}"
    );
    assert!(u(&v["corrupted_harmless"], "ipv6_source") > 0, "{v}");
}

/// RNR NACKs on 1 % of first deliveries with a 1 ms timeout (0.96 ms on
/// the wire), under 1 % loss: every RNR-NACKed request is redelivered and
/// accepted, and nothing times out (kCmplLocalTO would be a failure).
#[test]
fn rnr_nacked_transactions_are_redelivered_and_complete() {
    let (ok, v) = rnr_run(&["--rnr-timeout-ms", "1", "--transactions", "3000"]);
    all_complete(ok, &v, 3000);
    assert_eq!(f(&v, "rnr_timeout_us"), 960.0);
    check_rnr(&v);
}

/// `falcon demo --rnr 0.01 --loss 0.01 --json ARGS…`.
fn rnr_run(args: &[&str]) -> (bool, Value) {
    let mut all = vec!["--rnr", "0.01", "--loss", "0.01"];
    all.extend_from_slice(args);
    demo(&all)
}

/// What every successful RNR run shows.
fn check_rnr(v: &Value) {
    let sent = u(v, "rnr_nacks_sent");
    assert!(sent > 0, "{v}");
    assert_eq!(
        sent,
        u(v, "rnr_nacks_sent_push") + u(v, "rnr_nacks_sent_pull")
    );
    // Each RNR-NACKed request came back once and was accepted.
    assert_eq!(u(v, "rnr_redeliveries"), sent, "{v}");
    // No retry comes before the timeout: the pull's redelivery timer, the
    // push's retransmission after the NACK (or after its RTO, if lost).
    let timeout = f(v, "rnr_timeout_us");
    assert!(f(v, "rnr_redelivery_wait_max_us") >= timeout, "{v}");
    assert!(f(v, "rnr_wait_max_us") >= f(v, "rnr_redelivery_wait_max_us"));
}

/// Long RNR timeouts (122.88 ms and 655.36 ms on the wire) on an
/// unordered connection: the transactions behind an RNR-NACKed one go on.
#[test]
fn long_rnr_timeouts_complete_on_an_unordered_connection() {
    for ms in ["120", "600"] {
        let (ok, v) = rnr_run(&[
            "--config",
            "configs/demo-unordered-lossy.toml",
            "--rnr-timeout-ms",
            ms,
            "--transactions",
            "1000",
        ]);
        all_complete(ok, &v, 1000);
        assert_eq!(v["ordering"], "unordered");
        check_rnr(&v);
        assert_eq!(u(&v, "rnr_nacks_sent_behind"), 0, "{v}");
    }
}

/// On an ordered connection the requests after an RNR-NACKed one are
/// RNR-NACKed too until it is accepted (OCP Falcon 0.9 §8.5.3.4), so no
/// later push times out (kCmplLocalTO) while a 122.88 ms RNR timeout runs.
#[test]
fn rnr_timeout_120_ms_completes_on_an_ordered_connection() {
    let (ok, v) = rnr_run(&["--rnr-timeout-ms", "120", "--transactions", "2000"]);
    all_complete(ok, &v, 2000);
    assert_eq!(v["ordering"], "ordered");
    check_rnr(&v);
    assert!(u(&v, "rnr_nacks_sent_behind") > 0, "{v}");
}

/// As above with the longest timeout of the table, 655.36 ms.
#[test]
fn rnr_timeout_600_ms_completes_on_an_ordered_connection() {
    let (ok, v) = rnr_run(&["--rnr-timeout-ms", "600", "--transactions", "1000"]);
    all_complete(ok, &v, 1000);
    assert_eq!(v["ordering"], "ordered");
    check_rnr(&v);
}

/// The flags are refused by name when out of range, and corruption
/// without PSP is refused (nothing would authenticate the payload).
#[test]
fn bad_values_exit_2_naming_the_flag() {
    for (args, name) in [
        (&["--rnr", "1.5"][..], "--rnr"),
        (&["--cie", "2"][..], "--cie"),
        (&["--corrupt", "0.6"][..], "--corrupt"),
        (&["--rnr-timeout-ms", "700"][..], "--rnr-timeout-ms"),
    ] {
        let mut all = vec!["demo", "--transactions", "10"];
        all.extend_from_slice(args);
        let o = falcon(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(name), "{args:?}: {}", stderr(&o));
    }
    let scratch = common::Scratch::new("demofaults", "plain");
    let path = scratch.file("plain.toml", "[psp]\nenabled = false\n");
    let o = falcon(&["demo", "--config", &path, "--corrupt", "0.01"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--corrupt needs psp.enabled"),
        "{}",
        stderr(&o)
    );
}
