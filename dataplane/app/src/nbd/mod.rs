//! An NBD server for unmodified user-space clients (fio's nbd engine,
//! qemu-img, nbdcopy, nbdinfo): the front of the NVMe-over-Falcon gateway
//! (DESIGN §6, `falcon nbd-gateway`).
//!
//! Layer: application, above a storage [`backend::Backend`]. Owns the NBD
//! protocol (NetworkBlockDevice `doc/proto.md`): the fixed newstyle
//! handshake ([`handshake`]), the transmission phase with requests in
//! flight and replies in completion order ([`transmission`], [`outbox`]), the wire
//! format ([`proto`]), the listeners and clean shutdown ([`server`]), the
//! counters ([`stats`]), and the RAM backend ([`ram`]). It never trusts a
//! client: every length is checked before use, a request it can answer
//! with an error is answered, one it cannot stay in step after closes the
//! connection with a named reason, and nothing on the client's path
//! panics.
//!
//! No crate from crates.io serves NBD this way: `nbd` 0.3 serves one
//! request at a time, synchronously, without `NBD_OPT_GO`.

pub mod backend;
pub mod falcon;
pub mod handshake;
pub mod outbox;
pub mod proto;
pub mod ram;
pub mod server;
pub mod stats;
pub mod stream;
pub mod transmission;
