//! The schema of `falcon nvme-target --config FILE`: one struct per TOML
//! table.
//!
//! Layer: application configuration, values only. `[node]`, `[port]` and
//! at least one `[[namespaces]]` are required; every other table and key
//! has a default, written out with a comment per key in
//! `configs/nvme-target.toml`. A key the schema does not know is an error.
//! Ranges and cross-references (a worker's namespaces, a file namespace's
//! path) are checked in [`super::check`], which names the key. The engine
//! tables (`[psp]`, `[delivery]`, `[resources]`, `[rue]`) are `falcon
//! run`'s, so the files spell them alike.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::democfg::schema::{DeliverySection, Mac, ResourcesSection};
use crate::runcfg::schema::{RunPspSection, RunRueSection};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmeTargetConfig {
    pub node: NodeSection,
    pub port: PortSection,
    #[serde(default)]
    pub psp: RunPspSection,
    #[serde(default)]
    pub delivery: DeliverySection,
    #[serde(default)]
    pub resources: ResourcesSection,
    #[serde(default)]
    pub rue: RunRueSection,
    #[serde(default)]
    pub target: TargetSection,
    #[serde(default)]
    pub namespaces: Vec<NamespaceSection>,
    #[serde(default)]
    pub workers: Vec<WorkerSection>,
}

/// This node's addresses, its connection manager and its CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// The engine's IP address (the source of its Falcon frames).
    pub ip: IpAddr,
    /// The engine's MAC address; default the DPDK port's own, or
    /// 02:00:00:00:00:02 on the UDP port.
    #[serde(default)]
    pub mac: Option<Mac>,
    /// Destination Function of the node's connections (24 bits, OCP Falcon
    /// 0.9 §9.1.1), checked on every frame received.
    #[serde(default)]
    pub function: u32,
    /// Where the connection manager listens for initiators (TCP).
    pub control: SocketAddr,
    /// Pin the process (and its datapath loop) to this CPU; with a DPDK
    /// port, the EAL's one lcore.
    #[serde(default)]
    pub core: Option<usize>,
}

/// Which port the engine runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PortKindName {
    /// A kernel UDP socket (`bind`).
    Udp,
    /// A DPDK ethdev (`eal_args`, `device`; a falcon built with `--features
    /// dpdk`).
    Dpdk,
}

/// The port. Keys of the other kind are refused by [`super::check`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSection {
    pub kind: PortKindName,
    /// udp: the socket's address; its port is where initiators send.
    #[serde(default)]
    pub bind: Option<SocketAddr>,
    /// udp: segmentation offload (GSO on transmit, GRO on receive).
    #[serde(default = "yes")]
    pub offload: bool,
    /// dpdk: arguments handed to `rte_eal_init` (virtual devices,
    /// `--no-huge`, `-m`, `--no-pci`); not `-l` nor `--file-prefix`.
    #[serde(default)]
    pub eal_args: Vec<String>,
    /// dpdk: the ethdev's name (`net_memif0`, a PCI address).
    #[serde(default)]
    pub device: Option<String>,
    /// dpdk: the EAL's runtime directory name; default `falcon-nvme-target-<pid>`.
    #[serde(default)]
    pub file_prefix: Option<String>,
    /// dpdk: mbufs in the pool.
    #[serde(default = "default_mbufs")]
    pub mbufs: u32,
    /// dpdk: the longest frame, Ethernet header to PSP ICV (initiators
    /// must use the same; default 4352, `nvme-perf --port memif`'s). The
    /// UDP port always carries the engine's default, 9014 bytes, as
    /// `nvme-perf --connect` does.
    #[serde(default = "default_max_frame")]
    pub max_frame: usize,
}

fn yes() -> bool {
    true
}

fn default_mbufs() -> u32 {
    8191
}

/// `falcon node`'s and `nvme-perf --port memif`'s frames over memif: a
/// Read Response of 4 KiB and up to 118 metadata bytes with every header
/// (4234 + metadata + 102 over IPv4, ulp.md §3.9 "MTU"): 512-byte blocks
/// with 16 bytes of metadata need more, on both sides.
pub const DPDK_MAX_FRAME: usize = 4352;

