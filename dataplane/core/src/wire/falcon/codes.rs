//! Falcon code points: protocol and packet types, resync and NACK codes, the
//! NACK window bit and the RNR timeout table.
//!
//! Layer: wire. Values only: no IO, no state, no panics. Unassigned codes
//! parse to `Unknown(n)`; whether to drop such a packet is the caller's
//! policy, not the parser's.

use core::fmt;
use core::time::Duration;

use crate::error::RangeError;

enum_with_unknown! {
    /// Protocol Type (3 bits): the upper-layer protocol of the payload.
    /// OCP Falcon 0.9 §7.2 (p.25): 000b, 001b and 100b–111b are reserved.
    pub enum ProtocolType(u8) {
        /// 010b: RDMA over Falcon.
        Rdma = 2,
        /// 011b: NVMe over Falcon.
        Nvme = 3,
    }
}

enum_with_unknown! {
    /// Packet Type (4 bits, byte 7 bits 4:1 of every Falcon header).
    /// OCP Falcon 0.9 §7.2 (p.25–26): the base-header types, plus the ACK and
    /// NACK types "at the same location" of their own headers. 0001b, 0010b,
    /// 0100b, 0111b and 1011b–1111b are reserved (isekai uses some of them
    /// for features beyond rev 0.9).
    pub enum PacketType(u8) {
        /// 0000b: Pull Request (§7.3).
        PullRequest = 0,
        /// 0011b: Pull Data (§7.4).
        PullData = 3,
        /// 0101b: Push Data (§7.5).
        PushData = 5,
        /// 0110b: Resync (§7.6).
        Resync = 6,
        /// 1000b: NACK (§7.8).
        Nack = 8,
        /// 1001b: BACK, the base ACK (§7.7.1).
        Back = 9,
        /// 1010b: EACK, the extended ACK (§7.7.2).
        Eack = 10,
    }
}

impl PacketType {
    /// Length of this type's fixed header, or `None` for reserved types.
    pub const fn header_len(self) -> Option<usize> {
        match self {
            PacketType::PullRequest => Some(super::pull_request::HEADER_LEN),
            PacketType::PullData => Some(super::base::HEADER_LEN),
            PacketType::PushData => Some(super::push_data::HEADER_LEN),
            PacketType::Resync => Some(super::resync::HEADER_LEN),
            PacketType::Nack => Some(super::nack::HEADER_LEN),
            PacketType::Back => Some(super::ack::BACK_HEADER_LEN),
            PacketType::Eack => Some(super::ack::EACK_HEADER_LEN),
            PacketType::Unknown(_) => None,
        }
    }

    /// The packet carries a ULP payload after its header (Pull Request: ULP
    /// headers; Pull Data and Push Data: ULP headers and data).
    pub const fn carries_payload(self) -> bool {
        matches!(
            self,
            PacketType::PullRequest | PacketType::PullData | PacketType::PushData
        )
    }

    /// The packet uses the 24-byte base header (every type but the ACKs and
    /// the NACK, OCP Falcon 0.9 §7.2 p.25).
    pub const fn uses_base_header(self) -> bool {
        matches!(
            self,
            PacketType::PullRequest
                | PacketType::PullData
                | PacketType::PushData
                | PacketType::Resync
        )
    }
}

impl fmt::Display for PacketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PacketType::PullRequest => f.write_str("Pull Request"),
            PacketType::PullData => f.write_str("Pull Data"),
            PacketType::PushData => f.write_str("Push Data"),
            PacketType::Resync => f.write_str("Resync"),
            PacketType::Nack => f.write_str("NACK"),
            PacketType::Back => f.write_str("BACK"),
            PacketType::Eack => f.write_str("EACK"),
            PacketType::Unknown(code) => write!(f, "reserved type {code:#06b}"),
        }
    }
}

