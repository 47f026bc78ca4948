//! Read Request and Write Request: the NBTH and a 32-byte command block,
//! 64 bytes, pushed by the initiator, one per nCMD.
//!
//! Layer: wire. Owns the request view [`Packet`] and the [`ReadRequest`],
//! [`WriteRequest`] and [`Command`] values. Never panics on input after
//! [`Packet::check_len`].
//!
//! NVMe-0.9 §8.3 (figure p.28) and §8.5 (figure p.31), words after the NBTH
//! (bit 0 = most significant, words big-endian, see the [module doc](super)):
//!
//! ```text
//!  word 8   0–15 Initiator NSID               16–31 Target NSID
//!  word 9   Target SLBA 31:0
//!  word 10  Target SLBA 63:32
//!  word 11  0–15 NLB  16–19 rsvd  20–23 DTYPE (write; read: rsvd)
//!           24–25 rsvd  26–29 PRINFO  30 FUA  31 LR
//!  word 12  0–7 DSM  8–15 rsvd  16–31 DSPEC (write; read: rsvd)
//!  word 13  (E)ILBRT
//!  word 14  0–15 (E)LBATM                     16–31 (E)LBAT
//!  word 15  0–23 rsvd                         24–31 Target SQID
//! ```
//!
//! The SLBA is drawn low word first, as NVMe CDW10/11, and each word is
//! big-endian (D6). NLB is 0-based, copied from the iCMD as in NVMe CDW12
//! (D7). SLBA and NLB describe the nCMD's tCMD group, the same in every
//! nCMD of that group (§8.3: "the starting LBA of the stripe group").
//! The fields keep NVMe's meaning but not NVMe's bit positions: in NVMe
//! CDW12 NLB is bits 15:0 and LR bit 31 (its most significant bit), here NLB
//! is the word's first half and LR its last bit; values are copied field by
//! field.

use core::fmt;

use super::bytes::{read_u16, read_u32, write_bits, write_u16, write_u32};
use super::nbth::{self, Nbth};
use super::{PacketType, ParseError};

mod field {
    use crate::wire::bytes::Field;

    pub(super) const INITIATOR_NSID: Field = 32..34;
    pub(super) const TARGET_NSID: Field = 34..36;
    pub(super) const SLBA_LOW: Field = 36..40;
    pub(super) const SLBA_HIGH: Field = 40..44;
    pub(super) const NLB: Field = 44..46;
    /// Reserved (0xF0), DTYPE (0x0F).
    pub(super) const DTYPE: usize = 46;
    /// Reserved (0xC0), PRINFO (0x3C), FUA (0x02), LR (0x01).
    pub(super) const PRINFO_FUA_LR: usize = 47;
    pub(super) const DSM: usize = 48;
    pub(super) const RESERVED_12: usize = 49;
    pub(super) const DSPEC: Field = 50..52;
    pub(super) const REFERENCE_TAG: Field = 52..56;
    pub(super) const APP_TAG_MASK: Field = 56..58;
    pub(super) const APP_TAG: Field = 58..60;
    pub(super) const RESERVED_15: Field = 60..63;
    pub(super) const TARGET_SQID: usize = 63;

    pub(super) const DTYPE_MASK: u8 = 0x0F;
    pub(super) const PRINFO_MASK: u8 = 0x3C;
    pub(super) const PRINFO_SHIFT: u32 = 2;
    pub(super) const FUA: u8 = 0x02;
    pub(super) const LR: u8 = 0x01;
}

/// Length of a Read Request or Write Request.
pub const HEADER_LEN: usize = field::TARGET_SQID + 1;

falcon_core::bounded_uint! {
    /// Protection Information field (4 bits, NVMe CDW12 PRINFO): PRACT and
    /// the three PRCHK bits.
    #[derive(PartialOrd, Ord)]
    pub struct Prinfo(u8, bits = 4, what = "PRINFO");
}

