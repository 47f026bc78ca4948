//! The datapath side of the RUE interface: CC state, events, results.
//!
//! Layer: delivery. Owns [`CcState`] — the per-connection congestion state
//! the datapath keeps as a copy of the last RUE result and copies into the
//! next event (the spec's stateless RUE, OCP Falcon 0.9 §10.6.2) — and
//! [`RueEvents`], which builds the 64-byte CC events ([`rue::CcEvent`]) on
//! ACK, NACK and retransmission, applies the admission predicates (§10.6.1;
//! spec/falcon.md §7.7) and applies results. The algorithm is the `rue`
//! crate's; this module never computes a window.
//!
//! Admission: the §7.7 table is [`rue::Admission`]'s; this module keeps its
//! inputs (time since the connection's last event, packets ACKed since) and
//! the per-connection rule: at most one event outstanding (isekai). While
//! one is, ACK information keeps accumulating into a pending ACK event
//! (sent after the result), and NACK and retransmit events are dropped and
//! counted. A deferred event stays pending and is offered again.
//!
//! Connection instances (`rue::format`, "Connection instances"): the
//! engine reuses a connection id once its connection is closed, and with
//! the RUE on another core the closed connection's event or result may
//! still be in flight. Every event carries the connection's instance, the
//! first also `new_instance` (the RUE then starts from a blank state), and
//! a result is applied only if it carries the instance back: a result of
//! the id's previous connection is refused, never applied to this one.

use core::time::Duration;

use rue::{
    Admission, AdmissionConfig, CcEvent, CcResult, DelaySelect, EventType, Fcwnd, NcwndDirection,
    RetransmitReason, Time24, Verdict,
};

use crate::delivery::config::DeliveryConfig;
use crate::delivery::connection::DeliveryConnection;
use crate::time::{falcon_units_nanos, to_falcon_units, Timestamp};

/// isekai's admission for a 65536-event queue (admit until full).
fn default_admission() -> Admission {
    // Invariant: for_capacity sets t1 = t2 = t3, which validate accepts.
    Admission::new(AdmissionConfig::for_capacity(65_536)).expect("equal thresholds are valid")
}
use crate::wire::FalconTime32;

/// The congestion state of one connection: the last RUE result's fields
/// (OCP Falcon 0.9 §10.6.2.2), which the next event carries back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcState {
    /// Fabric congestion window.
    pub fcwnd: Fcwnd,
    /// NIC congestion window.
    pub ncwnd: u16,
    /// Pacing gap when fcwnd < 1, in 512 ns timing-wheel units.
    pub inter_packet_gap: u32,
    /// Retransmit timeout, in Falcon units (131.072 ns).
    pub retransmit_timeout: Time24,
    /// RUE-to-RUE metadata (24 bits); its top 22 bits travel as the ACK's
    /// RUE info, all 24 as the NACK's.
    pub cc_metadata: u32,
    /// Which RUE event queue.
    pub event_queue_select: u8,
    /// Which delay the RUE uses.
    pub delay_select: DelaySelect,
    /// fcwnd guard (§10.3.6).
    pub fabric_window_time_marker: Time24,
    /// ncwnd guard.
    pub nic_window_time_marker: Time24,
    /// Direction of the last ncwnd change.
    pub ncwnd_direction: NcwndDirection,
    /// Base target delay (profile index in bits 23:21).
    pub base_delay_target: u32,
    /// Smoothed delay (RUE state).
    pub delay_state: u32,
    /// Smoothed RTT (RUE state).
    pub rtt_state: u32,
    /// RUE scratch bits.
    pub cc_opaque: u8,
}

