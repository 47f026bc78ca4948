//! IPv4 header (RFC 791).
//!
//! Layer: wire. Owns the zero-copy [`Packet`] view and the [`Repr`] of the
//! IPv4 header: header checksum compute/verify, options tolerated (skipped,
//! never emitted), total-length checks, TTL (Falcon derives the forward hop
//! count from it, OCP Falcon 0.9 §10.6.1 p.89) and the DSCP/ECN byte (ECN
//! marks feed congestion control). It never reassembles fragments: a fragment
//! is [`ParseError::Fragmented`]. Never panics on input after
//! [`Packet::check_len`].
//!
//! ```text
//!  0       4       8              16      19              31
//!  +-------+-------+--------------+-------+---------------+
//!  |Version|  IHL  |  DSCP  | ECN |     Total Length      |  0
//!  |      Identification          |Flags| Fragment Offset |  4
//!  |     TTL       |   Protocol   |    Header Checksum    |  8
//!  |                    Source Address                    | 12
//!  |                  Destination Address                 | 16
//!  |                 Options (IHL > 5) ...                | 20
//! ```

use core::fmt;
use core::net::Ipv4Addr;

use crate::wire::bytes::{read_u16, write_bits, write_u16};
use crate::wire::checksum::internet_checksum;
use crate::wire::ip::{traffic_class, Dscp, Ecn, IpProtocol};
use crate::wire::ParseError;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const VERSION_IHL: usize = 0;
    pub(super) const VERSION_MASK: u8 = 0xF0;
    pub(super) const VERSION_SHIFT: u32 = 4;
    pub(super) const IHL_MASK: u8 = 0x0F;
    pub(super) const DSCP_ECN: usize = 1;
    pub(super) const DSCP_SHIFT: u32 = 2;
    pub(super) const TOTAL_LENGTH: Field = 2..4;
    pub(super) const IDENT: Field = 4..6;
    pub(super) const FLAGS_FRAGMENT: Field = 6..8;
    pub(super) const DONT_FRAGMENT: u16 = 0x4000;
    pub(super) const MORE_FRAGMENTS: u16 = 0x2000;
    pub(super) const FRAGMENT_OFFSET: u16 = 0x1FFF;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: Field = 10..12;
    pub(super) const SOURCE: Field = 12..16;
    pub(super) const DESTINATION: Field = 16..20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = field::DESTINATION.end;
/// The largest payload an IPv4 packet without options carries.
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize - HEADER_LEN;

