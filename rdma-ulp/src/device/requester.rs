//! The requester: send work requests into Falcon transactions and their
//! completions back into work completions.
//!
//! Layer: RDMA ULP, under [`Device`]. Owns the submit path (RDMA-0.9 §6.7
//! segmentation through [`crate::segment`]; the opcode of each piece from
//! the §8.1.3 table; SN per request packet, §8.2; the two RMSN counters,
//! §8.3.2) and the completion path (a push's ACK, a pull's response checked
//! against its request and placed in the requester's memory, errors mapped
//! to verbs statuses). Never drops work for lack of credits: a submit
//! Falcon refuses is rebuilt from the same cursor after the Xon; and the
//! cursor, SN and RMSN move only when Falcon took the piece.
//!
//! Mapping (RDMA-0.9 §8.1.3, ulp.md §1.6 decisions):
//!
//! | work request | Falcon | each packet's headers |
//! |---|---|---|
//! | SEND (imm, inv) | a push per MTU | RBTH, SETH (the message's RMSN), OETH (this packet's offset); ImmDt or IETH on the last |
//! | WRITE (imm) | a push per MTU | RBTH, RETH (this packet's VA, the rkey, this packet's length); SETH and ImmDt on the last with immediate |
//! | READ | a pull per MTU and per scatter entry | RBTH, RETH (this pull's remote VA and length), SETH (RMSN + 1 per pull), STETH (this pull's sink VA and lkey) |
//! | atomics | a pull | RBTH, AtomicETH, SETH, STETH |
//! | UD SEND | one push of at most one MTU | RBTH, DETH (Q_Key, our QPN); ImmDt |
//!
//! RDMA-0.9 §8.3.2 says the RMSN of an outbound "Send Immediate or Write
//! Immediate" names the receive it consumes, then that it increments after
//! the last packet of "an outbound Send or Write with Immediate data";
//! ulp.md §1.9 reads both as SEND (every one, as every SEND consumes a
//! receive in verbs) and WRITE with immediate, and so do we.
//!
//! Weak ordering (placement out of order, completions in order): a WRITE
//! with immediate's packets carry no message number the responder could
//! count them by, so its first packet, the one after it and its last go
//! out only when none of the QP's packets is in flight, and nothing
//! follows the last until it completed. The responder then sees the
//! first packet after every earlier one and before the rest of its
//! message, and the last after all of it: the receive's completion comes
//! after all its data landed, with the message's length as `byte_len`
//! (counted from the first packet).

use std::sync::Arc;

use falcon_core::api::{
    Completion, CompletionStatus, ConnectionHandle, CreditClass, Engine, PacketBuf, RejectReason,
    Timestamp, Transaction,
};

use super::code::RemoteCode;
use super::complete::VENDOR_CONNECTION_LOST;
use super::pieces::{Piece, PieceKind};
use super::qp::{Qp, SendEntry};
use super::{Device, Refusal};
use crate::data::{Body, RdmaData, Segment};
use crate::segment::{push_piece, read_piece, ReadCursor};
use crate::verbs::mr::MrTable;
use crate::verbs::{
    Access, AsyncEventKind, QpOrdering, QpState, QpType, SendFlags, WcStatus, WrOp, MAX_SGE,
};
use crate::wire::{
    AtomicEth, Deth, Extensions, Extra, FalconPacket, Ieth, ImmDt, LKey, Oeth, Opcode, Operation,
    PadCount, QKey, Rbth, RdmaHeader, RdmaPacket, Reth, Service, Seth, Steth,
};

/// Pieces one QP submits per turn at most, so that one long message does
/// not hold the others back.
const PIECES_PER_TURN: usize = 64;

/// `vendor_err` values of requester-side failures.
pub(super) const VENDOR_NO_CONNECTION: u32 = 0x2_0001;
pub(super) const VENDOR_PAYLOAD_TOO_LONG: u32 = 0x2_0002;
pub(super) const VENDOR_RNR: u32 = 0x2_0003;
pub(super) const VENDOR_PULL_REFUSED: u32 = 0x2_0004;
pub(super) const VENDOR_RESPONSE_DROPPED: u32 = 0x2_0005;
pub(super) const VENDOR_BAD_RESPONSE: u32 = 0x2_0006;
pub(super) const VENDOR_LOCAL_KEY: u32 = 0x2_0007;
/// `0x3_00xx`: Falcon's completion code `xx` (OCP Falcon 0.9 §11).
const VENDOR_FALCON: u32 = 0x3_0000;

