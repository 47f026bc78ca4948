//! AEAD backends: the [`Aead`] trait, the `ring` and RustCrypto `aes-gcm`
//! implementations, and the enum-dispatched [`AeadContext`] the hot path uses.
//!
//! Owns the expanded per-SA key schedule (built once from an [`SaKey`], then
//! reused for every packet). Seal and open work in place on borrowed slices
//! with a detached 16-byte tag; tag comparison is the backends' constant-time
//! compare. This module never parses packets, never allocates and never
//! compares tags itself.
//!
//! Key schedules: `ring` does not zeroize its expanded keys on drop; the
//! RustCrypto `aes` crate does, with its `zeroize` feature (enabled in the
//! workspace, so also for the key schedules `aes-gcm` builds). The raw key
//! bytes ([`SaKey`]) are zeroized.

use core::fmt;
use core::str::FromStr;

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, Aes256Gcm, KeyInit};
use ring::aead as ring_aead;

use crate::header::Version;
use crate::kdf::SaKey;

/// AES-GCM nonce length (SPI ‖ IV).
pub const NONCE_LEN: usize = 12;
/// AES-GCM tag length (the PSP ICV).
pub const TAG_LEN: usize = 16;

/// An AEAD failure: the tag did not verify, or the backend refused the input
/// length. Deliberately carries no detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AeadError;

impl fmt::Display for AeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AEAD operation failed")
    }
}

impl std::error::Error for AeadError {}

/// AES-GCM with a detached tag, in place.
pub trait Aead {
    /// The PSP version (cipher suite) of the key.
    fn version(&self) -> Version;

    /// Encrypt `in_out` in place, authenticating `aad`; return the tag.
    fn seal_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
    ) -> Result<[u8; TAG_LEN], AeadError>;

    /// Verify `tag` over `aad` and the ciphertext `in_out`, decrypting it in
    /// place. On error the contents of `in_out` are unspecified; the caller
    /// must drop the packet.
    fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), AeadError>;
}

/// Which AEAD implementation to use; chosen at runtime (config / CLI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Backend {
    /// `ring` (BoringSSL assembly): the default, fastest measured here
    /// (DESIGN §4).
    #[default]
    Ring,
    /// RustCrypto `aes-gcm`: the portable backend.
    RustCrypto,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 2] = [Backend::Ring, Backend::RustCrypto];

    /// Stable name for config and CLI: `ring` or `rustcrypto`.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Ring => "ring",
            Backend::RustCrypto => "rustcrypto",
        }
    }

    /// The AES-GCM code this backend runs on this CPU, as the backend picks
    /// it at run time from the CPU's features. It sets how fast the crypto
    /// is, so every ratio against a crypto bound depends on it: on this
    /// project's 2-vCPU Zen 3 VM, `ring` on `vaes-avx2` seals and opens a
    /// 4 KiB packet in ~0.6 of the time it takes on `aes-ni-avx`
    /// (`dataplane/app/PERFORMANCE.md`).
    ///
    /// * `ring` (0.17, `aead::aes_gcm::DynKey::new`): `vaes-avx2` (VAES and
    ///   VPCLMULQDQ on 256-bit registers) with AES-NI, PCLMULQDQ, SSSE3,
    ///   AVX, AVX2, VAES and VPCLMULQDQ; else `aes-ni-avx` (the stitched
    ///   AES-NI + PCLMULQDQ loop) with AVX and MOVBE; else `aes-ni`; else
    ///   `vpaes` (SSSE3, constant-time) or `fallback`.
    /// * RustCrypto: `aes-ni` (AES-NI for AES, PCLMULQDQ for GHASH) or
    ///   `soft` (constant-time portable code).
    ///
    /// Off x86-64, `not-x86-64`: the detection is not written for other
    /// architectures.
    pub fn aes_gcm_path(self) -> &'static str {
        let cpu = CpuAes::detect();
        match self {
            Backend::Ring => cpu.ring_path(),
            Backend::RustCrypto => cpu.rustcrypto_path(),
        }
    }
}

/// The x86-64 features the AES-GCM backends choose their code by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct CpuAes {
    x86_64: bool,
    aes: bool,
    pclmulqdq: bool,
    ssse3: bool,
    avx: bool,
    avx2: bool,
    movbe: bool,
    vaes: bool,
    vpclmulqdq: bool,
}

