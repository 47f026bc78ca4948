//! The Pull Request packet: base header + 8 bytes, then ULP headers.
//!
//! Layer: wire. Owns the zero-copy [`Packet`] view and the [`Repr`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! OCP Falcon 0.9 §7.3 (p.27; spec/falcon.md §2.1):
//!
//! ```text
//!  bytes  0–23: base header, packet type 0000b, request-window PSN
//!  bytes 24–25: reserved
//!  bytes 26–27: Request Length (bytes expected in the matching Pull Data payload)
//!  bytes 28–31: reserved
//!  bytes 32–  : ULP headers (e.g. RDMA RETH/SETH/STETH, NVMe NBTH)
//! ```
//!
//! The text table lists only Request Length (16b) and Reserved (32b) after
//! the base header (ocp/falcon-transport-rev0.9.txt p.27); the figure, which
//! spec/falcon.md §2.1 reads, also draws 16 reserved bits before Request
//! Length, making the header 32 bytes (word-aligned, as isekai's
//! `kFalconTransactionReservedBits = 16`). We follow the figure, as for Push
//! Data (spec/falcon.md §9 item 2).
//!
//! Request Length is not checked against anything here: it describes the
//! payload of a different packet (the Pull Data).

use core::fmt;

use super::base::{base_getters, base_setters, BaseHeader};
use super::common::{common_getters, common_setters};
use super::PacketType;
use crate::wire::bytes::{read_u16, write_u16};
use crate::wire::ParseError;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const RESERVED_0: Field = 24..26;
    pub(super) const REQUEST_LENGTH: Field = 26..28;
    pub(super) const RESERVED_1: Field = 28..32;
}

/// Length of the Pull Request header.
pub const HEADER_LEN: usize = field::RESERVED_1.end;

/// A read/write view of a Pull Request packet.
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

    /// Ensures every accessor stays in bounds: 32 bytes.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the Pull Request header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "Falcon Pull Request header",
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

    /// Request Length (bytes 26–27): the size of the Pull Data payload the
    /// target must return (ULP headers, padding and data).
    pub fn request_length(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::REQUEST_LENGTH])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The ULP headers after the Pull Request header.
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

    /// Zeroes both reserved fields.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED_0].fill(0);
        self.buffer.as_mut()[field::RESERVED_1].fill(0);
    }

    /// The ULP headers, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Repr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "Falcon Pull Request ({err})"),
        }
    }
}

/// A Pull Request as values. Reserved fields are ignored on parse and zero on
/// emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// `repr(C)`: the base header first, as in every transaction repr (see
// `push_data::Repr`).
#[repr(C)]
pub struct Repr {
    /// Base-header fields (packet type 0000b implied; `psn` is a
    /// request-window PSN).
    pub header: BaseHeader,
    /// Bytes expected in the matching Pull Data payload.
    pub request_length: u16,
    /// Bytes of ULP headers after the 32-byte header.
    pub payload_len: usize,
}

impl Repr {
    /// Reads and validates a Pull Request.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 32 bytes, [`ParseError::BadVersion`],
    /// or [`ParseError::UnexpectedPacketType`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        let bytes = packet.buffer.as_ref();
        Ok(Repr {
            header: BaseHeader::parse_typed(bytes, PacketType::PullRequest)?,
            request_length: packet.request_length(),
            payload_len: bytes.len() - HEADER_LEN,
        })
    }

    /// Header length (32).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header and ULP-header length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header; the ULP headers after it are the caller's.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.header.emit_typed(
            PacketType::PullRequest,
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
            "Falcon Pull Request {} reqlen {} ulp {}",
            self.header, self.request_length, self.payload_len
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
    use crate::wire::testing::pull_request_repr;

    /// CID 5, RDMA, Pull Request with AR (byte 7 = 010 0000 1), request PSN
    /// 100, RSN 1, request length 0x1234, reserved bytes set (ignored), then
    /// 4 bytes of ULP header.
    const BYTES: [u8; 36] = [
        0x10,
        0x00,
        0x00,
        0x05,
        0x00,
        0x00,
        0x09,
        0b010_0000_1, //
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0, //
        0,
        0,
        0,
        100,
        0,
        0,
        0,
        1, //
        0xEE,
        0xEE,
        0x12,
        0x34,
        0xEE,
        0xEE,
        0xEE,
        0xEE, //
        0xC0,
        0xFF,
        0xEE,
        0x00,
    ];

    fn repr() -> Repr {
        Repr {
            header: BaseHeader {
                connection_id: ConnectionId::truncating(5),
                destination_function: DestinationFunction::truncating(9),
                protocol: ProtocolType::Rdma,
                ack_request: true,
                data_bpsn: Psn::new(0),
                request_bpsn: Psn::new(0),
                psn: Psn::new(100),
                rsn: Rsn::new(1),
            },
            request_length: 0x1234,
            payload_len: 4,
        }
    }

    #[test]
    fn deconstruct_and_parse() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.request_length(), 0x1234);
        assert_eq!(packet.psn(), Psn::new(100));
        assert_eq!(packet.payload(), &[0xC0, 0xFF, 0xEE, 0x00]);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
    }

    #[test]
    fn emit_zeroes_reserved() {
        let mut out = [0xEEu8; 36];
        repr().emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(&out[24..32], &[0, 0, 0x12, 0x34, 0, 0, 0, 0]);
        assert_eq!(out[..24], BYTES[..24]);
        assert_eq!(repr().buffer_len(), 36);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(
            Packet::new_checked(&BYTES[..31]).unwrap_err(),
            ParseError::Truncated {
                what: "Falcon Pull Request header",
                need: 32,
                have: 31
            }
        );
        let mut bytes = BYTES;
        bytes[7] = 0b010_0110_0; // Resync
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::UnexpectedPacketType {
                expected: PacketType::PullRequest,
                found: PacketType::Resync
            })
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in pull_request_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(bytes.len(), HEADER_LEN + repr.payload_len);
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()), Ok(repr));
        }
    }
}
