//! Configuration of an engine and of its connections.
//!
//! Layer: engine. Owns [`EngineConfig`] (per engine: addresses, frame size,
//! the node it is a shard of or its own PSP keys and globals, resources,
//! RUE, timers, defaults for connections),
//! [`ConnectionConfig`] (what the connection manager sets up per
//! connection, OCP Falcon 0.9 §8.4.1, §8.5.1, §9.1.1, §9.2.1: CIDs, initial
//! PSNs and RSNs, SAs, windows, ordering, destination function, RUE
//! profile) and [`ConfigError`], which names the field at fault. Values and
//! validation only.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;

use psp::{Backend, MasterKeys, SaKey, SecurityGlobals, Spi, SpiGeneration};
use rue::Profiles;

use crate::delivery::{DeliveryConfig, OrderingMode};
use crate::ids::{ConnectionId, DestinationFunction};
use crate::node::NodeShard;
use crate::resources::{Alpha, CreditLimits, ResourceConfig};
use crate::seq::{Psn, Rsn};
use crate::transaction::TransactionConfig;
use crate::wire::{ChecksumChecks, EthernetAddress, ProtocolType, PSP_UDP_PORT};

/// Configuration of an [`Engine`](super::Engine): one datapath lcore's
/// shard of a node.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// This node's MAC address (the source of every frame).
    pub local_mac: EthernetAddress,
    /// This node's IP address; connections' remote addresses must be of
    /// the same family. Default 10.0.0.1.
    pub local_ip: IpAddr,
    /// UDP destination port of Falcon frames. Default 1000 (PSP's port,
    /// OCP Falcon 0.9 §7.1). Frames to other ports are dropped.
    pub udp_port: u16,
    /// Largest frame sent or received, Ethernet header to the PSP ICV, in
    /// bytes. Bounds the payload of one transaction. Default 9014 (a 9000-
    /// byte IP MTU, spec/falcon.md §8).
    pub max_frame_len: usize,
    /// Connection slots (also the RUE state table's size). Default 1024.
    pub max_connections: u32,
    /// The node this engine is a shard of ([`crate::node`]): the node's
    /// master keys, SPI generation, SPI range and connection-id range are
    /// the engine's, and `psp` must be `None` (the node's
    /// `NodeConfig::psp` applies). `None` (default): the engine is a node
    /// of one shard by itself, with `psp` as its keys.
    pub node: Option<NodeShard>,
    /// PSP: the receive master keys and globals of an engine that is a
    /// node by itself (`node` `None`). `None` sends Falcon in clear over
    /// UDP, for benchmarks and tests only: there is then no TX timestamp on
    /// the wire, so t1 degrades to the peer's receive time and RTT samples
    /// see only the reverse path.
    pub psp: Option<PspConfig>,
    /// The rate update engine run inline. Default Swift.
    pub rue: RueMode,
    /// Capacity of the RUE event and result queues. Default 1024.
    pub rue_queue: usize,
    /// Packet delivery parameters every connection starts from.
    pub delivery: DeliveryConfig,
    /// This engine's transaction resources (OCP Falcon 0.9 §8.2): its pools,
    /// regions and credit limits, not shared with the node's other
    /// engines. Decision: resource pools are per engine, a node's are the
    /// sum of its shards'. Credits are reserved and released on the
    /// per-packet path; pools shared across lcores would put an atomic
    /// read-modify-write on a cache line every lcore writes into each
    /// transaction, and run-to-completion lcores must not share hot
    /// counters. The cost is that a shard cannot borrow another's idle
    /// capacity: give each shard its share of the node's memory for its
    /// share of the connections (`crate::node`, "Resource pools").
    pub resources: ResourceConfig,
    /// Transaction-sublayer timeouts (`max_payload` is derived from
    /// `max_frame_len` and ignored here).
    pub transaction: TransactionConfig,
    /// Slots of the timing wheel (512 ns each). Default 4096 (2.1 ms).
    pub timer_slots: usize,
    /// Slot length of the pacing wheel (`crate::pacing::Carousel`), which
    /// holds the release times of paced connections (fcwnd < 1, or a rate
    /// cap): a paced packet leaves up to this much after its release time,
    /// and a rate-capped connection's departures may come this much closer
    /// than its gap (the lateness is charged back, so its rate holds). In
    /// 1 ns..=1 ms; default 512 ns, the RUE's inter-packet-gap unit
    /// (spec/rue.md §5.1, isekai `tw_unit_time_ns`).
    pub pacing_granularity: Duration,
    /// Slots of the pacing wheel (rounded up to a power of two, at least
    /// 64): its horizon is `(pacing_slots − 1) × pacing_granularity`, and a
    /// release time beyond it waits in the last slot and is re-armed from
    /// there (`EngineStats::pacing_clamped`). 4 bytes a slot, allocated at
    /// the first paced packet. In 1..=2^22; default 65536: with 512 ns slots
    /// a 33.6 ms horizon, the RUE's largest gap ((2^16 − 1) × 512 ns with
    /// Swift's default 16-bit `ipg_bits`; the result field is 20 bits,
    /// spec/rue.md §1.6).
    pub pacing_slots: usize,
    /// Which checksums received frames are verified for. Default all.
    pub checksums: ChecksumChecks,
    /// Seed of the engine's generator (path changes).
    pub seed: u64,
    /// Shortest time between two events to the CM for SPI check or
    /// decryption failures of one (reason, SPI) (OCP Falcon 0.9 §9.2.2.3;
    /// `Engine::poll_cm_event`); the frames in between are counted in the
    /// next event. In (0, 1 h]; default 1 s.
    pub spi_failure_interval: Duration,
    /// Expanded PSP transmit keys kept for the connections sending (the
    /// engine's `psp::TxContextCache`; a connection keeps only its SA key).
    /// A connection sending when its key is not cached expands it again
    /// (`EngineStats::tx_context_misses`). One entry is ~580 bytes with
    /// `ring`; allocated at the first packet sent. At least 1; default
    /// 4096 (2.3 MiB), more than the connections one core keeps busy.
    pub tx_contexts: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            local_mac: EthernetAddress([0x02, 0, 0, 0, 0, 1]),
            local_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            udp_port: PSP_UDP_PORT,
            max_frame_len: 9014,
            max_connections: 1024,
            node: None,
            psp: None,
            rue: RueMode::Swift,
            rue_queue: 1024,
            delivery: DeliveryConfig::default(),
            resources: ResourceConfig::default(),
            transaction: TransactionConfig::default(),
            timer_slots: crate::timer::DEFAULT_SLOTS,
            pacing_granularity: Duration::from_nanos(crate::time::TIMING_WHEEL_UNIT_NANOS),
            pacing_slots: 1 << 16,
            checksums: ChecksumChecks::ALL,
            seed: 0xFA1C_0000,
            spi_failure_interval: Duration::from_secs(1),
            tx_contexts: 4096,
        }
    }
}

