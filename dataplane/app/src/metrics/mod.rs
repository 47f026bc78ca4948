//! Statistics as operators scrape them: Prometheus' text format
//! ([`exposition`]) on an HTTP endpoint ([`server`]) fed latest-wins
//! snapshots by the datapath.

pub mod exposition;
pub mod server;

pub use exposition::Exposition;
pub use server::MetricsServer;
