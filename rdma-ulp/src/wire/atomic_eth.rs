//! The Atomic Extended Transport Header (AtomicETH), 28 bytes: the target
//! address and operands of an ATOMIC CmpSwap or FetchAdd.
//!
//! Layer: wire. Owns the view [`Packet`] and the value [`AtomicEth`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! RDMA-0.9 §8.3.6 (figure p.25), InfiniBand's AtomicETH (packed: the
//! 64-bit operands start at bytes 12 and 20, not on 8-byte boundaries):
//!
//! ```text
//!  word 0  Virtual Address 63:32
//!  word 1  Virtual Address 31:0
//!  word 2  R_Key
//!  word 3  Swap / Add Data 63:32
//!  word 4  Swap / Add Data 31:0
//!  word 5  Compare Data 63:32
//!  word 6  Compare Data 31:0
//! ```
//!
//! §8.3.6 puts it in the atomic requests; the opcode table of §8.1.3 lists
//! it in the ATOMIC Response instead (see the [module doc](super)).

use core::fmt;

use super::bytes::{read_u32, read_u64, write_u32, write_u64};
use super::{ParseError, RKey};

mod field {
    use crate::wire::bytes::Field;

    pub(super) const VIRTUAL_ADDRESS: Field = 0..8;
    pub(super) const R_KEY: Field = 8..12;
    pub(super) const SWAP_OR_ADD: Field = 12..20;
    pub(super) const COMPARE: Field = 20..28;
}

/// Length of an AtomicETH.
pub const HEADER_LEN: usize = field::COMPARE.end;

header_view!("AtomicETH", HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn virtual_address(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::VIRTUAL_ADDRESS])
    }

    pub fn r_key(&self) -> RKey {
        RKey(read_u32(&self.buffer.as_ref()[field::R_KEY]))
    }

    pub fn swap_or_add(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::SWAP_OR_ADD])
    }

    pub fn compare(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::COMPARE])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_virtual_address(&mut self, value: u64) {
        write_u64(&mut self.buffer.as_mut()[field::VIRTUAL_ADDRESS], value);
    }

    pub fn set_r_key(&mut self, value: RKey) {
        write_u32(&mut self.buffer.as_mut()[field::R_KEY], value.0);
    }

    pub fn set_swap_or_add(&mut self, value: u64) {
        write_u64(&mut self.buffer.as_mut()[field::SWAP_OR_ADD], value);
    }

    pub fn set_compare(&mut self, value: u64) {
        write_u64(&mut self.buffer.as_mut()[field::COMPARE], value);
    }
}

/// AtomicETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEth {
    /// Target address of the 64-bit operand.
    pub virtual_address: u64,
    /// The target's key for the region.
    pub r_key: RKey,
    /// CmpSwap: the value swapped in if the compare matches. FetchAdd: the
    /// addend.
    pub swap_or_add: u64,
    /// CmpSwap: the value compared with the target's. FetchAdd: unused.
    pub compare: u64,
}

impl AtomicEth {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 28 bytes.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<AtomicEth, ParseError> {
        packet.check_len()?;
        Ok(AtomicEth {
            virtual_address: packet.virtual_address(),
            r_key: packet.r_key(),
            swap_or_add: packet.swap_or_add(),
            compare: packet.compare(),
        })
    }

    /// 28.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_virtual_address(self.virtual_address);
        packet.set_r_key(self.r_key);
        packet.set_swap_or_add(self.swap_or_add);
        packet.set_compare(self.compare);
    }
}

extended_repr!(AtomicEth, AtomicEth);

impl fmt::Display for AtomicEth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AtomicETH va {:#x} rkey {} swap/add {:#x} compare {:#x}",
            self.virtual_address, self.r_key, self.swap_or_add, self.compare
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_per_the_figure() {
        let atomic = AtomicEth {
            virtual_address: 0x0001_0002_0003_0008,
            r_key: RKey(0x0000_00AA),
            swap_or_add: 0x1111_2222_3333_4444,
            compare: 0x5555_6666_7777_8888,
        };
        let mut bytes = [0u8; 28];
        atomic.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            bytes,
            [
                0x00, 0x01, 0x00, 0x02, 0x00, 0x03, 0x00, 0x08, // VA
                0x00, 0x00, 0x00, 0xAA, // R_Key
                0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, // Swap / Add
                0x55, 0x55, 0x66, 0x66, 0x77, 0x77, 0x88, 0x88, // Compare
            ]
        );
        assert_eq!(
            AtomicEth::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(atomic)
        );
        assert!(Packet::new_checked(&bytes[..27]).is_err());
    }
}
