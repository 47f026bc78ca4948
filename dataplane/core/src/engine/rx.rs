//! The engine's receive path (DESIGN.md §3): frame → PSP → Falcon →
//! connection → delivery sublayer → transaction sublayer.
//!
//! Layer: engine. Implements [`Engine::handle_packet`] (a frame in the
//! port's own buffer, which the engine keeps when a payload in it goes to
//! the ULP, and otherwise hands back with its [`Disposition`]) and the
//! dispatch of the delivery sublayer's events to the transaction
//! sublayer. Every frame
//! that goes no further is a counted [`DropReason`]; a packet failing the
//! PSP checks (ICV, SPI, PCID, replay) is dropped before the delivery
//! sublayer sees it, so it gets no ACK and no NACK (OCP Falcon 0.9
//! §9.2.2.2–9.2.2.3); an SPI check or decryption failure is also reported
//! to the connection manager (`cm.rs`). Never panics on frame input.

use core::ops::Range;

use psp::{Spi, NEXT_HEADER_FALCON};

use crate::delivery::{DeliveryConnection, Event, PacketKind, RxMeta, RxOutcome};
use crate::drop::DropReason;
use crate::engine::cm::reported as cm_reported;
use crate::engine::rue_inline::rue_offer_due;
use crate::engine::{arm_connection, conn_in, Engine};
use crate::ids::{ConnectionId, DestinationFunction};
use crate::port::PacketBuf;
use crate::random::Random;
use crate::time::Timestamp;
use crate::transaction::DataSource;
use crate::transaction::{decode_handle, ConnectionFault, RnrNack, Role, RxPayload, UlpEvent};
use crate::wire::falcon::packet::peek_versioned;
use crate::wire::falcon::push_data::HEADER_LEN as PUSH_DATA_HEADER_LEN;
use crate::wire::{
    parse_rx, Ecn, FalconRepr, FalconTime32, FrameTemplate, IpFields, PacketType, PushDataPacket,
    PushDataRepr,
};

/// What became of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Disposition {
    /// Handled: its packet went through the delivery sublayer (and a
    /// payload in it, if kept, to the transaction sublayer).
    Consumed,
    /// Dropped, and counted under this reason.
    Dropped(DropReason),
    /// Its SPI (PSP on) or destination CID (PSP off) belongs to another
    /// shard of this engine's node: not opened, not counted as a drop,
    /// handed back for the caller to steer to `shard`'s engine
    /// ([`Node::steer`](crate::node::Node::steer) does the same before the
    /// engines see a frame). Only an engine that is one of several shards
    /// checks.
    NotOnThisEngine {
        /// The shard that owns it.
        shard: u16,
    },
}

