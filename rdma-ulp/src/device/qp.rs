//! The device's queue pair contexts and the table that names them by QPN.
//!
//! Layer: RDMA ULP, state under [`Device`](super::Device). Owns [`Qp`]
//! (the QP context: attributes, the Falcon connection, the send queue
//! with each work request's progress, the receive queue and the
//! responder's message state) and [`QpTable`]. Plain state: the requester
//! (`requester.rs`) and responder (`responder.rs`) change it.
//!
//! # QP numbers
//!
//! A QPN is `generation << 16 | slot` (24 bits): 65,536 QPs per device,
//! and a destroyed QP's number names no successor for 255 reuses of its
//! slot. Generations start at 1, so no QPN is 0 or 1 (InfiniBand's SMI
//! and GSI).
//!
//! # Epochs
//!
//! A QP's epoch changes when it goes to RESET or ERR: work in flight from
//! before (Falcon transactions, which complete whatever the QP does) is
//! recognised as stale when it completes and touches nothing.

use std::collections::VecDeque;
use std::sync::Arc;

use falcon_core::api::ConnectionHandle;

use crate::segment::ReadCursor;
use crate::verbs::srq::ReceiveQueue;
use crate::verbs::{QpInfo, RecvWr, SendWr, WcOpcode, WcStatus};
use crate::wire::{Qpn, Rmsn, Sn};

/// Slots of the QP table (the low 16 bits of a QPN).
pub(crate) const QP_SLOT_BITS: u32 = 16;
const QP_SLOT_MASK: u32 = (1 << QP_SLOT_BITS) - 1;

/// A send work request and its progress.
#[derive(Debug)]
pub(crate) struct SendEntry {
    pub(crate) wr: SendWr,
    /// Message bytes.
    pub(crate) len: u64,
    /// The data, copied at post time (`IBV_SEND_INLINE`).
    pub(crate) inline: Option<Arc<[u8]>>,
    /// A work completion is due on success.
    pub(crate) signaled: bool,
    /// Its local checks passed and its first piece may go.
    pub(crate) started: bool,
    /// Where the next piece starts: message offset (SEND, WRITE).
    pub(crate) offset: u64,
    /// Where the next READ piece starts.
    pub(crate) read: ReadCursor,
    /// Every piece is submitted, or no more will be (it failed).
    pub(crate) submitted: bool,
    /// Of those at least one went (a SEND's RMSN is then taken).
    pub(crate) any_submitted: bool,
    /// Pieces in Falcon.
    pub(crate) outstanding: u32,
    /// The first error, with our reason code.
    pub(crate) error: Option<(WcStatus, u32)>,
    /// READ and atomics: bytes that landed.
    pub(crate) byte_len: u32,
    /// A UD send's connection.
    pub(crate) connection: Option<ConnectionHandle>,
    /// Its completion was reported (or it is unsignalled and done).
    pub(crate) reported: bool,
}

impl SendEntry {
    pub(crate) fn new(wr: SendWr, signaled: bool, inline: Option<Arc<[u8]>>) -> SendEntry {
        SendEntry {
            len: wr.sg_list.total_len(),
            wr,
            inline,
            signaled,
            started: false,
            offset: 0,
            read: ReadCursor::default(),
            submitted: false,
            any_submitted: false,
            outstanding: 0,
            error: None,
            byte_len: 0,
            connection: None,
            reported: false,
        }
    }

    /// Every piece done (or failed) and none in Falcon.
    pub(crate) fn is_complete(&self) -> bool {
        self.submitted && self.outstanding == 0
    }
}

/// A receive being filled: the message of one RMSN (RDMA-0.9 §8.3.2: a
/// SEND's or WRITE with immediate's RMSN names the receive it consumes).
#[derive(Debug)]
pub(crate) struct RecvMessage {
    pub(crate) wqe: RecvWr,
    /// Bytes placed.
    pub(crate) received: u64,
    /// Known from its last packet.
    pub(crate) total: Option<u64>,
    pub(crate) opcode: WcOpcode,
    pub(crate) status: WcStatus,
    pub(crate) vendor_err: u32,
    pub(crate) imm: Option<u32>,
    pub(crate) invalidated: Option<u32>,
    /// Complete (all its bytes, or failed): its completion may go.
    pub(crate) done: bool,
    /// Its completion went (unordered QPs report out of order).
    pub(crate) reported: bool,
}

impl RecvMessage {
    pub(crate) fn new(wqe: RecvWr) -> RecvMessage {
        RecvMessage {
            wqe,
            received: 0,
            total: None,
            opcode: WcOpcode::Recv,
            status: WcStatus::Success,
            vendor_err: 0,
            imm: None,
            invalidated: None,
            done: false,
            reported: false,
        }
    }
}

