//! The transmitter side of one sliding window, and its retransmit buffer.
//!
//! Layer: delivery. Owns [`TxWindow`]: BPSN and NPSN of one window (OCP
//! Falcon 0.9 §9.1.1: RBPSN/RNPSN or DBPSN/DNPSN), the TX ack bitmap, the
//! set of packets awaiting retransmission, the outstanding-request counters
//! (RORC/DORC, RORRC/DORRC; §9.1.1–9.1.2) and the retransmit buffer: one
//! [`SentPacket`] slot per PSN in `[BPSN, NPSN)`. Policy (gating, timers,
//! which packet to retransmit) lives in the modules around it.
//!
//! The slot ring is allocated at a window's first transmission, at
//! [`INITIAL_SLOTS`], and doubles when full (up to `tx_window` rounded up to
//! a power of two): a connection that never sends on a window holds no
//! slots for it, which is what lets an engine hold a million connections
//! (`falcon bench scale`). Allocation happens only past a window's
//! high-water mark; nothing here panics.

use crate::delivery::bitmap::RingBitmap;
use crate::delivery::packet::{
    OutgoingPacket, PacketKind, PayloadHandle, Retransmission, SentKind,
};
use crate::seq::{Psn, Rsn};
use crate::time::Timestamp;

/// One retransmit-buffer slot: what is needed to rebuild and time a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentPacket {
    /// What the slot sends (a transaction packet, or the Resync replacing it).
    pub kind: SentKind,
    /// RSN of the transaction.
    pub rsn: Rsn,
    /// Request Length field.
    pub request_length: u16,
    /// Payload bytes after the header.
    pub payload_len: u16,
    /// The payload in the layer above.
    pub handle: PayloadHandle,
    /// Last (re)transmission time; the retransmit timer runs from here.
    pub last_tx: Timestamp,
    /// Timeout retransmissions so far (the per-packet Retransmit Counter,
    /// §9.1.1); reset when the slot turns into a Resync (§11).
    pub retransmit_count: u8,
    /// Early retransmissions so far (isekai `early_retx_threshold`).
    pub early_retransmits: u8,
    /// Counted in ORC (a Pull Request or Push Data, sent, not acknowledged).
    pub in_orc: bool,
    /// Counted in ORRC (a retransmitted request in flight, §9.1.2).
    pub in_orrc: bool,
    /// The receiver reported it received but not acknowledged (EACK
    /// data-rx-bitmap): its timer is the ULP RTO (spec/falcon.md §5.7).
    pub received: bool,
    /// RNR-NACKed: not retransmitted before this time (§11: max(RTO, RNR
    /// timeout) from the NACK).
    pub rnr_until: RnrUntil,
    /// Sent more than once (RACK's retransmission ambiguity).
    pub retransmitted: bool,
    /// Why the slot was last marked for retransmission.
    pub reason: Retransmission,
    /// The ULP asked for the AR bit on this packet
    /// ([`OutgoingPacket::ack_request`](super::OutgoingPacket::ack_request)).
    pub ack_request: bool,
}

impl SentPacket {
    /// A slot for a first transmission at `now`.
    #[inline]
    #[cfg(any(test, feature = "testing"))]
    pub fn new(
        kind: PacketKind,
        rsn: Rsn,
        request_length: u16,
        payload_len: u16,
        handle: PayloadHandle,
    ) -> Self {
        SentPacket {
            kind: SentKind::Transaction(kind),
            rsn,
            request_length,
            payload_len,
            handle,
            last_tx: Timestamp::ZERO,
            retransmit_count: 0,
            early_retransmits: 0,
            in_orc: false,
            in_orrc: false,
            received: false,
            rnr_until: RnrUntil::NONE,
            retransmitted: false,
            reason: Retransmission::Timeout,
            ack_request: false,
        }
    }

    /// OCP Falcon 0.9 §9.1.4's recency check fails: the packet was
    /// retransmitted and its last copy left within `rtt` of `now`. A packet
    /// never retransmitted is not recent (see `early_retx`).
    pub fn retransmitted_within(&self, rtt: core::time::Duration, now: Timestamp) -> bool {
        self.retransmitted && self.last_tx.saturating_add(rtt) >= now
    }

    /// Counts against ncwnd when (re)sent (Pull Request or Push Data, or a
    /// Resync standing in for one).
    pub fn is_request(&self) -> bool {
        self.kind.original().is_request()
    }
}

/// An RNR deferral's end, or none, in 8 bytes where `Option<Timestamp>`
/// took 16 of a 56-byte slot (48 now): `Timestamp::ZERO` stands for none.
/// A deferral ends a positive timeout after its NACK, so never at zero;
/// [`at`](Self::at) moves a zero to the first nanosecond all the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnrUntil(Timestamp);

