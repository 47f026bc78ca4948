//! DCQCN as an alternative RUE algorithm, driven by the peer's ECN count
//! (spec/rue.md §6; Zhu et al., SIGCOMM 2015; htsim `dcqcn.cpp`).
//!
//! Layer: an [`Algorithm`] with per-connection rate state in the RUE table.
//! The RUE has no timers, so DCQCN's alpha and rate-increase timers run
//! lazily: each event applies the periods elapsed since the last one
//! (spec/rue.md §6.2). A congestion notification is an increase of
//! `ecn_accumulated` since the connection's previous event. The rate maps
//! to Falcon's outputs as `fcwnd = rate × srtt / packet`, with the Swift
//! pacing gap below one packet. No clock: "now" is the event's `t4`.

use crate::algorithm::Algorithm;
use crate::blocks::{inter_packet_gap, packet_timing, retransmit_timeout, smoothed, window_delta};
use crate::config::ConfigError;
use crate::format::{
    CcEvent, CcResult, EventType, Fcwnd, RetransmitReason, Time24, MAX_ECN_ACCUMULATED,
    MAX_STATE_24,
};

const NAME: &str = "dcqcn";

/// DCQCN tunables. Rates in Mb/s, times in Falcon units (131.072 ns).
/// Defaults: the paper's timers and g (htsim), HPCC's R_AI/R_HAI scaled to
/// 200 Gb/s (5 and 50 Mb/s per 25 Gb/s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DcqcnConfig {
    /// Line rate, Mb/s, > 0. Default 200 000.
    pub line_rate_mbps: f64,
    /// Lowest rate, Mb/s, 0 < x ≤ line rate. Default 10.
    pub min_rate_mbps: f64,
    /// Rate of a new connection, Mb/s, min ..= line. Default 200 000.
    pub initial_rate_mbps: f64,
    /// Alpha gain g, 0 < g < 1. Default 1/256.
    pub g: f64,
    /// Alpha of a new connection, 0 ..= 1. Default 1.
    pub initial_alpha: f64,
    /// Alpha timer K, Falcon units, ≥ 1. Default 419 (≈ 55 µs).
    pub alpha_update_period: u32,
    /// Rate-increase timer, Falcon units, ≥ 1. Default 419 (≈ 55 µs).
    pub rate_increase_period: u32,
    /// Least time between two rate cuts (the CNP interval N), Falcon units.
    /// Default 381 (≈ 50 µs).
    pub rate_decrease_period: u32,
    /// Byte counter B: one increase step per this many ACKed bytes, ≥ 1.
    /// Default 10 MiB.
    pub byte_counter_bytes: u32,
    /// Fast-recovery steps F, 1 ..= 100. Default 5.
    pub fast_recovery_steps: u8,
    /// Additive increase R_AI, Mb/s, ≥ 0. Default 40.
    pub additive_increase_mbps: f64,
    /// Hyper increase R_HAI, Mb/s, ≥ 0. Default 400.
    pub hyper_increase_mbps: f64,
    /// Bytes per ACKed packet (byte counter and rate → window), ≥ 64.
    /// Default 4096.
    pub mtu_bytes: u32,
    /// Largest fabric window, packets. Default 256.
    pub max_fcwnd: f64,
    /// Smallest fabric window, packets. Default 0.01.
    pub min_fcwnd: f64,
    /// EWMA weight of the old RTT, 0 ≤ α < 1. Default 0.75.
    pub rtt_smoothing_alpha: f64,
    /// Smallest RTO, Falcon units. Default 7629 (≈ 1 ms).
    pub min_retransmit_timeout: u32,
    /// RTO = srtt × this + gap, ≥ 1. Default 2.
    pub retransmit_timeout_scalar: f64,
    /// Falcon units → timing-wheel units. Default 0.256.
    pub ipg_time_scalar: f64,
    /// Gap width, 1 ..= 20 bits. Default 16.
    pub ipg_bits: u8,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            line_rate_mbps: 200_000.0,
            min_rate_mbps: 10.0,
            initial_rate_mbps: 200_000.0,
            g: 1.0 / 256.0,
            initial_alpha: 1.0,
            alpha_update_period: 419,
            rate_increase_period: 419,
            rate_decrease_period: 381,
            byte_counter_bytes: 10 << 20,
            fast_recovery_steps: 5,
            additive_increase_mbps: 40.0,
            hyper_increase_mbps: 400.0,
            mtu_bytes: 4096,
            max_fcwnd: 256.0,
            min_fcwnd: 0.01,
            rtt_smoothing_alpha: 0.75,
            min_retransmit_timeout: 7629,
            retransmit_timeout_scalar: 2.0,
            ipg_time_scalar: 0.256,
            ipg_bits: 16,
        }
    }
}

