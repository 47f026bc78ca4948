//! The outer frame of a Falcon packet: Ethernet → IPv4 | IPv6 → UDP.
//!
//! Layer: wire, one step above the per-header views. Owns the walk from a
//! received frame to its UDP payload (the PSP packet) and the reverse: writing
//! Ethernet, IP and UDP headers in front of a payload already in the buffer
//! (the TX path seals PSP in place, then adds these headers; the pcap tools
//! build whole frames). It does not decide policy: the destination port is
//! reported, not enforced ([`PSP_UDP_PORT`] is the one to compare against), and
//! the errors name the layer so the pipeline can count the right
//! [`DropReason`](crate::drop::DropReason) (`DropReason::for_frame`). Never
//! panics on input; never allocates.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::ops::Range;

use crate::wire::checksum::PseudoHeader;
use crate::wire::ethernet::{self, Address as EthernetAddress, EtherType, VlanTag};
use crate::wire::ip::{Dscp, Ecn, IpProtocol};
use crate::wire::ipv4;
use crate::wire::ipv6::{self, FlowLabel};
use crate::wire::udp;
use crate::wire::ParseError;

/// UDP destination port of PSP, hence of Falcon (spec/psp.md §1.1; OCP Falcon
/// 0.9 §7.1: Falcon rides in PSP).
pub const PSP_UDP_PORT: u16 = 1000;

/// The IP header of a frame, without the fields the frame derives (lengths,
/// protocol = UDP, checksum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFields {
    /// IPv4 (20-byte header emitted; options tolerated on parse).
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
        /// Time to live.
        ttl: u8,
        /// DSCP.
        dscp: Dscp,
        /// ECN codepoint.
        ecn: Ecn,
        /// Identification.
        ident: u16,
        /// Don't Fragment flag.
        dont_fragment: bool,
    },
    /// IPv6 (40-byte fixed header, no extension headers).
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
        /// Hop limit.
        hop_limit: u8,
        /// DSCP.
        dscp: Dscp,
        /// ECN codepoint.
        ecn: Ecn,
        /// Flow label (the path selector for ECMP/PLB).
        flow_label: FlowLabel,
    },
}

impl IpFields {
    /// The ECN codepoint, whichever the IP version.
    pub const fn ecn(&self) -> Ecn {
        match *self {
            IpFields::V4 { ecn, .. } | IpFields::V6 { ecn, .. } => ecn,
        }
    }

    /// The destination address.
    pub const fn dst(&self) -> IpAddr {
        match *self {
            IpFields::V4 { dst, .. } => IpAddr::V4(dst),
            IpFields::V6 { dst, .. } => IpAddr::V6(dst),
        }
    }

    /// The pseudo-header the UDP checksum covers.
    pub const fn pseudo_header(&self) -> PseudoHeader {
        match *self {
            IpFields::V4 { src, dst, .. } => PseudoHeader::V4 { src, dst },
            IpFields::V6 { src, dst, .. } => PseudoHeader::V6 { src, dst },
        }
    }

    const fn header_len(&self) -> usize {
        match self {
            IpFields::V4 { .. } => ipv4::HEADER_LEN,
            IpFields::V6 { .. } => ipv6::HEADER_LEN,
        }
    }

    const fn ethertype(&self) -> EtherType {
        match self {
            IpFields::V4 { .. } => EtherType::Ipv4,
            IpFields::V6 { .. } => EtherType::Ipv6,
        }
    }
}

/// Whether a frame carries a UDP checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpChecksum {
    /// Checksum field 0: none (what PSP senders normally use, spec/psp.md §1.1).
    Zero,
    /// A computed checksum: on emit, filled over the pseudo-header and the
    /// payload in place; on parse, the field was non-zero.
    Computed,
}

/// Every header field of an Ethernet/IP/UDP frame, except those derived from
/// the payload length (lengths, EtherType, IP protocol, checksums).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr {
    /// Destination MAC address.
    pub destination: EthernetAddress,
    /// Source MAC address.
    pub source: EthernetAddress,
    /// Optional 802.1Q tag.
    pub vlan: Option<VlanTag>,
    /// The IP header.
    pub ip: IpFields,
    /// UDP source port (for PSP: a per-connection entropy value).
    pub src_port: u16,
    /// UDP destination port ([`PSP_UDP_PORT`] for Falcon).
    pub dst_port: u16,
    /// Whether to send (or whether the frame had) a UDP checksum.
    pub udp_checksum: UdpChecksum,
}

