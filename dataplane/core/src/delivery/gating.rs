//! Congestion-control TX gating, pacing and the AR-bit policy.
//!
//! Layer: delivery (transmitter side). Owns [`Gate`]: the enforcement of the
//! RUE's fcwnd and ncwnd against a [`TxWindow`] (OCP Falcon 0.9 §9.1.2), the
//! paced mode when fcwnd < 1 (§10.3.5; the release times are
//! [`crate::pacing::Timestamper`]'s), and the AR-bit decision (§9.1.3.1).
//! The windows themselves are the RUE's output, held in
//! [`CcState`](super::rue_iface::CcState). No IO; randomness is injected.

use rue::Fcwnd;

use crate::delivery::tx_window::TxWindow;
use crate::random::Random;
use crate::seq::Psn;

/// The gating function's view of the congestion state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// Fabric congestion window.
    pub fcwnd: Fcwnd,
    /// NIC congestion window (outstanding requests per window).
    pub ncwnd: u16,
}

impl Gate {
    /// The number of PSNs past BPSN that may be outstanding: the integer part
    /// of fcwnd when fcwnd ≥ 1, else 1 (§9.1.2: "If fcwnd < 1, allow 1
    /// outstanding packet"; isekai rounds down above 1).
    pub fn effective_fcwnd(&self) -> u32 {
        u32::from(self.fcwnd.integer()).max(1)
    }

    /// Paced mode: fcwnd below one packet (§10.3.5: the timing wheel inserts
    /// the inter-packet gap).
    pub fn is_paced(&self) -> bool {
        self.fcwnd.integer() == 0
    }

    /// OCP Falcon 0.9 §9.1.2, initial transmission of the packet that will get
    /// `window`'s NPSN: `PSN < BPSN + fcwnd`, and for a request (Pull
    /// Request: RORC; Push Data: DORC) `ORC < ncwnd`. Pull Data is gated by
    /// fcwnd only.
    pub fn allows_first(&self, window: &TxWindow, request: bool) -> bool {
        window.in_flight() < self.effective_fcwnd()
            && (!request || window.outstanding_requests() < u32::from(self.ncwnd))
    }

    /// OCP Falcon 0.9 §9.1.2, retransmission of `psn`: `PSN < BPSN + fcwnd`,
    /// and for a request `ORRC < ncwnd` (RORRC / DORRC). A Resync is gated
    /// like the packet it replaces (§9.1.8).
    pub fn allows_retransmit(&self, window: &TxWindow, psn: Psn, request: bool) -> bool {
        window.base().distance(psn) < self.effective_fcwnd()
            && (!request || window.outstanding_retransmitted() < u32::from(self.ncwnd))
    }
}

/// The AR-bit policy of OCP Falcon 0.9 §9.1.3.1: every packet when fcwnd ≤
/// the ACK Request Fcwnd Threshold; otherwise ACK Request Percent of them.
/// isekai draws the gap to the next AR uniformly from 1 ..= 2·100/percent −
/// 1 (mean 100/percent; spec/falcon.md §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckRequestPolicy {
    /// Packets until the next AR (0: this one).
    countdown: u32,
}

