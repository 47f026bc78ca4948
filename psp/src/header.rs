//! PSP header and trailer wire formats (PSP spec "PSP Packet Format",
//! spec/psp.md §1.2–§1.4).
//!
//! Owns the byte layout of the 16-byte base header, the optional 8-byte
//! virtualization cookie and the 16-byte ICV trailer: zero-copy views
//! ([`Header`], [`Trailer`]) and the value type [`HeaderRepr`]. It never
//! decrypts, never allocates, and no accessor panics after `check_len`.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |  Next Header  |  Hdr Ext Len  | R | Crypt Off |S|D|Version|V|1|
//! |              Security Parameters Index (SPI)                  |
//! |              Initialization Vector (IV), 64 bits              |
//! |      Virtualization Cookie (VC), 64 bits, iff V = 1           |
//! ```

use core::fmt;

use subtle::ConstantTimeEq;

use crate::error::HeaderError;

/// Length of the base PSP header (without VC).
pub const HEADER_LEN: usize = 16;
/// Length of the virtualization cookie.
pub const VC_LEN: usize = 8;
/// Length of the ICV trailer (AES-GCM tag).
pub const ICV_LEN: usize = 16;
/// PSP UDP destination port (PSP spec "UDP Header"; REF `UDP_PORT_PSP`).
pub const UDP_PORT: u16 = 1000;
/// Next Header value for Falcon (OCP Falcon 0.9 §7.1).
pub const NEXT_HEADER_FALCON: u8 = 252;
/// Largest crypt offset the 6-bit field holds (in 4-byte units).
pub const CRYPT_OFFSET_MAX: u8 = 63;
/// Crypt offset unit in bytes.
pub const CRYPT_OFFSET_UNIT: usize = 4;

mod field {
    pub type Field = core::ops::Range<usize>;

    pub const NEXT_HEADER: usize = 0;
    pub const HDR_EXT_LEN: usize = 1;
    /// R (bits 7..6) and Crypt Offset (bits 5..0).
    pub const CRYPT_OFF: usize = 2;
    /// S, D, Version (bits 5..2), V, always-1.
    pub const FLAGS: usize = 3;
    pub const SPI: Field = 4..8;
    pub const IV: Field = 8..16;
    /// Nonce = SPI ‖ IV, exactly as on the wire (spec/psp.md §2).
    pub const NONCE: Field = 4..16;
    pub const VC: Field = 16..24;

    pub const RESERVED_MASK: u8 = 0xC0;
    pub const CRYPT_OFF_MASK: u8 = 0x3F;
    pub const S_BIT: u8 = 0x80;
    pub const D_BIT: u8 = 0x40;
    pub const VERSION_MASK: u8 = 0x3C;
    pub const VERSION_SHIFT: u8 = 2;
    pub const V_BIT: u8 = 0x02;
    pub const ALWAYS_ONE: u8 = 0x01;
}

/// Security Parameters Index. The MSB selects the master key (PSP spec
/// "Key Derivation"); the low 31 bits must be non-zero on the wire.
/// `Spi(0)` is used by the Falcon SPI check to mean "not configured".
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Spi(pub u32);

impl Spi {
    /// The master-key selector bit.
    pub const KEY_SELECTOR_BIT: u32 = 1 << 31;

    /// Master-key slot this SPI's key derives from: 0 (K0) or 1 (K1).
    pub const fn key_selector(self) -> usize {
        (self.0 >> 31) as usize
    }

    /// The low 31 bits (the per-key SPI number).
    pub const fn index(self) -> u32 {
        self.0 & !Self::KEY_SELECTOR_BIT
    }

    /// True if the low 31 bits are non-zero (PSP spec: zero is reserved).
    pub const fn is_valid(self) -> bool {
        self.index() != 0
    }

    /// The SPI as sent: big-endian.
    pub const fn to_bytes(self) -> [u8; 4] {
        self.0.to_be_bytes()
    }
}

impl fmt::Debug for Spi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Spi({:#010x})", self.0)
    }
}

