//! The outer frame on the engine's per-packet path: what the receive path
//! needs from a frame, and a per-connection header template for transmit.
//!
//! Layer: wire, beside [`frame`](super::frame). Owns [`parse_rx`] (the
//! UDP payload range, destination port, ECN codepoint and TTL of a received
//! frame addressed to [`LocalAddresses`]) and [`FrameTemplate`] (a connection's Ethernet/IP/UDP header bytes,
//! built once from its [`FrameRepr`] and patched per packet with the lengths
//! and the IPv4 header checksum). Both are exact shortcuts of
//! [`frame::parse_with`](super::frame::parse_with) and
//! [`FrameRepr::emit`]: the common case (untagged IPv4 without options, UDP
//! checksum 0, to this node) takes the short path, everything else goes
//! through the full parser or emitter, so results, errors and bytes are the
//! same (property tests below). Never panics on input; never allocates.
//!
//! The short paths cost a fraction of the full ones, which build a whole
//! [`Frame`](super::frame::Frame) per packet on receive.

use core::net::IpAddr;
use core::ops::Range;

use crate::wire::checksum::{fold, ipv4_header_checksum_ok, sum_words};
use crate::wire::frame::{
    parse_with, ChecksumChecks, EmitError, FrameError, FrameRepr, IpFields, UdpChecksum,
};
use crate::wire::ip::Ecn;
use crate::wire::{ipv4, udp, EthernetAddress};

/// Ethernet (untagged) + IPv4 (no options) + UDP header bytes.
const SHORT_HEADERS: usize = 14 + 20 + 8;
/// The longest header a template holds: Ethernet with a tag + IPv6 + UDP.
const MAX_HEADERS: usize = 18 + 40 + 8;

/// The destination a received frame must carry: the node's own MAC
/// address (the NIC's unicast filter, IEEE 802.3 §4.2.4.1.1) and IP
/// address (a host that does not forward, RFC 1122 §3.2.1.3, RFC 8200 §4).
/// Neither is authenticated by PSP, and with IPv6 no checksum covers the
/// address (the UDP checksum of a PSP packet is 0, spec/psp.md §1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAddresses {
    mac: EthernetAddress,
    ip: IpAddr,
    /// The IPv4 address as the short path compares it (`None` for IPv6).
    ipv4: Option<[u8; 4]>,
}

impl LocalAddresses {
    /// Frames to `mac` and `ip`.
    pub const fn new(mac: EthernetAddress, ip: IpAddr) -> Self {
        let ipv4 = match ip {
            IpAddr::V4(v4) => Some(v4.octets()),
            IpAddr::V6(_) => None,
        };
        LocalAddresses { mac, ip, ipv4 }
    }
}

/// What the receive path needs from a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RxFrame {
    /// UDP destination port.
    pub dst_port: u16,
    /// ECN codepoint of the IP header.
    pub ecn: Ecn,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// The UDP payload (the PSP packet), as in
    /// [`Layers::payload`](super::frame::Layers::payload).
    pub payload: Range<usize>,
}

/// [`parse_with`] reduced to what the receive path needs, with the same
/// acceptance and the same errors, then the destination checked against
/// `local`.
///
/// # Errors
///
/// The [`FrameError`] `parse_with` returns for `bytes`, else
/// [`FrameError::DestinationMac`] or [`FrameError::DestinationIp`] for a
/// frame to another node.
///
/// Always inlined into the engine's one call: left to LLVM, a build whose
/// binary grew elsewhere took it out of line, and every frame paid the call
/// and the `RxFrame` returned through memory.
#[inline(always)]
pub fn parse_rx(
    bytes: &[u8],
    checks: ChecksumChecks,
    local: &LocalAddresses,
) -> Result<RxFrame, FrameError> {
    if let Some(frame) = parse_short(bytes, checks, local) {
        return Ok(frame);
    }
    let frame = parse_with(bytes, checks)?;
    if frame.repr.destination != local.mac {
        return Err(FrameError::DestinationMac(frame.repr.destination));
    }
    let (ttl, dst) = match frame.repr.ip {
        IpFields::V4 { ttl, dst, .. } => (ttl, IpAddr::V4(dst)),
        IpFields::V6 { hop_limit, dst, .. } => (hop_limit, IpAddr::V6(dst)),
    };
    if dst != local.ip {
        return Err(FrameError::DestinationIp(dst));
    }
    Ok(RxFrame {
        dst_port: frame.repr.dst_port,
        ecn: frame.repr.ip.ecn(),
        ttl,
        payload: frame.layers.payload,
    })
}

