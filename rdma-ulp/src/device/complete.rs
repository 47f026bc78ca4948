//! Work completions: reporting in order, and the Error state.
//!
//! Layer: RDMA ULP, under [`Device`]. Owns how finished work becomes work
//! completions: send work requests in posting order on strongly and weakly
//! ordered QPs (RDMA-0.9 §6.2: a completed message's completion is held
//! until those before it are complete) and as they finish on unordered
//! ones; receives in RMSN order likewise; and the move to ERR (verbs: the
//! failed work request completes with its error, every other one still
//! queued with `IBV_WC_WR_FLUSH_ERR`, own receives included, and an
//! asynchronous event is queued). Never loses a completion silently: one
//! that finds its CQ full overruns it, and the QP goes to ERR.

use falcon_core::api::ConnectionHandle;

use super::qp::{Qp, SendEntry};
use super::Device;
use crate::verbs::{
    AsyncEvent, AsyncEventKind, Cq, EventElement, QpState, QpType, WcFlags, WcStatus,
    WorkCompletion,
};

/// The work completion of a send work request, with `status`.
fn send_wc(qp: &Qp, entry: &SendEntry, status: WcStatus, vendor_err: u32) -> WorkCompletion {
    WorkCompletion {
        wr_id: entry.wr.wr_id,
        status,
        opcode: entry.wr.op.wc_opcode(),
        vendor_err,
        byte_len: if entry.wr.op.writes_locally() {
            entry.byte_len
        } else {
            // In range: messages are at most 2^31 bytes.
            entry.len as u32
        },
        qp_num: qp.qpn().value(),
        ..WorkCompletion::default()
    }
}

impl Device {
    /// Queues `wc` on `cq`; on overrun, raises `IBV_EVENT_CQ_ERR` (once
    /// per CQ) and marks QP slot `index` for ERR.
    pub(super) fn push_wc(&mut self, cq: Cq, index: u32, wc: WorkCompletion) {
        let Some(entry) = self.cqs.get_mut(cq.0) else {
            return;
        };
        if let Err(overrun) = entry.push(wc) {
            if overrun.first {
                self.events.push_back(AsyncEvent {
                    kind: AsyncEventKind::CqErr,
                    element: EventElement::Cq(cq),
                });
            }
            if !self.overran.contains(&index) {
                self.overran.push(index);
            }
        }
    }

    /// QPs whose completions overran their CQ go to ERR.
    pub(super) fn fail_overrun(&mut self) {
        while let Some(index) = self.overran.pop() {
            self.fail_qp(index, None, Some(AsyncEventKind::QpFatal));
        }
    }

    /// Reports the send work requests of QP slot `index` that are due
    /// (see the module doc) and retires them from its send queue.
    pub(super) fn retire_sends(&mut self, index: u32) {
        let mut due = core::mem::take(&mut self.send_scratch);
        let Some(qp) = self.qps.at_mut(index) else {
            return;
        };
        let cq = qp.info.init.send_cq;
        if qp.info.init.ordering.completes_in_order() {
            while qp.sq.front().is_some_and(SendEntry::is_complete) {
                let Some(entry) = qp.sq.pop_front() else {
                    break;
                };
                qp.sq_base += 1;
                due.push(report(qp, &entry));
            }
        } else {
            for i in 0..qp.sq.len() {
                let entry = &qp.sq[i];
                if entry.is_complete() && !entry.reported {
                    due.push(report(qp, entry));
                    qp.sq[i].reported = true;
                }
            }
            while qp.sq.front().is_some_and(|e| e.reported) {
                qp.sq.pop_front();
                qp.sq_base += 1;
            }
        }
        for (wc, ok) in due.drain(..) {
            if ok {
                self.stats.sends_ok += 1;
            } else {
                self.stats.sends_failed += 1;
            }
            if let Some(wc) = wc {
                self.push_wc(cq, index, wc);
            }
        }
        self.send_scratch = due;
    }

    /// A send posted to a QP in ERR: flushed at once.
    pub(super) fn flush_posted_send(&mut self, index: u32, entry: SendEntry) {
        let Some(qp) = self.qps.at(index) else {
            return;
        };
        let wc = send_wc(qp, &entry, WcStatus::WrFlushErr, 0);
        let cq = qp.info.init.send_cq;
        self.stats.sends_failed += 1;
        self.push_wc(cq, index, wc);
        self.fail_overrun();
    }

    /// Reports the receives of QP slot `index` that are due, in RMSN order
    /// (strong, weak) or as they complete (unordered).
    pub(super) fn retire_receives(&mut self, index: u32) {
        let mut due = core::mem::take(&mut self.recv_scratch);
        let Some(qp) = self.qps.at_mut(index) else {
            return;
        };
        let cq = qp.info.init.recv_cq;
        let in_order = qp.info.init.ordering.completes_in_order();
        let qpn = qp.qpn().value();
        let src_qp = qp.info.dest_qpn.value();
        let responder = &mut qp.responder;
        let wc_of = |message: &super::qp::RecvMessage| {
            let mut flags = WcFlags::EMPTY;
            if message.imm.is_some() {
                flags |= WcFlags::WITH_IMM;
            }
            if message.invalidated.is_some() {
                flags |= WcFlags::WITH_INV;
            }
            WorkCompletion {
                wr_id: message.wqe.wr_id,
                status: message.status,
                opcode: message.opcode,
                vendor_err: message.vendor_err,
                // In range: messages are at most 2^31 bytes.
                byte_len: message.total.unwrap_or(message.received) as u32,
                imm_data: message.imm.unwrap_or(0),
                invalidated_rkey: message.invalidated.unwrap_or(0),
                qp_num: qpn,
                src_qp,
                wc_flags: flags,
            }
        };
        if in_order {
            while responder.messages.front().is_some_and(|m| m.done) {
                let Some(message) = responder.messages.pop_front() else {
                    break;
                };
                responder.base = responder.base.next();
                due.push(wc_of(&message));
            }
        } else {
            for message in responder.messages.iter_mut() {
                if message.done && !message.reported {
                    message.reported = true;
                    due.push(wc_of(message));
                }
            }
            while responder.messages.front().is_some_and(|m| m.reported) {
                responder.messages.pop_front();
                responder.base = responder.base.next();
            }
        }
        for wc in due.drain(..) {
            self.stats.receives += 1;
            self.push_wc(cq, index, wc);
        }
        self.recv_scratch = due;
    }