/// The responder's state of a QP.
#[derive(Debug)]
pub(crate) struct Responder {
    /// Strong ordering: the SN the next request must carry.
    pub(crate) expected_sn: Sn,
    /// Strong ordering: the RMSN of the next READ or atomic.
    pub(crate) expected_read_rmsn: Rmsn,
    /// The RMSN of `messages[0]`.
    pub(crate) base: Rmsn,
    /// Messages with their receives, from `base`, oldest first; done ones
    /// leave from the front once reported.
    pub(crate) messages: VecDeque<RecvMessage>,
    /// Strong ordering: a SEND message is open (First seen, Last not).
    pub(crate) send_open: Option<Rmsn>,
    /// Strong ordering: a WRITE message is open.
    pub(crate) write_open: bool,
    /// Bytes of WRITE packets since the last WRITE First or Only: a WRITE
    /// with immediate's `byte_len`.
    pub(crate) write_bytes: u64,
    /// The last SEND message that failed: its later packets are refused
    /// alike, and in strong ordering the next message may start while it
    /// is still open.
    pub(crate) last_failed: Option<Rmsn>,
    /// Strong ordering: the request this QP RNR-NACKed, awaited again;
    /// every later request is RNR-NACKed until it is taken (Falcon-0.9
    /// §8.5.3.4: on an ordered connection the requests behind an RNR
    /// "continue to be RNR NACKed until the ULP accepts" it; the engine
    /// holds those not yet delivered, the ULP NACKs those it holds).
    pub(crate) rnr_hold: Option<Sn>,
}

impl Responder {
    pub(crate) fn new() -> Responder {
        Responder {
            expected_sn: Sn::FIRST,
            expected_read_rmsn: Rmsn::FIRST,
            base: Rmsn::FIRST,
            messages: VecDeque::new(),
            send_open: None,
            write_open: false,
            write_bytes: 0,
            last_failed: None,
            rnr_hold: None,
        }
    }
}

/// The requester's counters of a QP (RDMA-0.9 §8.2, §8.3.2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requester {
    /// The SN of the next request packet (the first is 1).
    pub(crate) next_sn: Sn,
    /// SEND and WRITE with immediate messages.
    pub(crate) rmsn_send: Rmsn,
    /// READ and atomic request packets.
    pub(crate) rmsn_read: Rmsn,
    /// Pieces in Falcon.
    pub(crate) pieces_out: u32,
    /// Of them, pulls (READ and atomic requests).
    pub(crate) pulls_out: u32,
    /// Weak ordering: nothing goes until every piece in Falcon completed
    /// (after a WRITE with immediate's last packet).
    pub(crate) fence: bool,
}

impl Requester {
    pub(crate) fn new() -> Requester {
        Requester {
            next_sn: Sn::FIRST,
            rmsn_send: Rmsn::FIRST,
            rmsn_read: Rmsn::FIRST,
            pieces_out: 0,
            pulls_out: 0,
            fence: false,
        }
    }
}

/// A QP context (see the module doc).
#[derive(Debug)]
pub(crate) struct Qp {
    pub(crate) info: QpInfo,
    /// The RC QP's Falcon connection, once resolved from its CID.
    pub(crate) connection: Option<ConnectionHandle>,
    pub(crate) epoch: u32,
    /// Posted send work requests not yet retired, oldest first.
    pub(crate) sq: VecDeque<SendEntry>,
    /// The sequence number of `sq[0]` (one per work request posted).
    pub(crate) sq_base: u64,
    /// The sequence number of the first work request with pieces still to
    /// submit (those before it are all submitted or failed).
    pub(crate) next_wr: u64,
    pub(crate) requester: Requester,
    pub(crate) rq: ReceiveQueue,
    pub(crate) responder: Responder,
    /// On the device's list of QPs with pieces to submit.
    pub(crate) active: bool,
}

impl Qp {
    pub(crate) fn new(info: QpInfo) -> Qp {
        let cap = info.init.cap;
        Qp {
            info,
            connection: None,
            epoch: 0,
            sq: VecDeque::with_capacity((cap.max_send_wr as usize).min(4096)),
            sq_base: 0,
            next_wr: 0,
            requester: Requester::new(),
            rq: ReceiveQueue::new(cap.max_recv_wr as usize, cap.max_recv_sge as usize),
            responder: Responder::new(),
            active: false,
        }
    }

    pub(crate) fn qpn(&self) -> Qpn {
        self.info.qpn
    }

    /// Moves `next_wr` past the work requests fully submitted.
    pub(crate) fn skip_submitted(&mut self) {
        while self.entry_mut(self.next_wr).is_some_and(|e| e.submitted) {
            self.next_wr += 1;
        }
    }

