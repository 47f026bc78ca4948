//! NVMe over Falcon (OCP NVMe over Falcon 0.9): NVMe Read and Write
//! commands mapped onto Falcon push and pull transactions, an initiator
//! and a target, and the target's namespace backends.
//!
//! Layer: upper-layer protocol over `falcon-core`'s public ULP API. Owns
//! the NVMe packet formats, command splitting and reassembly, and block
//! storage behind the target. Never touches a port, a clock or a
//! connection's sequence numbers: Falcon delivers, this crate interprets.
//!
//! What it offers:
//!
//! * [`initiator::Initiator`]: an [`Ulp`](falcon_core::api::Ulp) for an
//!   lcore whose engine carries [`data::NvmeData`]. The control plane
//!   gives it the LBA translation tables ([`lba`]) and each namespace's
//!   format and PI policy ([`initiator::NamespaceSpec`]); a command
//!   submits [`initiator::Icmd`]s (read or write, 4 KiB to 1 MiB, up to the
//!   queue depth) with `submit_icmd` and takes
//!   [`initiator::IcmdCompletion`]s (tag, NVMe [`Status`], buffers,
//!   latency) with `poll_completion`.
//! * [`target::Target`]: the target's `Ulp`, built from the namespaces
//!   each storage worker owns ([`namespace`]: RAM or file, PI, injected
//!   faults); it reassembles nCMDs into tCMDs, runs them on the workers
//!   and answers every nCMD.
//! * Both keep plain statistics structs ([`initiator::InitiatorStats`],
//!   [`target::TargetStats`]) for the commands to print.
//! * The pieces beneath: the six packets, the NBTH and our vendor command
//!   packets for Flush ([`wire`]), DIF/DIX
//!   layouts ([`layout`]), splitting ([`split`]), the 24-bit slot and
//!   generation identifiers ([`tag`]) and the data source the engine reads
//!   when it builds a frame ([`data`]).
//!
//! Connections carrying NVMe are unordered (NVMe-0.9 §7, ulp.md §3.1):
//! NVMe completes commands in any order, and nothing here relies on the
//! order of deliveries.
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
