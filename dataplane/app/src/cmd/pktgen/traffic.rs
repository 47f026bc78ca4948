//! What `falcon pktgen`'s generator offers: the sizes of its transactions,
//! the push/pull mix and the release schedule of a configured rate.
//!
//! Layer: application, pure logic under the generator's ULP. Owns the
//! parsing of `--size`, `--imix` and `--mix`, the size sequence
//! ([`SizeSource`], seeded), the mix ([`MixSource`]) and [`Schedule`],
//! which releases transactions at `next += cost / rate`. It reads no
//! clock: times are passed in.

use std::fmt;
use std::str::FromStr;

use falcon_core::random::{Random, SplitMix64};

/// The simple IMIX by count: 7 of 64 bytes, 4 of 576, 1 of 1500, in this
/// interleaved order, repeated.
pub const IMIX: [usize; 12] = [64, 576, 64, 64, 576, 64, 1500, 64, 576, 64, 576, 64];

/// `--size`: the Push Data payload of each transaction, bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeSpec {
    /// `--size 64`, `--size 64,512,4096` (cycled in order) or `--imix`.
    List(Vec<usize>),
    /// `--size 64-4096`: uniform in the range, both ends included, from
    /// `--seed`.
    Range(usize, usize),
}

impl SizeSpec {
    /// `--imix`.
    pub fn imix() -> Self {
        SizeSpec::List(IMIX.to_vec())
    }

    /// The smallest and the largest size.
    pub fn bounds(&self) -> (usize, usize) {
        match self {
            SizeSpec::List(sizes) => (
                sizes.iter().copied().min().unwrap_or(0),
                sizes.iter().copied().max().unwrap_or(0),
            ),
            SizeSpec::Range(lo, hi) => (*lo, *hi),
        }
    }

    /// The mean size, bytes.
    pub fn mean(&self) -> f64 {
        match self {
            SizeSpec::List(sizes) if !sizes.is_empty() => {
                sizes.iter().sum::<usize>() as f64 / sizes.len() as f64
            }
            SizeSpec::List(_) => 0.0,
            SizeSpec::Range(lo, hi) => (*lo + *hi) as f64 / 2.0,
        }
    }
}

impl FromStr for SizeSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let number = |t: &str| -> Result<usize, String> {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("{t:?} is not a size in bytes"))
        };
        if let Some((lo, hi)) = s.split_once('-') {
            let (lo, hi) = (number(lo)?, number(hi)?);
            if lo > hi {
                return Err(format!("{s}: the range runs from the smaller size"));
            }
            return Ok(SizeSpec::Range(lo, hi));
        }
        let sizes = s.split(',').map(number).collect::<Result<Vec<_>, _>>()?;
        Ok(SizeSpec::List(sizes))
    }
}

impl fmt::Display for SizeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeSpec::List(sizes) if sizes.as_slice() == IMIX => write!(f, "imix"),
            SizeSpec::List(sizes) => {
                let list: Vec<String> = sizes.iter().map(usize::to_string).collect();
                write!(f, "{}", list.join(","))
            }
            SizeSpec::Range(lo, hi) => write!(f, "{lo}-{hi}"),
        }
    }
}

/// The sizes of successive transactions.
#[derive(Debug, Clone)]
pub struct SizeSource {
    spec: SizeSpec,
    next: usize,
    rng: SplitMix64,
}

impl SizeSource {
    pub fn new(spec: SizeSpec, seed: u64) -> Self {
        SizeSource {
            spec,
            next: 0,
            rng: SplitMix64::new(seed),
        }
    }

    /// The next transaction's size.
    pub fn next_size(&mut self) -> usize {
        match &self.spec {
            SizeSpec::List(sizes) => {
                let size = sizes.get(self.next).copied().unwrap_or(0);
                self.next = (self.next + 1) % sizes.len().max(1);
                size
            }
            SizeSpec::Range(lo, hi) => {
                let span = (hi - lo) as u64 + 1;
                // The modulo's bias is below span / 2^64: nothing at these
                // spans.
                lo + (self.rng.next_u64() % span) as usize
            }
        }
    }
}

/// `--mix`: pushes only, or pushes and pulls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Push Data only.
    Push,
    /// `pushes` pushes, then one pull (`push-pull:N`; `push-pull` is 1).
    PushPull { pushes: u32 },
}

