//! NVMe completion status as NVMe over Falcon carries it.
//!
//! Layer: NVMe ULP, shared by the wire codec, the initiator and the target
//! backends. Owns [`Status`]: the NVMe Status Field (SCT, SC, CRD, M, DNR)
//! and its 16-bit wire form. Knows nothing of packets or connections.
//!
//! NVMe-0.9 §8.4 and §8.7 carry a "15-bit NVMe CQE Status Field" in the
//! upper half of word 8 of a Read Response or Write Completion without
//! saying where the 15 bits sit. Decision (ulp.md §3.5, D9): the half-word
//! is NVMe CQE DW3[31:16] with the Phase Tag (bit 0) forced to 0, so the
//! 15 bits keep their NVMe positions: SC in bits 8:1, SCT in 11:9, CRD in
//! 13:12, M in 14, DNR in 15 (NVMe Base 2.0 §4.6.1). A target copies its
//! device's half-word with P masked; an initiator builds its CQE from it.

use core::fmt;

/// Status Code Type (NVMe Base 2.0 Figure 95).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusCodeType {
    Generic,
    CommandSpecific,
    MediaAndDataIntegrity,
    Path,
    /// 4–6 reserved, 7 vendor specific: kept as received.
    Other(u8),
}

impl StatusCodeType {
    pub const fn from_bits(bits: u8) -> StatusCodeType {
        match bits & 0x7 {
            0 => StatusCodeType::Generic,
            1 => StatusCodeType::CommandSpecific,
            2 => StatusCodeType::MediaAndDataIntegrity,
            3 => StatusCodeType::Path,
            other => StatusCodeType::Other(other),
        }
    }

    pub const fn bits(self) -> u8 {
        match self {
            StatusCodeType::Generic => 0,
            StatusCodeType::CommandSpecific => 1,
            StatusCodeType::MediaAndDataIntegrity => 2,
            StatusCodeType::Path => 3,
            StatusCodeType::Other(bits) => bits & 0x7,
        }
    }
}

/// The NVMe Status Field of a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status {
    pub sct: StatusCodeType,
    /// Status Code.
    pub sc: u8,
    /// Command Retry Delay index (0–3).
    pub crd: u8,
    /// More: a log page has more about this status.
    pub more: bool,
    /// Do Not Retry.
    pub dnr: bool,
}

impl Status {
    /// Successful Completion (generic 0x00).
    pub const SUCCESS: Status = Status::generic(0x00);
    /// Invalid Command Opcode (generic 0x01): what a command the target
    /// does not implement completes with.
    pub const INVALID_OPCODE: Status = Status::generic(0x01).do_not_retry();
    /// Invalid Field in Command (generic 0x02).
    pub const INVALID_FIELD: Status = Status::generic(0x02).do_not_retry();
    /// Data Transfer Error (generic 0x04): what a write whose data the
    /// initiator marked invalid (INV) completes with (ulp.md §3.9).
    pub const DATA_TRANSFER_ERROR: Status = Status::generic(0x04);
    /// Internal Error (generic 0x06).
    pub const INTERNAL_ERROR: Status = Status::generic(0x06);
    /// Invalid Namespace or Format (generic 0x0B).
    pub const INVALID_NAMESPACE: Status = Status::generic(0x0B).do_not_retry();
    /// Transient Transport Error (generic 0x22): the transport lost the
    /// command (a push that Falcon could not deliver, a dead connection);
    /// a retry may succeed.
    pub const TRANSIENT_TRANSPORT_ERROR: Status = Status::generic(0x22);
    /// LBA Out of Range (generic 0x80).
    pub const LBA_OUT_OF_RANGE: Status = Status::generic(0x80).do_not_retry();
    /// Namespace Not Ready (generic 0x82).
    pub const NAMESPACE_NOT_READY: Status = Status::generic(0x82);
    /// Write Fault (media 0x80).
    pub const WRITE_FAULT: Status = Status::media(0x80);
    /// Unrecovered Read Error (media 0x81).
    pub const UNRECOVERED_READ: Status = Status::media(0x81);
    /// End-to-end Guard Check Error (media 0x82).
    pub const GUARD_CHECK: Status = Status::media(0x82).do_not_retry();
    /// End-to-end Application Tag Check Error (media 0x83).
    pub const APP_TAG_CHECK: Status = Status::media(0x83).do_not_retry();
    /// End-to-end Reference Tag Check Error (media 0x84).
    pub const REF_TAG_CHECK: Status = Status::media(0x84).do_not_retry();
    /// Command Aborted By Host (path 0x71): the initiator gave up on a
    /// command whose responses did not all come in time.
    pub const ABORTED_BY_HOST: Status = Status {
        sct: StatusCodeType::Path,
        ..Status::generic(0x71)
    };

