//! The verbs objects through the device: posting per QP state, object
//! lifetimes, SRQs, CQ overrun, SEND with Invalidate, and UD QPs over
//! many connections.

use super::*;
use crate::verbs::{
    AhAttr, AsyncEventKind, EventElement, PostError, SrqInitAttr, UdDest, VerbsError, WcFlags,
    WcOpcode, WcStatus, WrOp,
};
use crate::wire::QKey;
use crate::{Refusal, UD_GRH_LEN};

fn all() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

/// Posting per QP state, table-driven: sends only in RTS (and ERR, where
/// they flush at once), receives from INIT on; everything else refused with
/// `WrongState`; an SRQ's QP refuses its own receives.
#[test]
fn posting_follows_the_qp_state() {
    let setup = Setup::default();
    let mut pair = Pair::new(setup.clone());
    let node = &mut pair.na;
    let (_, mr) = node.region(64, 1, Access::LOCAL_WRITE);
    let sge = Node::sge(&mr, 0, 8);
    let qp = node.create_qp(&setup, None);
    let step = |state: QpState| match state {
        QpState::Init => QpAttr {
            state: Some(QpState::Init),
            access: Some(Access::REMOTE_WRITE),
            ..QpAttr::default()
        },
        QpState::Rtr => QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::B1024),
            dest_qpn: Some(Qpn::truncating(77)),
            cid: Some(ConnectionId::truncating(0x10)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(RnrTimeout::SHORTEST),
            ..QpAttr::default()
        },
        QpState::Rts => QpAttr {
            state: Some(QpState::Rts),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..QpAttr::default()
        },
        other => QpAttr {
            state: Some(other),
            ..QpAttr::default()
        },
    };
    let table = [
        (QpState::Reset, false, false),
        (QpState::Init, false, true),
        (QpState::Rtr, false, true),
        (QpState::Rts, true, true),
        (QpState::Error, true, true),
    ];
    for (state, send_ok, recv_ok) in table {
        if state != QpState::Reset {
            node.device.modify_qp(qp, &step(state)).expect("modify");
        }
        assert_eq!(node.device.qp_state(qp), Some(state));
        let send = node.device.post_send(qp, SendWr::new(1, WrOp::Send, sge));
        let recv = node.device.post_recv(qp, RecvWr::new(2, sge));
        assert_eq!(send.is_ok(), send_ok, "{state}: {send:?}");
        assert_eq!(recv.is_ok(), recv_ok, "{state}: {recv:?}");
        if !send_ok {
            assert_eq!(send, Err(PostError::WrongState(state)));
        }
        if !recv_ok {
            assert_eq!(recv, Err(PostError::WrongState(state)));
        }
    }
    // In ERR both flushed at once.
    let flushed: Vec<WcStatus> = node.drain().iter().map(|wc| wc.status).collect();
    assert!(flushed.contains(&WcStatus::WrFlushErr));
    // Illegal arrows are typed errors and change nothing.
    assert_eq!(
        node.device.modify_qp(qp, &step(QpState::Rts)),
        Err(VerbsError::InvalidTransition {
            from: QpState::Error,
            to: QpState::Rts
        })
    );
    assert_eq!(node.device.qp_state(qp), Some(QpState::Error));
    // An SRQ's QP takes no receive of its own.
    let srq = node
        .device
        .create_srq(
            node.pd,
            SrqInitAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .expect("SRQ");
    let with_srq = node.create_qp(&setup, Some(srq));
    node.device
        .modify_qp(with_srq, &step(QpState::Init))
        .expect("init");
    assert_eq!(
        node.device.post_recv(with_srq, RecvWr::new(3, sge)),
        Err(PostError::UsesSrq)
    );
    // Objects in use cannot go; a destroyed QP's number names nothing.
    assert_eq!(
        node.device.destroy_cq(node.cq),
        Err(VerbsError::Busy { what: "CQ" })
    );
    assert_eq!(
        node.device.dealloc_pd(node.pd),
        Err(VerbsError::Busy { what: "PD" })
    );
    assert_eq!(
        node.device.destroy_srq(srq),
        Err(VerbsError::Busy { what: "SRQ" })
    );
    node.device.destroy_qp(with_srq).expect("destroyed");
    node.device.destroy_srq(srq).expect("destroyed");
    assert_eq!(node.device.qp_state(with_srq), None);
    assert_eq!(
        node.device
            .post_send(with_srq, SendWr::new(1, WrOp::Send, sge)),
        Err(PostError::UnknownQueue)
    );
}