/// A received frame after [`Engine::handle_packet`]: its disposition, and
/// the frame itself unless the engine kept it (a payload in it now waits
/// for the ULP, see `crate::transaction::payload`). The caller returns
/// a frame it gets back to its port.
#[derive(Debug)]
#[must_use = "a frame handed back goes back to its port"]
pub struct Received<B> {
    /// What became of it.
    pub disposition: Disposition,
    /// The frame, unless the engine kept it.
    pub frame: Option<B>,
}

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// A received frame (Ethernet to the end of the UDP payload; padding
    /// after it is ignored), in the port's own buffer: checked, opened in
    /// place, and handed to the sublayers. A Push Data or Pull Data payload
    /// the transaction sublayer keeps keeps its frame: the ULP reads it
    /// there and gives it back with [`release`](Self::release). Any other
    /// frame comes back in [`Received::frame`]. Then drain the `poll_*`
    /// outputs.
    #[inline]
    pub fn handle_packet(&mut self, now: Timestamp, frame: B) -> Received<B> {
        if let Some((steering, own)) = self.shard_check {
            if let Some(shard) = steering.shard_of(frame.data()).filter(|&s| s != own) {
                return self.foreign(frame, shard);
            }
        }
        self.stats.rx_frames += 1;
        let len = frame.len() as u64;
        let mut held = Some(frame);
        let disposition = match self.receive(now, &mut held) {
            Ok(()) => Disposition::Consumed,
            Err(reason) => {
                self.shared.drops.record(reason);
                // SPI check and decryption failures also go to the CM
                // (`cm.rs`), their SPI, CID and connection read again from
                // the frame out of line: carried out of `receive` instead,
                // they cost the receive path of every packet.
                if let (DropReason::Psp(psp_reason), Some(frame)) = (reason, held.as_mut()) {
                    if cm_reported(psp_reason) {
                        self.report_psp_drop(now, psp_reason, frame.data_mut());
                    }
                }
                Disposition::Dropped(reason)
            }
        };
        // Counted a block apart from `rx_frames`: side by side, the two
        // adjacent counters would be added as one vector.
        self.stats.rx_bytes += len;
        self.finish(now);
        Received {
            disposition,
            frame: held,
        }
    }

    #[inline(always)]
    fn receive(&mut self, now: Timestamp, held: &mut Option<B>) -> Result<(), DropReason> {
        let Some(buf) = held.as_mut() else {
            return Err(DropReason::MalformedEthernet);
        };
        let frame = buf.data_mut();
        // The destination is the node's (`parse_rx`): neither PSP nor, with
        // IPv6, any checksum covers the addresses.
        let parsed = parse_rx(frame, self.checksums, &self.addresses)
            .map_err(|e| DropReason::for_frame(&e))?;
        if parsed.dst_port != self.udp_port {
            return Err(DropReason::NotFalconPort);
        }
        let ecn_ce = parsed.ecn == Ecn::Ce;
        let ttl = parsed.ttl;
        let udp_payload = parsed.payload;
        let (falcon, sealed) = match &mut self.psp {
            Some(psp) => {
                // Integrity first (§9.2.2.1): open in place, ICV verified.
                let opened = psp
                    .db
                    .open(frame, udp_payload.start, udp_payload.len())
                    .map_err(DropReason::Psp)?;
                if opened.next_header() != NEXT_HEADER_FALCON {
                    return Err(DropReason::MalformedFalcon);
                }
                let fields = (opened.spi(), opened.iv(), opened.vc());
                let start = udp_payload.start + opened.payload_offset();
                let len = opened.payload().len();
                (start..start + len, Some(fields))
            }
            None => (udp_payload, None),
        };
        let falcon_start = falcon.start;
        let bytes: &[u8] = &frame[falcon];
        let type_code = peek_versioned(bytes).map_err(|e| DropReason::for_falcon(&e))?;
        // The CID from the frame bytes (bytes 1–3 of every Falcon header):
        // read back from the just-written repr it stalled on store
        // forwarding (perf annotate: ~20 % of this function's samples).
        let cid = match bytes {
            [_, a, b, c, ..] => ConnectionId::truncating(u32::from_be_bytes([0, *a, *b, *c])),
            // (Unreachable: the peek checked 8 bytes.)
            _ => return Err(DropReason::MalformedFalcon),
        };
        let rx = RxFields {
            falcon_start,
            cid,
            sealed,
            ecn_ce,
            ttl,
        };
        // Push Data, all but the ACKs a target receives, parsed as itself: as a
        // `FalconRepr` its fields would be stored into the enum and copied with
        // the other variants' bytes, and its destination function, delivery and
        // payload range would each match on the type again.
        if type_code == u8::from(PacketType::PushData) {
            let packet =
                PushDataPacket::new_checked(bytes).map_err(|e| DropReason::for_falcon(&e))?;
            let repr =
                PushDataRepr::parse_peeked(&packet).map_err(|e| DropReason::for_falcon(&e))?;
            return self.receive_parsed(now, held, rx, repr);
        }
        let repr = FalconRepr::parse_peeked(bytes, PacketType::from(type_code))
            .map_err(|e| DropReason::for_falcon(&e))?;
        self.receive_parsed(now, held, rx, repr)
    }

    /// A frame of another shard, handed back.
    #[cold]
    #[inline(never)]
    fn foreign(&mut self, frame: B, shard: u16) -> Received<B> {
        self.stats.rx_other_shard += 1;
        Received {
            disposition: Disposition::NotOnThisEngine { shard },
            frame: Some(frame),
        }
    }

    /// The rest of `receive` once the Falcon packet is parsed: connection,
    /// PSP and function checks, the delivery sublayer, then the transaction
    /// sublayer. Monomorphized for Push Data and for every other type.
    #[inline(always)]
    fn receive_parsed<R: RxRepr>(
        &mut self,
        now: Timestamp,
        held: &mut Option<B>,
        rx: RxFields,
        repr: R,
    ) -> Result<(), DropReason> {
        let slot = self
            .by_cid
            .get(rx.cid)
            .ok_or(DropReason::UnknownConnection)?;
        let conn = self
            .connections
            .value_mut(slot as usize)
            .ok_or(DropReason::UnknownConnection)?;
        if conn.dead {
            return Err(DropReason::ConnectionNotAlive);
        }
        // §9.2.2.2–9.2.2.3: SPI, PCID and replay checks on the authenticated
        // header; the IV is the sender's TX time (t1 of data, t3 of ACKs).
        // The globals by reference: copied out of `self.psp` up front (the open
        // borrows it mutably) they would cost a copy per packet.
        let tx_time = match (rx.sealed, conn.rx_security.as_mut(), self.psp.as_ref()) {
            (Some((spi, iv, vc)), Some(security), Some(psp)) => {
                security
                    .accept_fields(&psp.globals, spi, iv, vc)
                    .map_err(DropReason::Psp)?;
                conn.remote_time_at = now;
                FalconTime32::from_picos(iv)
            }
            (Some(_), _, _) => return Err(DropReason::UnknownConnection),
            // Plaintext: no TX timestamp on the wire (see `EngineConfig::psp`).
            (None, _, _) => now.falcon_time32(),
        };
        if let Some(function) = repr.destination_function() {
            if function != conn.local_function {
                return Err(DropReason::DestinationFunctionMismatch);
            }
        }
        let meta = RxMeta {
            tx_time,
            ecn_ce: rx.ecn_ce,
            ttl: rx.ttl,
        };
        // Push Data carries no ACK (only its BPSNs, which count none): its copy
        // of this path reads and compares no ACK count.
        let acks_before = if R::MAY_ACK {
            conn.delivery.stats().acks_received
        } else {
            0
        };
        let outcome = repr.handle(&mut conn.delivery, now, meta);
        if R::MAY_ACK && conn.delivery.stats().acks_received > acks_before {
            if let Some(rtt) = conn.delivery.rtt().latest {
                self.stats.record_rtt(rtt);
            }
        }
        // Piggy-backed ACKs first: a Pull Request's ACK before its Pull Data.
        // `drain_delivery_events` on the connection in hand (held as `&mut
        // Connection`, not through its `Box`, which would be reloaded after
        // every call), looked up again only after a dispatch.
        let conn = if conn.delivery.has_events() {
            self.dispatch_delivery_events(slot, now);
            conn_in(&mut self.connections, slot)
        } else {
            conn
        };
        match outcome {
            RxOutcome::Deliver(arrival) => {
                // The repr is owned: from here on only the payload is read
                // from the frame, which may now be handed down whole.
                let range = match repr.payload_range() {
                    Some(r) => rx.falcon_start + r.start..rx.falcon_start + r.end,
                    None => 0..0,
                };
                let payload = RxPayload { frame: held, range };
                if conn.dead {
                    self.shared.drops.record(DropReason::ConnectionNotAlive);
                } else if arrival.kind == PacketKind::PullData {
                    let (initiator, mut ctx) = conn.initiator_ctx(now, &mut self.shared);
                    initiator.on_pull_data(&mut ctx, arrival, payload);
                } else {
                    let (target, mut ctx) = conn.target_ctx(now, &mut self.shared);
                    target.on_request(&mut ctx, arrival, payload);
                }
            }
            RxOutcome::Dropped(reason) => self.shared.drops.record(reason),
            RxOutcome::Processed => {}
        }
        // `after_input` (`upkeep::settled`, then the RUE offer), on the
        // connection in hand so that its event check and its arming do not
        // look the slot up again. Written out: through `settled`, with the
        // RUE check after the rings, it cost ~6 instructions a transaction
        // more (callgrind, push64-psp).
        let conn = if conn.delivery.has_events() {
            self.dispatch_delivery_events(slot, now);
            conn_in(&mut self.connections, slot)
        } else {
            conn
        };
        arm_connection(&mut self.unarmed, conn, slot);
        let rue_due = rue_offer_due(&self.rue, &self.rue_external, conn);
        self.data_ring.activate(slot, &mut conn.on_data_ring);
        self.ack_ring.activate(slot, &mut conn.on_ack_ring);
        if rue_due {
            self.offer_rue_event(slot, now);
        }
        Ok(())
    }

    /// Hands the delivery sublayer's events to the transaction sublayer. Runs
    /// twice per received packet and mostly finds none (an ACK every ~64
    /// pushes): the check stays inline and the dispatch out of line, so an
    /// empty drain does not pay the dispatch's register saves (the same split
    /// as `finish` and `rue_offer`: see [`Engine::finish`]).
    #[inline(always)]
    pub(super) fn drain_delivery_events(&mut self, slot: u32, now: Timestamp) {
        let pending = self
            .connections
            .value(slot as usize)
            .is_some_and(|conn| conn.delivery.has_events());
        if pending {
            self.dispatch_delivery_events(slot, now);
        }
    }

    #[inline(never)]
    fn dispatch_delivery_events(&mut self, slot: u32, now: Timestamp) {
        loop {
            let Some(conn) = self.connections.value_mut(slot as usize) else {
                return;
            };
            let Some(event) = conn.delivery.poll_event() else {
                return;
            };
            let role = |handle| decode_handle(handle).0;
            match event {
                Event::Acked {
                    rsn, kind, handle, ..
                } => match role(handle) {
                    Role::Initiator => {
                        let (initiator, mut ctx) = conn.initiator_ctx(now, &mut self.shared);
                        initiator.on_acked_run(&mut ctx, rsn, kind);
                    }
                    Role::Target => {
                        let (target, mut ctx) = conn.target_ctx(now, &mut self.shared);
                        target.on_pull_data_acked(&mut ctx, rsn);
                    }
                },
                Event::ReceiverNotReady {
                    rsn,
                    handle,
                    timeout,
                    ulp_nack_code,
                    ..
                } => {
                    self.shared.stats.rnr_received += 1;
                    if role(handle) == Role::Initiator {
                        let tag = conn.initiator.on_receiver_not_ready(now, rsn);
                        if let (Some(tag), Some(reports)) = (tag, &mut self.shared.rnr_reports) {
                            reports.push_back(RnrNack {
                                connection: conn.handle,
                                rsn,
                                tag,
                                timeout,
                                ulp_nack_code,
                            });
                        }
                    }
                }
                Event::Nacked {
                    rsn,
                    code,
                    ulp_nack_code,
                    handle,
                    ..
                } => {
                    // Our Pull Data NACKed: the Resync replacing it finishes it
                    // when acknowledged.
                    if role(handle) == Role::Initiator {
                        conn.initiator.on_nacked(rsn, code, ulp_nack_code);
                    }
                }
                Event::RetransmitExhausted { rsn, handle, .. } => {
                    if role(handle) == Role::Initiator {
                        let (initiator, mut ctx) = conn.initiator_ctx(now, &mut self.shared);
                        initiator.on_exhausted(&mut ctx, rsn);
                    }
                }
                Event::Resynced { rsn, original, .. } => match original {
                    PacketType::PullData => {
                        let (initiator, mut ctx) = conn.initiator_ctx(now, &mut self.shared);
                        initiator.on_pull_data_resynced(&mut ctx, rsn);
                    }
                    PacketType::PullRequest | PacketType::PushData => {
                        let (target, mut ctx) = conn.target_ctx(now, &mut self.shared);
                        target.on_resynced(&mut ctx, rsn);
                    }
                    _ => {}
                },
                Event::RandomizePath => {
                    // PLB (§10.4): a new path is a new UDP source port (IPv4)
                    // or flow label (IPv6) for ECMP.
                    let bits = self.rng.next_u64();
                    let mut repr = *conn.frame.repr();
                    repr.src_port = 0xC000 | (bits as u16 & 0x3FFF);
                    if let IpFields::V6 { flow_label, .. } = &mut repr.ip {
                        *flow_label = crate::wire::FlowLabel::truncating((bits >> 16) as u32);
                    }
                    conn.frame = FrameTemplate::new(repr);
                    self.stats.path_changes += 1;
                }
                Event::Error(error) => {
                    self.stats.connection_errors += 1;
                    let connection = conn.handle;
                    self.shared.events.push_back(UlpEvent::ConnectionError {
                        connection,
                        fault: ConnectionFault::Delivery(error),
                    });
                    if error.is_fatal() {
                        self.kill(slot, now);
                        return;
                    }
                }
            }
        }
    }
}

