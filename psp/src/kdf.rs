//! PSP key derivation (PSP spec "Key Derivation", spec/psp.md §3) and key
//! material types.
//!
//! Owns the 256-bit master keys and the derived SA keys. NIST SP 800-108
//! counter-mode KDF with AES-256-CMAC as PRF, keyed by the master key the SPI
//! MSB selects. Key material has a redacting `Debug` only and is zeroized on
//! drop. This module never sees packets and never generates keys: fresh
//! master keys come from the caller (sans-IO, no RNG here).

use core::fmt;

use aes::Aes256;
use cmac::{Cmac, Mac};
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::header::{Spi, Version};

/// Length of a master key: AES-256.
pub const MASTER_KEY_LEN: usize = 32;

/// A 256-bit PSP master key ("device key" in Linux). Zeroized on drop.
#[derive(Clone)]
pub struct MasterKey([u8; MASTER_KEY_LEN]);

impl MasterKey {
    /// Wrap 32 key bytes.
    pub const fn new(bytes: [u8; MASTER_KEY_LEN]) -> MasterKey {
        MasterKey(bytes)
    }

    /// From a slice of exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<MasterKey> {
        let arr: [u8; MASTER_KEY_LEN] = bytes.try_into().ok()?;
        Some(MasterKey(arr))
    }

    /// Derive the SA key for `spi` and `version` from this key (the caller
    /// has already selected this key by the SPI MSB).
    ///
    /// PSP spec "Key Derivation": PRF input is one 16-byte block,
    /// `counter(BE32) ‖ "Pv0\0"/"Pv1\0" ‖ SPI(BE32) ‖ L in bits(BE32)`;
    /// v0 key = CMAC(block(i=1)); v1 key = CMAC(block(i=1)) ‖ CMAC(block(i=2)).
    pub fn derive(&self, spi: Spi, version: Version) -> SaKey {
        Prf::new(self).derive(spi, version)
    }
}

/// A master key keyed into its PRF, AES-256-CMAC: the AES-256 key schedule
/// and the CMAC subkeys computed once and cloned for each derivation
/// instead of once per derived key (a receiver derives a key for every SPI
/// its cache does not hold: at a million SAs, nearly every packet).
/// Zeroized on drop (`aes` and `cmac` with their `zeroize` features).
#[derive(Clone)]
struct Prf(Cmac<Aes256>);

impl Prf {
    fn new(key: &MasterKey) -> Prf {
        // Only fails for a key of the wrong length; ours is 32 bytes by type.
        Prf(<Cmac<Aes256> as Mac>::new_from_slice(&key.0)
            .expect("MasterKey is 32 bytes, the AES-256 key length"))
    }

    /// PSP spec "Key Derivation" (see [`MasterKey::derive`]).
    fn derive(&self, spi: Spi, version: Version) -> SaKey {
        let mut key = SaKey {
            version,
            bytes: [0u8; 32],
        };
        let blocks = version.key_len() / 16;
        for i in 0..blocks {
            let mut block = kdf_block(i as u32 + 1, spi, version);
            let mut m = self.0.clone();
            m.update(&block);
            let mut out = m.finalize().into_bytes();
            key.bytes[16 * i..16 * (i + 1)].copy_from_slice(&out);
            out.as_mut_slice().zeroize();
            block.zeroize();
        }
        key
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey(<redacted>)")
    }
}

impl Drop for MasterKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl ZeroizeOnDrop for MasterKey {}

/// The two master keys of a receiver (PSP spec "Key Derivation": SPI MSB 0
/// selects K0, 1 selects K1).
#[derive(Clone, Debug)]
pub struct MasterKeys {
    /// Selected by SPI MSB = 0.
    pub k0: MasterKey,
    /// Selected by SPI MSB = 1.
    pub k1: MasterKey,
}

impl MasterKeys {
    /// The key the SPI's MSB selects.
    pub fn select(&self, spi: Spi) -> &MasterKey {
        if spi.key_selector() == 0 {
            &self.k0
        } else {
            &self.k1
        }
    }

    /// Derive the SA key for `spi` and `version`.
    pub fn derive(&self, spi: Spi, version: Version) -> SaKey {
        self.select(spi).derive(spi, version)
    }
}

