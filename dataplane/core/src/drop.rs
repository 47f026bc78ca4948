//! Why the dataplane dropped a packet, and how many times.
//!
//! Layer: shared by every stage of the dataplane (VPP's per-node error
//! counters, as one enum). Owns [`DropReason`] — the one enum of drop reasons
//! across the dataplane, each with a stable snake_case name for stats output —
//! and [`DropCounters`], a fixed array of counters indexed by reason. Never
//! allocates, never panics: counting a drop is an array increment.
//!
//! Adding a reason: add the variant (alphabetical, documented), its arm in
//! [`DropReason::name`] and [`DropReason::index`], and list it in
//! [`DropReason::ALL`]; `COUNT` follows. Names are part of the stats contract
//! (`--json` keys, dashboards): never rename one, only add.

use core::fmt;

use crate::error::ParseError;

/// Why a packet was dropped. One enum for the whole dataplane.
///
/// The lead will add `Psp(psp::DropReason)` for the PSP stage (SPI lookup,
/// ICV, replay, ...); its names will be prefixed `psp_`, and its variants
/// flattened into [`DropReason::ALL`] and the counter index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// A Falcon header whose version is not 1.
    BadFalconVersion,
    /// An IPv4 header checksum that does not verify.
    BadIpChecksum,
    /// A non-zero UDP checksum that does not verify.
    BadUdpChecksum,
    /// A Push Data whose request length differs from its payload size.
    FalconLengthMismatch,
    /// An IPv4 fragment (Falcon never fragments; no reassembly).
    IpFragment,
    /// An Ethernet header too short for itself or its 802.1Q tag.
    MalformedEthernet,
    /// A Falcon packet shorter than its header, or of the wrong type for
    /// the parser it reached.
    MalformedFalcon,
    /// An IPv4 or IPv6 header that is truncated, has a bad length field, or
    /// the wrong version.
    MalformedIp,
    /// A UDP header that is truncated, has a bad length, or disagrees with
    /// the IP payload length.
    MalformedUdp,
    /// A UDP datagram not addressed to the Falcon/PSP port.
    NotFalconPort,
    /// An IP packet that is not UDP.
    NotUdp,
    /// A Falcon packet type reserved in rev 0.9.
    UnknownPacketType,
    /// An EtherType other than IPv4 and IPv6.
    UnsupportedEtherType,
}

impl DropReason {
    /// Every reason, in index order.
    pub const ALL: [DropReason; 13] = [
        DropReason::BadFalconVersion,
        DropReason::BadIpChecksum,
        DropReason::BadUdpChecksum,
        DropReason::FalconLengthMismatch,
        DropReason::IpFragment,
        DropReason::MalformedEthernet,
        DropReason::MalformedFalcon,
        DropReason::MalformedIp,
        DropReason::MalformedUdp,
        DropReason::NotFalconPort,
        DropReason::NotUdp,
        DropReason::UnknownPacketType,
        DropReason::UnsupportedEtherType,
    ];

    /// Number of reasons (the counter array length).
    pub const COUNT: usize = Self::ALL.len();

