//! Pacing: when each connection's packets may leave, and the wheel that
//! holds the connections waiting for that time.
//!
//! Layer: engine infrastructure beside [`crate::timer`], used by the
//! delivery sublayer (the release times) and the engine (the wheel). Owns
//! the Carousel of spec/rue.md §5 (Saeed et al., "Carousel: Scalable
//! Traffic Shaping at End Hosts"; isekai `traffic_shaper_model`) in its two
//! parts:
//!
//! | file | what it holds |
//! |---|---|
//! | `timestamper.rs` | [`Timestamper`]: one connection's release time, from the RUE's inter-packet gap when fcwnd < 1 (OCP Falcon 0.9 §9.1.2, §10.3.5; spec/rue.md §1.6, §2.9) and from the operator's rate cap |
//! | `carousel.rs` | [`Carousel`]: a single-level timing wheel of configurable granularity and slot count, O(1) insertion, expiry through occupancy bitmaps, FIFO within a slot |
//!
//! The engine keeps at most one wheel entry per paced connection (its next
//! release), not one per packet: packets are built when they leave, so the
//! wheel's occupancy is bounded by the connections (spec/rue.md §5.1, "wheel
//! occupancy ≤ number of paced connections"), and the deferred completions
//! of Carousel come for free (a packet is charged to its connection's rate
//! when it is built). Connections that are not paced never enter the wheel
//! (§2.9: "otherwise bypass the wheel").
//!
//! Nothing here reads a clock, allocates per packet or panics on any time.

mod carousel;
mod timestamper;

pub use carousel::Carousel;
pub use timestamper::{Timestamper, MAX_RATE_CAP};

#[cfg(test)]
mod tests;
