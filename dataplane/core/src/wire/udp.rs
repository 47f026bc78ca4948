//! UDP header (RFC 768).
//!
//! Layer: wire. Owns the zero-copy [`Packet`] view and the [`Repr`] of the UDP
//! header, and the checksum over the IPv4/IPv6 pseudo-header. Falcon rides in
//! UDP to port 1000 under PSP. Never panics on input after
//! [`Packet::check_len`].
//!
//! Checksum 0 means "no checksum" and is accepted on receive for both IPv4
//! and IPv6: PSP requires it on transmit and receive (spec/psp.md §1.1, citing
//! RFC 6935/6936) and its ICV protects the datagram end to end.
//!
//! ```text
//!  0               16              31
//!  +---------------+---------------+
//!  |  Source Port  |  Dest Port    |  0
//!  |    Length     |   Checksum    |  4
//!  +---------------+---------------+
//! ```

use core::fmt;

use crate::wire::bytes::{read_u16, write_u16};
use crate::wire::checksum::{udp_checksum, PseudoHeader};
use crate::wire::ParseError;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const SRC_PORT: Field = 0..2;
    pub(super) const DST_PORT: Field = 2..4;
    pub(super) const LENGTH: Field = 4..6;
    pub(super) const CHECKSUM: Field = 6..8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;
/// The largest payload the 16-bit length describes.
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize - HEADER_LEN;

/// A read/write view of a UDP datagram.
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
    /// bounds: 8 bytes, a length field ≥ 8, and the buffer holds the length.
    /// Trailing bytes are allowed (the frame helper rejects them).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] or [`ParseError::InvalidLength`].
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "UDP header",
                need: HEADER_LEN,
                have,
            });
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            return Err(ParseError::InvalidLength {
                what: "UDP length",
                value: len,
            });
        }
        if have < len {
            return Err(ParseError::Truncated {
                what: "UDP datagram",
                need: len,
                have,
            });
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::SRC_PORT])
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::DST_PORT])
    }

    /// Length field: header and payload, in bytes.
    #[allow(clippy::len_without_is_empty)] // a header field, not a collection
    pub fn len(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// Checksum field (0 = none).
    pub fn checksum(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The checksum verifies under `pseudo`, or is 0 (no checksum).
    ///
    /// # Fuzzing
    ///
    /// Always `true` when built with `--cfg fuzzing`.
    pub fn verify_checksum(&self, pseudo: &PseudoHeader) -> bool {
        if cfg!(fuzzing) || self.checksum() == 0 {
            return true;
        }
        let datagram = &self.buffer.as_ref()[..usize::from(self.len())];
        udp_checksum(pseudo, datagram) == 0
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Payload: from byte 8 to the length field.
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        write_u16(&mut self.buffer.as_mut()[field::SRC_PORT], port);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        write_u16(&mut self.buffer.as_mut()[field::DST_PORT], port);
    }

    /// Sets the length field. Changing it moves the payload boundary.
    pub fn set_len(&mut self, len: u16) {
        write_u16(&mut self.buffer.as_mut()[field::LENGTH], len);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(&mut self.buffer.as_mut()[field::CHECKSUM], checksum);
    }

    /// Computes and writes the checksum over `pseudo`, the header and the
    /// payload (which must be in place). A computed 0 is sent as 0xFFFF
    /// (RFC 768), since 0 means "no checksum".
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than the length field.
    pub fn fill_checksum(&mut self, pseudo: &PseudoHeader) {
        self.set_checksum(0);
        let len = usize::from(self.len());
        let checksum = udp_checksum(pseudo, &self.buffer.as_ref()[..len]);
        self.set_checksum(if checksum == 0 { 0xFFFF } else { checksum });
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Repr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "UDP ({err})"),
        }
    }
}

/// The UDP header as values. The checksum is not part of the value: parsing
/// does not verify it (that needs the IP addresses: see
/// [`Packet::verify_checksum`]) and emitting writes 0 (call
/// [`Packet::fill_checksum`] once the payload is in place to send one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length in bytes; at most [`MAX_PAYLOAD_LEN`] for emitting.
    pub payload_len: usize,
}

