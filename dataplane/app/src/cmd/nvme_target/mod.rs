//! `falcon nvme-target --config F`: NVMe namespaces served over Falcon to
//! any number of initiators (issue #27, item 4).
//!
//! Layer: application. Owns the assembly of a target node: the plan of its
//! configuration ([`crate::nvmecfg`]), the engine (PSP on unless the file
//! says otherwise, fresh master keys from the OS), the port (the kernel
//! UDP port, whose peers are learnt from the initiators' offers; or a DPDK
//! ethdev), the [`Target`] ULP with its namespaces on their storage
//! workers, the connection manager's listener ([`serve`]: polled between
//! turns of the datapath loop, never blocking it), a stats line a second on
//! stderr and the final figures ([`report`]). Each initiator's offer gets
//! its own unordered connection (NVMe-0.9 §7: NVMe completes commands in
//! any order); when an initiator's control channel closes or its Falcon
//! connection fails, that connection is closed in the engine, its tCMDs
//! are aborted, and the target serves the others. SIGINT or SIGTERM (or
//! `--duration`) stop it: the workers finish their queues, file
//! namespaces are flushed, the figures are printed.

pub(crate) mod dpdk;
pub mod report;
pub mod serve;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use falcon_core::api::{
    Clock, Engine, EngineConfig, EthernetAddress, FrameBuf, Lcore, PacketBuf, PspConfig,
    SystemClock, Timestamp,
};
use nvme_ulp::data::NvmeData;
use nvme_ulp::namespace::{FileOptions, Namespace, StorageMode, WorkerSpec};
use nvme_ulp::target::Target;

use self::report::{NamespaceReport, Report};
use self::serve::{Serving, Sessions};
use crate::cli::NvmeTargetArgs;
use crate::error::{AppError, Result};
use crate::nvmecfg::check::DEFAULT_UDP_MAC;
use crate::nvmecfg::{self, Plan, PlannedBacking, PortPlan};
use crate::udp::{UdpPort, UdpPortConfig};

/// `falcon nvme-target`.
///
/// # Errors
///
/// A configuration error (exit 2) or a setup failure: a namespace that
/// cannot be opened, an address in use (exit 2), the engine's refusal.
pub fn main(args: &NvmeTargetArgs) -> Result<()> {
    let plan = nvmecfg::load(&args.config)?;
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            return Err(AppError::Usage(format!(
                "--duration {d}: must be a positive number of seconds"
            )));
        }
    }
    if args.check {
        print_plan(args, &plan);
        return Ok(());
    }
    let report = run(args, &plan)?;
    if args.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        report::print_text(&report);
    }
    Ok(())
}

/// Serves `plan` until a signal or `--duration`; the final figures.
///
/// # Errors
///
/// As [`main`], once the configuration is valid.
pub fn run(args: &NvmeTargetArgs, plan: &Plan) -> Result<Report> {
    if let Some(core) = plan.core {
        crate::cmd::node::pin(core).map_err(|e| config_error(args, "node.core", e.to_string()))?;
    }
    match &plan.port {
        PortPlan::Udp { bind, offload } => run_udp(args, plan, *bind, *offload),
        PortPlan::Dpdk { .. } => dpdk::run(args, plan),
    }
}

