//! The engine's upkeep after every input: timers, the wheel, resource
//! occupancy and Xon.
//!
//! Layer: engine. Implements [`Engine::poll_timeout`] and
//! [`Engine::handle_timeout`], the arming of connections on the timing
//! wheel (once per burst, not per packet), the pacing wheel's releases, and what runs after an input
//! or command: RUE service, the receive-buffer level samples and the Xon
//! check of connections told Xoff (by credit class).

use super::rue_inline::rue_offer_due;
use crate::port::PacketBuf;
use crate::resources::{Credit, CreditClass};
use crate::scheduler::Scheduler;
use crate::time::Timestamp;
use crate::transaction::{DataSource, UlpEvent};

use super::{conn_in, Connection, Engine};

impl<B: PacketBuf, S: DataSource> Engine<B, S> {
    /// When [`handle_timeout`](Self::handle_timeout) should next run. May
    /// be early (a deadline that moved later), never late.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        // The wheels, and what the connections not yet armed would put on
        // the timing wheel.
        let mut next = earliest(self.wheel.next_deadline(), self.pacing.next_deadline());
        for &slot in &self.unarmed {
            if let Some(conn) = self.connections.value(slot as usize) {
                next = earliest(next, conn.deadline_to_arm());
            }
        }
        next
    }

    /// Runs the timers due at `now`: retransmissions, ACK coalescing,
    /// pacing releases, RNR waits, transaction timeouts and reclaims.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.pacing.next_deadline().is_some_and(|due| due <= now) {
            self.release_paced(now);
        }
        self.arm_pending();
        let mut fired = core::mem::take(&mut self.fired);
        self.wheel.expire(now, &mut fired);
        for (handle, deadline) in fired.drain(..) {
            let Some(slot) = self.slot(handle) else {
                continue;
            };
            let conn = conn_in(&mut self.connections, slot);
            if conn.armed != Some(deadline) {
                continue; // stale: the connection re-armed earlier
            }
            conn.armed = None;
            if conn.dead {
                continue;
            }
            conn.delivery.handle_timeout(now);
            {
                let (initiator, mut ctx) = conn.initiator_ctx(now, &mut self.shared);
                initiator.handle_timeout(&mut ctx);
            }
            let conn = conn_in(&mut self.connections, slot);
            {
                let (target, mut ctx) = conn.target_ctx(now, &mut self.shared);
                target.handle_timeout(&mut ctx);
            }
            self.after_input(slot, now);
        }
        self.fired = fired;
        self.finish(now);
    }

    /// The pacing wheel's releases due at `now`: each connection released
    /// goes back on the data ring, where the next transmit burst polls it
    /// (and, if its release time has not come, as for an entry clamped at
    /// the wheel's horizon, puts it back in the wheel). Nothing else runs:
    /// a release is not a timer of the sublayers.
    #[inline(never)]
    fn release_paced(&mut self, now: Timestamp) {
        let mut released = core::mem::take(&mut self.released);
        self.pacing.expire(now, &mut released);
        for (handle, release) in released.drain(..) {
            let Some(slot) = self.slot(handle) else {
                continue;
            };
            let conn = conn_in(&mut self.connections, slot);
            if conn.departure != Some(release) {
                continue; // stale: the connection was put back earlier
            }
            conn.departure = None;
            self.stats.pacing_releases += 1;
            if !conn.dead {
                self.data_ring.activate(slot, &mut conn.on_data_ring);
            }
        }
        self.released = released;
    }

    /// After any input or command on a connection: hand its delivery events
    /// to the transaction sublayer, feed the RUE, put it on the scheduler
    /// rings and re-arm its timer.
    ///
    /// The receive path does the same on the connection it holds, with
    /// [`settled`] after its own event check.
    #[inline(always)]
    pub(super) fn after_input(&mut self, slot: u32, now: Timestamp) {
        self.drain_delivery_events(slot, now);
        let Some(conn) = self.connections.value_mut(slot as usize) else {
            return;
        };
        settled(
            &mut self.unarmed,
            &mut self.data_ring,
            &mut self.ack_ring,
            conn,
            slot,
        );
        if rue_offer_due(&self.rue, &self.rue_external, conn) {
            self.offer_rue_event(slot, now);
        }
    }

    /// Notes that the connection's deadlines may have moved: its wheel entry is
    /// brought up to date at the end of the transmit burst
    /// ([`poll_transmit`](Self::poll_transmit) returning `None`) or before the
    /// wheel is read ([`handle_timeout`](Self::handle_timeout);
    /// [`poll_timeout`](Self::poll_timeout) adds what the connections not yet
    /// armed would insert, so it is never late). Every input and every
    /// transmitted packet moves deadlines, so this runs several times per
    /// transaction, and the comparison with the wheel is made once per burst.
    /// The wheel only loses entries for deadlines that moved later again before
    /// the burst ended: early wake-ups that would have found nothing due.
    pub(super) fn arm(&mut self, slot: u32) {
        if let Some(conn) = self.connections.value_mut(slot as usize) {
            arm_connection(&mut self.unarmed, conn, slot);
        }
    }

    /// Arms every connection noted by [`arm`](Self::arm), and takes back
    /// the rings of those left idle.
    pub(super) fn arm_pending(&mut self) {
        let mut unarmed = core::mem::take(&mut self.unarmed);
        for slot in unarmed.drain(..) {
            let Some(conn) = self.connections.value_mut(slot as usize) else {
                continue;
            };
            conn.unarmed = false;
            if let Some(next) = conn.deadline_to_arm() {
                conn.armed = Some(next);
                self.wheel.insert(conn.handle, next);
            } else if conn.armed.is_some() && conn.timerless() {
                // Idle: the wheel entry stays (no removal) but is stale
                // when it fires, found so on the connection's first line
                // rather than by running every sublayer's timers on it.
                conn.armed = None;
            }
            conn.initiator.take_new_deadline();
            conn.target.take_new_deadline();
            // Idle after the burst: the slot rings and window rings go back
            // to the engine's pools, for the next connection to send. Here,
            // once a burst, rather than as each ring empties: a busy
            // connection's rings empty and fill again within a burst.
            conn.initiator.lend_idle(&mut self.shared.initiator_rings);
            conn.target.lend_idle(&mut self.shared.target_rings);
            conn.delivery.lend_idle_windows(&mut self.windows);
        }
        self.unarmed = unarmed;
    }

    /// End of every top-level call: run the RUE on what was queued, tell
    /// waiting ULPs Xon, refresh the buffer level. Only the two checks are
    /// inline: as one out-of-line function most of a call would go to saving
    /// and restoring the registers its inlined bodies need.
    /// `drain_delivery_events` and `rue_offer` are split the same way.
    #[inline(always)]
    pub(super) fn finish(&mut self, now: Timestamp) {
        if self.rue.as_ref().is_some_and(|rue| rue.pending) {
            self.rue_service(now);
        }
        if self.shared.occupancy_changed {
            self.after_occupancy_change();
        }
    }

    /// Resources came back or a received request took some: Xon to the
    /// ULPs that wait for them (nothing to do after a reservation), and
    /// the buffer level's new occupancy sample (§10.2).
    ///
    /// The Xon check stays out of line behind its emptiness test: inlined here,
    /// its loop would make every call (~2 per transaction) save and restore
    /// four registers for the two EMA updates.
    ///
    /// The samples come before the Xon check (which reads credits, never the
    /// pools' occupancy or the buffer level), so the check is a tail call and
    /// no register lives across it: no callee-saved register to save and
    /// restore on every call.
    #[inline(never)]
    pub(super) fn after_occupancy_change(&mut self) {
        self.shared.occupancy_changed = false;
        let r = &self.shared.resources;
        let [packets, cells] = &mut self.buffer_level.pools;
        packets.update(r.used(Credit::NetReqPktRx));
        cells.update(r.used(Credit::NetReqBufRx));
        if !self.shared.xoff_waiting.is_empty() {
            self.check_xon();
        }
    }

    #[inline(never)]
    pub(super) fn check_xon(&mut self) {
        let mut waiting = core::mem::take(&mut self.shared.xoff_waiting);
        waiting.retain(|&handle| {
            let Some(slot) = self.slot(handle) else {
                return false;
            };
            let Some(conn) = self.connections.value_mut(slot as usize) else {
                return false;
            };
            for class in CreditClass::ALL {
                if conn.account.xoff[class.index()] && self.shared.xon_due(&conn.account, class) {
                    conn.account.xoff[class.index()] = false;
                    self.shared.stats.xon += 1;
                    self.shared.events.push_back(UlpEvent::Xon {
                        connection: handle,
                        class,
                    });
                }
            }
            // Waited on while either class is stopped.
            conn.account.xoff != [false; 2]
        });
        waiting.append(&mut self.shared.xoff_waiting);
        self.shared.xoff_waiting = waiting;
    }
}

