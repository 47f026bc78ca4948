//! Early retransmission from EACK bitmaps: OOO distance and EACK-OWN.
//!
//! Layer: delivery (transmitter side). Implements the two heuristics of OCP
//! Falcon 0.9 §9.1.4 run on every EACK: the out-of-order-distance rule with
//! the recency check (on the req-bitmap and the data-rx-bitmap), and the
//! out-of-window (EACK-OWN) rule. Marks packets for retransmission; the
//! transmit path sends them through the gate. No IO.
//!
//! # The recency check
//!
//! §9.1.4: "at least an RTT has passed since the last (re)transmission
//! before retransmitting a packet, to give enough time for the last
//! (re)transmission to be acknowledged"; for EACK-OWN, "not retransmitted
//! recently, within an RTT". The RTT is the connection's smoothed RTT (the
//! RTO before the first sample), not the EACK's own sample: a hole sent in
//! the same burst as the echoed packet has a send time within one 131.072
//! ns unit of the echoed t1, so comparing the two would decide by where the
//! rounding falls. A packet never retransmitted always passes: its first
//! transmission went out before the packets the bitmap shows received (PSN
//! order is send order), so it had its chance to be acknowledged and no
//! earlier retransmission of it is in flight to wait for.

use core::time::Duration;

use crate::delivery::bitmap::highest_set;
use crate::delivery::connection::DeliveryConnection;
use crate::delivery::packet::Retransmission;
use crate::seq::Psn;
use crate::time::Timestamp;
use crate::wire::Window;

impl DeliveryConnection {
    /// OCP Falcon 0.9 §9.1.4, "EACK Algorithm": with `psn_high` the highest
    /// received PSN of `received` (bit n = BPSN + n), every not-received PSN
    /// below `psn_high − ooo_threshold` is considered lost and retransmitted
    /// if "the last transmission time + rtt < now" (recency check). Returns
    /// whether any hole passed the distance test (the event's `eack_drop`).
    ///
    /// Unlike isekai we do not stop at the first packet failing the recency
    /// check (the spec's loop has no such stop); like isekai we stop at the
    /// first RNR-NACKed packet and allow `max_early_retransmits` per packet.
    /// `rtt` is the connection's smoothed RTT (see the module doc).
    pub(super) fn early_retransmit_ooo(
        &mut self,
        now: Timestamp,
        window: Window,
        received: u128,
        rtt: Duration,
    ) -> bool {
        let Some(high) = highest_set(received) else {
            return false;
        };
        let threshold = self.config.ooo_distance_threshold;
        if high <= threshold {
            return false;
        }
        let limit = high - threshold;
        let base = self.tx(window).base();
        let mut eack_drop = false;
        let mut outstanding = self.tx(window).outstanding_from(base);
        while let Some(psn) = outstanding.next(self.tx(window)) {
            let offset = base.distance(psn);
            if offset >= limit {
                break;
            }
            if received & (1 << offset) != 0 {
                continue;
            }
            let tx = self.tx(window);
            let Some(slot) = tx.slot(psn) else {
                continue;
            };
            if slot.rnr_until.is_some() {
                break;
            }
            eack_drop = true;
            if tx.is_marked(psn) || slot.retransmitted_within(rtt, now) {
                continue;
            }
            self.mark_early(window, psn);
        }
        eack_drop
    }

    /// OCP Falcon 0.9 §9.1.4, "OWN heuristic": on an EACK with R-OWN or
    /// D-OWN, walk the transmit window (within and beyond the receive
    /// window), skip what the bitmap shows received, and retransmit every
    /// packet "not retransmitted recently, within an RTT" — so packets
    /// dropped to the right of the receiver's window are resent at most
    /// once per RTT. Independent of the EACK's timestamps: the first EACK-OWN
    /// resends every dropped packet never retransmitted, and the receiver
    /// sets OWN again on each further out-of-window drop (§9.2.2.4), so
    /// recovery goes on while dropped packets are outstanding.
    pub(super) fn early_retransmit_own(
        &mut self,
        now: Timestamp,
        window: Window,
        received: u128,
        rtt: Duration,
    ) {
        let base = self.tx(window).base();
        let mut outstanding = self.tx(window).outstanding_from(base);
        while let Some(psn) = outstanding.next(self.tx(window)) {
            let offset = base.distance(psn);
            if offset < 128 && received & (1 << offset) != 0 {
                continue;
            }
            let tx = self.tx(window);
            let Some(slot) = tx.slot(psn) else {
                continue;
            };
            if tx.is_marked(psn) || slot.rnr_until.is_some() || slot.retransmitted_within(rtt, now)
            {
                continue;
            }
            self.mark_early(window, psn);
        }
    }

    /// Marks `psn` for an early retransmission, within the per-packet limit.
    pub(super) fn mark_early(&mut self, window: Window, psn: Psn) -> bool {
        let limit = self.config.max_early_retransmits;
        let tx = self.tx_mut(window);
        let Some(slot) = tx.slot_mut(psn) else {
            return false;
        };
        if slot.early_retransmits >= limit {
            return false;
        }
        slot.early_retransmits += 1;
        tx.mark_retransmit(psn, Retransmission::Early)
    }
}
