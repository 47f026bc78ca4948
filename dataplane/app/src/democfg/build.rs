//! From a [`DemoConfig`] to what the demo runs: two [`EngineConfig`]s, the
//! [`PairSpec`] that connects them, the workload and the faults.
//!
//! Layer: application configuration. Every range check either is the
//! engine's own (`DeliveryConfig::validate`, `ResourceConfig::validate`,
//! `EngineConfig::validate`, the RUE profiles, the 24-bit id types) with its
//! field mapped back to the file's key, or guards a value the demo itself
//! uses (fractions, sizes, timeouts) so that nothing later can panic on it.
//! Errors go through [`Origin`], which names the flag, or the file, line
//! and key, the value came from.

use std::net::IpAddr;
use std::time::Duration;

use falcon_core::delivery::{DeliveryConfig, OwnPause, RackTlpConfig};
use falcon_core::engine::{EngineConfig, InitialSequence, PairSpec, PspConfig, RueMode};
use falcon_core::ids::{ConnectionId, DestinationFunction};
use falcon_core::resources::{Alpha, CreditLimits, ResourceConfig, RxPool, TxPool};
use falcon_core::seq::{Psn, Rsn};
use falcon_core::testing::Faults;
use falcon_core::transaction::TransactionConfig;
use falcon_core::wire::RnrTimeout;
use psp::{MasterKey, MasterKeys, SecurityGlobals};
use rdma_ulp::verbs::{Mtu, QpOrdering};
use rue::{BypassConfig, DcqcnConfig, PlbConfig, ProfileConfig, Profiles, SwiftConfig};

use super::schema::{
    DeliverySection, DemoConfig, KeyHex, RdmaOrdering, ResourcesSection, RueAlgorithm,
    RuePlacement, SwiftSection,
};
use super::Origin;
use crate::cmd::nvme_io::{MAX_IO, MIN_IO};
use crate::error::Result;
use crate::nvme::PairConfig;

/// Everything `falcon demo` runs, checked.
#[derive(Debug, Clone)]
pub struct Setup {
    pub initiator: EngineConfig,
    pub target: EngineConfig,
    /// With `rue.placement = "thread"`: the profiles of the RUE core both
    /// engines share (their `rue` is then `RueMode::External`).
    pub rue_core: Option<Profiles>,
    /// Rotate the PSP keys every this many completed transactions (0:
    /// never; only with PSP on).
    pub rotate_every: u64,
    pub pair: PairSpec,
    pub workload: Workload,
    pub target_ulp: TargetUlp,
    pub faults: Faults,
    /// The NVMe phase, unless `nvme.enabled = false`.
    pub nvme: Option<NvmeWorkload>,
    /// The RDMA phase, unless `rdma.enabled = false`.
    pub rdma: Option<RdmaWorkload>,
}

/// What the RDMA phase runs.
#[derive(Debug, Clone, PartialEq)]
pub struct RdmaWorkload {
    pub operations: u64,
    /// RC QPs, one Falcon connection each.
    pub qps: usize,
    /// Operations outstanding per QP at most.
    pub queue_depth: usize,
    /// Message sizes of WRITE, READ and SEND, bytes, each within
    /// 1..=[`RDMA_MAX_SIZE`].
    pub sizes: Vec<u32>,
    pub mtu: Mtu,
    /// Strong on ordered Falcon connections, weak on unordered ones.
    pub ordering: QpOrdering,
    /// The pair's loopback faults: `[faults]`, as the Falcon workload's.
    pub faults: Faults,
    /// The configuration the pair's engines are built from; the
    /// connections' ordering follows `ordering`, the RUE inline.
    pub engines: Box<DemoConfig>,
    pub seed: u64,
    /// An operation not complete after this long fails the run: the
    /// workload's timeout, at most [`RDMA_OP_TIMEOUT`].
    pub timeout: Duration,
}

/// What the NVMe phase runs.
#[derive(Debug, Clone, PartialEq)]
pub struct NvmeWorkload {
    pub commands: u64,
    pub queue_depth: usize,
    /// Command sizes, bytes: each a whole number of the pair's blocks
    /// within [`MIN_IO`]..=[`MAX_IO`].
    pub sizes: Vec<u64>,
    /// The pair's loopback faults: `[faults]`, as the Falcon workload's.
    pub faults: Faults,
    /// The configuration the pair's engines are built from (`[node]`,
    /// `[psp]`, `[rue]`, `[delivery]`, `[resources]`, ...; the connection
    /// unordered, as NVMe over Falcon's are).
    pub engines: Box<DemoConfig>,
    pub seed: u64,
    /// A command not complete after this long fails in error: the
    /// workload's timeout, at most Linux's 30 s I/O timeout.
    pub icmd_timeout: Duration,
}

/// How the target's ULP answers the requests delivered to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetUlp {
    /// Probability, parts per million, that a first delivery is answered
    /// with an RNR NACK.
    pub rnr_ppm: u32,
    /// The RNR timeout its RNR NACKs carry.
    pub rnr_timeout: RnrTimeout,
    /// Probability, parts per million, that a transaction it accepts is
    /// completed in error (CIE).
    pub cie_ppm: u32,
}

