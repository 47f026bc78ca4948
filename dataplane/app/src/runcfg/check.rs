//! The checks of a node configuration, and what they yield: the [`Plan`]
//! `falcon run` carries out.
//!
//! Layer: application configuration. Every check names the key it refuses
//! (through [`Origin::error`], which finds its line in the file); the
//! engine tables go through the same conversions as the demo's, so the
//! engine's own validation names `delivery.*`, `resources.*` and
//! `rue.swift.*` keys.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

use falcon_core::api::{ConnectionId, DeliveryConfig};
use falcon_core::api::{DestinationFunction, EthernetAddress, OrderingMode, RueMode};
use falcon_core::node::MAX_SHARDS;
use falcon_core::resources::ResourceConfig;
use psp::{Backend, MasterKey, MasterKeys, SecurityGlobals, Version};

use super::schema::{ConnectionsSection, PortSection, Role, RunConfig, RunPspSection, RunWorkload};
use crate::democfg::{build, Origin};
use crate::error::Result;

/// The name a connection gives for a peer that is this node.
pub const SELF_PEER: &str = "self";

/// EAL arguments `[lcores]` and `file_prefix` own.
const EAL_ARGS_OWNED: [&str; 6] = [
    "-l",
    "-c",
    "--lcores",
    "--main-lcore",
    "--file-prefix",
    "-n",
];

/// What `falcon run` sets up, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The EAL's arguments in full (`[eal] args` with the lcores and the
    /// file prefix; `Eal::init` adds the program name).
    pub eal_args: Vec<String>,
    /// CPU of the main lcore (lcore 0).
    pub main_cpu: usize,
    /// CPUs of the datapath lcores; lcore `1 + i` runs shard `i`.
    pub datapath_cpus: Vec<usize>,
    /// CPU of the RUE's lcore (the last lcore), if it has its own.
    pub rue_cpu: Option<usize>,
    /// Polling lcores that share a CPU (a warning: they starve each other).
    pub shared_cpus: Vec<usize>,
    pub ip: IpAddr,
    pub mac: Option<EthernetAddress>,
    pub function: DestinationFunction,
    pub control: Option<SocketAddr>,
    pub port: PortSection,
    /// PSP: version, backend, globals and the keys given (`None`: fresh
    /// from the OS at startup). `None` runs Falcon in clear.
    pub psp: Option<PspPlan>,
    pub delivery: DeliveryConfig,
    pub resources: ResourceConfig,
    /// The RUE (the inline profiles; `[lcores] rue` moves them to their
    /// own lcore).
    pub rue: RueMode,
    pub metrics: Option<SocketAddr>,
    pub peers: Vec<PlannedPeer>,
    pub connections: Vec<PlannedConnection>,
}

/// PSP as configured.
#[derive(Debug, Clone)]
pub struct PspPlan {
    pub version: Version,
    pub backend: Backend,
    pub globals: SecurityGlobals,
    pub keys: Option<MasterKeys>,
}

/// A `[[peers]]` entry.
#[derive(Debug, Clone)]
pub struct PlannedPeer {
    pub name: String,
    pub ip: IpAddr,
    pub mac: Option<EthernetAddress>,
    pub control: Option<SocketAddr>,
}

/// One connection's local end (a `[[connections]]` entry expands to
/// `count` of them; a `self` initiator also makes the target end).
#[derive(Debug, Clone)]
pub struct PlannedConnection {
    /// Which `[[connections]]` entry, and which of its `count`.
    pub entry: usize,
    pub index: u32,
    /// `None`: this node (a loopback connection).
    pub peer: Option<usize>,
    pub role: Role,
    /// The local connection id, if the file fixes it.
    pub cid: Option<ConnectionId>,
    pub ordering: OrderingMode,
    pub workload: RunWorkload,
    pub size: usize,
    pub inflight: usize,
    pub transactions: u64,
    /// The connection's rate cap, bit/s.
    pub rate_cap_bps: Option<u64>,
}

