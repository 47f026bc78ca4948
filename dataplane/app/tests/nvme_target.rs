//! `falcon nvme-target` end to end: the target in its own process, pinned
//! to CPU 1, and initiators pinned to CPU 0 over the kernel UDP port on
//! 127.0.0.1, PSP on.
//!
//! * `falcon nvme-perf --connect ... --verify` against it: several
//!   initiators one after another and two at once, every read checked,
//!   the target's final figures (SIGTERM) counting them all.
//! * Durability: FUA writes of block-distinct data at queue depth 16
//!   through the remote initiator (this process: the app crate is a
//!   library), the target SIGKILLed in the middle of the load and started
//!   again on the same file; the initiator reports the writes in flight as
//!   Transient Transport Errors, reconnects by itself, and every block
//!   reads back as the last write that completed there, or (where the
//!   writes after it failed) as one of those failed writes: never anything
//!   else.
//! * Losing the target for good (past the reconnection deadline), and an
//!   initiator stopped long enough for the target to fail its Falcon
//!   connection: both sides carry on.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use falcon::nvme::remote::{RemoteConfig, RemoteInitiator};
use falcon::nvme::{NvmeDevice, SubmitRefusal};
use nvme_ulp::data::HostBuffers;
use nvme_ulp::initiator::{Icmd, IcmdBuffers, IcmdCompletion};
use nvme_ulp::Status;
use serde_json::Value;

mod common;
use common::{free_tcp, free_udp, stderr, wait_at_most, Scratch, BIN};

/// The tests pin their processes to CPUs 0 and 1: one at a time, or they
/// would share them.
static CPUS: Mutex<()> = Mutex::new(());

fn cpus() -> MutexGuard<'static, ()> {
    CPUS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A target configuration: the control and UDP addresses, pinned to CPU
/// 1, the loopback's timeouts, and `namespaces` (TOML `[[namespaces]]`
/// tables).
fn config(control: SocketAddr, udp: SocketAddr, namespaces: &str) -> String {
    format!(
        r#"
[node]
ip = "10.0.0.2"
control = "{control}"
core = 1

[port]
kind = "udp"
bind = "{udp}"

[delivery]
initial_rto_us = 10000

[rue.swift]
fabric_base_delay = 1526
min_retransmit_timeout = 76294

[target]
vendor_commands = true

{namespaces}
"#
    )
}

/// Starts `falcon nvme-target --config PATH --quiet --json`.
fn start_target(path: &str) -> Child {
    Command::new(BIN)
        .args(["nvme-target", "--config", path, "--quiet", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run falcon nvme-target")
}

/// Stops the target with SIGTERM; its final figures.
fn stop_target(target: Child) -> Value {
    let status = Command::new("kill")
        .args(["-TERM", &target.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = wait_at_most(target, Duration::from_secs(30));
    // Its log, shown with a failing test (or --nocapture).
    eprintln!("{}", stderr(&out));
    assert!(out.status.success(), "target: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        )
    })
}

/// `falcon nvme-perf --connect CONTROL --core 0 --json --quiet ARGS…`,
/// started.
fn start_perf(control: SocketAddr, args: &[&str]) -> Child {
    let control = control.to_string();
    let mut all = vec![
        "nvme-perf",
        "--connect",
        &control,
        "--core",
        "0",
        "--json",
        "--quiet",
    ];
    all.extend_from_slice(args);
    Command::new(BIN)
        .args(&all)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run falcon nvme-perf")
}

/// A finished nvme-perf run: verified, no error, as many I/Os as asked.
fn verified(perf: Child, ios: u64) -> Value {
    let out = wait_at_most(perf, Duration::from_secs(180));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        )
    });
    assert!(out.status.success(), "{report}\n{}", stderr(&out));
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["ios"], ios, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["verify_failures"], 0, "{report}");
    assert!(
        report["verified_reads"].as_u64().unwrap() > ios / 10,
        "few reads checked: {report}"
    );
    assert_eq!(report["falcon"]["connects"], 1, "{report}");
    assert_eq!(report["falcon"]["disconnects"], 0, "{report}");
    report
}