enum_with_unknown! {
    /// Resync Code (8 bits): why the transmitter resynchronises the
    /// receiver's window. OCP Falcon 0.9 §7.6 (p.30); 0x0 and 0x8–0xFF are
    /// reserved.
    pub enum ResyncCode(u8) {
        /// 0x1: target ULP complete-in-error (CIE).
        TargetUlpCompletionInError = 0x1,
        /// 0x2: local xLR flow.
        LocalXlrFlow = 0x2,
        /// 0x3: packet (exhausting) retransmission error.
        RetransmissionExhausted = 0x3,
        /// 0x4: transaction timed out.
        TransactionTimedOut = 0x4,
        /// 0x5: remote xLR flow.
        RemoteXlrFlow = 0x5,
        /// 0x6: target ULP non-recoverable error (NRE).
        TargetUlpNonRecoverableError = 0x6,
        /// 0x7: target ULP invalid CID error.
        TargetUlpInvalidCid = 0x7,
    }
}

impl ResyncCode {
    /// Every defined code, in code order (0x1–0x7).
    pub const ALL: [ResyncCode; 7] = [
        ResyncCode::TargetUlpCompletionInError,
        ResyncCode::LocalXlrFlow,
        ResyncCode::RetransmissionExhausted,
        ResyncCode::TransactionTimedOut,
        ResyncCode::RemoteXlrFlow,
        ResyncCode::TargetUlpNonRecoverableError,
        ResyncCode::TargetUlpInvalidCid,
    ];
}

enum_with_unknown! {
    /// NACK Code (8 bits): why the receiver refused a packet. OCP Falcon 0.9
    /// §7.8 (p.36); 0, 3, 5 and 9–255 are reserved (isekai misuses 5
    /// internally: never send it, spec/falcon.md §3.4).
    pub enum NackCode(u8) {
        /// 1: "request dropped due to insufficient resources at the
        /// receiver" (isekai: resource exhaustion). Retransmit as normal.
        #[doc(alias = "ResourceExhaustion")]
        InsufficientResources = 1,
        /// 2: ULP receiver not ready (RNR); retry after the RNR timeout.
        ReceiverNotReady = 2,
        /// 4: xLR drop indication.
        XlrDrop = 4,
        /// 6: ULP complete in error (CIE) indication.
        UlpCompletionInError = 6,
        /// 7: ULP non-recoverable error (NRE) indication.
        UlpNonRecoverableError = 7,
        /// 8: invalid CID error indication.
        InvalidCid = 8,
    }
}

/// The NACK's W bit: which sliding window the NACKed PSN belongs to.
/// OCP Falcon 0.9 §7.8 (p.37): "1b for request sliding window and 0b for
/// data sliding window".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    /// The request window (Pull Requests), W = 1.
    Request,
    /// The data window (Push Data, Pull Data, Resync), W = 0.
    Data,
}

impl Window {
    /// Decodes the W bit.
    pub const fn from_bit(bit: bool) -> Self {
        if bit {
            Window::Request
        } else {
            Window::Data
        }
    }

    /// The W bit.
    pub const fn bit(self) -> bool {
        matches!(self, Window::Request)
    }
}

/// RNR NACK timeout codes in nanoseconds, indexed by code. OCP Falcon 0.9
/// §7.8 (p.36–37), the InfiniBand RNR NAK timer table: code 0 is the longest
/// (655.36 ms); codes 1–31 ascend from 0.01 ms to 491.52 ms.
const RNR_TIMEOUT_NANOS: [u64; 32] = [
    655_360_000, // 00000b: 655.36 ms
    10_000,      // 0.01 ms
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000, // 01000b: 0.16 ms
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000, // 10000b: 2.56 ms
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000, // 11000b: 40.96 ms
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000, // 11111b: 491.52 ms
];

/// The 5-bit RNR NACK Timeout code (NACK byte 37 bits 4:0): how long the
/// transmitter waits before retrying a packet NACKed with
/// [`NackCode::ReceiverNotReady`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RnrTimeout(u8);

