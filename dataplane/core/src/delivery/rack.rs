//! RACK-TLP loss detection, an opt-in extension beyond Falcon 0.9.
//!
//! Layer: delivery (transmitter side). Owns [`RackState`] and implements
//! RACK (time-based loss detection) and TLP (tail-loss probe) adapted to
//! Falcon's bitmaps as spec/rue.md §4.2 describes isekai's version: the most
//! recently delivered packet's TX time is the echoed t1 of each ACK
//! (`rack_use_t1`), the reordering window is a fraction of the smoothed RTT,
//! a not-received packet sent before that time is lost once it is older
//! than RACK.rtt + reordering window, and a probe (the first unacknowledged
//! packet) goes out after max(2·SRTT + ACK coalescing timeout, 50 µs)
//! without ACKs. Off unless [`DeliveryConfig::rack_tlp`](super::DeliveryConfig::rack_tlp)
//! is set; the receiver then sends an EACK whenever its data-rx-bitmap is
//! non-zero (OCP Falcon 0.9 §9.1.6).

use core::time::Duration;

use crate::delivery::config::RackTlpConfig;
use crate::delivery::connection::DeliveryConnection;
use crate::time::Timestamp;
use crate::wire::Window;

/// RACK-TLP state of one connection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RackState {
    config: RackTlpConfig,
    /// Local TX time of the most recently delivered packet (RACK.xmit_ts).
    xmit_ts: Option<Timestamp>,
    /// RTT of that delivery (RACK.rtt).
    rtt: Duration,
    /// When the next packet's reordering window ends.
    reorder_timer: Option<Timestamp>,
    /// When the tail-loss probe fires.
    tlp_timer: Option<Timestamp>,
    /// A probe is out and no ACK came since.
    probe_sent: bool,
}

impl RackState {
    /// Idle state.
    pub fn new(config: RackTlpConfig) -> Self {
        RackState {
            config,
            xmit_ts: None,
            rtt: Duration::ZERO,
            reorder_timer: None,
            tlp_timer: None,
            probe_sent: false,
        }
    }

    /// The earliest RACK or TLP timer.
    pub fn timeout(&self) -> Option<Timestamp> {
        match (self.reorder_timer, self.tlp_timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl DeliveryConnection {
    /// An ACK or NACK arrived; `rtt` is its sample (t4 − t1), if valid.
    pub(super) fn rack_on_ack(&mut self, now: Timestamp, rtt: Option<Duration>) {
        let Some(rack) = self.rack.as_mut() else {
            return;
        };
        if let Some(rtt) = rtt {
            // rack_use_t1: the echoed t1 is the TX time of the most recently
            // delivered packet.
            let sent = now.saturating_sub(rtt);
            if rack.xmit_ts.is_none_or_before(sent) {
                rack.xmit_ts = Some(sent);
                rack.rtt = rtt;
            }
        }
        rack.probe_sent = false;
        self.rack_detect(now);
        self.rack_arm_probe(now);
    }

    /// A packet was (re)transmitted: re-arm the probe timer.
    pub(super) fn rack_on_transmit(&mut self, now: Timestamp) {
        if self.rack.is_some() {
            self.rack_arm_probe(now);
        }
    }

    /// RACK and TLP timers due at `now`.
    pub(super) fn rack_on_timeout(&mut self, now: Timestamp) {
        let Some(rack) = self.rack.as_deref().copied() else {
            return;
        };
        if rack.reorder_timer.is_some_and(|t| t <= now) {
            self.rack_detect(now);
        }
        if rack.tlp_timer.is_some_and(|t| t <= now) {
            self.rack_probe(now);
        }
    }

    /// Marks every not-received packet sent before RACK.xmit_ts that is older
    /// than RACK.rtt + reordering window; arms the reordering timer for the
    /// youngest of the others.
    fn rack_detect(&mut self, now: Timestamp) {
        let Some(rack) = self.rack.as_deref().copied() else {
            return;
        };
        let Some(xmit_ts) = rack.xmit_ts else {
            return;
        };
        let srtt = self.rtt.smoothed.unwrap_or(rack.rtt);
        let reorder_window = srtt
            .mul_f64(rack.config.reorder_window_rtt_factor)
            .max(rack.config.min_reorder_window);
        let mut reorder_timer: Option<Timestamp> = None;
        for window in [Window::Request, Window::Data] {
            let mut outstanding = self.tx(window).outstanding_from(self.tx(window).base());
            while let Some(psn) = outstanding.next(self.tx(window)) {
                let tx = self.tx(window);
                let Some(slot) = tx.slot(psn).copied() else {
                    continue;
                };
                if tx.is_marked(psn)
                    || slot.received
                    || slot.rnr_until.is_some()
                    || slot.last_tx > xmit_ts
                    || slot.early_retransmits >= self.config.max_early_retransmits
                {
                    continue;
                }
                let lost_at = slot.last_tx.saturating_add(rack.rtt + reorder_window);
                if lost_at <= now {
                    self.mark_early(window, psn);
                } else {
                    reorder_timer = Some(reorder_timer.map_or(lost_at, |t| t.min(lost_at)));
                }
            }
        }
        if let Some(rack) = self.rack.as_mut() {
            rack.reorder_timer = reorder_timer;
        }
    }

    /// Arms the probe timer while packets are outstanding and no probe is out.
    fn rack_arm_probe(&mut self, now: Timestamp) {
        let outstanding = self.tx_request.in_flight() + self.tx_data.in_flight() > 0;
        let srtt = self.rtt.smoothed;
        let coalescing = self.config.ack_coalescing_timeout;
        let rto = self.rue.state.rto();
        let Some(rack) = self.rack.as_mut() else {
            return;
        };
        if !outstanding || rack.probe_sent {
            rack.tlp_timer = None;
            return;
        }
        let pto = match srtt {
            Some(srtt) => (srtt.mul_f64(rack.config.tlp_timeout_rtt_factor) + coalescing)
                .max(rack.config.min_tlp_timeout),
            None => rto,
        };
        // Never later than the RTO would fire.
        rack.tlp_timer = Some(now.saturating_add(pto.min(rto)));
    }

    /// TLP: retransmit the first unacknowledged, not-received packet (isekai
    /// `tlp_type` FIRST_UNACKED), data window first.
    fn rack_probe(&mut self, now: Timestamp) {
        let _ = now;
        if let Some(rack) = self.rack.as_mut() {
            rack.tlp_timer = None;
            rack.probe_sent = true;
        }
        for window in [Window::Data, Window::Request] {
            let mut outstanding = self.tx(window).outstanding_from(self.tx(window).base());
            while let Some(psn) = outstanding.next(self.tx(window)) {
                let tx = self.tx(window);
                let Some(slot) = tx.slot(psn) else {
                    continue;
                };
                if tx.is_marked(psn) || slot.received || slot.rnr_until.is_some() {
                    continue;
                }
                if self.mark_early(window, psn) {
                    return;
                }
            }
        }
    }
}

/// `None` or earlier than `t` (RACK.xmit_ts only moves forward).
trait Before {
    fn is_none_or_before(&self, t: Timestamp) -> bool;
}

impl Before for Option<Timestamp> {
    fn is_none_or_before(&self, t: Timestamp) -> bool {
        match self {
            None => true,
            Some(current) => *current < t,
        }
    }
}
