//! The SPI space of a receiving node, cut into disjoint shards, and the
//! allocation of SPIs from it.
//!
//! Layer: PSP control path (connection setup and key rotation), never per
//! packet except [`SpiSpace::shard_of`], which is a shift. Owns the layout
//! ([`SpiSpace`]) and the allocation counters ([`SpiAllocator`]). It knows
//! nothing of connections or engines: a shard is a number the caller gives
//! (in Falcon, one datapath engine of the node).
//!
//! PSP spec "Key Derivation" (spec/psp.md §3): bit 31 of an SPI selects the
//! master key, the receiver picks the SPI, and an SPI is never reused under
//! one master key. With `b` = ⌈log2 shards⌉ bits of shard number after the
//! key selector, every shard owns one contiguous range of SPI numbers under
//! each key, so SPIs of different shards never collide and a received SPI
//! names its shard without a table:
//!
//! ```text
//!   31   30 ........ 31-b   30-b ................... 0
//!  +---+-------------------+---------------------------+
//!  | K |   shard (b bits)   |  n: 1 ..= 2^(31-b) − 1    |
//!  +---+-------------------+---------------------------+
//! ```
//!
//! Limits: at most [`SpiSpace::MAX_SHARDS`] (256) shards, so `b ≤ 8`; each
//! shard has [`SpiSpace::per_shard`] SPIs under one master key: 2^31 − 1
//! with one shard (the layout of a node without shards, bit for bit),
//! 2^30 − 1 with two, 2^23 − 1 (8 388 607) with 129 to 256. `n = 0` is
//! never handed out, so no shard issues SPI 0 (invalid) and every shard's
//! count is the same. A shard number at or beyond the shard count in a
//! received SPI belongs to no shard.

use crate::error::SpiExhausted;
use crate::header::Spi;

/// How a node's SPI space is cut into shards (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpiSpace {
    shards: u16,
    shard_bits: u8,
}

impl SpiSpace {
    /// The most shards a node's SPI space is cut into.
    pub const MAX_SHARDS: u16 = 256;

    /// One shard owning every SPI: the layout of a node without shards.
    pub const SINGLE: SpiSpace = SpiSpace {
        shards: 1,
        shard_bits: 0,
    };

    /// The space cut into `shards` shards; `None` outside
    /// `1..=`[`MAX_SHARDS`](Self::MAX_SHARDS).
    pub const fn new(shards: u16) -> Option<SpiSpace> {
        if shards == 0 || shards > Self::MAX_SHARDS {
            return None;
        }
        // ⌈log2 shards⌉: 0 for 1, 1 for 2, 2 for 3 and 4, …, 8 for 129..=256.
        let shard_bits = (u16::BITS - (shards - 1).leading_zeros()) as u8;
        Some(SpiSpace { shards, shard_bits })
    }

    /// The number of shards.
    pub const fn shards(&self) -> u16 {
        self.shards
    }

    /// Bits of shard number below the key selector.
    pub const fn shard_bits(&self) -> u32 {
        self.shard_bits as u32
    }

    /// SPIs each shard has under one master key.
    pub const fn per_shard(&self) -> u32 {
        (1 << (31 - self.shard_bits())) - 1
    }

    /// The `n`-th SPI (from 1) of `shard` under the master key in
    /// `key_slot` (0 or 1); `None` if `shard`, `key_slot` or `n` is out of
    /// range.
    pub const fn spi(&self, shard: u16, key_slot: usize, n: u32) -> Option<Spi> {
        if shard >= self.shards || key_slot > 1 || n == 0 || n > self.per_shard() {
            return None;
        }
        let shard_field = if self.shard_bits == 0 {
            0
        } else {
            (shard as u32) << (31 - self.shard_bits())
        };
        Some(Spi(((key_slot as u32) << 31) | shard_field | n))
    }

    /// The shard that owns `spi`, or `None` (an SPI no shard hands out: a
    /// shard number beyond the count, or a zero SPI number).
    #[inline]
    pub const fn shard_of(&self, spi: Spi) -> Option<u16> {
        let index = spi.index();
        if self.shard_bits == 0 {
            return if index == 0 { None } else { Some(0) };
        }
        let shard = index >> (31 - self.shard_bits());
        if shard >= self.shards as u32 || index & self.per_shard() == 0 {
            return None;
        }
        Some(shard as u16)
    }
}

/// The SPIs a node has handed out: per shard and master-key slot, the next
/// SPI number. SPIs are never reused under one master key; a slot's counters
/// start over only when a new key is loaded into it
/// ([`restart`](Self::restart)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpiAllocator {
    space: SpiSpace,
    /// Per shard, per key slot: the next SPI number.
    next: Vec<[u32; 2]>,
}

impl SpiAllocator {
    /// Nothing handed out yet.
    pub fn new(space: SpiSpace) -> SpiAllocator {
        SpiAllocator {
            space,
            next: vec![[1; 2]; usize::from(space.shards())],
        }
    }

    /// The layout.
    pub fn space(&self) -> SpiSpace {
        self.space
    }

    /// A fresh SPI of `shard` under the key in `key_slot`.
    ///
    /// # Errors
    ///
    /// [`SpiExhausted`] once the shard has handed out all of its
    /// [`SpiSpace::per_shard`] SPIs under that key (or for a shard or slot
    /// out of range).
    pub fn allocate(&mut self, shard: u16, key_slot: usize) -> Result<Spi, SpiExhausted> {
        let next = self
            .next
            .get_mut(usize::from(shard))
            .and_then(|slots| slots.get_mut(key_slot))
            .ok_or(SpiExhausted)?;
        let spi = self.space.spi(shard, key_slot, *next).ok_or(SpiExhausted)?;
        *next += 1;
        Ok(spi)
    }

