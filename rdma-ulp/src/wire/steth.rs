//! The Sink Tag Extended Transport Header (STETH), 12 bytes: where the
//! initiator places a READ or ATOMIC response.
//!
//! Layer: wire. Owns the view [`Packet`] and the value [`Steth`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! RDMA-0.9 §8.3.4 (figure p.23), a Falcon header with no InfiniBand
//! counterpart:
//!
//! ```text
//!  word 0  Virtual Address 63:32
//!  word 1  Virtual Address 31:0
//!  word 2  L_Key
//! ```
//!
//! The initiator puts it in the request; the target returns it unchanged in
//! the response, so that responses are placed without initiator state.

use core::fmt;

use super::bytes::{read_u32, read_u64, write_u32, write_u64};
use super::{LKey, ParseError};

mod field {
    use crate::wire::bytes::Field;

    pub(super) const VIRTUAL_ADDRESS: Field = 0..8;
    pub(super) const L_KEY: Field = 8..12;
}

/// Length of a STETH.
pub const HEADER_LEN: usize = field::L_KEY.end;

header_view!("STETH", HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn virtual_address(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::VIRTUAL_ADDRESS])
    }

    pub fn l_key(&self) -> LKey {
        LKey(read_u32(&self.buffer.as_ref()[field::L_KEY]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_virtual_address(&mut self, value: u64) {
        write_u64(&mut self.buffer.as_mut()[field::VIRTUAL_ADDRESS], value);
    }

    pub fn set_l_key(&mut self, value: LKey) {
        write_u32(&mut self.buffer.as_mut()[field::L_KEY], value.0);
    }
}

/// STETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Steth {
    /// Initiator sink-buffer address of the response's first data byte.
    pub virtual_address: u64,
    /// The initiator's key for the sink buffer.
    pub l_key: LKey,
}

impl Steth {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 12 bytes.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Steth, ParseError> {
        packet.check_len()?;
        Ok(Steth {
            virtual_address: packet.virtual_address(),
            l_key: packet.l_key(),
        })
    }

    /// 12.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_virtual_address(self.virtual_address);
        packet.set_l_key(self.l_key);
    }
}

extended_repr!(Steth, Steth);

impl fmt::Display for Steth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "STETH va {:#x} lkey {}",
            self.virtual_address, self.l_key
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_per_the_figure() {
        let steth = Steth {
            virtual_address: 0x7F00_DEAD_BEEF_0040,
            l_key: LKey(0x0000_0A0B),
        };
        let mut bytes = [0u8; 12];
        steth.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            bytes,
            [
                0x7F, 0x00, 0xDE, 0xAD, // VA 63:32
                0xBE, 0xEF, 0x00, 0x40, // VA 31:0
                0x00, 0x00, 0x0A, 0x0B, // L_Key
            ]
        );
        assert_eq!(
            Steth::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(steth)
        );
        assert!(Packet::new_checked(&bytes[..11]).is_err());
    }
}
