//! Swift for Falcon (OCP Falcon 0.9 §10.3; spec/rue.md §1.10 with the
//! decisions of §1.11): a fabric window driven by delay against a scaled
//! target, a NIC window driven by the peer's RX buffer level, pacing below
//! one packet, the RTO, and PLB/PRR repath decisions.
//!
//! Layer: one algorithm behind [`Algorithm`]. It reads the event, its own
//! per-connection [`SwiftState`] and its profile; it returns the result.
//! "Now" is the event's `t4` (see [`CcEvent`]). No clock, no IO, no
//! allocation; every input is total (windows saturate, times wrap).
//!
//! Module order follows isekai `Swift::ProcessAckNack` (spec/rue.md §2.3):
//! timing and target → fcwnd, fabric marker, gap → ncwnd, NIC marker and
//! direction, RTO → PLB → result.

mod config;
mod lanes;
mod multipath;

use crate::algorithm::Algorithm;
use crate::blocks::{
    fabric_time_marker, flow_scaling_constants, inter_packet_gap, nic_time_marker, packet_timing,
    retransmit_timeout, smoothed, target_delay, target_delay_from_inv_sqrt, window_delta,
    TargetDelayParams,
};
use crate::config::ConfigError;
use crate::format::{
    nack_code, CcEvent, CcResult, EventType, Fcwnd, NcwndDirection, RetransmitReason, Time24,
};
use crate::plb::{self, PlbState};

pub use config::SwiftConfig;
pub(crate) use lanes::{BatchLanes, NicLane};
pub use multipath::{flow_weight, MultipathFlow, MultipathState, MAX_FLOW_WEIGHT, MIN_FLOW_WEIGHT};

/// Swift's private per-connection state in the RUE's state table: what the
/// Gen1 event has no room for (isekai keeps the same in its RUE connection
/// state). 60 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwiftState {
    /// Fractional part of ncwnd, 1/1024 requests (Gen1 carries only the
    /// integer; isekai `StoreFloatNcwndFraction`).
    pub ncwnd_fraction: u16,
    /// PLB counters of the connection (of flow 0 with multipath).
    pub plb: PlbState,
    /// Per-flow windows (multipath profiles only).
    pub multipath: MultipathState,
}

/// Counters of one Swift profile, for reporting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwiftCounters {
    /// Fabric window decreases (delay rule, max decrease or retransmit).
    pub fabric_decreases: u64,
    /// NIC window decreases.
    pub nic_decreases: u64,
    /// Repaths decided by PLB (or forced through `cc_opaque` bit 0).
    pub plb_repaths: u64,
    /// Repaths decided by PRR.
    pub prr_repaths: u64,
}

/// The event-only part of an ACK/NACK event ([`Swift::prepare_ack`]), what
/// [`Swift::finish_ack`] needs of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AckStep {
    /// RTT sample, Falcon units.
    rtt: u32,
    /// RTT for the markers: the sample or the smoothed RTT.
    calc_rtt: u32,
    /// Target delay, Falcon units.
    target: u32,
    smoothed_rtt: u32,
    smoothed_delay: u32,
    fabric_marker: Time24,
    fcwnd: Fcwnd,
    fabric_decreased: bool,
    gap: u32,
    rto: Time24,
}

/// The Swift algorithm for one profile.
#[derive(Clone, Debug)]
pub struct Swift {
    config: SwiftConfig,
    target: TargetDelayParams,
    counters: SwiftCounters,
}

/// `1/level` for the 32 quantized RX buffer levels (level 0 as 1, never
/// used: a decrease needs level ≥ target ≥ 0 and the scale's numerator is 0
/// there), so the NIC decrease needs no division.
pub(crate) const INV_LEVEL: [f64; 32] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 3.0,
    1.0 / 4.0,
    1.0 / 5.0,
    1.0 / 6.0,
    1.0 / 7.0,
    1.0 / 8.0,
    1.0 / 9.0,
    1.0 / 10.0,
    1.0 / 11.0,
    1.0 / 12.0,
    1.0 / 13.0,
    1.0 / 14.0,
    1.0 / 15.0,
    1.0 / 16.0,
    1.0 / 17.0,
    1.0 / 18.0,
    1.0 / 19.0,
    1.0 / 20.0,
    1.0 / 21.0,
    1.0 / 22.0,
    1.0 / 23.0,
    1.0 / 24.0,
    1.0 / 25.0,
    1.0 / 26.0,
    1.0 / 27.0,
    1.0 / 28.0,
    1.0 / 29.0,
    1.0 / 30.0,
    1.0 / 31.0,
];

