//! Dispatch over every Falcon packet type.
//!
//! Layer: wire. Owns [`Repr`] (re-exported as `FalconRepr`), which parses any
//! Falcon packet by peeking the packet-type field (byte 7 bits 4:1, at the same
//! place in base, ACK and NACK headers: OCP Falcon 0.9 §7.2 p.25) and hands
//! back the typed value plus where the payload is. Also the peeks the pipeline
//! needs before decryption: the connection id is in clear (§7.1 p.23).
//! Never panics on input; never allocates.

use core::fmt;
use core::ops::Range;

use super::ack::{BackPacket, BackRepr, EackPacket, EackRepr};
use super::common::{field, FALCON_VERSION, PEEK_LEN};
use super::{nack, pull_data, pull_request, push_data, resync, PacketType};
use crate::ids::ConnectionId;
use crate::wire::bytes::read_u24;
use crate::wire::ParseError;

/// Any Falcon packet, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Repr {
    /// Pull Request (0000b).
    PullRequest(pull_request::Repr),
    /// Pull Data (0011b).
    PullData(pull_data::Repr),
    /// Push Data (0101b).
    PushData(push_data::Repr),
    /// Resync (0110b).
    Resync(resync::Repr),
    /// NACK (1000b).
    Nack(nack::Repr),
    /// BACK (1001b).
    Back(BackRepr),
    /// EACK (1010b).
    Eack(EackRepr),
}

/// Reads the packet type of any Falcon header.
///
/// # Errors
///
/// [`ParseError::Truncated`] below 8 bytes.
pub fn peek_packet_type(bytes: &[u8]) -> Result<PacketType, ParseError> {
    peek_type_code(bytes).map(PacketType::from)
}

/// [`peek_packet_type`], the 4-bit code.
#[inline(always)]
fn peek_type_code(bytes: &[u8]) -> Result<u8, ParseError> {
    if bytes.len() < PEEK_LEN {
        return Err(ParseError::Truncated {
            what: "Falcon header",
            need: PEEK_LEN,
            have: bytes.len(),
        });
    }
    let byte = bytes[field::TYPE_BYTE];
    Ok((byte & field::PACKET_TYPE_MASK) >> field::PACKET_TYPE_SHIFT)
}

/// The first checks of [`Repr::parse`]: 8 bytes to peek and version 1;
/// returns the packet type's code (`u8::from(PacketType)`), for
/// [`Repr::parse_peeked`] or a type's own `parse_peeked`. The code, not the
/// [`PacketType`]: the receive path compares it with Push Data's, and the
/// conversion compiles to a table lookup and a jump table on its result.
///
/// # Errors
///
/// [`ParseError::Truncated`] below 8 bytes, [`ParseError::BadVersion`].
#[inline(always)]
pub(crate) fn peek_versioned(bytes: &[u8]) -> Result<u8, ParseError> {
    let code = peek_type_code(bytes)?;
    let version = (bytes[field::VERSION] & field::VERSION_MASK) >> field::VERSION_SHIFT;
    if version != FALCON_VERSION {
        return Err(ParseError::BadVersion(version));
    }
    Ok(code)
}

/// Reads the destination connection id of any Falcon header. It travels in
/// clear (the PSP crypt offset skips the first 4 Falcon bytes), so the
/// pipeline can find the connection before opening the packet.
///
/// # Errors
///
/// [`ParseError::Truncated`] below 4 bytes.
pub fn peek_connection_id(bytes: &[u8]) -> Result<ConnectionId, ParseError> {
    match bytes.get(field::CONNECTION_ID) {
        Some(cid) => Ok(ConnectionId::truncating(read_u24(cid))),
        None => Err(ParseError::Truncated {
            what: "Falcon connection id",
            need: field::CONNECTION_ID.end,
            have: bytes.len(),
        }),
    }
}

impl Repr {
    /// Parses a whole Falcon packet (the buffer ends where the Falcon packet
    /// ends, i.e. at the PSP trailer). Checks, in order: 8 bytes to peek,
    /// version 1, a packet type rev 0.9 defines, then the type's own checks.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`], [`ParseError::BadVersion`],
    /// [`ParseError::UnknownPacketType`] for reserved types (their layout is
    /// unknown), or a typed parser's error (for example
    /// [`ParseError::LengthMismatch`] for Push Data).
    // Inlined into the receive path: returned through memory, the Repr's
    // field-by-field stores stalled the caller's 16-byte copy of it (store
    // forwarding; perf annotate: ~40 % of this function's samples).
    #[inline(always)]
    pub fn parse(bytes: &[u8]) -> Result<Repr, ParseError> {
        let code = peek_versioned(bytes)?;
        Self::parse_peeked(bytes, PacketType::from(code))
    }

