//! Swift with per-flow windows for multipath connections (spec/rue.md §2.7;
//! isekai `ProcessAckNackMultipath`, `ProcessRetransmitMultipath`).
//!
//! Layer: an opt-in extension of [`Swift`] (`SwiftConfig::multipath`;
//! beyond spec 0.9, DESIGN §4). A connection has up to four flows (paths).
//! Each event updates only its flow's window with the Swift rules (the
//! flow's own target, marker and smoothed RTT, *unsmoothed* delay); the
//! connection window is the clamped sum. Flow 0 keeps its marker and RTT
//! state in the event/result fields, flows 1..=3 in [`MultipathState`].
//!
//! Gen1 has no flow-label fields, so the flow id travels in `cc_opaque`
//! (the event's: which flow the ACKed or retransmitted packet used; the
//! result's: which flow `randomize_path` applies to). Per-flow weights for
//! the datapath's weighted round robin are available from [`flow_weight`]
//! and the RUE's state table; the Gen1 result has no room for them.

use super::{fraction_1024, ncwnd_with_fraction, Swift, SwiftState};
use crate::blocks::{
    fabric_time_marker, inter_packet_gap, packet_timing, retransmit_timeout, smoothed, window_delta,
};
use crate::format::{CcEvent, CcResult, Fcwnd, Time24};
use crate::plb::PlbState;

/// Flows per multipath connection.
pub const FLOWS: usize = 4;
/// Smallest weight of a flow (4-bit WRR weight).
pub const MIN_FLOW_WEIGHT: u8 = 1;
/// Largest weight of a flow.
pub const MAX_FLOW_WEIGHT: u8 = 15;

/// State of flows 1..=3 of a multipath connection (flow 0's lives in the
/// event/result fields). 12 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MultipathFlow {
    /// The flow's fabric window time marker, Falcon units.
    pub fabric_window_time_marker: Time24,
    /// The flow's smoothed RTT, Falcon units.
    pub rtt_state: u32,
    /// The flow's PLB counters.
    pub plb: PlbState,
}

/// Per-flow windows of a multipath connection. 52 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MultipathState {
    /// Each flow's fabric window, packets, 11.10 fixed point; all zero until
    /// the connection's first multipath event.
    pub flow_fcwnd: [Fcwnd; FLOWS],
    /// Flows 1..=3.
    pub flows: [MultipathFlow; FLOWS - 1],
}

impl MultipathState {
    /// Each flow's weight for weighted round robin (isekai
    /// `ComputeFlowWeight`).
    pub fn weights(&self) -> [u8; FLOWS] {
        let total: f64 = self.flow_fcwnd.iter().map(|w| w.to_f64()).sum();
        self.flow_fcwnd.map(|w| flow_weight(w.to_f64(), total))
    }
}

/// A flow's WRR weight: `clamp(round(15 · flow / connection), 1, 15)`.
pub fn flow_weight(flow_fcwnd: f64, connection_fcwnd: f64) -> u8 {
    if connection_fcwnd.is_nan() || connection_fcwnd <= 0.0 {
        return MIN_FLOW_WEIGHT;
    }
    let scaled = (f64::from(MAX_FLOW_WEIGHT) * flow_fcwnd / connection_fcwnd).round();
    if scaled.is_nan() {
        return MIN_FLOW_WEIGHT;
    }
    (scaled as u8).clamp(MIN_FLOW_WEIGHT, MAX_FLOW_WEIGHT)
}

/// Per-flow inputs gathered from the event (flow 0) or the state (1..=3).
struct FlowInputs {
    marker: Time24,
    rtt_state: u32,
    plb: PlbState,
}

