//! PLB (Protective Load Balancing: congested rounds → repath) and PRR
//! (Protective ReRoute: repath on a retransmission timeout), as building
//! blocks Swift calls; plus a seeded flow-label generator for the datapath.
//!
//! Layer: per-connection (or per-flow) repath decisions from counters the
//! caller keeps. The RUE only *decides* a repath (`randomize_path` in the
//! Gen1 result); the datapath draws the new IPv6 flow label, for which
//! [`FlowLabelGenerator`] is offered. Nothing here reads a clock or an OS
//! random source: the generator is seeded by its owner.

use crate::config::ConfigError;

/// PLB tunables (OCP Falcon 0.9 §10.4, §10.5.3; defaults from isekai,
/// spec/rue.md §1.9).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlbConfig {
    /// Run PLB (isekai `randomize_path`). Default off, as in isekai.
    pub enabled: bool,
    /// An ACK is congested when `smoothed_delay > target ×` this. Default 1.01.
    pub target_delay_multiplier: f64,
    /// A round is congested when at least this fraction of its ACKed packets
    /// was congested, 0 < x ≤ 1. Default 0.5.
    pub congestion_threshold: f64,
    /// Consecutive congested rounds before a repath, 1..=15 (4-bit counter).
    /// Default 5.
    pub attempt_threshold: u8,
}

impl Default for PlbConfig {
    fn default() -> Self {
        PlbConfig {
            enabled: false,
            target_delay_multiplier: 1.01,
            congestion_threshold: 0.5,
            attempt_threshold: 5,
        }
    }
}

impl PlbConfig {
    /// Checks the ranges.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first bad field.
    pub fn validate(&self, algorithm: &'static str) -> Result<(), ConfigError> {
        if !(self.target_delay_multiplier > 0.0 && self.target_delay_multiplier.is_finite()) {
            return Err(ConfigError::new(
                algorithm,
                "plb.target_delay_multiplier",
                "must be a finite number > 0",
            ));
        }
        if !(self.congestion_threshold > 0.0 && self.congestion_threshold <= 1.0) {
            return Err(ConfigError::new(
                algorithm,
                "plb.congestion_threshold",
                "must be in (0, 1]",
            ));
        }
        if !(1..=PlbState::MAX_ATTEMPTS).contains(&self.attempt_threshold) {
            return Err(ConfigError::new(
                algorithm,
                "plb.attempt_threshold",
                "must be in 1..=15 (4-bit counter)",
            ));
        }
        Ok(())
    }
}

/// PRR tunables (spec/rue.md §3.2). An extension beyond spec 0.9, so off by
/// default (DESIGN §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrrConfig {
    /// Repath on retransmission timeouts. Default off.
    pub enabled: bool,
    /// Repath from this timeout-retransmission count of a packet on, 1..=7
    /// (Linux rehashes on every RTO: 1). Default 1.
    pub min_retransmit_count: u8,
    /// After a PRR repath, PLB rounds during which congestion-driven repaths
    /// are suppressed, 0..=255, so PLB does not move the flow back onto a
    /// black-holed path. Linux pauses 60 s; a 24-bit Falcon time stamp wraps
    /// every 2.2 s and cannot hold that, so we count PLB rounds (≈ RTTs)
    /// instead. Default 255.
    pub plb_pause_rounds: u8,
}

impl Default for PrrConfig {
    fn default() -> Self {
        PrrConfig {
            enabled: false,
            min_retransmit_count: 1,
            plb_pause_rounds: 255,
        }
    }
}

impl PrrConfig {
    /// Checks the ranges.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first bad field.
    pub fn validate(&self, algorithm: &'static str) -> Result<(), ConfigError> {
        if !(1..=7).contains(&self.min_retransmit_count) {
            return Err(ConfigError::new(
                algorithm,
                "prr.min_retransmit_count",
                "must be in 1..=7 (3-bit count)",
            ));
        }
        Ok(())
    }
}

/// PLB counters of one connection or flow, packed in 32 bits: packets ACKed
/// in the current round, 10 bits, of which congested, 10 bits, consecutive congested
/// rounds, 4 bits (isekai widths), PRR pause rounds left, 8 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PlbState(u32);

