//! Command Request and Command Response: our vendor extension in the
//! reserved NVMe packet types, for the NVM commands rev 0.9 does not map
//! (Flush first).
//!
//! Layer: wire. Owns the views [`RequestPacket`] and [`ResponsePacket`],
//! the [`CommandRequest`] and [`CommandResponse`] values, and the raw NVMe
//! queue entries they carry ([`Sqe`], [`Cqe`]). Never panics on input after
//! `check_len`.
//!
//! NVMe-0.9 maps only NVM Read and Write; types 6–15 are reserved
//! (§8.1.3). ulp.md §3.9 proposes carrying other commands as raw NVMe
//! queue entries in types 6 and 7, turned off by default; both ends must
//! enable it (the initiator's and target's `vendor_commands`). We add one
//! word to that proposal: a Command Request names its Target SQID in word
//! 8, where a Read or Write Request has it in its command block (word 15),
//! because a raw SQE has no field for the queue it is on.
//!
//! ```text
//!  type 6  Command Request  (initiator, Push Request)
//!  words 0–7    NBTH (iCMD Identifier and Initiator Tag as in a Read Request)
//!  word 8       0–23 reserved   24–31 Target SQID
//!  words 9–24   NVMe SQE, 64 bytes, little-endian as in NVMe
//!  words 25–    in-capsule data, at most 4096 bytes
//!
//!  type 7  Command Response (target, Push Request)
//!  words 0–7    NBTH (the request's, Target Tag 0)
//!  words 8–11   NVMe CQE, 16 bytes, little-endian as in NVMe
//!  words 12–    data, at most 4096 bytes
//! ```
//!
//! The queue entries keep NVMe's own layout and byte order (NVMe Base 2.0
//! §4.2 Figure 91, §4.2.1 Figure 92), unlike the rest of the packet (D6):
//! they are NVMe's bytes carried opaque, so that a target can hand them to
//! a device as they are. The CQE's Status Field is DW3 bits 31:17, the
//! Phase Tag (bit 16) is sent clear (D9).

use super::nbth::{self, Nbth};
use super::{PacketType, ParseError};
use crate::status::Status;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const RESERVED: Field = 32..35;
    pub(super) const TARGET_SQID: usize = 35;
    pub(super) const SQE: Field = 36..100;
    pub(super) const CQE: Field = 32..48;
}

/// Length of a Command Request's header (NBTH, word 8, SQE).
pub const REQUEST_HEADER_LEN: usize = field::SQE.end;
/// Length of a Command Response's header (NBTH, CQE).
pub const RESPONSE_HEADER_LEN: usize = field::CQE.end;
/// Most in-capsule data a command packet carries.
pub const MAX_CAPSULE_LEN: usize = 4096;
/// Bytes of an NVMe submission queue entry.
pub const SQE_LEN: usize = 64;
/// Bytes of an NVMe completion queue entry.
pub const CQE_LEN: usize = 16;

/// NVM command set opcodes (NVMe NVM Command Set 1.0 §3, Figure 14) the
/// extension knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NvmOpcode {
    Flush = 0x00,
    Write = 0x01,
    Read = 0x02,
    WriteZeroes = 0x08,
    DatasetManagement = 0x09,
}

/// An NVMe submission queue entry, 64 bytes in NVMe's layout
/// (little-endian dwords; NVMe Base 2.0 §4.2 Figure 91).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sqe(pub [u8; SQE_LEN]);

impl Default for Sqe {
    fn default() -> Sqe {
        Sqe([0; SQE_LEN])
    }
}

impl Sqe {
    /// A Flush of namespace `nsid` (NVM Command Set 1.0 §3.2.1: no other
    /// field is used).
    pub fn flush(cid: u16, nsid: u32) -> Sqe {
        let mut sqe = Sqe::default();
        sqe.set_dword(0, u32::from(cid) << 16 | NvmOpcode::Flush as u32);
        sqe.set_dword(1, nsid);
        sqe
    }