    /// Generic status `sc`, retry allowed.
    pub const fn generic(sc: u8) -> Status {
        Status {
            sct: StatusCodeType::Generic,
            sc,
            crd: 0,
            more: false,
            dnr: false,
        }
    }

    /// Media and data integrity status `sc`, retry allowed.
    pub const fn media(sc: u8) -> Status {
        Status {
            sct: StatusCodeType::MediaAndDataIntegrity,
            sc,
            crd: 0,
            more: false,
            dnr: false,
        }
    }

    /// The same status with Do Not Retry set.
    pub const fn do_not_retry(self) -> Status {
        Status { dnr: true, ..self }
    }

    pub const fn is_success(self) -> bool {
        matches!(self.sct, StatusCodeType::Generic) && self.sc == 0
    }

    /// The wire half-word: CQE DW3[31:16] with P = 0 (see the module doc).
    pub const fn to_half_word(self) -> u16 {
        ((self.dnr as u16) << 15)
            | ((self.more as u16) << 14)
            | (((self.crd & 0x3) as u16) << 12)
            | ((self.sct.bits() as u16) << 9)
            | ((self.sc as u16) << 1)
    }

    /// From the wire half-word; the Phase Tag bit is ignored.
    pub const fn from_half_word(word: u16) -> Status {
        Status {
            sct: StatusCodeType::from_bits((word >> 9) as u8),
            sc: (word >> 1) as u8,
            crd: ((word >> 12) & 0x3) as u8,
            more: word & (1 << 14) != 0,
            dnr: word & (1 << 15) != 0,
        }
    }

    /// The 15-bit Status Field (SF) as Linux prints it (`SCT << 8 | SC`,
    /// e.g. 0x282 for a guard check error), without CRD, M and DNR.
    pub const fn code(self) -> u16 {
        ((self.sct.bits() as u16) << 8) | self.sc as u16
    }
}

impl Default for Status {
    fn default() -> Status {
        Status::SUCCESS
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match (self.sct, self.sc) {
            (StatusCodeType::Generic, 0x00) => "success",
            (StatusCodeType::Generic, 0x02) => "invalid field",
            (StatusCodeType::Generic, 0x04) => "data transfer error",
            (StatusCodeType::Generic, 0x06) => "internal error",
            (StatusCodeType::Generic, 0x0B) => "invalid namespace",
            (StatusCodeType::Generic, 0x22) => "transient transport error",
            (StatusCodeType::Generic, 0x80) => "LBA out of range",
            (StatusCodeType::Generic, 0x82) => "namespace not ready",
            (StatusCodeType::MediaAndDataIntegrity, 0x80) => "write fault",
            (StatusCodeType::MediaAndDataIntegrity, 0x81) => "unrecovered read error",
            (StatusCodeType::MediaAndDataIntegrity, 0x82) => "guard check error",
            (StatusCodeType::MediaAndDataIntegrity, 0x83) => "application tag check error",
            (StatusCodeType::MediaAndDataIntegrity, 0x84) => "reference tag check error",
            (StatusCodeType::Path, 0x71) => "command aborted by host",
            _ => "status",
        };
        write!(f, "{name} (0x{:03x}", self.code())?;
        if self.dnr {
            write!(f, ", DNR")?;
        }
        write!(f, ")")
    }
}