/// The node's PSP receive side (spec/psp.md; OCP Falcon 0.9 §9.2.1).
#[derive(Debug, Clone)]
pub struct PspConfig {
    /// AEAD backend. Default `ring`.
    pub backend: Backend,
    /// The two master keys the receive SAs derive from.
    pub master_keys: MasterKeys,
    /// Cached receive contexts. Default 1024.
    pub sa_cache: usize,
    /// Receiver-wide SPI generation, PCID match and replay margin.
    pub globals: SecurityGlobals,
}

impl PspConfig {
    /// `ring`, a 1024-entry cache, default globals (replay margin 1 ms).
    pub fn new(master_keys: MasterKeys) -> Self {
        PspConfig {
            backend: Backend::Ring,
            master_keys,
            sa_cache: 1024,
            globals: SecurityGlobals::default(),
        }
    }
}

/// Where the rate update engine runs (DESIGN.md §3: inline in the loop, or
/// on its own core behind one SPSC event/result queue pair per datapath
/// core).
#[derive(Debug, Clone)]
pub enum RueMode {
    /// Inline, Swift with its defaults (`rue::Profiles::swift_default`).
    Swift,
    /// Inline, explicit profiles (a connection picks one by `rue_profile`);
    /// boxed, the profile table is large.
    Profiles(Box<Profiles>),
    /// Elsewhere (its own core, usually `rue::Rue::spawn`): the caller moves
    /// events from [`Engine::poll_rue_event`](crate::engine::Engine::poll_rue_event)
    /// into the RUE's event queue and results from its result queue to
    /// [`Engine::handle_rue_result`](crate::engine::Engine::handle_rue_result).
    /// A connection in slot `s` is RUE connection `id_base + s`, so several
    /// engines can share one RUE state table with disjoint id ranges. Its
    /// events carry its instance (the slot's reuse count) and its first
    /// event `new_instance`; a result must carry the instance back to apply
    /// (`rue::format`, "Connection instances").
    External {
        /// First RUE connection id of this engine; `id_base +
        /// max_connections` must fit the table and 24 bits.
        id_base: u32,
    },
    /// No RUE: every connection keeps its initial fcwnd, ncwnd and RTO.
    Off,
}