/// Where each layer's header and the UDP payload sit in a frame buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layers {
    /// The Ethernet header (with its tag).
    pub ethernet: Range<usize>,
    /// The IP header (IPv4 options included).
    pub ip: Range<usize>,
    /// The UDP header.
    pub udp: Range<usize>,
    /// The UDP payload: the PSP packet. Ends where the UDP length says;
    /// anything after it (Ethernet padding) is not part of the frame.
    pub payload: Range<usize>,
}

/// A parsed frame: its header values and where each layer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The header values.
    pub repr: FrameRepr,
    /// The layer boundaries in the parsed buffer.
    pub layers: Layers,
}

/// Which checksums [`parse_with`] verifies. Turn a check off when the NIC
/// already verified it (DPDK `RTE_MBUF_F_RX_*_CKSUM_GOOD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChecksumChecks {
    /// Verify the IPv4 header checksum.
    pub ipv4_header: bool,
    /// Verify a non-zero UDP checksum (0 is always accepted).
    pub udp: bool,
}

impl ChecksumChecks {
    /// Verify everything (software path, pcap tools, simulator).
    pub const ALL: ChecksumChecks = ChecksumChecks {
        ipv4_header: true,
        udp: true,
    };
    /// Verify nothing (the NIC did it).
    pub const OFFLOADED: ChecksumChecks = ChecksumChecks {
        ipv4_header: false,
        udp: false,
    };
}

impl Default for ChecksumChecks {
    fn default() -> Self {
        ChecksumChecks::ALL
    }
}

/// Why a frame could not be parsed, by layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The Ethernet header is malformed.
    Ethernet(ParseError),
    /// The EtherType is neither IPv4 nor IPv6.
    UnsupportedEtherType(EtherType),
    /// The IPv4 header is malformed (or a fragment, or its checksum fails).
    Ipv4(ParseError),
    /// The IPv6 header is malformed.
    Ipv6(ParseError),
    /// The IP payload is not UDP (IPv6 extension headers land here too).
    NotUdp(IpProtocol),
    /// The frame is for another MAC address (the receive path's
    /// [`parse_rx`](super::parse_rx) only; `parse_with` reads any).
    DestinationMac(EthernetAddress),
    /// The packet is for another IP address (the receive path's
    /// [`parse_rx`](super::parse_rx) only).
    DestinationIp(IpAddr),
    /// The UDP header is malformed, its length disagrees with IP, or its
    /// checksum fails.
    Udp(ParseError),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Ethernet(e) => write!(f, "Ethernet: {e}"),
            FrameError::UnsupportedEtherType(t) => {
                write!(f, "unsupported EtherType {:#06x}", u16::from(*t))
            }
            FrameError::Ipv4(e) => write!(f, "IPv4: {e}"),
            FrameError::Ipv6(e) => write!(f, "IPv6: {e}"),
            FrameError::NotUdp(p) => write!(f, "not UDP: IP protocol {}", u8::from(*p)),
            FrameError::DestinationMac(mac) => write!(f, "for another MAC address: {mac}"),
            FrameError::DestinationIp(ip) => write!(f, "for another IP address: {ip}"),
            FrameError::Udp(e) => write!(f, "UDP: {e}"),
        }
    }
}

impl std::error::Error for FrameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FrameError::Ethernet(e)
            | FrameError::Ipv4(e)
            | FrameError::Ipv6(e)
            | FrameError::Udp(e) => Some(e),
            FrameError::UnsupportedEtherType(_)
            | FrameError::NotUdp(_)
            | FrameError::DestinationMac(_)
            | FrameError::DestinationIp(_) => None,
        }
    }
}

/// Why [`FrameRepr::emit`] could not write a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitError {
    /// The buffer cannot hold the headers and the payload.
    BufferTooShort {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The payload does not fit the 16-bit IP/UDP length fields.
    PayloadTooLong {
        /// The largest payload for this IP version.
        max: usize,
        /// The payload length asked for.
        len: usize,
    },
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EmitError::BufferTooShort { need, have } => {
                write!(f, "frame buffer too short: need {need} bytes, have {have}")
            }
            EmitError::PayloadTooLong { max, len } => {
                write!(f, "UDP payload of {len} bytes exceeds {max}")
            }
        }
    }
}

impl std::error::Error for EmitError {}

/// Parses a frame, verifying every checksum.
///
/// # Errors
///
/// A [`FrameError`] naming the layer at fault.
pub fn parse(bytes: &[u8]) -> Result<Frame, FrameError> {
    parse_with(bytes, ChecksumChecks::ALL)
}