impl CcState {
    /// The CM's initial state from the config: initial fcwnd, ncwnd and
    /// RTO, everything else zero, delay_select Fabric (isekai default).
    pub fn from_config(config: &DeliveryConfig) -> Self {
        CcState {
            fcwnd: Fcwnd::from_f64(config.initial_fcwnd),
            ncwnd: config.initial_ncwnd,
            inter_packet_gap: 0,
            retransmit_timeout: Time24::new(to_falcon_units(config.initial_rto)),
            cc_metadata: 0,
            event_queue_select: 0,
            delay_select: DelaySelect::Fabric,
            fabric_window_time_marker: Time24::ZERO,
            nic_window_time_marker: Time24::ZERO,
            ncwnd_direction: NcwndDirection::Decrease,
            base_delay_target: 0,
            delay_state: 0,
            rtt_state: 0,
            cc_opaque: 0,
        }
    }

    /// The retransmit timeout as a duration (at least one unit).
    pub fn rto(&self) -> Duration {
        Duration::from_nanos(self.rto_nanos())
    }

    /// [`rto`](Self::rto) in nanoseconds, for the per-packet timer of the
    /// transmit path (see [`Timestamp::saturating_add_nanos`]).
    ///
    /// [`Timestamp::saturating_add_nanos`]: crate::time::Timestamp::saturating_add_nanos
    #[inline]
    pub fn rto_nanos(&self) -> u64 {
        falcon_units_nanos(u64::from(self.retransmit_timeout.value().max(1)))
    }
}

/// The measurements of one ACK or NACK for its RUE event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckSample {
    /// t1: our TX time of the packet the ACK answers (echoed).
    pub t1: FalconTime32,
    /// t2: its receive time at the peer (echoed).
    pub t2: FalconTime32,
    /// t3: the ACK's TX time at the peer (its PSP IV).
    pub t3: FalconTime32,
    /// t4: the ACK's receive time here.
    pub t4: FalconTime32,
    /// Forward hop count from the CC info.
    pub forward_hops: u8,
    /// Peer's receive-buffer level.
    pub rx_buffer_level: u8,
    /// CC info V\[23:0\] (RUE info and, for ACKs, OWN).
    pub cc_metadata: u32,
    /// ECN count echoed by the peer (14 bits).
    pub ecn_accumulated: u16,
    /// An EACK.
    pub eack: bool,
    /// The EACK showed a loss by the OOO-distance rule.
    pub eack_drop: bool,
}

/// Event generation, admission and result application for one connection.
#[derive(Debug, Clone)]
pub struct RueEvents {
    connection_id: u32,
    /// Which use of `connection_id` this connection is (24 bits).
    instance: u32,
    /// No event handed out yet: the next one carries `new_instance`.
    first_event: bool,
    /// The congestion state (last result).
    pub state: CcState,
    admission: Admission,
    outstanding: bool,
    pending: Option<CcEvent>,
    acked_since_event: u32,
    last_event: Option<Timestamp>,
}

impl RueEvents {
    /// No event pending or outstanding. Invalid admission thresholds (which
    /// [`DeliveryConfig::validate`] rejects) fall back to isekai's default.
    pub fn new(connection_id: u32, state: CcState, admission: AdmissionConfig) -> Self {
        let admission = Admission::new(admission).unwrap_or_else(|_| default_admission());
        RueEvents {
            connection_id,
            instance: 0,
            first_event: true,
            state,
            admission,
            outstanding: false,
            pending: None,
            acked_since_event: 0,
            last_event: None,
        }
    }

    /// Sets the connection's instance (modulo 2^24), which its events
    /// carry and its results must carry back.
    pub fn set_instance(&mut self, instance: u32) {
        self.instance = instance & rue::format::MAX_INSTANCE;
    }

    /// The connection's instance.
    pub fn instance(&self) -> u32 {
        self.instance
    }

    /// Whether `result` is for this connection: its id and its instance.
    #[inline]
    pub fn matches(&self, result: &CcResult) -> bool {
        result.connection_id == self.connection_id && result.instance == self.instance
    }

    /// An event was handed out and its result not yet applied.
    pub fn is_outstanding(&self) -> bool {
        self.outstanding
    }

