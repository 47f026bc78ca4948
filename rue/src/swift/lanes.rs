//! Swift's ACK/NACK arithmetic over lanes of events, for the RUE core's
//! batched path: the event-only step (target delay, smoothing, fabric window
//! and its marker, pacing gap, RTO) and the NIC window, for up to `N`
//! events at once.
//!
//! Layer: arithmetic inside [`Swift`]; no state, no counters. It computes
//! exactly, bit for bit, what the building blocks compute for one event
//! (`blocks::target_delay_from_inv_sqrt`, `smoothed`, `fabric_time_marker`,
//! `inter_packet_gap`, `retransmit_timeout`, `Fcwnd::from_f64` and Swift's
//! window rules, as `Swift::prepare_ack` and `Swift::finish_ack` compose
//! them for the per-event path): the same IEEE operations on the same
//! values, with every `if` turned into a select on values computed for
//! every lane, or an integer form proven equal (see `ack_lanes`). The unit
//! tests compare it with the per-event path on random and extreme events.
//!
//! Why: per event, that step is a dependency chain through a square root
//! and two divisions with half a dozen data-dependent rule choices. As
//! scalar code LLVM turned the choices into branches and the event-only
//! step cost ≈ 40 ns per event even alone in a tight loop over the bench's
//! events (2-core KVM AMD EPYC at ≈ 3.2 GHz, baseline x86-64). Written as
//! selects over arrays, the loops have no branches and LLVM vectorizes
//! them (two events per SSE2 register: `sqrtpd`, `divpd`, compare masks):
//! ≈ 25 ns alone. Whole `falcon bench rue` turns (callgrind, 1 000
//! connections, 2^18 distinct events, per-event push and pop): 552
//! instructions and 1.96 simulated mispredictions per event before, 593
//! and 0.64 with the lanes; more instructions, but independent ones.
//!
//! Vectorizing on SSE2 shaped the code: Rust's saturating `as` casts from
//! f64 would be split per lane (with a NaN branch each), so values are
//! clamped first and truncated with [`truncate`]; `u32 → f64` goes through
//! `exact_f64`.

use super::{AckStep, Swift, SwiftConfig, INV_LEVEL};
use crate::blocks::{exact_f64, inter_packet_gap, retransmit_timeout};
use crate::format::{
    CcEvent, DelaySelect, EventType, Fcwnd, NcwndDirection, Time24, MAX_STATE_24, TIME_MASK,
};
use crate::nack_code;

/// Fields of up to `N` events, one array per field.
struct Inputs<const N: usize> {
    rtt: [u32; N],
    delay: [u32; N],
    now: [u32; N],
    fcwnd: [u32; N],
    forward_hops: [u32; N],
    rtt_state: [u32; N],
    delay_state: [u32; N],
    acked: [u32; N],
    marker: [u32; N],
    max_decrease: [bool; N],
}

/// The event-only step of up to `N` ACK/NACK events, one array per output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AckLanes<const N: usize> {
    /// New fcwnd, packets.
    pub(crate) window: [f64; N],
    /// RTT sample, Falcon units.
    pub(crate) rtt: [u32; N],
    /// RTT for the markers: the sample or the smoothed RTT.
    pub(crate) calc_rtt: [u32; N],
    /// Target delay, Falcon units.
    pub(crate) target: [u32; N],
    pub(crate) smoothed_rtt: [u32; N],
    pub(crate) smoothed_delay: [u32; N],
    pub(crate) fabric_marker: [u32; N],
    /// New fcwnd, raw 11.10 fixed point.
    pub(crate) fcwnd: [u32; N],
    pub(crate) fabric_decreased: [bool; N],
    pub(crate) gap: [u32; N],
    pub(crate) rto: [u32; N],
}

impl<const N: usize> Default for AckLanes<N> {
    fn default() -> Self {
        AckLanes {
            window: [0.0; N],
            rtt: [0; N],
            calc_rtt: [0; N],
            target: [0; N],
            smoothed_rtt: [0; N],
            smoothed_delay: [0; N],
            fabric_marker: [0; N],
            fcwnd: [0; N],
            fabric_decreased: [false; N],
            gap: [0; N],
            rto: [0; N],
        }
    }
}

