//! NVMe over Falcon (OCP NVMe over Falcon 0.9): NVMe Read and Write
//! commands mapped onto Falcon push and pull transactions, an initiator
//! and a target, and the target's namespace backends.
//!
//! Layer: upper-layer protocol over `falcon-core`'s public ULP API. Owns
//! the NVMe packet formats, command splitting and reassembly, and block
//! storage behind the target. Never touches a port, a clock or a
//! connection's sequence numbers: Falcon delivers, this crate interprets.
#![forbid(unsafe_code)]

pub mod data;
pub mod initiator;
pub mod layout;
pub mod lba;
pub mod namespace;
pub mod split;
pub mod status;
pub mod tag;
pub mod target;
pub mod wire;

pub use status::{Status, StatusCodeType};

#[cfg(test)]
mod tests;