    /// An event waits for admission.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// An ACK was processed: `acked` packets newly acknowledged.
    pub fn on_ack(&mut self, sample: &AckSample, acked: u32) {
        self.acked_since_event = self.acked_since_event.saturating_add(acked);
        if let Some(pending) = &self.pending {
            // A pending NACK or retransmit event is not displaced by an ACK.
            if pending.event_type != EventType::Ack {
                return;
            }
        }
        self.pending = Some(self.event(EventType::Ack, sample));
    }

    /// Packets acknowledged by a piggy-backed ACK (no timestamps: no event of
    /// their own, counted into the next one).
    pub fn on_piggybacked_ack(&mut self, acked: u32) {
        self.acked_since_event = self.acked_since_event.saturating_add(acked);
    }

    /// A NACK was processed. Returns false if the event was suppressed (one
    /// outstanding).
    pub fn on_nack(&mut self, sample: &AckSample, nack_code: u8, acked: u32) -> bool {
        self.acked_since_event = self.acked_since_event.saturating_add(acked);
        if self.outstanding {
            return false;
        }
        if matches!(&self.pending, Some(p) if p.event_type == EventType::Retransmit) {
            return false;
        }
        let mut event = self.event(EventType::Nack, sample);
        event.nack_code = nack_code;
        self.pending = Some(event);
        true
    }

    /// A packet was retransmitted at `now` (`count`: its timeout retransmit
    /// counter). Returns false if suppressed.
    pub fn on_retransmit(&mut self, now: Timestamp, count: u8, reason: RetransmitReason) -> bool {
        if self.outstanding {
            return false;
        }
        // rue::CcEvent: "for retransmit events ... the datapath writes the
        // time of the retransmission into t4".
        let t4 = now.falcon_time32();
        let sample = AckSample {
            t4,
            ..AckSample::default()
        };
        let mut event = self.event(EventType::Retransmit, &sample);
        event.retransmit_count = count.min(rue::format::MAX_RETRANSMIT_COUNT);
        event.retransmit_reason = reason;
        self.pending = Some(event);
        true
    }

    /// Hands out the pending event if [`rue::Admission`] admits it (§7.7)
    /// given the RUE event queue's occupancy and capacity.
    pub fn poll(&mut self, now: Timestamp, occupancy: usize, capacity: usize) -> Option<CcEvent> {
        if self.outstanding {
            return None;
        }
        let pending = self.pending.as_ref()?;
        // P1 in Falcon units; no event yet counts as long ago.
        let since_last_event = match self.last_event {
            None => u32::MAX,
            Some(last) => to_falcon_units(now.saturating_duration_since(last)),
        };
        let verdict = self.admission.verdict(
            occupancy,
            capacity,
            since_last_event,
            self.acked_since_event,
        );
        if verdict != Verdict::Admit {
            return None;
        }
        let mut event = *pending;
        self.pending = None;
        // The state travels as of now (a result may have been applied since
        // the event was built).
        self.copy_state(&mut event);
        event.num_packets_acked = rue::saturate_acked(self.acked_since_event);
        event.new_instance = self.first_event;
        self.first_event = false;
        self.acked_since_event = 0;
        self.outstanding = true;
        self.last_event = Some(now);
        Some(event)
    }

    /// Applies a result: the state becomes a copy of it and the next event
    /// may go. Returns the previous state (to see what changed).
    pub fn apply(&mut self, result: &CcResult) -> CcState {
        let previous = self.state;
        self.state = CcState {
            fcwnd: result.fcwnd,
            ncwnd: result.ncwnd,
            inter_packet_gap: result.inter_packet_gap,
            retransmit_timeout: result.retransmit_timeout,
            cc_metadata: result.cc_metadata,
            event_queue_select: result.event_queue_select,
            delay_select: result.delay_select,
            fabric_window_time_marker: result.fabric_window_time_marker,
            nic_window_time_marker: result.nic_window_time_marker,
            ncwnd_direction: result.ncwnd_direction,
            base_delay_target: result.base_delay_target,
            delay_state: result.delay_state,
            rtt_state: result.rtt_state,
            cc_opaque: result.cc_opaque,
        };
        self.outstanding = false;
        previous
    }

