//! The NACK packet (40 bytes).
//!
//! Layer: wire. Owns the zero-copy [`Packet`] view and the [`Repr`]. Never
//! panics on input after [`Packet::check_len`].
//!
//! OCP Falcon 0.9 §7.8 (figure p.35, table p.35–37; spec/falcon.md §3.3):
//!
//! ```text
//!  bytes  0–23: as BACK (packet type 1000b): version, CID, BPSNs, t1, t2
//!  bytes 24–31: CC info: hop count, rx buffer level, ECN count, RUE info V\[23:0\]
//!  bytes 32–35: NACK PSN
//!  byte  36   : NACK Code
//!  byte  37   : reserved (7:5) | RNR NACK Timeout (4:0)
//!  byte  38   : W (7) | reserved (6:0)
//!  byte  39   : ULP NACK code (opaque to Falcon)
//! ```
//!
//! The NACK has no OWN field: its RUE info is the full V\[23:0\] (text over
//! figure, spec/falcon.md §9 item 1; see [`NackCcInfo`]).
//!
//! Field order: the text table (ocp/falcon-transport-rev0.9.txt p.35–37)
//! lists NACK PSN, code, RNR timeout, W and ULP code *before* t1, t2 and CC
//! info; the figure (PDF p.35, checked on the image) places t1/t2/CC info at
//! bytes 16–31, as in the BACK, and the NACK fields after them. A table's
//! row order is not a byte layout, so we follow the **figure** (as
//! spec/falcon.md §3.3 and isekai's 320-bit NACK do).

use core::fmt;

use super::ack::{ack_getters, ack_setters};
use super::cc_info::NackCcInfo;
use super::codes::{NackCode, RnrTimeout, Window};
use super::common::{check_version_and_type, common_getters, common_setters, FALCON_VERSION};
use super::time::FalconTime32;
use super::PacketType;
use crate::ids::ConnectionId;
use crate::seq::Psn;
use crate::wire::bytes::{read_u32, write_bits, write_u32};
use crate::wire::ParseError;

mod field {
    use crate::wire::bytes::Field;

    pub(super) const NACK_PSN: Field = 32..36;
    pub(super) const CODE: usize = 36;
    pub(super) const RNR_TIMEOUT_BYTE: usize = 37;
    pub(super) const RNR_TIMEOUT_MASK: u8 = 0x1F;
    pub(super) const WINDOW_BYTE: usize = 38;
    pub(super) const WINDOW_MASK: u8 = 0x80;
    pub(super) const WINDOW_SHIFT: u32 = 7;
    pub(super) const ULP_NACK_CODE: usize = 39;
}

/// Length of a NACK.
pub const HEADER_LEN: usize = field::ULP_NACK_CODE + 1;

