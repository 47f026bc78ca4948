//! ACK generation: coalescing, BACK vs EACK, the fields every ACK echoes.
//!
//! Layer: delivery (receiver side). Owns [`AckCoalescing`] — the ACK
//! coalescing timer and count, the pending immediate ACK of an AR packet,
//! and the latest t1/t2, hop count and ECN count to echo (OCP Falcon 0.9
//! §9.1.6, §10.5) — and [`ack_type`], the BACK-vs-EACK rule. Building the
//! ACK/NACK reprs from this state and the receiver windows is
//! [`build_ack`]. No IO, no allocation.

use crate::delivery::bitmap::has_hole;
use crate::delivery::rx_window::RxWindow;
use crate::ids::ConnectionId;
use crate::time::Timestamp;
use crate::wire::{
    AckRueInfo, BackRepr, CcInfo, EackRepr, EcnCount, FalconRepr, FalconTime32, HopCount, Own,
    PacketType, RxBufferLevel,
};

/// Coalescing credits of a received packet that is not Push Data, or of a
/// discarded packet (isekai `gen1/ack_coalescing_engine.cc`).
pub const CREDITS_PACKET: u16 = 2;
/// Credits of a Push Data on arrival, and again on its ULP ACK.
pub const CREDITS_PUSH: u16 = 1;

/// The receiver's ACK coalescing state and the values the next ACK echoes.
#[derive(Debug, Clone, Default)]
pub struct AckCoalescing {
    credits: u16,
    deadline: Option<Timestamp>,
    immediate: bool,
    /// t1 of the most recently received packet (its PSP IV time).
    t1: FalconTime32,
    /// t2: when that packet reached the delivery sublayer.
    t2: FalconTime32,
    hop_count: HopCount,
    /// Cumulative ECN-CE marked packets received (sent modulo 2^14).
    ecn_marked: u64,
}

impl AckCoalescing {
    /// Records the timestamps and congestion marks of a packet that reached
    /// the sliding-window check (accepted or discarded). OCP Falcon 0.9
    /// §10.5: the ACK carries "T1 and T2 timestamps from the most recently
    /// received packet", so coalescing delay does not inflate the fabric
    /// delay.
    pub fn on_packet(&mut self, now: Timestamp, t1: FalconTime32, hop_count: HopCount, ecn: bool) {
        self.t1 = t1;
        self.t2 = now.falcon_time32();
        self.hop_count = hop_count;
        if ecn {
            self.ecn_marked = self.ecn_marked.wrapping_add(1);
        }
    }

    /// Adds coalescing credits and starts the coalescing timer if it is not
    /// running (§9.1.6: started on an in-window packet, a ULP ACK, or a
    /// packet without AR; discarded packets also count, p.69).
    pub fn add(&mut self, now: Timestamp, credits: u16, timeout: core::time::Duration) {
        self.credits = self.credits.saturating_add(credits);
        if self.deadline.is_none() {
            self.deadline = Some(now.saturating_add(timeout));
        }
    }

    /// An AR packet was acknowledged: send an ACK now and stop the timer
    /// (§9.1.6).
    pub fn request_immediate(&mut self) {
        self.immediate = true;
    }

    /// An ACK is due: immediate, the count reached, or the timer expired.
    pub fn is_due(&self, now: Timestamp, count: u16) -> bool {
        self.immediate || self.credits >= count || self.deadline.is_some_and(|d| d <= now)
    }

