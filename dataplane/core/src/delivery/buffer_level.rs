//! Receive-buffer occupancy for the ACK's congestion info.
//!
//! Layer: delivery (receiver side). Owns [`PoolOccupancy`] — the EMA of one
//! network-request resource pool's occupancy and its 31 quantization
//! thresholds — and [`BufferLevel`], the maximum quantized level across the
//! pools, which every ACK and NACK carries (OCP Falcon 0.9 §10.2;
//! spec/falcon.md §6). The pools themselves belong to the transaction
//! sublayer, which feeds occupancy samples here. Integer fixed point; no
//! IO, no allocation, no panics.

use crate::delivery::config::ConfigError;
use crate::wire::RxBufferLevel;

/// Quantization thresholds per pool (32 levels, OCP Falcon 0.9 §10.2).
pub const THRESHOLDS: usize = 31;

/// Fractional bits of the EMA.
const FRACTION_BITS: u32 = 16;

/// The EMA of one pool's occupancy and its quantizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolOccupancy {
    /// α = 2^-`alpha_shift` (isekai: EMA coefficient as a shift).
    alpha_shift: u8,
    /// Non-decreasing thresholds, in the pool's occupancy unit.
    thresholds: [u32; THRESHOLDS],
    /// EMA in fixed point with [`FRACTION_BITS`] fractional bits.
    ema: u64,
}

impl PoolOccupancy {
    /// A pool with α = 2^-`alpha_shift` and explicit thresholds. §10.2: the
    /// level is i when threshold_i ≤ EMA < threshold_i+1, i.e. the number of
    /// thresholds at or below the EMA.
    ///
    /// # Errors
    ///
    /// `alpha_shift` above 16, or thresholds that decrease.
    pub fn new(alpha_shift: u8, thresholds: [u32; THRESHOLDS]) -> Result<Self, ConfigError> {
        if u32::from(alpha_shift) > FRACTION_BITS {
            return Err(ConfigError {
                field: "buffer_level.alpha_shift",
                problem: "must be in 0..=16 (alpha = 2^-shift)",
            });
        }
        if thresholds.windows(2).any(|pair| pair[0] > pair[1]) {
            return Err(ConfigError {
                field: "buffer_level.thresholds",
                problem: "must be non-decreasing",
            });
        }
        Ok(PoolOccupancy {
            alpha_shift,
            thresholds,
            ema: 0,
        })
    }

    /// Thresholds `capacity·(i+1)/32`, i = 0..30, evenly spaced over the
    /// pool (the isekai example configs), with α = 2^-`alpha_shift` (α = 0.5
    /// by default: shift 1, spec/falcon.md §8).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn evenly_spaced(alpha_shift: u8, capacity: u32) -> Result<Self, ConfigError> {
        let mut thresholds = [0u32; THRESHOLDS];
        for (i, threshold) in thresholds.iter_mut().enumerate() {
            *threshold = (u64::from(capacity) * (i as u64 + 1) / 32) as u32;
        }
        Self::new(alpha_shift, thresholds)
    }

    /// Feeds the current occupancy: `ema = (1 − α)·ema + α·current`
    /// (§10.2, updated "each time the occupancy changes").
    pub fn update(&mut self, occupancy: u32) {
        let current = u64::from(occupancy) << FRACTION_BITS;
        if current >= self.ema {
            self.ema += (current - self.ema) >> self.alpha_shift;
        } else {
            self.ema -= (self.ema - current) >> self.alpha_shift;
        }
    }

    /// The EMA, rounded down to the pool's unit.
    pub fn ema(&self) -> u32 {
        (self.ema >> FRACTION_BITS) as u32
    }

    /// The quantized level, 0..=31.
    pub fn level(&self) -> RxBufferLevel {
        let ema = self.ema();
        let level = self.thresholds.partition_point(|&t| t <= ema);
        RxBufferLevel::saturating(level as u8)
    }
}

/// The receive-buffer level of a node: its pools (§10.2: network Rx packet
/// and network Rx buffer; isekai adds the Tx packet pool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferLevel<const POOLS: usize> {
    /// The pools, in the order the layer above indexes them.
    pub pools: [PoolOccupancy; POOLS],
}

impl<const POOLS: usize> BufferLevel<POOLS> {
    /// The level an ACK or NACK carries: "the maximum quantized buffer level
    /// across the pools" (§10.2).
    pub fn level(&self) -> RxBufferLevel {
        let level = self
            .pools
            .iter()
            .map(|pool| pool.level().value())
            .max()
            .unwrap_or(0);
        RxBufferLevel::saturating(level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ema_converges_with_alpha_half() {
        let mut pool = PoolOccupancy::evenly_spaced(1, 3200).unwrap();
        assert_eq!(pool.level().value(), 0);
        pool.update(1000);
        assert_eq!(pool.ema(), 500);
        pool.update(1000);
        assert_eq!(pool.ema(), 750);
        for _ in 0..30 {
            pool.update(1000);
        }
        assert_eq!(pool.ema(), 999, "fixed point approaches from below");
        // Thresholds 100, 200, ..., 3100: 999 is at or above 9 of them.
        assert_eq!(pool.level().value(), 9);
        pool.update(0);
        assert_eq!(pool.ema(), 500);
        assert_eq!(pool.level().value(), 5);
    }

    #[test]
    fn quantization_edges_and_max_across_pools() {
        let mut thresholds = [0u32; THRESHOLDS];
        for (i, t) in thresholds.iter_mut().enumerate() {
            *t = 2048 * (i as u32 + 1);
        }
        let mut instant = PoolOccupancy::new(0, thresholds).unwrap();
        instant.update(2047);
        assert_eq!(instant.level().value(), 0);
        instant.update(2048);
        assert_eq!(instant.level().value(), 1);
        instant.update(2048 * 31);
        assert_eq!(instant.level().value(), 31);
        instant.update(u32::MAX);
        assert_eq!(instant.level().value(), 31);

        let mut quiet = PoolOccupancy::new(0, thresholds).unwrap();
        quiet.update(4096);
        let level = BufferLevel {
            pools: [quiet, instant],
        };
        assert_eq!(level.level().value(), 31);

        assert_eq!(
            PoolOccupancy::new(17, thresholds)
                .map(|_| ())
                .unwrap_err()
                .field,
            "buffer_level.alpha_shift"
        );
        thresholds[3] = 0;
        assert_eq!(
            PoolOccupancy::new(1, thresholds)
                .map(|_| ())
                .unwrap_err()
                .field,
            "buffer_level.thresholds"
        );
    }
}
