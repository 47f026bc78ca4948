//! The engine's timing wheel: every connection's next deadline in one place.
//!
//! Layer: engine infrastructure (DESIGN.md §3 "timers: timing wheel
//! expiries"; spec/style-models.md §7.5). Owns [`TimingWheel`], a
//! single-level hashed wheel of 512 ns slots (the timing-wheel unit the RUE's
//! pacing gap is expressed in, DESIGN.md §4, spec/rue.md §1.11 item 8) with
//! a second, coarser level and an overflow heap for deadlines beyond its
//! horizon. It stores opaque keys
//! with their deadlines and hands back the expired ones; it knows nothing of
//! connections and never reads a clock.
//!
//! # Shape
//!
//! * `slots` slots of 512 ns each (default 4096: a 2.1 ms horizon, which
//!   covers ACK coalescing (8 µs) and the default RTO (1 ms); pacing
//!   releases are the pacing wheel's, `crate::pacing`).
//!   A slot holds the entries whose deadline falls in that 512 ns tick;
//!   within the horizon each tick maps to exactly one slot.
//! * Deadlines beyond the horizon (RNR waits, transaction soft-state
//!   timeouts, long RTOs) wait in a second level of as many slots, each one
//!   first-level turn long (default 2.1 ms; 8.6 s in all), and move into
//!   the first level, all of a slot at once, when the wheel turns into that
//!   slot's turn. Only deadlines beyond that wait in a binary heap. Every
//!   connection that carried a transaction holds a 1 s soft-state deadline:
//!   in a heap, with a million connections, each insertion and each
//!   removal walked ~20 levels of a heap of hundreds of thousands of
//!   entries, cache misses all (8.7 % of `falcon bench scale --connections
//!   1000000`'s cycles in `BinaryHeap::pop`); a second-level slot takes
//!   them in O(1).
//! * [`next_deadline`] (`poll_timeout`) reads the earliest deadline, kept
//!   on insert; an expiry that took entries out finds it again, and an
//!   occupancy bitmap over each level's slots makes that a scan of at most
//!   `slots / 64` words a level (each second-level slot keeps its earliest
//!   deadline, so none is scanned entry by entry).
//! * Deadlines are exact to the nanosecond: an entry fires when
//!   `deadline <= now`, never early; the slot only buckets it.
//!
//! Insertion is O(1) (O(log n) for the overflow); expiry is O(slots passed
//! plus entries fired or moved down a level). There is no removal: the engine re-inserts a
//! connection when its deadline moves earlier and ignores stale entries
//! when they fire (lazy deletion, as the delivery layer does with its
//! retransmit timer). Slot vectors keep their capacity, so a warmed-up
//! wheel does not allocate.
//!
//! [`next_deadline`]: TimingWheel::next_deadline

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::time::{Timestamp, TIMING_WHEEL_UNIT_NANOS};

/// Default number of slots (a power of two).
pub const DEFAULT_SLOTS: usize = 4096;

/// A hashed timing wheel of `(key, deadline)` entries.
#[derive(Debug, Clone)]
pub struct TimingWheel<K> {
    slots: Vec<Vec<Entry<K>>>,
    /// Bit `i` set: slot `i` holds an entry.
    occupied: Vec<u64>,
    mask: u64,
    /// The tick (deadline / 512 ns) the wheel has turned to: every entry in
    /// a slot has a tick in `current..current + slots`.
    current: u64,
    /// The second level: slot `j` holds the entries whose first-level turn
    /// (`tick >> shift`) is `≡ j` and lies in `turn(current) + 1 ..
    /// turn(current) + slots`.
    far_slots: Vec<Vec<Entry<K>>>,
    far_occupied: Vec<u64>,
    /// The earliest deadline of each second-level slot (`Timestamp::MAX`
    /// when empty).
    far_min: Vec<Timestamp>,
    /// log2 of the first level's slot count.
    shift: u32,
    overflow: BinaryHeap<Reverse<Far<K>>>,
    sequence: u64,
    len: usize,
    /// The earliest deadline held: kept on insert, found again by a scan only
    /// when `expire` took entries out. `poll_timeout` reads it once per loop
    /// turn, so it never scans.
    next: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy)]
struct Entry<K> {
    deadline: Timestamp,
    key: K,
}

/// An overflow entry, ordered by deadline then insertion order.
#[derive(Debug, Clone, Copy)]
struct Far<K> {
    deadline: Timestamp,
    sequence: u64,
    key: K,
}

impl<K> PartialEq for Far<K> {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.sequence) == (other.deadline, other.sequence)
    }
}

impl<K> Eq for Far<K> {}

