//! The error modes (RDMA-0.9 §6.3), the ordering modes (§6.2, §6.4) and
//! a connection fault.

use super::*;
use crate::verbs::{AsyncEventKind, EventElement, PostError, VerbsError, WcOpcode, WcStatus, WrOp};
use crate::wire::RKey;

fn all() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

/// Verbs-compatible: a WRITE with a wrong rkey completes with
/// REM_ACCESS_ERR, the work requests after it with WR_FLUSH_ERR, the
/// requester QP goes to ERR with IBV_EVENT_QP_FATAL; the responder QP goes
/// to ERR with IBV_EVENT_QP_ACCESS_ERR and flushes its receives; a post to
/// a QP in ERR completes at once with WR_FLUSH_ERR; the bytes the failed
/// and flushed requests name are untouched.
#[test]
fn verbs_mode_fails_the_qp_flushes_the_rest_and_raises_an_event() {
    let mut pair = Pair::new(Setup::default());
    let (_, a_mr) = pair.na.region(4096, 1, Access::LOCAL_WRITE);
    let (b_region, b_mr) = pair.nb.region(8192, 2, all());
    let (_, b_recv) = pair.nb.region(4096, 3, Access::LOCAL_WRITE);
    let before = b_region.to_vec();
    pair.nb
        .post_recv(0, RecvWr::new(100, Node::sge(&b_recv, 0, 4096)));
    pair.nb
        .post_recv(0, RecvWr::new(101, Node::sge(&b_recv, 0, 4096)));
    let write = |offset: u64, rkey: RKey| WrOp::Write {
        remote_addr: b_mr.addr_at(offset),
        rkey,
    };
    let sge = Node::sge(&a_mr, 0, 2048);
    pair.na
        .post_send(0, SendWr::new(1, write(0, b_mr.rkey()), sge));
    pair.na
        .post_send(0, SendWr::new(2, write(2048, RKey(0x0BAD_0000)), sge));
    pair.na
        .post_send(0, SendWr::new(3, write(4096, b_mr.rkey()), sge));
    pair.na.post_send(0, SendWr::new(4, WrOp::Send, sge));
    pair.until_completions(4, 2);
    let (wa, wb) = pair.take();
    let got: Vec<(u64, WcStatus)> = wa.iter().map(|wc| (wc.wr_id, wc.status)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (2, WcStatus::RemAccessErr),
            (3, WcStatus::WrFlushErr),
            (4, WcStatus::WrFlushErr),
        ]
    );
    assert_eq!(pair.na.state(0), QpState::Error);
    assert_eq!(pair.nb.state(0), QpState::Error);
    let flushed: Vec<(u64, WcStatus)> = wb.iter().map(|wc| (wc.wr_id, wc.status)).collect();
    assert_eq!(
        flushed,
        [(100, WcStatus::WrFlushErr), (101, WcStatus::WrFlushErr)]
    );
    let event = pair.na.device.poll_async_event().expect("an event");
    assert_eq!(event.kind, AsyncEventKind::QpFatal);
    assert_eq!(event.element, EventElement::Qp(pair.na.qps[0]));
    let event = pair.nb.device.poll_async_event().expect("an event");
    assert_eq!(event.kind, AsyncEventKind::QpAccessErr);
    assert_eq!(event.element, EventElement::Qp(pair.nb.qps[0]));
    // Only WRITE 1 landed.
    let mut expected = before.clone();
    expected[..2048].copy_from_slice(&pattern(1, 2048));
    assert_eq!(b_region.to_vec(), expected);
    // Posting in ERR: accepted, flushed at once.
    pair.na.post_send(0, SendWr::new(5, WrOp::Send, sge));
    pair.na.post_recv(0, RecvWr::new(6, sge));
    let wcs = pair.na.drain();
    let got: Vec<(u64, WcStatus, WcOpcode)> = wcs
        .iter()
        .map(|wc| (wc.wr_id, wc.status, wc.opcode))
        .collect();
    assert_eq!(
        got,
        [
            (5, WcStatus::WrFlushErr, WcOpcode::Send),
            (6, WcStatus::WrFlushErr, WcOpcode::Recv)
        ]
    );
    // Back to RESET and up again, once the requests still in Falcon are
    // answered (a reset QP's SN starts at 1 again, RDMA-0.9 §8.2): the QP
    // works anew once both ends are.
    pair.settle(Duration::from_millis(5));
    for node in [&mut pair.na, &mut pair.nb] {
        let qp = node.qps[0];
        let reset = QpAttr {
            state: Some(QpState::Reset),
            ..QpAttr::default()
        };
        node.device.modify_qp(qp, &reset).expect("to RESET");
    }
    let setup = Setup::default();
    let (qa, qb) = (pair.na.qps[0], pair.nb.qps[0]);
    let (ca, cb) = (pair.na.cids[0], pair.nb.cids[0]);
    pair.na.connect(&setup, qa, qb, ca);
    pair.nb.connect(&setup, qb, qa, cb);
    pair.na
        .post_send(0, SendWr::new(7, write(4096, b_mr.rkey()), sge));
    pair.until_completions(1, 0);
    assert_eq!(
        (pair.wa[0].wr_id, pair.wa[0].status),
        (7, WcStatus::Success)
    );
    assert_eq!(&b_region.to_vec()[4096..6144], &pattern(1, 2048)[..]);
}