impl FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "push" => Ok(Mix::Push),
            "push-pull" => Ok(Mix::PushPull { pushes: 1 }),
            _ => {
                let pushes = s
                    .strip_prefix("push-pull:")
                    .and_then(|n| n.parse::<u32>().ok())
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| {
                        format!("{s:?}: push, push-pull or push-pull:N (N ≥ 1 pushes per pull)")
                    })?;
                Ok(Mix::PushPull { pushes })
            }
        }
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mix::Push => write!(f, "push"),
            Mix::PushPull { pushes } => write!(f, "push-pull:{pushes}"),
        }
    }
}

/// Whether successive transactions are pulls.
#[derive(Debug, Clone)]
pub struct MixSource {
    mix: Mix,
    index: u64,
}

impl MixSource {
    pub fn new(mix: Mix) -> Self {
        MixSource { mix, index: 0 }
    }

    /// Whether the next transaction is a pull.
    pub fn next_is_pull(&mut self) -> bool {
        let i = self.index;
        self.index += 1;
        match self.mix {
            Mix::Push => false,
            Mix::PushPull { pushes } => i % (u64::from(pushes) + 1) == u64::from(pushes),
        }
    }
}

/// A configured rate: `--rate-gbps` (payload bits) or `--rate-mpps`
/// (transactions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    Gbps(f64),
    Mpps(f64),
}

impl Rate {
    /// What a transaction of `size` payload bytes costs, in the rate's
    /// unit (bits or transactions).
    pub fn cost(self, size: usize) -> f64 {
        match self {
            Rate::Gbps(_) => size as f64 * 8.0,
            Rate::Mpps(_) => 1.0,
        }
    }

    /// The rate's units per nanosecond.
    fn per_ns(self) -> f64 {
        match self {
            Rate::Gbps(g) => g,
            Rate::Mpps(m) => m * 1e-3,
        }
    }
}

/// Releases transactions on a schedule: the next is due `cost / rate`
/// after the one before, whatever the time it was actually released. A
/// generator that fell behind (the engine refused, the core was taken
/// away) catches up by at most `burst` transactions' worth at once, never
/// by the whole backlog: the schedule moves forward instead.
#[derive(Debug, Clone)]
pub struct Schedule {
    per_ns: f64,
    /// When the next transaction is due, ns.
    next_ns: Option<f64>,
    /// The most the schedule lags the clock, ns.
    max_lag_ns: f64,
    /// Releases taken, and their cost.
    pub released: u64,
    pub released_cost: f64,
}

impl Schedule {
    /// `rate`, catching up by at most `burst` transactions of `mean_cost`.
    pub fn new(rate: Rate, burst: usize, mean_cost: f64) -> Self {
        let per_ns = rate.per_ns();
        Schedule {
            per_ns,
            next_ns: None,
            max_lag_ns: burst.saturating_sub(1) as f64 * mean_cost / per_ns,
            released: 0,
            released_cost: 0.0,
        }
    }