impl Prinfo {
    /// PRACT: the controller inserts or strips PI.
    pub const PRACT: u8 = 0b1000;
    /// PRCHK bit 2: check the guard.
    pub const CHECK_GUARD: u8 = 0b0100;
    /// PRCHK bit 1: check the application tag.
    pub const CHECK_APP_TAG: u8 = 0b0010;
    /// PRCHK bit 0: check the reference tag.
    pub const CHECK_REF_TAG: u8 = 0b0001;
}

falcon_core::bounded_uint! {
    /// Directive Type (4 bits, NVMe CDW12 DTYPE), writes only.
    #[derive(PartialOrd, Ord)]
    pub struct DirectiveType(u8, bits = 4, what = "DTYPE");
}

/// A read/write view of a Read Request or Write Request.
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

    /// Ensures every accessor stays in bounds: 64 bytes. Trailing bytes are
    /// judged by the `Repr` parse.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the request.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "NVMe Read/Write Request",
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

    /// The NBTH, the first 32 bytes.
    pub fn nbth(&self) -> nbth::Packet<&[u8]> {
        nbth::Packet::new_unchecked(&self.buffer.as_ref()[..nbth::HEADER_LEN])
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Low 16 bits of the iCMD's NSID.
    pub fn initiator_nsid(&self) -> u16 {
        read_u16(&self.bytes()[field::INITIATOR_NSID])
    }

    /// Low 16 bits of the NSID at the target.
    pub fn target_nsid(&self) -> u16 {
        read_u16(&self.bytes()[field::TARGET_NSID])
    }

    /// Target SLBA: word 9 holds bits 31:0, word 10 bits 63:32.
    pub fn slba(&self) -> u64 {
        let low = read_u32(&self.bytes()[field::SLBA_LOW]);
        let high = read_u32(&self.bytes()[field::SLBA_HIGH]);
        (u64::from(high) << 32) | u64::from(low)
    }

    /// Number of Logical Blocks, 0-based.
    pub fn nlb(&self) -> u16 {
        read_u16(&self.bytes()[field::NLB])
    }

    /// DTYPE (reserved in a Read Request).
    pub fn dtype(&self) -> DirectiveType {
        DirectiveType::truncating(self.bytes()[field::DTYPE] & field::DTYPE_MASK)
    }

    pub fn prinfo(&self) -> Prinfo {
        Prinfo::truncating(
            (self.bytes()[field::PRINFO_FUA_LR] & field::PRINFO_MASK) >> field::PRINFO_SHIFT,
        )
    }

    /// Force Unit Access.
    pub fn fua(&self) -> bool {
        self.bytes()[field::PRINFO_FUA_LR] & field::FUA != 0
    }

    /// Limited Retry.
    pub fn limited_retry(&self) -> bool {
        self.bytes()[field::PRINFO_FUA_LR] & field::LR != 0
    }

    /// Dataset Management.
    pub fn dsm(&self) -> u8 {
        self.bytes()[field::DSM]
    }

    /// Directive Specific (reserved in a Read Request).
    pub fn dspec(&self) -> u16 {
        read_u16(&self.bytes()[field::DSPEC])
    }

    /// EILBRT (read) or ILBRT (write).
    pub fn reference_tag(&self) -> u32 {
        read_u32(&self.bytes()[field::REFERENCE_TAG])
    }

    /// ELBATM (read) or LBATM (write).
    pub fn app_tag_mask(&self) -> u16 {
        read_u16(&self.bytes()[field::APP_TAG_MASK])
    }

    /// ELBAT (read) or LBAT (write).
    pub fn app_tag(&self) -> u16 {
        read_u16(&self.bytes()[field::APP_TAG])
    }

    pub fn target_sqid(&self) -> u8 {
        self.bytes()[field::TARGET_SQID]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The NBTH, writable.
    pub fn nbth_mut(&mut self) -> nbth::Packet<&mut [u8]> {
        nbth::Packet::new_unchecked(&mut self.buffer.as_mut()[..nbth::HEADER_LEN])
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_initiator_nsid(&mut self, value: u16) {
        write_u16(&mut self.bytes_mut()[field::INITIATOR_NSID], value);
    }

    pub fn set_target_nsid(&mut self, value: u16) {
        write_u16(&mut self.bytes_mut()[field::TARGET_NSID], value);
    }

    pub fn set_slba(&mut self, value: u64) {
        // Truncation intended: the two halves of the 64-bit SLBA.
        write_u32(&mut self.bytes_mut()[field::SLBA_LOW], value as u32);
        write_u32(
            &mut self.bytes_mut()[field::SLBA_HIGH],
            (value >> 32) as u32,
        );
    }

    pub fn set_nlb(&mut self, value: u16) {
        write_u16(&mut self.bytes_mut()[field::NLB], value);
    }

    /// Sets DTYPE and clears word 11 bits 16–19.
    pub fn set_dtype(&mut self, value: DirectiveType) {
        self.bytes_mut()[field::DTYPE] = value.value() & field::DTYPE_MASK;
    }

    /// Sets PRINFO, FUA and LR and clears word 11 bits 24–25.
    pub fn set_prinfo_fua_lr(&mut self, prinfo: Prinfo, fua: bool, limited_retry: bool) {
        let byte = &mut self.bytes_mut()[field::PRINFO_FUA_LR];
        *byte = 0;
        write_bits(
            byte,
            field::PRINFO_MASK,
            field::PRINFO_SHIFT,
            prinfo.value(),
        );
        write_bits(byte, field::FUA, 1, u8::from(fua));
        write_bits(byte, field::LR, 0, u8::from(limited_retry));
    }

    /// Sets DSM and clears word 12 bits 8–15.
    pub fn set_dsm(&mut self, value: u8) {
        self.bytes_mut()[field::DSM] = value;
        self.bytes_mut()[field::RESERVED_12] = 0;
    }

    pub fn set_dspec(&mut self, value: u16) {
        write_u16(&mut self.bytes_mut()[field::DSPEC], value);
    }

    pub fn set_reference_tag(&mut self, value: u32) {
        write_u32(&mut self.bytes_mut()[field::REFERENCE_TAG], value);
    }

    pub fn set_app_tag_mask(&mut self, value: u16) {
        write_u16(&mut self.bytes_mut()[field::APP_TAG_MASK], value);
    }

    pub fn set_app_tag(&mut self, value: u16) {
        write_u16(&mut self.bytes_mut()[field::APP_TAG], value);
    }

    /// Sets the Target SQID and clears word 15 bits 0–23.
    pub fn set_target_sqid(&mut self, value: u8) {
        self.bytes_mut()[field::RESERVED_15].fill(0);
        self.bytes_mut()[field::TARGET_SQID] = value;
    }
}

/// The command-block fields a Read Request and a Write Request share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Command {
    /// Low 16 bits of the iCMD's NSID.
    pub initiator_nsid: u16,
    /// Low 16 bits of the NSID at the target (LBA translation table).
    pub target_nsid: u16,
    /// Target SLBA of the nCMD's tCMD group.
    pub slba: u64,
    /// Number of logical blocks of the tCMD group, 0-based (D7).
    pub nlb: u16,
    pub prinfo: Prinfo,
    /// Force Unit Access.
    pub fua: bool,
    /// Limited Retry.
    pub limited_retry: bool,
    /// Dataset Management.
    pub dsm: u8,
    /// EILBRT in a Read Request, ILBRT in a Write Request.
    pub reference_tag: u32,
    /// ELBATM / LBATM.
    pub app_tag_mask: u16,
    /// ELBAT / LBAT.
    pub app_tag: u16,
    /// Target submission queue (0-based, global over the target's SSDs).
    pub target_sqid: u8,
}

impl Command {
    /// The number of logical blocks (NLB + 1).
    pub const fn blocks(&self) -> u32 {
        self.nlb as u32 + 1
    }

    fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Command {
        Command {
            initiator_nsid: packet.initiator_nsid(),
            target_nsid: packet.target_nsid(),
            slba: packet.slba(),
            nlb: packet.nlb(),
            prinfo: packet.prinfo(),
            fua: packet.fua(),
            limited_retry: packet.limited_retry(),
            dsm: packet.dsm(),
            reference_tag: packet.reference_tag(),
            app_tag_mask: packet.app_tag_mask(),
            app_tag: packet.app_tag(),
            target_sqid: packet.target_sqid(),
        }
    }

    /// Writes the shared fields; DTYPE and DSPEC are left zero.
    fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_initiator_nsid(self.initiator_nsid);
        packet.set_target_nsid(self.target_nsid);
        packet.set_slba(self.slba);
        packet.set_nlb(self.nlb);
        packet.set_dtype(DirectiveType::ZERO);
        packet.set_prinfo_fua_lr(self.prinfo, self.fua, self.limited_retry);
        packet.set_dsm(self.dsm);
        packet.set_dspec(0);
        packet.set_reference_tag(self.reference_tag);
        packet.set_app_tag_mask(self.app_tag_mask);
        packet.set_app_tag(self.app_tag);
        packet.set_target_sqid(self.target_sqid);
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "nsid {}→{} slba {} nlb {} sqid {}",
            self.initiator_nsid, self.target_nsid, self.slba, self.nlb, self.target_sqid
        )?;
        if self.prinfo != Prinfo::ZERO {
            write!(f, " prinfo {:#x}", self.prinfo.value())?;
        }
        if self.fua {
            f.write_str(" FUA")?;
        }
        Ok(())
    }
}

