//! The bypass algorithm: the RUE's test double (isekai `rue/algorithm/bypass.cc`
//! reflects its inputs). Echoes the event's CC state, optionally pinning
//! fcwnd, ncwnd and the RTO to fixed values, and counts the events it saw.
//!
//! Layer: an [`Algorithm`] with no per-connection state, for tests of the
//! datapath ↔ RUE plumbing and as the no-op baseline of `falcon bench rue`.

use crate::algorithm::Algorithm;
use crate::config::ConfigError;
use crate::format::{CcEvent, CcResult, Fcwnd, Time24, MAX_NCWND, MAX_STATE_24};

/// Fixed values the bypass algorithm returns; `None` echoes the event.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BypassConfig {
    /// Fixed fabric window, packets, 0 ..= 2047.999 (pacing gap 0 when ≥ 1).
    pub fcwnd: Option<f64>,
    /// Fixed NIC window, requests, 0 ..= 2047.
    pub ncwnd: Option<u16>,
    /// Fixed retransmit timeout, Falcon units, 1 ..= 2^24 − 1.
    pub retransmit_timeout: Option<u32>,
}

impl BypassConfig {
    /// Checks the ranges.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(w) = self.fcwnd {
            if !(0.0..=Fcwnd::MAX.to_f64()).contains(&w) {
                return Err(ConfigError::new(
                    "bypass",
                    "fcwnd",
                    "must be within 0 ..= 2047.999",
                ));
            }
        }
        if self.ncwnd.is_some_and(|n| n > MAX_NCWND) {
            return Err(ConfigError::new(
                "bypass",
                "ncwnd",
                "must be within 0 ..= 2047",
            ));
        }
        if self
            .retransmit_timeout
            .is_some_and(|t| !(1..=MAX_STATE_24).contains(&t))
        {
            return Err(ConfigError::new(
                "bypass",
                "retransmit_timeout",
                "must be in 1 ..= 2^24 - 1 Falcon units",
            ));
        }
        Ok(())
    }
}

/// The bypass algorithm.
#[derive(Clone, Debug)]
pub struct Bypass {
    fcwnd: Option<Fcwnd>,
    ncwnd: Option<u16>,
    retransmit_timeout: Option<Time24>,
    events: u64,
}

impl Bypass {
    /// A bypass algorithm from a validated configuration.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] of [`BypassConfig::validate`].
    pub fn new(config: BypassConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Bypass {
            fcwnd: config.fcwnd.map(Fcwnd::from_f64),
            ncwnd: config.ncwnd,
            retransmit_timeout: config.retransmit_timeout.map(Time24::new),
            events: 0,
        })
    }

    /// Events seen since construction.
    pub fn events(&self) -> u64 {
        self.events
    }
}

impl Algorithm for Bypass {
    type State = ();

    #[inline]
    fn on_event(&mut self, event: &CcEvent, _state: &mut ()) -> CcResult {
        self.events += 1;
        let mut result = CcResult::reflect(event);
        if let Some(w) = self.fcwnd {
            result.fcwnd = w;
            if w >= Fcwnd::ONE {
                result.inter_packet_gap = 0;
            }
        }
        if let Some(n) = self.ncwnd {
            result.ncwnd = n;
        }
        if let Some(t) = self.retransmit_timeout {
            result.retransmit_timeout = t;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_or_pins() {
        let ev = CcEvent {
            connection_id: 9,
            fcwnd: Fcwnd::from_f64(0.5),
            inter_packet_gap: 77,
            ncwnd: 12,
            retransmit_timeout: Time24::new(5000),
            rtt_state: 300,
            ..CcEvent::default()
        };
        let mut echo = Bypass::new(BypassConfig::default()).unwrap();
        assert_eq!(echo.on_event(&ev, &mut ()), CcResult::reflect(&ev));
        let mut fixed = Bypass::new(BypassConfig {
            fcwnd: Some(8.0),
            ncwnd: Some(4),
            retransmit_timeout: Some(9000),
        })
        .unwrap();
        let r = fixed.on_event(&ev, &mut ());
        assert_eq!(
            (
                r.fcwnd,
                r.inter_packet_gap,
                r.ncwnd,
                r.retransmit_timeout.value()
            ),
            (Fcwnd::from_f64(8.0), 0, 4, 9000)
        );
        assert_eq!(r.rtt_state, 300);
        assert_eq!(fixed.events(), 1);
        assert_eq!(
            BypassConfig {
                ncwnd: Some(4096),
                ..BypassConfig::default()
            }
            .validate()
            .map_err(|e| e.field),
            Err("ncwnd")
        );
    }
}