/// How a piece or a work request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Failure {
    pub(super) status: WcStatus,
    pub(super) vendor: u32,
    /// The responder (or the path to it) failed it, not this side.
    pub(super) remote: bool,
    /// The SEND it belongs to took its receive (and RMSN) at the
    /// responder.
    pub(super) consumed: bool,
}

impl Failure {
    const fn local(status: WcStatus, vendor: u32) -> Failure {
        Failure {
            status,
            vendor,
            remote: false,
            consumed: false,
        }
    }
}

/// A piece ready to submit, and how it moves its QP on once taken.
struct Ready {
    seq: u64,
    connection: ConnectionHandle,
    transaction: Transaction<RdmaData>,
    piece: Piece,
    payload: u64,
    next_offset: u64,
    next_read: ReadCursor,
    last: bool,
    rmsn_send: bool,
    rmsn_read: bool,
    fence: bool,
}

/// What the QP can do next. Returned by value once per piece: boxing the
/// ready piece would allocate per packet.
#[allow(clippy::large_enum_variant)]
enum Step {
    /// Nothing to submit now (empty, waiting for completions, not RTS).
    Idle,
    /// Out of credits: stays active until the Xon.
    Blocked,
    Failed(u64, Failure),
    Ready(Ready),
}

impl Device {
    /// RNR NACKs our sends met (asked of the engine in `submit`): a
    /// message that meets more than `rnr_retry` fails with
    /// `IBV_WC_RNR_RETRY_EXC_ERR` (7: retry for ever). Falcon retries by
    /// itself and cannot withdraw the push (§8.5.3.4), so the QP goes to
    /// ERR in either error mode: continuing would let the failed message
    /// land later, behind its successors.
    pub(super) fn take_rnr_nacks<B: PacketBuf>(&mut self, engine: &mut Engine<B, RdmaData>) {
        while let Some(nack) = engine.poll_receiver_not_ready() {
            self.stats.rnr_nacks += 1;
            let Some(piece) = self.pieces.get_mut(nack.tag) else {
                continue;
            };
            if piece.connection != nack.connection {
                continue;
            }
            piece.rnr_nacks = piece.rnr_nacks.saturating_add(1);
            let (index, epoch, count) = (piece.qp, piece.epoch, piece.rnr_nacks);
            let Some(qp) = self.qps.at(index) else {
                continue;
            };
            let retry = qp.info.rnr_retry;
            if qp.epoch != epoch || qp.info.state == QpState::Error || retry >= 7 || count <= retry
            {
                continue;
            }
            self.stats.rnr_retry_exceeded += 1;
            // RNR NACKs hold up the oldest request (the later ones of an
            // ordered connection are NACKed behind it): it is the one that
            // fails.
            let oldest = qp
                .sq
                .iter()
                .position(|e| !e.is_complete())
                .map(|i| qp.sq_base + i as u64);
            let failed = oldest.map(|seq| (seq, WcStatus::RnrRetryExcErr, VENDOR_RNR));
            self.fail_qp(index, failed, Some(AsyncEventKind::QpFatal));
        }
    }