/// A read/write view of an IPv4 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it. Use for emitting.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks its length. Use on received bytes.
    ///
    /// # Errors
    ///
    /// See [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, ParseError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Ensures every accessor, [`options`](Packet::options) and
    /// [`payload`](Packet::payload) stay in bounds: the buffer holds the
    /// header (IHL ≥ 5) and the total length, and the total length covers
    /// the header. Bytes beyond the total length (Ethernet padding) are
    /// allowed and ignored. The version is not checked here.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] or [`ParseError::InvalidLength`].
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "IPv4 header",
                need: HEADER_LEN,
                have,
            });
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(ParseError::InvalidLength {
                what: "IPv4 header length (IHL)",
                value: header_len,
            });
        }
        if have < header_len {
            return Err(ParseError::Truncated {
                what: "IPv4 options",
                need: header_len,
                have,
            });
        }
        let total_len = usize::from(self.total_len());
        if total_len < header_len {
            return Err(ParseError::InvalidLength {
                what: "IPv4 total length",
                value: total_len,
            });
        }
        if have < total_len {
            return Err(ParseError::Truncated {
                what: "IPv4 packet",
                need: total_len,
                have,
            });
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field (4 for IPv4).
    pub fn version(&self) -> u8 {
        (self.buffer.as_ref()[field::VERSION_IHL] & field::VERSION_MASK) >> field::VERSION_SHIFT
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VERSION_IHL] & field::IHL_MASK) * 4
    }

    /// Differentiated Services Code Point.
    pub fn dscp(&self) -> Dscp {
        Dscp::truncating(self.buffer.as_ref()[field::DSCP_ECN] >> field::DSCP_SHIFT)
    }

    /// ECN codepoint.
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.buffer.as_ref()[field::DSCP_ECN])
    }

    /// Total length (header and payload), in bytes.
    pub fn total_len(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::TOTAL_LENGTH])
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::IDENT])
    }

    fn flags_fragment(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::FLAGS_FRAGMENT])
    }

    /// Don't Fragment flag.
    pub fn dont_fragment(&self) -> bool {
        self.flags_fragment() & field::DONT_FRAGMENT != 0
    }

    /// More Fragments flag.
    pub fn more_fragments(&self) -> bool {
        self.flags_fragment() & field::MORE_FRAGMENTS != 0
    }

    /// Fragment offset, in bytes (the field counts 8-byte units).
    pub fn fragment_offset(&self) -> u16 {
        (self.flags_fragment() & field::FRAGMENT_OFFSET) << 3
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SOURCE];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DESTINATION];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The header checksum verifies (over IHL × 4 bytes).
    ///
    /// # Fuzzing
    ///
    /// Always `true` when built with `--cfg fuzzing`, so fuzzers reach the
    /// code behind the checksum.
    pub fn verify_checksum(&self) -> bool {
        if cfg!(fuzzing) {
            return true;
        }
        internet_checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Options (between the fixed header and IHL × 4).
    pub fn options(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// Payload: from IHL × 4 to the total length (padding excluded).
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version field.
    pub fn set_version(&mut self, version: u8) {
        let byte = &mut self.buffer.as_mut()[field::VERSION_IHL];
        write_bits(byte, field::VERSION_MASK, field::VERSION_SHIFT, version);
    }

    /// Sets the header length (a multiple of 4, 20..=60; the field holds
    /// `len / 4`). Changing it moves the payload boundary.
    pub fn set_header_len(&mut self, len: usize) {
        let byte = &mut self.buffer.as_mut()[field::VERSION_IHL];
        write_bits(byte, field::IHL_MASK, 0, (len / 4) as u8);
    }

    /// Sets the DSCP.
    pub fn set_dscp(&mut self, dscp: Dscp) {
        let ecn = self.ecn();
        self.buffer.as_mut()[field::DSCP_ECN] = traffic_class(dscp, ecn);
    }

    /// Sets the ECN codepoint (for example to mark CE at a simulated switch).
    /// Invalidates the header checksum.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let dscp = self.dscp();
        self.buffer.as_mut()[field::DSCP_ECN] = traffic_class(dscp, ecn);
    }

    /// Sets the total length. Changing it moves the payload boundary.
    pub fn set_total_len(&mut self, len: u16) {
        write_u16(&mut self.buffer.as_mut()[field::TOTAL_LENGTH], len);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, ident: u16) {
        write_u16(&mut self.buffer.as_mut()[field::IDENT], ident);
    }

    /// Sets the flags and fragment offset (in bytes, a multiple of 8).
    pub fn set_fragmentation(
        &mut self,
        dont_fragment: bool,
        more_fragments: bool,
        offset_bytes: u16,
    ) {
        let mut value = (offset_bytes >> 3) & field::FRAGMENT_OFFSET;
        if dont_fragment {
            value |= field::DONT_FRAGMENT;
        }
        if more_fragments {
            value |= field::MORE_FRAGMENTS;
        }
        write_u16(&mut self.buffer.as_mut()[field::FLAGS_FRAGMENT], value);
    }

    /// Sets the time to live.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, protocol: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = protocol.into();
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(&mut self.buffer.as_mut()[field::CHECKSUM], checksum);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, address: Ipv4Addr) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&address.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, address: Ipv4Addr) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&address.octets());
    }

    /// Computes and writes the header checksum over IHL × 4 bytes.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let checksum = internet_checksum(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(checksum);
    }

    /// The payload (IHL × 4 to the total length), writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.header_len()..usize::from(self.total_len());
        &mut self.buffer.as_mut()[range]
    }
}

impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Repr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "IPv4 ({err})"),
        }
    }
}

/// The IPv4 header as values. Options are not represented: parsing skips
/// them and emitting writes none (IHL = 5). The checksum is verified on
/// parse and computed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: IpProtocol,
    /// Payload length in bytes (total length − header length); at most
    /// [`MAX_PAYLOAD_LEN`] for emitting.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// DSCP.
    pub dscp: Dscp,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment flag.
    pub dont_fragment: bool,
}

impl Repr {
    /// Reads and validates the header.
    ///
    /// # Errors
    ///
    /// Length errors from [`Packet::check_len`]; [`ParseError::BadVersion`]
    /// unless the version is 4; [`ParseError::BadChecksum`];
    /// [`ParseError::Fragmented`] for any fragment.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        Self::parse_inner(packet, true)
    }

    /// As [`parse`](Self::parse), without verifying the header checksum: for
    /// frames whose checksum the NIC already verified.
    ///
    /// # Errors
    ///
    /// As [`parse`](Self::parse), except [`ParseError::BadChecksum`].
    pub fn parse_offloaded<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        Self::parse_inner(packet, false)
    }

    fn parse_inner<T: AsRef<[u8]>>(
        packet: &Packet<T>,
        verify_checksum: bool,
    ) -> Result<Repr, ParseError> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(ParseError::BadVersion(packet.version()));
        }
        if verify_checksum && !packet.verify_checksum() {
            return Err(ParseError::BadChecksum("IPv4 header"));
        }
        if packet.more_fragments() || packet.fragment_offset() != 0 {
            return Err(ParseError::Fragmented);
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: usize::from(packet.total_len()) - packet.header_len(),
            ttl: packet.ttl(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ident: packet.ident(),
            dont_fragment: packet.dont_fragment(),
        })
    }

    /// Header length (always 20: options are never emitted).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header and payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header, checksum included; the payload is the caller's.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`]. A `payload_len` above
    /// [`MAX_PAYLOAD_LEN`] is a programming error (debug assertion); release
    /// builds write the total length modulo 2^16.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        debug_assert!(self.payload_len <= MAX_PAYLOAD_LEN, "IPv4 payload too long");
        packet.set_version(4);
        packet.set_header_len(HEADER_LEN);
        packet.set_dscp(self.dscp);
        packet.set_ecn(self.ecn);
        packet.set_total_len(self.buffer_len() as u16);
        packet.set_ident(self.ident);
        packet.set_fragmentation(self.dont_fragment, false, 0);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IPv4 {} > {} proto {} len {} ttl {} dscp {} ecn {:?}",
            self.src_addr,
            self.dst_addr,
            u8::from(self.protocol),
            self.payload_len,
            self.ttl,
            self.dscp,
            self.ecn
        )
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::testing::ipv4_repr;

    /// 192.168.0.1 > 192.168.0.199, UDP, total length 0x73, DF, TTL 64,
    /// checksum 0xb861 (checked by hand in `checksum::tests`).
    const HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn packet_with_payload() -> Vec<u8> {
        let mut bytes = HEADER.to_vec();
        bytes.resize(0x73, 0xEE);
        bytes
    }

    #[test]
    fn deconstruct() {
        let bytes = packet_with_payload();
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.version(), 4);
        assert_eq!(packet.header_len(), 20);
        assert_eq!(packet.total_len(), 0x73);
        assert!(packet.dont_fragment());
        assert!(!packet.more_fragments());
        assert_eq!(packet.ttl(), 64);
        assert_eq!(packet.protocol(), IpProtocol::Udp);
        assert_eq!(packet.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(packet.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(packet.verify_checksum());
        assert_eq!(packet.payload().len(), 0x73 - 20);
    }

    #[test]
    fn parse_and_emit_fixture() {
        let bytes = packet_with_payload();
        let repr = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.payload_len, 0x73 - 20);
        assert_eq!(repr.ecn, Ecn::NotEct);
        let mut out = [0u8; 20];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, HEADER);
    }

    #[test]
    fn dscp_ecn_bits() {
        let mut bytes = packet_with_payload();
        bytes[1] = (46 << 2) | 0b11;
        let packet = Packet::new_unchecked(&bytes[..]);
        assert_eq!(packet.dscp().value(), 46);
        assert_eq!(packet.ecn(), Ecn::Ce);
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_ecn(Ecn::Ect0);
        assert_eq!(packet.into_inner()[1], (46 << 2) | 0b10);
    }

    #[test]
    fn options_are_tolerated() {
        let mut bytes = HEADER.to_vec();
        bytes[0] = 0x46; // IHL 6: 4 bytes of options
        bytes[3] = 28; // total length
        bytes.splice(20..20, [1, 1, 1, 0]); // NOP NOP NOP EOL
        bytes.extend_from_slice(&[9, 9, 9, 9]);
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.fill_checksum();
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.options(), &[1, 1, 1, 0]);
        assert_eq!(packet.payload(), &[9, 9, 9, 9]);
        let repr = Repr::parse(&packet).unwrap();
        assert_eq!(repr.payload_len, 4);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let bytes = packet_with_payload();
        assert_eq!(
            Packet::new_checked(&bytes[..19]).unwrap_err(),
            ParseError::Truncated {
                what: "IPv4 header",
                need: 20,
                have: 19
            }
        );
        assert_eq!(
            Packet::new_checked(&bytes[..0x72]).unwrap_err(),
            ParseError::Truncated {
                what: "IPv4 packet",
                need: 0x73,
                have: 0x72
            }
        );
        let mut bad = bytes.clone();
        bad[0] = 0x44;
        assert_eq!(
            Packet::new_checked(&bad[..]).unwrap_err(),
            ParseError::InvalidLength {
                what: "IPv4 header length (IHL)",
                value: 16
            }
        );
        let mut bad = bytes.clone();
        bad[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Packet::new_checked(&bad[..]).unwrap_err(),
            ParseError::InvalidLength {
                what: "IPv4 total length",
                value: 19
            }
        );
        let mut bad = bytes.clone();
        bad[8] = 63; // TTL changed, checksum stale
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bad[..]).unwrap()),
            Err(ParseError::BadChecksum("IPv4 header"))
        );
        let mut bad = bytes.clone();
        bad[0] = 0x65;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bad[..]).unwrap()),
            Err(ParseError::BadVersion(6))
        );
        let mut frag = bytes;
        let mut packet = Packet::new_unchecked(&mut frag[..]);
        packet.set_fragmentation(false, true, 0);
        packet.fill_checksum();
        assert_eq!(
            Repr::parse(&Packet::new_checked(&frag[..]).unwrap()),
            Err(ParseError::Fragmented)
        );
        // The last fragment: flags clear, offset 1 unit (8 bytes), by hand.
        frag[6..8].copy_from_slice(&[0x00, 0x01]);
        let mut packet = Packet::new_unchecked(&mut frag[..]);
        packet.fill_checksum();
        assert_eq!(packet.fragment_offset(), 8);
        assert!(!packet.more_fragments() && !packet.dont_fragment());
        assert_eq!(
            Repr::parse(&Packet::new_checked(&frag[..]).unwrap()),
            Err(ParseError::Fragmented)
        );
    }

    #[test]
    fn trailing_padding_is_not_payload() {
        let mut bytes = packet_with_payload();
        bytes.extend_from_slice(&[0; 6]);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.payload().len(), 0x73 - 20);
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in ipv4_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(usize::from(packet.total_len()), bytes.len());
            prop_assert_eq!(Repr::parse(&packet), Ok(repr));
        }
    }
}
