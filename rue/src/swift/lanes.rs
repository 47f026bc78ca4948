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
//! every lane, or an integer form proven equal (see `gather` and
//! `window_lanes`). The unit tests compare it with the per-event path on
//! random and extreme events.
//!
//! Why: per event, that step is a dependency chain through a square root
//! and two divisions with half a dozen data-dependent rule choices. As
//! scalar code LLVM turned the choices into branches and the event-only
//! step cost ≈ 40 ns per event even alone in a tight loop over the bench's
//! events (2-core KVM AMD EPYC at ≈ 3.2 GHz, baseline x86-64). Written as
//! selects over arrays, the loops have no branches and LLVM vectorizes
//! them (two events per SSE2 register: `sqrtpd`, `divpd`, compare masks).
//!
//! The work is split by what each side of the split does cheaply. Baseline
//! x86-64 is SSE2, which has no unsigned 32-bit compare, minimum or
//! conversion to or from f64, and no blend: over lanes, each such integer
//! step took 3 to 6 instructions per pair of events (sign flips, shuffles
//! between 32- and 64-bit lanes, and/andnot/or), while a scalar conversion
//! or integer step is one instruction. So a scalar gather loop does every
//! integer step that depends on the event alone (RTT and delay samples,
//! smoothing, time deltas, dragged markers, the RTO) and converts the
//! inputs of the window arithmetic to f64 once; the compute loop is pure
//! f64 (integer values below 2^53 are exact there, and their compares,
//! minima and floors are the integer ones); its integer-valued outputs go
//! back to `u32` with one add (`exact_u32`) where a result is assembled.
//! Compares that depend on the data (an RTT elapsed, a level below its target)
//! stay in the compute loop: made in the gather, LLVM turns them into branches.

use super::{AckStep, Swift, SwiftConfig, INV_LEVEL};
use crate::blocks::{inter_packet_gap, retransmit_timeout, smoothed};
use crate::format::{
    CcEvent, DelaySelect, EventType, Fcwnd, NcwndDirection, Time24, MAX_STATE_24, TIME_MASK,
};
use crate::nack_code;

/// The inputs of the compute loop, one f64 array per field (flags are 1.0
/// or 0.0), converted by the gather (`cvtsi2sd`, one instruction).
struct Inputs<const N: usize> {
    /// fcwnd before the event, raw 11.10 fixed point.
    fcwnd: [f64; N],
    /// Base delay plus the per-hop scaling of the event's hop count.
    base_hops: [f64; N],
    /// Delay for the fabric window (the smoothed delay), Falcon units.
    delay: [f64; N],
    /// RTT sample, Falcon units.
    rtt: [f64; N],
    /// `now − fabric marker`, 24 bits.
    fabric_delta: [f64; N],
    acked: [f64; N],
    /// The max-decrease rule applies.
    max_decrease: [f64; N],
    /// ncwnd before the event, integer part.
    ncwnd: [f64; N],
    /// The connection's ncwnd fraction, 1/1024 requests.
    fraction: [f64; N],
    /// `now − NIC marker`, 24 bits.
    nic_delta: [f64; N],
    /// The NIC decrease's scale: excess RX buffer level / level.
    nic_scale: [f64; N],
    /// The peer's RX buffer level.
    level: [f64; N],
    /// The last ncwnd change was an increase.
    increase: [f64; N],
    /// A resource-exhaustion NACK.
    exhausted: [f64; N],
}

impl<const N: usize> Default for Inputs<N> {
    fn default() -> Self {
        Inputs {
            fcwnd: [0.0; N],
            base_hops: [0.0; N],
            delay: [0.0; N],
            rtt: [0.0; N],
            fabric_delta: [0.0; N],
            acked: [0.0; N],
            max_decrease: [0.0; N],
            ncwnd: [0.0; N],
            fraction: [0.0; N],
            nic_delta: [0.0; N],
            nic_scale: [0.0; N],
            level: [0.0; N],
            increase: [0.0; N],
            exhausted: [0.0; N],
        }
    }
}

