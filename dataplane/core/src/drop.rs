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

use psp::RxDrop;

use crate::wire::{FrameError, ParseError};

/// Why a packet was dropped. One enum for the whole dataplane.
///
/// The PSP stage's reasons (framing, SA lookup, ICV, SPI, PCID, replay) sit
/// behind [`DropReason::Psp`]; their names are prefixed `psp_` and they are
/// flattened into [`DropReason::ALL`] and the counter index after the
/// dataplane's own reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// A Falcon header whose version is not 1.
    BadFalconVersion,
    /// An IPv4 header checksum that does not verify.
    BadIpChecksum,
    /// A non-zero UDP checksum that does not verify.
    BadUdpChecksum,
    /// A packet for a connection that has failed (retransmissions
    /// exhausted) or was closed: OCP Falcon 0.9 §11, "connection not alive",
    /// drop without processing the piggy-backed ACK.
    ConnectionNotAlive,
    /// A packet whose Destination Function is not the connection's (the
    /// opaque 24-bit value is checked on receive, DESIGN.md §4).
    DestinationFunctionMismatch,
    /// A frame whose destination IP address is not the node's: IP receive
    /// processing, as a host that does not forward (RFC 1122 §3.2.1.3,
    /// RFC 8200 §4). With IPv4 the header checksum covers the address; an
    /// IPv6 header has no checksum, and the UDP checksum of a PSP packet is
    /// 0 (spec/psp.md §1.1), so this is the only check of it.
    DestinationIpMismatch,
    /// A frame whose destination MAC address is not the node's: the NIC's
    /// unicast filter (IEEE 802.3 §4.2.4.1.1, receive address
    /// recognition), done here for ports that do not filter.
    DestinationMacMismatch,
    /// A packet whose PSN is inside the receiver's sliding window but was
    /// already received or acknowledged (OCP Falcon 0.9 §9.2.2.4, §11): an
    /// ACK is still generated.
    DuplicatePacket,
    /// A request (Push Data, Pull Request) with a new PSN but an RSN the
    /// target already holds: a peer protocol violation (transaction
    /// sublayer, OCP Falcon 0.9 §8.5).
    DuplicateRsn,
    /// A Push Data whose request length differs from its payload size.
    FalconLengthMismatch,
    /// The transaction sublayer had no receive resources for the packet; a
    /// resource-drop NACK (code 1) was sent (OCP Falcon 0.9 §8.2, §11).
    InsufficientResources,
    /// An ACK or NACK that acknowledges PSNs never sent (its base PSN lies
    /// beyond the transmitter's next PSN): a peer protocol violation.
    InvalidAck,
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
    /// A packet at or beyond BPSN + 64 (request window) or BPSN + 128 (data
    /// window); the receiver sets R-OWN / D-OWN (OCP Falcon 0.9 §9.2.2.4).
    OutOfWindow,
    /// The PSP stage dropped the packet (OCP Falcon 0.9 §9.2.2; PSP spec
    /// receive processing). A packet failing the SPI, PCID or replay check
    /// gets no ACK and no NACK.
    Psp(RxDrop),
    /// A request whose RSN lies before the target's base RSN or too far
    /// ahead of it: a peer protocol violation (transaction sublayer).
    RsnOutOfRange,
    /// An ACK whose RBPSN or DBPSN is older than the transmitter's (OCP
    /// Falcon 0.9 §9.2.3: "must discard the ACK packet").
    StaleAck,
    /// A NACK whose RBPSN or DBPSN is older than the transmitter's (§9.2.4),
    /// or that names a PSN no longer outstanding (already acknowledged or
    /// resynced: a duplicated or late NACK).
    StaleNack,
    /// A packet whose PSN is below the receiver's BPSN: an old duplicate
    /// (OCP Falcon 0.9 §9.2.2.4); an ACK is still generated (§11).
    StalePacket,
    /// A packet the engine could not seal (the SA's IV space is exhausted):
    /// not sent; the delivery sublayer retransmits it after a rekey.
    TxSealFailed,
    /// A Pull Request whose ULP header is longer than a request holds
    /// ([`ULP_HEADER_CAPACITY`](crate::transaction::ULP_HEADER_CAPACITY):
    /// no ULP over Falcon 0.9 sends more than 56 bytes); not admitted.
    UlpHeaderTooLong,
    /// A packet whose destination connection id names no connection.
    UnknownConnection,
    /// A Falcon packet type reserved in rev 0.9.
    UnknownPacketType,
    /// Pull Data whose RSN matches no outstanding Pull Request (OCP Falcon
    /// 0.9 §8.4.3.2: "the pull data must be discarded"), e.g. one arriving
    /// after its transaction timed out. It is acknowledged at the packet
    /// level, so the target stops retransmitting it.
    UnmatchedPullData,
    /// An EtherType other than IPv4 and IPv6.
    UnsupportedEtherType,
    /// The packet matched the xLR drop filter; an xLR-drop NACK (code 4) was
    /// sent (OCP Falcon 0.9 §11).
    XlrDrop,
}

