//! Frame-level PSP encapsulation as the google/psp reference tools do it
//! (`psp_encrypt` `transport_encap()` / `tunnel_encap()`, `psp_decrypt`),
//! for the offline pcap tools (`falcon psp encrypt|decrypt`) and the
//! published-vector tests (spec/psp.md §6.3).
//!
//! Owns the Ethernet/IPv4/IPv6/UDP rewriting around a PSP packet. Frames in,
//! frames out; allocates one output `Vec` per frame, so it is for tools, not
//! for the dataplane hot path (which seals in place with [`crate::TxSa`]).
//! It never picks IVs or keys itself: the caller passes them.
//!
//! Divergences from REF, each deliberate:
//! * A crypt offset that would encrypt part of the VC is refused (REF
//!   encrypts it; spec/psp.md §1.5).
//! * IP lengths come from the IP header, so Ethernet padding after the IP
//!   packet is dropped instead of being encapsulated.
//! * Decap rewrites the Ethernet type from the Next Header in tunnel mode
//!   (REF keeps the outer one, wrong for IPv4-in-IPv6).
//! * Decap always verifies the ICV, also for an empty encrypted region.

use core::fmt;

use crate::aead::Aead;
use crate::error::{RxDrop, SealError};
use crate::header::{HeaderRepr, Spi, ICV_LEN, UDP_PORT};
use crate::sa::SaDatabase;
use crate::seal::seal_in_place;

const ETH_LEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const IPV4_MIN_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const PROTO_IPV4: u8 = 4;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_IPV6: u8 = 41;

/// Per-frame parameters of an encapsulation.
#[derive(Debug, Clone, Copy)]
pub struct EncapParams {
    /// SPI to send with (its key is the `aead` argument).
    pub spi: Spi,
    /// IV of this packet (REF: a counter starting at 1).
    pub iv: u64,
    /// Crypt offset in 4-byte units (REF configs: transport 1, IPv4 tunnel
    /// 6, IPv6 tunnel 11; +2 with a VC).
    pub crypt_offset: u8,
    /// VC to include (REF includes an all-zero VC when configured).
    pub vc: Option<u64>,
}

/// PSP encapsulation mode, as the decryptor infers it from Next Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Next Header is an L4 protocol (or Falcon's 252).
    Transport,
    /// Next Header is 4 (IPv4) or 41 (IPv6).
    Tunnel,
}

/// A decapsulated frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decapsulated {
    /// The cleartext Ethernet frame.
    pub frame: Vec<u8>,
    /// The PSP header it carried.
    pub header: HeaderRepr,
    /// Transport or tunnel.
    pub mode: Mode,
}

/// Why a frame could not be (de)capsulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceError {
    /// Not an IPv4/IPv6 Ethernet frame (REF skips these).
    NotIp,
    /// IP but not UDP to port 1000 (decap skips these).
    NotPsp,
    /// The frame is inconsistent; the text says what.
    Malformed(&'static str),
    /// IPv6 transport mode needs a TCP or UDP next header (REF skips others).
    UnsupportedTransport,
    /// The result would not fit the 16-bit IP/UDP length fields.
    TooLarge,
    /// Sealing refused the parameters.
    Seal(SealError),
    /// Opening failed.
    Drop(RxDrop),
}

impl fmt::Display for ReferenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReferenceError::NotIp => f.write_str("not an IPv4/IPv6 Ethernet frame"),
            ReferenceError::NotPsp => f.write_str("not a PSP packet (UDP port 1000)"),
            ReferenceError::Malformed(what) => write!(f, "malformed frame: {what}"),
            ReferenceError::UnsupportedTransport => {
                f.write_str("IPv6 transport mode needs TCP or UDP as next header")
            }
            ReferenceError::TooLarge => f.write_str("encapsulated frame too large"),
            ReferenceError::Seal(e) => write!(f, "seal: {e}"),
            ReferenceError::Drop(r) => write!(f, "open: {r}"),
        }
    }
}

impl std::error::Error for ReferenceError {}

impl From<SealError> for ReferenceError {
    fn from(e: SealError) -> Self {
        ReferenceError::Seal(e)
    }
}

impl From<RxDrop> for ReferenceError {
    fn from(r: RxDrop) -> Self {
        ReferenceError::Drop(r)
    }
}

