//! Errors, receive drop reasons and receive counters.
//!
//! Owns the closed set of reasons a received PSP packet is dropped for
//! ([`RxDrop`]), the per-reason counters ([`RxCounters`]), the header parse
//! error ([`HeaderError`]) and the transmit-side error ([`SealError`]). It
//! never logs, allocates or panics: a malformed packet is a counted drop.
//! The dataplane's global `DropReason` wraps [`RxDrop`], so it stays a plain
//! `Copy` enum with stable snake_case names.

use core::fmt;

/// Why a PSP header failed to parse. Every variant names what is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeaderError {
    /// Fewer bytes than the 16-byte base header (or, for a packet, than the
    /// header plus the 16-byte ICV).
    Truncated,
    /// Byte 3 bit 0 ("always 1") is clear. REF `psp_decrypt.c` rejects these.
    AlwaysOneClear,
    /// Hdr Ext Len is 0 (shorter than the base header), or V is set but the
    /// extension is too short to hold the 8-byte virtualization cookie.
    ExtLenTooShort,
    /// Hdr Ext Len claims more bytes than the buffer holds.
    ExtLenBeyondBuffer,
    /// Crypt Offset points beyond the last payload byte (spec "negative
    /// length": implementation-defined; we drop, spec/psp.md §1.3).
    CryptOffsetBeyondPayload,
    /// The low 31 bits of the SPI are zero (reserved, PSP spec "SPI").
    ZeroSpi,
    /// Version 2 or 3 (AES-GMAC): defined by the spec, not implemented here
    /// because no source confirms its KDF label (spec/psp.md §3, §9 item 1).
    UnsupportedVersion(u8),
    /// Version 4..=15: reserved by the spec, discard.
    ReservedVersion(u8),
}

impl HeaderError {
    /// The receive drop reason this parse error is counted under.
    pub const fn drop_reason(self) -> RxDrop {
        match self {
            HeaderError::Truncated => RxDrop::Truncated,
            HeaderError::AlwaysOneClear => RxDrop::AlwaysOneClear,
            HeaderError::ExtLenTooShort => RxDrop::ExtLenTooShort,
            HeaderError::ExtLenBeyondBuffer => RxDrop::ExtLenBeyondBuffer,
            HeaderError::CryptOffsetBeyondPayload => RxDrop::CryptOffsetBeyondPayload,
            HeaderError::ZeroSpi => RxDrop::BadSpi,
            HeaderError::UnsupportedVersion(_) => RxDrop::UnsupportedVersion,
            HeaderError::ReservedVersion(_) => RxDrop::ReservedVersion,
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Truncated => f.write_str("PSP packet truncated"),
            HeaderError::AlwaysOneClear => f.write_str("PSP header always-1 bit is clear"),
            HeaderError::ExtLenTooShort => {
                f.write_str("PSP hdr ext len too short (0, or V set without room for the VC)")
            }
            HeaderError::ExtLenBeyondBuffer => {
                f.write_str("PSP hdr ext len extends beyond the buffer")
            }
            HeaderError::CryptOffsetBeyondPayload => {
                f.write_str("PSP crypt offset points beyond the payload")
            }
            HeaderError::ZeroSpi => f.write_str("PSP SPI low 31 bits are zero (reserved)"),
            HeaderError::UnsupportedVersion(v) => {
                write!(f, "PSP version {v} (AES-GMAC) is not supported")
            }
            HeaderError::ReservedVersion(v) => write!(f, "PSP version {v} is reserved"),
        }
    }
}

impl std::error::Error for HeaderError {}

impl From<HeaderError> for RxDrop {
    fn from(e: HeaderError) -> Self {
        e.drop_reason()
    }
}