impl<B: PacketBuf, S: DataSource> Connection<B, S> {
    /// The deadline to put on the wheel: the connection's next one, if it is
    /// earlier than the one already there. Cheap when nothing moved earlier:
    /// the delivery sublayer's timer and the deadlines the transaction
    /// sublayer added since the last look are compared with the armed one;
    /// the full minimum is computed only when the wheel entry fired or is
    /// beaten.
    pub(super) fn deadline_to_arm(&self) -> Option<Timestamp> {
        if self.dead {
            return None;
        }
        let delivery = self.delivery.poll_timeout();
        let fresh = earliest(self.initiator.new_deadline(), self.target.new_deadline());
        if let Some(armed) = self.armed {
            if delivery.map_or(true, |d| d >= armed) && fresh.map_or(true, |f| f >= armed) {
                return None;
            }
        }
        let transactions = earliest(self.initiator.next_deadline(), self.target.next_deadline());
        let next = earliest(delivery, transactions)?;
        if self.armed.is_some_and(|armed| armed <= next) {
            return None;
        }
        Some(next)
    }
}

impl<B: PacketBuf, S: DataSource> Connection<B, S> {
    /// No timer at all: nothing to retransmit, acknowledge, pace, redeliver
    /// or time out.
    fn timerless(&self) -> bool {
        self.delivery.poll_timeout().is_none()
            && self.initiator.next_deadline().is_none()
            && self.target.next_deadline().is_none()
    }
}

/// [`Engine::arm`] on the connection in `slot`, already found.
#[inline(always)]
pub(super) fn arm_connection<B: PacketBuf, S>(
    unarmed: &mut Vec<u32>,
    conn: &mut Connection<B, S>,
    slot: u32,
) {
    if !conn.unarmed {
        conn.unarmed = true;
        unarmed.push(slot);
    }
}

/// The earlier of two optional deadlines.
pub(super) fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What follows an input on `conn` (in `slot`) once its delivery events
/// were handed on: its deadlines may have moved (listed for `arm_pending`),
/// and it may have something to send (both scheduler rings). The caller
/// then offers the RUE event if one is due.
#[inline(always)]
pub(super) fn settled<B: PacketBuf, S>(
    unarmed: &mut Vec<u32>,
    data_ring: &mut Scheduler,
    ack_ring: &mut Scheduler,
    conn: &mut Connection<B, S>,
    slot: u32,
) {
    arm_connection(unarmed, conn, slot);
    data_ring.activate(slot, &mut conn.on_data_ring);
    ack_ring.activate(slot, &mut conn.on_ack_ring);
}