/// A connection's PSP state: the SA it sends with and the checks on what
/// it receives (OCP Falcon 0.9 §9.2.1).
#[derive(Debug, Clone)]
pub struct ConnectionPsp {
    /// SPI the peer chose for what we send.
    pub tx_spi: Spi,
    /// The key the peer derived for `tx_spi`.
    pub tx_key: SaKey,
    /// Virtualization cookie we send (the peer's PCID), if any.
    pub tx_vc: Option<u64>,
    /// SPI we expect from the peer (Current SPI of the SPI check).
    pub rx_spi: Spi,
    /// Its generation (Current SPI Generation).
    pub rx_generation: SpiGeneration,
    /// Our PCID, compared with the received VC when PCID matching is on.
    pub pcid: u64,
    /// Initial Remote Time for the replay check, in ps (§9.2.1: the CM sets
    /// it "conservatively older than the time of the remote transmitter").
    pub remote_time_ps: u64,
}

impl ConnectionPsp {
    /// Send with (`tx_spi`, `tx_key`), expect `rx_spi`; no VC, generation
    /// 0, Remote Time 0.
    pub fn new(tx_spi: Spi, tx_key: SaKey, rx_spi: Spi) -> Self {
        ConnectionPsp {
            tx_spi,
            tx_key,
            tx_vc: None,
            rx_spi,
            rx_generation: SpiGeneration(0),
            pcid: 0,
            remote_time_ps: 0,
        }
    }
}

/// The initial sequence numbers of a connection (set by the CM; OCP Falcon
/// 0.9 §8.4.1, §8.5.1, §9.1.1, §9.2.1). The peer's `tx_*` are our `rx_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitialSequence {
    /// First PSN of our request window.
    pub tx_request_psn: Psn,
    /// First PSN of our data window.
    pub tx_data_psn: Psn,
    /// First PSN of the peer's request window.
    pub rx_request_psn: Psn,
    /// First PSN of the peer's data window.
    pub rx_data_psn: Psn,
    /// Our initiator's first RSN (its BRSN = NRSN).
    pub tx_rsn: Rsn,
    /// The first RSN our target expects from the peer.
    pub rx_rsn: Rsn,
}

impl InitialSequence {
    /// Everything from zero.
    pub const ZERO: InitialSequence = InitialSequence {
        tx_request_psn: Psn::new(0),
        tx_data_psn: Psn::new(0),
        rx_request_psn: Psn::new(0),
        rx_data_psn: Psn::new(0),
        tx_rsn: Rsn::new(0),
        rx_rsn: Rsn::new(0),
    };

    /// The peer's view: our tx is its rx.
    pub const fn mirrored(self) -> InitialSequence {
        InitialSequence {
            tx_request_psn: self.rx_request_psn,
            tx_data_psn: self.rx_data_psn,
            rx_request_psn: self.tx_request_psn,
            rx_data_psn: self.tx_data_psn,
            tx_rsn: self.rx_rsn,
            rx_rsn: self.tx_rsn,
        }
    }
}