impl Repr {
    /// Reads the header.
    ///
    /// # Errors
    ///
    /// Length errors from [`Packet::check_len`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: usize::from(packet.len()) - HEADER_LEN,
        })
    }

    /// Header and payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header with checksum 0; the payload is the caller's.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`]. A `payload_len` above
    /// [`MAX_PAYLOAD_LEN`] is a programming error (debug assertion).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        debug_assert!(self.payload_len <= MAX_PAYLOAD_LEN, "UDP payload too long");
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(self.buffer_len() as u16);
        packet.set_checksum(0);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "UDP {} > {} len {}",
            self.src_port, self.dst_port, self.payload_len
        )
    }
}

#[cfg(test)]
mod tests {
    use core::net::{Ipv4Addr, Ipv6Addr};

    use proptest::prelude::*;

    use super::*;
    use crate::wire::testing::udp_repr;

    /// 192.168.0.1:1024 > 192.168.0.199:53, payload "abcd". Checksum worked
    /// by hand: pseudo-header c0a8+0001+c0a8+00c7+0011+000c = 0x18235;
    /// UDP 0400+0035+000c = 0x0441; payload 6162+6364 = 0xc4c6;
    /// total 0x24b3c → fold 0x4b3e → complement 0xb4c1.
    const DATAGRAM: [u8; 12] = [
        0x04, 0x00, 0x00, 0x35, 0x00, 0x0c, 0xb4, 0xc1, b'a', b'b', b'c', b'd',
    ];

    fn pseudo_v4() -> PseudoHeader {
        PseudoHeader::V4 {
            src: Ipv4Addr::new(192, 168, 0, 1),
            dst: Ipv4Addr::new(192, 168, 0, 199),
        }
    }

    #[test]
    fn deconstruct() {
        let packet = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(packet.src_port(), 1024);
        assert_eq!(packet.dst_port(), 53);
        assert_eq!(packet.len(), 12);
        assert_eq!(packet.checksum(), 0xb4c1);
        assert_eq!(packet.payload(), b"abcd");
        assert!(packet.verify_checksum(&pseudo_v4()));
        let other = PseudoHeader::V4 {
            src: Ipv4Addr::new(192, 168, 0, 2),
            dst: Ipv4Addr::new(192, 168, 0, 199),
        };
        assert!(!packet.verify_checksum(&other));
    }

    #[test]
    fn fill_checksum_matches_fixture() {
        let repr = Repr {
            src_port: 1024,
            dst_port: 53,
            payload_len: 4,
        };
        let mut bytes = [0u8; 12];
        bytes[8..].copy_from_slice(b"abcd");
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        repr.emit(&mut packet);
        assert_eq!(packet.checksum(), 0);
        packet.fill_checksum(&pseudo_v4());
        assert_eq!(bytes, DATAGRAM);
    }

    #[test]
    fn zero_checksum_is_accepted() {
        let mut bytes = DATAGRAM;
        bytes[6] = 0;
        bytes[7] = 0;
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(packet.verify_checksum(&pseudo_v4()));
        let v6 = PseudoHeader::V6 {
            src: Ipv6Addr::LOCALHOST,
            dst: Ipv6Addr::LOCALHOST,
        };
        assert!(packet.verify_checksum(&v6));
    }

    #[test]
    fn ipv6_checksum_round_trip() {
        let pseudo = PseudoHeader::V6 {
            src: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
        };
        let mut bytes = DATAGRAM;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.fill_checksum(&pseudo);
        assert_ne!(packet.checksum(), 0);
        assert!(packet.verify_checksum(&pseudo));
        assert!(!packet.verify_checksum(&pseudo_v4()));
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(
            Packet::new_checked(&DATAGRAM[..7]).unwrap_err(),
            ParseError::Truncated {
                what: "UDP header",
                need: 8,
                have: 7
            }
        );
        assert_eq!(
            Packet::new_checked(&DATAGRAM[..11]).unwrap_err(),
            ParseError::Truncated {
                what: "UDP datagram",
                need: 12,
                have: 11
            }
        );
        let mut bad = DATAGRAM;
        bad[5] = 7;
        assert_eq!(
            Packet::new_checked(&bad[..]).unwrap_err(),
            ParseError::InvalidLength {
                what: "UDP length",
                value: 7
            }
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in udp_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(usize::from(packet.len()), bytes.len());
            prop_assert_eq!(Repr::parse(&packet), Ok(repr));
        }
    }
}
