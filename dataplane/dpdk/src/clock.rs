//! The lcore loop's clock on DPDK: the TSC, read through DPDK, in the
//! engine's nanoseconds.

use falcon_core::lcore::Clock;
use falcon_core::time::Timestamp;

use crate::eal::Eal;

/// The TSC since the clock was made, converted to nanoseconds with DPDK's
/// measured TSC frequency, from an origin of 1 s (no timestamp of a run is
/// zero). One `rdtsc` and one multiplication a read.
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    eal: &'static Eal,
    start: u64,
    /// Nanoseconds per TSC tick, in 32.32 fixed point.
    ns_per_tick_q32: u128,
}

impl TscClock {
    /// A clock starting now.
    pub fn new(eal: &'static Eal) -> TscClock {
        let hz = u128::from(eal.tsc_hz().max(1));
        TscClock {
            eal,
            start: eal.tsc(),
            ns_per_tick_q32: (1_000_000_000u128 << 32) / hz,
        }
    }
}

impl Clock for TscClock {
    #[inline]
    fn now(&mut self) -> Timestamp {
        let ticks = u128::from(self.eal.tsc().saturating_sub(self.start));
        let ns = u64::try_from((ticks * self.ns_per_tick_q32) >> 32).unwrap_or(u64::MAX);
        Timestamp::from_nanos(1_000_000_000u64.saturating_add(ns))
    }
}