impl DropReason {
    /// The reasons declared before `Psp`, in index order.
    const HEAD: [DropReason; 20] = [
        DropReason::BadFalconVersion,
        DropReason::BadIpChecksum,
        DropReason::BadUdpChecksum,
        DropReason::ConnectionNotAlive,
        DropReason::DestinationFunctionMismatch,
        DropReason::DestinationIpMismatch,
        DropReason::DestinationMacMismatch,
        DropReason::DuplicatePacket,
        DropReason::DuplicateRsn,
        DropReason::FalconLengthMismatch,
        DropReason::InsufficientResources,
        DropReason::InvalidAck,
        DropReason::IpFragment,
        DropReason::MalformedEthernet,
        DropReason::MalformedFalcon,
        DropReason::MalformedIp,
        DropReason::MalformedUdp,
        DropReason::NotFalconPort,
        DropReason::NotUdp,
        DropReason::OutOfWindow,
    ];

    /// The reasons declared after `Psp`, in index order.
    const TAIL: [DropReason; 11] = [
        DropReason::RsnOutOfRange,
        DropReason::StaleAck,
        DropReason::StaleNack,
        DropReason::StalePacket,
        DropReason::TxSealFailed,
        DropReason::UlpHeaderTooLong,
        DropReason::UnknownConnection,
        DropReason::UnknownPacketType,
        DropReason::UnmatchedPullData,
        DropReason::UnsupportedEtherType,
        DropReason::XlrDrop,
    ];

    /// Number of reasons (the counter array length).
    pub const COUNT: usize = Self::HEAD.len() + RxDrop::COUNT + Self::TAIL.len();

    /// Every reason, in declaration (and index) order, the PSP reasons
    /// flattened in place of `Psp`.
    pub const ALL: [DropReason; Self::COUNT] = {
        let mut all = [DropReason::BadFalconVersion; Self::COUNT];
        let mut i = 0;
        while i < Self::HEAD.len() {
            all[i] = Self::HEAD[i];
            i += 1;
        }
        let mut j = 0;
        while j < RxDrop::COUNT {
            all[i] = DropReason::Psp(RxDrop::ALL[j]);
            i += 1;
            j += 1;
        }
        let mut k = 0;
        while k < Self::TAIL.len() {
            all[i] = Self::TAIL[k];
            i += 1;
            k += 1;
        }
        all
    };