    /// A stable snake_case name for stats output.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::BadFalconVersion => "bad_falcon_version",
            DropReason::BadIpChecksum => "bad_ip_checksum",
            DropReason::BadUdpChecksum => "bad_udp_checksum",
            DropReason::FalconLengthMismatch => "falcon_length_mismatch",
            DropReason::IpFragment => "ip_fragment",
            DropReason::MalformedEthernet => "malformed_ethernet",
            DropReason::MalformedFalcon => "malformed_falcon",
            DropReason::MalformedIp => "malformed_ip",
            DropReason::MalformedUdp => "malformed_udp",
            DropReason::NotFalconPort => "not_falcon_port",
            DropReason::NotUdp => "not_udp",
            DropReason::UnknownPacketType => "unknown_packet_type",
            DropReason::UnsupportedEtherType => "unsupported_ethertype",
        }
    }

    /// Position in [`ALL`](Self::ALL) and in the counter array. A `match`
    /// rather than `as usize`, so variants carrying data can be added.
    pub const fn index(self) -> usize {
        match self {
            DropReason::BadFalconVersion => 0,
            DropReason::BadIpChecksum => 1,
            DropReason::BadUdpChecksum => 2,
            DropReason::FalconLengthMismatch => 3,
            DropReason::IpFragment => 4,
            DropReason::MalformedEthernet => 5,
            DropReason::MalformedFalcon => 6,
            DropReason::MalformedIp => 7,
            DropReason::MalformedUdp => 8,
            DropReason::NotFalconPort => 9,
            DropReason::NotUdp => 10,
            DropReason::UnknownPacketType => 11,
            DropReason::UnsupportedEtherType => 12,
        }
    }

    /// The drop reason for a Falcon parse error (from
    /// [`FalconRepr::parse`](crate::wire::FalconRepr::parse) or a typed
    /// `Repr::parse`). Frame errors map through
    /// [`FrameError::drop_reason`](crate::wire::FrameError::drop_reason).
    pub const fn for_falcon(error: &ParseError) -> DropReason {
        match error {
            ParseError::BadVersion(_) => DropReason::BadFalconVersion,
            ParseError::UnknownPacketType(_) => DropReason::UnknownPacketType,
            ParseError::LengthMismatch { .. } => DropReason::FalconLengthMismatch,
            ParseError::Truncated { .. }
            | ParseError::InvalidLength { .. }
            | ParseError::BadChecksum(_)
            | ParseError::Fragmented
            | ParseError::UnexpectedPacketType { .. } => DropReason::MalformedFalcon,
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One counter per [`DropReason`]. Per lcore; [`merge`](Self::merge) sums
/// them for reporting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropCounters {
    counts: [u64; DropReason::COUNT],
}

impl DropCounters {
    /// All counters at zero.
    pub const fn new() -> Self {
        DropCounters {
            counts: [0; DropReason::COUNT],
        }
    }

    /// Counts one drop.
    pub fn record(&mut self, reason: DropReason) {
        self.record_n(reason, 1);
    }

    /// Counts `n` drops (a burst).
    pub fn record_n(&mut self, reason: DropReason, n: u64) {
        let count = &mut self.counts[reason.index()];
        *count = count.wrapping_add(n);
    }

    /// Drops counted for `reason`.
    pub const fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason.index()]
    }

    /// Drops counted for all reasons.
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |sum, c| sum.wrapping_add(*c))
    }

    /// Adds another set of counters (another lcore's) to these.
    pub fn merge(&mut self, other: &DropCounters) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine = mine.wrapping_add(*theirs);
        }
    }

    /// `(name, count)` for every reason with a non-zero count, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|reason| (reason.name(), self.counts[reason.index()]))
            .filter(|&(_, count)| count != 0)
    }
}

impl Default for DropCounters {
    fn default() -> Self {
        DropCounters::new()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::wire::PacketType;

    #[test]
    fn index_matches_all_and_names_are_unique_snake_case() {
        let mut names = BTreeSet::new();
        for (i, reason) in DropReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i, "{reason:?}");
            let name = reason.name();
            assert!(name.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
            assert!(names.insert(name), "duplicate name {name}");
        }
        assert_eq!(DropReason::COUNT, 13);
        assert!(
            DropReason::ALL.windows(2).all(|w| w[0] < w[1]),
            "alphabetical"
        );
    }

    #[test]
    fn counters_record_get_and_iterate_nonzero() {
        let mut counters = DropCounters::new();
        counters.record(DropReason::NotUdp);
        counters.record(DropReason::NotUdp);
        counters.record_n(DropReason::BadFalconVersion, 5);
        assert_eq!(counters.get(DropReason::NotUdp), 2);
        assert_eq!(counters.get(DropReason::MalformedIp), 0);
        assert_eq!(counters.total(), 7);
        let listed: Vec<_> = counters.iter().collect();
        assert_eq!(listed, vec![("bad_falcon_version", 5), ("not_udp", 2)]);

        let mut other = DropCounters::default();
        other.record(DropReason::NotUdp);
        counters.merge(&other);
        assert_eq!(counters.get(DropReason::NotUdp), 3);
    }

    #[test]
    fn falcon_errors_map_to_reasons() {
        assert_eq!(
            DropReason::for_falcon(&ParseError::BadVersion(2)),
            DropReason::BadFalconVersion
        );
        assert_eq!(
            DropReason::for_falcon(&ParseError::UnknownPacketType(7)),
            DropReason::UnknownPacketType
        );
        assert_eq!(
            DropReason::for_falcon(&ParseError::UnexpectedPacketType {
                expected: PacketType::Back,
                found: PacketType::Eack
            }),
            DropReason::MalformedFalcon
        );
        assert_eq!(
            DropReason::for_falcon(&ParseError::LengthMismatch {
                what: "Push Data request length",
                declared: 1,
                actual: 2
            }),
            DropReason::FalconLengthMismatch
        );
    }
}
