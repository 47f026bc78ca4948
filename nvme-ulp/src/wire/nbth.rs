//! The NVMe Base Transport Header (NBTH), 32 bytes, first in every packet;
//! alone, it is the Write Data Request.
//!
//! Layer: wire. Owns the NBTH view [`Packet`], its field values [`Nbth`],
//! the 24-bit identifiers it carries and [`WriteDataRequest`]'s parse.
//! Never panics on input after [`Packet::check_len`].
//!
//! NVMe-0.9 §8.2 (figure p.26; bit 0 = most significant bit of the word's
//! first byte, words big-endian, see the [module doc](super)):
//!
//! ```text
//!  word 0  bits 0–3  Version (1)    4–7 Packet Type   8–31 Initiator Function
//!  word 1  bits 0–1  reserved  2 INV  3 S  4 NG  5–7 reserved   8–31 Target Tag
//!  word 2  bits 0–7  NCNT Total                       8–31 Initiator Tag
//!  word 3  bits 0–7  NCNT Offset                      8–31 iCMD Identifier
//!  words 4–7         reserved
//! ```
//!
//! Reserved bits and words are emitted zero and ignored on parse. NG is only
//! meaningful with S set (§8.2 table), so [`NcmdGroup`] folds the two bits
//! into one value and a parse with S clear ignores NG.
//!
//! NCNT Total and NCNT Offset count within the nCMD's tCMD group, not
//! within the whole iCMD (decision D8, ulp.md §3.4): see
//! [`crate::split`]. The OCP text counts them over "the original command";
//! the two readings agree whenever the iCMD is not split.

use core::fmt;

use super::bytes::{read_u24, write_bits, write_u24};
use super::{PacketType, ParseError, VERSION};

mod field {
    use crate::wire::bytes::Field;

    /// Version (high nibble) and Packet Type (low nibble).
    pub(super) const VERSION_TYPE: usize = 0;
    pub(super) const INITIATOR_FUNCTION: Field = 1..4;
    /// Reserved (0xC0), INV (0x20), S (0x10), NG (0x08), reserved (0x07).
    pub(super) const FLAGS: usize = 4;
    pub(super) const TARGET_TAG: Field = 5..8;
    pub(super) const NCNT_TOTAL: usize = 8;
    pub(super) const INITIATOR_TAG: Field = 9..12;
    pub(super) const NCNT_OFFSET: usize = 12;
    pub(super) const ICMD_ID: Field = 13..16;
    pub(super) const RESERVED: Field = 16..32;

    pub(super) const INV: u8 = 0x20;
    pub(super) const SPLIT: u8 = 0x10;
    pub(super) const GROUP: u8 = 0x08;
}

/// Length of the NBTH, and of a Write Data Request.
pub const HEADER_LEN: usize = field::RESERVED.end;

falcon_core::bounded_uint! {
    /// Initiator Function (24 bits): the `<Host, PF, VF>` tuple of the
    /// function that issued the NVMe command; the spec gives no sub-field
    /// split, so it is opaque here.
    #[derive(PartialOrd, Ord)]
    pub struct InitiatorFunction(u32, bits = 24, what = "initiator function");
}

falcon_core::bounded_uint! {
    /// Target Tag (24 bits): names the tCMD state at the target.
    #[derive(PartialOrd, Ord)]
    pub struct TargetTag(u32, bits = 24, what = "target tag");
}

falcon_core::bounded_uint! {
    /// Initiator Tag (24 bits): names the nCMD state at the initiator.
    #[derive(PartialOrd, Ord)]
    pub struct InitiatorTag(u32, bits = 24, what = "initiator tag");
}

falcon_core::bounded_uint! {
    /// iCMD Identifier (24 bits): the nCMD's parent iCMD.
    #[derive(PartialOrd, Ord)]
    pub struct IcmdId(u32, bits = 24, what = "iCMD identifier");
}

/// Which tCMD group an nCMD belongs to: the S and NG bits (NVMe-0.9 §8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NcmdGroup {
    /// The iCMD was not split (S = 0).
    #[default]
    Whole,
    /// The iCMD was split; the nCMD is in the first stripe (S = 1, NG = 0).
    First,
    /// The iCMD was split; the nCMD is in the second stripe (S = 1, NG = 1).
    Second,
}

impl NcmdGroup {
    /// From the S and NG bits; NG is ignored without S.
    pub const fn from_bits(split: bool, group: bool) -> NcmdGroup {
        match (split, group) {
            (false, _) => NcmdGroup::Whole,
            (true, false) => NcmdGroup::First,
            (true, true) => NcmdGroup::Second,
        }
    }