/// What `receive` learnt of a frame before parsing its Falcon packet.
struct RxFields {
    /// Where the Falcon packet starts in the frame.
    falcon_start: usize,
    /// The destination CID (bytes 1–3 of the Falcon header).
    cid: ConnectionId,
    /// SPI, IV and VC of a PSP packet, opened.
    sealed: Option<(Spi, u64, Option<u64>)>,
    ecn_ce: bool,
    ttl: u8,
}

/// A parsed Falcon packet as `receive_parsed` uses it: any type as a
/// [`FalconRepr`], or Push Data as itself.
trait RxRepr {
    /// Whether handling it may count a received ACK or NACK (`false`
    /// only when it never does).
    const MAY_ACK: bool;
    /// The Destination Function of a packet with a base header (OCP Falcon
    /// 0.9 §7.2); ACKs and NACKs carry none.
    fn destination_function(&self) -> Option<DestinationFunction>;
    /// [`FalconRepr::payload_range`].
    fn payload_range(&self) -> Option<Range<usize>>;
    /// [`DeliveryConnection::handle_packet`].
    fn handle(&self, delivery: &mut DeliveryConnection, now: Timestamp, meta: RxMeta) -> RxOutcome;
}

impl RxRepr for FalconRepr {
    const MAY_ACK: bool = true;

