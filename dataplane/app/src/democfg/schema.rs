//! The schema of `falcon demo --config FILE`: one struct per TOML table,
//! every key optional.
//!
//! Layer: application configuration, values only. Owns [`DemoConfig`] and
//! its tables. Each `Default` is the embedded default of the demo, taken
//! from the defaults of `falcon-core`, `psp` and `rue` (so the numbers live
//! in one place) in the units of the file, which the key names carry
//! (`_us`, `_ns`, `_s`). `configs/demo.toml` writes it out in full with a
//! comment per key; a test keeps the two equal. Ranges are checked in
//! `build`, not here: a value of the right type always parses, and the
//! engine's own validation then names the key.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use falcon_core::delivery::{DeliveryConfig, OrderingMode};
use falcon_core::engine::PairSpec;
use falcon_core::resources::ResourceConfig;
use falcon_core::wire::EthernetAddress;
use psp::{Backend, Version, DEFAULT_REPLAY_MARGIN_PS};
use rue::SwiftConfig;
use serde::{Deserialize, Serialize};

/// The whole file. A table left out takes its default; so does a key left
/// out of a table; a key the schema does not know is an error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DemoConfig {
    /// The node that submits transactions.
    pub initiator: InitiatorNode,
    /// The node that serves them.
    pub target: TargetNode,
    pub psp: PspSection,
    pub connection: ConnectionSection,
    pub delivery: DeliverySection,
    pub resources: ResourcesSection,
    pub rue: RueSection,
    pub workload: WorkloadSection,
    pub target_ulp: TargetUlpSection,
    pub faults: FaultsSection,
    pub nvme: NvmeSection,
    pub rdma: RdmaSection,
}

/// One node's addresses, a type per side so that a table setting only one
/// key still takes its own side's default for the other (serde derives no
/// const generics): 10.0.0.`host` and 02:00:00:00:00:`host`.
macro_rules! node {
    ($(#[$doc:meta])* $name:ident, $host:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            /// IPv4 or IPv6; both nodes must use the same family.
            pub ip: IpAddr,
            /// Source MAC of the node's frames.
            pub mac: Mac,
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, $host)),
                    mac: Mac(EthernetAddress([2, 0, 0, 0, 0, $host])),
                }
            }
        }
    };
}

node!(
    /// `[initiator]`: 10.0.0.1, 02:00:00:00:00:01 by default.
    InitiatorNode,
    1
);
node!(
    /// `[target]`: 10.0.0.2, 02:00:00:00:00:02 by default.
    TargetNode,
    2
);

/// PSP on the connection (spec/psp.md; OCP Falcon 0.9 §9.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PspSection {
    pub enabled: bool,
    pub version: PspVersion,
    pub backend: BackendName,
    /// Replay Protection Margin, ns.
    pub replay_margin_ns: u64,
    pub initiator_master_key_0: KeyHex,
    pub initiator_master_key_1: KeyHex,
    pub target_master_key_0: KeyHex,
    pub target_master_key_1: KeyHex,
    /// Rotate both nodes' master keys and rekey the connection every this
    /// many completed transactions (0: never).
    pub rotate_every_transactions: u64,
}

impl Default for PspSection {
    fn default() -> Self {
        // The demo's keys since its first version: a byte repeated, and its
        // complement for master key 1.
        let key = |byte: u8| KeyHex([byte; 32]);
        PspSection {
            enabled: true,
            version: PspVersion::from(PairSpec::default().version),
            backend: BackendName::from(Backend::default()),
            replay_margin_ns: DEFAULT_REPLAY_MARGIN_PS / 1000,
            initiator_master_key_0: key(0x11),
            initiator_master_key_1: key(0x11 ^ 0xff),
            target_master_key_0: key(0x22),
            target_master_key_1: key(0x22 ^ 0xff),
            rotate_every_transactions: 0,
        }
    }
}

/// What the connection manager sets up for the connection (OCP Falcon 0.9
/// §8.4.1, §8.5.1, §9.1.1). Each window's first PSN is named by the node
/// that sends in it; the other node's receive side mirrors it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionSection {
    pub ordering: Ordering,
    pub initiator_cid: u32,
    pub target_cid: u32,
    pub initiator_function: u32,
    pub target_function: u32,
    pub initiator_request_psn: u32,
    pub initiator_data_psn: u32,
    pub target_request_psn: u32,
    pub target_data_psn: u32,
    pub initiator_rsn: u32,
    pub target_rsn: u32,
    /// Rate cap of both connections, bit/s (0: none).
    pub rate_cap_bps: u64,
}

