//! `falcon nbd-gateway --backend falcon` driven by real NBD clients: each
//! read and write crosses NVMe over Falcon (initiator, two engines with
//! PSP over the in-process loopback, target RAM namespace). A random
//! 64 MiB image in with qemu-img convert and back out with nbdcopy and
//! qemu-img (byte-compared), and fio's nbd engine (4 KiB
//! randrw at iodepth 32, crc32c verification); nbdinfo sees the 512-byte
//! minimum block size, the 1 MiB maximum and no trim or write-zeroes.
//!
//! The client helpers are `tests/common/nbd.rs`, shared with the RAM
//! backend's tests (`nbd_clients.rs`).

use serde_json::Value;

mod common;
use common::nbd::{counter, fio_randrw_verify, random_file, run, same_bytes, Gateway};
use common::Scratch;

/// The Falcon backend's figures in the summary: no failed iCMD.
fn no_icmd_errors(summary: &Value) -> u64 {
    let f = &summary["falcon"];
    assert_eq!(f["icmd_errors"], 0, "{f}");
    assert_eq!(f["refused"], 0, "{f}");
    f["icmds"]
        .as_u64()
        .unwrap_or_else(|| panic!("no icmds in {f}"))
}

#[test]
fn nbdinfo_sees_the_nvme_block_sizes() {
    let scratch = Scratch::new("nvme-nbd", "nbdinfo");
    let gw = Gateway::unix("falcon", &scratch, &["--size", "8M", "--quiet"]);
    let out = run("nbdinfo", &["--json", &gw.uri("")]);
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let export = &info["exports"][0];
    assert_eq!(export["export-size"], 8 << 20, "{export}");
    assert_eq!(export["block_size_minimum"], 512, "{export}");
    assert_eq!(export["block_size_maximum"], 1 << 20, "{export}");
    assert_eq!(export["can_flush"], true, "{export}");
    assert_eq!(export["can_fua"], true, "{export}");
    assert_eq!(export["can_trim"], false, "{export}");
    assert_eq!(export["can_zero"], false, "{export}");
    let (summary, _) = gw.stop();
    assert_eq!(counter(&summary, "errors"), 0);
}

/// The round trip: a random 64 MiB image written in with
/// `qemu-img convert`, read back out with `nbdcopy` and with `qemu-img`,
/// each compared byte for byte.
#[test]
fn qemu_img_convert_in_and_nbdcopy_back_out_over_nvme() {
    const SIZE: usize = 64 << 20;
    let scratch = Scratch::new("nvme-nbd", "qemu-img");
    let gw = Gateway::unix("falcon", &scratch, &["--size", "64M", "--quiet"]);
    let src = random_file(&scratch, "src.img", SIZE, 11);
    let uri = gw.uri("");
    run(
        "qemu-img",
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            src.to_str().unwrap(),
            &uri,
        ],
    );
    let copied = scratch.path("copied.img");
    run("nbdcopy", &[&uri, copied.to_str().unwrap()]);
    same_bytes(&src, &copied);
    let back = scratch.path("back.img");
    run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &uri,
            back.to_str().unwrap(),
        ],
    );
    same_bytes(&src, &back);
    let (summary, _) = gw.stop();
    assert_eq!(counter(&summary, "written_bytes"), SIZE as u64);
    assert!(counter(&summary, "read_bytes") >= 2 * SIZE as u64);
    assert_eq!(counter(&summary, "errors"), 0);
    // Every read and write was an iCMD.
    let icmds = no_icmd_errors(&summary);
    assert_eq!(
        icmds,
        counter(&summary, "reads") + counter(&summary, "writes")
    );
    assert!(summary["falcon"]["falcon"]["ncmds"].as_u64().unwrap() >= (3 * SIZE as u64) / 4096);
}

#[test]
fn fio_randrw_iodepth_32_verifies_over_nvme() {
    let scratch = Scratch::new("nvme-nbd", "fio");
    let gw = Gateway::unix("falcon", &scratch, &["--size", "16M", "--quiet"]);
    let (reads, writes) = fio_randrw_verify(&gw);
    assert!(writes > 1000, "{writes} writes");
    assert!(reads > writes, "{reads} reads for {writes} writes");
    let (summary, _) = gw.stop();
    assert_eq!(counter(&summary, "errors"), 0);
    assert_eq!(counter(&summary, "writes"), writes);
    let icmds = no_icmd_errors(&summary);
    assert_eq!(
        icmds,
        counter(&summary, "reads") + counter(&summary, "writes")
    );
}
