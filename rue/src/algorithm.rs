//! The congestion-control interface (Linux `tcp_congestion_ops` style) and
//! its enum dispatch: the [`Algorithm`] trait, [`AnyAlgorithm`] over Swift,
//! DCQCN and bypass, per-connection [`ConnectionState`], and [`Profiles`]
//! (profile index → algorithm + config).
//!
//! Layer: between the RUE core (which owns queues and the state table) and
//! the algorithms (which own the arithmetic). Algorithms see an event and
//! their own per-connection state, and return a result; they never see a
//! queue, a clock or another connection.

use crate::bypass::{Bypass, BypassConfig};
use crate::config::ConfigError;
use crate::dcqcn::{Dcqcn, DcqcnConfig, DcqcnState};
use crate::format::{CcEvent, CcResult};
use crate::swift::{Swift, SwiftConfig, SwiftState};
use crate::{profile_index, PROFILE_INDEX_SHIFT};

/// A congestion-control algorithm of the RUE.
///
/// The event carries the measurements (timestamps, counts, ECN, buffer
/// level) and the connection's CC state as the datapath last received it in
/// a result; `state` is the algorithm's private per-connection state in the
/// RUE's table (it starts as `Default`). The returned result is what the
/// datapath applies and echoes into the connection's next event.
pub trait Algorithm {
    /// Per-connection state the algorithm keeps in the RUE's table; it must
    /// fit [`ConnectionState`] (≤ 60 bytes).
    type State: Copy + Default;

    /// Computes the result of one event. Must not panic on any event.
    fn on_event(&mut self, event: &CcEvent, state: &mut Self::State) -> CcResult;
}

/// One connection's slot of the RUE state table: the private state of the
/// algorithm that last ran for it. 64 bytes with the tag (asserted in the
/// tests), one cache line per connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConnectionState {
    /// No event seen yet (or reset).
    #[default]
    Empty,
    /// Swift's state.
    Swift(SwiftState),
    /// DCQCN's state.
    Dcqcn(DcqcnState),
    /// The bypass algorithm keeps no state.
    Bypass,
}

/// Algorithms selectable per profile, dispatched with a `match` on the hot
/// path (no `dyn`).
#[derive(Clone, Debug)]
pub enum AnyAlgorithm {
    /// Swift (the spec's algorithm).
    Swift(Swift),
    /// DCQCN (ECN-driven rate control).
    Dcqcn(Dcqcn),
    /// Echo or fixed windows: the test double.
    Bypass(Bypass),
}

/// The configuration of one profile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ProfileConfig {
    /// Swift with its tunables.
    Swift(SwiftConfig),
    /// DCQCN with its tunables.
    Dcqcn(DcqcnConfig),
    /// Bypass with its fixed values.
    Bypass(BypassConfig),
}

impl AnyAlgorithm {
    /// The algorithm of a profile configuration.
    ///
    /// # Errors
    ///
    /// The configuration's first [`ConfigError`].
    pub fn new(config: &ProfileConfig) -> Result<Self, ConfigError> {
        Ok(match config {
            ProfileConfig::Swift(c) => AnyAlgorithm::Swift(Swift::new(*c)?),
            ProfileConfig::Dcqcn(c) => AnyAlgorithm::Dcqcn(Dcqcn::new(*c)?),
            ProfileConfig::Bypass(c) => AnyAlgorithm::Bypass(Bypass::new(*c)?),
        })
    }

    /// The algorithm's name as used in configs and reports.
    pub fn name(&self) -> &'static str {
        match self {
            AnyAlgorithm::Swift(_) => "swift",
            AnyAlgorithm::Dcqcn(_) => "dcqcn",
            AnyAlgorithm::Bypass(_) => "bypass",
        }
    }

    /// Runs one event. If the slot holds another algorithm's state (the
    /// connection changed profile) it starts from that algorithm's default.
    #[inline(always)]
    pub fn on_event(&mut self, event: &CcEvent, slot: &mut ConnectionState) -> CcResult {
        match self {
            AnyAlgorithm::Swift(a) => match slot {
                ConnectionState::Swift(s) => a.on_event(event, s),
                other => {
                    let mut s = SwiftState::default();
                    let result = a.on_event(event, &mut s);
                    *other = ConnectionState::Swift(s);
                    result
                }
            },
            AnyAlgorithm::Dcqcn(a) => match slot {
                ConnectionState::Dcqcn(s) => a.on_event(event, s),
                other => {
                    let mut s = DcqcnState::default();
                    let result = a.on_event(event, &mut s);
                    *other = ConnectionState::Dcqcn(s);
                    result
                }
            },
            // Stateless: the slot is neither read nor written, so a bypass
            // profile costs no state-table traffic.
            AnyAlgorithm::Bypass(a) => a.on_event(event, &mut ()),
        }
    }
}

