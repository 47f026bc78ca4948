//! The Pull Data packet: the base header, then the payload.
//!
//! Layer: wire. Owns the [`Repr`]; the view is the base header's
//! ([`base::Packet`], re-exported here as [`Packet`]), since Pull Data has no
//! field of its own (OCP Falcon 0.9 §7.4 p.28; spec/falcon.md §2.2). The RSN
//! is the Pull Request's; the PSN is a data-window PSN. The payload length is
//! not on the wire: it is what remains of the Falcon packet, and must equal
//! the Pull Request's request length (checked by the transaction layer,
//! which knows the request).

use core::fmt;

use super::base::{self, BaseHeader};
use super::common::check_version_and_type;
use super::PacketType;
use crate::wire::ParseError;

/// The Pull Data view: the base header view.
pub type Packet<T> = base::Packet<T>;

/// Length of the Pull Data header (the base header).
pub const HEADER_LEN: usize = base::HEADER_LEN;

/// A Pull Data packet as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// `repr(C)`: the base header first, as in every transaction repr (see
// `push_data::Repr`).
#[repr(C)]
pub struct Repr {
    /// Base-header fields (packet type 0011b implied).
    pub header: BaseHeader,
    /// Bytes of payload after the 24-byte header.
    pub payload_len: usize,
}

impl Repr {
    /// Reads and validates a Pull Data packet. The buffer must end where the
    /// Falcon packet ends (the PSP payload boundary).
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 24 bytes, [`ParseError::BadVersion`],
    /// or [`ParseError::UnexpectedPacketType`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        check_version_and_type(packet.version(), packet.packet_type(), PacketType::PullData)?;
        Ok(Repr {
            header: BaseHeader::read(packet),
            payload_len: packet.payload_len(),
        })
    }

    /// Header length (24).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header and payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header; the payload after it is the caller's.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.header.write(PacketType::PullData, packet);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Falcon Pull Data {} len {}",
            self.header, self.payload_len
        )
    }
}

#[cfg(test)]
// Binary literals of byte 7 are grouped as the fields: protocol | type | AR.
#[allow(clippy::unusual_byte_groupings)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ids::{ConnectionId, DestinationFunction};
    use crate::seq::{Psn, Rsn};
    use crate::wire::falcon::ProtocolType;
    use crate::wire::testing::pull_data_repr;

    #[test]
    fn fixture() {
        let repr = Repr {
            header: BaseHeader {
                connection_id: ConnectionId::truncating(7),
                destination_function: DestinationFunction::truncating(0x42),
                protocol: ProtocolType::Nvme,
                ack_request: false,
                data_bpsn: Psn::new(1),
                request_bpsn: Psn::new(2),
                psn: Psn::new(200),
                rsn: Rsn::new(1),
            },
            payload_len: 3,
        };
        let mut bytes = [0u8; 27];
        bytes[24..].copy_from_slice(b"xyz");
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(&bytes[..8], &[0x10, 0, 0, 7, 0, 0, 0x42, 0b011_0011_0]);
        assert_eq!(&bytes[16..24], &[0, 0, 0, 200, 0, 0, 0, 1]);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.payload(), b"xyz");
        assert_eq!(Repr::parse(&packet), Ok(repr));
        bytes[7] = 0b011_0101_0; // now a Push Data
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::UnexpectedPacketType {
                expected: PacketType::PullData,
                found: PacketType::PushData
            })
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in pull_data_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(bytes.len(), HEADER_LEN + repr.payload_len);
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()), Ok(repr));
        }
    }
}