/// A read/write view of a NACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it. Use for emitting.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks its length. Use on received bytes.
    ///
    /// # Errors
    ///
    /// See [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, ParseError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Ensures every accessor stays in bounds: 40 bytes.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] naming the NACK.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        if have < HEADER_LEN {
            return Err(ParseError::Truncated {
                what: "Falcon NACK",
                need: HEADER_LEN,
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

    /// The CC-info word, decoded (no OWN; 24-bit RUE info).
    pub fn cc_info(&self) -> NackCcInfo {
        NackCcInfo::from_bits(self.cc_info_bits())
    }

    /// NACK PSN (bytes 32–35): the PSN of the refused packet, in the window
    /// [`window`](Self::window) names.
    pub fn nack_psn(&self) -> Psn {
        Psn::new(read_u32(&self.buffer.as_ref()[field::NACK_PSN]))
    }

    /// NACK Code (byte 36).
    pub fn nack_code(&self) -> NackCode {
        NackCode::from(self.buffer.as_ref()[field::CODE])
    }

    /// RNR NACK Timeout (byte 37 bits 4:0).
    pub fn rnr_timeout(&self) -> RnrTimeout {
        RnrTimeout::truncating(self.buffer.as_ref()[field::RNR_TIMEOUT_BYTE])
    }

    /// W (byte 38 bit 7): 1 = request window, 0 = data window.
    pub fn window(&self) -> Window {
        Window::from_bit(self.buffer.as_ref()[field::WINDOW_BYTE] & field::WINDOW_MASK != 0)
    }

    /// ULP NACK code (byte 39): opaque to Falcon, passed to the initiator's
    /// ULP.
    pub fn ulp_nack_code(&self) -> u8 {
        self.buffer.as_ref()[field::ULP_NACK_CODE]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    common_setters!();
    ack_setters!();

    /// Sets the CC-info word (reserved bits zero).
    pub fn set_cc_info(&mut self, info: NackCcInfo) {
        self.set_cc_info_bits(info.to_bits());
    }

    /// Sets the NACK PSN.
    pub fn set_nack_psn(&mut self, psn: Psn) {
        write_u32(&mut self.buffer.as_mut()[field::NACK_PSN], psn.value());
    }

    /// Sets the NACK Code.
    pub fn set_nack_code(&mut self, code: NackCode) {
        self.buffer.as_mut()[field::CODE] = code.into();
    }

    /// Sets the RNR NACK Timeout and zeroes the reserved bits 7:5 of byte 37.
    pub fn set_rnr_timeout(&mut self, timeout: RnrTimeout) {
        self.buffer.as_mut()[field::RNR_TIMEOUT_BYTE] = timeout.code() & field::RNR_TIMEOUT_MASK;
    }

    /// Sets W and zeroes the reserved bits 6:0 of byte 38.
    pub fn set_window(&mut self, window: Window) {
        let byte = &mut self.buffer.as_mut()[field::WINDOW_BYTE];
        *byte = 0;
        write_bits(
            byte,
            field::WINDOW_MASK,
            field::WINDOW_SHIFT,
            u8::from(window.bit()),
        );
    }

    /// Sets the ULP NACK code.
    pub fn set_ulp_nack_code(&mut self, code: u8) {
        self.buffer.as_mut()[field::ULP_NACK_CODE] = code;
    }
}

impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Repr::parse(self) {
            Ok(repr) => fmt::Display::fmt(&repr, f),
            Err(err) => write!(f, "Falcon NACK ({err})"),
        }
    }
}

/// A NACK as values. Reserved bits are ignored on parse and zero on emit;
/// bytes after the 40-byte packet are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Connection id of the NACK's receiver.
    pub connection_id: ConnectionId,
    /// Receiver's data-window base PSN (a NACK also acknowledges).
    pub data_bpsn: Psn,
    /// Receiver's request-window base PSN.
    pub request_bpsn: Psn,
    /// Forward-path TX time of the NACKed packet.
    pub t1: FalconTime32,
    /// Forward-path RX time at the receiver.
    pub t2: FalconTime32,
    /// Congestion-control information.
    pub cc_info: NackCcInfo,
    /// PSN of the refused packet.
    pub nack_psn: Psn,
    /// Why it was refused.
    pub code: NackCode,
    /// Retry delay for [`NackCode::ReceiverNotReady`] (carried whatever the
    /// code).
    pub rnr_timeout: RnrTimeout,
    /// The window of `nack_psn`.
    pub window: Window,
    /// Opaque ULP reason.
    pub ulp_nack_code: u8,
}