/// Checks the length and the type of a request; returns its NBTH.
fn parse_request<T: AsRef<[u8]>>(
    packet: &Packet<T>,
    packet_type: PacketType,
    what: &'static str,
) -> Result<Nbth, ParseError> {
    packet.check_len()?;
    let nbth = Nbth::parse_typed(&packet.nbth(), packet_type)?;
    let extra = packet.buffer.as_ref().len() - HEADER_LEN;
    if extra != 0 {
        return Err(ParseError::TrailingBytes { what, extra });
    }
    Ok(nbth)
}

/// Read Request (type 4, NVMe-0.9 §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReadRequest {
    pub nbth: Nbth,
    pub command: Command,
}

impl ReadRequest {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 64 bytes, the NBTH's errors, or
    /// [`ParseError::TrailingBytes`] above.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<ReadRequest, ParseError> {
        let nbth = parse_request(packet, PacketType::ReadRequest, "Read Request")?;
        Ok(ReadRequest {
            nbth,
            command: Command::parse(packet),
        })
    }

    /// 64.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes all 64 bytes, reserved fields zeroed.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.nbth
            .emit_typed(PacketType::ReadRequest, &mut packet.nbth_mut());
        self.command.emit(packet);
    }
}

/// Write Request (type 0, NVMe-0.9 §8.5): a Read Request's fields plus the
/// directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WriteRequest {
    pub nbth: Nbth,
    pub command: Command,
    pub dtype: DirectiveType,
    /// Directive Specific.
    pub dspec: u16,
}

