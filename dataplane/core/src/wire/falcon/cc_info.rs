//! The 64-bit congestion-control information word of ACKs and NACKs.
//!
//! Layer: wire. Owns the typed sub-fields of bytes 24–31 of BACK, EACK and
//! NACK: [`CcInfo`] (BACK/EACK, with the OWN bits) and [`NackCcInfo`] (NACK,
//! no OWN, wider RUE info). Values only; no IO, no panics. Reserved bits are
//! ignored on decode and zero on encode.
//!
//! Let `V` be the big-endian 64-bit value of bytes 24..32 (spec/falcon.md §3.1):
//!
//! | V bits | BACK / EACK (§7.7.1 p.32) | NACK (§7.8 p.37) |
//! |---|---|---|
//! | 63:60 | hop count (4b) | hop count |
//! | 59:55 | rx buffer occupancy level (5b) | rx buffer level |
//! | 54:41 | ECN rx packet count (14b) | ECN count |
//! | 40:24 | reserved | reserved |
//! | 23:2  | RUE info (22b) | RUE info (24b, V\[23:0\]) |
//! | 1:0   | OWN: bit 0 R-OWN, bit 1 D-OWN | (part of RUE info) |
//!
//! Decision (spec/falcon.md §9 item 1): the figures draw RUE info as 21 bits
//! (BACK) and 23 bits (NACK); the text gives \[21:0\] of the 62-bit CC info
//! (BACK) and \[23:0\] (NACK). OCP Falcon 0.9 p.32 and p.37 (checked in
//! ocp/falcon-transport-rev0.9.txt): we follow the **text**, as isekai does
//! (`kGen1CcMetadataBits = 22`).

use core::fmt;

bounded_uint! {
    /// Forward-path hop count (4 bits): initial TTL − received TTL
    /// (OCP Falcon 0.9 §10.6.1 p.89).
    pub struct HopCount(u8, bits = 4, what = "hop count");
}

bounded_uint! {
    /// Quantized EMA of the receiver's buffer occupancy (5 bits, 0..=31).
    pub struct RxBufferLevel(u8, bits = 5, what = "rx buffer level");
}

bounded_uint! {
    /// Cumulative count of ECN-marked packets received, modulo 2^14. The
    /// sender takes differences with [`EcnCount::wrapping_since`].
    pub struct EcnCount(u16, bits = 14, what = "ECN count");
}

bounded_uint! {
    /// RUE info of a BACK/EACK (22 bits, V\[23:2\]): opaque `cc_metadata` set by
    /// the receiver's RUE and echoed to the sender's RUE.
    pub struct AckRueInfo(u32, bits = 22, what = "ACK RUE info");
}

bounded_uint! {
    /// RUE info of a NACK (24 bits, V\[23:0\]).
    pub struct NackRueInfo(u32, bits = 24, what = "NACK RUE info");
}

impl HopCount {
    /// The hop count from the sender's initial TTL (or hop limit) and the
    /// received one, saturating at 15 (and at 0 if `received > initial`).
    pub const fn from_ttl(initial: u8, received: u8) -> Self {
        Self::saturating(initial.saturating_sub(received))
    }
}

impl EcnCount {
    /// The wire value of a cumulative counter (its low 14 bits).
    pub const fn from_cumulative(count: u64) -> Self {
        Self::truncating((count & 0x3FFF) as u16)
    }

    /// Marks counted from `earlier` to `self`, modulo 2^14.
    pub const fn wrapping_since(self, earlier: EcnCount) -> u16 {
        self.0.wrapping_sub(earlier.0) & 0x3FFF
    }
}

/// Out-of-Window Notification (2 bits, V\[1:0\] of BACK/EACK): the receiver
/// dropped a packet because it fell beyond that sliding window.
///
/// Decision (spec/falcon.md §9 item 9): OCP Falcon 0.9 p.32 says "Bit 0 is
/// for the Request Window, Bit 1 is for the Data Window" without fixing the
/// field's own bit order; we read it as V bit 0 = R-OWN, V bit 1 = D-OWN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Own {
    /// R-OWN: a request-window packet was dropped out of window.
    pub request: bool,
    /// D-OWN: a data-window packet was dropped out of window.
    pub data: bool,
}

impl Own {
    /// Neither bit set.
    pub const NONE: Own = Own {
        request: false,
        data: false,
    };

    /// Decodes the low 2 bits of `bits`.
    pub const fn from_bits(bits: u8) -> Self {
        Own {
            request: bits & field::OWN_REQUEST != 0,
            data: bits & field::OWN_DATA != 0,
        }
    }

    /// The 2-bit field.
    pub const fn bits(self) -> u8 {
        let mut bits = 0;
        if self.request {
            bits |= field::OWN_REQUEST;
        }
        if self.data {
            bits |= field::OWN_DATA;
        }
        bits
    }