/// The two master-key slots of a receiver, the active one, and the
/// rotations so far (PSP spec "Master Key Lifetime", spec/psp.md §4).
///
/// All new SPIs come from the active slot. [`rotate`](Self::rotate) loads a
/// fresh key into the other slot and makes it active; the previously active
/// key stays loaded, so its SAs keep working. The key a rotation replaces
/// was active two rotations ago: its SPIs now select the new key. A node
/// keeps one set and its engines follow it (`SaDatabase::follow`).
#[derive(Clone)]
pub struct MasterKeySlots {
    keys: [Option<MasterKey>; 2],
    /// Each loaded key keyed into its PRF, ready to derive with.
    prfs: [Option<Prf>; 2],
    active: usize,
    rotations: u64,
}

impl MasterKeySlots {
    /// Both keys loaded, K0 active, no rotation yet.
    pub fn new(keys: MasterKeys) -> MasterKeySlots {
        let MasterKeys { k0, k1 } = keys;
        MasterKeySlots {
            prfs: [Some(Prf::new(&k0)), Some(Prf::new(&k1))],
            keys: [Some(k0), Some(k1)],
            active: 0,
            rotations: 0,
        }
    }

    /// Only K0 loaded (a fresh node before its first rotation): SPIs with
    /// MSB 1 select no key until a rotation loads K1.
    pub fn with_key(k0: MasterKey) -> MasterKeySlots {
        MasterKeySlots {
            prfs: [Some(Prf::new(&k0)), None],
            keys: [Some(k0), None],
            active: 0,
            rotations: 0,
        }
    }

    /// Loads `new_key` into the inactive slot and makes it active; returns
    /// that slot.
    pub fn rotate(&mut self, new_key: MasterKey) -> usize {
        let slot = 1 - self.active;
        if let Some(prf) = self.prfs.get_mut(slot) {
            *prf = Some(Prf::new(&new_key));
        }
        if let Some(k) = self.keys.get_mut(slot) {
            *k = Some(new_key);
        }
        self.active = slot;
        self.rotations = self.rotations.wrapping_add(1);
        slot
    }

    /// The active slot (0 or 1): the MSB of newly allocated SPIs.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Rotations performed.
    pub fn rotations(&self) -> u64 {
        self.rotations
    }

    /// Which slots hold a key.
    pub fn loaded(&self) -> [bool; 2] {
        [self.keys[0].is_some(), self.keys[1].is_some()]
    }

    /// The SA key for an SPI from the key its MSB selects; `None` if that
    /// slot holds no key.
    pub fn derive(&self, spi: Spi, version: Version) -> Option<SaKey> {
        let prf = self.prfs.get(spi.key_selector())?.as_ref()?;
        Some(prf.derive(spi, version))
    }
}

impl fmt::Debug for MasterKeySlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterKeySlots")
            .field("keys_loaded", &self.loaded())
            .field("active", &self.active)
            .field("rotations", &self.rotations)
            .finish()
    }
}

/// The PRF input block for counter `i` (PSP spec "Key Derivation"; the label
/// is "Pv" + version digit + NUL, i.e. `50 76 30 00` with the version OR-ed
/// into byte 2).
fn kdf_block(i: u32, spi: Spi, version: Version) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&i.to_be_bytes());
    b[4..8].copy_from_slice(&[0x50, 0x76, 0x30 | version.raw(), 0x00]);
    b[8..12].copy_from_slice(&spi.to_bytes());
    let bits = (version.key_len() * 8) as u32;
    b[12..16].copy_from_slice(&bits.to_be_bytes());
    b
}

/// Error building an [`SaKey`] from bytes of the wrong length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLengthError {
    /// Length the version needs.
    pub expected: usize,
    /// Length given.
    pub actual: usize,
}

impl fmt::Display for KeyLengthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SA key must be {} bytes, got {}",
            self.expected, self.actual
        )
    }
}

impl std::error::Error for KeyLengthError {}

/// A derived (or received) SA key: 16 bytes for v0, 32 for v1. The sender
/// stores it; the receiver derives it. Zeroized on drop; `Debug` redacts.
#[derive(Clone)]
pub struct SaKey {
    version: Version,
    bytes: [u8; 32],
}