/// Transport mode (REF `transport_encap()`): the outer IP header is the
/// inner one with protocol 17, length + 40 (+ 8 with VC) and a new IPv4
/// checksum; UDP source port = inner sport XOR dport (1000 if the inner
/// packet is not TCP/UDP), destination 1000, checksum 0; PSP Next Header =
/// the inner protocol; the L4 header and payload follow, sealed.
pub fn transport_encap<A: Aead + ?Sized>(
    frame: &[u8],
    aead: &A,
    params: &EncapParams,
) -> Result<Vec<u8>, ReferenceError> {
    let ip = IpPacket::parse(frame)?;
    if ip.family == Family::V6 && !matches!(ip.proto, PROTO_TCP | PROTO_UDP) {
        return Err(ReferenceError::UnsupportedTransport);
    }
    let l4 = ip.payload;
    let repr = header_repr(ip.proto, aead, params);
    let psp_len = repr.buffer_len() + l4.len() + ICV_LEN;

    let mut out = Vec::with_capacity(ETH_LEN + ip.header.len() + UDP_LEN + psp_len);
    out.extend_from_slice(&frame[..ETH_LEN]);
    out.extend_from_slice(ip.header);
    let grow = UDP_LEN + psp_len - l4.len();
    rewrite_ip(&mut out[ETH_LEN..], ip.family, PROTO_UDP, |len| {
        len.checked_add(grow)
    })?;
    let sport = flow_port(ip.proto, l4);
    push_udp(&mut out, sport, UDP_LEN + psp_len)?;
    let psp_offset = out.len();
    out.resize(psp_offset + repr.buffer_len(), 0);
    out.extend_from_slice(l4);
    out.resize(psp_offset + psp_len, 0);
    seal_in_place(aead, &repr, &mut out, psp_offset, l4.len())?;
    Ok(out)
}

/// Tunnel mode (REF `tunnel_encap()`): a new outer IP header copied from the
/// inner one (IPv4: without options, IHL 5) with protocol 17, the new length
/// and checksum; UDP as in transport mode (ports from the inner L4 header);
/// PSP Next Header 4 or 41; the whole inner IP packet follows, sealed.
pub fn tunnel_encap<A: Aead + ?Sized>(
    frame: &[u8],
    aead: &A,
    params: &EncapParams,
) -> Result<Vec<u8>, ReferenceError> {
    let ip = IpPacket::parse(frame)?;
    let inner = ip.whole;
    let (next_header, outer_len) = match ip.family {
        Family::V4 => (PROTO_IPV4, IPV4_MIN_LEN),
        Family::V6 => (PROTO_IPV6, IPV6_LEN),
    };
    let repr = header_repr(next_header, aead, params);
    let psp_len = repr.buffer_len() + inner.len() + ICV_LEN;

    let mut out = Vec::with_capacity(ETH_LEN + outer_len + UDP_LEN + psp_len);
    out.extend_from_slice(&frame[..ETH_LEN]);
    out.extend_from_slice(&inner[..outer_len]);
    if ip.family == Family::V4 {
        out[ETH_LEN] = 0x45;
    }
    let outer_payload = UDP_LEN + psp_len;
    rewrite_ip(&mut out[ETH_LEN..], ip.family, PROTO_UDP, |_| {
        Some(
            outer_payload
                + if ip.family == Family::V4 {
                    outer_len
                } else {
                    0
                },
        )
    })?;
    let sport = flow_port(ip.proto, ip.payload);
    push_udp(&mut out, sport, outer_payload)?;
    let psp_offset = out.len();
    out.resize(psp_offset + repr.buffer_len(), 0);
    out.extend_from_slice(inner);
    out.resize(psp_offset + psp_len, 0);
    seal_in_place(aead, &repr, &mut out, psp_offset, inner.len())?;
    Ok(out)
}