    /// Submits the pieces of the active QPs, each in turn.
    pub(super) fn send_work<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, RdmaData>,
    ) {
        for _ in 0..self.active.len() {
            let Some(index) = self.active.pop_front() else {
                break;
            };
            let keep = self.pump(now, engine, index);
            if let Some(qp) = self.qps.at_mut(index) {
                if keep {
                    self.active.push_back(index);
                } else {
                    qp.active = false;
                }
            }
        }
    }

    /// Submits QP slot `index`'s next pieces; whether it stays active.
    fn pump<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, RdmaData>,
        index: u32,
    ) -> bool {
        for _ in 0..PIECES_PER_TURN {
            match self.next_piece(engine, index) {
                Step::Idle => return false,
                Step::Blocked => return true,
                Step::Failed(seq, failure) => self.wr_failed(index, seq, failure),
                Step::Ready(ready) => {
                    if !self.submit_piece(now, engine, index, ready) {
                        return true;
                    }
                }
            }
        }
        true
    }

    /// The next piece of QP slot `index`, its work request started first.
    fn next_piece<B: PacketBuf>(&mut self, engine: &mut Engine<B, RdmaData>, index: u32) -> Step {
        let Some(qp) = self.qps.at_mut(index) else {
            return Step::Idle;
        };
        if qp.info.state != QpState::Rts {
            return Step::Idle;
        }
        let seq = qp.next_wr;
        let Some(entry) = qp.entry_mut(seq) else {
            return Step::Idle;
        };
        if !entry.started {
            if let Err(failure) = self.start(engine, index, seq) {
                return Step::Failed(seq, failure);
            }
        }
        let Some(qp) = self.qps.at_mut(index) else {
            return Step::Idle;
        };
        let connection = match qp.info.init.qp_type {
            QpType::Rc => qp.connection,
            QpType::Ud => qp.entry_mut(seq).and_then(|e| e.connection),
        };
        let Some(connection) = connection else {
            return Step::Failed(
                seq,
                Failure::local(WcStatus::LocQpOpErr, VENDOR_NO_CONNECTION),
            );
        };
        if self.flow.blocked(connection, CreditClass::Request) {
            return Step::Blocked;
        }
        let requester = &mut qp.requester;
        if requester.fence {
            if requester.pieces_out > 0 {
                return Step::Idle;
            }
            requester.fence = false;
        }
        let (pieces_out, pulls_out) = (requester.pieces_out, requester.pulls_out);
        let max_pulls = u32::from(qp.info.max_rd_atomic.max(1));
        let ordering = qp.info.init.ordering;
        let Some(entry) = seq
            .checked_sub(qp.sq_base)
            .and_then(|i| qp.sq.get(usize::try_from(i).ok()?))
        else {
            return Step::Idle;
        };
        if entry.wr.send_flags.contains(SendFlags::FENCE) && !entry.any_submitted && pulls_out > 0 {
            return Step::Idle;
        }
        if entry.wr.op.writes_locally() && pulls_out >= max_pulls {
            return Step::Idle;
        }
        if ordering != QpOrdering::Strong && matches!(entry.wr.op, WrOp::WriteWithImm { .. }) {
            let mtu = u64::from(qp.info.path_mtu.bytes());
            // The first packet, the one after it, the last.
            let edge = entry.offset <= mtu || entry.offset + mtu >= entry.len;
            if edge && pieces_out > 0 {
                return Step::Idle;
            }
        }
        match build(&self.mrs, qp, entry, seq, connection, index) {
            Ok(ready) => Step::Ready(ready),
            Err(failure) => Step::Failed(seq, failure),
        }
    }

    /// A work request's first look: its connection and its local keys
    /// (`IBV_WC_LOC_PROT_ERR`, `IBV_WC_LOC_LEN_ERR` as a verbs provider
    /// reports them, at execution rather than at post).
    fn start<B: PacketBuf>(
        &mut self,
        engine: &Engine<B, RdmaData>,
        index: u32,
        seq: u64,
    ) -> Result<(), Failure> {
        let no_connection = Failure::local(WcStatus::LocQpOpErr, VENDOR_NO_CONNECTION);
        let Some(qp) = self.qps.at_mut(index) else {
            return Err(no_connection);
        };
        let pd = qp.info.pd;
        let ud_connection = match qp.info.init.qp_type {
            QpType::Rc => {
                if qp.connection.is_none() {
                    qp.connection = qp.info.cid.and_then(|cid| engine.connection(cid));
                }
                if qp.connection.is_none() {
                    return Err(no_connection);
                }
                None
            }
            QpType::Ud => {
                let ah = qp
                    .entry_mut(seq)
                    .and_then(|e| e.wr.ud)
                    .and_then(|ud| self.ahs.get(ud.ah.0))
                    .ok_or(no_connection)?;
                Some(engine.connection(ah.attr.cid).ok_or(no_connection)?)
            }
        };
        let Some(entry) = qp.entry_mut(seq) else {
            return Err(no_connection);
        };
        entry.connection = ud_connection;
        if entry.wr.op.is_atomic() && entry.len != 8 {
            return Err(Failure::local(WcStatus::LocLenErr, 0));
        }
        let need = if entry.wr.op.writes_locally() {
            Access::LOCAL_WRITE
        } else {
            Access::EMPTY
        };
        let inline =
            entry.wr.send_flags.contains(SendFlags::INLINE) && !entry.wr.op.writes_locally();
        if inline {
            if entry.inline.is_none() {
                return Err(Failure::local(WcStatus::LocProtErr, VENDOR_LOCAL_KEY));
            }
        } else {
            for sge in entry.wr.sg_list.iter() {
                self.mrs
                    .check(sge.lkey.0, pd, sge.addr, u64::from(sge.length), need)
                    .map_err(|_| Failure::local(WcStatus::LocProtErr, VENDOR_LOCAL_KEY))?;
            }
        }
        entry.started = true;
        Ok(())
    }

    /// Submits `ready`; whether Falcon took it (`false`: out of credits).
    fn submit_piece<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, RdmaData>,
        index: u32,
        ready: Ready,
    ) -> bool {
        let Ready {
            seq,
            connection,
            mut transaction,
            piece,
            payload,
            next_offset,
            next_read,
            last,
            rmsn_send,
            rmsn_read,
            fence,
        } = ready;
        let tag = self.pieces.insert(piece);
        transaction.tag = tag;
        let refused = match engine.submit(now, connection, transaction) {
            Ok(_) => None,
            Err(rejected) => Some(rejected.reason),
        };
        if let Some(reason) = refused {
            self.pieces.remove(tag);
            let failure = match reason {
                RejectReason::NoResources(_) => {
                    self.stats.credit_waits += 1;
                    self.flow.stop(connection, CreditClass::Request);
                    return false;
                }
                RejectReason::PayloadTooLong { .. } => {
                    Failure::local(WcStatus::LocQpOpErr, VENDOR_PAYLOAD_TOO_LONG)
                }
                _ => Failure {
                    status: WcStatus::RetryExcErr,
                    vendor: VENDOR_CONNECTION_LOST,
                    remote: true,
                    consumed: false,
                },
            };
            self.wr_failed(index, seq, failure);
            return true;
        }
        if piece.is_pull() {
            self.stats.pulls += 1;
        } else {
            self.stats.pushes += 1;
            self.stats.bytes_pushed += payload;
        }
        let Some(qp) = self.qps.at_mut(index) else {
            return true;
        };
        let requester = &mut qp.requester;
        requester.next_sn = requester.next_sn.next();
        requester.pieces_out += 1;
        if piece.is_pull() {
            requester.pulls_out += 1;
        }
        if rmsn_send {
            requester.rmsn_send = requester.rmsn_send.next();
        }
        if rmsn_read {
            requester.rmsn_read = requester.rmsn_read.next();
        }
        if fence {
            requester.fence = true;
        }
        if let Some(entry) = qp.entry_mut(seq) {
            entry.outstanding += 1;
            entry.any_submitted = true;
            entry.offset = next_offset;
            entry.read = next_read;
            if last {
                entry.submitted = true;
            }
        }
        qp.skip_submitted();
        true
    }

    /// Work request `seq` of QP slot `index` failed (a piece, or before
    /// any): no more of its pieces go; in verbs-compatible mode the QP
    /// goes to ERR (not a UD QP for a remote failure: datagrams fail
    /// alone), else the request completes in error once its pieces in
    /// flight are back.
    pub(super) fn wr_failed(&mut self, index: u32, seq: u64, failure: Failure) {
        let Some(qp) = self.qps.at_mut(index) else {
            return;
        };
        let verbs = qp.info.init.error_mode == crate::verbs::ErrorMode::VerbsCompatible;
        let ud = qp.info.init.qp_type == QpType::Ud;
        let Some(entry) = qp.entry_mut(seq) else {
            return;
        };
        if entry.error.is_none() {
            entry.error = Some((failure.status, failure.vendor));
        }
        let consumes = entry.wr.op.is_send() && entry.any_submitted && failure.consumed;
        let abandoned = !entry.submitted;
        entry.submitted = true;
        if abandoned && consumes {
            // The responder took this SEND's receive: its RMSN is spent.
            qp.requester.rmsn_send = qp.requester.rmsn_send.next();
        }
        qp.skip_submitted();
        if verbs && !(ud && failure.remote) {
            self.fail_qp(
                index,
                Some((seq, failure.status, failure.vendor)),
                Some(AsyncEventKind::QpFatal),
            );
            return;
        }
        self.retire_sends(index);
    }

    /// A Falcon completion of one of our transactions.
    pub(super) fn on_completion<B: PacketBuf>(
        &mut self,
        engine: &mut Engine<B, RdmaData>,
        completion: Completion<B, RdmaData>,
    ) {
        let Completion {
            connection,
            tag,
            status,
            ulp_nack_code,
            data,
            ..
        } = completion;
        let Some(piece) = self.pieces.remove(tag) else {
            self.stats.refuse(Refusal::Stale);
            engine.release(data);
            return;
        };
        let live = self
            .qps
            .at(piece.qp)
            .is_some_and(|qp| qp.epoch == piece.epoch && qp.info.state != QpState::Error);
        if !live {
            self.stats.refuse(Refusal::Stale);
            engine.release(data);
            return;
        }
        let outcome = match status {
            CompletionStatus::Ack => match piece.kind {
                PieceKind::Push => Ok(0),
                _ => self.take_response(&piece, connection, &data),
            },
            _ => Err(failure_of(status, ulp_nack_code, piece.is_pull())),
        };
        engine.release(data);
        self.piece_done(piece, outcome);
    }

    /// Checks a pull's response against its request and places its data
    /// (READ) or original value (atomic) in the requester's memory; the
    /// bytes placed.
    fn take_response(
        &mut self,
        piece: &Piece,
        connection: ConnectionHandle,
        bytes: &[u8],
    ) -> Result<u32, Failure> {
        let bad = Failure {
            status: WcStatus::BadRespErr,
            vendor: VENDOR_BAD_RESPONSE,
            remote: true,
            consumed: false,
        };
        let packet = match RdmaPacket::parse(FalconPacket::PullData, bytes) {
            Ok(packet) => packet,
            Err(e) => {
                self.stats.refuse(Refusal::Malformed);
                self.stats.last_malformed = Some(e.name());
                return Err(bad);
            }
        };
        let rbth = packet.header.rbth();
        // RDMA-0.9 §6.9: a response whose QP is not on the connection it
        // came on is dropped, without a NACK. Its request is then never
        // answered, as when a response is lost for good: the transport
        // gave up on it.
        let Some(named) = self.qps.index(rbth.destination_qp) else {
            self.stats.refuse(Refusal::BadResponse);
            return Err(bad);
        };
        let on_its_connection = self
            .qps
            .at(named)
            .is_some_and(|qp| qp.connection == Some(connection));
        if !on_its_connection {
            self.stats.refuse(Refusal::ResponseWrongCid);
            return Err(Failure {
                status: WcStatus::RetryExcErr,
                vendor: VENDOR_RESPONSE_DROPPED,
                remote: true,
                consumed: false,
            });
        }
        if named != piece.qp || rbth.sn != piece.sn {
            self.stats.refuse(Refusal::BadResponse);
            return Err(bad);
        }
        let Some(pd) = self.qps.at(piece.qp).map(|qp| qp.info.pd) else {
            return Err(bad);
        };
        let (steth, data, len): (Steth, [u8; 8], u32) =
            match (piece.kind, packet.header.extensions()) {
                (PieceKind::Read { steth, len }, &Extensions::ReadResponse { steth: echo })
                    if echo == steth && packet.payload.len() == len as usize =>
                {
                    (steth, [0; 8], len)
                }
                (
                    PieceKind::Atomic { steth },
                    &Extensions::AtomicResponse {
                        atomic_ack,
                        steth: echo,
                    },
                ) if echo == steth && rbth.opcode == Opcode::AtomicResponse => {
                    (steth, atomic_ack.original_data.to_le_bytes(), 8)
                }
                _ => {
                    self.stats.refuse(Refusal::BadResponse);
                    return Err(bad);
                }
            };
        if len == 0 {
            return Ok(0);
        }
        let span = self
            .mrs
            .check(
                steth.l_key.0,
                pd,
                steth.virtual_address,
                u64::from(len),
                Access::LOCAL_WRITE,
            )
            .map_err(|_| Failure::local(WcStatus::LocProtErr, VENDOR_LOCAL_KEY))?;
        match piece.kind {
            PieceKind::Atomic { .. } => span.place(&data),
            _ => span.place(packet.payload),
        }
        self.stats.bytes_placed += u64::from(len);
        Ok(len)
    }

    /// A piece of QP slot `piece.qp` is done (its QP live).
    fn piece_done(&mut self, piece: Piece, outcome: Result<u32, Failure>) {
        let index = piece.qp;
        let Some(qp) = self.qps.at_mut(index) else {
            return;
        };
        qp.requester.pieces_out = qp.requester.pieces_out.saturating_sub(1);
        if piece.is_pull() {
            qp.requester.pulls_out = qp.requester.pulls_out.saturating_sub(1);
        }
        if let Some(entry) = qp.entry_mut(piece.wr_seq) {
            entry.outstanding = entry.outstanding.saturating_sub(1);
            if let Ok(bytes) = outcome {
                entry.byte_len += bytes;
            }
        }
        match outcome {
            Ok(_) => self.retire_sends(index),
            Err(failure) => self.wr_failed(index, piece.wr_seq, failure),
        }
        let more = self.qps.at(index).is_some_and(|qp| {
            qp.info.state == QpState::Rts && qp.next_wr < qp.sq_base + qp.sq.len() as u64
        });
        if more {
            self.activate(index);
        }
    }
}

