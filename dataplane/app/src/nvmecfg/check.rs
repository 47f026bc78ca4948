//! The checks of an nvme-target configuration, and what they yield: the
//! [`Plan`] `falcon nvme-target` carries out.
//!
//! Layer: application configuration. Every check names the key it refuses
//! (through [`Origin::error`], which finds its line in the file). The
//! engine tables go through `falcon run`'s conversions, so the engine's
//! own validation names `delivery.*`, `resources.*` and `rue.swift.*`
//! keys; a namespace goes through `NamespaceConfig::validate`, whose field
//! is mapped back to its `namespaces[i].*` key. Files are looked at (does
//! a file namespace's path exist, how large is it), never opened.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use falcon_core::api::{
    DeliveryConfig, DestinationFunction, EthernetAddress, ResourceConfig, RnrTimeout, RueMode,
};
use nvme_ulp::namespace::{NamespaceConfig, Protection};
use nvme_ulp::target::TargetConfig;

use super::schema::{Backing, NvmeTargetConfig, PortKindName, PortSection};
use crate::democfg::{build, Origin};
use crate::error::Result;
use crate::runcfg::check::{psp, PspPlan};

/// The engine's MAC on the UDP port when `node.mac` is not given (the port
/// rebuilds Ethernet headers; the address only has to be the same in every
/// frame).
pub const DEFAULT_UDP_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

/// What `falcon nvme-target` sets up, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    pub ip: IpAddr,
    /// `None`: the DPDK port's own (DPDK), or [`DEFAULT_UDP_MAC`].
    pub mac: Option<EthernetAddress>,
    pub function: DestinationFunction,
    pub control: SocketAddr,
    pub core: Option<usize>,
    pub port: PortPlan,
    /// `None` runs Falcon in clear.
    pub psp: Option<PspPlan>,
    pub delivery: DeliveryConfig,
    pub resources: ResourceConfig,
    pub rue: RueMode,
    pub target: TargetConfig,
    /// How long an accepted initiator has to send its offer.
    pub setup_timeout: Duration,
    /// In NSID order.
    pub namespaces: Vec<PlannedNamespace>,
    pub workers: Vec<PlannedWorker>,
}

/// The port, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortPlan {
    Udp {
        bind: SocketAddr,
        offload: bool,
    },
    Dpdk {
        /// `[port] eal_args` as given (the lcore and the file prefix are
        /// added when the EAL starts).
        eal_args: Vec<String>,
        file_prefix: Option<String>,
        device: String,
        max_frame: usize,
        mbufs: u32,
    },
}

impl PortPlan {
    pub fn kind(&self) -> &'static str {
        match self {
            PortPlan::Udp { .. } => "udp",
            PortPlan::Dpdk { .. } => "dpdk",
        }
    }
}

/// One namespace, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedNamespace {
    /// Its format; `blocks` is the file's when it exists.
    pub config: NamespaceConfig,
    pub backing: PlannedBacking,
    /// The target SQID initiators send its commands to: the first of its
    /// worker's.
    pub sqid: u8,
}

/// Where a namespace's blocks live, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedBacking {
    Ram,
    File {
        path: PathBuf,
        /// Try O_DIRECT first.
        direct: bool,
        /// The file's size when it already exists (it then gives the block
        /// count); `None`: created at start.
        existing: Option<u64>,
    },
}

/// One storage worker, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWorker {
    pub sqids: Vec<u8>,
    pub nsids: Vec<u16>,
}

/// EAL arguments the plan owns.
const EAL_ARGS_OWNED: [&str; 6] = [
    "-l",
    "-c",
    "--lcores",
    "--main-lcore",
    "--file-prefix",
    "-n",
];