impl fmt::Display for Spi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// PSP header version: the cipher suite. Only the AES-GCM versions are
/// implemented; see [`Version::from_raw`] for why GMAC (2/3) is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    /// Version 0: AES-GCM-128 (spec: required).
    Aes128Gcm = 0,
    /// Version 1: AES-GCM-256 (spec: strongly encouraged).
    Aes256Gcm = 1,
}

impl Version {
    /// The implemented versions.
    pub const ALL: [Version; 2] = [Version::Aes128Gcm, Version::Aes256Gcm];

    /// Decode the 4-bit version field.
    ///
    /// 2/3 (AES-GMAC-128/256) are a clear [`HeaderError::UnsupportedVersion`]:
    /// the spec's KDF section only defines labels "Pv0"/"Pv1"; "Pv2"/"Pv3" are
    /// a guess no source confirms, and no implementation or vector exists
    /// (spec/psp.md §3 and §9 item 1). 4..=15 are reserved → discard.
    pub const fn from_raw(raw: u8) -> Result<Version, HeaderError> {
        match raw {
            0 => Ok(Version::Aes128Gcm),
            1 => Ok(Version::Aes256Gcm),
            2 | 3 => Err(HeaderError::UnsupportedVersion(raw)),
            _ => Err(HeaderError::ReservedVersion(raw)),
        }
    }

    /// The 4-bit wire value.
    pub const fn raw(self) -> u8 {
        self as u8
    }

    /// SA key length in bytes (16 or 32).
    pub const fn key_len(self) -> usize {
        match self {
            Version::Aes128Gcm => 16,
            Version::Aes256Gcm => 32,
        }
    }

    /// Name as used by the reference tool's config files.
    pub const fn name(self) -> &'static str {
        match self {
            Version::Aes128Gcm => "aes-gcm-128",
            Version::Aes256Gcm => "aes-gcm-256",
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl core::str::FromStr for Version {
    type Err = HeaderError;

    /// `aes-gcm-128` / `aes-gcm-256` (the reference tool's names) or the
    /// version number `0` / `1`.
    fn from_str(s: &str) -> Result<Version, HeaderError> {
        match s {
            "aes-gcm-128" | "0" => Ok(Version::Aes128Gcm),
            "aes-gcm-256" | "1" => Ok(Version::Aes256Gcm),
            "aes-gmac-128" | "2" => Err(HeaderError::UnsupportedVersion(2)),
            "aes-gmac-256" | "3" => Err(HeaderError::UnsupportedVersion(3)),
            _ => Err(HeaderError::ReservedVersion(0xFF)),
        }
    }
}

/// Zero-copy view of a buffer starting with a PSP header. The buffer may
/// continue with the payload; only the header (and extension) is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wrap without checking. Accessors may panic unless
    /// [`check_len`](Self::check_len) succeeds.
    pub const fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// Wrap and [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Header<T>, HeaderError> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// Ensure every accessor stays in bounds: the base header fits, Hdr Ext
    /// Len covers the base header, the whole extension fits, and if V is set
    /// the extension holds the VC.
    pub fn check_len(&self) -> Result<(), HeaderError> {
        let data = self.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(HeaderError::Truncated);
        }
        let ext = data[field::HDR_EXT_LEN];
        // Hdr Ext Len counts 8-octet units beyond the first 8 octets: 1 is
        // the bare 16-byte header, 2 adds the VC (PSP spec "Hdr Ext Len").
        if ext == 0 {
            return Err(HeaderError::ExtLenTooShort);
        }
        if data[field::FLAGS] & field::V_BIT != 0 && ext < 2 {
            return Err(HeaderError::ExtLenTooShort);
        }
        if data.len() < 8 + 8 * ext as usize {
            return Err(HeaderError::ExtLenBeyondBuffer);
        }
        Ok(())
    }

    /// Consume the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Next Header: the IP protocol number of what follows (252 = Falcon).
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hdr Ext Len, in 8-octet units beyond the first 8 octets.
    pub fn hdr_ext_len(&self) -> u8 {
        self.buffer.as_ref()[field::HDR_EXT_LEN]
    }

    /// Header length in bytes including extensions: 8 + 8 · Hdr Ext Len.
    pub fn header_len(&self) -> usize {
        8 + 8 * self.hdr_ext_len() as usize
    }

