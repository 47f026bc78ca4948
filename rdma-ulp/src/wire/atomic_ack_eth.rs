//! The Atomic Acknowledgement Extended Transport Header (AtomicAckETH), 8
//! bytes: the value an atomic found at the target.
//!
//! Layer: wire. Owns the view [`Packet`] and the value [`AtomicAckEth`].
//! Never panics on input after [`Packet::check_len`].
//!
//! RDMA-0.9 §8.3.7 (figure p.26), InfiniBand's AtomicAckETH:
//!
//! ```text
//!  word 0  Original Data 63:32
//!  word 1  Original Data 31:0
//! ```
//!
//! §8.3.7 puts it in the atomic response; the opcode table of §8.1.3 lists
//! it in the requests instead (see the [module doc](super)).

use core::fmt;

use super::bytes::{read_u64, write_u64};
use super::ParseError;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const ORIGINAL_DATA: Field = 0..8;
}

/// Length of an AtomicAckETH.
pub const HEADER_LEN: usize = field::ORIGINAL_DATA.end;

header_view!("AtomicAckETH", HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn original_data(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::ORIGINAL_DATA])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_original_data(&mut self, value: u64) {
        write_u64(&mut self.buffer.as_mut()[field::ORIGINAL_DATA], value);
    }
}

/// AtomicAckETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEth {
    /// The target's 64-bit value before the atomic.
    pub original_data: u64,
}

impl AtomicAckEth {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 8 bytes.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<AtomicAckEth, ParseError> {
        packet.check_len()?;
        Ok(AtomicAckEth {
            original_data: packet.original_data(),
        })
    }

    /// 8.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_original_data(self.original_data);
    }
}

extended_repr!(AtomicAckEth, AtomicAckEth);

impl fmt::Display for AtomicAckEth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AtomicAckETH original {:#x}", self.original_data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_per_the_figure() {
        let ack = AtomicAckEth {
            original_data: 0xFEDC_BA98_7654_3210,
        };
        let mut bytes = [0u8; 8];
        ack.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, [0xFE, 0xDC, 0xBA, 0x98, 0x76, 0x54, 0x32, 0x10]);
        assert_eq!(
            AtomicAckEth::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(ack)
        );
        assert!(Packet::new_checked(&bytes[..7]).is_err());
    }
}
