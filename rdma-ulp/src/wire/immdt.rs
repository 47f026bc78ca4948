//! The Immediate Extended Transport Header (ImmDt), 4 bytes: the immediate
//! data of a SEND or WRITE with Immediate, for the target's CQE.
//!
//! Layer: wire. Owns the view [`Packet`] and the value [`ImmDt`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! RDMA-0.9 §8.3.5 (figure p.24), InfiniBand's ImmDt:
//!
//! ```text
//!  word 0  Immediate Data
//! ```

use core::fmt;

use super::bytes::{read_u32, write_u32};
use super::ParseError;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const DATA: Field = 0..4;
}

/// Length of an ImmDt.
pub const HEADER_LEN: usize = field::DATA.end;

header_view!("ImmDt", HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn data(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::DATA])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_data(&mut self, value: u32) {
        write_u32(&mut self.buffer.as_mut()[field::DATA], value);
    }
}

/// ImmDt fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDt {
    /// The four bytes read as a big-endian integer: the same bytes a verbs
    /// `__be32 imm_data` holds in memory.
    pub data: u32,
}

impl ImmDt {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 4 bytes.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<ImmDt, ParseError> {
        packet.check_len()?;
        Ok(ImmDt {
            data: packet.data(),
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
        packet.set_data(self.data);
    }
}

extended_repr!(ImmDt, ImmDt);

impl fmt::Display for ImmDt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ImmDt {:#010x}", self.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_per_the_figure() {
        let imm = ImmDt { data: 0xCAFE_F00D };
        let mut bytes = [0u8; 4];
        imm.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, [0xCA, 0xFE, 0xF0, 0x0D]);
        assert_eq!(
            ImmDt::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(imm)
        );
        assert!(Packet::new_checked(&bytes[..3]).is_err());
    }
}
