//! Transmit SAs without their key schedule: [`CachedTxSa`] (what one SA
//! owns) and [`TxContextCache`] (the expanded AES-GCM contexts of the SAs
//! in use, shared by every SA of one sender).
//!
//! Owns the compact per-SA transmit state (header template, SA key, IV
//! clock) and a bounded, fully associative cache of expanded contexts with
//! CLOCK replacement. A [`TxSa`](crate::TxSa) carries its ~560-byte context
//! inline, which is most of a connection's memory at a million connections;
//! a [`CachedTxSa`] keeps the 16- or 32-byte key and expands it on a cache
//! miss. It never reads a clock and never allocates per packet on a hit; a
//! miss costs one key expansion (with the RustCrypto backend also one
//! allocation, see [`crate::aead`]).
//!
//! One cache serves the SAs of one core, each SA sealed through that one
//! cache: an SA remembers which entry holds its context and the id the
//! cache gave it, so a hit is one bounds check and one comparison, with no
//! hashing. The usual case (fewer SAs sending than the cache has entries)
//! never misses after each SA's first packet.

use crate::aead::{AeadContext, Backend};
use crate::error::SealError;
use crate::header::{HeaderRepr, Spi, Version, ICV_LEN};
use crate::kdf::SaKey;
use crate::sa::{IvClock, TxSaConfig};
use crate::seal::{check_tx_header, seal_in_place, Sealed};

/// No cache entry: the index of an SA not yet (or no longer) cached.
const NO_ENTRY: u32 = u32::MAX;

/// A transmit SA whose expanded key lives in a [`TxContextCache`]: header
/// template, SA key, IV clock, and where its context was last cached.
///
/// Seals exactly as a [`TxSa`](crate::TxSa) built from the same key and
/// configuration (same IVs, same bytes). The key is zeroized on drop
/// ([`SaKey`]).
pub struct CachedTxSa {
    template: HeaderRepr,
    clock: IvClock,
    /// The cache's id of this SA (0: none yet) and the entry its context
    /// was put in. The entry holds it while its owner is still `id`.
    id: u64,
    entry: u32,
    key: SaKey,
}

impl CachedTxSa {
    /// Build the SA; its key is expanded at its first seal. Rejects what
    /// [`TxSa::new`](crate::TxSa::new) rejects: a zero SPI, a crypt offset
    /// above 63, or one that would encrypt the VC.
    pub fn new(key: &SaKey, config: TxSaConfig) -> Result<CachedTxSa, SealError> {
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
        Ok(CachedTxSa {
            template,
            clock: IvClock::new(),
            id: 0,
            entry: NO_ENTRY,
            key: key.clone(),
        })
    }

    /// This SA continuing `clock` (the IV clock of the SA it replaces on
    /// the same connection): its first IV is above every IV the other
    /// issued, so a receiver's replay state carries over (key rotation).
    pub fn with_iv_clock(mut self, clock: IvClock) -> CachedTxSa {
        self.clock = clock;
        self
    }

    /// This SA with its contexts from `contexts`, to seal with.
    #[inline]
    pub fn bind<'a>(&'a mut self, contexts: &'a mut TxContextCache) -> BoundTxSa<'a> {
        BoundTxSa { sa: self, contexts }
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
    #[inline]
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

    /// The IV clock (e.g. for the last IV sent).
    pub fn iv_clock(&self) -> &IvClock {
        &self.clock
    }
}

impl core::fmt::Debug for CachedTxSa {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CachedTxSa")
            .field("template", &self.template)
            .field("clock", &self.clock)
            .field("id", &self.id)
            .field("key", &self.key)
            .finish()
    }
}

/// A [`CachedTxSa`] and the cache it seals through.
pub struct BoundTxSa<'a> {
    sa: &'a mut CachedTxSa,
    contexts: &'a mut TxContextCache,
}

