//! Deterministic simulated fabric for the Falcon dataplane.
//!
//! Layer: a `Port` implementation for tests, `falcon sim` and `falcon demo`.
//! Holds hosts, links and switches driven by virtual time and a seeded RNG.
//! Not yet built: this crate is a placeholder until the simulator issue.
#![forbid(unsafe_code)]
