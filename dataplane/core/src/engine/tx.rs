//! The engine's transmit path (DESIGN.md §3): scheduler pick → delivery
//! sublayer (gating, pacing, PSN, piggy-backed ACK) → Falcon header and payload →
//! PSP seal in place → Ethernet/IP/UDP.
//!
//! Layer: engine. Implements [`Engine::poll_transmit`]: ACKs and NACKs
//! first, then data by round robin over the active connections (see
//! [`crate::scheduler`]). Once the packet is picked, its frame length is
//! known and a buffer of that size is taken from the port (an ACK fits a
//! small one); the frame is built in it with no allocation: the header is
//! emitted at its final offset, the payload is copied once from the
//! transaction's ULP header and data source, and PSP seals in place with
//! IV = `now` in picoseconds (DESIGN.md §4; the IV clock keeps it strictly
//! increasing per SA).

use psp::{BoundTxSa, ICV_LEN};

use crate::delivery::Retransmission;
use crate::drop::DropReason;
use crate::engine::{arm_connection, Connection, ConnectionHandle, Engine};
use crate::pacing::Carousel;
use crate::port::PacketBuf;
use crate::time::Timestamp;
use crate::transaction::DataSource;
use crate::transaction::{decode_handle, Role, TxPayload};
use crate::wire::{FalconRepr, FrameTemplate, ResyncCode};

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// The next frame to send, built in a buffer of the size it needs
    /// taken with `alloc(len)` (the port's allocation), or `None` when
    /// nothing may be sent now. Call until `None` after every input.
    ///
    /// The packet is picked before its buffer is taken: if `alloc` has
    /// none, the packet is counted (`EngineStats::tx_no_buffer`) and lost
    /// as on the wire, and the delivery sublayer retransmits it. Ports
    /// size their pools so that this does not happen in a steady state.
    pub fn poll_transmit(
        &mut self,
        now: Timestamp,
        mut alloc: impl FnMut(usize) -> Option<B>,
    ) -> Option<B> {
        let sent = self.transmit(now, &mut alloc, |frame, released| released.push(frame));
        if sent.is_none() {
            // The end of a transmit burst: bring the wheel up to date once
            // for every connection this burst (and the inputs before it)
            // touched, so `poll_timeout` right after finds nothing pending.
            self.arm_pending();
        }
        sent
    }

    /// [`poll_transmit`](Self::poll_transmit) into a plain buffer (tools
    /// and tests): the next frame is built into `buf` and its length
    /// returned. A buffer of [`max_frame_len`](Self::max_frame_len) bytes
    /// holds any frame; a shorter one loses a longer packet as
    /// `poll_transmit` does when the port has no buffer.
    pub fn poll_transmit_into(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<usize> {
        let mut room = Some(buf);
        let sent = self.transmit(
            now,
            &mut |len| {
                room.take()
                    .filter(|bytes| bytes.len() >= len)
                    .map(|bytes| SliceBuf { bytes, len: 0 })
            },
            |_, _| {},
        );
        if sent.is_none() {
            self.arm_pending();
        }
        sent.map(|frame| frame.len)
    }

    /// The next frame, in a buffer from `alloc`. A packet that could not
    /// be sealed is dropped and counted, its buffer given back, and the
    /// next one tried.
    fn transmit<T: PacketBuf>(
        &mut self,
        now: Timestamp,
        alloc: &mut impl FnMut(usize) -> Option<T>,
        give_back: GiveBack<T, B>,
    ) -> Option<T> {
        if let Some(sent) = self.poll_ack(now, alloc, give_back) {
            return Some(sent);
        }
        let mut visits = self.data_ring.len();
        while visits > 0 {
            visits -= 1;
            let slot = self.data_ring.front()?;
            // The box opened once: through `&mut Box<Connection>` every
            // field access reloaded the box pointer after each store.
            let Some(conn) = self.connections.value_mut(slot as usize) else {
                self.data_ring.mask_front(None);
                continue;
            };
            if conn.dead {
                self.data_ring.mask_front(Some(&mut conn.on_data_ring));
                continue;
            }
            conn.initiator.top_up(&mut conn.delivery);
            conn.target.top_up(&mut conn.delivery);
            // Used in place: moved out of the Option, the 112-byte packet was
            // copied right after the callee's field-by-field stores, a
            // store-forwarding stall per packet (perf annotate: ~25 % of this
            // function's samples).
            conn.delivery.borrow_windows(&mut self.windows);
            let polled = conn.delivery.poll_transmit(now);
            let Some(packet) = polled.as_ref() else {
                // Nothing sendable (empty, out of window, paced): masked
                // until an input activates it again, or, for a packet that
                // pacing holds, until the pacing wheel releases it.
                self.data_ring.mask_front(Some(&mut conn.on_data_ring));
                if let Some(release) = conn.delivery.poll_departure() {
                    hold(&mut self.pacing, conn, release);
                }
                continue;
            };
            // One match on the handle and the retransmission reason: a
            // first transmission of a transaction packet (it has a handle;
            // a Resync has none, `TxPacket::handle`) is told apart without
            // reading the repr's packet type.
            let payload: TxPayload<'_, S> = match (packet.handle, packet.retransmission) {
                // Ours finds its payload in the same slot lookup that
                // records the transmission.
                (Some(handle), None) => match decode_handle(handle) {
                    (Role::Initiator, rsn) => conn.initiator.first_transmit(now, rsn, packet.psn()),
                    (Role::Target, rsn) => {
                        conn.target.on_first_transmit(rsn);
                        conn.target.payload(rsn).unwrap_or(TxPayload::EMPTY)
                    }
                },
                (None, None) => {
                    self.stats.resyncs += 1;
                    resync_sent(conn, now, &packet.repr);
                    TxPayload::EMPTY
                }
                (handle, Some(reason)) => {
                    self.stats.retransmissions += 1;
                    match reason {
                        Retransmission::Timeout => self.stats.retransmissions_timeout += 1,
                        Retransmission::Early => self.stats.retransmissions_early += 1,
                    }
                    match handle.map(decode_handle) {
                        None => TxPayload::EMPTY,
                        Some((Role::Initiator, rsn)) => {
                            conn.initiator.payload(rsn).unwrap_or(TxPayload::EMPTY)
                        }
                        Some((Role::Target, rsn)) => {
                            conn.target.payload(rsn).unwrap_or(TxPayload::EMPTY)
                        }
                    }
                }
            };
            let tx_sa = conn.tx_sa.as_mut().map(|sa| sa.bind(&mut self.tx_contexts));
            let built = build_frame(alloc, &conn.frame, tx_sa, &packet.repr, payload, now);
            // The connection sent (or tried): to the tail. After the frame,
            // not before reading the packet: the ring's branch between the
            // packet's stores and its reads had them read back from memory.
            self.data_ring.rotate();
            // On the connection at hand: `arm` would look it up again.
            arm_connection(&mut self.unarmed, conn, slot);
            match built {
                Ok(frame) => {
                    if conn.delivery.is_rate_capped() {
                        conn.delivery.handle_departure(now, frame.len());
                    }
                    // Counted a block apart from `tx_frames`: side by side, the
                    // two adjacent counters would be added as one vector.
                    self.stats.tx_bytes += frame.len() as u64;
                    self.stats.tx_frames += 1;
                    return Some(frame);
                }
                Err(failure) => {
                    if !self.tx_failed(failure, give_back) {
                        return None;
                    }
                }
            }
        }
        None
    }

    /// The next due ACK or NACK of any connection (they skip the data
    /// round robin).
    /// A frame not built: counted, its buffer (if any) given back.
    /// Whether to go on with the next packet (not when the port had no
    /// buffer). Out of line: neither happens in a steady state.
    #[cold]
    #[inline(never)]
    fn tx_failed<T: PacketBuf>(
        &mut self,
        failure: TxFailure<T>,
        give_back: GiveBack<T, B>,
    ) -> bool {
        match failure {
            TxFailure::NoBuffer => {
                self.stats.tx_no_buffer += 1;
                false
            }
            TxFailure::NotSealed(spent, reason) => {
                self.shared.drops.record(reason);
                give_back(spent, &mut self.shared.released);
                true
            }
        }
    }

    fn poll_ack<T: PacketBuf>(
        &mut self,
        now: Timestamp,
        alloc: &mut impl FnMut(usize) -> Option<T>,
        give_back: GiveBack<T, B>,
    ) -> Option<T> {
        while let Some(slot) = self.ack_ring.front() {
            let Some(conn) = self.connections.value_mut(slot as usize) else {
                self.ack_ring.mask_front(None);
                continue;
            };
            if conn.dead || !conn.delivery.ack_due(now) {
                self.ack_ring.mask_front(Some(&mut conn.on_ack_ring));
                continue;
            }
            // Only when one is due: the level is a search over 31 thresholds
            // per pool.
            let level = self.buffer_level.level();
            let Some(repr) = conn.delivery.poll_ack(now, level) else {
                self.ack_ring.mask_front(Some(&mut conn.on_ack_ring));
                continue;
            };
            let empty = TxPayload::<S>::EMPTY;
            let tx_sa = conn.tx_sa.as_mut().map(|sa| sa.bind(&mut self.tx_contexts));
            match build_frame(alloc, &conn.frame, tx_sa, &repr, empty, now) {
                Ok(frame) => {
                    self.stats.tx_frames += 1;
                    self.stats.tx_acks += 1;
                    self.stats.tx_bytes += frame.len() as u64;
                    return Some(frame);
                }
                Err(failure) => {
                    if !self.tx_failed(failure, give_back) {
                        return None;
                    }
                }
            }
        }
        None
    }
}