impl<K> PartialOrd for Far<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Far<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.deadline, self.sequence).cmp(&(other.deadline, other.sequence))
    }
}

impl<K: Copy> TimingWheel<K> {
    /// A wheel of `slots` slots (rounded up to a power of two, at least 64)
    /// turned to `now`.
    pub fn new(slots: usize, now: Timestamp) -> Self {
        let slots = slots.max(64).next_power_of_two();
        TimingWheel {
            slots: (0..slots).map(|_| Vec::new()).collect(),
            occupied: vec![0; slots / 64],
            mask: slots as u64 - 1,
            current: tick(now),
            far_slots: (0..slots).map(|_| Vec::new()).collect(),
            far_occupied: vec![0; slots / 64],
            far_min: vec![Timestamp::MAX; slots],
            shift: slots.trailing_zeros(),
            overflow: BinaryHeap::new(),
            sequence: 0,
            len: 0,
            next: None,
        }
    }

    /// Adds `key` to fire at `deadline` (a deadline already past fires at
    /// the next [`expire`](Self::expire)).
    pub fn insert(&mut self, key: K, deadline: Timestamp) {
        self.len += 1;
        self.next = Some(self.next.map_or(deadline, |next| next.min(deadline)));
        let at = tick(deadline).max(self.current);
        if at - self.current > self.mask {
            self.place_far(at, Entry { deadline, key });
            return;
        }
        self.put(at, Entry { deadline, key });
    }

    /// An entry beyond the first level's horizon: into its second-level
    /// slot, or the heap beyond that.
    #[cold]
    fn place_far(&mut self, at: u64, entry: Entry<K>) {
        let turn = at >> self.shift;
        if turn - (self.current >> self.shift) > self.mask {
            self.sequence += 1;
            self.overflow.push(Reverse(Far {
                deadline: entry.deadline,
                sequence: self.sequence,
                key: entry.key,
            }));
            return;
        }
        let index = (turn & self.mask) as usize;
        self.far_min[index] = self.far_min[index].min(entry.deadline);
        self.far_slots[index].push(entry);
        set_bit(&mut self.far_occupied, index, true);
    }

    /// Turns the wheel to `now` and appends every entry with
    /// `deadline <= now` to `out` (in no particular order within a 512 ns
    /// tick, in tick order across ticks). `now` must not go backwards.
    pub fn expire(&mut self, now: Timestamp, out: &mut Vec<(K, Timestamp)>) {
        let held = self.len;
        self.turn(now, out);
        if self.len != held {
            self.next = self.scan_next();
        }
    }

    fn turn(&mut self, now: Timestamp, out: &mut Vec<(K, Timestamp)>) {
        let target = tick(now).max(self.current);
        let slots = self.mask + 1;
        let count = (target - self.current + 1).min(slots);
        for i in 0..count {
            let index = ((self.current + i) & self.mask) as usize;
            if !self.is_occupied(index) {
                continue;
            }
            let slot = &mut self.slots[index];
            let before = slot.len();
            let mut k = 0;
            while k < slot.len() {
                if slot[k].deadline <= now {
                    let entry = slot.swap_remove(k);
                    out.push((entry.key, entry.deadline));
                } else {
                    k += 1;
                }
            }
            self.len -= before - slot.len();
            if slot.is_empty() {
                self.set_occupied(index, false);
            }
        }
        let from_turn = self.current >> self.shift;
        self.current = target;
        // Second-level slots whose turn came move down whole: every entry's
        // tick is now within the first level's horizon.
        let to_turn = target >> self.shift;
        let turns = (to_turn - from_turn).min(slots);
        for i in 1..=turns {
            let index = ((from_turn + i) & self.mask) as usize;
            if !get_bit(&self.far_occupied, index) {
                continue;
            }
            set_bit(&mut self.far_occupied, index, false);
            self.far_min[index] = Timestamp::MAX;
            let mut moved = core::mem::take(&mut self.far_slots[index]);
            for entry in moved.drain(..) {
                self.settle(entry, now, out);
            }
            // The slot keeps its vector's capacity.
            self.far_slots[index] = moved;
        }
        // Heap entries now within the second level's reach move into it.
        while let Some(Reverse(far)) = self.overflow.peek() {
            let turn = tick(far.deadline).max(self.current) >> self.shift;
            if turn - (self.current >> self.shift) > self.mask {
                break;
            }
            let Some(Reverse(far)) = self.overflow.pop() else {
                break;
            };
            let entry = Entry {
                deadline: far.deadline,
                key: far.key,
            };
            self.settle(entry, now, out);
        }
    }

