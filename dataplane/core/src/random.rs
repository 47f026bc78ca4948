//! Injected randomness: a tiny seeded generator.
//!
//! Layer: shared by the sans-IO state machines of `falcon-core`. Owns
//! [`Random`] (the interface a state machine draws from) and [`SplitMix64`]
//! (the deterministic generator the core uses, seeded by its caller). The
//! core never touches an OS RNG: the same seed replays the same run bit for
//! bit (STYLE.md habit 3). Not for cryptography.

/// A source of pseudo-random numbers.
pub trait Random {
    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64;

    /// A value uniform in `0..n` (0 when `n == 0`), by Lemire's
    /// multiply-shift (bias below 2^-32 for the small `n` used here).
    fn below(&mut self, n: u32) -> u32 {
        ((u64::from(self.next_u64() as u32) * u64::from(n)) >> 32) as u32
    }

    /// `true` with probability `numerator / denominator` (false when the
    /// denominator is 0).
    fn chance(&mut self, numerator: u32, denominator: u32) -> bool {
        denominator != 0 && self.below(denominator) < numerator
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): one `u64` of state, passes BigCrush,
/// a few instructions per draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }
}

impl Random for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // Reference outputs of SplitMix64 seeded with 0.
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn below_and_chance_stay_in_range() {
        let mut rng = SplitMix64::new(42);
        let mut hits = 0;
        for _ in 0..10_000 {
            assert!(rng.below(19) < 19);
            if rng.chance(1, 10) {
                hits += 1;
            }
        }
        assert!((800..1200).contains(&hits), "{hits}");
        assert_eq!(rng.below(0), 0);
        assert!(!rng.chance(1, 0));
    }
}