/// Parses a frame, verifying the checksums `checks` asks for.
///
/// The UDP length must equal the IP payload length (spec/psp.md §1.5: the
/// reference implementation rejects mismatches). Bytes after the IP packet
/// (Ethernet padding) are ignored.
///
/// # Errors
///
/// A [`FrameError`] naming the layer at fault.
pub fn parse_with(bytes: &[u8], checks: ChecksumChecks) -> Result<Frame, FrameError> {
    let ethernet = ethernet::Packet::new_checked(bytes).map_err(FrameError::Ethernet)?;
    let eth = ethernet::Repr::parse(&ethernet).map_err(FrameError::Ethernet)?;
    let ip_start = eth.buffer_len();
    let ip_bytes = ethernet.payload();

    let (ip, protocol, ip_header_len, ip_payload) = match eth.ethertype {
        EtherType::Ipv4 => {
            let packet = ipv4::Packet::new_checked(ip_bytes).map_err(FrameError::Ipv4)?;
            let repr = if checks.ipv4_header {
                ipv4::Repr::parse(&packet)
            } else {
                ipv4::Repr::parse_offloaded(&packet)
            }
            .map_err(FrameError::Ipv4)?;
            let fields = IpFields::V4 {
                src: repr.src_addr,
                dst: repr.dst_addr,
                ttl: repr.ttl,
                dscp: repr.dscp,
                ecn: repr.ecn,
                ident: repr.ident,
                dont_fragment: repr.dont_fragment,
            };
            (fields, repr.protocol, packet.header_len(), packet.payload())
        }
        EtherType::Ipv6 => {
            let packet = ipv6::Packet::new_checked(ip_bytes).map_err(FrameError::Ipv6)?;
            let repr = ipv6::Repr::parse(&packet).map_err(FrameError::Ipv6)?;
            let fields = IpFields::V6 {
                src: repr.src_addr,
                dst: repr.dst_addr,
                hop_limit: repr.hop_limit,
                dscp: repr.dscp,
                ecn: repr.ecn,
                flow_label: repr.flow_label,
            };
            (fields, repr.next_header, ipv6::HEADER_LEN, packet.payload())
        }
        other => return Err(FrameError::UnsupportedEtherType(other)),
    };
    if protocol != IpProtocol::Udp {
        return Err(FrameError::NotUdp(protocol));
    }

    let udp = udp::Packet::new_checked(ip_payload).map_err(FrameError::Udp)?;
    let udp_len = usize::from(udp.len());
    if udp_len != ip_payload.len() {
        return Err(FrameError::Udp(ParseError::LengthMismatch {
            what: "UDP length",
            declared: udp_len,
            actual: ip_payload.len(),
        }));
    }
    if checks.udp && !udp.verify_checksum(&ip.pseudo_header()) {
        return Err(FrameError::Udp(ParseError::BadChecksum("UDP")));
    }
    let udp_checksum = if udp.checksum() == 0 {
        UdpChecksum::Zero
    } else {
        UdpChecksum::Computed
    };

    let udp_start = ip_start + ip_header_len;
    let payload_start = udp_start + udp::HEADER_LEN;
    Ok(Frame {
        repr: FrameRepr {
            destination: eth.destination,
            source: eth.source,
            vlan: eth.vlan,
            ip,
            src_port: udp.src_port(),
            dst_port: udp.dst_port(),
            udp_checksum,
        },
        layers: Layers {
            ethernet: 0..ip_start,
            ip: ip_start..udp_start,
            udp: udp_start..payload_start,
            payload: payload_start..udp_start + udp_len,
        },
    })
}

impl FrameRepr {
    /// Bytes of Ethernet, IP and UDP headers in front of the payload.
    pub const fn header_len(&self) -> usize {
        let ethernet = match self.vlan {
            Some(_) => ethernet::VLAN_HEADER_LEN,
            None => ethernet::HEADER_LEN,
        };
        ethernet + self.ip.header_len() + udp::HEADER_LEN
    }

