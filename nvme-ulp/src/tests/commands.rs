//! The vendor command extension end to end: Flush over Command Requests
//! and Responses (ulp.md §3.9, `wire::command`).

use core::time::Duration;

use super::{lossy, pattern, Pair, Setup, NSID};
use crate::initiator::{InitiatorConfig, RefuseReason};
use crate::status::Status;
use crate::target::TargetConfig;

/// Both ends with the extension on.
fn enabled(setup: Setup) -> Setup {
    Setup {
        initiator: InitiatorConfig {
            vendor_commands: true,
            ..setup.initiator
        },
        target: TargetConfig {
            vendor_commands: true,
            ..setup.target
        },
        ..setup
    }
}

/// A flush of a namespace striped over two target namespaces on two
/// SQIDs goes to both, under loss and reordering, and reaches both
/// namespaces' storage; writes before and after it are unaffected.
#[test]
fn a_flush_reaches_every_destination_and_its_storage() {
    let mut pair = Pair::new(enabled(Setup {
        striped: true,
        faults: lossy(2),
        ..Setup::default()
    }));
    let data = pattern(3, 1024 * 512);
    assert_eq!(pair.write(0, data.clone(), Vec::new()), Status::SUCCESS);
    let now = pair.now();
    pair.initiator
        .submit_flush(now, 42, NSID)
        .expect("flush taken");
    assert_eq!(pair.initiator.outstanding(), 1);
    let done = pair.finish();
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].tag, done[0].status, done[0].ncmds),
        (42, Status::SUCCESS, 2)
    );
    let (status, read) = pair.read(0, 1024);
    assert_eq!(status, Status::SUCCESS);
    assert!(read.data == data, "data read back after the flush");
    assert_eq!(pair.target.stats().commands, 2);
    assert_eq!(pair.target.stats().flushes, 2);
    assert_eq!(pair.initiator.stats().flushes, 1);
    pair.assert_quiet();
    let Pair { target, .. } = pair;
    let namespaces = target.shutdown();
    assert_eq!(namespaces.len(), 2);
    for namespace in &namespaces {
        assert_eq!(
            namespace.stats().flushes,
            1,
            "namespace {}",
            namespace.nsid()
        );
    }
}

/// Off by default at both ends: the initiator refuses a flush; a target
/// without it NACKs the reserved packet type and the flush completes with
/// Invalid Command Opcode.
#[test]
fn the_extension_is_off_by_default() {
    let mut pair = Pair::new(Setup::default());
    let now = pair.now();
    assert_eq!(
        pair.initiator.submit_flush(now, 1, NSID),
        Err(RefuseReason::VendorCommandsOff)
    );
    let setup = enabled(Setup::default());
    let mut pair = Pair::new(Setup {
        target: TargetConfig {
            vendor_commands: false,
            ..setup.target
        },
        ..setup
    });
    let now = pair.now();
    pair.initiator
        .submit_flush(now, 7, NSID)
        .expect("flush taken");
    let done = pair.finish();
    assert_eq!((done[0].tag, done[0].status), (7, Status::INVALID_OPCODE));
    assert_eq!(pair.target.stats().malformed, 1);
    assert_eq!(pair.target.stats().commands, 0);
    assert_eq!(
        pair.initiator.submit_flush(pair.now(), 8, 9),
        Err(RefuseReason::UnknownNamespace(9))
    );
}

/// A flush whose connection closes before its response fails with
/// Transient Transport Error; the flush slot is free again.
#[test]
fn a_flush_on_a_closed_connection_fails() {
    let mut pair = Pair::new(enabled(Setup {
        one_way_delay: Duration::from_micros(50),
        ..Setup::default()
    }));
    let now = pair.now();
    pair.initiator
        .submit_flush(now, 5, NSID)
        .expect("flush taken");
    pair.step();
    assert_eq!(pair.initiator.stats().ncmds_sent, 1, "the request went out");
    let (ca, cb) = pair.connections;
    let now = pair.now();
    pair.a.engine.close(now, ca);
    pair.b.engine.close(now, cb);
    pair.initiator.handle_connection_closed(now, ca);
    pair.target.handle_connection_closed(cb);
    let done = pair.finish();
    assert_eq!(
        (done[0].tag, done[0].status),
        (5, Status::TRANSIENT_TRANSPORT_ERROR)
    );
    assert_eq!(pair.initiator.outstanding(), 0);
}

/// Flush slots are bounded: the 65th outstanding flush is refused.
#[test]
fn flush_slots_are_bounded() {
    let mut pair = Pair::new(enabled(Setup::default()));
    let now = pair.now();
    for tag in 0..crate::initiator::FLUSH_SLOTS as u64 {
        pair.initiator
            .submit_flush(now, tag, NSID)
            .expect("flush taken");
    }
    assert_eq!(
        pair.initiator.submit_flush(now, 99, NSID),
        Err(RefuseReason::QueueFull)
    );
    let done = pair.finish();
    assert_eq!(done.len(), crate::initiator::FLUSH_SLOTS);
    assert!(done.iter().all(|c| c.status == Status::SUCCESS));
}