impl Default for ConnectionSection {
    fn default() -> Self {
        let pair = PairSpec::default();
        let s = pair.sequence;
        ConnectionSection {
            ordering: Ordering::from(pair.ordering),
            initiator_cid: pair.a_cid.value(),
            target_cid: pair.b_cid.value(),
            initiator_function: pair.a_function.value(),
            target_function: pair.b_function.value(),
            initiator_request_psn: s.tx_request_psn.value(),
            initiator_data_psn: s.tx_data_psn.value(),
            target_request_psn: s.rx_request_psn.value(),
            target_data_psn: s.rx_data_psn.value(),
            initiator_rsn: s.tx_rsn.value(),
            target_rsn: s.rx_rsn.value(),
            rate_cap_bps: pair.rate_cap.unwrap_or(0),
        }
    }
}

/// The packet delivery parameters both connections start from
/// ([`DeliveryConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliverySection {
    pub tx_window: u32,
    pub submit_queue: u32,
    pub initial_fcwnd: f64,
    pub initial_ncwnd: u16,
    pub initial_rto_us: u64,
    pub ulp_rto_us: u64,
    pub max_retransmit_attempts: u8,
    pub ack_coalescing_count: u16,
    pub ack_coalescing_timeout_ns: u64,
    pub ack_request_fcwnd_threshold: f64,
    pub ack_request_percent: u8,
    pub ooo_distance_threshold: u32,
    pub max_early_retransmits: u8,
    pub nack_queue: u16,
    pub initial_ttl: u8,
    pub rack_tlp: bool,
    pub own_pause: bool,
}

impl Default for DeliverySection {
    fn default() -> Self {
        let d = DeliveryConfig::default();
        DeliverySection {
            tx_window: d.tx_window,
            submit_queue: d.submit_queue,
            initial_fcwnd: d.initial_fcwnd,
            initial_ncwnd: d.initial_ncwnd,
            initial_rto_us: d.initial_rto.as_micros() as u64,
            ulp_rto_us: d.ulp_rto.as_micros() as u64,
            max_retransmit_attempts: d.max_retransmit_attempts,
            ack_coalescing_count: d.ack_coalescing_count,
            ack_coalescing_timeout_ns: d.ack_coalescing_timeout.as_nanos() as u64,
            ack_request_fcwnd_threshold: d.ack_request_fcwnd_threshold,
            ack_request_percent: d.ack_request_percent,
            ooo_distance_threshold: d.ooo_distance_threshold,
            max_early_retransmits: d.max_early_retransmits,
            nack_queue: d.nack_queue,
            initial_ttl: d.initial_ttl,
            rack_tlp: d.rack_tlp.is_some(),
            own_pause: d.own_pause.is_some(),
        }
    }
}

/// Each node's transaction resources ([`ResourceConfig`], OCP Falcon 0.9
/// §8.2).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourcesSection {
    pub cell_size: u16,
    pub tx_packet_ulp_request: u32,
    pub tx_packet_ulp_data: u32,
    pub tx_buffer_ulp_request: u32,
    pub tx_buffer_ulp_data: u32,
    pub rx_packet_ulp_request: u32,
    pub rx_packet_network_request: u32,
    pub rx_buffer_ulp_request: u32,
    pub rx_buffer_network_request: u32,
    pub connection_packets: u32,
    pub connection_cells: u32,
    pub green_zone_percent: u8,
    pub isolation_alpha: f64,
}

impl Default for ResourcesSection {
    fn default() -> Self {
        let r = ResourceConfig::default();
        ResourcesSection {
            cell_size: r.cell_size,
            tx_packet_ulp_request: r.tx_packet.ulp_request,
            tx_packet_ulp_data: r.tx_packet.ulp_data,
            tx_buffer_ulp_request: r.tx_buffer.ulp_request,
            tx_buffer_ulp_data: r.tx_buffer.ulp_data,
            rx_packet_ulp_request: r.rx_packet.ulp_request,
            rx_packet_network_request: r.rx_packet.network_request,
            rx_buffer_ulp_request: r.rx_buffer.ulp_request,
            rx_buffer_network_request: r.rx_buffer.network_request,
            // The default per-connection limits are uniform (packets, cells).
            connection_packets: r.per_connection.req_pkt_tx,
            connection_cells: r.per_connection.req_buf_tx,
            green_zone_percent: r.green_zone_percent,
            isolation_alpha: r.isolation_alpha.as_f64(),
        }
    }
}

