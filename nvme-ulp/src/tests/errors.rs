//! Back-pressure and failures: RNR, device and range errors, PI, INV,
//! connection loss, queue depth, stale and malformed packets.

use std::sync::Arc;

use core::time::Duration;

use falcon_core::api::{ConnectionFault, Psn, Rsn, Transaction, Ulp, UlpEvent, UlpHeader};
use falcon_core::delivery::ConnectionError;
use falcon_core::wire::Window;

use super::{lossy, pattern, Oracle, Pair, Setup, NSID};
use crate::data::{HostBuffers, NvmeData};
use crate::initiator::{Icmd, IcmdBuffers, InitiatorConfig, PiPolicy, RefuseReason};
use crate::layout::Format;
use crate::lba::LbaRow;
use crate::namespace::pi::protect;
use crate::namespace::{Execution, FaultRule, PrInfo, Protection};
use crate::status::Status;
use crate::target::TargetConfig;

storage_modes!(
    a_busy_target_answers_rnr_and_recovers,
    errors_come_back_as_status_and_the_connection_carries_on,
    pi_is_verified_at_the_target,
    inv_fails_the_write_and_leaves_the_blocks,
    a_closed_connection_fails_outstanding_icmds,
    a_fatal_connection_error_fails_outstanding_icmds,
    queue_depth_is_respected,
    late_packets_for_a_reused_slot_are_dropped,
    a_malformed_request_is_nacked,
);

/// Writes `blocks` blocks at each of `slbas`, all at once, then reads
/// them back all at once; every byte checked.
fn write_then_read_concurrently(pair: &mut Pair, slbas: &[u64], blocks: usize) {
    let format = pair.format;
    let end = slbas.iter().max().copied().unwrap_or(0) as usize + blocks;
    let mut oracle = Oracle::new(format, end);
    let now = pair.now();
    for (i, &slba) in slbas.iter().enumerate() {
        let buffers = Arc::new(HostBuffers::with_metadata(
            pattern(slba, format.data_len(blocks)),
            pattern(!slba, format.metadata_len(blocks)),
        ));
        oracle.write(slba, &buffers);
        let icmd = Icmd::write(i as u64, NSID, slba, (blocks - 1) as u16, buffers);
        pair.initiator.submit_icmd(now, icmd).expect("submitted");
    }
    for done in pair.finish() {
        assert!(
            done.status.is_success(),
            "write {}: {}",
            done.tag,
            done.status
        );
    }
    let now = pair.now();
    for (i, &slba) in slbas.iter().enumerate() {
        let icmd = Icmd::read(
            i as u64,
            NSID,
            slba,
            (blocks - 1) as u16,
            HostBuffers::default(),
        );
        pair.initiator.submit_icmd(now, icmd).expect("submitted");
    }
    for done in pair.finish() {
        assert!(
            done.status.is_success(),
            "read {}: {}",
            done.tag,
            done.status
        );
        let IcmdBuffers::Read(read) = &done.buffers else {
            panic!("a read");
        };
        oracle.check(slbas[done.tag as usize], read, "read back");
    }
}

/// One tCMD slot for eight concurrent commands: the others are refused
/// receiver-not-ready (or, while a tCMD of the connection still waits for
/// nCMDs or data, parked), Falcon delivers the refused ones again, and
/// every command completes with the right bytes; the same with one
/// buffer, and with a worker queue of one (single-nCMD commands, so that
/// a tCMD waits only for its storage when the next one arrives).
fn a_busy_target_answers_rnr_and_recovers(storage: Execution) {
    let slbas: Vec<u64> = (0..8).map(|i| i * 64).collect();
    let cases = [
        (
            "slots",
            32,
            TargetConfig {
                tcmd_slots: 1,
                buffers: 4,
                ..TargetConfig::default()
            },
        ),
        (
            "buffers",
            32,
            TargetConfig {
                tcmd_slots: 8,
                buffers: 1,
                ..TargetConfig::default()
            },
        ),
        (
            "worker",
            1,
            TargetConfig {
                tcmd_slots: 8,
                buffers: 8,
                worker_queue_depth: 1,
                ..TargetConfig::default()
            },
        ),
    ];
    for (what, blocks, target) in cases {
        let mut pair = Pair::new(Setup {
            format: Format::ALL[4],
            target,
            faults: lossy(1),
            seed: 3,
            storage,
            ..Setup::default()
        });
        write_then_read_concurrently(&mut pair, &slbas, blocks);
        pair.assert_quiet();
        let stats = pair.target.stats();
        let rnr = match what {
            "slots" => stats.rnr_no_slot,
            "buffers" => stats.rnr_no_buffer,
            _ => stats.rnr_worker_busy,
        };
        assert!(rnr > 0, "{what}: no RNR: {stats:?}");
        assert!(
            pair.b.engine.stats().transactions.redeliveries > 0,
            "{what}: Falcon delivered the refused requests again"
        );
        assert_eq!(stats.responses.errors(), 0, "{what}");
        assert_eq!(pair.initiator.stats().completed.success, 16, "{what}");
    }
}