impl WriteRequest {
    /// # Errors
    ///
    /// As [`ReadRequest::parse`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<WriteRequest, ParseError> {
        let nbth = parse_request(packet, PacketType::WriteRequest, "Write Request")?;
        Ok(WriteRequest {
            nbth,
            command: Command::parse(packet),
            dtype: packet.dtype(),
            dspec: packet.dspec(),
        })
    }

    /// 64.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes all 64 bytes, reserved fields zeroed.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.nbth
            .emit_typed(PacketType::WriteRequest, &mut packet.nbth_mut());
        self.command.emit(packet);
        packet.set_dtype(self.dtype);
        packet.set_dspec(self.dspec);
    }
}

#[cfg(test)]
// Binary literals of byte 47 are grouped as the fields: rsvd | PRINFO | FUA | LR.
#[allow(clippy::unusual_byte_groupings)]
mod tests {
    use super::*;
    use crate::wire::nbth::{IcmdId, InitiatorFunction, InitiatorTag, NcmdGroup, TargetTag};

    fn command() -> Command {
        Command {
            initiator_nsid: 0x0102,
            target_nsid: 0x0304,
            slba: 0x1122_3344_5566_7788,
            nlb: 0x00FF,
            prinfo: Prinfo::truncating(Prinfo::CHECK_GUARD | Prinfo::CHECK_REF_TAG),
            fua: true,
            limited_retry: false,
            dsm: 0x9A,
            reference_tag: 0xDEAD_BEEF,
            app_tag_mask: 0xFFFF,
            app_tag: 0x7788,
            target_sqid: 0x2A,
        }
    }