#[test]
fn nvme_perf_verifies_against_a_target_serving_several_initiators() {
    let _cpus = cpus();
    let scratch = Scratch::new("nvme-target", "perf");
    let (control, udp) = (free_tcp(), free_udp());
    let image = scratch.path("ns2.img");
    let namespaces = format!(
        r#"
[[namespaces]]
nsid = 1
backing = "ram"
size = "4M"

[[namespaces]]
nsid = 2
backing = "file"
path = "{}"
size = "4M"
lba_size = 4096
metadata = 8
protection = "opaque"
"#,
        image.display()
    );
    let path = scratch.file("target.toml", &config(control, udp, &namespaces));
    let target = start_target(&path);
    let run = |nsid: &str, seed: &str| {
        start_perf(
            control,
            &[
                "--nsid", nsid, "-q", "16", "-w", "randrw", "--ios", "1500", "--verify", "--size",
                "1M", "--seed", seed,
            ],
        )
    };
    // One after another: the RAM namespace, then the file namespace (4 KiB
    // blocks with 8 bytes of metadata).
    let first = verified(run("1", "1"), 1500);
    assert_eq!(first["nsid"], 1);
    assert_eq!(first["lba_size_bytes"], 512);
    let second = verified(run("2", "2"), 1500);
    assert_eq!(
        (
            second["lba_size_bytes"].as_u64(),
            second["metadata_bytes"].as_u64()
        ),
        (Some(4096), Some(8))
    );
    // Two at once, one on each namespace.
    let (a, b) = (run("1", "3"), run("2", "4"));
    verified(a, 1500);
    verified(b, 1500);
    // A namespace the target does not export is refused by name.
    let out = wait_at_most(run("9", "5"), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--nsid 9: the target at")
            && stderr(&out).contains("exports namespaces 1, 2"),
        "{}",
        stderr(&out)
    );
    let report = stop_target(target);
    let c = &report["connections"];
    assert_eq!(c["accepted"], 5, "{report}");
    assert_eq!(c["closed"], 4, "{report}");
    // The refused NSID's initiator went away without a word.
    assert_eq!(c["lost"], 1, "{report}");
    assert_eq!(c["failed"], 0, "{report}");
    assert_eq!(c["at_stop"], 0, "{report}");
    assert_eq!(report["stopped_by"], "signal");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(
        report["read_ios"].as_u64().unwrap() + report["write_ios"].as_u64().unwrap(),
        6000,
        "{report}"
    );
    let ns = &report["namespaces"];
    assert_eq!(ns[1]["backing"], "file");
    assert!(ns[1]["direct_io"].is_boolean(), "{report}");
    assert_eq!(report["udp"]["rx_truncated"], 0, "{report}");
}

/// How a write is made durable before its completion counts as durable.
#[derive(Debug, Clone, Copy)]
enum Durability {
    /// The write itself has FUA.
    Fua,
    /// Writes without FUA, a flush every [`FLUSH_EVERY`] completions: a
    /// write counts as durable once a flush taken after its completion
    /// succeeds; until then its block may hold it or what was durable
    /// before.
    Flush,
}

/// Completions between two flushes in [`Durability::Flush`].
const FLUSH_EVERY: u64 = 64;
/// The tag that marks a flush's completion (writes' tags are block << 32
/// | generation, blocks below 2^31).
const FLUSH_TAG: u64 = 1 << 63;

/// Block `lba`'s bytes after write generation `generation` (0: never
/// written, zeroes): distinct for every block and generation.
fn block(lba: u64, generation: u32, len: usize) -> Vec<u8> {
    if generation == 0 {
        return vec![0; len];
    }
    let mut state = (lba << 32) ^ u64::from(generation) ^ 0x9E37_79B9_7F4A_7C15;
    (0..len / 8)
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()
        })
        .collect()
}

