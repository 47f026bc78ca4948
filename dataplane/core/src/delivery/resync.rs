//! Resync: replacing a lost or NACKed packet, and receiving one.
//!
//! Layer: delivery. Implements the transmitter's switch of a retransmit
//! slot to a Resync with the original PSN, RSN and packet type (OCP Falcon
//! 0.9 §9.1.8, §11) and the receiver's processing of a Resync (§9.2.5).
//! Resyncs are reliable and gated like the packet they replace; their window
//! is chosen from the Resync Packet Type field (spec/falcon.md §9 item 8).

use crate::delivery::ack::CREDITS_PACKET;
use crate::delivery::connection::DeliveryConnection;
use crate::delivery::events::{Event, ResyncError, RxOutcome};
use crate::delivery::packet::{PacketKind, Retransmission, RxMeta, SentKind};
use crate::delivery::rx_window::WindowCheck;
use crate::delivery::tx_window::RnrUntil;
use crate::drop::DropReason;
use crate::seq::Psn;
use crate::time::Timestamp;
use crate::wire::{ResyncCode, ResyncRepr, Window};

impl DeliveryConnection {
    /// The transaction sublayer gives up an outstanding packet (local xLR
    /// flow 0x2, transaction timeout 0x4, ...): a Resync with `code` takes
    /// its PSN so the peer's window moves on (OCP Falcon 0.9 §9.1.8). The
    /// payload is no longer needed once this returns.
    ///
    /// # Errors
    ///
    /// [`ResyncError::NotOutstanding`] if `psn` is not an outstanding
    /// transaction packet of `window`.
    pub fn resync(
        &mut self,
        window: Window,
        psn: Psn,
        code: ResyncCode,
    ) -> Result<(), ResyncError> {
        if self.failed.is_some() {
            return Err(ResyncError::ConnectionNotAlive);
        }
        match self.tx(window).slot(psn) {
            Some(slot) if matches!(slot.kind, SentKind::Transaction(_)) => {}
            _ => return Err(ResyncError::NotOutstanding),
        }
        self.start_resync(window, psn, code);
        Ok(())
    }

    /// Turns `psn`'s slot into a Resync with `code` and queues it: the
    /// original packet leaves the retransmit queue and its counter is reset
    /// (§11: "Reset Retransmit Counter, and transmit resync packet with same
    /// PSN").
    pub(super) fn start_resync(&mut self, window: Window, psn: Psn, code: ResyncCode) {
        let tx = self.tx_mut(window);
        let Some(slot) = tx.slot_mut(psn) else {
            return;
        };
        slot.kind = SentKind::Resync {
            code,
            original: slot.kind.original(),
        };
        slot.retransmit_count = 0;
        slot.early_retransmits = 0;
        slot.rnr_until = RnrUntil::NONE;
        slot.received = false;
        // Marks the Resync's first transmission (see `send_retransmission`).
        slot.retransmitted = false;
        tx.unmark_retransmit(psn);
        tx.mark_retransmit(psn, Retransmission::Timeout);
    }

    /// OCP Falcon 0.9 §9.2.5: set the PSN's bit in the window the Resync
    /// Packet Type selects, generate an ACK, advance BPSN.
    pub(super) fn handle_resync(
        &mut self,
        now: Timestamp,
        resync: &ResyncRepr,
        meta: RxMeta,
    ) -> RxOutcome {
        if let Err(reason) = self.handle_piggyback(&resync.header) {
            return RxOutcome::Dropped(reason);
        }
        if PacketKind::from_packet_type(resync.original_packet_type).is_none() {
            return RxOutcome::Dropped(DropReason::MalformedFalcon);
        }
        self.record_arrival(now, meta);
        // spec/falcon.md §9 item 8: a resynced Pull Request is in the request
        // window, everything else in the data window.
        let window = resync.window();
        let psn = resync.header.psn;
        let rx = self.rx_mut(window);
        let reason = match rx.check(psn) {
            WindowCheck::Accept => None,
            // A Push Data received but never acknowledged (the ULP NACKed
            // it): the Resync acknowledges it. §11: "Duplicate packet that is
            // previously received (PSN received state is True), and it is a
            // resync packet: drop and send ACK for the ingress PSN".
            WindowCheck::Duplicate(_) if rx.awaits_ulp(psn) => None,
            WindowCheck::Duplicate(_) => Some(DropReason::DuplicatePacket),
            WindowCheck::OutOfWindow => Some(DropReason::OutOfWindow),
            WindowCheck::Stale => Some(DropReason::StalePacket),
        };
        if let Some(reason) = reason {
            self.discarded(now);
            return RxOutcome::Dropped(reason);
        }
        self.rx_mut(window).acknowledge(psn);
        self.events.push_back(Event::Resynced {
            window,
            psn,
            rsn: resync.header.rsn,
            code: resync.code,
            original: resync.original_packet_type,
        });
        // "an ACK generation event must be sent to the transmitter": sent
        // at once, so the transmitter's Resync completes promptly.
        self.coalescing
            .add(now, CREDITS_PACKET, self.config.ack_coalescing_timeout);
        self.coalescing.request_immediate();
        RxOutcome::Processed
    }
}