/// What the initiator's ULP submits.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub transactions: u64,
    pub depth: usize,
    pub push_fraction: f64,
    /// Transaction sizes (bytes), each within 8..=max payload.
    pub sizes: Vec<usize>,
    pub seed: u64,
    pub timeout: Duration,
}

/// The ULP header of a demo transaction is its 8-byte tag.
pub const MIN_SIZE: usize = 8;

/// Builds and checks the demo from `config`.
///
/// # Errors
///
/// [`AppError`](crate::error::AppError) (exit 2) naming the first bad value by flag or by key.
pub fn setup(config: &DemoConfig, origin: &Origin) -> Result<Setup> {
    let faults = faults(config, origin)?;
    let delivery = delivery(&config.delivery, origin)?;
    let resources = resources(&config.resources, origin)?;
    let inline = rue(config.rue.algorithm, &config.rue.swift, origin)?;
    // On a thread, one RUE core holds both engines' connections: the
    // initiator's slots first, then the target's.
    let (rue_core, external) = match (config.rue.placement, &inline) {
        (RuePlacement::Thread, RueMode::Profiles(profiles)) => (
            Some(Profiles::clone(profiles)),
            Some(EngineConfig::default().max_connections),
        ),
        _ => (None, None),
    };
    let rue_for = |side: u32| match external {
        Some(slots) => RueMode::External {
            id_base: side * slots,
        },
        None => inline.clone(),
    };
    let pair = pair(config, origin)?;
    if config.initiator.ip.is_ipv4() != config.target.ip.is_ipv4() {
        return Err(origin.error(
            "target.ip",
            "must be of the same address family as initiator.ip",
        ));
    }
    let psp = &config.psp;
    let psp_config = |k0: &KeyHex, k1: &KeyHex| -> Result<Option<PspConfig>> {
        if !psp.enabled {
            return Ok(None);
        }
        let replay_margin_ps = psp.replay_margin_ns.checked_mul(1000).ok_or_else(|| {
            origin.error("psp.replay_margin_ns", "must be below 2^64 ps (≈ 213 days)")
        })?;
        let mut config = PspConfig::new(MasterKeys {
            k0: MasterKey::new(k0.0),
            k1: MasterKey::new(k1.0),
        });
        config.backend = psp.backend.into();
        config.globals = SecurityGlobals {
            replay_margin_ps,
            ..SecurityGlobals::default()
        };
        Ok(Some(config))
    };
    let seed = config.workload.seed;
    let target_ulp = target_ulp(config, origin)?;
    let transaction = transaction_config(&target_ulp);
    let engine = |ip: IpAddr, mac, psp, seed, side| EngineConfig {
        local_ip: ip,
        local_mac: mac,
        psp,
        rue: rue_for(side),
        delivery: delivery.clone(),
        resources,
        transaction,
        seed,
        ..EngineConfig::default()
    };
    let initiator = engine(
        config.initiator.ip,
        config.initiator.mac.0,
        psp_config(&psp.initiator_master_key_0, &psp.initiator_master_key_1)?,
        seed,
        0,
    );
    let target = engine(
        config.target.ip,
        config.target.mac.0,
        psp_config(&psp.target_master_key_0, &psp.target_master_key_1)?,
        seed ^ 1,
        1,
    );
    for engine in [&initiator, &target] {
        engine.validate().map_err(|e| origin.engine_error(e))?;
    }
    let workload = workload(config, initiator.max_payload(), origin)?;
    let rotate_every = config.psp.rotate_every_transactions;
    if rotate_every > 0 && !config.psp.enabled {
        return Err(origin.error(
            "psp.rotate_every_transactions",
            "key rotation needs psp.enabled = true",
        ));
    }
    // Without PSP nothing authenticates the Falcon header and payload (the
    // UDP checksum is 0): a flipped bit there would be taken as data.
    if faults.corrupt_ppm > 0 && !config.psp.enabled {
        return Err(origin.error(
            "faults.corrupt",
            "needs psp.enabled = true (without PSP nothing authenticates the Falcon packet: the UDP checksum is 0)",
        ));
    }
    let nvme = nvme(config, &workload, origin)?;
    let rdma = rdma(config, &workload, origin)?;
    Ok(Setup {
        initiator,
        target,
        rue_core,
        rotate_every,
        pair,
        workload,
        target_ulp,
        faults,
        nvme,
        rdma,
    })
}

/// The file key of a field `falcon-core` names in a `ConfigError` (its
/// `EngineConfig`, `DeliveryConfig`, `ResourceConfig`, `ConnectionConfig`
/// spelling) when the demo's schema has one.
pub fn key_of_engine_field(field: &str) -> String {
    let delivery = |key: &str| format!("delivery.{key}");
    match field {
        "initial_rto" => delivery("initial_rto_us"),
        "ulp_rto" => delivery("ulp_rto_us"),
        "ack_coalescing_timeout" => delivery("ack_coalescing_timeout_ns"),
        "tx_window"
        | "submit_queue"
        | "initial_fcwnd"
        | "initial_ncwnd"
        | "max_retransmit_attempts"
        | "ack_coalescing_count"
        | "ack_request_fcwnd_threshold"
        | "ack_request_percent"
        | "ooo_distance_threshold"
        | "nack_queue" => delivery(field),
        f if f.starts_with("rack_tlp") => delivery("rack_tlp"),
        f if f.starts_with("own_pause") => delivery("own_pause"),
        "remote_ip" => "target.ip".into(),
        "local_cid" => "connection.initiator_cid".into(),
        "rate_cap" => "connection.rate_cap_bps".into(),
        f if f.starts_with("psp") => "psp".into(),
        f => f.into(),
    }
}