/// Why [`build_frame`] made no frame of a packet.
enum TxFailure<T> {
    /// The port had no buffer of the size needed.
    NoBuffer,
    /// Not sealed: the buffer back, and why.
    NotSealed(T, DropReason),
}

/// Where `transmit` puts a buffer it could not use: the engine's own
/// frames go back to the port with the released ones
/// ([`Vec::push`]); a caller's plain slice ([`SliceBuf`]) nowhere.
type GiveBack<T, B> = fn(T, &mut Vec<B>);

/// Takes a buffer of the frame's length from `alloc` and writes the frame
/// into it: outer headers, PSP header, the Falcon header and `payload`
/// (zero-filled if shorter than the header says, which the transaction
/// sublayer never lets happen), sealed in place.
#[inline(always)]
fn build_frame<T: PacketBuf, S: DataSource>(
    alloc: &mut impl FnMut(usize) -> Option<T>,
    frame: &FrameTemplate,
    tx_sa: Option<BoundTxSa<'_>>,
    repr: &FalconRepr,
    payload: TxPayload<'_, S>,
    now: Timestamp,
) -> Result<T, TxFailure<T>> {
    let headroom = frame.header_len();
    let psp_header = tx_sa.as_ref().map_or(0, |sa| sa.header_len());
    let trailer = if tx_sa.is_some() { ICV_LEN } else { 0 };
    let start = headroom + psp_header;
    let len = start + repr.buffer_len() + trailer;
    let Some(mut out) = alloc(len) else {
        return Err(TxFailure::NoBuffer);
    };
    match emit_frame(out.buffer_mut(), frame, tx_sa, repr, payload, now) {
        Ok(len) => {
            out.set_len(len);
            Ok(out)
        }
        Err(reason) => Err(TxFailure::NotSealed(out, reason)),
    }
}

