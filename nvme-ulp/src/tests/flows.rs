//! Reads and writes of every size and format, verified byte for byte
//! against the oracle, without and with loss and reordering.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use core::time::Duration;

use falcon_core::random::{Random, SplitMix64};
use falcon_core::testing::Faults;

use super::{lossy, pattern, Oracle, Pair, Setup, NSID};
use crate::data::HostBuffers;
use crate::initiator::{Icmd, IcmdBuffers};
use crate::layout::{Format, NCMD_DATA_LEN};
use crate::namespace::{BlockStore, Execution, Namespace, RamStore, WorkerSpec};
use crate::split::MAX_ICMD_LEN;
use crate::status::Status;
use crate::target::Target;

/// Commands in flight at once, each in its own lane of the namespace so
/// that no two overlap and the oracle knows every block's content.
const LANES: usize = 4;
/// Bytes of data of one lane.
const LANE_LEN: usize = 2 * MAX_ICMD_LEN;

/// A command in flight: its lane, where, and a write's buffers.
struct InFlight {
    lane: usize,
    slba: u64,
    write: Option<Arc<HostBuffers>>,
}

/// `commands` random reads and writes of 4 KiB to `max_len` (any whole
/// number of blocks), `LANES` at a time, each checked against the oracle
/// as it completes: a read returns what the oracle holds, a write updates
/// it. Returns the pair, quiet.
fn random_io(setup: Setup, commands: usize, max_len: usize) -> Pair {
    let format = setup.format;
    let mut rng = SplitMix64::new(setup.seed);
    let mut pair = Pair::new(setup);
    let lba = format.lba_size.bytes();
    let lane_blocks = LANE_LEN / lba;
    let mut oracle = Oracle::new(format, LANES * lane_blocks);
    let mut busy = [false; LANES];
    let mut in_flight: HashMap<u64, InFlight> = HashMap::new();
    let (mut submitted, mut completed) = (0, 0);
    while completed < commands {
        for (lane, busy) in busy.iter_mut().enumerate() {
            if *busy || submitted == commands {
                continue;
            }
            let (min, max) = (NCMD_DATA_LEN / lba, max_len / lba);
            let blocks = min + rng.below((max - min + 1) as u32) as usize;
            let slba =
                (lane * lane_blocks) as u64 + u64::from(rng.below((lane_blocks - blocks) as u32));
            let tag = submitted as u64;
            let nlb = (blocks - 1) as u16;
            let (icmd, write) = if rng.chance(1, 2) {
                let buffers = Arc::new(HostBuffers::with_metadata(
                    pattern(tag, format.data_len(blocks)),
                    pattern(!tag, format.metadata_len(blocks)),
                ));
                let icmd = Icmd::write(tag, NSID, slba, nlb, Arc::clone(&buffers));
                (icmd, Some(buffers))
            } else {
                (
                    Icmd::read(tag, NSID, slba, nlb, HostBuffers::default()),
                    None,
                )
            };
            let now = pair.now();
            pair.initiator.submit_icmd(now, icmd).expect("a free slot");
            in_flight.insert(tag, InFlight { lane, slba, write });
            *busy = true;
            submitted += 1;
        }
        assert!(
            pair.step() || !pair.done.is_empty(),
            "stuck with {} in flight",
            in_flight.len()
        );
        for done in core::mem::take(&mut pair.done) {
            let command = in_flight.remove(&done.tag).expect("a command in flight");
            assert!(
                done.status.is_success(),
                "command {}: {}",
                done.tag,
                done.status
            );
            match (&done.buffers, &command.write) {
                (IcmdBuffers::Write(sent), Some(buffers)) => {
                    assert!(Arc::ptr_eq(sent, buffers), "the write's buffers come back");
                    oracle.write(command.slba, buffers);
                }
                (IcmdBuffers::Read(read), None) => {
                    oracle.check(command.slba, read, &format!("read {}", done.tag));
                }
                _ => panic!("command {} completed as the other kind", done.tag),
            }
            busy[command.lane] = false;
            completed += 1;
        }
    }
    pair.assert_quiet();
    let stats = pair.initiator.stats();
    assert_eq!(stats.completed.success, commands as u64);
    assert_eq!(stats.completed.errors(), 0);
    assert_eq!(stats.ncmds.errors(), 0);
    assert_eq!((stats.stale, stats.malformed), (0, 0));
    let target = pair.target.stats();
    assert_eq!(target.responses.errors(), 0);
    assert_eq!(target.io.errors(), 0);
    assert_eq!(target.malformed, 0);
    pair
}

fn every_format(storage: Execution, faults: Faults, seed: u64) {
    for (index, format) in Format::ALL.into_iter().enumerate() {
        let pair = random_io(
            Setup {
                format,
                faults,
                seed: seed + index as u64,
                storage,
                ..Setup::default()
            },
            16,
            MAX_ICMD_LEN,
        );
        let (initiator, target) = (pair.initiator.stats(), pair.target.stats());
        assert!(
            initiator.reads > 0 && initiator.writes > 0,
            "{format}: a mix"
        );
        assert_eq!(
            initiator.ncmds_sent,
            target.read_ncmds + target.write_ncmds,
            "{format}: one request push per nCMD, each delivered once"
        );
        assert_eq!(initiator.write_data_responses, target.write_data_requests);
        assert!(target.bytes_written > 0 && target.bytes_read > 0);
    }
}