    fn copy_state(&self, event: &mut CcEvent) {
        let state = &self.state;
        event.fcwnd = state.fcwnd;
        event.inter_packet_gap = state.inter_packet_gap;
        event.ncwnd = state.ncwnd;
        event.retransmit_timeout = state.retransmit_timeout;
        event.event_queue_select = state.event_queue_select;
        event.delay_select = state.delay_select;
        event.fabric_window_time_marker = state.fabric_window_time_marker;
        event.nic_window_time_marker = state.nic_window_time_marker;
        event.ncwnd_direction = state.ncwnd_direction;
        event.base_delay_target = state.base_delay_target;
        event.delay_state = state.delay_state;
        event.rtt_state = state.rtt_state;
        event.cc_opaque = state.cc_opaque;
    }

    fn event(&self, event_type: EventType, sample: &AckSample) -> CcEvent {
        let time = |t: FalconTime32| Time24::new(t.value());
        let state = &self.state;
        CcEvent {
            connection_id: self.connection_id,
            event_type,
            t1: time(sample.t1),
            t2: time(sample.t2),
            t3: time(sample.t3),
            t4: time(sample.t4),
            retransmit_count: 0,
            retransmit_reason: RetransmitReason::Timeout,
            nack_code: 0,
            forward_hops: sample.forward_hops,
            rx_buffer_level: sample.rx_buffer_level,
            cc_metadata: sample.cc_metadata,
            fcwnd: state.fcwnd,
            inter_packet_gap: state.inter_packet_gap,
            ncwnd: state.ncwnd,
            retransmit_timeout: state.retransmit_timeout,
            num_packets_acked: 0,
            eack_drop: sample.eack_drop,
            eack: sample.eack,
            event_queue_select: state.event_queue_select,
            delay_select: state.delay_select,
            fabric_window_time_marker: state.fabric_window_time_marker,
            nic_window_time_marker: state.nic_window_time_marker,
            ncwnd_direction: state.ncwnd_direction,
            base_delay_target: state.base_delay_target,
            delay_state: state.delay_state,
            rtt_state: state.rtt_state,
            cc_opaque: state.cc_opaque,
            ecn_accumulated: sample.ecn_accumulated,
            instance: self.instance,
            new_instance: false,
            gen: false,
        }
    }
}

impl DeliveryConnection {
    /// Sets which use of its RUE connection id this connection is (its
    /// events carry it; a result must carry it back to be applied).
    pub fn set_rue_instance(&mut self, instance: u32) {
        self.rue.set_instance(instance);
    }

