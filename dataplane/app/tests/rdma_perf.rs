//! `falcon rdma-perf` end to end, in process: every test with `--json`
//! and a small `-n`, verified runs over a lossy loopback, `-a`, `-q 4`,
//! the text output's perftest headings, and the exit status on bad
//! options.

mod common;

use common::falcon;
use serde_json::Value;

/// Runs `falcon rdma-perf ARGS… --json`; the exit status and the report.
fn perf(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["rdma-perf"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = falcon(&all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {stdout:?}, stderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn number(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// A run that succeeded: exit 0, no errors, one row per size in `sizes`
/// with `iterations` each.
fn ok_rows(args: &[&str], sizes: &[f64], iterations: f64) -> Value {
    let (code, r) = perf(args);
    assert_eq!(code, 0, "{args:?}: {r}");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["errors"].as_array().map(Vec::len), Some(0), "{r}");
    let latency = r["lat"].as_array().is_some_and(|l| !l.is_empty());
    let rows = if latency { &r["lat"] } else { &r["bw"] };
    let rows = rows.as_array().expect("rows");
    assert_eq!(rows.len(), sizes.len(), "{r}");
    for (row, &size) in rows.iter().zip(sizes) {
        assert_eq!(number(row, "bytes"), size, "{row}");
        assert_eq!(number(row, "iterations"), iterations, "{row}");
        if latency {
            let t = |k: &str| number(row, k);
            assert!(t("t_min_us") > 0.0, "{row}");
            assert!(t("t_min_us") <= t("t_typical_us"), "{row}");
            assert!(t("t_typical_us") <= t("t_max_us"), "{row}");
            assert!(t("t_min_us") <= t("t_avg_us") && t("t_avg_us") <= t("t_max_us"));
            assert!(t("p99_us") <= t("p999_us") && t("p999_us") <= t("t_max_us"));
            assert!(t("t_stdev_us") >= 0.0);
        } else {
            let b = |k: &str| number(row, k);
            assert!(b("bw_average_mib_s") > 0.0, "{row}");
            assert!(b("bw_peak_mib_s") >= b("bw_average_mib_s"), "{row}");
            assert!(b("msg_rate_mpps") > 0.0, "{row}");
            // BW = bytes × iterations / time.
            let bytes = size * iterations;
            let mib = bytes / b("seconds") / 1048576.0;
            assert!((mib - b("bw_average_mib_s")).abs() <= mib * 1e-6, "{row}");
            assert!(
                (b("bw_average_gbps") - b("bw_average_mib_s") * 1048576.0 / 1.25e8).abs() < 1e-6
            );
        }
    }
    r
}

#[test]
fn every_test_reports_its_figures() {
    for (test, size) in [
        ("write_bw", 65536.0),
        ("read_bw", 65536.0),
        ("send_bw", 65536.0),
        ("atomic_bw", 8.0),
        ("write_lat", 2.0),
        ("read_lat", 2.0),
        ("send_lat", 2.0),
        ("atomic_lat", 8.0),
    ] {
        let r = ok_rows(&[test, "-n", "50"], &[size], 50.0);
        assert_eq!(r["test"], test);
        assert_eq!(r["connection_type"], "RC");
        assert_eq!(number(&r, "mtu_bytes"), 4096.0);
        assert_eq!(r["local"].as_array().map(Vec::len), Some(1), "{r}");
        assert_eq!(r["remote"].as_array().map(Vec::len), Some(1), "{r}");
    }
}

/// Every byte (the atomic counter) checked after a run that loses and
/// reorders 1 % of the frames each way.
#[test]
fn verify_under_loss() {
    for (test, size) in [
        ("write_bw", "20000"),
        ("read_bw", "20000"),
        ("send_bw", "20000"),
        ("atomic_bw", "8"),
    ] {
        let r = ok_rows(
            &[
                test, "-n", "300", "-s", size, "--verify", "--loss", "1", "-q", "2",
            ],
            &[size.parse().unwrap()],
            600.0,
        );
        assert_eq!(r["bw"][0]["verified"], true, "{r}");
        assert!(number(&r["falcon"], "frames_lost") > 0.0, "{r}");
    }
}

#[test]
fn latency_tests_verify() {
    for test in ["write_lat", "read_lat", "send_lat", "atomic_lat"] {
        let r = ok_rows(
            &[test, "-n", "100", "--verify", "-s", "3000"],
            &[if test == "atomic_lat" { 8.0 } else { 3000.0 }],
            100.0,
        );
        assert_eq!(r["lat"][0]["verified"], true, "{r}");
    }
}

#[test]
fn all_sizes() {
    let sizes: Vec<f64> = (1..=10).map(|s| f64::from(1u32 << s)).collect();
    ok_rows(
        &[
            "write_bw",
            "-a",
            "--max-size",
            "1024",
            "-n",
            "20",
            "--verify",
        ],
        &sizes,
        20.0,
    );
    ok_rows(
        &["read_lat", "-a", "--max-size", "1024", "-n", "20"],
        &sizes,
        20.0,
    );
}

#[test]
fn four_qps_each_on_its_connection() {
    let r = ok_rows(
        &["write_bw", "-q", "4", "-n", "100", "-s", "4096", "--verify"],
        &[4096.0],
        400.0,
    );
    let cids: Vec<_> = r["local"]
        .as_array()
        .expect("local")
        .iter()
        .map(|e| number(e, "cid"))
        .collect();
    assert_eq!(cids.len(), 4);
    let mut unique = cids.clone();
    unique.dedup();
    assert_eq!(unique.len(), 4, "{cids:?}");
}

#[test]
fn ud_sends_and_orderings() {
    let r = ok_rows(
        &["send_bw", "-c", "UD", "-s", "1024", "-n", "200", "--verify"],
        &[1024.0],
        200.0,
    );
    assert_eq!(r["connection_type"], "UD");
    for ordering in ["weak", "unordered"] {
        let r = ok_rows(
            &[
                "write_bw",
                "--ordering",
                ordering,
                "-s",
                "8192",
                "-n",
                "200",
                "--verify",
                "--loss",
                "1",
            ],
            &[8192.0],
            200.0,
        );
        assert_eq!(r["ordering"], ordering);
    }
}

/// A bad option exits 2 and names the flag.
#[test]
fn bad_options_exit_2_naming_the_flag() {
    for (args, flag) in [
        (&["write_bw", "-m", "300"][..], "-m"),
        (&["write_bw", "-c", "UD"][..], "-c UD"),
        (&["send_bw", "-c", "UD", "-s", "8192"][..], "-s"),
        (&["write_lat", "-q", "2"][..], "-q"),
        (&["write_bw", "--loss", "101"][..], "--loss"),
        (&["write_bw", "--bogus"][..], "--bogus"),
        (&["write_bw", "-n", "x"][..], "--iters"),
        (&["fly_bw"][..], "fly_bw"),
        (&["write_bw", "--output=latency"][..], "--output"),
        (&["read_lat", "--output=bandwidth"][..], "--output"),
    ] {
        let mut all = vec!["rdma-perf"];
        all.extend_from_slice(args);
        let out = falcon(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
}

/// The text output carries perftest's banner, address lines and column
/// headings exactly (ulp.md §4.1).
#[test]
fn text_output_has_perftest_headings() {
    let out = falcon(&["rdma-perf", "write_bw", "-n", "20"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "RDMA_Write BW Test",
        " Number of qps   : 1",
        " Connection type : RC",
        " TX depth        : 128",
        " Mtu             : 4096[B]",
        " local address: LID 0000 QPN ",
        " remote address: LID 0000 QPN ",
        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]",
    ] {
        assert!(text.contains(line), "{line:?} missing in\n{text}");
    }
    assert!(text.contains(" PSN ") && text.contains(" RKey ") && text.contains(" VAddr "));
    let out = falcon(&["rdma-perf", "read_bw", "-n", "20", "--report_gbits"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"),
        "{text}"
    );
    let out = falcon(&["rdma-perf", "read_lat", "-n", "20"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"),
        "{text}"
    );
    let out = falcon(&["rdma-perf", "write_bw", "-n", "20", "--output=bandwidth"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let x: f64 = text
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert!(x > 0.0);
}