/// LBAs past the target namespace, an unknown target namespace and device
/// errors come back as NVMe statuses; nothing is written, and later
/// commands on the same connection succeed.
fn errors_come_back_as_status_and_the_connection_carries_on(storage: Execution) {
    let mut pair = Pair::new(Setup {
        target_blocks: 4096,
        storage,
        device_faults: vec![
            FaultRule::unreadable(1000..1008),
            FaultRule::unwritable(2000..2008).times(1),
        ],
        ..Setup::default()
    });
    let data = pattern(1, 8 * 512);
    // Past the end of the 4096-block namespace.
    assert_eq!(
        pair.write(4092, data.clone(), Vec::new()),
        Status::LBA_OUT_OF_RANGE
    );
    assert_eq!(pair.read(4090, 8).0, Status::LBA_OUT_OF_RANGE);
    assert_eq!(pair.target.stats().bytes_written, 0);
    // Device errors.
    assert_eq!(pair.read(996, 16).0, Status::UNRECOVERED_READ);
    assert_eq!(
        pair.write(2000, data.clone(), Vec::new()),
        Status::WRITE_FAULT
    );
    // The fault healed after one hit: the retry is written.
    assert!(pair.write(2000, data.clone(), Vec::new()).is_success());
    let (status, read) = pair.read(2000, 8);
    assert!(status.is_success());
    assert_eq!(read.data, data);
    // An unknown target namespace, then the right one again.
    let row = *pair.initiator.tables().row(0).expect("row 0");
    let unknown = LbaRow {
        target_nsid: 9,
        ..row
    };
    pair.initiator
        .tables_mut()
        .set_row(0, unknown)
        .expect("row");
    assert_eq!(pair.read(0, 8).0, Status::INVALID_NAMESPACE);
    pair.initiator.tables_mut().set_row(0, row).expect("row");
    assert!(pair.read(0, 8).0.is_success());
    pair.assert_quiet();
    let stats = pair.target.stats();
    assert_eq!(stats.io.media, 2);
    assert_eq!(stats.responses.lba_out_of_range, 2);
    assert_eq!(stats.responses.invalid_namespace, 1);
    assert_eq!(pair.initiator.stats().completed.errors(), 5);
}

/// The PI format of the PI tests: 512-byte blocks, 16 bytes of metadata,
/// PI Type 1 in its last 8 bytes.
fn pi_setup(storage: Execution, verify_writes: bool) -> Setup {
    Setup {
        storage,
        format: Format::ALL[2],
        protection: Protection::Verified,
        pi: PiPolicy::Checked {
            prchk: PrInfo::CHECK_ALL,
            verify_writes,
        },
        ..Setup::default()
    }
}

/// Data and metadata for `blocks` blocks whose PI carries reference tags
/// from `ref_tag` and application tag `app_tag` (a command at SLBA s
/// expects s and s, NVMe-0.9 §6.7).
fn protected(
    setup: &Setup,
    seed: u64,
    ref_tag: u32,
    app_tag: u16,
    blocks: usize,
) -> (Vec<u8>, Vec<u8>) {
    let format = super::namespace_config(setup, 1)
        .validate()
        .expect("format");
    let data = pattern(seed, blocks * 512);
    let mut metadata = pattern(!seed, blocks * 16);
    protect(format.format(), &data, &mut metadata, ref_tag, app_tag);
    (data, metadata)
}