impl Repr {
    /// Reads and validates a NACK.
    ///
    /// # Errors
    ///
    /// [`ParseError::Truncated`] below 40 bytes, [`ParseError::BadVersion`],
    /// or [`ParseError::UnexpectedPacketType`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        check_version_and_type(packet.version(), packet.packet_type(), PacketType::Nack)?;
        Ok(Repr {
            connection_id: packet.connection_id(),
            data_bpsn: packet.data_bpsn(),
            request_bpsn: packet.request_bpsn(),
            t1: packet.t1(),
            t2: packet.t2(),
            cc_info: packet.cc_info(),
            nack_psn: packet.nack_psn(),
            code: packet.nack_code(),
            rnr_timeout: packet.rnr_timeout(),
            window: packet.window(),
            ulp_nack_code: packet.ulp_nack_code(),
        })
    }

    /// Packet length (40).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the NACK.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_version(FALCON_VERSION);
        packet.set_connection_id(self.connection_id);
        packet.set_packet_type(PacketType::Nack);
        packet.clear_reserved_prefix();
        packet.set_data_bpsn(self.data_bpsn);
        packet.set_request_bpsn(self.request_bpsn);
        packet.set_t1(self.t1);
        packet.set_t2(self.t2);
        packet.set_cc_info(self.cc_info);
        packet.set_nack_psn(self.nack_psn);
        packet.set_nack_code(self.code);
        packet.set_rnr_timeout(self.rnr_timeout);
        packet.set_window(self.window);
        packet.set_ulp_nack_code(self.ulp_nack_code);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Falcon NACK cid {} {:?} {:?} window {} rnr {} ulp {:#04x} dbpsn {} rbpsn {} t1 {} t2 {} {}",
            self.connection_id,
            self.code,
            self.window,
            self.nack_psn,
            self.rnr_timeout,
            self.ulp_nack_code,
            self.data_bpsn.value(),
            self.request_bpsn.value(),
            self.t1,
            self.t2,
            self.cc_info
        )
    }
}

