//! The responder: requests from Falcon into memory, receives and answers.
//!
//! Layer: RDMA ULP, under [`Device`]. Owns the target side of every
//! opcode: the checks (RDMA-0.9 §6.9 CID check against the QP context;
//! QP state; sequence in strong ordering; rkey, bounds and rights through
//! the memory-region table), the placement of SEND and WRITE data from the
//! frame's payload straight into the registered region (one copy), the
//! receive each SEND or WRITE with immediate consumes (by its SETH RMSN,
//! §8.3.2, from the QP's receive queue or its SRQ), READ responses read
//! straight from the region into the frame, atomics executed once, and
//! the answer to Falcon: ACK, RNR NACK with the QP's `min_rnr_timer`, an
//! error NACK, the invalid-CID NACK, or Pull Data. Never writes a byte
//! outside a checked span: every check runs before the first byte moves.
//!
//! Errors follow the responder QP's mode (RDMA-0.9 §6.3): in
//! verbs-compatible mode a refused request NACKs with Falcon's
//! non-recoverable error and moves the responder QP to ERR with an
//! asynchronous event, as an InfiniBand responder does; in
//! complete-in-error mode it NACKs with complete-in-error and the QP goes
//! on. Either NACK carries the reason ([`RemoteCode`]); a pull's refusal
//! is Falcon's zero-length Pull Data (§8.5.3.5). A request on another
//! connection than its QP's gets the invalid-CID NACK and leaves the QP
//! alone (§6.9).
//!
//! Decisions: each READ Request gets one READ Response Only (each pull is
//! a message of its own: its RMSN names its own IRRQ entry, §8.3.2);
//! 64-bit atomic operands are little-endian in memory (the host order of
//! the machines this runs on, as Linux rxe treats them); UD receives keep
//! InfiniBand's 40 bytes for a GRH at the start of the buffer, left as
//! they were (Falcon carries none, `IBV_WC_GRH` is clear).

use falcon_core::api::{
    ConnectionHandle, Engine, PacketBuf, Request, RnrTimeout, Rsn, Timestamp, TransactionKind,
    UlpNack,
};

use super::code::RemoteCode;
use super::flow::{Answer, Waiting};
use super::qp::{Qp, RecvMessage};
use super::{Device, Refusal};
use crate::data::{Body, RdmaData, Segment};
use crate::verbs::mr::{MrTable, Span};
use crate::verbs::srq::SharedReceiveQueue;
use crate::verbs::table::Table;
use crate::verbs::{
    Access, AsyncEvent, AsyncEventKind, ErrorMode, EventElement, QpOrdering, QpState, QpType,
    SgList, WcFlags, WcOpcode, WcStatus, WorkCompletion, MAX_SGE,
};
use crate::wire::{
    AtomicAckEth, Extensions, FalconPacket, Operation, PadCount, Position, Rbth, RdmaHeader,
    RdmaPacket, Rmsn, Service,
};

/// Bytes at the start of a UD receive buffer kept for a GRH.
pub const UD_GRH_LEN: usize = 40;

/// Messages a QP's receives may be assigned ahead of the oldest one not
/// completed: the SETH RMSN's low 8 bits name the receive (RDMA-0.9
/// §8.3.2).
const RMSN_WINDOW: u32 = 256;

/// The answer a request gets.
enum Verdict {
    Ack,
    Rnr(RnrTimeout),
    Fail(RemoteCode),
    /// Pull Data: a READ or atomic response.
    Respond(RdmaHeader, RdmaData),
    /// A UD datagram dropped (counted): accepted at Falcon's level, as an
    /// unreliable datagram that never arrived.
    Dropped,
    InvalidCid,
}

/// Why a message's receive could not be found.
enum NoMessage {
    /// None posted: RNR.
    NoReceive,
    /// An RMSN before the oldest open message or beyond the window.
    OutOfWindow,
}