/// What a target that should be running says, if it has exited.
fn exited(target: &mut Option<Child>) -> String {
    let Some(child) = target.as_mut() else {
        return "no target".into();
    };
    match child.try_wait() {
        Ok(Some(status)) => {
            let mut err = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut err);
            }
            format!("the target exited ({status}): {err}")
        }
        _ => "the target runs".into(),
    }
}

/// The writes of the durability test and what each block may hold.
struct Writes {
    /// Per block: the generations it may hold. A write that completed
    /// makes it exactly that one; a write failed by the transport adds
    /// its own (it may or may not have reached the disk).
    allowed: Vec<BTreeSet<u32>>,
    in_flight: Vec<bool>,
    /// Every write submitted, (block, generation).
    history: Vec<(u64, u32)>,
    /// Writes completed without FUA since the last flush was taken.
    uncovered: Vec<(u64, u32)>,
    /// Flushes outstanding: tag → the writes each covers.
    flushes: std::collections::HashMap<u64, Vec<(u64, u32)>>,
    flushes_done: u64,
    completed: u64,
    successes: u64,
    transport_errors: u64,
}

impl Writes {
    fn new(blocks: u64) -> Writes {
        Writes {
            allowed: vec![BTreeSet::from([0]); blocks as usize],
            in_flight: vec![false; blocks as usize],
            history: Vec::new(),
            uncovered: Vec::new(),
            flushes: std::collections::HashMap::new(),
            flushes_done: 0,
            completed: 0,
            successes: 0,
            transport_errors: 0,
        }
    }

    /// A write's completion (its tag: block << 32 | generation) or a
    /// flush's; whether a write succeeded.
    fn complete(&mut self, done: IcmdCompletion, durability: Durability) -> bool {
        if done.tag & FLUSH_TAG != 0 {
            let covered = self.flushes.remove(&done.tag).expect("a flush we took");
            if done.status == Status::SUCCESS {
                self.flushes_done += 1;
                // Writes to a block are never concurrent: generations of
                // one block complete in order, and the covered one or a
                // later one is on the disk.
                for (lba, generation) in covered {
                    self.allowed[lba as usize].retain(|&g| g >= generation);
                }
            } else {
                assert_eq!(done.status, Status::TRANSIENT_TRANSPORT_ERROR, "flush");
                // Not covered after all: covered by a later flush, or not.
                self.uncovered.extend(covered);
            }
            return false;
        }
        self.completed += 1;
        let (lba, generation) = (done.tag >> 32, done.tag as u32);
        self.in_flight[lba as usize] = false;
        assert!(matches!(done.buffers, IcmdBuffers::Write(_)));
        let set = &mut self.allowed[lba as usize];
        if done.status == Status::SUCCESS {
            match durability {
                Durability::Fua => *set = BTreeSet::from([generation]),
                Durability::Flush => {
                    set.insert(generation);
                    self.uncovered.push((lba, generation));
                }
            }
            self.successes += 1;
            true
        } else {
            assert_eq!(
                done.status,
                Status::TRANSIENT_TRANSPORT_ERROR,
                "write at {lba}"
            );
            set.insert(generation);
            self.transport_errors += 1;
            false
        }
    }
}

/// Turns `device` until `done` or `limit`.
fn turn_until(
    device: &mut RemoteInitiator,
    limit: Duration,
    mut done: impl FnMut(&mut RemoteInitiator) -> bool,
) {
    let start = Instant::now();
    while !done(device) {
        assert!(start.elapsed() < limit, "timed out: {device:?}");
        device.turn();
    }
}

