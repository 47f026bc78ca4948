//! The RUE event admission policy the datapath applies before pushing an
//! event (OCP Falcon 0.9 §10.6.1; spec/falcon.md §7.7; isekai
//! `CanEnqueueEvent`).
//!
//! Layer: a pure predicate over the event queue's occupancy and two
//! per-connection figures the datapath keeps (time since the connection's
//! last event, packets ACKed since). It never touches a queue itself; the
//! "at most one outstanding event per connection" rule (ACK counts
//! accumulate, NACK/retransmit events are dropped while one is in flight)
//! is the datapath's.

use crate::config::ConfigError;
use crate::format::Time24;

/// Thresholds of the admission policy. Occupancies in events, P1 in Falcon
/// time units, P2 in packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Below this occupancy every event is admitted (T1).
    pub t1: usize,
    /// From T1 to here, P1 or P2 must hold (T2 ≥ T1).
    pub t2: usize,
    /// From T2 to here, P1 must hold; from here until full, P1 and P2 (T3 ≥ T2).
    pub t3: usize,
    /// P1: at least this long since the connection's last event, Falcon
    /// units. Default 1024 (≈ 134 µs).
    pub min_event_interval: u32,
    /// P2: at least this many packets ACKed since the connection's last
    /// event. Default 512.
    pub min_packets_acked: u32,
}

impl AdmissionConfig {
    /// isekai's defaults for a queue of `capacity` events: all thresholds at
    /// the capacity, so every event is admitted until the queue is full.
    pub fn for_capacity(capacity: usize) -> Self {
        AdmissionConfig {
            t1: capacity,
            t2: capacity,
            t3: capacity,
            min_event_interval: 1024,
            min_packets_acked: 512,
        }
    }

    /// Checks T1 ≤ T2 ≤ T3.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first threshold out of order.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.t2 < self.t1 {
            return Err(ConfigError::new("admission", "t2", "must be ≥ t1"));
        }
        if self.t3 < self.t2 {
            return Err(ConfigError::new("admission", "t3", "must be ≥ t2"));
        }
        Ok(())
    }
}

/// What the admission policy decided for one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Push the event.
    Admit,
    /// Do not push: the occupancy band's predicate does not hold (count it;
    /// ACK counts keep accumulating for the connection's next event).
    Defer,
    /// Do not push: the queue is full (the queue never overwrites).
    Full,
}

/// The admission policy.
#[derive(Clone, Copy, Debug)]
pub struct Admission {
    config: AdmissionConfig,
}

impl Admission {
    /// A policy from validated thresholds.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] of [`AdmissionConfig::validate`].
    pub fn new(config: AdmissionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Admission { config })
    }

    /// The thresholds.
    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    /// Decides for one event of a connection.
    ///
    /// `occupancy` and `capacity` are the event queue's (in events);
    /// `since_last_event` is the connection's time since its last event, in
    /// Falcon units; `packets_acked` its packets ACKed since then.
    pub fn verdict(
        &self,
        occupancy: usize,
        capacity: usize,
        since_last_event: u32,
        packets_acked: u32,
    ) -> Verdict {
        if occupancy >= capacity {
            return Verdict::Full;
        }
        let c = &self.config;
        // OCP Falcon 0.9 §10.6.1 says "greater than" for both predicates;
        // isekai `CanEnqueueEvent` uses ≥, which we follow (DESIGN §4).
        let p1 = since_last_event >= c.min_event_interval;
        let p2 = packets_acked >= c.min_packets_acked;
        let admit = if occupancy < c.t1 {
            true
        } else if occupancy < c.t2 {
            p1 || p2
        } else if occupancy < c.t3 {
            p1
        } else {
            p1 && p2
        };
        if admit {
            Verdict::Admit
        } else {
            Verdict::Defer
        }
    }

    /// [`Admission::verdict`] with P1 from two 24-bit times (wrap-safe;
    /// correct while the last event is less than ≈ 2.2 s back).
    pub fn verdict_at(
        &self,
        occupancy: usize,
        capacity: usize,
        now: Time24,
        last_event: Time24,
        packets_acked: u32,
    ) -> Verdict {
        self.verdict(
            occupancy,
            capacity,
            now.wrapping_sub(last_event),
            packets_acked,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    //= spec/falcon.md §7.7 table: < T1 always; [T1, T2) P1 ∨ P2; [T2, T3) P1;
    //= [T3, full) P1 ∧ P2; full never.
    #[test]
    fn bands() {
        let a = Admission::new(AdmissionConfig {
            t1: 10,
            t2: 20,
            t3: 30,
            min_event_interval: 100,
            min_packets_acked: 8,
        })
        .unwrap();
        use Verdict::*;
        let cases = [
            // (occupancy, elapsed, acked) → none / P2 only / P1 only / both
            (5, [Admit, Admit, Admit, Admit]),
            (15, [Defer, Admit, Admit, Admit]),
            (25, [Defer, Defer, Admit, Admit]),
            (35, [Defer, Defer, Defer, Admit]),
            (40, [Full, Full, Full, Full]),
        ];
        for (occupancy, expected) in cases {
            let got =
                [(0, 0), (0, 8), (100, 0), (100, 8)].map(|(e, k)| a.verdict(occupancy, 40, e, k));
            assert_eq!(got, expected, "occupancy {occupancy}");
        }
        // P1 across the 24-bit wrap: 150 units elapsed.
        assert_eq!(
            a.verdict_at(25, 40, Time24::new(50), Time24::new((1 << 24) - 100), 0),
            Admit
        );
        assert_eq!(
            a.verdict_at(25, 40, Time24::new(50), Time24::new(0), 0),
            Defer
        );
        assert!(Admission::new(AdmissionConfig { t2: 5, ..a.config }).is_err());
        let open = Admission::new(AdmissionConfig::for_capacity(64)).unwrap();
        assert_eq!(open.verdict(63, 64, 0, 0), Admit);
        assert_eq!(open.verdict(64, 64, 0, 0), Full);
    }
}
