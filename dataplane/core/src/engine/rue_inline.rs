//! The RUE run inline in the engine's loop (DESIGN.md §3 "RUE: events to
//! the RUE queue (admission predicates), results applied").
//!
//! Layer: engine. Moves each connection's CC events (built and admitted by
//! the delivery sublayer, OCP Falcon 0.9 §10.6.1) into the `rue` crate's
//! lossless SPSC event queue, runs the RUE core over it at the end of every
//! engine call, and applies the results to their connections (§10.6.2.2).
//! The RUE's connection id is the engine's slot index, so its state table is
//! dense. Never drops an event: a full queue leaves it pending in the
//! delivery sublayer.

use crate::engine::Engine;
use crate::time::Timestamp;

/// Rounds of process → apply → offer per engine call (an applied result may
/// release a pending event, whose result comes in the next round).
const ROUNDS: usize = 4;

impl Engine {
    /// Queues the connection's pending CC event, if its admission allows.
    pub(super) fn rue_offer(&mut self, slot: u32, now: Timestamp) {
        let Some(rue) = &mut self.rue else {
            return;
        };
        let Some(conn) = self.connections[slot as usize].as_mut() else {
            return;
        };
        let (occupancy, capacity) = (rue.channel.event_occupancy(), rue.channel.event_capacity());
        let Some(event) = conn.delivery.poll_rue_event(now, occupancy, capacity) else {
            return;
        };
        match rue.channel.push(event) {
            Ok(()) => {
                self.stats.rue_events += 1;
                rue.pending = true;
            }
            // Admission saw room; count the surprise rather than lose the
            // connection's CC loop silently.
            Err(_) => self.stats.rue_queue_full += 1,
        }
    }

    /// Runs the RUE on the queued events and applies the results.
    pub(super) fn rue_service(&mut self, now: Timestamp) {
        for _ in 0..ROUNDS {
            let Some(rue) = &mut self.rue else {
                return;
            };
            if !rue.pending {
                return;
            }
            rue.pending = false;
            rue.rue.process(usize::MAX);
            while let Some(result) = rue.channel.pop() {
                self.rue_results.push(result);
            }
            let mut results = core::mem::take(&mut self.rue_results);
            for result in results.drain(..) {
                let slot = result.connection_id;
                let Some(conn) = self
                    .connections
                    .get_mut(slot as usize)
                    .and_then(Option::as_mut)
                else {
                    continue;
                };
                if !conn.delivery.handle_rue_result(now, &result) {
                    continue;
                }
                self.stats.rue_results += 1;
                let cc = conn.delivery.cc_state();
                self.stats.record_windows(cc.fcwnd, cc.ncwnd);
                // New windows may let it send; a shorter RTO moves its timer.
                self.drain_delivery_events(slot, now);
                self.data_ring.activate(slot);
                self.arm(slot);
                self.rue_offer(slot, now);
            }
            self.rue_results = results;
        }
    }
}