    /// [`parse`](Self::parse) after [`peek_versioned`] returned the code of
    /// `packet_type` for `bytes`: the type's own checks.
    ///
    /// # Errors
    ///
    /// As [`parse`](Self::parse), but for the peek's.
    #[inline(always)]
    pub(crate) fn parse_peeked(bytes: &[u8], packet_type: PacketType) -> Result<Repr, ParseError> {
        let repr = match packet_type {
            PacketType::PullRequest => Repr::PullRequest(pull_request::Repr::parse(
                &pull_request::Packet::new_checked(bytes)?,
            )?),
            PacketType::PullData => Repr::PullData(pull_data::Repr::parse(
                &pull_data::Packet::new_checked(bytes)?,
            )?),
            PacketType::PushData => Repr::PushData(push_data::Repr::parse_peeked(
                &push_data::Packet::new_checked(bytes)?,
            )?),
            PacketType::Resync => {
                Repr::Resync(resync::Repr::parse(&resync::Packet::new_checked(bytes)?)?)
            }
            PacketType::Nack => Repr::Nack(nack::Repr::parse(&nack::Packet::new_checked(bytes)?)?),
            PacketType::Back => Repr::Back(BackRepr::parse(&BackPacket::new_checked(bytes)?)?),
            PacketType::Eack => Repr::Eack(EackRepr::parse(&EackPacket::new_checked(bytes)?)?),
            PacketType::Unknown(code) => return Err(ParseError::UnknownPacketType(code)),
        };
        Ok(repr)
    }

    /// The packet type.
    pub const fn packet_type(&self) -> PacketType {
        match self {
            Repr::PullRequest(_) => PacketType::PullRequest,
            Repr::PullData(_) => PacketType::PullData,
            Repr::PushData(_) => PacketType::PushData,
            Repr::Resync(_) => PacketType::Resync,
            Repr::Nack(_) => PacketType::Nack,
            Repr::Back(_) => PacketType::Back,
            Repr::Eack(_) => PacketType::Eack,
        }
    }

    /// The destination connection id.
    pub const fn connection_id(&self) -> ConnectionId {
        match self {
            Repr::PullRequest(r) => r.header.connection_id,
            Repr::PullData(r) => r.header.connection_id,
            Repr::PushData(r) => r.header.connection_id,
            Repr::Resync(r) => r.header.connection_id,
            Repr::Nack(r) => r.connection_id,
            Repr::Back(r) => r.connection_id,
            Repr::Eack(r) => r.back.connection_id,
        }
    }

    /// Length of the fixed header.
    pub const fn header_len(&self) -> usize {
        match self {
            Repr::PullRequest(_) => pull_request::HEADER_LEN,
            Repr::PullData(_) => pull_data::HEADER_LEN,
            Repr::PushData(_) => push_data::HEADER_LEN,
            Repr::Resync(_) => resync::HEADER_LEN,
            Repr::Nack(_) => nack::HEADER_LEN,
            Repr::Back(_) => super::ack::BACK_HEADER_LEN,
            Repr::Eack(_) => super::ack::EACK_HEADER_LEN,
        }
    }

    /// Where the ULP payload is, for the types that carry one (Pull Request:
    /// ULP headers; Pull Data, Push Data: ULP headers and data); `None` for
    /// the others. The range is relative to the start of the Falcon packet.
    pub const fn payload_range(&self) -> Option<Range<usize>> {
        let (start, len) = match self {
            Repr::PullRequest(r) => (pull_request::HEADER_LEN, r.payload_len),
            Repr::PullData(r) => (pull_data::HEADER_LEN, r.payload_len),
            Repr::PushData(r) => (push_data::HEADER_LEN, r.payload_len()),
            Repr::Resync(_) | Repr::Nack(_) | Repr::Back(_) | Repr::Eack(_) => return None,
        };
        Some(start..start + len)
    }

    /// Header and payload length.
    pub const fn buffer_len(&self) -> usize {
        match self.payload_range() {
            Some(range) => range.end,
            None => self.header_len(),
        }
    }

    /// Writes the header into `bytes`; the payload (at
    /// [`payload_range`](Self::payload_range)) is the caller's.
    ///
    /// # Panics
    ///
    /// If `bytes` is shorter than [`header_len`](Self::header_len).
    #[inline]
    pub fn emit(&self, bytes: &mut [u8]) {
        match self {
            Repr::PullRequest(r) => r.emit(&mut pull_request::Packet::new_unchecked(bytes)),
            Repr::PullData(r) => r.emit(&mut pull_data::Packet::new_unchecked(bytes)),
            Repr::PushData(r) => r.emit(&mut push_data::Packet::new_unchecked(bytes)),
            Repr::Resync(r) => r.emit(&mut resync::Packet::new_unchecked(bytes)),
            Repr::Nack(r) => r.emit(&mut nack::Packet::new_unchecked(bytes)),
            Repr::Back(r) => r.emit(&mut BackPacket::new_unchecked(bytes)),
            Repr::Eack(r) => r.emit(&mut EackPacket::new_unchecked(bytes)),
        }
    }
}