    /// An entry moving down a level: fired if due, else put where its
    /// deadline now belongs.
    fn settle(&mut self, entry: Entry<K>, now: Timestamp, out: &mut Vec<(K, Timestamp)>) {
        if entry.deadline <= now {
            self.len -= 1;
            out.push((entry.key, entry.deadline));
            return;
        }
        let at = tick(entry.deadline).max(self.current);
        if at - self.current > self.mask {
            self.place_far(at, entry);
        } else {
            self.put(at, entry);
        }
    }

    /// The earliest deadline held, if any.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.next
    }

    /// The earliest deadline held, searched for: the first occupied slot's
    /// minimum against the first occupied second-level slot's and the
    /// overflow's. (A second-level entry may be earlier than every
    /// first-level one: it went there when the wheel stood further back.)
    fn scan_next(&self) -> Option<Timestamp> {
        let in_slots = first_occupied(&self.occupied, (self.current & self.mask) as usize)
            .and_then(|index| self.slots[index].iter().map(|entry| entry.deadline).min());
        let next_turn = ((self.current >> self.shift) + 1) & self.mask;
        let in_far =
            first_occupied(&self.far_occupied, next_turn as usize).map(|index| self.far_min[index]);
        let far = self.overflow.peek().map(|Reverse(far)| far.deadline);
        [in_slots, in_far, far].into_iter().flatten().min()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No entries held.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The wheel's horizon: deadlines closer than this go straight into a
    /// slot.
    #[cfg(any(test, feature = "testing"))]
    pub fn horizon(&self) -> core::time::Duration {
        core::time::Duration::from_nanos((self.mask + 1) * TIMING_WHEEL_UNIT_NANOS)
    }

    fn put(&mut self, at: u64, entry: Entry<K>) {
        let index = (at & self.mask) as usize;
        self.slots[index].push(entry);
        self.set_occupied(index, true);
    }

    fn is_occupied(&self, index: usize) -> bool {
        get_bit(&self.occupied, index)
    }

    fn set_occupied(&mut self, index: usize, on: bool) {
        set_bit(&mut self.occupied, index, on);
    }
}

fn get_bit(bits: &[u64], index: usize) -> bool {
    bits[index / 64] & (1 << (index % 64)) != 0
}

fn set_bit(bits: &mut [u64], index: usize, on: bool) {
    let bit = 1u64 << (index % 64);
    if on {
        bits[index / 64] |= bit;
    } else {
        bits[index / 64] &= !bit;
    }
}

/// The first set bit of `bits` at or after `start`, circularly: the
/// occupied slot of the earliest tick (or turn) held when `start` is the
/// current one.
fn first_occupied(bits: &[u64], start: usize) -> Option<usize> {
    let words = bits.len();
    let (word, bit) = (start / 64, start % 64);
    let first = bits[word] & (!0u64 << bit);
    if first != 0 {
        return Some(word * 64 + first.trailing_zeros() as usize);
    }
    for step in 1..words {
        let w = (word + step) % words;
        if bits[w] != 0 {
            return Some(w * 64 + bits[w].trailing_zeros() as usize);
        }
    }
    // Wrapped all the way: the bits of the start word before `bit`.
    let last = bits[word] & !(!0u64 << bit);
    (last != 0).then(|| word * 64 + last.trailing_zeros() as usize)
}

