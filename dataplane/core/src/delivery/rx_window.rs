//! The receiver side of one sliding window.
//!
//! Layer: delivery. Owns [`RxWindow`]: the receiver's BPSN, its bitmaps (the
//! request window's req-bitmap; the data window's data-ack-bitmap and
//! data-rx-bitmap) and its OWN bit (OCP Falcon 0.9 §9.2.1), plus the
//! per-PSN facts the receiver needs for Push Data awaiting the ULP (the AR
//! bit to honour on the ULP ACK, and the NACK to repeat on a duplicate).
//! No IO, no allocation, no panics.
//!
//! Bit n of every bitmap stands for BPSN + n, exactly as the EACK carries
//! it (§7.7.2); an advance of BPSN shifts all of them (§9.2.2.4).
//!
//! Decision (spec/falcon.md §9 item 7): BPSN is the first *unacknowledged*
//! PSN, as §9.2.2.4 advances it, not the "oldest not yet received" of
//! §9.2.1: a Push Data holds BPSN until its ULP ACK.

use crate::delivery::bitmap::{shift_down, trailing_ones};
use crate::seq::Psn;
use crate::wire::{NackCode, RnrTimeout, Window};

/// Receiver window sizes (OCP Falcon 0.9 §9: request 64, data 128).
pub const REQUEST_WINDOW: u32 = 64;
/// See [`REQUEST_WINDOW`].
pub const DATA_WINDOW: u32 = 128;

/// The outcome of the sliding-window check of §9.2.2.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowCheck {
    /// Inside the window, new.
    Accept,
    /// Inside the window, already received (or acknowledged). Carries the
    /// NACK recorded for it, if the ULP NACKed it (repeated on duplicates,
    /// isekai `HandleDuplicateNackedPacket`).
    Duplicate(Option<NackRecord>),
    /// At or beyond BPSN + window size: dropped, OWN set.
    OutOfWindow,
    /// Below BPSN: an old duplicate.
    Stale,
}

/// A NACK the receiver sent for a Push Data, kept to repeat it when the
/// Push Data is retransmitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NackRecord {
    /// The NACK code.
    pub code: NackCode,
    /// The ULP's own code, opaque to Falcon.
    pub ulp_nack_code: u8,
    /// The RNR timeout (RNR NACKs).
    pub rnr_timeout: RnrTimeout,
}

const NO_NACK: NackRecord = NackRecord {
    code: NackCode::Unknown(0),
    ulp_nack_code: 0,
    rnr_timeout: RnrTimeout::LONGEST,
};

/// The receiver's state of one sliding window.
#[derive(Debug, Clone)]
pub struct RxWindow {
    size: u32,
    base: Psn,
    /// req-bitmap (request window) or data-ack-bitmap (data window).
    ack: u128,
    /// data-rx-bitmap; in the request window received = acknowledged.
    rx: u128,
    /// R-OWN / D-OWN.
    own: bool,
    /// Received Push Data with AR set, awaiting the ULP ACK.
    ack_request: u128,
    /// Received Push Data the ULP NACKed (CIE, NRE, invalid CID).
    nacked: u128,
    /// The NACKs of `nacked`, at `psn mod 128`; allocated at the window's
    /// first NACK. A ULP NACK is rare, and inline the table was 512 of a
    /// window's 592 bytes, twice in every connection.
    nacks: Option<Box<[NackRecord; DATA_WINDOW as usize]>>,
}

impl RxWindow {
    /// An empty window whose BPSN is `initial` (set by the CM).
    pub fn new(window: Window, initial: Psn) -> Self {
        RxWindow {
            size: match window {
                Window::Request => REQUEST_WINDOW,
                Window::Data => DATA_WINDOW,
            },
            base: initial,
            ack: 0,
            rx: 0,
            own: false,
            ack_request: 0,
            nacked: 0,
            nacks: None,
        }
    }