    /// The send entry of work request `seq`, if not retired.
    pub(crate) fn entry_mut(&mut self, seq: u64) -> Option<&mut SendEntry> {
        let index = usize::try_from(seq.checked_sub(self.sq_base)?).ok()?;
        self.sq.get_mut(index)
    }

    /// Back to RESET's counters: a new epoch, new sequence numbers, empty
    /// queues (without completions, as verbs' RESET).
    pub(crate) fn reset(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.sq_base += self.sq.len() as u64;
        self.sq.clear();
        self.next_wr = self.sq_base;
        self.requester = Requester::new();
        self.responder = Responder::new();
        while self.rq.take().is_some() {}
        self.connection = None;
    }
}

/// The QPs of a device, by QPN (see the module doc).
#[derive(Debug)]
pub(crate) struct QpTable {
    slots: Vec<(u8, Option<Qp>)>,
    free: Vec<u32>,
    limit: usize,
}

impl QpTable {
    pub(crate) fn new(limit: usize) -> QpTable {
        QpTable {
            slots: Vec::new(),
            free: Vec::new(),
            limit: limit.min(1 << QP_SLOT_BITS),
        }
    }

    /// The QPN the next [`insert`](Self::insert) gives, or `None` at the
    /// limit.
    pub(crate) fn next_qpn(&self) -> Option<Qpn> {
        let (index, generation) = match self.free.last() {
            Some(&index) => (index, self.slots[index as usize].0),
            None if self.slots.len() < self.limit => (self.slots.len() as u32, 1),
            None => return None,
        };
        Some(Qpn::truncating(
            u32::from(generation) << QP_SLOT_BITS | index,
        ))
    }

    /// Stores `qp` under the QPN [`next_qpn`](Self::next_qpn) gave.
    pub(crate) fn insert(&mut self, qp: Qp) {
        match self.free.pop() {
            Some(index) => self.slots[index as usize].1 = Some(qp),
            None => self.slots.push((1, Some(qp))),
        }
    }

    /// The slot of `qpn` if it names a live QP.
    pub(crate) fn index(&self, qpn: Qpn) -> Option<u32> {
        let index = qpn.value() & QP_SLOT_MASK;
        let (generation, qp) = self.slots.get(index as usize)?;
        let live = qp.is_some() && u32::from(*generation) == qpn.value() >> QP_SLOT_BITS;
        live.then_some(index)
    }

    pub(crate) fn get(&self, qpn: Qpn) -> Option<&Qp> {
        let index = self.index(qpn)?;
        self.slots[index as usize].1.as_ref()
    }

    pub(crate) fn at(&self, index: u32) -> Option<&Qp> {
        self.slots.get(index as usize)?.1.as_ref()
    }

    pub(crate) fn at_mut(&mut self, index: u32) -> Option<&mut Qp> {
        self.slots.get_mut(index as usize)?.1.as_mut()
    }

    /// Takes the QP out; its QPN names nothing from now on.
    pub(crate) fn remove(&mut self, qpn: Qpn) -> Option<Qp> {
        let index = self.index(qpn)?;
        let slot = &mut self.slots[index as usize];
        let qp = slot.1.take();
        // Generation 0 is never used: 255 generations, then wrap to 1.
        slot.0 = if slot.0 == u8::MAX { 1 } else { slot.0 + 1 };
        self.free.push(index);
        qp
    }

    /// Every slot index with a live QP.
    pub(crate) fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, (_, qp))| qp.is_some())
            .map(|(i, _)| i as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{Cq, Pd, QpInitAttr, QpType};

    fn qp(qpn: Qpn) -> Qp {
        Qp::new(QpInfo::new(qpn, Pd(0), QpInitAttr::new(QpType::Rc, Cq(0))))
    }

    #[test]
    fn qpns_are_never_0_or_1_and_a_destroyed_one_names_nothing() {
        let mut table = QpTable::new(2);
        let a = table.next_qpn().expect("room");
        table.insert(qp(a));
        let b = table.next_qpn().expect("room");
        table.insert(qp(b));
        assert_eq!(table.next_qpn(), None, "limit");
        assert!(a.value() > 1 && b.value() > 1);
        assert_ne!(a, b);
        assert!(table.remove(a).is_some());
        assert!(table.get(a).is_none());
        let c = table.next_qpn().expect("room again");
        assert_ne!(c, a);
        assert_eq!(c.value() & QP_SLOT_MASK, a.value() & QP_SLOT_MASK);
        table.insert(qp(c));
        assert!(table.get(a).is_none());
        assert_eq!(table.get(c).map(Qp::qpn), Some(c));
        assert_eq!(table.indices().count(), 2);
    }
}