/// The rate update engine of the two nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RueSection {
    pub algorithm: RueAlgorithm,
    pub placement: RuePlacement,
    pub swift: SwiftSection,
}

/// Where the RUE runs (DESIGN.md §3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuePlacement {
    /// In each engine's loop (`RueMode::Profiles`).
    #[default]
    Inline,
    /// One RUE core on its own thread serving both engines through one
    /// event/result queue pair each (`RueMode::External`).
    Thread,
}

/// The main Swift tunables ([`SwiftConfig`]; the rest keep their defaults).
/// Names as in `rue`, so its errors name the key.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwiftSection {
    pub max_fcwnd: f64,
    pub min_fcwnd: f64,
    pub fabric_additive_increment: f64,
    pub fabric_multiplicative_decrease_factor: f64,
    pub max_fabric_multiplicative_decrease: f64,
    pub fabric_base_delay: u32,
    pub topo_scaling_per_hop: u32,
    pub max_flow_scaling: u32,
    pub max_ncwnd: f64,
    pub min_ncwnd: f64,
    pub nic_additive_increment: f64,
    pub nic_multiplicative_decrease_factor: f64,
    pub max_nic_multiplicative_decrease: f64,
    pub target_rx_buffer_level: u8,
    pub rtt_smoothing_alpha: f64,
    pub min_retransmit_timeout: u32,
    pub retransmit_timeout_scalar: f64,
    pub retransmit_limit: u8,
    pub plb: bool,
}

impl Default for SwiftSection {
    fn default() -> Self {
        SwiftSection::from(&SwiftConfig::default())
    }
}

impl From<&SwiftConfig> for SwiftSection {
    fn from(s: &SwiftConfig) -> Self {
        SwiftSection {
            max_fcwnd: s.max_fcwnd,
            min_fcwnd: s.min_fcwnd,
            fabric_additive_increment: s.fabric_additive_increment,
            fabric_multiplicative_decrease_factor: s.fabric_multiplicative_decrease_factor,
            max_fabric_multiplicative_decrease: s.max_fabric_multiplicative_decrease,
            fabric_base_delay: s.fabric_base_delay,
            topo_scaling_per_hop: s.topo_scaling_per_hop,
            max_flow_scaling: s.max_flow_scaling,
            max_ncwnd: s.max_ncwnd,
            min_ncwnd: s.min_ncwnd,
            nic_additive_increment: s.nic_additive_increment,
            nic_multiplicative_decrease_factor: s.nic_multiplicative_decrease_factor,
            max_nic_multiplicative_decrease: s.max_nic_multiplicative_decrease,
            target_rx_buffer_level: s.target_rx_buffer_level,
            rtt_smoothing_alpha: s.rtt_smoothing_alpha,
            min_retransmit_timeout: s.min_retransmit_timeout,
            retransmit_timeout_scalar: s.retransmit_timeout_scalar,
            retransmit_limit: s.retransmit_limit,
            plb: s.plb.enabled,
        }
    }
}

/// What the initiator's ULP submits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadSection {
    pub transactions: u64,
    pub depth: usize,
    pub push_fraction: f64,
    /// Transaction sizes (ULP header + data, bytes) drawn uniformly.
    pub sizes: Vec<u32>,
    pub seed: u64,
    pub timeout_s: f64,
}

impl Default for WorkloadSection {
    fn default() -> Self {
        WorkloadSection {
            transactions: 50_000,
            depth: 64,
            push_fraction: 0.5,
            sizes: vec![64, 256, 1024, 2048, 4096],
            seed: 1,
            timeout_s: 120.0,
        }
    }
}

