//! Falcon transport core (OCP Falcon 0.9).
//!
//! Layer: everything between the port and the upper-layer protocols, sans-IO.
//! Owns the wire formats (Falcon, Ethernet/IPv4/IPv6/UDP views), sequence
//! number types, and (in later modules) the packet delivery and transaction
//! sublayers and the per-core engine. It never reads a clock, an RNG, a socket
//! or the environment: time and randomness are passed in.
#![forbid(unsafe_code)]
