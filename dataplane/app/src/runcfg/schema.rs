//! The schema of `falcon run --config FILE`: one struct per TOML table.
//!
//! Layer: application configuration, values only. `[node]` and `[port]`
//! are required; every other table and key has a default, written out with
//! a comment per key in `configs/run-*.toml`. A key the schema does not
//! know is an error. Ranges and cross-references (a connection's peer, an
//! lcore's CPU) are checked in [`super::check`], which names the key.
//! The engine tables (`[delivery]`, `[resources]`, `[rue.swift]`) are
//! the demo's ([`crate::democfg::schema`]), so both files spell them alike.

use std::net::{IpAddr, SocketAddr};

use psp::{Backend, DEFAULT_REPLAY_MARGIN_PS};
use serde::{Deserialize, Serialize};

use crate::democfg::schema::{
    BackendName, DeliverySection, KeyHex, Mac, Ordering, PspVersion, ResourcesSection,
    RueAlgorithm, SwiftSection,
};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    #[serde(default)]
    pub eal: EalSection,
    pub node: NodeSection,
    pub port: PortSection,
    #[serde(default)]
    pub lcores: LcoresSection,
    #[serde(default)]
    pub psp: RunPspSection,
    #[serde(default)]
    pub delivery: DeliverySection,
    #[serde(default)]
    pub resources: ResourcesSection,
    #[serde(default)]
    pub rue: RunRueSection,
    #[serde(default)]
    pub stats: StatsSection,
    #[serde(default)]
    pub peers: Vec<PeerSection>,
    #[serde(default)]
    pub connections: Vec<ConnectionsSection>,
}

/// DPDK's EAL (spec/dpdk.md §3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EalSection {
    /// Arguments handed to `rte_eal_init` as they are: virtual devices,
    /// `--no-huge`, `-m`, `--no-pci`. Not the lcores (`[lcores]` sets
    /// them) nor the file prefix (`file_prefix`).
    pub args: Vec<String>,
    /// The EAL's runtime directory name (`--file-prefix`); two processes
    /// on one host need different ones. Default `falcon-<pid>`.
    pub file_prefix: Option<String>,
}

/// This node's addresses and connection manager.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// IPv4 or IPv6 address of the node's Falcon frames.
    pub ip: IpAddr,
    /// Source MAC; default the port's own.
    #[serde(default)]
    pub mac: Option<Mac>,
    /// Destination Function of the node's connections (24 bits, OCP Falcon
    /// 0.9 §9.1.1), checked on every frame received.
    #[serde(default)]
    pub function: u32,
    /// Where this node's connection manager listens for peers that connect
    /// to it (needed when a `role = "target"` connection names a peer).
    #[serde(default)]
    pub control: Option<SocketAddr>,
}

/// The DPDK port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSection {
    /// The ethdev's name: a virtual device of `[eal] args` (`net_ring0`,
    /// `net_memif0`) or a PCI address.
    pub device: String,
    /// Receive queues; 0 (default): one per datapath lcore, or as many as
    /// the device has. Lcores past them get their frames from the software
    /// dispatcher.
    #[serde(default)]
    pub rx_queues: u16,
    /// Descriptors per queue.
    #[serde(default = "default_descriptors")]
    pub descriptors: u16,
    /// Mbufs in the node's pool.
    #[serde(default = "default_mbufs")]
    pub mbufs: u32,
    /// The longest frame, Ethernet header to PSP ICV; the pool's buffers
    /// hold it past their headroom.
    #[serde(default = "default_max_frame")]
    pub max_frame: usize,
}

fn default_descriptors() -> u16 {
    1024
}

fn default_mbufs() -> u32 {
    32767
}

fn default_max_frame() -> usize {
    4352
}

/// Which CPUs run what (DPDK `--lcores`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LcoresSection {
    /// CPU of the main lcore: setup, the stats line, metrics and signals.
    /// It sleeps between its once-a-second reports.
    pub main: usize,
    /// CPUs of the datapath lcores, one engine each, each owning a shard of
    /// the connections (by CID). Polling lcores starve each other on one
    /// CPU: give each its own.
    pub datapath: Vec<usize>,
    /// CPU of the RUE's own lcore, serving every datapath lcore through
    /// one event/result queue pair each; absent: the RUE runs inline in
    /// each datapath lcore's engine.
    pub rue: Option<usize>,
}

