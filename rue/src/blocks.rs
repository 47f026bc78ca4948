//! Building blocks shared by the algorithms (Linux exports `tcp_slow_start`
//! the same way): packet timing from the four timestamps, the EWMA, the
//! Swift target delay, the wrap-safe window guards (time markers), the
//! pacing gap and the retransmit timeout.
//!
//! Layer: pure arithmetic on event fields. Every function is total: no
//! input makes it panic; results saturate to their field widths. Nothing
//! here keeps state, reads a clock or allocates.

use crate::format::{CcEvent, DelaySelect, NcwndDirection, Time24, MAX_STATE_24};

/// RTT and delay samples of one ACK/NACK event, in Falcon time units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketTiming {
    /// `t4 − t1` modulo 2^24, Falcon units.
    pub rtt: u32,
    /// The delay chosen by `delay_select`, modulo 2^24, Falcon units.
    pub delay: u32,
}

/// The RTT and delay samples of an event (OCP Falcon 0.9 §10.6.2.1
/// `delay_select`; isekai `GetPacketTiming`). All differences are modulo 2^24.
pub fn packet_timing(event: &CcEvent) -> PacketTiming {
    let rtt = event.t4.wrapping_sub(event.t1);
    let delay = match event.delay_select {
        DelaySelect::Full => rtt,
        DelaySelect::Fabric => {
            Time24::new(rtt).wrapping_sub(Time24::new(event.t3.wrapping_sub(event.t2)))
        }
        DelaySelect::Forward => event.t2.wrapping_sub(event.t1),
        DelaySelect::Reverse => event.t4.wrapping_sub(event.t3),
    };
    PacketTiming { rtt, delay }
}

/// EWMA with `alpha` weighting the *old* value: `old·α + sample·(1 − α)`,
/// truncated to an integer and saturated to 24 bits.
///
/// spec/rue.md §1.11 item 3 / spec/falcon.md §9 item 5: OCP Falcon 0.9
/// §10.1 writes the weight on the sample, §10.3.4 `GetSmoothed` on the old
/// value; we follow §10.3.4 and isekai (α = 0 means no smoothing).
pub fn smoothed(alpha: f64, old: u32, sample: u32) -> u32 {
    let value = old as f64 * alpha + sample as f64 * (1.0 - alpha);
    saturate_24(value)
}

/// The flow-scaling constants (α_fs, β_fs) of a profile: the adder is
/// `max_flow_scaling` at `min_window` and 0 at `max_window`, following
/// 1/√fcwnd in between.
///
/// spec/rue.md §1.11 item 2: OCP Falcon 0.9 §10.3.4 `Initialize()` writes
/// `sqrt(min) − sqrt(max)` in the denominator (the PDF text reads so too); it
/// is a typo, the curve only meets its end points with reciprocals, which
/// isekai and htsim use. We follow isekai.
pub fn flow_scaling_constants(
    max_flow_scaling: u32,
    min_window: f64,
    max_window: f64,
) -> (f64, f64) {
    let alpha = max_flow_scaling as f64 / (1.0 / min_window.sqrt() - 1.0 / max_window.sqrt());
    let beta = -alpha / max_window.sqrt();
    (alpha, beta)
}

/// Inputs of the Swift target delay that come from the profile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TargetDelayParams {
    /// Base target delay, Falcon units.
    pub base_delay: u32,
    /// Topology scaling per forward hop, Falcon units.
    pub topo_scaling_per_hop: u32,
    /// Flow-scaling α_fs, Falcon units × √packets.
    pub flow_scaling_alpha: f64,
    /// Flow-scaling β_fs, Falcon units.
    pub flow_scaling_beta: f64,
    /// Largest flow-scaling adder, Falcon units.
    pub max_flow_scaling: u32,
}

/// Swift's target delay for a window and a hop count, in Falcon units,
/// saturated to 24 bits (OCP Falcon 0.9 §10.3.4 `FabricDelayTarget`; isekai
/// `GetTargetDelay`).
///
/// The flow-scaling adder is clamped in f64 and then truncated (spec/rue.md
/// §1.2: isekai truncates before clamping, which is only safe for fcwnd ≤
/// the flow-scaling window; clamping first is the same for every in-range
/// window and total for the rest). A zero window gives the maximum adder.
pub fn target_delay(params: &TargetDelayParams, fcwnd: f64, forward_hops: u8) -> u32 {
    target_delay_from_inv_sqrt(params, 1.0 / fcwnd.sqrt(), forward_hops)
}