impl<const N: usize> AckLanes<N> {
    /// Lane `i` (`i < N`).
    #[inline(always)]
    pub(crate) fn step(&self, i: usize) -> AckStep {
        AckStep {
            rtt: self.rtt[i],
            calc_rtt: self.calc_rtt[i],
            target: self.target[i],
            smoothed_rtt: self.smoothed_rtt[i],
            smoothed_delay: self.smoothed_delay[i],
            fabric_marker: Time24::new(self.fabric_marker[i]),
            fcwnd: Fcwnd::from_raw(self.fcwnd[i]),
            fabric_decreased: self.fabric_decreased[i],
            gap: self.gap[i],
            rto: Time24::new(self.rto[i]),
        }
    }
}

/// The integer forms of a profile's smoothing and RTO (see `ack_lanes`).
#[derive(Clone, Copy, Debug, Default)]
struct Plain {
    /// RTT smoothing α = this / 4.
    rtt_keep_quarters: u32,
    /// RTO scalar.
    rto_multiple: u32,
}

impl Plain {
    fn of(c: &SwiftConfig) -> Option<Plain> {
        let quarters = c.rtt_smoothing_alpha * 4.0;
        let rtt_keep_quarters = quarters as u32;
        let rto_multiple = c.retransmit_timeout_scalar as u32;
        let plain = c.delay_smoothing_alpha == 0.0
            && !c.max_decrease_on_eack_nack_drop
            && !c.calc_rtt_smooth
            && f64::from(rtt_keep_quarters) == quarters
            && rtt_keep_quarters < 4
            && f64::from(rto_multiple) == c.retransmit_timeout_scalar
            && (1..=256).contains(&rto_multiple);
        plain.then_some(Plain {
            rtt_keep_quarters,
            rto_multiple,
        })
    }
}

const MAX_24_F: f64 = MAX_STATE_24 as f64;

/// 2^52: adding it to a value in 0 .. 2^52 rounds to an integer, which the
/// low bits of the sum then hold.
const TWO_52: f64 = 4_503_599_627_370_496.0;

/// `value as u32` for a `value` in 0 ..= 2^31 (callers clamp first; any
/// other value gives garbage, never a panic). Rust's `as` saturates, and
/// LLVM cannot vectorize that on SSE2 (it split every conversion into
/// per-lane code with a NaN branch); this is adds, a compare and a select.
#[inline(always)]
fn truncate(value: f64) -> u32 {
    let nearest = (value + TWO_52) - TWO_52;
    let floor = if nearest > value {
        nearest - 1.0
    } else {
        nearest
    };
    (floor + TWO_52).to_bits() as u32
}

/// `blocks::saturate_24`: NaN and ≤ 0 → 0, ≥ 2^24 − 1 → 2^24 − 1, else
/// truncated.
#[inline(always)]
fn saturate_24(value: f64) -> u32 {
    let value = if value > 0.0 { value } else { 0.0 };
    let value = if value >= MAX_24_F { MAX_24_F } else { value };
    truncate(value)
}

/// `f64::clamp` without its `min ≤ max` assertion (validated per profile).
#[inline(always)]
fn clamp(value: f64, min: f64, max: f64) -> f64 {
    let value = if value < min { min } else { value };
    if value > max {
        max
    } else {
        value
    }
}

/// `a.min(b)` for a `b` that is never NaN: a NaN `a` gives `b` both ways.
#[inline(always)]
fn min(a: f64, b: f64) -> f64 {
    if a < b {
        a
    } else {
        b
    }
}

