//! On-wire Falcon timestamps (ACK/NACK t1 and t2).
//!
//! Layer: wire. Owns [`FalconTime32`], the 32-bit timestamp in 131.072 ns
//! units that ACKs and NACKs carry (OCP Falcon 0.9 §7.7.1 p.32, §7.8 p.37).
//! The unit is 2^17 ps, so a PSP IV holding a picosecond TX time converts with
//! a shift (DESIGN.md §4: t1 = IV >> 17). The value wraps every
//! 2^32 × 131.072 ns ≈ 562.9 s, so it has no total order: differences are
//! taken modulo 2^32 ([`FalconTime32::wrapping_since`]). Never reads a clock.

use core::fmt;

/// A 32-bit Falcon timestamp, in units of 131.072 ns (2^17 ps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FalconTime32(u32);

impl FalconTime32 {
    /// One unit, in picoseconds.
    pub const UNIT_PICOS: u64 = 1 << Self::UNIT_SHIFT;
    /// log2 of the unit in picoseconds.
    pub const UNIT_SHIFT: u32 = 17;

    /// Wraps a raw wire value.
    pub const fn new(units: u32) -> Self {
        FalconTime32(units)
    }

    /// The raw wire value, in 131.072 ns units.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// From a time in picoseconds (for example the PSP IV timestamp),
    /// truncated to whole units and reduced modulo 2^32.
    pub const fn from_picos(picos: u64) -> Self {
        FalconTime32((picos >> Self::UNIT_SHIFT) as u32)
    }

    /// From a time in nanoseconds, truncated to whole units and reduced
    /// modulo 2^32.
    pub const fn from_nanos(nanos: u64) -> Self {
        let picos = nanos as u128 * 1000;
        FalconTime32((picos >> Self::UNIT_SHIFT) as u32)
    }

    /// Units elapsed from `earlier` to `self`, modulo 2^32 (correct across one
    /// wrap, as long as less than ≈ 562.9 s elapsed).
    pub const fn wrapping_since(self, earlier: FalconTime32) -> u32 {
        self.0.wrapping_sub(earlier.0)
    }

    /// Converts a number of units to nanoseconds, rounding down.
    pub const fn units_to_nanos(units: u32) -> u64 {
        (units as u64 * Self::UNIT_PICOS) / 1000
    }
}

impl fmt::Display for FalconTime32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}u", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_is_131_072_ns() {
        assert_eq!(FalconTime32::UNIT_PICOS, 131_072);
        assert_eq!(FalconTime32::from_nanos(131_072 / 1000).value(), 0);
        assert_eq!(FalconTime32::from_picos(131_072).value(), 1);
        assert_eq!(FalconTime32::from_nanos(1_000_000).value(), 7_629); // 1 ms = 7629.4 units
        assert_eq!(FalconTime32::units_to_nanos(1_000), 131_072);
        assert_eq!(FalconTime32::from_picos(u64::MAX).value(), u32::MAX);
    }

    #[test]
    fn difference_wraps() {
        let before = FalconTime32::new(u32::MAX - 2);
        let after = FalconTime32::new(5);
        assert_eq!(after.wrapping_since(before), 8);
    }
}
