//! End-to-end tests of the RDMA phase of `falcon demo`: RDMA over Falcon
//! after the NVMe phase, run by the release binary and read back from
//! `--json` and the text output; its keys and flags.

use serde_json::Value;

mod common;
use common::demo::{demo, demo_json, f, u};
use common::{falcon, stderr, Scratch};

/// Under 3 % loss (and 2 % reordering), every operation completes and is
/// verified: all four kinds, with immediate and without, multi-MTU
/// messages among them; every byte moved is compared; Falcon retransmits
/// what the loopback lost beneath the QPs.
#[test]
fn rdma_phase_verifies_every_operation_under_loss() {
    let (ok, v) = demo_json(&[
        "--transactions",
        "200",
        "--no-nvme",
        "--loss",
        "0.03",
        "--seed",
        "13",
        "--rdma-ops",
        "1500",
    ]);
    assert!(ok, "{:?}", v["failure_reasons"]);
    assert_eq!(v["ok"], true);
    assert!(v["nvme"].is_null());
    let r = &v["rdma"];
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(u(r, "operations"), 1500);
    let kinds = ["writes", "reads", "sends", "fetch_adds", "compare_swaps"];
    let sum: u64 = kinds.iter().map(|k| u(r, k)).sum();
    assert_eq!(sum, 1500, "{r}");
    for kind in kinds.iter().chain(&["writes_with_imm", "sends_with_imm"]) {
        assert!(u(r, kind) > 20, "{kind}: {r}");
    }
    assert!(u(r, "writes") > u(r, "writes_with_imm"), "{r}");
    assert!(u(r, "sends") > u(r, "sends_with_imm"), "{r}");
    assert!(u(r, "compare_swaps_swapped") > 0, "{r}");
    assert!(u(r, "multi_mtu") > 200, "{r}");
    assert_eq!(u(r, "verified_bytes"), u(r, "bytes"), "every byte compared");
    assert!(u(r, "bytes") > 10 << 20, "{r}");
    assert_eq!(
        (u(r, "errors"), u(r, "verify_failures"), u(r, "failures")),
        (0, 0, 0)
    );
    assert_eq!((f(r, "loss"), f(r, "reorder")), (0.03, 0.02));
    assert!(
        u(r, "frames_lost") > 0 && u(r, "frames_reordered") > 0,
        "{r}"
    );
    assert!(u(r, "retransmissions") > 0, "{r}");
    assert!(u(r, "pushes") > 0 && u(r, "pulls") > 0, "{r}");
    assert_eq!(
        (u(r, "qps"), u(r, "queue_depth"), u(r, "mtu")),
        (4, 8, 4096)
    );
    assert_eq!(r["ordering"], "strong");
    assert_eq!(
        r["sizes"],
        serde_json::json!([64, 1024, 4096, 16384, 65536, 262144])
    );
    assert!(f(r, "ops_per_sec") > 0.0 && f(r, "mib_s") > 0.0);
    let l = &r["latency_us"];
    assert!(f(l, "p50") > 0.0 && f(l, "p99") >= f(l, "p50") && f(l, "max") >= f(l, "p99"));
    for kind in ["write", "read", "send", "atomic"] {
        let l = &r["latency_by_kind_us"][kind];
        assert!(
            f(l, "average") > 0.0 && f(l, "max") >= f(l, "p50"),
            "{kind}: {r}"
        );
    }
}

/// Weak ordering on unordered connections, a smaller MTU and other sizes
/// from a file: every operation verified too.
#[test]
fn rdma_keys_of_a_file_reach_the_phase() {
    let scratch = Scratch::new("demordma", "keys");
    let path = scratch.file(
        "rdma.toml",
        "[workload]\ntransactions = 100\n[nvme]\nenabled = false\n[rdma]\noperations = 400\nqps = 2\nqueue_depth = 3\nsizes = [100, 3000, 70000]\nmtu = 1024\nordering = \"weak\"\n",
    );
    let (ok, v) = demo_json(&["--config", &path]);
    assert!(ok, "{:?}", v["failure_reasons"]);
    let r = &v["rdma"];
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!((u(r, "operations"), u(r, "qps")), (400, 2));
    assert_eq!((u(r, "queue_depth"), u(r, "mtu")), (3, 1024));
    assert_eq!(r["ordering"], "weak");
    assert_eq!(r["sizes"], serde_json::json!([100, 3000, 70000]));
    let transport = r["transport"].as_str().unwrap();
    assert!(transport.ends_with("unordered connections"), "{transport}");
    assert_eq!(u(r, "verified_bytes"), u(r, "bytes"));
    assert!(u(r, "multi_mtu") > 50, "{r}");
    // The flag overrides the file.
    let (ok, v) = demo_json(&["--config", &path, "--rdma-ops", "30"]);
    assert!(ok);
    assert_eq!(u(&v["rdma"], "operations"), 30);
}