    /// The S bit.
    pub const fn split(self) -> bool {
        !matches!(self, NcmdGroup::Whole)
    }

    /// The NG bit.
    pub const fn group_bit(self) -> bool {
        matches!(self, NcmdGroup::Second)
    }
}

/// A read/write view of an NBTH, or of any packet through its first 32
/// bytes.
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
    /// [`ParseError::Truncated`] naming the NBTH.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "NBTH",
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

    fn byte(&self, index: usize) -> u8 {
        self.buffer.as_ref()[index]
    }

    /// Version (word 0 bits 0–3).
    pub fn version(&self) -> u8 {
        self.byte(field::VERSION_TYPE) >> 4
    }

    /// Packet Type code (word 0 bits 4–7), 6–15 included.
    pub fn packet_type_code(&self) -> u8 {
        self.byte(field::VERSION_TYPE) & 0x0F
    }

    /// The packet type, after checking the version.
    ///
    /// # Errors
    ///
    /// [`ParseError::BadVersion`] unless the version is 1,
    /// [`ParseError::ReservedPacketType`] for types 6–15.
    pub fn checked_type(&self) -> Result<PacketType, ParseError> {
        let version = self.version();
        if version != VERSION {
            return Err(ParseError::BadVersion(version));
        }
        PacketType::from_code(self.packet_type_code())
    }

    pub fn initiator_function(&self) -> InitiatorFunction {
        InitiatorFunction::truncating(read_u24(&self.buffer.as_ref()[field::INITIATOR_FUNCTION]))
    }

    /// Data Invalid (INV, word 1 bit 2).
    pub fn data_invalid(&self) -> bool {
        self.byte(field::FLAGS) & field::INV != 0
    }

    /// Split Command (S, word 1 bit 3).
    pub fn split(&self) -> bool {
        self.byte(field::FLAGS) & field::SPLIT != 0
    }

    /// nCMD Group bit (NG, word 1 bit 4), as received.
    pub fn group_bit(&self) -> bool {
        self.byte(field::FLAGS) & field::GROUP != 0
    }

    /// S and NG together.
    pub fn ncmd_group(&self) -> NcmdGroup {
        NcmdGroup::from_bits(self.split(), self.group_bit())
    }

    pub fn target_tag(&self) -> TargetTag {
        TargetTag::truncating(read_u24(&self.buffer.as_ref()[field::TARGET_TAG]))
    }

    /// NCNT Total, 0-based (0 = one nCMD).
    pub fn ncnt_total(&self) -> u8 {
        self.byte(field::NCNT_TOTAL)
    }

    pub fn initiator_tag(&self) -> InitiatorTag {
        InitiatorTag::truncating(read_u24(&self.buffer.as_ref()[field::INITIATOR_TAG]))
    }

    pub fn ncnt_offset(&self) -> u8 {
        self.byte(field::NCNT_OFFSET)
    }

    pub fn icmd_id(&self) -> IcmdId {
        IcmdId::truncating(read_u24(&self.buffer.as_ref()[field::ICMD_ID]))
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Everything after the 32-byte NBTH.
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn byte_mut(&mut self, index: usize) -> &mut u8 {
        &mut self.buffer.as_mut()[index]
    }

    /// Sets the version and the packet type.
    pub fn set_version_and_type(&mut self, version: u8, packet_type: PacketType) {
        *self.byte_mut(field::VERSION_TYPE) = (version << 4) | packet_type.code();
    }

    pub fn set_initiator_function(&mut self, value: InitiatorFunction) {
        write_u24(
            &mut self.buffer.as_mut()[field::INITIATOR_FUNCTION],
            value.value(),
        );
    }

    /// Sets INV, S and NG, and clears the reserved bits of that byte.
    pub fn set_flags(&mut self, data_invalid: bool, group: NcmdGroup) {
        let flags = self.byte_mut(field::FLAGS);
        *flags = 0;
        write_bits(flags, field::INV, 5, u8::from(data_invalid));
        write_bits(flags, field::SPLIT, 4, u8::from(group.split()));
        write_bits(flags, field::GROUP, 3, u8::from(group.group_bit()));
    }

    pub fn set_target_tag(&mut self, value: TargetTag) {
        write_u24(&mut self.buffer.as_mut()[field::TARGET_TAG], value.value());
    }

    pub fn set_ncnt_total(&mut self, value: u8) {
        *self.byte_mut(field::NCNT_TOTAL) = value;
    }

    pub fn set_initiator_tag(&mut self, value: InitiatorTag) {
        write_u24(
            &mut self.buffer.as_mut()[field::INITIATOR_TAG],
            value.value(),
        );
    }

    pub fn set_ncnt_offset(&mut self, value: u8) {
        *self.byte_mut(field::NCNT_OFFSET) = value;
    }

    pub fn set_icmd_id(&mut self, value: IcmdId) {
        write_u24(&mut self.buffer.as_mut()[field::ICMD_ID], value.value());
    }

    /// Zeroes words 4–7.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }
}