impl SaKey {
    /// From raw key bytes (e.g. received from the peer's key exchange).
    pub fn new(version: Version, bytes: &[u8]) -> Result<SaKey, KeyLengthError> {
        let n = version.key_len();
        if bytes.len() != n {
            return Err(KeyLengthError {
                expected: n,
                actual: bytes.len(),
            });
        }
        let mut key = SaKey {
            version,
            bytes: [0u8; 32],
        };
        key.bytes[..n].copy_from_slice(bytes);
        Ok(key)
    }

    /// The cipher suite the key is for.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The key bytes (16 or 32). Handle with care: this is the secret.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.version.key_len()]
    }
}

impl fmt::Debug for SaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SaKey({}, <redacted>)", self.version)
    }
}

impl Drop for SaKey {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl ZeroizeOnDrop for SaKey {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::spec_keys;

    fn derive_hex(spi: u32, version: Version) -> String {
        hex::encode(spec_keys().derive(Spi(spi), version).as_bytes())
    }

    #[test]
    fn spec_kdf_examples() {
        // PSP spec "Examples of key derivation" (spec/psp.md §6.1).
        assert_eq!(
            derive_hex(0x1234_5678, Version::Aes128Gcm),
            "96c22dc799198090b74b70ae468e4e30"
        );
        assert_eq!(
            derive_hex(0x9A34_5678, Version::Aes128Gcm),
            "3946da2554eae46ad1ef77a64372edc4"
        );
        assert_eq!(
            derive_hex(0x1234_5678, Version::Aes256Gcm),
            "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de"
        );
    }

    #[test]
    fn scapy_kdf_rows() {
        // SCAPY test/contrib/psp.uts (spec/psp.md §6.1).
        assert_eq!(
            derive_hex(0x9A34_5678, Version::Aes128Gcm),
            "3946da2554eae46ad1ef77a64372edc4"
        );
        assert_eq!(
            derive_hex(0x9A34_5678, Version::Aes256Gcm),
            "fa00f609df6020289a1c93d6027081a637ad45b24a5576b36e6f49dd43114d80"
        );
    }

    #[test]
    fn self_computed_kdf_rows() {
        // spec/psp.md §6.1 [self-computed] table, v0/v1 columns.
        assert_eq!(
            derive_hex(0x1A34_5678, Version::Aes128Gcm),
            "3fe9b90602a41ce17e20971810e9a6a0"
        );
        assert_eq!(
            derive_hex(0x1A34_5678, Version::Aes256Gcm),
            "184eecc110d0ecfcf85e6f7c9eedab4d21122fb2d2b8c344af3a1c38d0b6adfd"
        );
    }

    #[test]
    fn kdf_block_layout() {
        assert_eq!(
            hex::encode(kdf_block(1, Spi(0x1234_5678), Version::Aes128Gcm)),
            "00000001507630001234567800000080"
        );
        assert_eq!(
            hex::encode(kdf_block(2, Spi(0x1234_5678), Version::Aes256Gcm)),
            "00000002507631001234567800000100"
        );
    }

    #[test]
    fn msb_selects_master_key() {
        let keys = spec_keys();
        let spi = Spi(0x9A34_5678);
        assert_eq!(
            keys.derive(spi, Version::Aes128Gcm).as_bytes(),
            keys.k1.derive(spi, Version::Aes128Gcm).as_bytes()
        );
        assert_ne!(
            keys.derive(spi, Version::Aes128Gcm).as_bytes(),
            keys.k0.derive(spi, Version::Aes128Gcm).as_bytes()
        );
    }

    #[test]
    fn sa_key_lengths_and_debug() {
        assert!(SaKey::new(Version::Aes128Gcm, &[0; 16]).is_ok());
        assert_eq!(
            SaKey::new(Version::Aes256Gcm, &[0; 16]).unwrap_err(),
            KeyLengthError {
                expected: 32,
                actual: 16
            }
        );
        let k = SaKey::new(Version::Aes128Gcm, &[0xAB; 16]).unwrap();
        assert_eq!(k.as_bytes().len(), 16);
        // Exact strings: a derived `Debug` would print the bytes (in
        // decimal, so a search for hex digits would not notice).
        assert_eq!(format!("{k:?}"), "SaKey(aes-gcm-128, <redacted>)");
        assert_eq!(
            format!("{:?}", spec_keys()),
            "MasterKeys { k0: MasterKey(<redacted>), k1: MasterKey(<redacted>) }"
        );
    }
}