/// The failure a Falcon completion status means for a piece.
fn failure_of(status: CompletionStatus, code: u8, pull: bool) -> Failure {
    let remote = |status, vendor, consumed| Failure {
        status,
        vendor,
        remote: true,
        consumed,
    };
    match status {
        CompletionStatus::TargetCompletionInError | CompletionStatus::TargetNonRecoverableError
            if pull =>
        {
            remote(WcStatus::RemAccessErr, VENDOR_PULL_REFUSED, false)
        }
        CompletionStatus::TargetCompletionInError | CompletionStatus::TargetNonRecoverableError => {
            let code = RemoteCode::from_wire(code);
            remote(
                code.status(),
                u32::from(code.wire()),
                code.consumes_receive(),
            )
        }
        CompletionStatus::TargetInvalidCid => remote(
            WcStatus::RemInvReqErr,
            VENDOR_FALCON | u32::from(status.code()),
            false,
        ),
        CompletionStatus::OperationError => {
            remote(WcStatus::BadRespErr, VENDOR_BAD_RESPONSE, false)
        }
        _ => remote(
            WcStatus::RetryExcErr,
            VENDOR_FALCON | u32::from(status.code()),
            true,
        ),
    }
}

/// The headers and data of the next piece of `entry` (work request `seq`
/// of `qp`, in slot `index`).
fn build(
    mrs: &MrTable,
    qp: &Qp,
    entry: &SendEntry,
    seq: u64,
    connection: ConnectionHandle,
    index: u32,
) -> Result<Ready, Failure> {
    let requester = qp.requester;
    let mtu = qp.info.path_mtu.bytes();
    let solicited = entry.wr.send_flags.contains(SendFlags::SOLICITED);
    let mut ready = Ready {
        seq,
        connection,
        transaction: Transaction::push(0, RdmaData::NONE),
        piece: Piece {
            qp: index,
            epoch: qp.epoch,
            wr_seq: seq,
            connection,
            sn: requester.next_sn,
            kind: PieceKind::Push,
            rnr_nacks: 0,
        },
        payload: 0,
        next_offset: entry.offset,
        next_read: entry.read,
        last: false,
        rmsn_send: false,
        rmsn_read: false,
        fence: false,
    };
    let rbth = |opcode, ends: bool, pad| Rbth {
        solicited_event: solicited && ends,
        ack_request: ends,
        pad,
        ..Rbth::new(opcode, qp.info.dest_qpn, requester.next_sn)
    };
    let (header, data) = match entry.wr.op {
        WrOp::Read { remote_addr, rkey } => {
            let mut lengths = [0u32; MAX_SGE];
            for (slot, sge) in lengths.iter_mut().zip(entry.wr.sg_list.iter()) {
                *slot = sge.length;
            }
            let lengths = &lengths[..entry.wr.sg_list.len()];
            let Some((piece, next)) = read_piece(lengths, mtu, entry.read) else {
                return Err(Failure::local(WcStatus::GeneralErr, 0));
            };
            let steth = match piece.sge.and_then(|i| entry.wr.sg_list.get(i)) {
                Some(sge) => Steth {
                    virtual_address: sge.addr.wrapping_add(u64::from(piece.sge_offset)),
                    l_key: sge.lkey,
                },
                None => Steth {
                    virtual_address: 0,
                    l_key: LKey(0),
                },
            };
            let reth = Reth {
                virtual_address: remote_addr.wrapping_add(piece.offset),
                r_key: rkey,
                length: piece.len,
            };
            let seth = Seth {
                rmsn: requester.rmsn_read,
            };
            let header = header_of(
                rbth(Opcode::ReadRequest, true, PadCount::ZERO),
                Extensions::ReadRequest { reth, seth, steth },
            )?;
            // The response: RBTH, STETH, the data and its pad.
            let response = 24
                + piece.len as usize
                + PadCount::for_payload(piece.len as usize).value() as usize;
            let Ok(request_length) = u16::try_from(response) else {
                return Err(Failure::local(
                    WcStatus::LocQpOpErr,
                    VENDOR_PAYLOAD_TOO_LONG,
                ));
            };
            ready.transaction =
                Transaction::pull(0, request_length).with_header(header.to_ulp_header());
            if piece.last {
                ready.transaction = ready.transaction.with_ack_request();
            }
            ready.piece.kind = PieceKind::Read {
                steth,
                len: piece.len,
            };
            ready.next_read = next;
            ready.last = piece.last;
            ready.rmsn_read = true;
            return Ok(ready);
        }
        WrOp::CompareSwap {
            remote_addr, rkey, ..
        }
        | WrOp::FetchAdd {
            remote_addr, rkey, ..
        } => {
            let (opcode, swap_or_add, compare) = match entry.wr.op {
                WrOp::CompareSwap { compare, swap, .. } => (Opcode::CompareSwap, swap, compare),
                WrOp::FetchAdd { add, .. } => (Opcode::FetchAdd, add, 0),
                _ => return Err(Failure::local(WcStatus::GeneralErr, 0)),
            };
            let sge = entry.wr.sg_list.first().copied().unwrap_or_default();
            let steth = Steth {
                virtual_address: sge.addr,
                l_key: sge.lkey,
            };
            let header = header_of(
                rbth(opcode, true, PadCount::ZERO),
                Extensions::AtomicRequest {
                    atomic: AtomicEth {
                        virtual_address: remote_addr,
                        r_key: rkey,
                        swap_or_add,
                        compare,
                    },
                    seth: Seth {
                        rmsn: requester.rmsn_read,
                    },
                    steth,
                },
            )?;
            // The response: RBTH, AtomicAckETH, STETH (ulp.md §1.14).
            ready.transaction = Transaction::pull(0, 32)
                .with_header(header.to_ulp_header())
                .with_ack_request();
            ready.piece.kind = PieceKind::Atomic { steth };
            ready.last = true;
            ready.rmsn_read = true;
            return Ok(ready);
        }
        WrOp::Send
        | WrOp::SendWithImm(_)
        | WrOp::SendWithInv(_)
        | WrOp::Write { .. }
        | WrOp::WriteWithImm { .. } => {
            let Some(piece) = push_piece(entry.len, mtu, entry.offset) else {
                return Err(Failure::local(WcStatus::GeneralErr, 0));
            };
            let ends = piece.position.ends_message();
            let pad = PadCount::for_payload(piece.len as usize);
            let (extra, immediate, invalidate) = match entry.wr.op {
                WrOp::SendWithImm(imm) | WrOp::WriteWithImm { imm, .. } if ends => {
                    (Extra::Immediate, ImmDt { data: imm }, None)
                }
                WrOp::SendWithInv(rkey) if ends => {
                    (Extra::Invalidate, ImmDt::default(), Some(rkey))
                }
                _ => (Extra::Plain, ImmDt::default(), None),
            };
            let seth = Seth {
                rmsn: requester.rmsn_send,
            };
            let (service, operation) = match (qp.info.init.qp_type, entry.wr.op.is_send()) {
                (QpType::Ud, _) => (Service::UnreliableDatagram, Operation::Send),
                (QpType::Rc, true) => (Service::ReliableConnection, Operation::Send),
                (QpType::Rc, false) => (Service::ReliableConnection, Operation::Write),
            };
            let Some(opcode) = Opcode::for_packet(service, operation, Some(piece.position), extra)
            else {
                return Err(Failure::local(WcStatus::LocLenErr, 0));
            };
            let extensions = match (entry.wr.op, qp.info.init.qp_type) {
                (_, QpType::Ud) => {
                    let ud = entry.wr.ud.ok_or(Failure::local(WcStatus::GeneralErr, 0))?;
                    // InfiniBand: a Q_Key with the high bit set sends the
                    // QP's own.
                    let q_key = if ud.remote_qkey.0 & 0x8000_0000 != 0 {
                        qp.info.qkey
                    } else {
                        ud.remote_qkey
                    };
                    let deth = Deth {
                        q_key: QKey(q_key.0),
                        source_qp: qp.info.qpn,
                    };
                    match extra {
                        Extra::Immediate => Extensions::DatagramImmediate { deth, immediate },
                        _ => Extensions::Datagram { deth },
                    }
                }
                (
                    WrOp::Write { remote_addr, rkey }
                    | WrOp::WriteWithImm {
                        remote_addr, rkey, ..
                    },
                    _,
                ) => {
                    let reth = Reth {
                        virtual_address: remote_addr.wrapping_add(piece.offset),
                        r_key: rkey,
                        length: piece.len,
                    };
                    match extra {
                        Extra::Immediate => Extensions::WriteImmediate {
                            reth,
                            seth,
                            immediate,
                        },
                        _ => Extensions::Write { reth },
                    }
                }
                _ => {
                    let oeth = Oeth {
                        // In range: messages are at most 2^31 bytes.
                        message_offset: piece.offset as u32,
                    };
                    match (extra, invalidate) {
                        (Extra::Immediate, _) => Extensions::SendImmediate {
                            seth,
                            oeth,
                            immediate,
                        },
                        (Extra::Invalidate, Some(r_key)) => Extensions::SendInvalidate {
                            seth,
                            oeth,
                            ieth: Ieth { r_key },
                        },
                        _ => Extensions::Send { seth, oeth },
                    }
                }
            };
            let mut rbth = rbth(opcode, ends, pad);
            if qp.info.init.qp_type == QpType::Ud {
                rbth.destination_qp = entry.wr.ud.map(|ud| ud.remote_qpn).unwrap_or_default();
            }
            let header = header_of(rbth, extensions)?;
            let body = body_of(mrs, qp, entry, piece.offset, piece.len)?;
            ready.rmsn_send = ends
                && qp.info.init.qp_type == QpType::Rc
                && (entry.wr.op.is_send() || matches!(entry.wr.op, WrOp::WriteWithImm { .. }));
            ready.fence = ends
                && qp.info.init.ordering != QpOrdering::Strong
                && matches!(entry.wr.op, WrOp::WriteWithImm { .. });
            ready.payload = u64::from(piece.len);
            ready.next_offset = piece.offset + u64::from(piece.len);
            ready.last = ends;
            (
                header,
                RdmaData {
                    body,
                    pad: pad.value(),
                },
            )
        }
    };
    ready.transaction = Transaction::push(0, data).with_header(header.to_ulp_header());
    if ready.last {
        ready.transaction = ready.transaction.with_ack_request();
    }
    Ok(ready)
}