    /// The two reserved R bits (zero on TX, ignored on RX, but inside the AAD).
    pub fn reserved(&self) -> u8 {
        (self.buffer.as_ref()[field::CRYPT_OFF] & field::RESERVED_MASK) >> 6
    }

    /// Crypt Offset in 4-byte units, counted from the end of the IV (byte 16).
    pub fn crypt_offset(&self) -> u8 {
        self.buffer.as_ref()[field::CRYPT_OFF] & field::CRYPT_OFF_MASK
    }

    /// S: sample at receiver.
    pub fn sample(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::S_BIT != 0
    }

    /// D: drop after sampling.
    pub fn drop_after_sampling(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::D_BIT != 0
    }

    /// The raw 4-bit version.
    pub fn version(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] & field::VERSION_MASK) >> field::VERSION_SHIFT
    }

    /// V: virtualization cookie present.
    pub fn vc_present(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::V_BIT != 0
    }

    /// The always-1 bit.
    pub fn always_one(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::ALWAYS_ONE != 0
    }

    /// SPI (big-endian on the wire).
    pub fn spi(&self) -> Spi {
        Spi(u32::from_be_bytes(array(&self.buffer.as_ref()[field::SPI])))
    }

    /// IV (big-endian on the wire): the sender's timestamp in picoseconds.
    pub fn iv(&self) -> u64 {
        u64::from_be_bytes(array(&self.buffer.as_ref()[field::IV]))
    }

    /// The AES-GCM nonce: SPI ‖ IV bytes exactly as on the wire.
    pub fn nonce(&self) -> [u8; 12] {
        array(&self.buffer.as_ref()[field::NONCE])
    }

    /// The VC as a big-endian 64-bit value, if V is set.
    pub fn vc(&self) -> Option<u64> {
        if self.vc_present() {
            Some(u64::from_be_bytes(array(&self.buffer.as_ref()[field::VC])))
        } else {
            None
        }
    }

    /// The bytes after the header and its extensions.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Set Next Header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }

    /// Set Hdr Ext Len.
    pub fn set_hdr_ext_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::HDR_EXT_LEN] = v;
    }

    /// Set the two reserved bits (low 2 bits of `v`).
    pub fn set_reserved(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::CRYPT_OFF];
        *b = (*b & !field::RESERVED_MASK) | ((v << 6) & field::RESERVED_MASK);
    }

    /// Set Crypt Offset (low 6 bits of `v`).
    pub fn set_crypt_offset(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::CRYPT_OFF];
        *b = (*b & !field::CRYPT_OFF_MASK) | (v & field::CRYPT_OFF_MASK);
    }

    /// Set S.
    pub fn set_sample(&mut self, v: bool) {
        self.set_flag(field::S_BIT, v);
    }

    /// Set D.
    pub fn set_drop_after_sampling(&mut self, v: bool) {
        self.set_flag(field::D_BIT, v);
    }

    /// Set the raw 4-bit version (low 4 bits of `v`).
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !field::VERSION_MASK) | ((v << field::VERSION_SHIFT) & field::VERSION_MASK);
    }

    /// Set V.
    pub fn set_vc_present(&mut self, v: bool) {
        self.set_flag(field::V_BIT, v);
    }

    /// Set the always-1 bit.
    pub fn set_always_one(&mut self, v: bool) {
        self.set_flag(field::ALWAYS_ONE, v);
    }

    /// Set SPI.
    pub fn set_spi(&mut self, spi: Spi) {
        self.buffer.as_mut()[field::SPI].copy_from_slice(&spi.to_bytes());
    }

    /// Set IV.
    pub fn set_iv(&mut self, iv: u64) {
        self.buffer.as_mut()[field::IV].copy_from_slice(&iv.to_be_bytes());
    }

    /// Write the VC bytes (the caller has set V and Hdr Ext Len ≥ 2).
    pub fn set_vc(&mut self, vc: u64) {
        self.buffer.as_mut()[field::VC].copy_from_slice(&vc.to_be_bytes());
    }

    fn set_flag(&mut self, bit: u8, v: bool) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        if v {
            *b |= bit;
        } else {
            *b &= !bit;
        }
    }
}

