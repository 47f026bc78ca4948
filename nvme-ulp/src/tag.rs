//! 24-bit NBTH identifiers that name a slot and its generation.
//!
//! Layer: NVMe ULP, shared by the initiator (iCMD Identifier, Initiator
//! Tag) and the target (Target Tag). Owns [`SlotIds`], the split of a
//! 24-bit field into a slot index (low bits) and a generation (the bits
//! left). A slot's generation advances each time the slot is freed, so a
//! packet that names a slot's previous occupant (a late response, a
//! retransmission the peer still had queued) carries a generation that no
//! longer matches and is dropped, not applied to the new command
//! (ulp.md §3.9: "24-bit slot index + generation").
//!
//! A generation repeats after 2^(24 − slot bits) reuses of one slot: with
//! 4,096 slots, after 4,096 reuses, far longer than any packet outlives
//! its command (the Falcon retransmission limit, then the command
//! timeout).

/// Bits of an NBTH identifier (Target Tag, Initiator Tag, iCMD Identifier).
pub const ID_BITS: u32 = 24;

/// Fewest generation bits a split leaves: slots are at most
/// 2^(24 − 8) = 65,536.
pub const MIN_GENERATION_BITS: u32 = 8;

/// Most slots an identifier names with at least
/// [`MIN_GENERATION_BITS`] of generation.
pub const MAX_SLOTS: usize = 1 << (ID_BITS - MIN_GENERATION_BITS);

/// How a 24-bit identifier splits into slot and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotIds {
    slot_bits: u32,
}

impl SlotIds {
    /// The split for `slots` slots (1..=[`MAX_SLOTS`]): as few slot bits
    /// as name them all (at least 1), the rest generation.
    pub const fn for_slots(slots: usize) -> Option<SlotIds> {
        if slots == 0 || slots > MAX_SLOTS {
            return None;
        }
        let bits = usize::BITS - (slots - 1).leading_zeros();
        Some(SlotIds {
            slot_bits: if bits == 0 { 1 } else { bits },
        })
    }

    /// A split with exactly `slot_bits` slot bits (1..=16).
    pub const fn with_slot_bits(slot_bits: u32) -> Option<SlotIds> {
        if slot_bits == 0 || slot_bits > ID_BITS - MIN_GENERATION_BITS {
            return None;
        }
        Some(SlotIds { slot_bits })
    }

    pub const fn slot_bits(self) -> u32 {
        self.slot_bits
    }

    /// The mask of a generation: values wrap to it.
    pub const fn generation_mask(self) -> u32 {
        (1 << (ID_BITS - self.slot_bits)) - 1
    }

    /// The identifier of `slot` at `generation` (masked).
    pub const fn encode(self, slot: u32, generation: u32) -> u32 {
        ((generation & self.generation_mask()) << self.slot_bits)
            | (slot & ((1 << self.slot_bits) - 1))
    }

    /// The slot an identifier names.
    pub const fn slot(self, id: u32) -> u32 {
        id & ((1 << self.slot_bits) - 1)
    }

    /// The generation an identifier carries.
    pub const fn generation(self, id: u32) -> u32 {
        (id >> self.slot_bits) & self.generation_mask()
    }

    /// The generation after `generation`, wrapping.
    pub const fn next_generation(self, generation: u32) -> u32 {
        generation.wrapping_add(1) & self.generation_mask()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_bits_cover_the_slots() {
        let bits = |slots| SlotIds::for_slots(slots).map(SlotIds::slot_bits);
        assert_eq!(bits(1), Some(1));
        assert_eq!(bits(2), Some(1));
        assert_eq!(bits(3), Some(2));
        assert_eq!(bits(256), Some(8));
        assert_eq!(bits(257), Some(9));
        assert_eq!(bits(MAX_SLOTS), Some(16));
        assert_eq!(bits(MAX_SLOTS + 1), None);
        assert_eq!(bits(0), None);
    }

    #[test]
    fn encode_round_trips_and_generations_wrap() {
        let ids = SlotIds::for_slots(1000).expect("valid");
        assert_eq!(ids.slot_bits(), 10);
        let id = ids.encode(999, 0x2ABC);
        assert!(id < 1 << ID_BITS);
        assert_eq!((ids.slot(id), ids.generation(id)), (999, 0x2ABC));
        let last = ids.generation_mask();
        assert_eq!(ids.next_generation(last), 0);
        assert_ne!(ids.encode(5, last), ids.encode(5, 0));
        assert_eq!(ids.encode(5, last + 1), ids.encode(5, 0));
    }
}
