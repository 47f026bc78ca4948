//! A hostile peer (RDMA-0.9 §6.9 and the memory-region checks): wrong
//! keys, addresses outside the region, missing rights, requests and
//! responses on the wrong connection, unknown QPs, packets out of
//! sequence. The target's memory must not change by a single byte.

use super::*;
use crate::verbs::{AsyncEventKind, WcStatus, WrOp};
use crate::wire::{Extensions, Opcode, RKey, Rbth, RdmaHeader, Reth, Sn};
use crate::Refusal;

fn all() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

/// Every refused access, in complete-in-error mode so that each is tried
/// on a running QP: the requester's completion names it, the responder
/// counts it, and the responder's memory is byte for byte what it was.
#[test]
fn refused_accesses_change_no_byte() {
    let setup = Setup {
        qps: 3,
        error_mode: ErrorMode::CompleteInError,
        ..Setup::default()
    };
    let mut pair = Pair::new(setup.clone());
    let (_, a_mr) = pair.na.region(4096, 1, Access::LOCAL_WRITE);
    let (b_region, b_rw) = pair.nb.region(4096, 2, all());
    let b_ro = pair
        .nb
        .device
        .reg_mr(pair.nb.pd, &b_region, Access::REMOTE_READ)
        .expect("read only");
    let b_local = pair
        .nb
        .device
        .reg_mr(pair.nb.pd, &b_region, Access::LOCAL_WRITE)
        .expect("local only");
    let old = pair
        .nb
        .device
        .reg_mr(pair.nb.pd, &b_region, all())
        .expect("to be deregistered");
    pair.nb.device.dereg_mr(&old).expect("deregistered");
    let again = pair
        .nb
        .device
        .reg_mr(pair.nb.pd, &b_region, all())
        .expect("the slot again");
    assert_ne!(again.rkey(), old.rkey());
    let before = b_region.to_vec();
    let sge = Node::sge(&a_mr, 0, 64);
    let attempts: Vec<(&str, WrOp)> = vec![
        (
            "unknown rkey",
            WrOp::Write {
                remote_addr: b_rw.addr(),
                rkey: RKey(0x00DE_AD00),
            },
        ),
        (
            "past the end",
            WrOp::Write {
                remote_addr: b_rw.addr_at(4096 - 32),
                rkey: b_rw.rkey(),
            },
        ),
        (
            "before the start",
            WrOp::Write {
                remote_addr: b_rw.addr() - 1,
                rkey: b_rw.rkey(),
            },
        ),
        (
            "another region's address",
            WrOp::Write {
                remote_addr: b_ro.addr(),
                rkey: b_rw.rkey(),
            },
        ),
        (
            "no REMOTE_WRITE",
            WrOp::Write {
                remote_addr: b_ro.addr(),
                rkey: b_ro.rkey(),
            },
        ),
        (
            "a deregistered key",
            WrOp::Write {
                remote_addr: old.addr(),
                rkey: old.rkey(),
            },
        ),
        (
            "no REMOTE_ATOMIC",
            WrOp::FetchAdd {
                remote_addr: b_ro.addr(),
                rkey: b_ro.rkey(),
                add: 1,
            },
        ),
        (
            "atomic past the end",
            WrOp::CompareSwap {
                remote_addr: b_rw.addr_at(4096),
                rkey: b_rw.rkey(),
                compare: 0,
                swap: 1,
            },
        ),
        (
            "no REMOTE_READ",
            WrOp::Read {
                remote_addr: b_local.addr(),
                rkey: b_local.rkey(),
            },
        ),
    ];
    for (id, (what, op)) in attempts.iter().enumerate() {
        let len = if op.is_atomic() { 8 } else { 64 };
        pair.na
            .post_send(0, SendWr::new(id as u64, *op, Node::sge(&a_mr, 0, len)));
        let _ = what;
    }
    pair.until_completions(attempts.len(), 0);
    for (wc, (what, _)) in pair.wa.iter().zip(&attempts) {
        assert_eq!(wc.status, WcStatus::RemAccessErr, "{what}");
    }
    assert_eq!(
        pair.nb.device.stats().refused(Refusal::AccessDenied),
        attempts.len() as u64
    );
    assert_eq!(b_region.to_vec(), before, "not one byte changed");
    assert_eq!(pair.nb.state(0), QpState::Rts);
    // The QP still serves a legitimate WRITE.
    let op = WrOp::Write {
        remote_addr: again.addr(),
        rkey: again.rkey(),
    };
    pair.na.post_send(0, SendWr::new(99, op, sge));
    pair.until_completions(attempts.len() + 1, 0);
    assert_eq!(pair.wa.last().map(|wc| wc.status), Some(WcStatus::Success));
}