impl CpuAes {
    #[cfg(target_arch = "x86_64")]
    fn detect() -> Self {
        CpuAes {
            x86_64: true,
            aes: std::arch::is_x86_feature_detected!("aes"),
            pclmulqdq: std::arch::is_x86_feature_detected!("pclmulqdq"),
            ssse3: std::arch::is_x86_feature_detected!("ssse3"),
            avx: std::arch::is_x86_feature_detected!("avx"),
            avx2: std::arch::is_x86_feature_detected!("avx2"),
            movbe: std::arch::is_x86_feature_detected!("movbe"),
            vaes: std::arch::is_x86_feature_detected!("vaes"),
            vpclmulqdq: std::arch::is_x86_feature_detected!("vpclmulqdq"),
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn detect() -> Self {
        CpuAes::default()
    }

    fn ring_path(self) -> &'static str {
        if !self.x86_64 {
            "not-x86-64"
        } else if self.aes && self.pclmulqdq && self.ssse3 {
            if self.avx && self.avx2 && self.vaes && self.vpclmulqdq {
                "vaes-avx2"
            } else if self.avx && self.movbe {
                "aes-ni-avx"
            } else {
                "aes-ni"
            }
        } else if self.ssse3 {
            "vpaes"
        } else {
            "fallback"
        }
    }

    fn rustcrypto_path(self) -> &'static str {
        if !self.x86_64 {
            "not-x86-64"
        } else if self.aes && self.pclmulqdq {
            "aes-ni"
        } else {
            "soft"
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error parsing a [`Backend`] name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownBackend(pub String);

impl fmt::Display for UnknownBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown AEAD backend {:?} (expected \"ring\" or \"rustcrypto\")",
            self.0
        )
    }
}

impl std::error::Error for UnknownBackend {}

impl FromStr for Backend {
    type Err = UnknownBackend;

    fn from_str(s: &str) -> Result<Backend, UnknownBackend> {
        match s {
            "ring" => Ok(Backend::Ring),
            "rustcrypto" | "rust-crypto" | "aes-gcm" => Ok(Backend::RustCrypto),
            _ => Err(UnknownBackend(s.to_owned())),
        }
    }
}

/// `ring` backend: `LessSafeKey` (nonces come from the IV clock, not from
/// ring's nonce sequence).
pub struct RingAead {
    key: ring_aead::LessSafeKey,
    version: Version,
}

impl RingAead {
    /// Expand the key schedule.
    pub fn new(key: &SaKey) -> RingAead {
        let alg = match key.version() {
            Version::Aes128Gcm => &ring_aead::AES_128_GCM,
            Version::Aes256Gcm => &ring_aead::AES_256_GCM,
        };
        // SaKey's length always equals the version's key length.
        let unbound = ring_aead::UnboundKey::new(alg, key.as_bytes())
            .expect("SaKey length matches the AES-GCM variant");
        RingAead {
            key: ring_aead::LessSafeKey::new(unbound),
            version: key.version(),
        }
    }
}

impl Aead for RingAead {
    fn version(&self) -> Version {
        self.version
    }

    #[inline]
    fn seal_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
    ) -> Result<[u8; TAG_LEN], AeadError> {
        let tag = self
            .key
            .seal_in_place_separate_tag(
                ring_aead::Nonce::assume_unique_for_key(*nonce),
                ring_aead::Aad::from(aad),
                in_out,
            )
            .map_err(|_| AeadError)?;
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        Ok(out)
    }

    #[inline]
    fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), AeadError> {
        self.key
            .open_in_place_separate_tag(
                ring_aead::Nonce::assume_unique_for_key(*nonce),
                ring_aead::Aad::from(aad),
                ring_aead::Tag::from(*tag),
                in_out,
                0..,
            )
            .map(|_| ())
            .map_err(|_| AeadError)
    }
}

/// RustCrypto `aes-gcm` backend.
pub struct RustCryptoAead {
    cipher: RustCryptoCipher,
}

// Boxed: the RustCrypto key schedules are 736/992 bytes against ring's
// ~560, and contexts sit inline in the RX cache table. One allocation per
// SA (never per packet) keeps the default backend's table small.
enum RustCryptoCipher {
    Aes128(Box<Aes128Gcm>),
    Aes256(Box<Aes256Gcm>),
}

impl RustCryptoAead {
    /// Expand the key schedule.
    pub fn new(key: &SaKey) -> RustCryptoAead {
        // SaKey's length always equals the version's key length.
        let cipher = match key.version() {
            Version::Aes128Gcm => RustCryptoCipher::Aes128(Box::new(
                Aes128Gcm::new_from_slice(key.as_bytes()).expect("SaKey v0 is 16 bytes"),
            )),
            Version::Aes256Gcm => RustCryptoCipher::Aes256(Box::new(
                Aes256Gcm::new_from_slice(key.as_bytes()).expect("SaKey v1 is 32 bytes"),
            )),
        };
        RustCryptoAead { cipher }
    }
}

impl Aead for RustCryptoAead {
    fn version(&self) -> Version {
        match self.cipher {
            RustCryptoCipher::Aes128(_) => Version::Aes128Gcm,
            RustCryptoCipher::Aes256(_) => Version::Aes256Gcm,
        }
    }