/// An RDMA header of `rbth` and `extensions`, which the caller matched.
fn header_of(rbth: Rbth, extensions: Extensions) -> Result<RdmaHeader, Failure> {
    RdmaHeader::new(rbth, extensions).map_err(|_| Failure::local(WcStatus::GeneralErr, 0))
}

/// The bytes `offset .. offset + len` of `entry`'s message: straight from
/// the registered regions its scatter list names (or its inline copy).
fn body_of(
    mrs: &MrTable,
    qp: &Qp,
    entry: &SendEntry,
    offset: u64,
    len: u32,
) -> Result<Body, Failure> {
    if len == 0 {
        return Ok(Body::None);
    }
    // In range: messages are at most 2^31 bytes.
    let (start, len) = (offset as usize, len as usize);
    if let Some(bytes) = &entry.inline {
        return Ok(Body::Inline {
            bytes: Arc::clone(bytes),
            start,
            len,
        });
    }
    let key_refused = Failure::local(WcStatus::LocProtErr, VENDOR_LOCAL_KEY);
    // A piece inside one scatter entry (the usual case) allocates nothing.
    let mut first: Option<Segment> = None;
    let mut more: Vec<Segment> = Vec::new();
    let mut at = 0usize;
    for sge in entry.wr.sg_list.iter() {
        let sge_len = sge.length as usize;
        let (lo, hi) = (at, at + sge_len);
        at = hi;
        if hi <= start || lo >= start + len {
            continue;
        }
        let from = start.max(lo) - lo;
        let to = (start + len).min(hi) - lo;
        let span = mrs
            .check(
                sge.lkey.0,
                qp.info.pd,
                sge.addr.wrapping_add(from as u64),
                (to - from) as u64,
                Access::EMPTY,
            )
            .map_err(|_| key_refused)?;
        let segment = Segment {
            region: span.region,
            offset: span.offset,
            len: span.len,
        };
        match &first {
            None => first = Some(segment),
            Some(_) => more.push(segment),
        }
    }
    match (first, more.is_empty()) {
        (None, _) => Err(key_refused),
        (Some(segment), true) => Ok(Body::Region(segment)),
        (Some(segment), false) => {
            more.insert(0, segment);
            Ok(Body::Gather(more.into()))
        }
    }
}