/// RDMA-0.9 §6.9, in both error modes: a request on a connection that is
/// not its QP's gets the invalid-CID NACK (the sender's completion says
/// REM_INV_REQ_ERR) and the QP goes on, untouched; a response naming a QP
/// of another connection is dropped without a NACK (counted; its READ
/// then fails as a lost response would, RETRY_EXC_ERR) and places nothing.
#[test]
fn requests_and_responses_on_the_wrong_connection() {
    for error_mode in [ErrorMode::VerbsCompatible, ErrorMode::CompleteInError] {
        let setup = Setup {
            qps: 2,
            error_mode,
            ..Setup::default()
        };
        let mut pair = Pair::new(setup.clone());
        let (a_region, a_mr) = pair.na.region(4096, 1, all());
        let (b_region, b_mr) = pair.nb.region(4096, 2, all());
        let (a_before, b_before) = (a_region.to_vec(), b_region.to_vec());
        // A's hostile QP: on connection 1, naming B's QP of connection 0.
        let hostile = pair.na.create_qp(&setup, None);
        let (qb0, c1) = (pair.nb.qps[0], pair.na.cids[1]);
        pair.na.connect(&setup, hostile, qb0, c1);
        let op = WrOp::Write {
            remote_addr: b_mr.addr(),
            rkey: b_mr.rkey(),
        };
        pair.na
            .device
            .post_send(hostile, SendWr::new(1, op, Node::sge(&a_mr, 0, 256)))
            .expect("posted");
        pair.until_completions(1, 0);
        assert_eq!(pair.wa[0].status, WcStatus::RemInvReqErr, "{error_mode:?}");
        assert_eq!(pair.nb.device.stats().refused(Refusal::RequestWrongCid), 1);
        // A UD SEND naming the RC QP from that connection: the same.
        let header = RdmaHeader::new(
            Rbth::new(Opcode::UdSendOnly, qb0, Sn::FIRST),
            Extensions::Datagram {
                deth: crate::wire::Deth {
                    q_key: crate::wire::QKey(0),
                    source_qp: hostile,
                },
            },
        )
        .expect("consistent");
        let now = pair.now();
        let datagram = falcon_core::api::Transaction::push(u64::MAX, crate::data::RdmaData::NONE)
            .with_header(header.to_ulp_header());
        pair.a
            .engine
            .submit(now, pair.na.connections[1], datagram)
            .expect("submitted");
        pair.settle(Duration::from_millis(5));
        assert_eq!(pair.nb.device.stats().refused(Refusal::RequestWrongCid), 2);
        assert_eq!(b_region.to_vec(), b_before);
        assert_eq!(pair.nb.state(0), QpState::Rts, "the QP goes on");
        assert_eq!(pair.nb.device.poll_async_event(), None);

        // B's hostile QP on connection 0 answers READs naming A's QP of
        // connection 1; A's reader on connection 0 names it.
        let reader = pair.na.create_qp(&setup, None);
        let liar = pair.nb.create_qp(&setup, None);
        let (c0a, c0b, qa1) = (pair.na.cids[0], pair.nb.cids[0], pair.na.qps[1]);
        pair.na.connect(&setup, reader, liar, c0a);
        pair.nb.connect(&setup, liar, qa1, c0b);
        let op = WrOp::Read {
            remote_addr: b_mr.addr(),
            rkey: b_mr.rkey(),
        };
        pair.na
            .device
            .post_send(reader, SendWr::new(2, op, Node::sge(&a_mr, 0, 1000)))
            .expect("posted");
        pair.until_completions(2, 0);
        assert_eq!(pair.wa[1].wr_id, 2);
        assert_eq!(pair.wa[1].status, WcStatus::RetryExcErr, "{error_mode:?}");
        assert_eq!(pair.na.device.stats().refused(Refusal::ResponseWrongCid), 1);
        assert_eq!(a_region.to_vec(), a_before, "nothing placed");
        // The QPs of the two connections are untouched and still work.
        assert_eq!(pair.na.state(1), QpState::Rts);
        let op = WrOp::Write {
            remote_addr: b_mr.addr_at(1000),
            rkey: b_mr.rkey(),
        };
        pair.na
            .post_send(1, SendWr::new(3, op, Node::sge(&a_mr, 0, 8)));
        pair.until_completions(3, 0);
        assert_eq!(pair.wa[2].status, WcStatus::Success);
        assert_eq!(&b_region.to_vec()[1000..1008], &a_before[..8]);
    }
}

