//! Configuration of the packet delivery sublayer.
//!
//! Layer: delivery. Owns [`DeliveryConfig`] (per-connection fixed parameters
//! and the initial congestion state, OCP Falcon 0.9 §9.1.1 "initialized once
//! when the connection is configured") and its validation. Values only: no
//! IO, no allocation.
//!
//! The defaults are spec/falcon.md §8 (isekai's Gen1 defaults; the spec
//! gives names, not numbers, spec/falcon.md §10). Extensions beyond spec 0.9
//! (RACK-TLP, pausing first transmissions on OWN) are `None` by default
//! (DESIGN.md §4).

use core::fmt;
use core::time::Duration;

use rue::AdmissionConfig;

use crate::time::to_falcon_units;

/// Fixed parameters of every delivery connection built from this config.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryConfig {
    /// Transmitter sliding-window size per window, in packets: the retransmit
    /// buffer holds this many packets per window (OCP Falcon 0.9 §9: "sized
    /// considering the network RTT"). Default 1024 (isekai TX bitmap).
    pub tx_window: u32,
    /// Capacity of each first-transmission queue (Pull Request, Push Data,
    /// Pull Data), in packets. Default 1024.
    pub submit_queue: u32,
    /// Initial fabric congestion window, in packets (fractional below 1:
    /// paced). Default 32 (spec/falcon.md §8).
    pub initial_fcwnd: f64,
    /// Initial NIC congestion window, in outstanding requests per window.
    /// Default 64.
    pub initial_ncwnd: u16,
    /// Initial retransmit timeout until the RUE sets one. Default 1 ms.
    pub initial_rto: Duration,
    /// Retransmit timeout of a packet the receiver reported received but not
    /// yet ULP-acknowledged (data-rx-bitmap without data-ack-bitmap). Default
    /// 5 ms (spec/falcon.md §5.7, isekai `ulp_rto`).
    pub ulp_rto: Duration,
    /// Max Retransmit Attempts (timeout retransmissions per packet) before
    /// the packet is replaced by a Resync (OCP Falcon 0.9 §11). Unlimited in
    /// isekai, "in hardware, say 7": default 7.
    pub max_retransmit_attempts: u8,
    /// ACK coalescing count: an ACK is sent once this many coalescing credits
    /// accumulate (+2 per received non-Push packet or drop, +1 per Push Data
    /// arrival and +1 per ULP ACK; isekai). Default 10.
    pub ack_coalescing_count: u16,
    /// ACK Coalescing Timeout (OCP Falcon 0.9 §9.1.1). Default 8 µs.
    pub ack_coalescing_timeout: Duration,
    /// ACK Request Fcwnd Threshold: at or below this fcwnd every packet
    /// carries AR (§9.1.3.1). Default 2.
    pub ack_request_fcwnd_threshold: f64,
    /// ACK Request Percent: the share of packets with AR above the threshold.
    /// Default 10.
    pub ack_request_percent: u8,
    /// Out-of-order Distance Threshold of early retransmission (§9.1.4).
    /// Default 3.
    pub ooo_distance_threshold: u32,
    /// Early retransmissions allowed per packet (isekai
    /// `early_retx_threshold`). Default 16.
    pub max_early_retransmits: u8,
    /// Pause first transmissions of a window while its OWN notification is
    /// pending (isekai `enable_pause_initial_transmission_on_oow_drops`,
    /// beyond spec 0.9). Default `None` (off).
    pub own_pause: Option<OwnPause>,
    /// RACK-TLP loss detection (spec/rue.md §4, beyond spec 0.9). Default
    /// `None` (off). Both ends must enable it: the receiver then sends an
    /// EACK whenever its data-rx-bitmap is non-zero (§9.1.6).
    pub rack_tlp: Option<RackTlpConfig>,
    /// RUE event admission thresholds (OCP Falcon 0.9 §10.6.1;
    /// spec/falcon.md §7.7), applied with [`rue::Admission`]: T1/T2/T3 on
    /// the RUE event queue's occupancy, P1 (Falcon units since the
    /// connection's last event) and P2 (packets ACKed since). Default
    /// isekai's: T1 = T2 = T3 = 65536 (admit until full), P1 1024 units
    /// (≈ 134 µs), P2 512.
    pub rue_admission: AdmissionConfig,
    /// Also send RUE retransmit events (reason Early) for early
    /// retransmissions. isekai sends none (spec/rue.md §4.2). Default false.
    pub rue_early_retransmit_events: bool,
    /// The TTL (hop limit) every node sends with; hop count = this − the
    /// received TTL (OCP Falcon 0.9 §10.6.1 p.89). Default 64.
    pub initial_ttl: u8,
    /// Capacity of the outgoing NACK queue; a NACK that does not fit is not
    /// sent (the peer recovers by retransmission). Default 32.
    pub nack_queue: u16,
}

/// Pausing first transmissions on an out-of-window notification (isekai).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnPause {
    /// The pause of the request window ends when ACK RBPSN + this ≥ RNPSN.
    /// Default 32.
    pub request_slack: u32,
    /// The pause of the data window ends when ACK DBPSN + this ≥ DNPSN.
    /// Default 64.
    pub data_slack: u32,
}

