//! Per-connection release times: the Carousel "timestamper".
//!
//! Layer: pacing, used by the delivery sublayer's transmit path. Owns
//! [`Timestamper`]: when the next packet of one connection may leave, from
//! the RUE's inter-packet gap and the operator's rate cap. Pure arithmetic
//! on injected times; it never reads a clock and never allocates.
//!
//! # Two gaps, two origins
//!
//! * **The RUE gap** (fcwnd < 1; OCP Falcon 0.9 §9.1.2 "If fcwnd < 1, allow
//!   1 outstanding packet", §10.3.5; spec/rue.md §1.6, §2.9): a packet that
//!   became eligible (its window gate opened) at `t` leaves at `t + ipg`.
//!   Decision: the gap is counted from eligibility, not from the previous
//!   departure. The RUE computes `ipg = rtt/fcwnd − rtt` for a datapath
//!   whose "departure time is now + ipg" (spec/falcon.md §7.3; OCP §10.6.2.1
//!   "to achieve R (pps), set ipg = 1/R − target_RTT"): with one packet
//!   outstanding, eligibility follows the previous packet's ACK by one RTT,
//!   so the period is `rtt + ipg = rtt/fcwnd`. Counting from the previous
//!   departure would pace at `1/ipg` instead.
//! * **The rate cap** (an operator's per-connection limit in bit/s, beyond
//!   rev 0.9): Carousel's `next = max(now, last + bytes·8/rate)`, counted
//!   from departure to departure. The bytes are the frame's as built
//!   (Ethernet header to PSP ICV; the FCS, preamble and inter-frame gap are
//!   not counted). The division's remainder is carried to the next packet,
//!   so the long-run rate is exact to the nanosecond clock, whatever the
//!   rounding of each gap.
//!
//! A packet waits for both: it leaves at `max(eligible + ipg, next)`.
//!
//! # Lateness
//!
//! Decision: a departure later than its release time by at most `jitter`
//! (the pacing wheel's granularity) is charged from its release time; later
//! than that, from `now`. The wheel hands a connection back up to
//! one granularity late by design; without this, every gap shorter than a
//! slot would lose up to a slot per packet (a 4 KiB packet every 328 ns at
//! 100 Gbit/s, released on 512 ns slots, would run at about 64 Gbit/s).
//! Lateness beyond the jitter (an idle connection, a closed window) is not
//! made up: a connection never bursts to catch up. Two departures of a
//! capped connection are therefore never closer than its gap minus the
//! jitter, and its rate over any run is within one packet of the cap.

use core::time::Duration;

use crate::time::Timestamp;

/// Largest rate cap, bit/s (1 Pbit/s): keeps the carry arithmetic in 64
/// bits (bytes·8·10^9 + carry < 2^64 for frames up to 64 KiB).
pub const MAX_RATE_CAP: u64 = 1_000_000_000_000_000;

/// When one connection's next packet may leave; see the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timestamper {
    /// When the packet waiting became eligible; `Timestamp::MAX`: none
    /// waits. (Not an `Option`: 8 bytes less in every connection.)
    eligible: Timestamp,
    /// When it may leave (meaningful while one waits).
    release: Timestamp,
    /// Boxed: off by default, and 32 bytes inline in every connection
    /// otherwise.
    cap: Option<Box<RateCap>>,
}

/// The rate cap's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RateCap {
    /// bit/s, in 1..=[`MAX_RATE_CAP`].
    rate: u64,
    /// The earliest departure of the next packet.
    next: Timestamp,
    /// The remainder of the last gap's division, bit·ns.
    carry: u64,
    /// Lateness forgiven, ns.
    jitter: u64,
    /// The last frame length charged, and its gap at this rate as
    /// `quotient · rate + remainder` bit·ns: most frames of a connection
    /// have one length, and the division costs more than the rest of the
    /// charge.
    bytes: u64,
    quotient: u64,
    remainder: u64,
}

impl Default for Timestamper {
    fn default() -> Self {
        Timestamper {
            eligible: Timestamp::MAX,
            release: Timestamp::ZERO,
            cap: None,
        }
    }
}

impl Timestamper {
    /// A packet is eligible at `now`; `rue_gap_nanos` is the RUE's gap (0
    /// when fcwnd ≥ 1). May it leave now? The first call for a packet
    /// arms its release time; calls before it say no.
    #[inline(always)]
    pub fn admit(&mut self, now: Timestamp, rue_gap_nanos: u64) -> bool {
        if rue_gap_nanos == 0 && self.cap.is_none() {
            self.eligible = Timestamp::MAX;
            return true;
        }
        self.admit_paced(now, rue_gap_nanos)
    }

