//! The Resync packet: base header + 8 bytes.
//!
//! Layer: wire. Owns the zero-copy [`Packet`] view and the [`Repr`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! OCP Falcon 0.9 §7.6 (p.30–31; spec/falcon.md §2.4):
//!
//! ```text
//!  bytes  0–23: base header, packet type 0110b; PSN and RSN of the original packet
//!  byte  24   : Resync Code
//!  byte  25   : Resync Packet Type (7:4) | reserved (3:0)
//!  bytes 26–27: reserved (with byte 25 bits 3:0: 20 bits)
//!  bytes 28–31: Vendor Defined (opaque; 0 when unused)
//! ```

use core::fmt;

use super::base::{base_getters, base_setters, BaseHeader};
use super::common::{common_getters, common_setters};
use super::{PacketType, ResyncCode, Window};
use crate::wire::bytes::{read_u32, write_bits, write_u32};
use crate::wire::ParseError;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const CODE: usize = 24;
    pub(super) const PACKET_TYPE_BYTE: usize = 25;
    pub(super) const PACKET_TYPE_MASK: u8 = 0xF0;
    pub(super) const PACKET_TYPE_SHIFT: u32 = 4;
    /// Byte 25 bits 3:0 and bytes 26–27.
    pub(super) const RESERVED_MASK_25: u8 = 0x0F;
    pub(super) const RESERVED: Field = 26..28;
    pub(super) const VENDOR_DEFINED: Field = 28..32;
}

/// Length of the Resync packet.
pub const HEADER_LEN: usize = field::VENDOR_DEFINED.end;

/// A read/write view of a Resync packet.
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
    /// [`ParseError::Truncated`] naming the Resync packet.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "Falcon Resync packet",
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

    /// Resync Code (byte 24).
    pub fn resync_code(&self) -> ResyncCode {
        ResyncCode::from(self.buffer.as_ref()[field::CODE])
    }

    /// Resync Packet Type (byte 25 bits 7:4): the type of the original packet.
    pub fn resync_packet_type(&self) -> PacketType {
        let byte = self.buffer.as_ref()[field::PACKET_TYPE_BYTE];
        PacketType::from((byte & field::PACKET_TYPE_MASK) >> field::PACKET_TYPE_SHIFT)
    }

    /// Vendor Defined (bytes 28–31), opaque.
    pub fn vendor_defined(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::VENDOR_DEFINED])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    common_setters!();
    base_setters!();

    /// Sets the Resync Code.
    pub fn set_resync_code(&mut self, code: ResyncCode) {
        self.buffer.as_mut()[field::CODE] = code.into();
    }

    /// Sets the Resync Packet Type, keeping the reserved low nibble.
    pub fn set_resync_packet_type(&mut self, packet_type: PacketType) {
        write_bits(
            &mut self.buffer.as_mut()[field::PACKET_TYPE_BYTE],
            field::PACKET_TYPE_MASK,
            field::PACKET_TYPE_SHIFT,
            packet_type.into(),
        );
    }

    /// Sets the Vendor Defined field.
    pub fn set_vendor_defined(&mut self, value: u32) {
        write_u32(&mut self.buffer.as_mut()[field::VENDOR_DEFINED], value);
    }

    /// Zeroes the 20 reserved bits.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::PACKET_TYPE_BYTE] &= !field::RESERVED_MASK_25;
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }
}

impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Repr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "Falcon Resync ({err})"),
        }
    }
}

/// A Resync packet as values. Reserved bits are ignored on parse and zero on
/// emit; bytes after the 32-byte packet are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// `repr(C)`: the base header first, as in every transaction repr (see
// `push_data::Repr`).
#[repr(C)]
pub struct Repr {
    /// Base-header fields (packet type 0110b implied); `psn` and `rsn` are
    /// those of the original packet.
    pub header: BaseHeader,
    /// Why the transmitter resyncs.
    pub code: ResyncCode,
    /// The type of the original packet. Only the low 4 bits travel.
    pub original_packet_type: PacketType,
    /// Vendor-defined value (0 when unused).
    pub vendor_defined: u32,
}

impl Repr {
    /// Reads and validates a Resync packet.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 32 bytes, [`ParseError::BadVersion`],
    /// or [`ParseError::UnexpectedPacketType`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        Ok(Repr {
            header: BaseHeader::parse_typed(packet.buffer.as_ref(), PacketType::Resync)?,
            code: packet.resync_code(),
            original_packet_type: packet.resync_packet_type(),
            vendor_defined: packet.vendor_defined(),
        })
    }

    /// Packet length (32).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Which window the resync realigns. The spec does not say explicitly
    /// (spec/falcon.md §2.4, §9 item 8): the base-header text puts Resync in
    /// the data window, while §9.1.8 reuses the original packet's PSN. Our
    /// reading: a resynced Pull Request is in the request window, everything
    /// else in the data window.
    pub const fn window(&self) -> Window {
        match self.original_packet_type {
            PacketType::PullRequest => Window::Request,
            _ => Window::Data,
        }
    }

    /// Writes the packet.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.header.emit_typed(
            PacketType::Resync,
            &mut packet.buffer.as_mut()[..HEADER_LEN],
        );
        packet.set_resync_code(self.code);
        packet.set_resync_packet_type(self.original_packet_type);
        packet.clear_reserved();
        packet.set_vendor_defined(self.vendor_defined);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Falcon Resync {} code {:?} of {} vendor {:#x}",
            self.header, self.code, self.original_packet_type, self.vendor_defined
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
    use crate::wire::testing::resync_repr;

    fn repr(original_packet_type: PacketType) -> Repr {
        Repr {
            header: BaseHeader {
                connection_id: ConnectionId::truncating(1),
                destination_function: DestinationFunction::truncating(2),
                protocol: ProtocolType::Nvme,
                ack_request: true,
                data_bpsn: Psn::new(3),
                request_bpsn: Psn::new(4),
                psn: Psn::new(5),
                rsn: Rsn::new(6),
            },
            code: ResyncCode::RetransmissionExhausted,
            original_packet_type,
            vendor_defined: 0xDEAD_BEEF,
        }
    }

    #[test]
    fn layout() {
        let mut bytes = [0xFFu8; 32];
        repr(PacketType::PushData).emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[7], 0b011_0110_1);
        assert_eq!(&bytes[24..32], &[0x03, 0x50, 0, 0, 0xDE, 0xAD, 0xBE, 0xEF]);

        bytes[25] = 0x5F; // reserved nibble set: ignored
        bytes[26] = 0xAA;
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.resync_code(), ResyncCode::RetransmissionExhausted);
        assert_eq!(packet.resync_packet_type(), PacketType::PushData);
        assert_eq!(packet.vendor_defined(), 0xDEAD_BEEF);
        assert_eq!(Repr::parse(&packet), Ok(repr(PacketType::PushData)));
    }

    #[test]
    fn window_follows_the_original_type() {
        assert_eq!(repr(PacketType::PullRequest).window(), Window::Request);
        assert_eq!(repr(PacketType::PullData).window(), Window::Data);
        assert_eq!(repr(PacketType::PushData).window(), Window::Data);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            Packet::new_checked(&[0x10u8; 31][..]).unwrap_err(),
            ParseError::Truncated {
                what: "Falcon Resync packet",
                need: 32,
                have: 31
            }
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in resync_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(bytes.len(), HEADER_LEN);
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()), Ok(repr));
        }
    }
}