/// The text output has the RDMA block after the NVMe block; with
/// `--no-rdma` the phase does not run and `rdma` is null.
#[test]
fn the_rdma_block_follows_the_nvme_block_and_no_rdma_skips_it() {
    let (ok, out, err) = demo(&[
        "--transactions",
        "200",
        "--nvme-commands",
        "32",
        "--rdma-ops",
        "300",
    ]);
    assert!(ok, "{err}");
    let nvme = out.find("NVMe over Falcon: ").expect("the NVMe block");
    let rdma = out.find("RDMA over Falcon: ").expect("the RDMA block");
    assert!(nvme < rdma, "{out}");
    let block = &out[rdma..];
    for line in [
        "PSP on (AES-GCM-128), Swift, ordered connections; 4 RC QPs, strong ordering, MTU 4096\n",
        "  operations    300 at QD 8 per QP: ",
        " WRITE (",
        " with immediate), ",
        " READ, ",
        " SEND (",
        " fetch-and-add, ",
        " compare-and-swap (",
        "  sizes         64 B, 1 KiB, 4 KiB, 16 KiB, 64 KiB or 256 KiB: ",
        " messages of more than one MTU\n",
        "  verified      ",
        "all verified",
        "  rate          ",
        " ops/s, ",
        " MiB/s (",
        "  latency       write  avg ",
        "  latency       read   avg ",
        "  latency       send   avg ",
        "  latency       atomic avg ",
        "  faults        1.0% loss, 2.0% reordering, 0.1% duplication: ",
        " retransmissions, ",
        "  drops         ",
    ] {
        assert!(block.contains(line), "{line:?} in {block}");
    }
    assert!(
        !block.contains("FAILED") && !out.contains("FAILURE"),
        "{out}"
    );

    let (ok, out, err) = demo(&["--transactions", "200", "--no-nvme", "--no-rdma"]);
    assert!(ok, "{err}");
    assert!(!out.contains("RDMA"), "{out}");
    let (ok, v) = demo_json(&["--transactions", "200", "--no-nvme", "--no-rdma"]);
    assert!(ok && v["rdma"].is_null(), "{v}");
    let off = Scratch::new("demordma", "off");
    let path = off.file(
        "off.toml",
        "[nvme]\nenabled = false\n[rdma]\nenabled = false\n",
    );
    let (ok, v) = demo_json(&["--config", &path, "--transactions", "100"]);
    assert!(ok && v["rdma"].is_null(), "{v}");
}

/// An operation not complete within the timeout fails the run (exit 1),
/// by QP and operation.
#[test]
fn operations_not_complete_within_the_timeout_fail_the_run() {
    // 10 µs: no 256 KiB operation completes that fast.
    let (ok, v) = demo_json(&["--timeout", "0.00001", "--no-nvme", "--rdma-ops", "50"]);
    assert!(!ok && v["ok"] == false);
    let r = &v["rdma"];
    assert_eq!(r["ok"], false, "{r}");
    let reasons: Vec<&str> = v["failure_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|r| r.starts_with("RDMA: "))
        .collect();
    assert!(!reasons.is_empty(), "{v}");
    assert!(
        reasons.iter().all(|r| r.starts_with("RDMA: QP ")
            && r.contains(" #")
            && r.ends_with(": not complete after 0.0 s")),
        "{reasons:?}"
    );
}

/// Bad values exit 2 naming the flag, or the file, line and key.
#[test]
fn bad_rdma_values_exit_2_naming_flag_or_key() {
    let (ok, _, err) = demo(&["--rdma-ops", "0"]);
    assert!(
        !ok && err.contains("--rdma-ops must be at least 1"),
        "{err}"
    );
    let scratch = Scratch::new("demordma", "bad");
    for (text, key) in [
        ("[rdma]\n\nsizes = [64, 0]\n", ":3: `rdma.sizes`: 0: "),
        (
            "[rdma]\nsizes = []\n",
            ":2: `rdma.sizes`: needs at least one size",
        ),
        ("[rdma]\nqps = 0\n", ":2: `rdma.qps`: "),
        ("[rdma]\nqueue_depth = 1000\n", ":2: `rdma.queue_depth`: "),
        ("[rdma]\nmtu = 1500\n", ":2: `rdma.mtu`: 1500: "),
        ("[rdma]\nordering = \"relaxed\"\n", ":2: `rdma.ordering`: "),
        ("[rdma]\nops = 5\n", ":2: `rdma.ops`: unknown field"),
    ] {
        let path = scratch.file("bad.toml", text);
        let o = falcon(&["demo", "--config", &path]);
        assert_eq!(o.status.code(), Some(2), "{text}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(&format!("{path}{key}")), "{text}: {err}");
    }
}
