//! The RDMA Extended Transport Header (RETH), 16 bytes: the target buffer of
//! a WRITE or READ.
//!
//! Layer: wire. Owns the view [`Packet`] and the value [`Reth`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! RDMA-0.9 §8.3.1 (figure p.21), InfiniBand's RETH:
//!
//! ```text
//!  word 0  Virtual Address 63:32
//!  word 1  Virtual Address 31:0
//!  word 2  R_Key
//!  word 3  Length
//! ```
//!
//! Every WRITE packet carries one (RDMA-0.9 §6.7; InfiniBand puts it in the
//! first only) so that the target places each packet on its own. What the
//! fields of a later segment hold is not stated; ulp.md §1.6 decision D4
//! has each packet describe itself (its own VA and length), which the
//! queue pairs decide, not this layer.

use core::fmt;

use super::bytes::{read_u32, read_u64, write_u32, write_u64};
use super::{ParseError, RKey};

mod field {
    use crate::wire::bytes::Field;

    pub(super) const VIRTUAL_ADDRESS: Field = 0..8;
    pub(super) const R_KEY: Field = 8..12;
    pub(super) const LENGTH: Field = 12..16;
}

/// Length of a RETH.
pub const HEADER_LEN: usize = field::LENGTH.end;

header_view!("RETH", HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn virtual_address(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::VIRTUAL_ADDRESS])
    }

    pub fn r_key(&self) -> RKey {
        RKey(read_u32(&self.buffer.as_ref()[field::R_KEY]))
    }

    /// DMA length, in bytes.
    pub fn length(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::LENGTH])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_virtual_address(&mut self, value: u64) {
        write_u64(&mut self.buffer.as_mut()[field::VIRTUAL_ADDRESS], value);
    }

    pub fn set_r_key(&mut self, value: RKey) {
        write_u32(&mut self.buffer.as_mut()[field::R_KEY], value.0);
    }

    pub fn set_length(&mut self, value: u32) {
        write_u32(&mut self.buffer.as_mut()[field::LENGTH], value);
    }
}

/// RETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Reth {
    /// Target virtual address; any byte alignment.
    pub virtual_address: u64,
    /// The target's key for the region.
    pub r_key: RKey,
    /// Bytes to write or read.
    pub length: u32,
}

impl Reth {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 16 bytes.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Reth, ParseError> {
        packet.check_len()?;
        Ok(Reth {
            virtual_address: packet.virtual_address(),
            r_key: packet.r_key(),
            length: packet.length(),
        })
    }

    /// 16.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_virtual_address(self.virtual_address);
        packet.set_r_key(self.r_key);
        packet.set_length(self.length);
    }
}

extended_repr!(Reth, Reth);

impl fmt::Display for Reth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RETH va {:#x} rkey {} len {}",
            self.virtual_address, self.r_key, self.length
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_per_the_figure() {
        let reth = Reth {
            virtual_address: 0x0102_0304_0506_0708,
            r_key: RKey(0x1112_1314),
            length: 0x0000_1000,
        };
        let mut bytes = [0xEEu8; 17];
        reth.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            bytes,
            [
                0x01, 0x02, 0x03, 0x04, // VA 63:32
                0x05, 0x06, 0x07, 0x08, // VA 31:0
                0x11, 0x12, 0x13, 0x14, // R_Key
                0x00, 0x00, 0x10, 0x00, // Length
                0xEE, // not the RETH's
            ]
        );
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Reth::parse(&packet), Ok(reth));
        assert_eq!(packet.rest(), &[0xEE]);
        assert!(matches!(
            Packet::new_checked(&bytes[..15]),
            Err(ParseError::Truncated {
                what: "RETH",
                need: 16,
                have: 15
            })
        ));
    }
}