impl DcqcnConfig {
    /// Checks the ranges.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, problem| Err(ConfigError::new(NAME, field, problem));
        if !(self.line_rate_mbps > 0.0 && self.line_rate_mbps.is_finite()) {
            return err("line_rate_mbps", "must be a finite number > 0");
        }
        if !(self.min_rate_mbps > 0.0 && self.min_rate_mbps <= self.line_rate_mbps) {
            return err("min_rate_mbps", "must be in (0, line_rate_mbps]");
        }
        if !(self.min_rate_mbps..=self.line_rate_mbps).contains(&self.initial_rate_mbps) {
            return err(
                "initial_rate_mbps",
                "must be within min_rate_mbps ..= line_rate_mbps",
            );
        }
        if !(self.g > 0.0 && self.g < 1.0) {
            return err("g", "must be in (0, 1)");
        }
        if !(0.0..=1.0).contains(&self.initial_alpha) {
            return err("initial_alpha", "must be in [0, 1]");
        }
        if !(1..=MAX_STATE_24).contains(&self.alpha_update_period) {
            return err(
                "alpha_update_period",
                "must be in 1 ..= 2^24 - 1 Falcon units",
            );
        }
        if !(1..=MAX_STATE_24).contains(&self.rate_increase_period) {
            return err(
                "rate_increase_period",
                "must be in 1 ..= 2^24 - 1 Falcon units",
            );
        }
        if self.rate_decrease_period > MAX_STATE_24 {
            return err("rate_decrease_period", "must be ≤ 2^24 - 1 Falcon units");
        }
        if self.byte_counter_bytes == 0 {
            return err("byte_counter_bytes", "must be ≥ 1");
        }
        if !(1..=100).contains(&self.fast_recovery_steps) {
            return err("fast_recovery_steps", "must be in 1 ..= 100");
        }
        if !(self.additive_increase_mbps >= 0.0 && self.additive_increase_mbps.is_finite()) {
            return err("additive_increase_mbps", "must be a finite number ≥ 0");
        }
        if !(self.hyper_increase_mbps >= 0.0 && self.hyper_increase_mbps.is_finite()) {
            return err("hyper_increase_mbps", "must be a finite number ≥ 0");
        }
        if self.mtu_bytes < 64 {
            return err("mtu_bytes", "must be ≥ 64");
        }
        let min_fixed = 1.0 / 1024.0;
        if !(min_fixed..=Fcwnd::MAX.to_f64()).contains(&self.max_fcwnd) {
            return err("max_fcwnd", "must be within 1/1024 ..= 2047.999");
        }
        if !(min_fixed..=self.max_fcwnd).contains(&self.min_fcwnd) {
            return err("min_fcwnd", "must be within 1/1024 ..= max_fcwnd");
        }
        if !(0.0..1.0).contains(&self.rtt_smoothing_alpha) {
            return err("rtt_smoothing_alpha", "must be in [0, 1)");
        }
        if !(1..=MAX_STATE_24).contains(&self.min_retransmit_timeout) {
            return err(
                "min_retransmit_timeout",
                "must be in 1 ..= 2^24 - 1 Falcon units",
            );
        }
        if !(self.retransmit_timeout_scalar >= 1.0 && self.retransmit_timeout_scalar.is_finite()) {
            return err("retransmit_timeout_scalar", "must be a finite number ≥ 1");
        }
        if !(self.ipg_time_scalar > 0.0 && self.ipg_time_scalar.is_finite()) {
            return err("ipg_time_scalar", "must be a finite number > 0");
        }
        if !(1..=20).contains(&self.ipg_bits) {
            return err("ipg_bits", "must be in 1 ..= 20");
        }
        Ok(())
    }
}

/// DCQCN's recovery stage, from the timer and byte-counter stages T and BC
/// (htsim boundaries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DcqcnStage {
    /// `max(T, BC) ≤ F`: the rate halves its distance to the target.
    FastRecovery,
    /// Otherwise: the target grows by R_AI per step.
    AdditiveIncrease,
    /// `min(T, BC) > F`: the target grows by `(min(T, BC) − F) × R_HAI`.
    HyperIncrease,
}