/// Bit of `cc_opaque` that forces a repath when PLB is configured
/// (spec/rue.md §2.6; isekai `kRandomizePathEnableMask`, Gen1 only).
const CC_OPAQUE_FORCE_REPATH: u8 = 1;

impl Swift {
    /// A Swift profile from a validated configuration.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] of [`SwiftConfig::validate`].
    pub fn new(config: SwiftConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let (alpha, beta) = flow_scaling_constants(
            config.max_flow_scaling,
            config.min_flow_scaling_window,
            config.max_flow_scaling_window,
        );
        let target = TargetDelayParams {
            base_delay: config.fabric_base_delay,
            topo_scaling_per_hop: config.topo_scaling_per_hop,
            flow_scaling_alpha: alpha,
            flow_scaling_beta: beta,
            max_flow_scaling: config.max_flow_scaling,
        };
        Ok(Swift {
            config,
            target,
            counters: SwiftCounters::default(),
        })
    }

    /// The profile's configuration.
    pub fn config(&self) -> &SwiftConfig {
        &self.config
    }

    /// Counters since construction.
    pub fn counters(&self) -> SwiftCounters {
        self.counters
    }

    /// The target delay for a window and hop count, Falcon units (§10.3.4).
    pub fn target_delay(&self, fcwnd: f64, forward_hops: u8) -> u32 {
        target_delay(&self.target, fcwnd, forward_hops)
    }

    /// The target delay and `1/fcwnd` from one square root and one
    /// division (`1/fcwnd = (1/√fcwnd)²`).
    #[inline(always)]
    fn target_and_inverse(&self, fcwnd: f64, forward_hops: u8) -> (u32, f64) {
        let inv_sqrt = 1.0 / fcwnd.sqrt();
        let target = target_delay_from_inv_sqrt(&self.target, inv_sqrt, forward_hops);
        (target, inv_sqrt * inv_sqrt)
    }

    fn on_ack_nack(&mut self, event: &CcEvent, state: &mut SwiftState) -> CcResult {
        let step = self.prepare_ack(event);
        self.finish_ack(event, &step, &mut state.ncwnd_fraction, &mut state.plb)
    }

    /// Modules 0 and 1 of an ACK/NACK event and the RTO: everything that
    /// depends on the event and the profile only, not on the connection's
    /// RUE state (the fabric window, its marker, the gap and the RTO come
    /// from the event's carried state), and no counters either. This is the
    /// straightforward per-event form from the building blocks; the batched
    /// path of the RUE core computes the same over lanes
    /// ([`Swift::prepare_batch`], checked against this in `lanes.rs`).
    pub(crate) fn prepare_ack(&self, event: &CcEvent) -> AckStep {
        let c = &self.config;
        let now = event.t4;

        // Module 0: timing, target, smoothing.
        let timing = packet_timing(event);
        let old_fcwnd = event.fcwnd.to_f64();
        // OCP Falcon 0.9 §10.3.4: the target uses the window before this event.
        let (target, inv_fcwnd) = self.target_and_inverse(old_fcwnd, event.forward_hops);
        let smoothed_rtt = smoothed(c.rtt_smoothing_alpha, event.rtt_state, timing.rtt);
        let smoothed_delay = smoothed(c.delay_smoothing_alpha, event.delay_state, timing.delay);
        let calc_rtt = if c.calc_rtt_smooth {
            smoothed_rtt
        } else {
            timing.rtt
        };

        // Module 1: fabric window, its marker and the pacing gap.
        let fabric_delta = window_delta(now, event.fabric_window_time_marker);
        let fcwnd = if self.use_max_fabric_decrease(event) {
            self.max_fabric_decrease(old_fcwnd, fabric_delta, timing.rtt)
        } else {
            self.ack_fabric_window(
                event.num_packets_acked,
                old_fcwnd,
                inv_fcwnd,
                smoothed_delay,
                target,
                fabric_delta >= timing.rtt,
            )
        };
        let fabric_marker = fabric_time_marker(
            now,
            event.fabric_window_time_marker,
            calc_rtt,
            old_fcwnd,
            fcwnd,
            c.min_fcwnd,
        );
        let gap = inter_packet_gap(c.ipg_time_scalar, c.ipg_bits, fcwnd, calc_rtt);
        // Gen1: min_ncwnd ≥ 1, so the NIC gap of isekai is always 0 here and
        // the result's single gap is the fabric gap.
        let rto = retransmit_timeout(
            c.min_retransmit_timeout,
            smoothed_rtt,
            c.retransmit_timeout_scalar,
            gap,
            c.ipg_time_scalar,
        );
        AckStep {
            rtt: timing.rtt,
            calc_rtt,
            target,
            smoothed_rtt,
            smoothed_delay,
            fabric_marker,
            fcwnd: Fcwnd::from_f64(fcwnd),
            fabric_decreased: fcwnd < old_fcwnd,
            gap,
            rto: Time24::new(rto),
        }
    }