/// A request to a QP that does not exist, and a WRITE Middle with no WRITE
/// First before it (injected raw on the connection): remote invalid
/// request, counted, no byte written; in verbs mode the responder QP of
/// the bad sequence goes to ERR with IBV_EVENT_QP_REQ_ERR.
#[test]
fn unknown_qps_and_bad_sequences_are_invalid_requests() {
    for error_mode in [ErrorMode::CompleteInError, ErrorMode::VerbsCompatible] {
        let setup = Setup {
            error_mode,
            ..Setup::default()
        };
        let mut pair = Pair::new(setup.clone());
        let (_, a_mr) = pair.na.region(4096, 1, all());
        let (b_region, b_mr) = pair.nb.region(4096, 2, all());
        let before = b_region.to_vec();
        let ghost_peer = pair.na.create_qp(&setup, None);
        let (ghost, cid) = (Qpn::truncating(0x00FF_FFFF), pair.na.cids[0]);
        pair.na.connect(&setup, ghost_peer, ghost, cid);
        let op = WrOp::Write {
            remote_addr: b_mr.addr(),
            rkey: b_mr.rkey(),
        };
        pair.na
            .device
            .post_send(ghost_peer, SendWr::new(1, op, Node::sge(&a_mr, 0, 64)))
            .expect("posted");
        pair.until_completions(1, 0);
        assert_eq!(pair.wa[0].status, WcStatus::RemInvReqErr);
        assert_eq!(pair.nb.device.stats().refused(Refusal::UnknownQp), 1);

        // A WRITE Middle, SN 1, straight into A's engine on connection 0.
        let header = RdmaHeader::new(
            Rbth::new(Opcode::WriteMiddle, pair.nb.qps[0], Sn::FIRST),
            Extensions::Write {
                reth: Reth {
                    virtual_address: b_mr.addr(),
                    r_key: b_mr.rkey(),
                    length: 16,
                },
            },
        )
        .expect("consistent");
        let data = crate::data::RdmaData::padded(crate::data::Body::Inline {
            bytes: vec![0xEE; 16].into(),
            start: 0,
            len: 16,
        });
        let now = pair.now();
        let transaction =
            falcon_core::api::Transaction::push(u64::MAX, data).with_header(header.to_ulp_header());
        pair.a
            .engine
            .submit(now, pair.na.connections[0], transaction)
            .expect("submitted");
        pair.settle(Duration::from_millis(5));
        assert_eq!(pair.nb.device.stats().refused(Refusal::InvalidRequest), 1);
        assert_eq!(b_region.to_vec(), before, "no byte written");
        // Its completion names no work of A's: stale, ignored.
        assert_eq!(pair.na.device.stats().refused(Refusal::Stale), 1);
        match error_mode {
            ErrorMode::CompleteInError => assert_eq!(pair.nb.state(0), QpState::Rts),
            ErrorMode::VerbsCompatible => {
                assert_eq!(pair.nb.state(0), QpState::Error);
                let event = pair.nb.device.poll_async_event().expect("an event");
                assert_eq!(event.kind, AsyncEventKind::QpReqErr);
            }
        }
    }
}
