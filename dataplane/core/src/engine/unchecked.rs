//! The bits of a received frame that no check of the receive path covers.
//!
//! Layer: engine, a description of its receive path ([`super::rx`]) for
//! callers that account for corrupted frames (the demo's fault injection).
//! Owns [`UncheckedField`]. Values only: it never sees a frame.
//!
//! With PSP on and the checksums verified in software
//! (`ChecksumChecks::ALL`), a frame the engine sent, with one bit flipped
//! anywhere, is dropped by a named [`DropReason`](crate::drop::DropReason)
//! unless the bit lies in one of these fields:
//!
//! * everything from the PSP header to the ICV is authenticated (the PSP
//!   header and the cleartext part are the AAD): a flip there fails a PSP
//!   framing check or the ICV (`psp_*`);
//! * the IPv4 header is covered by its checksum (one flipped bit always
//!   changes the ones' complement sum: `bad_ip_checksum`), except where a
//!   structural check sees it first (`malformed_ip`, `ip_fragment`,
//!   `not_udp`);
//! * EtherType, IPv6 version, payload length and next header, UDP length
//!   and destination port are parsed and compared (`unsupported_ethertype`,
//!   `malformed_*`, `not_udp`, `not_falcon_port`); the destination MAC and
//!   IP address are the node's own (`destination_mac_mismatch`,
//!   `destination_ip_mismatch`);
//! * the UDP checksum is 0 (spec/psp.md §1.1): a flipped bit makes it
//!   non-zero, it is then verified and fails (`bad_udp_checksum`), unless
//!   the flipped value happens to be the frame's correct checksum (one
//!   value in 65 535), when the intact frame is rightly accepted.
//!
//! What is left is what no receiver checks: the sender's addresses and
//! port, and on IPv6 the fields routers may rewrite (traffic class, flow
//! label, hop limit), which no checksum covers. A flip there delivers the
//! frame intact: harmless to the data, though a flipped ECN may read as
//! congestion and a flipped hop limit skews the hop count.

use core::net::IpAddr;

use crate::wire::{ethernet, ipv4, ipv6, udp};

/// A header field of a received frame that no check of the receive path
/// covers (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UncheckedField {
    /// Ethernet source MAC address.
    EthernetSource,
    /// IPv6 traffic class (DSCP and ECN).
    Ipv6TrafficClass,
    /// IPv6 flow label.
    Ipv6FlowLabel,
    /// IPv6 hop limit.
    Ipv6HopLimit,
    /// IPv6 source address.
    Ipv6Source,
    /// UDP source port.
    UdpSourcePort,
}

impl UncheckedField {
    /// A stable snake_case name for stats output.
    pub const fn name(self) -> &'static str {
        match self {
            UncheckedField::EthernetSource => "ethernet_source",
            UncheckedField::Ipv6TrafficClass => "ipv6_traffic_class",
            UncheckedField::Ipv6FlowLabel => "ipv6_flow_label",
            UncheckedField::Ipv6HopLimit => "ipv6_hop_limit",
            UncheckedField::Ipv6Source => "ipv6_source",
            UncheckedField::UdpSourcePort => "udp_source_port",
        }
    }

    /// The unchecked field holding bit `bit` (0 = least significant) of
    /// byte `offset` of a frame as the engine sends it (untagged, IPv4
    /// without options or IPv6 without extension headers, as `family`),
    /// or `None` if a check covers that bit.
    pub fn at(family: IpAddr, offset: usize, bit: u8) -> Option<Self> {
        const ETH: usize = ethernet::HEADER_LEN;
        let ip_len = match family {
            IpAddr::V4(_) => ipv4::HEADER_LEN,
            IpAddr::V6(_) => ipv6::HEADER_LEN,
        };
        let udp = ETH + ip_len;
        match offset {
            6..=11 => return Some(UncheckedField::EthernetSource),
            o if o == udp || o == udp + 1 => return Some(UncheckedField::UdpSourcePort),
            o if o >= udp + udp::HEADER_LEN || o < ETH => return None,
            _ => {}
        }
        if family.is_ipv4() {
            return None;
        }
        // RFC 8200 §3: version (4 bits), traffic class (8), flow label
        // (20), payload length, next header, hop limit, source,
        // destination.
        let high_nibble = bit >= 4;
        match offset - ETH {
            0 if !high_nibble => Some(UncheckedField::Ipv6TrafficClass),
            1 if high_nibble => Some(UncheckedField::Ipv6TrafficClass),
            1..=3 => Some(UncheckedField::Ipv6FlowLabel),
            7 => Some(UncheckedField::Ipv6HopLimit),
            8..=23 => Some(UncheckedField::Ipv6Source),
            _ => None,
        }
    }
}
