//! The engine's side of the RUE (DESIGN.md §3 "RUE: events to the RUE queue
//! (admission predicates), results applied"), inline or on another core.
//!
//! Layer: engine. Moves each connection's CC events (built and admitted by
//! the delivery sublayer, OCP Falcon 0.9 §10.6.1) towards the `rue` crate's
//! lossless SPSC event queue and applies the results to their connections
//! (§10.6.2.2). Two placements:
//!
//! * **inline** ([`RueMode::Swift`](crate::engine::RueMode::Swift),
//!   [`RueMode::Profiles`](crate::engine::RueMode::Profiles)): the engine
//!   owns the RUE core and its queue pair and runs it at the end of every
//!   engine call;
//! * **external** ([`RueMode::External`](crate::engine::RueMode::External)):
//!   the RUE runs on its own core; the caller's loop moves events out with
//!   [`Engine::poll_rue_event`] and results in with
//!   [`Engine::handle_rue_result`], and the queue occupancy it passes feeds
//!   the admission predicates.
//!
//! The RUE's connection id is the engine's slot index (plus the external
//! id base), so the state table is dense. Never drops an event: one the
//! admission refuses (a full queue) stays pending in the delivery sublayer
//! and is offered again at the connection's next input or result.
//!
//! A slot outlives its connections, so the id alone does not name one: a
//! connection's events carry its slot generation as their instance (24
//! bits of it, `rue::format`, "Connection instances"), its first event
//! `new_instance` so that the RUE, inline or on its own core, starts the
//! id's state from blank; a result whose instance is not the connection's
//! belongs to the slot's previous connection and is dropped
//! (`rue_results_stale`).

use rue::{CcEvent, CcResult};

use crate::engine::{Connection, Engine, RueInline};
use crate::port::PacketBuf;
use crate::time::Timestamp;
use crate::transaction::DataSource;

/// Rounds of process → apply → offer per engine call (an applied result may
/// release a pending event, whose result comes in the next round).
const ROUNDS: usize = 4;

/// The engine's books for a RUE on another core.
pub(super) struct RueExternal {
    /// RUE connection id of slot 0.
    id_base: u32,
    /// Slots that may have an event to hand out, oldest first.
    listed: std::collections::VecDeque<u32>,
}

impl RueExternal {
    pub(super) fn new(id_base: u32) -> Self {
        RueExternal {
            id_base,
            listed: std::collections::VecDeque::new(),
        }
    }
}

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// The RUE connection id of slot 0.
    pub(super) fn rue_id_base(&self) -> u32 {
        self.rue_external.as_ref().map_or(0, |e| e.id_base)
    }

    /// Inline: queues the connection's pending CC event, if its admission
    /// allows. External: lists the connection for [`poll_rue_event`](Self::poll_rue_event).
    /// Runs after every input; only the check that an inline RUE has
    /// nothing to take is inline (see [`Engine::drain_delivery_events`]).
    #[inline(always)]
    pub(super) fn rue_offer(&mut self, slot: u32, now: Timestamp) {
        let Some(conn) = self.connections.value(slot as usize) else {
            return;
        };
        if rue_offer_due(&self.rue, &self.rue_external, conn) {
            self.offer_rue_event(slot, now);
        }
    }

    #[inline(never)]
    pub(super) fn offer_rue_event(&mut self, slot: u32, now: Timestamp) {
        let Some(conn) = self.connections.value_mut(slot as usize) else {
            return;
        };
        if let Some(external) = &mut self.rue_external {
            if !conn.rue_listed {
                conn.rue_listed = true;
                external.listed.push_back(slot);
            }
            return;
        }
        let Some(rue) = &mut self.rue else {
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

    /// Inline: runs the RUE on the queued events and applies the results.
    #[inline(never)]
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
                self.apply_rue_result(now, &result);
            }
            self.rue_results = results;
        }
    }

    /// Applies one result to its connection; false if it has none (closed,
    /// failed, an id outside this engine, or a result of the slot's
    /// previous connection, counted as stale).
    fn apply_rue_result(&mut self, now: Timestamp, result: &CcResult) -> bool {
        let slot = result.connection_id.wrapping_sub(self.rue_id_base());
        let Some(conn) = self
            .connections
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
        else {
            return false;
        };
        if result.instance != conn.delivery.rue_instance() {
            self.stats.rue_results_stale += 1;
            return false;
        }
        if !conn.delivery.handle_rue_result(now, result) {
            return false;
        }
        self.stats.rue_results += 1;
        let cc = conn.delivery.cc_state();
        self.stats.record_windows(cc.fcwnd, cc.ncwnd);
        // New windows may let it send; a shorter RTO moves its timer.
        self.drain_delivery_events(slot, now);
        if let Some(conn) = self.connections.value_mut(slot as usize) {
            self.data_ring.activate(slot, &mut conn.on_data_ring);
        }
        self.arm(slot);
        self.rue_offer(slot, now);
        true
    }

    /// External RUE: the next CC event for the RUE's event queue, given
    /// that queue's occupancy and capacity (the admission predicates of
    /// OCP Falcon 0.9 §10.6.1 decide on them). `None` when no connection
    /// has one to hand out now; call again after the next input.
    ///
    /// Always `None` with an inline RUE or none (`RueMode::External` only).
    pub fn poll_rue_event(
        &mut self,
        now: Timestamp,
        queue_occupancy: usize,
        queue_capacity: usize,
    ) -> Option<CcEvent> {
        let external = self.rue_external.as_mut()?;
        while let Some(slot) = external.listed.pop_front() {
            let Some(conn) = self.connections.value_mut(slot as usize) else {
                continue;
            };
            conn.rue_listed = false;
            if let Some(event) = conn
                .delivery
                .poll_rue_event(now, queue_occupancy, queue_capacity)
            {
                self.stats.rue_events += 1;
                return Some(event);
            }
        }
        None
    }

    /// External RUE: a result from the RUE's result queue. Returns whether
    /// a connection took it (false: closed, failed, not this engine's id
    /// range, or of a closed connection whose slot was reused — counted as
    /// `rue_results_unmatched`, the last also as `rue_results_stale`).
    pub fn handle_rue_result(&mut self, now: Timestamp, result: &CcResult) -> bool {
        let applied = self.apply_rue_result(now, result);
        if !applied {
            self.stats.rue_results_unmatched += 1;
        }
        self.finish(now);
        applied
    }
}

/// Whether [`Engine::rue_offer`] has something to do for `conn`: an
/// external RUE lists every connection, an inline one takes its pending
/// CC event if its admission allows.
#[inline(always)]
pub(super) fn rue_offer_due<B: PacketBuf, S>(
    rue: &Option<RueInline>,
    rue_external: &Option<RueExternal>,
    conn: &Connection<B, S>,
) -> bool {
    rue_external.is_some() || (rue.is_some() && conn.delivery.may_poll_rue_event())
}
