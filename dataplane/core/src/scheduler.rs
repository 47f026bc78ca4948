//! The connection scheduler: which connection transmits next (OCP Falcon
//! 0.9 §8.3).
//!
//! Layer: engine, between the transaction sublayer's queues and the wire.
//! Owns [`Scheduler`], a round-robin ring of *active* connections (slot
//! indices) with O(1) activation, rotation and masking. It knows nothing of
//! packets, windows or credits: the engine asks the connection at the head
//! for a packet, rotates it to the tail when it sent one, and masks it out
//! (removes it) when it had nothing it was allowed to send.
//!
//! # The two levels of §8.3
//!
//! * **Across connections**: this ring. A connection is masked out when its
//!   delivery sublayer has nothing sendable — its queues are empty, or
//!   everything queued is blocked by fcwnd/ncwnd (out of window), by the
//!   pacing gap or rate cap, or by the RSN order — and is activated again
//!   by whatever can change that: a submit or Pull Data from the ULP, a
//!   received packet (ACKs open windows), an expired timer
//!   (retransmission), a release from the pacing wheel (`crate::pacing`), a
//!   RUE result (new windows). Transactions hold their credits from the
//!   submit on (§8.2.3), so a connection out of credits has nothing queued
//!   and is masked by the same rule.
//! * **Across transaction types**: per connection, the transaction sublayer
//!   keeps Pull Requests, Push Data and Pull Data in separate queues (the
//!   figure's three; spec/falcon.md §9 item 11) and hands the delivery
//!   sublayer the head of each, one at a time. The delivery sublayer's
//!   transmit pick then alternates initiator-generated (Pull Request / Push
//!   Data) and target-generated (Pull Data) packets, as CR rule #2 requires,
//!   and round-robins Pull Requests with Push Data on unordered connections
//!   (RSN order on ordered ones, §9.1.3).
//!
//! ACKs and NACKs do not wait for a turn: connections with one due sit on a
//! second ring the engine drains first (isekai weighs its ACK/NACK
//! scheduler 2:1 over data).

use std::collections::VecDeque;

/// A round-robin ring of active connection slots.
///
/// Whether a slot is on the ring is kept by the caller, in a flag of the
/// connection it passes in (`on_ring`): the engine holds the connection
/// whenever it activates one, and a flag array here, indexed by slot, cost
/// a cache miss per activation at a million connections (`falcon bench
/// scale`). The ring itself only holds slots.
#[derive(Debug, Clone, Default)]
pub struct Scheduler {
    ring: VecDeque<u32>,
}

impl Scheduler {
    /// An empty ring.
    #[cfg(any(test, feature = "testing"))]
    pub fn new() -> Self {
        Scheduler::default()
    }

    /// An empty ring with room for slots `0..slots` (no growth on
    /// activation).
    pub fn with_slots(slots: usize) -> Self {
        Scheduler {
            ring: VecDeque::with_capacity(slots),
        }
    }

    /// Puts `slot` at the tail if it is not on the ring (`on_ring`, its
    /// flag, says so and is set).
    #[inline]
    pub fn activate(&mut self, slot: u32, on_ring: &mut bool) {
        // Several times per packet, nearly always on a member.
        if !*on_ring {
            *on_ring = true;
            self.ring.push_back(slot);
        }
    }

    /// The connection whose turn it is.
    pub fn front(&self) -> Option<u32> {
        self.ring.front().copied()
    }

    /// The head sent a packet: it goes to the tail (round robin).
    #[inline]
    pub fn rotate(&mut self) {
        // Alone on the ring (one busy connection, the common case per core):
        // already at the tail.
        if self.ring.len() > 1 {
            if let Some(slot) = self.ring.pop_front() {
                self.ring.push_back(slot);
            }
        }
    }

    /// The head has nothing it may send: off the ring until activated.
    /// `on_ring` is its flag (`None`: its connection is gone).
    pub fn mask_front(&mut self, on_ring: Option<&mut bool>) {
        self.ring.pop_front();
        if let Some(flag) = on_ring {
            *flag = false;
        }
    }

    /// Removes `slot` wherever it is (a closed connection), if its flag
    /// `on_ring` says it is on the ring.
    pub fn remove(&mut self, slot: u32, on_ring: &mut bool) {
        if *on_ring {
            *on_ring = false;
            self.ring.retain(|&s| s != slot);
        }
    }

    /// Active connections.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// No active connection.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections with backlogs of different sizes, some masked for a
    /// while (out of window): each turn serves the head; counts stay within
    /// one of each other among the backlogged ones.
    #[test]
    fn round_robin_is_fair_and_masking_skips() {
        let mut scheduler = Scheduler::new();
        let mut on_ring = [false; 4];
        let mut backlog = [1000u32, 1000, 1000, 5];
        for slot in 0..4 {
            scheduler.activate(slot, &mut on_ring[slot as usize]);
            scheduler.activate(slot, &mut on_ring[slot as usize]); // idempotent
        }
        assert_eq!(scheduler.len(), 4);
        let mut sent = [0u32; 4];
        let mut window_closed_until = [0u32; 4];
        window_closed_until[2] = 60; // connection 2 out of window early on
        for turn in 0..600u32 {
            if turn == 60 {
                scheduler.activate(2, &mut on_ring[2]); // an ACK opened its window
            }
            let Some(slot) = scheduler.front() else {
                break;
            };
            let i = slot as usize;
            if backlog[i] == 0 || turn < window_closed_until[i] {
                scheduler.mask_front(Some(&mut on_ring[i]));
                continue;
            }
            backlog[i] -= 1;
            sent[i] += 1;
            scheduler.rotate();
        }
        assert_eq!(sent[3], 5, "small backlog drained, then masked");
        assert!(!on_ring[3]);
        let busy = [sent[0], sent[1]];
        assert!(busy[0].abs_diff(busy[1]) <= 1, "{sent:?}");
        assert!(
            sent[2] > 0 && sent[2] < sent[0],
            "masked connection caught up later: {sent:?}"
        );
        scheduler.remove(0, &mut on_ring[0]);
        assert!(!on_ring[0]);
        assert_eq!(scheduler.len(), 2);
        // Removing a slot not on the ring touches nothing.
        scheduler.remove(3, &mut on_ring[3]);
        assert_eq!(scheduler.len(), 2);
        // A slot whose connection is gone is dropped from the head.
        scheduler.mask_front(None);
        assert_eq!(scheduler.len(), 1);
    }
}