/// Checks `config` (from the file `origin` names) into a [`Plan`].
///
/// # Errors
///
/// The first unusable value, by key.
pub fn plan(config: &NvmeTargetConfig, origin: &Origin) -> Result<Plan> {
    let node = &config.node;
    if node.function > 0xFF_FFFF {
        return Err(origin.error("node.function", "must fit 24 bits (at most 0xFFFFFF)"));
    }
    // node.core is checked when the target pins itself: the CPUs this
    // process runs on now (a parent's affinity, inherited) are not all it
    // may be given.
    let port = port(&config.port, config, origin)?;
    let psp = psp(&config.psp, origin)?;
    let delivery = build::delivery(&config.delivery, origin)?;
    let resources = build::resources(&config.resources, origin)?;
    let rue = build::rue(config.rue.algorithm, &config.rue.swift, origin)?;
    let target = target(config, origin)?;
    let (mut namespaces, workers) = storage(config, origin)?;
    namespaces.sort_by_key(|n| n.config.nsid);
    Ok(Plan {
        ip: node.ip,
        mac: node.mac.map(|m| m.0),
        function: DestinationFunction::truncating(node.function),
        control: node.control,
        core: node.core,
        port,
        psp,
        delivery,
        resources,
        rue,
        target,
        setup_timeout: Duration::from_millis(config.target.setup_timeout_ms),
        namespaces,
        workers,
    })
}

fn port(p: &PortSection, config: &NvmeTargetConfig, origin: &Origin) -> Result<PortPlan> {
    let not_for = |key: &str, kind: &str| {
        origin.error(
            &format!("port.{key}"),
            format!("is not a key of kind = \"{kind}\""),
        )
    };
    match p.kind {
        PortKindName::Udp => {
            let Some(bind) = p.bind else {
                return Err(origin.error(
                    "port.kind",
                    "kind = \"udp\" needs port.bind, the socket address initiators send to",
                ));
            };
            if !p.eal_args.is_empty() {
                return Err(not_for("eal_args", "udp"));
            }
            if p.device.is_some() {
                return Err(not_for("device", "udp"));
            }
            if p.file_prefix.is_some() {
                return Err(not_for("file_prefix", "udp"));
            }
            Ok(PortPlan::Udp {
                bind,
                offload: p.offload,
            })
        }
        PortKindName::Dpdk => {
            if p.bind.is_some() {
                return Err(not_for("bind", "dpdk"));
            }
            let Some(device) = p.device.clone().filter(|d| !d.is_empty()) else {
                return Err(origin.error(
                    "port.kind",
                    "kind = \"dpdk\" needs port.device, the ethdev to run on",
                ));
            };
            for arg in &p.eal_args {
                let name = arg.split('=').next().unwrap_or("");
                if EAL_ARGS_OWNED.contains(&name) {
                    return Err(origin.error(
                        "port.eal_args",
                        format!("`{arg}`: the lcore comes from node.core and the file prefix from port.file_prefix"),
                    ));
                }
            }
            if device.starts_with("net_") {
                let created = p.eal_args.iter().any(|a| {
                    a.strip_prefix("--vdev=")
                        .and_then(|v| v.split(',').next())
                        .is_some_and(|v| v == device)
                });
                if !created {
                    return Err(origin.error(
                        "port.device",
                        format!("no `--vdev={device}` in port.eal_args creates it"),
                    ));
                }
            }
            if p.file_prefix
                .as_ref()
                .is_some_and(|f| f.is_empty() || f.contains('/'))
            {
                return Err(
                    origin.error("port.file_prefix", "must be a non-empty name without '/'")
                );
            }
            if !(1024..=9216).contains(&p.max_frame) {
                return Err(origin.error("port.max_frame", "must be in 1024..=9216 bytes"));
            }
            if p.mbufs < 1024 {
                return Err(origin.error("port.mbufs", "must be at least 1024"));
            }
            if config.node.core.is_none() {
                return Err(origin.error(
                    "node.core",
                    "kind = \"dpdk\" needs node.core, the EAL's lcore",
                ));
            }
            Ok(PortPlan::Dpdk {
                eal_args: p.eal_args.clone(),
                file_prefix: p.file_prefix.clone(),
                device,
                max_frame: p.max_frame,
                mbufs: p.mbufs,
            })
        }
    }
}