    /// Dword `index` (0..16).
    pub fn dword(&self, index: usize) -> u32 {
        let at = index * 4;
        self.0
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, u32::from_le_bytes)
    }

    fn set_dword(&mut self, index: usize, value: u32) {
        let at = index * 4;
        if let Some(bytes) = self.0.get_mut(at..at + 4) {
            bytes.copy_from_slice(&value.to_le_bytes());
        }
    }

    /// Opcode (CDW0 bits 7:0).
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }

    /// Fused operation (CDW0 bits 9:8).
    pub fn fuse(&self) -> u8 {
        self.0[1] & 0x3
    }

    /// Command Identifier (CDW0 bits 31:16).
    pub fn cid(&self) -> u16 {
        (self.dword(0) >> 16) as u16
    }

    /// Namespace Identifier (CDW1).
    pub fn nsid(&self) -> u32 {
        self.dword(1)
    }
}

/// An NVMe completion queue entry (NVMe Base 2.0 §4.2.1 Figure 92).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cqe {
    /// DW0, command specific.
    pub dw0: u32,
    /// DW1, command specific.
    pub dw1: u32,
    /// SQ Head Pointer (DW2 bits 15:0).
    pub sqhd: u16,
    /// SQ Identifier (DW2 bits 31:16).
    pub sqid: u16,
    /// Command Identifier (DW3 bits 15:0), the SQE's.
    pub cid: u16,
    /// Status Field (DW3 bits 31:17).
    pub status: Status,
}

impl Cqe {
    fn from_bytes(bytes: &[u8; CQE_LEN]) -> Cqe {
        let dword =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let (dw2, dw3) = (dword(8), dword(12));
        Cqe {
            dw0: dword(0),
            dw1: dword(4),
            sqhd: dw2 as u16,
            sqid: (dw2 >> 16) as u16,
            cid: dw3 as u16,
            status: Status::from_half_word((dw3 >> 16) as u16),
        }
    }

    fn to_bytes(self) -> [u8; CQE_LEN] {
        let mut bytes = [0u8; CQE_LEN];
        let dw2 = u32::from(self.sqid) << 16 | u32::from(self.sqhd);
        let dw3 = u32::from(self.status.to_half_word()) << 16 | u32::from(self.cid);
        for (i, dword) in [self.dw0, self.dw1, dw2, dw3].into_iter().enumerate() {
            bytes[i * 4..i * 4 + 4].copy_from_slice(&dword.to_le_bytes());
        }
        bytes
    }
}

/// A read/write view of a Command Request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RequestPacket<T> {
    /// Wraps a buffer without checking it. Use for emitting.
    pub const fn new_unchecked(buffer: T) -> RequestPacket<T> {
        RequestPacket { buffer }
    }

    /// Wraps a buffer and checks its length. Use on received bytes.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below [`REQUEST_HEADER_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<RequestPacket<T>, ParseError> {
        let have = buffer.as_ref().len();
        if have < REQUEST_HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "NVMe Command Request",
                need: REQUEST_HEADER_LEN,
                have,
            });
        }
        Ok(RequestPacket { buffer })
    }

    /// The NBTH, the first 32 bytes.
    pub fn nbth(&self) -> nbth::Packet<&[u8]> {
        nbth::Packet::new_unchecked(&self.buffer.as_ref()[..nbth::HEADER_LEN])
    }

    pub fn target_sqid(&self) -> u8 {
        self.buffer.as_ref()[field::TARGET_SQID]
    }

    pub fn sqe(&self) -> Sqe {
        let mut sqe = Sqe::default();
        sqe.0.copy_from_slice(&self.buffer.as_ref()[field::SQE]);
        sqe
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> RequestPacket<&'a T> {
    /// The in-capsule data: everything after the header.
    pub fn data(&self) -> &'a [u8] {
        &self.buffer.as_ref()[REQUEST_HEADER_LEN..]
    }
}