/// RACK-TLP parameters (spec/rue.md §4.2, isekai `FalconConfig.EarlyRetx`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RackTlpConfig {
    /// Reordering window as a fraction of the smoothed RTT. Default 0.25.
    pub reorder_window_rtt_factor: f64,
    /// Lower bound of the reordering window. Default 0.
    pub min_reorder_window: Duration,
    /// Tail-loss probe timeout as a multiple of the smoothed RTT (plus the
    /// ACK coalescing timeout). Default 2.0.
    pub tlp_timeout_rtt_factor: f64,
    /// Lower bound of the probe timeout. Default 50 µs.
    pub min_tlp_timeout: Duration,
}

/// A configuration value out of range: names the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigError {
    /// The field, as spelled in [`DeliveryConfig`] (dotted for nested ones).
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl DeliveryConfig {
    /// Largest TX window: PSN distances stay far below 2^31, and the ring of
    /// retransmit slots stays small.
    pub const MAX_TX_WINDOW: u32 = 1 << 16;

    /// Checks every field.
    ///
    /// # Errors
    ///
    /// The first field out of range, by name.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, problem| Err(ConfigError { field, problem });
        if self.tx_window == 0 || self.tx_window > Self::MAX_TX_WINDOW {
            return err("tx_window", "must be in 1..=65536 packets");
        }
        if self.submit_queue == 0 || self.submit_queue > Self::MAX_TX_WINDOW {
            return err("submit_queue", "must be in 1..=65536 packets");
        }
        // 21-bit fixed point with 10 fractional bits (OCP Falcon 0.9 §10.6.2).
        if !(self.initial_fcwnd.is_finite()
            && self.initial_fcwnd >= 1.0 / 1024.0
            && self.initial_fcwnd < 2048.0)
        {
            return err("initial_fcwnd", "must be in [1/1024, 2048) packets");
        }
        // ncwnd is 11 bits in the RUE result (§10.6.2.2).
        if self.initial_ncwnd == 0 || self.initial_ncwnd > 2047 {
            return err("initial_ncwnd", "must be in 1..=2047");
        }
        // The RUE carries RTOs as 24-bit Falcon times (≈ 2.199 s).
        if self.initial_rto.is_zero() || to_falcon_units(self.initial_rto) >= 1 << 24 {
            return err("initial_rto", "must be in (0, 2.199 s)");
        }
        if self.ulp_rto.is_zero() || self.ulp_rto > Duration::from_secs(60) {
            return err("ulp_rto", "must be in (0, 60 s]");
        }
        if self.max_retransmit_attempts == 0 {
            return err("max_retransmit_attempts", "must be at least 1");
        }
        if self.ack_coalescing_count == 0 {
            return err("ack_coalescing_count", "must be at least 1");
        }
        if self.ack_coalescing_timeout > Duration::from_secs(1) {
            return err("ack_coalescing_timeout", "must be at most 1 s");
        }
        if !(self.ack_request_fcwnd_threshold.is_finite()
            && self.ack_request_fcwnd_threshold >= 0.0)
        {
            return err(
                "ack_request_fcwnd_threshold",
                "must be a non-negative number",
            );
        }
        if self.ack_request_percent > 100 {
            return err("ack_request_percent", "must be in 0..=100");
        }
        if self.ooo_distance_threshold >= 128 {
            return err(
                "ooo_distance_threshold",
                "must be below 128 (the data window)",
            );
        }
        if let Some(pause) = self.own_pause {
            if pause.request_slack == 0 || pause.request_slack > self.tx_window {
                return err("own_pause.request_slack", "must be in 1..=tx_window");
            }
            if pause.data_slack == 0 || pause.data_slack > self.tx_window {
                return err("own_pause.data_slack", "must be in 1..=tx_window");
            }
        }
        // The RACK-TLP timers multiply and add these to RTT samples taken
        // from packet input (up to 2^31 Falcon units ≈ 281 s): the bounds keep
        // that `Duration` arithmetic from overflowing (a panic).
        if let Some(rack) = self.rack_tlp {
            if !(rack.reorder_window_rtt_factor.is_finite()
                && (0.0..=1000.0).contains(&rack.reorder_window_rtt_factor))
            {
                return err("rack_tlp.reorder_window_rtt_factor", "must be in [0, 1000]");
            }
            if !(rack.tlp_timeout_rtt_factor.is_finite()
                && rack.tlp_timeout_rtt_factor > 0.0
                && rack.tlp_timeout_rtt_factor <= 1000.0)
            {
                return err("rack_tlp.tlp_timeout_rtt_factor", "must be in (0, 1000]");
            }
            if rack.min_reorder_window > Duration::from_secs(60) {
                return err("rack_tlp.min_reorder_window", "must be at most 60 s");
            }
            if rack.min_tlp_timeout.is_zero() || rack.min_tlp_timeout > Duration::from_secs(60) {
                return err("rack_tlp.min_tlp_timeout", "must be in (0, 60 s]");
            }
        }
        if self.rue_admission.validate().is_err() {
            return err(
                "rue_admission",
                "thresholds must be non-decreasing (t1 <= t2 <= t3)",
            );
        }
        if self.nack_queue == 0 {
            return err("nack_queue", "must be at least 1");
        }
        Ok(())
    }
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            tx_window: 1024,
            submit_queue: 1024,
            initial_fcwnd: 32.0,
            initial_ncwnd: 64,
            initial_rto: Duration::from_millis(1),
            ulp_rto: Duration::from_millis(5),
            max_retransmit_attempts: 7,
            ack_coalescing_count: 10,
            ack_coalescing_timeout: Duration::from_micros(8),
            ack_request_fcwnd_threshold: 2.0,
            ack_request_percent: 10,
            ooo_distance_threshold: 3,
            max_early_retransmits: 16,
            own_pause: None,
            rack_tlp: None,
            rue_admission: AdmissionConfig::for_capacity(65_536),
            rue_early_retransmit_events: false,
            initial_ttl: 64,
            nack_queue: 32,
        }
    }
}