fn faults(config: &DemoConfig, origin: &Origin) -> Result<Faults> {
    let f = &config.faults;
    for (key, value, max) in [
        ("faults.loss", f.loss, 0.5),
        ("faults.reorder", f.reorder, 1.0),
        ("faults.duplicate", f.duplicate, 1.0),
        ("faults.corrupt", f.corrupt, 0.5),
    ] {
        fraction(origin, key, value, max)?;
    }
    // The injector adds the delay to the clock: keep that sum far from
    // overflowing.
    if f.reorder_delay_us > 1_000_000 {
        return Err(origin.error(
            "faults.reorder_delay_us",
            format!(
                "must be at most 1000000 µs (1 s), got {}",
                f.reorder_delay_us
            ),
        ));
    }
    Ok(Faults {
        loss_ppm: ppm(f.loss),
        duplicate_ppm: ppm(f.duplicate),
        reorder_ppm: ppm(f.reorder),
        reorder_delay: Duration::from_micros(f.reorder_delay_us),
        corrupt_ppm: ppm(f.corrupt),
    })
}

/// The nodes' transaction timeouts, as their connection manager would set
/// them for a target ULP that answers RNR: a pull's RNR waits happen at the
/// target and the initiator hears nothing of them (OCP Falcon 0.9
/// §8.5.3.4), and on an ordered connection a request waits out the RNR
/// timeouts of those before it as well as its own. Refusals chain: with
/// `depth` requests behind a refused one, one of them is likely refused in
/// turn when first delivered (`--rnr 0.01`, depth 64: about one in two), so
/// the soft-state timeout outlasts 32 RNR timeouts (a chain that long comes
/// about once in 10^10 refusals), and at least the default 1 s.
fn transaction_config(ulp: &TargetUlp) -> TransactionConfig {
    let default = TransactionConfig::default();
    if ulp.rnr_ppm == 0 {
        return default;
    }
    let outlast = ulp.rnr_timeout.as_duration() * 32;
    TransactionConfig {
        transaction_timeout: default.transaction_timeout.max(outlast),
        target_timeout: default.target_timeout.max(outlast),
        ..default
    }
}

fn target_ulp(config: &DemoConfig, origin: &Origin) -> Result<TargetUlp> {
    let t = &config.target_ulp;
    fraction(origin, "target_ulp.rnr", t.rnr, 1.0)?;
    fraction(origin, "target_ulp.cie", t.cie, 1.0)?;
    let longest = RnrTimeout::LONGEST.as_duration().as_secs_f64() * 1e3;
    if !(t.rnr_timeout_ms.is_finite() && (0.0..=longest).contains(&t.rnr_timeout_ms)) {
        return Err(origin.error(
            "target_ulp.rnr_timeout_ms",
            format!(
                "must be between 0 and {longest} ms (the RNR timeout table, OCP Falcon 0.9 §7.8), got {}",
                t.rnr_timeout_ms
            ),
        ));
    }
    Ok(TargetUlp {
        rnr_ppm: ppm(t.rnr),
        rnr_timeout: RnrTimeout::nearest(Duration::from_secs_f64(t.rnr_timeout_ms / 1e3)),
        cie_ppm: ppm(t.cie),
    })
}

fn workload(config: &DemoConfig, max_payload: usize, origin: &Origin) -> Result<Workload> {
    let w = &config.workload;
    fraction(origin, "workload.push_fraction", w.push_fraction, 1.0)?;
    if w.depth == 0 {
        return Err(origin.error("workload.depth", "must be at least 1"));
    }
    // `Duration::from_secs_f64` panics beyond u64 seconds: bound it.
    if !(w.timeout_s.is_finite() && w.timeout_s > 0.0 && w.timeout_s <= 1e9) {
        return Err(origin.error(
            "workload.timeout_s",
            format!("must be positive (at most 1e9 s), got {}", w.timeout_s),
        ));
    }
    if w.sizes.is_empty() {
        return Err(origin.error("workload.sizes", "needs at least one size"));
    }
    let mut sizes = Vec::with_capacity(w.sizes.len());
    for &size in &w.sizes {
        let size = size as usize;
        if !(MIN_SIZE..=max_payload).contains(&size) {
            return Err(origin.error(
                "workload.sizes",
                format!(
                    "{size}: each size must be within {MIN_SIZE}..={max_payload} bytes (the tag, the largest payload of a frame)"
                ),
            ));
        }
        sizes.push(size);
    }
    Ok(Workload {
        transactions: w.transactions,
        depth: w.depth,
        push_fraction: w.push_fraction,
        sizes,
        seed: w.seed,
        timeout: Duration::from_secs_f64(w.timeout_s),
    })
}