/// Writes one frame into `buf` (at least the frame's length) and returns
/// its length.
#[inline]
fn emit_frame<S: DataSource>(
    buf: &mut [u8],
    frame: &FrameTemplate,
    tx_sa: Option<BoundTxSa<'_>>,
    repr: &FalconRepr,
    payload: TxPayload<'_, S>,
    now: Timestamp,
) -> Result<usize, DropReason> {
    let headroom = frame.header_len();
    let psp_header = tx_sa.as_ref().map_or(0, |sa| sa.header_len());
    let trailer = if tx_sa.is_some() { ICV_LEN } else { 0 };
    let start = headroom + psp_header;
    let Some((room, payload_range)) = buf
        .len()
        .checked_sub(trailer)
        .and_then(|end| buf.get_mut(start..end))
        .and_then(|room| repr.emit_within(room).map(|range| (room, range)))
    else {
        debug_assert!(false, "a buffer shorter than the frame it was taken for");
        return Err(DropReason::TxSealFailed);
    };
    let falcon_len = payload_range.end;
    // In the room `emit_within` wrote into and checked: taken from
    // `buf[start..]` again, the range would be bounds-checked again and more
    // registers saved around the payload's copy.
    let dst = &mut room[payload_range];
    if !dst.is_empty() {
        payload.write(dst);
    }
    let udp_payload_len = match tx_sa {
        Some(sa) => sa
            .seal(now.iv_picos(), buf, headroom, falcon_len)
            .map_err(|_| DropReason::TxSealFailed)?
            .len(),
        None => falcon_len,
    };
    frame
        .emit(buf, udp_payload_len)
        .map_err(|_| DropReason::TxSealFailed)?;
    Ok(headroom + udp_payload_len)
}

/// A caller's plain buffer as a frame buffer, for
/// [`Engine::poll_transmit_into`].
struct SliceBuf<'a> {
    bytes: &'a mut [u8],
    len: usize,
}

impl PacketBuf for SliceBuf<'_> {
    fn data(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }

    fn data_mut(&mut self) -> &mut [u8] {
        self.bytes.get_mut(..self.len).unwrap_or_default()
    }

    fn buffer_mut(&mut self) -> &mut [u8] {
        self.bytes
    }

    fn set_len(&mut self, len: usize) {
        self.len = len.min(self.bytes.len());
    }

    fn len(&self) -> usize {
        self.len
    }

    fn capacity(&self) -> usize {
        self.bytes.len()
    }
}

/// `conn` has a packet that pacing holds until `release`: into the pacing
/// wheel, unless an entry there releases it no later (one that releases it
/// earlier finds it still held and puts it back).
#[inline]
fn hold<B: PacketBuf, S>(
    pacing: &mut Carousel<ConnectionHandle>,
    conn: &mut Connection<B, S>,
    release: Timestamp,
) {
    if conn.departure.is_some_and(|held| held <= release) {
        return;
    }
    conn.departure = Some(release);
    // A release beyond the horizon comes back early, at the horizon, and
    // is put back from there.
    pacing.insert(conn.handle, release);
}

/// A Resync left `conn`: one that a request became at its first
/// transmission (the local xLR drop filter, OCP Falcon 0.9 §11) records
/// the request sent. Out of line: Resyncs are rare, and inlined this grew
/// the transmit loop on every packet.
#[cold]
#[inline(never)]
fn resync_sent<B: PacketBuf, S: DataSource>(
    conn: &mut Connection<B, S>,
    now: Timestamp,
    repr: &FalconRepr,
) {
    if let FalconRepr::Resync(resync) = repr {
        if resync.code == ResyncCode::LocalXlrFlow {
            let (rsn, psn) = (resync.header.rsn, resync.header.psn);
            conn.initiator.on_local_xlr_sent(now, rsn, psn);
        }
    }
}
