//! Security associations: the IV clock, the TX SA, and the RX SA database
//! (master keys, rotation, SPI allocation, cache of derived AEAD contexts).
//!
//! Owns per-SA crypto state so that no packet pays for a key schedule: the
//! [`TxSa`] expands its key once; the [`SaDatabase`] derives an RX context
//! per (SPI, version) on first use and caches it in a bounded, preallocated
//! table. It never reads a clock (`now_ps` is passed in), never generates
//! key material (fresh master keys come from the caller), and knows nothing
//! of connections (the SPI check lives in [`crate::check`]).

use crate::aead::{AeadContext, Backend};
use crate::error::{RxDrop, SealError, SpiExhausted};
use crate::header::{HeaderRepr, Spi, Version, ICV_LEN, NEXT_HEADER_FALCON};
use crate::kdf::{MasterKey, MasterKeySlots, MasterKeys, SaKey};
use crate::seal::{check_tx_header, packet_region, seal_in_place, Layout, Opened, Sealed};
use crate::space::{SpiAllocator, SpiSpace};

/// Per-SA IV source (DESIGN §4): picoseconds since the node's clock epoch,
/// strictly increasing per SA: `next_iv(now) = max(last + 1, now)`.
///
/// PSP spec "IV Generation": each packet must carry a strictly increasing
/// IV and an IV must never repeat under one key (GCM nonce reuse is fatal).
/// One `IvClock` per SA and the SA owned by one core (`&mut`) keep this
/// without atomics; an SA shared across TX cores would need one SA per core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IvClock {
    last: Option<u64>,
}

impl IvClock {
    /// A clock that has issued nothing: the first IV is `now_ps`.
    pub const fn new() -> IvClock {
        IvClock { last: None }
    }

    /// A clock whose next IV is strictly greater than `last` (e.g. to resume
    /// an SA whose last IV is known).
    pub const fn after(last: u64) -> IvClock {
        IvClock { last: Some(last) }
    }

    /// The IV for a packet sent at `now_ps`. `None` once 2^64 − 1 has been
    /// issued: the SA must be rekeyed (wrapping would repeat nonces). At one
    /// IV per ps from the clock epoch that is ≈ 213 days away.
    pub fn next_iv(&mut self, now_ps: u64) -> Option<u64> {
        let iv = match self.last {
            None => now_ps,
            Some(last) => last.checked_add(1)?.max(now_ps),
        };
        self.last = Some(iv);
        Some(iv)
    }

    /// The last IV issued.
    pub fn last(&self) -> Option<u64> {
        self.last
    }
}

/// Configuration of a transmit SA, everything but the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxSaConfig {
    /// SPI the receiver chose for this SA.
    pub spi: Spi,
    /// Crypt offset in 4-byte units (must cover the VC when present).
    pub crypt_offset: u8,
    /// Virtualization cookie to send (Falcon: the PCID), if any.
    pub vc: Option<u64>,
    /// Next Header value (252 for Falcon).
    pub next_header: u8,
}

impl TxSaConfig {
    /// Falcon defaults: Next Header 252; crypt offset 1 keeps the 4-byte
    /// Falcon connection id clear, 3 with a VC (8 VC bytes + the CID).
    pub const fn falcon(spi: Spi, vc: Option<u64>) -> TxSaConfig {
        TxSaConfig {
            spi,
            crypt_offset: if vc.is_some() { 3 } else { 1 },
            vc,
            next_header: NEXT_HEADER_FALCON,
        }
    }
}

/// A transmit SA: header template, expanded key and IV clock. One sender
/// of many SAs keeps [`CachedTxSa`](crate::CachedTxSa)s instead, whose
/// expanded keys share a bounded [`TxContextCache`](crate::TxContextCache).
#[derive(Debug)]
pub struct TxSa {
    template: HeaderRepr,
    ctx: AeadContext,
    clock: IvClock,
}

impl TxSa {
    /// Build the SA, expanding the key once. Rejects a zero SPI, a crypt
    /// offset above 63, or one that would encrypt the VC.
    pub fn new(backend: Backend, key: &SaKey, config: TxSaConfig) -> Result<TxSa, SealError> {
        let template = HeaderRepr {
            next_header: config.next_header,
            crypt_offset: config.crypt_offset,
            sample: false,
            drop_after_sampling: false,
            version: key.version(),
            spi: config.spi,
            iv: 0,
            vc: config.vc,
        };
        check_tx_header(&template, key.version())?;
        Ok(TxSa {
            template,
            ctx: AeadContext::new(backend, key),
            clock: IvClock::new(),
        })
    }

