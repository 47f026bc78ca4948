//! Fault injection: device errors and slow blocks on chosen LBA ranges,
//! for tests and demos of a target whose connection carries on while its
//! storage fails.
//!
//! Layer: NVMe target storage. Owns the rules a [`super::Namespace`]
//! consults before touching its store. A failing command touches nothing
//! and completes with the rule's status; a delay sleeps on the worker
//! thread, never on the datapath.

use core::ops::Range;
use core::time::Duration;

use crate::status::Status;

/// Which commands a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOn {
    Reads,
    /// Writes, Write Zeroes and deallocation.
    Writes,
    Both,
}

/// What a matching command suffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultEffect {
    /// Complete with this status, touching nothing (e.g.
    /// [`Status::UNRECOVERED_READ`], [`Status::WRITE_FAULT`]).
    Fail(Status),
    /// Run the command after sleeping this long: a slow device.
    Delay(Duration),
}

/// One injected fault: commands of kind `on` whose blocks overlap `lbas`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FaultRule {
    pub lbas: Range<u64>,
    pub on: FaultOn,
    pub effect: FaultEffect,
    /// How many commands it hits before it heals; `None` for ever.
    pub times: Option<u64>,
}

impl FaultRule {
    /// Fails reads of `lbas` with Unrecovered Read Error, for ever.
    pub fn unreadable(lbas: Range<u64>) -> FaultRule {
        FaultRule {
            lbas,
            on: FaultOn::Reads,
            effect: FaultEffect::Fail(Status::UNRECOVERED_READ),
            times: None,
        }
    }

    /// Fails writes of `lbas` with Write Fault, for ever.
    pub fn unwritable(lbas: Range<u64>) -> FaultRule {
        FaultRule {
            lbas,
            on: FaultOn::Writes,
            effect: FaultEffect::Fail(Status::WRITE_FAULT),
            times: None,
        }
    }

    /// Delays every command on `lbas` by `delay`.
    pub fn slow(lbas: Range<u64>, delay: Duration) -> FaultRule {
        FaultRule {
            lbas,
            on: FaultOn::Both,
            effect: FaultEffect::Delay(delay),
            times: None,
        }
    }

    /// The same rule, healing after `times` hits.
    pub fn times(self, times: u64) -> FaultRule {
        FaultRule {
            times: Some(times),
            ..self
        }
    }

    fn matches(&self, kind: FaultOn, slba: u64, nlb: u64) -> bool {
        let kind_matches = self.on == FaultOn::Both || self.on == kind;
        let end = slba.saturating_add(nlb);
        kind_matches && self.times != Some(0) && slba < self.lbas.end && self.lbas.start < end
    }
}

/// The fault rules of one namespace; none by default.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    rules: Vec<FaultRule>,
    injected: u64,
}

impl Faults {
    pub fn add(&mut self, rule: FaultRule) {
        self.rules.push(rule);
    }

    pub fn clear(&mut self) {
        self.rules.clear();
    }

    pub fn rules(&self) -> &[FaultRule] {
        &self.rules
    }

    /// Commands failed or delayed so far.
    pub fn injected(&self) -> u64 {
        self.injected
    }

    /// Applies the rules to a command of `kind` on `nlb` blocks from
    /// `slba`: sleeps for every matching delay, then fails with the first
    /// matching failure.
    ///
    /// # Errors
    ///
    /// The status of the first matching [`FaultEffect::Fail`] rule.
    pub(crate) fn apply(&mut self, kind: FaultOn, slba: u64, nlb: u64) -> Result<(), Status> {
        if self.rules.is_empty() {
            return Ok(());
        }
        let mut outcome = Ok(());
        for rule in &mut self.rules {
            if outcome.is_err() || !rule.matches(kind, slba, nlb) {
                continue;
            }
            if let Some(times) = &mut rule.times {
                *times -= 1;
            }
            self.injected += 1;
            match rule.effect {
                FaultEffect::Delay(delay) => std::thread::sleep(delay),
                FaultEffect::Fail(status) => outcome = Err(status),
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_overlapping_ranges_of_their_kind() {
        let mut faults = Faults::default();
        faults.add(FaultRule::unreadable(10..20));
        assert_eq!(faults.apply(FaultOn::Reads, 0, 10), Ok(()));
        assert_eq!(faults.apply(FaultOn::Reads, 20, 5), Ok(()));
        assert_eq!(
            faults.apply(FaultOn::Reads, 5, 6),
            Err(Status::UNRECOVERED_READ)
        );
        assert_eq!(
            faults.apply(FaultOn::Reads, 19, 1),
            Err(Status::UNRECOVERED_READ)
        );
        assert_eq!(faults.apply(FaultOn::Writes, 12, 1), Ok(()));
        assert_eq!(
            faults.apply(FaultOn::Reads, u64::MAX - 1, 5),
            Ok(()),
            "no overflow"
        );
        assert_eq!(faults.injected(), 2);
    }

    #[test]
    fn counted_rules_heal() {
        let mut faults = Faults::default();
        faults.add(FaultRule::unwritable(0..1).times(2));
        assert_eq!(
            faults.apply(FaultOn::Writes, 0, 1),
            Err(Status::WRITE_FAULT)
        );
        assert_eq!(
            faults.apply(FaultOn::Writes, 0, 1),
            Err(Status::WRITE_FAULT)
        );
        assert_eq!(faults.apply(FaultOn::Writes, 0, 1), Ok(()));
        faults.add(FaultRule {
            on: FaultOn::Both,
            ..FaultRule::unwritable(0..1)
        });
        assert_eq!(faults.apply(FaultOn::Reads, 0, 1), Err(Status::WRITE_FAULT));
        faults.clear();
        assert_eq!(faults.apply(FaultOn::Reads, 0, 1), Ok(()));
    }

    #[test]
    fn delays_sleep_then_run() {
        let mut faults = Faults::default();
        faults.add(FaultRule::slow(0..8, Duration::from_millis(20)));
        let start = std::time::Instant::now();
        assert_eq!(faults.apply(FaultOn::Writes, 4, 1), Ok(()));
        assert!(start.elapsed() >= Duration::from_millis(20));
    }
}