fn target(config: &NvmeTargetConfig, origin: &Origin) -> Result<TargetConfig> {
    let t = &config.target;
    let positive = |key: &str, value: u64| {
        if value == 0 {
            Err(origin.error(&format!("target.{key}"), "must be at least 1"))
        } else {
            Ok(())
        }
    };
    if !(1..=65_536).contains(&t.tcmd_slots) {
        return Err(origin.error("target.tcmd_slots", "must be in 1..=65536"));
    }
    positive("buffers", t.buffers as u64)?;
    positive("worker_queue_depth", t.worker_queue_depth as u64)?;
    positive("tcmd_timeout_ms", t.tcmd_timeout_ms)?;
    positive("setup_timeout_ms", t.setup_timeout_ms)?;
    // Falcon 0.9 §8.5.3.4: the 5-bit RNR timeout runs from 10 µs to
    // 655.36 ms.
    if !(10..=655_360).contains(&t.rnr_timeout_us) {
        return Err(origin.error("target.rnr_timeout_us", "must be in 10..=655360 µs"));
    }
    Ok(TargetConfig {
        tcmd_slots: t.tcmd_slots,
        buffers: t.buffers,
        worker_queue_depth: t.worker_queue_depth,
        parked_ncmds: t.parked_ncmds,
        tcmd_timeout: Duration::from_millis(t.tcmd_timeout_ms),
        rnr_timeout: RnrTimeout::nearest(Duration::from_micros(t.rnr_timeout_us)),
        vendor_commands: t.vendor_commands,
        ..TargetConfig::default()
    })
}

/// The key of `namespaces[i]` that a `NamespaceConfig` field comes from.
fn namespace_key(i: usize, field: &str) -> String {
    let key = match field {
        "blocks" => "size",
        "metadata_size" => "metadata",
        other => other,
    };
    format!("namespaces[{i}].{key}")
}

fn storage(
    config: &NvmeTargetConfig,
    origin: &Origin,
) -> Result<(Vec<PlannedNamespace>, Vec<PlannedWorker>)> {
    if config.namespaces.is_empty() {
        return Err(origin.error(
            "namespaces",
            "no [[namespaces]]: a target exports at least one",
        ));
    }
    // NSID → (index in the file, planned without its SQID yet).
    let mut planned: BTreeMap<u16, (usize, NamespaceConfig, PlannedBacking)> = BTreeMap::new();
    for (i, n) in config.namespaces.iter().enumerate() {
        let key = |k: &str| format!("namespaces[{i}].{k}");
        let nsid = u16::try_from(n.nsid)
            .ok()
            .filter(|&id| id != 0)
            .ok_or_else(|| origin.error(&key("nsid"), "must be in 1..=65535"))?;
        if planned.contains_key(&nsid) {
            return Err(origin.error(&key("nsid"), format!("namespace {nsid} is exported twice")));
        }
        let protection: Protection = n
            .protection
            .parse()
            .map_err(|_| origin.error(&key("protection"), "must be off, opaque or verified"))?;
        let lba = u64::from(n.lba_size);
        let (backing, bytes) = match n.backing {
            Backing::Ram => {
                if n.path.is_some() {
                    return Err(origin.error(&key("path"), "a ram namespace has no file"));
                }
                let Some(size) = n.size else {
                    return Err(origin.error(&key("backing"), "a ram namespace needs a size"));
                };
                (PlannedBacking::Ram, size.0)
            }
            Backing::File => {
                let Some(path) = n.path.clone() else {
                    return Err(origin.error(&key("backing"), "a file namespace needs a path"));
                };
                let existing = match std::fs::metadata(&path) {
                    Ok(info) if !info.is_file() => {
                        return Err(origin.error(
                            &key("path"),
                            format!("{} is not a regular file", path.display()),
                        ))
                    }
                    Ok(info) => Some(info.len()),
                    Err(_) => None,
                };
                let bytes = match (existing, n.size) {
                    (Some(len), _) => len,
                    (None, Some(size)) => size.0,
                    (None, None) => {
                        return Err(origin.error(
                            &key("size"),
                            format!(
                                "{} does not exist: a size is needed to create it",
                                path.display()
                            ),
                        ))
                    }
                };
                (
                    PlannedBacking::File {
                        path,
                        direct: n.direct,
                        existing,
                    },
                    bytes,
                )
            }
        };
        if lba != 0 && bytes % lba != 0 {
            let what = if matches!(
                backing,
                PlannedBacking::File {
                    existing: Some(_),
                    ..
                }
            ) {
                "path"
            } else {
                "size"
            };
            return Err(origin.error(
                &key(what),
                format!("{bytes} bytes is not a whole number of {lba}-byte blocks"),
            ));
        }
        let namespace = NamespaceConfig::new(nsid, bytes.checked_div(lba).unwrap_or(0), n.lba_size)
            .with_metadata(n.metadata, protection);
        if let Err(e) = namespace.validate() {
            let field = e.field().unwrap_or("backing");
            return Err(origin.error(&namespace_key(i, field), e.to_string()));
        }
        planned.insert(nsid, (i, namespace, backing));
    }
    let workers = workers(config, &planned, origin)?;
    let mut namespaces = Vec::new();
    for (nsid, (_, config, backing)) in planned {
        // Invariant: `workers` placed every namespace on one worker.
        let sqid = workers
            .iter()
            .find(|w| w.nsids.contains(&nsid))
            .and_then(|w| w.sqids.first().copied())
            .unwrap_or(0);
        namespaces.push(PlannedNamespace {
            config,
            backing,
            sqid,
        });
    }
    Ok((namespaces, workers))
}