    /// Moves QP slot `index` to ERR (see the module doc): `failed` (a work
    /// request's sequence number, its status and reason) completes with
    /// its error, the requests before it that are complete as they are,
    /// every other one with `IBV_WC_WR_FLUSH_ERR`; `event` is queued.
    pub(super) fn fail_qp(
        &mut self,
        index: u32,
        failed: Option<(u64, WcStatus, u32)>,
        event: Option<AsyncEventKind>,
    ) {
        let epoch = self.new_epoch();
        let mut sends = Vec::new();
        let mut receives = Vec::new();
        let Some(qp) = self.qps.at_mut(index) else {
            return;
        };
        if qp.info.state == QpState::Error {
            return;
        }
        qp.info.state = QpState::Error;
        qp.epoch = epoch;
        let mut flushing = false;
        for (i, entry) in qp.sq.iter().enumerate() {
            if entry.reported {
                continue;
            }
            let seq = qp.sq_base + i as u64;
            let (status, vendor) = match failed {
                Some((failed_seq, status, vendor)) if failed_seq == seq => {
                    flushing = true;
                    (status, vendor)
                }
                _ if !flushing && entry.is_complete() => match entry.error {
                    Some(error) => error,
                    None if entry.signaled => (WcStatus::Success, 0),
                    None => {
                        sends.push((None, true));
                        continue;
                    }
                },
                _ => {
                    flushing = true;
                    (WcStatus::WrFlushErr, 0)
                }
            };
            sends.push((Some(send_wc(qp, entry, status, vendor)), status.is_ok()));
        }
        qp.sq_base += qp.sq.len() as u64;
        qp.sq.clear();
        qp.next_wr = qp.sq_base;
        qp.requester = super::qp::Requester::new();
        let qpn = qp.qpn();
        let flush = |wr_id| WorkCompletion {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode: crate::verbs::WcOpcode::Recv,
            qp_num: qpn.value(),
            ..WorkCompletion::default()
        };
        for message in qp.responder.messages.drain(..) {
            if !message.reported {
                receives.push(flush(message.wqe.wr_id));
            }
        }
        for wr in qp.rq.drain() {
            receives.push(flush(wr.wr_id));
        }
        let (send_cq, recv_cq) = (qp.info.init.send_cq, qp.info.init.recv_cq);
        self.stats.qp_errors += 1;
        for (wc, ok) in sends {
            if ok {
                self.stats.sends_ok += 1;
            } else {
                self.stats.sends_failed += 1;
            }
            if let Some(wc) = wc {
                self.push_wc(send_cq, index, wc);
            }
        }
        for wc in receives {
            self.stats.receives += 1;
            self.push_wc(recv_cq, index, wc);
        }
        if let Some(kind) = event {
            self.events.push_back(AsyncEvent {
                kind,
                element: EventElement::Qp(qpn),
            });
        }
        // Its own overrun is moot now.
        self.overran.retain(|&i| i != index);
    }

    /// A fatal fault of `connection`: its RC QPs go to ERR, the oldest
    /// outstanding work request of each with `IBV_WC_RETRY_EXC_ERR`
    /// (RDMA-0.9 §6.8: "an error must be reported to the RDMA ULP which may
    /// be signaled to software as a connection tear-down event").
    pub(super) fn on_connection_lost(&mut self, connection: ConnectionHandle) {
        self.flow.forget(connection);
        let lost: Vec<(u32, Option<u64>)> = self
            .qps
            .indices()
            .filter_map(|index| {
                let qp = self.qps.at(index)?;
                let hit = qp.info.init.qp_type == QpType::Rc
                    && qp.connection == Some(connection)
                    && qp.info.state != QpState::Error;
                let oldest = qp
                    .sq
                    .iter()
                    .position(|e| !e.reported)
                    .map(|i| qp.sq_base + i as u64);
                hit.then_some((index, oldest))
            })
            .collect();
        for (index, oldest) in lost {
            let failed = oldest.map(|seq| (seq, WcStatus::RetryExcErr, VENDOR_CONNECTION_LOST));
            self.fail_qp(index, failed, Some(AsyncEventKind::QpFatal));
        }
    }
}

/// `vendor_err` of a work request failed because its connection died.
pub(super) const VENDOR_CONNECTION_LOST: u32 = 0x1_0000;

/// A work completion to report for `entry` (none for a successful
/// unsignalled one), and whether it succeeded.
fn report(qp: &Qp, entry: &SendEntry) -> (Option<WorkCompletion>, bool) {
    match entry.error {
        Some((status, vendor)) => (Some(send_wc(qp, entry, status, vendor)), false),
        None if entry.signaled => (Some(send_wc(qp, entry, WcStatus::Success, 0)), true),
        None => (None, true),
    }
}