    /// The connection's RUE instance (24 bits).
    pub fn rue_instance(&self) -> u32 {
        self.rue.instance()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(admission: AdmissionConfig) -> RueEvents {
        RueEvents::new(
            7,
            CcState::from_config(&DeliveryConfig::default()),
            admission,
        )
    }

    fn sample(t1: u32) -> AckSample {
        AckSample {
            t1: FalconTime32::new(t1),
            t2: FalconTime32::new(t1 + 10),
            t3: FalconTime32::new(t1 + 12),
            t4: FalconTime32::new((1 << 24) + t1 + 30),
            forward_hops: 3,
            rx_buffer_level: 9,
            cc_metadata: 0x12_3456,
            ecn_accumulated: 5,
            eack: true,
            eack_drop: false,
        }
    }

    #[test]
    fn one_event_outstanding_acks_accumulate_nacks_suppressed() {
        let mut rue = events(AdmissionConfig::for_capacity(64));
        let t = Timestamp::from_micros(1);
        assert_eq!(rue.poll(t, 0, 64), None);
        rue.on_ack(&sample(100), 3);
        let event = rue.poll(t, 0, 64).unwrap();
        assert_eq!(event.event_type, EventType::Ack);
        assert_eq!(event.connection_id, 7);
        assert_eq!(event.num_packets_acked, 3);
        assert_eq!(event.t4.value(), 130, "24-bit: the 2^24 wrapped away");
        assert_eq!((event.forward_hops, event.rx_buffer_level), (3, 9));
        assert_eq!(event.fcwnd, Fcwnd::from_f64(32.0));
        assert_eq!(event.retransmit_timeout.value(), 7_630);
        assert!(rue.is_outstanding());
        rue.on_ack(&sample(200), 2);
        assert!(!rue.on_nack(&sample(210), 1, 1));
        assert!(!rue.on_retransmit(t, 1, RetransmitReason::Timeout));
        assert_eq!(rue.poll(t, 0, 64), None, "outstanding");
        let mut result = CcResult::reflect(&event);
        result.fcwnd = Fcwnd::from_f64(3.5);
        result.rtt_state = 99;
        let previous = rue.apply(&result);
        assert_eq!(previous.fcwnd, Fcwnd::from_f64(32.0));
        assert_eq!(rue.state.fcwnd, Fcwnd::from_f64(3.5));
        let next = rue.poll(t, 0, 64).unwrap();
        assert_eq!(next.event_type, EventType::Ack);
        assert_eq!(next.num_packets_acked, 3, "2 + the NACK's 1");
        assert_eq!(next.t1.value(), 200);
        assert_eq!(next.rtt_state, 99, "state copied from the result");
        assert_eq!(next.fcwnd, Fcwnd::from_f64(3.5));
    }

    #[test]
    fn nack_and_retransmit_events_take_precedence_over_acks() {
        let mut rue = events(AdmissionConfig::for_capacity(64));
        let t = Timestamp::from_micros(1);
        rue.on_ack(&sample(1), 1);
        assert!(rue.on_nack(&sample(2), 2, 0));
        rue.on_ack(&sample(3), 1);
        let event = rue.poll(t, 0, 64).unwrap();
        assert_eq!((event.event_type, event.nack_code), (EventType::Nack, 2));
        assert_eq!(event.num_packets_acked, 2);
        rue.apply(&CcResult::reflect(&event));
        assert!(rue.on_retransmit(Timestamp::from_micros(2), 9, RetransmitReason::Early));
        let event = rue.poll(t, 0, 64).unwrap();
        assert_eq!(event.event_type, EventType::Retransmit);
        assert_eq!(event.retransmit_count, 7, "3-bit field saturates");
        assert_eq!(event.retransmit_reason, RetransmitReason::Early);
        assert_eq!(event.t4, Time24::from_nanos(2_000));
    }

    #[test]
    fn admission_defers_keeps_pending_and_refuses_when_full() {
        let admission = AdmissionConfig {
            t1: 10,
            t2: 20,
            t3: 30,
            min_event_interval: 763, // ≈ 100 µs
            min_packets_acked: 4,
        };
        let start = Timestamp::from_micros(1_000);
        let mut rue = events(admission);
        rue.on_ack(&sample(1), 0);
        assert_eq!(rue.poll(start, 40, 40), None, "full");
        let first = rue.poll(start, 5, 40).unwrap();
        rue.apply(&CcResult::reflect(&first));
        rue.on_ack(&sample(2), 3);
        let later = start + Duration::from_micros(50);
        // [T2, T3): P1 only; 50 µs < 100 µs: deferred, still pending.
        assert_eq!(rue.poll(later, 25, 40), None);
        assert!(rue.is_pending());
        // [T1, T2): P1 or P2; 3 + 1 acked = P2.
        rue.on_ack(&sample(3), 1);
        let event = rue.poll(later, 15, 40).unwrap();
        assert_eq!(event.num_packets_acked, 4);
        rue.apply(&CcResult::reflect(&event));
        // From T3: P1 and P2.
        rue.on_ack(&sample(4), 4);
        assert_eq!(rue.poll(later + Duration::from_micros(99), 35, 40), None);
        assert!(rue
            .poll(later + Duration::from_micros(101), 35, 40)
            .is_some());
    }
}
