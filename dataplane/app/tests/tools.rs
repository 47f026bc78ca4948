//! End-to-end tests of the offline tools: the `falcon` binary on real pcap
//! files, compared byte for byte with the google/psp reference outputs
//! (spec/psp.md §6.3, Appendix A), plus the error paths a user meets.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use falcon::pcapio::{self, Frame};
use serde_json::Value;

mod common;
use common::{falcon, falcon_in, repo_root, stderr, Scratch, BIN};

/// `falcon psp encrypt|decrypt -c CFG -i IN -o OUT EXTRA...`.
fn psp_tool(action: &str, cfg: &str, input: &str, output: &str, extra: &[&str]) -> Output {
    let mut args = vec!["psp", action, "-c", cfg, "-i", input, "-o", output];
    args.extend_from_slice(extra);
    falcon(&args)
}

fn config(name: &str) -> String {
    repo_root()
        .join("configs/psp")
        .join(name)
        .display()
        .to_string()
}

/// The reference cleartext frame (spec/psp.md §6.3 recipe, = google/psp
/// `pcap/v4_cleartext.pcap`): IPv4 10.0.0.1 → 10.0.0.2, UDP 11111 → 22222,
/// 1392 payload bytes i mod 256.
fn reference_cleartext() -> Vec<u8> {
    let mut f = hex::decode(
        "008899aabb00002233445500080045000".to_owned()
            + "58c00004000401121"
            + "5f0a0000010a000002"
            + "2b6756ce0578893b",
    )
    .unwrap();
    f.extend((0..1392u32).map(|i| i as u8));
    assert_eq!(f.len(), 1434);
    f
}

fn appendix_a(name: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(repo_root().join("psp/testdata").join(name)).unwrap();
    hex::decode(text.split_whitespace().collect::<String>()).unwrap()
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = pcapio::Writer::create(path).unwrap();
    for (i, data) in frames.iter().enumerate() {
        w.write(&Frame {
            timestamp: Duration::from_micros(1_000_000 + i as u64),
            data: data.clone(),
        })
        .unwrap();
    }
    w.finish().unwrap();
}

fn read_frames(path: &Path) -> Vec<Vec<u8>> {
    pcapio::read_all(path)
        .unwrap()
        .into_iter()
        .map(|f| f.data)
        .collect()
}

#[test]
fn encrypt_matches_reference_frames_and_decrypt_restores_cleartext() {
    let s = Scratch::new("tools", "ref");
    let clear = s.path("cleartext.pcap");
    write_pcap(&clear, &[reference_cleartext()]);
    for (cfg, expect) in [
        (
            "encrypt_transport_crypt_off_128.cfg",
            "v4_transport_co1_v0.hex",
        ),
        (
            "encrypt_transport_crypt_off_256.cfg",
            "v4_transport_co1_v1.hex",
        ),
        (
            "encrypt_transport_crypt_off_128_vc.cfg",
            "v4_transport_co3_v0_vc.hex",
        ),
    ] {
        for backend in ["ring", "rustcrypto"] {
            let enc = s.path("enc.pcap");
            let o = falcon(&[
                "psp",
                "encrypt",
                "-c",
                &config(cfg),
                "-i",
                clear.to_str().unwrap(),
                "-o",
                enc.to_str().unwrap(),
                "--backend",
                backend,
            ]);
            assert!(o.status.success(), "{cfg}: {}", stderr(&o));
            assert_eq!(
                read_frames(&enc),
                vec![appendix_a(expect)],
                "{cfg} with {backend}"
            );

            let dec = s.path("dec.pcap");
            let o = falcon(&[
                "psp",
                "decrypt",
                "-c",
                &config("decrypt.cfg"),
                "-i",
                enc.to_str().unwrap(),
                "-o",
                dec.to_str().unwrap(),
                "--backend",
                backend,
            ]);
            assert!(o.status.success(), "{cfg}: {}", stderr(&o));
            assert_eq!(
                read_frames(&dec),
                vec![reference_cleartext()],
                "{cfg} round trip"
            );
        }
    }
}