    /// A stable snake_case name for stats output.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::BadFalconVersion => "bad_falcon_version",
            DropReason::BadIpChecksum => "bad_ip_checksum",
            DropReason::BadUdpChecksum => "bad_udp_checksum",
            DropReason::ConnectionNotAlive => "connection_not_alive",
            DropReason::DestinationFunctionMismatch => "destination_function_mismatch",
            DropReason::DestinationIpMismatch => "destination_ip_mismatch",
            DropReason::DestinationMacMismatch => "destination_mac_mismatch",
            DropReason::DuplicatePacket => "duplicate_packet",
            DropReason::DuplicateRsn => "duplicate_rsn",
            DropReason::FalconLengthMismatch => "falcon_length_mismatch",
            DropReason::InsufficientResources => "insufficient_resources",
            DropReason::InvalidAck => "invalid_ack",
            DropReason::IpFragment => "ip_fragment",
            DropReason::MalformedEthernet => "malformed_ethernet",
            DropReason::MalformedFalcon => "malformed_falcon",
            DropReason::MalformedIp => "malformed_ip",
            DropReason::MalformedUdp => "malformed_udp",
            DropReason::NotFalconPort => "not_falcon_port",
            DropReason::NotUdp => "not_udp",
            DropReason::OutOfWindow => "out_of_window",
            DropReason::RsnOutOfRange => "rsn_out_of_range",
            DropReason::StaleAck => "stale_ack",
            DropReason::StaleNack => "stale_nack",
            DropReason::StalePacket => "stale_packet",
            DropReason::TxSealFailed => "tx_seal_failed",
            DropReason::UlpHeaderTooLong => "ulp_header_too_long",
            DropReason::UnknownConnection => "unknown_connection",
            DropReason::UnknownPacketType => "unknown_packet_type",
            DropReason::UnmatchedPullData => "unmatched_pull_data",
            DropReason::UnsupportedEtherType => "unsupported_ethertype",
            DropReason::XlrDrop => "xlr_drop",
            DropReason::Psp(reason) => psp_name(reason),
        }
    }

    /// Position in [`ALL`](Self::ALL) and in the counter array. A `match`
    /// rather than `as usize`, so variants carrying data can be added.
    pub const fn index(self) -> usize {
        match self {
            DropReason::BadFalconVersion => 0,
            DropReason::BadIpChecksum => 1,
            DropReason::BadUdpChecksum => 2,
            DropReason::ConnectionNotAlive => 3,
            DropReason::DestinationFunctionMismatch => 4,
            DropReason::DestinationIpMismatch => 5,
            DropReason::DestinationMacMismatch => 6,
            DropReason::DuplicatePacket => 7,
            DropReason::DuplicateRsn => 8,
            DropReason::FalconLengthMismatch => 9,
            DropReason::InsufficientResources => 10,
            DropReason::InvalidAck => 11,
            DropReason::IpFragment => 12,
            DropReason::MalformedEthernet => 13,
            DropReason::MalformedFalcon => 14,
            DropReason::MalformedIp => 15,
            DropReason::MalformedUdp => 16,
            DropReason::NotFalconPort => 17,
            DropReason::NotUdp => 18,
            DropReason::OutOfWindow => 19,
            DropReason::Psp(reason) => 20 + reason.index(),
            DropReason::RsnOutOfRange => 20 + RxDrop::COUNT,
            DropReason::StaleAck => 21 + RxDrop::COUNT,
            DropReason::StaleNack => 22 + RxDrop::COUNT,
            DropReason::StalePacket => 23 + RxDrop::COUNT,
            DropReason::TxSealFailed => 24 + RxDrop::COUNT,
            DropReason::UlpHeaderTooLong => 25 + RxDrop::COUNT,
            DropReason::UnknownConnection => 26 + RxDrop::COUNT,
            DropReason::UnknownPacketType => 27 + RxDrop::COUNT,
            DropReason::UnmatchedPullData => 28 + RxDrop::COUNT,
            DropReason::UnsupportedEtherType => 29 + RxDrop::COUNT,
            DropReason::XlrDrop => 30 + RxDrop::COUNT,
        }
    }

    /// The drop reason for a Falcon parse error (from
    /// [`FalconRepr::parse`](crate::wire::FalconRepr::parse) or a typed
    /// `Repr::parse`). Frame errors map through [`for_frame`](Self::for_frame).
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

    /// The drop reason for an outer-frame error (from
    /// [`frame::parse`](crate::wire::frame::parse) or
    /// [`parse_rx`](crate::wire::parse_rx)): the layer at fault, with a
    /// reason of its own for a bad checksum and an IPv4 fragment.
    pub const fn for_frame(error: &FrameError) -> DropReason {
        match error {
            FrameError::Ethernet(_) => DropReason::MalformedEthernet,
            FrameError::UnsupportedEtherType(_) => DropReason::UnsupportedEtherType,
            FrameError::Ipv4(ParseError::BadChecksum(_)) => DropReason::BadIpChecksum,
            FrameError::Ipv4(ParseError::Fragmented) => DropReason::IpFragment,
            FrameError::Ipv4(_) | FrameError::Ipv6(_) => DropReason::MalformedIp,
            FrameError::NotUdp(_) => DropReason::NotUdp,
            FrameError::DestinationMac(_) => DropReason::DestinationMacMismatch,
            FrameError::DestinationIp(_) => DropReason::DestinationIpMismatch,
            FrameError::Udp(ParseError::BadChecksum(_)) => DropReason::BadUdpChecksum,
            FrameError::Udp(_) => DropReason::MalformedUdp,
        }
    }
}