impl Swift {
    pub(super) fn on_ack_nack_multipath(
        &mut self,
        event: &CcEvent,
        state: &mut SwiftState,
    ) -> CcResult {
        let c = &self.config;
        let now = event.t4;
        let flow = usize::from(event.cc_opaque & 3);
        init_flows(&mut state.multipath, event.fcwnd);
        let inputs = flow_inputs(event, state, flow);

        let timing = packet_timing(event);
        let rtt_state = smoothed(c.rtt_smoothing_alpha, inputs.rtt_state, timing.rtt);
        let calc_rtt = if c.calc_rtt_smooth {
            rtt_state
        } else {
            timing.rtt
        };
        // isekai: delay smoothing is not kept per flow; the flow uses the raw delay.
        let delay = timing.delay;
        let max_rtt_state = max_rtt_state(event, state, flow, rtt_state);

        let old_flow = state.multipath.flow_fcwnd[flow].to_f64();
        let (target, inv_flow) = self.target_and_inverse(old_flow, event.forward_hops);
        let delta = window_delta(now, inputs.marker);
        let new_flow = if self.use_max_fabric_decrease(event) {
            self.max_fabric_decrease(old_flow, delta, timing.rtt)
        } else {
            self.ack_fabric_window(
                event.num_packets_acked,
                old_flow,
                inv_flow,
                delay,
                target,
                delta >= timing.rtt,
            )
        };
        if new_flow < old_flow {
            self.counters.fabric_decreases += 1;
        }
        state.multipath.flow_fcwnd[flow] = Fcwnd::from_f64(new_flow);
        let marker = fabric_time_marker(
            now,
            inputs.marker,
            calc_rtt,
            old_flow,
            new_flow,
            c.min_fcwnd,
        );
        let fcwnd = connection_fcwnd(&state.multipath, c.min_fcwnd, c.max_fcwnd);
        // Gap and RTO apply to the connection: the slowest flow's RTT.
        let gap = inter_packet_gap(c.ipg_time_scalar, c.ipg_bits, fcwnd, max_rtt_state);

        let old_ncwnd = ncwnd_with_fraction(event.ncwnd, state.ncwnd_fraction);
        let (ncwnd, ncwnd_int, nic_marker, direction) =
            self.nic_window(event, now, old_ncwnd, timing.rtt, calc_rtt);
        self.counters.nic_decreases += u64::from(ncwnd < old_ncwnd);
        state.ncwnd_fraction = fraction_1024(ncwnd);
        let rto = retransmit_timeout(
            c.min_retransmit_timeout,
            max_rtt_state,
            c.retransmit_timeout_scalar,
            gap,
            c.ipg_time_scalar,
        );

        let mut plb = inputs.plb;
        let repath = self.plb(event, &mut plb, delay, target, old_flow.min(old_ncwnd));
        self.counters.plb_repaths += u64::from(repath);
        let (rtt_out, marker_out) = store_flow(event, state, flow, rtt_state, marker, plb);

        CcResult {
            connection_id: event.connection_id,
            randomize_path: repath,
            cc_metadata: event.cc_metadata,
            fcwnd: Fcwnd::from_f64(fcwnd),
            inter_packet_gap: gap,
            ncwnd: ncwnd_int,
            retransmit_timeout: Time24::new(rto),
            event_queue_select: event.event_queue_select,
            delay_select: event.delay_select,
            fabric_window_time_marker: marker_out,
            nic_window_time_marker: nic_marker,
            ncwnd_direction: direction,
            base_delay_target: event.base_delay_target,
            // isekai: delay state is not kept for multipath connections.
            delay_state: event.delay_state,
            rtt_state: rtt_out,
            // The flow `randomize_path` applies to.
            cc_opaque: event.cc_opaque & 3,
            instance: event.instance,
        }
    }

