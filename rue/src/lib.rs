//! Falcon rate update engine (OCP Falcon 0.9 §10): a software RUE.
//!
//! Layer: congestion control behind the packet delivery sublayer. Owns the
//! 64-byte CC event and result formats ([`mod@format`]), the algorithm
//! interface and its enum dispatch ([`algorithm`]), the algorithms
//! ([`swift`] with [`plb`]/PRR, [`dcqcn`], [`bypass`]), the shared building
//! blocks ([`blocks`]), the datapath's admission policy ([`admission`]) and
//! the RUE core over lossless SPSC queues with its per-connection state
//! table ([`engine`]).
//!
//! It must never read a clock, an OS random source, a socket or the
//! environment: time arrives in events (`t4` is "now"), randomness is a
//! seeded generator its owner holds. It knows nothing of packets or
//! connections beyond the event fields. No `unsafe`.
//!
//! Quick start (inline in a datapath loop): see [`engine`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admission;
pub mod algorithm;
pub mod blocks;
pub mod bypass;
pub mod config;
pub mod dcqcn;
pub mod engine;
pub mod format;
pub mod plb;
pub mod swift;

pub use admission::{Admission, AdmissionConfig, Verdict};
pub use algorithm::{
    Algorithm, AnyAlgorithm, ConnectionState, ProfileConfig, Profiles, MAX_PROFILES,
};
pub use bypass::{Bypass, BypassConfig};
pub use config::ConfigError;
pub use dcqcn::{Dcqcn, DcqcnConfig, DcqcnStage, DcqcnState};
pub use engine::{
    Idle, Rue, RueChannel, RueConfig, RueCounters, RueThread, StateTable, BYTES_PER_CONNECTION,
    HOT_BYTES_PER_CONNECTION, PLB_BYTES_PER_CONNECTION,
};
pub use format::{
    nack_code, saturate_acked, CcEvent, CcResult, DelaySelect, EventType, Fcwnd, FormatError,
    NcwndDirection, RetransmitReason, Time24,
};
pub use plb::{FlowLabelGenerator, PlbConfig, PlbState, PrrConfig};
pub use swift::{Swift, SwiftConfig, SwiftState};

/// Bit position of the profile index inside `base_delay_target`.
pub const PROFILE_INDEX_SHIFT: u32 = 21;

/// The profile index carried in bits `[23:21]` of `base_delay_target`
/// (spec/rue.md §2.10; isekai `GetProfileIndex`, which also reserves bits
/// `[20:0]` for a state-table index; we index state by connection id).
pub const fn profile_index(base_delay_target: u32) -> usize {
    ((base_delay_target >> PROFILE_INDEX_SHIFT) & 0x7) as usize
}