    /// Module 2 (NIC window, its marker and direction) and module 3 (PLB)
    /// of an ACK/NACK event, which read and write the connection's
    /// [`SwiftState`] (of it, single-path Swift uses only the ncwnd
    /// fraction and the PLB counters), then the result.
    pub(crate) fn finish_ack(
        &mut self,
        event: &CcEvent,
        step: &AckStep,
        ncwnd_fraction: &mut u16,
        plb: &mut PlbState,
    ) -> CcResult {
        let old = ncwnd_with_fraction(event.ncwnd, *ncwnd_fraction);
        let (window, ncwnd, marker, direction) =
            self.nic_window(event, event.t4, old, step.rtt, step.calc_rtt);
        let nic = NicLane {
            old,
            ncwnd,
            fraction: fraction_1024(window),
            marker,
            direction,
            decreased: window < old,
        };
        self.finish_with_nic(event, step, &nic, ncwnd_fraction, plb)
    }

    /// [`Swift::finish_ack`] given the event's NIC window (computed over a
    /// batch by the RUE core): the counters, the new fraction, PLB and the
    /// result.
    #[inline(always)]
    pub(crate) fn finish_with_nic(
        &mut self,
        event: &CcEvent,
        step: &AckStep,
        nic: &NicLane,
        ncwnd_fraction: &mut u16,
        plb: &mut PlbState,
    ) -> CcResult {
        self.counters.fabric_decreases += u64::from(step.fabric_decreased);
        self.counters.nic_decreases += u64::from(nic.decreased);
        *ncwnd_fraction = nic.fraction;

        // Module 3: PLB.
        let repath = self.plb(
            event,
            plb,
            step.smoothed_delay,
            step.target,
            event.fcwnd.to_f64().min(nic.old),
        );
        self.counters.plb_repaths += u64::from(repath);

        CcResult {
            connection_id: event.connection_id,
            randomize_path: repath,
            cc_metadata: event.cc_metadata,
            fcwnd: step.fcwnd,
            inter_packet_gap: step.gap,
            ncwnd: nic.ncwnd,
            retransmit_timeout: step.rto,
            event_queue_select: event.event_queue_select,
            delay_select: event.delay_select,
            fabric_window_time_marker: step.fabric_marker,
            nic_window_time_marker: nic.marker,
            ncwnd_direction: nic.direction,
            base_delay_target: event.base_delay_target,
            delay_state: step.smoothed_delay,
            rtt_state: step.smoothed_rtt,
            cc_opaque: event.cc_opaque,
            instance: event.instance,
        }
    }

    /// [`Swift::finish_with_nic`] of lane `i` of a batch (`i < N`), for an
    /// ACK/NACK event whose NIC window the lanes computed from its
    /// connection's state: the counters, PLB and the result. Returns the
    /// new ncwnd fraction with the result. `PLB` is
    /// [`Swift::uses_plb_state`]; without it, PLB is off and `plb` unused.
    ///
    /// The result is assembled from the lanes in one expression, so the
    /// caller can store it straight into its queue slot. (Built through
    /// [`AckStep`] and [`NicLane`] on the stack, the 48-byte result was
    /// written with narrow stores and copied out with 16-byte loads: a
    /// store-forwarding stall that `perf annotate` put at ≈ 16 % of
    /// `falcon bench rue`'s time.)
    #[inline(always)]
    pub(crate) fn finish_lane<const N: usize, const PLB: bool>(
        &mut self,
        event: &CcEvent,
        lanes: &BatchLanes<N>,
        i: usize,
        plb: &mut PlbState,
    ) -> (CcResult, u16) {
        let (ack, nic) = (&lanes.ack, &lanes.nic);
        self.counters.fabric_decreases += u64::from(ack.decreased(i));
        self.counters.nic_decreases += u64::from(nic.decreased(i));
        // Module 3: PLB.
        let repath = PLB
            && self.plb(
                event,
                plb,
                ack.smoothed_delay(i),
                ack.target(i),
                event.fcwnd.to_f64().min(nic.old(i)),
            );
        self.counters.plb_repaths += u64::from(repath);
        let (ncwnd, fraction) = nic.ncwnd(i);
        let result = CcResult {
            connection_id: event.connection_id,
            randomize_path: repath,
            cc_metadata: event.cc_metadata,
            fcwnd: ack.fcwnd(i),
            inter_packet_gap: ack.gap(i),
            ncwnd,
            retransmit_timeout: ack.rto(i),
            event_queue_select: event.event_queue_select,
            delay_select: event.delay_select,
            fabric_window_time_marker: ack.marker(i),
            nic_window_time_marker: nic.marker(ack, i),
            ncwnd_direction: nic.direction(i),
            base_delay_target: event.base_delay_target,
            delay_state: ack.smoothed_delay(i),
            rtt_state: ack.smoothed_rtt(i),
            cc_opaque: event.cc_opaque,
            instance: event.instance,
        };
        (result, fraction)
    }