/// Complete-in-error: each failed operation completes in error and the QP
/// goes on: a WRITE and a READ refused for their keys, a SEND longer than
/// its receive (REM_INV_REQ_ERR at the requester, LOC_LEN_ERR at the
/// responder, the next SEND takes the next receive), an atomic refused;
/// the work between them succeeds and no event is raised.
#[test]
fn complete_in_error_mode_fails_the_operation_and_carries_on() {
    for ordering in [QpOrdering::Strong, QpOrdering::Weak] {
        let mut pair = Pair::new(Setup {
            error_mode: ErrorMode::CompleteInError,
            ordering,
            ..Setup::default()
        });
        let (a_region, a_mr) = pair.na.region(8192, 1, Access::LOCAL_WRITE);
        let (b_region, b_mr) = pair.nb.region(8192, 2, all());
        let (b_recv, b_recv_mr) = pair.nb.region(8192, 3, Access::LOCAL_WRITE);
        let b_before = b_region.to_vec();
        pair.nb
            .post_recv(0, RecvWr::new(100, Node::sge(&b_recv_mr, 0, 1000)));
        pair.nb
            .post_recv(0, RecvWr::new(101, Node::sge(&b_recv_mr, 4096, 4096)));
        let rkey = b_mr.rkey();
        let bad = RKey(rkey.0 ^ 0x100);
        let ops = [
            (
                1,
                WrOp::Write {
                    remote_addr: b_mr.addr(),
                    rkey: bad,
                },
                2000,
            ),
            (
                2,
                WrOp::Write {
                    remote_addr: b_mr.addr(),
                    rkey,
                },
                2000,
            ),
            (
                3,
                WrOp::Read {
                    remote_addr: b_mr.addr_at(8000),
                    rkey,
                },
                1000,
            ),
            (
                4,
                WrOp::Read {
                    remote_addr: b_mr.addr_at(2000),
                    rkey,
                },
                1000,
            ),
            (5, WrOp::Send, 3000),
            (6, WrOp::Send, 3000),
            (
                7,
                WrOp::FetchAdd {
                    remote_addr: b_mr.addr_at(8192),
                    rkey,
                    add: 1,
                },
                8,
            ),
            (
                8,
                WrOp::Write {
                    remote_addr: b_mr.addr_at(6000),
                    rkey,
                },
                100,
            ),
        ];
        for (id, op, len) in ops {
            let offset = if matches!(op, WrOp::Read { .. }) {
                4096
            } else {
                0
            };
            pair.na
                .post_send(0, SendWr::new(id, op, Node::sge(&a_mr, offset, len)));
        }
        pair.until_completions(8, 2);
        let (wa, wb) = pair.take();
        let got: Vec<(u64, WcStatus)> = wa.iter().map(|wc| (wc.wr_id, wc.status)).collect();
        assert_eq!(
            got,
            [
                (1, WcStatus::RemAccessErr),
                (2, WcStatus::Success),
                (3, WcStatus::RemAccessErr),
                (4, WcStatus::Success),
                (5, WcStatus::RemInvReqErr),
                (6, WcStatus::Success),
                (7, WcStatus::RemAccessErr),
                (8, WcStatus::Success),
            ],
            "{ordering:?}"
        );
        let got: Vec<(u64, WcStatus, u32)> = wb
            .iter()
            .map(|wc| (wc.wr_id, wc.status, wc.byte_len))
            .collect();
        assert_eq!((got[0].0, got[0].1), (100, WcStatus::LocLenErr));
        assert_eq!(
            (got[1].0, got[1].1, got[1].2),
            (101, WcStatus::Success, 3000)
        );
        assert_eq!(&b_recv.to_vec()[4096..7096], &pattern(1, 3000)[..]);
        let mut expected = b_before.clone();
        expected[..2000].copy_from_slice(&pattern(1, 2000));
        expected[6000..6100].copy_from_slice(&pattern(1, 100));
        assert_eq!(b_region.to_vec(), expected, "{ordering:?}");
        assert_eq!(&a_region.to_vec()[4096..5096], &b_before[2000..3000]);
        assert_eq!(pair.na.state(0), QpState::Rts);
        assert_eq!(pair.nb.state(0), QpState::Rts);
        assert_eq!(pair.na.device.poll_async_event(), None);
        assert_eq!(pair.nb.device.poll_async_event(), None);
    }
}

