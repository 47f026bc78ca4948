//! The RSN-indexed slot rings of the transaction sublayer.
//!
//! Layer: transaction sublayer, memory. Owns [`SlotRing`], a power-of-two
//! ring of slots addressed by their position from the front (the initiator's
//! and the target's per-RSN state). Unlike a `VecDeque`, slots are never
//! moved in or out: [`push_back`](SlotRing::push_back) hands out the slot
//! after the back for the caller to fill in place, and
//! [`pop_front`](SlotRing::pop_front) retires the front in place, where the
//! caller takes out what it owns. A `VecDeque<Slot>` built each ~120-byte
//! slot on the stack and copied it in (and out again on retirement), and
//! the copy in stalled on store forwarding right after the field-by-field
//! stores that built it (perf annotate: ~45 % of `Engine::submit`'s
//! samples). Grows by doubling when full (allocation only past the previous
//! high-water mark); never panics but on an index past the back, as
//! `VecDeque` does.

use core::ops::{Index, IndexMut};

/// Slots a ring takes at its first use. A ring starts empty: at 1 M
/// connections most are idle, and 64 slots up front cost 17 KiB each
/// (`falcon bench scale`, `dataplane/app/PERFORMANCE.md`).
const INITIAL_SLOTS: usize = 8;

/// A ring of reusable slots, front first.
#[derive(Debug)]
pub(crate) struct SlotRing<T> {
    /// Every slot initialized; `len` of them, from `head`, are in use.
    slots: Box<[T]>,
    head: usize,
    len: usize,
}

impl<T: Default> SlotRing<T> {
    /// An empty ring.
    pub(crate) fn new() -> Self {
        SlotRing {
            slots: Box::new([]),
            head: 0,
            len: 0,
        }
    }

    /// Slots in use.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The front slot.
    #[inline]
    pub(crate) fn front(&self) -> Option<&T> {
        (self.len > 0).then(|| &self.slots[self.head])
    }

    /// The slot at position `offset` from the front, if it is in use: one
    /// bounds check, where looking it up by position and then indexing
    /// checked it twice.
    #[inline]
    pub(crate) fn get_mut(&mut self, offset: usize) -> Option<&mut T> {
        if offset >= self.len {
            return None;
        }
        let at = self.position(offset);
        self.slots.get_mut(at)
    }

    /// Takes the slot after the back into use and returns it to be filled
    /// in: it holds whatever its last user left (retired in place) or
    /// `T::default()`, so the caller sets every field.
    // Always inline: one call per submitted transaction and per request
    // received, and out of line its call and register saves cost more
    // than its body.
    #[inline(always)]
    pub(crate) fn push_back(&mut self) -> &mut T {
        if self.len == self.slots.len() {
            self.grow();
        }
        let at = self.position(self.len);
        self.len += 1;
        &mut self.slots[at]
    }

    /// Retires the front slot and returns it in place, for the caller to
    /// take out what it owns.
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<&mut T> {
        if self.len == 0 {
            return None;
        }
        let at = self.head;
        self.head = self.position(1);
        self.len -= 1;
        Some(&mut self.slots[at])
    }

    /// Retires the front slot, left as it is: its user took out what it
    /// owns. [`pop_front`](Self::pop_front) with no slot to hand back, so
    /// no bounds check on it.
    #[inline]
    pub(crate) fn retire_front(&mut self) {
        if self.len == 0 {
            return;
        }
        self.head = self.position(1);
        self.len -= 1;
    }

    /// The slots in use, front first.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        let capacity = self.slots.len();
        let end = self.head + self.len;
        let (wrapped, first) = self.slots.split_at_mut(self.head);
        let (first, second) = if end <= capacity {
            (&mut first[..self.len], &mut wrapped[..0])
        } else {
            (first, &mut wrapped[..end - capacity])
        };
        first.iter_mut().chain(second.iter_mut())
    }

    /// Gives the ring's slots to `pool` when none is in use: an idle
    /// connection holds no slot memory, and the next connection to need
    /// a ring takes one still in cache instead of fresh heap (at 1 M
    /// connections with a transaction on a random one each time, the
    /// fresh heap's page faults were a fifth of `falcon bench scale`'s
    /// time).
    #[inline]
    pub(crate) fn lend_if_idle(&mut self, pool: &mut RingPool<T>) {
        if self.len == 0 && !self.slots.is_empty() {
            pool.put(core::mem::take(&mut self.slots));
            self.head = 0;
        }
    }

    /// Takes slots from `pool` if the ring has none, before a
    /// [`push_back`](Self::push_back) (which allocates when the pool had
    /// none).
    #[inline]
    pub(crate) fn borrow_if_empty(&mut self, pool: &mut RingPool<T>) {
        if self.slots.is_empty() {
            if let Some(slots) = pool.take() {
                self.slots = slots;
                self.head = 0;
            }
        }
    }

    /// Slots held, in use or not.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The array index of position `offset` from the front.
    #[inline]
    fn position(&self, offset: usize) -> usize {
        (self.head + offset) & self.slots.len().wrapping_sub(1)
    }

    /// Doubles the ring, keeping the slots in use in order from index 0.
    fn grow(&mut self) {
        let capacity = (self.slots.len() * 2).max(INITIAL_SLOTS);
        let mut slots: Vec<T> = Vec::with_capacity(capacity);
        for offset in 0..self.len {
            let at = self.position(offset);
            slots.push(core::mem::take(&mut self.slots[at]));
        }
        slots.resize_with(capacity, T::default);
        self.slots = slots.into_boxed_slice();
        self.head = 0;
    }
}