    /// At least one bit is set (a reason to send an EACK, §9.1.6 p.62).
    pub const fn any(self) -> bool {
        self.request || self.data
    }
}

mod field {
    pub(super) const HOP_COUNT_SHIFT: u32 = 60;
    pub(super) const RX_BUFFER_LEVEL_SHIFT: u32 = 55;
    pub(super) const ECN_COUNT_SHIFT: u32 = 41;
    /// BACK/EACK: RUE info sits above the two OWN bits.
    pub(super) const ACK_RUE_INFO_SHIFT: u32 = 2;
    pub(super) const NACK_RUE_INFO_SHIFT: u32 = 0;
    pub(super) const OWN_MASK: u64 = 0b11;
    pub(super) const OWN_REQUEST: u8 = 0b01;
    pub(super) const OWN_DATA: u8 = 0b10;
    /// V\[23:0\]: the 24 bits the RUE sees as `cc_metadata`.
    pub(super) const CC_METADATA_MASK: u64 = 0x00FF_FFFF;
}

/// Decodes the sub-fields both words share.
const fn shared(bits: u64) -> (HopCount, RxBufferLevel, EcnCount) {
    (
        HopCount::truncating((bits >> field::HOP_COUNT_SHIFT) as u8),
        RxBufferLevel::truncating((bits >> field::RX_BUFFER_LEVEL_SHIFT) as u8),
        EcnCount::truncating((bits >> field::ECN_COUNT_SHIFT) as u16),
    )
}

const fn shared_bits(hop_count: HopCount, level: RxBufferLevel, ecn: EcnCount) -> u64 {
    ((hop_count.value() as u64) << field::HOP_COUNT_SHIFT)
        | ((level.value() as u64) << field::RX_BUFFER_LEVEL_SHIFT)
        | ((ecn.value() as u64) << field::ECN_COUNT_SHIFT)
}

/// Congestion-control information and OWN bits of a BACK or EACK (bytes
/// 24–31). Every combination of field values is encodable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CcInfo {
    /// Forward-path hop count, V\[63:60\].
    pub hop_count: HopCount,
    /// Receiver buffer occupancy level, V\[59:55\].
    pub rx_buffer_level: RxBufferLevel,
    /// Cumulative ECN-marked packet count, V\[54:41\].
    pub ecn_count: EcnCount,
    /// Opaque RUE info, V\[23:2\].
    pub rue_info: AckRueInfo,
    /// Out-of-window notification, V\[1:0\].
    pub own: Own,
}

impl CcInfo {
    /// Decodes the word; reserved bits V\[40:24\] are ignored.
    pub const fn from_bits(bits: u64) -> Self {
        let (hop_count, rx_buffer_level, ecn_count) = shared(bits);
        CcInfo {
            hop_count,
            rx_buffer_level,
            ecn_count,
            rue_info: AckRueInfo::truncating((bits >> field::ACK_RUE_INFO_SHIFT) as u32),
            own: Own::from_bits((bits & field::OWN_MASK) as u8),
        }
    }

    /// Encodes the word with zero reserved bits.
    pub const fn to_bits(&self) -> u64 {
        shared_bits(self.hop_count, self.rx_buffer_level, self.ecn_count)
            | ((self.rue_info.value() as u64) << field::ACK_RUE_INFO_SHIFT)
            | self.own.bits() as u64
    }

    /// V\[23:0\], the 24-bit `cc_metadata` of the RUE event: RUE info and OWN
    /// together (isekai: 22 + 2 bits, spec/falcon.md §3.1).
    pub const fn cc_metadata(&self) -> u32 {
        (self.to_bits() & field::CC_METADATA_MASK) as u32
    }
}

impl fmt::Display for CcInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hops {} rxbuf {} ecn {} rue {:#x}",
            self.hop_count,
            self.rx_buffer_level,
            self.ecn_count,
            self.rue_info.value()
        )?;
        if self.own.request {
            f.write_str(" R-OWN")?;
        }
        if self.own.data {
            f.write_str(" D-OWN")?;
        }
        Ok(())
    }
}

/// Congestion-control information of a NACK (bytes 24–31). The NACK has no
/// OWN field in the spec (OCP Falcon 0.9 §7.8 p.37); its RUE info is 24 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NackCcInfo {
    /// Forward-path hop count, V\[63:60\].
    pub hop_count: HopCount,
    /// Receiver buffer occupancy level, V\[59:55\].
    pub rx_buffer_level: RxBufferLevel,
    /// Cumulative ECN-marked packet count, V\[54:41\].
    pub ecn_count: EcnCount,
    /// Opaque RUE info, V\[23:0\].
    pub rue_info: NackRueInfo,
}

impl NackCcInfo {
    /// Decodes the word; reserved bits V\[40:24\] are ignored.
    pub const fn from_bits(bits: u64) -> Self {
        let (hop_count, rx_buffer_level, ecn_count) = shared(bits);
        NackCcInfo {
            hop_count,
            rx_buffer_level,
            ecn_count,
            rue_info: NackRueInfo::truncating((bits >> field::NACK_RUE_INFO_SHIFT) as u32),
        }
    }

