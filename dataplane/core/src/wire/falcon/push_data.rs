//! The Push Data packet: base header + 4 bytes, then the payload.
//!
//! Layer: wire. Owns the zero-copy [`Packet`] view and the [`Repr`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! OCP Falcon 0.9 §7.5 (p.29; spec/falcon.md §2.3):
//!
//! ```text
//!  bytes  0–23: base header, packet type 0101b, data-window PSN
//!  bytes 24–25: reserved
//!  bytes 26–27: Request Length (= payload size)
//!  bytes 28–  : payload (ULP headers, trailers and data)
//! ```
//!
//! Decision (spec/falcon.md §9 item 2): the text table omits the 16-bit
//! reserved field (ocp/falcon-transport-rev0.9.txt p.29 lists only Base
//! Header, Request Length and Payload), the figure draws it before Request
//! Length. We follow the **figure**: a 28-byte header (isekai agrees,
//! `kFalconTransactionReservedBits = 16`).
//!
//! The spec says the payload size "must match this request length";
//! [`Repr::parse`] enforces it with [`ParseError::LengthMismatch`], so a
//! `Repr` always describes a consistent packet. The view does not judge it.

use core::fmt;

use super::base::{base_getters, base_setters, BaseHeader};
use super::common::{common_getters, common_setters};
use super::PacketType;
use crate::wire::bytes::{read_u16, write_u16};
use crate::wire::ParseError;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const RESERVED: Field = 24..26;
    pub(super) const REQUEST_LENGTH: Field = 26..28;
}

/// Length of the Push Data header.
pub const HEADER_LEN: usize = field::REQUEST_LENGTH.end;

/// A read/write view of a Push Data packet.
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

    /// Ensures every accessor stays in bounds: 28 bytes. The request length
    /// is not compared with the payload here (see [`Repr::parse`]).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the Push Data header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "Falcon Push Data header",
                need: HEADER_LEN,
                have,
            });
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    common_getters!();
    base_getters!();

    /// Request Length (bytes 26–27): the payload size in bytes.
    pub fn request_length(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::REQUEST_LENGTH])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Everything after the 28-byte header.
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    common_setters!();
    base_setters!();

    /// Sets the Request Length.
    pub fn set_request_length(&mut self, length: u16) {
        write_u16(&mut self.buffer.as_mut()[field::REQUEST_LENGTH], length);
    }

    /// Zeroes the reserved field.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }

    /// Everything after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Repr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "Falcon Push Data ({err})"),
        }
    }
}

/// A Push Data packet as values. The payload length is the request length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// `repr(C)`, as Pull Request, Pull Data and Resync: the base header is at
// offset 0 of every `FalconRepr` variant that has one. Laid out by rustc it
// would be at 0, 4 or 8 by variant, and the transmit path's header build,
// merged over the variants, would store each header field at every offset.
#[repr(C)]
pub struct Repr {
    /// Base-header fields (packet type 0101b implied; `psn` is a data-window
    /// PSN).
    pub header: BaseHeader,
    /// Request Length: the payload size in bytes.
    pub request_length: u16,
}

impl Repr {
    /// Reads and validates a Push Data packet. The buffer must end where the
    /// Falcon packet ends (the PSP payload boundary).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 28 bytes, [`ParseError::BadVersion`],
    /// [`ParseError::UnexpectedPacketType`], or
    /// [`ParseError::LengthMismatch`] when the payload size differs from the
    /// request length (OCP Falcon 0.9 §7.5 p.29: "must match").
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        let header = BaseHeader::parse_typed(packet.buffer.as_ref(), PacketType::PushData)?;
        Self::parse_after_header(packet, header)
    }

    /// [`parse`](Self::parse) for [`FalconRepr::parse`](super::Repr::parse) and
    /// the engine's receive path, which checked the version and the packet type
    /// already ([`super::packet::peek_versioned`]), so that a received Push
    /// Data's are not checked twice.
    #[inline(always)]
    pub(crate) fn parse_peeked<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        let header = BaseHeader::parse_peeked(packet.buffer.as_ref())?;
        Self::parse_after_header(packet, header)
    }

    /// The rest of a Push Data after its base header.
    #[inline(always)]
    fn parse_after_header<T: AsRef<[u8]>>(
        packet: &Packet<T>,
        header: BaseHeader,
    ) -> Result<Repr, ParseError> {
        let bytes = packet.buffer.as_ref();
        let request_length = packet.request_length();
        let payload_len = bytes.len() - HEADER_LEN;
        if usize::from(request_length) != payload_len {
            return Err(ParseError::LengthMismatch {
                what: "Push Data request length",
                declared: usize::from(request_length),
                actual: payload_len,
            });
        }
        Ok(Repr {
            header,
            request_length,
        })
    }

    /// Header length (28).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Payload length (the request length).
    pub const fn payload_len(&self) -> usize {
        self.request_length as usize
    }

    /// Header and payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }

    /// Writes the header; the payload after it is the caller's.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.header.emit_typed(
            PacketType::PushData,
            &mut packet.buffer.as_mut()[..HEADER_LEN],
        );
        packet.clear_reserved();
        packet.set_request_length(self.request_length);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Falcon Push Data {} len {}",
            self.header, self.request_length
        )
    }
}