    /// Headers plus a payload of `payload_len` bytes.
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len
    }

    /// The largest UDP payload the IP version's length fields describe.
    pub const fn max_payload_len(&self) -> usize {
        match self.ip {
            IpFields::V4 { .. } => ipv4::MAX_PAYLOAD_LEN - udp::HEADER_LEN,
            IpFields::V6 { .. } => udp::MAX_PAYLOAD_LEN,
        }
    }

    /// Writes Ethernet, IP and UDP headers into `buffer[..header_len()]` for
    /// a payload of `payload_len` bytes that the caller has placed (or will
    /// place) at `buffer[header_len()..]`. With [`UdpChecksum::Computed`] the
    /// payload must already be in place, since the checksum covers it.
    /// Bytes after the payload are not touched.
    ///
    /// # Errors
    ///
    /// [`EmitError`] if the payload is too long for the length fields or the
    /// buffer too short; nothing is written then.
    pub fn emit(&self, buffer: &mut [u8], payload_len: usize) -> Result<Layers, EmitError> {
        let max = self.max_payload_len();
        if payload_len > max {
            return Err(EmitError::PayloadTooLong {
                max,
                len: payload_len,
            });
        }
        let need = self.buffer_len(payload_len);
        if buffer.len() < need {
            return Err(EmitError::BufferTooShort {
                need,
                have: buffer.len(),
            });
        }
        let buffer = &mut buffer[..need];

        let eth = ethernet::Repr {
            destination: self.destination,
            source: self.source,
            vlan: self.vlan,
            ethertype: self.ip.ethertype(),
        };
        let ip_start = eth.buffer_len();
        eth.emit(&mut ethernet::Packet::new_unchecked(
            &mut buffer[..ip_start],
        ));

        let udp_len = udp::HEADER_LEN + payload_len;
        let udp_start = ip_start + self.ip.header_len();
        let ip_header = &mut buffer[ip_start..udp_start];
        match self.ip {
            IpFields::V4 {
                src,
                dst,
                ttl,
                dscp,
                ecn,
                ident,
                dont_fragment,
            } => ipv4::Repr {
                src_addr: src,
                dst_addr: dst,
                protocol: IpProtocol::Udp,
                payload_len: udp_len,
                ttl,
                dscp,
                ecn,
                ident,
                dont_fragment,
            }
            .emit(&mut ipv4::Packet::new_unchecked(ip_header)),
            IpFields::V6 {
                src,
                dst,
                hop_limit,
                dscp,
                ecn,
                flow_label,
            } => ipv6::Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: IpProtocol::Udp,
                payload_len: udp_len,
                hop_limit,
                dscp,
                ecn,
                flow_label,
            }
            .emit(&mut ipv6::Packet::new_unchecked(ip_header)),
        }

        let mut datagram = udp::Packet::new_unchecked(&mut buffer[udp_start..]);
        udp::Repr {
            src_port: self.src_port,
            dst_port: self.dst_port,
            payload_len,
        }
        .emit(&mut datagram);
        if self.udp_checksum == UdpChecksum::Computed {
            datagram.fill_checksum(&self.ip.pseudo_header());
        }

        let payload_start = udp_start + udp::HEADER_LEN;
        Ok(Layers {
            ethernet: 0..ip_start,
            ip: ip_start..udp_start,
            udp: udp_start..payload_start,
            payload: payload_start..need,
        })
    }
}