/// The target checks the PI the initiator's caller supplied (PRINFO and
/// tags carried from the command, NVMe-0.9 §6.7): good PI is written and
/// reads back; a corrupted guard or reference tag fails with the integrity
/// status and writes nothing.
fn pi_is_verified_at_the_target(storage: Execution) {
    let setup = pi_setup(storage, false);
    let mut pair = Pair::new(setup.clone());
    let (data, metadata) = protected(&setup, 1, 64, 64, 32);
    assert!(pair.write(64, data.clone(), metadata.clone()).is_success());
    let (status, read) = pair.read(64, 32);
    assert!(status.is_success(), "{status}");
    assert_eq!((read.data, read.metadata), (data.clone(), metadata.clone()));

    // A flipped data bit: the guard no longer matches.
    let (mut bad, bad_metadata) = protected(&setup, 2, 64, 64, 32);
    bad[3 * 512 + 7] ^= 0x10;
    assert_eq!(pair.write(64, bad, bad_metadata), Status::GUARD_CHECK);
    // Reference tags of another LBA.
    let (other, other_metadata) = protected(&setup, 3, 65, 64, 32);
    assert_eq!(pair.write(64, other, other_metadata), Status::REF_TAG_CHECK);
    let (status, read) = pair.read(64, 32);
    assert!(status.is_success());
    assert_eq!(
        (read.data, read.metadata),
        (data, metadata),
        "nothing written"
    );
    assert_eq!(pair.target.stats().io.integrity, 2);
}

/// With the initiator checking PI itself, a bad nCMD goes out with INV:
/// the target writes nothing, every completion from then on carries Data
/// Transfer Error, and the iCMD fails with it.
fn inv_fails_the_write_and_leaves_the_blocks(storage: Execution) {
    let setup = pi_setup(storage, true);
    let mut pair = Pair::new(setup.clone());
    let (data, metadata) = protected(&setup, 1, 64, 64, 32);
    assert!(pair.write(64, data.clone(), metadata.clone()).is_success());
    let written = pair.target.stats().bytes_written;

    // The third of four nCMDs is corrupt.
    let (mut bad, bad_metadata) = protected(&setup, 2, 64, 64, 32);
    bad[2 * 4096 + 100] ^= 1;
    assert_eq!(
        pair.write(64, bad, bad_metadata),
        Status::DATA_TRANSFER_ERROR
    );
    pair.assert_quiet();
    let (initiator, target) = (*pair.initiator.stats(), *pair.target.stats());
    assert_eq!(initiator.invalidated, 1);
    assert_eq!(target.invalid_data, 1);
    assert!(target.responses.data_transfer >= 1);
    assert_eq!(target.bytes_written, written, "the tCMD was not written");
    let (status, read) = pair.read(64, 32);
    assert!(status.is_success());
    assert_eq!(
        (read.data, read.metadata),
        (data, metadata),
        "blocks unchanged"
    );
}

/// Submits `count` reads of 256 KiB and steps until the target has their
/// first nCMDs.
fn reads_in_flight(pair: &mut Pair, count: u64) {
    let now = pair.now();
    for i in 0..count {
        let icmd = Icmd::read(i, NSID, i * 1024, 511, HostBuffers::default());
        pair.initiator.submit_icmd(now, icmd).expect("submitted");
    }
    pair.run_until(Duration::from_secs(1), |pair| {
        pair.target.stats().read_ncmds > 0
    });
    assert_eq!(pair.initiator.outstanding(), count as usize);
}

/// The control plane closes the connection under outstanding reads: every
/// iCMD fails with Transient Transport Error, the target's tCMDs end.
fn a_closed_connection_fails_outstanding_icmds(storage: Execution) {
    let mut pair = Pair::new(Setup {
        storage,
        ..Setup::default()
    });
    reads_in_flight(&mut pair, 4);
    let (ca, cb) = pair.connections;
    let now = pair.now();
    pair.a.engine.close(now, ca);
    pair.b.engine.close(now, cb);
    pair.initiator.handle_connection_closed(now, ca);
    pair.target.handle_connection_closed(cb);
    let done = pair.finish();
    assert_eq!(done.len(), 4);
    for completion in &done {
        assert_eq!(completion.status, Status::TRANSIENT_TRANSPORT_ERROR);
    }
    pair.run_until(Duration::from_millis(10), |pair| pair.target.tcmds() == 0);
    assert!(pair.target.stats().aborted_tcmds > 0);
}