/// [`target_delay`] from `1/√fcwnd`, which Swift computes once per event
/// and also squares into `1/fcwnd` for the additive increase (one division
/// fewer on the hot path).
pub fn target_delay_from_inv_sqrt(
    params: &TargetDelayParams,
    inv_sqrt_fcwnd: f64,
    forward_hops: u8,
) -> u32 {
    let adder = params.flow_scaling_alpha * inv_sqrt_fcwnd + params.flow_scaling_beta;
    let adder = if adder.is_nan() {
        0.0
    } else {
        adder.clamp(0.0, params.max_flow_scaling as f64)
    };
    // 0 ≤ adder ≤ max_flow_scaling < 2^24: the u32 conversion is exact.
    let target = u64::from(params.base_delay)
        + u64::from(adder as u32)
        + u64::from(params.topo_scaling_per_hop) * u64::from(forward_hops);
    target.min(u64::from(MAX_STATE_24)) as u32
}

/// `now − marker` modulo 2^24 (isekai `GetWindowDelta`).
pub fn window_delta(now: Time24, marker: Time24) -> u32 {
    now.wrapping_sub(marker)
}

/// The new fabric window time marker (OCP Falcon 0.9 §10.3.6; isekai
/// `GetFabricWindowTimeMarker`): `now` when the window decreased or sits at
/// its minimum, otherwise dragged to `now − rtt` once it is more than one
/// RTT old, so that a later decrease is judged correctly even when the
/// previous one is more than a 2^24 wrap epoch back.
pub fn fabric_time_marker(
    now: Time24,
    marker: Time24,
    rtt: u32,
    old_window: f64,
    new_window: f64,
    min_window: f64,
) -> Time24 {
    // Selects rather than branches (as `Swift::ack_fabric_window`).
    let decreased = (new_window < old_window) | (new_window == min_window);
    let dragged = if window_delta(now, marker) > rtt {
        now.wrapping_sub_units(rtt)
    } else {
        marker
    };
    if decreased {
        now
    } else {
        dragged
    }
}

/// The new NIC window time marker and direction (OCP Falcon 0.9 §10.3.6;
/// isekai `GetNicWindowGuardInfo`, Gen1): a decrease (or sitting at the
/// minimum) stamps `now` and direction Decrease, an increase (or sitting at
/// the maximum) stamps `now` and Increase; otherwise the direction stays and
/// the marker is dragged to `now − rtt` once it is more than one RTT old.
#[allow(clippy::too_many_arguments)] // mirrors the spec's guard inputs one to one
pub fn nic_time_marker(
    now: Time24,
    marker: Time24,
    rtt: u32,
    direction: NcwndDirection,
    old_window: f64,
    new_window: f64,
    min_window: f64,
    max_window: f64,
) -> (Time24, NcwndDirection) {
    // Selects rather than branches (as `Swift::ack_fabric_window`).
    let decreased = (new_window < old_window) | (new_window == min_window);
    let increased = (new_window > old_window) | (new_window == max_window);
    let dragged = if window_delta(now, marker) > rtt {
        now.wrapping_sub_units(rtt)
    } else {
        marker
    };
    let changed = decreased | increased;
    let marker = if changed { now } else { dragged };
    let direction = if decreased {
        NcwndDirection::Decrease
    } else if increased {
        NcwndDirection::Increase
    } else {
        direction
    };
    (marker, direction)
}

/// The pacing gap, in timing-wheel units, saturated to `ipg_bits`: 0 when
/// `fcwnd ≥ 1`, otherwise `round((rtt/fcwnd − rtt) × ipg_time_scalar)`.
///
/// The datapath releases a paced packet at `now + gap`, where `now` is when
/// the single outstanding packet's ACK let the next one go (≈ one RTT after
/// the previous send), so packets leave every `rtt/fcwnd`. OCP Falcon 0.9
/// §10.6.2.1 `inter_packet_gap`: "to achieve R (pps), set ipg = 1/R −
/// target_RTT"; isekai `GetInterPacketGap` subtracts the RTT the same way.
/// spec/rue.md §1.6 omits the subtraction (and its 410-unit example); we
/// follow the PDF and isekai. §10.3.4's `ComputeInterPacketGap` branch on
/// the previous gap is not followed (isekai does not either).
///
/// `ipg_time_scalar` converts Falcon units to timing-wheel units
/// (131.072 ns / 512 ns = 0.256). A window ≤ 0 gives the largest gap.
pub fn inter_packet_gap(ipg_time_scalar: f64, ipg_bits: u8, fcwnd: f64, rtt: u32) -> u32 {
    if fcwnd >= 1.0 {
        return 0;
    }
    let max = (1u64 << ipg_bits.min(20)) - 1;
    if fcwnd.is_nan() || fcwnd <= 0.0 {
        return max as u32;
    }
    let gap = (rtt as f64 / fcwnd - rtt as f64) * ipg_time_scalar;
    if gap.is_nan() || gap < 0.5 {
        return 0;
    }
    // Round half away from zero (no libm `round` call on the hot path).
    ((gap + 0.5) as u64).min(max) as u32
}

