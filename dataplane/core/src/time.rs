//! Time in the Falcon core: one [`Timestamp`] type, injected by the caller.
//!
//! Layer: shared by every sans-IO state machine of `falcon-core`. Owns
//! [`Timestamp`] (nanoseconds since the node's clock epoch, a plain `u64`)
//! and the conversions to the other time units Falcon uses. It never reads a
//! clock: the DPDK loop, the simulator and the tests read theirs once per
//! loop turn and pass `now` down (DESIGN.md §4).
//!
//! | unit | where | conversion |
//! |---|---|---|
//! | 1 ns | [`Timestamp`], timers, RTT samples in the core | – |
//! | 1 ps | PSP IV TX timestamp (DESIGN.md §4) | [`Timestamp::iv_picos`] = ns × 1000 |
//! | 131.072 ns (2^17 ps), 32 bit | ACK/NACK t1, t2 ([`FalconTime32`]) | IV >> 17 ([`Timestamp::falcon_time32`]) |
//! | 131.072 ns, 24 bit | RUE t1..t4, RTO, time markers (`rue::Time24`) | low 24 bits of the 32-bit value |
//! | 512 ns | pacing gap (timing-wheel units, spec/rue.md §1.11 item 8) | [`timing_wheel_units`] |
//!
//! `Timestamp` arithmetic saturates instead of panicking: a timer armed at
//! `Timestamp::MAX` simply never fires.

use core::fmt;
use core::ops::{Add, Sub};
use core::time::Duration;

use crate::wire::FalconTime32;