    /// BPSN: the first unacknowledged PSN.
    pub fn base(&self) -> Psn {
        self.base
    }

    /// The ack bitmap (bit n = BPSN + n).
    pub fn ack_bitmap(&self) -> u128 {
        self.ack
    }

    /// The rx bitmap (bit n = BPSN + n); equals the ack bitmap in the
    /// request window.
    pub fn rx_bitmap(&self) -> u128 {
        self.rx
    }

    /// The OWN bit.
    pub fn own(&self) -> bool {
        self.own
    }

    /// Clears OWN once an EACK carried it (§9.2.1).
    pub fn clear_own(&mut self) {
        self.own = false;
    }

    /// The sliding-window check (§9.2.2.4), setting OWN on an out-of-window
    /// drop.
    // Always inlined, as `check_bit`: out of line, the receive path would call
    // `check_bit` and have the unused u128 bit returned through memory.
    #[inline(always)]
    pub fn check(&mut self, psn: Psn) -> WindowCheck {
        match self.check_bit(psn) {
            Ok(_) => WindowCheck::Accept,
            Err(check) => check,
        }
    }

    /// [`check`](Self::check), with the bit of an accepted `psn` (`Ok`) for
    /// [`receive_bit`](Self::receive_bit) or
    /// [`acknowledge_bit`](Self::acknowledge_bit), so the transaction
    /// sublayer's admission computes the u128 bit once.
    #[inline(always)]
    pub fn check_bit(&mut self, psn: Psn) -> Result<u128, WindowCheck> {
        if psn.before(self.base) {
            return Err(WindowCheck::Stale);
        }
        let offset = self.base.distance(psn);
        // OCP Falcon 0.9 text: the §9 overview accepts PSNs "less than or
        // equal to BSN + Rx Window Size", §9.2.2.4 drops "greater or equal to
        // (RBPSN + 64) / (DBPSN + 128)". We follow §9.2.2.4: the bitmaps hold
        // exactly 64 / 128 PSNs from BPSN.
        if offset >= self.size {
            self.own = true;
            return Err(WindowCheck::OutOfWindow);
        }
        // spec/falcon.md §4.6: a Push Data received but not yet ULP-acked is
        // a duplicate too (§11 "previously received"), so check rx as well.
        if is_set(self.ack | self.rx, offset) {
            // A `nacked` bit is only set with its record written.
            let nack = is_set(self.nacked, offset)
                .then(|| self.nacks.as_ref().map_or(NO_NACK, |n| n[index(psn)]));
            return Err(WindowCheck::Duplicate(nack));
        }
        Ok(bit_at(offset))
    }

    /// Marks an accepted `psn` received but not acknowledged (Push Data:
    /// "must not be set to 1b until the packet is explicitly acknowledged by
    /// the ULP", §9.2.2.4), remembering its AR bit for the ULP ACK.
    #[cfg(any(test, feature = "testing"))]
    pub fn receive(&mut self, psn: Psn, ack_request: bool) {
        if let Some(bit) = self.bit(psn) {
            self.receive_bit(bit, ack_request);
        }
    }

    /// [`receive`](Self::receive) of the PSN whose bit
    /// [`check_bit`](Self::check_bit) returned (no window change since).
    #[inline]
    pub fn receive_bit(&mut self, bit: u128, ack_request: bool) {
        self.rx |= bit;
        if ack_request {
            self.ack_request |= bit;
        }
    }

    /// Marks `psn` received and acknowledged and advances BPSN over the
    /// acknowledged prefix, shifting every bitmap (§9.2.2.4). Returns the
    /// AR bit recorded at [`receive`](Self::receive) (if any) and the
    /// advance, or `None` if `psn` is outside the window.
    #[inline]
    pub fn acknowledge(&mut self, psn: Psn) -> Option<(bool, u32)> {
        let bit = self.bit(psn)?;
        Some(self.acknowledge_bit(bit))
    }