/// `psp_` + the PSP stage's own name; spelled out because `const fn` cannot
/// concatenate strings.
const fn psp_name(reason: RxDrop) -> &'static str {
    match reason {
        RxDrop::Truncated => "psp_truncated",
        RxDrop::AlwaysOneClear => "psp_always_one_clear",
        RxDrop::ExtLenTooShort => "psp_ext_len_too_short",
        RxDrop::ExtLenBeyondBuffer => "psp_ext_len_beyond_buffer",
        RxDrop::CryptOffsetBeyondPayload => "psp_crypt_offset_beyond_payload",
        RxDrop::BadSpi => "psp_bad_spi",
        RxDrop::UnsupportedVersion => "psp_unsupported_version",
        RxDrop::ReservedVersion => "psp_reserved_version",
        RxDrop::VersionDisabled => "psp_version_disabled",
        RxDrop::UnknownSa => "psp_unknown_sa",
        RxDrop::AuthFailed => "psp_auth_failed",
        RxDrop::SpiUnconfigured => "psp_spi_unconfigured",
        RxDrop::SpiMismatch => "psp_spi_mismatch",
        RxDrop::PcidMismatch => "psp_pcid_mismatch",
        RxDrop::Replay => "psp_replay",
    }
}

impl From<RxDrop> for DropReason {
    fn from(reason: RxDrop) -> Self {
        DropReason::Psp(reason)
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
    fn frame_errors_map_to_their_layer_and_checksum_reasons() {
        use crate::wire::{EtherType, EthernetAddress, IpProtocol};

        let truncated = ParseError::Truncated {
            what: "header",
            need: 20,
            have: 10,
        };
        let checksum = ParseError::BadChecksum("x");
        let cases = [
            (
                FrameError::Ethernet(truncated),
                DropReason::MalformedEthernet,
            ),
            (
                FrameError::UnsupportedEtherType(EtherType::Arp),
                DropReason::UnsupportedEtherType,
            ),
            (FrameError::Ipv4(checksum), DropReason::BadIpChecksum),
            (
                FrameError::Ipv4(ParseError::Fragmented),
                DropReason::IpFragment,
            ),
            (FrameError::Ipv4(truncated), DropReason::MalformedIp),
            (FrameError::Ipv6(truncated), DropReason::MalformedIp),
            (FrameError::NotUdp(IpProtocol::Tcp), DropReason::NotUdp),
            (
                FrameError::DestinationMac(EthernetAddress([2, 0, 0, 0, 0, 9])),
                DropReason::DestinationMacMismatch,
            ),
            (
                FrameError::DestinationIp("10.0.0.9".parse().unwrap()),
                DropReason::DestinationIpMismatch,
            ),
            (FrameError::Udp(checksum), DropReason::BadUdpChecksum),
            (FrameError::Udp(truncated), DropReason::MalformedUdp),
        ];
        for (error, reason) in cases {
            assert_eq!(DropReason::for_frame(&error), reason, "{error:?}");
        }
    }

    #[test]
    fn index_matches_all_and_names_are_unique_snake_case() {
        let mut names = BTreeSet::new();
        for (i, reason) in DropReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i, "{reason:?}");
            let name = reason.name();
            assert!(name.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
            assert!(names.insert(name), "duplicate name {name}");
        }
        assert_eq!(DropReason::COUNT, 31 + RxDrop::COUNT);
        assert_eq!(
            DropReason::Psp(RxDrop::AuthFailed).name(),
            "psp_auth_failed"
        );
        assert_eq!(
            DropReason::from(RxDrop::Replay),
            DropReason::Psp(RxDrop::Replay)
        );
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
