//! The Carousel wheel: one time-indexed queue of departures.
//!
//! Layer: pacing (engine infrastructure). Owns [`Carousel`], the single-level
//! timing wheel of spec/rue.md §5.1 (CAROUSEL; isekai `traffic_shaper_model`):
//! `slots` slots of `granularity` each, keys queued by their release time and
//! handed back, slot by slot, once the clock has passed the slot. It stores
//! opaque keys, knows nothing of connections or rates and never reads a
//! clock.
//!
//! # Semantics
//!
//! * A release time `t` goes to the slot of tick `ceil(t / granularity)` and
//!   is handed back by the first [`expire`](Carousel::expire) whose `now`
//!   reaches that tick's start: never before `t`, at most one granularity
//!   after it (spec/rue.md §5.1: "slot = ceil(ts / g)").
//! * A time already past goes to the current slot (the tick of the last
//!   `expire`) and is handed back by the next `expire`, whatever its `now`.
//! * A time beyond the horizon (more than `slots − 1` ticks after the
//!   current one) is clamped into the last slot and counted
//!   ([`clamped`](Carousel::clamped)): it is handed back early, at the
//!   horizon, and the caller, which holds the true release time, inserts it
//!   again. Decision: clamp rather than refuse (isekai treats it as an
//!   error), so the caller needs no second queue for long gaps; the early
//!   return costs one wake-up per horizon (33.6 ms with the engine's
//!   defaults).
//! * Within a slot, keys come back in insertion order (each slot is a FIFO);
//!   across slots, in tick order.
//!
//! # Cost
//!
//! Insertion is O(1): a node from a free list appended to its slot's
//! circular list. Expiry is O(keys handed back) plus the search for occupied
//! slots, which skips empty ones 64 at a time through an occupancy bitmap
//! and 4096 at a time through a summary bitmap over its words. The slot
//! table (4 bytes a slot) is allocated at the first insertion, so an engine
//! with no paced connection pays nothing for it; nodes are reused, so a
//! warmed-up wheel does not allocate.

use core::time::Duration;

use crate::time::Timestamp;

/// No node: the end of a list, an empty slot.
const NIL: u32 = u32::MAX;

/// A timing wheel of `(key, release time)` entries; see the module doc.
#[derive(Debug, Clone)]
pub struct Carousel<K> {
    /// Nanoseconds per slot.
    granularity: u64,
    /// `slots − 1` (slots is a power of two).
    mask: u64,
    /// Per slot: the last node of its circular list (whose `next` is the
    /// first), or [`NIL`]. Empty until the first insertion.
    tails: Vec<u32>,
    /// Bit `i`: slot `i` holds a node.
    occupied: Vec<u64>,
    /// Bit `w`: word `w` of `occupied` is not zero.
    summary: Vec<u64>,
    nodes: Vec<Node<K>>,
    /// First free node, linked through `next`.
    free: u32,
    /// The tick of the last `expire`: every node's tick is in
    /// `current ..= current + mask`, so each slot holds one tick.
    current: u64,
    /// The earliest tick held.
    next: Option<u64>,
    len: usize,
    clamped: u64,
}

#[derive(Debug, Clone, Copy)]
struct Node<K> {
    key: K,
    at: Timestamp,
    next: u32,
}