    /// The ULP acknowledged the received Push Data `psn` (§9.2.2.4: its
    /// data-ack bit is set now, BPSN advances over the acknowledged
    /// prefix): [`awaits_ulp`](Self::awaits_ulp) then
    /// [`acknowledge`](Self::acknowledge) in one pass. Returns the AR bit
    /// recorded at [`receive`](Self::receive), or `None` (and changes
    /// nothing) if `psn` is not received and awaiting the ULP.
    ///
    /// The usual answer is in order: `psn` is BPSN and nothing above it is
    /// acknowledged yet, so BPSN advances by exactly one and every bitmap
    /// shifts by one, a constant shift instead of four by a variable advance,
    /// and the PSN's bit is computed once.
    #[inline]
    pub fn acknowledge_ulp(&mut self, psn: Psn) -> Option<bool> {
        let offset = self.base.distance(psn);
        if offset == 0 && self.ack == 0 && self.rx & 1 != 0 {
            // The general case below with bit = 1 and advance = 1: ack | 1
            // has exactly one trailing 1 and shifts back to 0.
            let ack_request = self.ack_request & 1 != 0;
            self.base = self.base.wrapping_add(1);
            self.rx >>= 1;
            self.ack_request >>= 1;
            self.nacked >>= 1;
            return Some(ack_request);
        }
        let bit = (offset < self.size).then(|| 1u128 << offset)?;
        if self.rx & bit == 0 || self.ack & bit != 0 {
            return None;
        }
        Some(self.acknowledge_bit(bit).0)
    }

    /// [`acknowledge`](Self::acknowledge) of the PSN whose bit is `bit`
    /// (from [`check_bit`](Self::check_bit), no window change since).
    #[inline]
    pub fn acknowledge_bit(&mut self, bit: u128) -> (bool, u32) {
        // Whole-word values in registers, stored once: a single-bit `|=` on
        // the u128 fields compiled to a 32-bit read-modify-write that the
        // following 64-bit loads could not forward from (perf annotate: ~70 %
        // of this function's samples).
        let (mut ack, mut rx) = (self.ack | bit, self.rx | bit);
        let ack_request = self.ack_request & bit != 0;
        let (mut requests, mut nacked) = (self.ack_request & !bit, self.nacked & !bit);
        let advance = trailing_ones(ack).min(self.size);
        if advance > 0 {
            self.base = self.base.wrapping_add(advance);
            ack = shift_down(ack, advance);
            rx = shift_down(rx, advance);
            requests = shift_down(requests, advance);
            nacked = shift_down(nacked, advance);
        }
        self.ack = ack;
        self.rx = rx;
        self.ack_request = requests;
        self.nacked = nacked;
        (ack_request, advance)
    }

    /// Forgets that `psn` was received (an RNR-NACKed Push Data: its
    /// retransmission after the RNR timeout is delivered again, OCP Falcon
    /// 0.9 §11 target "redeliver ... when a retransmitted Push Data
    /// arrives"). Returns whether it was received and unacknowledged.
    pub fn unreceive(&mut self, psn: Psn) -> bool {
        let Some(bit) = self.bit(psn) else {
            return false;
        };
        if self.rx & bit == 0 || self.ack & bit != 0 {
            return false;
        }
        self.rx &= !bit;
        self.ack_request &= !bit;
        self.nacked &= !bit;
        true
    }

    /// Records the NACK sent for a received, unacknowledged `psn`.
    pub fn record_nack(&mut self, psn: Psn, nack: NackRecord) {
        if let Some(bit) = self.bit(psn) {
            self.nacked |= bit;
            self.nacks
                .get_or_insert_with(|| Box::new([NO_NACK; DATA_WINDOW as usize]))[index(psn)] =
                nack;
        }
    }

    /// `psn` is received and awaiting its ULP ACK.
    pub fn awaits_ulp(&self, psn: Psn) -> bool {
        self.bit(psn)
            .is_some_and(|bit| self.rx & bit != 0 && self.ack & bit == 0)
    }

