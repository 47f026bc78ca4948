//! Accounting for every corrupted frame of a demo run (`--corrupt`).
//!
//! Layer: application. Owns [`Corruption`]: where the fault injectors
//! flipped a bit, classified by [`UncheckedField`] (the fields no receive
//! check covers: the frame is delivered intact), and the check that the
//! engines dropped every other corrupted frame by a named reason that only
//! corruption causes. It reads counters; it never sees a frame.
//!
//! The account closes only once no corrupted frame is left in flight (the
//! demo drains the loopback after the last completion), and exactly only
//! without key rotation: a frame sealed under an evicted key also fails
//! the ICV (`psp_auth_failed`), so with rotation the drops may exceed the
//! corrupted frames, never fall short of them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use falcon_core::drop::{DropCounters, DropReason};
use falcon_core::engine::UncheckedField;
use falcon_core::port::Port;
use falcon_core::testing::FaultInjector;
use psp::RxDrop;

/// The drop reasons of checks a frame the engine sent can fail only if it
/// was altered on the way: the outer headers' parsers, checksums and
/// addresses, and PSP's framing and ICV. Everything after the ICV is
/// authenticated, so a corrupted frame never reaches a later check.
pub const CAUSED_BY_CORRUPTION: [DropReason; 22] = [
    DropReason::BadIpChecksum,
    DropReason::BadUdpChecksum,
    DropReason::DestinationIpMismatch,
    DropReason::DestinationMacMismatch,
    DropReason::IpFragment,
    DropReason::MalformedEthernet,
    DropReason::MalformedIp,
    DropReason::MalformedUdp,
    DropReason::NotFalconPort,
    DropReason::NotUdp,
    DropReason::UnsupportedEtherType,
    DropReason::Psp(RxDrop::Truncated),
    DropReason::Psp(RxDrop::AlwaysOneClear),
    DropReason::Psp(RxDrop::ExtLenTooShort),
    DropReason::Psp(RxDrop::ExtLenBeyondBuffer),
    DropReason::Psp(RxDrop::CryptOffsetBeyondPayload),
    DropReason::Psp(RxDrop::BadSpi),
    DropReason::Psp(RxDrop::UnsupportedVersion),
    DropReason::Psp(RxDrop::ReservedVersion),
    DropReason::Psp(RxDrop::VersionDisabled),
    DropReason::Psp(RxDrop::UnknownSa),
    DropReason::Psp(RxDrop::AuthFailed),
];

/// The corrupted frames of a run, as the injectors logged them.
#[derive(Debug)]
pub struct Corruption {
    /// The nodes' address family (the frame layout).
    family: IpAddr,
    /// Frames sent with a flipped bit, both directions.
    frames: u64,
    /// Of those, flipped in a field no receive check covers.
    harmless: BTreeMap<UncheckedField, u64>,
}

/// What the account found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Frames sent with a flipped bit, both directions.
    pub frames: u64,
    /// Flipped in a field no receive check covers, by field name.
    pub harmless: BTreeMap<String, u64>,
    /// Drops of the reasons in [`CAUSED_BY_CORRUPTION`], both nodes.
    pub drops: BTreeMap<String, u64>,
    /// The failure, if the drops and the harmless flips do not add up to
    /// the frames.
    pub mismatch: Option<String>,
}

impl Corruption {
    /// An empty account for nodes of `family`'s address family.
    pub fn new(family: IpAddr) -> Self {
        Corruption {
            family,
            frames: 0,
            harmless: BTreeMap::new(),
        }
    }

    /// Takes the flips `port` logged since the last call.
    pub fn absorb<P: Port>(&mut self, port: &mut FaultInjector<P>) {
        for flip in port.drain_flips() {
            self.frames += 1;
            if let Some(field) = UncheckedField::at(self.family, flip.offset, flip.bit) {
                *self.harmless.entry(field).or_default() += 1;
            }
        }
    }

    /// Closes the account against both nodes' drops: every corrupted frame
    /// is either harmless or dropped by one of [`CAUSED_BY_CORRUPTION`]
    /// (exactly, or at least with `rotations`).
    pub fn close(&self, drops: &DropCounters, rotations: bool) -> Account {
        let dropped: BTreeMap<String, u64> = CAUSED_BY_CORRUPTION
            .iter()
            .map(|&reason| (reason.name().to_string(), drops.get(reason)))
            .filter(|&(_, n)| n > 0)
            .collect();
        let total: u64 = dropped.values().sum();
        let harmless: u64 = self.harmless.values().sum();
        let expected = self.frames - harmless;
        let adds_up = if rotations {
            total >= expected
        } else {
            total == expected
        };
        let mismatch = (!adds_up).then(|| {
            format!(
                "{} corrupted frames, {harmless} in unchecked fields: {expected} should be dropped by a check, {total} were ({dropped:?})",
                self.frames
            )
        });
        Account {
            frames: self.frames,
            harmless: self
                .harmless
                .iter()
                .map(|(field, &n)| (field.name().to_string(), n))
                .collect(),
            drops: dropped,
            mismatch,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn the_reasons_are_distinct_and_all_before_delivery() {
        let mut seen = std::collections::BTreeSet::new();
        for reason in CAUSED_BY_CORRUPTION {
            assert!(seen.insert(reason), "{reason:?} twice");
        }
        // Reasons a frame intact on the wire meets are not among them.
        for later in [
            DropReason::DuplicatePacket,
            DropReason::StalePacket,
            DropReason::Psp(RxDrop::Replay),
            DropReason::Psp(RxDrop::SpiMismatch),
            DropReason::UnknownConnection,
        ] {
            assert!(!seen.contains(&later), "{later:?}");
        }
    }

    #[test]
    fn the_account_adds_up_or_names_the_gap() {
        let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut c = Corruption::new(v4);
        c.frames = 5;
        c.harmless.insert(UncheckedField::EthernetSource, 1);
        let mut drops = DropCounters::new();
        drops.record_n(DropReason::Psp(RxDrop::AuthFailed), 3);
        drops.record(DropReason::DuplicatePacket);
        let short = c.close(&drops, false);
        assert!(short.mismatch.is_some(), "3 + 1 harmless of 5");
        drops.record(DropReason::BadIpChecksum);
        let even = c.close(&drops, false);
        assert_eq!(even.mismatch, None);
        assert_eq!(even.drops.values().sum::<u64>(), 4);
        assert_eq!(even.harmless["ethernet_source"], 1);
        drops.record(DropReason::Psp(RxDrop::AuthFailed));
        assert!(c.close(&drops, false).mismatch.is_some(), "one too many");
        assert_eq!(c.close(&drops, true).mismatch, None, "rotation adds drops");
    }
}