impl fmt::Display for FrameRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} > {}", self.source, self.destination)?;
        match self.ip {
            IpFields::V4 { src, dst, ecn, .. } => {
                write!(f, " {src}:{} > {dst}:{}", self.src_port, self.dst_port)?;
                write!(f, " ecn {ecn:?}")
            }
            IpFields::V6 {
                src,
                dst,
                ecn,
                flow_label,
                ..
            } => {
                write!(f, " [{src}]:{} > [{dst}]:{}", self.src_port, self.dst_port)?;
                write!(f, " flow {:#07x} ecn {ecn:?}", flow_label.value())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::testing::frame_repr;

    fn v4_repr() -> FrameRepr {
        FrameRepr {
            destination: EthernetAddress([2, 0, 0, 0, 0, 2]),
            source: EthernetAddress([2, 0, 0, 0, 0, 1]),
            vlan: None,
            ip: IpFields::V4 {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                ttl: 64,
                dscp: Dscp::ZERO,
                ecn: Ecn::Ect0,
                ident: 0,
                dont_fragment: true,
            },
            src_port: 0x7da9,
            dst_port: PSP_UDP_PORT,
            udp_checksum: UdpChecksum::Computed,
        }
    }

    fn v6_repr() -> FrameRepr {
        FrameRepr {
            vlan: Some(VlanTag::new(3, false, 42).unwrap()),
            ip: IpFields::V6 {
                src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
                dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
                hop_limit: 64,
                dscp: Dscp::ZERO,
                ecn: Ecn::Ce,
                flow_label: FlowLabel::truncating(0xBEEF5),
            },
            udp_checksum: UdpChecksum::Zero,
            ..v4_repr()
        }
    }

    fn build(repr: &FrameRepr, payload: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0u8; repr.buffer_len(payload.len())];
        bytes[repr.header_len()..].copy_from_slice(payload);
        repr.emit(&mut bytes, payload.len()).unwrap();
        bytes
    }

    #[test]
    fn ipv4_frame_layers() {
        let bytes = build(&v4_repr(), b"psp packet");
        assert_eq!(bytes.len(), 14 + 20 + 8 + 10);
        let frame = parse(&bytes).unwrap();
        assert_eq!(frame.repr, v4_repr());
        assert_eq!(frame.layers.ethernet, 0..14);
        assert_eq!(frame.layers.ip, 14..34);
        assert_eq!(frame.layers.udp, 34..42);
        assert_eq!(frame.layers.payload, 42..52);
        assert_eq!(&bytes[frame.layers.payload], b"psp packet");
        // EtherType, IPv4 total length, protocol, UDP length by hand.
        assert_eq!(&bytes[12..14], &[0x08, 0x00]);
        assert_eq!(&bytes[16..18], &(20u16 + 8 + 10).to_be_bytes());
        assert_eq!(bytes[23], 17);
        assert_eq!(&bytes[38..40], &(8u16 + 10).to_be_bytes());
        assert_eq!(bytes[15] & 0b11, 0b10, "ECT(0) in the DSCP/ECN byte");
    }

    #[test]
    fn ipv6_tagged_frame_layers() {
        let bytes = build(&v6_repr(), &[0xAB; 33]);
        let frame = parse(&bytes).unwrap();
        assert_eq!(frame.repr, v6_repr());
        assert_eq!(frame.layers.ip, 18..58);
        assert_eq!(frame.layers.payload, 66..99);
        assert_eq!(&bytes[12..14], &[0x81, 0x00]);
        assert_eq!(&bytes[16..18], &[0x86, 0xDD]);
        assert_eq!(&bytes[64..66], &[0, 0], "UDP checksum zero");
    }

    #[test]
    fn padding_after_the_packet_is_ignored() {
        let mut bytes = build(&v4_repr(), b"x");
        bytes.resize(60, 0);
        let frame = parse(&bytes).unwrap();
        assert_eq!(frame.layers.payload, 42..43);
    }

    #[test]
    fn errors_name_the_layer() {
        let bytes = build(&v4_repr(), b"payload");
        let err = parse(&bytes[..10]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Ethernet: truncated Ethernet header: need 14 bytes, have 10"
        );

        let err = parse(&bytes[..30]).unwrap_err();
        assert!(matches!(
            err,
            FrameError::Ipv4(ParseError::Truncated { .. })
        ));

        let mut bad = bytes.clone();
        bad[22] ^= 1; // TTL
        assert_eq!(
            parse(&bad).unwrap_err(),
            FrameError::Ipv4(ParseError::BadChecksum("IPv4 header"))
        );
        assert!(parse_with(&bad, ChecksumChecks::OFFLOADED).is_ok());

        let mut bad = bytes.clone();
        bad[45] ^= 1; // payload byte under a computed UDP checksum
        let err = parse(&bad).unwrap_err();
        assert_eq!(err, FrameError::Udp(ParseError::BadChecksum("UDP")));

        let mut bad = bytes.clone();
        bad[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            parse(&bad).unwrap_err(),
            FrameError::UnsupportedEtherType(EtherType::Arp)
        );

        let mut tcp = bytes.clone();
        let mut ip = ipv4::Packet::new_unchecked(&mut tcp[14..]);
        ip.set_protocol(IpProtocol::Tcp);
        ip.fill_checksum();
        assert_eq!(
            parse(&tcp).unwrap_err(),
            FrameError::NotUdp(IpProtocol::Tcp)
        );

        let mut short_udp = bytes;
        short_udp[39] -= 1; // UDP length one less than the IP payload
        assert_eq!(
            parse_with(&short_udp, ChecksumChecks::OFFLOADED).unwrap_err(),
            FrameError::Udp(ParseError::LengthMismatch {
                what: "UDP length",
                declared: 14,
                actual: 15
            })
        );
    }

    #[test]
    fn emit_errors() {
        let repr = v4_repr();
        let mut small = [0u8; 50];
        assert_eq!(
            repr.emit(&mut small, 9),
            Err(EmitError::BufferTooShort { need: 51, have: 50 })
        );
        assert_eq!(small, [0u8; 50], "nothing written on error");
        assert_eq!(
            repr.emit(&mut small, 65_508),
            Err(EmitError::PayloadTooLong {
                max: 65_507,
                len: 65_508
            })
        );
        assert_eq!(v6_repr().max_payload_len(), 65_527);
    }

    proptest! {
        #[test]
        fn frame_round_trip(
            repr in frame_repr(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let bytes = build(&repr, &payload);
            let frame = parse(&bytes).unwrap();
            prop_assert_eq!(frame.repr, repr);
            prop_assert_eq!(frame.layers.payload.end, bytes.len());
            prop_assert_eq!(&bytes[frame.layers.payload], &payload[..]);
        }
    }
}