/// DCQCN's per-connection state (the reaction point). 36 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DcqcnState {
    /// Current rate RC, Mb/s.
    pub rate_mbps: f32,
    /// Target rate RT, Mb/s.
    pub target_mbps: f32,
    /// Congestion estimate α, 0 ..= 1.
    pub alpha: f32,
    /// ACKed bytes towards the next byte-counter step.
    pub byte_counter: u32,
    /// Last alpha-timer tick, Falcon time.
    pub alpha_time: Time24,
    /// Last rate-increase-timer tick, Falcon time.
    pub increase_time: Time24,
    /// Last rate cut, Falcon time.
    pub decrease_time: Time24,
    /// Timer stage T (saturating).
    pub timer_stage: u8,
    /// Byte-counter stage BC (saturating).
    pub byte_stage: u8,
    /// `ecn_accumulated` of the previous event (14-bit wrapping counter).
    pub last_ecn: u16,
    /// The connection has seen an event.
    pub initialized: bool,
}

// Invariant for `Eq` on ConnectionState: the floats are never NaN (all
// arithmetic is on finite, clamped values).
impl Eq for DcqcnState {}

impl DcqcnState {
    /// The recovery stage the next increase step is in.
    pub fn stage(&self, fast_recovery_steps: u8) -> DcqcnStage {
        let (t, bc) = (self.timer_stage, self.byte_stage);
        if t.max(bc) <= fast_recovery_steps {
            DcqcnStage::FastRecovery
        } else if t.min(bc) > fast_recovery_steps {
            DcqcnStage::HyperIncrease
        } else {
            DcqcnStage::AdditiveIncrease
        }
    }
}

/// Counters of one DCQCN profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DcqcnCounters {
    /// Rate cuts.
    pub rate_cuts: u64,
    /// Congestion notifications ignored because of the decrease period.
    pub notifications_in_period: u64,
    /// Rate-increase steps applied.
    pub increase_steps: u64,
}

/// The DCQCN algorithm for one profile.
#[derive(Clone, Debug)]
pub struct Dcqcn {
    config: DcqcnConfig,
    counters: DcqcnCounters,
}