impl RnrTimeout {
    /// Width of the field, in bits.
    pub const BITS: u32 = 5;
    /// The longest timeout, 655.36 ms (code 0).
    pub const LONGEST: RnrTimeout = RnrTimeout(0);
    /// The shortest timeout, 0.01 ms (code 1).
    pub const SHORTEST: RnrTimeout = RnrTimeout(1);

    /// Wraps a code.
    ///
    /// # Errors
    ///
    /// [`RangeError`] if `code > 31`.
    pub const fn new(code: u8) -> Result<Self, RangeError> {
        if code > 31 {
            return Err(RangeError {
                what: "RNR NACK timeout code",
                value: code as u64,
                max: 31,
            });
        }
        Ok(RnrTimeout(code))
    }

    /// Keeps the low 5 bits of `code` (wire decoding).
    pub const fn truncating(code: u8) -> Self {
        RnrTimeout(code & 0x1F)
    }

    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The timeout in nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        RNR_TIMEOUT_NANOS[(self.0 & 0x1F) as usize]
    }

    /// The timeout as a [`Duration`].
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.as_nanos())
    }

    /// The code with the shortest timeout that is at least `nanos`, or `None`
    /// if `nanos` exceeds 655.36 ms. A request of 0 gives 0.01 ms (code 1).
    pub const fn at_least_nanos(nanos: u64) -> Option<Self> {
        // Codes 1..=31 ascend; code 0 is the longest and comes last.
        let mut code = 1;
        while code < 32 {
            if RNR_TIMEOUT_NANOS[code] >= nanos {
                return Some(RnrTimeout(code as u8));
            }
            code += 1;
        }
        if RNR_TIMEOUT_NANOS[0] >= nanos {
            return Some(RnrTimeout(0));
        }
        None
    }

    /// [`at_least_nanos`](Self::at_least_nanos) for a [`Duration`].
    pub fn at_least(duration: Duration) -> Option<Self> {
        let nanos = u64::try_from(duration.as_nanos()).ok()?;
        Self::at_least_nanos(nanos)
    }

    /// The code whose timeout is nearest to `duration`: 0.01 ms (code 1)
    /// for anything shorter, 655.36 ms (code 0) for anything longer. Half
    /// way between two codes it takes the longer, so the wait is never
    /// shorter than asked when the two are equally near.
    pub fn nearest(duration: Duration) -> Self {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let mut best = RnrTimeout::SHORTEST;
        for code in 0..32u8 {
            let candidate = RnrTimeout(code);
            let (distance, best_distance) = (
                candidate.as_nanos().abs_diff(nanos),
                best.as_nanos().abs_diff(nanos),
            );
            if distance < best_distance
                || (distance == best_distance && candidate.as_nanos() > best.as_nanos())
            {
                best = candidate;
            }
        }
        best
    }
}