/// What the connection manager sets up for one connection.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Our connection id: the destination CID of what we receive.
    pub local_cid: ConnectionId,
    /// The peer's connection id: the destination CID of what we send.
    pub remote_cid: ConnectionId,
    /// Ordered or unordered (OCP Falcon 0.9 §8.4.2, §8.5.2).
    pub ordering: OrderingMode,
    /// Upper-layer protocol of what we send. Default RDMA.
    pub protocol: ProtocolType,
    /// Destination Function our packets must carry (checked on receive).
    pub local_function: DestinationFunction,
    /// Destination Function we send.
    pub remote_function: DestinationFunction,
    /// The peer's MAC address.
    pub remote_mac: EthernetAddress,
    /// The peer's IP address.
    pub remote_ip: IpAddr,
    /// Our UDP source port (flow entropy; changed on a RUE path change).
    pub udp_source_port: u16,
    /// Initial PSNs and RSNs.
    pub sequence: InitialSequence,
    /// PSP state; required when the engine runs PSP, ignored otherwise.
    pub psp: Option<ConnectionPsp>,
    /// Packet delivery parameters (windows, timers); `None` takes the
    /// engine's.
    pub delivery: Option<DeliveryConfig>,
    /// RUE profile index (0..8), carried in `base_delay_target[23:21]`.
    pub rue_profile: u8,
    /// Credit limits; `None` takes the engine's per-connection default.
    pub credits: Option<CreditLimits>,
    /// Index of the function the connection's resources are charged to.
    pub function: u16,
    /// Index of the host the connection's resources are charged to.
    pub host: u16,
    /// Dynamic-threshold factor; `None` takes the engine's default.
    pub isolation_alpha: Option<Alpha>,
    /// Seed of the connection's generator (ACK-request policy).
    pub seed: u64,
    /// The operator's rate cap on what the connection sends, bit/s: frames
    /// as built (Ethernet header to PSP ICV) of data packets, first
    /// transmissions and retransmissions alike (ACKs and NACKs are not
    /// held). `None` (default): none. In 1..=10^15 (1 Pbit/s). Beyond
    /// OCP Falcon 0.9, on top of the RUE's pacing (see `crate::pacing`);
    /// [`Engine::set_rate_cap`](super::Engine::set_rate_cap) changes it.
    pub rate_cap: Option<u64>,
}

impl ConnectionConfig {
    /// A connection from `local_cid` to the peer's `remote_cid` at
    /// `remote_ip` / `remote_mac`: ordered, RDMA, destination functions 0,
    /// sequence numbers from 0, no PSP, engine defaults for the rest.
    pub fn new(
        local_cid: ConnectionId,
        remote_cid: ConnectionId,
        remote_ip: IpAddr,
        remote_mac: EthernetAddress,
    ) -> Self {
        ConnectionConfig {
            local_cid,
            remote_cid,
            ordering: OrderingMode::Ordered,
            protocol: ProtocolType::Rdma,
            local_function: DestinationFunction::ZERO,
            remote_function: DestinationFunction::ZERO,
            remote_mac,
            remote_ip,
            udp_source_port: 0xC000 | (local_cid.value() as u16 & 0x3FFF),
            sequence: InitialSequence::ZERO,
            psp: None,
            delivery: None,
            rue_profile: 0,
            credits: None,
            function: 0,
            host: 0,
            isolation_alpha: None,
            seed: u64::from(local_cid.value()),
            rate_cap: None,
        }
    }
}

/// A configuration value out of range, or a setup that cannot be done:
/// names the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigError {
    /// The field, dotted for nested ones (`delivery.tx_window`).
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl ConfigError {
    pub(crate) const fn new(field: &'static str, problem: &'static str) -> Self {
        ConfigError { field, problem }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "engine config `{}`: {}", self.field, self.problem)
    }
}

impl std::error::Error for ConfigError {}

impl From<crate::delivery::ConfigError> for ConfigError {
    fn from(e: crate::delivery::ConfigError) -> Self {
        // The delivery config's fields are nested under `delivery`.
        ConfigError::new(e.field, e.problem)
    }
}

