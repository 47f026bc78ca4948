//! The ACK packets: BACK (32 bytes) and EACK (72 bytes).
//!
//! Layer: wire. Owns the zero-copy views [`BackPacket`] and [`EackPacket`],
//! the values [`BackRepr`] and [`EackRepr`], and the byte ranges of t1, t2
//! and the CC-info word, which the NACK shares. Never panics on input after
//! `check_len`.
//!
//! OCP Falcon 0.9 §7.7.1 (figure p.31, table p.32) and §7.7.2 (figure p.33,
//! table p.33–34); spec/falcon.md §3.1–3.2:
//!
//! ```text
//!  bytes  0–3 : Version (7:4) | reserved | Connection ID (24b)
//!  bytes  4–7 : reserved (27b) | Packet Type 1001b (BACK) / 1010b (EACK) | R
//!  bytes  8–11: Receiver Data Window Base PSN
//!  bytes 12–15: Receiver Request Window Base PSN
//!  bytes 16–19: t1 (131.072 ns units): TX time from the data packet's PSP IV
//!  bytes 20–23: t2 (131.072 ns units): when the receiver got it
//!  bytes 24–31: CC info (62b) + OWN (2b), see `cc_info`
//!  EACK only:
//!  bytes 32–47: data-ack bitmap (128b)
//!  bytes 48–63: data-rx bitmap (128b)
//!  bytes 64–71: request bitmap (64b)
//! ```
//!
//! Bitmaps (spec/falcon.md §3.2): each is sent as 32-bit words from the most
//! significant (\[127:96\] first) to the least, i.e. one big-endian integer
//! whose least significant bit (the last bit of its last byte) stands for the
//! window's BPSN; bit n stands for BPSN + n. They are exposed as `u128`/`u64`.

use core::fmt;

use super::cc_info::CcInfo;
use super::common::{check_version_and_type, common_getters, common_setters, FALCON_VERSION};
use super::time::FalconTime32;
use super::PacketType;
use crate::ids::ConnectionId;
use crate::seq::Psn;
use crate::wire::bytes::{read_u128, read_u64, write_u128, write_u64};
use crate::wire::ParseError;

pub(super) mod field {
    use crate::wire::bytes::Field;

    /// Bytes 4–6 and byte 7 bits 7:5 and 0 are reserved in ACK and NACK
    /// headers (where the base header has destination function, protocol
    /// type and AR).
    pub(crate) const RESERVED_4_6: Field = 4..7;
    pub(crate) const TYPE_BYTE: usize = 7;
    pub(crate) const TYPE_BYTE_RESERVED_MASK: u8 = 0xE1;
    pub(crate) const T1: Field = 16..20;
    pub(crate) const T2: Field = 20..24;
    pub(crate) const CC_INFO: Field = 24..32;
    pub(crate) const DATA_ACK_BITMAP: Field = 32..48;
    pub(crate) const DATA_RX_BITMAP: Field = 48..64;
    pub(crate) const REQUEST_BITMAP: Field = 64..72;
}

/// Length of a BACK.
pub const BACK_HEADER_LEN: usize = field::CC_INFO.end;
/// Length of an EACK.
pub const EACK_HEADER_LEN: usize = field::REQUEST_BITMAP.end;

/// Getters for t1, t2 and the raw CC-info word, shared by BACK, EACK and NACK.
macro_rules! ack_getters {
    () => {
        /// t1 (bytes 16–19): the TX time of the acknowledged data packet,
        /// from its PSP IV, in 131.072 ns units.
        pub fn t1(&self) -> $crate::wire::falcon::FalconTime32 {
            use $crate::wire::falcon::ack::field;
            $crate::wire::falcon::FalconTime32::new($crate::wire::bytes::read_u32(
                &self.buffer.as_ref()[field::T1],
            ))
        }

        /// t2 (bytes 20–23): when the receiver got that packet, in
        /// 131.072 ns units.
        pub fn t2(&self) -> $crate::wire::falcon::FalconTime32 {
            use $crate::wire::falcon::ack::field;
            $crate::wire::falcon::FalconTime32::new($crate::wire::bytes::read_u32(
                &self.buffer.as_ref()[field::T2],
            ))
        }

        /// The congestion-control word (bytes 24–31) as a big-endian u64.
        pub fn cc_info_bits(&self) -> u64 {
            use $crate::wire::falcon::ack::field;
            $crate::wire::bytes::read_u64(&self.buffer.as_ref()[field::CC_INFO])
        }
    };
}