/// A fatal connection error from the engine fails the iCMDs on it.
fn a_fatal_connection_error_fails_outstanding_icmds(storage: Execution) {
    let mut pair = Pair::new(Setup {
        storage,
        ..Setup::default()
    });
    reads_in_flight(&mut pair, 3);
    let fault = ConnectionFault::Delivery(ConnectionError::ResyncExhausted {
        window: Window::Data,
        psn: Psn::new(1),
        rsn: Rsn::new(1),
    });
    assert!(fault.is_fatal());
    let event = UlpEvent::ConnectionError {
        connection: pair.connections.0,
        fault,
    };
    let now = pair.now();
    pair.initiator.on_event(now, &mut pair.a.engine, event);
    assert_eq!(pair.initiator.outstanding(), 0);
    let done: Vec<_> = std::iter::from_fn(|| pair.initiator.poll_completion()).collect();
    assert_eq!(done.len(), 3);
    assert!(done
        .iter()
        .all(|c| c.status == Status::TRANSIENT_TRANSPORT_ERROR));
    assert_eq!(pair.initiator.stats().connection_errors, 1);
}

/// The queue depth bounds the outstanding iCMDs; one more is refused with
/// the command handed back, and taken once a slot is free.
fn queue_depth_is_respected(storage: Execution) {
    let mut pair = Pair::new(Setup {
        storage,
        initiator: InitiatorConfig {
            queue_depth: 4,
            ..Setup::default().initiator
        },
        ..Setup::default()
    });
    let now = pair.now();
    let read = |tag: u64| Icmd::read(tag, NSID, tag * 8, 7, HostBuffers::default());
    for tag in 0..4 {
        pair.initiator
            .submit_icmd(now, read(tag))
            .expect("within depth");
    }
    let refused = pair.initiator.submit_icmd(now, read(4)).expect_err("full");
    assert_eq!(refused.reason, RefuseReason::QueueFull);
    assert_eq!(refused.icmd, read(4));
    assert_eq!(pair.initiator.outstanding(), 4);
    let mut peak = 0;
    pair.run_until(Duration::from_secs(1), |pair| {
        peak = peak.max(pair.initiator.outstanding());
        pair.initiator.outstanding() == 0
    });
    assert!(peak <= 4);
    assert_eq!(pair.done.len(), 4);
    pair.done.clear();
    let now = pair.now();
    pair.initiator
        .submit_icmd(now, read(4))
        .expect("a slot is free");
    assert!(pair.finish()[0].status.is_success());
    assert_eq!(pair.initiator.stats().queue_full, 1);
}

/// Commands that time out at the initiator (a 20 µs link, a 30 µs
/// timeout) fail with Command Aborted By Host; their late responses and
/// Write Data Requests name a slot whose generation moved on and are
/// dropped and counted (a late pull is answered INV, so nothing is
/// written); with a longer timeout the next commands succeed.
fn late_packets_for_a_reused_slot_are_dropped(storage: Execution) {
    let mut pair = Pair::new(Setup {
        storage,
        one_way_delay: Duration::from_micros(20),
        initiator: InitiatorConfig {
            queue_depth: 2,
            icmd_timeout: Duration::from_micros(30),
            ..InitiatorConfig::default()
        },
        ..Setup::default()
    });
    let data = pattern(8, 16 * 512);
    assert_eq!(pair.read(0, 16).0, Status::ABORTED_BY_HOST);
    assert_eq!(
        pair.write(16, data.clone(), Vec::new()),
        Status::ABORTED_BY_HOST
    );
    pair.assert_quiet();
    let stats = *pair.initiator.stats();
    assert_eq!(stats.timeouts, 2);
    assert!(stats.stale > 0, "{stats:?}");
    assert_eq!(
        pair.target.stats().invalid_data,
        2,
        "both late pulls were refused"
    );
    assert_eq!(pair.target.stats().bytes_written, 0);
    pair.initiator.set_icmd_timeout(Duration::from_secs(1));
    assert!(pair.write(16, data.clone(), Vec::new()).is_success());
    let (status, read) = pair.read(16, 16);
    assert!(status.is_success());
    assert_eq!(read.data, data);
    assert_eq!(pair.initiator.stats().completed.success, 2);
}

/// A push that is not an NVMe request is NACKed complete-in-error and
/// counted; the target carries on.
fn a_malformed_request_is_nacked(storage: Execution) {
    let mut pair = Pair::new(Setup {
        storage,
        ..Setup::default()
    });
    let now = pair.now();
    let header = UlpHeader::new(&[0x7F; 32]).expect("32 bytes");
    // A tag the initiator does not take for one of its nCMDs.
    let transaction = Transaction::push(u64::MAX, NvmeData::None).with_header(header);
    pair.a
        .engine
        .submit(now, pair.connections.0, transaction)
        .expect("submitted");
    pair.run_until(Duration::from_millis(1), |pair| {
        pair.target.stats().malformed == 1
    });
    assert!(pair.read(0, 8).0.is_success());
}