impl RnrUntil {
    /// No deferral.
    pub const NONE: RnrUntil = RnrUntil(Timestamp::ZERO);

    /// Deferred until `until`.
    pub fn at(until: Timestamp) -> RnrUntil {
        RnrUntil(until.max(Timestamp::from_nanos(1)))
    }

    /// The end of the deferral, if there is one.
    pub fn get(self) -> Option<Timestamp> {
        (self != RnrUntil::NONE).then_some(self.0)
    }

    /// There is a deferral.
    pub fn is_some(self) -> bool {
        self != RnrUntil::NONE
    }
}

/// Slots a window's ring has at its first transmission: room for a small
/// burst; a busy connection doubles it a few times, once.
pub const INITIAL_SLOTS: u32 = 8;

const EMPTY_SLOT: SentPacket = SentPacket {
    kind: SentKind::Transaction(PacketKind::PullData),
    rsn: Rsn::new(0),
    request_length: 0,
    payload_len: 0,
    handle: PayloadHandle(0),
    last_tx: Timestamp::ZERO,
    retransmit_count: 0,
    early_retransmits: 0,
    in_orc: false,
    in_orrc: false,
    received: false,
    rnr_until: RnrUntil::NONE,
    retransmitted: false,
    reason: Retransmission::Timeout,
    ack_request: false,
};

/// The slot ring and bitmaps of an idle window, lent to a [`WindowPool`].
#[derive(Debug)]
struct WindowStorage {
    slots: Box<[SentPacket]>,
    acked: RingBitmap,
    retransmit: RingBitmap,
}

/// Rings and bitmaps of idle TX windows, for the next window that sends a
/// first transmission with none: one per engine. A window with nothing in
/// flight holds no memory, and the next one to send takes storage still
/// in cache instead of fresh heap (at 1 M connections with a push on a
/// random one each time, each first use cost three allocations and the
/// page faults of their fresh memory, `falcon bench scale`). Last in,
/// first out; at most [`WindowPool::MAX`] kept, the rest freed.
#[derive(Debug, Default)]
pub struct WindowPool {
    free: Vec<WindowStorage>,
}

impl WindowPool {
    /// Storages kept at most.
    pub const MAX: usize = 4096;

    /// Storages held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.free.len()
    }

    /// Holds none.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }
}

/// The transmitter's state of one sliding window.
#[derive(Debug, Clone)]
pub struct TxWindow {
    /// BPSN: oldest PSN not yet acknowledged.
    base: Psn,
    /// NPSN: PSN of the next first transmission.
    next: Psn,
    /// Most packets in `[base, next)`.
    limit: u32,
    slots: Box<[SentPacket]>,
    mask: u32,
    /// The TX ack bitmap (§9.1.1), bit `psn mod capacity`.
    ///
    /// Both bitmaps are clear outside `[BPSN, NPSN)`: bits are set only for
    /// outstanding PSNs, and [`advance_to`](Self::advance_to) clears the
    /// range it releases (or finds it clear). A first transmission's bits are
    /// therefore clear already and are not cleared again.
    acked: RingBitmap,
    /// Packets eligible for retransmission and not yet resent.
    retransmit: RingBitmap,
    retransmit_pending: u32,
    /// RORC / DORC.
    outstanding_requests: u32,
    /// RORRC / DORRC.
    outstanding_retransmitted: u32,
}

impl TxWindow {
    /// An empty window whose first PSN is `initial` (set by the CM), holding
    /// at most `limit` packets.
    pub fn new(initial: Psn, limit: u32) -> Self {
        TxWindow {
            base: initial,
            next: initial,
            limit,
            slots: Box::new([]),
            mask: 0,
            acked: RingBitmap::empty(),
            retransmit: RingBitmap::empty(),
            retransmit_pending: 0,
            outstanding_requests: 0,
            outstanding_retransmitted: 0,
        }
    }

    /// BPSN.
    pub fn base(&self) -> Psn {
        self.base
    }

    /// NPSN.
    pub fn next(&self) -> Psn {
        self.next
    }

    /// Packets in `[BPSN, NPSN)` (acknowledged out of order or not).
    pub fn in_flight(&self) -> u32 {
        self.base.distance(self.next)
    }

    /// Room for another first transmission.
    pub fn has_room(&self) -> bool {
        self.in_flight() < self.limit
    }

    /// RORC / DORC: requests sent and not acknowledged.
    pub fn outstanding_requests(&self) -> u32 {
        self.outstanding_requests
    }

