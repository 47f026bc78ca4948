//! The Falcon base header (24 bytes) and the Pull Data packet.
//!
//! Layer: wire. Owns the zero-copy [`Packet`] view of the base header, the
//! [`BaseHeader`] value shared by every non-ACK packet's `Repr`, and [`Repr`],
//! the type-agnostic base-header Repr. Pull Data is exactly this header plus a
//! payload (OCP Falcon 0.9 §7.4 p.28), so its view is this one. Never panics
//! on input after [`Packet::check_len`].
//!
//! OCP Falcon 0.9 §7.2 (figure p.24, table p.25–26; spec/falcon.md §1.2):
//!
//! ```text
//!  0       4       8                               31
//!  +-------+-------+-------------------------------+
//!  |Version| Rsvd  |     Destination CID (24b)     |  0
//!  |  Destination Function (24b)   |Proto|PType |AR|  4
//!  |     Receiver Data Window Base PSN (32b)       |  8
//!  |    Receiver Request Window Base PSN (32b)     | 12
//!  |                   PSN (32b)                   | 16
//!  |                   RSN (32b)                   | 20
//!  +-----------------------------------------------+
//! ```
//!
//! Byte 7 decodes as `proto = b7 >> 5; ptype = (b7 >> 1) & 0xF; ar = b7 & 1`.

use core::fmt;

use super::common::{
    check_version_and_type, common_getters, common_setters, field as common_field, FALCON_VERSION,
};
use super::{PacketType, ProtocolType};
use crate::ids::{ConnectionId, DestinationFunction};
use crate::seq::{Psn, Rsn};
use crate::wire::ParseError;

use field as base_field;

pub(super) mod field {
    use crate::wire::bytes::Field;

    pub(crate) const DESTINATION_FUNCTION: Field = 4..7;
    pub(crate) const TYPE_BYTE: usize = 7;
    pub(crate) const PROTOCOL_MASK: u8 = 0xE0;
    pub(crate) const PROTOCOL_SHIFT: u32 = 5;
    pub(crate) const ACK_REQUEST_MASK: u8 = 0x01;
    pub(crate) const PSN: Field = 16..20;
    pub(crate) const RSN: Field = 20..24;
}

/// Length of the base header.
pub const HEADER_LEN: usize = field::RSN.end;

/// Getters for the base-header fields beyond the shared prefix, for views of
/// packets that start with the base header.
macro_rules! base_getters {
    () => {
        /// Destination function (bytes 4–6), opaque.
        pub fn destination_function(&self) -> $crate::ids::DestinationFunction {
            use $crate::wire::falcon::base::field;
            $crate::ids::DestinationFunction::truncating($crate::wire::bytes::read_u24(
                &self.buffer.as_ref()[field::DESTINATION_FUNCTION],
            ))
        }

        /// Protocol type (byte 7 bits 7:5).
        pub fn protocol_type(&self) -> $crate::wire::falcon::ProtocolType {
            use $crate::wire::falcon::base::field;
            let byte = self.buffer.as_ref()[field::TYPE_BYTE];
            $crate::wire::falcon::ProtocolType::from(
                (byte & field::PROTOCOL_MASK) >> field::PROTOCOL_SHIFT,
            )
        }

        /// AR, "ack request" (byte 7 bit 0): the sender asks for an
        /// immediate ACK.
        pub fn ack_request(&self) -> bool {
            use $crate::wire::falcon::base::field;
            self.buffer.as_ref()[field::TYPE_BYTE] & field::ACK_REQUEST_MASK != 0
        }

        /// PSN (bytes 16–19): request-window PSN for a Pull Request,
        /// data-window PSN otherwise.
        pub fn psn(&self) -> $crate::seq::Psn {
            use $crate::wire::falcon::base::field;
            $crate::seq::Psn::new($crate::wire::bytes::read_u32(
                &self.buffer.as_ref()[field::PSN],
            ))
        }

        /// RSN (bytes 20–23).
        pub fn rsn(&self) -> $crate::seq::Rsn {
            use $crate::wire::falcon::base::field;
            $crate::seq::Rsn::new($crate::wire::bytes::read_u32(
                &self.buffer.as_ref()[field::RSN],
            ))
        }
    };
}