    /// Whether the batched path of the RUE core applies (not multipath).
    #[inline(always)]
    pub(crate) fn is_single_path(&self) -> bool {
        !self.config.multipath
    }

    /// Whether single-path events read or write the PLB counters of the
    /// connection's state (PLB or PRR on); otherwise they never touch them.
    #[inline(always)]
    pub(crate) fn uses_plb_state(&self) -> bool {
        self.config.plb.enabled || self.config.prr.enabled
    }

    /// OCP Falcon 0.9 §10.3.2 `ProcessRetransmit`; of the connection's
    /// state only the PLB counters (PRR) are used.
    pub(crate) fn on_retransmit(&mut self, event: &CcEvent, plb: &mut PlbState) -> CcResult {
        let c = &self.config;
        let now = event.t4;
        // OCP Falcon 0.9 §10.3.2: no RTT sample on a retransmit; the guard,
        // gap and RTO use the smoothed RTT state.
        let rtt = event.rtt_state;
        let old_fcwnd = event.fcwnd.to_f64();
        let fabric_delta = window_delta(now, event.fabric_window_time_marker);
        let fcwnd =
            self.timeout_fabric_window(event.retransmit_count, old_fcwnd, fabric_delta, rtt);
        if fcwnd < old_fcwnd {
            self.counters.fabric_decreases += 1;
        }
        let gap = inter_packet_gap(c.ipg_time_scalar, c.ipg_bits, fcwnd, rtt);
        let rto = retransmit_timeout(
            c.min_retransmit_timeout,
            rtt,
            c.retransmit_timeout_scalar,
            gap,
            c.ipg_time_scalar,
        );
        let fabric_marker = fabric_time_marker(
            now,
            event.fabric_window_time_marker,
            rtt,
            old_fcwnd,
            fcwnd,
            c.min_fcwnd,
        );
        let prr = self.prr(event, plb);
        self.counters.prr_repaths += u64::from(prr);
        let repath = prr || self.forced_repath(event);
        CcResult {
            randomize_path: repath,
            fcwnd: Fcwnd::from_f64(fcwnd),
            inter_packet_gap: gap,
            retransmit_timeout: Time24::new(rto),
            fabric_window_time_marker: fabric_marker,
            // ncwnd, NIC marker and direction, delay and RTT state unchanged
            // (isekai `ProcessRetransmit`).
            ..CcResult::reflect(event)
        }
    }