impl<K: Copy> Carousel<K> {
    /// A wheel of `slots` slots (rounded up to a power of two, at least 64)
    /// of `granularity` each (at least 1 ns), turned to `now`. Allocates
    /// nothing until the first insertion.
    pub fn new(granularity: Duration, slots: usize, now: Timestamp) -> Self {
        let granularity = u64::try_from(granularity.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        let slots = slots.max(64).next_power_of_two();
        Carousel {
            granularity,
            mask: slots as u64 - 1,
            tails: Vec::new(),
            occupied: Vec::new(),
            summary: Vec::new(),
            nodes: Vec::new(),
            free: NIL,
            current: now.as_nanos() / granularity,
            next: None,
            len: 0,
            clamped: 0,
        }
    }

    /// Queues `key` for release at `at`. Returns false if `at` was beyond
    /// the horizon and the key was clamped into the last slot (handed back
    /// early; see the module doc).
    pub fn insert(&mut self, key: K, at: Timestamp) -> bool {
        if self.tails.is_empty() {
            self.allocate();
        }
        let nanos = at.as_nanos();
        let exact = nanos / self.granularity + u64::from(nanos % self.granularity != 0);
        let mut tick = exact.max(self.current);
        let within = tick - self.current <= self.mask;
        if !within {
            tick = self.current + self.mask;
            self.clamped += 1;
        }
        let node = self.take_node(key, at);
        let index = (tick & self.mask) as usize;
        let tail = self.tails[index];
        if tail == NIL {
            self.nodes[node as usize].next = node;
            self.set_occupied(index);
        } else {
            self.nodes[node as usize].next = self.nodes[tail as usize].next;
            self.nodes[tail as usize].next = node;
        }
        self.tails[index] = node;
        self.len += 1;
        self.next = Some(self.next.map_or(tick, |next| next.min(tick)));
        within
    }

    /// Turns the wheel to `now` and appends to `out` every key whose slot
    /// `now` has reached, with the release time it was inserted with: slot
    /// by slot in tick order, each slot in insertion order. `now` earlier
    /// than the last call's releases only past-due keys.
    pub fn expire(&mut self, now: Timestamp, out: &mut Vec<(K, Timestamp)>) {
        let target = (now.as_nanos() / self.granularity).max(self.current);
        while let Some(tick) = self.next.filter(|&tick| tick <= target) {
            self.drain((tick & self.mask) as usize, out);
            // Every remaining node is after `tick` and within the horizon of
            // `current`, so the first occupied slot after it is the next tick.
            self.next = self.first_occupied_after(tick);
        }
        self.current = target;
    }

    /// When the next [`expire`](Self::expire) hands something back: the
    /// start of the earliest occupied slot (at or before `now` for past-due
    /// keys).
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.next
            .map(|tick| Timestamp::from_nanos(tick.saturating_mul(self.granularity)))
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No keys held.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Insertions clamped into the last slot so far.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Nanoseconds per slot.
    pub fn granularity(&self) -> Duration {
        Duration::from_nanos(self.granularity)
    }

    /// How far ahead of the current slot a release time may be without
    /// being clamped: `(slots − 1) × granularity`.
    #[cfg(any(test, feature = "testing"))]
    pub fn horizon(&self) -> Duration {
        Duration::from_nanos(self.mask.saturating_mul(self.granularity))
    }

    #[cold]
    fn allocate(&mut self) {
        let slots = self.mask as usize + 1;
        let words = slots / 64;
        self.tails = vec![NIL; slots];
        self.occupied = vec![0; words];
        self.summary = vec![0; words.div_ceil(64)];
    }

    fn take_node(&mut self, key: K, at: Timestamp) -> u32 {
        if self.free != NIL {
            let node = self.free;
            let slot = &mut self.nodes[node as usize];
            self.free = slot.next;
            slot.key = key;
            slot.at = at;
            return node;
        }
        // More than 2^32 − 1 keys held at once cannot happen: each is a
        // connection of the engine (at most 2^24).
        let node = u32::try_from(self.nodes.len()).unwrap_or(NIL - 1);
        self.nodes.push(Node { key, at, next: NIL });
        node
    }

    /// Hands back every node of slot `index`, first inserted first.
    fn drain(&mut self, index: usize, out: &mut Vec<(K, Timestamp)>) {
        let tail = core::mem::replace(&mut self.tails[index], NIL);
        self.clear_occupied(index);
        if tail == NIL {
            return;
        }
        let mut node = self.nodes[tail as usize].next;
        loop {
            let Node { key, at, next } = self.nodes[node as usize];
            out.push((key, at));
            self.nodes[node as usize].next = self.free;
            self.free = node;
            self.len -= 1;
            if node == tail {
                return;
            }
            node = next;
        }
    }

    /// The tick of the first occupied slot after `tick`, searching the
    /// slots circularly from `tick + 1`.
    fn first_occupied_after(&self, tick: u64) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let start = ((tick + 1) & self.mask) as usize;
        let index = self.first_occupied_from(start)?;
        let distance = (index as u64).wrapping_sub(start as u64) & self.mask;
        Some(tick + 1 + distance)
    }

