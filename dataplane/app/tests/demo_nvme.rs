//! End-to-end tests of the NVMe phase of `falcon demo`: NVMe over Falcon
//! after the Falcon workload, run by the release binary and read back from
//! `--json` and the text output; its keys and flags.

use serde_json::Value;

mod common;
use common::demo::{demo, demo_json, f, u};
use common::{falcon, stderr, Scratch};

/// Under 3 % loss (and as much reordering), every command completes and
/// every write is read back; every byte read is compared with what was
/// written, zeroes where nothing was; Falcon retransmits what the loopback
/// lost beneath the commands.
#[test]
fn nvme_phase_verifies_every_read_under_loss() {
    let (ok, v) = demo_json(&[
        "--transactions",
        "500",
        "--loss",
        "0.03",
        "--seed",
        "11",
        "--nvme-commands",
        "400",
    ]);
    assert!(ok, "{:?}", v["failure_reasons"]);
    assert_eq!(v["ok"], true);
    let n = &v["nvme"];
    assert_eq!(n["ok"], true, "{n}");
    assert_eq!(u(n, "commands"), 400);
    assert_eq!(u(n, "reads") + u(n, "writes"), 400, "{n}");
    assert_eq!(u(n, "read_backs"), u(n, "writes"), "every write read back");
    assert!(u(n, "writes") > 60 && u(n, "fua_writes") > 0, "{n}");
    assert!(u(n, "never_written_reads") >= 10, "{n}");
    assert_eq!(u(n, "verified_bytes"), u(n, "bytes_read"), "{n}");
    assert!(u(n, "bytes_read") > u(n, "bytes_written"), "{n}");
    assert_eq!(
        (u(n, "errors"), u(n, "verify_failures"), u(n, "failures")),
        (0, 0, 0)
    );
    // `[faults]` as the Falcon phase: --loss sets the loss, reordering stays 2 %.
    assert_eq!((f(n, "loss"), f(n, "reorder")), (0.03, 0.02));
    assert!(
        u(n, "frames_lost") > 0 && u(n, "frames_reordered") > 0,
        "{n}"
    );
    assert!(u(n, "retransmissions") > 0, "{n}");
    assert!(u(n, "ncmds") >= 400, "{n}");
    assert_eq!(
        n["sizes"],
        serde_json::json!([4096, 16384, 65536, 262144, 1048576])
    );
    assert_eq!(u(n, "queue_depth"), 16);
    let l = &n["latency_us"];
    assert!(f(l, "p50") > 0.0 && f(l, "p99") >= f(l, "p50") && f(l, "max") >= f(l, "p99"));
    assert!(f(n, "iops") > 0.0 && f(n, "mib_s") > 0.0);
}

/// The text output has the NVMe block after the Falcon figures; with
/// `--no-nvme` the phase does not run and `nvme` is null.
#[test]
fn the_nvme_block_follows_the_falcon_figures_and_no_nvme_skips_it() {
    let (ok, out, err) = demo(&["--transactions", "300", "--nvme-commands", "64"]);
    assert!(ok, "{err}");
    let falcon = out.find("  congestion    ").expect("the Falcon figures");
    let nvme = out.find("NVMe over Falcon: ").expect("the NVMe block");
    assert!(falcon < nvme, "{out}");
    let block = &out[nvme..];
    for line in [
        "  commands      64 of 4 KiB, 16 KiB, 64 KiB, 256 KiB or 1 MiB at QD 16: ",
        "  verified      ",
        "all verified",
        "  rate          ",
        " IOPS, ",
        " MiB/s ",
        "  latency       avg ",
        "  faults        1.0% loss, 2.0% reordering: ",
        " retransmissions, ",
        " RNR NACKs",
    ] {
        assert!(block.contains(line), "{line:?} in {block}");
    }
    assert!(
        !block.contains("FAILED") && !out.contains("FAILURE"),
        "{out}"
    );

    let (ok, out, err) = demo(&["--transactions", "300", "--no-nvme"]);
    assert!(ok, "{err}");
    assert!(!out.contains("NVMe"), "{out}");
    let (ok, v) = demo_json(&["--transactions", "300", "--no-nvme"]);
    assert!(ok && v["nvme"].is_null(), "{v}");
}