    /// Seal in place: `buf[offset..]` holds [`header_len`](Self::header_len)
    /// bytes of room for the PSP header, then `payload_len` payload bytes,
    /// then [`ICV_LEN`] bytes of tailroom. The IV is the next value of this
    /// SA's clock at `now_ps`.
    #[inline]
    pub fn seal<'a>(
        &mut self,
        now_ps: u64,
        buf: &'a mut [u8],
        offset: usize,
        payload_len: usize,
    ) -> Result<Sealed<'a>, SealError> {
        let iv = self.clock.next_iv(now_ps).ok_or(SealError::IvExhausted)?;
        let header = HeaderRepr {
            iv,
            ..self.template
        };
        seal_in_place(&self.ctx, &header, buf, offset, payload_len)
    }

    /// This SA continuing `clock` (the IV clock of the SA it replaces on
    /// the same connection): its first IV is above every IV the other
    /// issued, so a receiver's replay state carries over (key rotation).
    pub fn with_iv_clock(mut self, clock: IvClock) -> TxSa {
        self.clock = clock;
        self
    }

    /// What the SA was built with, but the key.
    pub fn config(&self) -> TxSaConfig {
        TxSaConfig {
            spi: self.template.spi,
            crypt_offset: self.template.crypt_offset,
            vc: self.template.vc,
            next_header: self.template.next_header,
        }
    }

    /// Bytes of header room before the payload: 16, or 24 with a VC.
    pub fn header_len(&self) -> usize {
        self.template.buffer_len()
    }

    /// Total bytes PSP adds to the payload: header + ICV.
    pub fn overhead(&self) -> usize {
        self.header_len() + ICV_LEN
    }

    /// The SPI.
    pub fn spi(&self) -> Spi {
        self.template.spi
    }

    /// The cipher suite.
    pub fn version(&self) -> Version {
        self.template.version
    }

    /// The crypt offset in 4-byte units.
    pub fn crypt_offset(&self) -> u8 {
        self.template.crypt_offset
    }

    /// The IV clock (e.g. for the last IV sent).
    pub fn iv_clock(&self) -> &IvClock {
        &self.clock
    }

    /// The expanded key (for benchmarking against the raw backend).
    pub fn context(&self) -> &AeadContext {
        &self.ctx
    }
}

/// Ways per set of the RX context cache.
const WAYS: usize = 4;

/// The receive side of PSP: master keys with rotation, SPI allocation, and a
/// bounded cache of derived AEAD contexts keyed by (SPI, version).
///
/// PSP spec "Key Derivation" / "Master Key Lifetime" (spec/psp.md §4): one
/// of two master-key slots is active and all new SPIs come from it. A
/// [`rotate`](Self::rotate) loads a fresh key into the other slot and makes
/// it active; the previously active key stays loaded, so its SAs keep
/// working. The key it replaces was active two rotations ago: a double
/// rotation evicts a key, its cached contexts are purged, and its SPIs now
/// select the new key and fail authentication.
///
/// On a node of several engines the keys are the node's: each engine's
/// database [`follow`](Self::follow)s the node's [`MasterKeySlots`] (the
/// per-packet path then reads only its own copy), and the node hands out
/// the SPIs ([`SpiAllocator`]); [`allocate_spi`](Self::allocate_spi) is for
/// a database that is a whole node by itself.
///
/// Cache policy: a context is inserted only after a packet authenticated
/// with it, so forged packets with random SPIs cost a key derivation each
/// but cannot evict live entries. 4-way set associative, LRU within a set,
/// allocated once in [`new`](Self::new): no allocation per packet on a
/// cache hit (a miss expands a key schedule; with the RustCrypto backend
/// that also boxes it).
pub struct SaDatabase {
    backend: Backend,
    keys: MasterKeySlots,
    enabled: [bool; 2],
    spis: SpiAllocator,
    cache: SaCache,
}

impl SaDatabase {
    /// Both master keys loaded, K0 active. `capacity` is the number of
    /// cached RX contexts (rounded up to a power of two, at least 4).
    pub fn new(backend: Backend, keys: MasterKeys, capacity: usize) -> SaDatabase {
        Self::with_key_slots(backend, MasterKeySlots::new(keys), capacity)
    }

    /// Only K0 loaded (a fresh node before its first rotation). SPIs with
    /// MSB 1 are [`RxDrop::UnknownSa`] until a rotation loads K1.
    pub fn with_key(backend: Backend, k0: MasterKey, capacity: usize) -> SaDatabase {
        Self::with_key_slots(backend, MasterKeySlots::with_key(k0), capacity)
    }

    /// The keys of `keys` (e.g. a copy of its node's, after rotations), SPI
    /// allocation from number 1 under each key.
    pub fn with_key_slots(backend: Backend, keys: MasterKeySlots, capacity: usize) -> SaDatabase {
        SaDatabase {
            backend,
            keys,
            enabled: [true; 2],
            spis: SpiAllocator::new(SpiSpace::SINGLE),
            cache: SaCache::new(capacity),
        }
    }