impl Dcqcn {
    /// A DCQCN profile from a validated configuration.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] of [`DcqcnConfig::validate`].
    pub fn new(config: DcqcnConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Dcqcn {
            config,
            counters: DcqcnCounters::default(),
        })
    }

    /// The profile's configuration.
    pub fn config(&self) -> &DcqcnConfig {
        &self.config
    }

    /// Counters since construction.
    pub fn counters(&self) -> DcqcnCounters {
        self.counters
    }

    fn init(&self, state: &mut DcqcnState, event: &CcEvent, now: Time24) {
        let c = &self.config;
        *state = DcqcnState {
            rate_mbps: c.initial_rate_mbps as f32,
            target_mbps: c.initial_rate_mbps as f32,
            alpha: c.initial_alpha as f32,
            byte_counter: 0,
            alpha_time: now,
            increase_time: now,
            // The first notification may cut at once.
            decrease_time: now.wrapping_sub_units(c.rate_decrease_period),
            timer_stage: 0,
            byte_stage: 0,
            last_ecn: event.ecn_accumulated & MAX_ECN_ACCUMULATED,
            initialized: true,
        };
    }

    /// Alpha decays by (1 − g) per elapsed alpha period without a cut.
    fn decay_alpha(&self, state: &mut DcqcnState, now: Time24) {
        let k = self.config.alpha_update_period;
        let periods = window_delta(now, state.alpha_time) / k;
        if periods == 0 {
            return;
        }
        let decay = (1.0 - self.config.g).powi(periods.min(1 << 16) as i32);
        state.alpha = (f64::from(state.alpha) * decay) as f32;
        state.alpha_time = state.alpha_time.wrapping_add(periods.saturating_mul(k));
    }

    /// DCQCN reaction to a CNP: RT = RC, RC ×= (1 − α/2), α grows.
    fn cut(&mut self, state: &mut DcqcnState, now: Time24) {
        let c = &self.config;
        let alpha = f64::from(state.alpha);
        let rate = f64::from(state.rate_mbps);
        state.target_mbps = state.rate_mbps;
        state.rate_mbps = (rate * (1.0 - alpha / 2.0)).max(c.min_rate_mbps) as f32;
        state.alpha = ((1.0 - c.g) * alpha + c.g).min(1.0) as f32;
        state.timer_stage = 0;
        state.byte_stage = 0;
        state.byte_counter = 0;
        state.alpha_time = now;
        state.increase_time = now;
        state.decrease_time = now;
        self.counters.rate_cuts += 1;
    }

    /// One rate-increase step in the stage given by (T, BC).
    fn increase_step(&mut self, state: &mut DcqcnState) {
        let c = &self.config;
        let f = c.fast_recovery_steps;
        let mut target = f64::from(state.target_mbps);
        match state.stage(f) {
            DcqcnStage::FastRecovery => {}
            DcqcnStage::AdditiveIncrease => target += c.additive_increase_mbps,
            DcqcnStage::HyperIncrease => {
                let i = state.timer_stage.min(state.byte_stage) - f;
                target += f64::from(i) * c.hyper_increase_mbps;
            }
        }
        let target = target.min(c.line_rate_mbps);
        let rate =
            ((target + f64::from(state.rate_mbps)) / 2.0).clamp(c.min_rate_mbps, c.line_rate_mbps);
        state.target_mbps = target as f32;
        state.rate_mbps = rate as f32;
        self.counters.increase_steps += 1;
    }

    /// Timer and byte-counter increase events since the last event.
    fn increase(&mut self, state: &mut DcqcnState, now: Time24, acked_packets: u16) {
        let period = self.config.rate_increase_period;
        let periods = window_delta(now, state.increase_time) / period;
        state.increase_time = state
            .increase_time
            .wrapping_add(periods.saturating_mul(period));
        self.increase_steps(state, periods, Counter::Timer);
        let bytes = u64::from(acked_packets) * u64::from(self.config.mtu_bytes);
        let total = u64::from(state.byte_counter) + bytes;
        let b = u64::from(self.config.byte_counter_bytes);
        // Invariant: the remainder is < B ≤ u32::MAX; the quotient is
        // < 2^34 / 1, clamped to u32.
        state.byte_counter = (total % b) as u32;
        let steps = (total / b).min(u64::from(u32::MAX)) as u32;
        self.increase_steps(state, steps, Counter::Bytes);
    }

    /// `count` increase events of one counter. Steps run one by one while
    /// they can change the stage; once the stage is fixed (the counter that
    /// moves is past both F and the other counter, or saturated) the rest is
    /// applied in closed form, so an event after a long idle period costs
    /// O(1) instead of one step per elapsed timer period.
    fn increase_steps(&mut self, state: &mut DcqcnState, count: u32, counter: Counter) {
        let f = self.config.fast_recovery_steps;
        let mut left = count;
        while left > 0 {
            let (moving, other) = match counter {
                Counter::Timer => (state.timer_stage, state.byte_stage),
                Counter::Bytes => (state.byte_stage, state.timer_stage),
            };
            if moving > f.max(other) || moving == u8::MAX {
                self.closed_form_steps(state, left);
                let advance = u8::try_from(left).unwrap_or(u8::MAX);
                match counter {
                    Counter::Timer => state.timer_stage = state.timer_stage.saturating_add(advance),
                    Counter::Bytes => state.byte_stage = state.byte_stage.saturating_add(advance),
                }
                return;
            }
            match counter {
                Counter::Timer => state.timer_stage = state.timer_stage.saturating_add(1),
                Counter::Bytes => state.byte_stage = state.byte_stage.saturating_add(1),
            }
            self.increase_step(state);
            left -= 1;
        }
    }

    /// `m` steps of a fixed stage with target increment `a` per step:
    /// `RT_k = RT_0 + k·a`, `RC_k = (RC_{k−1} + RT_k)/2`, so the gap
    /// `D = RT − RC` follows `D_k = a + (D_0 − a)/2^k`. The step that would
    /// pass line rate is applied as the clamped step it is, and the steps
    /// after it as fast recovery towards line rate, so the result equals
    /// stepping one by one.
    fn closed_form_steps(&mut self, state: &mut DcqcnState, m: u32) {
        let c = &self.config;
        let f = c.fast_recovery_steps;
        let a = match state.stage(f) {
            DcqcnStage::FastRecovery => 0.0,
            DcqcnStage::AdditiveIncrease => c.additive_increase_mbps,
            DcqcnStage::HyperIncrease => {
                f64::from(state.timer_stage.min(state.byte_stage) - f) * c.hyper_increase_mbps
            }
        };
        let line = c.line_rate_mbps;
        let mut target = f64::from(state.target_mbps);
        let mut rate = f64::from(state.rate_mbps);
        if a > 0.0 && target + f64::from(m) * a > line {
            // Steps 1..=k1 stay at or below line rate; step k1 + 1 clamps.
            let k1 = (((line - target) / a).floor().max(0.0) as u32).min(m - 1);
            let (_, below) = fixed_stage(target, rate, a, k1);
            target = line;
            rate = (below + line) / 2.0;
            (target, rate) = fixed_stage(target, rate, 0.0, m - k1 - 1);
        } else {
            (target, rate) = fixed_stage(target, rate, a, m);
        }
        state.target_mbps = target.min(line) as f32;
        state.rate_mbps = rate.min(target).clamp(c.min_rate_mbps, line) as f32;
        self.counters.increase_steps += u64::from(m);
    }
}

