//! ACK and NACK processing at the transmitter.
//!
//! Layer: delivery (transmitter side). Implements OCP Falcon 0.9 §9.2.3
//! (BACK and EACK: stale check, base advance, bitmap OR, release of
//! retransmit resources, RTT sample, early retransmission, RUE ACK event)
//! and §9.2.4 (NACK: the same for its piggy-backed ACK, then the action of
//! each code, spec/falcon.md §3.4). Called from
//! [`DeliveryConnection::handle_packet`]. No IO.

use core::time::Duration;

use crate::delivery::connection::DeliveryConnection;
use crate::delivery::events::{ConnectionError, Event, RxOutcome};
use crate::delivery::packet::{PayloadHandle, RxMeta, SentKind};
use crate::delivery::rue_iface::AckSample;
use crate::drop::DropReason;
use crate::seq::{Psn, Rsn};
use crate::time::Timestamp;
use crate::wire::{BackRepr, EackRepr, FalconTime32, NackCode, NackRepr, ResyncCode, Window};

impl DeliveryConnection {
    /// OCP Falcon 0.9 §9.2.3 for BACK and EACK.
    pub(super) fn handle_ack(
        &mut self,
        now: Timestamp,
        back: &BackRepr,
        eack: Option<&EackRepr>,
        meta: RxMeta,
    ) -> RxOutcome {
        let mut acked = match self.acknowledge_bases(back.request_bpsn, back.data_bpsn) {
            Ok(Some(acked)) => acked,
            Ok(None) => return RxOutcome::Dropped(DropReason::StaleAck),
            Err(reason) => return RxOutcome::Dropped(reason),
        };
        self.stats.acks_received += 1;
        let rtt = self.rtt_sample(now, back.t1, back.t2, meta.tx_time);
        let own = back.cc_info.own;
        let mut eack_drop = false;
        if let Some(eack) = eack {
            // §9.2.3: OR the req-bitmap into the TX request bitmap "after
            // adjusting the RBPSN" (the bases now match the EACK's).
            acked += self.acknowledge_bitmap(Window::Request, u128::from(eack.request_bitmap));
            // spec/falcon.md §9 item 4: the text ORs the data-ack-bitmap into
            // the "Rx bitmap"; a typo for the TX ack bitmap (the transmitter
            // has no Rx bitmap): OR into the TX data ack bitmap.
            acked += self.acknowledge_bitmap(Window::Data, eack.data_ack_bitmap);
            self.mark_received(eack.data_rx_bitmap & !eack.data_ack_bitmap);
            // §9.1.4: early retransmission on the req-bitmap and the
            // data-rx-bitmap (not the data-ack-bitmap: ULP NACKs recover on
            // their own), plus the OWN bits. Recency RTT: the smoothed one
            // ("within an RTT"), else the RTO (see `early_retx`).
            let recency = self.rtt.smoothed.unwrap_or_else(|| self.rue.state.rto());
            let data_received = eack.data_rx_bitmap | eack.data_ack_bitmap;
            let request_received = u128::from(eack.request_bitmap);
            eack_drop |= self.early_retransmit_ooo(now, Window::Request, request_received, recency);
            eack_drop |= self.early_retransmit_ooo(now, Window::Data, data_received, recency);
            if own.request {
                self.early_retransmit_own(now, Window::Request, request_received, recency);
            }
            if own.data {
                self.early_retransmit_own(now, Window::Data, data_received, recency);
            }
        }
        self.update_own_pause(back.request_bpsn, back.data_bpsn, own.request, own.data);
        self.rack_on_ack(now, rtt);
        let sample = AckSample {
            t1: back.t1,
            t2: back.t2,
            t3: meta.tx_time,
            t4: now.falcon_time32(),
            forward_hops: back.cc_info.hop_count.value(),
            rx_buffer_level: back.cc_info.rx_buffer_level.value(),
            cc_metadata: back.cc_info.cc_metadata(),
            ecn_accumulated: back.cc_info.ecn_count.value(),
            eack: eack.is_some(),
            eack_drop,
        };
        self.rue.on_ack(&sample, acked);
        RxOutcome::Processed
    }

