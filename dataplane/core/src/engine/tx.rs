//! The engine's transmit path (DESIGN.md §3): scheduler pick → delivery
//! sublayer (gating, PSN, piggy-backed ACK) → Falcon header and payload →
//! PSP seal in place → Ethernet/IP/UDP.
//!
//! Layer: engine. Implements [`Engine::poll_transmit`]: ACKs and NACKs
//! first, then data by round robin over the active connections (see
//! [`crate::scheduler`]). The frame is built in the caller's buffer with no
//! allocation: the header is emitted at its final offset, the payload is
//! copied once from the transaction's vector, and PSP seals in place with
//! IV = `now` in picoseconds (DESIGN.md §4; the IV clock keeps it strictly
//! increasing per SA).

use psp::{TxSa, ICV_LEN};

use crate::delivery::Retransmission;
use crate::drop::DropReason;
use crate::engine::{arm_connection, Connection, Engine};
use crate::time::Timestamp;
use crate::transaction::{decode_handle, Role};
use crate::wire::{FalconRepr, FrameTemplate, ResyncCode};

impl Engine {
    /// Builds the next frame to send into `buf` (at least
    /// [`max_frame_len`](Engine::max_frame_len) bytes) and returns its
    /// length, or `None` when nothing may be sent now. Call until `None`
    /// after every input.
    pub fn poll_transmit(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<usize> {
        let sent = self.transmit(now, buf);
        if sent.is_none() {
            // The end of a transmit burst: bring the wheel up to date once
            // for every connection this burst (and the inputs before it)
            // touched, so `poll_timeout` right after finds nothing pending.
            self.arm_pending();
        }
        sent
    }

    fn transmit(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<usize> {
        if buf.len() < self.max_frame_len {
            self.stats.tx_buffer_too_small += 1;
            return None;
        }
        if let Some(len) = self.poll_ack(now, buf) {
            return Some(len);
        }
        let mut visits = self.data_ring.len();
        while visits > 0 {
            visits -= 1;
            let slot = self.data_ring.front()?;
            // The box opened once: through `&mut Box<Connection>` every
            // field access reloaded the box pointer after each store
            // (callgrind, push64 profile: 3155 → 3144 instructions per
            // transaction).
            let Some(conn) = self.connections[slot as usize].as_deref_mut() else {
                self.data_ring.mask_front();
                continue;
            };
            if conn.dead {
                self.data_ring.mask_front();
                continue;
            }
            conn.initiator.top_up(&mut conn.delivery);
            conn.target.top_up(&mut conn.delivery);
            // Used in place: moved out of the Option, the 112-byte packet was
            // copied right after the callee's field-by-field stores, a
            // store-forwarding stall per packet (perf annotate: ~25 % of this
            // function's samples).
            let polled = conn.delivery.poll_transmit(now);
            let Some(packet) = polled.as_ref() else {
                // Nothing sendable (empty, out of window, paced): masked
                // until an input activates it again. A paced packet armed
                // the pacing release, which the wheel must know.
                self.data_ring.mask_front();
                arm_connection(&mut self.unarmed, conn, slot);
                continue;
            };
            // One match on the handle and the retransmission reason: a
            // first transmission of a transaction packet (it has a handle;
            // a Resync has none, `TxPacket::handle`) is told apart without
            // reading the repr's packet type (callgrind, push64 profile:
            // 2739.1 → 2729.8 instructions per transaction).
            let payload: &[u8] = match (packet.handle, packet.retransmission) {
                // Ours finds its payload in the same slot lookup that
                // records the transmission.
                (Some(handle), None) => match decode_handle(handle) {
                    (Role::Initiator, rsn) => conn.initiator.first_transmit(now, rsn, packet.psn()),
                    (Role::Target, rsn) => {
                        conn.target.on_first_transmit(rsn);
                        conn.target.payload(rsn).unwrap_or_default()
                    }
                },
                (None, None) => {
                    self.stats.resyncs += 1;
                    resync_sent(conn, now, &packet.repr);
                    &[]
                }
                (handle, Some(reason)) => {
                    self.stats.retransmissions += 1;
                    match reason {
                        Retransmission::Timeout => self.stats.retransmissions_timeout += 1,
                        Retransmission::Early => self.stats.retransmissions_early += 1,
                    }
                    match handle.map(decode_handle) {
                        None => &[],
                        Some((Role::Initiator, rsn)) => {
                            conn.initiator.payload(rsn).unwrap_or_default()
                        }
                        Some((Role::Target, rsn)) => conn.target.payload(rsn).unwrap_or_default(),
                    }
                }
            };
            let result = emit_frame(
                buf,
                &conn.frame,
                conn.tx_sa.as_mut(),
                &packet.repr,
                payload,
                now,
            );
            // The connection sent (or tried): to the tail. After the frame,
            // not before reading the packet: the ring's branch between the
            // packet's stores and its reads had them read back from memory
            // (callgrind, push64: 2292.3 → 2285.4 instructions per
            // transaction, `poll_transmit` 369.2 → 362.2 self; push64-psp
            // 5045.6 → 5038.5).
            self.data_ring.rotate();
            if let Ok(len) = result {
                // Counted a block apart from `tx_frames`: side by side, the
                // two adjacent counters were added as one vector (six
                // instructions for two; callgrind, push64: 2285.4 → 2282.4
                // instructions per transaction, `poll_transmit` 362.2 →
                // 359.3 self; push64-psp 5038.5 → 5035.7).
                self.stats.tx_bytes += len as u64;
            }
            // On the connection at hand: `arm` looked it up again (callgrind,
            // push64 profile: 2898 → 2884 instructions per transaction).
            arm_connection(&mut self.unarmed, conn, slot);
            match result {
                Ok(len) => {
                    self.stats.tx_frames += 1;
                    return Some(len);
                }
                Err(reason) => self.shared.drops.record(reason),
            }
        }
        None
    }

    /// The next due ACK or NACK of any connection (they skip the data
    /// round robin).
    fn poll_ack(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<usize> {
        while let Some(slot) = self.ack_ring.front() {
            let Some(conn) = self.connections[slot as usize].as_mut() else {
                self.ack_ring.mask_front();
                continue;
            };
            if conn.dead || !conn.delivery.ack_due(now) {
                self.ack_ring.mask_front();
                continue;
            }
            // Only when one is due: the level is a search over 31 thresholds
            // per pool.
            let level = self.buffer_level.level();
            let Some(repr) = conn.delivery.poll_ack(now, level) else {
                self.ack_ring.mask_front();
                continue;
            };
            match emit_frame(buf, &conn.frame, conn.tx_sa.as_mut(), &repr, &[], now) {
                Ok(len) => {
                    self.stats.tx_frames += 1;
                    self.stats.tx_acks += 1;
                    self.stats.tx_bytes += len as u64;
                    return Some(len);
                }
                Err(reason) => self.shared.drops.record(reason),
            }
        }
        None
    }
}

/// Writes one frame into `buf`: outer headers, PSP header, the Falcon
/// header and `payload` (zero-filled if shorter than the header says, which
/// the transaction sublayer never lets happen), sealed in place.
#[inline]
fn emit_frame(
    buf: &mut [u8],
    frame: &FrameTemplate,
    tx_sa: Option<&mut TxSa>,
    repr: &FalconRepr,
    payload: &[u8],
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
        debug_assert!(false, "frame longer than max_frame_len");
        return Err(DropReason::TxSealFailed);
    };
    let falcon_len = payload_range.end;
    // In the room `emit_within` wrote into and checked: taken from
    // `buf[start..]` again, the range was bounds-checked again and more
    // registers were saved around the payload's copy (callgrind, push64
    // profile: 2702.8 → 2689.5 instructions per transaction, `emit_frame`
    // 166.4 → 153.2 inclusive).
    let dst = &mut room[payload_range];
    if !dst.is_empty() {
        let n = dst.len().min(payload.len());
        dst[..n].copy_from_slice(&payload[..n]);
        if n < dst.len() {
            dst[n..].fill(0);
        }
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

/// A Resync left `conn`: one that a request became at its first
/// transmission (the local xLR drop filter, OCP Falcon 0.9 §11) records
/// the request sent. Out of line: Resyncs are rare, and inlined this grew
/// the transmit loop on every packet.
#[cold]
#[inline(never)]
fn resync_sent(conn: &mut Connection, now: Timestamp, repr: &FalconRepr) {
    if let FalconRepr::Resync(resync) = repr {
        if resync.code == ResyncCode::LocalXlrFlow {
            let (rsn, psn) = (resync.header.rsn, resync.header.psn);
            conn.initiator.on_local_xlr_sent(now, rsn, psn);
        }
    }
}