storage_modes!(
    every_format_lossless,
    every_format_under_loss_and_reordering,
    loss_is_recovered_by_falcon,
    split_commands_become_two_tcmds,
);

fn every_format_lossless(storage: Execution) {
    every_format(storage, Faults::default(), 100);
}

fn every_format_under_loss_and_reordering(storage: Execution) {
    every_format(storage, lossy(1), 200);
}

/// Loss and reordering really happened, and Falcon recovered from them
/// under the NVMe traffic.
fn loss_is_recovered_by_falcon(storage: Execution) {
    let pair = random_io(
        Setup {
            faults: lossy(1),
            seed: 7,
            storage,
            ..Setup::default()
        },
        24,
        MAX_ICMD_LEN,
    );
    let injected = pair.a.port.stats();
    assert!(injected.lost > 0 && injected.reordered > 0, "{injected:?}");
    let retransmitted =
        pair.a.engine.stats().retransmissions + pair.b.engine.stats().retransmissions;
    assert!(retransmitted > 0);
}

/// Striped across two target namespaces in 256 KiB stripes: commands that
/// cross a stripe boundary become two tCMDs (the S bit, NG 0 and 1), each
/// on its own namespace and worker; the oracle still holds. Commands are
/// at most a stripe (the MDTS NVMe-0.9 §6.6.3 assumes).
fn split_commands_become_two_tcmds(storage: Execution) {
    for (format, seed) in [(Format::ALL[1], 31), (Format::ALL[5], 32)] {
        let pair = random_io(
            Setup {
                format,
                striped: true,
                faults: lossy(1),
                seed,
                storage,
                ..Setup::default()
            },
            20,
            256 * 1024,
        );
        let (initiator, target) = (pair.initiator.stats(), pair.target.stats());
        let tcmds = target.read_tcmds + target.write_tcmds;
        assert!(
            tcmds > initiator.submitted,
            "{format}: {tcmds} tCMDs for {} iCMDs",
            initiator.submitted
        );
    }
}

/// A 64 KiB write (16 nCMDs): the target completes 15 nCMDs as their
/// data arrives, and the initiator has those 15 completions while the
/// device has not written the tCMD yet (its write waits at a gate); the
/// 16th comes after the write, and only then does the iCMD complete. A
/// device that waits runs on a worker thread only.
#[test]
fn early_write_completions_come_before_the_device_writes() {
    let setup = Setup::default();
    let config = super::namespace_config(&setup, 1);
    let format = config.validate().expect("format");
    let gate = Gate::closed();
    let store = GatedStore {
        inner: RamStore::new(format),
        gate: Arc::clone(&gate),
    };
    let namespace = Namespace::with_store(format, store);
    let target = Target::new(
        setup.target,
        vec![WorkerSpec::new(vec![0], vec![namespace])],
    )
    .expect("target");
    let _open = OpenOnDrop(Arc::clone(&gate));
    let mut pair = Pair::with_target(setup, target);
    pair.storage_wait = Duration::from_millis(1);
    let data = pattern(5, 64 * 1024);
    let buffers = Arc::new(HostBuffers::new(data.clone()));
    let now = pair.now();
    pair.initiator
        .submit_icmd(now, Icmd::write(9, NSID, 8, 127, buffers))
        .expect("submitted");
    pair.run_until(Duration::from_secs(1), |pair| {
        pair.initiator.stats().ncmds.success == 15 && pair.target.io_in_flight() == 1
    });
    assert_eq!(
        gate.writes.load(Ordering::SeqCst),
        0,
        "the device has not written"
    );
    assert_eq!(
        pair.initiator.outstanding(),
        1,
        "the iCMD waits for its last nCMD"
    );
    assert_eq!(pair.target.stats().early_write_completions, 15);
    gate.open();
    pair.storage_wait = Duration::from_secs(20);
    let done = pair.finish();
    assert_eq!(done.len(), 1);
    assert!(done[0].status.is_success());
    assert_eq!(gate.writes.load(Ordering::SeqCst), 1);
    assert_eq!(pair.initiator.stats().ncmds.success, 16);
    let (status, read) = pair.read(8, 128);
    assert!(status.is_success());
    assert_eq!(read.data, data);
}

/// Holds every device write until opened.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
    /// Writes that passed.
    writes: AtomicUsize,
}

impl Gate {
    fn closed() -> Arc<Gate> {
        Arc::new(Gate::default())
    }

    fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.changed.notify_all();
    }

    fn pass(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.changed.wait(open).unwrap_or_else(|e| e.into_inner());
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
    }
}

/// Opens the gate when dropped, so a failing test unwinds instead of
/// hanging on the worker's join.
struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A RAM store whose writes wait at a gate: a device that has not written
/// yet.
struct GatedStore {
    inner: RamStore,
    gate: Arc<Gate>,
}

impl BlockStore for GatedStore {
    fn read(&mut self, lba: u64, data: &mut [u8], metadata: &mut [u8]) -> Result<(), Status> {
        self.inner.read(lba, data, metadata)
    }

    fn write(&mut self, lba: u64, data: &[u8], metadata: &[u8]) -> Result<(), Status> {
        self.gate.pass();
        self.inner.write(lba, data, metadata)
    }

    fn write_zeroes(&mut self, lba: u64, nlb: u64) -> Result<(), Status> {
        self.inner.write_zeroes(lba, nlb)
    }

    fn flush(&mut self) -> Result<(), Status> {
        self.inner.flush()
    }
}