fn run_udp(args: &NvmeTargetArgs, plan: &Plan, bind: SocketAddr, offload: bool) -> Result<Report> {
    let mut clock = SystemClock::new();
    let mac = plan.mac.unwrap_or(DEFAULT_UDP_MAC);
    let engine: Engine<FrameBuf, NvmeData> = engine(plan, mac, None, clock.now())?;
    let socket = UdpSocket::bind(bind)
        .map_err(|e| config_error(args, "port.bind", format!("{bind}: {e}")))?;
    let port_config = UdpPortConfig {
        offload,
        ..UdpPortConfig::new(plan.ip, mac, engine.max_frame_len())
    };
    let port = UdpPort::new(socket, &[], port_config).map_err(AppError::Failed)?;
    let bound = port
        .local_addr()
        .map_err(|e| AppError::Failed(format!("nvme-target: the UDP socket: {e}")))?;
    let (target, namespaces) = target(plan)?;
    let listener = listen(args, plan)?;
    eprintln!(
        "nvme-target: serving {} namespace(s) on udp {bound}, control {}",
        namespaces.len(),
        plan.control
    );
    let lcore = Lcore::new(engine, port, clock);
    let sessions = Sessions::new(listener, plan, mac, Some(bound), &namespaces);
    serve::serve(
        args,
        plan,
        lcore,
        Serving::new(target),
        sessions,
        namespaces,
        signals()?,
    )
}

/// The engine of the plan, on a port whose MAC is `mac` and whose frames
/// are up to `max_frame` bytes (`None`: the engine's default).
pub(crate) fn engine<B: PacketBuf>(
    plan: &Plan,
    mac: EthernetAddress,
    max_frame: Option<usize>,
    now: Timestamp,
) -> Result<Engine<B, NvmeData>> {
    let defaults = EngineConfig::default();
    let psp = match &plan.psp {
        None => None,
        Some(p) => {
            let keys = match &p.keys {
                Some(k) => k.clone(),
                None => crate::cmd::node::master_keys()?,
            };
            let mut config = PspConfig::new(keys);
            config.backend = p.backend;
            config.globals = p.globals;
            Some(config)
        }
    };
    let config = EngineConfig {
        local_ip: plan.ip,
        local_mac: mac,
        max_frame_len: max_frame.unwrap_or(defaults.max_frame_len),
        psp,
        seed: u64::from(std::process::id()),
        rue: plan.rue.clone(),
        delivery: plan.delivery.clone(),
        resources: plan.resources,
        ..defaults
    };
    Engine::new(config, now).map_err(|e| AppError::Failed(format!("nvme-target: engine: {e}")))
}

/// The namespaces opened on their workers, and the target over them.
///
/// # Errors
///
/// A namespace that cannot be opened (its key named), or the target's
/// refusal.
pub(crate) fn target(plan: &Plan) -> Result<(Target, Vec<NamespaceReport>)> {
    let mut opened = Vec::new();
    let mut reports = Vec::new();
    for planned in &plan.namespaces {
        let namespace = match &planned.backing {
            PlannedBacking::Ram => Namespace::ram(&planned.config),
            PlannedBacking::File { path, direct, .. } => Namespace::file(
                &planned.config,
                path,
                FileOptions {
                    try_direct: *direct,
                },
            ),
        }
        .map_err(|e| {
            AppError::Failed(format!(
                "nvme-target: namespace {}: {e}",
                planned.config.nsid
            ))
        })?;
        let format = *namespace.format();
        let mode = namespace.mode();
        let report = NamespaceReport {
            nsid: format.nsid(),
            backing: match planned.backing {
                PlannedBacking::Ram => "ram",
                PlannedBacking::File { .. } => "file",
            },
            path: match &planned.backing {
                PlannedBacking::File { path, .. } => Some(path.display().to_string()),
                PlannedBacking::Ram => None,
            },
            blocks: format.blocks(),
            lba_size: format.lba_size() as u32,
            metadata: format.metadata_size() as u32,
            protection: format.protection().to_string(),
            mode: mode.to_string(),
            direct_io: match mode {
                StorageMode::Ram => None,
                StorageMode::FileDirect => Some(true),
                StorageMode::FileBuffered => Some(false),
            },
            sqid: planned.sqid,
        };
        eprintln!("nvme-target: {}", report.describe());
        reports.push(report);
        opened.push(Some(namespace));
    }
    let mut specs = Vec::new();
    for worker in &plan.workers {
        let namespaces = worker
            .nsids
            .iter()
            .filter_map(|nsid| {
                let i = plan
                    .namespaces
                    .iter()
                    .position(|n| n.config.nsid == *nsid)?;
                opened[i].take()
            })
            .collect();
        specs.push(WorkerSpec::new(worker.sqids.clone(), namespaces));
    }
    let target = Target::new(plan.target, specs)
        .map_err(|e| AppError::Failed(format!("nvme-target: {e}")))?;
    Ok((target, reports))
}