    /// Something is waiting to be acknowledged.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_pending(&self) -> bool {
        self.immediate || self.deadline.is_some()
    }

    /// When the coalescing timer fires (`now` for an immediate ACK).
    #[cfg(any(test, feature = "testing"))]
    pub fn deadline(&self, now: Timestamp) -> Option<Timestamp> {
        if self.immediate {
            return Some(now);
        }
        self.deadline
    }

    /// The coalescing timer's expiry, if running (an immediate ACK is not a
    /// timer: it is due at once).
    pub fn timer(&self) -> Option<Timestamp> {
        self.deadline
    }

    /// An ACK was sent: stop the timer and reset the count (§9.1.1 "reset
    /// when an ACK is sent").
    pub fn reset(&mut self) {
        self.stop_timer();
        self.immediate = false;
    }

    /// The timer runs or credits are counted: [`stop_timer`](Self::stop_timer)
    /// has something to stop.
    pub fn is_counting(&self) -> bool {
        self.credits != 0 || self.deadline.is_some()
    }

    /// Everything useful was piggy-backed on an outgoing packet: stop the
    /// timer and reset the count, but keep a pending AR-triggered ACK.
    /// §9.1.6 lets the piggyback stop only "the ACK coalescing timer"; the
    /// AR rule ("must send an ACK packet when the packet is acknowledged")
    /// still holds, and that ACK carries the t1/t2 the peer's RUE needs
    /// (isekai sends it at once, so a piggyback never cancels it).
    pub fn stop_timer(&mut self) {
        self.credits = 0;
        self.deadline = None;
    }

    /// t1 and t2 to echo.
    pub fn timestamps(&self) -> (FalconTime32, FalconTime32) {
        (self.t1, self.t2)
    }

    /// Hop count of the latest packet.
    pub fn hop_count(&self) -> HopCount {
        self.hop_count
    }

    /// The ECN Rx Packet Count field.
    pub fn ecn_count(&self) -> EcnCount {
        EcnCount::from_cumulative(self.ecn_marked)
    }
}

/// BACK or EACK for the current receiver state (OCP Falcon 0.9 §9.1.6):
/// EACK if the req-bitmap or the data-ack-bitmap is non-zero, if the
/// data-rx-bitmap has a hole, or if R-OWN or D-OWN is set; with the RACK-TLP
/// extension also whenever the data-rx-bitmap is non-zero. Otherwise BACK.
pub fn ack_type(request: &RxWindow, data: &RxWindow, rack_tlp: bool) -> PacketType {
    let eack = request.ack_bitmap() != 0
        || data.ack_bitmap() != 0
        || has_hole(data.rx_bitmap())
        || request.own()
        || data.own()
        || (rack_tlp && data.rx_bitmap() != 0);
    if eack {
        PacketType::Eack
    } else {
        PacketType::Back
    }
}

/// The congestion fields of an outgoing ACK or NACK.
#[derive(Debug, Clone, Copy)]
pub struct AckCongestion {
    /// Quantized receive-buffer occupancy (max over the pools, §10.2).
    pub rx_buffer_level: RxBufferLevel,
    /// RUE info: the `cc_metadata` of the last RUE result (22 bits in an ACK).
    pub rue_info: u32,
}

