//! Falcon transport core (OCP Falcon 0.9).
//!
//! Layer: everything between the port and the upper-layer protocols, sans-IO.
//! Owns the wire formats (Falcon, Ethernet/IPv4/IPv6/UDP views), sequence
//! number types, the packet delivery and transaction sublayers, resources,
//! the connection scheduler, the timing wheel, the per-core engine and the
//! port abstraction; with the `testing` feature, the in-memory loopback and
//! a virtual-time cluster of engines to test on. It never reads a clock, an
//! RNG, a socket or the environment: time and randomness are passed in.
//! A ULP, the DPDK runner or the simulator uses [`api`], the one module
//! that gathers what a user of the transport needs; the sublayers
//! (`delivery`, `transaction`, `resources`, `scheduler`, `timer`) are the
//! engine's, crate-private unless the `testing` feature makes them public
//! for tests and sublayer benchmarks. Start at [`engine`]: its module doc runs two engines over the
//! loopback.
//!
//! # Modules
//!
//! | module | what it owns |
//! |---|---|
//! | [`api`] | the ULP API: engine, node, connections, frames, transactions, events, credits, stats (re-exports) |
//! | [`wire`] | zero-copy views and `Repr` value types for Ethernet II (+802.1Q), IPv4, IPv6, UDP and every Falcon 0.9 header; the frame helper (Eth → IP → UDP), the Falcon dispatch ([`wire::FalconRepr`]) and [`ParseError`](wire::ParseError) (what is wrong with a packet) |
//! | [`seq`] | [`Psn`](seq::Psn) and [`Rsn`](seq::Rsn): 32-bit sequence numbers with modulo-2^32 comparison |
//! | [`ids`] | [`ConnectionId`](ids::ConnectionId) and [`DestinationFunction`](ids::DestinationFunction) (24-bit, validated) |
//! | [`error`] | [`RangeError`](error::RangeError) (a value too wide for its field), for [`ids`] and [`wire`] |
//! | [`drop`](mod@drop) | [`DropReason`](drop::DropReason), the one drop-reason enum of the dataplane (with the mapping from [`wire`]'s errors), and [`DropCounters`](drop::DropCounters) |
//! | [`time`] | [`Timestamp`](time::Timestamp) (ns, injected) and the Falcon time units |
//! | [`random`] | [`Random`](random::Random) and the seeded [`SplitMix64`](random::SplitMix64) |
//! | `delivery` | the packet delivery sublayer (OCP Falcon 0.9 §9): `DeliveryConnection` |
//! | [`port`] | the [`Port`](port::Port) trait, the frame buffer trait and the heap-backed [`FrameBuf`](port::FrameBuf) |
//! | `timer` | the engine's `TimingWheel` (512 ns slots) |
//! | `pacing` | the Carousel of spec/rue.md §5: per-connection release times (the RUE's inter-packet gap, the operator's rate cap) and the wheel of paced connections |
//! | [`engine`] | the per-core [`Engine`](engine::Engine): connections, timers, PSP boundary, inline RUE, ULP interface |
//! | [`node`] | the [`Node`](node::Node) an engine is a shard of: master keys, SPI generation and rotation, per-shard SPI and CID ranges, [`Steering`](node::Steering) of received frames |
//! | `transaction` | the transaction sublayer (OCP Falcon 0.9 §8): initiator and target state machines, ordering, the ULP interface |
//! | `resources` | the four resource pools, their regions and credits, HoL zones, dynamic thresholds (§8.2) |
//! | `scheduler` | the connection scheduler's round-robin ring (§8.3) |
//! | `testing` | with the `testing` feature: the in-process loopback and fault injector, the mbuf-shaped test buffer, and the virtual-time cluster of N engines with a scripted ULP and exactly-once checkers |
//!
//! Nothing in this crate panics on packet input: a malformed packet is a
//! [`ParseError`](wire::ParseError), which the pipeline maps to a counted
//! [`DropReason`](drop::DropReason).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[macro_use]
mod macros;

pub mod api;
// The sublayers are the engine's: a ULP, the runner and the simulator use
// `api`. With the `testing` feature they are public too, for the tests,
// benchmarks and fuzz targets that drive one sublayer alone.
#[cfg(feature = "testing")]
pub mod delivery;
#[cfg(not(feature = "testing"))]
pub(crate) mod delivery;
pub mod drop;
pub mod engine;
pub mod error;
pub mod ids;
pub mod lcore;
pub mod node;
#[cfg(feature = "testing")]
pub mod pacing;
#[cfg(not(feature = "testing"))]
pub(crate) mod pacing;
pub mod port;
pub mod random;
#[cfg(feature = "testing")]
pub mod resources;
#[cfg(not(feature = "testing"))]
pub(crate) mod resources;
#[cfg(feature = "testing")]
pub mod scheduler;
#[cfg(not(feature = "testing"))]
pub(crate) mod scheduler;
pub mod seq;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;
#[cfg(feature = "testing")]
pub mod timer;
#[cfg(not(feature = "testing"))]
pub(crate) mod timer;
#[cfg(feature = "testing")]
pub mod transaction;
#[cfg(not(feature = "testing"))]
pub(crate) mod transaction;
pub mod wire;