/// Why a packet could not be sealed. These are caller bugs or configuration
/// errors, never packet input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SealError {
    /// The buffer cannot hold header, payload and the 16-byte ICV at the
    /// given offset.
    BufferTooShort,
    /// Crypt offset above 63 (the field has 6 bits).
    CryptOffsetTooLarge,
    /// Crypt offset · 4 is smaller than the header extension (VC), so part of
    /// the extension would be encrypted. REF does this, SCAPY does not; we
    /// never emit it (spec/psp.md §1.5, "Known implementation divergences").
    CryptOffsetInsideExtension,
    /// Crypt offset points beyond the payload end (spec "PSP Header": must
    /// not be generated).
    CryptOffsetBeyondPayload,
    /// The header's version does not match the key's algorithm.
    VersionMismatch,
    /// The SPI's low 31 bits are zero.
    ZeroSpi,
    /// The AEAD backend refused the operation (input longer than it supports).
    Aead,
    /// The SA's IV clock reached 2^64 − 1: no strictly larger IV exists, the
    /// SA must be rekeyed (PSP spec "IV Generation": an IV never repeats
    /// under one key).
    IvExhausted,
}

impl fmt::Display for SealError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SealError::BufferTooShort => "buffer too short for PSP header, payload and ICV",
            SealError::CryptOffsetTooLarge => "crypt offset above 63",
            SealError::CryptOffsetInsideExtension => {
                "crypt offset would encrypt part of the PSP header extension"
            }
            SealError::CryptOffsetBeyondPayload => "crypt offset beyond the payload end",
            SealError::VersionMismatch => "PSP version does not match the key",
            SealError::ZeroSpi => "SPI low 31 bits are zero",
            SealError::Aead => "AEAD backend refused the input",
            SealError::IvExhausted => "IV space of the SA exhausted; rekey",
        })
    }
}

impl std::error::Error for SealError {}

/// The active master key has handed out all 2^31 − 1 SPIs: rotate the
/// master key (PSP spec "Master Key Lifetime").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpiExhausted;

impl fmt::Display for SpiExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SPI space of the active master key exhausted; rotate the master key")
    }
}

impl std::error::Error for SpiExhausted {}

/// Why a received PSP packet was dropped. One counter each in [`RxCounters`].
///
/// Order of the checks on the receive path: header parse (framing reasons),
/// version enabled, key lookup, ICV ([`RxDrop::AuthFailed`]), then the
/// connection checks of [`crate::check`] (SPI, PCID, replay). A packet that
/// fails any of the connection checks must produce no ACK and no NACK
/// (OCP Falcon 0.9 §9.2.2.2, §9.2.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RxDrop {
    /// Shorter than the 16-byte header plus the 16-byte ICV.
    Truncated,
    /// The always-1 bit of byte 3 is clear.
    AlwaysOneClear,
    /// Hdr Ext Len is 0, or V is set without room for the VC.
    ExtLenTooShort,
    /// Hdr Ext Len claims more bytes than the packet holds.
    ExtLenBeyondBuffer,
    /// Crypt Offset points beyond the last payload byte.
    CryptOffsetBeyondPayload,
    /// SPI low 31 bits zero.
    BadSpi,
    /// Version 2/3 (AES-GMAC), not implemented.
    UnsupportedVersion,
    /// Version 4..=15, reserved.
    ReservedVersion,
    /// A supported version the receiver has disabled (spec: "supported and
    /// enabled", Linux `psp-versions-ena`).
    VersionDisabled,
    /// No master key is loaded in the slot the SPI MSB selects.
    UnknownSa,
    /// The ICV did not verify (including packets with an empty encrypted
    /// region: the tag is always checked).
    AuthFailed,
    /// The connection's current SPI is 0: not configured (OCP Falcon 0.9
    /// §9.2.2.3).
    SpiUnconfigured,
    /// The SPI is neither the connection's current nor an allowed previous
    /// SPI of an allowed generation.
    SpiMismatch,
    /// PCID matching is enabled and the VC is absent or differs from the
    /// connection's PCID.
    PcidMismatch,
    /// The IV timestamp is not newer than remote time − replay margin.
    Replay,
}