/// Two QPs draw their receives from one SRQ, in the order their SENDs
/// come; the limit event fires once when the SRQ runs low; with none
/// left the SENDs wait (RNR) until more are posted.
#[test]
fn a_shared_receive_queue_serves_several_qps() {
    let setup = Setup::default();
    let mut pair = Pair::new(Setup {
        qps: 2,
        ..setup.clone()
    });
    let (a_region, a_mr) = pair.na.region(8192, 1, Access::LOCAL_WRITE);
    let (b_region, b_mr) = pair.nb.region(8192, 2, Access::LOCAL_WRITE);
    let srq = pair
        .nb
        .device
        .create_srq(
            pair.nb.pd,
            SrqInitAttr {
                max_wr: 16,
                max_sge: 1,
                srq_limit: 2,
            },
        )
        .expect("SRQ");
    // Both of B's QPs re-made on the SRQ.
    for i in 0..2 {
        let qp = pair.nb.create_qp(&setup, Some(srq));
        let (cid, peer) = (pair.nb.cids[i], pair.na.qps[i]);
        pair.nb.connect(&setup, qp, peer, cid);
        let old = pair.nb.qps[i];
        pair.nb.device.destroy_qp(old).expect("destroyed");
        pair.nb.qps[i] = qp;
        let (own, peer) = (pair.na.qps[i], qp);
        let reset = QpAttr {
            state: Some(QpState::Reset),
            ..QpAttr::default()
        };
        pair.na.device.modify_qp(own, &reset).expect("reset");
        let cid = pair.na.cids[i];
        pair.na.connect(&setup, own, peer, cid);
    }
    for i in 0..4u64 {
        pair.nb
            .device
            .post_srq_recv(srq, RecvWr::new(i, Node::sge(&b_mr, i * 1000, 1000)))
            .expect("posted");
    }
    // QP 0, then QP 1, then QP 0 ...: six SENDs, four receives.
    for i in 0..6u64 {
        let sge = Node::sge(&a_mr, i * 1000, 1000);
        pair.na
            .post_send((i % 2) as usize, SendWr::new(i, WrOp::Send, sge));
        pair.settle(Duration::from_micros(200));
    }
    assert_eq!(pair.wb.len(), 4);
    let consumed: Vec<(u64, u32)> = pair.wb.iter().map(|wc| (wc.wr_id, wc.qp_num)).collect();
    let qpns = [pair.nb.qps[0].value(), pair.nb.qps[1].value()];
    let qpn = |i: usize| qpns[i];
    assert_eq!(
        consumed,
        [(0, qpn(0)), (1, qpn(1)), (2, qpn(0)), (3, qpn(1))]
    );
    assert_eq!(&b_region.to_vec()[..4000], &a_region.to_vec()[..4000]);
    let event = pair.nb.device.poll_async_event().expect("the limit event");
    assert_eq!(event.kind, AsyncEventKind::SrqLimitReached);
    assert_eq!(event.element, EventElement::Srq(srq));
    assert_eq!(pair.nb.device.poll_async_event(), None, "once");
    assert!(pair.nb.device.stats().refused(Refusal::NoReceive) > 0);
    for i in 4..6u64 {
        pair.nb
            .device
            .post_srq_recv(srq, RecvWr::new(i, Node::sge(&b_mr, i * 1000, 1000)))
            .expect("posted");
    }
    pair.until_completions(6, 6);
    assert_all_ok(&pair.wb);
    // The two waiting SENDs (4 on QP 0, 5 on QP 1) took the new receives
    // in the order their retries came.
    let (a, b) = (a_region.to_vec(), b_region.to_vec());
    for wc in &pair.wb[4..] {
        let sent = if wc.qp_num == qpn(0) { 4 } else { 5 };
        let at = wc.wr_id as usize * 1000;
        assert_eq!(b[at..at + 1000], a[sent * 1000..sent * 1000 + 1000]);
    }
}