/// Command Request (type 6, vendor extension). In-capsule data follows
/// the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CommandRequest {
    pub nbth: Nbth,
    pub target_sqid: u8,
    pub sqe: Sqe,
    /// Bytes of in-capsule data (≤ [`MAX_CAPSULE_LEN`]).
    pub data_len: u16,
}

impl CommandRequest {
    /// # Errors
    ///
    /// The NBTH's errors, or [`ParseError::DataTooLong`] above
    /// [`MAX_CAPSULE_LEN`] bytes of data.
    pub fn parse<T: AsRef<[u8]>>(packet: &RequestPacket<T>) -> Result<CommandRequest, ParseError> {
        let nbth = Nbth::parse_typed(&packet.nbth(), PacketType::CommandRequest)?;
        let len = packet.buffer.as_ref().len() - REQUEST_HEADER_LEN;
        if len > MAX_CAPSULE_LEN {
            return Err(ParseError::DataTooLong { len });
        }
        Ok(CommandRequest {
            nbth,
            target_sqid: packet.target_sqid(),
            sqe: packet.sqe(),
            // Fits: at most MAX_CAPSULE_LEN (4096).
            data_len: len as u16,
        })
    }

    /// Writes the 100-byte header into `buffer[..REQUEST_HEADER_LEN]`.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`REQUEST_HEADER_LEN`].
    pub fn emit(&self, buffer: &mut [u8]) {
        let header = &mut buffer[..REQUEST_HEADER_LEN];
        self.nbth.emit_typed(
            PacketType::CommandRequest,
            &mut nbth::Packet::new_unchecked(&mut header[..nbth::HEADER_LEN]),
        );
        header[field::RESERVED].fill(0);
        header[field::TARGET_SQID] = self.target_sqid;
        header[field::SQE].copy_from_slice(&self.sqe.0);
    }
}

/// A read view of a Command Response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponsePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ResponsePacket<T> {
    /// Wraps a buffer and checks its length.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below [`RESPONSE_HEADER_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<ResponsePacket<T>, ParseError> {
        let have = buffer.as_ref().len();
        if have < RESPONSE_HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "NVMe Command Response",
                need: RESPONSE_HEADER_LEN,
                have,
            });
        }
        Ok(ResponsePacket { buffer })
    }

    /// The NBTH, the first 32 bytes.
    pub fn nbth(&self) -> nbth::Packet<&[u8]> {
        nbth::Packet::new_unchecked(&self.buffer.as_ref()[..nbth::HEADER_LEN])
    }

    pub fn cqe(&self) -> Cqe {
        let mut bytes = [0u8; CQE_LEN];
        bytes.copy_from_slice(&self.buffer.as_ref()[field::CQE]);
        Cqe::from_bytes(&bytes)
    }

    /// DW3 as received, Phase Tag included.
    pub fn cqe_dw3(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::CQE];
        u32::from_le_bytes([b[12], b[13], b[14], b[15]])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> ResponsePacket<&'a T> {
    /// The data: everything after the header.
    pub fn data(&self) -> &'a [u8] {
        &self.buffer.as_ref()[RESPONSE_HEADER_LEN..]
    }
}

/// Command Response (type 7, vendor extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CommandResponse {
    pub nbth: Nbth,
    pub cqe: Cqe,
    /// Bytes of data (≤ [`MAX_CAPSULE_LEN`]).
    pub data_len: u16,
}

impl CommandResponse {
    /// # Errors
    ///
    /// The NBTH's errors, or [`ParseError::DataTooLong`] above
    /// [`MAX_CAPSULE_LEN`] bytes of data.
    pub fn parse<T: AsRef<[u8]>>(
        packet: &ResponsePacket<T>,
    ) -> Result<CommandResponse, ParseError> {
        let nbth = Nbth::parse_typed(&packet.nbth(), PacketType::CommandResponse)?;
        let len = packet.buffer.as_ref().len() - RESPONSE_HEADER_LEN;
        if len > MAX_CAPSULE_LEN {
            return Err(ParseError::DataTooLong { len });
        }
        Ok(CommandResponse {
            nbth,
            cqe: packet.cqe(),
            // Fits: at most MAX_CAPSULE_LEN (4096).
            data_len: len as u16,
        })
    }