/// The NBTH fields but the version (always 1) and the packet type (the
/// packet's `Repr` implies it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Nbth {
    pub initiator_function: InitiatorFunction,
    /// INV: the write data is bad (e.g. the initiator's PI check failed).
    /// Only meaningful in write packets (§8.2).
    pub data_invalid: bool,
    /// S and NG.
    pub group: NcmdGroup,
    pub target_tag: TargetTag,
    /// NCNT Total, 0-based, over the nCMD's group (D8).
    pub ncnt_total: u8,
    pub initiator_tag: InitiatorTag,
    /// NCNT Offset: the nCMD's index in its group (D8).
    pub ncnt_offset: u8,
    pub icmd_id: IcmdId,
}

impl Nbth {
    /// Reads the NBTH of a packet that must be of type `expected`.
    ///
    /// # Errors
    ///
    /// [`ParseError::BadVersion`], [`ParseError::ReservedPacketType`] or
    /// [`ParseError::UnexpectedPacketType`]. The caller checked the length.
    pub fn parse_typed<T: AsRef<[u8]>>(
        packet: &Packet<T>,
        expected: PacketType,
    ) -> Result<Nbth, ParseError> {
        let found = packet.checked_type()?;
        if found != expected {
            return Err(ParseError::UnexpectedPacketType { expected, found });
        }
        Ok(Nbth {
            initiator_function: packet.initiator_function(),
            data_invalid: packet.data_invalid(),
            group: packet.ncmd_group(),
            target_tag: packet.target_tag(),
            ncnt_total: packet.ncnt_total(),
            initiator_tag: packet.initiator_tag(),
            ncnt_offset: packet.ncnt_offset(),
            icmd_id: packet.icmd_id(),
        })
    }

    /// Writes all 32 bytes, reserved words zeroed.
    pub fn emit_typed<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet_type: PacketType,
        packet: &mut Packet<T>,
    ) {
        packet.set_version_and_type(VERSION, packet_type);
        packet.set_initiator_function(self.initiator_function);
        packet.set_flags(self.data_invalid, self.group);
        packet.set_target_tag(self.target_tag);
        packet.set_ncnt_total(self.ncnt_total);
        packet.set_initiator_tag(self.initiator_tag);
        packet.set_ncnt_offset(self.ncnt_offset);
        packet.set_icmd_id(self.icmd_id);
        packet.clear_reserved();
    }
}

impl fmt::Display for Nbth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fn {} icmd {} itag {} ttag {} ncnt {}/{}",
            self.initiator_function,
            self.icmd_id,
            self.initiator_tag,
            self.target_tag,
            self.ncnt_offset,
            self.ncnt_total,
        )?;
        match self.group {
            NcmdGroup::Whole => {}
            NcmdGroup::First => f.write_str(" S NG=0")?,
            NcmdGroup::Second => f.write_str(" S NG=1")?,
        }
        if self.data_invalid {
            f.write_str(" INV")?;
        }
        Ok(())
    }
}

/// Write Data Request (type 1, NVMe-0.9 §8.6): the NBTH alone, sent by the
/// target as a Falcon Pull Request to fetch one nCMD's write data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WriteDataRequest {
    pub nbth: Nbth,
}