    #[inline(always)]
    fn destination_function(&self) -> Option<DestinationFunction> {
        match self {
            FalconRepr::PullRequest(r) => Some(r.header.destination_function),
            FalconRepr::PullData(r) => Some(r.header.destination_function),
            FalconRepr::PushData(r) => Some(r.header.destination_function),
            FalconRepr::Resync(r) => Some(r.header.destination_function),
            FalconRepr::Nack(_) | FalconRepr::Back(_) | FalconRepr::Eack(_) => None,
        }
    }

    #[inline(always)]
    fn payload_range(&self) -> Option<Range<usize>> {
        FalconRepr::payload_range(self)
    }

    #[inline(always)]
    fn handle(&self, delivery: &mut DeliveryConnection, now: Timestamp, meta: RxMeta) -> RxOutcome {
        delivery.handle_packet(now, self, meta)
    }
}

impl RxRepr for PushDataRepr {
    /// [`DeliveryConnection::handle_push_data`] counts no ACK.
    const MAY_ACK: bool = false;

    #[inline(always)]
    fn destination_function(&self) -> Option<DestinationFunction> {
        Some(self.header.destination_function)
    }

    #[inline(always)]
    fn payload_range(&self) -> Option<Range<usize>> {
        Some(PUSH_DATA_HEADER_LEN..self.buffer_len())
    }

    #[inline(always)]
    fn handle(&self, delivery: &mut DeliveryConnection, now: Timestamp, meta: RxMeta) -> RxOutcome {
        delivery.handle_push_data(now, self, meta)
    }
}