impl Repr {
    /// [`emit`](Self::emit) into the first [`buffer_len`](Self::buffer_len)
    /// bytes of `bytes`, returning where the payload goes
    /// (`header_len()..buffer_len()`, empty for types without one); `None`,
    /// nothing written, if `bytes` is shorter. One dispatch on the type, not
    /// one each for the length, the header and the payload range.
    #[inline(always)]
    pub fn emit_within(&self, bytes: &mut [u8]) -> Option<Range<usize>> {
        #[inline(always)]
        fn within(
            bytes: &mut [u8],
            header_len: usize,
            len: usize,
            emit: impl FnOnce(&mut [u8]),
        ) -> Option<Range<usize>> {
            emit(bytes.get_mut(..len)?);
            Some(header_len..len)
        }
        match self {
            Repr::PullRequest(r) => within(bytes, pull_request::HEADER_LEN, r.buffer_len(), |b| {
                r.emit(&mut pull_request::Packet::new_unchecked(b))
            }),
            Repr::PullData(r) => within(bytes, pull_data::HEADER_LEN, r.buffer_len(), |b| {
                r.emit(&mut pull_data::Packet::new_unchecked(b))
            }),
            Repr::PushData(r) => within(bytes, push_data::HEADER_LEN, r.buffer_len(), |b| {
                r.emit(&mut push_data::Packet::new_unchecked(b))
            }),
            Repr::Resync(r) => within(bytes, r.buffer_len(), r.buffer_len(), |b| {
                r.emit(&mut resync::Packet::new_unchecked(b))
            }),
            Repr::Nack(r) => within(bytes, r.buffer_len(), r.buffer_len(), |b| {
                r.emit(&mut nack::Packet::new_unchecked(b))
            }),
            Repr::Back(r) => within(bytes, r.buffer_len(), r.buffer_len(), |b| {
                r.emit(&mut BackPacket::new_unchecked(b))
            }),
            Repr::Eack(r) => within(bytes, r.buffer_len(), r.buffer_len(), |b| {
                r.emit(&mut EackPacket::new_unchecked(b))
            }),
        }
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Repr::PullRequest(r) => fmt::Display::fmt(r, f),
            Repr::PullData(r) => fmt::Display::fmt(r, f),
            Repr::PushData(r) => fmt::Display::fmt(r, f),
            Repr::Resync(r) => fmt::Display::fmt(r, f),
            Repr::Nack(r) => fmt::Display::fmt(r, f),
            Repr::Back(r) => fmt::Display::fmt(r, f),
            Repr::Eack(r) => fmt::Display::fmt(r, f),
        }
    }
}