/// Setters for t1, t2, the CC-info word and the reserved prefix bits.
macro_rules! ack_setters {
    () => {
        /// Sets t1.
        pub fn set_t1(&mut self, t1: $crate::wire::falcon::FalconTime32) {
            use $crate::wire::falcon::ack::field;
            $crate::wire::bytes::write_u32(&mut self.buffer.as_mut()[field::T1], t1.value());
        }

        /// Sets t2.
        pub fn set_t2(&mut self, t2: $crate::wire::falcon::FalconTime32) {
            use $crate::wire::falcon::ack::field;
            $crate::wire::bytes::write_u32(&mut self.buffer.as_mut()[field::T2], t2.value());
        }

        /// Sets the raw congestion-control word.
        pub fn set_cc_info_bits(&mut self, bits: u64) {
            use $crate::wire::falcon::ack::field;
            $crate::wire::bytes::write_u64(&mut self.buffer.as_mut()[field::CC_INFO], bits);
        }

        /// Zeroes the reserved bits of bytes 4–7 (keeps the packet type).
        pub fn clear_reserved_prefix(&mut self) {
            use $crate::wire::falcon::ack::field;
            let buffer = self.buffer.as_mut();
            buffer[field::RESERVED_4_6].fill(0);
            buffer[field::TYPE_BYTE] &= !field::TYPE_BYTE_RESERVED_MASK;
        }
    };
}

pub(crate) use {ack_getters, ack_setters};

/// A read/write view of a BACK (or of the first 32 bytes of an EACK).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BackPacket<T> {
    /// Wraps a buffer without checking it. Use for emitting.
    pub const fn new_unchecked(buffer: T) -> BackPacket<T> {
        BackPacket { buffer }
    }

    /// Wraps a buffer and checks its length. Use on received bytes.
    ///
    /// # Errors
    ///
    /// See [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<BackPacket<T>, ParseError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Ensures every accessor stays in bounds: 32 bytes.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the BACK.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < BACK_HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "Falcon BACK",
                need: BACK_HEADER_LEN,
                have,
            });
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    common_getters!();
    ack_getters!();

    /// The CC-info word, decoded (with the OWN bits).
    pub fn cc_info(&self) -> CcInfo {
        CcInfo::from_bits(self.cc_info_bits())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BackPacket<T> {
    common_setters!();
    ack_setters!();

    /// Sets the CC-info word (reserved bits zero).
    pub fn set_cc_info(&mut self, info: CcInfo) {
        self.set_cc_info_bits(info.to_bits());
    }
}

impl<T: AsRef<[u8]>> fmt::Display for BackPacket<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match BackRepr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "Falcon BACK ({err})"),
        }
    }
}