    /// RORRC / DORRC: retransmitted requests in flight.
    pub fn outstanding_retransmitted(&self) -> u32 {
        self.outstanding_retransmitted
    }

    /// Slots of the retransmit buffer allocated (0 until the first
    /// transmission).
    #[cfg(any(test, feature = "testing"))]
    pub fn slot_capacity(&self) -> usize {
        self.slots.len()
    }

    /// Packets awaiting retransmission.
    pub fn retransmit_pending(&self) -> u32 {
        self.retransmit_pending
    }

    /// `psn` is in `[BPSN, NPSN)`.
    pub fn contains(&self, psn: Psn) -> bool {
        psn.in_window(self.base, self.in_flight())
    }

    /// `psn` is in the window and not yet acknowledged.
    pub fn is_outstanding(&self, psn: Psn) -> bool {
        self.contains(psn) && !self.acked.get(psn)
    }

    /// The slot of an outstanding `psn`.
    pub fn slot(&self, psn: Psn) -> Option<&SentPacket> {
        if !self.is_outstanding(psn) {
            return None;
        }
        Some(&self.slots[(psn.value() & self.mask) as usize])
    }

    /// The slot of an outstanding `psn`, mutably.
    pub fn slot_mut(&mut self, psn: Psn) -> Option<&mut SentPacket> {
        if !self.is_outstanding(psn) {
            return None;
        }
        Some(&mut self.slots[(psn.value() & self.mask) as usize])
    }

    /// Records a first transmission at `now`: assigns NPSN (then NPSN + 1,
    /// §9.1.3) and counts a request in ORC. The caller checked
    /// [`has_room`](Self::has_room).
    #[cfg(any(test, feature = "testing"))]
    pub fn push(&mut self, now: Timestamp, mut packet: SentPacket) -> Psn {
        debug_assert!(self.has_room(), "TX window full");
        if self.in_flight() >= self.slots.len() as u32 {
            self.grow();
        }
        let psn = self.next;
        packet.last_tx = now;
        packet.in_orc = packet.is_request();
        if packet.in_orc {
            self.outstanding_requests += 1;
        }
        self.slots[(psn.value() & self.mask) as usize] = packet;
        self.debug_assert_bits_clear(psn);
        self.next = psn.next();
        psn
    }

    /// [`push`](Self::push) of the first transmission of `packet` (as a
    /// `kind`), written into its slot field by field. A whole
    /// `SentPacket` built by the caller and copied in stalled on store
    /// forwarding right after its field-by-field stores (perf annotate:
    /// ~55 % of this function's samples).
    #[inline]
    pub fn push_first(&mut self, now: Timestamp, kind: PacketKind, packet: &OutgoingPacket) -> Psn {
        debug_assert!(self.has_room(), "TX window full");
        if self.in_flight() >= self.slots.len() as u32 {
            self.grow();
        }
        let psn = self.next;
        let in_orc = kind.is_request();
        if in_orc {
            self.outstanding_requests += 1;
        }
        let slot = &mut self.slots[(psn.value() & self.mask) as usize];
        slot.kind = SentKind::Transaction(kind);
        slot.rsn = packet.rsn;
        slot.request_length = packet.request_length;
        slot.payload_len = packet.payload_len;
        slot.handle = packet.handle;
        slot.last_tx = now;
        slot.retransmit_count = 0;
        slot.early_retransmits = 0;
        slot.in_orc = in_orc;
        slot.in_orrc = false;
        slot.received = false;
        slot.rnr_until = RnrUntil::NONE;
        slot.retransmitted = false;
        slot.reason = Retransmission::Timeout;
        slot.ack_request = packet.ack_request;
        self.debug_assert_bits_clear(psn);
        self.next = psn.next();
        psn
    }

    /// NPSN's bits are clear (see [`acked`](Self::acked)).
    fn debug_assert_bits_clear(&self, psn: Psn) {
        debug_assert!(
            !self.acked.get(psn) && !self.retransmit.get(psn),
            "a bit set outside [BPSN, NPSN)"
        );
    }

