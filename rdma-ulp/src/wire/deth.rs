//! The Datagram Extended Transport Header (DETH), 8 bytes: the Q_Key and
//! source QP of a UD SEND.
//!
//! Layer: wire. Owns the view [`Packet`], the value [`Deth`] and the one
//! choice of where the Source QP sits ([`SOURCE_QP_PLACEMENT`]). Never
//! panics on input after [`Packet::check_len`].
//!
//! RDMA-0.9 §8.3.10 says the DETH "has the same format as defined in the
//! Infiniband Specification" and that the InfiniBand specification is
//! authoritative for its fields; its figure (p.27) draws word 1 the other
//! way round:
//!
//! ```text
//!  InfiniBand (what we send)             RDMA-0.9 figure p.27
//!  word 0  Q_Key                         word 0  Queue Key
//!  word 1  0–7 reserved  8–31 Source QP  word 1  0–23 Source QP  24–31 reserved
//! ```
//!
//! We follow the normative text, InfiniBand's layout (ulp.md §1.10,
//! decision D3). The figure's order is the RBTH's for its Destination QP,
//! so it may be what a peer sends: [`SOURCE_QP_PLACEMENT`] is the only
//! thing to change to follow it.

use core::fmt;

use super::bytes::{read_u24, read_u32, write_u24, write_u32, Field};
use super::{ParseError, QKey, Qpn};

mod field {
    use crate::wire::bytes::Field;

    pub(super) const Q_KEY: Field = 0..4;
    /// Source QP and its reserved byte, placed by `SourceQpPlacement`.
    pub(super) const SOURCE_QP_WORD: Field = 4..8;
}

/// Length of a DETH.
pub const HEADER_LEN: usize = field::SOURCE_QP_WORD.end;

/// Where word 1 of a DETH holds the 24-bit Source QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceQpPlacement {
    /// InfiniBand's: a reserved byte, then the QP number (bytes 5–7).
    Infiniband,
    /// RDMA-0.9's figure: the QP number (bytes 4–6), then a reserved byte.
    Figure,
}

impl SourceQpPlacement {
    /// The bytes of the Source QP.
    const fn source_qp(self) -> Field {
        match self {
            SourceQpPlacement::Infiniband => 5..8,
            SourceQpPlacement::Figure => 4..7,
        }
    }

    /// The reserved byte.
    const fn reserved(self) -> usize {
        match self {
            SourceQpPlacement::Infiniband => 4,
            SourceQpPlacement::Figure => 7,
        }
    }
}

/// The placement this crate sends and expects (decision D3).
pub const SOURCE_QP_PLACEMENT: SourceQpPlacement = SourceQpPlacement::Infiniband;

header_view!("DETH", HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn q_key(&self) -> QKey {
        QKey(read_u32(&self.buffer.as_ref()[field::Q_KEY]))
    }

    /// The Source QP where [`SOURCE_QP_PLACEMENT`] puts it.
    pub fn source_qp(&self) -> Qpn {
        self.source_qp_at(SOURCE_QP_PLACEMENT)
    }

    /// The Source QP read with either placement.
    pub fn source_qp_at(&self, placement: SourceQpPlacement) -> Qpn {
        Qpn::truncating(read_u24(&self.buffer.as_ref()[placement.source_qp()]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_q_key(&mut self, value: QKey) {
        write_u32(&mut self.buffer.as_mut()[field::Q_KEY], value.0);
    }

    /// Sets the Source QP where [`SOURCE_QP_PLACEMENT`] puts it and zeroes
    /// the reserved byte.
    pub fn set_source_qp(&mut self, value: Qpn) {
        self.set_source_qp_at(SOURCE_QP_PLACEMENT, value);
    }

    /// Sets the Source QP with either placement and zeroes the reserved
    /// byte.
    pub fn set_source_qp_at(&mut self, placement: SourceQpPlacement, value: Qpn) {
        let buffer = self.buffer.as_mut();
        buffer[placement.reserved()] = 0;
        write_u24(&mut buffer[placement.source_qp()], value.value());
    }
}

/// DETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Deth {
    /// Compared by the target with the destination QP's Q_Key.
    pub q_key: QKey,
    /// The sender's QP, the destination of any reply.
    pub source_qp: Qpn,
}

impl Deth {
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 8 bytes.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Deth, ParseError> {
        packet.check_len()?;
        Ok(Deth {
            q_key: packet.q_key(),
            source_qp: packet.source_qp(),
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
        packet.set_q_key(self.q_key);
        packet.set_source_qp(self.source_qp);
    }
}

extended_repr!(Deth, Deth);

impl fmt::Display for Deth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DETH qkey {} src qp {}", self.q_key, self.source_qp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infiniband_layout() {
        let deth = Deth {
            q_key: QKey(0x8001_0000),
            source_qp: Qpn::truncating(0x0A_0B0C),
        };
        let mut bytes = [0xEEu8; 8];
        deth.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(SOURCE_QP_PLACEMENT, SourceQpPlacement::Infiniband);
        assert_eq!(
            bytes,
            [
                0x80, 0x01, 0x00, 0x00, // Q_Key
                0x00, 0x0A, 0x0B, 0x0C, // reserved | Source QP
            ]
        );
        assert_eq!(
            Deth::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(deth)
        );
        assert!(Packet::new_checked(&bytes[..7]).is_err());
    }

    #[test]
    fn figure_layout_is_one_switch_away() {
        let mut bytes = [0xEEu8; 8];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_q_key(QKey(1));
        packet.set_source_qp_at(SourceQpPlacement::Figure, Qpn::truncating(0x0A_0B0C));
        assert_eq!(bytes, [0, 0, 0, 1, 0x0A, 0x0B, 0x0C, 0x00]);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            packet.source_qp_at(SourceQpPlacement::Figure),
            Qpn::truncating(0x0A_0B0C)
        );
        assert_eq!(
            packet.source_qp_at(SourceQpPlacement::Infiniband),
            Qpn::truncating(0x0B_0C00)
        );
    }
}