/// The event-only step of up to `N` ACK/NACK events, one array per output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AckLanes<const N: usize> {
    // From the gather.
    /// RTT sample, Falcon units.
    rtt: [u32; N],
    /// RTT for the markers: the sample or the smoothed RTT.
    calc_rtt: [u32; N],
    smoothed_rtt: [u32; N],
    smoothed_delay: [u32; N],
    /// The event's `t4`.
    now: [u32; N],
    /// The fabric marker when the window neither decreased nor sits at its
    /// minimum.
    dragged: [u32; N],
    gap: [u32; N],
    rto: [u32; N],
    // From the compute loop.
    /// New fcwnd, packets.
    window: [f64; N],
    /// Target delay, Falcon units (an integer).
    target: [f64; N],
    /// New fcwnd, raw 11.10 fixed point (an integer).
    fcwnd: [f64; N],
    /// Flag: the fabric marker moves to now.
    marker_now: [f64; N],
    /// Flag: the fabric window decreased.
    decreased: [f64; N],
}

impl<const N: usize> Default for AckLanes<N> {
    fn default() -> Self {
        AckLanes {
            rtt: [0; N],
            calc_rtt: [0; N],
            smoothed_rtt: [0; N],
            smoothed_delay: [0; N],
            now: [0; N],
            dragged: [0; N],
            gap: [0; N],
            rto: [0; N],
            window: [0.0; N],
            target: [0.0; N],
            fcwnd: [0.0; N],
            marker_now: [0.0; N],
            decreased: [0.0; N],
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
            target: self.target(i),
            smoothed_rtt: self.smoothed_rtt[i],
            smoothed_delay: self.smoothed_delay[i],
            fabric_marker: self.marker(i),
            fcwnd: self.fcwnd(i),
            fabric_decreased: self.decreased(i),
            gap: self.gap[i],
            rto: self.rto(i),
        }
    }

    #[inline(always)]
    pub(crate) fn target(&self, i: usize) -> u32 {
        exact_u32(self.target[i])
    }

    #[inline(always)]
    pub(crate) fn fcwnd(&self, i: usize) -> Fcwnd {
        Fcwnd::from_raw(exact_u32(self.fcwnd[i]))
    }

    /// The new fabric window time marker.
    #[inline(always)]
    pub(crate) fn marker(&self, i: usize) -> Time24 {
        Time24::new(if is(self.marker_now[i]) {
            self.now[i]
        } else {
            self.dragged[i]
        })
    }

    #[inline(always)]
    pub(crate) fn decreased(&self, i: usize) -> bool {
        is(self.decreased[i])
    }

    #[inline(always)]
    pub(crate) fn gap(&self, i: usize) -> u32 {
        self.gap[i]
    }

    #[inline(always)]
    pub(crate) fn rto(&self, i: usize) -> Time24 {
        Time24::new(self.rto[i])
    }

    #[inline(always)]
    pub(crate) fn smoothed_rtt(&self, i: usize) -> u32 {
        self.smoothed_rtt[i]
    }

    #[inline(always)]
    pub(crate) fn smoothed_delay(&self, i: usize) -> u32 {
        self.smoothed_delay[i]
    }
}

/// The NIC window of up to `N` ACK/NACK events.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NicLanes<const N: usize> {
    /// The NIC marker when the window neither changed nor sits at a bound
    /// (from the gather).
    dragged: [u32; N],
    /// ncwnd before the event, with the fraction (for PLB's round).
    old: [f64; N],
    /// ⌊new ncwnd · 1024⌋ (an integer).
    scaled: [f64; N],
    /// Flag: the NIC marker moves to now.
    marker_now: [f64; N],
    /// Flag: the new direction is an increase.
    increase: [f64; N],
    /// Flag: the NIC window decreased.
    decreased: [f64; N],
}

impl<const N: usize> Default for NicLanes<N> {
    fn default() -> Self {
        NicLanes {
            dragged: [0; N],
            old: [0.0; N],
            scaled: [0.0; N],
            marker_now: [0.0; N],
            increase: [0.0; N],
            decreased: [0.0; N],
        }
    }
}