/// The retransmit timeout, in Falcon units: `srtt × scalar` plus the pacing
/// gap converted back to Falcon units (so the timer starts after pacing has
/// released the packet), saturated to 24 bits, at least `min_rto`.
///
/// spec/rue.md §1.11 item 7: OCP Falcon 0.9 §10.3.2 has the first term only;
/// we follow isekai `GetRetransmitTimeout` and add the gap.
pub fn retransmit_timeout(
    min_rto: u32,
    smoothed_rtt: u32,
    rto_scalar: f64,
    inter_packet_gap: u32,
    ipg_time_scalar: f64,
) -> u32 {
    let mut rto = smoothed_rtt as f64 * rto_scalar;
    // The division only when pacing (fcwnd < 1), which is rare.
    if inter_packet_gap > 0 && ipg_time_scalar > 0.0 {
        rto += inter_packet_gap as f64 / ipg_time_scalar;
    }
    saturate_24(rto).max(min_rto.min(MAX_STATE_24))
}

/// `x as f64`, exactly: `(2^52 + x) − 2^52`, both steps exact for any
/// `u32`. LLVM vectorizes this on baseline x86-64 (SSE2 has no unsigned
/// 32-bit conversion), which the lanes of Swift's batched step rely on.
#[inline(always)]
pub fn exact_f64(x: u32) -> f64 {
    const TWO_52: u64 = 0x4330_0000_0000_0000;
    f64::from_bits(TWO_52 | u64::from(x)) - f64::from_bits(TWO_52)
}

