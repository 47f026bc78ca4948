//! Swift tunables and their validation (OCP Falcon 0.9 §10.5; defaults and
//! checks from isekai `swift.cc`/`swift.h`, spec/rue.md §1.8–1.9).
//!
//! Layer: configuration only; no event processing here.

use crate::config::ConfigError;
use crate::format::{Fcwnd, MAX_NCWND, MAX_RX_BUFFER_LEVEL, MAX_STATE_24};
use crate::plb::{PlbConfig, PrrConfig};

const NAME: &str = "swift";

/// One Swift profile. Times in Falcon units (131.072 ns), windows in
/// packets (fcwnd) or requests (ncwnd). `Default` is isekai's
/// `Swift::DefaultConfiguration`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwiftConfig {
    /// Largest fabric window, packets, 1/1024 ..= 2047.999. Default 256.
    pub max_fcwnd: f64,
    /// Smallest fabric window, packets, 1/1024 ..= `max_fcwnd`. Default 0.01
    /// (after repeated RTOs at ~500 µs RTT this paces at ~50 ms).
    pub min_fcwnd: f64,
    /// Fabric additive increment per RTT, packets, > 0. Default 1.0.
    pub fabric_additive_increment: f64,
    /// Fabric multiplicative decrease factor β, 0 < β < 1. Default 0.8.
    pub fabric_multiplicative_decrease_factor: f64,
    /// Largest fabric decrease per RTT (max MDF), 0 < x < 1. Default 0.5.
    pub max_fabric_multiplicative_decrease: f64,
    /// Apply the max decrease on an EACK with `eack_drop` or a NACK
    /// `RX_WINDOW_ERROR`, instead of the delay rule. Default false.
    pub max_decrease_on_eack_nack_drop: bool,
    /// Base target delay, Falcon units, 1 ..= 2^24 − 1. Default 191 (≈ 25 µs).
    pub fabric_base_delay: u32,
    /// Target-delay adder per forward hop, Falcon units, 1 ..= 4095.
    /// Default 8 (≈ 1 µs).
    pub topo_scaling_per_hop: u32,
    /// Window at which flow scaling adds `max_flow_scaling`, packets, > 0.
    /// Default 0.1.
    pub min_flow_scaling_window: f64,
    /// Window at which flow scaling adds 0, packets, > `min_flow_scaling_window`.
    /// Default 256.
    pub max_flow_scaling_window: f64,
    /// Largest flow-scaling adder, Falcon units. Default 763 (≈ 100 µs).
    pub max_flow_scaling: u32,
    /// Largest NIC window, requests, 1 ..= 2047. Default 256.
    pub max_ncwnd: f64,
    /// Smallest NIC window, requests, 1 ..= `max_ncwnd`. Default 1.
    pub min_ncwnd: f64,
    /// NIC additive increment per event, requests, ≥ 1. Default 1.0.
    pub nic_additive_increment: f64,
    /// NIC multiplicative decrease factor, 0 < x < 1. Default 0.8.
    pub nic_multiplicative_decrease_factor: f64,
    /// Largest NIC decrease per RTT, 0 < x < 1. Default 0.5.
    pub max_nic_multiplicative_decrease: f64,
    /// Target quantized RX buffer level of the peer, 0 ..= 31. Default 15.
    pub target_rx_buffer_level: u8,
    /// EWMA weight of the *old* RTT, 0 ≤ α < 1. Default 0.75.
    pub rtt_smoothing_alpha: f64,
    /// EWMA weight of the *old* delay, 0 ≤ α < 1. Default 0 (no smoothing).
    pub delay_smoothing_alpha: f64,
    /// Use the smoothed RTT (instead of the sample) for the pacing gap and
    /// the time-marker drag. Default false.
    pub calc_rtt_smooth: bool,
    /// Smallest retransmit timeout, Falcon units, 1 ..= 2^24 − 1. Default
    /// 7629 (≈ 1 ms, the simulator's initial RTO).
    pub min_retransmit_timeout: u32,
    /// RTO = smoothed RTT × this (+ the pacing gap), ≥ 1. Default 2.0.
    pub retransmit_timeout_scalar: f64,
    /// Timeout-retransmission count at which fcwnd drops to its minimum,
    /// 1 ..= 255. Default 3.
    pub retransmit_limit: u8,
    /// Falcon units → timing-wheel units (131.072 ns / 512 ns), > 0.
    /// Default 0.256.
    pub ipg_time_scalar: f64,
    /// Width the pacing gap saturates to, 1 ..= 20 bits. Default 16
    /// (≈ 33.6 ms at 512 ns).
    pub ipg_bits: u8,
    /// PLB: congested rounds → repath.
    pub plb: PlbConfig,
    /// PRR: repath on retransmission timeout (extension, off by default).
    pub prr: PrrConfig,
    /// Per-flow windows for multipath connections (spec/rue.md §2.7; an
    /// extension beyond spec 0.9, off by default). With it, the event's
    /// `cc_opaque` carries the flow id (0..=3) of the path the ACKed packet
    /// took, and the result's `cc_opaque` names the flow `randomize_path`
    /// applies to.
    pub multipath: bool,
}