/// Checks `config` (from the file `origin` names) into a [`Plan`].
///
/// # Errors
///
/// The first unusable value, by key.
pub fn plan(config: &RunConfig, origin: &Origin) -> Result<Plan> {
    let eal_args = eal_args(config, origin)?;
    let (datapath_cpus, shared_cpus) = lcores(config, origin)?;
    if config.node.function > 0xFF_FFFF {
        return Err(origin.error("node.function", "must fit 24 bits (at most 0xFFFFFF)"));
    }
    port(&config.port, config, origin)?;
    let psp = psp(&config.psp, origin)?;
    let delivery = build::delivery(&config.delivery, origin)?;
    let resources = build::resources(&config.resources, origin)?;
    let rue = build::rue(config.rue.algorithm, &config.rue.swift, origin)?;
    if config.lcores.rue.is_some() && matches!(rue, RueMode::Off) {
        return Err(origin.error(
            "lcores.rue",
            "an lcore for the RUE, but rue.algorithm = \"off\"",
        ));
    }
    let peers = peers(config, origin)?;
    let connections = connections(config, &peers, origin)?;
    Ok(Plan {
        eal_args,
        main_cpu: config.lcores.main,
        datapath_cpus,
        rue_cpu: config.lcores.rue,
        shared_cpus,
        ip: config.node.ip,
        mac: config.node.mac.map(|m| m.0),
        function: DestinationFunction::truncating(config.node.function),
        control: config.node.control,
        port: config.port.clone(),
        psp,
        delivery,
        resources,
        rue,
        metrics: config.stats.metrics,
        peers,
        connections,
    })
}

fn eal_args(config: &RunConfig, origin: &Origin) -> Result<Vec<String>> {
    for arg in &config.eal.args {
        let name = arg.split('=').next().unwrap_or("");
        if EAL_ARGS_OWNED.contains(&name) {
            return Err(origin.error(
                "eal.args",
                format!("`{arg}`: the lcores come from [lcores] and the file prefix from eal.file_prefix"),
            ));
        }
    }
    let prefix = config
        .eal
        .file_prefix
        .clone()
        .unwrap_or_else(|| format!("falcon-{}", std::process::id()));
    if prefix.is_empty() || prefix.contains('/') {
        return Err(origin.error("eal.file_prefix", "must be a non-empty name without '/'"));
    }
    // EAL lcore 0 is the main lcore, 1..=n the datapath, then the RUE's.
    let mut map = vec![format!("0@{}", config.lcores.main)];
    for (i, cpu) in config.lcores.datapath.iter().enumerate() {
        map.push(format!("{}@{cpu}", i + 1));
    }
    if let Some(cpu) = config.lcores.rue {
        map.push(format!("{}@{cpu}", config.lcores.datapath.len() + 1));
    }
    let mut args = config.eal.args.clone();
    args.push(format!("--lcores={}", map.join(",")));
    args.push("--main-lcore=0".to_string());
    args.push(format!("--file-prefix={prefix}"));
    Ok(args)
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Option<Vec<usize>> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    Some(
        (0..nix::sched::CpuSet::count())
            .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
            .collect(),
    )
}

fn lcores(config: &RunConfig, origin: &Origin) -> Result<(Vec<usize>, Vec<usize>)> {
    let l = &config.lcores;
    if l.datapath.is_empty() {
        return Err(origin.error("lcores.datapath", "needs at least one CPU"));
    }
    if l.datapath.len() > usize::from(MAX_SHARDS) {
        return Err(origin.error(
            "lcores.datapath",
            format!("at most {MAX_SHARDS} datapath lcores (a node's shards)"),
        ));
    }
    if let Some(allowed) = allowed_cpus() {
        let named = std::iter::once(("lcores.main", l.main))
            .chain(l.datapath.iter().map(|&c| ("lcores.datapath", c)))
            .chain(l.rue.map(|c| ("lcores.rue", c)));
        for (key, cpu) in named {
            if !allowed.contains(&cpu) {
                return Err(origin.error(
                    key,
                    format!("CPU {cpu} is not one this process may run on ({allowed:?})"),
                ));
            }
        }
    }
    // Polling lcores on one CPU take turns a scheduler slice at a time.
    let mut seen = HashSet::new();
    let shared = l
        .datapath
        .iter()
        .chain(l.rue.iter())
        .filter(|&&cpu| !seen.insert(cpu))
        .copied()
        .collect();
    Ok((l.datapath.clone(), shared))
}