/// Builds the ACK for the current receiver state: a BACK or an EACK (per
/// [`ack_type`]) with the latest RBPSN/DBPSN, t1/t2 and congestion info.
pub fn build_ack(
    peer: ConnectionId,
    request: &RxWindow,
    data: &RxWindow,
    coalescing: &AckCoalescing,
    congestion: AckCongestion,
    rack_tlp: bool,
) -> FalconRepr {
    let (t1, t2) = coalescing.timestamps();
    let own = Own {
        request: request.own(),
        data: data.own(),
    };
    let back = BackRepr {
        connection_id: peer,
        data_bpsn: data.base(),
        request_bpsn: request.base(),
        t1,
        t2,
        cc_info: CcInfo {
            hop_count: coalescing.hop_count(),
            rx_buffer_level: congestion.rx_buffer_level,
            ecn_count: coalescing.ecn_count(),
            rue_info: AckRueInfo::truncating(congestion.rue_info),
            own,
        },
    };
    match ack_type(request, data, rack_tlp) {
        PacketType::Eack => FalconRepr::Eack(EackRepr {
            back,
            data_ack_bitmap: data.ack_bitmap(),
            data_rx_bitmap: data.rx_bitmap(),
            // The request window is 64 wide: its bitmap fits the wire's u64.
            request_bitmap: request.ack_bitmap() as u64,
        }),
        _ => FalconRepr::Back(back),
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::*;
    use crate::seq::Psn;
    use crate::wire::Window;

    #[test]
    fn coalescing_count_timer_and_immediate() {
        let mut ack = AckCoalescing::default();
        let t0 = Timestamp::from_micros(100);
        let timeout = Duration::from_micros(8);
        assert!(!ack.is_pending());
        assert!(!ack.is_counting(), "nothing for a piggyback to stop");
        ack.add(t0, CREDITS_PUSH, timeout);
        assert!(ack.is_counting());
        assert!(ack.is_pending(), "the timer runs");
        assert!(!ack.is_due(t0, 10));
        assert_eq!(ack.deadline(t0), Some(Timestamp::from_micros(108)));
        // The timer is not restarted by later packets.
        ack.add(t0 + Duration::from_micros(5), CREDITS_PACKET, timeout);
        assert_eq!(ack.deadline(t0), Some(Timestamp::from_micros(108)));
        assert!(ack.is_due(Timestamp::from_micros(108), 10));
        for _ in 0..4 {
            ack.add(t0, CREDITS_PACKET, timeout);
        }
        assert!(ack.is_due(t0, 10), "11 credits reach the count of 10");
        ack.reset();
        assert!(!ack.is_pending());
        ack.request_immediate();
        assert!(ack.is_pending(), "an AR-triggered ACK, no timer");
        assert_eq!(ack.deadline(t0), Some(t0));
        assert!(ack.is_due(t0, 10));
        // A piggyback stops the timer, not the AR-triggered ACK.
        ack.add(t0, CREDITS_PACKET, timeout);
        ack.stop_timer();
        assert_eq!(ack.timer(), None);
        assert!(!ack.is_counting());
        assert!(ack.is_due(t0, 10));
        ack.reset();
        assert!(!ack.is_due(t0 + timeout, 10));
    }

    #[test]
    fn echoes_latest_timestamps_and_ecn() {
        let mut ack = AckCoalescing::default();
        ack.on_packet(
            Timestamp::from_nanos(131_072),
            FalconTime32::new(5),
            HopCount::truncating(3),
            true,
        );
        ack.on_packet(
            Timestamp::from_nanos(262_144),
            FalconTime32::new(9),
            HopCount::truncating(4),
            false,
        );
        assert_eq!(
            ack.timestamps(),
            (FalconTime32::new(9), FalconTime32::new(2_000))
        );
        assert_eq!(ack.hop_count().value(), 4);
        assert_eq!(ack.ecn_count().value(), 1);
    }

    #[test]
    fn back_vs_eack_rules() {
        let base = Psn::new(100);
        let fresh = || {
            (
                RxWindow::new(Window::Request, base),
                RxWindow::new(Window::Data, base),
            )
        };
        // Nothing pending: BACK.
        let (request, data) = fresh();
        assert_eq!(ack_type(&request, &data, false), PacketType::Back);
        // Push Data received in order, awaiting the ULP: contiguous rx bits,
        // BACK (EACK only with RACK-TLP).
        let (request, mut data) = fresh();
        data.receive(base, false);
        data.receive(base.next(), false);
        assert_eq!(ack_type(&request, &data, false), PacketType::Back);
        assert_eq!(ack_type(&request, &data, true), PacketType::Eack);
        // A hole in the rx bitmap: EACK.
        let (request, mut data) = fresh();
        data.receive(base.wrapping_add(2), false);
        assert_eq!(ack_type(&request, &data, false), PacketType::Eack);
        // Data ack bitmap non-zero (out-of-order Pull Data): EACK.
        let (request, mut data) = fresh();
        data.acknowledge(base.wrapping_add(1));
        assert_eq!(ack_type(&request, &data, false), PacketType::Eack);
        // Request bitmap non-zero: EACK.
        let (mut request, data) = fresh();
        request.acknowledge(base.wrapping_add(1));
        assert_eq!(ack_type(&request, &data, false), PacketType::Eack);
        // OWN: EACK.
        let (mut request, data) = fresh();
        request.check(base.wrapping_add(64));
        assert_eq!(ack_type(&request, &data, false), PacketType::Eack);
    }
}