    /// Nothing useful to report: bitmaps zero and OWN clear (the
    /// piggy-backing condition of §9.1.6, for this window).
    pub fn is_quiet(&self) -> bool {
        self.ack == 0 && self.rx == 0 && !self.own
    }

    fn bit(&self, psn: Psn) -> Option<u128> {
        let offset = self.base.distance(psn);
        (offset < self.size).then(|| 1u128 << offset)
    }
}

/// Bit `offset` (< 128) of `bits`, read in the 64-bit half that holds it.
/// Tested as `bits & 1u128 << offset`, LLVM shifts the u128 right by `offset`
/// (a funnel shift, two shifts and three selects) for each of the two window
/// checks of every data packet.
#[inline(always)]
fn is_set(bits: u128, offset: u32) -> bool {
    let half = if offset < 64 {
        bits as u64
    } else {
        (bits >> 64) as u64
    };
    half >> (offset % 64) & 1 != 0
}

/// `1u128 << offset` (`offset` < 128) as the bit in one 64-bit half and zero in
/// the other: the u128 shift is a funnel shift, two shifts and two selects, on
/// every admitted packet.
#[inline(always)]
fn bit_at(offset: u32) -> u128 {
    let bit = 1u64 << (offset % 64);
    if offset < 64 {
        u128::from(bit)
    } else {
        u128::from(bit) << 64
    }
}