/// A point in time: nanoseconds since the node's clock epoch.
///
/// Totally ordered (it is 64-bit nanoseconds, wrapping after 584 years).
/// Inputs to a state machine must carry non-decreasing timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The clock epoch.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The latest representable time ("never", for timers).
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// From nanoseconds since the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// From microseconds since the epoch (saturating).
    pub const fn from_micros(micros: u64) -> Self {
        Timestamp(micros.saturating_mul(1_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + duration`, or `None` past [`Timestamp::MAX`].
    pub fn checked_add(self, duration: Duration) -> Option<Timestamp> {
        let nanos = u64::try_from(duration.as_nanos()).ok()?;
        self.0.checked_add(nanos).map(Timestamp)
    }

    /// `self + duration`, saturating at [`Timestamp::MAX`].
    #[must_use]
    pub fn saturating_add(self, duration: Duration) -> Timestamp {
        self.checked_add(duration).unwrap_or(Timestamp::MAX)
    }

    /// `self + nanos`, saturating at [`Timestamp::MAX`]: the same as
    /// [`saturating_add`](Self::saturating_add) of
    /// `Duration::from_nanos(nanos)`, without the round trip through
    /// `Duration`'s seconds and nanoseconds (three 64-bit multiplies).
    #[must_use]
    #[inline]
    pub const fn saturating_add_nanos(self, nanos: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(nanos))
    }

    /// `self - duration`, saturating at [`Timestamp::ZERO`].
    #[must_use]
    pub fn saturating_sub(self, duration: Duration) -> Timestamp {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_sub(nanos))
    }

    /// Time elapsed from `earlier` to `self`, or `None` if `earlier` is later.
    pub fn checked_duration_since(self, earlier: Timestamp) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_nanos)
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The PSP IV TX timestamp for a packet sent at `self`: picoseconds since
    /// the epoch, modulo 2^64 (DESIGN.md §4).
    pub const fn iv_picos(self) -> u64 {
        self.0.wrapping_mul(1_000)
    }

    /// The 32-bit on-wire timestamp (131.072 ns units) of `self`: the same
    /// value the receiver derives from the IV (`IV >> 17`), so t1 echoed in an
    /// ACK compares with the sender's own clock.
    pub const fn falcon_time32(self) -> FalconTime32 {
        FalconTime32::from_picos(self.iv_picos())
    }

    /// The 24-bit RUE time of `self` (the low 24 bits of
    /// [`falcon_time32`](Self::falcon_time32)).
    pub const fn time24(self) -> rue::Time24 {
        rue::Time24::from_nanos(self.0)
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;

    /// Saturating: see [`Timestamp::saturating_add`].
    fn add(self, duration: Duration) -> Timestamp {
        self.saturating_add(duration)
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;

    /// Saturating: see [`Timestamp::saturating_sub`].
    fn sub(self, duration: Duration) -> Timestamp {
        self.saturating_sub(duration)
    }
}

impl Sub<Timestamp> for Timestamp {
    type Output = Duration;

    /// Saturating: see [`Timestamp::saturating_duration_since`].
    fn sub(self, earlier: Timestamp) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// Nanoseconds per timing-wheel unit: the RUE's `inter_packet_gap` unit
/// (isekai `default_config_generator.cc`; spec/rue.md §1.11 item 8: the
/// datapath and the RUE agree on 512 ns).
pub const TIMING_WHEEL_UNIT_NANOS: u64 = 512;

/// Picoseconds per Falcon time unit (131.072 ns), the unit of t1..t4, RTO
/// and time markers (OCP Falcon 0.9 §10.6.2).
pub const FALCON_UNIT_PICOS: u64 = FalconTime32::UNIT_PICOS;

/// A pacing gap of `units` timing-wheel units (512 ns each).
pub const fn timing_wheel_units(units: u32) -> Duration {
    Duration::from_nanos(units as u64 * TIMING_WHEEL_UNIT_NANOS)
}

/// A duration of `units` Falcon time units (131.072 ns each), rounded down
/// to whole nanoseconds.
pub const fn falcon_units(units: u64) -> Duration {
    Duration::from_nanos(falcon_units_nanos(units))
}

/// [`falcon_units`] in whole nanoseconds.
#[inline]
pub const fn falcon_units_nanos(units: u64) -> u64 {
    units.saturating_mul(FALCON_UNIT_PICOS) / 1_000
}

/// `duration` in whole Falcon time units (131.072 ns), rounded up and
/// saturated at `u32::MAX`.
pub fn to_falcon_units(duration: Duration) -> u32 {
    let picos = duration.as_nanos().saturating_mul(1_000);
    let units = picos.div_ceil(u128::from(FALCON_UNIT_PICOS));
    u32::try_from(units).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp::from_nanos(1_000);
        assert_eq!(t + Duration::from_nanos(5), Timestamp::from_nanos(1_005));
        assert_eq!(t - Duration::from_micros(2), Timestamp::ZERO);
        assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
        assert_eq!(
            Timestamp::from_nanos(3_000) - t,
            Duration::from_nanos(2_000)
        );
        assert_eq!(t - Timestamp::from_nanos(3_000), Duration::ZERO);
        assert_eq!(t.checked_duration_since(Timestamp::from_nanos(1_001)), None);
        assert_eq!(t.checked_add(Duration::MAX), None);
        assert_eq!(Timestamp::from_micros(3).as_nanos(), 3_000);
        assert_eq!(
            Timestamp::from_nanos(1_500_000_123).to_string(),
            "1.500000123s"
        );
    }

    #[test]
    fn wire_units() {
        // 1 ms = 10^9 ps = 7629.39 units of 131.072 ns.
        let t = Timestamp::from_nanos(1_000_000);
        assert_eq!(t.iv_picos(), 1_000_000_000);
        assert_eq!(t.falcon_time32().value(), 7_629);
        assert_eq!(t.falcon_time32(), FalconTime32::from_picos(t.iv_picos()));
        let late = Timestamp::from_nanos(3_000_000_000);
        assert_eq!(
            late.time24().value(),
            late.falcon_time32().value() & 0xFF_FFFF
        );
        assert_eq!(falcon_units(1_000), Duration::from_nanos(131_072));
        assert_eq!(to_falcon_units(Duration::from_nanos(131_072)), 1_000);
        assert_eq!(to_falcon_units(Duration::from_micros(1_000)), 7_630);
        assert_eq!(timing_wheel_units(3), Duration::from_nanos(1_536));
        assert_eq!(to_falcon_units(Duration::MAX), u32::MAX);
    }
}