    fn nbth() -> Nbth {
        Nbth {
            initiator_function: InitiatorFunction::truncating(1),
            data_invalid: false,
            group: NcmdGroup::First,
            target_tag: TargetTag::truncating(2),
            ncnt_total: 3,
            initiator_tag: InitiatorTag::truncating(4),
            ncnt_offset: 1,
            icmd_id: IcmdId::truncating(5),
        }
    }

    #[test]
    fn write_request_layout_per_the_figure() {
        let repr = WriteRequest {
            nbth: nbth(),
            command: Command {
                limited_retry: true,
                ..command()
            },
            dtype: DirectiveType::truncating(0x5),
            dspec: 0xBEEF,
        };
        let mut bytes = [0xEEu8; 64];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[0], 0x10, "version 1, type 0");
        assert_eq!(&bytes[16..32], &[0; 16]);
        #[rustfmt::skip]
        let block: [u8; 32] = [
            0x01, 0x02, 0x03, 0x04, // initiator NSID | target NSID
            0x55, 0x66, 0x77, 0x88, // SLBA 31:0
            0x11, 0x22, 0x33, 0x44, // SLBA 63:32
            0x00, 0xFF, 0x05, 0b00_0101_1_1, // NLB | rsvd, DTYPE | rsvd, PRINFO, FUA, LR
            0x9A, 0x00, 0xBE, 0xEF, // DSM | rsvd | DSPEC
            0xDE, 0xAD, 0xBE, 0xEF, // ILBRT
            0xFF, 0xFF, 0x77, 0x88, // LBATM | LBAT
            0x00, 0x00, 0x00, 0x2A, // rsvd | target SQID
        ];
        assert_eq!(&bytes[32..], &block);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(WriteRequest::parse(&packet), Ok(repr));
    }

    #[test]
    fn read_request_leaves_the_write_fields_reserved() {
        let repr = ReadRequest {
            nbth: nbth(),
            command: command(),
        };
        let mut bytes = [0xEEu8; 64];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[0], 0x14, "version 1, type 4");
        assert_eq!(bytes[46], 0, "word 11 bits 16–23 reserved");
        assert_eq!(bytes[47], 0b00_0101_1_0);
        assert_eq!(&bytes[49..52], &[0, 0, 0], "word 12 bits 8–31 reserved");
        assert_eq!(&bytes[60..63], &[0, 0, 0]);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(ReadRequest::parse(&packet), Ok(repr));
        // A Read Request with the reserved bits set parses the same.
        bytes[46] = 0xFF;
        bytes[47] |= 0xC0;
        bytes[49..52].fill(0xFF);
        bytes[60..63].fill(0xFF);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(ReadRequest::parse(&packet), Ok(repr));
    }

    #[test]
    fn slba_low_word_first() {
        let mut bytes = [0u8; 64];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_slba(0x0000_0001_0000_0002);
        assert_eq!(&bytes[36..44], &[0, 0, 0, 2, 0, 0, 0, 1]);
    }

    #[test]
    fn length_and_type_are_checked() {
        let repr = ReadRequest {
            nbth: nbth(),
            command: command(),
        };
        let mut bytes = [0u8; 65];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..64]));
        assert_eq!(
            Packet::new_checked(&bytes[..63]).unwrap_err(),
            ParseError::Truncated {
                what: "NVMe Read/Write Request",
                need: 64,
                have: 63
            }
        );
        assert_eq!(
            ReadRequest::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::TrailingBytes {
                what: "Read Request",
                extra: 1
            })
        );
        assert_eq!(
            WriteRequest::parse(&Packet::new_checked(&bytes[..64]).unwrap()),
            Err(ParseError::UnexpectedPacketType {
                expected: PacketType::WriteRequest,
                found: PacketType::ReadRequest
            })
        );
    }
}
