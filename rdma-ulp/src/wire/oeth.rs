//! The Offset Extended Transport Header (OETH), 4 bytes: where in its
//! message a SEND packet's data goes, for out-of-order placement.
//!
//! Layer: wire. Owns the view [`Packet`] and the value [`Oeth`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! RDMA-0.9 §8.3.3 (figure p.23), a Falcon header with no InfiniBand
//! counterpart:
//!
//! ```text
//!  word 0  Message Offset
//! ```
//!
//! The target finds the RQ WQE from the SETH and walks its scatter list to
//! the offset.

use core::fmt;

use super::bytes::{read_u32, write_u32};
use super::ParseError;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const MESSAGE_OFFSET: Field = 0..4;
}

/// Length of an OETH.
pub const HEADER_LEN: usize = field::MESSAGE_OFFSET.end;

header_view!("OETH", HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn message_offset(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::MESSAGE_OFFSET])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_message_offset(&mut self, value: u32) {
        write_u32(&mut self.buffer.as_mut()[field::MESSAGE_OFFSET], value);
    }
}

/// OETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Oeth {
    /// Byte offset in the message of this packet's first payload byte.
    pub message_offset: u32,
}

impl Oeth {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 4 bytes.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Oeth, ParseError> {
        packet.check_len()?;
        Ok(Oeth {
            message_offset: packet.message_offset(),
        })
    }

    /// 4.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_message_offset(self.message_offset);
    }
}

extended_repr!(Oeth, Oeth);

impl fmt::Display for Oeth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OETH offset {}", self.message_offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_per_the_figure() {
        // The third 4096-byte segment of a message starts at offset 8192.
        let oeth = Oeth {
            message_offset: 8192,
        };
        let mut bytes = [0u8; 4];
        oeth.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, [0x00, 0x00, 0x20, 0x00]);
        assert_eq!(
            Oeth::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(oeth)
        );
        assert!(Packet::new_checked(&bytes[..3]).is_err());
    }
}