/// Longest a command of the NVMe phase may take (Linux's default I/O
/// timeout).
const NVME_ICMD_TIMEOUT: Duration = Duration::from_secs(30);
/// Most commands the NVMe phase keeps outstanding.
const NVME_MAX_QUEUE_DEPTH: usize = 1024;

fn nvme(config: &DemoConfig, workload: &Workload, origin: &Origin) -> Result<Option<NvmeWorkload>> {
    let n = &config.nvme;
    if n.commands == 0 {
        return Err(origin.error(
            "nvme.commands",
            "must be at least 1 (nvme.enabled = false or --no-nvme skips the NVMe phase)",
        ));
    }
    if !(1..=NVME_MAX_QUEUE_DEPTH).contains(&n.queue_depth) {
        return Err(origin.error(
            "nvme.queue_depth",
            format!(
                "must be within 1..={NVME_MAX_QUEUE_DEPTH}, got {}",
                n.queue_depth
            ),
        ));
    }
    if n.sizes.is_empty() {
        return Err(origin.error("nvme.sizes", "needs at least one size"));
    }
    let block = PairConfig::default().format.lba_size.bytes() as u64;
    let mut sizes = Vec::with_capacity(n.sizes.len());
    for &size in &n.sizes {
        let size = u64::from(size);
        if !(MIN_IO..=MAX_IO).contains(&size) || size % block != 0 {
            return Err(origin.error(
                "nvme.sizes",
                format!(
                    "{size}: each size must be within {MIN_IO}..={MAX_IO} bytes (NVMe-0.9 §6.5, the initiator's MDTS) and a multiple of the {block}-byte block"
                ),
            ));
        }
        sizes.push(size);
    }
    if !n.enabled {
        return Ok(None);
    }
    Ok(Some(NvmeWorkload {
        commands: n.commands,
        queue_depth: n.queue_depth,
        sizes,
        faults: faults(config, &Origin::default())?,
        engines: Box::new(config.clone()),
        seed: workload.seed,
        icmd_timeout: workload.timeout.min(NVME_ICMD_TIMEOUT),
    }))
}

/// Longest an operation of the RDMA phase may take.
pub const RDMA_OP_TIMEOUT: Duration = Duration::from_secs(30);
/// Most QPs of the RDMA phase.
const RDMA_MAX_QPS: usize = 64;
/// Most operations outstanding on one QP of the RDMA phase.
const RDMA_MAX_QUEUE_DEPTH: usize = 256;
/// The largest message of the RDMA phase.
pub const RDMA_MAX_SIZE: u32 = 4 << 20;
/// Bytes the RDMA phase may register on each side: a buffer of the
/// largest size per outstanding operation.
const RDMA_MAX_MEMORY: u64 = 512 << 20;

fn rdma(config: &DemoConfig, workload: &Workload, origin: &Origin) -> Result<Option<RdmaWorkload>> {
    let r = &config.rdma;
    if r.operations == 0 {
        return Err(origin.error(
            "rdma.operations",
            "must be at least 1 (rdma.enabled = false or --no-rdma skips the RDMA phase)",
        ));
    }
    if !(1..=RDMA_MAX_QPS).contains(&r.qps) {
        return Err(origin.error(
            "rdma.qps",
            format!("must be within 1..={RDMA_MAX_QPS}, got {}", r.qps),
        ));
    }
    if !(1..=RDMA_MAX_QUEUE_DEPTH).contains(&r.queue_depth) {
        return Err(origin.error(
            "rdma.queue_depth",
            format!(
                "must be within 1..={RDMA_MAX_QUEUE_DEPTH}, got {}",
                r.queue_depth
            ),
        ));
    }
    if r.sizes.is_empty() {
        return Err(origin.error("rdma.sizes", "needs at least one size"));
    }
    if let Some(&size) = r.sizes.iter().find(|&&s| !(1..=RDMA_MAX_SIZE).contains(&s)) {
        return Err(origin.error(
            "rdma.sizes",
            format!("{size}: each size must be within 1..={RDMA_MAX_SIZE} bytes"),
        ));
    }
    let largest = u64::from(r.sizes.iter().copied().max().unwrap_or(0));
    let memory = largest * (r.qps * r.queue_depth) as u64;
    if memory > RDMA_MAX_MEMORY {
        return Err(origin.error(
            "rdma.sizes",
            format!(
                "the largest size times rdma.qps times rdma.queue_depth is {memory} bytes to register on each side, more than {RDMA_MAX_MEMORY}"
            ),
        ));
    }
    let Some(mtu) = Mtu::from_bytes(r.mtu) else {
        return Err(origin.error(
            "rdma.mtu",
            format!("{}: must be 256, 512, 1024, 2048 or 4096", r.mtu),
        ));
    };
    if !r.enabled {
        return Ok(None);
    }
    Ok(Some(RdmaWorkload {
        operations: r.operations,
        qps: r.qps,
        queue_depth: r.queue_depth,
        sizes: r.sizes.clone(),
        mtu,
        ordering: match r.ordering {
            RdmaOrdering::Strong => QpOrdering::Strong,
            RdmaOrdering::Weak => QpOrdering::Weak,
        },
        faults: faults(config, &Origin::default())?,
        engines: Box::new(config.clone()),
        seed: workload.seed,
        timeout: workload.timeout.min(RDMA_OP_TIMEOUT),
    }))
}