/// Most profiles an RUE holds: the index is 3 bits of `base_delay_target`.
pub const MAX_PROFILES: usize = 8;

/// Profile index → algorithm. Profile 0 must exist; events naming an
/// absent profile run profile 0 (isekai `PickProfile`).
#[derive(Clone, Debug)]
pub struct Profiles {
    slots: [Option<AnyAlgorithm>; MAX_PROFILES],
    /// Profile index of an event's 3-bit field → the installed profile that
    /// runs it (itself, or 0 when absent); precomputed so the batched path
    /// splits a batch into same-profile runs without looking at the slots.
    effective: [u8; MAX_PROFILES],
    /// Per profile: which words of the state table its algorithm uses.
    state_words: [StateWords; MAX_PROFILES],
    /// The effective index of every event, when one profile runs them all
    /// (one installed profile, the common case): the batched path then
    /// neither splits batches nor looks profiles up per event.
    only: Option<u8>,
}

/// Which words of the RUE's state table a profile's algorithm reads and
/// writes per event (see `engine::StateTable`), for the lookahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StateWords {
    /// None (bypass).
    None,
    /// The hot word (single-path Swift without PLB and PRR).
    Hot,
    /// The hot and PLB words (single-path Swift with PLB or PRR).
    HotPlb,
    /// The cold slot (DCQCN, multipath Swift).
    Cold,
}

impl Profiles {
    /// Profiles 0..n from configurations, at most [`MAX_PROFILES`].
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for an empty or too long list or a bad profile.
    pub fn new(configs: &[ProfileConfig]) -> Result<Self, ConfigError> {
        if configs.is_empty() {
            return Err(ConfigError::new(
                "rue",
                "profiles",
                "needs at least profile 0",
            ));
        }
        if configs.len() > MAX_PROFILES {
            return Err(ConfigError::new(
                "rue",
                "profiles",
                "at most 8 profiles (3-bit index)",
            ));
        }
        let mut slots: [Option<AnyAlgorithm>; MAX_PROFILES] = Default::default();
        for (slot, config) in slots.iter_mut().zip(configs) {
            *slot = Some(AnyAlgorithm::new(config)?);
        }
        Ok(Profiles::from_slots(slots))
    }

    fn from_slots(slots: [Option<AnyAlgorithm>; MAX_PROFILES]) -> Self {
        let mut effective = [0u8; MAX_PROFILES];
        let mut state_words = [StateWords::None; MAX_PROFILES];
        for (index, slot) in slots.iter().enumerate() {
            if slot.is_some() {
                effective[index] = index as u8;
            }
            state_words[index] = match slot {
                Some(AnyAlgorithm::Swift(swift)) if !swift.is_single_path() => StateWords::Cold,
                Some(AnyAlgorithm::Swift(swift)) if swift.uses_plb_state() => StateWords::HotPlb,
                Some(AnyAlgorithm::Swift(_)) => StateWords::Hot,
                Some(AnyAlgorithm::Dcqcn(_)) => StateWords::Cold,
                Some(AnyAlgorithm::Bypass(_)) | None => StateWords::None,
            };
        }
        let only = effective
            .iter()
            .all(|&index| index == effective[0])
            .then_some(effective[0]);
        Profiles {
            slots,
            effective,
            state_words,
            only,
        }
    }

