//! DPDK 22.11 backend of the Falcon dataplane.
//!
//! Layer: the only crate with FFI and `unsafe`: bindgen'd DPDK, EAL, mempool,
//! mbuf, ethdev and the lcore runner behind the core's `Port` trait.
//! Not yet built: the bindings arrive with the DPDK issue; until then the
//! crate is an empty skeleton so the `dpdk` feature of the binary resolves.
