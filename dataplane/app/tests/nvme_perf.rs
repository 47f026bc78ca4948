//! `falcon nvme-perf` end to end: short verified runs over a lossy
//! in-process loopback, their JSON, and the exit status on bad options.

mod common;

use common::falcon;
use serde_json::Value;

/// Runs `falcon nvme-perf --json --quiet ARGS…`; the exit status and the
/// summary.
fn perf(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["nvme-perf", "--json", "--quiet"];
    all.extend_from_slice(args);
    let out = falcon(&all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {stdout:?}, stderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), summary)
}

fn number(summary: &Value, key: &str) -> f64 {
    summary[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {summary}"))
}

/// A verified randrw run at `io_size` with 1 % loss and reordering: zero
/// errors, zero verify failures, and figures that add up.
fn verified_randrw(io_size: &str, ios: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "-q", "32", "-o", io_size, "-w", "randrw", "--ios", ios, "--verify", "--loss", "1",
    ];
    args.extend_from_slice(extra);
    let (code, s) = perf(&args);
    assert_eq!(code, 0, "{s}");
    assert_eq!(s["ok"], true);
    assert_eq!(number(&s, "errors"), 0.0, "{s}");
    assert_eq!(number(&s, "verify_failures"), 0.0, "{s}");
    let ios: f64 = ios.parse().unwrap();
    assert_eq!(number(&s, "ios"), ios);
    assert_eq!(number(&s, "reads") + number(&s, "writes"), ios);
    // -M 50: both kinds, neither all (binomial; 10 σ off 50 % at most).
    assert!(
        number(&s, "reads") > ios * 0.3 && number(&s, "writes") > ios * 0.3,
        "{s}"
    );
    let duration = number(&s, "duration_s");
    let iops = number(&s, "iops");
    assert!(duration > 0.0 && (iops * duration - ios).abs() < 1.0, "{s}");
    let bytes = ios * number(&s, "io_size_bytes");
    assert!((number(&s, "mib_s") * duration * 1048576.0 - bytes).abs() < 1024.0);
    let l = &s["latency_us"];
    let at = |k: &str| l[k].as_f64().unwrap();
    assert!(at("min") > 0.0);
    assert!(at("min") <= at("p50") && at("p50") <= at("p99") && at("p99") <= at("p99_9"));
    assert!(
        at("p99_9") <= at("p99_99") && at("p99_99") <= at("max") * 1.001,
        "{l}"
    );
    assert!(at("min") <= at("average") && at("average") <= at("max"));
    // The faults happened and Falcon recovered from them.
    let f = &s["falcon"];
    assert!(f["frames_lost"].as_u64().unwrap() > 0, "{f}");
    assert!(f["retransmissions"].as_u64().unwrap() > 0, "{f}");
    assert!(f["ncmds"].as_u64().unwrap() >= ios as u64);
    s
}

#[test]
fn randrw_4k_verifies_over_1_percent_loss() {
    let s = verified_randrw("4k", "20000", &[]);
    assert_eq!(s["io_size_bytes"], 4096);
    assert_eq!(s["falcon"]["icmd_timeouts"], 0);
}

#[test]
fn randrw_128k_with_metadata_verifies_over_1_percent_loss() {
    let s = verified_randrw("128k", "1500", &["--metadata", "8"]);
    // 32 nCMDs an I/O at least.
    assert!(s["falcon"]["ncmds"].as_u64().unwrap() >= 1500 * 32);
    let s = verified_randrw("128k", "600", &["--lba-size", "4096", "--metadata", "16"]);
    assert_eq!(s["lba_size_bytes"], 4096);
}

#[test]
fn bad_options_are_usage_errors() {
    for args in [
        &["nvme-perf", "-o", "2k"][..],
        &["nvme-perf", "-o", "2M"],
        &["nvme-perf", "--lba-size", "1024"],
        &["nvme-perf", "--metadata", "4"],
        &["nvme-perf", "-r", "trtype:UDP traddr:10.0.0.2"],
    ] {
        let out = falcon(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
}