impl<const N: usize> NicLanes<N> {
    /// ncwnd before the event, with the fraction.
    #[inline(always)]
    pub(crate) fn old(&self, i: usize) -> f64 {
        self.old[i]
    }

    /// New ncwnd: the integer part (the wire value) and the fraction,
    /// 1/1024 requests, from one truncation: for 1 ≤ window ≤ 2047,
    /// window·1024 and window − ⌊window⌋ are exact, so ⌊(window −
    /// ⌊window⌋)·1024⌋ = ⌊window·1024⌋ mod 1024 (below 1024, so
    /// `fraction_1024`'s `min(1023)` never bites) and ⌊window⌋ =
    /// ⌊window·1024⌋ / 1024, at most 2047.
    #[inline(always)]
    pub(crate) fn ncwnd(&self, i: usize) -> (u16, u16) {
        let scaled = exact_u32(self.scaled[i]);
        ((scaled >> 10) as u16, (scaled & 1023) as u16)
    }

    /// The new NIC window time marker, with the lane's ACK step.
    #[inline(always)]
    pub(crate) fn marker(&self, ack: &AckLanes<N>, i: usize) -> Time24 {
        Time24::new(if is(self.marker_now[i]) {
            ack.now[i]
        } else {
            self.dragged[i]
        })
    }

    #[inline(always)]
    pub(crate) fn direction(&self, i: usize) -> NcwndDirection {
        if is(self.increase[i]) {
            NcwndDirection::Increase
        } else {
            NcwndDirection::Decrease
        }
    }

