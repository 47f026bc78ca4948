//! PSP security protocol (PSP Architecture Specification, Nov 2022;
//! research notes in spec/psp.md).
//!
//! Layer: below Falcon, above UDP. Owns the PSP header and trailer wire
//! formats, the SP 800-108 / AES-CMAC key derivation, the AEAD backends and
//! in-place seal/open, the SA state (TX SA, RX SA database with master-key
//! rotation, IV clock), and the receive-side SPI, PCID and replay checks of
//! OCP Falcon 0.9 §9.2.2. It knows nothing of Falcon connections: callers
//! embed the per-connection check state ([`RxSecurity`]) and pass it in. It
//! never reads a clock or an RNG (`now` and fresh master keys are inputs),
//! and does not allocate per packet.
//!
//! | module | owns |
//! |---|---|
//! | [`header`] | [`Header`] / [`HeaderRepr`] / [`Trailer`] views, [`Spi`], [`Version`] |
//! | [`kdf`] | [`MasterKey`], [`MasterKeys`], [`MasterKeySlots`] (the two slots and rotation), derived [`SaKey`] |
//! | [`aead`] | [`Aead`] trait, `ring` and RustCrypto backends, [`AeadContext`], [`Backend`] |
//! | [`seal`] | [`seal_in_place`] / [`open_in_place`], [`Sealed`] / [`Opened`] |
//! | [`sa`] | [`TxSa`], [`SaDatabase`] (RX keys, rotation, context cache), [`IvClock`] |
//! | [`tx_cache`] | [`CachedTxSa`] (a TX SA without its key schedule), [`TxContextCache`] (the schedules of the SAs sending) |
//! | [`space`] | [`SpiSpace`] (a node's SPIs cut into disjoint shards), [`SpiAllocator`] |
//! | [`check`] | [`SpiCheck`], [`check_pcid`], [`ReplayCheck`], [`RxSecurity`], [`SecurityGlobals`] |
//! | [`error`] | [`RxDrop`] reasons, [`RxCounters`], [`HeaderError`], [`SealError`] |
//! | [`reference`](mod@reference) | frame-level transport/tunnel encap and decap as the google/psp tools do |
//!
//! Receive path, in order: [`SaDatabase::open`] (framing, version, key by
//! SPI, ICV) → [`RxSecurity::accept`] (SPI check, PCID, replay; only on an
//! authenticated [`Opened`]) → Falcon. Every failure is an [`RxDrop`] to
//! count in [`RxCounters`]; a packet failing the connection checks gets no
//! ACK and no NACK.
//!
//! ```
//! use psp::{
//!     Backend, MasterKey, MasterKeys, ReplayCheck, RxCounters, RxSecurity, SaDatabase,
//!     SecurityGlobals, SpiCheck, SpiGeneration, TxSa, TxSaConfig, Version, ICV_LEN,
//! };
//!
//! // Receiver: master keys (from the caller's key store), SA database.
//! let keys = MasterKeys { k0: MasterKey::new([1; 32]), k1: MasterKey::new([2; 32]) };
//! let mut rx_db = SaDatabase::new(Backend::Ring, keys, 1024);
//! // The receiver picks the SPI and derives the key; the CM sends both to the peer.
//! let (spi, key) = rx_db.allocate_spi(Version::Aes128Gcm).unwrap();
//!
//! // Sender: a TX SA; crypt offset 1 keeps the Falcon connection id clear.
//! let mut tx = TxSa::new(Backend::Ring, &key, TxSaConfig::falcon(spi, None)).unwrap();
//! let falcon = [0x00, 0x00, 0x12, 0x34, 0xAA, 0xBB, 0xCC, 0xDD];
//! let headroom = 42; // Ethernet + IPv4 + UDP, written by the caller
//! let mut frame = vec![0u8; headroom + tx.header_len() + falcon.len() + ICV_LEN];
//! let at = headroom + tx.header_len();
//! frame[at..at + falcon.len()].copy_from_slice(&falcon);
//! let now_ps = 1_000_000_000_000;
//! let sealed = tx.seal(now_ps, &mut frame, headroom, falcon.len()).unwrap();
//! let udp_payload_len = sealed.len();
//! assert_eq!(sealed.iv(), now_ps);
//!
//! // Receiver: open in place, then the connection checks.
//! let globals = SecurityGlobals::default();
//! let mut conn = RxSecurity::new(SpiCheck::new(spi, SpiGeneration(0)), 0, ReplayCheck::new(0));
//! let mut counters = RxCounters::new();
//! match rx_db.open(&mut frame, headroom, udp_payload_len) {
//!     Ok(opened) => match conn.accept(&globals, &opened) {
//!         Ok(()) => {
//!             counters.record_packet(opened.counted_bytes());
//!             assert_eq!(opened.payload(), &falcon);
//!         }
//!         Err(reason) => counters.record(reason), // no ACK, no NACK
//!     },
//!     Err(reason) => counters.record(reason),
//! }
//! assert_eq!((counters.packets, counters.total_drops()), (1, 0));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod aead;
pub mod check;
pub mod error;
pub mod header;
pub mod kdf;
pub mod reference;
pub mod sa;
pub mod seal;
pub mod space;
pub mod tx_cache;

pub use aead::{Aead, AeadContext, AeadError, Backend, UnknownBackend, NONCE_LEN, TAG_LEN};
pub use check::{
    check_pcid, ReplayCheck, RxSecurity, SecurityGlobals, SpiCheck, SpiGeneration,
    DEFAULT_REPLAY_MARGIN_PS,
};
pub use error::{HeaderError, RxCounters, RxDrop, SealError, SpiExhausted};
pub use header::{
    Header, HeaderRepr, Icv, Spi, Trailer, Version, CRYPT_OFFSET_MAX, HEADER_LEN, ICV_LEN,
    NEXT_HEADER_FALCON, UDP_PORT, VC_LEN,
};
pub use kdf::{KeyLengthError, MasterKey, MasterKeySlots, MasterKeys, SaKey, MASTER_KEY_LEN};
pub use sa::{IvClock, SaDatabase, TxSa, TxSaConfig};
pub use seal::{open_in_place, seal_in_place, Opened, Sealed};
pub use space::{SpiAllocator, SpiSpace};
pub use tx_cache::{BoundTxSa, CachedTxSa, TxContextCache};

#[cfg(test)]
pub(crate) mod testutil {
    use crate::kdf::{MasterKey, MasterKeys};

    /// The master keys of PSP spec "Examples of key derivation" (and every
    /// REF `cfg/*.cfg`), spec/psp.md §6.1.
    pub(crate) fn spec_keys() -> MasterKeys {
        let k = |h: &str| MasterKey::from_slice(&hex::decode(h).unwrap()).unwrap();
        MasterKeys {
            k0: k("34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"),
            k1: k("563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739"),
        }
    }
}