    /// Whether a transaction of `cost` may go at `now_ns`; if so it is
    /// taken and the schedule moves on by `cost / rate`.
    pub fn try_release(&mut self, now_ns: u64, cost: f64) -> bool {
        let now = now_ns as f64;
        let next = self.next_ns.get_or_insert(now);
        if *next > now {
            return false;
        }
        if *next < now - self.max_lag_ns {
            *next = now - self.max_lag_ns;
        }
        *next += cost / self.per_ns;
        self.released += 1;
        self.released_cost += cost;
        true
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn sizes_parse_and_cycle() {
        let spec: SizeSpec = "64,512,4096".parse().unwrap();
        assert_eq!(spec.to_string(), "64,512,4096");
        assert_eq!(spec.bounds(), (64, 4096));
        let mut s = SizeSource::new(spec, 1);
        let got: Vec<usize> = (0..7).map(|_| s.next_size()).collect();
        assert_eq!(got, [64, 512, 4096, 64, 512, 4096, 64]);
        assert_eq!("64".parse::<SizeSpec>().unwrap(), SizeSpec::List(vec![64]));
        assert_eq!(
            "64-4096".parse::<SizeSpec>().unwrap(),
            SizeSpec::Range(64, 4096)
        );
        assert!("4096-64".parse::<SizeSpec>().is_err());
        assert!("64,x".parse::<SizeSpec>().is_err());
        assert!("".parse::<SizeSpec>().is_err());
    }

    #[test]
    fn imix_is_7_4_1_by_count() {
        let mut s = SizeSource::new(SizeSpec::imix(), 1);
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..1200 {
            *counts.entry(s.next_size()).or_insert(0) += 1;
        }
        assert_eq!(
            counts.into_iter().collect::<Vec<_>>(),
            [(64, 700), (576, 400), (1500, 100)]
        );
        assert_eq!(SizeSpec::imix().to_string(), "imix");
    }

    #[test]
    fn ranges_are_seeded_and_cover_both_ends() {
        let draw = |seed| {
            let mut s = SizeSource::new(SizeSpec::Range(64, 67), seed);
            (0..400).map(|_| s.next_size()).collect::<Vec<_>>()
        };
        let a = draw(7);
        assert_eq!(a, draw(7));
        assert_ne!(a, draw(8));
        for size in 64..=67 {
            let n = a.iter().filter(|&&x| x == size).count();
            assert!((60..=140).contains(&n), "{size}: {n} of 400");
        }
    }

    #[test]
    fn mixes_parse_and_alternate() {
        assert_eq!("push".parse::<Mix>().unwrap(), Mix::Push);
        assert_eq!(
            "push-pull".parse::<Mix>().unwrap(),
            Mix::PushPull { pushes: 1 }
        );
        let mix: Mix = "push-pull:3".parse().unwrap();
        assert_eq!(mix.to_string(), "push-pull:3");
        assert!("push-pull:0".parse::<Mix>().is_err());
        assert!("pull".parse::<Mix>().is_err());
        let mut m = MixSource::new(mix);
        let got: Vec<bool> = (0..8).map(|_| m.next_is_pull()).collect();
        assert_eq!(got, [false, false, false, true, false, false, false, true]);
        let mut m = MixSource::new(Mix::Push);
        assert!((0..100).all(|_| !m.next_is_pull()));
    }

    #[test]
    fn a_rate_releases_on_its_schedule() {
        // 1 Mpps: one transaction a microsecond.
        let mut s = Schedule::new(Rate::Mpps(1.0), 32, 1.0);
        let mut released = 0;
        for t in (0..1_000_000u64).step_by(100) {
            while s.try_release(t, 1.0) {
                released += 1;
            }
        }
        assert_eq!(released, 1000);
        // 8 Gbit/s of 1000-byte transactions: one a microsecond too.
        let mut s = Schedule::new(Rate::Gbps(8.0), 32, 8000.0);
        let mut released = 0;
        for t in (0..1_000_000u64).step_by(100) {
            while s.try_release(t, Rate::Gbps(8.0).cost(1000)) {
                released += 1;
            }
        }
        assert_eq!(released, 1000);
    }

    #[test]
    fn a_late_generator_catches_up_by_one_burst_only() {
        let mut s = Schedule::new(Rate::Mpps(1.0), 32, 1.0);
        assert!(s.try_release(0, 1.0));
        // A millisecond away: a thousand due, 32 go.
        let mut burst = 0;
        while s.try_release(1_000_000, 1.0) {
            burst += 1;
        }
        assert_eq!(burst, 32);
        // And the schedule goes on from there at the rate.
        assert!(!s.try_release(1_000_000, 1.0));
        assert!(s.try_release(1_001_000, 1.0));
    }

    proptest! {
        /// Oracle: by any time t (polled at any gaps) the schedule has
        /// released no more than rate × t plus one burst, and each poll
        /// releases at most one burst; polled often, it keeps the rate.
        #[test]
        fn never_above_the_rate_nor_bunched(
            mpps in 0.01f64..20.0,
            gaps in proptest::collection::vec(1u64..2_000_000, 1..200),
        ) {
            let burst = 16;
            let mut s = Schedule::new(Rate::Mpps(mpps), burst, 1.0);
            let mut t = 0u64;
            let mut total = 0u64;
            for gap in gaps {
                t += gap;
                let mut this_poll = 0;
                while s.try_release(t, 1.0) {
                    this_poll += 1;
                    prop_assert!(this_poll <= burst, "{this_poll} in one poll");
                }
                total += this_poll as u64;
                let bound = mpps * 1e-3 * t as f64 + burst as f64 + 1.0;
                prop_assert!((total as f64) <= bound, "{total} by {t} ns, bound {bound}");
            }
        }

        #[test]
        fn polled_often_it_keeps_the_rate(mpps in 0.05f64..10.0) {
            let mut s = Schedule::new(Rate::Mpps(mpps), 32, 1.0);
            let end = 10_000_000u64;
            let mut total = 0u64;
            for t in (0..end).step_by(50) {
                while s.try_release(t, 1.0) {
                    total += 1;
                }
            }
            let want = mpps * 1e-3 * end as f64;
            prop_assert!((total as f64 - want).abs() <= 2.0, "{total} against {want}");
        }
    }
}