impl PlbState {
    /// Largest consecutive-congested-rounds count (4 bits).
    pub const MAX_ATTEMPTS: u8 = 15;
    const COUNT_MASK: u32 = (1 << 10) - 1;

    /// Counters from their packed form.
    pub const fn from_bits(bits: u32) -> Self {
        PlbState(bits)
    }

    /// The packed form.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Packets ACKed in the current round.
    pub const fn packets_acknowledged(self) -> u32 {
        self.0 & Self::COUNT_MASK
    }

    /// Congested packets ACKed in the current round.
    pub const fn packets_congestion_acknowledged(self) -> u32 {
        (self.0 >> 10) & Self::COUNT_MASK
    }

    /// Consecutive congested rounds.
    pub const fn reroute_attempted(self) -> u8 {
        ((self.0 >> 20) & 0xF) as u8
    }

    /// PLB rounds left during which repaths are suppressed (after PRR).
    pub const fn pause_rounds(self) -> u8 {
        (self.0 >> 24) as u8
    }

    fn with(acked: u32, congested: u32, attempts: u8, pause: u8) -> Self {
        PlbState(
            acked.min(Self::COUNT_MASK)
                | congested.min(Self::COUNT_MASK) << 10
                | u32::from(attempts.min(Self::MAX_ATTEMPTS)) << 20
                | u32::from(pause) << 24,
        )
    }

    /// Starts (or restarts) the post-PRR pause and forgets congested rounds.
    pub fn pause(&mut self, rounds: u8) {
        *self = Self::with(
            self.packets_acknowledged(),
            self.packets_congestion_acknowledged(),
            0,
            rounds,
        );
    }
}

/// One ACK for PLB (OCP Falcon 0.9 §10.4 `ComputePlb`; isekai
/// `ComputePlb`): counts ACKed and congested packets; once a round (at
/// least `old_window` packets, the smaller of fcwnd and ncwnd before this
/// event) is complete, judges it and returns `true` when
/// `attempt_threshold` consecutive rounds were congested.
///
/// NACK events must not be passed here (isekai skips them), nor retransmit
/// events (OCP Falcon 0.9 §10.4: PLB "runs at every ACK event").
pub fn on_ack(
    config: &PlbConfig,
    state: &mut PlbState,
    num_packets_acked: u16,
    congested: bool,
    old_window: f64,
) -> bool {
    let acked = state.packets_acknowledged() + u32::from(num_packets_acked);
    let mut congested_acked = state.packets_congestion_acknowledged();
    if congested {
        congested_acked += u32::from(num_packets_acked);
    }
    let mut attempts = state.reroute_attempted();
    let mut pause = state.pause_rounds();
    if (acked as f64) < old_window {
        *state = PlbState::with(acked, congested_acked, attempts, pause);
        return false;
    }
    // A round is complete. `acked` ≥ old_window > 0 unless the window is 0
    // and nothing was ACKed: treat 0/0 as an uncongested round.
    let fraction = if acked == 0 {
        0.0
    } else {
        congested_acked as f64 / acked as f64
    };
    let mut reroute = false;
    if fraction < config.congestion_threshold {
        attempts = 0;
    } else {
        attempts = attempts.saturating_add(1).min(PlbState::MAX_ATTEMPTS);
        // spec/rue.md §3.2: no congestion-driven repath while PRR's pause runs.
        if attempts >= config.attempt_threshold && pause == 0 {
            reroute = true;
            attempts = 0;
        }
    }
    pause = pause.saturating_sub(1);
    *state = PlbState::with(0, 0, attempts, pause);
    reroute
}

/// Whether a retransmit event repaths under PRR (spec/rue.md §3.2: change
/// the flow label on every retransmission timeout, as Linux
/// `tcp_write_timeout()` does), and if so starts PLB's pause.
pub fn on_retransmit_timeout(config: &PrrConfig, plb: &mut PlbState, retransmit_count: u8) -> bool {
    if !config.enabled || retransmit_count < config.min_retransmit_count {
        return false;
    }
    plb.pause(config.plb_pause_rounds);
    true
}

/// A seeded xorshift generator of 20-bit IPv6 flow labels for the datapath
/// to apply when a result says `randomize_path` (isekai draws the label in
/// the datapath for Gen1). With multipath the low 2 bits carry the flow id
/// (spec/rue.md §2.7; isekai `RandomFlowLabel`).
#[derive(Clone, Debug)]
pub struct FlowLabelGenerator {
    state: u64,
}