/// Decapsulate (REF `psp_decrypt`): check IP/UDP framing (UDP to port 1000,
/// UDP length = IP payload length), open the PSP packet with the SA the SPI
/// selects in `db`, and rebuild the cleartext frame. Next Header 4/41 is
/// tunnel mode (the inner packet becomes the frame's payload); anything else
/// is transport mode (the outer IP header gets protocol := Next Header and
/// its length reduced by UDP + PSP header + ICV).
pub fn decap(frame: &[u8], db: &mut SaDatabase) -> Result<Decapsulated, ReferenceError> {
    let ip = IpPacket::parse(frame)?;
    if ip.proto != PROTO_UDP {
        return Err(ReferenceError::NotPsp);
    }
    let udp = ip.payload;
    let (Some(dport), Some(udp_len)) = (be16(udp, 2), be16(udp, 4)) else {
        return Err(ReferenceError::Malformed("UDP header truncated"));
    };
    if dport != UDP_PORT {
        return Err(ReferenceError::NotPsp);
    }
    if usize::from(udp_len) != udp.len() {
        return Err(ReferenceError::Malformed(
            "UDP length differs from IP payload length",
        ));
    }
    let mut psp = udp
        .get(UDP_LEN..)
        .ok_or(ReferenceError::Malformed("UDP length below 8"))?
        .to_vec();
    let len = psp.len();
    let opened = db.open(&mut psp, 0, len)?;
    let header = *opened.header();
    let strip = UDP_LEN + opened.payload_offset() + ICV_LEN;
    let payload = opened.payload();

    let mut out = Vec::with_capacity(frame.len());
    out.extend_from_slice(&frame[..ETH_LEN]);
    let mode = if matches!(header.next_header, PROTO_IPV4 | PROTO_IPV6) {
        let ethertype = if header.next_header == PROTO_IPV4 {
            ETHERTYPE_IPV4
        } else {
            ETHERTYPE_IPV6
        };
        out[12..14].copy_from_slice(&ethertype.to_be_bytes());
        Mode::Tunnel
    } else {
        out.extend_from_slice(ip.header);
        rewrite_ip(&mut out[ETH_LEN..], ip.family, header.next_header, |l| {
            l.checked_sub(strip)
        })?;
        Mode::Transport
    };
    out.extend_from_slice(payload);
    Ok(Decapsulated {
        frame: out,
        header,
        mode,
    })
}

fn header_repr<A: Aead + ?Sized>(next_header: u8, aead: &A, p: &EncapParams) -> HeaderRepr {
    HeaderRepr {
        next_header,
        crypt_offset: p.crypt_offset,
        sample: false,
        drop_after_sampling: false,
        version: aead.version(),
        spi: p.spi,
        iv: p.iv,
        vc: p.vc,
    }
}

/// REF's UDP source port: inner sport XOR dport for TCP/UDP, else 1000.
fn flow_port(proto: u8, l4: &[u8]) -> u16 {
    match (proto, be16(l4, 0), be16(l4, 2)) {
        (PROTO_TCP | PROTO_UDP, Some(s), Some(d)) => s ^ d,
        _ => UDP_PORT,
    }
}