    /// One profile: Swift with defaults, as the demo runs.
    pub fn swift_default() -> Self {
        let mut slots: [Option<AnyAlgorithm>; MAX_PROFILES] = Default::default();
        // Invariant: the default Swift configuration validates (tested).
        slots[0] = Swift::new(SwiftConfig::default())
            .ok()
            .map(AnyAlgorithm::Swift);
        Profiles::from_slots(slots)
    }

    /// The algorithm for an event, by the profile index in its
    /// `base_delay_target` (spec/rue.md §2.10).
    #[inline]
    pub fn for_event(&mut self, event: &CcEvent) -> Option<&mut AnyAlgorithm> {
        let index = profile_index(event.base_delay_target);
        if self.slots[index].is_some() {
            return self.slots[index].as_mut();
        }
        self.slots[0].as_mut()
    }

    /// The index of the profile that runs an event: its own profile index
    /// if installed, else 0 (as [`Profiles::for_event`]).
    #[inline(always)]
    pub(crate) fn effective_index(&self, event: &CcEvent) -> usize {
        usize::from(self.effective[profile_index(event.base_delay_target)])
    }

    /// The effective index of every event, if one profile runs them all.
    #[inline(always)]
    pub(crate) fn only_index(&self) -> Option<usize> {
        self.only.map(usize::from)
    }

    /// Which state-table words the profile of an effective index uses.
    #[inline(always)]
    pub(crate) fn state_words(&self, index: usize) -> StateWords {
        self.state_words
            .get(index)
            .copied()
            .unwrap_or(StateWords::None)
    }

    /// The algorithm of an effective index (see [`Profiles::effective_index`]).
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut AnyAlgorithm> {
        self.slots.get_mut(index).and_then(Option::as_mut)
    }

    /// The algorithm of a profile index, if installed.
    pub fn get(&self, index: usize) -> Option<&AnyAlgorithm> {
        self.slots.get(index).and_then(Option::as_ref)
    }

    /// The `base_delay_target` value that selects a profile (index in bits
    /// `[23:21]`, the rest zero); the datapath seeds each connection's state
    /// with it.
    pub const fn base_delay_field(index: u8) -> u32 {
        ((index & 7) as u32) << PROFILE_INDEX_SHIFT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_state_fits_a_cache_line() {
        assert!(
            std::mem::size_of::<SwiftState>() <= 60,
            "{}",
            std::mem::size_of::<SwiftState>()
        );
        assert!(
            std::mem::size_of::<DcqcnState>() <= 60,
            "{}",
            std::mem::size_of::<DcqcnState>()
        );
        assert_eq!(std::mem::size_of::<ConnectionState>(), 64);
    }

    #[test]
    fn unknown_profile_falls_back_to_0() {
        let mut profiles = Profiles::new(&[
            ProfileConfig::Swift(SwiftConfig::default()),
            ProfileConfig::Bypass(BypassConfig::default()),
        ])
        .unwrap();
        let ev = |index| CcEvent {
            base_delay_target: Profiles::base_delay_field(index),
            ..CcEvent::default()
        };
        assert_eq!(profiles.for_event(&ev(1)).map(|a| a.name()), Some("bypass"));
        assert_eq!(profiles.for_event(&ev(5)).map(|a| a.name()), Some("swift"));
        assert_eq!(profiles.for_event(&ev(0)).map(|a| a.name()), Some("swift"));
        assert!(Profiles::new(&[]).is_err());
        assert!(Profiles::new(&[ProfileConfig::Bypass(BypassConfig::default()); 9]).is_err());
    }

    #[test]
    fn a_profile_change_restarts_the_state() {
        let mut swift = AnyAlgorithm::new(&ProfileConfig::Swift(SwiftConfig::default())).unwrap();
        let mut dcqcn = AnyAlgorithm::new(&ProfileConfig::Dcqcn(DcqcnConfig::default())).unwrap();
        let mut slot = ConnectionState::Empty;
        let ev = CcEvent {
            num_packets_acked: 1,
            ..CcEvent::default()
        };
        swift.on_event(&ev, &mut slot);
        assert!(matches!(slot, ConnectionState::Swift(_)));
        dcqcn.on_event(&ev, &mut slot);
        assert!(matches!(slot, ConnectionState::Dcqcn(_)));
    }
}
