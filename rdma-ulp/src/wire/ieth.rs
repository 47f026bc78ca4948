//! The Invalidate Extended Transport Header (IETH), 4 bytes: the R_Key a
//! SEND with Invalidate retires at the target.
//!
//! Layer: wire. Owns the view [`Packet`] and the value [`Ieth`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! RDMA-0.9 §8.3.8 (figure p.26), InfiniBand's IETH:
//!
//! ```text
//!  word 0  R_Key
//! ```

use core::fmt;

use super::bytes::{read_u32, write_u32};
use super::{ParseError, RKey};

mod field {
    use crate::wire::bytes::Field;

    pub(super) const R_KEY: Field = 0..4;
}

/// Length of an IETH.
pub const HEADER_LEN: usize = field::R_KEY.end;

header_view!("IETH", HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn r_key(&self) -> RKey {
        RKey(read_u32(&self.buffer.as_ref()[field::R_KEY]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_r_key(&mut self, value: RKey) {
        write_u32(&mut self.buffer.as_mut()[field::R_KEY], value.0);
    }
}

/// IETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ieth {
    /// The memory region or window key to invalidate.
    pub r_key: RKey,
}

impl Ieth {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 4 bytes.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Ieth, ParseError> {
        packet.check_len()?;
        Ok(Ieth {
            r_key: packet.r_key(),
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
        packet.set_r_key(self.r_key);
    }
}

extended_repr!(Ieth, Ieth);

impl fmt::Display for Ieth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IETH rkey {}", self.r_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_per_the_figure() {
        let ieth = Ieth {
            r_key: RKey(0x0102_0304),
        };
        let mut bytes = [0u8; 4];
        ieth.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, [1, 2, 3, 4]);
        assert_eq!(
            Ieth::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(ieth)
        );
        assert!(Packet::new_checked(&bytes[..3]).is_err());
    }
}