    /// Moves BPSN to `new_base` (an ACK's cumulative base, checked by the
    /// caller to lie in `[BPSN, NPSN]`), releasing every packet below it not
    /// already acknowledged; `released` sees each. Returns how many.
    pub fn advance_to(&mut self, new_base: Psn, mut released: impl FnMut(Psn, &SentPacket)) -> u32 {
        let advance = self.base.distance(new_base);
        debug_assert!(advance <= self.in_flight(), "advance beyond NPSN");
        let advance = advance.min(self.in_flight());
        if self.retransmit_pending == 0 && self.acked.first_set(self.base, advance).is_none() {
            // The common cumulative ACK: nothing in the range was acknowledged
            // out of order or awaits retransmission (no retransmit bit is set
            // anywhere when none is pending), so every packet is released in
            // order without the bitmap scans.
            for offset in 0..advance {
                let psn = self.base.wrapping_add(offset);
                let slot = &mut self.slots[(psn.value() & self.mask) as usize];
                if slot.in_orc {
                    slot.in_orc = false;
                    self.outstanding_requests -= 1;
                }
                if slot.in_orrc {
                    slot.in_orrc = false;
                    self.outstanding_retransmitted -= 1;
                }
                released(psn, slot);
            }
            self.base = self.base.wrapping_add(advance);
            return advance;
        }
        let mut count = 0;
        let mut offset = 0;
        while offset < advance {
            // Skip packets the bitmap already released.
            let start = self.base.wrapping_add(offset);
            let Some(skip) = self.acked.first_clear(start, advance - offset) else {
                break;
            };
            let psn = start.wrapping_add(skip);
            self.release(psn);
            released(psn, &self.slots[(psn.value() & self.mask) as usize]);
            count += 1;
            offset += skip + 1;
        }
        self.acked.clear_range(self.base, advance);
        self.retransmit.clear_range(self.base, advance);
        self.base = self.base.wrapping_add(advance);
        count
    }

    /// Acknowledges one outstanding `psn` from a bitmap (§9.2.3: "freeing up
    /// the resource allocated to all packets acknowledged by the bitmaps");
    /// returns its slot if it was outstanding.
    pub fn ack(&mut self, psn: Psn) -> Option<&SentPacket> {
        if !self.is_outstanding(psn) {
            return None;
        }
        self.acked.set(psn);
        self.release(psn);
        Some(&self.slots[(psn.value() & self.mask) as usize])
    }

    /// Marks an outstanding `psn` eligible for retransmission. A
    /// retransmitted request leaves ORRC (§9.1.2: "decremented by 1 when a
    /// retransmitted request becomes eligible for retransmission again").
    /// Returns whether it was newly marked.
    pub fn mark_retransmit(&mut self, psn: Psn, reason: Retransmission) -> bool {
        if !self.is_outstanding(psn) || self.retransmit.get(psn) {
            return false;
        }
        self.retransmit.set(psn);
        self.retransmit_pending += 1;
        let slot = &mut self.slots[(psn.value() & self.mask) as usize];
        slot.reason = reason;
        if slot.in_orrc {
            slot.in_orrc = false;
            self.outstanding_retransmitted -= 1;
        }
        true
    }

    /// The receiver RNR-NACKed `psn`: not retransmitted before `until`
    /// (§11: max(RTO, RNR timeout)). Off the retransmission set, and out of
    /// ORRC: the NACK shows the copy arrived, so it is no retransmitted
    /// request outstanding in the network (§9.1.2), and an ORRC full of
    /// packets waiting out long RNR timeouts would shut the gate on every
    /// other retransmission.
    pub fn defer_rnr(&mut self, psn: Psn, until: Timestamp) {
        self.unmark_retransmit(psn);
        let Some(slot) = self.slot_mut(psn) else {
            return;
        };
        slot.rnr_until = RnrUntil::at(until);
        if slot.in_orrc {
            slot.in_orrc = false;
            self.outstanding_retransmitted -= 1;
        }
    }

    /// Takes `psn` off the retransmission set (an RNR NACK defers it).
    pub fn unmark_retransmit(&mut self, psn: Psn) {
        if self.contains(psn) && self.retransmit.clear(psn) {
            self.retransmit_pending -= 1;
        }
    }

    /// `psn` awaits retransmission.
    pub fn is_marked(&self, psn: Psn) -> bool {
        self.contains(psn) && self.retransmit.get(psn)
    }

    /// The lowest PSN awaiting retransmission (§9.1.5: PSN order within a
    /// window).
    pub fn first_marked(&self) -> Option<Psn> {
        if self.retransmit_pending == 0 {
            return None;
        }
        self.retransmit
            .first_set(self.base, self.in_flight())
            .map(|offset| self.base.wrapping_add(offset))
    }