/// Weak ordering on an unordered connection, 5 % loss and reordering:
/// SEND packets land out of order (counted), yet the requester's and the
/// responder's completions come in posting order, and every byte is
/// right. WRITE with immediate completes after its data.
#[test]
fn weak_ordering_places_out_of_order_and_completes_in_order() {
    let mut out_of_order = 0;
    // Seed 1 reorders a WRITE with immediate's first packet behind its
    // second.
    for seed in [1, 11, 12] {
        let mut pair = Pair::new(Setup {
            ordering: QpOrdering::Weak,
            faults: lossy(5),
            seed,
            ..Setup::default()
        });
        let mut checks = Vec::new();
        let mut receives = Vec::new();
        for m in 0..24u64 {
            let len = 500 + (m as usize * 1777) % 9000;
            let (a_region, a_mr) = pair.na.region(len, m, Access::LOCAL_WRITE);
            let (b_region, b_mr) = pair.nb.region(len, m + 1000, all());
            let sge = Node::sge(&a_mr, 0, len as u32);
            let op = match m % 3 {
                0 => WrOp::Send,
                1 => WrOp::Write {
                    remote_addr: b_mr.addr(),
                    rkey: b_mr.rkey(),
                },
                _ => WrOp::WriteWithImm {
                    remote_addr: b_mr.addr(),
                    rkey: b_mr.rkey(),
                    imm: m as u32,
                },
            };
            if m % 3 != 1 {
                pair.nb
                    .post_recv(0, RecvWr::new(m, Node::sge(&b_mr, 0, len as u32)));
                receives.push((m, len, m % 3 == 2));
            }
            pair.na.post_send(0, SendWr::new(m, op, sge));
            checks.push((b_region, a_region.to_vec()));
        }
        pair.until_completions(24, receives.len());
        let (wa, wb) = pair.take();
        assert_all_ok(&wa);
        assert_all_ok(&wb);
        let ids: Vec<u64> = wa.iter().map(|wc| wc.wr_id).collect();
        assert_eq!(ids, (0..24).collect::<Vec<_>>(), "requester in order");
        let got: Vec<(u64, usize, bool)> = wb
            .iter()
            .map(|wc| {
                (
                    wc.wr_id,
                    wc.byte_len as usize,
                    wc.opcode == WcOpcode::RecvRdmaWithImm,
                )
            })
            .collect();
        assert_eq!(got, receives, "responder in order, WRITE-imm lengths whole");
        for (region, expected) in checks {
            assert!(region.to_vec() == expected, "bytes");
        }
        out_of_order += pair.nb.device.stats().placed_out_of_order;
    }
    assert!(out_of_order > 0, "the loss reordered some placements");
}