impl Default for LcoresSection {
    fn default() -> Self {
        LcoresSection {
            main: 0,
            datapath: vec![0],
            rue: None,
        }
    }
}

/// PSP on every connection of the node (spec/psp.md; OCP Falcon 0.9 §9.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunPspSection {
    pub enabled: bool,
    pub version: PspVersion,
    pub backend: BackendName,
    /// Replay Protection Margin (OCP Falcon 0.9 §9.2.2.2), ns.
    pub replay_margin_ns: u64,
    /// The node's master keys (64 hex digits each); absent: fresh keys
    /// from the operating system's random source, as a deployment would.
    pub master_key_0: Option<KeyHex>,
    pub master_key_1: Option<KeyHex>,
}

impl Default for RunPspSection {
    fn default() -> Self {
        RunPspSection {
            enabled: true,
            version: PspVersion::AesGcm128,
            backend: BackendName::from(Backend::default()),
            replay_margin_ns: DEFAULT_REPLAY_MARGIN_PS / 1000,
            master_key_0: None,
            master_key_1: None,
        }
    }
}

/// The rate update engine's algorithm (where it runs is `[lcores] rue`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunRueSection {
    pub algorithm: RueAlgorithm,
    pub swift: SwiftSection,
}

/// The per-second report and the metrics endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatsSection {
    /// Serve Prometheus text on this address (`--metrics` overrides).
    pub metrics: Option<SocketAddr>,
}

/// Another node (or this one, by the reserved name `self`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSection {
    /// How connections name it.
    pub name: String,
    /// Its Falcon address (it tells a peer's offers apart on the control
    /// channel).
    pub ip: IpAddr,
    /// Its MAC. The connection manager's offers carry each side's own, so
    /// this is informational and may be left out.
    #[serde(default)]
    pub mac: Option<Mac>,
    /// Its connection manager, for connections this node initiates.
    #[serde(default)]
    pub control: Option<SocketAddr>,
}

/// `count` connections to one peer, alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsSection {
    /// A `[[peers]]` name, or `self`: both ends on this node (a loopback).
    pub peer: String,
    /// How many.
    #[serde(default = "one")]
    pub count: u32,
    /// The ULP role this node serves on them.
    pub role: Role,
    /// The first local connection id; the rest follow. Absent: ids are
    /// handed out round robin across the shards (each lcore's engine owns
    /// the ids of its shard, so a given id picks its lcore).
    #[serde(default)]
    pub first_cid: Option<u32>,
    #[serde(default = "ordered")]
    pub ordering: Ordering,
    /// What an initiator runs.
    #[serde(default)]
    pub workload: RunWorkload,
    /// Data bytes per transaction (`verify`: the largest).
    #[serde(default = "default_size")]
    pub size: usize,
    /// Ops kept outstanding per connection.
    #[serde(default = "default_inflight")]
    pub inflight: usize,
    /// `verify`: transactions per connection.
    #[serde(default = "default_transactions")]
    pub transactions: u64,
    /// Cap each connection's sending rate (Gbit/s of frames, Ethernet
    /// header to ICV), paced on the timing wheel; absent: no cap.
    #[serde(default)]
    pub rate_gbps: Option<f64>,
}

fn one() -> u32 {
    1
}

fn ordered() -> Ordering {
    Ordering::Ordered
}

fn default_size() -> usize {
    4096
}

fn default_inflight() -> usize {
    16
}

fn default_transactions() -> u64 {
    1000
}

/// The ULP role of a connection's local end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Submits the workload.
    Initiator,
    /// Checks every pushed byte, answers every pull.
    Target,
}

/// An initiator's workload (as `falcon node --workload`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunWorkload {
    /// Pushes and pulls of many sizes up to `size`, every byte checked,
    /// `transactions` per connection.
    Verify,
    /// Pushes of `size` flat out.
    #[default]
    Bulk,
    /// A push of `size` answered by a push back.
    Rr,
    /// A push of `size` then a pull of `size`, one op.
    RrPull,
}