/// A completion that finds its CQ full overruns it: IBV_EVENT_CQ_ERR once,
/// and the QP that completed into it goes to ERR (IBV_EVENT_QP_FATAL).
#[test]
fn a_cq_overrun_fails_the_qp() {
    let mut pair = Pair::new(Setup {
        cq_depth: 4,
        ..Setup::default()
    });
    pair.drain = false;
    let (_, a_mr) = pair.na.region(64, 1, Access::LOCAL_WRITE);
    let (_, b_mr) = pair.nb.region(64, 2, all());
    for i in 0..8u64 {
        let op = WrOp::Write {
            remote_addr: b_mr.addr(),
            rkey: b_mr.rkey(),
        };
        pair.na
            .post_send(0, SendWr::new(i, op, Node::sge(&a_mr, 0, 64)));
    }
    pair.settle(Duration::from_millis(5));
    assert_eq!(pair.na.device.cq_state(pair.na.cq), Some((4, true)));
    let event = pair.na.device.poll_async_event().expect("CQ error");
    assert_eq!(event.kind, AsyncEventKind::CqErr);
    assert_eq!(event.element, EventElement::Cq(pair.na.cq));
    let event = pair.na.device.poll_async_event().expect("QP fatal");
    assert_eq!(event.kind, AsyncEventKind::QpFatal);
    assert_eq!(pair.na.state(0), QpState::Error);
    let kept: Vec<u64> = pair.na.drain().iter().map(|wc| wc.wr_id).collect();
    assert_eq!(kept, [0, 1, 2, 3], "the first four were kept");
}

/// SEND with Invalidate: the receiver's completion names the rkey, the
/// region is invalidated, a WRITE through that rkey then fails with
/// REM_ACCESS_ERR and writes nothing; an rkey that is not the receiver's
/// fails the SEND (REM_INV_REQ_ERR).
#[test]
fn send_with_invalidate_retires_the_rkey() {
    let mut pair = Pair::new(Setup {
        error_mode: ErrorMode::CompleteInError,
        ..Setup::default()
    });
    let (_, a_mr) = pair.na.region(256, 1, Access::LOCAL_WRITE);
    let (b_region, b_mr) = pair.nb.region(256, 2, all());
    let (_, b_recv) = pair.nb.region(256, 3, Access::LOCAL_WRITE);
    pair.nb
        .post_recv(0, RecvWr::new(10, Node::sge(&b_recv, 0, 128)));
    pair.nb
        .post_recv(0, RecvWr::new(11, Node::sge(&b_recv, 128, 128)));
    let inv = WrOp::SendWithInv(b_mr.rkey());
    pair.na
        .post_send(0, SendWr::new(1, inv, Node::sge(&a_mr, 0, 16)));
    pair.until_completions(1, 1);
    let wc = pair.wb[0];
    assert_eq!(
        (wc.status, wc.wc_flags),
        (WcStatus::Success, WcFlags::WITH_INV)
    );
    assert_eq!(wc.invalidated_rkey, b_mr.rkey().0);
    assert!(!pair.nb.device.mr_valid(&b_mr));
    let before = b_region.to_vec();
    let write = WrOp::Write {
        remote_addr: b_mr.addr(),
        rkey: b_mr.rkey(),
    };
    pair.na
        .post_send(0, SendWr::new(2, write, Node::sge(&a_mr, 0, 16)));
    pair.until_completions(2, 1);
    assert_eq!(pair.wa[1].status, WcStatus::RemAccessErr);
    assert_eq!(b_region.to_vec(), before);
    // Invalidating a key that is not (or no longer) valid fails the SEND.
    pair.na
        .post_send(0, SendWr::new(3, inv, Node::sge(&a_mr, 0, 16)));
    pair.until_completions(3, 2);
    assert_eq!(pair.wa[2].status, WcStatus::RemInvReqErr);
    assert_eq!(pair.wb[1].status, WcStatus::RemInvReqErr);
}