/// Headers around the largest payload: Ethernet (with a VLAN tag), IPv6,
/// UDP, PSP with a VC, the largest Falcon header carrying a payload (Pull
/// Request, 32 bytes), the ICV.
pub(crate) const MAX_OVERHEAD: usize =
    18 + 40 + 8 + psp::HEADER_LEN + psp::VC_LEN + 32 + psp::ICV_LEN;

impl EngineConfig {
    /// Checks every field.
    ///
    /// # Errors
    ///
    /// The first field out of range, by name.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_frame_len < MAX_OVERHEAD + 64 || self.max_frame_len > 65_535 {
            return Err(ConfigError::new(
                "max_frame_len",
                "must be in 210..=65535 bytes (headers plus at least 64 bytes of payload)",
            ));
        }
        if self.max_connections == 0 || self.max_connections > 1 << 24 {
            return Err(ConfigError::new(
                "max_connections",
                "must be in 1..=2^24 (24-bit connection ids)",
            ));
        }
        if let RueMode::External { id_base } = self.rue {
            if u64::from(id_base) + u64::from(self.max_connections) > 1 << 24 {
                return Err(ConfigError::new(
                    "rue.id_base",
                    "id_base + max_connections must be at most 2^24 (24-bit RUE connection ids)",
                ));
            }
        }
        if self.rue_queue == 0 {
            return Err(ConfigError::new("rue_queue", "must be at least 1"));
        }
        if self.tx_contexts == 0 {
            return Err(ConfigError::new("tx_contexts", "must be at least 1"));
        }
        if let Some(member) = &self.node {
            if self.psp.is_some() {
                return Err(ConfigError::new(
                    "psp",
                    "must be None on a shard of a node: PSP is the node's (NodeConfig::psp)",
                ));
            }
            if member.shard >= member.node.shards() {
                return Err(ConfigError::new(
                    "node.shard",
                    "must be below the node's shard count",
                ));
            }
            if self.udp_port != member.node.udp_port() {
                return Err(ConfigError::new(
                    "udp_port",
                    "must be the node's (NodeConfig::udp_port)",
                ));
            }
        }
        if self.timer_slots == 0 || self.timer_slots > 1 << 20 {
            return Err(ConfigError::new("timer_slots", "must be in 1..=2^20"));
        }
        if self.pacing_granularity.is_zero() || self.pacing_granularity > Duration::from_millis(1) {
            return Err(ConfigError::new(
                "pacing_granularity",
                "must be in 1 ns..=1 ms",
            ));
        }
        if self.pacing_slots == 0 || self.pacing_slots > 1 << 22 {
            return Err(ConfigError::new("pacing_slots", "must be in 1..=2^22"));
        }
        self.delivery.validate()?;
        self.resources
            .validate()
            .map_err(|(field, problem)| ConfigError::new(field, problem))?;
        let t = &self.transaction;
        if t.transaction_timeout.is_zero() || t.transaction_timeout > Duration::from_secs(3600) {
            return Err(ConfigError::new(
                "transaction.transaction_timeout",
                "must be in (0, 1 h]",
            ));
        }
        if t.target_timeout.is_zero() || t.target_timeout > Duration::from_secs(3600) {
            return Err(ConfigError::new(
                "transaction.target_timeout",
                "must be in (0, 1 h]",
            ));
        }
        if t.max_rsn_span == 0 || t.max_rsn_span > 1 << 24 {
            return Err(ConfigError::new(
                "transaction.max_rsn_span",
                "must be in 1..=2^24",
            ));
        }
        if self.spi_failure_interval.is_zero()
            || self.spi_failure_interval > Duration::from_secs(3600)
        {
            return Err(ConfigError::new(
                "spi_failure_interval",
                "must be in (0, 1 h]",
            ));
        }
        Ok(())
    }

    /// The largest payload one transaction carries with this frame size.
    pub const fn max_payload(&self) -> usize {
        let payload = self.max_frame_len.saturating_sub(MAX_OVERHEAD);
        if payload > u16::MAX as usize {
            u16::MAX as usize
        } else {
            payload
        }
    }
}