impl RxDrop {
    /// Number of reasons.
    pub const COUNT: usize = 15;

    /// Every reason, in counter order.
    pub const ALL: [RxDrop; RxDrop::COUNT] = [
        RxDrop::Truncated,
        RxDrop::AlwaysOneClear,
        RxDrop::ExtLenTooShort,
        RxDrop::ExtLenBeyondBuffer,
        RxDrop::CryptOffsetBeyondPayload,
        RxDrop::BadSpi,
        RxDrop::UnsupportedVersion,
        RxDrop::ReservedVersion,
        RxDrop::VersionDisabled,
        RxDrop::UnknownSa,
        RxDrop::AuthFailed,
        RxDrop::SpiUnconfigured,
        RxDrop::SpiMismatch,
        RxDrop::PcidMismatch,
        RxDrop::Replay,
    ];

    /// Stable snake_case name, used as stats and JSON key.
    pub const fn name(self) -> &'static str {
        match self {
            RxDrop::Truncated => "truncated",
            RxDrop::AlwaysOneClear => "always_one_clear",
            RxDrop::ExtLenTooShort => "ext_len_too_short",
            RxDrop::ExtLenBeyondBuffer => "ext_len_beyond_buffer",
            RxDrop::CryptOffsetBeyondPayload => "crypt_offset_beyond_payload",
            RxDrop::BadSpi => "bad_spi",
            RxDrop::UnsupportedVersion => "unsupported_version",
            RxDrop::ReservedVersion => "reserved_version",
            RxDrop::VersionDisabled => "version_disabled",
            RxDrop::UnknownSa => "unknown_sa",
            RxDrop::AuthFailed => "auth_failed",
            RxDrop::SpiUnconfigured => "spi_unconfigured",
            RxDrop::SpiMismatch => "spi_mismatch",
            RxDrop::PcidMismatch => "pcid_mismatch",
            RxDrop::Replay => "replay",
        }
    }

    /// Position in [`RxDrop::ALL`] and in the counter array.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Spec counter class "framing error" (PSP spec "Implementation
    /// Requirements": malformed header or lengths).
    pub const fn is_framing_error(self) -> bool {
        matches!(
            self,
            RxDrop::Truncated
                | RxDrop::AlwaysOneClear
                | RxDrop::ExtLenTooShort
                | RxDrop::ExtLenBeyondBuffer
                | RxDrop::CryptOffsetBeyondPayload
        )
    }

    /// Spec counter class "bad" (invalid SPI / master key, unsupported or
    /// disabled version).
    pub const fn is_bad(self) -> bool {
        matches!(
            self,
            RxDrop::BadSpi
                | RxDrop::UnsupportedVersion
                | RxDrop::ReservedVersion
                | RxDrop::VersionDisabled
                | RxDrop::UnknownSa
        )
    }
}

impl fmt::Display for RxDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for RxDrop {}

/// Receive counters: packets and bytes accepted, one counter per drop reason.
///
/// `bytes` follows PSP spec "Implementation Requirements": counted from the
/// first byte after the IV to the last payload byte (the 16-byte base header
/// and the 16-byte ICV excluded; a VC is counted). See
/// [`crate::Opened::counted_bytes`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RxCounters {
    /// Packets that passed every check the caller recorded as passing.
    pub packets: u64,
    /// Bytes of those packets, counted as the spec says.
    pub bytes: u64,
    drops: [u64; RxDrop::COUNT],
}

impl RxCounters {
    /// All counters zero.
    pub const fn new() -> Self {
        RxCounters {
            packets: 0,
            bytes: 0,
            drops: [0; RxDrop::COUNT],
        }
    }

    /// Count one accepted packet of `counted_bytes` bytes.
    pub fn record_packet(&mut self, counted_bytes: usize) {
        self.packets = self.packets.wrapping_add(1);
        self.bytes = self.bytes.wrapping_add(counted_bytes as u64);
    }

