//! IPv6 fixed header (RFC 8200 §3).
//!
//! Layer: wire. Owns the zero-copy [`Packet`] view and the [`Repr`] of the
//! 40-byte fixed header: the 20-bit flow label (Falcon's multipath and PLB
//! path selector: a reroute picks a new label, OCP Falcon 0.9 §10.4), the
//! traffic class (DSCP + ECN), the hop limit and the payload length. Extension
//! headers are not walked: the next header is reported and the frame helper
//! accepts only UDP. Jumbograms (payload length 0 + hop-by-hop option) are
//! not supported. Never panics on input after [`Packet::check_len`].
//!
//! ```text
//!  0       4               12                              31
//!  +-------+---------------+-------------------------------+
//!  |Version| Traffic Class |           Flow Label          |  0
//!  |        Payload Length         | Next Header | Hop Lim |  4
//!  |                  Source Address (16 bytes)            |  8
//!  |               Destination Address (16 bytes)          | 24
//! ```

use core::fmt;
use core::net::Ipv6Addr;

use crate::wire::bytes::{read_u16, read_u32, write_u16, write_u32};
use crate::wire::ip::{traffic_class, Dscp, Ecn, IpProtocol};
use crate::wire::ParseError;

bounded_uint! {
    /// The 20-bit IPv6 flow label. Switches hash it for ECMP, so Falcon
    /// changes it to move a connection to another path (PLB, multipath).
    pub struct FlowLabel(u32, bits = 20, what = "flow label");
}

mod field {
    use crate::wire::bytes::Field;

    /// Version (4 bits), traffic class (8 bits), flow label (20 bits).
    pub(super) const VERSION_TC_FLOW: Field = 0..4;
    pub(super) const VERSION_SHIFT: u32 = 28;
    pub(super) const TRAFFIC_CLASS_SHIFT: u32 = 20;
    pub(super) const TRAFFIC_CLASS_MASK: u32 = 0x0FF0_0000;
    pub(super) const FLOW_LABEL_MASK: u32 = 0x000F_FFFF;
    pub(super) const PAYLOAD_LENGTH: Field = 4..6;
    pub(super) const NEXT_HEADER: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SOURCE: Field = 8..24;
    pub(super) const DESTINATION: Field = 24..40;
}

/// Length of the IPv6 fixed header.
pub const HEADER_LEN: usize = field::DESTINATION.end;
/// The largest payload the 16-bit payload length describes.
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize;

/// A read/write view of an IPv6 packet.
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

    /// Ensures every accessor and [`payload`](Packet::payload) stay in
    /// bounds: 40 bytes plus the payload length. Trailing bytes (Ethernet
    /// padding) are allowed and ignored. The version is not checked here.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the header or the payload.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "IPv6 header",
                need: HEADER_LEN,
                have,
            });
        }
        let need = HEADER_LEN + usize::from(self.payload_len());
        if have < need {
            return Err(ParseError::Truncated {
                what: "IPv6 payload",
                need,
                have,
            });
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn first_word(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::VERSION_TC_FLOW])
    }

    /// Version field (6 for IPv6).
    pub fn version(&self) -> u8 {
        (self.first_word() >> field::VERSION_SHIFT) as u8
    }

    /// Traffic class (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        ((self.first_word() & field::TRAFFIC_CLASS_MASK) >> field::TRAFFIC_CLASS_SHIFT) as u8
    }

    /// DSCP (upper 6 bits of the traffic class).
    pub fn dscp(&self) -> Dscp {
        Dscp::truncating(self.traffic_class() >> 2)
    }

    /// ECN codepoint (lower 2 bits of the traffic class).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.traffic_class())
    }

    /// Flow label.
    pub fn flow_label(&self) -> FlowLabel {
        FlowLabel::truncating(self.first_word() & field::FLOW_LABEL_MASK)
    }

    /// Payload length, in bytes (extension headers included).
    pub fn payload_len(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::PAYLOAD_LENGTH])
    }

    /// Next header.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::NEXT_HEADER])
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        Ipv6Addr::from(octets)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        Ipv6Addr::from(octets)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Payload: the payload length after the fixed header (padding excluded).
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_first_word(&mut self, word: u32) {
        write_u32(&mut self.buffer.as_mut()[field::VERSION_TC_FLOW], word);
    }

    /// Sets the version field.
    pub fn set_version(&mut self, version: u8) {
        let word = self.first_word() & !(0xF << field::VERSION_SHIFT);
        self.set_first_word(word | (u32::from(version & 0xF) << field::VERSION_SHIFT));
    }

    /// Sets the traffic class from DSCP and ECN.
    pub fn set_traffic_class(&mut self, dscp: Dscp, ecn: Ecn) {
        let word = self.first_word() & !field::TRAFFIC_CLASS_MASK;
        let class = u32::from(traffic_class(dscp, ecn)) << field::TRAFFIC_CLASS_SHIFT;
        self.set_first_word(word | class);
    }

    /// Sets the ECN codepoint, keeping the DSCP (a simulated switch marking CE).
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let dscp = self.dscp();
        self.set_traffic_class(dscp, ecn);
    }

    /// Sets the flow label.
    pub fn set_flow_label(&mut self, label: FlowLabel) {
        let word = self.first_word() & !field::FLOW_LABEL_MASK;
        self.set_first_word(word | label.value());
    }

    /// Sets the payload length. Changing it moves the payload boundary.
    pub fn set_payload_len(&mut self, len: u16) {
        write_u16(&mut self.buffer.as_mut()[field::PAYLOAD_LENGTH], len);
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, protocol: IpProtocol) {
        self.buffer.as_mut()[field::NEXT_HEADER] = protocol.into();
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, hop_limit: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hop_limit;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, address: Ipv6Addr) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&address.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, address: Ipv6Addr) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&address.octets());
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Repr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "IPv6 ({err})"),
        }
    }
}