fn durable_writes_survive_a_killed_target(durability: Durability) {
    let _cpus = cpus();
    let scratch = Scratch::new("nvme-target", "durability");
    let (control, udp) = (free_tcp(), free_udp());
    let image = scratch.path("ns1.img");
    const BLOCK: usize = 4096;
    const BLOCKS: u64 = 2048;
    let namespaces = format!(
        "[[namespaces]]\nnsid = 1\nbacking = \"file\"\npath = \"{}\"\nsize = {}\nlba_size = {BLOCK}\n",
        image.display(),
        BLOCKS * BLOCK as u64
    );
    let path = scratch.file("target.toml", &config(control, udp, &namespaces));
    let target = start_target(&path);
    falcon::cmd::node::pin(0).expect("CPU 0");
    let mut device = RemoteInitiator::connect(RemoteConfig {
        queue_depth: 16,
        setup_timeout: Duration::from_secs(60),
        reconnect_deadline: Duration::from_secs(60),
        ..RemoteConfig::new(control)
    })
    .expect("connected");
    assert_eq!(device.format().lba_size.bytes(), BLOCK);
    assert_eq!(device.blocks(), BLOCKS);

    let mut writes = Writes::new(BLOCKS);
    let mut generation = 0u32;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let (mut submitted, mut refused) = (0u64, 0u64);
    let mut target = Some(target);
    let mut killed_at = None;
    // Writes until 600 have completed after the restart.
    let mut successes_after_restart = 0u64;
    let mut next_flush = 0u64;
    let start = Instant::now();
    while successes_after_restart < 600 {
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "stuck: {device:?}"
        );
        // Keep 16 writes outstanding, each on a block with none in flight.
        while device.has_room() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let lba = rng % BLOCKS;
            if writes.in_flight[lba as usize] {
                break;
            }
            generation += 1;
            let data = Arc::new(HostBuffers::new(block(lba, generation, BLOCK)));
            let icmd = Icmd::write((lba << 32) | u64::from(generation), 1, lba, 0, data);
            let icmd = match durability {
                Durability::Fua => icmd.with_fua(),
                Durability::Flush => icmd,
            };
            match device.submit(icmd) {
                Ok(()) => {
                    writes.in_flight[lba as usize] = true;
                    writes.history.push((lba, generation));
                    submitted += 1;
                }
                Err(e) => {
                    match e.reason {
                        // The kill closes the control channel; on a
                        // loaded host the new target may also give up on
                        // a connection whose ACKs a descheduled initiator
                        // delayed past its retransmissions (it says so).
                        SubmitRefusal::Reconnecting(why) => {
                            assert!(
                                why.contains("control") || why.contains("Falcon connection failed"),
                                "{why}"
                            );
                            refused += 1;
                        }
                        other => panic!("refused: {other}; {}", exited(&mut target)),
                    }
                    break;
                }
            }
        }
        device.turn();
        while let Some(done) = device.poll_completion() {
            if writes.complete(done, durability) && killed_at.is_some() && device.connects() >= 2 {
                successes_after_restart += 1;
            }
        }
        if matches!(durability, Durability::Flush)
            && writes.uncovered.len() as u64 >= FLUSH_EVERY
            && writes.flushes.len() < 4
        {
            next_flush += 1;
            let tag = FLUSH_TAG | next_flush;
            if device.flush(tag).is_ok() {
                let covered = std::mem::take(&mut writes.uncovered);
                writes.flushes.insert(tag, covered);
            }
        }
        // In the middle of the load: kill the target, start it again.
        if killed_at.is_none() && writes.successes >= 800 {
            let mut child = target.take().expect("running");
            child.kill().expect("SIGKILL");
            let _ = child.wait();
            killed_at = Some(Instant::now());
            target = Some(start_target(&path));
        }
    }
    let killed_at = killed_at.expect("killed");
    assert!(device.connects() >= 2, "{device:?}");
    assert_eq!(device.stats().disconnects, device.connects() - 1);
    assert!(
        writes.transport_errors > 0,
        "no write was in flight at the kill"
    );
    assert!(refused > 0, "no write was refused while disconnected");
    if matches!(durability, Durability::Flush) {
        let tag = FLUSH_TAG | (next_flush + 1);
        device.flush(tag).expect("the last flush taken");
        let covered = std::mem::take(&mut writes.uncovered);
        writes.flushes.insert(tag, covered);
    }
    turn_until(&mut device, Duration::from_secs(60), |d| {
        d.outstanding() == 0
    });
    while let Some(done) = device.poll_completion() {
        writes.complete(done, durability);
    }
    if matches!(durability, Durability::Flush) {
        assert!(writes.flushes_done > 10, "{} flushes", writes.flushes_done);
        assert!(writes.flushes.is_empty());
    }
    assert_eq!(writes.completed, submitted, "every write completes once");
    eprintln!(
        "durability: {submitted} writes, {} completed, {} failed by the transport, {refused} refused while reconnecting, {} reconnection(s); {:.2} s from the kill to the end of the load",
        writes.successes,
        writes.transport_errors,
        device.connects() - 1,
        killed_at.elapsed().as_secs_f64()
    );
    let Writes {
        allowed, history, ..
    } = writes;

    // Every block reads back as one of its allowed generations.
    let mut next = 0u64;
    let mut checked = 0u64;
    let mut exact = 0u64;
    while checked < BLOCKS {
        while next < BLOCKS && device.has_room() {
            device
                .submit(Icmd::read(next, 1, next, 0, HostBuffers::default()))
                .map_err(|e| e.reason)
                .expect("read submitted");
            next += 1;
        }
        device.turn();
        while let Some(done) = device.poll_completion() {
            let lba = done.tag;
            assert_eq!(done.status, Status::SUCCESS, "read of block {lba}");
            let IcmdBuffers::Read(read) = done.buffers else {
                panic!("a read completes with read buffers");
            };
            let set = &allowed[lba as usize];
            let matched = set.iter().find(|&&g| read.data == block(lba, g, BLOCK));
            let actually = history
                .iter()
                .find(|&&(l, g)| read.data == block(l, g, BLOCK));
            assert!(
                matched.is_some(),
                "block {lba} holds none of generations {set:?} (first bytes {:02x?}); it holds {actually:?}, history of the block {:?}",
                &read.data[..16],
                history.iter().filter(|(l, _)| *l == lba).collect::<Vec<_>>()
            );
            if set.len() == 1 && !set.contains(&0) {
                exact += 1;
            }
            checked += 1;
        }
    }
    assert!(
        exact > BLOCKS / 4,
        "only {exact} blocks had one completed write"
    );
    device.close(Duration::from_secs(10));
    let report = stop_target(target.take().expect("running"));
    assert_eq!(report["connections"]["closed"], 1, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
}