/// UD (RDMA-0.9 §6.6.3): two UD QPs on each side over two connections,
/// address handles naming the connection (M:N): every datagram lands after
/// the GRH bytes of the named QP's next receive, its completion carrying
/// the sender's QP and immediate data; a wrong Q_Key and a missing
/// receive drop the datagram (counted; the sender's completes, as in
/// InfiniBand); more than one MTU is refused at post time.
#[test]
fn ud_datagrams_over_many_connections() {
    let mut pair = Pair::new(Setup {
        qps: 2,
        ..Setup::default()
    });
    let ud = |node: &mut Node, qkey: u32| -> Qpn {
        let init = QpInitAttr {
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            ..QpInitAttr::new(QpType::Ud, node.cq)
        };
        let qp = node.device.create_qp(node.pd, init).expect("UD QP");
        for attr in [
            QpAttr {
                state: Some(QpState::Init),
                qkey: Some(QKey(qkey)),
                ..QpAttr::default()
            },
            QpAttr {
                state: Some(QpState::Rtr),
                path_mtu: Some(Mtu::B1024),
                ..QpAttr::default()
            },
            QpAttr {
                state: Some(QpState::Rts),
                ..QpAttr::default()
            },
        ] {
            node.device.modify_qp(qp, &attr).expect("modify");
        }
        qp
    };
    let senders = [ud(&mut pair.na, 0x1111), ud(&mut pair.na, 0x1111)];
    let receivers = [ud(&mut pair.nb, 0x1111), ud(&mut pair.nb, 0x2222)];
    let ahs: Vec<_> = (0..2)
        .map(|i| {
            let attr = AhAttr {
                cid: pair.na.cids[i],
            };
            pair.na.device.create_ah(pair.na.pd, attr).expect("AH")
        })
        .collect();
    let (a_region, a_mr) = pair.na.region(8192, 1, Access::LOCAL_WRITE);
    let (b_region, b_mr) = pair.nb.region(8192, 2, Access::LOCAL_WRITE);
    for (r, &receiver) in receivers.iter().enumerate() {
        for k in 0..3u64 {
            let at = (r as u64 * 3 + k) * 1100;
            pair.nb
                .device
                .post_recv(receiver, RecvWr::new(at, Node::sge(&b_mr, at, 1100)))
                .expect("posted");
        }
    }
    // (sender, AH, receiver, Q_Key, length, immediate)
    let sends = [
        (0, 0, 0, 0x1111, 1000, None),
        (0, 1, 1, 0x2222, 17, Some(5)),
        (1, 1, 0, 0x1111, 1024, None),
        (1, 0, 1, 0x2222, 1, Some(6)),
        // Wrong Q_Key: dropped.
        (0, 0, 1, 0x1111, 64, None),
    ];
    for (i, &(s, ah, r, qkey, len, imm)) in sends.iter().enumerate() {
        let op = match imm {
            Some(data) => WrOp::SendWithImm(data),
            None => WrOp::Send,
        };
        let dest = UdDest {
            ah: ahs[ah],
            remote_qpn: receivers[r],
            remote_qkey: QKey(qkey),
        };
        let wr = SendWr::new(i as u64, op, Node::sge(&a_mr, i as u64 * 1024, len)).to(dest);
        pair.na.device.post_send(senders[s], wr).expect("posted");
    }
    pair.until_completions(sends.len(), 4);
    assert_all_ok(&pair.wa);
    assert_all_ok(&pair.wb);
    let a = a_region.to_vec();
    let b = b_region.to_vec();
    let mut next = [0u64, 3];
    for (i, &(s, _, r, _, len, imm)) in sends.iter().enumerate().take(4) {
        let at = next[r] * 1100;
        next[r] += 1;
        let wc = pair
            .wb
            .iter()
            .find(|wc| wc.wr_id == at)
            .expect("a receive completion");
        assert_eq!(wc.qp_num, receivers[r].value());
        assert_eq!(wc.src_qp, senders[s].value(), "datagram {i}");
        assert_eq!(wc.byte_len as usize, UD_GRH_LEN + len as usize);
        assert_eq!(wc.opcode, WcOpcode::Recv);
        assert_eq!(imm.is_some(), wc.wc_flags.contains(WcFlags::WITH_IMM));
        assert_eq!(wc.imm_data, imm.unwrap_or(0));
        let data = &b[at as usize + UD_GRH_LEN..at as usize + UD_GRH_LEN + len as usize];
        assert_eq!(data, &a[i * 1024..i * 1024 + len as usize], "datagram {i}");
    }
    assert_eq!(pair.nb.device.stats().refused(Refusal::QkeyMismatch), 1);
    // Longer than the MTU: refused at post time.
    let dest = UdDest {
        ah: ahs[0],
        remote_qpn: receivers[0],
        remote_qkey: QKey(0x1111),
    };
    let wr = SendWr::new(9, WrOp::Send, Node::sge(&a_mr, 0, 1025)).to(dest);
    assert_eq!(
        pair.na.device.post_send(senders[0], wr),
        Err(PostError::TooLong {
            len: 1025,
            max: 1024
        })
    );
    // No receive left on receiver 0 after two more: dropped, counted.
    for i in 0..3u64 {
        let wr = SendWr::new(20 + i, WrOp::Send, Node::sge(&a_mr, 0, 10)).to(dest);
        pair.na.device.post_send(senders[0], wr).expect("posted");
    }
    pair.until_completions(sends.len() + 3, 5);
    assert_all_ok(&pair.wa);
    assert_eq!(pair.nb.device.stats().refused(Refusal::UdDropped), 2);
}