impl<'a> BoundTxSa<'a> {
    /// Bytes of header room before the payload: 16, or 24 with a VC.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.sa.header_len()
    }

    /// Seal in place, as [`TxSa::seal`](crate::TxSa::seal): `buf[offset..]`
    /// holds [`header_len`](Self::header_len) bytes of room for the PSP
    /// header, then `payload_len` payload bytes, then [`ICV_LEN`] bytes of
    /// tailroom. The IV is the next value of the SA's clock at `now_ps`.
    #[inline]
    pub fn seal<'b>(
        self,
        now_ps: u64,
        buf: &'b mut [u8],
        offset: usize,
        payload_len: usize,
    ) -> Result<Sealed<'b>, SealError> {
        let iv = self
            .sa
            .clock
            .next_iv(now_ps)
            .ok_or(SealError::IvExhausted)?;
        let header = HeaderRepr {
            iv,
            ..self.sa.template
        };
        let ctx = self.contexts.context(self.sa).ok_or(SealError::Aead)?;
        seal_in_place(ctx, &header, buf, offset, payload_len)
    }
}

/// The expanded transmit contexts of the SAs sending from one core: at
/// most `capacity` of them, expanded on a miss, evicted by CLOCK (second
/// chance), the table allocated at the first miss and never grown past
/// `capacity`.
///
/// Memory: one entry is ~580 bytes with `ring` (the key schedule inline),
/// ~40 plus a boxed 736- or 992-byte schedule with RustCrypto. An evicted
/// or forgotten context is dropped at once (RustCrypto's key schedules
/// zeroize on drop; `ring`'s do not, see [`crate::aead`]).
pub struct TxContextCache {
    backend: Backend,
    capacity: usize,
    /// Who owns each entry, apart from the contexts: a seal that misses
    /// and the CLOCK hand read these 16 bytes, not a line of a cold
    /// ~600-byte context (at a million SAs nearly every seal misses).
    tags: Vec<TxTag>,
    /// `contexts[i]` is `tags[i].owner`'s context.
    contexts: Vec<Option<AeadContext>>,
    /// The CLOCK hand: the next entry looked at for a victim.
    hand: usize,
    /// The id the next SA cached gets; never reused, so a replaced or
    /// closed SA's entry cannot be taken for another's.
    next_id: u64,
    misses: u64,
}

#[derive(Clone, Copy)]
struct TxTag {
    /// The id of the SA whose context the entry holds; 0 for none.
    owner: u64,
    /// Sealed with since the hand last passed (CLOCK's reference bit).
    referenced: bool,
}

impl TxContextCache {
    /// An empty cache of at most `capacity` contexts (at least 1) for
    /// `backend`. Allocates nothing until the first miss.
    pub fn new(backend: Backend, capacity: usize) -> TxContextCache {
        TxContextCache {
            backend,
            capacity: capacity.clamp(1, NO_ENTRY as usize),
            tags: Vec::new(),
            contexts: Vec::new(),
            hand: 0,
            next_id: 1,
            misses: 0,
        }
    }

    /// The backend contexts are expanded for.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Maximum cached contexts.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Contexts cached now.
    pub fn cached(&self) -> usize {
        self.contexts.iter().filter(|c| c.is_some()).count()
    }

    /// Seals that found no context and expanded the key.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Drops `sa`'s context, if cached (its SA is replaced or closed).
    pub fn forget(&mut self, sa: &CachedTxSa) {
        let index = sa.entry as usize;
        if self.tags.get(index).is_some_and(|t| t.owner == sa.id) {
            self.tags[index] = TxTag::EMPTY;
            self.contexts[index] = None;
        }
    }

    /// Drops every context; the tables' allocations and the id sequence
    /// are kept.
    pub fn clear(&mut self) {
        self.tags.iter_mut().for_each(|t| *t = TxTag::EMPTY);
        self.contexts.iter_mut().for_each(|c| *c = None);
        self.hand = 0;
    }