/// The connection manager's listener.
pub(crate) fn listen(args: &NvmeTargetArgs, plan: &Plan) -> Result<TcpListener> {
    let listener = TcpListener::bind(plan.control)
        .map_err(|e| config_error(args, "node.control", format!("{}: {e}", plan.control)))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| AppError::Failed(format!("nvme-target: control {}: {e}", plan.control)))?;
    Ok(listener)
}

/// SIGINT and SIGTERM set the flag.
pub(crate) fn signals() -> Result<Arc<AtomicBool>> {
    let signalled = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&signalled))
            .map_err(|e| AppError::Failed(format!("signal handler: {e}")))?;
    }
    Ok(signalled)
}

/// A value of the file that does not work at run time (an address in use,
/// a device the EAL does not have), named by its key.
pub(crate) fn config_error(args: &NvmeTargetArgs, key: &str, problem: String) -> AppError {
    let text = std::fs::read_to_string(&args.config).unwrap_or_default();
    crate::democfg::Origin::file(&args.config, &text).error(key, problem)
}

/// `--check`: what the target would set up.
fn print_plan(args: &NvmeTargetArgs, plan: &Plan) {
    println!("{}: valid", args.config.display());
    match &plan.port {
        PortPlan::Udp { bind, offload } => println!(
            "  port udp on {bind} (offload {})",
            if *offload { "on" } else { "off" }
        ),
        PortPlan::Dpdk {
            eal_args,
            device,
            max_frame,
            mbufs,
            ..
        } => println!(
            "  port dpdk {device} (EAL {}; frames up to {max_frame} bytes, {mbufs} mbufs)",
            eal_args.join(" ")
        ),
    }
    println!(
        "  node {} function {:#x}, control {}, {}",
        plan.ip,
        plan.function.value(),
        plan.control,
        match plan.core {
            Some(core) => format!("pinned to CPU {core}"),
            None => "not pinned".to_string(),
        }
    );
    println!(
        "  PSP {}; initial RTO {:?}",
        match &plan.psp {
            Some(p) if p.keys.is_some() => "on (master keys from the file)",
            Some(_) => "on (fresh master keys at start)",
            None => "off",
        },
        plan.delivery.initial_rto
    );
    let t = &plan.target;
    println!(
        "  target: {} tCMD slots, {} buffers, worker queue {}, tCMD timeout {:?}, RNR timeout {:?}",
        t.tcmd_slots,
        t.buffers,
        t.worker_queue_depth,
        t.tcmd_timeout,
        t.rnr_timeout.as_duration()
    );
    for n in &plan.namespaces {
        let c = &n.config;
        let backing = match &n.backing {
            PlannedBacking::Ram => "ram".to_string(),
            PlannedBacking::File {
                path,
                direct,
                existing,
            } => format!(
                "file {} ({}; {})",
                path.display(),
                match existing {
                    Some(len) => format!("exists, {len} bytes"),
                    None => "created at start".to_string(),
                },
                if *direct {
                    "O_DIRECT if the file system takes it"
                } else {
                    "buffered"
                }
            ),
        };
        println!(
            "  namespace {}: {backing}, {} blocks of {} + {} B metadata, protection {}, SQID {}",
            c.nsid, c.blocks, c.lba_size, c.metadata_size, c.protection, n.sqid
        );
    }
    for (i, w) in plan.workers.iter().enumerate() {
        println!(
            "  worker {i}: SQIDs {:?}, namespaces {:?}",
            w.sqids, w.nsids
        );
    }
}