impl Swift {
    /// The event-only step of `events` (at most `N`; lanes past the end
    /// hold garbage). Retransmit events get a (meaningless) step too.
    /// Out of line, so that its vectorized loop does not depend on the
    /// caller's inlining.
    #[inline(never)]
    pub(crate) fn prepare_acks<const N: usize>(&self, events: &[CcEvent], out: &mut AckLanes<N>) {
        let c = &self.config;
        let max_decrease_on = c.max_decrease_on_eack_nack_drop;
        let mut lanes = Inputs {
            rtt: [0; N],
            delay: [0; N],
            now: [0; N],
            fcwnd: [0; N],
            forward_hops: [0; N],
            rtt_state: [0; N],
            delay_state: [0; N],
            acked: [0; N],
            marker: [0; N],
            max_decrease: [false; N],
        };
        for (i, event) in events.iter().take(N).enumerate() {
            // blocks::packet_timing
            let rtt = event.t4.wrapping_sub(event.t1);
            lanes.rtt[i] = rtt;
            lanes.delay[i] = match event.delay_select {
                DelaySelect::Full => rtt,
                DelaySelect::Fabric => {
                    rtt.wrapping_sub(event.t3.wrapping_sub(event.t2)) & TIME_MASK
                }
                DelaySelect::Forward => event.t2.wrapping_sub(event.t1),
                DelaySelect::Reverse => event.t4.wrapping_sub(event.t3),
            };
            lanes.now[i] = event.t4.value();
            lanes.fcwnd[i] = event.fcwnd.raw();
            lanes.forward_hops[i] = u32::from(event.forward_hops);
            lanes.rtt_state[i] = event.rtt_state;
            lanes.delay_state[i] = event.delay_state;
            lanes.acked[i] = u32::from(event.num_packets_acked);
            lanes.marker[i] = event.fabric_window_time_marker.value();
            // Swift::use_max_fabric_decrease
            lanes.max_decrease[i] = max_decrease_on
                && ((event.event_type == EventType::Nack
                    && event.nack_code == nack_code::RX_WINDOW_ERROR)
                    || (event.event_type == EventType::Ack && event.eack && event.eack_drop));
        }
        match Plain::of(c) {
            Some(plain) => self.ack_lanes::<N, true>(&lanes, plain, out),
            None => self.ack_lanes::<N, false>(&lanes, Plain::default(), out),
        }
        self.paced_lanes(events.len(), out);
    }