#[test]
fn fua_writes_survive_a_killed_target() {
    durable_writes_survive_a_killed_target(Durability::Fua);
}

#[test]
fn flushed_writes_survive_a_killed_target() {
    durable_writes_survive_a_killed_target(Durability::Flush);
}

/// A target that does not come back: the writes in flight fail with
/// Transient Transport Error, submissions are refused while reconnecting
/// and, past the deadline, refused for good with the reason.
#[test]
fn a_target_gone_for_good_is_given_up_after_the_deadline() {
    let _cpus = cpus();
    let scratch = Scratch::new("nvme-target", "gone");
    let (control, udp) = (free_tcp(), free_udp());
    let namespaces = "[[namespaces]]\nnsid = 1\nbacking = \"ram\"\nsize = \"1M\"\n";
    let path = scratch.file("target.toml", &config(control, udp, namespaces));
    let mut target = start_target(&path);
    falcon::cmd::node::pin(0).expect("CPU 0");
    let mut device = RemoteInitiator::connect(RemoteConfig {
        queue_depth: 8,
        setup_timeout: Duration::from_secs(60),
        reconnect_deadline: Duration::from_secs(2),
        ..RemoteConfig::new(control)
    })
    .expect("connected");
    let write = |tag: u64| {
        Icmd::write(
            tag,
            1,
            tag * 8,
            7,
            Arc::new(HostBuffers::new(vec![7; 4096])),
        )
    };
    device
        .submit(write(0))
        .map_err(|e| e.reason)
        .expect("submitted");
    turn_until(&mut device, Duration::from_secs(30), |d| {
        d.outstanding() == 0
    });
    assert_eq!(
        device.poll_completion().map(|c| c.status),
        Some(Status::SUCCESS)
    );
    target.kill().expect("SIGKILL");
    let _ = target.wait();
    // Submitted before the loss is seen: completes in error, reported.
    let mut outcomes = Vec::new();
    for tag in 1..=4 {
        if device.submit(write(tag)).is_ok() {
            outcomes.push(tag);
        }
    }
    turn_until(&mut device, Duration::from_secs(30), |d| !d.is_connected());
    turn_until(&mut device, Duration::from_secs(30), |d| {
        d.outstanding() == 0
    });
    let mut failed = 0;
    while let Some(done) = device.poll_completion() {
        assert_eq!(done.status, Status::TRANSIENT_TRANSPORT_ERROR);
        failed += 1;
    }
    assert_eq!(failed, outcomes.len());
    match device.submit(write(9)).map_err(|e| e.reason) {
        Err(SubmitRefusal::Reconnecting(why)) => assert!(why.contains("control"), "{why}"),
        other => panic!("{other:?}"),
    }
    let lost = Instant::now();
    let reason = loop {
        device.turn();
        match device.submit(write(10)).map_err(|e| e.reason) {
            Err(SubmitRefusal::Disconnected(why)) => break why,
            Err(SubmitRefusal::Reconnecting(_)) => {}
            other => panic!("{other:?}"),
        }
        assert!(lost.elapsed() < Duration::from_secs(30), "{device:?}");
    };
    assert!(reason.contains("no reconnection within 2s"), "{reason}");
    assert!(
        lost.elapsed() < Duration::from_secs(5),
        "gave up after {:?}",
        lost.elapsed()
    );
}