    /// `sa`'s context: its entry if that still holds it (the hit path: a
    /// bounds check and a comparison), else expanded into a new one.
    /// Always `Some`: a hit checked the owner (ids start at 1 and only a
    /// filled entry has a non-zero owner), a miss just filled the entry.
    #[inline]
    fn context(&mut self, sa: &mut CachedTxSa) -> Option<&AeadContext> {
        let index = sa.entry as usize;
        let index = match self.tags.get_mut(index) {
            Some(tag) if tag.owner == sa.id => {
                // Referenced by a hit only: a context used once since it
                // was expanded is the first victim, so SAs sending one
                // packet each evict each other and not the busy ones.
                tag.referenced = true;
                index
            }
            _ => self.fill(sa),
        };
        self.contexts.get(index)?.as_ref()
    }

    /// A miss: expand `sa`'s key into a free entry, a new one while the
    /// table is below capacity, else CLOCK's victim. Returns its index.
    #[cold]
    #[inline(never)]
    fn fill(&mut self, sa: &mut CachedTxSa) -> usize {
        self.misses += 1;
        if sa.id == 0 {
            sa.id = self.next_id;
            self.next_id += 1;
        }
        let tag = TxTag {
            owner: sa.id,
            referenced: false,
        };
        let ctx = Some(AeadContext::new(self.backend, &sa.key));
        let index = if self.tags.len() < self.capacity {
            if self.tags.is_empty() {
                self.tags.reserve_exact(self.capacity);
                self.contexts.reserve_exact(self.capacity);
            }
            self.tags.push(tag);
            self.contexts.push(ctx);
            self.tags.len() - 1
        } else {
            let victim = self.victim();
            self.tags[victim] = tag;
            self.contexts[victim] = ctx;
            victim
        };
        // Below `capacity`, at most u32::MAX − 1.
        sa.entry = index as u32;
        index
    }

    /// CLOCK: the first entry from the hand that is empty or was not
    /// sealed with since the hand last passed it, clearing reference bits
    /// on the way. Ends within two turns (the first clears every bit).
    /// Only called with the table full (at least one entry).
    fn victim(&mut self) -> usize {
        let n = self.tags.len();
        loop {
            let index = self.hand;
            self.hand = (self.hand + 1) % n;
            let tag = &mut self.tags[index];
            if tag.owner == 0 || !tag.referenced {
                return index;
            }
            tag.referenced = false;
        }
    }
}

impl TxTag {
    const EMPTY: TxTag = TxTag {
        owner: 0,
        referenced: false,
    };
}