/// The 512 ns tick of a timestamp.
const fn tick(t: Timestamp) -> u64 {
    t.as_nanos() / TIMING_WHEEL_UNIT_NANOS
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn fires_exactly_at_the_deadline_never_early() {
        let start = Timestamp::from_micros(1_000);
        let mut wheel = TimingWheel::new(64, start);
        let deadline = start + core::time::Duration::from_nanos(700);
        wheel.insert(1u32, deadline);
        assert_eq!(wheel.next_deadline(), Some(deadline));
        let mut out = Vec::new();
        wheel.expire(deadline - core::time::Duration::from_nanos(1), &mut out);
        assert!(out.is_empty(), "same tick, not yet due");
        wheel.expire(deadline, &mut out);
        assert_eq!(out, vec![(1, deadline)]);
        assert!(wheel.is_empty());
        assert_eq!(wheel.next_deadline(), None);
    }

    #[test]
    fn overflow_moves_in_and_past_deadlines_fire_at_once() {
        let start = Timestamp::from_micros(10);
        let mut wheel = TimingWheel::new(64, start);
        assert_eq!(wheel.horizon(), core::time::Duration::from_nanos(64 * 512));
        let far = start + core::time::Duration::from_millis(3);
        wheel.insert(7u32, far);
        wheel.insert(8, Timestamp::from_micros(1)); // already past
        assert_eq!(wheel.next_deadline(), Some(Timestamp::from_micros(1)));
        let mut out = Vec::new();
        wheel.expire(start, &mut out);
        assert_eq!(out, vec![(8, Timestamp::from_micros(1))]);
        out.clear();
        wheel.expire(far - core::time::Duration::from_micros(5), &mut out);
        assert!(out.is_empty());
        assert_eq!(wheel.next_deadline(), Some(far));
        wheel.expire(far + core::time::Duration::from_secs(10), &mut out);
        assert_eq!(out, vec![(7, far)]);
    }

    #[test]
    fn second_level_holds_what_the_first_cannot_and_the_heap_only_beyond() {
        use core::time::Duration;
        let start = Timestamp::from_micros(10);
        // 64 slots: a first level of 32.8 µs, a second of 64 × 32.8 µs.
        let mut wheel = TimingWheel::new(64, start);
        let second = start + Duration::from_micros(100);
        let beyond = start + Duration::from_millis(5);
        wheel.insert(1u32, second);
        wheel.insert(2, beyond);
        assert_eq!(
            wheel.overflow.len(),
            1,
            "only the 5 ms deadline is in the heap"
        );
        assert_eq!(wheel.far_slots.iter().map(Vec::len).sum::<usize>(), 1);
        // Advance 40 µs: the first level now reaches past 70 µs, and a
        // deadline at 72 µs lands in it, while the one at 110 µs, put in
        // the second level before, is still the earliest but one.
        let mut out = Vec::new();
        let now = start + Duration::from_micros(40);
        wheel.expire(now, &mut out);
        let near = now + Duration::from_micros(32);
        wheel.insert(3, near);
        assert_eq!(wheel.next_deadline(), Some(near));
        wheel.expire(near, &mut out);
        assert_eq!(out, vec![(3, near)]);
        // The second-level entry is found as the earliest without a scan.
        assert_eq!(wheel.next_deadline(), Some(second));
        out.clear();
        wheel.expire(second - Duration::from_nanos(1), &mut out);
        assert!(out.is_empty(), "never early");
        wheel.expire(second, &mut out);
        assert_eq!(out, vec![(1, second)]);
        assert_eq!(wheel.next_deadline(), Some(beyond));
        out.clear();
        // One jump past everything: the heap entry fires from wherever it is.
        wheel.expire(beyond + Duration::from_secs(20), &mut out);
        assert_eq!(out, vec![(2, beyond)]);
        assert!(wheel.is_empty() && wheel.next_deadline().is_none());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert { key: u16, delay_ns: u64 },
        Advance { ns: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (any::<u16>(), prop_oneof![0u64..2_000, 0u64..100_000, 0u64..5_000_000])
                .prop_map(|(key, delay_ns)| Op::Insert { key, delay_ns }),
            2 => prop_oneof![0u64..1_000, 0u64..50_000, 0u64..3_000_000]
                .prop_map(|ns| Op::Advance { ns }),
        ]
    }

    proptest! {
        /// Against a `BTreeMap` oracle: the same entries expire at the same
        /// `now`, and `next_deadline` is the oracle's minimum.
        #[test]
        fn matches_btreemap_oracle(ops in proptest::collection::vec(op(), 1..300)) {
            let mut now = Timestamp::from_micros(5);
            let mut wheel = TimingWheel::new(64, now);
            let mut oracle: BTreeMap<(Timestamp, u64), u16> = BTreeMap::new();
            let mut sequence = 0u64;
            let mut out = Vec::new();
            for op in ops {
                match op {
                    Op::Insert { key, delay_ns } => {
                        let deadline = now + core::time::Duration::from_nanos(delay_ns);
                        wheel.insert(key, deadline);
                        sequence += 1;
                        oracle.insert((deadline, sequence), key);
                    }
                    Op::Advance { ns } => {
                        now = now + core::time::Duration::from_nanos(ns);
                        out.clear();
                        wheel.expire(now, &mut out);
                        let mut fired: Vec<(Timestamp, u16)> =
                            out.iter().map(|&(k, d)| (d, k)).collect();
                        fired.sort_unstable();
                        let due: Vec<(Timestamp, u64)> =
                            oracle.range(..=(now, u64::MAX)).map(|(k, _)| *k).collect();
                        let mut expected: Vec<(Timestamp, u16)> = due
                            .iter()
                            .map(|k| (k.0, oracle.remove(k).unwrap_or_default()))
                            .collect();
                        expected.sort_unstable();
                        prop_assert_eq!(fired, expected);
                    }
                }
                prop_assert_eq!(wheel.len(), oracle.len());
                prop_assert_eq!(
                    wheel.next_deadline(),
                    oracle.keys().next().map(|(d, _)| *d)
                );
            }
        }
    }
}
