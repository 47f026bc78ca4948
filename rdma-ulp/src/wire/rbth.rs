//! The RDMA Base Transport Header (RBTH), 12 bytes, first in every packet.
//!
//! Layer: wire. Owns the view [`Packet`] and the value [`Rbth`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! RDMA-0.9 §8.2 (figure p.20; bit 0 = most significant bit of the word's
//! first byte, words big-endian, see the [module doc](super)):
//!
//! ```text
//!  word 0  bits 0–3 Version (1)   4–17 reserved   18 A   19 CE   20–21 Pad
//!          22 R (reserved)   23 SE   24–31 Opcode
//!  word 1  bits 0–23 Destination QP   24–31 reserved
//!  word 2  bits 0–31 Sequence Number (SN)
//! ```
//!
//! The field table lists an AckReq (A) bit the figure does not draw (its
//! bits 4–18 are one reserved field). We put A at bit 18, in that reserved
//! field next to CE (ulp.md §1.8, decision D1): it requests an explicit
//! acknowledgement, which Falcon's own AR bit carries on the wire, so the
//! bit here is advisory. Reserved bits, R included, are emitted zero and
//! ignored on parse.
//!
//! This is not InfiniBand's BTH: the opcode is last in word 0, there is no
//! P_Key, M, TVer, F/B or PSN, and the 32-bit SN replaces the 24-bit PSN.

use core::fmt;

use super::bytes::{read_u24, read_u32, write_bits, write_u24, write_u32};
use super::{Opcode, PadCount, ParseError, Qpn, VERSION};
use crate::seq::Sn;

mod field {
    use crate::wire::bytes::Field;

    /// Version (high nibble), reserved (low nibble).
    pub(super) const VERSION: usize = 0;
    pub(super) const RESERVED: usize = 1;
    /// Reserved (0xC0), A (0x20), CE (0x10), Pad (0x0C), R (0x02), SE (0x01).
    pub(super) const FLAGS: usize = 2;
    pub(super) const OPCODE: usize = 3;
    pub(super) const DESTINATION_QP: Field = 4..7;
    pub(super) const RESERVED_QP: usize = 7;
    pub(super) const SN: Field = 8..12;

    pub(super) const ACK_REQUEST: u8 = 0x20;
    pub(super) const COMPLETE_IN_ERROR: u8 = 0x10;
    pub(super) const PAD: u8 = 0x0C;
    pub(super) const PAD_SHIFT: u32 = 2;
    pub(super) const SOLICITED_EVENT: u8 = 0x01;
}

/// Length of the RBTH.
pub const HEADER_LEN: usize = field::SN.end;