    /// The lowest PSN awaiting retransmission whose packet counts against
    /// ncwnd (Pull Request, Push Data, or a Resync standing in for one): the
    /// packet RSN order applies to on ordered connections (§9.1.5). Skips
    /// marked Pull Data, which carries the peer's RSNs.
    pub fn first_marked_request(&self) -> Option<Psn> {
        let len = self.in_flight();
        let mut offset = 0;
        while self.retransmit_pending > 0 && offset < len {
            let start = self.base.wrapping_add(offset);
            let skip = self.retransmit.first_set(start, len - offset)?;
            let psn = start.wrapping_add(skip);
            if self.slots[(psn.value() & self.mask) as usize].is_request() {
                return Some(psn);
            }
            offset += skip + 1;
        }
        None
    }

    /// Records the retransmission of a marked `psn` at `now`: unmarks it,
    /// restarts its timer and counts a request in ORRC (§9.1.2).
    pub fn on_retransmitted(&mut self, now: Timestamp, psn: Psn) {
        if self.retransmit.clear(psn) {
            self.retransmit_pending -= 1;
        }
        let slot = &mut self.slots[(psn.value() & self.mask) as usize];
        slot.last_tx = now;
        slot.retransmitted = true;
        slot.rnr_until = RnrUntil::NONE;
        // Until an EACK says otherwise, the new copy may be lost: RTO again.
        slot.received = false;
        if slot.is_request() && !slot.in_orrc {
            slot.in_orrc = true;
            self.outstanding_retransmitted += 1;
        }
    }

    /// The outstanding PSNs from `from` (at or above BPSN) up to NPSN, in
    /// PSN order. The iterator borrows nothing: pass the window back in
    /// [`OutstandingIter::next`].
    pub fn outstanding_from(&self, from: Psn) -> OutstandingIter {
        let from = if from.before(self.base) {
            self.base
        } else {
            from
        };
        OutstandingIter { cursor: from }
    }

    /// Releases every slot (connection teardown); `released` sees each
    /// outstanding packet.
    pub fn release_all(&mut self, released: impl FnMut(Psn, &SentPacket)) {
        let next = self.next;
        self.advance_to(next, released);
    }

    /// Gives the ring and bitmaps to `pool` when nothing is in flight (both
    /// bitmaps are then clear, see [`acked`](Self::acked)).
    #[inline(always)]
    pub fn lend_if_idle(&mut self, pool: &mut WindowPool) {
        if self.base == self.next && !self.slots.is_empty() {
            self.lend(pool);
        }
    }

    /// [`lend_if_idle`](Self::lend_if_idle) past its check: out of line, the
    /// check alone runs on every input.
    #[inline(never)]
    fn lend(&mut self, pool: &mut WindowPool) {
        debug_assert_eq!(self.retransmit_pending, 0);
        if pool.free.len() < WindowPool::MAX {
            pool.free.push(WindowStorage {
                slots: core::mem::take(&mut self.slots),
                acked: core::mem::replace(&mut self.acked, RingBitmap::empty()),
                retransmit: core::mem::replace(&mut self.retransmit, RingBitmap::empty()),
            });
        } else {
            self.slots = Box::new([]);
            self.acked = RingBitmap::empty();
            self.retransmit = RingBitmap::empty();
        }
        self.mask = 0;
    }

    /// Takes a ring and bitmaps from `pool` if the window has none (it has
    /// nothing in flight then); [`push_first`](Self::push_first) allocates
    /// when the pool had none.
    #[inline]
    pub fn borrow_if_empty(&mut self, pool: &mut WindowPool) {
        if !self.slots.is_empty() {
            return;
        }
        if let Some(storage) = pool.free.pop() {
            self.mask = storage.slots.len() as u32 - 1;
            self.slots = storage.slots;
            self.acked = storage.acked;
            self.retransmit = storage.retransmit;
        }
    }

    /// Allocates the slot ring, or doubles it, keeping `[base, next)` in
    /// place modulo the new capacity. The bitmaps (64 bits at least) are
    /// only reallocated when they are outgrown.
    #[cold]
    fn grow(&mut self) {
        let capacity = match self.slots.len() as u32 {
            0 => self.limit.clamp(1, INITIAL_SLOTS).next_power_of_two(),
            n => n * 2,
        };
        let len = self.in_flight();
        let mut slots = vec![EMPTY_SLOT; capacity as usize].into_boxed_slice();
        for offset in 0..len {
            let psn = self.base.wrapping_add(offset);
            slots[(psn.value() & (capacity - 1)) as usize] =
                self.slots[(psn.value() & self.mask) as usize];
        }
        self.slots = slots;
        if self.acked.capacity() < capacity {
            self.acked = self.acked.resized(capacity, self.base, len);
            self.retransmit = self.retransmit.resized(capacity, self.base, len);
        }
        self.mask = capacity - 1;
    }