fn push_udp(out: &mut Vec<u8>, sport: u16, len: usize) -> Result<(), ReferenceError> {
    let len = u16::try_from(len).map_err(|_| ReferenceError::TooLarge)?;
    out.extend_from_slice(&sport.to_be_bytes());
    out.extend_from_slice(&UDP_PORT.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    // UDP checksum 0: must be sent and accepted (PSP spec "UDP Header").
    out.extend_from_slice(&[0, 0]);
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

/// An IP packet inside an Ethernet frame.
struct IpPacket<'a> {
    family: Family,
    /// The IP header (IPv4 with options; IPv6 fixed header).
    header: &'a [u8],
    /// Header and payload, as long as the IP length field says.
    whole: &'a [u8],
    /// The payload after `header`.
    payload: &'a [u8],
    /// IPv4 protocol / IPv6 next header.
    proto: u8,
}

impl<'a> IpPacket<'a> {
    fn parse(frame: &'a [u8]) -> Result<IpPacket<'a>, ReferenceError> {
        let ethertype = be16(frame, 12).ok_or(ReferenceError::NotIp)?;
        let ip = &frame[ETH_LEN..];
        let (family, header_len, total, proto) = match ethertype {
            ETHERTYPE_IPV4 => {
                let vihl = *ip
                    .first()
                    .ok_or(ReferenceError::Malformed("IPv4 header truncated"))?;
                let ihl = usize::from(vihl & 0x0F) * 4;
                if vihl >> 4 != 4 || ihl < IPV4_MIN_LEN {
                    return Err(ReferenceError::Malformed("bad IPv4 version/IHL"));
                }
                let total =
                    be16(ip, 2).ok_or(ReferenceError::Malformed("IPv4 header truncated"))?;
                let proto = *ip
                    .get(9)
                    .ok_or(ReferenceError::Malformed("IPv4 header truncated"))?;
                (Family::V4, ihl, usize::from(total), proto)
            }
            ETHERTYPE_IPV6 => {
                let plen = be16(ip, 4).ok_or(ReferenceError::Malformed("IPv6 header truncated"))?;
                let proto = *ip
                    .get(6)
                    .ok_or(ReferenceError::Malformed("IPv6 header truncated"))?;
                (Family::V6, IPV6_LEN, IPV6_LEN + usize::from(plen), proto)
            }
            _ => return Err(ReferenceError::NotIp),
        };
        if total < header_len {
            return Err(ReferenceError::Malformed(
                "IP length shorter than its header",
            ));
        }
        let whole = ip
            .get(..total)
            .ok_or(ReferenceError::Malformed("IP length beyond the frame"))?;
        let (header, payload) = whole.split_at(header_len);
        Ok(IpPacket {
            family,
            header,
            whole,
            payload,
            proto,
        })
    }
}

/// Set protocol / next header, recompute the length field with `len` (IPv4
/// total length or IPv6 payload length) and the IPv4 header checksum.
fn rewrite_ip(
    ip: &mut [u8],
    family: Family,
    proto: u8,
    len: impl FnOnce(usize) -> Option<usize>,
) -> Result<(), ReferenceError> {
    let (len_at, proto_at) = match family {
        Family::V4 => (2, 9),
        Family::V6 => (4, 6),
    };
    // Callers pass a parsed header: ≥ 20 bytes (IPv4) or 40 (IPv6).
    let min = match family {
        Family::V4 => IPV4_MIN_LEN,
        Family::V6 => IPV6_LEN,
    };
    if ip.len() < min {
        return Err(ReferenceError::Malformed("IP header truncated"));
    }
    let old = u16::from_be_bytes([ip[len_at], ip[len_at + 1]]);
    let new = len(usize::from(old))
        .and_then(|l| u16::try_from(l).ok())
        .ok_or(ReferenceError::TooLarge)?;
    ip[len_at..len_at + 2].copy_from_slice(&new.to_be_bytes());
    ip[proto_at] = proto;
    if family == Family::V4 {
        let ihl = usize::from(ip[0] & 0x0F) * 4;
        ip[10..12].copy_from_slice(&[0, 0]);
        let sum = ipv4_checksum(ip.get(..ihl).unwrap_or(&[]));
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
    }
    Ok(())
}

/// RFC 791 header checksum (one's complement of the one's-complement sum).
fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(c.get(1).copied().unwrap_or(0)))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    let hi = *b.get(at)?;
    let lo = *b.get(at + 1)?;
    Some(u16::from_be_bytes([hi, lo]))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sha2::{Digest, Sha256};

    use super::*;
    use crate::aead::{AeadContext, Backend};
    use crate::header::Version;
    use crate::testutil::spec_keys;

    /// spec/psp.md §6.3 recipe: the 1434-byte `v4_cleartext.pcap` frame.
    fn cleartext_frame() -> Vec<u8> {
        let mut f = hex::decode("008899aabb000022334455000800").unwrap();
        f.extend_from_slice(&hex::decode("4500058c000040004011215f0a0000010a000002").unwrap());
        f.extend_from_slice(&hex::decode("2b6756ce0578893b").unwrap());
        f.extend((0..1392).map(|i| (i % 256) as u8));
        f
    }

    fn appendix(name: &str) -> Vec<u8> {
        let text = match name {
            "v0" => include_str!("../testdata/v4_transport_co1_v0.hex"),
            "v1" => include_str!("../testdata/v4_transport_co1_v1.hex"),
            _ => include_str!("../testdata/v4_transport_co3_v0_vc.hex"),
        };
        hex::decode(text.split_whitespace().collect::<String>()).unwrap()
    }

    fn sha256(b: &[u8]) -> String {
        hex::encode(Sha256::digest(b))
    }

    const SPI: Spi = Spi(0x9A34_5678);

    fn ctx(backend: Backend, version: Version) -> AeadContext {
        AeadContext::new(backend, &spec_keys().derive(SPI, version))
    }

    #[test]
    fn cleartext_recipe_matches_reference_pcap() {
        let f = cleartext_frame();
        assert_eq!(f.len(), 1434);
        assert_eq!(
            sha256(&f),
            "c1fd767045fcf960225f10694680cef128b65a9b3c241c4e457658017b26e9ec"
        );
        // The recipe's IPv4 checksum is what we compute.
        assert_eq!(ipv4_checksum(&f[14..34]), 0);
    }

    #[test]
    fn reference_frames_byte_for_byte() {
        let cases = [
            (
                "v0",
                Version::Aes128Gcm,
                1u8,
                None,
                1474usize,
                "d8f1fbd98db07fbbb6b43cc07704ce9411cdfb0007307cc48165b270912edf11",
            ),
            (
                "v1",
                Version::Aes256Gcm,
                1,
                None,
                1474,
                "8986a058075e432fad700288ad59df4f1e3e76372377e10bc98823fee36a29ab",
            ),
            (
                "vc",
                Version::Aes128Gcm,
                3,
                Some(0u64),
                1482,
                "83a089fff672dbd65cafbbe967d2949d779757069ac1f98d8652e8d1ea19cfd3",
            ),
        ];
        let clear = cleartext_frame();
        for (name, version, co, vc, len, digest) in cases {
            for backend in Backend::ALL {
                let p = EncapParams {
                    spi: SPI,
                    iv: 1,
                    crypt_offset: co,
                    vc,
                };
                let out = transport_encap(&clear, &ctx(backend, version), &p).unwrap();
                assert_eq!(out.len(), len, "{name} {backend}");
                assert_eq!(out, appendix(name), "{name} {backend}");
                assert_eq!(sha256(&out), digest, "{name} {backend}");
            }
        }
    }

    #[test]
    fn reference_frames_decap_to_cleartext() {
        let clear = cleartext_frame();
        let mut db = SaDatabase::new(Backend::Ring, spec_keys(), 8);
        for name in ["v0", "v1", "vc"] {
            let d = decap(&appendix(name), &mut db).unwrap();
            assert_eq!(d.mode, Mode::Transport);
            assert_eq!(d.header.spi, SPI);
            assert_eq!(d.header.iv, 1);
            assert_eq!(d.header.next_header, PROTO_UDP);
            assert_eq!(d.frame, clear, "{name}");
        }
        // REF `-e` corruption: reserved bit of the crypt-offset byte.
        let mut bad = appendix("v0");
        bad[0x2a + 2] |= 0x80;
        assert_eq!(
            decap(&bad, &mut db).unwrap_err(),
            ReferenceError::Drop(RxDrop::AuthFailed)
        );
    }

    #[test]
    fn decap_framing_errors() {
        let mut db = SaDatabase::new(Backend::Ring, spec_keys(), 8);
        let good = appendix("v0");
        assert_eq!(
            decap(&good[..10], &mut db).unwrap_err(),
            ReferenceError::NotIp
        );
        assert_eq!(
            decap(&cleartext_frame(), &mut db).unwrap_err(),
            ReferenceError::NotPsp
        );
        let mut f = good.clone();
        f.truncate(f.len() - 1);
        assert!(matches!(
            decap(&f, &mut db),
            Err(ReferenceError::Malformed(_))
        ));
        let mut f = good.clone();
        f[0x27] ^= 1; // UDP length
        assert!(matches!(
            decap(&f, &mut db),
            Err(ReferenceError::Malformed(_))
        ));
        let mut f = good;
        f[0x25] = 0xE9; // dport 1001
        assert_eq!(decap(&f, &mut db).unwrap_err(), ReferenceError::NotPsp);
    }

    /// A small IPv6/UDP frame.
    fn v6_frame(payload_len: usize) -> Vec<u8> {
        let mut f = hex::decode("008899aabb00002233445500").unwrap();
        f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        let plen = (8 + payload_len) as u16;
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&plen.to_be_bytes());
        f.extend_from_slice(&[PROTO_UDP, 64]);
        f.extend((0..32).map(|i| i as u8));
        f.extend_from_slice(&[0x2b, 0x67, 0x56, 0xce]);
        f.extend_from_slice(&plen.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend((0..payload_len).map(|i| (i * 7) as u8));
        f
    }

    #[test]
    fn tunnel_round_trips_v4_and_v6() {
        let mut db = SaDatabase::new(Backend::RustCrypto, spec_keys(), 8);
        let k = ctx(Backend::Ring, Version::Aes256Gcm);
        for (frame, co) in [(cleartext_frame(), 6u8), (v6_frame(100), 11)] {
            for vc in [None, Some(0x0102_0304_0506_0708)] {
                let co = co + if vc.is_some() { 2 } else { 0 };
                let p = EncapParams {
                    spi: SPI,
                    iv: 9,
                    crypt_offset: co,
                    vc,
                };
                let out = tunnel_encap(&frame, &k, &p).unwrap();
                let v4 = frame[12..14] == ETHERTYPE_IPV4.to_be_bytes();
                let outer = if v4 { 20 } else { 40 };
                let vc_len = if vc.is_some() { 8 } else { 0 };
                assert_eq!(out.len(), frame.len() + outer + 40 + vc_len);
                // UDP: XOR-hash source port, dport 1000, checksum 0.
                let udp = &out[14 + outer..];
                assert_eq!(be16(udp, 0), Some(0x2b67 ^ 0x56ce));
                assert_eq!(be16(udp, 2), Some(1000));
                assert_eq!(be16(udp, 6), Some(0));
                assert_eq!(udp[8], if v4 { 4 } else { 41 });
                if v4 {
                    assert_eq!(ipv4_checksum(&out[14..34]), 0);
                    assert_eq!(usize::from(be16(&out, 16).unwrap()), out.len() - 14);
                }
                let d = decap(&out, &mut db).unwrap();
                assert_eq!(d.mode, Mode::Tunnel);
                assert_eq!(d.header.vc, vc);
                assert_eq!(d.frame, frame);
            }
        }
    }

    #[test]
    fn transport_round_trips_v6() {
        let mut db = SaDatabase::new(Backend::Ring, spec_keys(), 8);
        let frame = v6_frame(33);
        let p = EncapParams {
            spi: SPI,
            iv: 2,
            crypt_offset: 1,
            vc: None,
        };
        let out = transport_encap(&frame, &ctx(Backend::Ring, Version::Aes128Gcm), &p).unwrap();
        assert_eq!(out.len(), frame.len() + 40);
        // IPv6 payload length: inner UDP (8 + 33) + 40 bytes of PSP overhead.
        assert_eq!(be16(&out, 18), Some(8 + 33 + 40));
        let d = decap(&out, &mut db).unwrap();
        assert_eq!(d.mode, Mode::Transport);
        assert_eq!(d.frame, frame);
    }

    #[test]
    fn encap_refuses_bad_parameters() {
        let k = ctx(Backend::Ring, Version::Aes128Gcm);
        let clear = cleartext_frame();
        // REF would encrypt half the VC with CO 1; we refuse.
        let p = EncapParams {
            spi: SPI,
            iv: 1,
            crypt_offset: 1,
            vc: Some(0),
        };
        assert_eq!(
            transport_encap(&clear, &k, &p).unwrap_err(),
            ReferenceError::Seal(SealError::CryptOffsetInsideExtension)
        );
        let mut v6 = v6_frame(8);
        v6[14 + 6] = 58; // ICMPv6
        let p = EncapParams {
            spi: SPI,
            iv: 1,
            crypt_offset: 1,
            vc: None,
        };
        assert_eq!(
            transport_encap(&v6, &k, &p).unwrap_err(),
            ReferenceError::UnsupportedTransport
        );
        let mut arp = clear.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            transport_encap(&arp, &k, &p).unwrap_err(),
            ReferenceError::NotIp
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn decap_and_encap_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut db = SaDatabase::new(Backend::Ring, spec_keys(), 4);
            let k = ctx(Backend::Ring, Version::Aes128Gcm);
            let p = EncapParams { spi: SPI, iv: 1, crypt_offset: 1, vc: None };
            // Random bytes never authenticate.
            prop_assert!(decap(&bytes, &mut db).is_err());
            let _ = transport_encap(&bytes, &k, &p);
            let _ = tunnel_encap(&bytes, &k, &p);
            // Mutated valid frames too. Only Ethernet and outer IP/UDP
            // header bytes are outside the ICV; whatever decaps must carry
            // the original inner UDP header and payload.
            let mut f = appendix("v0");
            for (i, b) in bytes.iter().enumerate().take(16) {
                let at = (usize::from(*b) * 7 + i * 13) % f.len();
                f[at] ^= b | 1;
            }
            if let Ok(d) = decap(&f, &mut db) {
                prop_assert_eq!(&d.frame[34..], &cleartext_frame()[34..]);
            }
        }
    }
}