/// `(RT, RC)` after `m` unclamped steps of target increment `a`.
fn fixed_stage(target: f64, rate: f64, a: f64, m: u32) -> (f64, f64) {
    let target_m = target + f64::from(m) * a;
    let gap = a + (target - rate - a) * 0.5f64.powi(m.min(2048) as i32);
    (target_m, target_m - gap)
}

/// Which DCQCN counter an increase event advances.
#[derive(Clone, Copy)]
enum Counter {
    /// The rate-increase timer (stage T).
    Timer,
    /// The byte counter (stage BC).
    Bytes,
}

impl Algorithm for Dcqcn {
    type State = DcqcnState;

    fn on_event(&mut self, event: &CcEvent, state: &mut DcqcnState) -> CcResult {
        let now = event.t4;
        if !state.initialized {
            self.init(state, event, now);
        }
        self.decay_alpha(state, now);

        let ecn = event.ecn_accumulated & MAX_ECN_ACCUMULATED;
        let marked = ecn.wrapping_sub(state.last_ecn) & MAX_ECN_ACCUMULATED;
        state.last_ecn = ecn;
        let retransmit = event.event_type == EventType::Retransmit;
        // A retransmission timeout is treated as a congestion notification
        // (DCQCN itself has no loss reaction; RoCE relies on PFC).
        let notified =
            marked > 0 || (retransmit && event.retransmit_reason == RetransmitReason::Timeout);
        if notified {
            if window_delta(now, state.decrease_time) >= self.config.rate_decrease_period {
                self.cut(state, now);
            } else {
                self.counters.notifications_in_period += 1;
            }
        } else {
            self.increase(state, now, event.num_packets_acked);
        }

        let c = &self.config;
        let srtt = if retransmit {
            event.rtt_state
        } else {
            smoothed(
                c.rtt_smoothing_alpha,
                event.rtt_state,
                packet_timing(event).rtt,
            )
        };
        // fcwnd = rate × srtt / packet: Mb/s × µs = bits.
        let srtt_us = Time24::units_to_nanos(srtt) as f64 / 1000.0;
        let packet_bits = f64::from(c.mtu_bytes) * 8.0;
        let fcwnd =
            (f64::from(state.rate_mbps) * srtt_us / packet_bits).clamp(c.min_fcwnd, c.max_fcwnd);
        let gap = inter_packet_gap(c.ipg_time_scalar, c.ipg_bits, fcwnd, srtt);
        let rto = retransmit_timeout(
            c.min_retransmit_timeout,
            srtt,
            c.retransmit_timeout_scalar,
            gap,
            c.ipg_time_scalar,
        );
        CcResult {
            fcwnd: Fcwnd::from_f64(fcwnd),
            inter_packet_gap: gap,
            retransmit_timeout: Time24::new(rto),
            rtt_state: srtt,
            ..CcResult::reflect(event)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT: u32 = 191; // ≈ 25 µs

    fn ack(now: u32, ecn: u16, acked: u16) -> CcEvent {
        CcEvent {
            t1: Time24::new(now.wrapping_sub(RTT)),
            t2: Time24::new(now.wrapping_sub(RTT) + 50),
            t3: Time24::new(now.wrapping_sub(RTT) + 60),
            t4: Time24::new(now),
            rtt_state: RTT,
            ecn_accumulated: ecn,
            num_packets_acked: acked,
            ncwnd: 64,
            ..CcEvent::default()
        }
    }

    #[test]
    fn defaults_are_valid_and_errors_name_the_field() {
        assert_eq!(DcqcnConfig::default().validate(), Ok(()));
        let e = DcqcnConfig {
            g: 0.0,
            ..DcqcnConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!((e.algorithm, e.field), ("dcqcn", "g"));
        let e = DcqcnConfig {
            min_rate_mbps: 0.0,
            ..DcqcnConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "min_rate_mbps");
    }

    //= spec/rue.md §6.1: on CNP, RT = RC, RC ×= (1 − α/2), α = (1 − g)α + g;
    //= at most one cut per decrease period.
    #[test]
    fn rate_cut_on_ecn() {
        let mut d = Dcqcn::new(DcqcnConfig::default()).unwrap();
        let mut s = DcqcnState::default();
        let r = d.on_event(&ack(10_000, 0, 1), &mut s);
        assert_eq!(s.rate_mbps, 200_000.0);
        // Line rate × 25 µs / 32768 bit = 152.8 packets.
        assert!((r.fcwnd.to_f64() - 152.8).abs() < 0.2, "{}", r.fcwnd);
        // ECN count rose: cut by α/2 = 1/2 (α starts at 1).
        let r = d.on_event(&ack(10_010, 3, 1), &mut s);
        assert_eq!(s.rate_mbps, 100_000.0);
        assert_eq!(s.target_mbps, 200_000.0);
        assert_eq!(s.alpha, 1.0);
        assert!((r.fcwnd.to_f64() - 76.4).abs() < 0.2, "{}", r.fcwnd);
        // Another mark within 50 µs: no second cut.
        d.on_event(&ack(10_100, 5, 1), &mut s);
        assert_eq!(s.rate_mbps, 100_000.0);
        assert_eq!(d.counters().notifications_in_period, 1);
        // After the period: cut again; α decayed for the elapsed periods first.
        d.on_event(&ack(10_010 + 400, 6, 1), &mut s);
        assert_eq!(s.rate_mbps, 50_000.0);
        assert_eq!(d.counters().rate_cuts, 2);
        // The 14-bit ECN counter wraps without a spurious cut.
        let mut s = DcqcnState::default();
        d.on_event(&ack(0, MAX_ECN_ACCUMULATED, 1), &mut s);
        d.on_event(&ack(1000, MAX_ECN_ACCUMULATED, 1), &mut s);
        assert_eq!(s.rate_mbps, 200_000.0);
        d.on_event(&ack(2000, 1, 1), &mut s); // 2 marks across the wrap
                                              // α decayed over 4 alpha periods first: 200 G × (1 − 0.9845/2).
        assert!(
            (f64::from(s.rate_mbps) - 101_550.0).abs() < 10.0,
            "{}",
            s.rate_mbps
        );
    }

    //= spec/rue.md §6.1: fast recovery while max(T, BC) ≤ F, additive
    //= increase in between, hyper increase once min(T, BC) > F.
    #[test]
    fn recovery_stages_in_order() {
        // One byte-counter step every two events (2 × 1023 packets of 4 KiB).
        let config = DcqcnConfig {
            byte_counter_bytes: 2 * 1023 * 4096,
            ..DcqcnConfig::default()
        };
        let f = config.fast_recovery_steps;
        let mut d = Dcqcn::new(config).unwrap();
        let mut s = DcqcnState::default();
        d.on_event(&ack(0, 0, 0), &mut s);
        d.on_event(&ack(10, 1, 0), &mut s);
        assert_eq!((s.rate_mbps, s.target_mbps), (100_000.0, 200_000.0));
        // A second cut brings the target below line rate.
        d.on_event(&ack(10 + 400, 2, 0), &mut s);
        assert_eq!((s.rate_mbps, s.target_mbps), (50_000.0, 100_000.0));

        // Each event: one increase-timer period and 1023 ACKed packets.
        let acked = 1023;
        let mut now = 410;
        let mut stages = Vec::new();
        let mut last_rate = s.rate_mbps;
        let mut last_target = s.target_mbps;
        for _ in 0..14 {
            now += config.rate_increase_period;
            let stage = s.stage(f);
            d.on_event(&ack(now, 2, acked), &mut s);
            assert!(
                s.rate_mbps >= last_rate,
                "the rate never falls without a mark"
            );
            match stage {
                DcqcnStage::FastRecovery => {
                    assert!(s.target_mbps == last_target || s.timer_stage > f)
                }
                _ => assert!(s.target_mbps > last_target || s.target_mbps == 200_000.0),
            }
            stages.push(s.stage(f));
            last_rate = s.rate_mbps;
            last_target = s.target_mbps;
        }
        // Stages only move forward, and all three are visited.
        assert!(stages.windows(2).all(|w| w[0] <= w[1]), "{stages:?}");
        assert!(stages.contains(&DcqcnStage::FastRecovery));
        assert!(stages.contains(&DcqcnStage::AdditiveIncrease));
        assert!(stages.contains(&DcqcnStage::HyperIncrease));
        // Fast recovery: 5 timer steps halve the gap to RT = 100 G each time.
        let mut s2 = DcqcnState::default();
        let mut d2 = Dcqcn::new(config).unwrap();
        d2.on_event(&ack(0, 0, 0), &mut s2);
        d2.on_event(&ack(10, 1, 0), &mut s2);
        d2.on_event(&ack(10 + 5 * config.rate_increase_period, 1, 0), &mut s2);
        assert_eq!(s2.timer_stage, 5);
        assert_eq!(s2.target_mbps, 200_000.0);
        assert!(
            (f64::from(s2.rate_mbps) - (200_000.0 - 100_000.0 / 32.0)).abs() < 1.0,
            "{}",
            s2.rate_mbps
        );
    }

    /// The closed form of a long fixed-stage run equals stepping one by one.
    #[test]
    fn closed_form_matches_steps() {
        let config = DcqcnConfig::default();
        for (timer_stage, byte_stage, m) in [(6, 0, 1), (6, 2, 300), (9, 7, 40), (255, 255, 3)] {
            let start = DcqcnState {
                rate_mbps: 20_000.0,
                target_mbps: 30_000.0,
                timer_stage,
                byte_stage,
                initialized: true,
                ..DcqcnState::default()
            };
            let mut fast = Dcqcn::new(config).unwrap();
            let mut a = start;
            fast.closed_form_steps(&mut a, m);
            let mut slow = Dcqcn::new(config).unwrap();
            let mut b = start;
            for _ in 0..m {
                slow.increase_step(&mut b);
            }
            assert!(
                (a.target_mbps - b.target_mbps).abs() <= b.target_mbps * 1e-5,
                "{a:?} {b:?}"
            );
            assert!(
                (a.rate_mbps - b.rate_mbps).abs() <= b.rate_mbps * 1e-5,
                "{a:?} {b:?}"
            );
        }
        // A connection idle for 5000 timer periods in additive increase
        // reaches line rate in one O(1) event.
        let mut d = Dcqcn::new(config).unwrap();
        let mut s = DcqcnState::default();
        d.on_event(&ack(0, 0, 0), &mut s);
        d.on_event(&ack(10, 1, 0), &mut s);
        d.on_event(&ack(10 + 5000 * 419, 1, 0), &mut s);
        assert_eq!(s.timer_stage, 255);
        assert_eq!(s.target_mbps, 200_000.0);
        assert!(s.rate_mbps > 199_000.0, "{}", s.rate_mbps);
    }

    #[test]
    fn pacing_below_one_packet() {
        let config = DcqcnConfig {
            initial_rate_mbps: 100.0,
            ..DcqcnConfig::default()
        };
        let mut d = Dcqcn::new(config).unwrap();
        let mut s = DcqcnState::default();
        let r = d.on_event(&ack(1000, 0, 0), &mut s);
        // 100 Mb/s × 25.03 µs / 32768 bits = 0.0764 packets.
        assert!(r.fcwnd.to_f64() < 1.0);
        // Spacing rtt/fcwnd = 32768 bits / 100 Mb/s = 327.7 µs = 640 TS units;
        // the gap is that minus one RTT (48.9 TS units).
        let spacing_ts = f64::from(r.inter_packet_gap) + f64::from(RTT) * 0.256;
        assert!((spacing_ts - 640.0).abs() < 10.0, "{spacing_ts}");
    }
}
