//! Sequence-number bitmaps of the delivery sublayer.
//!
//! Layer: delivery. Owns [`RingBitmap`], the transmitter's per-window
//! bitmaps (acknowledged, awaiting retransmission), and the helpers on the
//! receiver's fixed 64/128-bit bitmaps ([`has_hole`], [`trailing_ones`]).
//! Pure data structures: no time, no IO, no allocation after construction,
//! no panics.
//!
//! The transmitter bitmap of OCP Falcon 0.9 §9.1.1 is defined relative to
//! the window base ("bit n represents RBPSN + n") and shifted when the base
//! advances. [`RingBitmap`] stores bit `psn mod capacity` instead, so an
//! advance is a clear of the released range rather than a shift of 1024
//! bits; the spec's view is `bit(base + n)`. The receiver's bitmaps are the
//! EACK's wire values (u64 request, u128 data: bit n = BPSN + n) and do
//! shift (§9.2.2.4).

use crate::seq::Psn;

/// A bitmap over PSNs, addressed modulo its capacity (a power of two, at
/// least 64). Callers keep every live range within one capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingBitmap {
    words: Box<[u64]>,
    mask: u32,
}

impl RingBitmap {
    /// A cleared bitmap of at least `min_bits` bits (rounded up to a power of
    /// two, at least 64). Allocates once.
    pub fn new(min_bits: u32) -> Self {
        let bits = min_bits.max(64).next_power_of_two();
        RingBitmap {
            words: vec![0u64; (bits / 64) as usize].into_boxed_slice(),
            mask: bits - 1,
        }
    }

    /// A bitmap of no bits, allocating nothing, for a ring not yet in use:
    /// only empty ranges may be addressed in it (every range operation
    /// takes `len` 0, no single bit is read or written) until it is
    /// [`resized`](Self::resized).
    pub fn empty() -> Self {
        RingBitmap {
            words: Box::new([]),
            mask: 0,
        }
    }

    /// A bitmap of at least `min_bits` bits holding this one's bits of
    /// `[start, start + len)` (growing a ring: positions modulo the capacity
    /// change, so the live range is copied bit by bit). Allocates.
    pub fn resized(&self, min_bits: u32, start: Psn, len: u32) -> RingBitmap {
        let mut grown = RingBitmap::new(min_bits);
        let mut offset = 0;
        while offset < len {
            let Some(skip) = self.first_set(start.wrapping_add(offset), len - offset) else {
                break;
            };
            grown.set(start.wrapping_add(offset + skip));
            offset += skip + 1;
        }
        grown
    }

    /// Capacity in bits (0 for [`empty`](Self::empty)).
    pub fn capacity(&self) -> u32 {
        self.words.len() as u32 * 64
    }

    /// The bit of `psn`.
    pub fn get(&self, psn: Psn) -> bool {
        let (word, bit) = self.locate(psn.value());
        self.words[word] & (1 << bit) != 0
    }

    /// Sets the bit of `psn`; returns whether it was clear.
    pub fn set(&mut self, psn: Psn) -> bool {
        let (word, bit) = self.locate(psn.value());
        let was_clear = self.words[word] & (1 << bit) == 0;
        self.words[word] |= 1 << bit;
        was_clear
    }

    /// Clears the bit of `psn`; returns whether it was set.
    pub fn clear(&mut self, psn: Psn) -> bool {
        let (word, bit) = self.locate(psn.value());
        let was_set = self.words[word] & (1 << bit) != 0;
        self.words[word] &= !(1 << bit);
        was_set
    }

    /// Clears the bits of `[start, start + len)` (`len` at most the
    /// capacity).
    pub fn clear_range(&mut self, start: Psn, len: u32) {
        self.walk(start, len, |word, bits| {
            *word &= !bits;
            false
        });
    }

    /// Offset from `start` of the first set bit in `[start, start + len)`.
    pub fn first_set(&self, start: Psn, len: u32) -> Option<u32> {
        self.scan(start, len, false)
    }

    /// Offset from `start` of the first clear bit in `[start, start + len)`.
    pub fn first_clear(&self, start: Psn, len: u32) -> Option<u32> {
        self.scan(start, len, true)
    }

