//! PSP security protocol (PSP Architecture Specification, Nov 2022).
//!
//! Layer: below Falcon, above UDP. Owns the PSP header and trailer wire
//! formats, the SP 800-108 / AES-CMAC key derivation, the AEAD backends and
//! in-place seal/open, the IV clock, and the receive-side SPI and replay
//! checks. It knows nothing of Falcon connections: callers hand it the
//! per-connection state it checks against. It never reads a clock or an RNG.
#![forbid(unsafe_code)]