/// How the target's ULP answers the requests delivered to it (OCP Falcon
/// 0.9 §8.5.3.4–8.5.3.5), seeded from the workload seed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TargetUlpSection {
    /// Fraction of first deliveries answered with an RNR NACK (a
    /// redelivery is always accepted).
    pub rnr: f64,
    /// The RNR timeout asked for, ms: the nearest code of the table is sent.
    pub rnr_timeout_ms: f64,
    /// Fraction of transactions completed in error (CIE).
    pub cie: f64,
}

impl Default for TargetUlpSection {
    fn default() -> Self {
        TargetUlpSection {
            rnr: 0.0,
            rnr_timeout_ms: 1.0,
            cie: 0.0,
        }
    }
}

/// Seeded faults of the loopback, each direction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultsSection {
    pub loss: f64,
    pub reorder: f64,
    pub duplicate: f64,
    pub reorder_delay_us: u64,
    /// Fraction of frames with one random bit flipped.
    pub corrupt: f64,
}

impl Default for FaultsSection {
    fn default() -> Self {
        FaultsSection {
            loss: 0.01,
            reorder: 0.02,
            duplicate: 0.001,
            reorder_delay_us: 20,
            corrupt: 0.0,
        }
    }
}

/// The NVMe phase after the Falcon workload: an NVMe-over-Falcon initiator
/// and target over a loopback pair of their own, with the loss of
/// `[faults]` and the workload seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NvmeSection {
    pub enabled: bool,
    /// Commands (reads and writes) to complete.
    pub commands: u64,
    /// Commands outstanding at most.
    pub queue_depth: usize,
    /// Command sizes, bytes, drawn uniformly.
    pub sizes: Vec<u32>,
}

impl Default for NvmeSection {
    fn default() -> Self {
        NvmeSection {
            enabled: true,
            commands: 2000,
            queue_depth: 16,
            sizes: vec![4096, 16384, 65536, 262144, 1048576],
        }
    }
}

/// The RDMA phase after the NVMe phase: an RDMA-over-Falcon requester and
/// responder (rdma-ulp devices) over a loopback pair of their own, with
/// the loss of `[faults]` and the workload seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RdmaSection {
    pub enabled: bool,
    /// Operations (WRITE, READ, SEND, atomics) to complete.
    pub operations: u64,
    /// RC QPs, each on its own Falcon connection.
    pub qps: usize,
    /// Operations outstanding per QP at most.
    pub queue_depth: usize,
    /// Message sizes of WRITE, READ and SEND, bytes, drawn uniformly.
    pub sizes: Vec<u32>,
    /// The QPs' path MTU, payload bytes per packet.
    pub mtu: u32,
    /// The QPs' ordering mode (RDMA-0.9 §6.2).
    pub ordering: RdmaOrdering,
}

impl Default for RdmaSection {
    fn default() -> Self {
        RdmaSection {
            enabled: true,
            operations: 2000,
            qps: 4,
            queue_depth: 8,
            sizes: vec![64, 1024, 4096, 16384, 65536, 262144],
            mtu: 4096,
            ordering: RdmaOrdering::Strong,
        }
    }
}

/// `strong` (ordered Falcon connections) or `weak` (unordered ones),
/// RDMA-0.9 §6.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RdmaOrdering {
    Strong,
    Weak,
}

/// `ordered` or `unordered` (OCP Falcon 0.9 §8.4.2, §8.5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ordering {
    Ordered,
    Unordered,
}

impl From<OrderingMode> for Ordering {
    fn from(mode: OrderingMode) -> Self {
        match mode {
            OrderingMode::Ordered => Ordering::Ordered,
            OrderingMode::Unordered => Ordering::Unordered,
        }
    }
}

impl From<Ordering> for OrderingMode {
    fn from(ordering: Ordering) -> Self {
        match ordering {
            Ordering::Ordered => OrderingMode::Ordered,
            Ordering::Unordered => OrderingMode::Unordered,
        }
    }
}

/// PSP header version: the SA's cipher suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PspVersion {
    #[serde(rename = "aes-gcm-128")]
    AesGcm128,
    #[serde(rename = "aes-gcm-256")]
    AesGcm256,
}

impl From<Version> for PspVersion {
    fn from(version: Version) -> Self {
        match version {
            Version::Aes128Gcm => PspVersion::AesGcm128,
            Version::Aes256Gcm => PspVersion::AesGcm256,
        }
    }
}