    /// A new master key went into `key_slot`: every shard's numbering under
    /// it starts over.
    pub fn restart(&mut self, key_slot: usize) {
        for slots in &mut self.next {
            if let Some(next) = slots.get_mut(key_slot) {
                *next = 1;
            }
        }
    }

    /// SPIs `shard` has handed out under the key in `key_slot`.
    pub fn allocated(&self, shard: u16, key_slot: usize) -> u32 {
        self.next
            .get(usize::from(shard))
            .and_then(|slots| slots.get(key_slot))
            .map_or(0, |next| next - 1)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn layout_and_limits() {
        assert_eq!(SpiSpace::new(0), None);
        assert_eq!(SpiSpace::new(257), None);
        let bits = |n| SpiSpace::new(n).map(|s| s.shard_bits());
        assert_eq!(
            [1, 2, 3, 4, 5, 128, 129, 256].map(bits),
            [0, 1, 2, 2, 3, 7, 8, 8].map(Some)
        );
        assert_eq!(SpiSpace::SINGLE, SpiSpace::new(1).unwrap());
        assert_eq!(SpiSpace::SINGLE.per_shard(), 0x7FFF_FFFF);
        assert_eq!(SpiSpace::new(2).unwrap().per_shard(), (1 << 30) - 1);
        assert_eq!(SpiSpace::new(256).unwrap().per_shard(), 8_388_607);

        // One shard: the numbering of a node without shards.
        let single = SpiSpace::SINGLE;
        assert_eq!(single.spi(0, 0, 1), Some(Spi(1)));
        assert_eq!(single.spi(0, 1, 1), Some(Spi(0x8000_0001)));
        assert_eq!(single.spi(0, 0, 0x7FFF_FFFF), Some(Spi(0x7FFF_FFFF)));
        assert_eq!(single.spi(0, 0, 0x8000_0000), None);
        assert_eq!(single.spi(1, 0, 1), None);
        assert_eq!(single.shard_of(Spi(0x9A34_5678)), Some(0));
        assert_eq!(single.shard_of(Spi(0x8000_0000)), None);

        // Three shards: two bits, shard 3 unused.
        let three = SpiSpace::new(3).unwrap();
        assert_eq!(three.spi(2, 1, 5), Some(Spi(0x8000_0000 | 2 << 29 | 5)));
        assert_eq!(three.spi(3, 0, 1), None);
        assert_eq!(three.spi(0, 2, 1), None);
        assert_eq!(three.shard_of(Spi(2 << 29 | 5)), Some(2));
        assert_eq!(three.shard_of(Spi(3 << 29 | 5)), None, "no shard 3");
        assert_eq!(three.shard_of(Spi(1 << 29)), None, "n = 0");
    }

    #[test]
    fn allocation_is_per_shard_and_key_and_restarts_with_a_new_key() {
        let mut spis = SpiAllocator::new(SpiSpace::new(2).unwrap());
        assert_eq!(spis.allocate(0, 0), Ok(Spi(1)));
        assert_eq!(spis.allocate(0, 0), Ok(Spi(2)));
        assert_eq!(spis.allocate(1, 0), Ok(Spi(1 << 30 | 1)));
        assert_eq!(spis.allocate(1, 1), Ok(Spi(0xC000_0001)));
        assert_eq!((spis.allocated(0, 0), spis.allocated(1, 1)), (2, 1));
        assert_eq!(spis.allocate(2, 0), Err(SpiExhausted));
        assert_eq!(spis.allocate(0, 2), Err(SpiExhausted));
        spis.restart(0);
        assert_eq!(spis.allocate(0, 0), Ok(Spi(1)));
        assert_eq!(spis.allocate(1, 1), Ok(Spi(0xC000_0002)), "slot 1 kept");
        // The last SPI of a shard, then exhaustion.
        let space = SpiSpace::new(256).unwrap();
        let mut spis = SpiAllocator::new(space);
        spis.next[255][0] = space.per_shard();
        assert_eq!(spis.allocate(255, 0), Ok(Spi(0x7FFF_FFFF)));
        assert_eq!(spis.allocate(255, 0), Err(SpiExhausted));
    }

    proptest! {
        /// Oracle: SPIs handed out to any shards under any keys are all
        /// distinct, valid, and name the shard that got them.
        #[test]
        fn shards_never_share_an_spi(
            shards in 1u16..=256,
            picks in proptest::collection::vec((any::<u16>(), 0usize..2), 1..300),
        ) {
            let space = SpiSpace::new(shards).unwrap();
            let mut spis = SpiAllocator::new(space);
            let mut seen = BTreeSet::new();
            for (shard, slot) in picks {
                let shard = shard % shards;
                let spi = spis.allocate(shard, slot).unwrap();
                prop_assert!(spi.is_valid());
                prop_assert_eq!(spi.key_selector(), slot);
                prop_assert_eq!(space.shard_of(spi), Some(shard));
                prop_assert!(seen.insert(spi.0), "{:?} twice", spi);
            }
        }

        /// `shard_of` never panics and agrees with `spi` wherever it answers.
        #[test]
        fn shard_of_inverts_spi(shards in 1u16..=256, raw in any::<u32>()) {
            let space = SpiSpace::new(shards).unwrap();
            if let Some(shard) = space.shard_of(Spi(raw)) {
                let n = Spi(raw).index() & space.per_shard();
                prop_assert_eq!(space.spi(shard, Spi(raw).key_selector(), n), Some(Spi(raw)));
            }
        }
    }
}
