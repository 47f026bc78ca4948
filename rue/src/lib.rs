//! Falcon rate update engine (OCP Falcon 0.9 §10).
//!
//! Layer: congestion control behind the packet delivery sublayer. Owns the
//! 64-byte CC event and result formats and the algorithms (Swift, PLB/PRR,
//! DCQCN, bypass). It knows nothing of packets or connections beyond the
//! event fields, and never reads a clock.
#![forbid(unsafe_code)]