/// A read/write view of an EACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EackPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EackPacket<T> {
    /// Wraps a buffer without checking it. Use for emitting.
    pub const fn new_unchecked(buffer: T) -> EackPacket<T> {
        EackPacket { buffer }
    }

    /// Wraps a buffer and checks its length. Use on received bytes.
    ///
    /// # Errors
    ///
    /// See [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<EackPacket<T>, ParseError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Ensures every accessor stays in bounds: 72 bytes.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the EACK.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < EACK_HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "Falcon EACK",
                need: EACK_HEADER_LEN,
                have,
            });
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    common_getters!();
    ack_getters!();

    /// The CC-info word, decoded (with the OWN bits).
    pub fn cc_info(&self) -> CcInfo {
        CcInfo::from_bits(self.cc_info_bits())
    }

    /// Data-ack bitmap (bytes 32–47): bit n set = data-window PSN
    /// `data_bpsn + n` acknowledged. Bit 0 is always 0 from a conforming
    /// receiver (BPSN is the first unacknowledged PSN).
    pub fn data_ack_bitmap(&self) -> u128 {
        read_u128(&self.buffer.as_ref()[field::DATA_ACK_BITMAP])
    }

    /// Data-rx bitmap (bytes 48–63): bit n set = data-window PSN
    /// `data_bpsn + n` received (maybe not yet ULP-acknowledged).
    pub fn data_rx_bitmap(&self) -> u128 {
        read_u128(&self.buffer.as_ref()[field::DATA_RX_BITMAP])
    }

    /// Request bitmap (bytes 64–71): bit n set = request-window PSN
    /// `request_bpsn + n` received (= acknowledged, for requests).
    pub fn request_bitmap(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::REQUEST_BITMAP])
    }

    fn back(&self) -> BackPacket<&[u8]> {
        BackPacket::new_unchecked(&self.buffer.as_ref()[..BACK_HEADER_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EackPacket<T> {
    common_setters!();
    ack_setters!();

    /// Sets the CC-info word (reserved bits zero).
    pub fn set_cc_info(&mut self, info: CcInfo) {
        self.set_cc_info_bits(info.to_bits());
    }

    /// Sets the data-ack bitmap.
    pub fn set_data_ack_bitmap(&mut self, bitmap: u128) {
        write_u128(&mut self.buffer.as_mut()[field::DATA_ACK_BITMAP], bitmap);
    }

    /// Sets the data-rx bitmap.
    pub fn set_data_rx_bitmap(&mut self, bitmap: u128) {
        write_u128(&mut self.buffer.as_mut()[field::DATA_RX_BITMAP], bitmap);
    }

    /// Sets the request bitmap.
    pub fn set_request_bitmap(&mut self, bitmap: u64) {
        write_u64(&mut self.buffer.as_mut()[field::REQUEST_BITMAP], bitmap);
    }

    fn back_mut(&mut self) -> BackPacket<&mut [u8]> {
        BackPacket::new_unchecked(&mut self.buffer.as_mut()[..BACK_HEADER_LEN])
    }
}

impl<T: AsRef<[u8]>> fmt::Display for EackPacket<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match EackRepr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "Falcon EACK ({err})"),
        }
    }
}

/// A BACK as values (also the first 32 bytes of an EACK). Reserved bits are
/// ignored on parse and zero on emit; bytes after the packet are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BackRepr {
    /// Connection id of the ACK's receiver.
    pub connection_id: ConnectionId,
    /// Receiver's data-window base PSN (cumulative ACK).
    pub data_bpsn: Psn,
    /// Receiver's request-window base PSN (cumulative ACK).
    pub request_bpsn: Psn,
    /// TX time of the acknowledged packet (from its PSP IV).
    pub t1: FalconTime32,
    /// RX time of the acknowledged packet at the receiver.
    pub t2: FalconTime32,
    /// Congestion-control information and OWN bits.
    pub cc_info: CcInfo,
}

impl BackRepr {
    /// Reads and validates a BACK.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 32 bytes, [`ParseError::BadVersion`],
    /// or [`ParseError::UnexpectedPacketType`] (an EACK is not a BACK).
    pub fn parse<T: AsRef<[u8]>>(packet: &BackPacket<T>) -> Result<BackRepr, ParseError> {
        packet.check_len()?;
        check_version_and_type(packet.version(), packet.packet_type(), PacketType::Back)?;
        Ok(BackRepr::read(packet))
    }