/// An untagged IPv4 frame to `local` without options or fragmentation
/// carrying UDP with checksum 0 and lengths that agree: exactly the frames
/// `parse_rx` accepts among those of this shape. `None` sends the frame to the full
/// parser (which also names the error of a malformed one).
///
/// Inlined into its caller: out of line (LLVM's choice) every frame would pay
/// the call, the register saves and the `RxFrame` returned through memory.
#[inline]
fn parse_short(bytes: &[u8], checks: ChecksumChecks, local: &LocalAddresses) -> Option<RxFrame> {
    let headers: &[u8; SHORT_HEADERS] = bytes.get(..SHORT_HEADERS)?.try_into().ok()?;
    // Destination MAC and IPv4 address: the node's.
    if headers[..6] != local.mac.0
        || Some([headers[30], headers[31], headers[32], headers[33]]) != local.ipv4
    {
        return None;
    }
    let be16 = |at: usize| u16::from_be_bytes([headers[at], headers[at + 1]]);
    // EtherType IPv4; version 4 with IHL 5.
    if be16(12) != 0x0800 || headers[14] != 0x45 {
        return None;
    }
    let total_len = usize::from(be16(16));
    // MF clear and offset 0; protocol UDP; the buffer holds the IP packet;
    // UDP length = IP payload length (≥ 8, so the UDP header is inside).
    if be16(20) & 0x3FFF != 0
        || headers[23] != 17
        || total_len < 28
        || 14 + total_len > bytes.len()
        || usize::from(be16(38)) != total_len - 20
    {
        return None;
    }
    // A non-zero UDP checksum: the full parser verifies it.
    if be16(40) != 0 {
        return None;
    }
    if checks.ipv4_header && !cfg!(fuzzing) {
        let ip: &[u8; 20] = headers[14..34].try_into().ok()?;
        if !ipv4_header_checksum_ok(ip) {
            return None;
        }
    }
    Some(RxFrame {
        dst_port: be16(36),
        ecn: Ecn::from_bits(headers[15]),
        ttl: headers[22],
        payload: SHORT_HEADERS..14 + total_len,
    })
}

/// A connection's outer headers, pre-built: [`FrameRepr::emit`] with the
/// per-packet work reduced to a copy, two length fields and the IPv4 header
/// checksum (from the precomputed sum of the other header words).
#[derive(Debug, Clone)]
pub struct FrameTemplate {
    repr: FrameRepr,
    bytes: [u8; MAX_HEADERS],
    len: usize,
    /// Where the IP header starts.
    ip: usize,
    /// The unfolded sum of the IPv4 header words except the total length
    /// and the checksum (IPv4 only).
    ipv4_sum: u64,
    /// The usual frame: untagged IPv4 without options, UDP checksum 0
    /// ([`SHORT_HEADERS`] bytes), which [`emit_short`](Self::emit_short)
    /// writes.
    short: bool,
}

impl FrameTemplate {
    /// The template of `repr`'s headers.
    pub fn new(repr: FrameRepr) -> Self {
        let len = repr.header_len();
        let mut bytes = [0u8; MAX_HEADERS];
        // Invariant: header_len() ≤ MAX_HEADERS and the payload length 0 fits
        // every length field, so emit cannot fail.
        let layers = repr
            .emit(&mut bytes[..len], 0)
            .expect("headers fit the template");
        let ip = layers.ip.start;
        let mut ipv4_sum = 0;
        if let IpFields::V4 { .. } = repr.ip {
            let header = &bytes[ip..ip + 20];
            ipv4_sum = sum_words(&header[..2], 0)
                + sum_words(&header[4..10], 0)
                + sum_words(&header[12..20], 0);
        }
        let short = repr.vlan.is_none()
            && matches!(repr.ip, IpFields::V4 { .. })
            && repr.udp_checksum == UdpChecksum::Zero;
        FrameTemplate {
            repr,
            bytes,
            len,
            ip,
            ipv4_sum,
            short,
        }
    }

    /// The headers' values.
    pub fn repr(&self) -> &FrameRepr {
        &self.repr
    }

    /// Bytes of headers in front of the payload.
    pub fn header_len(&self) -> usize {
        self.len
    }