fn port(p: &PortSection, config: &RunConfig, origin: &Origin) -> Result<()> {
    if p.device.is_empty() {
        return Err(origin.error("port.device", "names no device"));
    }
    // A virtual device exists only if an EAL argument creates it.
    if p.device.starts_with("net_") {
        let created: Vec<&str> = config
            .eal
            .args
            .iter()
            .filter_map(|a| {
                a.strip_prefix("--vdev=")
                    .or_else(|| a.strip_prefix("--vdev "))
            })
            .map(|v| v.split(',').next().unwrap_or(""))
            .collect();
        if !created.contains(&p.device.as_str()) {
            return Err(origin.error(
                "port.device",
                format!(
                    "no `--vdev={}` in eal.args creates it (they create: {})",
                    p.device,
                    if created.is_empty() {
                        "nothing".to_string()
                    } else {
                        created.join(", ")
                    }
                ),
            ));
        }
    }
    if !(256..=9216).contains(&p.max_frame) {
        return Err(origin.error("port.max_frame", "must be in 256..=9216 bytes"));
    }
    if p.mbufs < 1024 {
        return Err(origin.error("port.mbufs", "must be at least 1024"));
    }
    if p.descriptors < 32 || !p.descriptors.is_power_of_two() {
        return Err(origin.error("port.descriptors", "must be a power of two, at least 32"));
    }
    Ok(())
}

/// `[psp]` (also `falcon nvme-target`'s).
pub(crate) fn psp(p: &RunPspSection, origin: &Origin) -> Result<Option<PspPlan>> {
    if !p.enabled {
        return Ok(None);
    }
    let replay_margin_ps = p.replay_margin_ns.checked_mul(1000).ok_or_else(|| {
        origin.error("psp.replay_margin_ns", "must be below 2^64 ps (≈ 213 days)")
    })?;
    let keys = match (&p.master_key_0, &p.master_key_1) {
        (Some(k0), Some(k1)) => Some(MasterKeys {
            k0: MasterKey::new(k0.0),
            k1: MasterKey::new(k1.0),
        }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(origin.error("psp.master_key_0", "given without psp.master_key_1"))
        }
        (None, Some(_)) => {
            return Err(origin.error("psp.master_key_1", "given without psp.master_key_0"))
        }
    };
    Ok(Some(PspPlan {
        version: p.version.into(),
        backend: p.backend.into(),
        globals: SecurityGlobals {
            replay_margin_ps,
            ..SecurityGlobals::default()
        },
        keys,
    }))
}

fn peers(config: &RunConfig, origin: &Origin) -> Result<Vec<PlannedPeer>> {
    let mut names = HashSet::new();
    let mut peers = Vec::new();
    for (i, p) in config.peers.iter().enumerate() {
        let key = format!("peers[{i}].name");
        if p.name == SELF_PEER {
            return Err(origin.error(
                &key,
                "`self` is this node; connections name it without a [[peers]] entry",
            ));
        }
        if !names.insert(p.name.as_str()) {
            return Err(origin.error(&key, format!("a second peer named `{}`", p.name)));
        }
        if p.ip.is_ipv4() != config.node.ip.is_ipv4() {
            return Err(origin.error(
                &format!("peers[{i}].ip"),
                "must be of the node's address family (node.ip)",
            ));
        }
        peers.push(PlannedPeer {
            name: p.name.clone(),
            ip: p.ip,
            mac: p.mac.map(|m| m.0),
            control: p.control,
        });
    }
    Ok(peers)
}

