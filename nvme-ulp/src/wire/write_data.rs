//! Write Data Response: the NBTH, a reserved word and one nCMD's write data,
//! sent by the initiator as the Falcon Pull Data answering a Write Data
//! Request.
//!
//! Layer: wire. Owns the view [`Packet`] and the [`WriteDataResponse`]
//! value; re-exports [`WriteDataRequest`], which is the NBTH alone. Never
//! panics on input after [`Packet::check_len`].
//!
//! NVMe-0.9 §8.7 (figure p.34):
//!
//! ```text
//!  words 0–7  NBTH
//!  word 8     reserved
//!  word 9–    Write Data, at most 4224 bytes, DIX layout (all data blocks,
//!             then all metadata)
//! ```

use super::nbth::{self, Nbth};
use super::{PacketType, ParseError, MAX_DATA_LEN};

pub use super::nbth::WriteDataRequest;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const RESERVED: Field = 32..36;
}

/// Length of a Write Data Response's header.
pub const RESPONSE_HEADER_LEN: usize = field::RESERVED.end;

/// A read/write view of a Write Data Response.
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
    /// [`ParseError::Truncated`] naming the Write Data Response.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < RESPONSE_HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "NVMe Write Data Response",
                need: RESPONSE_HEADER_LEN,
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

    /// Bytes after the 36-byte header.
    pub fn data_len(&self) -> usize {
        self.buffer.as_ref().len() - RESPONSE_HEADER_LEN
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The Write Data: everything after the header.
    pub fn data(&self) -> &'a [u8] {
        &self.buffer.as_ref()[RESPONSE_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The NBTH, writable.
    pub fn nbth_mut(&mut self) -> nbth::Packet<&mut [u8]> {
        nbth::Packet::new_unchecked(&mut self.buffer.as_mut()[..nbth::HEADER_LEN])
    }

    /// Zeroes word 8.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }

    /// Everything after the header, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[RESPONSE_HEADER_LEN..]
    }
}

/// Write Data Response (type 2, NVMe-0.9 §8.7). The data follows the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WriteDataResponse {
    pub nbth: Nbth,
    /// Bytes of Write Data (≤ [`MAX_DATA_LEN`]).
    pub data_len: u16,
}

impl WriteDataResponse {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 36 bytes, the NBTH's errors, or
    /// [`ParseError::DataTooLong`] above 36 + 4224.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<WriteDataResponse, ParseError> {
        packet.check_len()?;
        let nbth = Nbth::parse_typed(&packet.nbth(), PacketType::WriteDataResponse)?;
        let len = packet.data_len();
        if len > MAX_DATA_LEN {
            return Err(ParseError::DataTooLong { len });
        }
        Ok(WriteDataResponse {
            nbth,
            // Fits: at most MAX_DATA_LEN (4224).
            data_len: len as u16,
        })
    }

    /// Bytes [`emit`](Self::emit) writes (36).
    pub const fn header_len(&self) -> usize {
        RESPONSE_HEADER_LEN
    }

    /// Header and data.
    pub const fn buffer_len(&self) -> usize {
        RESPONSE_HEADER_LEN + self.data_len as usize
    }

    /// Writes the 36-byte header; the data after it is the caller's.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`RESPONSE_HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.nbth
            .emit_typed(PacketType::WriteDataResponse, &mut packet.nbth_mut());
        packet.clear_reserved();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::nbth::{IcmdId, TargetTag};

    #[test]
    fn header_is_nbth_and_a_reserved_word() {
        let repr = WriteDataResponse {
            nbth: Nbth {
                data_invalid: true,
                target_tag: TargetTag::truncating(0x10_2030),
                icmd_id: IcmdId::truncating(9),
                ..Nbth::default()
            },
            data_len: 3,
        };
        let mut bytes = [0xEEu8; 39];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[0], 0x12);
        assert_eq!(bytes[4], 0x20, "INV");
        assert_eq!(&bytes[32..36], &[0; 4]);
        assert_eq!(&bytes[36..], &[0xEE; 3], "data untouched");
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(WriteDataResponse::parse(&packet), Ok(repr));
        assert_eq!(packet.data(), &[0xEE; 3]);
        bytes[32..36].fill(0xFF);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            WriteDataResponse::parse(&packet),
            Ok(repr),
            "reserved word ignored"
        );
    }

    #[test]
    fn data_is_bounded() {
        let repr = WriteDataResponse {
            nbth: Nbth::default(),
            data_len: 0,
        };
        let mut bytes = vec![0u8; RESPONSE_HEADER_LEN + MAX_DATA_LEN + 1];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            WriteDataResponse::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::DataTooLong { len: 4225 })
        );
        let packet = Packet::new_checked(&bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(
            WriteDataResponse::parse(&packet).map(|r| r.data_len),
            Ok(4224)
        );
        assert!(matches!(
            Packet::new_checked(&bytes[..35]),
            Err(ParseError::Truncated {
                need: 36,
                have: 35,
                ..
            })
        ));
    }
}