fn workers(
    config: &NvmeTargetConfig,
    planned: &BTreeMap<u16, (usize, NamespaceConfig, PlannedBacking)>,
    origin: &Origin,
) -> Result<Vec<PlannedWorker>> {
    if config.workers.is_empty() {
        return Ok(vec![PlannedWorker {
            sqids: vec![0],
            nsids: planned.keys().copied().collect(),
        }]);
    }
    let mut sqids_seen = BTreeSet::new();
    let mut owner: BTreeMap<u16, usize> = BTreeMap::new();
    let mut workers = Vec::new();
    for (w, worker) in config.workers.iter().enumerate() {
        let key = |k: &str| format!("workers[{w}].{k}");
        if worker.sqids.is_empty() {
            return Err(origin.error(&key("sqids"), "a worker serves at least one SQID"));
        }
        for &sqid in &worker.sqids {
            if !sqids_seen.insert(sqid) {
                return Err(origin.error(
                    &key("sqids"),
                    format!("SQID {sqid} is served by another worker"),
                ));
            }
        }
        let mut nsids = Vec::new();
        for &nsid in &worker.namespaces {
            let id = u16::try_from(nsid)
                .ok()
                .filter(|id| planned.contains_key(id))
                .ok_or_else(|| {
                    origin.error(
                        &key("namespaces"),
                        format!("namespace {nsid} is not one of [[namespaces]]"),
                    )
                })?;
            if let Some(other) = owner.insert(id, w) {
                return Err(origin.error(
                    &key("namespaces"),
                    format!("namespace {nsid} is already owned by workers[{other}]"),
                ));
            }
            nsids.push(id);
        }
        workers.push(PlannedWorker {
            sqids: worker.sqids.clone(),
            nsids,
        });
    }
    if let Some((&nsid, &(i, _, _))) = planned.iter().find(|(id, _)| !owner.contains_key(id)) {
        return Err(origin.error(
            &format!("namespaces[{i}].nsid"),
            format!("namespace {nsid} is on no [[workers]] entry"),
        ));
    }
    Ok(workers)
}