    /// Open a received PSP packet in place: `buf[offset..offset + len]` is
    /// the UDP payload (PSP header … ICV). Parses the header, checks the
    /// version is enabled, finds or derives the SA context from the SPI, and
    /// verifies and decrypts. The caller then runs the connection checks
    /// ([`crate::RxSecurity::accept`]) on the [`Opened`] packet.
    pub fn open<'a>(
        &mut self,
        buf: &'a mut [u8],
        offset: usize,
        len: usize,
    ) -> Result<Opened<'a>, RxDrop> {
        let packet = packet_region(buf, offset, len)?;
        let layout = Layout::parse(packet)?;
        let (spi, version) = (layout.header.spi, layout.header.version);
        if !self.version_enabled(version) {
            return Err(RxDrop::VersionDisabled);
        }
        if let Some(ctx) = self.cache.find(spi, version) {
            return layout.open(ctx, packet);
        }
        let key = self.derive(spi, version).ok_or(RxDrop::UnknownSa)?;
        let ctx = AeadContext::new(self.backend, &key);
        let opened = layout.open(&ctx, packet)?;
        self.cache.insert(spi, version, ctx);
        Ok(opened)
    }

    /// The RX context for (`spi`, `version`), deriving and caching it if
    /// needed (e.g. to warm the cache when an SA is set up).
    pub fn context(&mut self, spi: Spi, version: Version) -> Result<&AeadContext, RxDrop> {
        if !spi.is_valid() {
            return Err(RxDrop::BadSpi);
        }
        if self.cache.find(spi, version).is_none() {
            let key = self.derive(spi, version).ok_or(RxDrop::UnknownSa)?;
            let ctx = AeadContext::new(self.backend, &key);
            self.cache.insert(spi, version, ctx);
        }
        // Present: found above or just inserted.
        self.cache.find(spi, version).ok_or(RxDrop::UnknownSa)
    }

    /// Back to the state [`new`](Self::new) builds with `keys`: K0 active,
    /// no rotation, both versions enabled, SPI allocation from index 1 again
    /// under each key, nothing cached. The cache table's allocation is kept
    /// (the expensive part of a new database: `capacity` contexts). For
    /// test and fuzz harnesses that replay inputs against a freshly set-up
    /// receiver: SPIs allocated before the reset are handed out again, so a
    /// live node must not reset a database whose SPIs a peer still uses.
    pub fn reset(&mut self, keys: MasterKeys) {
        self.reset_to(MasterKeySlots::new(keys));
    }

    /// [`reset`](Self::reset) to the state [`with_key_slots`](Self::with_key_slots)
    /// builds with `keys`.
    pub fn reset_to(&mut self, keys: MasterKeySlots) {
        self.keys = keys;
        self.enabled = [true; 2];
        self.spis = SpiAllocator::new(SpiSpace::SINGLE);
        self.cache.clear();
    }

    /// Takes over the node's master keys after its rotations: a slot whose
    /// key changed has its cached contexts purged and its SPI numbering
    /// restarted. One rotation behind changes only the node's active slot;
    /// further behind (the keys of the rotations in between are gone),
    /// both. Nothing changes if `node` has rotated as often as this
    /// database's keys.
    pub fn follow(&mut self, node: &MasterKeySlots) {
        let behind = node.rotations().wrapping_sub(self.keys.rotations());
        if behind == 0 {
            return;
        }
        let changed = match behind {
            1 => [node.active() == 0, node.active() == 1],
            _ => [true; 2],
        };
        self.keys = node.clone();
        for (slot, changed) in changed.into_iter().enumerate() {
            if changed {
                self.cache.purge_key_slot(slot);
                self.spis.restart(slot);
            }
        }
    }

    /// The master keys (to build or follow another database from).
    pub fn key_slots(&self) -> &MasterKeySlots {
        &self.keys
    }

    /// Allocate a fresh SPI from the active master key and derive its SA key
    /// (to send to the peer over the CM's secure channel; PSP spec: the
    /// receiver picks the SPI). SPIs are never reused under one master key.
    pub fn allocate_spi(&mut self, version: Version) -> Result<(Spi, SaKey), SpiExhausted> {
        let slot = self.keys.active();
        let key_loaded = self.keys.loaded().get(slot).copied().unwrap_or(false);
        if !key_loaded {
            return Err(SpiExhausted);
        }
        let spi = self.spis.allocate(0, slot)?;
        let key = self.derive(spi, version).ok_or(SpiExhausted)?;
        Ok((spi, key))
    }

    /// Derive the SA key for an SPI from the master key its MSB selects;
    /// `None` if that slot holds no key.
    pub fn derive(&self, spi: Spi, version: Version) -> Option<SaKey> {
        self.keys.derive(spi, version)
    }

    /// Master-key rotation: load `new_key` into the inactive slot and make it
    /// active. The key that slot held (active two rotations ago) is evicted
    /// and its cached contexts purged. Returns the new active slot.
    pub fn rotate(&mut self, new_key: MasterKey) -> usize {
        let slot = self.keys.rotate(new_key);
        self.spis.restart(slot);
        self.cache.purge_key_slot(slot);
        slot
    }

    /// The active master-key slot (0 or 1): the MSB of newly allocated SPIs.
    pub fn active_key(&self) -> usize {
        self.keys.active()
    }

    /// Rotations performed.
    pub fn rotations(&self) -> u64 {
        self.keys.rotations()
    }

    /// Enable or disable accepting a version on receive (spec: "supported
    /// and enabled").
    pub fn set_version_enabled(&mut self, version: Version, enabled: bool) {
        if let Some(e) = self.enabled.get_mut(version.raw() as usize) {
            *e = enabled;
        }
    }

    /// Whether a version is accepted on receive.
    pub fn version_enabled(&self, version: Version) -> bool {
        self.enabled
            .get(version.raw() as usize)
            .copied()
            .unwrap_or(false)
    }

    /// The backend contexts are built for.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Cached contexts.
    pub fn cached(&self) -> usize {
        self.cache.len
    }

    /// Maximum cached contexts.
    pub fn capacity(&self) -> usize {
        self.cache.capacity()
    }
}