/// Slot arrays of idle rings, for the next ring that needs one: one per
/// engine and slot type, in [`Shared`](crate::transaction::Shared). Last
/// in, first out (the most recently used is the likeliest in cache); at
/// most [`RingPool::MAX`] kept, the rest freed, so the pool is as large as
/// the most rings ever busy at once, up to that bound.
#[derive(Debug)]
pub(crate) struct RingPool<T> {
    free: Vec<Box<[T]>>,
}

impl<T> Default for RingPool<T> {
    fn default() -> Self {
        RingPool { free: Vec::new() }
    }
}

impl<T> RingPool<T> {
    /// Slot arrays kept at most.
    pub(crate) const MAX: usize = 4096;

    #[inline]
    fn put(&mut self, slots: Box<[T]>) {
        if self.free.len() < Self::MAX {
            self.free.push(slots);
        }
    }

    #[inline]
    fn take(&mut self) -> Option<Box<[T]>> {
        self.free.pop()
    }

    /// Slot arrays held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.free.len()
    }
}

impl<T> Index<usize> for SlotRing<T> {
    type Output = T;

    #[inline]
    fn index(&self, offset: usize) -> &T {
        assert!(offset < self.len, "slot {offset} past the back");
        &self.slots[(self.head + offset) & (self.slots.len() - 1)]
    }
}

impl<T> IndexMut<usize> for SlotRing<T> {
    #[inline]
    fn index_mut(&mut self, offset: usize) -> &mut T {
        assert!(offset < self.len, "slot {offset} past the back");
        let mask = self.slots.len() - 1;
        &mut self.slots[(self.head + offset) & mask]
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn idle_rings_lend_their_slots_and_busy_ones_keep_them() {
        let mut pool = RingPool::default();
        let mut a: SlotRing<u32> = SlotRing::new();
        let mut b: SlotRing<u32> = SlotRing::new();
        // Never used: nothing to lend, nothing allocated.
        a.lend_if_idle(&mut pool);
        assert_eq!((a.capacity(), pool.len()), (0, 0));
        for v in 0..10 {
            *a.push_back() = v;
        }
        a.lend_if_idle(&mut pool);
        assert_eq!(pool.len(), 0, "in use: kept");
        while a.pop_front().is_some() {}
        a.lend_if_idle(&mut pool);
        assert_eq!((a.capacity(), pool.len()), (0, 1), "idle: lent");
        // The next ring to need slots takes those (grown to 16 by a).
        b.borrow_if_empty(&mut pool);
        assert_eq!((b.capacity(), pool.len()), (16, 0));
        // Slots handed out from the front again, in order.
        for v in 100..120 {
            *b.push_back() = v;
        }
        assert_eq!(b.len(), 20);
        assert_eq!(b[0], 100);
        assert_eq!(b[19], 119);
        // A ring that has slots takes none.
        pool.put(Box::new([0; 8]));
        b.borrow_if_empty(&mut pool);
        assert_eq!(pool.len(), 1);
        // Bounded: past MAX, lent slots are freed.
        for _ in 0..RingPool::<u32>::MAX + 5 {
            pool.put(Box::new([0; 8]));
        }
        assert_eq!(pool.len(), RingPool::<u32>::MAX);
    }

    proptest! {
        /// Against a `VecDeque` oracle: pushes (filling the slot), pops,
        /// indexing and iteration agree through growth and wrap-around.
        #[test]
        fn behaves_as_a_deque(ops in proptest::collection::vec(0u32..4, 1..400)) {
            let mut ring: SlotRing<u32> = SlotRing::new();
            let mut oracle = VecDeque::new();
            let mut next = 1u32;
            for op in ops {
                match op {
                    0 | 1 => {
                        *ring.push_back() = next;
                        oracle.push_back(next);
                        next += 1;
                    }
                    2 => {
                        let popped = ring.pop_front().map(core::mem::take);
                        prop_assert_eq!(popped, oracle.pop_front());
                    }
                    _ => {
                        ring.retire_front();
                        oracle.pop_front();
                    }
                }
                prop_assert_eq!(ring.len(), oracle.len());
                prop_assert_eq!(ring.front().copied(), oracle.front().copied());
                prop_assert_eq!(ring.get_mut(oracle.len()), None);
                for (i, value) in oracle.iter().enumerate() {
                    prop_assert_eq!(ring[i], *value);
                    prop_assert_eq!(ring.get_mut(i).copied(), Some(*value));
                }
                let all: Vec<u32> = ring.iter_mut().map(|v| *v).collect();
                prop_assert_eq!(all, oracle.iter().copied().collect::<Vec<_>>());
            }
        }
    }
}