impl fmt::Display for RnrTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.as_nanos();
        write!(
            f,
            "{}.{:02} ms",
            nanos / 1_000_000,
            (nanos % 1_000_000) / 10_000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resync_all_is_every_defined_code_in_order() {
        for (i, code) in ResyncCode::ALL.into_iter().enumerate() {
            assert_eq!(u8::from(code), i as u8 + 1);
        }
        assert_eq!(ResyncCode::from(8), ResyncCode::Unknown(8));
    }

    #[test]
    fn packet_type_codes_match_the_spec() {
        let expected = [
            (0, PacketType::PullRequest),
            (3, PacketType::PullData),
            (5, PacketType::PushData),
            (6, PacketType::Resync),
            (8, PacketType::Nack),
            (9, PacketType::Back),
            (10, PacketType::Eack),
        ];
        for (code, ty) in expected {
            assert_eq!(PacketType::from(code), ty);
            assert_eq!(u8::from(ty), code);
        }
        for reserved in [1u8, 2, 4, 7, 11, 12, 13, 14, 15] {
            assert_eq!(PacketType::from(reserved), PacketType::Unknown(reserved));
            assert_eq!(PacketType::from(reserved).header_len(), None);
        }
        assert_eq!(PacketType::Eack.header_len(), Some(72));
        assert_eq!(PacketType::Nack.header_len(), Some(40));
        assert_eq!(PacketType::PushData.header_len(), Some(28));
        assert_eq!(PacketType::Unknown(7).to_string(), "reserved type 0b0111");
    }

    #[test]
    fn protocol_resync_and_nack_codes() {
        assert_eq!(ProtocolType::from(2), ProtocolType::Rdma);
        assert_eq!(ProtocolType::from(3), ProtocolType::Nvme);
        assert_eq!(ProtocolType::from(1), ProtocolType::Unknown(1));
        assert_eq!(ResyncCode::from(3), ResyncCode::RetransmissionExhausted);
        assert_eq!(ResyncCode::from(7), ResyncCode::TargetUlpInvalidCid);
        assert_eq!(ResyncCode::from(8), ResyncCode::Unknown(8));
        assert_eq!(NackCode::from(1), NackCode::InsufficientResources);
        assert_eq!(NackCode::from(2), NackCode::ReceiverNotReady);
        assert_eq!(NackCode::from(4), NackCode::XlrDrop);
        assert_eq!(NackCode::from(6), NackCode::UlpCompletionInError);
        assert_eq!(NackCode::from(7), NackCode::UlpNonRecoverableError);
        assert_eq!(NackCode::from(8), NackCode::InvalidCid);
        for reserved in [0u8, 3, 5, 9, 255] {
            assert_eq!(NackCode::from(reserved), NackCode::Unknown(reserved));
        }
    }

    #[test]
    fn rnr_timeout_table() {
        let ms = |code: u8| RnrTimeout::new(code).unwrap().as_nanos();
        assert_eq!(ms(0), 655_360_000);
        assert_eq!(ms(1), 10_000);
        assert_eq!(ms(5), 60_000);
        assert_eq!(ms(13), 960_000);
        assert_eq!(ms(16), 2_560_000);
        assert_eq!(ms(19), 7_680_000);
        assert_eq!(ms(27), 122_880_000);
        assert_eq!(ms(31), 491_520_000);
        assert!(RnrTimeout::new(32).is_err());
        assert_eq!(RnrTimeout::truncating(0xE1).code(), 1);
        assert_eq!(RnrTimeout::LONGEST.to_string(), "655.36 ms");
        assert_eq!(
            RnrTimeout::SHORTEST.as_duration(),
            Duration::from_micros(10)
        );
        for code in 2..32 {
            assert!(ms(code) > ms(code - 1), "codes 1..=31 ascend");
        }
    }

    #[test]
    fn rnr_timeout_every_code_matches_the_spec_table() {
        // OCP Falcon 0.9 §7.8 p.36–37 (spec/falcon.md §3.5), typed from the
        // table as printed: (5-bit code, delay in ms).
        let table = [
            ("00000", "655.36"),
            ("00001", "0.01"),
            ("00010", "0.02"),
            ("00011", "0.03"),
            ("00100", "0.04"),
            ("00101", "0.06"),
            ("00110", "0.08"),
            ("00111", "0.12"),
            ("01000", "0.16"),
            ("01001", "0.24"),
            ("01010", "0.32"),
            ("01011", "0.48"),
            ("01100", "0.64"),
            ("01101", "0.96"),
            ("01110", "1.28"),
            ("01111", "1.92"),
            ("10000", "2.56"),
            ("10001", "3.84"),
            ("10010", "5.12"),
            ("10011", "7.68"),
            ("10100", "10.24"),
            ("10101", "15.36"),
            ("10110", "20.48"),
            ("10111", "30.72"),
            ("11000", "40.96"),
            ("11001", "61.44"),
            ("11010", "81.92"),
            ("11011", "122.88"),
            ("11100", "163.84"),
            ("11101", "245.76"),
            ("11110", "327.68"),
            ("11111", "491.52"),
        ];
        for (code, ms) in table {
            let code = u8::from_str_radix(code, 2).unwrap();
            let (whole, hundredths) = ms.split_once('.').unwrap();
            let nanos = whole.parse::<u64>().unwrap() * 1_000_000
                + hundredths.parse::<u64>().unwrap() * 10_000;
            let timeout = RnrTimeout::new(code).unwrap();
            assert_eq!(timeout.as_nanos(), nanos, "code {code:#07b}");
            assert_eq!(timeout.to_string(), format!("{ms} ms"), "code {code:#07b}");
        }
    }

    #[test]
    fn rnr_timeout_inverse() {
        let code = |nanos| RnrTimeout::at_least_nanos(nanos).map(RnrTimeout::code);
        assert_eq!(code(0), Some(1));
        assert_eq!(code(10_000), Some(1));
        assert_eq!(code(10_001), Some(2));
        assert_eq!(code(1_000_000), Some(14)); // 1 ms → 1.28 ms
        assert_eq!(code(491_520_000), Some(31));
        assert_eq!(code(491_520_001), Some(0));
        assert_eq!(code(655_360_000), Some(0));
        assert_eq!(code(655_360_001), None);
        assert_eq!(
            RnrTimeout::at_least(Duration::from_millis(5)).map(RnrTimeout::code),
            Some(18)
        );
        assert_eq!(RnrTimeout::at_least(Duration::MAX), None);
        // The inverse never undershoots and is the tightest code.
        for nanos in (0..700_000_000u64).step_by(997_331) {
            if let Some(t) = RnrTimeout::at_least_nanos(nanos) {
                assert!(t.as_nanos() >= nanos);
                for other in 0..32 {
                    let other = RnrTimeout::new(other).unwrap().as_nanos();
                    assert!(other < nanos || other >= t.as_nanos());
                }
            }
        }
    }

    #[test]
    fn rnr_timeout_nearest() {
        let code = |d: Duration| RnrTimeout::nearest(d).code();
        // Every code's own timeout maps back to it.
        for c in 0..32 {
            let t = RnrTimeout::new(c).unwrap();
            assert_eq!(RnrTimeout::nearest(t.as_duration()), t, "code {c}");
        }
        assert_eq!(code(Duration::ZERO), 1);
        assert_eq!(code(Duration::from_millis(1)), 13); // 0.96 ms, not 1.28
        assert_eq!(code(Duration::from_micros(1_150)), 14); // 1.28 ms
        assert_eq!(code(Duration::from_millis(120)), 27); // 122.88 ms
        assert_eq!(code(Duration::from_millis(600)), 0); // 655.36, not 491.52
        assert_eq!(code(Duration::from_millis(570)), 31); // 491.52 ms
        assert_eq!(code(Duration::from_secs(10)), 0);
        assert_eq!(code(Duration::MAX), 0);
        // Half way between 0.01 and 0.02 ms: the longer.
        assert_eq!(code(Duration::from_nanos(15_000)), 2);
        assert_eq!(code(Duration::from_nanos(14_999)), 1);
        // No code is nearer than the one chosen (an exhaustive oracle).
        for nanos in (0..700_000_000u64).step_by(1_234_567) {
            let chosen = RnrTimeout::nearest(Duration::from_nanos(nanos));
            for other in 0..32 {
                let other = RnrTimeout::new(other).unwrap().as_nanos();
                assert!(other.abs_diff(nanos) >= chosen.as_nanos().abs_diff(nanos));
            }
        }
    }

    #[test]
    fn window_bit() {
        assert!(Window::Request.bit());
        assert!(!Window::Data.bit());
        assert_eq!(Window::from_bit(true), Window::Request);
        assert_eq!(Window::from_bit(false), Window::Data);
    }
}