/// Completions counted by status class: what the initiator and the
/// target print as "errors by status".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCounts {
    pub success: u64,
    /// Invalid Field in Command.
    pub invalid_field: u64,
    pub invalid_namespace: u64,
    pub lba_out_of_range: u64,
    /// Data Transfer Error (INV, bad write data).
    pub data_transfer: u64,
    pub internal: u64,
    /// Transient Transport Error.
    pub transport: u64,
    /// Command Aborted By Host (timeouts).
    pub aborted: u64,
    /// Guard, application tag and reference tag check errors.
    pub integrity: u64,
    /// Write faults and unrecovered reads.
    pub media: u64,
    /// Any other status.
    pub other: u64,
}

impl StatusCounts {
    /// Counts one completion with `status`.
    pub fn record(&mut self, status: Status) {
        let counter = match (status.sct, status.sc) {
            (StatusCodeType::Generic, 0x00) => &mut self.success,
            (StatusCodeType::Generic, 0x02) => &mut self.invalid_field,
            (StatusCodeType::Generic, 0x04) => &mut self.data_transfer,
            (StatusCodeType::Generic, 0x06) => &mut self.internal,
            (StatusCodeType::Generic, 0x0B) => &mut self.invalid_namespace,
            (StatusCodeType::Generic, 0x22) => &mut self.transport,
            (StatusCodeType::Generic, 0x80) => &mut self.lba_out_of_range,
            (StatusCodeType::Path, 0x71) => &mut self.aborted,
            (StatusCodeType::MediaAndDataIntegrity, 0x80 | 0x81) => &mut self.media,
            (StatusCodeType::MediaAndDataIntegrity, 0x82..=0x84) => &mut self.integrity,
            _ => &mut self.other,
        };
        *counter += 1;
    }

    /// Completions with any status but success.
    pub fn errors(&self) -> u64 {
        self.invalid_field
            + self.invalid_namespace
            + self.lba_out_of_range
            + self.data_transfer
            + self.internal
            + self.transport
            + self.aborted
            + self.integrity
            + self.media
            + self.other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_word_keeps_nvme_positions() {
        // Linux's NVME_SC_GUARD_CHECK is 0x282; DNR is 0x4000 in Linux's
        // 15-bit value, bit 15 of the half-word here.
        assert_eq!(Status::GUARD_CHECK.code(), 0x282);
        assert_eq!(
            Status::GUARD_CHECK.to_half_word(),
            0x8000 | (2 << 9) | (0x82 << 1)
        );
        assert_eq!(Status::SUCCESS.to_half_word(), 0);
        assert_eq!(
            Status::LBA_OUT_OF_RANGE.to_half_word(),
            0x8000 | (0x80 << 1)
        );
    }

    #[test]
    fn every_half_word_round_trips_but_the_phase_bit() {
        for word in 0..=u16::MAX {
            let status = Status::from_half_word(word);
            assert_eq!(status.to_half_word(), word & !1, "{word:#06x}");
        }
    }

    #[test]
    fn counts_by_class() {
        let mut counts = StatusCounts::default();
        for status in [
            Status::SUCCESS,
            Status::GUARD_CHECK,
            Status::REF_TAG_CHECK,
            Status::TRANSIENT_TRANSPORT_ERROR,
            Status::ABORTED_BY_HOST,
            Status::generic(0x7F),
        ] {
            counts.record(status);
        }
        assert_eq!(
            (
                counts.success,
                counts.integrity,
                counts.transport,
                counts.aborted,
                counts.other
            ),
            (1, 2, 1, 1, 1)
        );
        assert_eq!(counts.errors(), 5);
        assert_eq!(Status::ABORTED_BY_HOST.code(), 0x371);
        assert_eq!(
            Status::TRANSIENT_TRANSPORT_ERROR.to_string(),
            "transient transport error (0x022)"
        );
    }

    #[test]
    fn display_names_the_status() {
        assert_eq!(
            Status::REF_TAG_CHECK.to_string(),
            "reference tag check error (0x284, DNR)"
        );
        assert!(Status::SUCCESS.is_success());
        assert!(!Status::DATA_TRANSFER_ERROR.is_success());
    }
}