    fn read<T: AsRef<[u8]>>(packet: &BackPacket<T>) -> BackRepr {
        BackRepr {
            connection_id: packet.connection_id(),
            data_bpsn: packet.data_bpsn(),
            request_bpsn: packet.request_bpsn(),
            t1: packet.t1(),
            t2: packet.t2(),
            cc_info: packet.cc_info(),
        }
    }

    /// Packet length (32).
    pub const fn buffer_len(&self) -> usize {
        BACK_HEADER_LEN
    }

    /// Writes the BACK.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`BACK_HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut BackPacket<T>) {
        self.write(PacketType::Back, packet);
    }

    fn write<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet_type: PacketType,
        packet: &mut BackPacket<T>,
    ) {
        packet.set_version(FALCON_VERSION);
        packet.set_connection_id(self.connection_id);
        packet.set_packet_type(packet_type);
        packet.clear_reserved_prefix();
        packet.set_data_bpsn(self.data_bpsn);
        packet.set_request_bpsn(self.request_bpsn);
        packet.set_t1(self.t1);
        packet.set_t2(self.t2);
        packet.set_cc_info(self.cc_info);
    }
}

impl fmt::Display for BackRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Falcon BACK cid {} dbpsn {} rbpsn {} t1 {} t2 {} {}",
            self.connection_id,
            self.data_bpsn.value(),
            self.request_bpsn.value(),
            self.t1,
            self.t2,
            self.cc_info
        )
    }
}

/// An EACK as values: the BACK fields plus the three bitmaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EackRepr {
    /// The BACK header fields (packet type 1010b on the wire).
    pub back: BackRepr,
    /// Data-ack bitmap; bit n = data-window PSN `back.data_bpsn + n`.
    pub data_ack_bitmap: u128,
    /// Data-rx bitmap; bit n = data-window PSN `back.data_bpsn + n`.
    pub data_rx_bitmap: u128,
    /// Request bitmap; bit n = request-window PSN `back.request_bpsn + n`.
    pub request_bitmap: u64,
}

impl EackRepr {
    /// Reads and validates an EACK.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 72 bytes, [`ParseError::BadVersion`],
    /// or [`ParseError::UnexpectedPacketType`].
    pub fn parse<T: AsRef<[u8]>>(packet: &EackPacket<T>) -> Result<EackRepr, ParseError> {
        packet.check_len()?;
        check_version_and_type(packet.version(), packet.packet_type(), PacketType::Eack)?;
        Ok(EackRepr {
            back: BackRepr::read(&packet.back()),
            data_ack_bitmap: packet.data_ack_bitmap(),
            data_rx_bitmap: packet.data_rx_bitmap(),
            request_bitmap: packet.request_bitmap(),
        })
    }

    /// Packet length (72).
    pub const fn buffer_len(&self) -> usize {
        EACK_HEADER_LEN
    }

    /// Writes the EACK.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`EACK_HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut EackPacket<T>) {
        self.back.write(PacketType::Eack, &mut packet.back_mut());
        packet.set_data_ack_bitmap(self.data_ack_bitmap);
        packet.set_data_rx_bitmap(self.data_rx_bitmap);
        packet.set_request_bitmap(self.request_bitmap);
    }
}

impl fmt::Display for EackRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Falcon EACK cid {} dbpsn {} rbpsn {} t1 {} t2 {} {} ack {:#x} rx {:#x} req {:#x}",
            self.back.connection_id,
            self.back.data_bpsn.value(),
            self.back.request_bpsn.value(),
            self.back.t1,
            self.back.t2,
            self.back.cc_info,
            self.data_ack_bitmap,
            self.data_rx_bitmap,
            self.request_bitmap
        )
    }
}

