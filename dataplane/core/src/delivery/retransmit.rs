//! Timeout-based retransmission and retransmit exhaustion.
//!
//! Layer: delivery (transmitter side). Implements
//! [`DeliveryConnection::handle_timeout`] for the per-packet retransmit
//! timers (OCP Falcon 0.9 §9.1.5) and the escalation of §11: Max Retransmit
//! Attempts on a packet → Resync (code 0x3) with the counter reset; on a
//! Resync → connection fatal (spec/falcon.md §9 item 3: §11 over §9.1.5's
//! "fatal error" at once).
//!
//! # One lazy timer for all packets
//!
//! Every outstanding packet has its own deadline (spec/falcon.md §5.7): an
//! RNR-NACKed packet its RNR time (max(RTO, RNR timeout) from the NACK),
//! a packet the receiver holds but has not ULP-acknowledged the ULP RTO,
//! every other packet the RUE's RTO from its last (re)transmission. Rather
//! than a heap, the connection keeps one `retransmit_timer` that is a lower
//! bound of the earliest deadline: lowered on every (re)transmission and
//! RNR NACK, left alone when ACKs free packets. When it fires, one scan over
//! the outstanding packets retransmits the expired ones and recomputes the
//! exact minimum. The scan is O(outstanding) once per timer expiry instead
//! of bookkeeping on every ACK; a stale bound costs one early wake-up.

use core::time::Duration;

use crate::delivery::connection::DeliveryConnection;
use crate::delivery::events::{ConnectionError, Event};
use crate::delivery::packet::{Retransmission, SentKind};
use crate::delivery::tx_window::{RnrUntil, SentPacket};
use crate::seq::Psn;
use crate::time::Timestamp;
use crate::wire::{ResyncCode, Window};

impl DeliveryConnection {
    /// Runs the timers that are due at `now`: expired retransmit timers mark
    /// their packets for retransmission (sent by the next
    /// [`poll_transmit`](Self::poll_transmit)), RACK-TLP timers run their
    /// detection or probe. The ACK coalescing timer and the pacing release
    /// need no action here: [`poll_ack`](Self::poll_ack) and
    /// [`poll_transmit`](Self::poll_transmit) check them.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.failed.is_some() {
            return;
        }
        if self.retransmit_timer.is_some_and(|timer| timer <= now) {
            self.expire_retransmit_timers(now);
        }
        self.rack_on_timeout(now);
    }

    /// Lowers the retransmit timer to `deadline`.
    pub(super) fn arm_retransmit_timer(&mut self, deadline: Timestamp) {
        self.retransmit_timer = Some(match self.retransmit_timer {
            Some(timer) => timer.min(deadline),
            None => deadline,
        });
    }

    /// The retransmit deadline of an outstanding packet (spec/falcon.md §5.7:
    /// RNR-NACKed → its RNR timeout; received but not ULP-acked → ULP RTO;
    /// else the RUE's RTO).
    pub(super) fn retransmit_deadline(&self, slot: &SentPacket) -> Timestamp {
        if let Some(until) = slot.rnr_until.get() {
            return until;
        }
        let timeout: Duration = if slot.received {
            self.config.ulp_rto
        } else {
            self.rue.state.rto()
        };
        slot.last_tx.saturating_add(timeout)
    }

    fn expire_retransmit_timers(&mut self, now: Timestamp) {
        let mut next: Option<Timestamp> = None;
        for window in [Window::Request, Window::Data] {
            let mut outstanding = self.tx(window).outstanding_from(self.tx(window).base());
            while let Some(psn) = outstanding.next(self.tx(window)) {
                let tx = self.tx(window);
                // A marked packet waits for the gate, not for a timer.
                if tx.is_marked(psn) {
                    continue;
                }
                let Some(slot) = tx.slot(psn).copied() else {
                    continue;
                };
                let deadline = self.retransmit_deadline(&slot);
                if deadline > now {
                    next = Some(next.map_or(deadline, |n| n.min(deadline)));
                    continue;
                }
                self.expire(window, psn, slot);
                if self.failed.is_some() {
                    return;
                }
            }
        }
        self.retransmit_timer = next;
    }

    /// OCP Falcon 0.9 §9.1.5 and §11 for one expired packet.
    fn expire(&mut self, window: Window, psn: Psn, slot: SentPacket) {
        if slot.rnr_until.is_some() || slot.received {
            // The RNR wait is over, or the ULP RTO of a packet the receiver
            // holds: retransmit. Neither is a loss — the receiver answered —
            // so neither counts toward Max Retransmit Attempts (our choice:
            // an RNR-NACKed Push Data may wait many times for a slow ULP,
            // and on an ordered connection one received behind a refused
            // request waits out RNR timeouts it cannot see, §8.5.3.4). A
            // receiver that stops answering stops marking packets received,
            // so the RTO counts again; a ULP that never answers is caught by
            // the transaction timeout.
            if let Some(slot) = self.tx_mut(window).slot_mut(psn) {
                slot.rnr_until = RnrUntil::NONE;
            }
            self.tx_mut(window)
                .mark_retransmit(psn, Retransmission::Timeout);
            return;
        }
        if slot.retransmit_count >= self.config.max_retransmit_attempts {
            match slot.kind {
                // §11: "Resync packet at Max Retransmit Attempts: Connection
                // fatal interrupt; reclaim TX packet and buffer resources".
                SentKind::Resync { .. } => self.fail(ConnectionError::ResyncExhausted {
                    window,
                    psn,
                    rsn: slot.rsn,
                }),
                // §11: "Original transmission packet at Max Retransmit
                // Attempts: transmit resync packet with same PSN, and reset
                // Retransmit Counter" (spec/falcon.md §9 item 3).
                SentKind::Transaction(_) => {
                    self.start_resync(window, psn, ResyncCode::RetransmissionExhausted);
                    self.events.push_back(Event::RetransmitExhausted {
                        window,
                        psn,
                        rsn: slot.rsn,
                        handle: slot.handle,
                    });
                }
            }
            return;
        }
        // §9.1.5: "The retransmit counter for the packet must be incremented",
        // then gate and retransmit with the same PSN.
        let tx = self.tx_mut(window);
        if let Some(slot) = tx.slot_mut(psn) {
            slot.retransmit_count += 1;
        }
        tx.mark_retransmit(psn, Retransmission::Timeout);
    }

    /// The connection is dead: release every slot and queue, report the
    /// error. The transaction sublayer reclaims its resources on the error
    /// event (§11).
    pub(super) fn fail(&mut self, error: ConnectionError) {
        self.failed = Some(error);
        self.tx_request.release_all(|_, _| {});
        self.tx_data.release_all(|_, _| {});
        self.queues.pull_requests.clear();
        self.queues.push_data.clear();
        self.queues.pull_data.clear();
        self.nacks.clear();
        self.retransmit_timer = None;
        self.pacer.cancel();
        self.coalescing.reset();
        self.events.push_back(Event::Error(error));
    }
}
