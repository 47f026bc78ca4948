//! The Falcon packet delivery sublayer (OCP Falcon 0.9 §9).
//!
//! Layer: between the PSP stage (below) and the transaction sublayer
//! (above), per connection. Owns reliable delivery — both sliding windows
//! (request: Pull Requests; data: Push Data, Pull Data, Resync) at the
//! transmitter and the receiver, ACK/EACK/NACK generation and processing,
//! timeout and early retransmission, resync — and congestion gating with
//! the datapath side of the RUE interface. Sans-IO in the quinn-proto
//! style: it never reads a clock or an RNG, never does IO, never panics on
//! packet input, and does not allocate per packet.
//!
//! # Driving a connection
//!
//! [`DeliveryConnection`] is one connection's state. The engine (issue #4:
//! connection table, timing wheel, transaction sublayer) drives it:
//!
//! ```text
//! rx:  PSP open ─► FalconRepr::parse ─► conn.handle_packet(now, &repr, RxMeta { tx_time: IV>>17, ecn_ce, ttl })
//!        RxOutcome::Deliver(arrival) ─► transaction layer ─► conn.admit(now, arrival) | conn.refuse(now, arrival, why)
//!        RxOutcome::Dropped(reason)  ─► DropCounters::record(reason)
//!      Push Data, later: conn.handle_ulp_ack(now, psn) | conn.handle_ulp_nack(now, psn, UlpNack::…)
//! tx:  conn.submit(OutgoingPacket { kind, rsn, request_length, payload_len, handle })
//!      while let Some(p) = conn.poll_transmit(now) { emit p.repr, copy payload p.handle, PSP seal (IV = now) }
//!      while let Some(a) = conn.poll_ack(now, buffer_level.level()) { emit a (BACK/EACK/NACK) }
//! rue: if let Some(e) = conn.poll_rue_event(now, queue_len, queue_capacity) { push e } … conn.handle_rue_result(now, &result)
//! up:  while let Some(ev) = conn.poll_event() { Acked / Nacked / ReceiverNotReady / RetransmitExhausted / Resynced / Error … }
//! timers: wheel.insert(conn.poll_timeout()); on expiry conn.handle_timeout(now), then the polls above
//! ```
//!
//! # Modules
//!
//! | module | concern | spec |
//! |---|---|---|
//! | [`config`] | [`DeliveryConfig`] and defaults | spec/falcon.md §8 |
//! | [`packet`] | values crossing the boundary; the retransmit buffer holds metadata + [`PayloadHandle`] | §9 |
//! | [`bitmap`] | PSN bitmaps (ring for TX, u64/u128 for RX) | §9.1.1, §9.2.1 |
//! | [`tx_window`] | BPSN/NPSN, TX ack bitmap, retransmit slots, ORC/ORRC | §9.1.1 |
//! | [`rx_window`] | receiver BPSN, req/data-ack/data-rx bitmaps, OWN | §9.2.1, §9.2.2.4 |
//! | [`gating`] | fcwnd/ncwnd gates, pacing, AR policy | §9.1.2, §9.1.3.1, §10.3.5 |
//! | [`ack`] | coalescing, BACK vs EACK, ACK fields | §9.1.6 |
//! | `connection` | [`DeliveryConnection`], the receive path of data packets, commands, `poll_ack` | §9.2.2 |
//! | `ack_rx` | ACK/EACK/NACK processing at the transmitter | §9.2.3–9.2.4 |
//! | `transmit` | `poll_transmit`: what goes next, header building | §9.1.3 |
//! | `retransmit` | per-packet timers, exhaustion → Resync → fatal | §9.1.5, §11 |
//! | `early_retx` | OOO distance + recency, EACK-OWN | §9.1.4 |
//! | [`rack`] | RACK-TLP (opt-in extension) | spec/rue.md §4 |
//! | `resync` | Resync transmit and receive | §9.1.8, §9.2.5 |
//! | [`rue_iface`] | CC state, 64-byte events, admission, results | §10.6, spec/falcon.md §7.7 |
//! | [`buffer_level`] | rx buffer occupancy EMA and quantizer | §10.2 |
//! | [`events`] | [`Event`], [`RxOutcome`], errors, stats | – |
//!
//! # Decisions where the spec is ambiguous
//!
//! * Receiver BPSN is the first *unacknowledged* PSN (spec/falcon.md §9
//!   item 7); duplicates are checked against the data-rx-bitmap too (§4.6).
//! * EACK data-ack-bitmap is ORed into the TX ack bitmap (§9 item 4).
//! * Retransmit exhaustion: Resync 0x3, then fatal (§9 item 3, OCP §11).
//! * Resync window from the Resync Packet Type (§9 item 8).
//! * An RNR NACK makes the receiver forget the Push Data so its
//!   retransmission is delivered again; RNR waits do not count toward Max
//!   Retransmit Attempts.
//! * PSNs are assigned at first transmission (the connection scheduler's
//!   pick, §9.1.3), so a Push Data blocked by ncwnd does not hold a data-
//!   window PSN that Pull Data behind it would have to wait for.
//! * A Resync triggers an immediate ACK at the receiver.

pub mod ack;
mod ack_rx;
pub mod bitmap;
pub mod buffer_level;
pub mod config;
mod connection;
mod early_retx;
pub mod events;
pub mod gating;
pub mod packet;
pub mod rack;
mod resync;
mod retransmit;
pub mod rue_iface;
pub mod rx_window;
mod transmit;
pub mod tx_window;

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

pub use buffer_level::{BufferLevel, PoolOccupancy};
pub use config::{ConfigError, DeliveryConfig, OwnPause, RackTlpConfig};
pub use connection::{ConnectionParams, DeliveryConnection, OrderingMode, RttEstimate, XlrFilter};
pub use events::{ConnectionError, DeliveryStats, Event, Refusal, RxOutcome, SubmitError, UlpNack};
// For tests and the sublayer benchmarks (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub use events::{ResyncError, UlpError};
#[cfg(any(test, feature = "testing"))]
pub use packet::TxPacket;
pub use packet::{
    Arrival, OutgoingPacket, PacketKind, PayloadHandle, Retransmission, RxMeta, SentKind,
};
pub use rue_iface::CcState;