fn index(psn: Psn) -> usize {
    (psn.value() % DATA_WINDOW) as usize
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn bit_at_is_the_u128_shift() {
        for offset in 0..128 {
            assert_eq!(bit_at(offset), 1u128 << offset);
        }
    }

    #[test]
    fn push_data_holds_the_base_until_the_ulp_ack() {
        let base = Psn::new(u32::MAX);
        let mut window = RxWindow::new(Window::Data, base);
        assert_eq!(window.check(base), WindowCheck::Accept);
        window.receive(base, true);
        assert_eq!(window.check(base), WindowCheck::Duplicate(None));
        assert!(window.awaits_ulp(base));
        assert_eq!(window.base(), base);
        assert_eq!(window.rx_bitmap(), 1);
        // A Pull Data at base + 1 is acknowledged at once, base stays.
        assert_eq!(window.acknowledge(base.next()), Some((false, 0)));
        assert_eq!(window.ack_bitmap(), 0b10);
        // The ULP ACK releases both.
        assert_eq!(window.acknowledge(base), Some((true, 2)));
        assert_eq!(window.base(), Psn::new(1));
        assert_eq!((window.ack_bitmap(), window.rx_bitmap()), (0, 0));
        assert_eq!(window.check(base), WindowCheck::Stale);
        assert_eq!(window.check(Psn::new(128)), WindowCheck::Accept);
        assert!(!window.own());
        assert_eq!(window.check(Psn::new(129)), WindowCheck::OutOfWindow);
        assert!(window.own());
        window.clear_own();
        assert!(window.is_quiet());
    }

    #[test]
    fn request_window_is_64_and_nacks_are_remembered() {
        let mut window = RxWindow::new(Window::Request, Psn::new(10));
        assert_eq!(window.check(Psn::new(73)), WindowCheck::Accept);
        assert_eq!(window.check(Psn::new(74)), WindowCheck::OutOfWindow);
        let mut data = RxWindow::new(Window::Data, Psn::new(0));
        data.receive(Psn::new(3), false);
        assert!(data.nacks.is_none(), "no NACK table before the first NACK");
        assert_eq!(data.check(Psn::new(3)), WindowCheck::Duplicate(None));
        let nack = NackRecord {
            code: NackCode::UlpCompletionInError,
            ulp_nack_code: 9,
            rnr_timeout: RnrTimeout::LONGEST,
        };
        data.record_nack(Psn::new(3), nack);
        assert!(data.nacks.is_some());
        assert_eq!(data.check(Psn::new(3)), WindowCheck::Duplicate(Some(nack)));
        assert!(data.unreceive(Psn::new(3)));
        assert_eq!(data.check(Psn::new(3)), WindowCheck::Accept);
    }

    #[test]
    fn ulp_acks_in_order_and_out_of_order_agree() {
        // In order (the one-step path): BPSN and nothing acknowledged above.
        let base = Psn::new(u32::MAX - 1);
        let mut window = RxWindow::new(Window::Data, base);
        for (i, ar) in [(0, true), (1, false), (2, true), (3, false)] {
            window.receive(base.wrapping_add(i), ar);
        }
        window.record_nack(base.wrapping_add(3), NO_NACK);
        assert_eq!(
            window.acknowledge_ulp(base.wrapping_add(4)),
            None,
            "not received"
        );
        assert_eq!(window.acknowledge_ulp(base), Some(true));
        assert_eq!(window.acknowledge_ulp(base), None, "answered already");
        assert_eq!((window.base(), window.rx_bitmap()), (base.next(), 0b111));
        // Out of order (the general path): base + 2 first, then base + 1
        // releases both.
        assert_eq!(window.acknowledge_ulp(base.wrapping_add(2)), Some(true));
        assert_eq!((window.base(), window.ack_bitmap()), (base.next(), 0b10));
        assert_eq!(window.acknowledge_ulp(base.wrapping_add(1)), Some(false));
        assert_eq!(window.base(), base.wrapping_add(3));
        assert_eq!((window.ack_bitmap(), window.rx_bitmap()), (0, 0b1));
        // The NACK record moved with the base: the in-order path shifted it.
        assert_eq!(
            window.check(base.wrapping_add(3)),
            WindowCheck::Duplicate(Some(NO_NACK))
        );
        assert_eq!(window.acknowledge_ulp(base.wrapping_add(3)), Some(false));
        assert_eq!(window.base(), base.wrapping_add(4));
        assert!(window.is_quiet());
    }

    #[test]
    fn is_set_reads_every_bit_of_both_halves() {
        for bits in [
            0,
            u128::MAX,
            1 | 1 << 63 | 1 << 64 | 1 << 127,
            0xDEAD_BEEF << 50,
        ] {
            for offset in 0..128 {
                assert_eq!(
                    is_set(bits, offset),
                    bits & 1 << offset != 0,
                    "{bits:#x} {offset}"
                );
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Receive(u32, bool),
        Acknowledge(u32),
        UlpAck(u32),
        Unreceive(u32),
        Nack(u32, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..140, any::<bool>()).prop_map(|(o, ar)| Op::Receive(o, ar)),
            (0u32..140).prop_map(Op::Acknowledge),
            (0u32..140).prop_map(Op::UlpAck),
            // Mostly at the base: the in-order ULP ACK.
            (0u32..2).prop_map(Op::UlpAck),
            (0u32..140).prop_map(Op::Unreceive),
            (0u32..140, any::<u8>()).prop_map(|(o, code)| Op::Nack(o, code)),
        ]
    }

    proptest! {
        /// Receiver windows of both sizes against BTreeSet oracles of
        /// received and acknowledged absolute PSNs, across 2^32: the
        /// acceptance check (with the NACK a duplicate answers with), BPSN
        /// advance, the wire bitmaps, what awaits the ULP, and quiet.
        #[test]
        fn rx_window_matches_btreeset(
            start in prop_oneof![Just(u32::MAX - 100), any::<u32>()],
            request in any::<bool>(),
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let kind = if request { Window::Request } else { Window::Data };
            let size = if request { REQUEST_WINDOW } else { DATA_WINDOW };
            let mut window = RxWindow::new(kind, Psn::new(start));
            let mut received = BTreeSet::<u64>::new();
            let mut acked = BTreeSet::<u64>::new();
            // Received with AR and not yet acknowledged.
            let mut requests = BTreeSet::<u64>::new();
            // NACKs recorded, by absolute PSN, until acknowledged or
            // unreceived.
            let mut nacks = std::collections::BTreeMap::<u64, NackRecord>::new();
            let mut base = u64::from(start);
            let psn = |absolute: u64| Psn::new(absolute as u32);
            for op in ops {
                let (offset, absolute) = match op {
                    Op::Receive(o, _)
                    | Op::Acknowledge(o)
                    | Op::UlpAck(o)
                    | Op::Unreceive(o)
                    | Op::Nack(o, _) => (o, base + u64::from(o)),
                };
                let expected = if offset >= size {
                    WindowCheck::OutOfWindow
                } else if received.contains(&absolute) || acked.contains(&absolute) {
                    WindowCheck::Duplicate(nacks.get(&absolute).copied())
                } else {
                    WindowCheck::Accept
                };
                prop_assert_eq!(window.check(psn(absolute)), expected);
                prop_assert_eq!(window.check(psn(base.wrapping_sub(1))), WindowCheck::Stale);
                if offset >= size {
                    prop_assert!(window.own());
                    window.clear_own();
                    // Out of the window: nothing to answer or forget.
                    prop_assert_eq!(window.acknowledge_ulp(psn(absolute)), None);
                    prop_assert!(!window.unreceive(psn(absolute)));
                    prop_assert!(!window.awaits_ulp(psn(absolute)));
                    continue;
                }
                let awaiting = received.contains(&absolute) && !acked.contains(&absolute);
                prop_assert_eq!(window.awaits_ulp(psn(absolute)), awaiting);
                match op {
                    Op::Receive(_, ar) => {
                        window.receive(psn(absolute), ar);
                        received.insert(absolute);
                        if ar {
                            requests.insert(absolute);
                        }
                    }
                    Op::Acknowledge(_) => {
                        let ar = requests.remove(&absolute);
                        prop_assert_eq!(window.acknowledge(psn(absolute)).map(|(ar, _)| ar), Some(ar));
                        nacks.remove(&absolute);
                        received.insert(absolute);
                        acked.insert(absolute);
                        while acked.contains(&base) {
                            base += 1;
                        }
                    }
                    Op::UlpAck(_) => {
                        let expected = awaiting.then(|| requests.remove(&absolute));
                        prop_assert_eq!(window.acknowledge_ulp(psn(absolute)), expected);
                        if awaiting {
                            nacks.remove(&absolute);
                            acked.insert(absolute);
                            while acked.contains(&base) {
                                base += 1;
                            }
                        }
                    }
                    Op::Unreceive(_) => {
                        prop_assert_eq!(window.unreceive(psn(absolute)), awaiting);
                        if awaiting {
                            received.remove(&absolute);
                            requests.remove(&absolute);
                            nacks.remove(&absolute);
                        }
                    }
                    Op::Nack(_, ulp_nack_code) => {
                        let record = NackRecord {
                            code: NackCode::UlpCompletionInError,
                            ulp_nack_code,
                            rnr_timeout: RnrTimeout::LONGEST,
                        };
                        window.record_nack(psn(absolute), record);
                        nacks.insert(absolute, record);
                    }
                }
                nacks.retain(|&p, _| p >= base);
                prop_assert_eq!(window.base(), psn(base));
                let bits = |set: &BTreeSet<u64>| {
                    set.range(base..base + u64::from(size)).fold(0u128, |b, &p| b | 1 << (p - base))
                };
                prop_assert_eq!(window.ack_bitmap(), bits(&acked));
                prop_assert_eq!(window.rx_bitmap(), bits(&received));
                prop_assert_eq!(window.ack_bitmap() & 1, 0, "bit 0 of the ack bitmap is always 0");
                prop_assert_eq!(
                    window.is_quiet(),
                    bits(&acked) == 0 && bits(&received) == 0 && !window.own()
                );
            }
        }
    }
}