#[test]
fn tunnel_mode_round_trips_and_counts_skips() {
    let s = Scratch::new("tools", "tunnel");
    let clear = s.path("cleartext.pcap");
    let not_ip = {
        let mut f = vec![0u8; 60];
        f[12] = 0x08;
        f[13] = 0x06; // ARP
        f
    };
    write_pcap(
        &clear,
        &[reference_cleartext(), not_ip, reference_cleartext()],
    );
    let enc = s.path("enc.pcap");
    let o = psp_tool(
        "encrypt",
        &config("encrypt_tunnel_crypt_off_128.cfg"),
        clear.to_str().unwrap(),
        enc.to_str().unwrap(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("encrypted 2 packets") && stdout.contains("skipped 1 packets"),
        "{stdout}"
    );
    assert!(stdout.contains("1 not_ip"), "{stdout}");
    let frames = read_frames(&enc);
    assert_eq!(frames.len(), 2);
    // Outer IPv4 (20) + UDP (8) + PSP (16) + ICV (16) around the inner packet.
    assert_eq!(frames[0].len(), 1434 + 20 + 40);
    // IVs count encrypted packets from 1.
    assert_eq!(
        &frames[1][14 + 20 + 8 + 8..14 + 20 + 8 + 16],
        &2u64.to_be_bytes()
    );

    let dec = s.path("dec.pcap");
    let o = psp_tool(
        "decrypt",
        &config("decrypt.cfg"),
        enc.to_str().unwrap(),
        dec.to_str().unwrap(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        read_frames(&dec),
        vec![reference_cleartext(), reference_cleartext()]
    );
}

#[test]
fn forced_error_fails_authentication_with_exit_1() {
    let s = Scratch::new("tools", "err");
    let clear = s.path("cleartext.pcap");
    write_pcap(&clear, &[reference_cleartext()]);
    let enc = s.path("enc.pcap");
    let o = psp_tool(
        "encrypt",
        &config("encrypt_transport_crypt_off_128.cfg"),
        clear.to_str().unwrap(),
        enc.to_str().unwrap(),
        &["-e"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let dec = s.path("dec.pcap");
    let o = psp_tool(
        "decrypt",
        &config("decrypt.cfg"),
        enc.to_str().unwrap(),
        dec.to_str().unwrap(),
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("auth_failed"), "{}", stderr(&o));
    assert!(
        read_frames(&dec).is_empty(),
        "nothing unauthenticated is written"
    );
}

#[test]
fn bad_inputs_name_the_file_and_key_and_exit_2() {
    let s = Scratch::new("tools", "bad");
    let cfg = s.path("bad.cfg");
    let text = std::fs::read_to_string(config("encrypt_transport_crypt_off_128.cfg")).unwrap();
    std::fs::write(&cfg, text.replace("\ntransport\n", "\ntransprot\n")).unwrap();
    let clear = s.path("cleartext.pcap");
    write_pcap(&clear, &[reference_cleartext()]);
    let enc = s.path("enc.pcap");
    let o = psp_tool(
        "encrypt",
        cfg.to_str().unwrap(),
        clear.to_str().unwrap(),
        enc.to_str().unwrap(),
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("bad.cfg:") && err.contains("`encap mode`") && err.contains("transprot"),
        "{err}"
    );

    let garbage = s.path("garbage.pcap");
    std::fs::write(&garbage, b"definitely not a capture").unwrap();
    let o = falcon(&["pcap", "decode", garbage.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("garbage.pcap"), "{}", stderr(&o));

    let o = falcon(&["pcap", "decode", s.path("missing.pcap").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing.pcap"));

    let o = psp_tool(
        "decrypt",
        s.path("nokeys.cfg").to_str().unwrap(),
        "x",
        "y",
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nokeys.cfg"));
}

fn decode_json(file: &Path, keys: bool) -> Vec<Value> {
    let mut args = vec!["pcap", "decode", file.to_str().unwrap(), "--json"];
    let keys_path = config("decrypt.cfg");
    if keys {
        args.extend(["--keys", &keys_path]);
    }
    let o = falcon(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn decode_shows_every_falcon_type_with_keys_and_the_clear_part_without() {
    let s = Scratch::new("tools", "decode");
    let sample = s.path("sample.pcap");
    let o = falcon(&["pcap", "sample", "-o", sample.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));

    let packets = decode_json(&sample, true);
    let types: Vec<&str> = packets
        .iter()
        .map(|p| p["falcon"]["packet_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "Pull Request",
            "Push Data",
            "Pull Data",
            "Resync",
            "BACK",
            "EACK",
            "NACK"
        ]
    );
    for p in &packets {
        assert_eq!(p["authenticated"], true);
        assert_eq!(p["psp"]["spi"], "0x9a345678");
        assert_eq!(p["falcon"]["connection_id"], 0x1234);
        assert!(p.get("error").is_none(), "{p}");
    }
    let push = &packets[1]["falcon"];
    assert_eq!(push["psn"], 0xFFFF_FFF0u32);
    assert_eq!(push["ack_request"], true);
    assert_eq!(push["request_length"], 64);
    assert_eq!(
        packets[3]["falcon"]["resync_code"],
        "TargetUlpCompletionInError"
    );
    let eack = &packets[5]["falcon"];
    assert_eq!(eack["data_rx_bitmap"], format!("{:032x}", 0b1111_0001));
    assert_eq!(eack["cc_info"]["own_data"], true);
    assert_eq!(eack["cc_info"]["ecn_count"], 42);
    let nack = &packets[6]["falcon"];
    assert_eq!(nack["nack_code"], "ReceiverNotReady");
    assert_eq!(nack["window"], "Data");
    assert_eq!(nack["ulp_nack_code"], 32);
    assert_eq!(packets[6]["ip"]["flow_label"], 0xBEEF);

    let clear = decode_json(&sample, false);
    assert_eq!(clear.len(), 7);
    for p in &clear {
        assert!(p.get("falcon").is_none());
        assert_eq!(p["falcon_clear"]["connection_id"], 0x1234);
        assert_eq!(p["falcon_clear"]["version"], 1);
    }
}

/// `falcon pcap sample` needs no file of the repository: run from a scratch
/// directory, it writes a capture that the PSP specification's example keys
/// (configs/psp/decrypt.cfg) authenticate and decrypt; `--keys FILE` seals
/// with other keys, which those then refuse.
#[test]
fn sample_runs_from_any_directory_with_the_built_in_example_keys() {
    let s = Scratch::new("tools", "anydir");
    let dir = s.path("");
    let o = falcon_in(&dir, &["pcap", "sample", "-o", "here.pcap"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sample = s.path("here.pcap");
    let packets = decode_json(&sample, true);
    assert_eq!(packets.len(), 7);
    for p in &packets {
        assert_eq!(p["authenticated"], true, "{p}");
        assert!(p["falcon"]["packet_type"].is_string(), "{p}");
    }
    // The same capture as from the repository root, byte for byte: the
    // built-in keys are the file's.
    let from_root = s.path("root.pcap");
    let o = falcon(&[
        "pcap",
        "sample",
        "-o",
        from_root.to_str().unwrap(),
        "--keys",
        &config("decrypt.cfg"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(read_frames(&sample), read_frames(&from_root));

    s.file(
        "other.cfg",
        &format!("{}\n{}\n", "11 ".repeat(32), "22 ".repeat(32)),
    );
    let o = falcon_in(
        &dir,
        &["pcap", "sample", "-o", "other.pcap", "--keys", "other.cfg"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for p in decode_json(&s.path("other.pcap"), true) {
        assert_eq!(p["drop_reason"], "psp_auth_failed", "{p}");
    }
    let o = falcon_in(&dir, &["pcap", "sample", "--keys", "missing.cfg"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("missing.cfg"), "{}", stderr(&o));
}

#[test]
fn decode_counts_tampered_and_malformed_packets_and_goes_on() {
    let s = Scratch::new("tools", "tamper");
    let sample = s.path("sample.pcap");
    assert!(falcon(&["pcap", "sample", "-o", sample.to_str().unwrap()])
        .status
        .success());
    let mut frames = read_frames(&sample);
    let last = frames[1].len() - 20;
    frames[1][last] ^= 0x01; // a ciphertext bit of the push data
    frames[2].truncate(30); // inside the IPv4 header
    let tampered = s.path("tampered.pcap");
    write_pcap(&tampered, &frames);

    let packets = decode_json(&tampered, true);
    assert_eq!(packets.len(), 7);
    assert_eq!(packets[1]["drop_reason"], "psp_auth_failed");
    assert!(packets[1].get("falcon").is_none());
    assert_eq!(packets[2]["drop_reason"], "malformed_ip");
    assert_eq!(packets[3]["falcon"]["packet_type"], "Resync");

    let o = falcon(&[
        "pcap",
        "decode",
        tampered.to_str().unwrap(),
        "--keys",
        &config("decrypt.cfg"),
    ]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(
            "7 packets, 5 Falcon, 5 decrypted, 2 not decoded (1 malformed_ip, 1 psp_auth_failed)"
        ),
        "{text}"
    );
}

#[test]
fn a_reader_that_stops_early_is_no_failure() {
    // `falcon bench psp | head -1`: the pipe closed before the report.
    let mut child = std::process::Command::new(BIN)
        .args(["bench", "psp", "--size", "64", "--seconds", "0.2"])
        .current_dir(repo_root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run falcon");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait for falcon");
    assert_eq!(o.status.code(), Some(141), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "no panic message: {}", stderr(&o));
}

#[test]
fn bench_psp_reports_the_contract_keys() {
    let v = falcon_json(&[
        "bench",
        "psp",
        "--size",
        "64",
        "--seconds",
        "0.05",
        "--json",
    ]);
    for key in [
        "psp_seal_gbps",
        "psp_open_gbps",
        "raw_seal_gbps",
        "raw_open_gbps",
        "ratio",
    ] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    assert_eq!(v["size_bytes"], 64);
    assert!((v["ratio_bar"].as_f64().unwrap() - 0.7).abs() < 1e-9);
    // The AES-GCM code the figures were measured on, as the backend picks it.
    assert_eq!(v["backend"], "ring", "{v}");
    assert_eq!(v["aes_gcm_path"], psp::Backend::Ring.aes_gcm_path(), "{v}");
}

#[test]
fn demo_verifies_every_transaction_and_reports_json() {
    let v = falcon_json(&[
        "demo",
        "--transactions",
        "300",
        "--loss",
        "0.02",
        "--seed",
        "3",
        "--json",
    ]);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["transactions"], 300);
    assert_eq!(v["failures"], 0);
    for key in [
        "transactions_per_sec",
        "goodput_gbps",
        "latency_p50_us",
        "latency_p99_us",
        "rtt_mean_us",
    ] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    assert!(
        v["retransmissions"].as_u64().unwrap() > 0,
        "2% loss must show retransmissions: {v}"
    );
}

/// Runs `falcon ARGS…`, checks it succeeded and returns the JSON object it
/// printed.
fn falcon_json(args: &[&str]) -> Value {
    let o = falcon(args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `falcon bench core --profile PROFILE --transactions 3000 --json`, checked
/// for success and for naming its profile.
fn profile_3000(profile: &str) -> Value {
    profile_run(profile, "3000", &[])
}

/// `falcon bench core --profile PROFILE --transactions N --json EXTRA…`,
/// checked the same way.
fn profile_run(profile: &str, transactions: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "bench",
        "core",
        "--profile",
        profile,
        "--transactions",
        transactions,
        "--json",
    ];
    args.extend_from_slice(extra);
    let v = falcon_json(&args);
    assert_eq!(v["profile"], profile, "{v}");
    assert!(v["mops"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["build"], BUILD, "{v}");
    v
}

/// The `build` that `falcon bench core` reports for a binary built in this
/// test's profile without `scripts/build-pgo.sh`.
const BUILD: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

#[test]
fn bench_core_profile_runs_exactly_the_transactions_asked() {
    for profile in ["push64", "push64-psp", "loop4k-psp", "loop4k"] {
        let v = profile_3000(profile);
        // At least the number asked; the ACK that reaches it may complete
        // a few more (one burst at most).
        let n = v["transactions"].as_u64().unwrap();
        assert!((3000..3000 + 64).contains(&n), "{v}");
        assert_eq!(v["drops"].as_u64(), Some(0), "{v}");
    }
    // The crypto-only runners alone: whole batches of 64 pairs.
    for profile in ["crypto64", "crypto4k", "floor4k"] {
        let v = profile_3000(profile);
        assert_eq!(v["transactions"].as_u64(), Some(3008), "{v}");
    }
    let o = falcon(&[
        "bench",
        "core",
        "--profile",
        "crypto4k",
        "--transactions",
        "64",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("crypto4k: 64 seal + open pairs in "),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = falcon(&["bench", "core", "--transactions", "10"]);
    assert_eq!(o.status.code(), Some(2), "--transactions needs --profile");
}

#[test]
fn bench_core_loops_take_their_shape_from_the_command_line() {
    let run = |profile: &str, transactions: &str| {
        let shape = [
            "--depth",
            "8",
            "--burst",
            "4",
            "--tx-burst",
            "3",
            "--cache-batch",
            "2",
        ];
        let v = profile_run(profile, transactions, &shape);
        assert_eq!(
            v["shape"],
            serde_json::json!({"depth": 8, "burst": 4, "tx_burst": 3, "cache_batch": 2}),
            "{v}"
        );
        v
    };
    // Eight outstanding: the last ACK completes at most eight more.
    let v = run("loop4k-psp", "3000");
    let n = v["transactions"].as_u64().unwrap();
    assert!((3000..3008).contains(&n), "{v}");
    assert_eq!(v["drops"].as_u64(), Some(0), "{v}");
    // The floor copies into as many frames as the loops keep outstanding:
    // whole rounds of eight.
    let v = run("floor4k", "3001");
    assert_eq!(v["transactions"].as_u64(), Some(3008), "{v}");
    for flag in ["--depth", "--burst", "--tx-burst", "--cache-batch"] {
        for value in ["0", "1025"] {
            let o = falcon(&["bench", "core", "--seconds", "0.1", flag, value]);
            assert_eq!(o.status.code(), Some(2), "{flag} {value}");
            assert!(stderr(&o).contains(flag), "{flag}: {}", stderr(&o));
        }
    }
}

#[test]
fn bench_core_reports_engine_figures_against_crypto() {
    let v = falcon_json(&["bench", "core", "--seconds", "0.35", "--json"]);
    for key in [
        "delivery_mpps",
        "push64_mops",
        "push64_psp_mops",
        "loop4k_psp_gbps",
        "crypto4k_gbps",
        "crypto64_mops",
        "loop4k_ratio",
        "push64_ratio",
        "copy_crypto4k_gbps",
        "floor4k_ratio",
        "loop4k_gbps",
        "push64_budget_ns",
        "push64_plain_ns",
        "loop4k_budget_ns",
        "loop4k_plain_ns",
        "pacing_wheel_ns_per_op",
        "pacing_stamp_ns_per_op",
        "push64_uncapped_mops",
        "push64_capped_mops",
        "rate_cap_cost_ratio",
        "rate_cap_bps",
    ] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    // Both bars are ratios against crypto: the AES-GCM code it ran on.
    assert_eq!(v["aes_gcm_path"], psp::Backend::Ring.aes_gcm_path(), "{v}");
    // And the build the engines ran in (this test's own profile; the
    // profile-guided build is checked by scripts/test.sh).
    assert_eq!(v["build"], BUILD, "{v}");
    // How the loops ran: the defaults.
    assert_eq!(
        v["shape"],
        serde_json::json!({"depth": 64, "burst": 32, "tx_burst": 8, "cache_batch": 32}),
        "{v}"
    );
    // Each engine loop's turns, ACKs and Swift view: measured, not absent.
    for name in ["push64", "push64_psp", "loop4k", "loop4k_psp"] {
        let l = &v["loops"][name];
        let g = |key: &str| {
            l[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}.{key}: {v}"))
        };
        assert!(g("turns_per_transaction") > 0.0, "{name}: {v}");
        assert!(g("acks_per_transaction") > 0.0, "{name}: {v}");
        assert!(g("rtt_mean_us") > 0.0, "{name}: {v}");
        let fcwnd = &l["fcwnd_range"];
        let (lo, hi) = (fcwnd[0].as_f64().unwrap(), fcwnd[1].as_f64().unwrap());
        assert!(0.0 <= lo && lo <= hi && hi > 0.0, "{name}: {v}");
    }
    // The ratios are medians of per-round ratios: inside their ranges. A
    // round's lowest may be 0: this test's slices are ~5 ms, and on a
    // loaded 2-core machine a slice descheduled whole completes nothing.
    assert_eq!(v["rounds"].as_u64(), Some(10), "{v}");
    for name in ["loop4k", "push64"] {
        let ratio = v[format!("{name}_ratio")].as_f64().unwrap();
        let range = &v[format!("{name}_ratio_range")];
        let (lo, hi) = (range[0].as_f64().unwrap(), range[1].as_f64().unwrap());
        assert!(
            0.0 <= lo && lo <= ratio && ratio <= hi && hi > 0.0,
            "{name}: {v}"
        );
    }
    // The budgets are the bounds' times per transaction times 1 / bar - 1,
    // the plain loops' the inverse of their rates, and the PSP extra what
    // is left of the PSP loop's time.
    let f = |key: &str| v[key].as_f64().unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs().max(1.0);
    let bits = 4096.0 * 8.0;
    assert!(
        close(f("push64_budget_ns"), 1e3 / f("crypto64_mops")),
        "{v}"
    );
    assert!(close(f("push64_plain_ns"), 1e3 / f("push64_mops")), "{v}");
    assert!(
        close(
            f("push64_psp_extra_ns"),
            1e3 / f("push64_psp_mops") - 1e3 / f("push64_mops") - 1e3 / f("crypto64_mops")
        ),
        "{v}"
    );
    assert!(
        close(f("loop4k_budget_ns"), bits / f("crypto4k_gbps") / 3.0),
        "{v}"
    );
    assert!(close(f("loop4k_plain_ns"), bits / f("loop4k_gbps")), "{v}");
    assert!(
        close(
            f("loop4k_psp_extra_ns"),
            bits / f("loop4k_psp_gbps") - bits / f("loop4k_gbps") - bits / f("crypto4k_gbps")
        ),
        "{v}"
    );
}