/// High-level representation of a PSP header.
///
/// `parse` drops what the crypto engine treats as opaque: the R bits and any
/// extension bytes beyond the VC (their bytes still count in the AAD of the
/// packet they came in). `emit` writes R = 0 and Hdr Ext Len 1 (no VC) or 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeaderRepr {
    /// Next Header (252 for Falcon).
    pub next_header: u8,
    /// Crypt Offset in 4-byte units from the end of the IV, 0..=63.
    pub crypt_offset: u8,
    /// S bit.
    pub sample: bool,
    /// D bit.
    pub drop_after_sampling: bool,
    /// Cipher suite.
    pub version: Version,
    /// SPI.
    pub spi: Spi,
    /// IV (timestamp in ps).
    pub iv: u64,
    /// Virtualization cookie as a big-endian u64, present iff V = 1.
    pub vc: Option<u64>,
}

impl HeaderRepr {
    /// Parse and validate: always-1 bit set, supported version, SPI low 31
    /// bits non-zero. Length checks are [`Header::check_len`]'s.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(header: &Header<&T>) -> Result<HeaderRepr, HeaderError> {
        header.check_len()?;
        // REF psp_decrypt.c rejects a clear always-1 bit; so do we.
        if !header.always_one() {
            return Err(HeaderError::AlwaysOneClear);
        }
        let version = Version::from_raw(header.version())?;
        let spi = header.spi();
        // PSP spec "SPI": the low 31 bits must be non-zero.
        if !spi.is_valid() {
            return Err(HeaderError::ZeroSpi);
        }
        Ok(HeaderRepr {
            next_header: header.next_header(),
            crypt_offset: header.crypt_offset(),
            sample: header.sample(),
            drop_after_sampling: header.drop_after_sampling(),
            version,
            spi,
            iv: header.iv(),
            vc: header.vc(),
        })
    }

    /// Bytes `emit` writes: 16, or 24 with a VC.
    pub const fn buffer_len(&self) -> usize {
        if self.vc.is_some() {
            HEADER_LEN + VC_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Write the header. The buffer must hold [`buffer_len`](Self::buffer_len)
    /// bytes; `crypt_offset` is masked to 6 bits.
    ///
    /// Always inlined: a dozen stores once its fields are constants in the
    /// caller. Left to LLVM, unrelated edits in `falcon-core` flip it in and
    /// out of `seal_in_place`.
    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, header: &mut Header<T>) {
        header.set_next_header(self.next_header);
        header.set_hdr_ext_len(if self.vc.is_some() { 2 } else { 1 });
        header.set_reserved(0);
        header.set_crypt_offset(self.crypt_offset);
        let flags = u8::from(self.sample) << 7
            | u8::from(self.drop_after_sampling) << 6
            | self.version.raw() << field::VERSION_SHIFT
            | u8::from(self.vc.is_some()) << 1
            | field::ALWAYS_ONE;
        header.buffer.as_mut()[field::FLAGS] = flags;
        header.set_spi(self.spi);
        header.set_iv(self.iv);
        if let Some(vc) = self.vc {
            header.set_vc(vc);
        }
    }
}

/// The 16-byte Integrity Check Value (AES-GCM tag). Equality is constant time.
#[derive(Clone, Copy)]
pub struct Icv(pub [u8; ICV_LEN]);

impl PartialEq for Icv {
    fn eq(&self, other: &Icv) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for Icv {}

impl fmt::Debug for Icv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Icv(")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        f.write_str(")")
    }
}