#[cfg(test)]
// Binary literals of byte 7 are grouped as the fields: protocol | type | AR.
#[allow(clippy::unusual_byte_groupings)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::testing::falcon_repr;

    proptest! {
        #[test]
        fn dispatch_round_trip(repr in falcon_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut bytes);
            prop_assert_eq!(peek_packet_type(&bytes), Ok(repr.packet_type()));
            prop_assert_eq!(peek_connection_id(&bytes), Ok(repr.connection_id()));
            prop_assert_eq!(Repr::parse(&bytes), Ok(repr));
            prop_assert_eq!(Some(repr.header_len()), repr.packet_type().header_len());
            match repr.payload_range() {
                Some(range) => {
                    prop_assert!(repr.packet_type().carries_payload());
                    prop_assert_eq!(range.start, repr.header_len());
                    prop_assert_eq!(range.end, bytes.len());
                }
                None => prop_assert_eq!(repr.header_len(), bytes.len()),
            }
        }
    }

    proptest! {
        /// `emit_within` writes what `emit` does into `buffer_len()` bytes
        /// and names the payload range, or refuses a shorter buffer
        /// untouched.
        #[test]
        fn emit_within_agrees_with_emit(repr in falcon_repr(), extra in 0usize..4, short in 1usize..8) {
            let len = repr.buffer_len();
            let mut expected = vec![0xA5u8; len + extra];
            repr.emit(&mut expected[..len]);
            let mut got = vec![0xA5u8; len + extra];
            let range = repr.emit_within(&mut got);
            prop_assert_eq!(&got, &expected);
            let payload = repr.payload_range().unwrap_or(len..len);
            prop_assert_eq!(range, Some(payload));
            let mut small = vec![0xA5u8; len.saturating_sub(short)];
            if small.len() < len {
                prop_assert_eq!(repr.emit_within(&mut small), None);
                prop_assert!(small.iter().all(|&b| b == 0xA5));
            }
        }
    }

    proptest! {
        /// The receive path's split parse (`peek_versioned`, then Push Data
        /// by its own parser and every other type by `parse_peeked`) gives
        /// what `parse` gives: the same packet or the same error.
        #[test]
        fn split_parse_agrees_with_parse(
            mut bytes in proptest::collection::vec(any::<u8>(), 0..64),
            push in any::<bool>(),
            request_length in 0u8..40,
        ) {
            if push && bytes.len() >= 8 {
                bytes[0] = (bytes[0] & 0x0F) | 0x10;
                bytes[7] = (bytes[7] & 0b111_0000_1) | 0b000_0101_0;
            }
            if push && bytes.len() >= 28 {
                bytes[26] = 0;
                bytes[27] = request_length;
            }
            let split = peek_versioned(&bytes).and_then(|code| {
                let packet_type = PacketType::from(code);
                if packet_type == PacketType::PushData {
                    let packet = push_data::Packet::new_checked(&bytes[..])?;
                    push_data::Repr::parse_peeked(&packet).map(Repr::PushData)
                } else {
                    Repr::parse_peeked(&bytes, packet_type)
                }
            });
            prop_assert_eq!(split, Repr::parse(&bytes));
        }
    }

    proptest! {
        /// A Push Data through the dispatch, which checks version and type
        /// once (`push_data::Repr::parse_peeked`), parses as through its
        /// typed parser, which checks them itself: the same repr or the
        /// same error, whatever the bytes after the type.
        #[test]
        fn push_data_dispatch_agrees_with_the_typed_parser(
            mut bytes in proptest::collection::vec(any::<u8>(), 8..48),
            request_length in 0u8..20,
        ) {
            bytes[0] = (bytes[0] & 0x0F) | 0x10;
            bytes[7] = (bytes[7] & 0b111_0000_1) | 0b000_0101_0;
            if bytes.len() >= 28 {
                bytes[26] = 0;
                bytes[27] = request_length;
            }
            let typed = push_data::Packet::new_checked(&bytes[..])
                .and_then(|p| push_data::Repr::parse(&p));
            prop_assert_eq!(Repr::parse(&bytes), typed.map(Repr::PushData));
        }
    }

    #[test]
    fn payload_range_of_data_packets() {
        // A Push Data with a 3-byte payload.
        let mut bytes = [0u8; 31];
        bytes[0] = 0x10;
        bytes[7] = 0b010_0101_0;
        bytes[27] = 3;
        let repr = Repr::parse(&bytes).unwrap();
        assert_eq!(repr.packet_type(), PacketType::PushData);
        assert_eq!(repr.payload_range(), Some(28..31));
        // The same bytes as a Pull Data: a 7-byte payload after 24 bytes.
        bytes[7] = 0b010_0011_0;
        assert_eq!(Repr::parse(&bytes).unwrap().payload_range(), Some(24..31));
        // A BACK has none, and trailing bytes are ignored.
        let mut bytes = [0u8; 40];
        bytes[0] = 0x10;
        bytes[7] = 0b000_1001_0;
        let repr = Repr::parse(&bytes).unwrap();
        assert_eq!(repr.payload_range(), None);
        assert_eq!(repr.buffer_len(), 32);
    }

    #[test]
    fn errors_in_check_order() {
        assert_eq!(
            Repr::parse(&[0x10, 0, 0, 0, 0, 0, 0]),
            Err(ParseError::Truncated {
                what: "Falcon header",
                need: 8,
                have: 7
            })
        );
        assert_eq!(
            Repr::parse(&[0x20, 0, 0, 0, 0, 0, 0, 0b000_0111_0]),
            Err(ParseError::BadVersion(2))
        );
        assert_eq!(
            Repr::parse(&[0x10, 0, 0, 0, 0, 0, 0, 0b000_0111_0]),
            Err(ParseError::UnknownPacketType(7))
        );
        let mut eack = [0u8; 71];
        eack[0] = 0x10;
        eack[7] = 0b000_1010_0;
        assert_eq!(
            Repr::parse(&eack),
            Err(ParseError::Truncated {
                what: "Falcon EACK",
                need: 72,
                have: 71
            })
        );
        let mut push = [0u8; 30];
        push[0] = 0x10;
        push[7] = 0b010_0101_0;
        assert_eq!(
            Repr::parse(&push),
            Err(ParseError::LengthMismatch {
                what: "Push Data request length",
                declared: 0,
                actual: 2
            })
        );
        assert_eq!(
            peek_connection_id(&[0x10, 1, 2]),
            Err(ParseError::Truncated {
                what: "Falcon connection id",
                need: 4,
                have: 3
            })
        );
        assert_eq!(
            peek_connection_id(&[0x10, 1, 2, 3]).map(|c| c.value()),
            Ok(0x01_0203)
        );
    }
}