impl core::fmt::Debug for TxContextCache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TxContextCache")
            .field("backend", &self.backend)
            .field("capacity", &self.capacity)
            .field("cached", &self.cached())
            .field("misses", &self.misses)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::aead::Aead;
    use crate::sa::{SaDatabase, TxSa};
    use crate::testutil::spec_keys;

    fn falcon_payload() -> Vec<u8> {
        let mut p = vec![0x00, 0x00, 0x12, 0x34];
        p.extend(0x10u8..=0x2b);
        p
    }

    fn frame(header_len: usize, payload: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; header_len + payload.len() + ICV_LEN];
        buf[header_len..header_len + payload.len()].copy_from_slice(payload);
        buf
    }

    fn seal_cached(
        sa: &mut CachedTxSa,
        cache: &mut TxContextCache,
        now: u64,
        payload: &[u8],
    ) -> Vec<u8> {
        let mut buf = frame(sa.header_len(), payload);
        let n = payload.len();
        sa.bind(cache)
            .seal(now, &mut buf, 0, n)
            .unwrap()
            .as_bytes()
            .to_vec()
    }

    fn seal_inline(sa: &mut TxSa, now: u64, payload: &[u8]) -> Vec<u8> {
        let mut buf = frame(sa.header_len(), payload);
        let n = payload.len();
        sa.seal(now, &mut buf, 0, n).unwrap().as_bytes().to_vec()
    }

    fn key(version: Version, byte: u8) -> SaKey {
        SaKey::new(version, &vec![byte; version.key_len()]).unwrap()
    }

    #[test]
    fn reproduces_vector_a_with_both_backends() {
        // spec/psp.md §6.4 A: SPI 0x9A345678 (K1), v0, IV 10^12 ps.
        let spi = Spi(0x9A34_5678);
        let key = spec_keys().derive(spi, Version::Aes128Gcm);
        for backend in Backend::ALL {
            let mut cache = TxContextCache::new(backend, 4);
            let mut sa = CachedTxSa::new(&key, TxSaConfig::falcon(spi, None)).unwrap();
            assert_eq!((sa.header_len(), sa.overhead()), (16, 32));
            let pkt = seal_cached(&mut sa, &mut cache, 1_000_000_000_000, &falcon_payload());
            assert_eq!(
                hex::encode(&pkt),
                "fc0101019a345678000000e8d4a5100000001234321c9cbabbd1c70022c1cf148daf6bcadb5285c6add269d7bcf58144af149abb1712361fe743704cd3f05e81",
                "{backend}"
            );
            assert_eq!(cache.backend(), backend);
        }
    }

    /// The cached SA and the inline one, both backends, both versions,
    /// with and without a VC: the same packets, IV for IV.
    #[test]
    fn seals_as_tx_sa_does() {
        for backend in Backend::ALL {
            for version in [Version::Aes128Gcm, Version::Aes256Gcm] {
                for vc in [None, Some(0xABCD)] {
                    let key = key(version, 7);
                    let config = TxSaConfig::falcon(Spi(9), vc);
                    let mut inline = TxSa::new(backend, &key, config).unwrap();
                    let mut cached = CachedTxSa::new(&key, config).unwrap();
                    let mut cache = TxContextCache::new(backend, 1);
                    for now in [5, 5, 3, 100] {
                        assert_eq!(
                            seal_cached(&mut cached, &mut cache, now, &falcon_payload()),
                            seal_inline(&mut inline, now, &falcon_payload()),
                        );
                    }
                    assert_eq!(cached.iv_clock(), inline.iv_clock());
                    assert_eq!(cached.config(), inline.config());
                    assert_eq!(cache.misses(), 1, "expanded once");
                }
            }
        }
    }

    #[test]
    fn rejects_what_tx_sa_rejects() {
        let key = key(Version::Aes128Gcm, 1);
        let good = TxSaConfig::falcon(Spi(5), None);
        let bad = |c: TxSaConfig| CachedTxSa::new(&key, c).unwrap_err();
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
    }

    /// As many SAs as entries, sealing round robin: one miss each, then
    /// none.
    #[test]
    fn no_miss_after_warm_up_while_the_sas_fit() {
        let mut cache = TxContextCache::new(Backend::Ring, 64);
        let mut sas: Vec<CachedTxSa> = (1..=64u32)
            .map(|i| {
                CachedTxSa::new(
                    &key(Version::Aes128Gcm, i as u8),
                    TxSaConfig::falcon(Spi(i), None),
                )
                .unwrap()
            })
            .collect();
        for round in 0..10u64 {
            for sa in &mut sas {
                seal_cached(sa, &mut cache, round, &falcon_payload());
            }
        }
        assert_eq!((cache.misses(), cache.cached()), (64, 64));
    }

    /// More SAs than entries: bounded, and CLOCK keeps the SA sealing on
    /// every turn while the others take turns in the other entries.
    #[test]
    fn bounded_and_clock_keeps_the_busy_sa() {
        let mut cache = TxContextCache::new(Backend::Ring, 4);
        let new_sa = |i: u32| {
            CachedTxSa::new(
                &key(Version::Aes128Gcm, i as u8),
                TxSaConfig::falcon(Spi(i), None),
            )
            .unwrap()
        };
        let mut busy = new_sa(100);
        let mut others: Vec<CachedTxSa> = (1..=16).map(new_sa).collect();
        seal_cached(&mut busy, &mut cache, 0, &falcon_payload());
        for now in 1..=64u64 {
            let sa = &mut others[now as usize % 16];
            seal_cached(sa, &mut cache, now, &falcon_payload());
            seal_cached(&mut busy, &mut cache, now, &falcon_payload());
            assert!(cache.cached() <= 4);
        }
        assert_eq!(
            cache.misses(),
            1 + 64,
            "busy expanded once, others every time"
        );
        assert_eq!(cache.capacity(), 4);
    }

    /// A replaced SA's context is dropped, and the SA replacing it seals
    /// under its own key (a rekey never seals with the old context).
    #[test]
    fn forget_and_rekey() {
        let mut db = SaDatabase::new(Backend::Ring, spec_keys(), 8);
        let (spi_a, key_a) = db.allocate_spi(Version::Aes128Gcm).unwrap();
        let (spi_b, key_b) = db.allocate_spi(Version::Aes256Gcm).unwrap();
        let mut cache = TxContextCache::new(Backend::RustCrypto, 8);
        let mut old = CachedTxSa::new(&key_a, TxSaConfig::falcon(spi_a, Some(3))).unwrap();
        seal_cached(&mut old, &mut cache, 10, &falcon_payload());
        assert_eq!(cache.cached(), 1);

        let config = TxSaConfig {
            spi: spi_b,
            ..old.config()
        };
        let mut new = CachedTxSa::new(&key_b, config)
            .unwrap()
            .with_iv_clock(*old.iv_clock());
        cache.forget(&old);
        assert_eq!(cache.cached(), 0);
        let pkt = seal_cached(&mut new, &mut cache, 0, &falcon_payload());
        let mut b = pkt.clone();
        let n = b.len();
        let opened = db.open(&mut b, 0, n).unwrap();
        assert_eq!(
            (opened.spi(), opened.iv(), opened.vc()),
            (spi_b, 11, Some(3))
        );
        assert_eq!(new.version(), Version::Aes256Gcm);

        // Forgetting an SA whose entry another took since is a no-op.
        cache.forget(&old);
        assert_eq!(cache.cached(), 1);
        cache.clear();
        assert_eq!(cache.cached(), 0);
        seal_cached(&mut new, &mut cache, 0, &falcon_payload());
        assert_eq!(cache.misses(), 3);
    }

    #[test]
    fn cached_contexts_are_the_backends() {
        let mut cache = TxContextCache::new(Backend::RustCrypto, 2);
        let k = key(Version::Aes256Gcm, 2);
        let mut sa = CachedTxSa::new(&k, TxSaConfig::falcon(Spi(1), None)).unwrap();
        let ctx = cache.context(&mut sa).unwrap();
        assert_eq!(
            (ctx.backend(), ctx.version()),
            (Backend::RustCrypto, Version::Aes256Gcm)
        );
        assert!(format!("{sa:?}").contains("<redacted>"));
    }

    proptest! {
        /// Any order of seals over more SAs than entries, with either
        /// backend: every packet is the one an inline `TxSa` seals (the
        /// oracle), and the cache stays within its capacity.
        #[test]
        fn any_seal_order_matches_inline_sas(
            capacity in 1usize..5,
            rustcrypto in any::<bool>(),
            seals in proptest::collection::vec((0usize..6, 0u64..1_000), 1..60),
        ) {
            let backend = if rustcrypto { Backend::RustCrypto } else { Backend::Ring };
            let mut cache = TxContextCache::new(backend, capacity);
            let mut pairs: Vec<(TxSa, CachedTxSa)> = (0..6u32)
                .map(|i| {
                    let version = if i % 2 == 0 { Version::Aes128Gcm } else { Version::Aes256Gcm };
                    let k = key(version, i as u8);
                    let config = TxSaConfig::falcon(Spi(i + 1), (i % 3 == 0).then_some(u64::from(i)));
                    (TxSa::new(backend, &k, config).unwrap(), CachedTxSa::new(&k, config).unwrap())
                })
                .collect();
            for (i, now) in seals {
                let (inline, cached) = &mut pairs[i];
                let payload = [i as u8; 40];
                prop_assert_eq!(
                    seal_cached(cached, &mut cache, now, &payload),
                    seal_inline(inline, now, &payload)
                );
                prop_assert!(cache.cached() <= capacity);
            }
        }
    }
}