    /// OCP Falcon 0.9 §9.2.4: the NACK's piggy-backed ACK like an ACK, then
    /// the action of its code (spec/falcon.md §3.4).
    pub(super) fn handle_nack(
        &mut self,
        now: Timestamp,
        nack: &NackRepr,
        meta: RxMeta,
    ) -> RxOutcome {
        let acked = match self.acknowledge_bases(nack.request_bpsn, nack.data_bpsn) {
            Ok(Some(acked)) => acked,
            Ok(None) => return RxOutcome::Dropped(DropReason::StaleNack),
            Err(reason) => return RxOutcome::Dropped(reason),
        };
        self.stats.acks_received += 1;
        self.rtt_sample(now, nack.t1, nack.t2, meta.tx_time);
        self.rack_on_ack(now, None);
        if let NackCode::Unknown(code) = nack.code {
            self.rue.on_piggybacked_ack(acked);
            self.events
                .push_back(Event::Error(ConnectionError::ReservedNackCode(code)));
            return RxOutcome::Dropped(DropReason::InvalidAck);
        }
        let sample = AckSample {
            t1: nack.t1,
            t2: nack.t2,
            t3: meta.tx_time,
            t4: now.falcon_time32(),
            forward_hops: nack.cc_info.hop_count.value(),
            rx_buffer_level: nack.cc_info.rx_buffer_level.value(),
            cc_metadata: nack.cc_info.cc_metadata(),
            ecn_accumulated: nack.cc_info.ecn_count.value(),
            eack: false,
            eack_drop: false,
        };
        if !self.rue.on_nack(&sample, u8::from(nack.code), acked) {
            self.stats.rue_events_suppressed += 1;
        }
        let window = nack.window;
        let psn = nack.nack_psn;
        let Some(slot) = self.tx(window).slot(psn).copied() else {
            return RxOutcome::Dropped(DropReason::StaleNack);
        };
        if let SentKind::Resync { .. } = slot.kind {
            // Already replaced by a Resync (a repeated NACK).
            return RxOutcome::Dropped(DropReason::StaleNack);
        }
        let resync = match nack.code {
            // §9.2.4 "Resource Drop": tell the RUE (done above); the packet
            // "will retransmit ... as normal" (RTO or early). The NACK shows
            // the path and the receiver alive, so it is not a loss: the
            // Retransmit Counter restarts (our choice; §11 only says "notify
            // congestion control"). Otherwise a shortage longer than Max
            // Retransmit Attempts × RTO would resync the packet away and fail
            // a transaction the receiver merely delayed; a receiver that stays
            // out of resources is caught by the transaction timeout.
            NackCode::InsufficientResources => {
                if let Some(slot) = self.tx_mut(window).slot_mut(psn) {
                    slot.retransmit_count = 0;
                }
                return RxOutcome::Processed;
            }
            // §11: "Set retransmission timeout to max(RTO, RNR-NACK-timeout)".
            NackCode::ReceiverNotReady => {
                let wait = self.rue.state.rto().max(nack.rnr_timeout.as_duration());
                let until = now.saturating_add(wait);
                self.tx_mut(window).defer_rnr(psn, until);
                self.arm_retransmit_timer(until);
                self.events.push_back(Event::ReceiverNotReady {
                    psn,
                    rsn: slot.rsn,
                    timeout: nack.rnr_timeout,
                    ulp_nack_code: nack.ulp_nack_code,
                    handle: slot.handle,
                });
                return RxOutcome::Processed;
            }
            // §9.2.4 / §11: remove from the retransmit queue, reset the
            // retransmit counter, send a Resync with the same PSN.
            NackCode::XlrDrop => ResyncCode::RemoteXlrFlow,
            NackCode::UlpCompletionInError => ResyncCode::TargetUlpCompletionInError,
            NackCode::UlpNonRecoverableError => ResyncCode::TargetUlpNonRecoverableError,
            NackCode::InvalidCid => ResyncCode::TargetUlpInvalidCid,
            NackCode::Unknown(_) => return RxOutcome::Dropped(DropReason::InvalidAck),
        };
        self.start_resync(window, psn, resync);
        self.events.push_back(Event::Nacked {
            window,
            psn,
            rsn: slot.rsn,
            code: nack.code,
            ulp_nack_code: nack.ulp_nack_code,
            handle: slot.handle,
        });
        RxOutcome::Processed
    }

    /// The acknowledgements at the front of the events whose payload `mine`
    /// accepts, each handed to `acknowledged` as its RSN and kind, in order;
    /// they leave the queue, and the first other event stays first. A
    /// cumulative ACK queues one `Acked` per packet (~64 pushes per BACK in
    /// `push64_psp_profile`): the layer above walks the run of its own with
    /// this instead of dispatching each event on its own. Walked in place, as
    /// one slice (the queue is already contiguous unless it wrapped), and
    /// removed at once, not with a front check and a pop per packet, each
    /// wrapping its index.
    #[inline]
    pub fn take_acked_run(
        &mut self,
        mine: impl Fn(PayloadHandle) -> bool,
        mut acknowledged: impl FnMut(Rsn, SentKind),
    ) {
        let mut taken = 0;
        for event in self.events.make_contiguous().iter() {
            match *event {
                Event::Acked {
                    rsn, kind, handle, ..
                } if mine(handle) => acknowledged(rsn, kind),
                _ => break,
            }
            taken += 1;
        }
        self.events.drain(..taken);
    }

    /// Queues `event` as if this sublayer had produced it (tests of the
    /// layer above that script event sequences).
    #[cfg(test)]
    pub(crate) fn push_event(&mut self, event: Event) {
        self.events.push_back(event);
    }