    /// Number of set bits in `[start, start + len)`.
    #[cfg(any(test, feature = "testing"))]
    pub fn count_ones(&self, start: Psn, len: u32) -> u32 {
        let len = len.min(self.capacity());
        let mut count = 0;
        let mut offset = 0;
        let mut position = start.value() & self.mask;
        while offset < len {
            let bit = position & 63;
            let take = (64 - bit).min(len - offset);
            let word = self.words[(position >> 6) as usize];
            count += ((word >> bit) & low_bits(take)).count_ones();
            offset += take;
            position = (position + take) & self.mask;
        }
        count
    }

    fn locate(&self, value: u32) -> (usize, u32) {
        let index = value & self.mask;
        ((index >> 6) as usize, index & 63)
    }

    fn scan(&self, start: Psn, len: u32, invert: bool) -> Option<u32> {
        let len = len.min(self.capacity());
        let mut offset = 0;
        let mut position = start.value() & self.mask;
        while offset < len {
            let bit = position & 63;
            let take = (64 - bit).min(len - offset);
            let mut word = self.words[(position >> 6) as usize];
            if invert {
                word = !word;
            }
            let window = (word >> bit) & low_bits(take);
            if window != 0 {
                return Some(offset + window.trailing_zeros());
            }
            offset += take;
            position = (position + take) & self.mask;
        }
        None
    }

    /// Calls `f(word, mask)` for each word overlapping `[start, start + len)`,
    /// `mask` selecting the range's bits; stops early when `f` returns true.
    fn walk(&mut self, start: Psn, len: u32, mut f: impl FnMut(&mut u64, u64) -> bool) {
        let len = len.min(self.capacity());
        let mut offset = 0;
        let mut position = start.value() & self.mask;
        while offset < len {
            let bit = position & 63;
            let take = (64 - bit).min(len - offset);
            if f(
                &mut self.words[(position >> 6) as usize],
                low_bits(take) << bit,
            ) {
                return;
            }
            offset += take;
            position = (position + take) & self.mask;
        }
    }
}