/// An initiator stopped (SIGSTOP) in the middle of its load: the target's
/// transactions to it exhaust their retransmissions, the target fails
/// that connection (its tCMDs aborted) and serves on; resumed, the
/// initiator learns it lost the target, fails what was in flight, and
/// reconnects by itself, its reads still verified.
#[test]
fn a_stalled_initiator_loses_its_connection_and_reconnects() {
    let _cpus = cpus();
    let scratch = Scratch::new("nvme-target", "stalled");
    let (control, udp) = (free_tcp(), free_udp());
    let namespaces = "[[namespaces]]\nnsid = 1\nbacking = \"ram\"\nsize = \"4M\"\n";
    let path = scratch.file("target.toml", &config(control, udp, namespaces));
    let target = start_target(&path);
    let perf = start_perf(
        control,
        &[
            "-q",
            "16",
            "-w",
            "randrw",
            "-t",
            "14",
            "--verify",
            "--size",
            "1M",
            "--allow-errors",
            "--reconnect-timeout",
            "30",
        ],
    );
    let pid = perf.id().to_string();
    std::thread::sleep(Duration::from_secs(3));
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    std::thread::sleep(Duration::from_secs(6));
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let out = wait_at_most(perf, Duration::from_secs(120));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        )
    });
    assert!(out.status.success(), "{report}\n{}", stderr(&out));
    assert_eq!(report["verify_failures"], 0, "{report}");
    // One loss at least (a loaded host may add another: the target gives
    // up on a connection whose ACKs came too late, and says so).
    let f = &report["falcon"];
    let (connects, disconnects) = (
        f["connects"].as_u64().unwrap(),
        f["disconnects"].as_u64().unwrap(),
    );
    assert!(disconnects >= 1, "{report}\n{}", stderr(&out));
    assert_eq!(connects, disconnects + 1, "{report}\n{}", stderr(&out));
    assert!(
        report["errors_by_status"]["transient_transport"].as_u64() > Some(0),
        "{report}"
    );
    let errors = report["errors"].as_u64().unwrap();
    assert_eq!(
        report["errors_by_status"]["transient_transport"], errors,
        "{report}"
    );
    let target = stop_target(target);
    let c = &target["connections"];
    assert_eq!(c["accepted"], connects, "{target}");
    assert!(c["failed"].as_u64() >= Some(1), "{target}");
    assert_eq!(c["closed"], 1, "{target}");
    assert!(target["aborted_tcmds"].as_u64() > Some(0), "{target}");
}