#[cfg(test)]
// Binary literals of byte 7 are grouped as the fields: protocol | type | AR.
#[allow(clippy::unusual_byte_groupings)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ids::{ConnectionId, DestinationFunction};
    use crate::seq::{Psn, Rsn};
    use crate::wire::falcon::ProtocolType;
    use crate::wire::testing::push_data_repr;

    fn repr(request_length: u16) -> Repr {
        Repr {
            header: BaseHeader {
                connection_id: ConnectionId::truncating(0x10_0001),
                destination_function: DestinationFunction::truncating(0),
                protocol: ProtocolType::Rdma,
                ack_request: false,
                data_bpsn: Psn::new(u32::MAX),
                request_bpsn: Psn::new(0),
                psn: Psn::new(300),
                rsn: Rsn::new(4),
            },
            request_length,
        }
    }

    #[test]
    fn layout_is_28_bytes_per_the_figure() {
        let mut bytes = [0xEEu8; 28 + 5];
        repr(5).emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            &bytes[..8],
            &[0x10, 0x10, 0x00, 0x01, 0, 0, 0, 0b010_0101_0]
        );
        assert_eq!(&bytes[8..12], &[0xFF; 4]);
        assert_eq!(
            &bytes[24..28],
            &[0, 0, 0, 5],
            "reserved16 then request length"
        );
        assert_eq!(&bytes[28..], &[0xEE; 5], "payload untouched");
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.payload(), &[0xEE; 5]);
        assert_eq!(Repr::parse(&packet), Ok(repr(5)));
    }

    #[test]
    fn parse_hand_assembled_bytes() {
        // §7.2 base header + the §7.5 figure (p.29): reserved 16b, request
        // length 16b at bytes 26–27, then the payload. Reserved bytes set.
        let bytes: [u8; 31] = [
            0x10,
            0x00,
            0x00,
            0x2A, // version 1, CID 42
            0x0A,
            0x0B,
            0x0C,
            0b011_0101_1, // function 0x0A0B0C | NVMe | Push Data | AR
            0x00,
            0x00,
            0x01,
            0x00, // data BPSN 256
            0x00,
            0x00,
            0x00,
            0x80, // request BPSN 128
            0x00,
            0x00,
            0x01,
            0x2C, // PSN 300
            0x00,
            0x00,
            0x00,
            0x07, // RSN 7
            0xEE,
            0xEE,
            0x00,
            0x03, // reserved | request length 3
            b'a',
            b'b',
            b'c',
        ];
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.request_length(), 3);
        assert_eq!(packet.payload(), b"abc");
        let repr = Repr::parse(&packet).unwrap();
        assert_eq!(
            repr,
            Repr {
                header: BaseHeader {
                    connection_id: ConnectionId::truncating(42),
                    destination_function: DestinationFunction::truncating(0x0A_0B0C),
                    protocol: ProtocolType::Nvme,
                    ack_request: true,
                    data_bpsn: Psn::new(256),
                    request_bpsn: Psn::new(128),
                    psn: Psn::new(300),
                    rsn: Rsn::new(7),
                },
                request_length: 3,
            }
        );
        let mut out = [0xEEu8; 31];
        out[28..].copy_from_slice(b"abc");
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        let mut expected = bytes;
        expected[24..26].fill(0);
        assert_eq!(out, expected);
    }

    #[test]
    fn request_length_must_equal_payload() {
        let mut bytes = [0u8; 28 + 5];
        repr(6).emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::LengthMismatch {
                what: "Push Data request length",
                declared: 6,
                actual: 5
            })
        );
        repr(4).emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert!(matches!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::LengthMismatch {
                declared: 4,
                actual: 5,
                ..
            })
        ));
        assert_eq!(
            Packet::new_checked(&bytes[..27]).unwrap_err(),
            ParseError::Truncated {
                what: "Falcon Push Data header",
                need: 28,
                have: 27
            }
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in push_data_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(bytes.len(), HEADER_LEN + usize::from(repr.request_length));
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()), Ok(repr));
        }
    }
}