    /// The first occupied slot at or after `start`, circularly.
    fn first_occupied_from(&self, start: usize) -> Option<usize> {
        let word = start / 64;
        let here = self.occupied[word] & (!0u64 << (start % 64));
        if here != 0 {
            return Some(word * 64 + here.trailing_zeros() as usize);
        }
        // The next non-empty word, circularly; `word` itself last, for its
        // bits below `start` (then the lowest is the first in that order).
        let words = self.occupied.len();
        let found = first_set_circular(&self.summary, words, (word + 1) % words)?;
        Some(found * 64 + self.occupied[found].trailing_zeros() as usize)
    }

    fn set_occupied(&mut self, index: usize) {
        let word = index / 64;
        self.occupied[word] |= 1 << (index % 64);
        self.summary[word / 64] |= 1 << (word % 64);
    }

    fn clear_occupied(&mut self, index: usize) {
        let word = index / 64;
        self.occupied[word] &= !(1 << (index % 64));
        if self.occupied[word] == 0 {
            self.summary[word / 64] &= !(1 << (word % 64));
        }
    }
}

/// The first set bit of `bits` (holding `len` bits) at or after `start`,
/// circularly.
fn first_set_circular(bits: &[u64], len: usize, start: usize) -> Option<usize> {
    let words = bits.len();
    let (word, bit) = (start / 64, start % 64);
    let here = bits[word] & (!0u64 << bit);
    if here != 0 {
        return Some(word * 64 + here.trailing_zeros() as usize);
    }
    for step in 1..=words {
        let w = (word + step) % words;
        let mut value = bits[w];
        if w == word {
            // Wrapped all the way: only the bits before `start`.
            value &= !(!0u64 << bit);
        }
        if value != 0 {
            let found = w * 64 + value.trailing_zeros() as usize;
            return (found < len).then_some(found);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ns(n: u64) -> Timestamp {
        Timestamp::from_nanos(n)
    }

    #[test]
    fn releases_at_the_slot_start_never_early_fifo_within_a_slot() {
        let mut wheel = Carousel::new(Duration::from_nanos(100), 64, ns(1_000));
        assert!(wheel.insert(1u32, ns(1_250)));
        assert!(wheel.insert(2, ns(1_201)));
        assert!(wheel.insert(3, ns(1_300)));
        assert!(wheel.insert(4, ns(1_150)));
        // Ticks: 1 250 and 1 201 and 1 300 → 13; 1 150 → 12.
        assert_eq!(wheel.next_deadline(), Some(ns(1_200)));
        let mut out = Vec::new();
        wheel.expire(ns(1_199), &mut out);
        assert!(out.is_empty(), "1 150 is in the slot that starts at 1 200");
        wheel.expire(ns(1_299), &mut out);
        assert_eq!(out, vec![(4, ns(1_150))]);
        assert_eq!(wheel.next_deadline(), Some(ns(1_300)));
        out.clear();
        wheel.expire(ns(1_300), &mut out);
        assert_eq!(out, vec![(1, ns(1_250)), (2, ns(1_201)), (3, ns(1_300))]);
        assert!(wheel.is_empty());
        assert_eq!(wheel.next_deadline(), None);
    }

    #[test]
    fn past_due_goes_to_the_current_slot_and_far_is_clamped() {
        let mut wheel = Carousel::new(Duration::from_nanos(512), 64, ns(512 * 100));
        assert_eq!(wheel.horizon(), Duration::from_nanos(63 * 512));
        let mut out = Vec::new();
        wheel.expire(ns(512 * 100 + 7), &mut out);
        assert!(wheel.insert(1u32, ns(5)), "past due");
        assert_eq!(wheel.next_deadline(), Some(ns(512 * 100)));
        wheel.expire(ns(512 * 100 + 8), &mut out);
        assert_eq!(out, vec![(1, ns(5))], "the next expire hands it back");
        out.clear();
        // 63 ticks ahead fits; 64 does not.
        assert!(wheel.insert(2, ns(512 * 163)));
        assert!(!wheel.insert(3, ns(512 * 164)));
        assert!(!wheel.insert(4, ns(u64::MAX)));
        assert_eq!(wheel.clamped(), 2);
        wheel.expire(ns(512 * 163), &mut out);
        assert_eq!(
            out,
            vec![(2, ns(512 * 163)), (3, ns(512 * 164)), (4, ns(u64::MAX))],
            "clamped into the last slot, after what was there"
        );
    }

    #[test]
    fn sparse_wheel_finds_the_next_slot_across_words_and_wraps() {
        let g = Duration::from_nanos(10);
        let mut wheel = Carousel::new(g, 1 << 16, ns(0));
        let mut out = Vec::new();
        // Walk the wheel round twice with one key far ahead at a time.
        let mut now = 0u64;
        for step in [65_000u64, 12_345, 64, 1, 40_000, 65_535] {
            let at = now + step * 10;
            assert!(wheel.insert(step, ns(at)));
            assert_eq!(wheel.next_deadline(), Some(ns(at)));
            wheel.expire(ns(at - 1), &mut out);
            assert!(out.is_empty());
            wheel.expire(ns(at), &mut out);
            assert_eq!(out, vec![(step, ns(at))]);
            out.clear();
            now = at;
        }
        // Nodes are reused: one was ever allocated.
        assert_eq!(wheel.nodes.len(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert { key: u16, delay_ns: i64 },
        Advance { ns: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (any::<u16>(), prop_oneof![-500i64..0, 0i64..2_000, 0i64..40_000])
                .prop_map(|(key, delay_ns)| Op::Insert { key, delay_ns }),
            2 => prop_oneof![0u64..300, 0u64..5_000, 0u64..50_000]
                .prop_map(|ns| Op::Advance { ns }),
        ]
    }

    proptest! {
        /// Against a sorted list: each key comes back at the first expire
        /// whose slot reached its tick (never before its time unless
        /// clamped), none is lost, slot order then insertion order.
        #[test]
        fn matches_sorted_list_oracle(
            granularity in prop_oneof![Just(1u64), Just(100), Just(512), 1u64..2_000],
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let slots = 64u64;
            let start = 10_000_000u64;
            let mut now = start;
            let mut wheel = Carousel::new(Duration::from_nanos(granularity), 64, ns(now));
            // (tick, insertion, key, time, clamped)
            let mut oracle: Vec<(u64, u64, u16, u64, bool)> = Vec::new();
            let mut current = now / granularity;
            let mut sequence = 0u64;
            let mut out = Vec::new();
            for op in ops {
                match op {
                    Op::Insert { key, delay_ns } => {
                        let at = now.saturating_add_signed(delay_ns);
                        let exact = at.div_ceil(granularity).max(current);
                        let clamped = exact - current >= slots;
                        let tick = if clamped { current + slots - 1 } else { exact };
                        prop_assert_eq!(wheel.insert(key, ns(at)), !clamped);
                        sequence += 1;
                        oracle.push((tick, sequence, key, at, clamped));
                    }
                    Op::Advance { ns: step } => {
                        now += step;
                        current = current.max(now / granularity);
                        out.clear();
                        wheel.expire(ns(now), &mut out);
                        oracle.sort_unstable();
                        let due = oracle.partition_point(|e| e.0 <= current);
                        let expected: Vec<(u16, Timestamp)> =
                            oracle.drain(..due).map(|e| {
                                (e.2, ns(e.3))
                            }).collect();
                        prop_assert_eq!(&out, &expected);
                    }
                }
                for &(tick, _, _, at, clamped) in &oracle {
                    // Still held: its slot is the current one (past due,
                    // inserted since the last expire) or ahead; an unclamped
                    // key's slot is the one of its time.
                    prop_assert!(tick >= current);
                    if !clamped {
                        prop_assert!(tick * granularity >= at);
                        prop_assert!(tick * granularity < at + granularity || tick == current);
                    }
                }
                prop_assert_eq!(wheel.len(), oracle.len());
                let first = oracle.iter().map(|e| e.0).min();
                prop_assert_eq!(wheel.next_deadline(), first.map(|t| ns(t * granularity)));
            }
        }
    }
}