    /// Count one drop.
    pub fn record(&mut self, reason: RxDrop) {
        // RxDrop::index() < COUNT by construction of the enum.
        if let Some(c) = self.drops.get_mut(reason.index()) {
            *c = c.wrapping_add(1);
        }
    }

    /// Drops counted for `reason`.
    pub fn drops(&self, reason: RxDrop) -> u64 {
        self.drops.get(reason.index()).copied().unwrap_or(0)
    }

    /// Spec counter "authentication failures".
    pub fn auth_failures(&self) -> u64 {
        self.drops(RxDrop::AuthFailed)
    }

    /// Spec counter "framing errors" (sum of the framing reasons).
    pub fn framing_errors(&self) -> u64 {
        self.sum_where(RxDrop::is_framing_error)
    }

    /// Spec counter "bad" packets (sum of the bad-SA / version reasons).
    pub fn bad(&self) -> u64 {
        self.sum_where(RxDrop::is_bad)
    }

    /// Sum of all drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().fold(0u64, |a, &c| a.wrapping_add(c))
    }

    /// `(name, count)` for every drop reason, in [`RxDrop::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        RxDrop::ALL.iter().map(move |&r| (r.name(), self.drops(r)))
    }

    /// Add another set of counters (e.g. per-lcore into a total).
    pub fn merge(&mut self, other: &RxCounters) {
        self.packets = self.packets.wrapping_add(other.packets);
        self.bytes = self.bytes.wrapping_add(other.bytes);
        for (a, b) in self.drops.iter_mut().zip(other.drops.iter()) {
            *a = a.wrapping_add(*b);
        }
    }

    fn sum_where(&self, pred: fn(RxDrop) -> bool) -> u64 {
        RxDrop::ALL
            .iter()
            .filter(|&&r| pred(r))
            .fold(0u64, |a, &r| a.wrapping_add(self.drops(r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_complete_and_ordered() {
        for (i, r) in RxDrop::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r} out of order");
        }
        assert_eq!(RxDrop::Replay.index(), RxDrop::COUNT - 1);
    }

    #[test]
    fn names_are_unique_snake_case() {
        let mut names: Vec<&str> = RxDrop::ALL.iter().map(|r| r.name()).collect();
        for n in &names {
            assert!(
                n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{n}"
            );
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RxDrop::COUNT);
    }

    #[test]
    fn counters_record_and_classify() {
        let mut c = RxCounters::new();
        c.record(RxDrop::AuthFailed);
        c.record(RxDrop::AuthFailed);
        c.record(RxDrop::Truncated);
        c.record(RxDrop::CryptOffsetBeyondPayload);
        c.record(RxDrop::UnknownSa);
        c.record(RxDrop::Replay);
        c.record_packet(48);
        c.record_packet(4);
        assert_eq!(c.auth_failures(), 2);
        assert_eq!(c.framing_errors(), 2);
        assert_eq!(c.bad(), 1);
        assert_eq!(c.total_drops(), 6);
        assert_eq!((c.packets, c.bytes), (2, 52));
        let replay = c.iter().find(|(n, _)| *n == "replay").map(|(_, v)| v);
        assert_eq!(replay, Some(1));
        assert_eq!(c.iter().count(), RxDrop::COUNT);

        let mut total = RxCounters::new();
        total.merge(&c);
        total.merge(&c);
        assert_eq!(total.auth_failures(), 4);
        assert_eq!(total.bytes, 104);
    }

    #[test]
    fn header_errors_map_to_reasons() {
        assert_eq!(RxDrop::from(HeaderError::ZeroSpi), RxDrop::BadSpi);
        assert_eq!(
            RxDrop::from(HeaderError::UnsupportedVersion(2)),
            RxDrop::UnsupportedVersion
        );
        assert_eq!(
            RxDrop::from(HeaderError::ReservedVersion(9)),
            RxDrop::ReservedVersion
        );
        assert!(HeaderError::UnsupportedVersion(3)
            .to_string()
            .contains("GMAC"));
    }
}