    /// Writes the 48-byte header into `buffer[..RESPONSE_HEADER_LEN]`.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`RESPONSE_HEADER_LEN`].
    pub fn emit(&self, buffer: &mut [u8]) {
        let header = &mut buffer[..RESPONSE_HEADER_LEN];
        self.nbth.emit_typed(
            PacketType::CommandResponse,
            &mut nbth::Packet::new_unchecked(&mut header[..nbth::HEADER_LEN]),
        );
        header[field::CQE].copy_from_slice(&self.cqe.to_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::nbth::{IcmdId, InitiatorTag};

    #[test]
    fn flush_sqe_is_nvme_little_endian() {
        let sqe = Sqe::flush(0x1234, 7);
        assert_eq!(&sqe.0[..8], &[0x00, 0x00, 0x34, 0x12, 7, 0, 0, 0]);
        assert!(sqe.0[8..].iter().all(|&b| b == 0));
        assert_eq!(
            (sqe.opcode(), sqe.cid(), sqe.nsid(), sqe.fuse()),
            (0, 0x1234, 7, 0)
        );
    }

    #[test]
    fn request_round_trips_with_sqid_in_word_8() {
        let repr = CommandRequest {
            nbth: Nbth {
                icmd_id: IcmdId::truncating(0x0A_0B0C),
                initiator_tag: InitiatorTag::truncating(3),
                ..Nbth::default()
            },
            target_sqid: 9,
            sqe: Sqe::flush(5, 2),
            data_len: 2,
        };
        let mut bytes = [0xEEu8; REQUEST_HEADER_LEN + 2];
        repr.emit(&mut bytes);
        assert_eq!(bytes[0], 0x16, "version 1, type 6");
        assert_eq!(&bytes[32..36], &[0, 0, 0, 9]);
        assert_eq!(&bytes[36..40], &[0, 0, 5, 0]);
        let packet = RequestPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(CommandRequest::parse(&packet), Ok(repr));
        assert_eq!(packet.data(), &[0xEE; 2]);
    }

    #[test]
    fn response_round_trips_with_status_in_dw3() {
        let repr = CommandResponse {
            nbth: Nbth {
                icmd_id: IcmdId::truncating(77),
                ..Nbth::default()
            },
            cqe: Cqe {
                dw0: 1,
                dw1: 2,
                sqhd: 3,
                sqid: 4,
                cid: 0xBEEF,
                status: Status::WRITE_FAULT,
            },
            data_len: 0,
        };
        let mut bytes = [0u8; RESPONSE_HEADER_LEN];
        repr.emit(&mut bytes);
        assert_eq!(bytes[0], 0x17, "version 1, type 7");
        let packet = ResponsePacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(CommandResponse::parse(&packet), Ok(repr));
        let dw3 = packet.cqe_dw3();
        assert_eq!(dw3 & 0xFFFF, 0xBEEF);
        assert_eq!(dw3 & (1 << 16), 0, "phase tag clear");
        assert_eq!((dw3 >> 16) as u16, Status::WRITE_FAULT.to_half_word());
    }

    #[test]
    fn lengths_are_checked() {
        assert!(matches!(
            RequestPacket::new_checked(&[0u8; REQUEST_HEADER_LEN - 1][..]),
            Err(ParseError::Truncated { need: 100, .. })
        ));
        assert!(matches!(
            ResponsePacket::new_checked(&[0u8; RESPONSE_HEADER_LEN - 1][..]),
            Err(ParseError::Truncated { need: 48, .. })
        ));
        let mut bytes = vec![0u8; REQUEST_HEADER_LEN + MAX_CAPSULE_LEN + 1];
        CommandRequest::default().emit(&mut bytes);
        let packet = RequestPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            CommandRequest::parse(&packet),
            Err(ParseError::DataTooLong { len: 4097 })
        );
    }
}