/// `falcon nbd-gateway --connect`: NBD clients on a namespace a target
/// in another process serves. qemu-img writes a random image in (with its
/// final flush) and reads it back; the target is SIGKILLed and started
/// again on the same file, and nbdcopy reads the image out through the
/// gateway, which waited for the connection to come back. Then writes
/// left unflushed across a second restart make the next FLUSH fail, once:
/// the gateway cannot know whether the restarted target kept them.
#[test]
fn nbd_gateway_serves_a_remote_namespace_across_target_restarts() {
    use common::nbd::{random_file, run, same_bytes, Gateway};

    let _cpus = cpus();
    let scratch = Scratch::new("nvme-target", "nbd-remote");
    let (control, udp) = (free_tcp(), free_udp());
    let image = scratch.path("ns1.img");
    const SIZE: usize = 16 << 20;
    let namespaces = format!(
        "[[namespaces]]\nnsid = 1\nbacking = \"file\"\npath = \"{}\"\nsize = {SIZE}\nlba_size = 512\n",
        image.display(),
    );
    let path = scratch.file("target.toml", &config(control, udp, &namespaces));
    let mut target = start_target(&path);
    let control_arg = control.to_string();
    let gw = Gateway::unix(
        "falcon",
        &scratch,
        &[
            "--connect",
            &control_arg,
            "--reconnect-timeout",
            "60",
            "--quiet",
        ],
    );
    let uri = gw.uri("");

    let info: Value = serde_json::from_slice(&run("nbdinfo", &["--json", &uri]).stdout).unwrap();
    let export = &info["exports"][0];
    assert_eq!(export["export-size"], SIZE, "{export}");
    assert_eq!(export["block_size_minimum"], 512, "{export}");
    assert_eq!(export["can_flush"], true, "{export}");

    let src = random_file(&scratch, "src.img", SIZE, 23);
    let src_arg = src.to_str().unwrap();
    run(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", src_arg, &uri],
    );

    // Killed: nothing is flushed by the target on its way out.
    target.kill().expect("SIGKILL");
    let _ = target.wait();
    let target = start_target(&path);
    let back = scratch.path("back.img");
    run("nbdcopy", &[&uri, back.to_str().unwrap()]);
    same_bytes(&src, &back);

    // Unflushed writes, then a restart: the first flush reports them.
    let other = random_file(&scratch, "other.img", 1 << 20, 29);
    run("nbdcopy", &[other.to_str().unwrap(), &uri]);
    let mut target = target;
    target.kill().expect("SIGKILL");
    let _ = target.wait();
    let target = start_target(&path);
    let flush = |expect_ok: bool| {
        let out = Command::new("qemu-io")
            .args(["-f", "raw", "-c", "flush", &uri])
            .output()
            .expect("run qemu-io");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
        let failed = !out.status.success() || text.contains("error");
        assert_eq!(!failed, expect_ok, "qemu-io flush: {text}");
    };
    flush(false);
    flush(true);

    let (summary, log) = gw.stop();
    let f = &summary["falcon"];
    assert_eq!(summary["backend"], "falcon-remote", "{summary}");
    assert_eq!(f["flush_errors"], 1, "{f}\n{log}");
    assert_eq!(f["refused"], 0, "{f}");
    assert_eq!(f["icmd_errors"], 0, "{f}");
    assert_eq!(f["falcon"]["connects"], 3, "{f}");
    assert!(summary["requests"].as_u64().unwrap() > (SIZE as u64 * 2) / (1 << 20));
    stop_target(target);
}