/// The `[nvme]` keys of a file reach the phase.
#[test]
fn nvme_keys_of_a_file_reach_the_phase() {
    let scratch = Scratch::new("demonvme", "keys");
    let path = scratch.file(
        "nvme.toml",
        "[workload]\ntransactions = 200\n[nvme]\ncommands = 60\nqueue_depth = 4\nsizes = [4608, 8192]\n",
    );
    let (ok, v) = demo_json(&["--config", &path]);
    assert!(ok, "{:?}", v["failure_reasons"]);
    let n = &v["nvme"];
    assert_eq!((u(n, "commands"), u(n, "queue_depth")), (60, 4), "{n}");
    assert_eq!(n["sizes"], serde_json::json!([4608, 8192]));
    // The flag overrides the file; `enabled = false` skips the phase.
    let (ok, v) = demo_json(&["--config", &path, "--nvme-commands", "20"]);
    assert!(ok);
    assert_eq!(u(&v["nvme"], "commands"), 20);
    // The engines come from the same file: PSP off for both phases.
    let clear = scratch.file(
        "clear.toml",
        "[workload]\ntransactions = 100\n[psp]\nenabled = false\n[nvme]\ncommands = 20\n",
    );
    let (ok, v) = demo_json(&["--config", &clear]);
    assert!(ok, "{:?}", v["failure_reasons"]);
    let transport = v["nvme"]["transport"].as_str().unwrap();
    assert!(transport.starts_with("PSP off"), "{transport}");
    let off = scratch.file("off.toml", "[nvme]\nenabled = false\n");
    let (ok, v) = demo_json(&["--config", &off, "--transactions", "100"]);
    assert!(ok && v["nvme"].is_null(), "{v}");
}

/// A command that does not complete within the iCMD timeout fails the run
/// (exit 1), each by name, with its status.
#[test]
fn commands_failed_by_the_timeout_fail_the_run() {
    // 10 µs: the Falcon phase gives up at once too, and every NVMe command
    // is failed by the initiator's timeout before its responses arrive.
    let (ok, v) = demo_json(&["--timeout", "0.00001", "--nvme-commands", "20"]);
    assert!(!ok && v["ok"] == false);
    let n = &v["nvme"];
    assert_eq!(n["ok"], false);
    assert!(u(n, "errors") > 0 && u(n, "icmd_timeouts") > 0, "{n}");
    assert!(u(&n["errors_by_status"], "aborted_by_host") > 0, "{n}");
    let reasons: Vec<&str> = v["failure_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|r| r.starts_with("NVMe: "))
        .collect();
    assert!(!reasons.is_empty(), "{v}");
    assert!(
        reasons
            .iter()
            .all(|r| r.contains(" at LBA ")
                && r.ends_with(": status command aborted by host (0x371)")),
        "{reasons:?}"
    );
}

/// Bad values exit 2 naming the flag, or the file, line and key.
#[test]
fn bad_nvme_values_exit_2_naming_flag_or_key() {
    let (ok, _, err) = demo(&["--nvme-commands", "0"]);
    assert!(
        !ok && err.contains("--nvme-commands must be at least 1"),
        "{err}"
    );
    let scratch = Scratch::new("demonvme", "bad");
    for (text, key) in [
        (
            "[nvme]\n\nsizes = [4096, 1000]\n",
            ":3: `nvme.sizes`: 1000: ",
        ),
        ("[nvme]\nsizes = [2097152]\n", ":2: `nvme.sizes`: 2097152: "),
        ("[nvme]\nqueue_depth = 0\n", ":2: `nvme.queue_depth`: "),
        (
            "[nvme]\nsizes = []\n",
            ":2: `nvme.sizes`: needs at least one size",
        ),
        ("[nvme]\nfua = 0.5\n", ":2: `nvme.fua`: unknown field"),
    ] {
        let path = scratch.file("bad.toml", text);
        let o = falcon(&["demo", "--config", &path]);
        assert_eq!(o.status.code(), Some(2), "{text}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(&format!("{path}{key}")), "{text}: {err}");
    }
}