impl AckRequestPolicy {
    /// Whether the next packet carries AR.
    pub fn next(
        &mut self,
        fcwnd: Fcwnd,
        threshold: Fcwnd,
        percent: u8,
        rng: &mut impl Random,
    ) -> bool {
        if fcwnd <= threshold {
            return true;
        }
        if percent == 0 {
            return false;
        }
        if self.countdown > 1 {
            self.countdown -= 1;
            return false;
        }
        let span = (200 / u32::from(percent)).saturating_sub(1).max(1);
        self.countdown = 1 + rng.below(span);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::packet::{PacketKind, PayloadHandle, Retransmission};
    use crate::delivery::tx_window::SentPacket;
    use crate::random::SplitMix64;
    use crate::seq::Rsn;
    use crate::time::Timestamp;

    fn window_with(requests: u32, data: u32) -> TxWindow {
        let mut window = TxWindow::new(Psn::new(u32::MAX), 64);
        let t = Timestamp::ZERO;
        for i in 0..requests {
            window.push(
                t,
                SentPacket::new(PacketKind::PushData, Rsn::new(i), 0, 0, PayloadHandle(0)),
            );
        }
        for i in 0..data {
            window.push(
                t,
                SentPacket::new(PacketKind::PullData, Rsn::new(i), 0, 0, PayloadHandle(0)),
            );
        }
        window
    }

    #[test]
    fn fcwnd_and_ncwnd_gate_first_transmissions() {
        let gate = Gate {
            fcwnd: Fcwnd::from_f64(4.7),
            ncwnd: 2,
        };
        assert_eq!(gate.effective_fcwnd(), 4);
        let window = window_with(1, 2);
        assert!(
            gate.allows_first(&window, true),
            "PSN 3 < BPSN + 4, DORC 1 < 2"
        );
        let window = window_with(2, 1);
        assert!(!gate.allows_first(&window, true), "DORC 2 = ncwnd");
        assert!(gate.allows_first(&window, false), "Pull Data ignores ncwnd");
        let window = window_with(0, 4);
        assert!(!gate.allows_first(&window, false), "PSN 4 = BPSN + fcwnd");
        // Retransmission: PSN < BPSN + fcwnd, ORRC < ncwnd.
        assert!(gate.allows_retransmit(&window, window.base().wrapping_add(3), true));
        assert!(!gate.allows_retransmit(&window, window.base().wrapping_add(4), false));
        let mut window = window_with(3, 1);
        let base = window.base();
        for offset in 0..2 {
            let psn = base.wrapping_add(offset);
            assert!(window.mark_retransmit(psn, Retransmission::Early));
            window.on_retransmitted(Timestamp::ZERO, psn);
            assert_eq!(window.outstanding_retransmitted(), offset + 1);
            // One retransmitted request of two allowed: room; two: none.
            assert_eq!(
                gate.allows_retransmit(&window, base.wrapping_add(2), true),
                offset == 0
            );
        }
        assert!(
            gate.allows_retransmit(&window, base.wrapping_add(3), false),
            "Pull Data ignores ncwnd"
        );
    }

    #[test]
    fn below_one_packet_one_outstanding_and_paced() {
        let gate = Gate {
            fcwnd: Fcwnd::from_f64(0.25),
            ncwnd: 8,
        };
        assert!(gate.is_paced());
        assert_eq!(gate.effective_fcwnd(), 1);
        let whole = Gate {
            fcwnd: Fcwnd::from_f64(1.0),
            ncwnd: 8,
        };
        assert!(!whole.is_paced(), "one packet or more: windowed, not paced");
        assert!(gate.allows_first(&window_with(0, 0), false));
        assert!(!gate.allows_first(&window_with(0, 1), false));
    }

    #[test]
    fn ar_policy_threshold_and_percentage() {
        let mut rng = SplitMix64::new(7);
        let mut policy = AckRequestPolicy::default();
        let threshold = Fcwnd::from_f64(2.0);
        for _ in 0..10 {
            assert!(policy.next(Fcwnd::from_f64(2.0), threshold, 10, &mut rng));
        }
        let marked = (0..100_000)
            .filter(|_| policy.next(Fcwnd::from_f64(32.0), threshold, 10, &mut rng))
            .count();
        assert!((9_000..11_000).contains(&marked), "{marked} of 100000");
        let mut policy = AckRequestPolicy::default();
        let every = (0..100)
            .filter(|_| policy.next(Fcwnd::from_f64(32.0), threshold, 100, &mut rng))
            .count();
        assert_eq!(every, 100);
        assert!(!policy.next(Fcwnd::from_f64(32.0), threshold, 0, &mut rng));
    }
}