    /// OCP Falcon 0.9 §10.3.1 `ComputeAckFabricCongestionWindow`.
    #[inline(always)]
    fn ack_fabric_window(
        &self,
        acked: u16,
        fcwnd: f64,
        inv_fcwnd: f64,
        delay: u32,
        target: u32,
        rtt_elapsed: bool,
    ) -> f64 {
        let c = &self.config;
        // Both candidates are computed and one is selected, rather than
        // branching: which rule applies is data-dependent and unpredictable
        // across interleaved connections. Measured on this 2-core KVM EPYC
        // (under load): Swift alone ≈ 48 ns/event on random events either
        // way, so this form costs nothing; the dependency chain through the
        // square root and divisions dominates, not mispredictions.
        //
        // spec/rue.md §1.11 decision 1: OCP Falcon 0.9 §10.3.1 increases when
        // delay ≤ target; isekai (and DESIGN §4) use <. We follow isekai.
        let increase_rule = delay < target;
        // At most one decrease per RTT (`rtt_elapsed`: §10.3.4 HasRttElapsed
        // on the fabric marker; isekai compares with the raw sample
        // `timing.rtt`).
        let decrease_allowed = rtt_elapsed;
        // ≈ +ai per RTT above one packet, +ai per ACKed packet below.
        let per_acked = c.fabric_additive_increment * f64::from(acked);
        let factor = if fcwnd >= 1.0 { inv_fcwnd } else { 1.0 };
        let increased = fcwnd + per_acked * factor;
        // delay ≥ target when the decrease rule applies (0 otherwise).
        let scale = f64::from(delay.saturating_sub(target)) / f64::from(delay.max(1));
        let decrease = (scale * c.fabric_multiplicative_decrease_factor)
            .min(c.max_fabric_multiplicative_decrease);
        let decreased = fcwnd * (1.0 - decrease);
        let held = if decrease_allowed { decreased } else { fcwnd };
        let window = if increase_rule { increased } else { held };
        // Invariant: validate() guarantees min ≤ max and both finite, so
        // clamp cannot panic.
        window.clamp(c.min_fcwnd, c.max_fcwnd)
    }

    /// isekai `ComputeNackFabricCongestionWindow`: max MDF once per RTT.
    fn max_fabric_decrease(&self, fcwnd: f64, delta: u32, rtt: u32) -> f64 {
        let c = &self.config;
        let mut window = fcwnd;
        if delta >= rtt {
            window *= 1.0 - c.max_fabric_multiplicative_decrease;
        }
        window.clamp(c.min_fcwnd, c.max_fcwnd)
    }

    /// OCP Falcon 0.9 §10.3.2 `ProcessRetransmit` (isekai
    /// `ComputeTimeoutFabricCongestionWindow`).
    fn timeout_fabric_window(&self, retransmit_count: u8, fcwnd: f64, delta: u32, rtt: u32) -> f64 {
        let c = &self.config;
        let mut window = fcwnd;
        // The PDF guards only the first-timeout decrease with the RTT marker
        // and resets at the limit unguarded; isekai guards both. We follow
        // isekai so that a burst of timeouts of one window resets once.
        if delta >= rtt {
            if retransmit_count == 1 {
                window *= 1.0 - c.max_fabric_multiplicative_decrease;
            } else if retransmit_count >= c.retransmit_limit {
                window = c.min_fcwnd;
            }
        }
        window.clamp(c.min_fcwnd, c.max_fcwnd)
    }

    /// OCP Falcon 0.9 §10.3.1 `ComputeAckNICCongestionWindow` and §10.3.3
    /// (resource-exhaustion NACK), with the §10.3.6 guard. Returns the new
    /// window (fractional), its integer wire value, marker and direction.
    #[inline(always)]
    pub(crate) fn nic_window(
        &self,
        event: &CcEvent,
        now: Time24,
        ncwnd: f64,
        rtt: u32,
        calc_rtt: u32,
    ) -> (f64, u16, Time24, NcwndDirection) {
        let c = &self.config;
        let delta = window_delta(now, event.nic_window_time_marker);
        let rtt_passed = delta >= rtt;
        let level = event.rx_buffer_level;
        // Branch-free, as the fabric window (see there).
        let exhausted = (event.event_type == EventType::Nack)
            & (event.nack_code == nack_code::RX_RESOURCE_EXHAUSTION);
        let last_increase = event.ncwnd_direction == NcwndDirection::Increase;
        // §10.3.3: max decrease if the last change was an increase or an RTT
        // has passed.
        let exhausted_window = if last_increase | rtt_passed {
            ncwnd * (1.0 - c.max_nic_multiplicative_decrease)
        } else {
            ncwnd
        };
        // spec/rue.md §1.11 decision 5 (Gen1/DNA): at most one increase per
        // RTT unless the previous change was a decrease; +ai per event, not
        // scaled by ACKed packets.
        let increased = if !last_increase | rtt_passed {
            ncwnd + c.nic_additive_increment
        } else {
            ncwnd
        };
        let inv_level = INV_LEVEL
            .get(usize::from(level))
            .copied()
            .unwrap_or_else(|| 1.0 / f64::from(level));
        let scale = f64::from(level.saturating_sub(c.target_rx_buffer_level)) * inv_level;
        // spec/rue.md §1.11 decision 4: OCP Falcon 0.9 §10.3.1 omits the NIC
        // decrease factor; isekai multiplies by it. We follow isekai.
        let decrease =
            (scale * c.nic_multiplicative_decrease_factor).min(c.max_nic_multiplicative_decrease);
        let decreased = if rtt_passed {
            ncwnd * (1.0 - decrease)
        } else {
            ncwnd
        };
        let aimd = if level < c.target_rx_buffer_level {
            increased
        } else {
            decreased
        };
        let window = if exhausted { exhausted_window } else { aimd };
        let window = window.clamp(c.min_ncwnd, c.max_ncwnd);
        let (marker, direction) = nic_time_marker(
            now,
            event.nic_window_time_marker,
            calc_rtt,
            event.ncwnd_direction,
            ncwnd,
            window,
            c.min_ncwnd,
            c.max_ncwnd,
        );
        // Gen1 carries the integer part (isekai `floor`); the fraction stays
        // in SwiftState. max_ncwnd ≤ 2047 keeps it within 11 bits.
        // window ≥ min_ncwnd ≥ 1 > 0, so truncation is the floor.
        (window, window as u16, marker, direction)
    }

