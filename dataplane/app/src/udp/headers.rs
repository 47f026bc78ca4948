//! The outer headers the UDP port strips on transmit and rebuilds on
//! receive.
//!
//! Layer: application, inside the kernel UDP port. Owns [`HeaderTemplate`]
//! (the Ethernet/IP/UDP headers of frames from one peer, built once and
//! patched per datagram with the lengths and the IPv4 header checksum) and
//! [`outer_len`] (where the PSP packet starts in a frame the engine built).
//! Never panics on input; never allocates per frame.
//!
//! Why this is sound: the engine's frames carry PSP over UDP (destination
//! port 1000), and PSP's AAD covers only the PSP header and the clear bytes
//! after it (spec/psp.md §1.3), never the Ethernet, IP or UDP headers. The
//! kernel carries the PSP packet as its UDP payload, so the bytes the ICV
//! covers cross unchanged, and the headers put back in front of them are
//! the engine's own addresses, which the receive path checks as usual.

use std::net::IpAddr;

use falcon_core::api::EthernetAddress;

/// The engine's UDP destination port (PSP's, OCP Falcon 0.9 §7.1).
pub const FALCON_UDP_PORT: u16 = 1000;

const ETHERNET_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;

/// Ethernet + IPv6 + UDP: the longest header a template holds.
pub const MAX_HEADER_LEN: usize = ETHERNET_LEN + IPV6_LEN + UDP_LEN;

/// The headers of a frame from one peer to this node, up to the UDP
/// payload: Ethernet (untagged), IPv4 without options or IPv6, UDP with
/// checksum 0 (PSP's, spec/psp.md §1.1).
#[derive(Debug, Clone)]
pub struct HeaderTemplate {
    bytes: [u8; MAX_HEADER_LEN],
    len: usize,
    /// IPv4: the one's-complement sum of the header words that do not
    /// change per datagram (all but the total length and the checksum).
    ipv4_partial_sum: Option<u32>,
}

impl HeaderTemplate {
    /// Frames from (`peer_mac`, `peer_ip`, UDP source `src_port`) to
    /// (`local_mac`, `local_ip`, port 1000). `None` when the two addresses
    /// are of different families.
    pub fn new(
        local_mac: EthernetAddress,
        local_ip: IpAddr,
        peer_mac: EthernetAddress,
        peer_ip: IpAddr,
        src_port: u16,
    ) -> Option<Self> {
        let mut bytes = [0u8; MAX_HEADER_LEN];
        bytes[0..6].copy_from_slice(&local_mac.0);
        bytes[6..12].copy_from_slice(&peer_mac.0);
        let (ip_len, ipv4_partial_sum) = match (local_ip, peer_ip) {
            (IpAddr::V4(dst), IpAddr::V4(src)) => {
                bytes[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
                let ip = &mut bytes[ETHERNET_LEN..ETHERNET_LEN + IPV4_LEN];
                ip[0] = 0x45;
                // Don't Fragment; TTL 64; protocol UDP.
                ip[6] = 0x40;
                ip[8] = 64;
                ip[9] = 17;
                ip[12..16].copy_from_slice(&src.octets());
                ip[16..20].copy_from_slice(&dst.octets());
                (IPV4_LEN, Some(sum_words(ip)))
            }
            (IpAddr::V6(dst), IpAddr::V6(src)) => {
                bytes[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
                let ip = &mut bytes[ETHERNET_LEN..ETHERNET_LEN + IPV6_LEN];
                ip[0] = 0x60;
                ip[6] = 17;
                ip[7] = 64;
                ip[8..24].copy_from_slice(&src.octets());
                ip[24..40].copy_from_slice(&dst.octets());
                (IPV6_LEN, None)
            }
            _ => return None,
        };
        let udp = ETHERNET_LEN + ip_len;
        bytes[udp..udp + 2].copy_from_slice(&src_port.to_be_bytes());
        bytes[udp + 2..udp + 4].copy_from_slice(&FALCON_UDP_PORT.to_be_bytes());
        Some(HeaderTemplate {
            bytes,
            len: udp + UDP_LEN,
            ipv4_partial_sum,
        })
    }

    /// Header bytes in front of the UDP payload.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the template is empty (never: at least Ethernet, IP, UDP).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes the headers for a UDP payload of `payload_len` bytes into
    /// `out[..self.len()]`. `false` (nothing written) when `out` is
    /// shorter or the payload does not fit an IP packet.
    pub fn write(&self, out: &mut [u8], payload_len: usize) -> bool {
        let Some(out) = out.get_mut(..self.len) else {
            return false;
        };
        let udp_len = payload_len + UDP_LEN;
        out.copy_from_slice(&self.bytes[..self.len]);
        let udp = self.len - UDP_LEN;
        match self.ipv4_partial_sum {
            Some(partial) => {
                let Ok(total) = u16::try_from(udp_len + IPV4_LEN) else {
                    return false;
                };
                out[ETHERNET_LEN + 2..ETHERNET_LEN + 4].copy_from_slice(&total.to_be_bytes());
                let checksum = !fold(partial + u32::from(total));
                out[ETHERNET_LEN + 10..ETHERNET_LEN + 12].copy_from_slice(&checksum.to_be_bytes());
            }
            None => {
                let Ok(len) = u16::try_from(udp_len) else {
                    return false;
                };
                out[ETHERNET_LEN + 4..ETHERNET_LEN + 6].copy_from_slice(&len.to_be_bytes());
            }
        }
        // The IPv4 and IPv6 checks above bound the UDP length too.
        let udp_len = udp_len as u16;
        out[udp + 4..udp + 6].copy_from_slice(&udp_len.to_be_bytes());
        true
    }
}

/// Where the UDP payload (the PSP packet) starts in `frame`, and its
/// destination IP address: Ethernet (optionally one VLAN tag), IPv4 (with
/// its options) or IPv6 (no extension headers: the engine emits none),
/// UDP. `None` for anything else.
pub fn outer_len(frame: &[u8]) -> Option<(usize, IpAddr)> {
    let be16 = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?))
    };
    let mut ip = ETHERNET_LEN;
    let mut ethertype = be16(12)?;
    if ethertype == ETHERTYPE_VLAN {
        ethertype = be16(16)?;
        ip += 4;
    }
    let (udp, dst) = match ethertype {
        ETHERTYPE_IPV4 => {
            let version_ihl = *frame.get(ip)?;
            let ihl = usize::from(version_ihl & 0x0F) * 4;
            if version_ihl >> 4 != 4 || ihl < IPV4_LEN || *frame.get(ip + 9)? != 17 {
                return None;
            }
            let dst: [u8; 4] = frame.get(ip + 16..ip + 20)?.try_into().ok()?;
            (ip + ihl, IpAddr::from(dst))
        }
        ETHERTYPE_IPV6 => {
            if *frame.get(ip)? >> 4 != 6 || *frame.get(ip + 6)? != 17 {
                return None;
            }
            let dst: [u8; 16] = frame.get(ip + 24..ip + 40)?.try_into().ok()?;
            (ip + IPV6_LEN, IpAddr::from(dst))
        }
        _ => return None,
    };
    let payload = udp + UDP_LEN;
    (payload <= frame.len()).then_some((payload, dst))
}