/// Setters for the base-header fields beyond the shared prefix.
macro_rules! base_setters {
    () => {
        /// Sets the destination function.
        pub fn set_destination_function(&mut self, function: $crate::ids::DestinationFunction) {
            use $crate::wire::falcon::base::field;
            $crate::wire::bytes::write_u24(
                &mut self.buffer.as_mut()[field::DESTINATION_FUNCTION],
                function.value(),
            );
        }

        /// Sets the protocol type, keeping the other bits of byte 7.
        pub fn set_protocol_type(&mut self, protocol: $crate::wire::falcon::ProtocolType) {
            use $crate::wire::falcon::base::field;
            $crate::wire::bytes::write_bits(
                &mut self.buffer.as_mut()[field::TYPE_BYTE],
                field::PROTOCOL_MASK,
                field::PROTOCOL_SHIFT,
                protocol.into(),
            );
        }

        /// Sets the AR bit.
        pub fn set_ack_request(&mut self, ack_request: bool) {
            use $crate::wire::falcon::base::field;
            $crate::wire::bytes::write_bits(
                &mut self.buffer.as_mut()[field::TYPE_BYTE],
                field::ACK_REQUEST_MASK,
                0,
                u8::from(ack_request),
            );
        }

        /// Sets the PSN.
        pub fn set_psn(&mut self, psn: $crate::seq::Psn) {
            use $crate::wire::falcon::base::field;
            $crate::wire::bytes::write_u32(&mut self.buffer.as_mut()[field::PSN], psn.value());
        }

        /// Sets the RSN.
        pub fn set_rsn(&mut self, rsn: $crate::seq::Rsn) {
            use $crate::wire::falcon::base::field;
            $crate::wire::bytes::write_u32(&mut self.buffer.as_mut()[field::RSN], rsn.value());
        }
    };
}

pub(crate) use {base_getters, base_setters};

/// A read/write view of a packet that starts with the base header (any
/// non-ACK type; for Pull Data it is the whole header).
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

    /// Ensures every accessor stays in bounds: 24 bytes.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the base header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "Falcon base header",
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

    /// Bytes after the base header (0 if the buffer is shorter).
    pub fn payload_len(&self) -> usize {
        self.buffer.as_ref().len().saturating_sub(HEADER_LEN)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The bytes after the base header (for Pull Data: ULP headers and data).
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    common_setters!();
    base_setters!();

    /// The bytes after the base header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Repr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "Falcon ({err})"),
        }
    }
}

/// The base-header fields of a non-ACK packet, except the packet type (which
/// the `Repr` holding it implies). The version is not stored: parsing
/// requires 1 and emitting writes 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BaseHeader {
    /// Destination connection id.
    pub connection_id: ConnectionId,
    /// Destination function (opaque).
    pub destination_function: DestinationFunction,
    /// Upper-layer protocol.
    pub protocol: ProtocolType,
    /// AR: ask the receiver for an immediate ACK.
    pub ack_request: bool,
    /// Piggy-backed receiver data-window base PSN.
    pub data_bpsn: Psn,
    /// Piggy-backed receiver request-window base PSN.
    pub request_bpsn: Psn,
    /// PSN in this packet's window.
    pub psn: Psn,
    /// RSN of the transaction.
    pub rsn: Rsn,
}

impl BaseHeader {
    /// Reads the base header of any view starting with it.
    #[inline(always)]
    pub(super) fn read<T: AsRef<[u8]>>(packet: &Packet<T>) -> BaseHeader {
        // The fields at fixed offsets of a 24-byte array: one length check
        // instead of one per field.
        let b = header_bytes(packet.buffer.as_ref());
        let word = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let type_byte = b[base_field::TYPE_BYTE];
        BaseHeader {
            connection_id: ConnectionId::truncating(word(0)),
            destination_function: DestinationFunction::truncating(word(4) >> 8),
            protocol: ProtocolType::from(
                (type_byte & base_field::PROTOCOL_MASK) >> base_field::PROTOCOL_SHIFT,
            ),
            ack_request: type_byte & base_field::ACK_REQUEST_MASK != 0,
            data_bpsn: Psn::new(word(common_field::DATA_BPSN.start)),
            request_bpsn: Psn::new(word(common_field::REQUEST_BPSN.start)),
            psn: Psn::new(word(base_field::PSN.start)),
            rsn: Rsn::new(word(base_field::RSN.start)),
        }
    }