impl Default for SwiftConfig {
    fn default() -> Self {
        SwiftConfig {
            max_fcwnd: 256.0,
            min_fcwnd: 0.01,
            fabric_additive_increment: 1.0,
            fabric_multiplicative_decrease_factor: 0.8,
            max_fabric_multiplicative_decrease: 0.5,
            max_decrease_on_eack_nack_drop: false,
            fabric_base_delay: 191,
            topo_scaling_per_hop: 8,
            min_flow_scaling_window: 0.1,
            max_flow_scaling_window: 256.0,
            max_flow_scaling: 763,
            max_ncwnd: 256.0,
            min_ncwnd: 1.0,
            nic_additive_increment: 1.0,
            nic_multiplicative_decrease_factor: 0.8,
            max_nic_multiplicative_decrease: 0.5,
            target_rx_buffer_level: 15,
            rtt_smoothing_alpha: 0.75,
            delay_smoothing_alpha: 0.0,
            calc_rtt_smooth: false,
            min_retransmit_timeout: 7629,
            retransmit_timeout_scalar: 2.0,
            retransmit_limit: 3,
            ipg_time_scalar: 0.256,
            ipg_bits: 16,
            plb: PlbConfig::default(),
            prr: PrrConfig::default(),
            multipath: false,
        }
    }
}

impl SwiftConfig {
    /// Checks every field as isekai does (spec/rue.md §1.8), plus the PLB
    /// and PRR sub-configs.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let min_fixed = 1.0 / f64::from(1u32 << Fcwnd::FRACTION_BITS);
        let max_fixed = Fcwnd::MAX.to_f64();
        let err = |field, problem| Err(ConfigError::new(NAME, field, problem));
        if !(min_fixed..=max_fixed).contains(&self.max_fcwnd) {
            return err(
                "max_fcwnd",
                "must be within 1/1024 ..= 2047.999 (21-bit 11.10 fixed point)",
            );
        }
        if !(min_fixed..=self.max_fcwnd).contains(&self.min_fcwnd) {
            return err("min_fcwnd", "must be within 1/1024 ..= max_fcwnd");
        }
        if !(self.fabric_additive_increment > 0.0 && self.fabric_additive_increment.is_finite()) {
            return err("fabric_additive_increment", "must be a finite number > 0");
        }
        if !open_unit(self.fabric_multiplicative_decrease_factor) {
            return err("fabric_multiplicative_decrease_factor", "must be in (0, 1)");
        }
        if !open_unit(self.max_fabric_multiplicative_decrease) {
            return err("max_fabric_multiplicative_decrease", "must be in (0, 1)");
        }
        if !(1..=MAX_STATE_24).contains(&self.fabric_base_delay) {
            return err(
                "fabric_base_delay",
                "must be in 1 ..= 2^24 - 1 Falcon units",
            );
        }
        if !(1..=4095).contains(&self.topo_scaling_per_hop) {
            return err("topo_scaling_per_hop", "must be in 1 ..= 4095 Falcon units");
        }
        if !(self.min_flow_scaling_window > 0.0 && self.min_flow_scaling_window.is_finite()) {
            return err("min_flow_scaling_window", "must be a finite number > 0");
        }
        if !(self.max_flow_scaling_window > self.min_flow_scaling_window
            && self.max_flow_scaling_window.is_finite())
        {
            return err(
                "max_flow_scaling_window",
                "must be finite and > min_flow_scaling_window",
            );
        }
        if self.max_flow_scaling > MAX_STATE_24 {
            return err("max_flow_scaling", "must be ≤ 2^24 - 1 Falcon units");
        }
        if !(1.0..=f64::from(MAX_NCWND)).contains(&self.max_ncwnd) {
            return err("max_ncwnd", "must be within 1 ..= 2047 (11-bit Gen1 field)");
        }
        if !(1.0..=self.max_ncwnd).contains(&self.min_ncwnd) {
            return err("min_ncwnd", "must be within 1 ..= max_ncwnd");
        }
        if !(self.nic_additive_increment >= 1.0 && self.nic_additive_increment.is_finite()) {
            return err("nic_additive_increment", "must be a finite number ≥ 1");
        }
        if !open_unit(self.nic_multiplicative_decrease_factor) {
            return err("nic_multiplicative_decrease_factor", "must be in (0, 1)");
        }
        if !open_unit(self.max_nic_multiplicative_decrease) {
            return err("max_nic_multiplicative_decrease", "must be in (0, 1)");
        }
        if self.target_rx_buffer_level > MAX_RX_BUFFER_LEVEL {
            return err("target_rx_buffer_level", "must be in 0 ..= 31");
        }
        if !(0.0..1.0).contains(&self.rtt_smoothing_alpha) {
            return err("rtt_smoothing_alpha", "must be in [0, 1)");
        }
        if !(0.0..1.0).contains(&self.delay_smoothing_alpha) {
            return err("delay_smoothing_alpha", "must be in [0, 1)");
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
        if self.retransmit_limit == 0 {
            return err("retransmit_limit", "must be in 1 ..= 255");
        }
        if !(self.ipg_time_scalar > 0.0 && self.ipg_time_scalar.is_finite()) {
            return err("ipg_time_scalar", "must be a finite number > 0");
        }
        if !(1..=20).contains(&self.ipg_bits) {
            return err("ipg_bits", "must be in 1 ..= 20 (the field is 20 bits)");
        }
        self.plb.validate(NAME)?;
        if self.plb.enabled && (self.max_fcwnd > 1024.0 || self.max_ncwnd > 1024.0) {
            // OCP Falcon 0.9 §10.4 with isekai's 10-bit PLB counters: one round
            // (old_window packets) must fit the counter.
            return err(
                "plb.enabled",
                "needs max_fcwnd and max_ncwnd ≤ 1024 (10-bit round counters)",
            );
        }
        self.prr.validate(NAME)?;
        Ok(())
    }
}