impl WriteDataRequest {
    /// # Errors
    ///
    /// [`ParseError::Truncated`], the NBTH's errors, or
    /// [`ParseError::TrailingBytes`]: the packet is exactly 32 bytes.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<WriteDataRequest, ParseError> {
        packet.check_len()?;
        let nbth = Nbth::parse_typed(packet, PacketType::WriteDataRequest)?;
        let extra = packet.buffer.as_ref().len() - HEADER_LEN;
        if extra != 0 {
            return Err(ParseError::TrailingBytes {
                what: "Write Data Request",
                extra,
            });
        }
        Ok(WriteDataRequest { nbth })
    }

    /// 32.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.nbth.emit_typed(PacketType::WriteDataRequest, packet);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Nbth {
        Nbth {
            initiator_function: InitiatorFunction::truncating(0x0A_0B0C),
            data_invalid: true,
            group: NcmdGroup::Second,
            target_tag: TargetTag::truncating(0x12_3456),
            ncnt_total: 0x07,
            initiator_tag: InitiatorTag::truncating(0xAB_CDEF),
            ncnt_offset: 0x05,
            icmd_id: IcmdId::truncating(0x65_4321),
        }
    }

    #[test]
    fn layout_per_the_figure() {
        let mut bytes = [0xEEu8; 32];
        sample().emit_typed(
            PacketType::ReadResponse,
            &mut Packet::new_unchecked(&mut bytes[..]),
        );
        let mut expected = [0u8; 32];
        expected[..16].copy_from_slice(&[
            0x15,
            0x0A,
            0x0B,
            0x0C, // version 1 | type 5 | function
            0b0011_1000,
            0x12,
            0x34,
            0x56, // rsvd 2 | INV | S | NG | rsvd 3 | target tag
            0x07,
            0xAB,
            0xCD,
            0xEF, // NCNT Total | initiator tag
            0x05,
            0x65,
            0x43,
            0x21, // NCNT Offset | iCMD identifier
        ]);
        assert_eq!(bytes, expected, "words 4–7 zeroed");
    }

    #[test]
    fn each_flag_has_its_own_bit() {
        let mut bytes = [0u8; 32];
        let mut nbth = Nbth {
            data_invalid: true,
            group: NcmdGroup::Whole,
            ..Nbth::default()
        };
        nbth.emit_typed(
            PacketType::WriteRequest,
            &mut Packet::new_unchecked(&mut bytes[..]),
        );
        assert_eq!(bytes[4], 0x20, "INV is word 1 bit 2");
        nbth.data_invalid = false;
        nbth.group = NcmdGroup::First;
        nbth.emit_typed(
            PacketType::WriteRequest,
            &mut Packet::new_unchecked(&mut bytes[..]),
        );
        assert_eq!(bytes[4], 0x10, "S is word 1 bit 3, NG 0");
        nbth.group = NcmdGroup::Second;
        nbth.emit_typed(
            PacketType::WriteRequest,
            &mut Packet::new_unchecked(&mut bytes[..]),
        );
        assert_eq!(bytes[4], 0x18, "NG is word 1 bit 4");
    }

    #[test]
    fn parse_ignores_reserved_bits_and_ng_without_s() {
        let mut bytes = [0xFFu8; 32];
        bytes[0] = 0x11;
        bytes[4] = 0b1100_1111; // reserved bits, NG set, S clear, INV clear
        let nbth = Nbth::parse_typed(
            &Packet::new_checked(&bytes[..]).unwrap(),
            PacketType::WriteDataRequest,
        )
        .unwrap();
        assert_eq!(nbth.group, NcmdGroup::Whole);
        assert!(!nbth.data_invalid);
        assert_eq!(nbth.target_tag, TargetTag::MAX);
        assert_eq!(nbth.ncnt_total, 0xFF);
    }

    #[test]
    fn version_and_type_are_checked() {
        let mut bytes = [0u8; 32];
        bytes[0] = 0x23;
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.checked_type(), Err(ParseError::BadVersion(2)));
        bytes[0] = 0x00;
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.checked_type(), Err(ParseError::BadVersion(0)));
        for code in 8..16 {
            bytes[0] = 0x10 | code;
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            assert_eq!(
                packet.checked_type(),
                Err(ParseError::ReservedPacketType(code))
            );
        }
        bytes[0] = 0x13;
        assert_eq!(
            WriteDataRequest::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::UnexpectedPacketType {
                expected: PacketType::WriteDataRequest,
                found: PacketType::WriteCompletion
            })
        );
        assert_eq!(
            Packet::new_checked(&bytes[..31]).unwrap_err(),
            ParseError::Truncated {
                what: "NBTH",
                need: 32,
                have: 31
            }
        );
    }

    #[test]
    fn write_data_request_is_exactly_the_nbth() {
        let repr = WriteDataRequest { nbth: sample() };
        let mut bytes = [0u8; 33];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..32]));
        assert_eq!(bytes[0], 0x11);
        assert_eq!(
            WriteDataRequest::parse(&Packet::new_checked(&bytes[..32]).unwrap()),
            Ok(repr)
        );
        assert_eq!(
            WriteDataRequest::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::TrailingBytes {
                what: "Write Data Request",
                extra: 1
            })
        );
    }

    #[test]
    fn identifiers_are_24_bits() {
        assert_eq!(TargetTag::MAX.value(), 0xFF_FFFF);
        assert!(IcmdId::new(0x100_0000).is_err());
        assert_eq!(InitiatorTag::truncating(0x1FF_FFFF), InitiatorTag::MAX);
    }
}