    /// Writes the base header with `packet_type`, version 1 and zero
    /// reserved bits.
    pub(super) fn write<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet_type: PacketType,
        packet: &mut Packet<T>,
    ) {
        let b = header_bytes_mut(packet.buffer.as_mut());
        let mut put = |at: usize, value: u32| b[at..at + 4].copy_from_slice(&value.to_be_bytes());
        // Bytes 1–3 the CID, 4–6 the function (bytes 0 and 7 follow).
        put(0, self.connection_id.value());
        put(4, self.destination_function.value() << 8);
        put(common_field::DATA_BPSN.start, self.data_bpsn.value());
        put(common_field::REQUEST_BPSN.start, self.request_bpsn.value());
        put(base_field::PSN.start, self.psn.value());
        put(base_field::RSN.start, self.rsn.value());
        // The version above a zero reserved nibble.
        b[common_field::VERSION] =
            (FALCON_VERSION << common_field::VERSION_SHIFT) & common_field::VERSION_MASK;
        // Protocol | packet type | AR: every bit of byte 7.
        b[base_field::TYPE_BYTE] = ((u8::from(self.protocol) << base_field::PROTOCOL_SHIFT)
            & base_field::PROTOCOL_MASK)
            | ((u8::from(packet_type) << common_field::PACKET_TYPE_SHIFT)
                & common_field::PACKET_TYPE_MASK)
            | u8::from(self.ack_request);
    }

    /// Reads and validates the base header at the start of `bytes` (at least
    /// [`HEADER_LEN`] long): version 1 and the expected packet type.
    #[inline(always)]
    pub(super) fn parse_typed(
        bytes: &[u8],
        expected: PacketType,
    ) -> Result<BaseHeader, ParseError> {
        let packet = Packet::new_checked(bytes)?;
        check_version_and_type(packet.version(), packet.packet_type(), expected)?;
        Ok(BaseHeader::read(&packet))
    }

    /// [`parse_typed`](Self::parse_typed) for [`FalconRepr::parse`](super::Repr::parse),
    /// which checked the version and the packet type already: reads the
    /// base header at the start of `bytes` (at least [`HEADER_LEN`] long,
    /// checked here).
    #[inline(always)]
    pub(super) fn parse_peeked(bytes: &[u8]) -> Result<BaseHeader, ParseError> {
        Ok(BaseHeader::read(&Packet::new_checked(bytes)?))
    }

    /// Writes the base header at the start of `bytes`.
    #[inline(always)]
    pub(super) fn emit_typed(&self, packet_type: PacketType, bytes: &mut [u8]) {
        self.write(packet_type, &mut Packet::new_unchecked(bytes));
    }
}

/// The first [`HEADER_LEN`] bytes. Invariant: the views' `check_len` (or the
/// emitter's buffer of `buffer_len()` bytes) guarantees them.
fn header_bytes(bytes: &[u8]) -> &[u8; HEADER_LEN] {
    bytes[..HEADER_LEN]
        .try_into()
        .expect("a slice of HEADER_LEN bytes")
}

/// [`header_bytes`], writable.
fn header_bytes_mut(bytes: &mut [u8]) -> &mut [u8; HEADER_LEN] {
    (&mut bytes[..HEADER_LEN])
        .try_into()
        .expect("a slice of HEADER_LEN bytes")
}

impl fmt::Display for BaseHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cid {} {:?} {} {} dbpsn {} rbpsn {}",
            self.connection_id,
            self.protocol,
            self.psn,
            self.rsn,
            self.data_bpsn.value(),
            self.request_bpsn.value()
        )?;
        if self.ack_request {
            f.write_str(" AR")?;
        }
        Ok(())
    }
}

/// The base header of any packet type, as values: what a tool that does not
/// care about the type reads. It does not check that the type uses the base
/// header (an ACK parses as garbage): dispatch with
/// [`FalconRepr`](super::FalconRepr) instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The packet type field, as found.
    pub packet_type: PacketType,
    /// The other fields.
    pub header: BaseHeader,
}

impl Repr {
    /// Reads the base header.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 24 bytes; [`ParseError::BadVersion`]
    /// unless the version is 1.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        if packet.version() != FALCON_VERSION {
            return Err(ParseError::BadVersion(packet.version()));
        }
        Ok(Repr {
            packet_type: packet.packet_type(),
            header: BaseHeader::read(packet),
        })
    }

    /// Header length (24).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the base header.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.header.write(self.packet_type, packet);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Falcon {} {}", self.packet_type, self.header)
    }
}