/// The IPv6 fixed header as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header.
    pub next_header: IpProtocol,
    /// Payload length in bytes; at most [`MAX_PAYLOAD_LEN`] for emitting.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// DSCP.
    pub dscp: Dscp,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Flow label.
    pub flow_label: FlowLabel,
}

impl Repr {
    /// Reads and validates the header.
    ///
    /// # Errors
    ///
    /// Length errors from [`Packet::check_len`]; [`ParseError::BadVersion`]
    /// unless the version is 6.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(ParseError::BadVersion(packet.version()));
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            flow_label: packet.flow_label(),
        })
    }

    /// Header length (40).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header and payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header; the payload is the caller's.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`]. A `payload_len` above
    /// [`MAX_PAYLOAD_LEN`] is a programming error (debug assertion).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        debug_assert!(self.payload_len <= MAX_PAYLOAD_LEN, "IPv6 payload too long");
        packet.set_first_word(0);
        packet.set_version(6);
        packet.set_traffic_class(self.dscp, self.ecn);
        packet.set_flow_label(self.flow_label);
        packet.set_payload_len(self.payload_len as u16);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IPv6 {} > {} next {} len {} hlim {} flow {:#07x} dscp {} ecn {:?}",
            self.src_addr,
            self.dst_addr,
            u8::from(self.next_header),
            self.payload_len,
            self.hop_limit,
            self.flow_label.value(),
            self.dscp,
            self.ecn
        )
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::testing::ipv6_repr;

    /// Version 6, traffic class 0xB9 (0b101110_01: DSCP 46, ECT(1)), flow
    /// label 0xABCDE, payload 4, UDP, hop limit 64, fe80::1 > fe80::2.
    const PACKET: [u8; 44] = [
        0x6B, 0x9A, 0xBC, 0xDE, 0x00, 0x04, 0x11, 0x40, //
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, //
        0xAA, 0xBB, 0xCC, 0xDD,
    ];

    fn repr() -> Repr {
        Repr {
            src_addr: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
            dst_addr: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
            next_header: IpProtocol::Udp,
            payload_len: 4,
            hop_limit: 64,
            dscp: Dscp::truncating(46),
            ecn: Ecn::Ect1,
            flow_label: FlowLabel::truncating(0xABCDE),
        }
    }

    #[test]
    fn deconstruct() {
        let packet = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(packet.version(), 6);
        assert_eq!(packet.traffic_class(), 0xB9);
        assert_eq!(packet.dscp().value(), 46);
        assert_eq!(packet.ecn(), Ecn::Ect1);
        assert_eq!(packet.flow_label().value(), 0xABCDE);
        assert_eq!(packet.payload_len(), 4);
        assert_eq!(packet.next_header(), IpProtocol::Udp);
        assert_eq!(packet.hop_limit(), 64);
        assert_eq!(packet.payload(), &[0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
    }

    #[test]
    fn emit_matches_fixture() {
        let mut bytes = [0xFFu8; 40];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[..], PACKET[..40]);
    }

    #[test]
    fn set_flow_label_keeps_the_rest() {
        let mut bytes = PACKET;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_flow_label(FlowLabel::truncating(0x12345));
        packet.set_ecn(Ecn::Ce);
        assert_eq!(packet.flow_label().value(), 0x12345);
        assert_eq!(packet.ecn(), Ecn::Ce);
        assert_eq!(packet.dscp().value(), 46);
        assert_eq!(packet.version(), 6);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(
            Packet::new_checked(&PACKET[..39]).unwrap_err(),
            ParseError::Truncated {
                what: "IPv6 header",
                need: 40,
                have: 39
            }
        );
        assert_eq!(
            Packet::new_checked(&PACKET[..43]).unwrap_err(),
            ParseError::Truncated {
                what: "IPv6 payload",
                need: 44,
                have: 43
            }
        );
        let mut bad = PACKET;
        bad[0] = 0x4B;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bad[..]).unwrap()),
            Err(ParseError::BadVersion(4))
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in ipv6_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(HEADER_LEN + usize::from(packet.payload_len()), bytes.len());
            prop_assert_eq!(Repr::parse(&packet), Ok(repr));
        }
    }
}