impl core::fmt::Debug for SaDatabase {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SaDatabase")
            .field("backend", &self.backend)
            .field("keys_loaded", &self.keys.loaded())
            .field("active", &self.keys.active())
            .field("rotations", &self.keys.rotations())
            .field("cached", &self.cache.len)
            .field("capacity", &self.cache.capacity())
            .finish()
    }
}

/// Which SA a cache way holds and when it was last used. Kept apart from
/// the contexts: the tags of a set share one cache line, so a lookup that
/// misses reads that line alone, not one line of each way's ~600-byte
/// context (at a million SAs nearly every lookup misses).
#[derive(Clone, Copy)]
struct Tag {
    spi: Spi,
    version: Version,
    /// 0: the way is empty.
    last_use: u64,
}

impl Tag {
    const EMPTY: Tag = Tag {
        spi: Spi(0),
        version: Version::Aes128Gcm,
        last_use: 0,
    };

    fn holds(&self, spi: Spi, version: Version) -> bool {
        self.last_use != 0 && self.spi == spi && self.version == version
    }
}

/// Set-associative cache of RX contexts, LRU within a set; the tables are
/// allocated once. `tags[i]` says what `contexts[i]` holds.
struct SaCache {
    tags: Vec<Tag>,
    contexts: Vec<Option<AeadContext>>,
    set_mask: usize,
    /// Uses so far; starts at 1 so that a used way's `last_use` is never 0.
    tick: u64,
    len: usize,
}

impl SaCache {
    fn new(capacity: usize) -> SaCache {
        let sets = capacity.div_ceil(WAYS).max(1).next_power_of_two();
        SaCache {
            tags: vec![Tag::EMPTY; sets * WAYS],
            contexts: (0..sets * WAYS).map(|_| None).collect(),
            set_mask: sets - 1,
            tick: 0,
            len: 0,
        }
    }

    fn set_start(&self, spi: Spi, version: Version) -> usize {
        // Fibonacci hashing: sequential SPIs spread over the sets.
        let h =
            (u64::from(spi.0) | u64::from(version.raw()) << 32).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((h >> 32) as usize & self.set_mask) * WAYS
    }

    fn next_tick(&mut self) -> u64 {
        self.tick = self.tick.wrapping_add(1).max(1);
        self.tick
    }

    fn find(&mut self, spi: Spi, version: Version) -> Option<&AeadContext> {
        let start = self.set_start(spi, version);
        let tick = self.next_tick();
        let set = self.tags.get_mut(start..start + WAYS)?;
        let way = set.iter().position(|t| t.holds(spi, version))?;
        set[way].last_use = tick;
        self.contexts.get(start + way)?.as_ref()
    }

