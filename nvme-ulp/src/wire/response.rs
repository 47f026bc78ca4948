//! Read Response and Write Completion: the NBTH and a status word, pushed
//! by the target, one per nCMD; a Read Response carries the nCMD's data.
//!
//! Layer: wire. Owns the response view [`Packet`] and the [`ReadResponse`]
//! and [`WriteCompletion`] values. Never panics on input after
//! [`Packet::check_len`].
//!
//! NVMe-0.9 §8.4 (figure p.30) and §8.8 (figure p.35):
//!
//! ```text
//!  words 0–7  NBTH
//!  word 8     bits 0–15 reserved   bits 16–31 NVMe CQE Status Field
//!  word 9–    Read Data (Read Response only), at most 4224 bytes, DIF layout
//! ```
//!
//! The 15-bit status sits in the half-word as NVMe CQE DW3[31:16] with the
//! Phase Tag cleared (decision D9, [`crate::status`]). A Read Response in
//! error may carry no data (ulp.md §3.9).

use super::bytes::{read_u16, write_u16};
use super::nbth::{self, Nbth};
use super::{PacketType, ParseError, MAX_DATA_LEN};
use crate::status::Status;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const RESERVED: Field = 32..34;
    pub(super) const STATUS: Field = 34..36;
}

/// Length of a Write Completion, and of a Read Response's header.
pub const HEADER_LEN: usize = field::STATUS.end;

/// A read/write view of a Read Response or Write Completion.
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

    /// Ensures every accessor stays in bounds: 36 bytes. The data length is
    /// judged by the `Repr` parse.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the response.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "NVMe Read Response/Write Completion",
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

    /// The status half-word as received (Phase Tag bit included).
    pub fn status_word(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::STATUS])
    }

    pub fn status(&self) -> Status {
        Status::from_half_word(self.status_word())
    }

    /// Bytes after the 36-byte header.
    pub fn data_len(&self) -> usize {
        self.buffer.as_ref().len() - HEADER_LEN
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The Read Data: everything after the header.
    pub fn data(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The NBTH, writable.
    pub fn nbth_mut(&mut self) -> nbth::Packet<&mut [u8]> {
        nbth::Packet::new_unchecked(&mut self.buffer.as_mut()[..nbth::HEADER_LEN])
    }

    /// Sets the status half-word and clears word 8 bits 0–15.
    pub fn set_status(&mut self, status: Status) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
        write_u16(
            &mut self.buffer.as_mut()[field::STATUS],
            status.to_half_word(),
        );
    }

    /// Everything after the header, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// Write Completion (type 3, NVMe-0.9 §8.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WriteCompletion {
    pub nbth: Nbth,
    pub status: Status,
}

impl WriteCompletion {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 36 bytes, the NBTH's errors, or
    /// [`ParseError::TrailingBytes`] above.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<WriteCompletion, ParseError> {
        packet.check_len()?;
        let nbth = Nbth::parse_typed(&packet.nbth(), PacketType::WriteCompletion)?;
        let extra = packet.data_len();
        if extra != 0 {
            return Err(ParseError::TrailingBytes {
                what: "Write Completion",
                extra,
            });
        }
        Ok(WriteCompletion {
            nbth,
            status: packet.status(),
        })
    }

    /// 36.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.nbth
            .emit_typed(PacketType::WriteCompletion, &mut packet.nbth_mut());
        packet.set_status(self.status);
    }
}

/// Read Response (type 5, NVMe-0.9 §8.4). The data follows the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReadResponse {
    pub nbth: Nbth,
    pub status: Status,
    /// Bytes of Read Data (≤ [`MAX_DATA_LEN`]).
    pub data_len: u16,
}

impl ReadResponse {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 36 bytes, the NBTH's errors, or
    /// [`ParseError::DataTooLong`] above 36 + 4224.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<ReadResponse, ParseError> {
        packet.check_len()?;
        let nbth = Nbth::parse_typed(&packet.nbth(), PacketType::ReadResponse)?;
        let len = packet.data_len();
        if len > MAX_DATA_LEN {
            return Err(ParseError::DataTooLong { len });
        }
        Ok(ReadResponse {
            nbth,
            status: packet.status(),
            // Fits: at most MAX_DATA_LEN (4224).
            data_len: len as u16,
        })
    }

    /// Bytes [`emit`](Self::emit) writes (36).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header and data.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data_len as usize
    }

    /// Writes the 36-byte header; the data after it is the caller's.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.nbth
            .emit_typed(PacketType::ReadResponse, &mut packet.nbth_mut());
        packet.set_status(self.status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::nbth::{IcmdId, InitiatorTag};

    fn nbth() -> Nbth {
        Nbth {
            initiator_tag: InitiatorTag::truncating(0x00_0102),
            icmd_id: IcmdId::truncating(0x03_0405),
            ..Nbth::default()
        }
    }

    #[test]
    fn status_is_the_second_half_of_word_8() {
        let repr = WriteCompletion {
            nbth: nbth(),
            status: Status::GUARD_CHECK,
        };
        let mut bytes = [0xEEu8; 36];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[0], 0x13);
        // DNR (bit 15) | SCT 2 (bits 11:9) | SC 0x82 (bits 8:1), P = 0.
        assert_eq!(&bytes[32..36], &[0x00, 0x00, 0x85, 0x04]);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(WriteCompletion::parse(&packet), Ok(repr));
        // The Phase Tag and the reserved half are ignored.
        bytes[32] = 0xFF;
        bytes[35] |= 1;
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.status_word() & 1, 1);
        assert_eq!(WriteCompletion::parse(&packet), Ok(repr));
    }

    #[test]
    fn write_completion_has_no_data() {
        let repr = WriteCompletion {
            nbth: nbth(),
            status: Status::SUCCESS,
        };
        let mut bytes = [0u8; 37];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            WriteCompletion::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::TrailingBytes {
                what: "Write Completion",
                extra: 1
            })
        );
    }

    #[test]
    fn read_response_data_is_zero_copy_and_bounded() {
        let mut bytes = vec![0u8; HEADER_LEN + MAX_DATA_LEN + 1];
        for (i, byte) in bytes[HEADER_LEN..].iter_mut().enumerate() {
            *byte = i as u8;
        }
        let repr = ReadResponse {
            nbth: nbth(),
            status: Status::SUCCESS,
            data_len: MAX_DATA_LEN as u16,
        };
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[0], 0x15);
        let full = &bytes[..repr.buffer_len()];
        let packet = Packet::new_checked(full).unwrap();
        assert_eq!(ReadResponse::parse(&packet), Ok(repr));
        assert_eq!(packet.data().as_ptr(), full[HEADER_LEN..].as_ptr());
        assert_eq!(packet.data()[4223], (4223 % 256) as u8);
        assert_eq!(
            ReadResponse::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::DataTooLong { len: 4225 })
        );
        let empty = ReadResponse {
            data_len: 0,
            status: Status::UNRECOVERED_READ,
            ..repr
        };
        let mut header = [0u8; HEADER_LEN];
        empty.emit(&mut Packet::new_unchecked(&mut header[..]));
        assert_eq!(
            ReadResponse::parse(&Packet::new_checked(&header[..]).unwrap()),
            Ok(empty)
        );
    }
}