    #[inline(always)]
    pub(crate) fn decreased(&self, i: usize) -> bool {
        is(self.decreased[i])
    }
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

/// The integer forms of a profile's smoothing and RTO (see `gather`).
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

/// ⌊value⌋ for a `value` in 0 .. 2^52 (garbage, never a panic, otherwise):
/// adds, a compare and a select, where SSE2 has no `roundpd`.
#[inline(always)]
fn floor(value: f64) -> f64 {
    let nearest = (value + TWO_52) - TWO_52;
    if nearest > value {
        nearest - 1.0
    } else {
        nearest
    }
}

/// `value as u32` for an integer `value` in 0 .. 2^32 (garbage otherwise):
/// its low bits after adding 2^52, one add where Rust's saturating `as`
/// takes half a dozen instructions.
#[inline(always)]
fn exact_u32(value: f64) -> u32 {
    (value + TWO_52).to_bits() as u32
}

/// `value as u32` for a `value` in 0 ..= 2^31 (callers clamp first).
#[cfg(test)]
fn truncate(value: f64) -> u32 {
    exact_u32(floor(value))
}

/// A flag lane: 1.0 or 0.0, in the scalar gather. Only for flags that
/// are rare or steady: LLVM turns this into a branch, so data-dependent
/// compares (an RTT elapsed, a level below its target) are made in the
/// compute loop instead, on converted values.
#[inline(always)]
fn flag(value: bool) -> f64 {
    f64::from(u8::from(value))
}

/// A flag lane in the compute loop: a compare mask and 1.0 (`andpd`).
#[inline(always)]
fn mask(value: bool) -> f64 {
    if value {
        1.0
    } else {
        0.0
    }
}

/// Whether a flag lane is set.
#[inline(always)]
fn is(flag: f64) -> bool {
    flag > 0.0
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

/// Swift's whole ACK/NACK step of up to `N` events: the gathered inputs,
/// the event-only step and the NIC window. The RUE core keeps one and
/// reuses it batch after batch: lanes past a batch's end hold what an earlier
/// batch left there (they are not zeroed: 4.3 KiB per batch of 32).
#[derive(Default)]
pub(crate) struct BatchLanes<const N: usize> {
    inputs: Inputs<N>,
    pub(crate) ack: AckLanes<N>,
    pub(crate) nic: NicLanes<N>,
}

impl<const N: usize> BatchLanes<N> {
    /// Lane `i` of the NIC window (`i < N`).
    #[cfg(test)]
    fn nic_lane(&self, i: usize) -> NicLane {
        let (ncwnd, fraction) = self.nic.ncwnd(i);
        NicLane {
            old: self.nic.old(i),
            ncwnd,
            fraction,
            marker: self.nic.marker(&self.ack, i),
            direction: self.nic.direction(i),
            decreased: self.nic.decreased(i),
        }
    }
}

impl Swift {
    /// The event-only step and the NIC window of `events` (at most `N`;
    /// lanes past the end hold garbage), event `i` with the connection's
    /// ncwnd fraction `fractions[i]`. Retransmit events get a (meaningless)
    /// step too. Out of line, so that its vectorized loop does not depend
    /// on the caller's inlining.
    #[inline(never)]
    pub(crate) fn prepare_batch<const N: usize>(
        &self,
        events: &[CcEvent],
        fractions: &[u16; N],
        out: &mut BatchLanes<N>,
    ) {
        let c = &self.config;
        match Plain::of(c) {
            Some(plain) => {
                self.gather::<N, true>(events, fractions, plain, out);
                self.window_lanes::<N, true>(out);
            }
            None => {
                self.gather::<N, false>(events, fractions, Plain::default(), out);
                self.window_lanes::<N, false>(out);
            }
        }
        self.paced_lanes(events.len(), &mut out.ack);
    }

    /// The scalar loop: every integer step that depends on the event alone,
    /// into the ACK and NIC lanes, and the compute loop's inputs as f64.
    ///
    /// `PLAIN` is a profile (the defaults among them) whose smoothing and
    /// RTO have an exact integer form, which the loop then uses ([`Plain`]):
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
    ///
    /// Other profiles call `blocks::smoothed` and `retransmit_timeout`.
    #[inline(always)]
    fn gather<const N: usize, const PLAIN: bool>(
        &self,
        events: &[CcEvent],
        fractions: &[u16; N],
        plain: Plain,
        out: &mut BatchLanes<N>,
    ) {
        let c = &self.config;
        let p = &self.target;
        let Plain {
            rtt_keep_quarters,
            rto_multiple,
        } = plain;
        let min_rto = c.min_retransmit_timeout.min(MAX_STATE_24);
        let max_decrease_on = c.max_decrease_on_eack_nack_drop;
        let target_level = u32::from(c.target_rx_buffer_level);
        let BatchLanes {
            inputs: x,
            ack,
            nic,
        } = out;
        for (i, (event, &fraction)) in events.iter().zip(fractions).enumerate() {
            let now = event.t4;
            // blocks::packet_timing
            let rtt = event.t4.wrapping_sub(event.t1);
            let delay = match event.delay_select {
                DelaySelect::Full => rtt,
                DelaySelect::Fabric => {
                    rtt.wrapping_sub(event.t3.wrapping_sub(event.t2)) & TIME_MASK
                }
                DelaySelect::Forward => event.t2.wrapping_sub(event.t1),
                DelaySelect::Reverse => event.t4.wrapping_sub(event.t3),
            };
            // blocks::smoothed
            let smoothed_rtt = if PLAIN {
                let keep = event.rtt_state.min(1 << 26) * rtt_keep_quarters;
                ((keep + rtt * (4 - rtt_keep_quarters)) >> 2).min(MAX_STATE_24)
            } else {
                smoothed(c.rtt_smoothing_alpha, event.rtt_state, rtt)
            };
            let delay = if PLAIN {
                delay
            } else {
                smoothed(c.delay_smoothing_alpha, event.delay_state, delay)
            };
            let calc_rtt = if !PLAIN && c.calc_rtt_smooth {
                smoothed_rtt
            } else {
                rtt
            };
            // blocks::fabric_time_marker and nic_time_marker, the dragged
            // marker (the compute loop picks between it and now).
            let drag = |marker: Time24| {
                if now.wrapping_sub(marker) > calc_rtt {
                    now.value().wrapping_sub(calc_rtt) & TIME_MASK
                } else {
                    marker.value()
                }
            };
            // blocks::retransmit_timeout without the gap term (a window
            // ≥ 1 means no gap; `paced_lanes` redoes the others).
            let rto = if PLAIN {
                (smoothed_rtt * rto_multiple).min(MAX_STATE_24).max(min_rto)
            } else {
                retransmit_timeout(
                    c.min_retransmit_timeout,
                    smoothed_rtt,
                    c.retransmit_timeout_scalar,
                    0,
                    c.ipg_time_scalar,
                )
            };
            ack.rtt[i] = rtt;
            ack.calc_rtt[i] = calc_rtt;
            ack.smoothed_rtt[i] = smoothed_rtt;
            ack.smoothed_delay[i] = delay;
            ack.now[i] = now.value();
            ack.dragged[i] = drag(event.fabric_window_time_marker);
            ack.gap[i] = 0;
            ack.rto[i] = rto;
            nic.dragged[i] = drag(event.nic_window_time_marker);

            // blocks::target_delay_from_inv_sqrt's integer terms: below
            // 2^24 + 4095·255, exact.
            x.base_hops[i] =
                f64::from(p.base_delay + p.topo_scaling_per_hop * u32::from(event.forward_hops));
            x.fcwnd[i] = f64::from(event.fcwnd.raw());
            x.delay[i] = f64::from(delay);
            x.rtt[i] = f64::from(rtt);
            x.fabric_delta[i] = f64::from(now.wrapping_sub(event.fabric_window_time_marker));
            x.acked[i] = f64::from(event.num_packets_acked);
            // Swift::use_max_fabric_decrease
            x.max_decrease[i] = flag(
                max_decrease_on
                    && ((event.event_type == EventType::Nack
                        && event.nack_code == nack_code::RX_WINDOW_ERROR)
                        || (event.event_type == EventType::Ack && event.eack && event.eack_drop)),
            );

            // Swift::nic_window's event-only terms.
            let level = u32::from(event.rx_buffer_level);
            let inv_level = INV_LEVEL
                .get(usize::from(event.rx_buffer_level))
                .copied()
                .unwrap_or_else(|| 1.0 / f64::from(level));
            x.ncwnd[i] = f64::from(event.ncwnd);
            x.fraction[i] = f64::from(fraction & 0x3FF);
            x.nic_delta[i] = f64::from(now.wrapping_sub(event.nic_window_time_marker));
            x.nic_scale[i] = f64::from(level.saturating_sub(target_level)) * inv_level;
            x.level[i] = f64::from(level);
            // The direction's discriminant (a compare became a branch).
            x.increase[i] = f64::from(event.ncwnd_direction as u8);
            x.exhausted[i] = flag(
                (event.event_type == EventType::Nack)
                    & (event.nack_code == nack_code::RX_RESOURCE_EXHAUSTION),
            );
        }
    }

    /// The compute loop: the fabric window (`Swift::ack_fabric_window`,
    /// `max_fabric_decrease`), its target (`target_and_inverse`), marker
    /// choice and fixed point (`Fcwnd::from_f64`), and the NIC window
    /// (`Swift::nic_window`), in f64 only: selects, no calls, no branches.
    /// The pacing gap and the RTO's gap term are left to
    /// [`Swift::paced_lanes`]: a window below one packet is rare and costs
    /// two divisions. Without `PLAIN` the max-decrease rule is computed too.
    #[inline(always)]
    fn window_lanes<const N: usize, const PLAIN: bool>(&self, out: &mut BatchLanes<N>) {
        let c = &self.config;
        let p = &self.target;
        let max_flow_scaling = f64::from(p.max_flow_scaling);
        let max_md_factor = 1.0 - c.max_fabric_multiplicative_decrease;
        let fixed_max = f64::from(Fcwnd::MAX_RAW);
        let exhausted_factor = 1.0 - c.max_nic_multiplicative_decrease;
        let target_level = f64::from(c.target_rx_buffer_level);
        let BatchLanes {
            inputs: x,
            ack,
            nic,
        } = out;
        for i in 0..N {
            // Fcwnd::to_f64
            let old = x.fcwnd[i] / 1024.0;

            // Swift::target_and_inverse, blocks::target_delay_from_inv_sqrt:
            // 0 ≤ adder ≤ max_flow_scaling < 2^32, the sum < 2^33, exact.
            let inv_sqrt = 1.0 / old.sqrt();
            let adder = p.flow_scaling_alpha * inv_sqrt + p.flow_scaling_beta;
            let adder = if adder.is_nan() { 0.0 } else { adder };
            let adder = clamp(adder, 0.0, max_flow_scaling);
            let target = min(x.base_hops[i] + floor(adder), MAX_24_F);
            let inv_fcwnd = inv_sqrt * inv_sqrt;

            // Swift::ack_fabric_window: `delay − target` and `max(delay, 1)`
            // are exact, the u32 saturating subtraction and maximum.
            let delay = x.delay[i];
            let elapsed = x.fabric_delta[i] >= x.rtt[i];
            let per_acked = c.fabric_additive_increment * x.acked[i];
            let factor = if old >= 1.0 { inv_fcwnd } else { 1.0 };
            let increased = old + per_acked * factor;
            let excess = delay - target;
            let excess = if excess > 0.0 { excess } else { 0.0 };
            let scale = excess / (if delay > 1.0 { delay } else { 1.0 });
            let decrease = min(
                scale * c.fabric_multiplicative_decrease_factor,
                c.max_fabric_multiplicative_decrease,
            );
            let decreased = old * (1.0 - decrease);
            let held = if elapsed { decreased } else { old };
            let window = if delay < target { increased } else { held };
            let window = clamp(window, c.min_fcwnd, c.max_fcwnd);
            let window = if PLAIN {
                window
            } else {
                // Swift::max_fabric_decrease
                let max_decreased = if elapsed { old * max_md_factor } else { old };
                let max_decreased = clamp(max_decreased, c.min_fcwnd, c.max_fcwnd);
                if is(x.max_decrease[i]) {
                    max_decreased
                } else {
                    window
                }
            };

            // Fcwnd::from_f64: ⌊scaled + 0.5⌋ below the maximum (a NaN
            // window gives 0).
            let scaled = window * 1024.0;
            let fixed = if scaled >= fixed_max {
                fixed_max
            } else {
                floor(scaled + 0.5)
            };
            let fixed = if scaled >= 0.5 { fixed } else { 0.0 };

            ack.window[i] = window;
            ack.target[i] = target;
            ack.fcwnd[i] = fixed;
            // blocks::fabric_time_marker
            ack.marker_now[i] = mask((window < old) | (window == c.min_fcwnd));
            ack.decreased[i] = mask(window < old);

            // Swift::nic_window, ncwnd_with_fraction
            let old = x.ncwnd[i] + x.fraction[i] / 1024.0;
            let rtt_passed = x.nic_delta[i] >= x.rtt[i];
            let last_increase = is(x.increase[i]);
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
            let decrease = min(
                x.nic_scale[i] * c.nic_multiplicative_decrease_factor,
                c.max_nic_multiplicative_decrease,
            );
            let decreased = if rtt_passed {
                old * (1.0 - decrease)
            } else {
                old
            };
            let aimd = if x.level[i] < target_level {
                increased
            } else {
                decreased
            };
            let window = if is(x.exhausted[i]) {
                exhausted_window
            } else {
                aimd
            };
            // min_ncwnd ≥ 1 and max_ncwnd ≤ 2047 (validated) and the window
            // is never NaN, so 1 ≤ window ≤ 2047 below.
            let window = clamp(window, c.min_ncwnd, c.max_ncwnd);

            // blocks::nic_time_marker
            let decreased = (window < old) | (window == c.min_ncwnd);
            let increased = (window > old) | (window == c.max_ncwnd);
            let increase = if decreased {
                false
            } else if increased {
                true
            } else {
                last_increase
            };

            nic.old[i] = old;
            nic.scaled[i] = floor(window * 1024.0);
            nic.marker_now[i] = mask(decreased | increased);
            nic.increase[i] = mask(increase);
            nic.decreased[i] = mask(window < old);
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::plb::PlbState;
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
        /// one event at a time: one lane, and a batch with lanes to spare,
        /// in lanes that an earlier, longer batch left full.
        #[test]
        fn lanes_equal_the_blocks(
            config in any_config(),
            earlier in proptest::collection::vec(any_event(), 32),
            events in proptest::collection::vec(any_event(), 1..=32),
            fractions in proptest::collection::vec(0u16..=1023, 32),
        ) {
            prop_assume!(config.validate().is_ok());
            let swift = Swift::new(config).unwrap();
            let fractions: [u16; 32] = fractions.try_into().unwrap();
            let mut batch = BatchLanes::<32>::default();
            swift.prepare_batch(&earlier, &[1023; 32], &mut batch);
            swift.prepare_batch(&events, &fractions, &mut batch);
            for (i, (event, &fraction)) in events.iter().zip(&fractions).enumerate() {
                let expected = swift.prepare_ack(event);
                let mut one = BatchLanes::<1>::default();
                swift.prepare_batch(std::slice::from_ref(event), &[fraction], &mut one);
                prop_assert_eq!(one.ack.step(0), expected, "one lane, event {:?}", event);
                prop_assert_eq!(batch.ack.step(i), expected, "lane {}, event {:?}", i, event);
                let want = blocks_nic(&swift, event, &expected, fraction);
                for got in [batch.nic_lane(i), one.nic_lane(0)] {
                    prop_assert_eq!(got.old.to_bits(), want.old.to_bits());
                    prop_assert_eq!(
                        (got.ncwnd, got.fraction, got.marker, got.direction, got.decreased),
                        (want.ncwnd, want.fraction, want.marker, want.direction, want.decreased),
                        "lane {}, event {:?}", i, event
                    );
                }
            }
        }

        /// A lane's result, fraction, PLB word and counters
        /// (`Swift::finish_lane`) are those of the per-event path
        /// (`Swift::finish_ack`), with PLB on and off.
        #[test]
        fn finish_lane_equals_finish_ack(
            config in any_config(),
            plb_on in any::<bool>(),
            events in proptest::collection::vec(any_event(), 1..=32),
            fractions in proptest::collection::vec(0u16..=1023, 32),
            plb_bits in proptest::collection::vec(any::<u32>(), 32),
        ) {
            let config = SwiftConfig {
                plb: crate::plb::PlbConfig { enabled: plb_on, ..config.plb },
                ..config
            };
            prop_assume!(config.validate().is_ok());
            let mut lanes_swift = Swift::new(config).unwrap();
            let mut blocks_swift = lanes_swift.clone();
            let fractions: [u16; 32] = fractions.try_into().unwrap();
            let mut batch = BatchLanes::<32>::default();
            lanes_swift.prepare_batch(&events, &fractions, &mut batch);
            for (i, event) in events.iter().enumerate() {
                let (mut got_plb, mut want_plb) =
                    (PlbState::from_bits(plb_bits[i]), PlbState::from_bits(plb_bits[i]));
                let (got, got_fraction) = if plb_on {
                    lanes_swift.finish_lane::<32, true>(event, &batch, i, &mut got_plb)
                } else {
                    lanes_swift.finish_lane::<32, false>(event, &batch, i, &mut got_plb)
                };
                let mut want_fraction = fractions[i];
                let step = blocks_swift.prepare_ack(event);
                let want = blocks_swift.finish_ack(event, &step, &mut want_fraction, &mut want_plb);
                prop_assert_eq!(got, want, "lane {}, event {:?}", i, event);
                prop_assert_eq!(got_fraction, want_fraction);
                prop_assert_eq!(got_plb, want_plb);
                prop_assert_eq!(lanes_swift.counters(), blocks_swift.counters());
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
                let mut lanes = BatchLanes::<1>::default();
                swift.prepare_batch(std::slice::from_ref(&event), &[0], &mut lanes);
                assert_eq!(lanes.ack.step(0), swift.prepare_ack(&event), "{event:?}");
            }
        }
    }
}