    pub(super) fn on_retransmit_multipath(
        &mut self,
        event: &CcEvent,
        state: &mut SwiftState,
    ) -> CcResult {
        let c = &self.config;
        let now = event.t4;
        let flow = usize::from(event.cc_opaque & 3);
        init_flows(&mut state.multipath, event.fcwnd);
        let inputs = flow_inputs(event, state, flow);

        let old_flow = state.multipath.flow_fcwnd[flow].to_f64();
        let delta = window_delta(now, inputs.marker);
        let new_flow =
            self.timeout_fabric_window(event.retransmit_count, old_flow, delta, inputs.rtt_state);
        if new_flow < old_flow {
            self.counters.fabric_decreases += 1;
        }
        state.multipath.flow_fcwnd[flow] = Fcwnd::from_f64(new_flow);
        let marker = fabric_time_marker(
            now,
            inputs.marker,
            inputs.rtt_state,
            old_flow,
            new_flow,
            c.min_fcwnd,
        );
        let fcwnd = connection_fcwnd(&state.multipath, c.min_fcwnd, c.max_fcwnd);
        let max_rtt_state = max_rtt_state(event, state, flow, inputs.rtt_state);
        let gap = inter_packet_gap(c.ipg_time_scalar, c.ipg_bits, fcwnd, max_rtt_state);
        let rto = retransmit_timeout(
            c.min_retransmit_timeout,
            max_rtt_state,
            c.retransmit_timeout_scalar,
            gap,
            c.ipg_time_scalar,
        );

        // PRR repaths only the flow that timed out (spec/rue.md §3.2).
        let mut plb = inputs.plb;
        let repath = self.prr(event, &mut plb);
        self.counters.prr_repaths += u64::from(repath);
        let (_, marker_out) = store_flow(event, state, flow, inputs.rtt_state, marker, plb);
        CcResult {
            randomize_path: repath,
            fcwnd: Fcwnd::from_f64(fcwnd),
            inter_packet_gap: gap,
            retransmit_timeout: Time24::new(rto),
            fabric_window_time_marker: marker_out,
            cc_opaque: event.cc_opaque & 3,
            ..CcResult::reflect(event)
        }
    }
}

/// On a connection's first multipath event, splits its current window
/// evenly over the flows (the sum stays what the datapath enforces).
fn init_flows(state: &mut MultipathState, fcwnd: Fcwnd) {
    if state.flow_fcwnd.iter().any(|w| w.raw() != 0) {
        return;
    }
    let share = Fcwnd::from_raw((fcwnd.raw() / FLOWS as u32).max(1));
    state.flow_fcwnd = [share; FLOWS];
}

fn flow_inputs(event: &CcEvent, state: &SwiftState, flow: usize) -> FlowInputs {
    match flow
        .checked_sub(1)
        .and_then(|i| state.multipath.flows.get(i))
    {
        Some(f) => FlowInputs {
            marker: f.fabric_window_time_marker,
            rtt_state: f.rtt_state,
            plb: f.plb,
        },
        None => FlowInputs {
            marker: event.fabric_window_time_marker,
            rtt_state: event.rtt_state,
            plb: state.plb,
        },
    }
}

/// Writes the flow's new state; returns the result's `rtt_state` and fabric
/// marker (flow 0's new values, or the event's unchanged for flows 1..=3).
fn store_flow(
    event: &CcEvent,
    state: &mut SwiftState,
    flow: usize,
    rtt_state: u32,
    marker: Time24,
    plb: PlbState,
) -> (u32, Time24) {
    match flow
        .checked_sub(1)
        .and_then(|i| state.multipath.flows.get_mut(i))
    {
        Some(f) => {
            *f = MultipathFlow {
                fabric_window_time_marker: marker,
                rtt_state,
                plb,
            };
            (event.rtt_state, event.fabric_window_time_marker)
        }
        None => {
            state.plb = plb;
            (rtt_state, marker)
        }
    }
}

fn max_rtt_state(event: &CcEvent, state: &SwiftState, flow: usize, flow_rtt_state: u32) -> u32 {
    let mut max = if flow == 0 {
        flow_rtt_state
    } else {
        event.rtt_state
    };
    for (i, f) in state.multipath.flows.iter().enumerate() {
        let rtt = if i + 1 == flow {
            flow_rtt_state
        } else {
            f.rtt_state
        };
        max = max.max(rtt);
    }
    max
}

fn connection_fcwnd(state: &MultipathState, min: f64, max: f64) -> f64 {
    let raw: u32 = state.flow_fcwnd.iter().map(|w| w.raw()).sum();
    // Invariant: min ≤ max (validated config).
    (f64::from(raw) / 1024.0).clamp(min, max)
}