    fn release(&mut self, psn: Psn) {
        let index = (psn.value() & self.mask) as usize;
        if self.retransmit.clear(psn) {
            self.retransmit_pending -= 1;
        }
        let slot = &mut self.slots[index];
        if slot.in_orc {
            slot.in_orc = false;
            self.outstanding_requests -= 1;
        }
        if slot.in_orrc {
            slot.in_orrc = false;
            self.outstanding_retransmitted -= 1;
        }
    }
}

/// Walks a window's outstanding PSNs without borrowing it (so the caller can
/// mutate slots between steps).
#[derive(Debug, Clone, Copy)]
pub struct OutstandingIter {
    cursor: Psn,
}

impl OutstandingIter {
    /// The next outstanding PSN of `window` at or after the cursor.
    pub fn next(&mut self, window: &TxWindow) -> Option<Psn> {
        if !self.cursor.before(window.next) {
            return None;
        }
        let remaining = self.cursor.distance(window.next);
        let offset = window.acked.first_clear(self.cursor, remaining)?;
        let psn = self.cursor.wrapping_add(offset);
        self.cursor = psn.next();
        Some(psn)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn packet(kind: PacketKind, rsn: u32) -> SentPacket {
        SentPacket::new(kind, Rsn::new(rsn), 0, 0, PayloadHandle(u64::from(rsn)))
    }

    #[test]
    fn rnr_deferral_fits_eight_bytes_and_zero_is_none() {
        assert_eq!(core::mem::size_of::<RnrUntil>(), 8);
        assert_eq!(core::mem::size_of::<SentPacket>(), 48);
        assert_eq!(RnrUntil::NONE.get(), None);
        assert!(!RnrUntil::NONE.is_some());
        let t = Timestamp::from_micros(3);
        assert_eq!(RnrUntil::at(t).get(), Some(t));
        assert_eq!(
            RnrUntil::at(Timestamp::ZERO).get(),
            Some(Timestamp::from_nanos(1))
        );
    }

    #[test]
    fn an_idle_window_lends_its_ring_and_the_borrower_starts_clean() {
        let t = Timestamp::from_nanos(10);
        let mut pool = WindowPool::default();
        let mut a = TxWindow::new(Psn::new(100), 64);
        let mut b = TxWindow::new(Psn::new(u32::MAX - 2), 64);
        a.lend_if_idle(&mut pool);
        assert_eq!(pool.len(), 0, "never used: nothing to lend");
        let psns: Vec<Psn> = (0..12)
            .map(|i| a.push(t, packet(PacketKind::PushData, i)))
            .collect();
        // Out-of-order ACKs and a retransmission mark set bits.
        assert!(a.ack(psns[7]).is_some());
        assert!(a.mark_retransmit(psns[3], Retransmission::Timeout));
        a.lend_if_idle(&mut pool);
        assert_eq!(pool.len(), 0, "in flight: kept");
        assert_eq!(a.advance_to(psns[11].next(), |_, _| {}), 11);
        a.lend_if_idle(&mut pool);
        assert_eq!((a.slot_capacity(), pool.len()), (0, 1), "idle: lent");
        // Another window, another PSN range, takes the ring (grown to 16).
        b.borrow_if_empty(&mut pool);
        assert_eq!((b.slot_capacity(), pool.len()), (16, 0));
        let psns: Vec<Psn> = (0..20)
            .map(|i| b.push(t, packet(PacketKind::PullRequest, i)))
            .collect();
        assert_eq!(b.slot_capacity(), 32, "grown past the lent ring");
        // No bit of the first window's life shows in the second's.
        assert_eq!(b.first_marked(), None);
        for (i, &psn) in psns.iter().enumerate() {
            assert_eq!(b.slot(psn).map(|s| s.rsn), Some(Rsn::new(i as u32)));
        }
        assert_eq!(b.outstanding_requests(), 20);
        assert_eq!(b.advance_to(psns[19].next(), |_, _| {}), 20);
        assert_eq!(b.outstanding_requests(), 0);
        // The lender sends again: from the heap, the pool being empty.
        a.borrow_if_empty(&mut pool);
        assert_eq!(a.slot_capacity(), 0);
        a.push(t, packet(PacketKind::PushData, 12));
        assert_eq!(a.slot_capacity(), INITIAL_SLOTS as usize);
    }

    #[test]
    fn slots_are_allocated_at_the_first_transmission_and_doubled() {
        let t = Timestamp::from_nanos(10);
        let base = Psn::new(u32::MAX - 3);
        let mut window = TxWindow::new(base, 1024);
        assert_eq!(window.slot_capacity(), 0);
        // An idle window answers every query without slots.
        assert!(window.slot(base).is_none() && window.ack(base).is_none());
        assert!(!window.mark_retransmit(base, Retransmission::Timeout));
        assert_eq!(window.first_marked(), None);
        assert_eq!(window.first_marked_request(), None);
        assert_eq!(window.advance_to(base, |_, _| panic!("nothing sent")), 0);
        assert_eq!(window.outstanding_from(base).next(&window), None);
        let psns: Vec<Psn> = (0..INITIAL_SLOTS)
            .map(|i| window.push(t, packet(PacketKind::PushData, i)))
            .collect();
        assert_eq!(window.slot_capacity(), INITIAL_SLOTS as usize);
        assert!(window.ack(psns[2]).is_some());
        assert!(window.mark_retransmit(psns[5], Retransmission::Timeout));
        // The ninth doubles the ring across the PSN wrap, keeping the bits.
        let ninth = window.push(t, packet(PacketKind::PushData, INITIAL_SLOTS));
        assert_eq!(window.slot_capacity(), 2 * INITIAL_SLOTS as usize);
        for (i, &psn) in psns.iter().enumerate() {
            let slot = window.slot(psn).map(|s| s.rsn);
            let expected = (i != 2).then(|| Rsn::new(i as u32));
            assert_eq!(slot, expected, "slot {i}");
        }
        assert_eq!(window.first_marked(), Some(psns[5]));
        assert_eq!(
            window.slot(ninth).map(|s| s.rsn),
            Some(Rsn::new(INITIAL_SLOTS))
        );
        // A window limited below the initial size gets only what it needs.
        let mut small = TxWindow::new(base, 2);
        small.push(t, packet(PacketKind::PullRequest, 0));
        assert_eq!(small.slot_capacity(), 2);
    }

    #[test]
    fn push_ack_advance_and_counters() {
        let t = Timestamp::from_nanos(10);
        let mut window = TxWindow::new(Psn::new(u32::MAX - 1), 4);
        let a = window.push(t, packet(PacketKind::PushData, 1));
        let b = window.push(t, packet(PacketKind::PullData, 2));
        let c = window.push(t, packet(PacketKind::PushData, 3));
        assert_eq!(
            (a.value(), b.value(), c.value()),
            (u32::MAX - 1, u32::MAX, 0)
        );
        assert_eq!(window.outstanding_requests(), 2);
        assert!(window.has_room());
        window.push(t, packet(PacketKind::PushData, 4));
        assert!(!window.has_room());

        // Selective ACK of c, then a retransmission of a.
        assert_eq!(window.ack(c).map(|s| s.rsn), Some(Rsn::new(3)));
        assert!(window.ack(c).is_none());
        assert_eq!(window.outstanding_requests(), 2);
        assert!(window.mark_retransmit(a, Retransmission::Timeout));
        assert!(!window.mark_retransmit(a, Retransmission::Timeout));
        assert_eq!(window.first_marked(), Some(a));
        window.on_retransmitted(t, a);
        assert_eq!(window.outstanding_retransmitted(), 1);
        assert!(
            window.mark_retransmit(a, Retransmission::Timeout),
            "eligible again"
        );
        assert_eq!(window.outstanding_retransmitted(), 0);
        window.on_retransmitted(t, a);

        // Cumulative ACK up to d: a, b released (c was already).
        let mut released = Vec::new();
        let d = c.next();
        let count = window.advance_to(d, |psn, slot| released.push((psn, slot.rsn.value())));
        assert_eq!(count, 2);
        assert_eq!(released, vec![(a, 1), (b, 2)]);
        assert_eq!(window.base(), d);
        assert_eq!(window.outstanding_requests(), 1);
        assert_eq!(window.outstanding_retransmitted(), 0);
        assert_eq!(window.retransmit_pending(), 0);
        let mut iter = window.outstanding_from(Psn::new(0));
        assert_eq!(iter.next(&window), Some(d));
        assert_eq!(iter.next(&window), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(bool),
        Ack(u32),
        Advance(u32),
        Mark(u32),
        Unmark(u32),
        Resend,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<bool>().prop_map(Op::Push),
            2 => (0u32..110).prop_map(Op::Ack),
            1 => (0u32..110).prop_map(Op::Advance),
            2 => (0u32..110).prop_map(Op::Mark),
            1 => (0u32..110).prop_map(Op::Unmark),
            1 => Just(Op::Resend),
        ]
    }

    #[derive(Debug, Default)]
    struct Model {
        /// Outstanding PSN (absolute) → (is_request, in_orrc, marked).
        outstanding: BTreeMap<u64, (bool, bool, bool)>,
        base: u64,
        next: u64,
    }

    proptest! {
        /// The TX window against a BTreeMap model: PSNs assigned in order,
        /// selective and cumulative ACKs, retransmission marks (set, and
        /// taken back by an RNR NACK), the ORC and ORRC counters, across
        /// 2^32.
        #[test]
        fn tx_window_matches_btreemap(
            start in prop_oneof![Just(u32::MAX - 40), any::<u32>()],
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            // Above the 64 initial slots: the ring grows during the run.
            const LIMIT: u32 = 100;
            let t = Timestamp::from_nanos(1);
            let mut window = TxWindow::new(Psn::new(start), LIMIT);
            let mut model = Model { base: u64::from(start), next: u64::from(start), ..Model::default() };
            let psn = |absolute: u64| Psn::new(absolute as u32);
            for op in ops {
                match op {
                    Op::Push(request) => {
                        let room = model.next - model.base < u64::from(LIMIT);
                        prop_assert_eq!(window.has_room(), room);
                        if room {
                            let kind = if request { PacketKind::PullRequest } else { PacketKind::PullData };
                            let assigned = window.push(t, packet(kind, model.next as u32));
                            prop_assert_eq!(assigned, psn(model.next));
                            model.outstanding.insert(model.next, (request, false, false));
                            model.next += 1;
                        }
                    }
                    Op::Ack(offset) => {
                        let absolute = model.base + u64::from(offset);
                        let expected = model.outstanding.remove(&absolute).is_some();
                        prop_assert_eq!(window.ack(psn(absolute)).is_some(), expected);
                    }
                    Op::Advance(offset) => {
                        let to = (model.base + u64::from(offset)).min(model.next);
                        let expected: Vec<u64> = model.outstanding.range(..to).map(|(&p, _)| p).collect();
                        let mut seen = Vec::new();
                        window.advance_to(psn(to), |p, _| seen.push(p));
                        prop_assert_eq!(seen, expected.iter().map(|&p| psn(p)).collect::<Vec<_>>());
                        model.outstanding.retain(|&p, _| p >= to);
                        model.base = to;
                    }
                    Op::Mark(offset) => {
                        let absolute = model.base + u64::from(offset);
                        let newly = match model.outstanding.get_mut(&absolute) {
                            Some(entry) if !entry.2 => { entry.2 = true; entry.1 = false; true }
                            _ => false,
                        };
                        prop_assert_eq!(window.mark_retransmit(psn(absolute), Retransmission::Early), newly);
                    }
                    Op::Unmark(offset) => {
                        // An RNR NACK defers a marked packet: it stays
                        // outstanding, no longer marked.
                        let absolute = model.base + u64::from(offset);
                        let marked = model.outstanding.get(&absolute).is_some_and(|e| e.2);
                        prop_assert_eq!(window.is_marked(psn(absolute)), marked);
                        window.unmark_retransmit(psn(absolute));
                        if let Some(entry) = model.outstanding.get_mut(&absolute) {
                            entry.2 = false;
                        }
                        prop_assert!(!window.is_marked(psn(absolute)));
                    }
                    Op::Resend => {
                        let expected = model.outstanding.iter().find(|(_, e)| e.2).map(|(&p, _)| p);
                        prop_assert_eq!(window.first_marked(), expected.map(psn));
                        let request = model.outstanding.iter().find(|(_, e)| e.2 && e.0).map(|(&p, _)| p);
                        prop_assert_eq!(window.first_marked_request(), request.map(psn));
                        if let Some(p) = expected {
                            window.on_retransmitted(t, psn(p));
                            let entry = model.outstanding.get_mut(&p).unwrap();
                            entry.2 = false;
                            entry.1 = entry.0;
                        }
                    }
                }
                prop_assert_eq!(window.base(), psn(model.base));
                prop_assert_eq!(window.next(), psn(model.next));
                let orc = model.outstanding.values().filter(|e| e.0).count() as u32;
                let orrc = model.outstanding.values().filter(|e| e.1).count() as u32;
                let marked = model.outstanding.values().filter(|e| e.2).count() as u32;
                prop_assert_eq!(window.outstanding_requests(), orc);
                prop_assert_eq!(window.outstanding_retransmitted(), orrc);
                prop_assert_eq!(window.retransmit_pending(), marked);
                let mut iter = window.outstanding_from(psn(model.base));
                let mut listed = Vec::new();
                while let Some(p) = iter.next(&window) {
                    listed.push(p);
                }
                let expected: Vec<Psn> = model.outstanding.keys().map(|&p| psn(p)).collect();
                prop_assert_eq!(listed, expected);
            }
        }
    }
}