/// A non-negative f64 truncated to an integer and saturated to 24 bits; NaN
/// and negatives become 0.
pub fn saturate_24(value: f64) -> u32 {
    if value.is_nan() || value <= 0.0 {
        return 0;
    }
    if value >= MAX_STATE_24 as f64 {
        return MAX_STATE_24;
    }
    value as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn isekai_defaults() -> TargetDelayParams {
        let (alpha, beta) = flow_scaling_constants(763, 0.1, 256.0);
        TargetDelayParams {
            base_delay: 191,
            topo_scaling_per_hop: 8,
            flow_scaling_alpha: alpha,
            flow_scaling_beta: beta,
            max_flow_scaling: 763,
        }
    }

    #[test]
    fn exact_f64_is_the_conversion() {
        let mut x = 0x9e37_79b9u32;
        for value in [0, 1, 2, 1 << 24, (1 << 24) - 1, u32::MAX - 1, u32::MAX] {
            assert_eq!(exact_f64(value).to_bits(), f64::from(value).to_bits());
        }
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            assert_eq!(exact_f64(x).to_bits(), f64::from(x).to_bits());
        }
    }

    //= spec/rue.md §1.2 (worked numbers with isekai defaults)
    #[test]
    fn flow_scaling_constants_golden() {
        let (alpha, beta) = flow_scaling_constants(763, 0.1, 256.0);
        assert!((alpha - 246.15).abs() < 0.01, "{alpha}");
        assert!((beta + 15.38).abs() < 0.01, "{beta}");
    }

    //= spec/rue.md §1.2: adder 763 / 333 / 231 / 108 / 28 / 0 at
    //= fcwnd 0.1 / 0.5 / 1 / 4 / 32 / 256; targets 445, 259, 691.
    #[test]
    fn target_delay_golden() {
        let p = isekai_defaults();
        let adder = |w: f64| target_delay(&p, w, 0) - 191;
        assert_eq!(adder(0.1), 763);
        assert_eq!(adder(0.5), 332); // 332.7 truncated (the note rounds to 333)
        assert_eq!(adder(1.0), 230); // 230.8 truncated (the note rounds to 231)
        assert_eq!(adder(4.0), 107); // 107.7 truncated (the note rounds to 108)
        assert_eq!(adder(32.0), 28);
        assert_eq!(adder(256.0), 0);
        assert_eq!(target_delay(&p, 1.0, 3), 445);
        assert_eq!(target_delay(&p, 32.0, 5), 259);
        assert_eq!(target_delay(&p, 0.25, 3), 691);
        // Out-of-range windows stay total.
        assert_eq!(target_delay(&p, 0.0, 0), 191 + 763);
        assert_eq!(target_delay(&p, 2048.0, 15), 191 + 120);
    }

    //= spec/rue.md §2.4: time marker rules with wrap.
    #[test]
    fn fabric_marker_rules() {
        let now = Time24::new(1000);
        // Decrease stamps now.
        assert_eq!(
            fabric_time_marker(now, Time24::new(900), 50, 10.0, 5.0, 0.01),
            now
        );
        // At the minimum counts as a decrease.
        assert_eq!(
            fabric_time_marker(now, Time24::new(900), 50, 0.01, 0.01, 0.01),
            now
        );
        // Increase, marker older than an RTT: dragged to now − rtt.
        assert_eq!(
            fabric_time_marker(now, Time24::new(900), 50, 5.0, 6.0, 0.01),
            Time24::new(950)
        );
        // Increase within an RTT: unchanged.
        assert_eq!(
            fabric_time_marker(now, Time24::new(980), 50, 5.0, 6.0, 0.01),
            Time24::new(980)
        );
        // Across the wrap: marker 2^24 − 100 is 1100 units before 1000.
        let old = Time24::new((1 << 24) - 100);
        assert_eq!(
            fabric_time_marker(now, old, 400, 5.0, 6.0, 0.01),
            Time24::new(600)
        );
        // now − rtt wraps below zero.
        assert_eq!(
            fabric_time_marker(
                Time24::new(10),
                Time24::new((1 << 24) - 500),
                50,
                5.0,
                6.0,
                0.01
            ),
            Time24::new((1 << 24) - 40)
        );
    }

    #[test]
    fn nic_marker_rules() {
        use NcwndDirection::*;
        let now = Time24::new(1000);
        let m = Time24::new(900);
        assert_eq!(
            nic_time_marker(now, m, 50, Increase, 10.0, 9.0, 1.0, 256.0),
            (now, Decrease)
        );
        assert_eq!(
            nic_time_marker(now, m, 50, Increase, 1.0, 1.0, 1.0, 256.0),
            (now, Decrease)
        );
        assert_eq!(
            nic_time_marker(now, m, 50, Decrease, 10.0, 11.0, 1.0, 256.0),
            (now, Increase)
        );
        assert_eq!(
            nic_time_marker(now, m, 50, Decrease, 256.0, 256.0, 1.0, 256.0),
            (now, Increase)
        );
        assert_eq!(
            nic_time_marker(now, m, 50, Decrease, 10.0, 10.0, 1.0, 256.0),
            (Time24::new(950), Decrease)
        );
        assert_eq!(
            nic_time_marker(now, m, 200, Increase, 10.0, 10.0, 1.0, 256.0),
            (m, Increase)
        );
    }

    //= spec/rue.md §1.6 example: fcwnd 0.25, rtt 400 units. rtt/fcwnd = 1600
    //= units; with the PDF's "− target_RTT" the gap is 1200 × 0.256 = 307.2.
    #[test]
    fn inter_packet_gap_golden() {
        assert_eq!(inter_packet_gap(0.256, 16, 0.25, 400), 307);
        assert_eq!(inter_packet_gap(0.256, 16, 1.0, 400), 0);
        assert_eq!(inter_packet_gap(0.256, 16, 5.0, 400), 0);
        // Saturates at 2^16 − 1.
        assert_eq!(inter_packet_gap(0.256, 16, 0.001, 1 << 23), 65_535);
        assert_eq!(inter_packet_gap(0.256, 16, 0.0, 400), 65_535);
    }

    //= spec/rue.md §1.5 example: srtt 400, fipg 410 → 800 + 1601 = 2401 →
    //= clamped to the 7629-unit (≈ 1 ms) minimum.
    #[test]
    fn retransmit_timeout_golden() {
        assert_eq!(retransmit_timeout(7629, 400, 2.0, 410, 0.256), 7629);
        assert_eq!(retransmit_timeout(1, 400, 2.0, 410, 0.256), 2401);
        assert_eq!(retransmit_timeout(1, 1 << 23, 4.0, 0, 0.256), MAX_STATE_24);
    }

    #[test]
    fn timing_selects_the_delay() {
        let mut ev = CcEvent {
            t1: Time24::new(100),
            t2: Time24::new(150),
            t3: Time24::new(170),
            t4: Time24::new(260),
            ..CcEvent::default()
        };
        ev.delay_select = DelaySelect::Full;
        assert_eq!(
            packet_timing(&ev),
            PacketTiming {
                rtt: 160,
                delay: 160
            }
        );
        ev.delay_select = DelaySelect::Fabric;
        assert_eq!(packet_timing(&ev).delay, 140);
        ev.delay_select = DelaySelect::Forward;
        assert_eq!(packet_timing(&ev).delay, 50);
        ev.delay_select = DelaySelect::Reverse;
        assert_eq!(packet_timing(&ev).delay, 90);
        // Across the wrap.
        ev.t1 = Time24::new((1 << 24) - 60);
        ev.delay_select = DelaySelect::Full;
        assert_eq!(packet_timing(&ev).rtt, 320);
    }

    #[test]
    fn smoothing_weights_the_old_value() {
        assert_eq!(smoothed(0.75, 400, 800), 500);
        assert_eq!(smoothed(0.0, 400, 800), 800);
        assert_eq!(smoothed(0.75, MAX_STATE_24, MAX_STATE_24), MAX_STATE_24);
    }
}