/// Zero-copy view of the PSP trailer: the last 16 bytes of a PSP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Trailer<T> {
    /// Wrap without checking.
    pub const fn new_unchecked(buffer: T) -> Trailer<T> {
        Trailer { buffer }
    }

    /// Wrap and check that at least [`ICV_LEN`] bytes are present.
    pub fn new_checked(buffer: T) -> Result<Trailer<T>, HeaderError> {
        let t = Self::new_unchecked(buffer);
        t.check_len()?;
        Ok(t)
    }

    /// At least 16 bytes.
    pub fn check_len(&self) -> Result<(), HeaderError> {
        if self.buffer.as_ref().len() < ICV_LEN {
            Err(HeaderError::Truncated)
        } else {
            Ok(())
        }
    }

    /// The ICV (first 16 bytes of the view).
    pub fn icv(&self) -> Icv {
        Icv(array(&self.buffer.as_ref()[..ICV_LEN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Trailer<T> {
    /// Write the ICV.
    pub fn set_icv(&mut self, icv: &Icv) {
        self.buffer.as_mut()[..ICV_LEN].copy_from_slice(&icv.0);
    }
}

/// Copy a slice of exactly N bytes into an array. Callers pass constant
/// `field` ranges of length N, so the lengths always agree.
fn array<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    a
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn bytes(h: &str) -> Vec<u8> {
        hex::decode(h).unwrap()
    }

    #[test]
    fn parse_reference_header_v0() {
        // Appendix A, v0 CO=1 frame, PSP header at offset 0x2a.
        let b = bytes("110101019a3456780000000000000001");
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.next_header(), 17);
        assert_eq!(h.hdr_ext_len(), 1);
        assert_eq!(h.header_len(), 16);
        assert_eq!(h.crypt_offset(), 1);
        assert_eq!(h.version(), 0);
        assert!(!h.vc_present());
        assert!(h.always_one());
        assert_eq!(h.spi(), Spi(0x9A34_5678));
        assert_eq!(h.spi().key_selector(), 1);
        assert_eq!(h.iv(), 1);
        assert_eq!(h.nonce(), <[u8; 12]>::try_from(&b[4..16]).unwrap());
        let r = HeaderRepr::parse(&h).unwrap();
        assert_eq!(
            r,
            HeaderRepr {
                next_header: 17,
                crypt_offset: 1,
                sample: false,
                drop_after_sampling: false,
                version: Version::Aes128Gcm,
                spi: Spi(0x9A34_5678),
                iv: 1,
                vc: None,
            }
        );
        let mut out = [0u8; 16];
        r.emit(&mut Header::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], &b[..]);
    }

    #[test]
    fn parse_vc_header() {
        // Vector C of spec/psp.md §6.4.
        let b = bytes("fc0203039a345678000000e8d4a510021122334455667788");
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.header_len(), 24);
        assert_eq!(h.vc(), Some(0x1122_3344_5566_7788));
        assert_eq!(h.crypt_offset(), 3);
        let r = HeaderRepr::parse(&h).unwrap();
        assert_eq!(r.buffer_len(), 24);
        assert_eq!(r.next_header, NEXT_HEADER_FALCON);
        let mut out = [0u8; 24];
        r.emit(&mut Header::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], &b[..]);
    }

    #[test]
    fn byte3_values() {
        // spec/psp.md §1.2: v0 0x01, v1 0x05, v0+VC 0x03, v1+VC 0x07.
        for (version, vc, expect) in [
            (Version::Aes128Gcm, None, 0x01u8),
            (Version::Aes256Gcm, None, 0x05),
            (Version::Aes128Gcm, Some(0), 0x03),
            (Version::Aes256Gcm, Some(0), 0x07),
        ] {
            let r = HeaderRepr {
                next_header: 252,
                crypt_offset: 3,
                sample: false,
                drop_after_sampling: false,
                version,
                spi: Spi(1),
                iv: 0,
                vc,
            };
            let mut out = [0u8; 24];
            r.emit(&mut Header::new_unchecked(&mut out[..]));
            assert_eq!(out[3], expect);
            assert_eq!(out[1], if vc.is_some() { 2 } else { 1 });
        }
    }

    #[test]
    fn byte_2_and_3_bits_from_hand_bytes() {
        // spec/psp.md §1.2: byte 2 = R(7:6) | Crypt Offset(5:0); byte 3 =
        // S(7) | D(6) | Version(5:2) | V(1) | 1(0). One bit at a time.
        let base = bytes("fc0200019a345678000000e8d4a510001122334455667788");
        let read = |b2: u8, b3: u8| {
            let mut b = base.clone();
            b[2] = b2;
            b[3] = b3;
            let h = Header::new_checked(b).unwrap();
            (
                h.reserved(),
                h.crypt_offset(),
                h.sample(),
                h.drop_after_sampling(),
                h.version(),
                h.vc_present(),
                h.always_one(),
            )
        };
        assert_eq!(read(0x80, 0), (2, 0, false, false, 0, false, false));
        assert_eq!(read(0x40, 0), (1, 0, false, false, 0, false, false));
        assert_eq!(read(0x3F, 0), (0, 63, false, false, 0, false, false));
        assert_eq!(read(0x01, 0x80), (0, 1, true, false, 0, false, false));
        assert_eq!(read(0x20, 0x40), (0, 32, false, true, 0, false, false));
        assert_eq!(read(0, 0x20), (0, 0, false, false, 8, false, false));
        assert_eq!(read(0, 0x04), (0, 0, false, false, 1, false, false));
        assert_eq!(read(0, 0x02), (0, 0, false, false, 0, true, false));
        assert_eq!(read(0, 0x01), (0, 0, false, false, 0, false, true));
        assert_eq!(read(0xFF, 0xFF), (3, 63, true, true, 15, true, true));
    }

    #[test]
    fn parse_errors_name_the_problem() {
        let good = bytes("fc0101019a345678000000e8d4a51000");
        let check = |b: &[u8]| HeaderRepr::parse(&Header::new_unchecked(b));

        assert_eq!(check(&good[..15]), Err(HeaderError::Truncated));
        assert_eq!(check(&[]), Err(HeaderError::Truncated));

        let mut b = good.clone();
        b[3] &= !0x01;
        assert_eq!(check(&b), Err(HeaderError::AlwaysOneClear));

        let mut b = good.clone();
        b[1] = 0;
        assert_eq!(check(&b), Err(HeaderError::ExtLenTooShort));

        let mut b = good.clone();
        b[3] |= 0x02; // V set, ext len 1
        assert_eq!(check(&b), Err(HeaderError::ExtLenTooShort));

        let mut b = good.clone();
        b[1] = 2; // claims a 24-byte header in 16 bytes
        assert_eq!(check(&b), Err(HeaderError::ExtLenBeyondBuffer));

        let mut b = good.clone();
        b[4..8].copy_from_slice(&[0x80, 0, 0, 0]);
        assert_eq!(check(&b), Err(HeaderError::ZeroSpi));
        b[4..8].copy_from_slice(&[0, 0, 0, 0]);
        assert_eq!(check(&b), Err(HeaderError::ZeroSpi));

        for v in 2u8..=3 {
            let mut b = good.clone();
            Header::new_unchecked(&mut b[..]).set_version(v);
            assert_eq!(check(&b), Err(HeaderError::UnsupportedVersion(v)));
        }
        for v in 4u8..=15 {
            let mut b = good.clone();
            Header::new_unchecked(&mut b[..]).set_version(v);
            assert_eq!(check(&b), Err(HeaderError::ReservedVersion(v)));
        }
    }

    #[test]
    fn reserved_bits_and_extensions_are_ignored_by_parse() {
        let mut b = bytes("fc0101019a345678000000e8d4a51000");
        let base = HeaderRepr::parse(&Header::new_unchecked(&b[..])).unwrap();
        b[2] |= 0x80;
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.reserved(), 2);
        assert_eq!(h.crypt_offset(), 1);
        assert_eq!(HeaderRepr::parse(&h).unwrap(), base);

        // Opaque extension without VC: ext len 2, V clear.
        let mut b = bytes("fc0201019a345678000000e8d4a51000aaaaaaaaaaaaaaaa");
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.header_len(), 24);
        assert_eq!(h.vc(), None);
        assert_eq!(h.payload(), &[] as &[u8]);
        b.push(7);
        assert_eq!(Header::new_checked(&b[..]).unwrap().payload(), &[7]);
    }

    #[test]
    fn setters_round_trip() {
        let mut b = [0u8; 24];
        let mut h = Header::new_unchecked(&mut b[..]);
        h.set_hdr_ext_len(2);
        h.set_crypt_offset(0xFF);
        h.set_reserved(3);
        h.set_sample(true);
        h.set_drop_after_sampling(true);
        h.set_version(0xF);
        h.set_vc_present(true);
        h.set_always_one(true);
        h.set_spi(Spi(0xDEAD_BEEF));
        h.set_iv(u64::MAX - 1);
        h.set_vc(42);
        assert_eq!(h.crypt_offset(), 63);
        assert_eq!(h.reserved(), 3);
        assert!(h.sample() && h.drop_after_sampling() && h.vc_present() && h.always_one());
        assert_eq!(h.version(), 15);
        assert_eq!(h.spi(), Spi(0xDEAD_BEEF));
        assert_eq!(h.iv(), u64::MAX - 1);
        assert_eq!(h.vc(), Some(42));
        h.set_sample(false);
        h.set_version(1);
        assert!(!h.sample());
        assert_eq!(h.version(), 1);
        assert_eq!(b[3], 0x40 | 0x04 | 0x02 | 0x01);
    }

    #[test]
    fn version_names() {
        for v in Version::ALL {
            assert_eq!(v.name().parse::<Version>(), Ok(v));
            assert_eq!(v.raw().to_string().parse::<Version>(), Ok(v));
        }
        assert_eq!(
            "aes-gmac-128".parse::<Version>(),
            Err(HeaderError::UnsupportedVersion(2))
        );
        assert!("chacha".parse::<Version>().is_err());
    }

    #[test]
    fn spi_helpers() {
        assert_eq!(Spi(0x1234_5678).key_selector(), 0);
        assert_eq!(Spi(0x9A34_5678).key_selector(), 1);
        assert_eq!(Spi(0x9A34_5678).index(), 0x1A34_5678);
        assert!(!Spi(0x8000_0000).is_valid());
        assert!(Spi(0x8000_0001).is_valid());
        assert_eq!(format!("{:?}", Spi(0x12)), "Spi(0x00000012)");
    }

    #[test]
    fn trailer_and_icv() {
        let mut b = [0u8; 20];
        assert!(Trailer::new_checked(&b[..15]).is_err());
        let icv = Icv([7; 16]);
        Trailer::new_unchecked(&mut b[4..]).set_icv(&icv);
        let t = Trailer::new_checked(&b[4..]).unwrap();
        assert_eq!(t.icv(), icv);
        assert_ne!(t.icv(), Icv([8; 16]));
    }

    fn arb_repr() -> impl Strategy<Value = HeaderRepr> {
        (
            any::<u8>(),
            0u8..=63,
            any::<bool>(),
            any::<bool>(),
            prop_oneof![Just(Version::Aes128Gcm), Just(Version::Aes256Gcm)],
            (1u32..=0x7FFF_FFFF, any::<bool>()),
            any::<u64>(),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(nh, co, s, d, version, (idx, msb), iv, vc)| HeaderRepr {
                next_header: nh,
                crypt_offset: co,
                sample: s,
                drop_after_sampling: d,
                version,
                spi: Spi(idx | if msb { Spi::KEY_SELECTOR_BIT } else { 0 }),
                iv,
                vc,
            })
    }

    proptest! {
        #[test]
        fn repr_round_trip(r in arb_repr(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut b = vec![0u8; r.buffer_len()];
            b.extend_from_slice(&tail);
            r.emit(&mut Header::new_unchecked(&mut b[..]));
            let h = Header::new_checked(&b[..]).unwrap();
            prop_assert_eq!(h.header_len(), r.buffer_len());
            prop_assert_eq!(HeaderRepr::parse(&h).unwrap(), r);
            prop_assert_eq!(h.payload(), &tail[..]);
        }

        #[test]
        fn parse_arbitrary_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(h) = Header::new_checked(&b[..]) {
                let _ = (h.next_header(), h.reserved(), h.crypt_offset(), h.sample(),
                         h.drop_after_sampling(), h.version(), h.spi(), h.iv(), h.vc(),
                         h.nonce(), h.payload().len());
                if let Ok(r) = HeaderRepr::parse(&h) {
                    let mut out = vec![0u8; r.buffer_len()];
                    r.emit(&mut Header::new_unchecked(&mut out[..]));
                    prop_assert_eq!(HeaderRepr::parse(&Header::new_unchecked(&out[..])), Ok(r));
                }
            } else {
                prop_assert!(HeaderRepr::parse(&Header::new_unchecked(&b[..])).is_err());
            }
            if let Ok(t) = Trailer::new_checked(&b[..]) {
                let _ = t.icv();
            }
        }
    }
}