#[cfg(test)]
// Binary literals of byte 7 are grouped as the fields: protocol | type | AR.
#[allow(clippy::unusual_byte_groupings)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::falcon::cc_info::{EcnCount, HopCount, NackRueInfo, RxBufferLevel};
    use crate::wire::testing::nack_repr;

    fn repr() -> Repr {
        Repr {
            connection_id: ConnectionId::truncating(0xFF_FFFF),
            data_bpsn: Psn::new(10),
            request_bpsn: Psn::new(20),
            t1: FalconTime32::new(1),
            t2: FalconTime32::new(2),
            cc_info: NackCcInfo {
                hop_count: HopCount::truncating(15),
                rx_buffer_level: RxBufferLevel::truncating(0),
                ecn_count: EcnCount::truncating(0x3FFF),
                rue_info: NackRueInfo::truncating(0xAB_CDEF),
            },
            nack_psn: Psn::new(0x0102_0304),
            code: NackCode::ReceiverNotReady,
            rnr_timeout: RnrTimeout::truncating(14),
            window: Window::Request,
            ulp_nack_code: 0x20,
        }
    }

    #[test]
    fn layout() {
        let mut bytes = [0xFFu8; 40];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            &bytes[..8],
            &[0x10, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0b000_1000_0]
        );
        let v: u64 = (15 << 60) | (0x3FFF << 41) | 0xAB_CDEF;
        assert_eq!(&bytes[24..32], &v.to_be_bytes());
        assert_eq!(&bytes[32..36], &[1, 2, 3, 4]);
        assert_eq!(bytes[36], 2, "NACK code RNR");
        assert_eq!(bytes[37], 14, "RNR timeout in bits 4:0, reserved 7:5 zero");
        assert_eq!(bytes[38], 0x80, "W at bit 7, reserved 6:0 zero");
        assert_eq!(bytes[39], 0x20);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.rnr_timeout().as_nanos(), 1_280_000);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
    }

    /// What `falcon pcap` and the logs print: the fields from the view or
    /// the values; a view that does not parse says why.
    #[test]
    fn display_names_the_fields() {
        let mut bytes = [0u8; 40];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        let text = Packet::new_unchecked(&bytes[..]).to_string();
        assert_eq!(text, repr().to_string());
        assert!(
            text.starts_with("Falcon NACK cid ")
                && text.contains("ReceiverNotReady")
                && text.contains("ulp 0x20 dbpsn 10 rbpsn 20"),
            "{text}"
        );
        let short = Packet::new_unchecked(&bytes[..12]).to_string();
        assert!(short.starts_with("Falcon NACK ("), "{short}");
    }

    /// A NACK assembled by hand from the §7.8 table (p.35–37) and figure
    /// (p.35), every reserved bit set so that misplaced masks show.
    const HAND: [u8; 40] = [
        0x1A, 0x12, 0x34, 0x56, // version 1 | rsvd 0xA, CID 0x123456
        0xFF, 0xFF, 0xFF, 0xF1, // rsvd 27b (all 1) | type 1000b | R = 1
        0x89, 0xAB, 0xCD, 0xEF, // receiver data window BPSN
        0x01, 0x23, 0x45, 0x67, // receiver request window BPSN
        0xDE, 0xAD, 0xBE, 0xEF, // t1
        0x00, 0xC0, 0xFF, 0xEE, // t2
        // CC info V: hop 1001 | level 10110 | ECN 01001000110100 (0x1234) |
        // rsvd 1×17 | RUE info 0xA5C3E1 (24 bits, no OWN)
        0x9B, 0x24, 0x69, 0xFF, 0xFF, 0xA5, 0xC3, 0xE1, //
        0xFF, 0xFF, 0xFF, 0xFE, // NACK PSN
        0x06, // NACK code 6: ULP complete in error
        0xB3, // rsvd 101 | RNR timeout 10011b (7.68 ms)
        0xAA, // W = 1 (request window) | rsvd 0101010
        0x5A, // ULP NACK code
    ];

    #[test]
    fn parse_hand_assembled_bytes() {
        let packet = Packet::new_checked(&HAND[..]).unwrap();
        let repr = Repr::parse(&packet).unwrap();
        assert_eq!(
            repr,
            Repr {
                connection_id: ConnectionId::truncating(0x12_3456),
                data_bpsn: Psn::new(0x89AB_CDEF),
                request_bpsn: Psn::new(0x0123_4567),
                t1: FalconTime32::new(0xDEAD_BEEF),
                t2: FalconTime32::new(0x00C0_FFEE),
                cc_info: NackCcInfo {
                    hop_count: HopCount::truncating(0b1001),
                    rx_buffer_level: RxBufferLevel::truncating(0b10110),
                    ecn_count: EcnCount::truncating(0x1234),
                    rue_info: NackRueInfo::truncating(0xA5_C3E1),
                },
                nack_psn: Psn::new(0xFFFF_FFFE),
                code: NackCode::UlpCompletionInError,
                rnr_timeout: RnrTimeout::truncating(0b10011),
                window: Window::Request,
                ulp_nack_code: 0x5A,
            }
        );
        assert_eq!(repr.rnr_timeout.as_nanos(), 7_680_000);

        // Emit writes the same fields with every reserved bit zero.
        let mut expected = HAND;
        expected[0] = 0x10;
        expected[4..8].copy_from_slice(&[0, 0, 0, 0b000_1000_0]);
        expected[26..29].copy_from_slice(&[0x68, 0x00, 0x00]);
        expected[37] = 0b000_10011;
        expected[38] = 0x80;
        let mut out = [0x55u8; 40];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, expected);
    }

    #[test]
    fn reserved_bits_are_ignored() {
        let mut bytes = [0u8; 40];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        bytes[37] |= 0xE0;
        bytes[38] = 0xFF;
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.rnr_timeout().code(), 14);
        assert_eq!(packet.window(), Window::Request);
        bytes[38] = 0x7F;
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.window(), Window::Data);
        assert_eq!(Repr::parse(&packet).map(|r| r.window), Ok(Window::Data));
    }

    #[test]
    fn unknown_codes_parse() {
        let mut bytes = [0u8; 40];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        bytes[36] = 5;
        let parsed = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(parsed.code, NackCode::Unknown(5));
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(
            Packet::new_checked(&[0u8; 39][..]).unwrap_err(),
            ParseError::Truncated {
                what: "Falcon NACK",
                need: 40,
                have: 39
            }
        );
        let mut bytes = [0u8; 40];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        bytes[7] = 0b000_1001_0;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Err(ParseError::UnexpectedPacketType {
                expected: PacketType::Nack,
                found: PacketType::Back
            })
        );
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in nack_repr()) {
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(bytes.len(), HEADER_LEN);
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()), Ok(repr));
        }
    }
}