impl FlowLabelGenerator {
    /// Largest flow label (20 bits).
    pub const MAX_LABEL: u32 = (1 << 20) - 1;

    /// A generator from a seed (any value; 0 is remapped).
    pub fn new(seed: u64) -> Self {
        FlowLabelGenerator {
            state: if seed == 0 {
                0x9E37_79B9_7F4A_7C15
            } else {
                seed
            },
        }
    }

    /// A new label different from `current`, never 0 (0 means "no label").
    pub fn next_label(&mut self, current: u32) -> u32 {
        loop {
            let label = (self.next_u64() >> 44) as u32 & Self::MAX_LABEL;
            if label != 0 && label != current {
                return label;
            }
        }
    }

    /// A new label for a flow of a multipath connection: random upper 18
    /// bits, the flow id (0..=3) in the low 2 bits.
    pub fn next_flow_label(&mut self, flow_id: u8, current: u32) -> u32 {
        loop {
            let label = ((self.next_u64() >> 46) as u32) << 2 | u32::from(flow_id & 3);
            if label != current && label >> 2 != 0 {
                return label & Self::MAX_LABEL;
            }
        }
    }

    fn next_u64(&mut self) -> u64 {
        // xorshift64* (Vigna); period 2^64 − 1, never yields a zero state.
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on() -> PlbConfig {
        PlbConfig {
            enabled: true,
            ..PlbConfig::default()
        }
    }

    #[test]
    fn five_congested_rounds_repath() {
        let config = on();
        let mut state = PlbState::default();
        // Window 10: each event ACKs 10 packets = one round, all congested.
        for round in 1..=4 {
            assert!(!on_ack(&config, &mut state, 10, true, 10.0));
            assert_eq!(state.reroute_attempted(), round);
        }
        assert!(on_ack(&config, &mut state, 10, true, 10.0));
        assert_eq!(state.reroute_attempted(), 0);
    }

    #[test]
    fn an_uncongested_round_resets_the_count() {
        let config = on();
        let mut state = PlbState::default();
        for _ in 0..4 {
            on_ack(&config, &mut state, 10, true, 10.0);
        }
        // Half a round congested (5 of 10 ≥ 0.5) still counts; 4 of 10 resets.
        assert!(!on_ack(&config, &mut state, 5, true, 10.0));
        assert_eq!(state.packets_acknowledged(), 5);
        assert!(on_ack(&config, &mut state, 5, false, 10.0));
        for _ in 0..4 {
            on_ack(&config, &mut state, 10, true, 10.0);
        }
        on_ack(&config, &mut state, 4, true, 10.0);
        assert!(!on_ack(&config, &mut state, 6, false, 10.0));
        assert_eq!(state.reroute_attempted(), 0);
    }

    #[test]
    fn prr_pause_suppresses_plb() {
        let config = on();
        let prr = PrrConfig {
            enabled: true,
            min_retransmit_count: 1,
            plb_pause_rounds: 6,
        };
        let mut state = PlbState::default();
        assert!(on_retransmit_timeout(&prr, &mut state, 1));
        assert_eq!(state.pause_rounds(), 6);
        let repaths: Vec<bool> = (0..11)
            .map(|_| on_ack(&config, &mut state, 10, true, 10.0))
            .collect();
        // Rounds 1..=6 are paused (the count saturates at the threshold),
        // round 7 is the first that may repath.
        assert_eq!(repaths.iter().position(|r| *r), Some(6));
        assert!(!on_retransmit_timeout(&PrrConfig::default(), &mut state, 1));
    }

    #[test]
    fn labels_are_deterministic_and_20_bit() {
        let mut a = FlowLabelGenerator::new(7);
        let mut b = FlowLabelGenerator::new(7);
        let mut last = 0;
        for _ in 0..1000 {
            let label = a.next_label(last);
            assert_eq!(label, b.next_label(last));
            assert!(label != 0 && label <= FlowLabelGenerator::MAX_LABEL && label != last);
            last = label;
            let flow = a.next_flow_label(2, 0);
            b.next_flow_label(2, 0);
            assert_eq!(flow & 3, 2);
            assert!(flow <= FlowLabelGenerator::MAX_LABEL);
        }
    }
}