    fn insert(&mut self, spi: Spi, version: Version, ctx: AeadContext) {
        let start = self.set_start(spi, version);
        let tick = self.next_tick();
        let Some(set) = self.tags.get_mut(start..start + WAYS) else {
            return;
        };
        // An empty way (last use 0), else the least recently used one.
        let victim = set
            .iter()
            .enumerate()
            .min_by_key(|(_, t)| t.last_use)
            .map_or(0, |(i, _)| i);
        if set[victim].last_use == 0 {
            self.len += 1;
        }
        set[victim] = Tag {
            spi,
            version,
            last_use: tick,
        };
        if let Some(slot) = self.contexts.get_mut(start + victim) {
            *slot = Some(ctx);
        }
    }

    fn clear(&mut self) {
        self.tags.iter_mut().for_each(|t| *t = Tag::EMPTY);
        self.contexts.iter_mut().for_each(|c| *c = None);
        self.tick = 0;
        self.len = 0;
    }

    fn purge_key_slot(&mut self, key_slot: usize) {
        for (tag, ctx) in self.tags.iter_mut().zip(self.contexts.iter_mut()) {
            if tag.last_use != 0 && tag.spi.key_selector() == key_slot {
                *tag = Tag::EMPTY;
                *ctx = None;
                self.len -= 1;
            }
        }
    }

