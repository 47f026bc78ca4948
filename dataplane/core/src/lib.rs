//! Falcon transport core (OCP Falcon 0.9).
//!
//! Layer: everything between the port and the upper-layer protocols, sans-IO.
//! Owns the wire formats (Falcon, Ethernet/IPv4/IPv6/UDP views), sequence
//! number types, and (in later modules) the packet delivery and transaction
//! sublayers and the per-core engine. It never reads a clock, an RNG, a socket
//! or the environment: time and randomness are passed in.
//!
//! # Modules
//!
//! | module | what it owns |
//! |---|---|
//! | [`wire`] | zero-copy views and `Repr` value types for Ethernet II (+802.1Q), IPv4, IPv6, UDP and every Falcon 0.9 header; the frame helper (Eth → IP → UDP) and the Falcon dispatch ([`wire::FalconRepr`]) |
//! | [`seq`] | [`Psn`](seq::Psn) and [`Rsn`](seq::Rsn): 32-bit sequence numbers with modulo-2^32 comparison |
//! | [`ids`] | [`ConnectionId`](ids::ConnectionId) and [`DestinationFunction`](ids::DestinationFunction) (24-bit, validated) |
//! | [`error`] | [`ParseError`](error::ParseError) (what is wrong with a packet) and [`RangeError`](error::RangeError) (a value too wide for its field) |
//! | [`drop`](mod@drop) | [`DropReason`](drop::DropReason), the one drop-reason enum of the dataplane, and [`DropCounters`](drop::DropCounters) |
//! | [`time`] | [`Timestamp`](time::Timestamp) (ns, injected) and the Falcon time units |
//! | [`random`] | [`Random`](random::Random) and the seeded [`SplitMix64`](random::SplitMix64) |
//! | [`delivery`] | the packet delivery sublayer (OCP Falcon 0.9 §9): [`DeliveryConnection`](delivery::DeliveryConnection) |
//!
//! Nothing in this crate panics on packet input: a malformed packet is a
//! [`ParseError`](error::ParseError), which the pipeline maps to a counted
//! [`DropReason`](drop::DropReason).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[macro_use]
mod macros;

pub mod delivery;
pub mod drop;
pub mod error;
pub mod ids;
pub mod random;
pub mod seq;
pub mod time;
pub mod wire;