    /// The compute loop: selects only, no calls, no branches. The pacing
    /// gap and the RTO's gap term are left to [`Swift::paced_lanes`]: a
    /// window below one packet is rare and costs two divisions.
    ///
    /// `PLAIN` is a profile (the defaults among them) whose arithmetic has
    /// an exact integer form, which the loop then uses ([`Plain`]):
    /// * no delay smoothing (α = 0): `smoothed` returns the sample (`old·0 +
    ///   sample·1` is exact and the sample is below 2^24);
    /// * RTT smoothing α = k/4: `old·k/4 + sample·(4 − k)/4` is exact in
    ///   f64 (products below 2^34 with two fractional bits), so its
    ///   saturated truncation is `min((k·old + (4 − k)·sample) >> 2, 2^24 −
    ///   1)`; an `old` at or above 2^26 saturates either way (k ≥ 1), so it
    ///   is capped there to stay within 32 bits;
    /// * an integer RTO scalar m ≤ 256: `srtt·m` is exact (below 2^32), so
    ///   the saturated RTO is `min(srtt·m, 2^24 − 1)`;
    /// * no max decrease on drops and no smoothed marker RTT.
    #[inline(always)]
    fn ack_lanes<const N: usize, const PLAIN: bool>(
        &self,
        x: &Inputs<N>,
        plain: Plain,
        out: &mut AckLanes<N>,
    ) {
        let c = &self.config;
        let Plain {
            rtt_keep_quarters,
            rto_multiple,
        } = plain;
        let p = &self.target;
        let max_flow_scaling = f64::from(p.max_flow_scaling);
        let rtt_keep = c.rtt_smoothing_alpha;
        let rtt_take = 1.0 - c.rtt_smoothing_alpha;
        let delay_keep = c.delay_smoothing_alpha;
        let delay_take = 1.0 - c.delay_smoothing_alpha;
        let max_md_factor = 1.0 - c.max_fabric_multiplicative_decrease;
        let min_rto = c.min_retransmit_timeout.min(MAX_STATE_24);
        let fixed_max = f64::from(Fcwnd::MAX_RAW);
        for i in 0..N {
            let now = x.now[i];
            let rtt = x.rtt[i];
            // Fcwnd::to_f64
            let old = exact_f64(x.fcwnd[i]) / 1024.0;

            // Swift::target_and_inverse, blocks::target_delay_from_inv_sqrt.
            let inv_sqrt = 1.0 / old.sqrt();
            let adder = p.flow_scaling_alpha * inv_sqrt + p.flow_scaling_beta;
            let adder = if adder.is_nan() { 0.0 } else { adder };
            let adder = clamp(adder, 0.0, max_flow_scaling);
            // 0 ≤ adder ≤ max_flow_scaling < 2^24; the sum < 2^26.
            let target =
                (p.base_delay + truncate(adder) + p.topo_scaling_per_hop * x.forward_hops[i])
                    .min(MAX_STATE_24);
            let inv_fcwnd = inv_sqrt * inv_sqrt;

            // blocks::smoothed
            let smoothed_rtt = if PLAIN {
                let keep = x.rtt_state[i].min(1 << 26) * rtt_keep_quarters;
                ((keep + rtt * (4 - rtt_keep_quarters)) >> 2).min(MAX_STATE_24)
            } else {
                saturate_24(exact_f64(x.rtt_state[i]) * rtt_keep + exact_f64(rtt) * rtt_take)
            };
            let delay = if PLAIN {
                x.delay[i]
            } else {
                saturate_24(
                    exact_f64(x.delay_state[i]) * delay_keep + exact_f64(x.delay[i]) * delay_take,
                )
            };
            let calc_rtt = if !PLAIN && c.calc_rtt_smooth {
                smoothed_rtt
            } else {
                rtt
            };

            // Swift::ack_fabric_window
            let delta = now.wrapping_sub(x.marker[i]) & TIME_MASK;
            let per_acked = c.fabric_additive_increment * exact_f64(x.acked[i]);
            let factor = if old >= 1.0 { inv_fcwnd } else { 1.0 };
            let increased = old + per_acked * factor;
            let scale = exact_f64(delay.saturating_sub(target)) / exact_f64(delay.max(1));
            let decrease = min(
                scale * c.fabric_multiplicative_decrease_factor,
                c.max_fabric_multiplicative_decrease,
            );
            let decreased = old * (1.0 - decrease);
            let held = if delta >= rtt { decreased } else { old };
            let window = if delay < target { increased } else { held };
            let window = clamp(window, c.min_fcwnd, c.max_fcwnd);
            let window = if PLAIN {
                window
            } else {
                // Swift::max_fabric_decrease
                let max_decreased = if delta >= rtt {
                    old * max_md_factor
                } else {
                    old
                };
                let max_decreased = clamp(max_decreased, c.min_fcwnd, c.max_fcwnd);
                if x.max_decrease[i] {
                    max_decreased
                } else {
                    window
                }
            };

            // blocks::fabric_time_marker
            let decreased = (window < old) | (window == c.min_fcwnd);
            let dragged = if delta > calc_rtt {
                now.wrapping_sub(calc_rtt) & TIME_MASK
            } else {
                x.marker[i]
            };
            let marker = if decreased { now } else { dragged };

            // blocks::retransmit_timeout without the gap term (window ≥ 1
            // means no gap; `paced_lanes` redoes the others).
            let rto = if PLAIN {
                (smoothed_rtt * rto_multiple).min(MAX_STATE_24)
            } else {
                saturate_24(exact_f64(smoothed_rtt) * c.retransmit_timeout_scalar)
            };
            let rto = rto.max(min_rto);

            // Fcwnd::from_f64
            let scaled = window * 1024.0;
            let fixed = if scaled >= fixed_max {
                Fcwnd::MAX_RAW
            } else {
                truncate(scaled + 0.5)
            };
            let fixed = if scaled >= 0.5 { fixed } else { 0 };

            out.window[i] = window;
            out.rtt[i] = rtt;
            out.calc_rtt[i] = calc_rtt;
            out.target[i] = target;
            out.smoothed_rtt[i] = smoothed_rtt;
            out.smoothed_delay[i] = delay;
            out.fabric_marker[i] = marker;
            out.fcwnd[i] = fixed;
            out.fabric_decreased[i] = window < old;
            out.gap[i] = 0;
            out.rto[i] = rto;
        }
    }