fn default_max_frame() -> usize {
    DPDK_MAX_FRAME
}

/// The NVMe target ULP (`nvme_ulp::target::TargetConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TargetSection {
    /// tCMDs in progress at most, over all initiators.
    pub tcmd_slots: usize,
    /// tCMD buffers (1 MiB of data and its metadata each).
    pub buffers: usize,
    /// Requests each storage worker holds at most.
    pub worker_queue_depth: usize,
    /// nCMDs parked until a tCMD can start for them.
    pub parked_ncmds: usize,
    /// How long a tCMD may wait for its nCMDs and their data, ms.
    pub tcmd_timeout_ms: u64,
    /// The RNR NACK's timeout, µs (Falcon 0.9 §8.5.3.4: rounded to the
    /// nearest of the 5-bit table's values).
    pub rnr_timeout_us: u64,
    /// How long an initiator has to send its offer once connected, ms.
    pub setup_timeout_ms: u64,
    /// Take our vendor Command Requests (Flush; ulp.md §3.9: off unless
    /// asked for), and say so in the offer.
    pub vendor_commands: bool,
}

impl Default for TargetSection {
    fn default() -> Self {
        let t = nvme_ulp::target::TargetConfig::default();
        TargetSection {
            tcmd_slots: t.tcmd_slots,
            buffers: t.buffers,
            worker_queue_depth: t.worker_queue_depth,
            parked_ncmds: t.parked_ncmds,
            tcmd_timeout_ms: t.tcmd_timeout.as_millis() as u64,
            rnr_timeout_us: 160,
            setup_timeout_ms: 5000,
            vendor_commands: false,
        }
    }
}

/// Where a namespace's blocks live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backing {
    /// Process memory, sparse; gone when the process ends.
    Ram,
    /// A regular file (`path`), O_DIRECT where the file system allows it.
    File,
}

/// One exported namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSection {
    /// Target NSID, 1..=65535.
    pub nsid: u32,
    pub backing: Backing,
    /// file: the data file (created at `size` when missing; an existing
    /// file's size wins) and `PATH.meta` for metadata.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Bytes (`268435456`) or with a suffix (`"256M"`); a whole number of
    /// blocks. Required for ram, and for a file that does not exist yet.
    #[serde(default)]
    pub size: Option<Size>,
    /// 512 or 4096.
    #[serde(default = "default_lba_size")]
    pub lba_size: u32,
    /// Metadata bytes per block: 0, 8 or 16.
    #[serde(default)]
    pub metadata: u32,
    /// off, opaque or verified (PI Type 1, ulp.md §3.7).
    #[serde(default = "default_protection")]
    pub protection: String,
    /// file: try O_DIRECT first (false: always through the page cache).
    #[serde(default = "yes")]
    pub direct: bool,
}

fn default_lba_size() -> u32 {
    512
}

fn default_protection() -> String {
    "off".to_string()
}

/// A storage worker thread: the target SQIDs it serves and the namespaces
/// it owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSection {
    pub sqids: Vec<u8>,
    /// NSIDs of `[[namespaces]]`.
    pub namespaces: Vec<u32>,
}

/// A size in bytes, written as an integer or as a string with a unit
/// (`"64M"`, as `falcon nbd-gateway --size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Size, D::Error> {
        struct SizeVisitor;

        impl Visitor<'_> for SizeVisitor {
            type Value = Size;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size in bytes, or a string such as \"64M\"")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                if v == 0 {
                    return Err(E::custom("a size must be positive"));
                }
                Ok(Size(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom("a size must be positive"))
                    .and_then(|v| self.visit_u64(v))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                crate::cmd::nbd_gateway::parse_size(v)
                    .map(Size)
                    .map_err(E::custom)
            }
        }

        deserializer.deserialize_any(SizeVisitor)
    }
}