    /// §9.2.3: discard if either base is older than ours (`Ok(None)`),
    /// otherwise move both bases up, releasing the acknowledged packets.
    /// A base beyond NPSN acknowledges what was never sent: a peer protocol
    /// violation, dropped and reported.
    pub(super) fn acknowledge_bases(
        &mut self,
        request: Psn,
        data: Psn,
    ) -> Result<Option<u32>, DropReason> {
        if request.before(self.tx_request.base()) || data.before(self.tx_data.base()) {
            return Ok(None);
        }
        for (window, bpsn) in [(Window::Request, request), (Window::Data, data)] {
            let tx = self.tx(window);
            if tx.base().distance(bpsn) > tx.in_flight() {
                self.events
                    .push_back(Event::Error(ConnectionError::AckBeyondNextPsn {
                        window,
                        acked: bpsn,
                        next: tx.next(),
                    }));
                return Err(DropReason::InvalidAck);
            }
        }
        let mut acked = 0;
        for (window, bpsn) in [(Window::Request, request), (Window::Data, data)] {
            let (tx, events) = match window {
                Window::Request => (&mut self.tx_request, &mut self.events),
                Window::Data => (&mut self.tx_data, &mut self.events),
            };
            if tx.base() == bpsn {
                // Nothing new: every data packet piggy-backs both bases, and
                // most move neither.
                continue;
            }
            acked += tx.advance_to(bpsn, |psn, slot| {
                events.push_back(Event::Acked {
                    window,
                    psn,
                    rsn: slot.rsn,
                    kind: slot.kind,
                    handle: slot.handle,
                });
            });
        }
        self.stats.packets_acked += u64::from(acked);
        Ok(Some(acked))
    }

    /// Releases the packets an EACK bitmap acknowledges (bit n = BPSN + n).
    fn acknowledge_bitmap(&mut self, window: Window, mut bits: u128) -> u32 {
        let (tx, events) = match window {
            Window::Request => (&mut self.tx_request, &mut self.events),
            Window::Data => (&mut self.tx_data, &mut self.events),
        };
        let base = tx.base();
        let mut acked = 0;
        while bits != 0 {
            let offset = bits.trailing_zeros();
            bits &= bits - 1;
            let psn = base.wrapping_add(offset);
            if let Some(slot) = tx.ack(psn) {
                events.push_back(Event::Acked {
                    window,
                    psn,
                    rsn: slot.rsn,
                    kind: slot.kind,
                    handle: slot.handle,
                });
                acked += 1;
            }
        }
        self.stats.packets_acked += u64::from(acked);
        acked
    }

    /// Data packets the receiver holds but has not acknowledged: their timer
    /// becomes the ULP RTO (spec/falcon.md §5.7). Not a Resync that replaced
    /// a ULP-NACKed packet: the bit is the NACKed original's until the Resync
    /// arrives, and the Resync itself waits for no ULP (RTO).
    fn mark_received(&mut self, mut bits: u128) {
        let base = self.tx_data.base();
        while bits != 0 {
            let offset = bits.trailing_zeros();
            bits &= bits - 1;
            if let Some(slot) = self.tx_data.slot_mut(base.wrapping_add(offset)) {
                if let SentKind::Transaction(_) = slot.kind {
                    slot.received = true;
                }
            }
        }
    }

    /// rtt = t4 − t1 and fabric delay = (t4 − t1) − (t3 − t2) (OCP Falcon 0.9
    /// §10.5). t1 is our own clock (the IV we sent, echoed); t2 and t3 are
    /// the peer's, so each difference stays within one clock.
    fn rtt_sample(
        &mut self,
        now: Timestamp,
        t1: FalconTime32,
        t2: FalconTime32,
        t3: FalconTime32,
    ) -> Option<Duration> {
        let units = now.falcon_time32().wrapping_since(t1);
        // A "negative" difference is a corrupt or foreign t1: no sample.
        if units >= 1 << 31 {
            return None;
        }
        let rtt = Duration::from_nanos(FalconTime32::units_to_nanos(units));
        let turnaround = Duration::from_nanos(FalconTime32::units_to_nanos(t3.wrapping_since(t2)));
        self.rtt.latest = Some(rtt);
        self.rtt.fabric_delay = Some(rtt.saturating_sub(turnaround));
        self.rtt.smoothed = Some(match self.rtt.smoothed {
            Some(smoothed) => (smoothed * 7 + rtt) / 8,
            None => rtt,
        });
        Some(rtt)
    }

    /// isekai's pause of first transmissions on OWN: set by an EACK-OWN,
    /// cleared once ACK BPSN + slack ≥ NPSN.
    fn update_own_pause(&mut self, request_bpsn: Psn, data_bpsn: Psn, r_own: bool, d_own: bool) {
        let Some(pause) = self.config.own_pause else {
            return;
        };
        for (index, bpsn, own, slack) in [
            (0, request_bpsn, r_own, pause.request_slack),
            (1, data_bpsn, d_own, pause.data_slack),
        ] {
            let next = if index == 0 {
                self.tx_request.next()
            } else {
                self.tx_data.next()
            };
            if own {
                self.own_paused[index] = true;
            } else if self.own_paused[index] && bpsn.wrapping_add(slack).after_or_eq(next) {
                self.own_paused[index] = false;
            }
        }
    }
}