    /// isekai `UseMaxFabricDecrease` (Gen1): the option is on and the event
    /// is a NACK for an out-of-window drop or an EACK that shows loss.
    #[inline(always)]
    fn use_max_fabric_decrease(&self, event: &CcEvent) -> bool {
        self.config.max_decrease_on_eack_nack_drop
            && ((event.event_type == EventType::Nack
                && event.nack_code == nack_code::RX_WINDOW_ERROR)
                || (event.event_type == EventType::Ack && event.eack && event.eack_drop))
    }

    /// OCP Falcon 0.9 §10.4 on ACK events; isekai skips NACKs. The caller
    /// counts the repath.
    #[inline(always)]
    fn plb(
        &self,
        event: &CcEvent,
        plb_state: &mut PlbState,
        smoothed_delay: u32,
        target: u32,
        old_window: f64,
    ) -> bool {
        let c = &self.config.plb;
        if !c.enabled {
            return false;
        }
        let forced = self.forced_repath(event);
        if event.nack_code != nack_code::NOT_A_NACK || event.event_type != EventType::Ack {
            return forced;
        }
        let congested = f64::from(smoothed_delay) > f64::from(target) * c.target_delay_multiplier;
        plb::on_ack(c, plb_state, event.num_packets_acked, congested, old_window) || forced
    }

    /// PRR (spec/rue.md §3.2): repath on a timeout retransmission. The
    /// caller counts the repath.
    fn prr(&self, event: &CcEvent, plb_state: &mut PlbState) -> bool {
        if event.retransmit_reason != RetransmitReason::Timeout {
            return false;
        }
        plb::on_retransmit_timeout(&self.config.prr, plb_state, event.retransmit_count)
    }

    /// spec/rue.md §2.6 (Gen1 only): with PLB configured, `cc_opaque` bit 0
    /// forces a repath. Off with multipath, where `cc_opaque` is the flow id.
    #[inline(always)]
    fn forced_repath(&self, event: &CcEvent) -> bool {
        self.config.plb.enabled
            && !self.config.multipath
            && event.cc_opaque & CC_OPAQUE_FORCE_REPATH != 0
    }
}

impl Algorithm for Swift {
    type State = SwiftState;

    #[inline]
    fn on_event(&mut self, event: &CcEvent, state: &mut SwiftState) -> CcResult {
        match (event.event_type, self.config.multipath) {
            (EventType::Ack | EventType::Nack, false) => self.on_ack_nack(event, state),
            (EventType::Retransmit, false) => self.on_retransmit(event, &mut state.plb),
            (EventType::Ack | EventType::Nack, true) => self.on_ack_nack_multipath(event, state),
            (EventType::Retransmit, true) => self.on_retransmit_multipath(event, state),
        }
    }
}

pub(crate) fn ncwnd_with_fraction(ncwnd: u16, fraction: u16) -> f64 {
    f64::from(ncwnd) + f64::from(fraction & 0x3FF) / 1024.0
}

pub(crate) fn fraction_1024(window: f64) -> u16 {
    // 0 < window ≤ 2047: truncation is the floor (no libm call; the u32
    // conversion is one instruction, a u64 one is not on x86-64).
    (((window - f64::from(window as u32)) * 1024.0) as u16).min(1023)
}

#[cfg(test)]
mod tests;