fn sum_words(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> EthernetAddress {
        EthernetAddress([2, 0, 0, 0, 0, n])
    }

    #[test]
    fn an_ipv4_template_writes_headers_outer_len_reads_back() {
        let (local, peer) = (IpAddr::from([10, 0, 0, 2]), IpAddr::from([10, 0, 0, 1]));
        let t = HeaderTemplate::new(mac(2), local, mac(1), peer, 4242).expect("one family");
        assert_eq!(t.len(), 42);
        let mut frame = vec![0u8; 42 + 100];
        assert!(t.write(&mut frame, 100));
        assert_eq!(outer_len(&frame), Some((42, local)));
        // The IPv4 header sums to 0xFFFF with its checksum.
        assert_eq!(fold(sum_words(&frame[14..34])), 0xFFFF);
        assert_eq!(u16::from_be_bytes([frame[16], frame[17]]), 128);
        assert_eq!(u16::from_be_bytes([frame[36], frame[37]]), 1000);
        assert_eq!(u16::from_be_bytes([frame[38], frame[39]]), 108);
        assert!(!t.write(&mut frame[..41], 100));
        assert!(!t.write(&mut frame, 70_000));
    }

    #[test]
    fn an_ipv6_template_and_mixed_families() {
        let (local, peer) = (
            IpAddr::from([0xfd00u16, 0, 0, 0, 0, 0, 0, 2]),
            IpAddr::from([0xfd00u16, 0, 0, 0, 0, 0, 0, 1]),
        );
        let t = HeaderTemplate::new(mac(2), local, mac(1), peer, 1).expect("one family");
        assert_eq!(t.len(), 62);
        let mut frame = vec![0u8; 62 + 10];
        assert!(t.write(&mut frame, 10));
        assert_eq!(outer_len(&frame), Some((62, local)));
        assert!(
            HeaderTemplate::new(mac(2), local, mac(1), IpAddr::from([1, 2, 3, 4]), 1).is_none()
        );
    }

    #[test]
    fn outer_len_refuses_what_is_not_ip_over_udp() {
        assert_eq!(outer_len(&[]), None);
        assert_eq!(outer_len(&[0u8; 60]), None);
        let mut frame = [0u8; 42];
        frame[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        frame[14] = 0x45;
        frame[23] = 6; // TCP
        assert_eq!(outer_len(&frame), None);
        frame[23] = 17;
        assert!(outer_len(&frame).is_some());
        assert_eq!(outer_len(&frame[..41]), None);
    }
}
