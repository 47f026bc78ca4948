//! DPDK 22.11 backend of the Falcon dataplane.
//!
//! Layer: the only crate with FFI and `unsafe` (STYLE.md): the bindgen'd
//! DPDK API (`ffi`, generated at build time against the installed headers,
//! see `build.rs`) and the safe wrappers the rest of the project uses: the
//! EAL ([`eal`]), mempools and owning mbufs ([`mempool`], [`mbuf`]),
//! ethdev ports ([`ethdev`]) with their offloads ([`offload`]) and
//! extended counters, the engine's `Port` on them ([`port`]), rings of
//! mbufs between lcores ([`ring`]), the
//! lcore loop's TSC clock ([`clock`]) and work launched on EAL lcores
//! ([`lcore`]). Every `unsafe` block states the invariant it
//! relies on.
//!
//! Everything is behind the `dpdk` cargo feature (DPDK's headers and
//! libraries, and libclang for bindgen: `scripts/setup.sh`); without it the
//! crate is empty.

#![cfg_attr(not(feature = "dpdk"), forbid(unsafe_code))]

#[cfg(feature = "dpdk")]
pub mod clock;
#[cfg(feature = "dpdk")]
pub mod eal;
#[cfg(feature = "dpdk")]
mod error;
#[cfg(feature = "dpdk")]
pub mod ethdev;
#[cfg(feature = "dpdk")]
pub mod ffi;
#[cfg(feature = "dpdk")]
pub mod forward;
#[cfg(feature = "dpdk")]
pub mod lcore;
#[cfg(feature = "dpdk")]
pub mod mbuf;
#[cfg(feature = "dpdk")]
pub mod mempool;
#[cfg(feature = "dpdk")]
pub mod offload;
#[cfg(feature = "dpdk")]
pub mod port;
#[cfg(feature = "dpdk")]
pub mod ring;
#[cfg(feature = "dpdk")]
mod xstats;

#[cfg(feature = "dpdk")]
pub use error::DpdkError;