#[cfg(test)]
// Binary literals of byte 7 are grouped as the fields: protocol | type | AR.
#[allow(clippy::unusual_byte_groupings)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::testing::base_repr;

    /// Version 1, CID 0xABCDEF, destination function 0x123456, byte 7 =
    /// 010 0101 1 (RDMA, Push Data, AR), data BPSN 0x01020304, request BPSN
    /// 0x05060708, PSN 0x0A0B0C0D, RSN 0xFFFFFFFE, then 2 payload bytes.
    const BYTES: [u8; 26] = [
        0x10,
        0xAB,
        0xCD,
        0xEF, //
        0x12,
        0x34,
        0x56,
        0b010_0101_1, //
        0x01,
        0x02,
        0x03,
        0x04, //
        0x05,
        0x06,
        0x07,
        0x08, //
        0x0A,
        0x0B,
        0x0C,
        0x0D, //
        0xFF,
        0xFF,
        0xFF,
        0xFE, //
        0x99,
        0x98,
    ];

    fn header() -> BaseHeader {
        BaseHeader {
            connection_id: ConnectionId::truncating(0xAB_CDEF),
            destination_function: DestinationFunction::truncating(0x12_3456),
            protocol: ProtocolType::Rdma,
            ack_request: true,
            data_bpsn: Psn::new(0x0102_0304),
            request_bpsn: Psn::new(0x0506_0708),
            psn: Psn::new(0x0A0B_0C0D),
            rsn: Rsn::new(0xFFFF_FFFE),
        }
    }

    #[test]
    fn deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.version(), 1);
        assert_eq!(packet.connection_id().value(), 0xAB_CDEF);
        assert_eq!(packet.destination_function().value(), 0x12_3456);
        // Byte 7: proto = b7 >> 5; ptype = (b7 >> 1) & 0xF; ar = b7 & 1.
        let b7 = BYTES[7];
        assert_eq!(packet.protocol_type(), ProtocolType::from(b7 >> 5));
        assert_eq!(packet.packet_type(), PacketType::from((b7 >> 1) & 0xF));
        assert_eq!(packet.ack_request(), b7 & 1 == 1);
        assert_eq!(packet.protocol_type(), ProtocolType::Rdma);
        assert_eq!(packet.packet_type(), PacketType::PushData);
        assert_eq!(packet.data_bpsn(), Psn::new(0x0102_0304));
        assert_eq!(packet.request_bpsn(), Psn::new(0x0506_0708));
        assert_eq!(packet.psn(), Psn::new(0x0A0B_0C0D));
        assert_eq!(packet.rsn(), Rsn::new(0xFFFF_FFFE));
        assert_eq!(packet.payload(), &[0x99, 0x98]);
        assert_eq!(packet.payload_len(), 2);
    }

    #[test]
    fn parse_and_emit_fixture() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        let repr = Repr::parse(&packet).unwrap();
        assert_eq!(
            repr,
            Repr {
                packet_type: PacketType::PushData,
                header: header()
            }
        );
        let mut out = [0xFFu8; 24];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..], BYTES[..24]);
    }

    #[test]
    fn byte_7_every_value_against_the_spec_formula() {
        // spec/falcon.md §1.2: proto = b7 >> 5; ptype = (b7 >> 1) & 0xF;
        // ar = b7 & 1. All 256 values, both directions.
        for b7 in 0..=255u8 {
            let mut bytes = BYTES;
            bytes[7] = b7;
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            assert_eq!(u8::from(packet.protocol_type()), b7 >> 5, "{b7:#04x}");
            assert_eq!(u8::from(packet.packet_type()), (b7 >> 1) & 0xF, "{b7:#04x}");
            assert_eq!(packet.ack_request(), b7 & 1 == 1, "{b7:#04x}");

            let mut out = [0u8; 24];
            let mut packet = Packet::new_unchecked(&mut out[..]);
            packet.set_protocol_type(ProtocolType::from(b7 >> 5));
            packet.set_packet_type(PacketType::from((b7 >> 1) & 0xF));
            packet.set_ack_request(b7 & 1 == 1);
            assert_eq!(out[7], b7);
        }
    }

    #[test]
    fn reserved_nibble_ignored_on_parse_zero_on_emit() {
        let mut bytes = BYTES;
        bytes[0] = 0x1F;
        let repr = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        let mut out = [0xFFu8; 24];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[0], 0x10);
    }

    #[test]
    fn setters_touch_only_their_bits() {
        let mut bytes = BYTES;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_packet_type(PacketType::Nack);
        assert_eq!(packet.protocol_type(), ProtocolType::Rdma);
        assert!(packet.ack_request());
        packet.set_ack_request(false);
        packet.set_protocol_type(ProtocolType::Nvme);
        assert_eq!(packet.packet_type(), PacketType::Nack);
        assert_eq!(packet.into_inner()[7], 0b011_1000_0);
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(
            Packet::new_checked(&BYTES[..23]).unwrap_err(),
            ParseError::Truncated {
                what: "Falcon base header",
                need: 24,
                have: 23
            }
        );
        let mut bytes = BYTES;
        bytes[0] = 0x20;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::BadVersion(2))
        );
        assert_eq!(
            BaseHeader::parse_typed(&BYTES, PacketType::PullData),
            Err(ParseError::UnexpectedPacketType {
                expected: PacketType::PullData,
                found: PacketType::PushData
            })
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in base_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(bytes.len(), HEADER_LEN);
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()), Ok(repr));
        }
    }
}
