//! The Sequence Number Extended Transport Header (SETH), 4 bytes: which
//! message a packet belongs to, for out-of-order placement.
//!
//! Layer: wire. Owns the view [`Packet`] and the value [`Seth`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! RDMA-0.9 §8.3.2 (figure p.22), a Falcon header with no InfiniBand
//! counterpart:
//!
//! ```text
//!  word 0  Request Message Sequence Number (RMSN)
//! ```
//!
//! SEND packets and WRITE with Immediate carry the Send/Write RMSN (its low
//! 8 bits name the RQ WQE the target consumes); READ and ATOMIC requests
//! carry the Read/Atomic RMSN (it names the responder's IRRQ entry). See
//! [`Rmsn`].

use core::fmt;

use super::bytes::{read_u32, write_u32};
use super::ParseError;
use crate::seq::Rmsn;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const RMSN: Field = 0..4;
}

/// Length of a SETH.
pub const HEADER_LEN: usize = field::RMSN.end;

header_view!("SETH", HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn rmsn(&self) -> Rmsn {
        Rmsn::new(read_u32(&self.buffer.as_ref()[field::RMSN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_rmsn(&mut self, value: Rmsn) {
        write_u32(&mut self.buffer.as_mut()[field::RMSN], value.value());
    }
}

/// SETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seth {
    pub rmsn: Rmsn,
}

impl Seth {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 4 bytes.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Seth, ParseError> {
        packet.check_len()?;
        Ok(Seth {
            rmsn: packet.rmsn(),
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
        packet.set_rmsn(self.rmsn);
    }
}

extended_repr!(Seth, Seth);

impl fmt::Display for Seth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SETH {}", self.rmsn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_per_the_figure() {
        let seth = Seth {
            rmsn: Rmsn::new(0x0A0B_0C0D),
        };
        let mut bytes = [0u8; 4];
        seth.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, [0x0A, 0x0B, 0x0C, 0x0D]);
        assert_eq!(
            Seth::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(seth)
        );
        assert!(Packet::new_checked(&bytes[..3]).is_err());
    }
}