fn connections(
    config: &RunConfig,
    peers: &[PlannedPeer],
    origin: &Origin,
) -> Result<Vec<PlannedConnection>> {
    let mut planned = Vec::new();
    let mut cids = HashSet::new();
    for (entry, c) in config.connections.iter().enumerate() {
        let key = |k: &str| format!("connections[{entry}].{k}");
        let peer = if c.peer == SELF_PEER {
            None
        } else {
            let names: Vec<&str> = peers.iter().map(|p| p.name.as_str()).collect();
            Some(peers.iter().position(|p| p.name == c.peer).ok_or_else(|| {
                origin.error(
                    &key("peer"),
                    format!(
                        "no peer named `{}` (peers: {}; `self` is this node)",
                        c.peer,
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    ),
                )
            })?)
        };
        match (peer, c.role) {
            (None, Role::Target) => {
                return Err(origin.error(
                    &key("role"),
                    "a `self` connection has both ends on this node: give role = \"initiator\" (its target end is made with it)",
                ))
            }
            (Some(p), Role::Initiator) if peers[p].control.is_none() => {
                return Err(origin.error(
                    &key("peer"),
                    format!(
                        "initiating to `{}` needs its connection manager: set peers[{p}].control",
                        peers[p].name
                    ),
                ))
            }
            (Some(_), Role::Target) if config.node.control.is_none() => {
                return Err(origin.error(
                    &key("role"),
                    "serving a peer's connections needs this node's connection manager: set node.control",
                ))
            }
            _ => {}
        }
        if c.count == 0 {
            return Err(origin.error(&key("count"), "must be at least 1"));
        }
        check_sizes(c, config, origin, entry)?;
        let rate_cap_bps = match c.rate_gbps {
            None => None,
            Some(g) if g.is_finite() && (0.001..=1000.0).contains(&g) => {
                Some((g * 1e9).round() as u64)
            }
            Some(g) => {
                return Err(origin.error(
                    &key("rate_gbps"),
                    format!("must be in 0.001..=1000 Gbit/s, got {g}"),
                ))
            }
        };
        for index in 0..c.count {
            let cid = match c.first_cid {
                Some(first) => {
                    let value = first.checked_add(index).filter(|&v| v <= 0xFF_FFFF);
                    let cid = value
                        .and_then(|v| ConnectionId::new(v).ok())
                        .ok_or_else(|| {
                            origin.error(
                                &key("first_cid"),
                                format!("{first} + count − 1 must fit 24 bits (at most 0xFFFFFF)"),
                            )
                        })?;
                    if !cids.insert(cid.value()) {
                        return Err(origin.error(
                            &key("first_cid"),
                            format!("connection id {} is another connection's", cid.value()),
                        ));
                    }
                    Some(cid)
                }
                None => None,
            };
            planned.push(PlannedConnection {
                entry,
                index,
                peer,
                role: c.role,
                cid,
                ordering: c.ordering.into(),
                workload: c.workload,
                size: c.size,
                inflight: c.inflight,
                transactions: c.transactions,
                rate_cap_bps,
            });
        }
    }
    Ok(planned)
}

fn check_sizes(
    c: &ConnectionsSection,
    config: &RunConfig,
    origin: &Origin,
    entry: usize,
) -> Result<()> {
    let key = |k: &str| format!("connections[{entry}].{k}");
    // Headers in front of the data: Ethernet, IPv6, UDP, PSP (header and
    // ICV), Falcon's largest, and the workload's own 8-byte ULP header.
    const OVERHEAD: usize = 14 + 40 + 8 + 16 + 16 + 28 + 8;
    let most = config
        .port
        .max_frame
        .saturating_sub(OVERHEAD)
        .min(usize::from(u16::MAX));
    if c.size == 0 || c.size > most {
        return Err(origin.error(
            &key("size"),
            format!(
                "must be in 1..={most} (port.max_frame {} less headers)",
                config.port.max_frame
            ),
        ));
    }
    if c.inflight == 0 {
        return Err(origin.error(&key("inflight"), "must be at least 1"));
    }
    if c.workload == RunWorkload::Verify && c.transactions == 0 {
        return Err(origin.error(&key("transactions"), "must be at least 1"));
    }
    Ok(())
}