/// The delivery configuration of `[delivery]` (also `falcon run`'s).
pub(crate) fn delivery(d: &DeliverySection, origin: &Origin) -> Result<DeliveryConfig> {
    let delivery = DeliveryConfig {
        tx_window: d.tx_window,
        submit_queue: d.submit_queue,
        initial_fcwnd: d.initial_fcwnd,
        initial_ncwnd: d.initial_ncwnd,
        initial_rto: Duration::from_micros(d.initial_rto_us),
        ulp_rto: Duration::from_micros(d.ulp_rto_us),
        max_retransmit_attempts: d.max_retransmit_attempts,
        ack_coalescing_count: d.ack_coalescing_count,
        ack_coalescing_timeout: Duration::from_nanos(d.ack_coalescing_timeout_ns),
        ack_request_fcwnd_threshold: d.ack_request_fcwnd_threshold,
        ack_request_percent: d.ack_request_percent,
        ooo_distance_threshold: d.ooo_distance_threshold,
        max_early_retransmits: d.max_early_retransmits,
        nack_queue: d.nack_queue,
        initial_ttl: d.initial_ttl,
        rack_tlp: d.rack_tlp.then(RackTlpConfig::default),
        own_pause: d.own_pause.then(OwnPause::default),
        ..DeliveryConfig::default()
    };
    delivery
        .validate()
        .map_err(|e| origin.error(&key_of_engine_field(e.field), e.problem))?;
    Ok(delivery)
}

/// The resources of `[resources]` (also `falcon run`'s).
pub(crate) fn resources(r: &ResourcesSection, origin: &Origin) -> Result<ResourceConfig> {
    // `ResourceConfig::validate` names only `resources` for an empty
    // region: check each key first.
    for (key, value) in [
        ("resources.tx_packet_ulp_request", r.tx_packet_ulp_request),
        ("resources.tx_packet_ulp_data", r.tx_packet_ulp_data),
        ("resources.tx_buffer_ulp_request", r.tx_buffer_ulp_request),
        ("resources.tx_buffer_ulp_data", r.tx_buffer_ulp_data),
        ("resources.rx_packet_ulp_request", r.rx_packet_ulp_request),
        (
            "resources.rx_packet_network_request",
            r.rx_packet_network_request,
        ),
        ("resources.rx_buffer_ulp_request", r.rx_buffer_ulp_request),
        (
            "resources.rx_buffer_network_request",
            r.rx_buffer_network_request,
        ),
        ("resources.connection_packets", r.connection_packets),
        ("resources.connection_cells", r.connection_cells),
    ] {
        if value == 0 {
            return Err(origin.error(key, "must be at least 1"));
        }
    }
    // `Alpha::from_f64` clamps; refuse instead of changing the value.
    if !(r.isolation_alpha.is_finite() && (1.0 / 256.0..=255.0).contains(&r.isolation_alpha)) {
        return Err(origin.error(
            "resources.isolation_alpha",
            format!("must be within 1/256 ..= 255, got {}", r.isolation_alpha),
        ));
    }
    let resources = ResourceConfig {
        cell_size: r.cell_size,
        tx_packet: TxPool {
            ulp_request: r.tx_packet_ulp_request,
            ulp_data: r.tx_packet_ulp_data,
        },
        tx_buffer: TxPool {
            ulp_request: r.tx_buffer_ulp_request,
            ulp_data: r.tx_buffer_ulp_data,
        },
        rx_packet: RxPool {
            ulp_request: r.rx_packet_ulp_request,
            network_request: r.rx_packet_network_request,
        },
        rx_buffer: RxPool {
            ulp_request: r.rx_buffer_ulp_request,
            network_request: r.rx_buffer_network_request,
        },
        per_connection: CreditLimits::uniform(r.connection_packets, r.connection_cells),
        green_zone_percent: r.green_zone_percent,
        isolation_alpha: Alpha::from_f64(r.isolation_alpha),
        ..ResourceConfig::default()
    };
    resources
        .validate()
        .map_err(|(field, problem)| origin.error(field, problem))?;
    Ok(resources)
}

/// The inline RUE of `[rue]` (also `falcon run`'s).
pub(crate) fn rue(
    algorithm: RueAlgorithm,
    swift_section: &SwiftSection,
    origin: &Origin,
) -> Result<RueMode> {
    let profile = match algorithm {
        RueAlgorithm::Off => return Ok(RueMode::Off),
        RueAlgorithm::Swift => ProfileConfig::Swift(swift(swift_section)),
        RueAlgorithm::Dcqcn => ProfileConfig::Dcqcn(DcqcnConfig::default()),
        RueAlgorithm::Bypass => ProfileConfig::Bypass(BypassConfig::default()),
    };
    let profiles = Profiles::new(&[profile]).map_err(|e| {
        // Swift's fields are the keys of `[rue.swift]`; PLB's sub-fields
        // are behind the one `plb` switch.
        let key = match e.field {
            f if f.starts_with("plb") => "plb",
            f => f,
        };
        origin.error(&format!("rue.{}.{key}", e.algorithm), e.problem)
    })?;
    Ok(RueMode::Profiles(Box::new(profiles)))
}