impl From<PspVersion> for Version {
    fn from(version: PspVersion) -> Self {
        match version {
            PspVersion::AesGcm128 => Version::Aes128Gcm,
            PspVersion::AesGcm256 => Version::Aes256Gcm,
        }
    }
}

/// AEAD implementation, as `psp::Backend::name` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendName {
    Ring,
    Rustcrypto,
}

impl From<Backend> for BackendName {
    fn from(backend: Backend) -> Self {
        match backend {
            Backend::Ring => BackendName::Ring,
            Backend::RustCrypto => BackendName::Rustcrypto,
        }
    }
}

impl From<BackendName> for Backend {
    fn from(name: BackendName) -> Self {
        match name {
            BackendName::Ring => Backend::Ring,
            BackendName::Rustcrypto => Backend::RustCrypto,
        }
    }
}

/// Congestion control of the inline RUE (`falcon_core::engine::RueMode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RueAlgorithm {
    /// Swift with `[rue.swift]`.
    #[default]
    Swift,
    /// DCQCN with its defaults (ECN-driven; the loopback marks nothing).
    Dcqcn,
    /// The bypass test double: echoes the windows and RTO it is sent.
    Bypass,
    /// No RUE: the initial windows and RTO stay.
    Off,
}

impl RueAlgorithm {
    /// How reports name it.
    pub const fn label(self) -> &'static str {
        match self {
            RueAlgorithm::Swift => "Swift",
            RueAlgorithm::Dcqcn => "DCQCN",
            RueAlgorithm::Bypass => "bypass RUE",
            RueAlgorithm::Off => "no RUE",
        }
    }
}

/// A MAC address written `02:00:00:00:00:01`.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Mac(pub EthernetAddress);

impl TryFrom<String> for Mac {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let mut bytes = [0u8; 6];
        let mut parts = text.split(':');
        for byte in &mut bytes {
            *byte = parts
                .next()
                .filter(|p| p.len() == 2)
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| {
                    format!("`{text}` is not a MAC address (six hex bytes: 02:00:00:00:00:01)")
                })?;
        }
        if parts.next().is_some() {
            return Err(format!(
                "`{text}` is not a MAC address (six hex bytes: 02:00:00:00:00:01)"
            ));
        }
        Ok(Mac(EthernetAddress(bytes)))
    }
}

impl From<Mac> for String {
    fn from(mac: Mac) -> String {
        let b = mac.0 .0;
        format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from(*self))
    }
}

/// A 256-bit PSP master key written as 64 hex digits. No `Debug` of the
/// bytes (STYLE habit 6): it prints as `KeyHex(..)`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct KeyHex(pub [u8; 32]);

impl TryFrom<String> for KeyHex {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let mut key = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut key)
            .map_err(|e| format!("not a 256-bit key (64 hex digits): {e}"))?;
        Ok(KeyHex(key))
    }
}

impl From<KeyHex> for String {
    fn from(key: KeyHex) -> String {
        hex::encode(key.0)
    }
}

impl fmt::Debug for KeyHex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHex(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_and_key_round_trip_and_refuse_junk() {
        let mac = Mac::try_from("02:0a:00:00:00:ff".to_string()).unwrap();
        assert_eq!(mac.0, EthernetAddress([2, 10, 0, 0, 0, 255]));
        assert_eq!(String::from(mac), "02:0a:00:00:00:ff");
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "2:0:0:0:0:1",
            "zz:00:00:00:00:01",
        ] {
            assert!(Mac::try_from(bad.to_string()).is_err(), "{bad}");
        }
        let key = KeyHex::try_from("ab".repeat(32)).unwrap();
        assert_eq!(key.0, [0xab; 32]);
        assert_eq!(String::from(key.clone()), "ab".repeat(32));
        assert_eq!(format!("{key:?}"), "KeyHex(..)");
        assert!(KeyHex::try_from("ab".repeat(31)).is_err());
        assert!(KeyHex::try_from("xy".repeat(32)).is_err());
    }

    #[test]
    fn a_partial_node_table_keeps_its_own_side_defaults() {
        let config: DemoConfig = toml::from_str("[target]\nip = \"10.9.9.9\"\n").unwrap();
        assert_eq!(config.target.mac, TargetNode::default().mac);
        assert_eq!(config.initiator, InitiatorNode::default());
        assert_eq!(config.target.ip.to_string(), "10.9.9.9");
    }
}