impl Device {
    /// A request for the target side.
    pub(super) fn on_request<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, crate::data::RdmaData>,
        request: Request<B>,
    ) {
        let Request {
            connection,
            rsn,
            kind,
            request_length,
            header,
            payload,
            ..
        } = request;
        let (verdict, index) = {
            let bytes: &[u8] = match kind {
                TransactionKind::Push => &payload,
                TransactionKind::Pull => &header,
            };
            self.judge(engine, connection, kind, request_length, bytes)
        };
        engine.release(payload);
        if let Some(index) = index {
            self.retire_receives(index);
        }
        self.answer(now, engine, connection, rsn, kind, index, verdict);
    }

    /// Checks and executes a request; its answer and the QP it concerns
    /// (`None` when no QP's state is involved).
    fn judge<B: PacketBuf>(
        &mut self,
        engine: &Engine<B, RdmaData>,
        connection: ConnectionHandle,
        kind: TransactionKind,
        request_length: u16,
        bytes: &[u8],
    ) -> (Verdict, Option<u32>) {
        let packet = match RdmaPacket::parse(FalconPacket::request(kind), bytes) {
            Ok(packet) => packet,
            Err(e) => {
                self.stats.refuse(Refusal::Malformed);
                self.stats.last_malformed = Some(e.name());
                return (Verdict::Fail(RemoteCode::InvalidRequest), None);
            }
        };
        let rbth = *packet.header.rbth();
        let datagram = rbth.opcode.service() == Service::UnreliableDatagram;
        let Some(index) = self.qps.index(rbth.destination_qp) else {
            self.stats.refuse(Refusal::UnknownQp);
            let verdict = if datagram {
                Verdict::Dropped
            } else {
                Verdict::Fail(RemoteCode::InvalidRequest)
            };
            return (verdict, None);
        };
        let Some(qp) = self.qps.at_mut(index) else {
            return (Verdict::Fail(RemoteCode::InvalidRequest), None);
        };
        if qp.info.init.qp_type == QpType::Ud {
            if !datagram {
                self.stats.refuse(Refusal::InvalidRequest);
                return (Verdict::Fail(RemoteCode::InvalidRequest), None);
            }
            return (self.receive_datagram(index, &packet), None);
        }
        // RDMA-0.9 §6.9: the CID the request came on must be the one in
        // the QP context; if not, NACK invalid CID and leave the QP alone.
        // First of all checks: nothing from another connection may move
        // the QP (to ERR, in verbs-compatible mode).
        if qp.connection.is_none() {
            qp.connection = qp.info.cid.and_then(|cid| engine.connection(cid));
        }
        if qp.connection != Some(connection) {
            self.stats.refuse(Refusal::RequestWrongCid);
            return (Verdict::InvalidCid, None);
        }
        if datagram {
            self.stats.refuse(Refusal::InvalidRequest);
            return (Verdict::Fail(RemoteCode::InvalidRequest), Some(index));
        }
        match qp.info.state {
            QpState::Rtr | QpState::Rts => {}
            QpState::Error => {
                self.stats.refuse(Refusal::QpInError);
                return (Verdict::Fail(RemoteCode::QpNotReceiving), None);
            }
            QpState::Reset | QpState::Init => {
                self.stats.refuse(Refusal::QpNotReady);
                return (Verdict::Fail(RemoteCode::QpNotReceiving), None);
            }
        }
        let strong = qp.info.init.ordering == QpOrdering::Strong;
        if strong {
            if qp.responder.rnr_hold.is_some_and(|held| held != rbth.sn) {
                self.stats.refuse(Refusal::NoReceive);
                return (Verdict::Rnr(qp.info.min_rnr_timer), Some(index));
            }
            // In order, every request comes once: an SN before the next
            // expected is a replay. A gap is a request Falcon resynced away
            // (timed out), which the requester saw fail.
            if rbth.sn.before(qp.responder.expected_sn) {
                self.stats.refuse(Refusal::InvalidRequest);
                return (Verdict::Fail(RemoteCode::InvalidRequest), Some(index));
            }
        }
        let verdict = match rbth.opcode.operation() {
            Operation::Send => self.receive_send(index, &packet),
            Operation::Write => self.receive_write(index, &packet),
            Operation::ReadRequest => self.respond_read(index, &packet, request_length),
            Operation::CompareSwap | Operation::FetchAdd => {
                self.respond_atomic(index, &packet, request_length)
            }
            Operation::ReadResponse | Operation::AtomicResponse => {
                Verdict::Fail(RemoteCode::InvalidRequest)
            }
        };
        if let Some(qp) = self.qps.at_mut(index).filter(|_| strong) {
            if let Verdict::Rnr(_) = verdict {
                qp.responder.rnr_hold = Some(rbth.sn);
            } else {
                qp.responder.rnr_hold = None;
                qp.responder.expected_sn = rbth.sn.next();
            }
        }
        if let Verdict::Fail(code) = verdict {
            self.stats.refuse(refusal_of(code));
        }
        (verdict, Some(index))
    }

    /// A SEND packet to RC QP slot `index`.
    fn receive_send(&mut self, index: u32, packet: &RdmaPacket<'_>) -> Verdict {
        let Device {
            qps,
            srqs,
            mrs,
            events,
            ..
        } = self;
        let Some(qp) = qps.at_mut(index) else {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        let extensions = *packet.header.extensions();
        let (Some(seth), Some(oeth)) = (extensions.seth(), extensions.oeth()) else {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        let Some(position) = packet.header.opcode().position() else {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        let rmsn = seth.rmsn;
        let offset = u64::from(oeth.message_offset);
        let ends = position.ends_message();
        let strong = qp.info.init.ordering == QpOrdering::Strong;
        let responder = &mut qp.responder;
        if strong {
            match position {
                Position::First | Position::Only => {
                    if let Some(open) = responder.send_open {
                        if responder.last_failed != Some(open) {
                            return Verdict::Fail(RemoteCode::InvalidRequest);
                        }
                        responder.send_open = None;
                    }
                    let next = responder.base.wrapping_add(responder.messages.len() as u32);
                    if rmsn != next || offset != 0 {
                        return Verdict::Fail(RemoteCode::InvalidRequest);
                    }
                }
                Position::Middle | Position::Last => {
                    if responder.send_open != Some(rmsn) {
                        return Verdict::Fail(RemoteCode::InvalidRequest);
                    }
                    if responder.last_failed == Some(rmsn) {
                        if ends {
                            responder.send_open = None;
                        }
                        return Verdict::Fail(RemoteCode::InvalidRequest);
                    }
                }
            }
        }
        let i = match assign(qp, srqs, events, rmsn) {
            Ok(i) => i,
            Err(NoMessage::NoReceive) => return Verdict::Rnr(qp.info.min_rnr_timer),
            Err(NoMessage::OutOfWindow) => return Verdict::Fail(RemoteCode::InvalidRequest),
        };
        let pd = qp.info.pd;
        let responder = &mut qp.responder;
        if strong {
            responder.send_open = (!ends).then_some(rmsn);
        }
        let message = &mut responder.messages[i];
        if message.done {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        }
        if strong && offset != message.received {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        }
        let fail = |message: &mut RecvMessage, status, code: RemoteCode| {
            message.status = status;
            message.vendor_err = u32::from(code.wire());
            message.done = true;
            Verdict::Fail(code)
        };
        let early = i > 0 || offset != message.received;
        match scatter(mrs, pd, &message.wqe.sg_list, offset, packet.payload) {
            Ok(()) => {}
            Err(Scatter::TooLong) => {
                responder.last_failed = Some(rmsn);
                return fail(message, WcStatus::LocLenErr, RemoteCode::MessageTooLong);
            }
            Err(Scatter::Refused) => {
                responder.last_failed = Some(rmsn);
                return fail(message, WcStatus::LocProtErr, RemoteCode::ReceiveProtection);
            }
        }
        let len = packet.payload.len() as u64;
        self.stats.bytes_placed += len;
        self.stats.placed_out_of_order += u64::from(early);
        message.received += len;
        if ends {
            message.total = Some(offset + len);
            if let Some(immediate) = extensions.immediate() {
                message.imm = Some(immediate.data);
            }
            if let Some(ieth) = extensions.ieth() {
                if mrs.invalidate(ieth.r_key.0, pd).is_err() {
                    responder.last_failed = Some(rmsn);
                    return fail(
                        message,
                        WcStatus::RemInvReqErr,
                        RemoteCode::InvalidateFailed,
                    );
                }
                message.invalidated = Some(ieth.r_key.0);
            }
        }
        if message.total == Some(message.received) {
            message.done = true;
        }
        Verdict::Ack
    }

    /// A WRITE packet to RC QP slot `index`.
    fn receive_write(&mut self, index: u32, packet: &RdmaPacket<'_>) -> Verdict {
        let Device {
            qps,
            srqs,
            mrs,
            events,
            stats,
            ..
        } = self;
        let Some(qp) = qps.at_mut(index) else {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        let extensions = *packet.header.extensions();
        let (Some(reth), Some(position)) = (extensions.reth(), packet.header.opcode().position())
        else {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        let ends = position.ends_message();
        let begins = matches!(position, Position::First | Position::Only);
        let strong = qp.info.init.ordering == QpOrdering::Strong;
        if strong && qp.responder.write_open == begins {
            // A First while a WRITE is open, or a Middle or Last while none
            // is: the message is out of sequence. Closed, so that the next
            // WRITE starts clean.
            qp.responder.write_open = false;
            return Verdict::Fail(RemoteCode::InvalidRequest);
        }
        if reth.length as usize != packet.payload.len() {
            qp.responder.write_open = false;
            return Verdict::Fail(RemoteCode::InvalidRequest);
        }
        let span = match remote_span(
            mrs,
            qp,
            reth.r_key.0,
            reth.virtual_address,
            u64::from(reth.length),
            Access::REMOTE_WRITE,
        ) {
            Ok(span) => span,
            Err(code) => {
                qp.responder.write_open = false;
                return Verdict::Fail(code);
            }
        };
        let immediate = match (extensions.seth(), extensions.immediate()) {
            (Some(seth), Some(immediate)) => match assign(qp, srqs, events, seth.rmsn) {
                Ok(i) => Some((i, immediate.data)),
                Err(NoMessage::NoReceive) => return Verdict::Rnr(qp.info.min_rnr_timer),
                Err(NoMessage::OutOfWindow) => {
                    qp.responder.write_open = false;
                    return Verdict::Fail(RemoteCode::InvalidRequest);
                }
            },
            _ => None,
        };
        span.place(packet.payload);
        let len = packet.payload.len() as u64;
        stats.bytes_placed += len;
        let responder = &mut qp.responder;
        responder.write_bytes = if begins {
            len
        } else {
            responder.write_bytes + len
        };
        if strong {
            responder.write_open = !ends;
        }
        if let Some((i, data)) = immediate {
            let total = responder.write_bytes;
            let message = &mut responder.messages[i];
            message.opcode = WcOpcode::RecvRdmaWithImm;
            message.imm = Some(data);
            message.received = total;
            message.total = Some(total);
            message.done = true;
        }
        Verdict::Ack
    }

    /// A READ Request to RC QP slot `index`: a READ Response Only of
    /// the bytes the RETH names, read from the region when the frame is
    /// built.
    fn respond_read(
        &mut self,
        index: u32,
        packet: &RdmaPacket<'_>,
        request_length: u16,
    ) -> Verdict {
        let Device {
            qps, mrs, stats, ..
        } = self;
        let Some(qp) = qps.at_mut(index) else {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        let Extensions::ReadRequest { reth, seth, steth } = *packet.header.extensions() else {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        if let Some(code) = read_sequence(qp, seth.rmsn) {
            return Verdict::Fail(code);
        }
        let len = reth.length as usize;
        let pad = PadCount::for_payload(len);
        let response = 24 + len + usize::from(pad.value());
        if reth.length > qp.info.path_mtu.bytes() || usize::from(request_length) != response {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        }
        let span = match remote_span(
            mrs,
            qp,
            reth.r_key.0,
            reth.virtual_address,
            u64::from(reth.length),
            Access::REMOTE_READ,
        ) {
            Ok(span) => span,
            Err(code) => return Verdict::Fail(code),
        };
        let rbth = Rbth {
            pad,
            ..Rbth::new(
                crate::wire::Opcode::ReadResponseOnly,
                qp.info.dest_qpn,
                packet.header.rbth().sn,
            )
        };
        let Ok(header) = RdmaHeader::new(rbth, Extensions::ReadResponse { steth }) else {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        let body = if len == 0 {
            Body::None
        } else {
            Body::Region(Segment {
                region: span.region,
                offset: span.offset,
                len: span.len,
            })
        };
        stats.bytes_served += len as u64;
        Verdict::Respond(header, RdmaData::padded(body))
    }

    /// A CmpSwap or FetchAdd to RC QP slot `index`: executed now, once
    /// (Falcon delivers a pull request at most once, RDMA-0.9 §6.8), its
    /// original value kept in the response's header for every
    /// transmission of it.
    fn respond_atomic(
        &mut self,
        index: u32,
        packet: &RdmaPacket<'_>,
        request_length: u16,
    ) -> Verdict {
        let Device {
            qps, mrs, stats, ..
        } = self;
        let Some(qp) = qps.at_mut(index) else {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        let Extensions::AtomicRequest {
            atomic,
            seth,
            steth,
        } = *packet.header.extensions()
        else {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        if let Some(code) = read_sequence(qp, seth.rmsn) {
            return Verdict::Fail(code);
        }
        // RBTH, AtomicAckETH, STETH (ulp.md §1.14); an atomic names one
        // aligned 8-byte word (InfiniBand).
        if request_length != 32 || atomic.virtual_address % 8 != 0 {
            return Verdict::Fail(RemoteCode::InvalidRequest);
        }
        let span = match remote_span(
            mrs,
            qp,
            atomic.r_key.0,
            atomic.virtual_address,
            8,
            Access::REMOTE_ATOMIC,
        ) {
            Ok(span) => span,
            Err(code) => return Verdict::Fail(code),
        };
        let compare_swap = packet.header.opcode() == crate::wire::Opcode::CompareSwap;
        let original = span.region.with_mut(|bytes| {
            let word = bytes.get_mut(span.offset..span.offset + 8)?;
            let mut old = [0u8; 8];
            old.copy_from_slice(word);
            let old = u64::from_le_bytes(old);
            let new = if compare_swap {
                if old == atomic.compare {
                    atomic.swap_or_add
                } else {
                    old
                }
            } else {
                old.wrapping_add(atomic.swap_or_add)
            };
            word.copy_from_slice(&new.to_le_bytes());
            Some(old)
        });
        let Some(original) = original else {
            return Verdict::Fail(RemoteCode::RemoteAccess);
        };
        stats.atomics_executed += 1;
        let rbth = Rbth::new(
            crate::wire::Opcode::AtomicResponse,
            qp.info.dest_qpn,
            packet.header.rbth().sn,
        );
        let extensions = Extensions::AtomicResponse {
            atomic_ack: AtomicAckEth {
                original_data: original,
            },
            steth,
        };
        match RdmaHeader::new(rbth, extensions) {
            Ok(header) => Verdict::Respond(header, RdmaData::NONE),
            Err(_) => Verdict::Fail(RemoteCode::InvalidRequest),
        }
    }

    /// A UD SEND to UD QP slot `index`: its Q_Key checked, placed after the
    /// GRH bytes of the next receive, completed at once with the sender's
    /// QP. What InfiniBand drops silently is dropped and counted.
    fn receive_datagram(&mut self, index: u32, packet: &RdmaPacket<'_>) -> Verdict {
        let Device {
            qps,
            srqs,
            mrs,
            events,
            stats,
            ..
        } = self;
        let Some(qp) = qps.at_mut(index) else {
            return Verdict::Dropped;
        };
        let extensions = *packet.header.extensions();
        let Some(deth) = extensions.deth() else {
            stats.refuse(Refusal::InvalidRequest);
            return Verdict::Fail(RemoteCode::InvalidRequest);
        };
        if !matches!(qp.info.state, QpState::Rtr | QpState::Rts) {
            stats.refuse(Refusal::QpNotReady);
            return Verdict::Dropped;
        }
        if deth.q_key != qp.info.qkey {
            stats.refuse(Refusal::QkeyMismatch);
            return Verdict::Dropped;
        }
        let Some(wqe) = take_receive(qp, srqs, events) else {
            stats.refuse(Refusal::UdDropped);
            return Verdict::Dropped;
        };
        let len = packet.payload.len();
        let mut wc = WorkCompletion {
            wr_id: wqe.wr_id,
            opcode: WcOpcode::Recv,
            // In range: one MTU and the GRH.
            byte_len: (UD_GRH_LEN + len) as u32,
            qp_num: qp.qpn().value(),
            src_qp: deth.source_qp.value(),
            ..WorkCompletion::default()
        };
        if let Some(immediate) = extensions.immediate() {
            wc.imm_data = immediate.data;
            wc.wc_flags = WcFlags::WITH_IMM;
        }
        let verdict = match scatter(
            mrs,
            qp.info.pd,
            &wqe.sg_list,
            UD_GRH_LEN as u64,
            packet.payload,
        ) {
            Ok(()) => {
                stats.bytes_placed += len as u64;
                Verdict::Ack
            }
            Err(Scatter::TooLong) => {
                wc.status = WcStatus::LocLenErr;
                stats.refuse(Refusal::UdDropped);
                Verdict::Dropped
            }
            Err(Scatter::Refused) => {
                wc.status = WcStatus::LocProtErr;
                stats.refuse(Refusal::UdDropped);
                Verdict::Dropped
            }
        };
        let cq = qp.info.init.recv_cq;
        self.stats.receives += 1;
        self.push_wc(cq, index, wc);
        verdict
    }

    /// Gives Falcon the answer to request `rsn` on `connection`.
    #[allow(clippy::too_many_arguments)]
    fn answer<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        engine: &mut Engine<B, RdmaData>,
        connection: ConnectionHandle,
        rsn: Rsn,
        kind: TransactionKind,
        index: Option<u32>,
        verdict: Verdict,
    ) {
        // A refused answer means the connection or the request is gone:
        // nobody waits for it.
        match verdict {
            Verdict::Ack | Verdict::Dropped => {
                self.stats.requests += 1;
                let _ = engine.ulp_ack(now, connection, rsn);
            }
            Verdict::Rnr(timeout) => {
                self.stats.refuse(Refusal::NoReceive);
                let nack = UlpNack::ReceiverNotReady {
                    timeout,
                    ulp_nack_code: 0,
                };
                let _ = engine.ulp_nack(now, connection, rsn, nack);
            }
            Verdict::InvalidCid => {
                let nack = UlpNack::InvalidCid { ulp_nack_code: 0 };
                let _ = engine.ulp_nack(now, connection, rsn, nack);
            }
            Verdict::Respond(header, data) => {
                self.stats.requests += 1;
                let waiting = Waiting {
                    connection,
                    rsn,
                    answer: Answer::Data {
                        header: header.to_ulp_header(),
                        data,
                    },
                };
                self.answer_pull(now, engine, waiting);
            }
            Verdict::Fail(code) => {
                let verbs = index.filter(|&i| {
                    self.qps.at(i).is_some_and(|qp| {
                        qp.info.init.error_mode == ErrorMode::VerbsCompatible
                            && qp.info.init.qp_type == QpType::Rc
                    })
                });
                let ulp_nack_code = code.wire();
                let nack = if verbs.is_some() {
                    UlpNack::NonRecoverableError { ulp_nack_code }
                } else {
                    UlpNack::CompletionInError { ulp_nack_code }
                };
                match kind {
                    TransactionKind::Push => {
                        let _ = engine.ulp_nack(now, connection, rsn, nack);
                    }
                    TransactionKind::Pull => {
                        let waiting = Waiting {
                            connection,
                            rsn,
                            answer: Answer::Nack(nack),
                        };
                        self.answer_pull(now, engine, waiting);
                    }
                }
                if let Some(index) = verbs {
                    let event = match code {
                        RemoteCode::RemoteAccess | RemoteCode::ReceiveProtection => {
                            AsyncEventKind::QpAccessErr
                        }
                        _ => AsyncEventKind::QpReqErr,
                    };
                    self.fail_qp(index, None, Some(event));
                }
            }
        }
    }
}

/// The refusal counted for a failed request.
const fn refusal_of(code: RemoteCode) -> Refusal {
    match code {
        RemoteCode::InvalidRequest | RemoteCode::InvalidateFailed => Refusal::InvalidRequest,
        RemoteCode::RemoteAccess => Refusal::AccessDenied,
        RemoteCode::QpNotReceiving => Refusal::QpInError,
        RemoteCode::MessageTooLong => Refusal::TooLong,
        RemoteCode::ReceiveProtection => Refusal::ReceiveProtection,
    }
}

/// Strong ordering: a READ or atomic must carry the next read RMSN
/// (RDMA-0.9 §8.3.2); it is then the next one's turn.
fn read_sequence(qp: &mut Qp, rmsn: Rmsn) -> Option<RemoteCode> {
    if qp.info.init.ordering != QpOrdering::Strong {
        return None;
    }
    if rmsn != qp.responder.expected_read_rmsn {
        return Some(RemoteCode::InvalidRequest);
    }
    qp.responder.expected_read_rmsn = rmsn.next();
    None
}

/// The span a peer's access of `len` bytes at `addr` through `rkey`
/// may touch: the QP must grant `need` (its access flags) and so must the
/// memory region.
fn remote_span(
    mrs: &MrTable,
    qp: &Qp,
    rkey: u32,
    addr: u64,
    len: u64,
    need: Access,
) -> Result<Span, RemoteCode> {
    if len > 0 && !qp.info.access.contains(need) {
        return Err(RemoteCode::RemoteAccess);
    }
    mrs.check(rkey, qp.info.pd, addr, len, need)
        .map_err(|_| RemoteCode::RemoteAccess)
}

/// The next receive of `qp`: from its SRQ if it has one (raising the
/// SRQ's limit event when crossed), else its own queue.
fn take_receive(
    qp: &mut Qp,
    srqs: &mut Table<SharedReceiveQueue>,
    events: &mut std::collections::VecDeque<AsyncEvent>,
) -> Option<crate::verbs::RecvWr> {
    match qp.info.init.srq {
        Some(srq) => {
            let (wqe, crossed) = srqs.get_mut(srq.0)?.take()?;
            if crossed {
                events.push_back(AsyncEvent {
                    kind: AsyncEventKind::SrqLimitReached,
                    element: EventElement::Srq(srq),
                });
            }
            Some(wqe)
        }
        None => qp.rq.take(),
    }
}

/// The index of message `rmsn` in `qp`'s open messages, receives assigned
/// to it and to every message before it, in RMSN order.
fn assign(
    qp: &mut Qp,
    srqs: &mut Table<SharedReceiveQueue>,
    events: &mut std::collections::VecDeque<AsyncEvent>,
    rmsn: Rmsn,
) -> Result<usize, NoMessage> {
    let base = qp.responder.base;
    if rmsn.before(base) {
        return Err(NoMessage::OutOfWindow);
    }
    let i = base.distance(rmsn);
    if i >= RMSN_WINDOW {
        return Err(NoMessage::OutOfWindow);
    }
    let i = i as usize;
    while qp.responder.messages.len() <= i {
        let Some(wqe) = take_receive(qp, srqs, events) else {
            return Err(NoMessage::NoReceive);
        };
        qp.responder.messages.push_back(RecvMessage::new(wqe));
    }
    Ok(i)
}

/// Why data could not be scattered into a receive.
enum Scatter {
    /// It does not fit the receive's scatter list.
    TooLong,
    /// A key of the receive refused it.
    Refused,
}

/// Places `data` at `offset` of the receive's scatter list `sgl` (its
/// memory regions in `pd`, local write): every entry is checked before the
/// first byte moves.
fn scatter(
    mrs: &MrTable,
    pd: crate::verbs::Pd,
    sgl: &SgList,
    offset: u64,
    data: &[u8],
) -> Result<(), Scatter> {
    let end = offset + data.len() as u64;
    if end > sgl.total_len() {
        return Err(Scatter::TooLong);
    }
    if data.is_empty() {
        return Ok(());
    }
    let mut spans: [Option<(Span, usize)>; MAX_SGE] = std::array::from_fn(|_| None);
    let mut at = 0u64;
    for (slot, sge) in spans.iter_mut().zip(sgl.iter()) {
        let (lo, hi) = (at, at + u64::from(sge.length));
        at = hi;
        if hi <= offset || lo >= end {
            continue;
        }
        let from = offset.max(lo) - lo;
        let to = end.min(hi) - lo;
        let span = mrs
            .check(
                sge.lkey.0,
                pd,
                sge.addr.wrapping_add(from),
                to - from,
                Access::LOCAL_WRITE,
            )
            .map_err(|_| Scatter::Refused)?;
        // In range: within the message, at most 2^31 bytes.
        *slot = Some((span, (lo + from - offset) as usize));
    }
    for (span, at) in spans.iter().flatten() {
        span.place(&data[*at..*at + span.len]);
    }
    Ok(())
}