impl Default for OwnPause {
    fn default() -> Self {
        OwnPause {
            request_slack: 32,
            data_slack: 64,
        }
    }
}

impl Default for RackTlpConfig {
    fn default() -> Self {
        RackTlpConfig {
            reorder_window_rtt_factor: 0.25,
            min_reorder_window: Duration::ZERO,
            tlp_timeout_rtt_factor: 2.0,
            min_tlp_timeout: Duration::from_micros(50),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "delivery config `{}`: {}", self.field, self.problem)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_spec_falcon_md_section_8_and_valid() {
        let config = DeliveryConfig::default();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.tx_window, 1024);
        assert_eq!(config.initial_fcwnd, 32.0);
        assert_eq!(config.initial_ncwnd, 64);
        assert_eq!(config.ack_coalescing_count, 10);
        assert_eq!(config.ack_coalescing_timeout, Duration::from_micros(8));
        assert_eq!(config.ack_request_fcwnd_threshold, 2.0);
        assert_eq!(config.ack_request_percent, 10);
        assert_eq!(config.ooo_distance_threshold, 3);
        assert_eq!(config.initial_rto, Duration::from_millis(1));
        assert_eq!(config.ulp_rto, Duration::from_millis(5));
        assert_eq!(config.max_retransmit_attempts, 7);
        assert_eq!(config.rack_tlp, None);
        assert_eq!(config.own_pause, None);
        assert_eq!(OwnPause::default().data_slack, 64);
    }

    #[test]
    fn validate_names_the_field() {
        let bad = |edit: fn(&mut DeliveryConfig)| {
            let mut config = DeliveryConfig::default();
            edit(&mut config);
            config.validate().map_err(|e| e.field)
        };
        assert_eq!(bad(|c| c.tx_window = 0), Err("tx_window"));
        assert_eq!(bad(|c| c.initial_fcwnd = 0.0), Err("initial_fcwnd"));
        assert_eq!(bad(|c| c.initial_fcwnd = 4096.0), Err("initial_fcwnd"));
        assert_eq!(bad(|c| c.initial_ncwnd = 4096), Err("initial_ncwnd"));
        assert_eq!(
            bad(|c| c.initial_rto = Duration::from_secs(3)),
            Err("initial_rto")
        );
        assert_eq!(
            bad(|c| c.max_retransmit_attempts = 0),
            Err("max_retransmit_attempts")
        );
        assert_eq!(
            bad(|c| c.ack_request_percent = 101),
            Err("ack_request_percent")
        );
        assert_eq!(
            bad(|c| c.ooo_distance_threshold = 128),
            Err("ooo_distance_threshold")
        );
        assert_eq!(bad(|c| c.rue_admission.t2 = 3), Err("rue_admission"));
        assert_eq!(
            bad(|c| c.rack_tlp = Some(RackTlpConfig {
                min_tlp_timeout: Duration::ZERO,
                ..RackTlpConfig::default()
            })),
            Err("rack_tlp.min_tlp_timeout")
        );
        // Values that would overflow the RACK timers' `Duration` arithmetic.
        assert_eq!(
            bad(|c| c.rack_tlp = Some(RackTlpConfig {
                min_reorder_window: Duration::MAX,
                ..RackTlpConfig::default()
            })),
            Err("rack_tlp.min_reorder_window")
        );
        assert_eq!(
            bad(|c| c.rack_tlp = Some(RackTlpConfig {
                reorder_window_rtt_factor: 1e300,
                ..RackTlpConfig::default()
            })),
            Err("rack_tlp.reorder_window_rtt_factor")
        );
        assert_eq!(
            bad(|c| c.rack_tlp = Some(RackTlpConfig {
                tlp_timeout_rtt_factor: 1e300,
                ..RackTlpConfig::default()
            })),
            Err("rack_tlp.tlp_timeout_rtt_factor")
        );
        let error = DeliveryConfig {
            nack_queue: 0,
            ..DeliveryConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "delivery config `nack_queue`: must be at least 1"
        );
    }
}