    /// Encodes the word with zero reserved bits.
    pub const fn to_bits(&self) -> u64 {
        shared_bits(self.hop_count, self.rx_buffer_level, self.ecn_count)
            | ((self.rue_info.value() as u64) << field::NACK_RUE_INFO_SHIFT)
    }

    /// V\[23:0\], the 24-bit `cc_metadata` of the RUE event.
    pub const fn cc_metadata(&self) -> u32 {
        (self.to_bits() & field::CC_METADATA_MASK) as u32
    }
}

impl fmt::Display for NackCcInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hops {} rxbuf {} ecn {} rue {:#x}",
            self.hop_count,
            self.rx_buffer_level,
            self.ecn_count,
            self.rue_info.value()
        )
    }
}

#[cfg(test)]
// Binary literals are grouped as the sub-fields of the CC-info word.
#[allow(clippy::unusual_byte_groupings)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::testing::{cc_info, nack_cc_info};

    /// hop 0xA, level 0x15, ECN 0x2AAA, every reserved bit set, RUE info
    /// 0x2ABCDE, OWN = D-OWN only, laid out by hand:
    /// 1010 | 10101 | 10101010101010 | 1×17 | 1010101011110011011110 | 10
    const WORD: u64 = 0b1010_10101_10101010101010_11111111111111111_1010101011110011011110_10;

    #[test]
    fn ack_cc_info_bit_positions() {
        let info = CcInfo::from_bits(WORD);
        assert_eq!(info.hop_count.value(), 0xA);
        assert_eq!(info.rx_buffer_level.value(), 0x15);
        assert_eq!(info.ecn_count.value(), 0x2AAA);
        assert_eq!(info.rue_info.value(), 0x2A_BCDE);
        assert_eq!(
            info.own,
            Own {
                request: false,
                data: true
            }
        );
        // Reserved bits V[40:24] are dropped on encode.
        assert_eq!(info.to_bits(), WORD & !(0x1FFFF << 24));
        assert_eq!(info.cc_metadata(), (0x2A_BCDE << 2) | 0b10);
    }

    #[test]
    fn own_bit_order() {
        assert_eq!(
            CcInfo::from_bits(0b01).own,
            Own {
                request: true,
                data: false
            }
        );
        assert_eq!(
            CcInfo::from_bits(0b10).own,
            Own {
                request: false,
                data: true
            }
        );
        assert!(!Own::NONE.any());
        assert_eq!(
            Own {
                request: true,
                data: true
            }
            .bits(),
            0b11
        );
    }

    #[test]
    fn nack_cc_info_has_24_bit_rue_info() {
        let info = NackCcInfo::from_bits(WORD);
        assert_eq!(info.hop_count.value(), 0xA);
        assert_eq!(info.rx_buffer_level.value(), 0x15);
        assert_eq!(info.ecn_count.value(), 0x2AAA);
        assert_eq!(info.rue_info.value(), (0x2A_BCDE << 2) | 0b10);
        assert_eq!(info.to_bits(), WORD & !(0x1FFFF << 24));
        assert_eq!(NackRueInfo::MAX.value(), 0xFF_FFFF);
        assert_eq!(AckRueInfo::MAX.value(), 0x3F_FFFF);
    }

    #[test]
    fn sub_field_constructors() {
        assert_eq!(HopCount::from_ttl(64, 59).value(), 5);
        assert_eq!(HopCount::from_ttl(64, 20), HopCount::MAX);
        assert_eq!(HopCount::from_ttl(20, 64).value(), 0);
        assert!(RxBufferLevel::new(32).is_err());
        assert_eq!(RxBufferLevel::saturating(200).value(), 31);
        assert_eq!(EcnCount::from_cumulative(0x4005).value(), 5);
        assert_eq!(
            EcnCount::from_cumulative(0x4005).wrapping_since(EcnCount::truncating(0x3FFE)),
            7
        );
        assert!(AckRueInfo::new(1 << 22).is_err());
    }

    proptest! {
        #[test]
        fn ack_round_trip(info in cc_info()) {
            prop_assert_eq!(CcInfo::from_bits(info.to_bits()), info);
            prop_assert_eq!(info.to_bits() & (0x1FFFF << 24), 0);
        }

        #[test]
        fn nack_round_trip(info in nack_cc_info()) {
            prop_assert_eq!(NackCcInfo::from_bits(info.to_bits()), info);
        }

        #[test]
        fn any_word_decodes(bits in any::<u64>()) {
            let reserved = 0x1FFFFu64 << 24;
            prop_assert_eq!(CcInfo::from_bits(bits).to_bits(), bits & !reserved);
            prop_assert_eq!(NackCcInfo::from_bits(bits).to_bits(), bits & !reserved);
        }
    }
}