#[cfg(test)]
// Binary literals of byte 7 are grouped as the fields: protocol | type | AR.
#[allow(clippy::unusual_byte_groupings)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::falcon::cc_info::{AckRueInfo, EcnCount, HopCount, Own, RxBufferLevel};
    use crate::wire::testing::{back_repr, eack_repr};

    fn back() -> BackRepr {
        BackRepr {
            connection_id: ConnectionId::truncating(0x00_0102),
            data_bpsn: Psn::new(0x1000),
            request_bpsn: Psn::new(0x2000),
            t1: FalconTime32::new(0x1111_1111),
            t2: FalconTime32::new(0x2222_2222),
            cc_info: CcInfo {
                hop_count: HopCount::truncating(3),
                rx_buffer_level: RxBufferLevel::truncating(31),
                ecn_count: EcnCount::truncating(1),
                rue_info: AckRueInfo::truncating(0x3F_FFFF),
                own: Own {
                    request: true,
                    data: false,
                },
            },
        }
    }

    #[test]
    fn back_layout() {
        let mut bytes = [0xFFu8; 32];
        back().emit(&mut BackPacket::new_unchecked(&mut bytes[..]));
        assert_eq!(
            &bytes[..8],
            &[0x10, 0x00, 0x01, 0x02, 0, 0, 0, 0b000_1001_0]
        );
        assert_eq!(&bytes[8..16], &[0, 0, 0x10, 0, 0, 0, 0x20, 0]);
        assert_eq!(
            &bytes[16..24],
            &[0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x22, 0x22]
        );
        // V = 0011 11111 00000000000001 0{17} 1{22} 01
        let v: u64 = (3 << 60) | (31 << 55) | (1 << 41) | (0x3F_FFFF << 2) | 0b01;
        assert_eq!(&bytes[24..32], &v.to_be_bytes());
        assert_eq!(
            &bytes[24..32],
            &[0x3F, 0x80, 0x02, 0x00, 0x00, 0xFF, 0xFF, 0xFD]
        );
        let packet = BackPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.packet_type(), PacketType::Back);
        assert_eq!(BackRepr::parse(&packet), Ok(back()));
    }

    #[test]
    fn reserved_prefix_ignored_on_parse_zero_on_emit() {
        let mut bytes = [0u8; 32];
        back().emit(&mut BackPacket::new_unchecked(&mut bytes[..]));
        bytes[0] |= 0x0F;
        bytes[4..7].fill(0xAB);
        bytes[7] |= 0xE1; // the base header's protocol and AR bits: reserved here
        bytes[27] = 0xFF; // CC-info reserved bits V[40:24]
        let repr = BackRepr::parse(&BackPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr, back());
        let mut out = [0xFFu8; 32];
        repr.emit(&mut BackPacket::new_unchecked(&mut out[..]));
        assert_eq!(out[0], 0x10);
        assert_eq!(&out[4..8], &[0, 0, 0, 0x12]);
        assert_eq!(out[27], 0);
    }

    #[test]
    fn eack_bitmap_word_order() {
        let eack = EackRepr {
            back: back(),
            data_ack_bitmap: 0x0000_0001_0000_0002_0000_0003_0000_0004,
            data_rx_bitmap: 1 | (1 << 127),
            request_bitmap: 0x8000_0000_0000_0006,
        };
        let mut bytes = [0u8; 72];
        eack.emit(&mut EackPacket::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[7], 0b000_1010_0, "EACK type 1010b");
        // Words [127:96], [95:64], [63:32], [31:0] in that order.
        assert_eq!(
            &bytes[32..48],
            &[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4]
        );
        // Bit 0 (BPSN) is the last bit of the last byte; bit 127 the first.
        assert_eq!(bytes[48], 0x80);
        assert_eq!(bytes[63], 0x01);
        assert!(bytes[49..63].iter().all(|&b| b == 0));
        // Request bitmap: [63:32] then [31:0].
        assert_eq!(&bytes[64..72], &[0x80, 0, 0, 0, 0, 0, 0, 6]);
        let packet = EackPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.data_rx_bitmap() & 1, 1, "data_bpsn received");
        assert_eq!(packet.request_bitmap() >> 63, 1);
        assert_eq!(EackRepr::parse(&packet), Ok(eack));
        assert_eq!(&bytes[..32], {
            let mut b = [0u8; 32];
            back().write(PacketType::Eack, &mut BackPacket::new_unchecked(&mut b[..]));
            b
        });
        // The CC-info word through the EACK view, both ways.
        assert_eq!(packet.cc_info(), back().cc_info);
        let mut view = EackPacket::new_unchecked(&mut bytes[..]);
        let quiet = CcInfo {
            rx_buffer_level: RxBufferLevel::truncating(0),
            ..back().cc_info
        };
        view.set_cc_info(quiet);
        assert_eq!(view.cc_info(), quiet);
    }

    /// What `falcon pcap` and the logs print: the fields, by name, from
    /// the view or the values; a view that does not parse says why.
    #[test]
    fn display_names_the_fields() {
        let mut bytes = [0u8; 72];
        back().emit(&mut BackPacket::new_unchecked(&mut bytes[..32]));
        let text = BackPacket::new_unchecked(&bytes[..32]).to_string();
        assert_eq!(text, back().to_string());
        assert!(
            text.starts_with("Falcon BACK cid ") && text.contains("dbpsn 4096 rbpsn 8192"),
            "{text}"
        );
        let eack = EackRepr {
            back: back(),
            data_ack_bitmap: 0b100,
            data_rx_bitmap: 0b110,
            request_bitmap: 1,
        };
        eack.emit(&mut EackPacket::new_unchecked(&mut bytes[..]));
        let text = EackPacket::new_unchecked(&bytes[..]).to_string();
        assert_eq!(text, eack.to_string());
        assert!(
            text.starts_with("Falcon EACK cid ") && text.ends_with("ack 0x4 rx 0x6 req 0x1"),
            "{text}"
        );
        let short = BackPacket::new_unchecked(&bytes[..10]).to_string();
        assert!(short.starts_with("Falcon BACK ("), "{short}");
        let short = EackPacket::new_unchecked(&bytes[..40]).to_string();
        assert!(short.starts_with("Falcon EACK ("), "{short}");
    }

    #[test]
    fn back_and_eack_are_distinct_types() {
        let mut bytes = [0u8; 72];
        back().emit(&mut BackPacket::new_unchecked(&mut bytes[..]));
        assert_eq!(
            EackRepr::parse(&EackPacket::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::UnexpectedPacketType {
                expected: PacketType::Eack,
                found: PacketType::Back
            })
        );
        bytes[7] = 0b000_1010_0;
        assert_eq!(
            BackRepr::parse(&BackPacket::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::UnexpectedPacketType {
                expected: PacketType::Back,
                found: PacketType::Eack
            })
        );
        bytes[0] = 0x00;
        assert_eq!(
            EackRepr::parse(&EackPacket::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::BadVersion(0))
        );
    }

    #[test]
    fn truncated() {
        assert_eq!(
            BackPacket::new_checked(&[0u8; 31][..]).unwrap_err(),
            ParseError::Truncated {
                what: "Falcon BACK",
                need: 32,
                have: 31
            }
        );
        assert_eq!(
            EackPacket::new_checked(&[0u8; 71][..]).unwrap_err(),
            ParseError::Truncated {
                what: "Falcon EACK",
                need: 72,
                have: 71
            }
        );
    }

    proptest! {
        #[test]
        fn back_round_trip(repr in back_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut BackPacket::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(bytes.len(), BACK_HEADER_LEN);
            prop_assert_eq!(BackRepr::parse(&BackPacket::new_checked(&bytes[..]).unwrap()), Ok(repr));
        }

        #[test]
        fn eack_round_trip(repr in eack_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut EackPacket::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(bytes.len(), EACK_HEADER_LEN);
            prop_assert_eq!(EackRepr::parse(&EackPacket::new_checked(&bytes[..]).unwrap()), Ok(repr));
        }
    }
}
