//! The kernel UDP port: Falcon between processes and hosts with no DPDK
//! (issue #25, item 5).
//!
//! Layer: application, an IO backend of the engine's [`Port`] trait. Owns
//! the port over a kernel UDP socket ([`UdpPort`]) and the outer headers it
//! strips and rebuilds ([`headers`]). It never parses Falcon or PSP: the
//! engine does, on frames that look to it as if they came off a NIC.
//!
//! [`Port`]: falcon_core::api::Port

pub mod headers;
mod offload;
mod port;

pub use port::{UdpPeer, UdpPort, UdpPortConfig, UdpPortStats, BATCH};