/// The low `n` bits set (`n` in 0..=64).
const fn low_bits(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// The 1s of a receiver bitmap are not contiguous from the LSB: there is a
/// missing PSN below a received one (OCP Falcon 0.9 §9.1.6: "'1's are
/// non-consecutive from LSB" → EACK).
pub const fn has_hole(bits: u128) -> bool {
    bits & bits.wrapping_add(1) != 0
}

/// Number of consecutive 1s from the LSB (how far a base can advance).
pub const fn trailing_ones(bits: u128) -> u32 {
    (!bits).trailing_zeros()
}

/// `bits` shifted right by `n` (0 when `n` ≥ 128): the receiver bitmap after
/// its base advances by `n`.
pub const fn shift_down(bits: u128, n: u32) -> u128 {
    if n >= 128 {
        0
    } else {
        bits >> n
    }
}

/// Index of the highest set bit, if any.
pub const fn highest_set(bits: u128) -> Option<u32> {
    if bits == 0 {
        None
    } else {
        Some(127 - bits.leading_zeros())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn empty_bitmap_answers_empty_ranges_and_resizes() {
        let mut empty = RingBitmap::empty();
        let start = Psn::new(u32::MAX);
        assert_eq!(empty.capacity(), 0);
        assert_eq!(empty.first_set(start, 100), None);
        assert_eq!(empty.first_clear(start, 100), None);
        assert_eq!(empty.count_ones(start, 100), 0);
        empty.clear_range(start, 100);
        let mut grown = empty.resized(8, start, 0);
        assert_eq!(grown.capacity(), 64);
        assert!(grown.set(start));
        assert_eq!(grown.first_set(start, 1), Some(0));
    }

    #[test]
    fn ring_bitmap_basics_across_the_wrap() {
        let mut bitmap = RingBitmap::new(100);
        assert_eq!(bitmap.capacity(), 128);
        let base = Psn::new(u32::MAX - 2);
        assert!(bitmap.set(base));
        assert!(!bitmap.set(base));
        assert!(bitmap.set(base.wrapping_add(5)));
        assert!(bitmap.get(Psn::new(2)));
        assert_eq!(bitmap.first_set(base.next(), 100), Some(4));
        assert_eq!(bitmap.first_clear(base, 100), Some(1));
        assert_eq!(bitmap.count_ones(base, 128), 2);
        bitmap.clear_range(base, 3);
        assert!(!bitmap.get(base));
        assert!(bitmap.get(Psn::new(2)));
        assert!(bitmap.clear(Psn::new(2)));
        assert_eq!(bitmap.first_set(Psn::new(0), 128), None);
        assert_eq!(bitmap.first_clear(Psn::new(7), 0), None);
        bitmap.set(Psn::new(60));
        bitmap.set(Psn::new(61));
        let grown = bitmap.resized(256, Psn::new(60), 2);
        assert_eq!(grown.capacity(), 256);
        assert_eq!(grown.count_ones(Psn::new(0), 256), 2);
        assert!(grown.get(Psn::new(61)));
    }

    #[test]
    fn receiver_bitmap_helpers() {
        assert!(!has_hole(0));
        assert!(!has_hole(0b111));
        assert!(!has_hole(u128::MAX));
        assert!(has_hole(0b101));
        assert!(has_hole(0b110));
        assert_eq!(trailing_ones(0b1011), 2);
        assert_eq!(trailing_ones(u128::MAX), 128);
        assert_eq!(shift_down(u128::MAX, 128), 0);
        assert_eq!(shift_down(0b100, 2), 1);
        assert_eq!(highest_set(0), None);
        assert_eq!(highest_set(1 << 100 | 1), Some(100));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(u32),
        Clear(u32),
        Advance(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..256).prop_map(Op::Set),
            (0u32..256).prop_map(Op::Clear),
            (0u32..40).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// A window of 256 PSNs over a 256-bit ring, its base sliding across
        /// 2^32, against a BTreeSet of absolute positions.
        #[test]
        fn ring_bitmap_matches_btreeset(
            start in prop_oneof![Just(u32::MAX - 300), any::<u32>()],
            ops in proptest::collection::vec(op(), 1..200),
            grow_len in 0u32..=256,
        ) {
            const WINDOW: u32 = 256;
            let mut bitmap = RingBitmap::new(WINDOW);
            let mut oracle = BTreeSet::<u64>::new();
            let mut base: u64 = u64::from(start);
            let psn = |absolute: u64| Psn::new(absolute as u32);
            for op in ops {
                match op {
                    Op::Set(offset) => {
                        let absolute = base + u64::from(offset);
                        prop_assert_eq!(bitmap.set(psn(absolute)), oracle.insert(absolute));
                    }
                    Op::Clear(offset) => {
                        let absolute = base + u64::from(offset);
                        prop_assert_eq!(bitmap.clear(psn(absolute)), oracle.remove(&absolute));
                    }
                    Op::Advance(n) => {
                        bitmap.clear_range(psn(base), n);
                        oracle.retain(|&p| p >= base + u64::from(n));
                        base += u64::from(n);
                    }
                }
                for len in [0u32, 1, 63, 64, 65, 200, WINDOW] {
                    let expected_set = (0..len).find(|&i| oracle.contains(&(base + u64::from(i))));
                    let expected_clear = (0..len).find(|&i| !oracle.contains(&(base + u64::from(i))));
                    prop_assert_eq!(bitmap.first_set(psn(base), len), expected_set);
                    prop_assert_eq!(bitmap.first_clear(psn(base), len), expected_clear);
                    let ones = oracle.range(base..base + u64::from(len)).count() as u32;
                    prop_assert_eq!(bitmap.count_ones(psn(base), len), ones);
                }
                for offset in [0u32, 1, 100, 255] {
                    let absolute = base + u64::from(offset);
                    prop_assert_eq!(bitmap.get(psn(absolute)), oracle.contains(&absolute));
                }
            }
            // Grown to twice the window, it holds the bits of
            // `[base, base + grow_len)` at their PSNs and nothing else.
            let grown = bitmap.resized(2 * WINDOW, psn(base), grow_len);
            prop_assert_eq!(grown.capacity(), 2 * WINDOW);
            let kept: Vec<u64> = oracle.range(base..base + u64::from(grow_len)).copied().collect();
            prop_assert_eq!(grown.count_ones(psn(base), 2 * WINDOW), kept.len() as u32);
            for absolute in kept {
                prop_assert!(grown.get(psn(absolute)));
            }
        }
    }
}