impl ConnectionConfig {
    /// Checks the fields that do not depend on the engine.
    ///
    /// # Errors
    ///
    /// The first field out of range, by name.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.rue_profile >= 8 {
            return Err(ConfigError::new(
                "rue_profile",
                "must be in 0..8 (3-bit profile index)",
            ));
        }
        if let Some(delivery) = &self.delivery {
            delivery.validate()?;
        }
        validate_rate_cap(self.rate_cap)?;
        if let Some(alpha) = self.isolation_alpha {
            if alpha.0 == 0 {
                return Err(ConfigError::new("isolation_alpha", "must be positive"));
            }
        }
        if let Some(psp) = &self.psp {
            if !psp.tx_spi.is_valid() {
                return Err(ConfigError::new(
                    "psp.tx_spi",
                    "must be a valid (non-zero) SPI",
                ));
            }
            if !psp.rx_spi.is_valid() {
                return Err(ConfigError::new(
                    "psp.rx_spi",
                    "must be a valid (non-zero) SPI",
                ));
            }
        }
        Ok(())
    }
}

/// A rate cap in 1..=[`MAX_RATE_CAP`](crate::pacing::MAX_RATE_CAP) bit/s,
/// or none.
pub(super) fn validate_rate_cap(rate: Option<u64>) -> Result<(), ConfigError> {
    match rate {
        Some(rate) if rate == 0 || rate > crate::pacing::MAX_RATE_CAP => Err(ConfigError::new(
            "rate_cap",
            "must be in 1..=10^15 bit/s (or None)",
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_field() {
        let bad = |edit: fn(&mut EngineConfig)| {
            let mut config = EngineConfig::default();
            edit(&mut config);
            config.validate().map_err(|e| e.field)
        };
        assert_eq!(EngineConfig::default().validate(), Ok(()));
        assert_eq!(bad(|c| c.max_frame_len = 100), Err("max_frame_len"));
        assert_eq!(bad(|c| c.max_connections = 0), Err("max_connections"));
        assert_eq!(bad(|c| c.delivery.tx_window = 0), Err("tx_window"));
        assert_eq!(
            bad(|c| c.resources.cell_size = 0),
            Err("resources.cell_size")
        );
        assert_eq!(
            bad(|c| c.transaction.transaction_timeout = Duration::ZERO),
            Err("transaction.transaction_timeout")
        );
        assert_eq!(
            bad(|c| c.spi_failure_interval = Duration::ZERO),
            Err("spi_failure_interval")
        );
        assert_eq!(
            bad(|c| c.spi_failure_interval = Duration::from_secs(3601)),
            Err("spi_failure_interval")
        );
        assert_eq!(
            bad(|c| c.spi_failure_interval = Duration::from_secs(3600)),
            Ok(())
        );
        let e = EngineConfig {
            rue_queue: 0,
            ..EngineConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "engine config `rue_queue`: must be at least 1"
        );
        assert_eq!(EngineConfig::default().max_payload(), 9014 - MAX_OVERHEAD);
        assert_eq!(
            bad(|c| c.pacing_granularity = Duration::ZERO),
            Err("pacing_granularity")
        );
        assert_eq!(bad(|c| c.pacing_slots = 0), Err("pacing_slots"));
        let mut connection = ConnectionConfig::new(
            ConnectionId::truncating(1),
            ConnectionId::truncating(2),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
        );
        connection.rate_cap = Some(0);
        assert_eq!(connection.validate().map_err(|e| e.field), Err("rate_cap"));
        connection.rate_cap = Some(100_000_000_000);
        assert_eq!(connection.validate(), Ok(()));
    }

    #[test]
    fn sequences_mirror() {
        let s = InitialSequence {
            tx_request_psn: Psn::new(1),
            tx_data_psn: Psn::new(2),
            rx_request_psn: Psn::new(3),
            rx_data_psn: Psn::new(4),
            tx_rsn: Rsn::new(5),
            rx_rsn: Rsn::new(6),
        };
        assert_eq!(s.mirrored().mirrored(), s);
        assert_eq!(s.mirrored().tx_rsn, Rsn::new(6));
    }
}