fn swift(s: &SwiftSection) -> SwiftConfig {
    let defaults = SwiftConfig::default();
    SwiftConfig {
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
        plb: PlbConfig {
            enabled: s.plb,
            ..defaults.plb
        },
        ..defaults
    }
}

fn pair(config: &DemoConfig, origin: &Origin) -> Result<PairSpec> {
    let c = &config.connection;
    let cid = |key: &str, value: u32| {
        ConnectionId::new(value).map_err(|_| {
            origin.error(
                key,
                format!("must be at most 16777215 (0xFFFFFF, 24 bits), got {value}"),
            )
        })
    };
    let function = |key: &str, value: u32| {
        DestinationFunction::new(value).map_err(|_| {
            origin.error(
                key,
                format!("must be at most 16777215 (0xFFFFFF, 24 bits), got {value}"),
            )
        })
    };
    Ok(PairSpec {
        a_cid: cid("connection.initiator_cid", c.initiator_cid)?,
        b_cid: cid("connection.target_cid", c.target_cid)?,
        ordering: c.ordering.into(),
        // The initiator is side A; its receive windows are the target's
        // send windows.
        sequence: InitialSequence {
            tx_request_psn: Psn::new(c.initiator_request_psn),
            tx_data_psn: Psn::new(c.initiator_data_psn),
            rx_request_psn: Psn::new(c.target_request_psn),
            rx_data_psn: Psn::new(c.target_data_psn),
            tx_rsn: Rsn::new(c.initiator_rsn),
            rx_rsn: Rsn::new(c.target_rsn),
        },
        a_function: function("connection.initiator_function", c.initiator_function)?,
        b_function: function("connection.target_function", c.target_function)?,
        delivery: None,
        credits: None,
        version: config.psp.version.into(),
        rate_cap: rate_cap(c.rate_cap_bps, origin)?,
    })
}

/// `connection.rate_cap_bps`: 0 is none.
fn rate_cap(bps: u64, origin: &Origin) -> Result<Option<u64>> {
    if bps > falcon_core::pacing::MAX_RATE_CAP {
        return Err(origin.error(
            "connection.rate_cap_bps",
            format!("must be at most 10^15 (1 Pbit/s; 0: none), got {bps}"),
        ));
    }
    Ok((bps != 0).then_some(bps))
}

/// Refuses a fraction outside `0..=max` (or not a number).
fn fraction(origin: &Origin, key: &str, value: f64, max: f64) -> Result<()> {
    if value.is_finite() && (0.0..=max).contains(&value) {
        return Ok(());
    }
    Err(origin.error(key, format!("must be between 0 and {max}, got {value}")))
}