    /// The pacing gap and the RTO of the lanes whose window is below one
    /// packet (or NaN), with the building blocks themselves.
    #[inline(always)]
    fn paced_lanes<const N: usize>(&self, lanes: usize, out: &mut AckLanes<N>) {
        let c = &self.config;
        for i in 0..lanes.min(N) {
            let window = out.window[i];
            // Not `window < 1.0`: a NaN window must take this path too.
            if window >= 1.0 {
                continue;
            }
            let gap = inter_packet_gap(c.ipg_time_scalar, c.ipg_bits, window, out.calc_rtt[i]);
            out.gap[i] = gap;
            out.rto[i] = retransmit_timeout(
                c.min_retransmit_timeout,
                out.smoothed_rtt[i],
                c.retransmit_timeout_scalar,
                gap,
                c.ipg_time_scalar,
            );
        }
    }
}

/// Inputs of the NIC window of up to `N` ACK/NACK events: event fields, the
/// connection's ncwnd fraction and the RTTs of the event-only step.
pub(crate) struct NicInputs<const N: usize> {
    ncwnd: [u32; N],
    fraction: [u32; N],
    now: [u32; N],
    marker: [u32; N],
    level: [u32; N],
    inv_level: [f64; N],
    increase: [bool; N],
    exhausted: [bool; N],
}

impl<const N: usize> Default for NicInputs<N> {
    fn default() -> Self {
        NicInputs {
            ncwnd: [0; N],
            fraction: [0; N],
            now: [0; N],
            marker: [0; N],
            level: [0; N],
            inv_level: [0.0; N],
            increase: [false; N],
            exhausted: [false; N],
        }
    }
}

impl<const N: usize> NicInputs<N> {
    /// Lane `i` from an event and its connection's fraction (lanes past `N`
    /// are ignored).
    #[inline(always)]
    pub(crate) fn set(&mut self, i: usize, event: &CcEvent, fraction: u16) {
        if i >= N {
            return;
        }
        let level = event.rx_buffer_level;
        self.ncwnd[i] = u32::from(event.ncwnd);
        self.fraction[i] = u32::from(fraction);
        self.now[i] = event.t4.value();
        self.marker[i] = event.nic_window_time_marker.value();
        self.level[i] = u32::from(level);
        self.inv_level[i] = INV_LEVEL
            .get(usize::from(level))
            .copied()
            .unwrap_or_else(|| 1.0 / f64::from(level));
        self.increase[i] = event.ncwnd_direction == NcwndDirection::Increase;
        self.exhausted[i] = (event.event_type == EventType::Nack)
            & (event.nack_code == nack_code::RX_RESOURCE_EXHAUSTION);
    }
}

/// The NIC window of up to `N` ACK/NACK events.
pub(crate) struct NicLanes<const N: usize> {
    /// ncwnd before the event, with the fraction (for PLB's round).
    pub(crate) old: [f64; N],
    /// New ncwnd, integer part (the wire value).
    pub(crate) ncwnd: [u32; N],
    /// New ncwnd fraction, 1/1024 requests.
    pub(crate) fraction: [u32; N],
    pub(crate) marker: [u32; N],
    pub(crate) increase: [bool; N],
    pub(crate) decreased: [bool; N],
}

/// One lane of [`NicLanes`], as a result needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NicLane {
    pub(crate) old: f64,
    pub(crate) ncwnd: u16,
    pub(crate) fraction: u16,
    pub(crate) marker: Time24,
    pub(crate) direction: NcwndDirection,
    pub(crate) decreased: bool,
}

impl<const N: usize> NicLanes<N> {
    /// Lane `i` (`i < N`).
    #[inline(always)]
    pub(crate) fn lane(&self, i: usize) -> NicLane {
        NicLane {
            old: self.old[i],
            // ≤ 2047 and ≤ 1023 (see `nic_lanes`).
            ncwnd: self.ncwnd[i] as u16,
            fraction: self.fraction[i] as u16,
            marker: Time24::new(self.marker[i]),
            direction: if self.increase[i] {
                NcwndDirection::Increase
            } else {
                NcwndDirection::Decrease
            },
            decreased: self.decreased[i],
        }
    }
}

impl<const N: usize> Default for NicLanes<N> {
    fn default() -> Self {
        NicLanes {
            old: [0.0; N],
            ncwnd: [0; N],
            fraction: [0; N],
            marker: [0; N],
            increase: [false; N],
            decreased: [false; N],
        }
    }
}

impl Swift {
    /// [`Swift::nic_lanes`] of a batch, out of line (see `prepare_acks`).
    #[inline(never)]
    pub(crate) fn nic_batch<const N: usize>(
        &self,
        x: &NicInputs<N>,
        ack: &AckLanes<N>,
        out: &mut NicLanes<N>,
    ) {
        self.nic_lanes(x, ack, out);
    }