fn open_unit(x: f64) -> bool {
    x > 0.0 && x < 1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(SwiftConfig::default().validate(), Ok(()));
    }

    #[test]
    fn errors_name_the_field() {
        let bad = |f: fn(&mut SwiftConfig)| {
            let mut c = SwiftConfig::default();
            f(&mut c);
            c.validate().map_err(|e| e.field)
        };
        assert_eq!(bad(|c| c.max_fcwnd = 4096.0), Err("max_fcwnd"));
        assert_eq!(bad(|c| c.min_fcwnd = 300.0), Err("min_fcwnd"));
        assert_eq!(bad(|c| c.min_fcwnd = f64::NAN), Err("min_fcwnd"));
        assert_eq!(
            bad(|c| c.fabric_additive_increment = 0.0),
            Err("fabric_additive_increment")
        );
        assert_eq!(
            bad(|c| c.fabric_multiplicative_decrease_factor = 1.0),
            Err("fabric_multiplicative_decrease_factor")
        );
        assert_eq!(
            bad(|c| c.max_fabric_multiplicative_decrease = 0.0),
            Err("max_fabric_multiplicative_decrease")
        );
        assert_eq!(bad(|c| c.fabric_base_delay = 0), Err("fabric_base_delay"));
        assert_eq!(
            bad(|c| c.topo_scaling_per_hop = 4096),
            Err("topo_scaling_per_hop")
        );
        assert_eq!(
            bad(|c| c.max_flow_scaling_window = 0.05),
            Err("max_flow_scaling_window")
        );
        assert_eq!(bad(|c| c.max_ncwnd = 2048.0), Err("max_ncwnd"));
        assert_eq!(bad(|c| c.min_ncwnd = 0.5), Err("min_ncwnd"));
        assert_eq!(
            bad(|c| c.nic_additive_increment = 0.5),
            Err("nic_additive_increment")
        );
        assert_eq!(
            bad(|c| c.target_rx_buffer_level = 32),
            Err("target_rx_buffer_level")
        );
        assert_eq!(
            bad(|c| c.rtt_smoothing_alpha = 1.0),
            Err("rtt_smoothing_alpha")
        );
        assert_eq!(
            bad(|c| c.min_retransmit_timeout = 0),
            Err("min_retransmit_timeout")
        );
        assert_eq!(
            bad(|c| c.retransmit_timeout_scalar = 0.5),
            Err("retransmit_timeout_scalar")
        );
        assert_eq!(bad(|c| c.retransmit_limit = 0), Err("retransmit_limit"));
        assert_eq!(bad(|c| c.ipg_bits = 21), Err("ipg_bits"));
        assert_eq!(
            bad(|c| c.plb.attempt_threshold = 16),
            Err("plb.attempt_threshold")
        );
        assert_eq!(
            bad(|c| {
                c.plb.enabled = true;
                c.max_fcwnd = 2000.0;
            }),
            Err("plb.enabled")
        );
        assert_eq!(
            bad(|c| c.prr.min_retransmit_count = 0),
            Err("prr.min_retransmit_count")
        );
        let e = SwiftConfig {
            ipg_bits: 0,
            ..SwiftConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "swift.ipg_bits: must be in 1 ..= 20 (the field is 20 bits)"
        );
    }
}