    #[inline]
    fn admit_paced(&mut self, now: Timestamp, rue_gap_nanos: u64) -> bool {
        if self.eligible == Timestamp::MAX {
            self.eligible = now;
        }
        // The current gap applies to the waiting packet: a RUE result that
        // changes it while the packet waits moves its release.
        let mut release = self.eligible.saturating_add_nanos(rue_gap_nanos);
        if let Some(cap) = &self.cap {
            release = release.max(cap.next);
        }
        if now >= release {
            self.eligible = Timestamp::MAX;
            return true;
        }
        self.release = release;
        false
    }

    /// When the packet waiting may leave, if one waits (for the pacing
    /// wheel).
    #[inline]
    pub fn release(&self) -> Option<Timestamp> {
        (self.eligible != Timestamp::MAX).then_some(self.release)
    }

    /// Forgets the waiting packet (nothing is eligible any more).
    pub fn cancel(&mut self) {
        self.eligible = Timestamp::MAX;
    }

    /// Whether a rate cap is set (the caller reports departures only then).
    #[inline(always)]
    pub fn is_rate_capped(&self) -> bool {
        self.cap.is_some()
    }

    /// Sets the rate cap (`None` or 0: none; at most [`MAX_RATE_CAP`]) and the
    /// lateness forgiven (the pacing wheel's granularity). The next packet
    /// is not held by departures before the change.
    pub fn set_rate_cap(&mut self, rate: Option<u64>, jitter: Duration) {
        self.cap = rate.filter(|&rate| rate != 0).map(|rate| {
            Box::new(RateCap {
                rate: rate.min(MAX_RATE_CAP),
                next: Timestamp::ZERO,
                carry: 0,
                jitter: u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX),
                bytes: 0,
                quotient: 0,
                remainder: 0,
            })
        });
    }

    /// The rate cap, bit/s (tests read it back).
    #[cfg(any(test, feature = "testing"))]
    pub fn rate_cap(&self) -> Option<u64> {
        self.cap.as_ref().map(|cap| cap.rate)
    }

    /// A frame of `bytes` left at `now`: the next may leave its gap after
    /// this one's release time, or after `now` if this one left more than
    /// the jitter later than that.
    #[inline]
    pub fn on_departure(&mut self, now: Timestamp, bytes: usize) {
        let Some(cap) = self.cap.as_deref_mut() else {
            return;
        };
        let late = now.as_nanos().saturating_sub(cap.next.as_nanos());
        let base = if late <= cap.jitter { cap.next } else { now };
        let bytes = (bytes as u64).min(u64::from(u16::MAX));
        if bytes != cap.bytes {
            // Frames are at most 64 KiB: bytes·8·10^9 < 5.3·10^14.
            let bits_nanos = bytes * 8_000_000_000;
            cap.bytes = bytes;
            cap.quotient = bits_nanos / cap.rate;
            cap.remainder = bits_nanos % cap.rate;
        }
        // remainder + carry < 2 · rate ≤ 2 · 10^15: one more nanosecond at
        // most.
        let carry = cap.remainder + cap.carry;
        let extra = carry >= cap.rate;
        cap.carry = if extra { carry - cap.rate } else { carry };
        cap.next = base.saturating_add_nanos(cap.quotient + u64::from(extra));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ns(n: u64) -> Timestamp {
        Timestamp::from_nanos(n)
    }

    #[test]
    fn rue_gap_counts_from_eligibility() {
        let mut pacer = Timestamper::default();
        let gap = 3_000;
        assert!(!pacer.admit(ns(10_000), gap));
        assert_eq!(pacer.release(), Some(ns(13_000)));
        assert!(!pacer.admit(ns(12_999), gap));
        assert!(pacer.admit(ns(13_000), gap));
        assert_eq!(pacer.release(), None);
        assert!(pacer.admit(ns(13_000), 0), "fcwnd ≥ 1: no gap");
        // Eligible again later: the gap counts from then, not from the
        // departure at 13 µs.
        assert!(!pacer.admit(ns(20_000), gap));
        assert_eq!(pacer.release(), Some(ns(23_000)));
        // Cancelled (nothing waits any more), the next eligible packet starts
        // a fresh gap.
        pacer.cancel();
        assert_eq!(pacer.release(), None);
        assert!(!pacer.admit(ns(22_000), gap));
        assert_eq!(pacer.release(), Some(ns(25_000)));
        // A new gap from the RUE applies to the waiting packet.
        assert!(!pacer.admit(ns(22_500), 1_000));
        assert!(pacer.admit(ns(23_000), 1_000));
    }

    #[test]
    fn rate_cap_spaces_departures_and_carries_the_remainder() {
        let mut pacer = Timestamper::default();
        // 3 bytes at 7 bit/ns: 24/7 = 3.43 ns a packet.
        pacer.set_rate_cap(Some(7_000_000_000), Duration::ZERO);
        let mut now = ns(1_000);
        let mut departures = Vec::new();
        for _ in 0..700 {
            while !pacer.admit(now, 0) {
                now = pacer.release().unwrap();
            }
            pacer.on_departure(now, 3);
            departures.push(now.as_nanos());
        }
        // 700 packets of 24 bits at 7 bit/ns: exactly 2 400 ns from the
        // first to the 701st, so the 700th left at 2 396.6 → 2 396.
        assert_eq!(departures[699] - departures[0], 2_396);
        for pair in departures.windows(2) {
            assert!((3..=4).contains(&(pair[1] - pair[0])), "{pair:?}");
        }
    }

    #[test]
    fn mixed_frame_lengths_charge_exactly() {
        let mut pacer = Timestamper::default();
        // 3 bit/ns: 100 B = 266.67 ns, 7 B = 18.67 ns.
        pacer.set_rate_cap(Some(3_000_000_000), Duration::ZERO);
        let mut now = ns(0);
        let mut bits = 0u64;
        for k in 0..999u64 {
            while !pacer.admit(now, 0) {
                now = pacer.release().unwrap();
            }
            let bytes = if k % 3 == 0 { 7 } else { 100 };
            pacer.on_departure(now, bytes);
            bits += bytes as u64 * 8;
        }
        assert!(!pacer.admit(now, 0));
        // The next departure is the total bits at 3 bit/ns, floored.
        assert_eq!(pacer.release(), Some(ns(bits / 3)));
    }

    #[test]
    fn lateness_within_the_jitter_is_forgiven_beyond_it_not() {
        let mut pacer = Timestamper::default();
        // 1 000 bytes at 10 Gbit/s: 800 ns.
        pacer.set_rate_cap(Some(10_000_000_000), Duration::from_nanos(512));
        pacer.on_departure(ns(10_000), 1_000);
        assert!(!pacer.admit(ns(10_000), 0));
        assert_eq!(pacer.release(), Some(ns(10_800)));
        // Released 400 ns late (within a slot): charged from 10 800.
        assert!(pacer.admit(ns(11_200), 0));
        pacer.on_departure(ns(11_200), 1_000);
        assert!(!pacer.admit(ns(11_200), 0));
        assert_eq!(pacer.release(), Some(ns(11_600)));
        // Idle for long: charged from now, no burst.
        assert!(pacer.admit(ns(50_000), 0));
        pacer.on_departure(ns(50_000), 1_000);
        assert!(!pacer.admit(ns(50_000), 0));
        assert_eq!(pacer.release(), Some(ns(50_800)));
        // The RUE gap and the cap together: the later of the two.
        assert!(!pacer.admit(ns(50_100), 0), "still the cap's");
        pacer.cancel();
        assert!(!pacer.admit(ns(50_100), 1_000));
        assert_eq!(pacer.release(), Some(ns(51_100)));
        pacer.set_rate_cap(None, Duration::ZERO);
        assert!(pacer.admit(ns(51_100), 0));
        assert!(!pacer.is_rate_capped());
    }

    proptest! {
        /// Departures as a wheel of granularity `jitter` makes them: at the
        /// first slot start at or after the release, or at once if the
        /// release has passed. Never closer than the gap minus the jitter,
        /// and n packets take n − 1 gaps to within the jitter.
        #[test]
        fn never_closer_than_gap_minus_jitter(
            rate in 1_000_000u64..200_000_000_000,
            bytes in 64usize..9_000,
            jitter in 1u64..2_000,
            start in 1_000_000u64..2_000_000,
            packets in 2usize..300,
        ) {
            let mut pacer = Timestamper::default();
            pacer.set_rate_cap(Some(rate), Duration::from_nanos(jitter));
            let gap = (bytes as f64) * 8e9 / rate as f64;
            let mut now = start;
            let mut departures = Vec::new();
            for _ in 0..packets {
                if !pacer.admit(ns(now), 0) {
                    let release = pacer.release().unwrap().as_nanos();
                    prop_assert!(release > now);
                    now = release.div_ceil(jitter) * jitter;
                    prop_assert!(pacer.admit(ns(now), 0));
                }
                pacer.on_departure(ns(now), bytes);
                departures.push(now as f64);
            }
            for pair in departures.windows(2) {
                prop_assert!(pair[1] - pair[0] >= gap - jitter as f64 - 1.0);
            }
            let n = departures.len() as f64;
            let span = departures[departures.len() - 1] - departures[0];
            prop_assert!(span <= (n - 1.0) * gap + jitter as f64 + 1.0, "{span} {gap}");
            prop_assert!(span >= (n - 1.0) * gap - jitter as f64 - 1.0, "{span} {gap}");
        }
    }
}