    /// `Swift::nic_window` and `fraction_1024` over lanes, selects only,
    /// with the RTTs of the events' [`AckLanes`].
    #[inline(always)]
    pub(crate) fn nic_lanes<const N: usize>(
        &self,
        x: &NicInputs<N>,
        ack: &AckLanes<N>,
        out: &mut NicLanes<N>,
    ) {
        let c = &self.config;
        let exhausted_factor = 1.0 - c.max_nic_multiplicative_decrease;
        let target_level = u32::from(c.target_rx_buffer_level);
        for i in 0..N {
            let now = x.now[i];
            // ncwnd_with_fraction
            let old = exact_f64(x.ncwnd[i]) + exact_f64(x.fraction[i] & 0x3FF) / 1024.0;
            let delta = now.wrapping_sub(x.marker[i]) & TIME_MASK;
            let rtt_passed = delta >= ack.rtt[i];
            let last_increase = x.increase[i];
            let exhausted_window = if last_increase | rtt_passed {
                old * exhausted_factor
            } else {
                old
            };
            let increased = if !last_increase | rtt_passed {
                old + c.nic_additive_increment
            } else {
                old
            };
            let level = x.level[i];
            let scale = exact_f64(level.saturating_sub(target_level)) * x.inv_level[i];
            let decrease = min(
                scale * c.nic_multiplicative_decrease_factor,
                c.max_nic_multiplicative_decrease,
            );
            let decreased = if rtt_passed {
                old * (1.0 - decrease)
            } else {
                old
            };
            let aimd = if level < target_level {
                increased
            } else {
                decreased
            };
            let window = if x.exhausted[i] {
                exhausted_window
            } else {
                aimd
            };
            // min_ncwnd ≥ 1 and max_ncwnd ≤ 2047 (validated) and the window
            // is never NaN, so 1 ≤ window ≤ 2047 below.
            let window = clamp(window, c.min_ncwnd, c.max_ncwnd);

            // blocks::nic_time_marker
            let calc_rtt = ack.calc_rtt[i];
            let decreased = (window < old) | (window == c.min_ncwnd);
            let increased = (window > old) | (window == c.max_ncwnd);
            let dragged = if delta > calc_rtt {
                now.wrapping_sub(calc_rtt) & TIME_MASK
            } else {
                x.marker[i]
            };
            let marker = if decreased | increased { now } else { dragged };
            let increase = if decreased {
                false
            } else if increased {
                true
            } else {
                last_increase
            };

            // `window as u16` and fraction_1024 from one truncation: for
            // 1 ≤ window ≤ 2047, window·1024 and window − ⌊window⌋ are exact,
            // so ⌊(window − ⌊window⌋)·1024⌋ = ⌊window·1024⌋ mod 1024 (below
            // 1024, so the `min(1023)` never bites) and ⌊window⌋ =
            // ⌊window·1024⌋ / 1024.
            let scaled = truncate(window * 1024.0);
            let integer = scaled >> 10;
            let fraction = scaled & 1023;

            out.old[i] = old;
            out.ncwnd[i] = integer;
            out.fraction[i] = fraction;
            out.marker[i] = marker;
            out.increase[i] = increase;
            out.decreased[i] = window < old;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::swift::{fraction_1024, ncwnd_with_fraction};

    /// A 24-bit-ish value: mostly small (realistic RTTs and delays), often
    /// anywhere in 24 bits, sometimes anywhere in 32 (beyond the wire width).
    fn state() -> impl Strategy<Value = u32> {
        prop_oneof![
            4 => 0u32..5000,
            2 => 0u32..=TIME_MASK,
            1 => any::<u32>(),
        ]
    }

    /// A window: below one packet, around the defaults, anywhere.
    fn window() -> impl Strategy<Value = u32> {
        prop_oneof![0u32..1024, 1024u32..300 << 10, 0u32..=Fcwnd::MAX_RAW]
    }

    /// Any event: realistic timings and states most of the time, every
    /// field over its whole Rust range where the arithmetic takes it.
    fn any_event() -> impl Strategy<Value = CcEvent> {
        (
            (
                0u8..3,
                any::<u32>(),
                proptest::array::uniform3(state()),
                any::<u8>(),
            ),
            (any::<u8>(), any::<u8>(), window(), any::<u16>()),
            (
                any::<u16>(),
                any::<(bool, bool)>(),
                0u8..4,
                (state(), state()),
            ),
            (any::<bool>(), (state(), state()), any::<u32>()),
        )
            .prop_map(
                |(
                    (kind, now, [rtt, turnaround, fabric], nack_code),
                    (forward_hops, rx_buffer_level, fcwnd, ncwnd),
                    (num_packets_acked, (eack, eack_drop), delay_select, (fm, nm)),
                    (increase, (delay_state, rtt_state), cc_metadata),
                )| CcEvent {
                    event_type: [EventType::Ack, EventType::Nack, EventType::Retransmit]
                        [usize::from(kind)],
                    t1: Time24::new(now.wrapping_sub(rtt)),
                    t2: Time24::new(now.wrapping_sub(rtt).wrapping_add(fabric)),
                    t3: Time24::new(
                        now.wrapping_sub(rtt)
                            .wrapping_add(fabric)
                            .wrapping_add(turnaround),
                    ),
                    t4: Time24::new(now),
                    nack_code: nack_code % 9,
                    forward_hops,
                    rx_buffer_level: rx_buffer_level % 40,
                    fcwnd: Fcwnd::from_raw(fcwnd),
                    ncwnd: ncwnd % 2048,
                    num_packets_acked: num_packets_acked % 1100,
                    eack,
                    eack_drop,
                    delay_select: [
                        DelaySelect::Full,
                        DelaySelect::Fabric,
                        DelaySelect::Forward,
                        DelaySelect::Reverse,
                    ][usize::from(delay_select)],
                    fabric_window_time_marker: Time24::new(now.wrapping_sub(fm)),
                    nic_window_time_marker: Time24::new(now.wrapping_sub(nm)),
                    ncwnd_direction: if increase {
                        NcwndDirection::Increase
                    } else {
                        NcwndDirection::Decrease
                    },
                    delay_state,
                    rtt_state,
                    cc_metadata: cc_metadata & 0xFF_FFFF,
                    ..CcEvent::default()
                },
            )
    }

    /// Profiles on both sides of `Plain::of`: the defaults, quarter and
    /// non-dyadic smoothing, integer and fractional RTO scalars, delay
    /// smoothing, max decrease, smoothed marker RTT, extreme windows.
    fn any_config() -> impl Strategy<Value = SwiftConfig> {
        (
            prop_oneof![
                Just(0.75),
                Just(0.0),
                Just(0.25),
                Just(0.5),
                Just(0.9),
                0.0..1.0
            ],
            prop_oneof![Just(0.0), Just(0.3), 0.0..1.0],
            prop_oneof![
                Just(2.0),
                Just(1.0),
                Just(3.0),
                Just(256.0),
                Just(2.5),
                1.0..300.0
            ],
            any::<(bool, bool)>(),
            prop_oneof![
                Just((0.01, 256.0)),
                Just((1.0 / 1024.0, 2047.0)),
                Just((0.5, 0.75))
            ],
            prop_oneof![Just((1.0, 256.0)), Just((1.0, 2047.0)), Just((7.0, 7.0))],
            (
                0u8..=31,
                1u8..=20,
                prop_oneof![Just(763u32), Just(0u32), Just(0xFF_FFFF)],
            ),
        )
            .prop_map(
                |(
                    rtt_alpha,
                    delay_alpha,
                    rto_scalar,
                    (max_decrease, calc_rtt_smooth),
                    (min_fcwnd, max_fcwnd),
                    (min_ncwnd, max_ncwnd),
                    (target_rx_buffer_level, ipg_bits, max_flow_scaling),
                )| SwiftConfig {
                    rtt_smoothing_alpha: rtt_alpha,
                    delay_smoothing_alpha: delay_alpha,
                    retransmit_timeout_scalar: rto_scalar,
                    max_decrease_on_eack_nack_drop: max_decrease,
                    calc_rtt_smooth,
                    min_fcwnd,
                    max_fcwnd,
                    min_ncwnd,
                    max_ncwnd,
                    target_rx_buffer_level,
                    ipg_bits,
                    max_flow_scaling,
                    ..SwiftConfig::default()
                },
            )
    }

    fn blocks_nic(swift: &Swift, event: &CcEvent, step: &AckStep, fraction: u16) -> NicLane {
        let old = ncwnd_with_fraction(event.ncwnd, fraction);
        let (window, ncwnd, marker, direction) =
            swift.nic_window(event, event.t4, old, step.rtt, step.calc_rtt);
        NicLane {
            old,
            ncwnd,
            fraction: fraction_1024(window),
            marker,
            direction,
            decreased: window < old,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// `truncate` is `as u32` over its domain.
        #[test]
        fn truncate_is_the_cast(value in 0.0..=2_147_483_648.0f64, integer in 0u32..=1 << 31) {
            prop_assert_eq!(truncate(value), value as u32);
            let exact = f64::from(integer);
            prop_assert_eq!(truncate(exact), integer);
            prop_assert_eq!(truncate(exact + 0.5), integer);
            let below = f64::from_bits(exact.to_bits().wrapping_sub(1));
            if integer > 0 {
                prop_assert_eq!(truncate(below), below as u32);
            }
        }

        /// The lanes compute, bit for bit, what the building blocks compute
        /// one event at a time: one lane, and a batch with lanes to spare.
        #[test]
        fn lanes_equal_the_blocks(
            config in any_config(),
            events in proptest::collection::vec(any_event(), 1..=32),
            fractions in proptest::collection::vec(0u16..=1023, 32),
        ) {
            prop_assume!(config.validate().is_ok());
            let swift = Swift::new(config).unwrap();
            let mut batch = AckLanes::<32>::default();
            swift.prepare_acks(&events, &mut batch);
            let mut inputs = NicInputs::<32>::default();
            for (i, (event, &fraction)) in events.iter().zip(&fractions).enumerate() {
                inputs.set(i, event, fraction);
            }
            let mut nic = NicLanes::<32>::default();
            swift.nic_lanes(&inputs, &batch, &mut nic);
            for (i, (event, &fraction)) in events.iter().zip(&fractions).enumerate() {
                let expected = swift.prepare_ack(event);
                let mut one = AckLanes::<1>::default();
                swift.prepare_acks(std::slice::from_ref(event), &mut one);
                prop_assert_eq!(one.step(0), expected, "one lane, event {:?}", event);
                prop_assert_eq!(batch.step(i), expected, "lane {}, event {:?}", i, event);
                let want = blocks_nic(&swift, event, &expected, fraction);
                let got = nic.lane(i);
                prop_assert_eq!(got.old.to_bits(), want.old.to_bits());
                prop_assert_eq!(
                    (got.ncwnd, got.fraction, got.marker, got.direction, got.decreased),
                    (want.ncwnd, want.fraction, want.marker, want.direction, want.decreased),
                    "lane {}, event {:?}", i, event
                );
            }
        }
    }

    /// Windows below one packet, at zero and NaN-free extremes go through
    /// `paced_lanes` and still match.
    #[test]
    fn paced_and_extreme_windows() {
        let swift = Swift::new(SwiftConfig {
            min_fcwnd: 1.0 / 1024.0,
            ..SwiftConfig::default()
        })
        .unwrap();
        for raw in [0, 1, 2, 511, 512, 1023, 1024, 1025, Fcwnd::MAX_RAW] {
            for rtt in [0u32, 1, 150, 4000, TIME_MASK] {
                let event = CcEvent {
                    t1: Time24::new(10_000u32.wrapping_sub(rtt)),
                    t2: Time24::new(10_000u32.wrapping_sub(rtt / 2)),
                    t3: Time24::new(10_000u32.wrapping_sub(rtt / 3)),
                    t4: Time24::new(10_000),
                    fcwnd: Fcwnd::from_raw(raw),
                    rtt_state: rtt,
                    delay_state: rtt / 2,
                    num_packets_acked: 3,
                    ..CcEvent::default()
                };
                let mut lanes = AckLanes::<1>::default();
                swift.prepare_acks(std::slice::from_ref(&event), &mut lanes);
                assert_eq!(lanes.step(0), swift.prepare_ack(&event), "{event:?}");
            }
        }
    }
}