    #[inline]
    fn seal_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
    ) -> Result<[u8; TAG_LEN], AeadError> {
        let nonce = aes_gcm::Nonce::from_slice(nonce);
        let tag = match &self.cipher {
            RustCryptoCipher::Aes128(c) => c.encrypt_in_place_detached(nonce, aad, in_out),
            RustCryptoCipher::Aes256(c) => c.encrypt_in_place_detached(nonce, aad, in_out),
        }
        .map_err(|_| AeadError)?;
        Ok(tag.into())
    }

    #[inline]
    fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), AeadError> {
        let nonce = aes_gcm::Nonce::from_slice(nonce);
        let tag = aes_gcm::Tag::from_slice(tag);
        match &self.cipher {
            RustCryptoCipher::Aes128(c) => c.decrypt_in_place_detached(nonce, aad, in_out, tag),
            RustCryptoCipher::Aes256(c) => c.decrypt_in_place_detached(nonce, aad, in_out, tag),
        }
        .map_err(|_| AeadError)
    }
}

/// A per-SA AEAD context: the expanded key of one backend. Built once per
/// SA and cached (TX: in the [`crate::TxSa`] or a
/// [`crate::TxContextCache`]; RX: in the [`crate::SaDatabase`]); enum dispatch keeps the hot path free of
/// virtual calls.
// The ring variant (~560 bytes) stays inline on purpose: it is the default
// backend and boxing it would add a pointer chase per packet; the RustCrypto
// variant is boxed (see `RustCryptoCipher`).
#[allow(clippy::large_enum_variant)]
pub enum AeadContext {
    /// `ring`.
    Ring(RingAead),
    /// RustCrypto `aes-gcm`.
    RustCrypto(RustCryptoAead),
}

impl AeadContext {
    /// Expand `key` for `backend`. This is the per-SA key schedule; never
    /// call it per packet.
    pub fn new(backend: Backend, key: &SaKey) -> AeadContext {
        match backend {
            Backend::Ring => AeadContext::Ring(RingAead::new(key)),
            Backend::RustCrypto => AeadContext::RustCrypto(RustCryptoAead::new(key)),
        }
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        match self {
            AeadContext::Ring(_) => Backend::Ring,
            AeadContext::RustCrypto(_) => Backend::RustCrypto,
        }
    }
}

impl Aead for AeadContext {
    #[inline]
    fn version(&self) -> Version {
        match self {
            AeadContext::Ring(a) => a.version(),
            AeadContext::RustCrypto(a) => a.version(),
        }
    }

    #[inline]
    fn seal_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
    ) -> Result<[u8; TAG_LEN], AeadError> {
        match self {
            AeadContext::Ring(a) => a.seal_in_place(nonce, aad, in_out),
            AeadContext::RustCrypto(a) => a.seal_in_place(nonce, aad, in_out),
        }
    }

    #[inline]
    fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        in_out: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), AeadError> {
        match self {
            AeadContext::Ring(a) => a.open_in_place(nonce, aad, in_out, tag),
            AeadContext::RustCrypto(a) => a.open_in_place(nonce, aad, in_out, tag),
        }
    }
}