    fn capacity(&self) -> usize {
        self.tags.len()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::aead::Aead;
    use crate::header::{HEADER_LEN, ICV_LEN};
    use crate::testutil::spec_keys;

    fn falcon_payload() -> Vec<u8> {
        let mut p = vec![0x00, 0x00, 0x12, 0x34];
        p.extend(0x10u8..=0x2b);
        p
    }

    /// Seal `payload` with `sa` at `now`, return the PSP packet bytes.
    fn seal(sa: &mut TxSa, now: u64, payload: &[u8]) -> Vec<u8> {
        let h = sa.header_len();
        let mut buf = vec![0u8; h + payload.len() + ICV_LEN];
        buf[h..h + payload.len()].copy_from_slice(payload);
        sa.seal(now, &mut buf, 0, payload.len())
            .unwrap()
            .as_bytes()
            .to_vec()
    }

    fn open(db: &mut SaDatabase, pkt: &[u8]) -> Result<Vec<u8>, RxDrop> {
        let mut b = pkt.to_vec();
        let len = b.len();
        db.open(&mut b, 0, len).map(|o| o.payload().to_vec())
    }

    #[test]
    fn iv_clock_is_strictly_increasing() {
        let mut c = IvClock::new();
        assert_eq!(c.next_iv(1_000), Some(1_000));
        assert_eq!(c.next_iv(1_000), Some(1_001));
        assert_eq!(c.next_iv(500), Some(1_002)); // clock went backwards
        assert_eq!(c.next_iv(5_000), Some(5_000));
        assert_eq!(c.last(), Some(5_000));
        let mut c = IvClock::after(u64::MAX - 1);
        assert_eq!(c.next_iv(0), Some(u64::MAX));
        assert_eq!(c.next_iv(0), None);
        assert_eq!(IvClock::new().next_iv(0), Some(0));
    }

    #[test]
    fn tx_sa_reproduces_vector_a() {
        // spec/psp.md §6.4 A: SPI 0x9A345678 (K1), v0, IV 10^12 ps.
        let key = spec_keys().derive(Spi(0x9A34_5678), Version::Aes128Gcm);
        let mut sa = TxSa::new(
            Backend::Ring,
            &key,
            TxSaConfig::falcon(Spi(0x9A34_5678), None),
        )
        .unwrap();
        assert_eq!((sa.header_len(), sa.overhead()), (16, 32));
        let pkt = seal(&mut sa, 1_000_000_000_000, &falcon_payload());
        assert_eq!(
            hex::encode(&pkt),
            "fc0101019a345678000000e8d4a5100000001234321c9cbabbd1c70022c1cf148daf6bcadb5285c6add269d7bcf58144af149abb1712361fe743704cd3f05e81"
        );
        // Same `now` again: the IV still advances (vector A's IV + 1 is B's
        // IV, but B uses another key, so just check the header).
        let pkt2 = seal(&mut sa, 1_000_000_000_000, &falcon_payload());
        assert_eq!(hex::encode(&pkt2[8..16]), "000000e8d4a51001");
        assert_eq!(sa.iv_clock().last(), Some(0xE8_D4A5_1001));
    }

    #[test]
    fn tx_sa_rejects_bad_config() {
        let key = SaKey::new(Version::Aes128Gcm, &[1; 16]).unwrap();
        let bad = |c: TxSaConfig| TxSa::new(Backend::Ring, &key, c).unwrap_err();
        let good = TxSaConfig::falcon(Spi(5), None);
        assert_eq!(
            bad(TxSaConfig {
                spi: Spi(0x8000_0000),
                ..good
            }),
            SealError::ZeroSpi
        );
        assert_eq!(
            bad(TxSaConfig {
                crypt_offset: 64,
                ..good
            }),
            SealError::CryptOffsetTooLarge
        );
        assert_eq!(
            bad(TxSaConfig {
                vc: Some(1),
                ..good
            }),
            SealError::CryptOffsetInsideExtension
        );
        let sa = TxSa::new(Backend::Ring, &key, TxSaConfig::falcon(Spi(5), Some(1))).unwrap();
        assert_eq!((sa.header_len(), sa.crypt_offset()), (24, 3));
    }

    #[test]
    fn database_opens_reference_vectors_and_caches() {
        let mut db = SaDatabase::new(Backend::Ring, spec_keys(), 16);
        assert_eq!(db.capacity(), 16);
        let a = hex::decode("fc0101019a345678000000e8d4a5100000001234321c9cbabbd1c70022c1cf148daf6bcadb5285c6add269d7bcf58144af149abb1712361fe743704cd3f05e81").unwrap();
        let b = hex::decode("fc01010512345678000000e8d4a510010000123415ae363de028a83c4a25adb7de00ecb58c7303340b6543b198c6eb03c727c0b2464197cbc4d0887300fde4ff").unwrap();
        assert_eq!(open(&mut db, &a).unwrap(), falcon_payload());
        assert_eq!(db.cached(), 1);
        assert_eq!(open(&mut db, &a).unwrap(), falcon_payload());
        assert_eq!(db.cached(), 1);
        assert_eq!(open(&mut db, &b).unwrap(), falcon_payload());
        assert_eq!(db.cached(), 2);

        // A forged packet does not enter the cache.
        let mut forged = a.clone();
        forged[4..8].copy_from_slice(&0x9A34_0001u32.to_be_bytes());
        assert_eq!(open(&mut db, &forged), Err(RxDrop::AuthFailed));
        assert_eq!(db.cached(), 2);

        db.set_version_enabled(Version::Aes256Gcm, false);
        assert_eq!(open(&mut db, &b), Err(RxDrop::VersionDisabled));
        db.set_version_enabled(Version::Aes256Gcm, true);
        assert!(open(&mut db, &b).is_ok());
    }

    #[test]
    fn allocate_seal_open_round_trip_both_backends() {
        for rx_backend in Backend::ALL {
            for tx_backend in Backend::ALL {
                let mut db = SaDatabase::new(rx_backend, spec_keys(), 64);
                let (spi, key) = db.allocate_spi(Version::Aes256Gcm).unwrap();
                assert_eq!(spi, Spi(1));
                let (spi2, _) = db.allocate_spi(Version::Aes128Gcm).unwrap();
                assert_eq!(spi2, Spi(2));
                let mut tx =
                    TxSa::new(tx_backend, &key, TxSaConfig::falcon(spi, Some(0xABCD))).unwrap();
                let pkt = seal(&mut tx, 42, &falcon_payload());
                let mut b = pkt.clone();
                let len = b.len();
                let o = db.open(&mut b, 0, len).unwrap();
                assert_eq!(o.payload(), &falcon_payload()[..]);
                assert_eq!((o.spi(), o.iv(), o.vc()), (spi, 42, Some(0xABCD)));
            }
        }
    }

    #[test]
    fn rotation_keeps_previous_key_and_double_rotation_evicts() {
        let mut db = SaDatabase::new(Backend::Ring, spec_keys(), 64);
        let (spi_a, key_a) = db.allocate_spi(Version::Aes128Gcm).unwrap();
        assert_eq!(spi_a.key_selector(), 0);
        let mut tx_a = TxSa::new(Backend::Ring, &key_a, TxSaConfig::falcon(spi_a, None)).unwrap();
        let pkt_a = seal(&mut tx_a, 1, &falcon_payload());
        assert!(open(&mut db, &pkt_a).is_ok());

        // Rotation 1: K1 slot gets a fresh key and becomes active.
        assert_eq!(db.rotate(MasterKey::new([0x11; 32])), 1);
        let (spi_b, key_b) = db.allocate_spi(Version::Aes128Gcm).unwrap();
        assert_eq!(spi_b, Spi(0x8000_0001));
        assert_eq!(
            key_b.as_bytes(),
            MasterKey::new([0x11; 32])
                .derive(spi_b, Version::Aes128Gcm)
                .as_bytes()
        );
        let mut tx_b = TxSa::new(Backend::Ring, &key_b, TxSaConfig::falcon(spi_b, None)).unwrap();
        let pkt_b = seal(&mut tx_b, 1, &falcon_payload());
        // Old SA (K0) still opens; new SA opens.
        assert!(open(&mut db, &pkt_a).is_ok());
        assert!(open(&mut db, &pkt_b).is_ok());
        assert_eq!(db.cached(), 2);

        // Rotation 2: K0 is replaced: the first SA is dead and purged.
        assert_eq!(db.rotate(MasterKey::new([0x22; 32])), 0);
        assert_eq!(db.cached(), 1);
        assert_eq!(open(&mut db, &pkt_a), Err(RxDrop::AuthFailed));
        assert!(open(&mut db, &pkt_b).is_ok());
        // SPI numbering restarts under the new key.
        assert_eq!(db.allocate_spi(Version::Aes128Gcm).unwrap().0, Spi(1));
        assert_eq!(db.rotations(), 2);
        assert_eq!(db.active_key(), 0);
    }

    #[test]
    fn reset_database_behaves_as_new() {
        let fresh = || SaDatabase::new(Backend::Ring, spec_keys(), 8);
        let mut db = fresh();
        let (spi_a, key_a) = db.allocate_spi(Version::Aes128Gcm).unwrap();
        let mut tx_a = TxSa::new(Backend::Ring, &key_a, TxSaConfig::falcon(spi_a, None)).unwrap();
        let pkt_a = seal(&mut tx_a, 1, &falcon_payload());
        assert!(open(&mut db, &pkt_a).is_ok());
        db.rotate(MasterKey::new([0x11; 32]));
        db.allocate_spi(Version::Aes128Gcm).unwrap();
        db.set_version_enabled(Version::Aes128Gcm, false);
        assert_eq!(db.cached(), 1);

        db.reset(spec_keys());
        assert_eq!(format!("{db:?}"), format!("{:?}", fresh()));
        assert_eq!(db.capacity(), 8);
        assert!(db.cache.contexts.iter().all(Option::is_none));
        assert!(db.cache.tags.iter().all(|t| t.last_use == 0));
        // The same SPIs and keys as a new database, from the original keys.
        let (mut new, mut reset) = (fresh(), db);
        for version in [Version::Aes128Gcm, Version::Aes256Gcm] {
            let (spi, key) = reset.allocate_spi(version).unwrap();
            let (spi_new, key_new) = new.allocate_spi(version).unwrap();
            assert_eq!((spi, key.as_bytes()), (spi_new, key_new.as_bytes()));
        }
        let k1_spi = Spi(0x8000_0001);
        assert_eq!(
            reset
                .derive(k1_spi, Version::Aes128Gcm)
                .map(|k| k.as_bytes().to_vec()),
            new.derive(k1_spi, Version::Aes128Gcm)
                .map(|k| k.as_bytes().to_vec()),
            "K1 is the original key again"
        );
        assert!(open(&mut reset, &pkt_a).is_ok());
        assert_eq!(reset.cached(), 1);
    }

    /// A database following its node's keys: one rotation behind, only
    /// the new active slot changes (SAs of the other key keep their cached
    /// contexts); two behind, both; in step, nothing.
    #[test]
    fn database_follows_the_nodes_key_slots() {
        let mut node = MasterKeySlots::new(spec_keys());
        let mut db = SaDatabase::with_key_slots(Backend::Ring, node.clone(), 16);
        let sealed_under = |slots: &MasterKeySlots, spi: Spi| {
            let key = slots.derive(spi, Version::Aes128Gcm).unwrap();
            let mut tx = TxSa::new(Backend::Ring, &key, TxSaConfig::falcon(spi, None)).unwrap();
            seal(&mut tx, 1, &falcon_payload())
        };
        let k0_packet = sealed_under(&node, Spi(7));
        assert!(open(&mut db, &k0_packet).is_ok());
        db.follow(&node);
        assert_eq!(db.cached(), 1, "in step: nothing purged");

        node.rotate(MasterKey::new([0x11; 32]));
        let k1_packet = sealed_under(&node, Spi(0x8000_0007));
        assert_eq!(open(&mut db, &k1_packet), Err(RxDrop::AuthFailed));
        db.follow(&node);
        assert_eq!((db.rotations(), db.active_key()), (1, 1));
        assert_eq!(db.cached(), 1, "K0's context kept");
        assert!(open(&mut db, &k1_packet).is_ok());
        assert!(open(&mut db, &k0_packet).is_ok());
        assert_eq!(
            db.allocate_spi(Version::Aes128Gcm).unwrap().0,
            Spi(0x8000_0001)
        );

        // Two rotations behind: both keys are new to the database.
        node.rotate(MasterKey::new([0x22; 32]));
        node.rotate(MasterKey::new([0x33; 32]));
        db.follow(&node);
        assert_eq!((db.rotations(), db.active_key(), db.cached()), (3, 1, 0));
        assert_eq!(open(&mut db, &k0_packet), Err(RxDrop::AuthFailed));
        assert!(open(&mut db, &sealed_under(&node, Spi(0x8000_0007))).is_ok());
        assert!(open(&mut db, &sealed_under(&node, Spi(7))).is_ok());
        assert_eq!(
            db.allocate_spi(Version::Aes128Gcm).unwrap().0,
            Spi(0x8000_0001)
        );
        assert_eq!(format!("{:?}", db.key_slots()), format!("{node:?}"));
    }

    #[test]
    fn missing_master_key_is_unknown_sa() {
        let keys = spec_keys();
        let mut db = SaDatabase::with_key(Backend::RustCrypto, keys.k0.clone(), 8);
        // Vector A is under K1 (SPI MSB set).
        let a = hex::decode("fc0101019a345678000000e8d4a5100000001234321c9cbabbd1c70022c1cf148daf6bcadb5285c6add269d7bcf58144af149abb1712361fe743704cd3f05e81").unwrap();
        assert_eq!(open(&mut db, &a), Err(RxDrop::UnknownSa));
        assert!(db.derive(Spi(0x9A34_5678), Version::Aes128Gcm).is_none());
        assert_eq!(
            db.context(Spi(0x8000_0000), Version::Aes128Gcm)
                .unwrap_err(),
            RxDrop::BadSpi
        );
        db.rotate(keys.k1.clone());
        assert_eq!(open(&mut db, &a).unwrap(), falcon_payload());
    }

    #[test]
    fn cache_is_bounded_and_evicts_lru() {
        let mut db = SaDatabase::new(Backend::Ring, spec_keys(), 4);
        assert_eq!(db.capacity(), 4); // one set of 4 ways
        for i in 1..=4u32 {
            db.context(Spi(i), Version::Aes128Gcm).unwrap();
        }
        assert_eq!(db.cached(), 4);
        // Touch SPI 1 so SPI 2 is the LRU entry.
        db.context(Spi(1), Version::Aes128Gcm).unwrap();
        db.context(Spi(5), Version::Aes128Gcm).unwrap();
        assert_eq!(db.cached(), 4);
        assert!(db.cache.find(Spi(1), Version::Aes128Gcm).is_some());
        assert!(db.cache.find(Spi(2), Version::Aes128Gcm).is_none());
        assert!(db.cache.find(Spi(5), Version::Aes128Gcm).is_some());
        // (SPI, version) pairs are distinct entries.
        db.context(Spi(5), Version::Aes256Gcm).unwrap();
        assert_eq!(
            db.cache
                .find(Spi(5), Version::Aes256Gcm)
                .map(|c| c.version()),
            Some(Version::Aes256Gcm)
        );
    }

    #[test]
    fn open_respects_offset_and_counts_bytes() {
        let mut db = SaDatabase::new(Backend::Ring, spec_keys(), 8);
        let (spi, key) = db.allocate_spi(Version::Aes128Gcm).unwrap();
        let mut tx = TxSa::new(Backend::Ring, &key, TxSaConfig::falcon(spi, None)).unwrap();
        // 42 bytes of Eth/IP/UDP headroom, 3 bytes of trailing junk.
        let payload = falcon_payload();
        let mut frame = vec![0xAAu8; 42 + 16 + payload.len() + ICV_LEN + 3];
        frame[58..58 + payload.len()].copy_from_slice(&payload);
        let n = tx.seal(7, &mut frame, 42, payload.len()).unwrap().len();
        assert_eq!(n, HEADER_LEN + payload.len() + ICV_LEN);
        let o = db.open(&mut frame, 42, n).unwrap();
        assert_eq!(o.counted_bytes(), payload.len());
        assert_eq!(o.payload(), &payload[..]);
        assert_eq!(&frame[..42], &[0xAA; 42][..]);
    }

    proptest! {
        #[test]
        fn database_open_arbitrary_never_panics(
            prefix in any::<[u8; 4]>(),
            spi in any::<u32>(),
            body in proptest::collection::vec(any::<u8>(), 0..96),
            offset in 0usize..8,
            len in 0usize..128,
        ) {
            let mut db = SaDatabase::new(Backend::Ring, spec_keys(), 4);
            // Header-shaped prefix: always-1 bit set, low versions, so
            // many inputs reach the key lookup and the ICV check.
            let mut pkt = vec![prefix[0], prefix[1] % 4, prefix[2], (prefix[3] & 0xC7) | 1];
            pkt.extend_from_slice(&spi.to_be_bytes());
            pkt.extend_from_slice(&body);
            let mut b = pkt.clone();
            let n = b.len();
            prop_assert!(db.open(&mut b, 0, n).is_err());
            let mut b = pkt;
            let _ = db.open(&mut b, offset, len);
            prop_assert_eq!(db.cached(), 0, "nothing unauthenticated is cached");
        }
    }
}