header_view!("RBTH", HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    fn byte(&self, index: usize) -> u8 {
        self.buffer.as_ref()[index]
    }

    /// Version (word 0 bits 0–3).
    pub fn version(&self) -> u8 {
        self.byte(field::VERSION) >> 4
    }

    /// AckReq (A, word 0 bit 18: decision D1).
    pub fn ack_request(&self) -> bool {
        self.byte(field::FLAGS) & field::ACK_REQUEST != 0
    }

    /// Complete-in-Error (CE, word 0 bit 19).
    pub fn complete_in_error(&self) -> bool {
        self.byte(field::FLAGS) & field::COMPLETE_IN_ERROR != 0
    }

    /// Pad (word 0 bits 20–21): bytes after the payload that align it to 4.
    pub fn pad(&self) -> PadCount {
        PadCount::truncating((self.byte(field::FLAGS) & field::PAD) >> field::PAD_SHIFT)
    }

    /// Solicited Event (SE, word 0 bit 23).
    pub fn solicited_event(&self) -> bool {
        self.byte(field::FLAGS) & field::SOLICITED_EVENT != 0
    }

    /// The opcode byte (word 0 bits 24–31), reserved codes included.
    pub fn opcode_code(&self) -> u8 {
        self.byte(field::OPCODE)
    }

    /// The opcode, after checking the version.
    ///
    /// # Errors
    ///
    /// [`ParseError::BadVersion`] unless the version is 1,
    /// [`ParseError::ReservedOpcode`] for a code RDMA-0.9 does not assign.
    pub fn checked_opcode(&self) -> Result<Opcode, ParseError> {
        let version = self.version();
        if version != VERSION {
            return Err(ParseError::BadVersion(version));
        }
        Opcode::from_code(self.opcode_code())
    }

    /// Destination QP (word 1 bits 0–23).
    pub fn destination_qp(&self) -> Qpn {
        Qpn::truncating(read_u24(&self.buffer.as_ref()[field::DESTINATION_QP]))
    }

    /// Sequence Number (word 2).
    pub fn sn(&self) -> Sn {
        Sn::new(read_u32(&self.buffer.as_ref()[field::SN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn byte_mut(&mut self, index: usize) -> &mut u8 {
        &mut self.buffer.as_mut()[index]
    }

    /// Sets the version and zeroes the reserved bits of word 0 bits 4–15.
    pub fn set_version(&mut self, version: u8) {
        *self.byte_mut(field::VERSION) = version << 4;
        *self.byte_mut(field::RESERVED) = 0;
    }

    /// Sets A, CE, Pad and SE, and clears the reserved bits of that byte
    /// (bits 16–17 and R).
    pub fn set_flags(
        &mut self,
        ack_request: bool,
        complete_in_error: bool,
        pad: PadCount,
        solicited_event: bool,
    ) {
        let flags = self.byte_mut(field::FLAGS);
        *flags = 0;
        write_bits(flags, field::ACK_REQUEST, 5, u8::from(ack_request));
        write_bits(
            flags,
            field::COMPLETE_IN_ERROR,
            4,
            u8::from(complete_in_error),
        );
        write_bits(flags, field::PAD, field::PAD_SHIFT, pad.value());
        write_bits(flags, field::SOLICITED_EVENT, 0, u8::from(solicited_event));
    }

    pub fn set_opcode(&mut self, opcode: Opcode) {
        *self.byte_mut(field::OPCODE) = opcode.code();
    }

    /// Sets the Destination QP and zeroes the reserved byte after it.
    pub fn set_destination_qp(&mut self, value: Qpn) {
        write_u24(
            &mut self.buffer.as_mut()[field::DESTINATION_QP],
            value.value(),
        );
        *self.byte_mut(field::RESERVED_QP) = 0;
    }

    pub fn set_sn(&mut self, value: Sn) {
        write_u32(&mut self.buffer.as_mut()[field::SN], value.value());
    }
}

/// The RBTH fields but the version (always 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rbth {
    pub opcode: Opcode,
    /// SE: the target invokes the CQ event handler (IB rules).
    pub solicited_event: bool,
    /// A: the sender asks for an explicit acknowledgement (advisory, D1).
    pub ack_request: bool,
    /// CE: complete this message in error; set only in a Last or Only
    /// packet (RDMA-0.9 §8.2).
    pub complete_in_error: bool,
    /// Pad bytes after the payload.
    pub pad: PadCount,
    pub destination_qp: Qpn,
    pub sn: Sn,
}

impl Rbth {
    /// An RBTH with every flag clear and no pad.
    pub const fn new(opcode: Opcode, destination_qp: Qpn, sn: Sn) -> Rbth {
        Rbth {
            opcode,
            solicited_event: false,
            ack_request: false,
            complete_in_error: false,
            pad: PadCount::ZERO,
            destination_qp,
            sn,
        }
    }

    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 12 bytes, [`ParseError::BadVersion`]
    /// or [`ParseError::ReservedOpcode`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Rbth, ParseError> {
        packet.check_len()?;
        Ok(Rbth {
            opcode: packet.checked_opcode()?,
            solicited_event: packet.solicited_event(),
            ack_request: packet.ack_request(),
            complete_in_error: packet.complete_in_error(),
            pad: packet.pad(),
            destination_qp: packet.destination_qp(),
            sn: packet.sn(),
        })
    }

    /// 12.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes all 12 bytes, reserved bits zeroed.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_version(VERSION);
        packet.set_flags(
            self.ack_request,
            self.complete_in_error,
            self.pad,
            self.solicited_event,
        );
        packet.set_opcode(self.opcode);
        packet.set_destination_qp(self.destination_qp);
        packet.set_sn(self.sn);
    }
}

impl fmt::Display for Rbth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} qp {} {}", self.opcode, self.destination_qp, self.sn)?;
        for (set, name) in [
            (self.solicited_event, " SE"),
            (self.ack_request, " A"),
            (self.complete_in_error, " CE"),
        ] {
            if set {
                f.write_str(name)?;
            }
        }
        if self.pad != PadCount::ZERO {
            write!(f, " pad {}", self.pad)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Word 0 of the figure on p.20, bit by bit: version 0001, reserved,
    /// A at 18, CE at 19, Pad 10b at 20–21, R 0 at 22, SE at 23, then the
    /// opcode; DestQP in bits 0–23 of word 1; SN in word 2.
    #[test]
    fn layout_per_the_figure() {
        let rbth = Rbth {
            opcode: Opcode::SendLastImmediate,
            solicited_event: true,
            ack_request: true,
            complete_in_error: true,
            pad: PadCount::truncating(2),
            destination_qp: Qpn::truncating(0x12_3456),
            sn: Sn::new(0x89AB_CDEF),
        };
        let mut bytes = [0xEEu8; 12];
        rbth.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            bytes,
            [
                0x10,
                0x00,
                0b0011_1001,
                0x03, // V=1 | rsvd | A CE Pad=2 R=0 SE | opcode
                0x12,
                0x34,
                0x56,
                0x00, // Destination QP | reserved
                0x89,
                0xAB,
                0xCD,
                0xEF, // SN
            ]
        );
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Rbth::parse(&packet), Ok(rbth));
    }

    #[test]
    fn each_flag_has_its_own_bit() {
        let base = Rbth::new(Opcode::SendOnly, Qpn::ZERO, Sn::FIRST);
        let cases = [
            (
                Rbth {
                    solicited_event: true,
                    ..base
                },
                0x01,
            ),
            (
                Rbth {
                    complete_in_error: true,
                    ..base
                },
                0x10,
            ),
            (
                Rbth {
                    ack_request: true,
                    ..base
                },
                0x20,
            ),
            (
                Rbth {
                    pad: PadCount::MAX,
                    ..base
                },
                0x0C,
            ),
            (
                Rbth {
                    pad: PadCount::truncating(1),
                    ..base
                },
                0x04,
            ),
        ];
        for (rbth, flags) in cases {
            let mut bytes = [0u8; 12];
            rbth.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            assert_eq!(bytes[2], flags, "{rbth}");
        }
    }

    #[test]
    fn parse_ignores_reserved_bits() {
        let mut bytes = [0xFFu8; 12];
        bytes[0] = 0x1F;
        bytes[2] = 0b1100_0010; // reserved bits 16–17 and R set, every flag clear
        bytes[3] = 0x0A;
        let rbth = Rbth::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            rbth,
            Rbth::new(Opcode::WriteOnly, Qpn::MAX, Sn::new(u32::MAX))
        );
    }

    #[test]
    fn version_and_opcode_are_checked() {
        let mut bytes = [0u8; 12];
        bytes[0] = 0x20;
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Rbth::parse(&packet), Err(ParseError::BadVersion(2)));
        bytes[0] = 0x10;
        for reserved in [0x11, 0x15, 0x18, 0x1F, 0x20, 0x60, 0x63, 0x66, 0xFF] {
            bytes[3] = reserved;
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            assert_eq!(
                Rbth::parse(&packet),
                Err(ParseError::ReservedOpcode(reserved))
            );
        }
        assert_eq!(
            Packet::new_checked(&bytes[..11]).unwrap_err(),
            ParseError::Truncated {
                what: "RBTH",
                need: 12,
                have: 11
            }
        );
    }
}