impl fmt::Debug for AeadContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AeadContext({}, {}, <redacted>)",
            self.backend(),
            self.version()
        )
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ctx(backend: Backend, version: Version, key: &[u8]) -> AeadContext {
        AeadContext::new(backend, &SaKey::new(version, key).unwrap())
    }

    /// A Zen 3 / Ice Lake class x86-64: every feature the backends look at.
    const ALL_FEATURES: CpuAes = CpuAes {
        x86_64: true,
        aes: true,
        pclmulqdq: true,
        ssse3: true,
        avx: true,
        avx2: true,
        movbe: true,
        vaes: true,
        vpclmulqdq: true,
    };

    #[test]
    fn aes_gcm_path_follows_the_backends_choice() {
        let cpu = ALL_FEATURES;
        assert_eq!(cpu.ring_path(), "vaes-avx2");
        assert_eq!(cpu.rustcrypto_path(), "aes-ni");
        // Haswell to Cascade Lake, Zen 1–2: no VAES.
        let no_vaes = CpuAes { vaes: false, ..cpu };
        assert_eq!(no_vaes.ring_path(), "aes-ni-avx");
        // VAES needs both halves and AVX2.
        assert_eq!(
            CpuAes {
                vpclmulqdq: false,
                ..cpu
            }
            .ring_path(),
            "aes-ni-avx"
        );
        assert_eq!(CpuAes { avx2: false, ..cpu }.ring_path(), "aes-ni-avx");
        // AVX without MOVBE (Sandy Bridge): the plain AES-NI code.
        let sandy = CpuAes {
            movbe: false,
            avx2: false,
            vaes: false,
            vpclmulqdq: false,
            ..cpu
        };
        assert_eq!(sandy.ring_path(), "aes-ni");
        // No AES-NI: ring's constant-time SIMD code, RustCrypto's soft code.
        let no_aes = CpuAes { aes: false, ..cpu };
        assert_eq!(no_aes.ring_path(), "vpaes");
        assert_eq!(no_aes.rustcrypto_path(), "soft");
        let bare = CpuAes {
            x86_64: true,
            ..CpuAes::default()
        };
        assert_eq!(bare.ring_path(), "fallback");
        assert_eq!(CpuAes::default().ring_path(), "not-x86-64");
        assert_eq!(CpuAes::default().rustcrypto_path(), "not-x86-64");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn aes_gcm_path_of_this_cpu_is_one_of_the_named() {
        let cpu = CpuAes::detect();
        assert_eq!(cpu.vaes, std::arch::is_x86_feature_detected!("vaes"));
        assert_eq!(Backend::Ring.aes_gcm_path(), cpu.ring_path());
        assert_eq!(Backend::RustCrypto.aes_gcm_path(), cpu.rustcrypto_path());
        assert!(["vaes-avx2", "aes-ni-avx", "aes-ni", "vpaes", "fallback"]
            .contains(&Backend::Ring.aes_gcm_path()));
    }

    #[test]
    fn scapy_short_packet_both_backends() {
        // spec/psp.md §6.2: key given directly, nonce = SPI ‖ IV, AAD = 36 bytes.
        let key = hex::decode("ffeeddccbbaa99887766554433221100").unwrap();
        let pkt = hex::decode(
            "0401050111223344010203040506070845000025000100004011\
             7cc57f0000017f00000104d2162e0011a0c4414141414141414141",
        )
        .unwrap();
        let nonce: [u8; 12] = pkt[4..16].try_into().unwrap();
        for backend in Backend::ALL {
            let c = ctx(backend, Version::Aes128Gcm, &key);
            let mut buf = pkt.clone();
            let (aad, pt) = buf.split_at_mut(36);
            let tag = c.seal_in_place(&nonce, aad, pt).unwrap();
            assert_eq!(hex::encode(&*pt), "8e3e2b1345c76bf95cdac39b861762a0cf");
            assert_eq!(hex::encode(tag), "dffbbebbc6313a2b9de064759cdd71c9");
            c.open_in_place(&nonce, aad, pt, &tag).unwrap();
            assert_eq!(&*pt, &pkt[36..]);
            let mut bad = tag;
            bad[0] ^= 1;
            assert_eq!(c.open_in_place(&nonce, aad, pt, &bad), Err(AeadError));
        }
    }

    #[test]
    fn backend_names_parse() {
        for b in Backend::ALL {
            assert_eq!(b.name().parse::<Backend>(), Ok(b));
        }
        assert_eq!(Backend::default(), Backend::Ring);
        assert!("openssl".parse::<Backend>().is_err());
    }

    #[test]
    fn empty_plaintext_still_authenticates() {
        for backend in Backend::ALL {
            let c = ctx(backend, Version::Aes256Gcm, &[9; 32]);
            let nonce = [1u8; 12];
            let tag = c.seal_in_place(&nonce, b"header", &mut []).unwrap();
            assert!(c.open_in_place(&nonce, b"header", &mut [], &tag).is_ok());
            assert!(c.open_in_place(&nonce, b"headeR", &mut [], &tag).is_err());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn backends_agree(
            v1 in any::<bool>(),
            key in proptest::collection::vec(any::<u8>(), 32),
            nonce in any::<[u8; 12]>(),
            aad in proptest::collection::vec(any::<u8>(), 0..64),
            pt in proptest::collection::vec(any::<u8>(), 0..2048),
        ) {
            let version = if v1 { Version::Aes256Gcm } else { Version::Aes128Gcm };
            let key = &key[..version.key_len()];
            let ring = ctx(Backend::Ring, version, key);
            let rc = ctx(Backend::RustCrypto, version, key);

            let mut a = pt.clone();
            let mut b = pt.clone();
            let ta = ring.seal_in_place(&nonce, &aad, &mut a).unwrap();
            let tb = rc.seal_in_place(&nonce, &aad, &mut b).unwrap();
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(ta, tb);

            // Each opens the other's output.
            rc.open_in_place(&nonce, &aad, &mut a, &ta).unwrap();
            ring.open_in_place(&nonce, &aad, &mut b, &tb).unwrap();
            prop_assert_eq!(&a, &pt);
            prop_assert_eq!(&b, &pt);
        }
    }
}
