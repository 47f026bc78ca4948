//! RDMA over Falcon (OCP RDMA over Falcon 0.9): InfiniBand verbs semantics
//! mapped onto Falcon push and pull transactions.
//!
//! Layer: upper-layer protocol over `falcon-core`'s public ULP API. Owns
//! the RDMA-over-Falcon wire format. Never touches a port, a clock or a
//! connection's Falcon sequence numbers: Falcon delivers each packet and
//! completes each transaction at most once (RDMA-0.9 §6.8), this crate
//! interprets.
//!
//! What exists:
//!
//! * [`wire`]: the RBTH and nine extended headers (RETH, SETH, OETH,
//!   STETH, ImmDt, AtomicETH, AtomicAckETH, IETH, DETH; XRCETH is not
//!   built), each a zero-copy view and a `Repr`; [`wire::Opcode`], the
//!   opcode table of RDMA-0.9 §8.1.3 with, per opcode, its Falcon packet
//!   and its headers; [`wire::RdmaPacket::parse`], which checks an opcode
//!   against the Falcon packet it came in and returns the headers and the
//!   payload; [`wire::RdmaHeader`], built consistent and emitted into a
//!   Falcon `UlpHeader`; [`wire::ParseError`] with a stable name per
//!   fault for drop counters.
//! * [`seq`]: the RBTH Sequence Number and the SETH's RMSN, compared
//!   modulo 2^32.
//!
//! A sender builds the headers of each packet as one consistent value and
//! hands them to Falcon inline; a receiver parses them with the Falcon
//! packet they came in and matches on the extended headers:
//!
//! ```
//! use falcon_core::api::{Transaction, TransactionKind};
//! use rdma_ulp::wire::{
//!     Extensions, FalconPacket, Opcode, Qpn, RKey, Rbth, RdmaHeader, RdmaPacket, Reth, Sn,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let reth = Reth { virtual_address: 0x7000_1000, r_key: RKey(0x42), length: 5 };
//! let rbth = Rbth::new(Opcode::WriteOnly, Qpn::new(17)?, Sn::FIRST);
//! let header = RdmaHeader::new(rbth, Extensions::Write { reth })?;
//! let push = Transaction::push(1, b"hello".to_vec()).with_header(header.to_ulp_header());
//! assert_eq!(push.payload_len(), 28 + 5);
//!
//! // The target's Push Data payload: the headers, then the data.
//! let mut payload = header.to_ulp_header().to_vec();
//! payload.extend_from_slice(b"hello");
//! let packet = RdmaPacket::parse(FalconPacket::request(TransactionKind::Push), &payload)?;
//! let Extensions::Write { reth } = packet.header.extensions() else {
//!     unreachable!("a WRITE Only carries a RETH alone");
//! };
//! assert_eq!((reth.r_key, packet.payload), (RKey(0x42), &b"hello"[..]));
//! # Ok(())
//! # }
//! ```
//!
//! What comes next, on top of the wire layer: verbs objects (protection
//! domains, memory regions and their keys, completion queues), RC and UD
//! queue pairs that segment SEND, WRITE and READ into one transaction per
//! MTU (RDMA-0.9 §6.7) and reassemble completions, the ordering and
//! error-handling modes (§6.2, §6.3), the CID checks (§6.9), and an
//! `rdma-perf` tool.
#![forbid(unsafe_code)]

pub mod data;
mod device;
pub mod segment;
pub mod seq;
pub mod verbs;
pub mod wire;

#[cfg(test)]
mod tests;

pub use data::RdmaData;
pub use device::{
    Device, DeviceCaps, DeviceStats, Refusal, RemoteCode, MAX_MESSAGE_LEN, UD_GRH_LEN,
};