/// Unordered mode's limits (RDMA-0.9 §6.4): complete-in-error only, SENDs
/// of one MTU, no WRITE with immediate, refused at create or post time
/// with a typed error; within them it moves data like the others.
#[test]
fn unordered_mode_limits_and_transfers() {
    let mut device = Device::default();
    let pd = device.alloc_pd().expect("PD");
    let cq = device.create_cq(16).expect("CQ");
    let init = QpInitAttr {
        ordering: QpOrdering::Unordered,
        ..QpInitAttr::new(QpType::Rc, cq)
    };
    assert!(matches!(
        device.create_qp(pd, init),
        Err(VerbsError::InvalidAttribute {
            name: "error_mode",
            ..
        })
    ));
    let mut pair = Pair::new(Setup {
        ordering: QpOrdering::Unordered,
        error_mode: ErrorMode::CompleteInError,
        ..Setup::default()
    });
    let (_, a_mr) = pair.na.region(4096, 1, Access::LOCAL_WRITE);
    let (_, b_mr) = pair.nb.region(4096, 2, all());
    let qp = pair.na.qps[0];
    let long = SendWr::new(1, WrOp::Send, Node::sge(&a_mr, 0, 1025));
    assert_eq!(
        pair.na.device.post_send(qp, long),
        Err(PostError::TooLong {
            len: 1025,
            max: 1024
        })
    );
    let imm = WrOp::WriteWithImm {
        remote_addr: b_mr.addr(),
        rkey: b_mr.rkey(),
        imm: 1,
    };
    assert!(matches!(
        pair.na
            .device
            .post_send(qp, SendWr::new(2, imm, Node::sge(&a_mr, 0, 8))),
        Err(PostError::Unsupported { .. })
    ));
    // One MTU is fine.
    pair.nb
        .post_recv(0, RecvWr::new(9, Node::sge(&b_mr, 0, 1024)));
    pair.na
        .post_send(0, SendWr::new(3, WrOp::Send, Node::sge(&a_mr, 0, 1024)));
    pair.until_completions(1, 1);
    assert_all_ok(&pair.wa);
    assert_all_ok(&pair.wb);
    // Multi-MTU WRITE and READ over four QPs, with loss.
    super::ops::bulk(1, 5, QpOrdering::Unordered);
}

/// A connection that dies (the link loses everything, Falcon gives up):
/// its work requests fail with RETRY_EXC_ERR; in verbs-compatible mode the
/// first failure moves the QP to ERR (the next flushes); in
/// complete-in-error mode each fails alone and the connection's fatal
/// fault moves the QP to ERR. Either way IBV_EVENT_QP_FATAL is raised.
#[test]
fn a_connection_fault_moves_its_qps_to_err() {
    for error_mode in [ErrorMode::VerbsCompatible, ErrorMode::CompleteInError] {
        let mut pair = Pair::new(Setup {
            error_mode,
            delivery: Some(DeliveryConfig {
                max_retransmit_attempts: 2,
                ..DeliveryConfig::default()
            }),
            ..Setup::default()
        });
        let (_, a_mr) = pair.na.region(4096, 1, Access::LOCAL_WRITE);
        let (_, b_mr) = pair.nb.region(4096, 2, all());
        let write = WrOp::Write {
            remote_addr: b_mr.addr(),
            rkey: b_mr.rkey(),
        };
        for id in [1, 2] {
            pair.na
                .post_send(0, SendWr::new(id, write, Node::sge(&a_mr, 0, 4096)));
        }
        pair.step();
        let dead = falcon_core::testing::Faults {
            loss_ppm: 1_000_000,
            ..falcon_core::testing::Faults::default()
        };
        pair.a.port.faults = dead;
        pair.b.port.faults = dead;
        pair.run_until(Duration::from_secs(5), |p| {
            p.wa.len() >= 2 && p.na.state(0) == QpState::Error
        });
        let got: Vec<(u64, WcStatus)> = pair.wa.iter().map(|wc| (wc.wr_id, wc.status)).collect();
        let second = match error_mode {
            ErrorMode::VerbsCompatible => WcStatus::WrFlushErr,
            ErrorMode::CompleteInError => WcStatus::RetryExcErr,
        };
        assert_eq!(
            got,
            [(1, WcStatus::RetryExcErr), (2, second)],
            "{error_mode:?}"
        );
        if error_mode == ErrorMode::CompleteInError {
            assert!(pair.na.device.stats().connection_faults > 0);
        }
        let event = pair.na.device.poll_async_event().expect("an event");
        assert_eq!(event.kind, AsyncEventKind::QpFatal);
    }
}