fn ppm(fraction: f64) -> u32 {
    (fraction.clamp(0.0, 1.0) * 1e6).round() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::democfg::schema::Ordering;
    use crate::error::AppError;

    /// What an [`AppError`] from here looks like to callers that only want the
    /// message (tests).
    fn message(result: Result<Setup>) -> String {
        match result {
            Ok(_) => String::from("ok"),
            Err(AppError::Usage(m)) => m,
            Err(e) => e.to_string(),
        }
    }

    fn build(edit: impl FnOnce(&mut DemoConfig)) -> Result<Setup> {
        let mut config = DemoConfig::default();
        edit(&mut config);
        setup(&config, &Origin::file("demo.toml", ""))
    }

    #[test]
    fn the_default_is_the_engines_default() {
        let s = build(|_| {}).unwrap();
        let pair = PairSpec::default();
        assert_eq!(s.pair.a_cid, pair.a_cid);
        assert_eq!(s.pair.b_cid, pair.b_cid);
        assert_eq!(s.pair.sequence, pair.sequence);
        assert_eq!(s.pair.a_function, pair.a_function);
        assert_eq!(s.pair.b_function, pair.b_function);
        assert_eq!(s.pair.version, pair.version);
        assert_eq!(s.pair.ordering, pair.ordering);
        for (engine, host, seed) in [(&s.initiator, 1, 1), (&s.target, 2, 0)] {
            let default = EngineConfig::default();
            assert_eq!(engine.delivery, default.delivery);
            assert_eq!(engine.resources, default.resources);
            assert_eq!(engine.local_ip.to_string(), format!("10.0.0.{host}"));
            assert_eq!(engine.local_mac.0, [2, 0, 0, 0, 0, host]);
            assert_eq!(engine.seed, seed);
            assert_eq!(engine.max_frame_len, default.max_frame_len);
            let psp = engine.psp.as_ref().unwrap();
            assert_eq!(psp.backend, psp::Backend::Ring);
            assert_eq!(psp.globals, SecurityGlobals::default());
            assert!(matches!(engine.rue, RueMode::Profiles(_)));
        }
        assert_eq!(swift(&SwiftSection::default()), SwiftConfig::default());
        assert_eq!(
            s.faults,
            Faults {
                loss_ppm: 10_000,
                duplicate_ppm: 1_000,
                reorder_ppm: 20_000,
                reorder_delay: Duration::from_micros(20),
                corrupt_ppm: 0,
            }
        );
        assert_eq!(s.workload.sizes, [64, 256, 1024, 2048, 4096]);
        assert_eq!(s.workload.timeout, Duration::from_secs(120));
        assert_eq!(
            s.nvme,
            Some(NvmeWorkload {
                commands: 2000,
                queue_depth: 16,
                sizes: vec![4096, 16384, 65536, 262144, 1048576],
                faults: Faults {
                    loss_ppm: 10_000,
                    duplicate_ppm: 1_000,
                    reorder_ppm: 20_000,
                    reorder_delay: Duration::from_micros(20),
                    corrupt_ppm: 0,
                },
                engines: Box::new(DemoConfig::default()),
                seed: 1,
                icmd_timeout: Duration::from_secs(30),
            })
        );
    }

    #[test]
    fn nvme_values_reach_the_setup() {
        let s = build(|c| {
            c.nvme.commands = 7;
            c.nvme.queue_depth = 3;
            c.nvme.sizes = vec![8192, 4608];
            c.faults.loss = 0.05;
            c.faults.reorder = 0.03;
            c.psp.enabled = false;
            c.workload.seed = 9;
            c.workload.timeout_s = 2.0;
        })
        .unwrap();
        let nvme = s.nvme.unwrap();
        assert_eq!((nvme.commands, nvme.queue_depth), (7, 3));
        assert_eq!(nvme.sizes, [8192, 4608]);
        assert_eq!(
            (nvme.faults.loss_ppm, nvme.faults.reorder_ppm, nvme.seed),
            (50_000, 30_000, 9)
        );
        // The pair's engines come from the same file.
        assert!(!nvme.engines.psp.enabled);
        assert_eq!(nvme.icmd_timeout, Duration::from_secs(2));
        assert_eq!(build(|c| c.nvme.enabled = false).unwrap().nvme, None);
    }

    #[test]
    fn rdma_values_reach_the_setup() {
        let s = build(|c| {
            c.rdma.operations = 9;
            c.rdma.qps = 2;
            c.rdma.queue_depth = 3;
            c.rdma.sizes = vec![100, 9000];
            c.rdma.mtu = 1024;
            c.rdma.ordering = RdmaOrdering::Weak;
            c.faults.loss = 0.05;
            c.psp.enabled = false;
            c.workload.seed = 9;
            c.workload.timeout_s = 2.0;
        })
        .unwrap();
        let rdma = s.rdma.unwrap();
        assert_eq!((rdma.operations, rdma.qps, rdma.queue_depth), (9, 2, 3));
        assert_eq!(rdma.sizes, [100, 9000]);
        assert_eq!((rdma.mtu, rdma.ordering), (Mtu::B1024, QpOrdering::Weak));
        assert_eq!((rdma.faults.loss_ppm, rdma.seed), (50_000, 9));
        assert!(!rdma.engines.psp.enabled);
        assert_eq!(rdma.timeout, Duration::from_secs(2));
        assert_eq!(build(|c| c.rdma.enabled = false).unwrap().rdma, None);
        let default = build(|_| {}).unwrap().rdma.unwrap();
        assert_eq!((default.qps, default.mtu), (4, Mtu::B4096));
        assert_eq!(default.ordering, QpOrdering::Strong);
        assert_eq!(default.timeout, RDMA_OP_TIMEOUT);
    }

    #[test]
    fn file_values_reach_the_engine() {
        let s = build(|c| {
            c.connection.ordering = Ordering::Unordered;
            c.connection.initiator_cid = 0xABCDEF;
            c.connection.target_rsn = 7;
            c.connection.target_data_psn = 9;
            c.connection.rate_cap_bps = 25_000_000_000;
            c.delivery.tx_window = 256;
            c.delivery.initial_rto_us = 2500;
            c.delivery.rack_tlp = true;
            c.resources.connection_cells = 99;
            c.psp.enabled = false;
            c.rue.algorithm = RueAlgorithm::Off;
            c.faults.loss = 0.5;
        })
        .unwrap();
        assert_eq!(s.pair.a_cid.value(), 0xABCDEF);
        assert_eq!(
            s.pair.ordering,
            falcon_core::delivery::OrderingMode::Unordered
        );
        assert_eq!(s.pair.sequence.rx_rsn, Rsn::new(7));
        assert_eq!(s.pair.sequence.mirrored().tx_data_psn, Psn::new(9));
        assert_eq!(s.pair.rate_cap, Some(25_000_000_000));
        assert_eq!(s.initiator.delivery.tx_window, 256);
        assert_eq!(s.target.delivery.initial_rto, Duration::from_micros(2500));
        assert!(s.initiator.delivery.rack_tlp.is_some());
        assert_eq!(s.initiator.resources.per_connection.net_req_buf_rx, 99);
        assert!(s.initiator.psp.is_none() && s.target.psp.is_none());
        assert!(matches!(s.initiator.rue, RueMode::Off));
        assert_eq!(s.faults.loss_ppm, 500_000);
    }

    type Edit = fn(&mut DemoConfig);

    #[test]
    fn refused_values_name_the_key() {
        let cases: [(&str, Edit); 28] = [
            ("`delivery.tx_window`", |c| c.delivery.tx_window = 0),
            ("`connection.rate_cap_bps`", |c| {
                c.connection.rate_cap_bps = u64::MAX
            }),
            ("`delivery.initial_rto_us`", |c| {
                c.delivery.initial_rto_us = 3_000_000
            }),
            ("`delivery.initial_fcwnd`", |c| {
                c.delivery.initial_fcwnd = f64::NAN
            }),
            ("`resources.cell_size`", |c| c.resources.cell_size = 0),
            ("`resources.rx_packet_network_request`", |c| {
                c.resources.rx_packet_network_request = 0
            }),
            ("`resources.isolation_alpha`", |c| {
                c.resources.isolation_alpha = 0.0
            }),
            ("`rue.swift.max_fcwnd`", |c| c.rue.swift.max_fcwnd = 5000.0),
            ("`connection.target_cid`", |c| {
                c.connection.target_cid = 1 << 24
            }),
            ("`connection.initiator_function`", |c| {
                c.connection.initiator_function = u32::MAX
            }),
            ("`target.ip`", |c| c.target.ip = "::1".parse().unwrap()),
            ("`workload.sizes`", |c| c.workload.sizes = vec![4]),
            ("`faults.reorder_delay_us`", |c| {
                c.faults.reorder_delay_us = u64::MAX
            }),
            ("`faults.corrupt`", |c| c.faults.corrupt = 0.6),
            ("`faults.corrupt`", |c| {
                c.faults.corrupt = 0.01;
                c.psp.enabled = false;
            }),
            ("`target_ulp.rnr`", |c| c.target_ulp.rnr = 1.5),
            ("`target_ulp.cie`", |c| c.target_ulp.cie = f64::NAN),
            ("`target_ulp.rnr_timeout_ms`", |c| {
                c.target_ulp.rnr_timeout_ms = 700.0
            }),
            ("`nvme.commands`", |c| c.nvme.commands = 0),
            ("`nvme.queue_depth`", |c| c.nvme.queue_depth = 0),
            ("`nvme.sizes`", |c| c.nvme.sizes = vec![4096, 5000]),
            ("`nvme.sizes`", |c| c.nvme.sizes = vec![2 << 20]),
            ("`rdma.operations`", |c| c.rdma.operations = 0),
            ("`rdma.qps`", |c| c.rdma.qps = 0),
            ("`rdma.queue_depth`", |c| c.rdma.queue_depth = 1000),
            ("`rdma.sizes`", |c| c.rdma.sizes = vec![0]),
            ("`rdma.sizes`", |c| {
                c.rdma.qps = 64;
                c.rdma.queue_depth = 256;
            }),
            ("`rdma.mtu`", |c| c.rdma.mtu = 1500),
        ];
        for (key, edit) in cases {
            let err = build(edit).err().unwrap();
            assert_eq!(err.exit_code(), 2);
            let msg = err.to_string();
            assert!(
                msg.starts_with("demo.toml: ") && msg.contains(key),
                "{key}: {msg}"
            );
        }
        assert!(message(build(|c| c.workload.timeout_s = f64::INFINITY)).contains("timeout_s"));
        assert!(message(build(|c| c.workload.sizes.clear())).contains("workload.sizes"));
        assert!(message(build(|c| c.psp.replay_margin_ns = u64::MAX)).contains("replay"));
    }

    #[test]
    fn target_ulp_and_corruption_values_reach_the_setup() {
        let s = build(|_| {}).unwrap();
        assert_eq!(
            s.target_ulp,
            TargetUlp {
                rnr_ppm: 0,
                rnr_timeout: RnrTimeout::nearest(Duration::from_millis(1)),
                cie_ppm: 0,
            }
        );
        let s = build(|c| {
            c.target_ulp.rnr = 0.01;
            c.target_ulp.rnr_timeout_ms = 120.0;
            c.target_ulp.cie = 0.001;
            c.faults.corrupt = 0.02;
        })
        .unwrap();
        assert_eq!(s.target_ulp.rnr_ppm, 10_000);
        assert_eq!(s.target_ulp.cie_ppm, 1_000);
        // The table's nearest: 122.88 ms (code 11011b).
        assert_eq!(s.target_ulp.rnr_timeout.code(), 27);
        assert_eq!(s.faults.corrupt_ppm, 20_000);
        let s = build(|c| c.target_ulp.rnr_timeout_ms = 0.0).unwrap();
        assert_eq!(s.target_ulp.rnr_timeout, RnrTimeout::SHORTEST);
    }

    #[test]
    fn every_algorithm_builds() {
        for algorithm in [
            RueAlgorithm::Swift,
            RueAlgorithm::Dcqcn,
            RueAlgorithm::Bypass,
            RueAlgorithm::Off,
        ] {
            assert!(
                build(|c| c.rue.algorithm = algorithm).is_ok(),
                "{algorithm:?}"
            );
        }
    }

    #[test]
    fn engine_fields_map_to_file_keys() {
        assert_eq!(key_of_engine_field("tx_window"), "delivery.tx_window");
        assert_eq!(key_of_engine_field("ulp_rto"), "delivery.ulp_rto_us");
        assert_eq!(
            key_of_engine_field("rack_tlp.min_tlp_timeout"),
            "delivery.rack_tlp"
        );
        assert_eq!(
            key_of_engine_field("resources.cell_size"),
            "resources.cell_size"
        );
        assert_eq!(key_of_engine_field("remote_ip"), "target.ip");
    }
}