    /// What [`FrameRepr::emit`] does for this template's repr: writes the
    /// headers into `buffer[..header_len()]` for the `payload_len` bytes at
    /// `buffer[header_len()..]`; returns the frame length.
    ///
    /// # Errors
    ///
    /// As [`FrameRepr::emit`]; nothing is written then.
    #[inline(always)]
    pub fn emit(&self, buffer: &mut [u8], payload_len: usize) -> Result<usize, EmitError> {
        if self.short {
            if let Some(len) = self.emit_short(buffer, payload_len) {
                return Ok(len);
            }
        }
        if self.repr.udp_checksum == UdpChecksum::Computed {
            return self.repr.emit(buffer, payload_len).map(|l| l.payload.end);
        }
        let max = self.repr.max_payload_len();
        let need = self.len + payload_len;
        if payload_len > max {
            return Err(EmitError::PayloadTooLong {
                max,
                len: payload_len,
            });
        }
        if buffer.len() < need {
            return Err(EmitError::BufferTooShort {
                need,
                have: buffer.len(),
            });
        }
        let headers = &mut buffer[..self.len];
        headers.copy_from_slice(&self.bytes[..self.len]);
        // Invariant: payload_len ≤ max_payload_len, so the lengths fit u16.
        let udp_len = (8 + payload_len) as u16;
        let ip = self.ip;
        match self.repr.ip {
            IpFields::V4 { .. } => {
                let total = udp_len + 20;
                headers[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
                let checksum = !fold(self.ipv4_sum + u64::from(total));
                headers[ip + 10..ip + 12].copy_from_slice(&checksum.to_be_bytes());
                headers[ip + 24..ip + 26].copy_from_slice(&udp_len.to_be_bytes());
            }
            IpFields::V6 { .. } => {
                headers[ip + 4..ip + 6].copy_from_slice(&udp_len.to_be_bytes());
                headers[ip + 44..ip + 46].copy_from_slice(&udp_len.to_be_bytes());
            }
        }
        Ok(need)
    }

    /// [`emit`](Self::emit) of a [`short`](Self::short) template: `None`
    /// (nothing written) when the payload is too long or the buffer too short,
    /// for `emit` to name the error. The headers are one fixed-size array, so
    /// every field sits at a constant offset and no write is bounds-checked
    /// (through the template's IP offset, each of the three would be).
    #[inline(always)]
    fn emit_short(&self, buffer: &mut [u8], payload_len: usize) -> Option<usize> {
        let need = SHORT_HEADERS + payload_len;
        if payload_len > ipv4::MAX_PAYLOAD_LEN - udp::HEADER_LEN || buffer.len() < need {
            return None;
        }
        let (headers, _) = buffer.split_first_chunk_mut::<SHORT_HEADERS>()?;
        let (template, _) = self.bytes.split_first_chunk::<SHORT_HEADERS>()?;
        copy_short_headers(headers, template);
        // Invariant: payload_len ≤ the IPv4 maximum, so the lengths fit u16.
        let udp_len = (udp::HEADER_LEN + payload_len) as u16;
        let total = udp_len + ipv4::HEADER_LEN as u16;
        // RFC 1624: the header sum is the template's (every word but these
        // two) plus the total length.
        let checksum = !fold(self.ipv4_sum + u64::from(total));
        headers[16..18].copy_from_slice(&total.to_be_bytes());
        headers[24..26].copy_from_slice(&checksum.to_be_bytes());
        headers[38..40].copy_from_slice(&udp_len.to_be_bytes());
        Some(need)
    }
}

/// `*dst = *src` as three 16-byte moves (the last overlapping). Written as
/// `*dst = *src`, LLVM merges the copy with the variable-length one of the
/// other header layouts into a single `memcpy` call of either length.
#[inline(always)]
fn copy_short_headers(dst: &mut [u8; SHORT_HEADERS], src: &[u8; SHORT_HEADERS]) {
    const TAIL: usize = SHORT_HEADERS - 16;
    for at in [0, 16, TAIL] {
        let mut chunk = [0u8; 16];
        chunk.copy_from_slice(&src[at..at + 16]);
        dst[at..at + 16].copy_from_slice(&chunk);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::testing::frame_repr;

    proptest! {
        #[test]
        fn template_emits_the_bytes_of_the_repr(
            repr in frame_repr(),
            payload in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let template = FrameTemplate::new(repr);
            let len = repr.header_len() + payload.len();
            let mut expected = vec![0x5Au8; len + 3];
            expected[repr.header_len()..len].copy_from_slice(&payload);
            let mut got = expected.clone();
            let layers = repr.emit(&mut expected, payload.len()).unwrap();
            prop_assert_eq!(template.emit(&mut got, payload.len()), Ok(layers.payload.end));
            prop_assert_eq!(got, expected);
            prop_assert_eq!(template.header_len(), repr.header_len());
        }

        #[test]
        fn template_refuses_as_the_repr_does(repr in frame_repr(), short in 0usize..80) {
            let template = FrameTemplate::new(repr);
            let mut a = vec![0u8; short];
            let mut b = a.clone();
            let expected = repr.emit(&mut a, 30).map(|l| l.payload.end);
            prop_assert_eq!(template.emit(&mut b, 30), expected);
            prop_assert_eq!(a, b);
            let huge = repr.max_payload_len() + 1;
            let expected = repr.emit(&mut [0u8; 100], huge).map(|l| l.payload.end);
            prop_assert_eq!(template.emit(&mut [0u8; 100], huge), expected);
        }

        #[test]
        fn parse_rx_agrees_with_the_full_parser(
            repr in frame_repr(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
            flips in proptest::collection::vec((0usize..80, any::<u8>()), 0..3),
            cut in 0usize..8,
            padding in 0usize..6,
            offloaded in any::<bool>(),
            elsewhere in 0u8..4,
        ) {
            let len = repr.header_len() + payload.len();
            let mut bytes = vec![0u8; len + padding];
            bytes[repr.header_len()..len].copy_from_slice(&payload);
            repr.emit(&mut bytes, payload.len()).unwrap();
            for (at, bits) in flips {
                if let Some(byte) = bytes.get_mut(at) {
                    *byte ^= bits;
                }
            }
            bytes.truncate(bytes.len().saturating_sub(cut));
            let checks = if offloaded { ChecksumChecks::OFFLOADED } else { ChecksumChecks::ALL };
            // To the frame's own destination, or (for some runs) another
            // node's.
            let mut local = LocalAddresses::new(repr.destination, repr.ip.dst());
            if elsewhere == 1 {
                local.mac.0[5] ^= 1;
            } else if elsewhere == 2 {
                local = LocalAddresses::new(repr.destination, match repr.ip.dst() {
                    IpAddr::V4(_) => IpAddr::V6(core::net::Ipv6Addr::LOCALHOST),
                    IpAddr::V6(_) => IpAddr::V4(core::net::Ipv4Addr::LOCALHOST),
                });
            }
            let expected = parse_with(&bytes, checks).and_then(|f| {
                if f.repr.destination != local.mac {
                    return Err(FrameError::DestinationMac(f.repr.destination));
                }
                if f.repr.ip.dst() != local.ip {
                    return Err(FrameError::DestinationIp(f.repr.ip.dst()));
                }
                Ok(f)
            }).map(|f| RxFrame {
                dst_port: f.repr.dst_port,
                ecn: f.repr.ip.ecn(),
                ttl: match f.repr.ip {
                    IpFields::V4 { ttl, .. } => ttl,
                    IpFields::V6 { hop_limit, .. } => hop_limit,
                },
                payload: f.layers.payload,
            });
            prop_assert_eq!(parse_rx(&bytes, checks, &local), expected);
        }
    }

    #[test]
    fn short_path_takes_the_engine_frame() {
        let repr = FrameRepr {
            destination: crate::wire::EthernetAddress([2, 0, 0, 0, 0, 2]),
            source: crate::wire::EthernetAddress([2, 0, 0, 0, 0, 1]),
            vlan: None,
            ip: IpFields::V4 {
                src: core::net::Ipv4Addr::new(10, 0, 0, 1),
                dst: core::net::Ipv4Addr::new(10, 0, 0, 2),
                ttl: 64,
                dscp: crate::wire::Dscp::ZERO,
                ecn: Ecn::Ce,
                ident: 0,
                dont_fragment: true,
            },
            src_port: 0xC001,
            dst_port: crate::wire::PSP_UDP_PORT,
            udp_checksum: UdpChecksum::Zero,
        };
        let mut bytes = vec![0u8; 42 + 10];
        let template = FrameTemplate::new(repr);
        assert!(template.short, "the engine's frame takes emit_short");
        template.emit(&mut bytes, 10).unwrap();
        let local = LocalAddresses::new(repr.destination, repr.ip.dst());
        let frame = parse_short(&bytes, ChecksumChecks::ALL, &local).expect("short path");
        assert_eq!(
            frame,
            RxFrame {
                dst_port: crate::wire::PSP_UDP_PORT,
                ecn: Ecn::Ce,
                ttl: 64,
                payload: 42..52,
            }
        );
        bytes[24] ^= 1; // the IPv4 checksum fails: the full parser names it
        assert!(parse_short(&bytes, ChecksumChecks::ALL, &local).is_none());
        assert!(parse_short(&bytes, ChecksumChecks::OFFLOADED, &local).is_some());
        // To another node: the full parser names that too.
        let elsewhere = LocalAddresses::new(repr.source, repr.ip.dst());
        assert!(parse_short(&bytes, ChecksumChecks::OFFLOADED, &elsewhere).is_none());
        assert_eq!(
            parse_rx(&bytes, ChecksumChecks::OFFLOADED, &elsewhere),
            Err(FrameError::DestinationMac(repr.destination))
        );
        let v6 = IpAddr::V6(core::net::Ipv6Addr::LOCALHOST);
        assert_eq!(
            parse_rx(
                &bytes,
                ChecksumChecks::OFFLOADED,
                &LocalAddresses::new(repr.destination, v6)
            ),
            Err(FrameError::DestinationIp(repr.ip.dst()))
        );
    }
}
